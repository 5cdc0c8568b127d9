//! The job file: its serde shape (`Raw*`, `deny_unknown_fields` everywhere), the checks that
//! need more than one field, and the checked [`Job`].
//!
//! Line numbers come from toml's spans: a serde error carries the span of the offending key or
//! value, and each cross-field check holds a [`Spanned`] value. The dotted field name comes from
//! the span too: the file is parsed again into toml's spanned tree (`DeTable`) and the deepest
//! key whose key or value holds the span is named, its path joined with dots (array indices and
//! the `pipeline` prefix left out: the line already says which entry).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::engine::checkpoint::{self, required_transaction_timeout};
use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::aggregate::{AggFn, AggregateSpec, WindowAggregate};
use super::filter::{BoundingBox, CmpOp, Literal, Predicate};
use super::num::Num;
use super::path::FieldPath;
use super::project::{KeyBy, Projection};
use super::JobError;
use crate::engine::time::WindowKind;

// ---------------------------------------------------------------------------------------------
// The checked job.

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
    /// [`Key::kafka_key`](super::project::Key::kafka_key) as the Kafka key; before any key_by,
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

// ---------------------------------------------------------------------------------------------
// The file's shape.

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: Spanned<String>,
    source: Spanned<RawSource>,
    #[serde(default)]
    pipeline: Vec<Spanned<RawStage>>,
    sink: Spanned<RawSink>,
    #[serde(default)]
    settings: RawSettings,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    #[serde(rename = "type", default)]
    kind: EndKind,
    brokers: Option<Spanned<Brokers>>,
    topics: Option<Spanned<Vec<Spanned<String>>>>,
    path: Option<Spanned<String>>,
    format: Option<Spanned<String>>,
    serving_speed_factor: Option<Spanned<f64>>,
    max_delay_s: Option<Spanned<u64>>,
    group: Option<RawGroup>,
    partition: Option<RawPartition>,
    #[serde(default)]
    start: StartPosition,
}

/// `group.id`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    id: Spanned<String>,
}

/// `partition.discovery.ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPartition {
    discovery: RawMs,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawStage {
    Filter(Spanned<RawPred>),
    Project(Spanned<RawProject>),
    KeyBy(Spanned<FieldPath>),
    Window(Spanned<RawWindow>),
    Aggregate(Spanned<BTreeMap<String, Spanned<RawAgg>>>),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPred {
    field: Option<FieldPath>,
    op: Option<CmpOp>,
    value: Option<Spanned<toml::Value>>,
    and: Option<Spanned<Vec<Spanned<RawPred>>>>,
    or: Option<Spanned<Vec<Spanned<RawPred>>>>,
    not: Option<Box<Spanned<RawPred>>>,
    within: Option<Spanned<RawWithin>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWithin {
    lon: FieldPath,
    lat: FieldPath,
    #[serde(rename = "box")]
    bbox: Spanned<Vec<f64>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProject {
    keep: Option<Vec<FieldPath>>,
    #[serde(default)]
    rename: BTreeMap<String, String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    tumbling: Option<Spanned<Duration>>,
    sliding: Option<Spanned<RawSliding>>,
    time: FieldPath,
    out_of_orderness: Option<Duration>,
    allowed_lateness: Option<Duration>,
    late_topic: Option<Spanned<String>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSliding {
    size: Spanned<Duration>,
    slide: Spanned<Duration>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawAgg {
    Count,
    Sum(FieldPath),
    Min(FieldPath),
    Max(FieldPath),
    Avg(FieldPath),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSink {
    #[serde(rename = "type", default)]
    kind: EndKind,
    topic: Option<Spanned<String>>,
    brokers: Option<Spanned<Brokers>>,
    path: Option<Spanned<String>>,
    format: Option<Spanned<RawOutputFormat>>,
    columns: Option<Spanned<Vec<String>>>,
    part: Option<RawPart>,
    rolling: Option<RawRolling>,
    delivery: Option<RawDelivery>,
    transactional: Option<RawTransactional>,
}

/// `source.type` / `sink.type`.
#[derive(serde::Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum EndKind {
    #[default]
    Kafka,
    File,
}

#[derive(serde::Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum RawOutputFormat {
    Json,
    Csv,
}

/// `part.prefix`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPart {
    prefix: Spanned<String>,
}

/// `rolling.size.bytes`, `rolling.interval.ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRolling {
    size: Option<RawSizeBytes>,
    interval: Option<RawMs>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSizeBytes {
    bytes: Spanned<u64>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDelivery {
    guarantee: DeliveryGuarantee,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTransactional {
    id: RawTransactionalId,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTransactionalId {
    prefix: Spanned<String>,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    mode: Option<Spanned<String>>,
    parallelism: Option<Spanned<u32>>,
    key: Option<RawKeySettings>,
    checkpoint: Option<RawCheckpoint>,
    transaction: Option<RawTransaction>,
    restart: Option<RawRestart>,
    state: Option<RawState>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeySettings {
    groups: Spanned<u32>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheckpoint {
    interval: Option<RawMs>,
    timeout: Option<RawMs>,
    min: Option<RawMinPause>,
    tolerable: Option<RawTolerable>,
    commit: Option<RawCommit>,
    retained: Option<Spanned<u64>>,
}

/// `checkpoint.min.pause.ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMinPause {
    pause: RawMs,
}

/// `checkpoint.tolerable.failures`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTolerable {
    failures: Spanned<u32>,
}

/// `checkpoint.commit.margin.ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommit {
    margin: RawMs,
}

/// `restart.allowance.ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRestart {
    allowance: RawMs,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTransaction {
    timeout: RawMs,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMs {
    ms: Spanned<u64>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawState {
    dir: Option<Spanned<String>>,
    cache: Option<RawBytes>,
    memtable: Option<RawBytes>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBytes {
    bytes: Spanned<u64>,
}

/// `"127.0.0.1:9092"`, `"a:9092,b:9092"` or `["a:9092", "b:9092"]`.
struct Brokers(Vec<String>);

impl<'de> Deserialize<'de> for Brokers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Brokers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string like \"host:9092\" or \"a:9092,b:9092\", or an array of them")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Brokers, E> {
                Ok(Brokers(
                    v.split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect(),
                ))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Brokers, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.extend(
                        s.split(',')
                            .map(|s| s.trim().to_owned())
                            .filter(|s| !s.is_empty()),
                    );
                }
                Ok(Brokers(out))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A duration written `"250ms"`, `"30s"`, `"15m"`, `"1h"` or `"1d"`; held in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Duration(i64);

const DURATION_HINT: &str = "a duration like \"1h\", \"15m\", \"30s\" or \"250ms\"";

fn parse_duration(text: &str) -> Option<i64> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let n: i64 = n.parse().ok()?;
    let scale: i64 = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(DURATION_HINT)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                parse_duration(v)
                    .map(Duration)
                    .ok_or_else(|| E::custom(format!("expected {DURATION_HINT}, got {v:?}")))
            }
        }
        deserializer.deserialize_str(V)
    }
}

// ---------------------------------------------------------------------------------------------
// Errors with line and field.

/// Turns spans into `file:line: field: message`.
struct Locator<'a> {
    file: &'a str,
    text: &'a str,
    tree: Option<Spanned<DeTable<'a>>>,
}

impl<'a> Locator<'a> {
    fn new(file: &'a str, text: &'a str) -> Self {
        Self {
            file,
            text,
            tree: DeTable::parse(text).ok(),
        }
    }

    fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    }

    /// The dotted path of the deepest key whose key or value holds `offset`.
    fn field_at(&self, offset: usize) -> String {
        let Some(tree) = &self.tree else {
            return String::new();
        };
        let mut path = Vec::new();
        find_in_table(tree.get_ref(), offset, &mut path);
        if path.first().map(String::as_str) == Some("pipeline") {
            path.remove(0);
        }
        path.join(".")
    }

    /// An error at `span`, naming `field` (or the key found at the span when `None`).
    fn at(&self, span: &Range<usize>, field: Option<&str>, message: impl Into<String>) -> JobError {
        JobError::Invalid {
            file: self.file.to_owned(),
            line: self.line(span.start),
            field: field.map_or_else(|| self.field_at(span.start), str::to_owned),
            message: message.into(),
        }
    }

    /// A toml/serde error, reworded as "expected X, got Y" where it can be.
    fn toml_error(&self, e: &toml::de::Error) -> JobError {
        let span = e.span().unwrap_or(0..0);
        if self.tree.is_none() {
            return JobError::Syntax {
                file: self.file.to_owned(),
                line: self.line(span.start),
                message: one_line(e.message()),
            };
        }
        let mut field = self.field_at(span.start);
        let msg = one_line(e.message());
        let msg = msg.as_str();
        let message = if let Some(rest) = msg
            .strip_prefix("invalid type: ")
            .or_else(|| msg.strip_prefix("invalid value: "))
        {
            match rest.split_once(", expected ") {
                Some((got, expected)) => {
                    // serde names integer types by their Rust names.
                    let expected = match expected {
                        "u32" | "u64" | "i64" => "a whole number",
                        // A `*.ms` key written without its `.ms`.
                        "struct RawMs" => "milliseconds written as <name>.ms = <whole number>",
                        other => other,
                    };
                    format!("expected {expected}, got {got}")
                }
                None => msg.to_owned(),
            }
        } else if let Some(name) = msg
            .strip_prefix("missing field `")
            .and_then(|r| r.strip_suffix('`'))
        {
            field = join(&field, name);
            "missing; this field is required".to_owned()
        } else if msg.starts_with("wanted exactly 1 element") {
            field = "pipeline".to_owned();
            "each [[pipeline]] entry holds exactly one operator: filter, project, key_by, \
             window or aggregate"
                .to_owned()
        } else {
            msg.to_owned()
        };
        JobError::Invalid {
            file: self.file.to_owned(),
            line: self.line(span.start),
            field,
            message,
        }
    }
}

/// Parser messages may span lines; a user's error is one.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_owned()
    } else {
        format!("{a}.{b}")
    }
}

