//! The source's positions published as the consumer group's committed offsets after each
//! checkpoint, **for monitoring tools only** (lag dashboards, `kafka-consumer-groups.sh`).
//!
//! The checkpoint is the truth: a restart seeks to the restored checkpoint's positions and
//! never reads these offsets. They are committed only after the checkpoint is durable, so
//! they never run ahead of what a restart resumes from, and a failed commit costs nothing but
//! a stale dashboard (it is logged, not fatal). The runtime does not join the group (it
//! assigns partitions itself), so it commits as the Admin client does, from outside the group:
//! the group must have no active member.
//!
//! One commit at a time, in the background so the task loop never waits for the group
//! coordinator: a checkpoint completing while the previous commit still runs is skipped (the
//! next one carries later positions), and [`GroupOffsets::flush`] at stop commits the last.

use tokio::task::JoinHandle;

use crate::client::{Admin, TopicPartition};
use crate::engine::checkpoint::{CheckpointId, Positions};

/// The publisher of one job's positions to its group.
pub(crate) struct GroupOffsets {
    admin: Admin,
    group: String,
    /// The commit under way, and the checkpoint whose positions it carries.
    pending: Option<(CheckpointId, JoinHandle<bool>)>,
    /// The newest checkpoint whose positions the group holds.
    committed: Option<CheckpointId>,
    /// The newest durable checkpoint's positions, until committed.
    latest: Option<(CheckpointId, Positions)>,
}

impl GroupOffsets {
    pub(crate) fn new(admin: Admin, group: String) -> Self {
        GroupOffsets {
            admin,
            group,
            pending: None,
            committed: None,
            latest: None,
        }
    }

    /// Checkpoint `id` is durable with `positions`: commit them unless a commit is under way.
    pub(crate) fn checkpoint_completed(&mut self, id: CheckpointId, positions: Positions) {
        self.reap();
        self.latest = Some((id, positions));
        if self.pending.is_none() {
            self.start();
        }
    }

    /// Waits for the commit under way, then commits the newest durable positions if the
    /// group does not hold them yet (bounded by the client's default.api.timeout.ms).
    pub(crate) async fn flush(&mut self) {
        if let Some((id, handle)) = self.pending.take() {
            if handle.await.unwrap_or(false) {
                self.committed = Some(id);
            }
        }
        if self.start() {
            if let Some((id, handle)) = self.pending.take() {
                if handle.await.unwrap_or(false) {
                    self.committed = Some(id);
                }
            }
        }
    }

    /// Notes a finished commit.
    fn reap(&mut self) {
        if !self.pending.as_ref().is_some_and(|(_, h)| h.is_finished()) {
            return;
        }
        if let Some((id, handle)) = self.pending.take() {
            // Finished: the join does not wait.
            if matches!(futures::FutureExt::now_or_never(handle), Some(Ok(true))) {
                self.committed = Some(id);
            }
        }
    }

    /// Starts committing the newest durable positions, if newer than the group's; returns
    /// whether it started.
    fn start(&mut self) -> bool {
        let Some((id, positions)) = self.latest.take() else {
            return false;
        };
        if self.committed.is_some_and(|c| c >= id) || positions.iter().next().is_none() {
            return false;
        }
        let offsets: Vec<(TopicPartition, i64)> = positions
            .iter()
            .map(|(tp, &o)| (TopicPartition::new(tp.topic.clone(), tp.partition), o))
            .collect();
        let admin = self.admin.clone();
        let group = self.group.clone();
        self.pending = Some((
            id,
            tokio::spawn(async move {
                match admin.commit_offsets(&group, &offsets).await {
                    Ok(()) => {
                        tracing::debug!(checkpoint = id.0, group, "group offsets committed");
                        true
                    }
                    Err(e) => {
                        tracing::warn!(checkpoint = id.0, group, error = %e, "committing the group's offsets (monitoring only) failed");
                        false
                    }
                }
            }),
        ));
        true
    }
}
