//! The source's partitions: where each starts, and partitions added to the input topics while
//! the job runs (partition discovery).
//!
//! **Every assigned partition has a position from the start.** At start each partition's
//! offset is resolved to a number (its restored position, else its log start or end as the
//! rule below says) and put into the positions, so every checkpoint lists every partition the
//! task reads, also one it has not read a record from yet. A partition missing from a
//! restored checkpoint was therefore created after it: it is new, and starts at its beginning
//! whatever `source.start` says (as Flink does for discovered partitions), or its records
//! written before the restart would be skipped under `start = "latest"`.
//!
//! **Discovery.** Every `source.partition.discovery.ms` (default 10 s: one Metadata request
//! per interval is negligible, and records in a new partition wait at most that long; Flink's
//! 5 min is too slow for a job whose checkpoints come every second) the metadata is refreshed
//! and partitions not yet assigned are added, from their beginning: the position goes into
//! the task's positions at once, between two records, so the next barrier's checkpoint has it.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::{Admin, Consumer, IsolationLevel, Offset, TopicPartition};
use crate::engine::job::StartPosition;
use crate::engine::runtime::RuntimeError;

/// Where a partition starts: its restored position; else, after a restore, its beginning (a
/// partition the checkpoint does not list is new); else the job's `source.start`.
pub(crate) fn start_offset(
    restored: Option<i64>,
    from_checkpoint: bool,
    start: StartPosition,
) -> Offset {
    match (restored, from_checkpoint, start) {
        (Some(o), _, _) => Offset::At(o),
        (None, true, _) | (None, false, StartPosition::Earliest) => Offset::Beginning,
        (None, false, StartPosition::Latest) => Offset::End,
    }
}

/// Resolves each partition's start to an offset number (one ListOffsets per kind and
/// leader; `End` is the last stable offset, where a read_committed reader starts).
///
/// # Errors
/// [`RuntimeError::Client`] when the brokers do not answer.
pub(crate) async fn resolve(
    admin: &Admin,
    starts: Vec<(TopicPartition, Offset)>,
) -> Result<BTreeMap<TopicPartition, i64>, RuntimeError> {
    let mut out = BTreeMap::new();
    let mut ask: BTreeMap<&'static str, (Offset, Vec<TopicPartition>)> = BTreeMap::new();
    for (tp, offset) in starts {
        match offset {
            Offset::At(o) => {
                out.insert(tp, o);
            }
            Offset::End => ask
                .entry("end")
                .or_insert((Offset::End, Vec::new()))
                .1
                .push(tp),
            other => ask
                .entry("beginning")
                .or_insert((other, Vec::new()))
                .1
                .push(tp),
        }
    }
    for (what, (at, tps)) in ask {
        let found = admin
            .list_offsets(&tps, at, IsolationLevel::ReadCommitted)
            .await
            .map_err(|e| RuntimeError::client(format!("listing the source's {what} offsets"), e))?;
        out.extend(found);
    }
    Ok(out)
}

/// When to look for new partitions next.
#[derive(Debug)]
pub(crate) struct Discovery {
    every: Option<Duration>,
    next: Instant,
}

impl Discovery {
    /// Every `ms` milliseconds; 0 never.
    pub(crate) fn new(ms: u64) -> Self {
        let every = (ms > 0).then(|| Duration::from_millis(ms));
        Discovery {
            every,
            next: Instant::now() + every.unwrap_or_default(),
        }
    }

    /// Whether a look is due now (then the next is one interval away).
    pub(crate) fn due(&mut self) -> bool {
        let Some(every) = self.every else {
            return false;
        };
        let now = Instant::now();
        if now < self.next {
            return false;
        }
        self.next = now + every;
        true
    }
}

/// Looks for new partitions of `topics` that `owns` (this source subtask's share, see
/// `routing::owner_of`) and assigns them to `consumer`; returns their log
/// start offsets, for the caller to seek to and record. A failed look is logged and retried
/// at the next interval (an empty answer).
///
/// # Errors
/// [`RuntimeError::Client`] when a new partition cannot be positioned or assigned.
pub(crate) async fn discover(
    admin: &Admin,
    consumer: &mut Consumer,
    topics: &[String],
    owns: impl Fn(&TopicPartition) -> bool,
) -> Result<BTreeMap<TopicPartition, i64>, RuntimeError> {
    let found = match new_partitions(admin, consumer, topics, owns).await {
        Ok(found) if found.is_empty() => return Ok(BTreeMap::new()),
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "looking for new source partitions failed; trying again at the next interval");
            return Ok(BTreeMap::new());
        }
    };
    tracing::info!(partitions = ?found, "new source partitions, read from their beginning");
    let starts = found
        .iter()
        .map(|tp| (tp.clone(), Offset::Beginning))
        .collect();
    // The caller seeks them right after the assignment; a seek bumps the partition's epoch,
    // so whatever the fetcher got from auto.offset.reset before it is dropped unread.
    let offsets = resolve(admin, starts).await?;
    let mut all = consumer.assignment();
    all.extend(found);
    consumer
        .assign(all)
        .await
        .map_err(|e| RuntimeError::client("assigning new source partitions", e))?;
    Ok(offsets)
}

/// The partitions of `topics` the consumer is not assigned yet, from fresh metadata.
///
/// # Errors
/// The client's errors (the caller retries at the next interval).
async fn new_partitions(
    admin: &Admin,
    consumer: &Consumer,
    topics: &[String],
    owns: impl Fn(&TopicPartition) -> bool,
) -> crate::client::Result<Vec<TopicPartition>> {
    admin.cluster().refresh_metadata().await?;
    let assigned = consumer.assignment();
    let mut out = Vec::new();
    for t in topics {
        for tp in consumer.partitions_for(t).await? {
            if !assigned.contains(&tp) && owns(&tp) {
                out.push(tp);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_starts_at_its_restored_position_else_new_ones_at_their_beginning() {
        use StartPosition::{Earliest, Latest};
        // (restored, from a checkpoint, source.start) → where it starts
        let cases = [
            (Some(7), true, Earliest, Offset::At(7)),
            (Some(0), true, Latest, Offset::At(0)),
            (None, false, Earliest, Offset::Beginning),
            (None, false, Latest, Offset::End),
            // Not in the restored checkpoint: created after it, so new.
            (None, true, Latest, Offset::Beginning),
            (None, true, Earliest, Offset::Beginning),
        ];
        for (restored, from, start, want) in cases {
            assert_eq!(
                start_offset(restored, from, start),
                want,
                "{restored:?} {from} {start:?}"
            );
        }
    }

    #[test]
    fn discovery_is_due_once_per_interval_and_never_at_zero() {
        let mut off = Discovery::new(0);
        off.next = Instant::now();
        assert!(!off.due());
        let mut d = Discovery::new(60_000);
        assert!(!d.due(), "due before the first interval passed");
        d.next = Instant::now();
        assert!(d.due());
        assert!(!d.due(), "due again before an interval passed");
    }
}