fn holds(span: &Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || (span.is_empty() && span.start == offset)
}

fn find_in_table(table: &DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    for (key, value) in table {
        path.push(key.get_ref().to_string());
        if find_in_value(value.get_ref(), offset, path)
            || holds(&key.span(), offset)
            || holds(&value.span(), offset)
        {
            return true;
        }
        path.pop();
    }
    false
}

fn find_in_value(value: &DeValue<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    match value {
        DeValue::Table(t) => find_in_table(t, offset, path),
        DeValue::Array(items) => items
            .iter()
            .any(|item| find_in_value(item.get_ref(), offset, path) || holds(&item.span(), offset)),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Parse and check.

impl Job {
    /// Reads and checks a job file.
    ///
    /// # Errors
    /// [`JobError::Read`] when the file cannot be read; otherwise as [`Job::parse`].
    pub fn load(path: &Path) -> Result<Job, JobError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| JobError::Read {
            file: file.clone(),
            source,
        })?;
        Job::parse(&file, &text)
    }

    /// Parses and checks the text of a job file; `file` is only used in messages.
    ///
    /// # Errors
    /// [`JobError::Syntax`] when the text is not TOML, [`JobError::Invalid`] when it is not a
    /// valid job: each names the line (and the field) to change.
    pub fn parse(file: &str, text: &str) -> Result<Job, JobError> {
        let loc = Locator::new(file, text);
        let raw: RawJob = toml::from_str(text).map_err(|e| loc.toml_error(&e))?;
        check(&loc, raw)
    }
}

