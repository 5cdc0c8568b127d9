//! The engine runtime: P source subtasks → P keyed subtasks → P sink tasks, exactly once
//! (docs/design/runtime.md).
//!
//! [`run`] carries out a job file at its `settings.parallelism` P: it opens the state (latest
//! checkpoint, a chosen one, or fresh), checks the transaction timeout budget against the
//! brokers, recovers the sinks (restored committables committed FIRST, then the pools' init
//! aborts what the crashed incarnation left open), makes the resolutions durable, and starts
//! the subtasks.
//!
//! Two modes share this module: `local` (every subtask in this process, the default) and
//! `cluster` (`mode = "cluster"`: several processes, records exchanged through Kafka topics).
//! Both use `connect` (reaching the brokers within the restart allowance), `topology` (the
//! operators a job runs, whichever front end built it), `routing` (key groups and partitions
//! to subtasks), `idle` (when an input partition is idle), `observe` (metrics) and the test
//! `hook`s. In local mode:
//! - source subtask i (`local::source`) reads its share of the input partitions (`routing`)
//!   with its own read_committed consumer and runs the stateless prefix (filter, project,
//!   key_by);
//! - a job with a window routes each record by key group (kg·P/G, as Flink) over bounded
//!   channels to keyed subtask j (`local::keyed`), which runs the window on its key-group range
//!   of the state and aligns barriers (`local::alignment`) before it snapshots;
//! - the keyed subtask (or, without a window, the source subtask) writes to its own sink task
//!   (`local::output`; transactional ids `<prefix>-<subtask>-<slot>`).
//!
//! The coordinator's loop (`local::coordinate`) feeds the pure
//! `Coordinator` the subtasks' acks and a tick and
//! carries out its decisions (barrier into the sources; persist on a blocking thread; commit and
//! release at the subtask owning the transactional id).
//!
//! **One owner of the commit retry: the sink.** `KafkaWriter::on_checkpoint_durable(N)` commits
//! every prepared transaction of checkpoints ≤ N and retries until the transaction's deadline;
//! the runtime reports each resolution to the coordinator as a `CommitResult`, so the
//! coordinator's `RetryCommitAt` never comes. A commit error is fatal: the restart's recovery
//! commits it from the durable record.
//!
//! **Rescaling.** A checkpoint restores at another parallelism: the state moves with its key
//! groups, positions with their partitions; sink task 0 resolves every restored committable,
//! and the open transactions of tasks that no longer exist are aborted (`local::retire`).
//!
//! **Group offsets.** After each checkpoint its positions are committed to the consumer group
//! `source.group.id`, for monitoring tools only: a restart never reads them (`local::offsets`).
//!
//! **Known limits.** Back-pressure from a sink's pool is waited out for up to
//! `checkpoint.timeout.ms`, then the job stops with an error rather than risk a record's output
//! landing after its barrier.

mod bad_record;
mod cluster;
mod connect;
mod error;
mod hook;
mod idle;
mod local;
mod observe;
mod routing;
pub(crate) mod topology;

use std::path::PathBuf;
use std::sync::Arc;

use crate::client::{ClientConfig, ConsumerConfig, ProducerConfig};
use crate::engine::formats::LineFormats;
use crate::engine::job::topology::JsonTopology;
use crate::engine::job::Job;
use crate::engine::metrics::Metrics;
pub use error::RuntimeError;
// What a stopped run's error carries, and where a run restores from.
pub use crate::engine::checkpoint::{CheckpointId, JobFailure};
pub use crate::engine::file_source::FileSourceError;
pub use crate::engine::sink::file::FileSinkError;
pub use crate::engine::sink::SinkError;
pub use crate::engine::state::{RestoreFrom, StateError};

/// Runs `config.job` until `stop` turns true (then stops gracefully: a final checkpoint,
/// committed, nothing left open) or a fatal error; [`run_with_metrics`] without a reader of
/// the metrics.
///
/// # Errors
/// As [`run_with_metrics`].
pub async fn run(
    config: RunConfig,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<RunSummary, RuntimeError> {
    run_with_metrics(config, stop, Arc::new(Metrics::new())).await
}

/// [`run`], updating `metrics` as it goes (checkpoints, transactions, records, source lag);
/// a fatal fencing or lost transaction is counted before the error is returned.
///
/// # Errors
/// Every [`RuntimeError`]: an unsupported job, a state store that cannot restore, a timeout
/// budget the brokers refuse, data loss or a prefix clash found by the sink, a checkpoint
/// failure, a source that cannot read.
pub async fn run_with_metrics(
    config: RunConfig,
    stop: tokio::sync::watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> Result<RunSummary, RuntimeError> {
    let topology = Arc::new(JsonTopology::for_job(&config.job)?);
    run_topology(config, topology, stop, metrics).await
}

/// [`run_with_metrics`] of a job whose operators are `topology` (the typed builder's); the
/// job file part of `config.job` gives the source, the sink and the settings.
pub(crate) async fn run_topology(
    config: RunConfig,
    topology: Arc<dyn topology::Topology>,
    stop: tokio::sync::watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> Result<RunSummary, RuntimeError> {
    let result = match config.job.settings.mode {
        crate::engine::job::Mode::Cluster => {
            cluster::run(config, topology, stop, metrics.clone()).await
        }
        _ => local::run(config, topology, stop, metrics.clone()).await,
    };
    if let Err(e) = &result {
        observe::run_failed(&metrics, e);
    }
    result
}

/// What [`run`] needs besides the job file.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The checked job.
    pub job: Job,
    /// The broker connection (bootstrap servers and client settings).
    pub client: ClientConfig,
    /// Producer settings for the sink (no transactional.id: the sink names its ids).
    pub producer: ProducerConfig,
    /// Consumer settings for the source (read_committed is forced).
    pub consumer: ConsumerConfig,
    /// Which checkpoint to start from.
    pub restore: RestoreFrom,
    /// The state directory (the job's `state.dir` unless overridden).
    pub state_dir: PathBuf,
    /// The line formats a file source's `format` may name (a job reading Kafka needs none).
    pub formats: LineFormats,
}

/// What a run did, when it stopped cleanly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Input records processed.
    pub records_in: u64,
    /// Records written to the sink.
    pub records_out: u64,
    /// The latest durable checkpoint.
    pub last_checkpoint: u64,
}
