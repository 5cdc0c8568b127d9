//! State time-to-live for typed keyed state (Flink's `StateTtlConfig`, with event time as
//! well as processing time): a value of a state with a TTL carries the time it was last written
//! (or read, with [`StateTtl::refreshed_on_read`]); once that time plus the TTL has passed it
//! is never returned again, and it is deleted from the store as the state is used.
//!
//! A stamped value is stored as `0x01 | stamp (i64 BE) | JSON`: JSON never starts with byte
//! 0x01, so values written before a TTL was given (plain JSON) and stamped values written
//! before it was taken away both still read.
//!
//! Cleanup is incremental: every access of a state with a TTL, and every watermark the stage
//! receives, looks at a few more of that state's stored entries (a cursor walking the
//! subtask's key groups, round and round) and deletes the expired ones; a plain value it
//! meets is stamped then, so it expires one TTL after the TTL was given. A state the function
//! stopped using is not cleaned (the cleanup knows the states the subtask has used since it
//! started).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::engine::state::{decode_list, encode_list, OperatorState, StateError};

/// How long the values of a keyed state live (give it with `with_ttl` on a state descriptor).
///
/// ```
/// use std::time::Duration;
/// use onceflow::engine::dataflow::{StateTtl, ValueStateDescriptor};
///
/// // A driver's last position, forgotten an hour (event time) after it was last written.
/// const LAST: ValueStateDescriptor<(f64, f64)> = ValueStateDescriptor::new(0, "last position")
///     .with_ttl(StateTtl::event_time(Duration::from_secs(3600)));
/// assert_eq!(LAST.ttl().map(|t| t.ttl()), Some(Duration::from_secs(3600)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateTtl {
    ttl_ms: i64,
    time: TtlTime,
    update: TtlUpdate,
}

/// The clock a [`StateTtl`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TtlTime {
    /// The wall clock: a value expires `ttl` after it was written, however far the input's
    /// event time moved (Flink's only kind). A run and its replay after a failure may see a
    /// value expire at different records.
    ProcessingTime,
    /// Event time: a value written at event time `t` (the element's, or the watermark when
    /// that is later) expires once the watermark reaches `t + ttl`; the same input expires
    /// the same values, also in a replay.
    EventTime,
}

/// What renews a value's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TtlUpdate {
    /// Writing it (Flink's default).
    OnCreateAndWrite,
    /// Writing it or reading it.
    OnReadAndWrite,
}

/// `ttl` in milliseconds, at least 1 (a zero TTL would expire every value as it is written).
const fn millis(ttl: Duration) -> i64 {
    let ms = ttl.as_millis();
    if ms == 0 {
        1
    } else if ms > i64::MAX as u128 {
        i64::MAX
    } else {
        ms as i64
    }
}

impl StateTtl {
    /// Values expire `ttl` of wall-clock time after they were last written ([`TtlTime::ProcessingTime`]).
    pub const fn processing_time(ttl: Duration) -> StateTtl {
        StateTtl {
            ttl_ms: millis(ttl),
            time: TtlTime::ProcessingTime,
            update: TtlUpdate::OnCreateAndWrite,
        }
    }

    /// Values expire once the watermark is `ttl` past the event time they were last written
    /// at ([`TtlTime::EventTime`]).
    pub const fn event_time(ttl: Duration) -> StateTtl {
        StateTtl {
            ttl_ms: millis(ttl),
            time: TtlTime::EventTime,
            update: TtlUpdate::OnCreateAndWrite,
        }
    }

    /// Reads renew a value's time too ([`TtlUpdate::OnReadAndWrite`]).
    #[must_use]
    pub const fn refreshed_on_read(mut self) -> StateTtl {
        self.update = TtlUpdate::OnReadAndWrite;
        self
    }