fn check(loc: &Locator<'_>, raw: RawJob) -> Result<Job, JobError> {
    let name = raw.name.get_ref().clone();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(loc.at(
            &raw.name.span(),
            Some("name"),
            format!("{name:?} is not a job name: use letters, digits, '.', '_' and '-'"),
        ));
    }
    let mut raw_sink = raw.sink;
    let sink_span = raw_sink.span();
    let sink_brokers = raw_sink.get_mut().brokers.take();
    let source = check_source(loc, &name, raw.source, sink_brokers)?;
    let pipeline = check_pipeline(loc, raw.pipeline)?;
    let sink = check_sink(loc, raw_sink)?;
    check_ends(loc, &source, &pipeline, &sink, &sink_span)?;
    let mode_span = raw.settings.mode.as_ref().map_or(0..0, |m| m.span());
    let settings = check_settings(loc, &name, sink.guarantee, raw.settings)?;
    if settings.mode == Mode::Cluster {
        let refused = if source.file.is_some() || sink.file.is_some() {
            Some("mode = \"cluster\" reads and writes Kafka only: a file source or sink runs with mode = \"local\"")
        } else if source.start == StartPosition::Latest {
            Some("mode = \"cluster\" starts a partition without committed offsets at its beginning: remove source.start = \"latest\" (or run with mode = \"local\")")
        } else {
            None
        };
        if let Some(why) = refused {
            return Err(loc.at(&mode_span, Some("settings.mode"), why));
        }
    }
    Ok(Job {
        name,
        source,
        pipeline,
        sink,
        settings,
    })
}

fn check_source(
    loc: &Locator<'_>,
    name: &str,
    raw: Spanned<RawSource>,
    sink_brokers: Option<Spanned<Brokers>>,
) -> Result<SourceSpec, JobError> {
    let span = raw.span();
    let raw = raw.into_inner();
    let file = match raw.kind {
        EndKind::File => Some(check_file_source(loc, &span, &raw)?),
        EndKind::Kafka => {
            refuse_file_source_fields(loc, &raw)?;
            None
        }
    };
    let (brokers_field, brokers) = match (&file, raw.brokers, sink_brokers) {
        (None, Some(b), _) => ("source.brokers", b),
        (None, None, _) => {
            return Err(loc.at(
                &span,
                Some("source.brokers"),
                "no broker given; write e.g. brokers = \"localhost:9092\"",
            ))
        }
        (Some(_), _, Some(b)) => ("sink.brokers", b),
        (Some(_), Some(b), None) => ("source.brokers", b),
        (Some(_), None, None) => (
            "sink.brokers",
            Spanned::new(span.clone(), Brokers(Vec::new())),
        ),
    };
    let brokers_span = brokers.span();
    let brokers = brokers.into_inner().0;
    if brokers.is_empty() && file.is_none() {
        return Err(loc.at(
            &brokers_span,
            Some(brokers_field),
            "no broker given; write e.g. brokers = \"localhost:9092\"",
        ));
    }
    let topics = check_topics(loc, &span, raw.topics, file.is_some())?;
    let group = match raw.group.map(|g| g.id) {
        Some(g) if g.get_ref().trim().is_empty() => {
            return Err(loc.at(
                &g.span(),
                Some("source.group.id"),
                "the group name is empty",
            ));
        }
        Some(g) => g.into_inner(),
        None => name.to_owned(),
    };
    Ok(SourceSpec {
        brokers,
        topics,
        file,
        group,
        // 10 s: one Metadata request per job, and a new partition's records wait at most that.
        partition_discovery_ms: raw.partition.map_or(10_000, |p| *p.discovery.ms.get_ref()),
        start: raw.start,
    })
}

/// A Kafka source given what only a file source has.
fn refuse_file_source_fields(loc: &Locator<'_>, raw: &RawSource) -> Result<(), JobError> {
    for (given, field) in [
        (raw.path.as_ref().map(|p| p.span()), "source.path"),
        (raw.format.as_ref().map(|p| p.span()), "source.format"),
        (
            raw.serving_speed_factor.as_ref().map(|p| p.span()),
            "source.serving_speed_factor",
        ),
        (
            raw.max_delay_s.as_ref().map(|p| p.span()),
            "source.max_delay_s",
        ),
    ] {
        if let Some(at) = given {
            return Err(loc.at(
                &at,
                Some(field),
                "only a file source has it: add type = \"file\" to [source], or remove it",
            ));
        }
    }
    Ok(())
}

/// `source.topics`: at least one, none empty, for a Kafka source; none for a file source.
fn check_topics(
    loc: &Locator<'_>,
    span: &Range<usize>,
    given: Option<Spanned<Vec<Spanned<String>>>>,
    file: bool,
) -> Result<Vec<String>, JobError> {
    let mut topics = Vec::new();
    match (given, file) {
        (Some(given), true) => return Err(loc.at(
            &given.span(),
            Some("source.topics"),
            "a file source reads source.path, not topics: remove topics (or the type = \"file\")",
        )),
        (None, true) => {}
        (None, false) => {
            return Err(loc.at(
                span,
                Some("source.topics"),
                "no topic given; write e.g. topics = [\"rides\"]",
            ))
        }
        (Some(given), false) => {
            let topics_span = given.span();
            for t in given.into_inner() {
                if t.get_ref().trim().is_empty() {
                    return Err(loc.at(&t.span(), Some("source.topics"), "a topic name is empty"));
                }
                topics.push(t.into_inner());
            }
            if topics.is_empty() {
                return Err(loc.at(
                    &topics_span,
                    Some("source.topics"),
                    "no topic given; write e.g. topics = [\"rides\"]",
                ));
            }
        }
    }
    Ok(topics)
}

/// `[source] type = "file"`: path and format (both required; whether the format's name is
/// registered is checked at start, by the runtime), the serving speed and the delay.
fn check_file_source(
    loc: &Locator<'_>,
    span: &Range<usize>,
    raw: &RawSource,
) -> Result<FileSourceSpec, JobError> {
    let Some(path) = raw.path.as_ref() else {
        return Err(loc.at(
            span,
            Some("source.path"),
            "a file source needs path = \"<a file or a directory of files>\"",
        ));
    };
    if path.get_ref().trim().is_empty() {
        return Err(loc.at(&path.span(), Some("source.path"), "the path is empty"));
    }
    let Some(format) = raw.format.as_ref() else {
        return Err(loc.at(
            span,
            Some("source.format"),
            "a file source needs format = \"<name>\": the line format of its files, as the \
             program that runs the job registers it (an unknown name is refused at start, with \
             the registered ones listed)",
        ));
    };
    if format.get_ref().trim().is_empty() {
        return Err(loc.at(
            &format.span(),
            Some("source.format"),
            "the format is empty: name the line format of the files",
        ));
    }
    let factor = raw
        .serving_speed_factor
        .as_ref()
        .map_or(0.0, |f| *f.get_ref());
    if !factor.is_finite() || factor < 0.0 {
        let at = raw
            .serving_speed_factor
            .as_ref()
            .map_or(span.clone(), |f| f.span());
        return Err(loc.at(
            &at,
            Some("source.serving_speed_factor"),
            format!("{factor} is not a speed-up: give 0 (as fast as possible) or a positive number, e.g. 600"),
        ));
    }
    Ok(FileSourceSpec {
        path: PathBuf::from(path.get_ref()),
        format: format.get_ref().clone(),
        serving_speed_factor: factor,
        max_delay_s: raw.max_delay_s.as_ref().map_or(0, |d| *d.get_ref()),
    })
}

