//! When an input partition is idle: caught up, with no record, for long enough that leaving it
//! out of the watermark cannot make another partition's records late. Both modes' source tasks
//! use it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::client::TopicPartition;

/// How long a partition must stay caught up, with no record, before it is idle (left out of
/// the watermark). Not zero: a live partition is caught up between two of its records, and
/// leaving it out then lets another partition, further ahead in event time, move the
/// watermark past windows this one still has records for — they come late and are dropped
/// (the CI demo: 37 of 250 hourly counts short). As Flink's `withIdleness(timeout)`.
pub(crate) const IDLE_AFTER: Duration = Duration::from_secs(1);

/// When each caught-up partition was first seen caught up (since its last record): a
/// partition is idle once caught up for [`IDLE_AFTER`]. Pure (the time is given), so a table
/// test pins it.
#[derive(Debug, Default)]
pub(crate) struct IdleTimer {
    since: BTreeMap<TopicPartition, std::time::Instant>,
}

impl IdleTimer {
    /// `tp` is caught up at `now`: whether it has been for `after` (then it is idle).
    pub(crate) fn caught_up(
        &mut self,
        tp: &TopicPartition,
        now: std::time::Instant,
        after: Duration,
    ) -> bool {
        let since = *self.since.entry(tp.clone()).or_insert(now);
        now.saturating_duration_since(since) >= after
    }

    /// `tp` is not caught up, or a record of it came: its wait starts again.
    pub(crate) fn active(&mut self, tp: &TopicPartition) {
        self.since.remove(tp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition is idle only after it has stayed caught up for the whole wait; a record
    /// (or falling behind) starts the wait again. Times in ms from a base.
    #[test]
    fn a_partition_is_idle_only_once_caught_up_for_the_wait() {
        enum E {
            CaughtUp(u64, bool),
            Active,
        }
        let after = Duration::from_millis(1000);
        let cases: &[(&str, &[E])] = &[
            ("first seen caught up: not yet", &[E::CaughtUp(0, false)]),
            (
                "caught up the whole wait",
                &[
                    E::CaughtUp(0, false),
                    E::CaughtUp(999, false),
                    E::CaughtUp(1000, true),
                ],
            ),
            (
                "a record in between restarts the wait",
                &[
                    E::CaughtUp(0, false),
                    E::Active,
                    E::CaughtUp(900, false),
                    E::CaughtUp(1800, false),
                    E::CaughtUp(1900, true),
                ],
            ),
        ];
        let base = std::time::Instant::now();
        let tp = TopicPartition::new("t", 0);
        for (name, steps) in cases {
            let mut idle = IdleTimer::default();
            for step in *steps {
                match step {
                    E::CaughtUp(ms, want) => {
                        let now = base + Duration::from_millis(*ms);
                        assert_eq!(idle.caught_up(&tp, now, after), *want, "{name}: at {ms} ms");
                    }
                    E::Active => idle.active(&tp),
                }
            }
        }
    }
}
