//! A keyed task's state as records of its changelog partition, and back.
//!
//! A changelog record is one stored state entry: key = the fjall key (key group first), value
//! = the stored value, or a tombstone for a delete. A task writes its checkpoint's frozen
//! changes inside the member's transaction, so the partition read `read_committed` is exactly
//! the sequence of committed changes, and compaction keeps the latest per key.
//!
//! **Restoring.** A member that gets task r restores r's key groups in its local fjall store:
//! it knows up to which offset of changelog r its local copy is current (the offset after the
//! last change it wrote or read back, kept in each local checkpoint record). From there it
//! reads to the partition's end; with no such offset, or one the log no longer holds, it
//! deletes its local keys of those key groups and reads from the log's start. Compaction only
//! removes a record superseded by a later one of the same key, so reading any suffix of the
//! log on top of the state at its start gives the state at its end.
//!
//! **An open transaction on the changelog.** The previous owner may still hold a transaction
//! on partition r (it died, or it is paused and does not know yet that it lost r). Reading
//! only to the last stable offset would miss what that transaction commits, if it does; so the
//! restore waits until the partition has no open transaction (LSO = high watermark: the old
//! owner committed, aborted, or the broker aborted it after `transaction.timeout.ms`), then
//! reads to that end. A member that lost r can no longer commit to it: its TxnOffsetCommit
//! carries a generation the group coordinator has moved past.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{debug, info};

use crate::client::{
    Admin, Cluster, Consumer, ConsumerConfig, IsolationLevel, Offset, ProducerRecord,
    TopicPartition,
};

use super::super::RuntimeError;

/// Stored key → stored value (`None`: deleted), as a delta carries them.
pub(crate) type Entries = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// The changelog record of one stored entry.
pub(crate) fn record(topic: &str, task: i32, key: &[u8], value: Option<&[u8]>) -> ProducerRecord {
    let mut r = ProducerRecord::new(topic, Bytes::new())
        .with_key(Bytes::copy_from_slice(key))
        .with_partition(task);
    r.value = value.map(Bytes::copy_from_slice);
    r
}

/// Where a restore of one changelog partition reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// The first offset to read.
    pub from: i64,
    /// The end (no open transaction below it).
    pub to: i64,
    /// Whether the local keys of the task's key groups must be deleted first.
    pub wipe: bool,
}

/// Where to read, given the offset the local copy is current to (`local`), and the log's
/// start and stable end. A pure function (table-tested).
pub(crate) fn span(local: Option<i64>, log_start: i64, end: i64) -> Span {
    match local {
        // The local copy is a prefix of what the log holds: read the rest.
        Some(at) if at >= log_start && at <= end => Span {
            from: at,
            to: end,
            wipe: false,
        },
        // No local copy, the log was truncated past it, or the topic was recreated (the local
        // copy is ahead of the log): it cannot be trusted.
        _ => Span {
            from: log_start,
            to: end,
            wipe: true,
        },
    }
}

/// Whether a local copy last current at `current_at_ms` (`None`: never, or of another topic)
/// may be read forward from its offset at `now_ms`. The cleaner removes a tombstone no sooner
/// than `delete.retention.ms` after it was written (KIP-534's delete horizon starts at the
/// first cleaning, after the write); a tombstone written after the copy was current is
/// therefore still in the log while less than that has passed. A tenth of it is kept back for
/// the clocks of this machine and the brokers'. A pure function (table-tested).
pub(crate) fn trusted(current_at_ms: Option<u64>, now_ms: u64, delete_retention: Duration) -> bool {
    let retention = u64::try_from(delete_retention.as_millis()).unwrap_or(u64::MAX);
    current_at_ms.is_some_and(|at| now_ms.saturating_sub(at) < retention - retention / 10)
}