/// Order rules: at most one `key_by`, `window` and `aggregate`; `window` needs a `key_by`
/// before it and an `aggregate` right after it; `aggregate` needs the `window` right before it.
/// `filter` and `project` may go anywhere (after the aggregate they see its output records).
fn check_pipeline(
    loc: &Locator<'_>,
    stages: Vec<Spanned<RawStage>>,
) -> Result<Vec<Operator>, JobError> {
    let mut out = Vec::new();
    let mut key: Option<FieldPath> = None;
    let mut pending_window: Option<(Range<usize>, RawWindow)> = None;
    let mut aggregated = false;
    for stage in stages {
        let stage = stage.into_inner();
        if let (Some((span, _)), false) = (&pending_window, matches!(stage, RawStage::Aggregate(_)))
        {
            return Err(loc.at(
                span,
                Some("window"),
                "a window must be followed directly by an aggregate; add [[pipeline]] \
                 aggregate.count = \"count\" (or the functions you want) after it",
            ));
        }
        match stage {
            RawStage::Filter(p) => out.push(Operator::Filter(check_pred(loc, p)?)),
            RawStage::Project(p) => {
                let span = p.span();
                let p = p.into_inner();
                let proj = Projection::new(p.keep, p.rename)
                    .map_err(|e| loc.at(&span, Some("project"), e.to_string()))?;
                out.push(Operator::Project(proj));
            }
            RawStage::KeyBy(field) => {
                if key.is_some() {
                    return Err(loc.at(
                        &field.span(),
                        Some("key_by"),
                        "a job has at most one key_by",
                    ));
                }
                let field = field.into_inner();
                key = Some(field.clone());
                out.push(Operator::KeyBy(KeyBy { field }));
            }
            RawStage::Window(w) => {
                let span = w.span();
                if key.is_none() {
                    return Err(loc.at(
                        &span,
                        Some("window"),
                        "a window needs a key_by before it; add [[pipeline]] key_by = \"<field>\"",
                    ));
                }
                if aggregated {
                    return Err(loc.at(&span, Some("window"), "a job has at most one window"));
                }
                pending_window = Some((span, w.into_inner()));
            }
            RawStage::Aggregate(a) => {
                let Some((wspan, window)) = pending_window.take() else {
                    return Err(loc.at(
                        &a.span(),
                        Some("aggregate"),
                        "an aggregate needs a window right before it (and a key_by before that)",
                    ));
                };
                let key_name = key.as_ref().map_or("key", FieldPath::last).to_owned();
                out.push(Operator::WindowAggregate(check_window(
                    loc, wspan, window, a, key_name,
                )?));
                aggregated = true;
            }
        }
    }
    if let Some((span, _)) = pending_window {
        return Err(loc.at(
            &span,
            Some("window"),
            "a window must be followed directly by an aggregate; add [[pipeline]] \
             aggregate.count = \"count\" (or the functions you want) after it",
        ));
    }
    Ok(out)
}

/// A filter predicate, checked. Long on purpose: one branch per form the job file allows
/// (comparison, `and`, `or`, `not`, `within`), in the order the docs list them, each naming
/// its own field and line; it reads as the table of filter forms. Split it when a form grows.
fn check_pred(loc: &Locator<'_>, raw: Spanned<RawPred>) -> Result<Predicate, JobError> {
    let span = raw.span();
    let p = raw.into_inner();
    let forms = [
        p.field.is_some() || p.op.is_some() || p.value.is_some(),
        p.and.is_some(),
        p.or.is_some(),
        p.not.is_some(),
        p.within.is_some(),
    ];
    if forms.iter().filter(|f| **f).count() != 1 {
        return Err(loc.at(
            &span,
            Some("filter"),
            "give exactly one of: field + op + value, and = [...], or = [...], not = {...}, \
             within = {...}",
        ));
    }
    if let Some((is_and, list)) = p.and.map(|l| (true, l)).or(p.or.map(|l| (false, l))) {
        let lspan = list.span();
        let items = list.into_inner();
        let name = if is_and { "filter.and" } else { "filter.or" };
        if items.is_empty() {
            return Err(loc.at(
                &lspan,
                Some(name),
                "an empty list; give at least one condition",
            ));
        }
        let items = items
            .into_iter()
            .map(|i| check_pred(loc, i))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(if is_and {
            Predicate::And(items)
        } else {
            Predicate::Or(items)
        });
    }
    if let Some(inner) = p.not {
        return Ok(Predicate::Not(Box::new(check_pred(loc, *inner)?)));
    }
    if let Some(w) = p.within {
        let w = w.into_inner();
        let bspan = w.bbox.span();
        let b = w.bbox.into_inner();
        let hint = "expected box = [west, south, east, north] in degrees, e.g. \
                    [-74.05, 40.50, -73.70, 41.00]";
        let [west, south, east, north] = b[..] else {
            return Err(loc.at(
                &bspan,
                Some("filter.within.box"),
                format!("{hint}, got {} numbers", b.len()),
            ));
        };
        if !(-180.0..=180.0).contains(&west)
            || !(-180.0..=180.0).contains(&east)
            || !(-90.0..=90.0).contains(&south)
            || !(-90.0..=90.0).contains(&north)
        {
            return Err(loc.at(
                &bspan,
                Some("filter.within.box"),
                format!("{hint}; longitudes lie in -180..180 and latitudes in -90..90"),
            ));
        }
        if west > east || south > north {
            return Err(loc.at(&bspan, Some("filter.within.box"), format!("{hint}; west must be ≤ east and south ≤ north (a box across the antimeridian is not supported)")));
        }
        return Ok(Predicate::Within(BoundingBox {
            lon: w.lon,
            lat: w.lat,
            west,
            south,
            east,
            north,
        }));
    }
    let (Some(field), Some(op), Some(value)) = (p.field, p.op, p.value) else {
        return Err(loc.at(
            &span,
            Some("filter"),
            "a comparison needs all of field, op and value, e.g. \
             { field = \"passengers\", op = \">=\", value = 1 }",
        ));
    };
    let vspan = value.span();
    let literal = match value.into_inner() {
        toml::Value::Integer(i) => Literal::Number(Num::Int(i128::from(i))),
        toml::Value::Float(f) if f.is_finite() => Literal::Number(Num::Float(f)),
        toml::Value::String(s) => Literal::String(s),
        toml::Value::Boolean(b) => Literal::Bool(b),
        other => {
            return Err(loc.at(
                &vspan,
                Some("filter.value"),
                format!(
                    "expected a number, a string or a boolean, got {} {other}",
                    other.type_str()
                ),
            ));
        }
    };
    if op.is_ordering() && matches!(literal, Literal::Bool(_)) {
        return Err(loc.at(
            &vspan,
            Some("filter.value"),
            format!(
                "`{}` orders values; a boolean only takes = or !=",
                op.as_str()
            ),
        ));
    }
    Ok(Predicate::Compare {
        field,
        op,
        value: literal,
    })
}

