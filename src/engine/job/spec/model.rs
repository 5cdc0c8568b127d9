//! The checked job: what a job file (or a typed job's builder) describes, after every check.

use std::path::PathBuf;

use crate::engine::checkpoint;
use crate::engine::job::aggregate::WindowAggregate;
use crate::engine::job::filter::Predicate;
use crate::engine::job::project::{KeyBy, Projection};

/// A checked job file.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The job's name: letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// Where records come from.
    pub source: SourceSpec,
    /// The operators, in order.
    pub pipeline: Vec<Operator>,
    /// Where records go.
    pub sink: SinkSpec,
    /// Runtime settings.
    pub settings: Settings,
}

/// The source: Kafka topics (the default), or files (`type = "file"`).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSpec {
    /// Bootstrap brokers, `host:port`, of the job's Kafka end: the source's, or with a file
    /// source the Kafka sink's (`sink.brokers`).
    pub brokers: Vec<String>,
    /// Input topics (one or more; none with a file source).
    pub topics: Vec<String>,
    /// The file source (`type = "file"`), instead of topics.
    pub file: Option<FileSourceSpec>,
    /// `group.id`: the consumer group whose offsets are committed after each checkpoint, for
    /// monitoring tools only (positions live in the checkpoint). Default: the job's name.
    pub group: String,
    /// `partition.discovery.ms`: how often new partitions of the topics are looked for
    /// (default 10000; 0 turns discovery off).
    pub partition_discovery_ms: u64,
    /// Where to start when there is no checkpoint.
    pub start: StartPosition,
}

/// `[source] type = "file"`: a checkpointed reader of files of events, one a line (as the
/// replaying source of Flink's training exercises): events emitted up to `max_delay_s` late,
/// at `serving_speed_factor`.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSourceSpec {
    /// `path`: a file, or a directory whose files are read in name order (`.gz` decompressed).
    pub path: PathBuf,
    /// `format`: the name of the line format that makes a line a record, one of those the
    /// program running the job registers
    /// ([`LineFormats`](crate::engine::formats::LineFormats)); a name not registered stops the
    /// job at start.
    pub format: String,
    /// `serving_speed_factor`: event time runs this many times faster than wall time (600 =
    /// ten minutes per second); 0 (the default) = as fast as possible.
    pub serving_speed_factor: f64,
    /// `max_delay_s`: each event is emitted up to this many seconds late (default 0).
    pub max_delay_s: u64,
}

/// `[sink] type = "file"`: part files made final when the checkpoint that covers them is
/// durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSinkSpec {
    /// `path`: the output directory (this job's alone).
    pub path: PathBuf,
    /// `format`: `json` (JSON lines, the default) or `csv` (with `columns`).
    pub format: OutputFormat,
    /// `part.prefix`: part file names start with it (default `part`).
    pub prefix: String,
    /// `rolling.size.bytes`: a part file is closed at this size (default 128 MiB).
    pub roll_size_bytes: u64,
    /// `rolling.interval.ms`: ... or after this long open (default 60000).
    pub roll_interval_ms: u64,
}

/// The file sink's output format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputFormat {
    /// One JSON record per line.
    JsonLines,
    /// CSV with a header; `columns` are the record's fields, in order.
    Csv {
        /// The fields written, in order.
        columns: Vec<String>,
    },
}

/// Where a job without a checkpoint starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartPosition {
    /// The beginning of each partition (the default).
    #[default]
    Earliest,
    /// The end of each partition.
    Latest,
}

/// One built-in operator.
#[derive(Debug, Clone, PartialEq)]
pub enum Operator {
    /// Keep the records that match.
    Filter(Predicate),
    /// Keep and rename fields.
    Project(Projection),
    /// Key the records by a field. From here on the sink writes the key's
    /// [`Key::kafka_key`](crate::engine::job::project::Key::kafka_key) as the Kafka key; before any key_by,
    /// records keep their input's Kafka key.
    KeyBy(KeyBy),
    /// A `window` and the `aggregate` that follows it.
    WindowAggregate(WindowAggregate),
}

/// The sink: a Kafka topic (the default), or files (`type = "file"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkSpec {
    /// Output topic (empty with a file sink).
    pub topic: String,
    /// The file sink (`type = "file"`), instead of a topic.
    pub file: Option<FileSinkSpec>,
    /// Delivery guarantee.
    pub guarantee: DeliveryGuarantee,
    /// Transactional id prefix (`<prefix>-<task>-<slot>`); present when exactly-once.
    pub transactional_id_prefix: Option<String>,
}

