//! The checkpoint coordinator: a pure state machine fed events (docs/design/checkpoint.md
//! and docs/design/recovery.md).
//!
//! [`Coordinator::on`] takes the time and one [`Event`] and returns the [`Decision`]s the
//! runtime carries out: inject a barrier, persist a batch, commit a transaction, release a pool
//! slot, resume committables after a crash, fail the job. It does no I/O and reads no clock, so
//! every rule of the protocol is a unit test: no commit before the checkpoint is durable, no
//! `AbortPool` before the recovered resolutions are durable, no slot released while a durable
//! record lists it, strictly increasing ids, at most one checkpoint in flight, a deadline on
//! every commit retry, and a graceful stop that ends only once its final checkpoint is durable,
//! committed and recorded as resolved ([`Event::StopRequested`] … [`Decision::Stopped`]).
//!
//! [`check_budget`] is the start-up check of the transaction timeout against the checkpoint
//! settings and the broker's `transaction.max.timeout.ms` (the seeds' pitfall: a transaction
//! the broker aborts after its checkpoint is durable is silent data loss elsewhere).
//!
//! **Time** is `u64` milliseconds ([`Millis`]), passed with every event. Not `Instant`: a commit
//! deadline is the transaction's start as the broker's coordinator recorded it
//! (`PreparedTransaction::transaction_start_ms`, wall-clock ms since the Unix epoch) plus
//! `transaction.timeout.ms`, so the coordinator must compare against the same clock; an
//! `Instant` cannot be built from a broker timestamp, stored in a checkpoint or written in a
//! table test. The runtime passes wall-clock ms; the coordinator never lets its time go
//! backwards (it keeps the largest value seen), and the commit margin covers clock skew with
//! the broker.
//!
//! **The committable** is a type parameter bounded by [`Committable`], implemented for the
//! client's [`PreparedTransaction`]: the coordinator needs only its name (the transactional id,
//! which is also its pool slot), its start time and whether it is empty, and the tests stay
//! small. **The state delta** is opaque: a type parameter the coordinator only moves from an
//! ack into the batch.

mod budget;
mod coordinator;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use crate::client::transactions::PreparedTransaction;
use crate::client::TopicPartition;
use crate::engine::sink::PreparedOutput;
use crate::engine::file_source::FilePosition;

pub use budget::{check_budget, required_transaction_timeout, BudgetError};
pub use coordinator::{
    Batch, CommitOutcome, Coordinator, Decision, Event, Listed, Phase, RecoveryStep, Restored,
    StopStep, TaskDelta,
};

/// Milliseconds since the Unix epoch (see the module docs for why not `Instant`).
pub type Millis = u64;

/// A checkpoint's id. Ids strictly increase over a job's life, a cancelled id is never reused,
/// and the id of a durable checkpoint names its record (`c/N`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct CheckpointId(pub u64);

impl CheckpointId {
    /// The id after this one.
    pub fn next(self) -> CheckpointId {
        CheckpointId(self.0.saturating_add(1))
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A task of the job graph that takes part in checkpoints (sources, stateful operators, sinks).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct TaskId(pub u32);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {}", self.0)
    }
}

/// Source positions: where a restore resumes reading.
///
/// Per input partition, the *next offset to fetch* (not last + 1: commit markers take up
/// offsets); for a job whose source is a file, the file reader's position (the file, the
/// offset of its next line and what its reordering buffer held). The coordinator only merges
/// the sources' positions into the batch and hands the restored ones back at StartTasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positions {
    offsets: BTreeMap<TopicPartition, i64>,
    /// The file source's reader position (only source subtask 0 reads a file).
    pub file: Option<FilePosition>,
}

impl Positions {
    /// No positions.
    pub fn new() -> Positions {
        Positions::default()
    }

    /// Sets `tp`'s next offset to fetch.
    pub fn insert(&mut self, tp: TopicPartition, next_offset: i64) {
        self.offsets.insert(tp, next_offset);
    }