fn check_window(
    loc: &Locator<'_>,
    wspan: Range<usize>,
    w: RawWindow,
    agg: Spanned<BTreeMap<String, Spanned<RawAgg>>>,
    key_name: String,
) -> Result<WindowAggregate, JobError> {
    let kind = check_window_kind(loc, wspan, w.tumbling, w.sliding)?;
    let late_topic = match w.late_topic {
        Some(t) if t.get_ref().trim().is_empty() => {
            return Err(loc.at(
                &t.span(),
                Some("window.late_topic"),
                "the topic name is empty",
            ));
        }
        t => t.map(Spanned::into_inner),
    };
    let outputs = check_aggregate(loc, agg, &key_name)?;
    Ok(WindowAggregate {
        kind,
        time: w.time,
        out_of_orderness: w.out_of_orderness.map_or(0, |d| d.0),
        allowed_lateness: w.allowed_lateness.map_or(0, |d| d.0),
        late_topic,
        key_name,
        aggregate: AggregateSpec { outputs },
    })
}

/// `window.tumbling` or `window.sliding`: exactly one, with sizes above 0 and a slide of at
/// most the size.
fn check_window_kind(
    loc: &Locator<'_>,
    wspan: Range<usize>,
    tumbling: Option<Spanned<Duration>>,
    sliding: Option<Spanned<RawSliding>>,
) -> Result<WindowKind, JobError> {
    Ok(match (tumbling, sliding) {
        (Some(size), None) => {
            if size.get_ref().0 <= 0 {
                return Err(loc.at(
                    &size.span(),
                    Some("window.tumbling"),
                    "the size must be more than 0",
                ));
            }
            WindowKind::Tumbling {
                size: size.get_ref().0,
            }
        }
        (None, Some(s)) => {
            let s = s.into_inner();
            let (size, slide) = (s.size.get_ref().0, s.slide.get_ref().0);
            if size <= 0 {
                return Err(loc.at(
                    &s.size.span(),
                    Some("window.sliding.size"),
                    "the size must be more than 0",
                ));
            }
            if slide <= 0 || slide > size {
                return Err(loc.at(
                    &s.slide.span(),
                    Some("window.sliding.slide"),
                    "the slide must be more than 0 and at most the size",
                ));
            }
            WindowKind::Sliding { size, slide }
        }
        _ => {
            return Err(loc.at(
                &wspan,
                Some("window"),
                "give exactly one of tumbling = \"1h\" or sliding = { size = \"1h\", slide = \"5m\" }",
            ));
        }
    })
}

/// `aggregate.<name> = <function>`: at least one, none named as the key or the window's
/// bounds in the output record.
fn check_aggregate(
    loc: &Locator<'_>,
    agg: Spanned<BTreeMap<String, Spanned<RawAgg>>>,
    key_name: &str,
) -> Result<Vec<(String, AggFn)>, JobError> {
    let aspan = agg.span();
    let agg = agg.into_inner();
    if agg.is_empty() {
        return Err(loc.at(
            &aspan,
            Some("aggregate"),
            "no function; write e.g. aggregate.rides = \"count\"",
        ));
    }
    let mut outputs = Vec::new();
    for (name, f) in agg {
        if name == key_name || name == "window_start" || name == "window_end" {
            return Err(loc.at(
                &f.span(),
                Some(&format!("aggregate.{name}")),
                format!(
                    "`{name}` is taken in the output record (the key `{key_name}`, window_start, \
                     window_end); choose another name"
                ),
            ));
        }
        let f = match f.into_inner() {
            RawAgg::Count => AggFn::Count,
            RawAgg::Sum(p) => AggFn::Sum(p),
            RawAgg::Min(p) => AggFn::Min(p),
            RawAgg::Max(p) => AggFn::Max(p),
            RawAgg::Avg(p) => AggFn::Avg(p),
        };
        outputs.push((name, f));
    }
    Ok(outputs)
}