    /// How long values live.
    pub const fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms as u64)
    }

    /// Its clock.
    pub const fn time(&self) -> TtlTime {
        self.time
    }

    /// What renews a value's time.
    pub const fn update(&self) -> TtlUpdate {
        self.update
    }

    /// The time a value written (or renewed) now gets.
    pub(crate) fn stamp(&self, clock: &TtlClock) -> i64 {
        match self.time {
            TtlTime::ProcessingTime => clock.now_ms,
            TtlTime::EventTime => clock
                .watermark
                .map_or(clock.event_time, |w| w.max(clock.event_time)),
        }
    }

    /// Whether a value stamped `stamp` has expired.
    pub(crate) fn expired(&self, stamp: i64, clock: &TtlClock) -> bool {
        let end = stamp.saturating_add(self.ttl_ms);
        match self.time {
            TtlTime::ProcessingTime => clock.now_ms >= end,
            TtlTime::EventTime => clock.watermark.is_some_and(|w| w >= end),
        }
    }
}

/// The times a state access happens at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TtlClock {
    /// The wall clock (ms since the epoch), or a processing-time timer's time.
    pub now_ms: i64,
    /// The element's event time, or a timer's time.
    pub event_time: i64,
    /// The subtask's watermark.
    pub watermark: Option<i64>,
}

/// The format byte of a stamped value.
const STAMPED: u8 = 0x01;

/// `json` stamped with `stamp`.
pub(crate) fn stamped(stamp: i64, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + json.len());
    out.push(STAMPED);
    out.extend_from_slice(&stamp.to_be_bytes());
    out.extend_from_slice(json);
    out
}

/// A stored value: its stamp (`None`: plain JSON) and its JSON; `None` when the stamp is cut
/// short.
pub(crate) fn unstamped(stored: &[u8]) -> Option<(Option<i64>, &[u8])> {
    match stored.split_first() {
        Some((&STAMPED, rest)) => {
            let (stamp, json) = rest.split_first_chunk::<8>()?;
            Some((Some(i64::from_be_bytes(*stamp)), json))
        }
        _ => Some((None, stored)),
    }
}

/// What a stored value is worth, read at `clock` under `ttl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Judged<'a> {
    /// Live: its JSON, and whether it must be stored again with a new stamp (read-renewed,
    /// or plain under a TTL).
    Live { json: &'a [u8], restamp: bool },
    /// Expired: never returned again, and deleted.
    Expired,
}

/// Judges `stored` (pure: the table test below). `reading` says whether this is a user's read
/// (which renews under [`TtlUpdate::OnReadAndWrite`]) or the cleanup's look.
pub(crate) fn judge<'a>(
    ttl: Option<&StateTtl>,
    stored: &'a [u8],
    clock: &TtlClock,
    reading: bool,
) -> Option<Judged<'a>> {
    let (stamp, json) = unstamped(stored)?;
    let Some(ttl) = ttl else {
        return Some(Judged::Live {
            json,
            restamp: false,
        });
    };
    Some(match stamp {
        Some(s) if ttl.expired(s, clock) => Judged::Expired,
        Some(_) => Judged::Live {
            json,
            restamp: reading && ttl.update == TtlUpdate::OnReadAndWrite,
        },
        // Plain: written before the state had a TTL; it starts counting now.
        None => Judged::Live {
            json,
            restamp: !reading || ttl.update == TtlUpdate::OnReadAndWrite,
        },
    })
}

/// How a state stores its values (what the cleanup must take apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One stamped value per stored entry (a value state; a map state's entry).
    Single,
    /// A list per stored entry, each item stamped.
    List,
}

/// A state with a TTL the subtask has used, and where its cleanup got to.
#[derive(Debug, Clone)]
struct Tracked {
    ttl: StateTtl,
    shape: Shape,
    /// The last stored key looked at (`None`: start from the first key group).
    cursor: Option<Vec<u8>>,
}

/// The states with a TTL a keyed subtask has used, and their cleanup cursors.
#[derive(Debug, Clone, Default)]
pub(crate) struct TtlCleanup {
    states: BTreeMap<u8, Tracked>,
}