    /// `tp`'s next offset to fetch, when known.
    pub fn get(&self, tp: &TopicPartition) -> Option<&i64> {
        self.offsets.get(tp)
    }

    /// The partitions and their next offsets, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &i64)> {
        self.offsets.iter()
    }

    /// Adds another task's positions (sources own disjoint partitions; one reads the file).
    pub fn extend(&mut self, other: Positions) {
        self.offsets.extend(other.offsets);
        if other.file.is_some() {
            self.file = other.file;
        }
    }

    /// Whether there is no position at all.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty() && self.file.is_none()
    }
}

impl FromIterator<(TopicPartition, i64)> for Positions {
    fn from_iter<I: IntoIterator<Item = (TopicPartition, i64)>>(iter: I) -> Self {
        Positions {
            offsets: iter.into_iter().collect(),
            file: None,
        }
    }
}

/// What the coordinator needs to know of a sink's committable.
pub trait Committable: Clone + PartialEq + fmt::Debug {
    /// The transactional id: names the committable in errors and identifies its pool slot.
    fn name(&self) -> &str;
    /// When the broker's coordinator started the transaction (ms since the Unix epoch), when
    /// known. Its commit deadline is this plus `transaction.timeout.ms` minus the margin.
    fn start_ms(&self) -> Option<Millis>;
    /// Nothing was sent in the transaction: there is nothing to commit.
    fn is_empty(&self) -> bool;
}

impl Committable for PreparedOutput {
    fn name(&self) -> &str {
        match self {
            PreparedOutput::Transaction(t) => t.name(),
            PreparedOutput::Files(f) => &f.name,
        }
    }

    fn start_ms(&self) -> Option<Millis> {
        match self {
            PreparedOutput::Transaction(t) => t.start_ms(),
            // A rename has no broker deadline: the sink's last barrier bounds its retries.
            PreparedOutput::Files(_) => None,
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            PreparedOutput::Transaction(t) => t.is_empty(),
            PreparedOutput::Files(f) => f.pending.files.is_empty(),
        }
    }
}

impl Committable for PreparedTransaction {
    fn name(&self) -> &str {
        &self.transactional_id
    }

    fn start_ms(&self) -> Option<Millis> {
        u64::try_from(self.transaction_start_ms).ok()
    }

    fn is_empty(&self) -> bool {
        self.empty
    }
}

/// The coordinator's settings. The job file names them as in the comments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `checkpoint.interval.ms`: time from one trigger to the next.
    pub interval_ms: Millis,
    /// `checkpoint.min.pause.ms`: time from the end of one checkpoint (completed or cancelled)
    /// to the next trigger, so slow checkpoints do not run back to back.
    pub min_pause_ms: Millis,
    /// `checkpoint.timeout.ms`: a checkpoint not acknowledged by every task by then is
    /// cancelled and counts as a failure.
    pub checkpoint_timeout_ms: Millis,
    /// `checkpoint.tolerable.failures` (F): the job fails when more than F checkpoints in a
    /// row fail.
    pub max_consecutive_failures: u32,
    /// `transaction.timeout.ms` of the sink's producers.
    pub transaction_timeout_ms: Millis,
    /// `checkpoint.commit.margin.ms`: commits are retried until the transaction's start +
    /// `transaction.timeout.ms` − this margin (room for clock skew and the last attempt).
    pub commit_margin_ms: Millis,
    /// `checkpoint.commit.retry.backoff.ms`: pause between two commit attempts.
    pub commit_retry_backoff_ms: Millis,
    /// `checkpoint.retained` (K ≥ 1): durable records kept (N−K+1..N).
    pub retention: u64,
    /// `restart.allowance.ms`: how long a crashed job may take to come back and resume its
    /// committables (part of the timeout budget, [`check_budget`]).
    pub restart_allowance_ms: Millis,
}