fn check_sink(loc: &Locator<'_>, raw: Spanned<RawSink>) -> Result<SinkSpec, JobError> {
    let span = raw.span();
    let mut raw = raw.into_inner();
    let file = match raw.kind {
        EndKind::File => Some(check_file_sink(loc, &span, &mut raw)?),
        EndKind::Kafka => {
            refuse_file_fields(loc, &raw)?;
            None
        }
    };
    let topic = match (raw.topic.take(), &file) {
        (Some(t), Some(_)) => return Err(loc.at(
            &t.span(),
            Some("sink.topic"),
            "a file sink writes to sink.path, not a topic: remove topic (or the type = \"file\")",
        )),
        (None, Some(_)) => String::new(),
        (None, None) => {
            return Err(loc.at(
                &span,
                Some("sink.topic"),
                "no output topic given; write e.g. topic = \"rides-clean\"",
            ))
        }
        (Some(t), None) => {
            if t.get_ref().trim().is_empty() {
                return Err(loc.at(&t.span(), Some("sink.topic"), "the topic name is empty"));
            }
            t.into_inner()
        }
    };
    let guarantee = raw.delivery.map(|d| d.guarantee).unwrap_or_default();
    let prefix_span = raw.transactional.as_ref().map(|t| t.id.prefix.span());
    let prefix = check_prefix(loc, raw.transactional)?;
    if file.is_some() {
        if let Some(at) = &prefix_span {
            return Err(loc.at(
                at,
                Some("sink.transactional.id.prefix"),
                "a file sink has no transactions (its files are made final at each checkpoint): remove it",
            ));
        }
    } else if guarantee == DeliveryGuarantee::ExactlyOnce && prefix.is_none() {
        return Err(loc.at(
            &span,
            Some("sink.transactional.id.prefix"),
            "required for exactly-once: add transactional.id.prefix = \"<a name unique to this \
             job on this cluster>\" to [sink] (or set delivery.guarantee = \"at-least-once\")",
        ));
    }
    Ok(SinkSpec {
        topic,
        file,
        guarantee,
        transactional_id_prefix: prefix,
    })
}

/// A Kafka sink given what only a file sink has.
fn refuse_file_fields(loc: &Locator<'_>, raw: &RawSink) -> Result<(), JobError> {
    let only_files = [
        (raw.path.as_ref().map(|p| p.span()), "sink.path"),
        (raw.format.as_ref().map(|p| p.span()), "sink.format"),
        (raw.columns.as_ref().map(|p| p.span()), "sink.columns"),
        (
            raw.part.as_ref().map(|p| p.prefix.span()),
            "sink.part.prefix",
        ),
    ];
    for (given, field) in only_files {
        if let Some(at) = given {
            return Err(loc.at(
                &at,
                Some(field),
                "only a file sink has it: add type = \"file\" to [sink], or remove it",
            ));
        }
    }
    Ok(())
}

/// `sink.transactional.id.prefix`: a non-empty name without spaces, when given.
fn check_prefix(
    loc: &Locator<'_>,
    transactional: Option<RawTransactional>,
) -> Result<Option<String>, JobError> {
    Ok(match transactional {
        Some(t) => {
            let p = t.id.prefix;
            let text = p.get_ref();
            if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(loc.at(
                    &p.span(),
                    Some("sink.transactional.id.prefix"),
                    format!(
                        "{text:?} is not a usable prefix: give a non-empty name without spaces"
                    ),
                ));
            }
            Some(p.into_inner())
        }
        None => None,
    })
}

/// `[sink] type = "file"`: path (required), the format, the part prefix and the rolling.
fn check_file_sink(
    loc: &Locator<'_>,
    span: &Range<usize>,
    raw: &mut RawSink,
) -> Result<FileSinkSpec, JobError> {
    let Some(path) = raw.path.as_ref() else {
        return Err(loc.at(
            span,
            Some("sink.path"),
            "a file sink needs path = \"<a directory for this job's files>\"",
        ));
    };
    if path.get_ref().trim().is_empty() {
        return Err(loc.at(&path.span(), Some("sink.path"), "the path is empty"));
    }
    let format = check_output_format(
        loc,
        span,
        raw.format.as_ref().map(|f| *f.get_ref()),
        raw.columns.take(),
    )?;
    let prefix = match raw.part.as_ref() {
        Some(p) => {
            let text = p.prefix.get_ref();
            if text.is_empty()
                || !text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(loc.at(
                    &p.prefix.span(),
                    Some("sink.part.prefix"),
                    format!(
                        "{text:?} is not a file name prefix: use letters, digits, '.', '_' and '-'"
                    ),
                ));
            }
            text.clone()
        }
        None => "part".to_owned(),
    };
    let (roll_size_bytes, roll_interval_ms) = check_rolling(loc, span, raw.rolling.as_ref())?;
    Ok(FileSinkSpec {
        path: PathBuf::from(path.get_ref()),
        format,
        prefix,
        roll_size_bytes,
        roll_interval_ms,
    })
}

/// `sink.format` (JSON lines by default) and, for CSV, its `columns`.
fn check_output_format(
    loc: &Locator<'_>,
    span: &Range<usize>,
    format: Option<RawOutputFormat>,
    columns: Option<Spanned<Vec<String>>>,
) -> Result<OutputFormat, JobError> {
    Ok(match (format, columns) {
        (None | Some(RawOutputFormat::Json), None) => OutputFormat::JsonLines,
        (None | Some(RawOutputFormat::Json), Some(c)) => {
            return Err(loc.at(
                &c.span(),
                Some("sink.columns"),
                "columns are for format = \"csv\": set the format, or remove columns",
            ))
        }
        (Some(RawOutputFormat::Csv), Some(c)) if !c.get_ref().is_empty() => OutputFormat::Csv {
            columns: c.into_inner(),
        },
        (Some(RawOutputFormat::Csv), _) => return Err(loc.at(
            span,
            Some("sink.columns"),
            "format = \"csv\" needs the fields to write: columns = [\"ride_id\", \"event_time\"]",
        )),
    })
}