/// The changelog partition's start and end once no transaction is open on it, waiting at most
/// `patience` (the previous owner's transaction timeout and some).
///
/// # Errors
/// The brokers cannot answer, or a transaction stays open past `patience`.
pub(crate) async fn stable_bounds(
    admin: &Admin,
    tp: &TopicPartition,
    patience: Duration,
) -> Result<(i64, i64), RuntimeError> {
    let deadline = Instant::now() + patience;
    let tps = std::slice::from_ref(tp);
    let list = |at, iso| async move {
        admin
            .list_offsets(tps, at, iso)
            .await
            .map_err(|e| RuntimeError::client(format!("listing the offsets of {tp}"), e))
            .map(|m| m.get(tp).copied().unwrap_or(0))
    };
    loop {
        let stable = list(Offset::End, IsolationLevel::ReadCommitted).await?;
        let high = list(Offset::End, IsolationLevel::ReadUncommitted).await?;
        if stable >= high {
            let start = list(Offset::Beginning, IsolationLevel::ReadUncommitted).await?;
            return Ok((start, stable));
        }
        if Instant::now() >= deadline {
            return Err(RuntimeError::Unsupported(format!(
                "changelog {tp}: a transaction stayed open from offset {stable} for {} s; is another process with this job's transactional id prefix writing it?",
                patience.as_secs()
            )));
        }
        debug!(%tp, stable, high, "waiting for the previous owner's transaction to end");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The committed changes in `span` of the changelog partition `tp`, the latest per key.
///
/// # Errors
/// The partition cannot be read.
pub(crate) async fn read(
    cluster: &Arc<Cluster>,
    config: &ConsumerConfig,
    tp: &TopicPartition,
    span: Span,
) -> Result<Entries, RuntimeError> {
    let mut entries = Entries::new();
    if span.from >= span.to {
        return Ok(entries);
    }
    let mut config = config.clone();
    config.isolation_level = IsolationLevel::ReadCommitted;
    config.group_id = None;
    config.enable_auto_commit = false;
    let mut consumer = Consumer::with_cluster(config, cluster.clone());
    let fail = |e| RuntimeError::client(format!("reading changelog {tp}"), e);
    consumer.assign([tp.clone()]).await.map_err(fail)?;
    consumer.seek(tp, Offset::At(span.from)).map_err(fail)?;
    let started = Instant::now();
    let mut records = 0u64;
    while consumer.position(tp).unwrap_or(span.from) < span.to {
        for r in consumer
            .poll(Duration::from_millis(500))
            .await
            .map_err(fail)?
        {
            if r.offset >= span.to {
                continue;
            }
            records += 1;
            if let Some(k) = r.key {
                entries.insert(k.to_vec(), r.value.map(|v| v.to_vec()));
            }
        }
    }
    info!(%tp, from = span.from, to = span.to, records, keys = entries.len(),
        ms = started.elapsed().as_millis() as u64, "changelog read");
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_reads_the_suffix_past_a_current_local_copy_and_everything_otherwise() {
        let s = |from, to, wipe| Span { from, to, wipe };
        // (local offset, log start, stable end) → span
        for (local, start, end, want) in [
            (None, 0, 10, s(0, 10, true)),
            (Some(10), 0, 10, s(10, 10, false)),
            (Some(4), 0, 10, s(4, 10, false)),
            (Some(4), 6, 10, s(6, 10, true)),
            (Some(12), 0, 10, s(0, 10, true)),
            (Some(0), 0, 0, s(0, 0, false)),
        ] {
            assert_eq!(span(local, start, end), want, "{local:?} {start} {end}");
        }
    }

    #[test]
    fn a_local_copy_is_read_forward_only_while_no_tombstone_written_since_can_be_gone() {
        let day = Duration::from_secs(86_400);
        // (last current at, now) → trusted, with delete.retention.ms of a day
        for (at, now, want) in [
            (None, 1_000, false),
            (Some(1_000), 1_000, true),
            (Some(1_000), 1_000 + 3_600_000, true),
            (Some(1_000), 1_000 + 86_400_000 * 9 / 10 - 1, true),
            (Some(1_000), 1_000 + 86_400_000 * 9 / 10, false),
            (Some(1_000), 1_000 + 2 * 86_400_000, false),
            (Some(5_000), 1_000, true), // a clock that went back
        ] {
            assert_eq!(trusted(at, now, day), want, "{at:?} {now}");
        }
        assert!(!trusted(Some(0), 1_000, Duration::from_millis(1_000)));
    }

    #[test]
    fn a_delete_is_a_tombstone() {
        let r = record("c", 2, b"k", None);
        assert_eq!((r.value, r.partition), (None, Some(2)));
        let r = record("c", 2, b"k", Some(b"v"));
        assert_eq!(r.value.as_deref(), Some(&b"v"[..]));
    }
}