impl Default for Settings {
    /// Defaults that pass [`check_budget`] against the broker's default
    /// `transaction.max.timeout.ms` (15 min): 4 · (1 s + 30 s) + 60 s + 10 s = 194 s ≤ 5 min.
    fn default() -> Self {
        Settings {
            interval_ms: 1_000,
            min_pause_ms: 0,
            checkpoint_timeout_ms: 30_000,
            max_consecutive_failures: 3,
            transaction_timeout_ms: 300_000,
            commit_margin_ms: 10_000,
            commit_retry_backoff_ms: 500,
            retention: 2,
            restart_allowance_ms: 60_000,
        }
    }
}

/// Why the coordinator failed the job. Each message names the checkpoint, the transactional
/// id and the settings involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobFailure {
    /// A durable checkpoint's transaction can no longer be committed: its output is lost.
    #[error("transaction {transactional_id} of checkpoint {checkpoint} was not committed after the checkpoint became durable ({reason}): its output is lost; the broker aborts transactions older than transaction.timeout.ms ({transaction_timeout_ms} ms): raise it, or lower checkpoint.interval.ms ({interval_ms} ms) and checkpoint.timeout.ms ({checkpoint_timeout_ms} ms)")]
    DataLoss {
        /// The durable checkpoint that listed it.
        checkpoint: CheckpointId,
        /// Its transactional id.
        transactional_id: String,
        /// What the broker reported.
        reason: String,
        /// `transaction.timeout.ms`.
        transaction_timeout_ms: Millis,
        /// `checkpoint.interval.ms`.
        interval_ms: Millis,
        /// `checkpoint.timeout.ms`.
        checkpoint_timeout_ms: Millis,
    },
    /// A later transaction of the same transactional id started before ours was resolved.
    /// The engine never reuses an unresolved id, so another writer uses it.
    #[error("transaction {transactional_id} of checkpoint {checkpoint} was superseded by another writer ({reason}): another job uses the same transactional id prefix; give each job its own prefix")]
    Clash {
        /// The durable checkpoint that listed it.
        checkpoint: CheckpointId,
        /// Its transactional id.
        transactional_id: String,
        /// What the broker reported.
        reason: String,
    },
    /// Commit retries reached the transaction's deadline; the broker is about to abort it.
    #[error("could not commit transaction {transactional_id} of checkpoint {checkpoint} before its deadline at {deadline_ms} ms (start + transaction.timeout.ms {transaction_timeout_ms} ms − checkpoint.commit.margin.ms {commit_margin_ms} ms); last error: {last_error}; stopping rather than losing its output silently")]
    CommitDeadline {
        /// The durable checkpoint that listed it.
        checkpoint: CheckpointId,
        /// Its transactional id.
        transactional_id: String,
        /// The deadline that passed (ms since the Unix epoch).
        deadline_ms: Millis,
        /// `transaction.timeout.ms`.
        transaction_timeout_ms: Millis,
        /// `checkpoint.commit.margin.ms`.
        commit_margin_ms: Millis,
        /// The last retriable error.
        last_error: String,
    },
    /// A commit failed with an error retrying cannot fix.
    #[error("committing transaction {transactional_id} of checkpoint {checkpoint} failed: {error}; fix that and restart the job, whose recovery commits it if it is still open")]
    CommitFailed {
        /// The checkpoint that brought it.
        checkpoint: CheckpointId,
        /// Its transactional id.
        transactional_id: String,
        /// The error.
        error: String,
    },
    /// More than F checkpoints in a row failed.
    #[error("{failures} checkpoints in a row failed (checkpoint.tolerable.failures = {tolerated}); the last, checkpoint {checkpoint}: {last_reason}")]
    TooManyFailures {
        /// Consecutive failures.
        failures: u32,
        /// `checkpoint.tolerable.failures`.
        tolerated: u32,
        /// The last failed checkpoint.
        checkpoint: CheckpointId,
        /// Why it failed.
        last_reason: String,
    },
    /// Writing a checkpoint (or the recovered resolutions) failed: the state store is poisoned.
    #[error("writing checkpoint {checkpoint} failed ({reason}); the state store refuses writes until the job restarts and recovers")]
    PersistFailed {
        /// The checkpoint being written.
        checkpoint: CheckpointId,
        /// What the store reported.
        reason: String,
    },
}
