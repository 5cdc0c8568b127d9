//! The exactly-once Kafka sink: one transaction per sink task per checkpoint, from a bounded
//! pool of transactional ids (`<prefix>-<task>-<slot>`, [`TransactionalPool`]), committed
//! once the checkpoint is durable; and the recovery order (docs/design/sink.md).
//!
//! A library piece the runtime drives, one [`KafkaWriter`] per sink task:
//!
//! ```text
//!   resume(restored)         resume restored committables FIRST -> Resumed
//!   (the caller persists the resolutions, fsynced)
//!   Resumed::start()         only then the pool's init, then abort lingering ids beyond it
//!   write(record)*           into the open transaction (begun lazily in a free slot)
//!   on_barrier(N)            flush + prepare -> Some(committable) to save in checkpoint N
//!   on_checkpoint_durable(N) commit every prepared transaction of checkpoints <= N
//!   release(N)               the resolutions of checkpoints <= N are durable: free the slots
//! ```
//!
//! The pure decisions (deadlines, retries, outcomes, lingering ids, the timeout budget) are in
//! `decide` and [`budget`], table-tested.
//!
//! [`TransactionalPool`]: crate::client::pool::TransactionalPool

pub mod budget;
mod decide;
pub(crate) mod fence;
pub mod file;
mod kafka;

pub use budget::{brokers_max_timeout, check_timeout_budget};
pub use kafka::{
    CheckpointCommit, KafkaWriter, RecoveredCommittable, RecoveryReport, Resumed,
    SinkMetrics, Written,
};

use crate::client::transactions::PreparedTransaction;
use crate::client::ProducerConfig;
use std::time::Duration;

/// How a writer's commit of one checkpoint's output found it. Both writers' commits are
/// idempotent (a Kafka transaction's EndTxn, a part file's rename), so a commit repeated after
/// a crash finds the output committed already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkCommit {
    /// Committed now (for files: at least one file was renamed now).
    Committed,
    /// It had been committed already (an earlier attempt's answer was lost, or every file had
    /// been renamed before a crash).
    AlreadyCommitted,
}

/// What the sink guarantees (`delivery.guarantee`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// Each record visible exactly once to read_committed readers, one checkpoint late.
    ExactlyOnce,
    /// An idempotent producer flushed at each barrier: nothing lost, a replay after a crash
    /// writes the records since the last checkpoint again.
    AtLeastOnce,
    /// An idempotent producer never waited for: a crash may lose what was buffered.
    None,
}

/// A sink task's settings.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// The guarantee.
    pub delivery: Delivery,
    /// The job's transactional id prefix: mandatory for exactly-once, unique per job per
    /// cluster. The task's ids are `<prefix>-<task>-<slot>`.
    pub transactional_id_prefix: String,
    /// This sink task's number.
    pub task: u32,
    /// Transactional ids per task (3 for one checkpoint in flight: the open, the prepared and
    /// the just-committed transaction).
    pub pool_size: usize,
    /// The producer settings, without transactional.id; its transaction.timeout.ms is the
    /// sink's transaction timeout.
    pub producer: ProducerConfig,
    /// checkpoint.interval.ms (named in errors about the budget and data loss).
    pub checkpoint_interval: Duration,
    /// checkpoint.timeout.ms (named in errors about the budget and data loss).
    pub checkpoint_timeout: Duration,
    /// The time a restart may take before restored transactions are committed.
    pub restart_allowance: Duration,
    /// Commits stop being retried this long before transaction start + transaction.timeout.ms.
    pub commit_margin: Duration,
}

impl SinkConfig {
    /// Settings with the defaults: pool of 3, 1 s interval, 60 s checkpoint timeout, 60 s
    /// restart allowance, 5 s commit margin, fail on data loss.
    pub fn new(
        delivery: Delivery,
        transactional_id_prefix: impl Into<String>,
        task: u32,
        producer: ProducerConfig,
    ) -> SinkConfig {
        SinkConfig {
            delivery,
            transactional_id_prefix: transactional_id_prefix.into(),
            task,
            pool_size: 3,
            producer,
            checkpoint_interval: Duration::from_secs(1),
            checkpoint_timeout: Duration::from_secs(60),
            restart_allowance: Duration::from_secs(60),
            commit_margin: Duration::from_secs(5),
        }
    }

    /// The prefix of this task's pool: `<job prefix>-<task>`.
    pub fn pool_prefix(&self) -> String {
        format!("{}-{}", self.transactional_id_prefix, self.task)
    }
}

/// What a sink task prepared at a barrier and commits once the checkpoint is durable: a
/// prepared Kafka transaction, or the part files a file sink closed (renamed to their final
/// names at the commit). The checkpoint record lists them until they are resolved.
///
/// Serialized untagged: a record written before file sinks existed lists bare transactions,
/// and still reads (the two shapes share no field).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum PreparedOutput {
    /// A prepared transaction of the Kafka sink.
    Transaction(PreparedTransaction),
    /// Part files of the file sink, in progress until the commit.
    Files(PreparedFiles),
}

/// A file sink task's part files of one checkpoint, with the name the coordinator knows
/// them by.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedFiles {
    /// `<dir>/task-<task>@<checkpoint>`: unique per task and checkpoint.
    pub name: String,
    /// The files.
    pub pending: file::PendingFiles,
}