/// `sink.delivery.guarantee`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryGuarantee {
    /// Transactions committed when a checkpoint is durable (the default).
    #[default]
    ExactlyOnce,
    /// Flush on each checkpoint, no transactions: duplicates after a restart.
    AtLeastOnce,
    /// Fire and forget.
    None,
}

/// How a job's processes run it (`settings.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// One process runs the whole job at `parallelism`, with checkpoints in its own state
    /// directory (the default).
    #[default]
    Local,
    /// Every `onceflow run` of the job file is a member of the job's consumer group
    /// (`source.group.id`): the group deals the tasks (input partitions, and the partitions of
    /// the job's repartition topic) among the members; each member commits its tasks' output,
    /// state changes (changelog topic) and input offsets in one transaction per
    /// `checkpoint.interval.ms` (docs/design/cluster-mode.md).
    Cluster,
}

/// `[settings]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `mode`: `local` (default) or `cluster`.
    pub mode: Mode,
    /// Tasks per operator (default 1).
    pub parallelism: u32,
    /// Key groups, fixed for the life of the job's state (default 128).
    pub key_groups: u32,
    /// `checkpoint.interval.ms` (default 1000).
    pub checkpoint_interval_ms: u64,
    /// `checkpoint.timeout.ms` (default 30000, as the coordinator's default: with the other defaults it fits the timeout budget).
    pub checkpoint_timeout_ms: u64,
    /// `transaction.timeout.ms` (default 300000).
    pub transaction_timeout_ms: u64,
    /// `checkpoint.min.pause.ms`: from the end of one checkpoint to the next trigger
    /// (default 0).
    pub checkpoint_min_pause_ms: u64,
    /// `checkpoint.tolerable.failures`: checkpoints in a row that may fail before the job does
    /// (default 3).
    pub checkpoint_tolerable_failures: u32,
    /// `checkpoint.commit.margin.ms`: commits stop this long before a transaction's deadline
    /// (default 10000).
    pub checkpoint_commit_margin_ms: u64,
    /// `checkpoint.retained`: durable checkpoints kept for `--from-checkpoint` (default 2,
    /// at least 1).
    pub checkpoint_retained: u64,
    /// `restart.allowance.ms`: how long a crashed job may take to come back (default 60000).
    pub restart_allowance_ms: u64,
    /// `state.dir` (default `state/<name>`).
    pub state_dir: PathBuf,
    /// `state.cache.bytes`: the state store's block cache, shared by its keyspaces (default
    /// fjall's, 32 MiB). With the memtables it bounds the memory of state larger than RAM.
    pub state_cache_bytes: Option<u64>,
    /// `state.memtable.bytes`: the most a keyspace of the state store buffers in memory
    /// before it writes a table to disk (default fjall's, 64 MiB). Fixed when the state
    /// directory is created: a restore keeps the size the keyspaces were created with.
    pub state_memtable_bytes: Option<u64>,
}

/// The least `state.cache.bytes` and `state.memtable.bytes` (1 MiB): below it fjall flushes
/// memtables constantly and caches nothing useful.
pub const MIN_STATE_MEMORY_BYTES: u64 = 1 << 20;

impl Settings {
    /// The checkpoint coordinator's settings for this job (the one mapping from job files).
    pub(crate) fn checkpoint(&self) -> checkpoint::Settings {
        checkpoint::Settings {
            interval_ms: self.checkpoint_interval_ms,
            min_pause_ms: self.checkpoint_min_pause_ms,
            checkpoint_timeout_ms: self.checkpoint_timeout_ms,
            max_consecutive_failures: self.checkpoint_tolerable_failures,
            transaction_timeout_ms: self.transaction_timeout_ms,
            commit_margin_ms: self.checkpoint_commit_margin_ms,
            retention: self.checkpoint_retained,
            restart_allowance_ms: self.restart_allowance_ms,
            ..checkpoint::Settings::default()
        }
    }
}

/// The most key groups a job may have (a key group is a u16 in state keys; Flink's limit).
pub const MAX_KEY_GROUPS: u32 = 32_768;