/// Entries a cleanup step looks at per state.
pub(crate) const CLEANUP_STEP: usize = 5;

impl TtlCleanup {
    /// Notes that state `id` has `ttl` and `shape` (its first use in this subtask starts its
    /// cleanup).
    pub(crate) fn track(&mut self, id: u8, ttl: StateTtl, shape: Shape) {
        self.states
            .entry(id)
            .and_modify(|t| (t.ttl, t.shape) = (ttl, shape))
            .or_insert(Tracked {
                ttl,
                shape,
                cursor: None,
            });
    }

    /// Looks at the next `limit` entries of state `id` (if tracked); returns how many it
    /// deleted or rewrote.
    ///
    /// # Errors
    /// The store failed, or holds an entry that is not a stamped value or list.
    pub(crate) fn step(
        &mut self,
        state: &mut OperatorState,
        id: u8,
        clock: &TtlClock,
        limit: usize,
    ) -> Result<usize, StateError> {
        let Some(tracked) = self.states.get_mut(&id) else {
            return Ok(0);
        };
        let step = state.some_entries_of(id, tracked.cursor.as_deref(), limit)?;
        tracked.cursor = step.resume;
        let mut changed = 0;
        for (key, stored) in step.entries {
            if let Some(value) = cleaned(&tracked.ttl, tracked.shape, &stored, clock) {
                state.put_stored(key, value);
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// A step on every tracked state.
    ///
    /// # Errors
    /// As [`TtlCleanup::step`].
    pub(crate) fn step_all(
        &mut self,
        state: &mut OperatorState,
        clock: &TtlClock,
        limit: usize,
    ) -> Result<usize, StateError> {
        let ids: Vec<u8> = self.states.keys().copied().collect();
        let mut changed = 0;
        for id in ids {
            changed += self.step(state, id, clock, limit)?;
        }
        Ok(changed)
    }
}

/// What the cleanup stores instead of `stored` (pure): `Some(None)` deletes it,
/// `Some(Some(v))` rewrites it, `None` leaves it (also an entry it cannot read: the state's
/// own reads report those).
fn cleaned(
    ttl: &StateTtl,
    shape: Shape,
    stored: &[u8],
    clock: &TtlClock,
) -> Option<Option<Vec<u8>>> {
    match shape {
        Shape::Single => match judge(Some(ttl), stored, clock, false)? {
            Judged::Expired => Some(None),
            Judged::Live {
                json,
                restamp: true,
            } => Some(Some(stamped(ttl.stamp(clock), json))),
            Judged::Live { restamp: false, .. } => None,
        },
        Shape::List => {
            let items = decode_list(stored)?;
            let mut kept = Vec::with_capacity(items.len());
            let mut changed = false;
            for item in &items {
                match judge(Some(ttl), item, clock, false)? {
                    Judged::Expired => changed = true,
                    Judged::Live {
                        json,
                        restamp: true,
                    } => {
                        kept.push(stamped(ttl.stamp(clock), json));
                        changed = true;
                    }
                    Judged::Live { restamp: false, .. } => kept.push(item.clone()),
                }
            }
            match (changed, kept.is_empty()) {
                (false, _) => None,
                (true, true) => Some(None),
                (true, false) => Some(Some(encode_list(&kept))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn at(now_ms: i64, event_time: i64, watermark: Option<i64>) -> TtlClock {
        TtlClock {
            now_ms,
            event_time,
            watermark,
        }
    }

    #[test]
    fn stamp_and_expiry_table() {
        let p = StateTtl::processing_time(HOUR);
        let e = StateTtl::event_time(HOUR);
        let h = 3_600_000;
        // (ttl, clock, stamp given now, a value stamped 0 expired?)
        let cases = [
            (p, at(5, 100, None), 5, false),
            (p, at(h - 1, 0, Some(10 * h)), h - 1, false),
            (p, at(h, 0, None), h, true),
            // Event time: the element's time, or the watermark when later.
            (e, at(10 * h, 7, None), 7, false),
            (e, at(0, 7, Some(20)), 20, false),
            (e, at(0, 30, Some(20)), 30, false),
            (e, at(0, 0, Some(h - 1)), h - 1, false),
            (e, at(0, 0, Some(h)), h, true),
            // No watermark yet: nothing has expired in event time.
            (e, at(i64::MAX, 0, None), 0, false),
        ];
        for (ttl, clock, stamp, expired) in cases {
            assert_eq!(ttl.stamp(&clock), stamp, "{ttl:?} {clock:?}");
            assert_eq!(ttl.expired(0, &clock), expired, "{ttl:?} {clock:?}");
        }
        // A stamp near the end of time never overflows into the past.
        assert!(!p.expired(i64::MAX - 1, &at(i64::MAX - 1, 0, None)));
        assert_eq!(
            StateTtl::processing_time(Duration::ZERO).ttl(),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn judge_table() {
        let ttl = StateTtl::event_time(Duration::from_millis(10));
        let renewing = ttl.refreshed_on_read();
        let live = stamped(5, b"1");
        let clock = at(0, 0, Some(14));
        let late = at(0, 0, Some(15));
        let l = |restamp| {
            Some(Judged::Live {
                json: b"1",
                restamp,
            })
        };
        // (ttl, stored, clock, reading, judged)
        type Case<'a> = (
            Option<&'a StateTtl>,
            &'a [u8],
            TtlClock,
            bool,
            Option<Judged<'a>>,
        );
        let cases: [Case<'_>; 10] = [
            (Some(&ttl), &live, clock, true, l(false)),
            (Some(&ttl), &live, clock, false, l(false)),
            (Some(&renewing), &live, clock, true, l(true)),
            (Some(&renewing), &live, clock, false, l(false)),
            (Some(&ttl), &live, late, true, Some(Judged::Expired)),
            // Plain JSON under a TTL: the cleanup stamps it; a read only under OnReadAndWrite.
            (Some(&ttl), b"1", late, true, l(false)),
            (Some(&ttl), b"1", late, false, l(true)),
            (Some(&renewing), b"1", late, true, l(true)),
            // Without a TTL a stamp is only taken off (the TTL was taken away).
            (None, &live, late, true, l(false)),
            // A stamp cut short.
            (Some(&ttl), &[STAMPED, 0, 0], clock, true, None),
        ];
        for (ttl, stored, clock, reading, judged) in cases {
            assert_eq!(
                judge(ttl, stored, &clock, reading),
                judged,
                "{ttl:?} {stored:?} {clock:?} {reading}"
            );
        }
    }

    #[test]
    fn the_cleanup_deletes_expired_values_and_list_items_and_stamps_plain_ones() {
        let ttl = StateTtl::event_time(Duration::from_millis(10));
        let clock = at(0, 20, Some(20));
        let one = Shape::Single;
        assert_eq!(cleaned(&ttl, one, &stamped(10, b"1"), &clock), Some(None));
        assert_eq!(cleaned(&ttl, one, &stamped(11, b"1"), &clock), None);
        assert_eq!(
            cleaned(&ttl, one, b"1", &clock),
            Some(Some(stamped(20, b"1")))
        );
        let list = |items: &[Vec<u8>]| encode_list(items);
        let mixed = list(&[stamped(10, b"1"), stamped(11, b"2"), b"3".to_vec()]);
        let kept = list(&[stamped(11, b"2"), stamped(20, b"3")]);
        assert_eq!(
            cleaned(&ttl, Shape::List, &mixed, &clock),
            Some(Some(kept.clone()))
        );
        assert_eq!(
            cleaned(&ttl, Shape::List, &list(&[stamped(11, b"2")]), &clock),
            None
        );
        assert_eq!(
            cleaned(&ttl, Shape::List, &list(&[stamped(1, b"2")]), &clock),
            Some(None)
        );
    }
}