impl PreparedFiles {
    /// Names `pending`.
    pub fn new(pending: file::PendingFiles) -> PreparedFiles {
        PreparedFiles {
            name: format!(
                "{}/task-{}@{}",
                pending.dir, pending.task, pending.checkpoint
            ),
            pending,
        }
    }
}

impl PreparedOutput {
    /// How errors and logs name it: the transactional id, or the files' task and checkpoint.
    pub fn name(&self) -> &str {
        match self {
            PreparedOutput::Transaction(t) => &t.transactional_id,
            PreparedOutput::Files(f) => &f.name,
        }
    }
}

/// What a Kafka sink task hands to checkpoint N: the transaction to commit once N is durable.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SinkCommittable {
    /// The checkpoint whose records the transaction holds.
    pub checkpoint: u64,
    /// The client's committable (transactional id, producer id and epoch, version, start).
    pub transaction: PreparedTransaction,
}

/// The sink's errors; each a single line naming what is wrong and what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// A durable checkpoint's transaction was aborted before it was committed: its records are
    /// lost.
    #[error("DATA LOSS: checkpoint {checkpoint}'s transaction '{transactional_id}' was aborted before it could be committed ({reason}); its records are lost. transaction.timeout.ms={transaction_timeout_ms} must outlast checkpoint.interval.ms={interval_ms} + checkpoint.timeout.ms={checkpoint_timeout_ms} + the restart time: raise transaction.timeout.ms (up to the brokers' transaction.max.timeout.ms) or shorten the checkpoint interval/timeout")]
    DataLoss {
        /// The checkpoint.
        checkpoint: u64,
        /// The transactional id.
        transactional_id: String,
        /// What the coordinator reported.
        reason: String,
        /// transaction.timeout.ms.
        transaction_timeout_ms: u128,
        /// checkpoint.interval.ms.
        interval_ms: u128,
        /// checkpoint.timeout.ms.
        checkpoint_timeout_ms: u128,
    },
    /// The commit kept failing until the transaction's deadline.
    #[error("checkpoint {checkpoint}'s transaction '{transactional_id}' could not be committed before its deadline (transaction start + transaction.timeout.ms={transaction_timeout_ms} - margin); last error: {last_error}; the coordinator will abort it (data loss) unless a restart commits it in time: check the brokers, and raise transaction.timeout.ms")]
    CommitDeadline {
        /// The checkpoint.
        checkpoint: u64,
        /// The transactional id.
        transactional_id: String,
        /// transaction.timeout.ms.
        transaction_timeout_ms: u128,
        /// The last attempt's error.
        last_error: Box<crate::client::Error>,
    },
    /// Another producer writes with this job's transactional ids. Never restart into this
    /// (each restart would fence the other job, which fences back).
    #[error("transactional id prefix '{prefix}' is used by another producer ({detail}): another live job (or a newer incarnation of this one) uses the same prefix; stopping without fencing it back: give each job its own transactional id prefix")]
    PrefixClash {
        /// The pool prefix.
        prefix: String,
        /// What showed it.
        detail: String,
    },
    /// transaction.timeout.ms does not fit the checkpoint budget or the brokers' maximum.
    #[error("{0}")]
    TimeoutBudget(String),
    /// Settings that cannot work.
    #[error("sink configuration: {0}")]
    Config(String),
    /// Calls out of order (e.g. a barrier for an older checkpoint).
    #[error("sink misuse: {0}")]
    Misuse(String),
    /// A client call failed.
    #[error("{what}: {source}")]
    Client {
        /// What the sink was doing.
        what: String,
        /// The client's error.
        #[source]
        source: Box<crate::client::Error>,
    },
}

impl SinkError {
    pub(crate) fn client(what: impl Into<String>, source: crate::client::Error) -> SinkError {
        SinkError::Client {
            what: what.into(),
            source: Box::new(source),
        }
    }

    /// Whether a restart (recovery from the last durable checkpoint) may help. False for a
    /// prefix clash (restarting would fence the other job: a fencing loop), settings and data
    /// loss (the records are gone; restarting does not bring them back).
    pub fn is_restartable(&self) -> bool {
        matches!(
            self,
            SinkError::Client { .. } | SinkError::CommitDeadline { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record written before file sinks existed lists bare transactions: they still read,
    /// as transactions; part files read back as part files.
    #[test]
    fn prepared_outputs_read_back_as_written_and_old_records_still_read() {
        let t = PreparedTransaction {
            transactional_id: "job-0-1".to_owned(),
            producer_id: 7,
            producer_epoch: 3,
            transaction_version: 2,
            transaction_start_ms: 1_000,
            empty: false,
        };
        let old = serde_json::to_string(&t).unwrap();
        let read: PreparedOutput = serde_json::from_str(&old).unwrap();
        assert_eq!(read, PreparedOutput::Transaction(t.clone()));
        let files = PreparedOutput::Files(PreparedFiles::new(file::PendingFiles {
            dir: "out".into(),
            task: 1,
            checkpoint: 9,
            files: vec![file::PendingFile {
                in_progress: ".part-00001-0000000002-00000000.jsonl.inprogress".into(),
                finished: "part-00001-0000000002-00000000.jsonl".into(),
                bytes: 42,
            }],
        }));
        assert_eq!(files.name(), "out/task-1@9");
        for c in [PreparedOutput::Transaction(t), files] {
            let text = serde_json::to_string(&c).unwrap();
            assert_eq!(serde_json::from_str::<PreparedOutput>(&text).unwrap(), c);
        }
    }
}
