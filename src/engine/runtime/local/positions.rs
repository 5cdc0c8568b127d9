//! The two models of a partition position, and the one place they convert: the coordinator's
//! [`Positions`] (what a checkpoint holds, per [`TopicPartition`]) and the store's
//! [`RecordPositions`] (what a checkpoint record writes). Also how a checkpoint record reads
//! back: its positions, whether it holds where a run started, what a recovery restores, and
//! what a rollback reads again.

use crate::client::TopicPartition;
use crate::engine::checkpoint::{CheckpointId, Listed, Positions, Restored};
use crate::engine::state::{CheckpointRecord, RecordPositions, Rollback, SourcePosition};

use super::message::C;

/// The file source's one input, as the runtime's assignment and watermarks name it.
pub(crate) fn file_input() -> TopicPartition {
    TopicPartition::new(FILE_INPUT, 0)
}

/// The name the file source's records carry as their "topic".
pub(crate) const FILE_INPUT: &str = "(file source)";

/// Positions as the coordinator keeps them ⇄ as the store writes them.
pub(crate) fn to_store(positions: &Positions) -> RecordPositions {
    RecordPositions {
        partitions: positions
            .iter()
            .map(|(tp, &next_offset)| SourcePosition {
                topic: tp.topic.clone(),
                partition: tp.partition,
                next_offset,
            })
            .collect(),
        file: positions.file.clone(),
        changelog: None,
    }
}

pub(crate) fn from_store(positions: &[SourcePosition]) -> Positions {
    positions
        .iter()
        .map(|p| {
            let tp = TopicPartition::new(p.topic.clone(), p.partition);
            (tp, p.next_offset)
        })
        .collect()
}

/// How many input records a restore of `positions` reads again that the rolled-back latest
/// checkpoint had read already (a partition the restored record does not list counts from 0;
/// unknown when the latest record could not be read: 0).
pub(crate) fn replayed_records(positions: &[SourcePosition], rollback: &Rollback) -> u64 {
    let Some(latest) = &rollback.from_positions else {
        return 0;
    };
    latest
        .iter()
        .map(|l| {
            let restored = positions
                .iter()
                .find(|p| p.topic == l.topic && p.partition == l.partition)
                .map_or(0, |p| p.next_offset);
            u64::try_from(l.next_offset.saturating_sub(restored)).unwrap_or(0)
        })
        .sum()
}

/// A record's source positions (partitions and file).
pub(crate) fn record_positions(record: &CheckpointRecord) -> Positions {
    let mut p = from_store(&record.positions);
    p.file = record.file_position.clone();
    p
}

/// Whether checkpoint 0's record holds where the sources started (a run that crashed before
/// its first checkpoint starts there again).
pub(crate) fn start_recorded(record: &CheckpointRecord) -> bool {
    record.id == 0 && (!record.positions.is_empty() || record.file_position.is_some())
}

/// The record as the coordinator's recovery reads it; checkpoint 0 (a fresh start, or a crash
/// before the first checkpoint) is no record.
pub(crate) fn restored(record: &CheckpointRecord) -> Option<Restored<C>> {
    (record.id > 0).then(|| Restored {
        id: CheckpointId(record.id),
        positions: record_positions(record),
        unresolved: record
            .committables
            .iter()
            .map(|c| Listed {
                checkpoint: CheckpointId(record.id),
                committable: c.clone(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::state::Layout;

    #[test]
    fn positions_survive_the_store_and_back() {
        let mut p = Positions::new();
        p.insert(TopicPartition::new("a", 2), 41);
        assert_eq!(from_store(&to_store(&p).partitions), p);
    }

    #[test]
    fn a_rollback_replays_what_the_latest_checkpoint_had_read_past_the_restored_one() {
        let at = |topic: &str, partition, next_offset| SourcePosition {
            topic: topic.into(),
            partition,
            next_offset,
        };
        let rollback = |from: Option<Vec<SourcePosition>>| Rollback {
            from: 9,
            to: 7,
            from_positions: from,
            committed_since: 0,
        };
        let restored = [at("a", 0, 100), at("a", 1, 50)];
        // (the latest's positions) → records read again
        for (latest, want) in [
            (Some(vec![at("a", 0, 130), at("a", 1, 50)]), 30),
            (
                Some(vec![at("a", 0, 130), at("a", 1, 70), at("a", 2, 5)]),
                55,
            ),
            (Some(vec![at("a", 0, 90)]), 0), // never negative
            (None, 0),                       // the latest record unreadable
        ] {
            assert_eq!(
                replayed_records(&restored, &rollback(latest.clone())),
                want,
                "{latest:?}"
            );
        }
    }

    #[test]
    fn checkpoint_zero_restores_nothing() {
        let record = CheckpointRecord {
            id: 0,
            generation: 1,
            layout: Layout {
                key_groups: 1,
                operators: Vec::new(),
                sink_prefix: None,
                sink_ids: 0,
            },
            positions: Vec::new(),
            file_position: None,
            committables: Vec::new(),
            changelog: None,
        };
        assert!(restored(&record).is_none());
        let r = restored(&CheckpointRecord { id: 3, ..record }).unwrap();
        assert_eq!(r.id, CheckpointId(3));
    }
}