/// `sink.rolling.size.bytes` (128 MiB) and `sink.rolling.interval.ms` (60 s): positive.
fn check_rolling(
    loc: &Locator<'_>,
    span: &Range<usize>,
    rolling: Option<&RawRolling>,
) -> Result<(u64, u64), JobError> {
    let roll_size_bytes = rolling
        .and_then(|r| r.size.as_ref())
        .map_or(128 << 20, |s| *s.bytes.get_ref());
    let roll_interval_ms = rolling
        .and_then(|r| r.interval.as_ref())
        .map_or(60_000, |i| *i.ms.get_ref());
    for (value, field, at) in [
        (
            roll_size_bytes,
            "sink.rolling.size.bytes",
            rolling
                .and_then(|r| r.size.as_ref())
                .map(|s| s.bytes.span()),
        ),
        (
            roll_interval_ms,
            "sink.rolling.interval.ms",
            rolling
                .and_then(|r| r.interval.as_ref())
                .map(|i| i.ms.span()),
        ),
    ] {
        if value == 0 {
            return Err(loc.at(
                &at.unwrap_or(span.clone()),
                Some(field),
                "0 would close a part file at every record: give a positive number",
            ));
        }
    }
    Ok((roll_size_bytes, roll_interval_ms))
}

/// What the two ends allow together: Kafka at one end at least (a file source's job writes
/// to Kafka with sink.brokers; a file sink's job reads topics), and a window's late topic only
/// with a Kafka sink.
fn check_ends(
    loc: &Locator<'_>,
    source: &SourceSpec,
    pipeline: &[Operator],
    sink: &SinkSpec,
    sink_span: &Range<usize>,
) -> Result<(), JobError> {
    match (&source.file, &sink.file) {
        (Some(_), Some(_)) => {
            return Err(loc.at(
                sink_span,
                Some("sink.type"),
                "a file source with a file sink is not supported yet: one end must be Kafka",
            ))
        }
        (Some(_), None) if source.brokers.is_empty() => {
            return Err(loc.at(
                sink_span,
                Some("sink.brokers"),
                "the Kafka sink of a file source's job needs its brokers: add brokers = \"localhost:9092\" to [sink]",
            ))
        }
        _ => {}
    }
    let late = pipeline
        .iter()
        .any(|op| matches!(op, Operator::WindowAggregate(w) if w.late_topic.is_some()));
    if late && sink.file.is_some() {
        return Err(loc.at(
            sink_span,
            Some("sink.type"),
            "window.late_topic writes late records to Kafka, and this job's sink is files: remove late_topic",
        ));
    }
    Ok(())
}

fn check_settings(
    loc: &Locator<'_>,
    name: &str,
    guarantee: DeliveryGuarantee,
    mut raw: RawSettings,
) -> Result<Settings, JobError> {
    let (parallelism, key_groups) = check_scale(loc, &raw)?;
    let ms = |m: Option<&RawMs>, default: u64| m.map_or(default, |m| *m.ms.get_ref());
    let ckpt = raw.checkpoint.as_ref();
    let interval = ms(ckpt.and_then(|c| c.interval.as_ref()), 1_000);
    let timeout = ms(ckpt.and_then(|c| c.timeout.as_ref()), 30_000);
    for (value, m, field) in [
        (
            interval,
            ckpt.and_then(|c| c.interval.as_ref()),
            "settings.checkpoint.interval.ms",
        ),
        (
            timeout,
            ckpt.and_then(|c| c.timeout.as_ref()),
            "settings.checkpoint.timeout.ms",
        ),
    ] {
        if let (0, Some(m)) = (value, m) {
            return Err(loc.at(&m.ms.span(), Some(field), "must be at least 1"));
        }
    }
    let tuning = check_tuning(loc, ckpt, raw.restart.as_ref())?;
    let (state_dir, state_cache_bytes, state_memtable_bytes) =
        check_state(loc, name, raw.state.take())?;
    let mode = check_mode(loc, &raw)?;
    let settings = Settings {
        mode,
        parallelism,
        key_groups,
        checkpoint_interval_ms: interval,
        checkpoint_timeout_ms: timeout,
        transaction_timeout_ms: ms(raw.transaction.as_ref().map(|t| &t.timeout), 300_000),
        checkpoint_min_pause_ms: tuning.min_pause_ms,
        checkpoint_tolerable_failures: tuning.tolerable_failures,
        checkpoint_commit_margin_ms: tuning.commit_margin_ms,
        checkpoint_retained: tuning.retained,
        restart_allowance_ms: tuning.restart_allowance_ms,
        state_dir,
        state_cache_bytes,
        state_memtable_bytes,
    };
    check_transaction_timeout(loc, &raw, &settings, guarantee)?;
    Ok(settings)
}

/// `settings.mode`: `local` (the default) or `cluster`.
fn check_mode(loc: &Locator<'_>, raw: &RawSettings) -> Result<Mode, JobError> {
    match raw.mode.as_ref().map(|m| (m.get_ref().as_str(), m.span())) {
        None | Some(("local", _)) => Ok(Mode::Local),
        Some(("cluster", _)) => Ok(Mode::Cluster),
        Some((other, span)) => Err(loc.at(
            &span,
            Some("settings.mode"),
            format!("unknown mode {other:?}: use \"local\" (one process) or \"cluster\" (several processes in one consumer group)"),
        )),
    }
}

/// `transaction.timeout.ms` against what the job needs: in cluster mode (exactly-once only)
/// an interval and its commit; in local mode with exactly-once the one budget rule.
fn check_transaction_timeout(
    loc: &Locator<'_>,
    raw: &RawSettings,
    settings: &Settings,
    guarantee: DeliveryGuarantee,
) -> Result<(), JobError> {
    let interval = settings.checkpoint_interval_ms;
    let ckpt = raw.checkpoint.as_ref();
    if settings.mode == Mode::Cluster {
        // A member's transaction spans one commit interval; a member that dies holds its
        // tasks' new owner back until the broker aborts its transaction, so this timeout is
        // short (Kafka Streams: 10 s) and only has to outlast an interval and its commit.
        let txn = settings.transaction_timeout_ms;
        if guarantee != DeliveryGuarantee::ExactlyOnce {
            return Err(loc.at(
                &raw.mode.as_ref().map_or(0..0, |m| m.span()),
                Some("settings.mode"),
                "mode = \"cluster\" runs exactly-once only: set sink.delivery.guarantee = \"exactly-once\" or mode = \"local\"",
            ));
        }
        if txn < interval.saturating_mul(2).max(1_000) {
            return Err(loc.at(
                &raw.transaction.as_ref().map_or(0..0, |t| t.timeout.ms.span()),
                Some("settings.transaction.timeout.ms"),
                format!("{txn} is too short for mode = \"cluster\": a member's transaction spans one checkpoint.interval.ms ({interval}) and its commit; set it to at least {} (10000 is a good value: a member that dies holds its tasks back that long)", interval.saturating_mul(2).max(1_000)),
            ));
        }
        return Ok(());
    }
    if guarantee == DeliveryGuarantee::ExactlyOnce {
        // The part of the one budget rule known from the file; `run` also checks the brokers'
        // transaction.max.timeout.ms at start.
        let txn = settings.transaction_timeout_ms;
        let needed = required_transaction_timeout(&settings.checkpoint());
        if txn < needed {
            let span = raw
                .transaction
                .as_ref()
                .map(|t| t.timeout.ms.span())
                .or_else(|| ckpt.and_then(|c| c.interval.as_ref()).map(|m| m.ms.span()))
                .unwrap_or(0..0);
            return Err(loc.at(
                &span,
                Some("settings.transaction.timeout.ms"),
                format!(
                    "{txn} is below the {needed} the checkpoint settings need ((checkpoint.tolerable.failures + 1) \
                     × (checkpoint.interval.ms + checkpoint.timeout.ms + checkpoint.min.pause.ms) \
                     + restart.allowance.ms + checkpoint.commit.margin.ms): a transaction could time out \
                     before its checkpoint commits it (data loss); raise transaction.timeout.ms to {needed} \
                     or lower the checkpoint settings"
                ),
            ));
        }
    }
    Ok(())
}

/// `parallelism` and `key.groups`: at least one key group per task.
fn check_scale(loc: &Locator<'_>, raw: &RawSettings) -> Result<(u32, u32), JobError> {
    let parallelism = raw.parallelism.as_ref().map_or(1, |p| *p.get_ref());
    if let Some(p) = &raw.parallelism {
        if parallelism == 0 {
            return Err(loc.at(
                &p.span(),
                Some("settings.parallelism"),
                "must be at least 1",
            ));
        }
    }
    let key_groups = raw.key.as_ref().map_or(128, |k| *k.groups.get_ref());
    if let Some(k) = &raw.key {
        if key_groups == 0 || key_groups > MAX_KEY_GROUPS || key_groups < parallelism {
            return Err(loc.at(
                &k.groups.span(),
                Some("settings.key.groups"),
                format!(
                    "{key_groups} is out of range: give parallelism ({parallelism}) to \
                     {MAX_KEY_GROUPS}; it cannot change once the job has state"
                ),
            ));
        }
    } else if key_groups < parallelism {
        if let Some(p) = &raw.parallelism {
            return Err(loc.at(
                &p.span(),
                Some("settings.parallelism"),
                format!("{parallelism} exceeds the key groups (128); raise key.groups too"),
            ));
        }
    }
    Ok((parallelism, key_groups))
}

/// `state.dir` (default `state/<name>`), `state.cache.bytes`, `state.memtable.bytes`.
fn check_state(
    loc: &Locator<'_>,
    name: &str,
    raw: Option<RawState>,
) -> Result<(PathBuf, Option<u64>, Option<u64>), JobError> {
    let state = raw.unwrap_or(RawState {
        dir: None,
        cache: None,
        memtable: None,
    });
    let dir = match state.dir {
        Some(d) if d.get_ref().trim().is_empty() => {
            return Err(loc.at(
                &d.span(),
                Some("settings.state.dir"),
                "the directory is empty",
            ));
        }
        Some(d) => PathBuf::from(d.into_inner()),
        None => PathBuf::from("state").join(name),
    };
    let cache = state_bytes(loc, state.cache, "settings.state.cache.bytes")?;
    let memtable = state_bytes(loc, state.memtable, "settings.state.memtable.bytes")?;
    Ok((dir, cache, memtable))
}

/// The checkpoint settings beyond interval and timeout, with the coordinator's defaults
/// (`checkpoint::Settings::default`).
struct Tuning {
    min_pause_ms: u64,
    tolerable_failures: u32,
    commit_margin_ms: u64,
    retained: u64,
    restart_allowance_ms: u64,
}

fn check_tuning(
    loc: &Locator<'_>,
    ckpt: Option<&RawCheckpoint>,
    restart: Option<&RawRestart>,
) -> Result<Tuning, JobError> {
    let ms = |m: Option<&RawMs>, default: u64| m.map_or(default, |m| *m.ms.get_ref());
    let retained = ckpt.and_then(|c| c.retained.as_ref());
    if let Some(r) = retained.filter(|r| *r.get_ref() == 0) {
        return Err(loc.at(
            &r.span(),
            Some("settings.checkpoint.retained"),
            "must be at least 1 (the latest checkpoint is always kept)",
        ));
    }
    Ok(Tuning {
        min_pause_ms: ms(ckpt.and_then(|c| c.min.as_ref()).map(|m| &m.pause), 0),
        tolerable_failures: ckpt
            .and_then(|c| c.tolerable.as_ref())
            .map_or(3, |t| *t.failures.get_ref()),
        commit_margin_ms: ms(
            ckpt.and_then(|c| c.commit.as_ref()).map(|c| &c.margin),
            10_000,
        ),
        retained: retained.map_or(2, |r| *r.get_ref()),
        restart_allowance_ms: ms(restart.map(|r| &r.allowance), 60_000),
    })
}

/// A state store memory size, at least [`MIN_STATE_MEMORY_BYTES`].
fn state_bytes(
    loc: &Locator<'_>,
    raw: Option<RawBytes>,
    field: &'static str,
) -> Result<Option<u64>, JobError> {
    let Some(raw) = raw else { return Ok(None) };
    let bytes = *raw.bytes.get_ref();
    if bytes < MIN_STATE_MEMORY_BYTES {
        return Err(loc.at(
            &raw.bytes.span(),
            Some(field),
            format!("{bytes} is too small: give at least {MIN_STATE_MEMORY_BYTES} (1 MiB)"),
        ));
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests;
