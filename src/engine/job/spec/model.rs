//! The checked job: what a job file (or a typed job's builder) describes, after every check.

use std::path::PathBuf;
use std::sync::Arc;

use crate::engine::formats::{CsvColumn, CsvFormat, JsonLinesFormat, LineFormat, LineFormats};

use crate::engine::job::aggregate::WindowAggregate;
use crate::engine::job::expr::{Expr, Select};
use crate::engine::job::filter::Predicate;
use crate::engine::job::join::IntervalJoin;
use crate::engine::job::project::{KeyBy, Projection};
pub(crate) use crate::engine::settings::SinkFacts;
pub use crate::engine::settings::{ErrorTolerance, Mode, Settings};

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
    /// `[registry]`: the schema registry's settings under the Java serializers' property
    /// names (`url` is `schema.registry.url`), for the ends whose format needs it; empty
    /// when none does.
    pub registry: Vec<(String, String)>,
}

/// How a Kafka end reads or writes record values (`[source] format`, `[sink] format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RecordFormat {
    /// A JSON document (the default).
    #[default]
    Json,
    /// Avro in the schema registry's wire format.
    Avro,
    /// Protobuf in the schema registry's wire format.
    Protobuf,
    /// JSON Schema in the schema registry's wire format.
    JsonSchema,
    /// A CSV line of declared columns (`columns`, `delimiter`): a JSON object of them for the
    /// pipeline; written from the fields `columns` names.
    Csv,
    /// The value's text as the field `value` of a JSON object; written from that field.
    Raw,
}

impl RecordFormat {
    /// The format named `name` in a job file.
    ///
    /// # Errors
    /// A name that is not a format, with the names that are.
    pub fn parse(name: &str) -> Result<RecordFormat, String> {
        match name {
            "json" => Ok(RecordFormat::Json),
            "avro" => Ok(RecordFormat::Avro),
            "protobuf" => Ok(RecordFormat::Protobuf),
            "json-schema" => Ok(RecordFormat::JsonSchema),
            "csv" => Ok(RecordFormat::Csv),
            "raw" => Ok(RecordFormat::Raw),
            _ => Err(format!(
                "{name:?} is not a record format: use \"json\", \"avro\", \"protobuf\", \"json-schema\", \"csv\" or \"raw\""
            )),
        }
    }

    /// Its name in a job file.
    pub fn name(self) -> &'static str {
        match self {
            RecordFormat::Json => "json",
            RecordFormat::Avro => "avro",
            RecordFormat::Protobuf => "protobuf",
            RecordFormat::JsonSchema => "json-schema",
            RecordFormat::Csv => "csv",
            RecordFormat::Raw => "raw",
        }
    }

    /// Whether it reads or writes through the schema registry.
    pub fn needs_registry(self) -> bool {
        matches!(
            self,
            RecordFormat::Avro | RecordFormat::Protobuf | RecordFormat::JsonSchema
        )
    }
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
    /// `format` of a Kafka source: how record values are read (JSON by default; Avro,
    /// Protobuf and JSON Schema records become JSON for the pipeline, see
    /// [`RecordFormat`]).
    pub value_format: RecordFormat,
    /// With `format = "csv"`: the `columns` of each value and their `delimiter`.
    pub value_columns: Option<(Vec<CsvColumn>, char)>,
}

/// `[source] type = "file"`: a checkpointed reader of files of events, one a line (as the
/// replaying source of Flink's training exercises): events emitted up to `max_delay_s` late,
/// at `serving_speed_factor`.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSourceSpec {
    /// `path`: a file, or a directory whose files are read in name order (`.gz` decompressed).
    pub path: PathBuf,
    /// `format`: how a line becomes a record.
    pub format: LineFormatSpec,
    /// `serving_speed_factor`: event time runs this many times faster than wall time (600 =
    /// ten minutes per second); 0 (the default) = as fast as possible.
    pub serving_speed_factor: f64,
    /// `max_delay_s`: each event is emitted up to this many seconds late (default 0).
    pub max_delay_s: u64,
}

/// `[source] format` of a file source: the engine's CSV or JSON Lines, or a format the
/// program running the job registers.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LineFormatSpec {
    /// `"csv"`: declared `columns` (or a header's names), `header`, `delimiter`, `time`, `key`.
    Csv {
        /// The declared columns; None = each file's header names them.
        columns: Option<Vec<CsvColumn>>,
        /// Whether each file's first line is a header.
        header: bool,
        /// The field separator.
        delimiter: char,
        /// The event time's column.
        time: String,
        /// The Kafka key's column.
        key: Option<String>,
    },
    /// `"json"`: JSON Lines, the event time and key at field paths.
    JsonLines {
        /// The event time's field path.
        time: String,
        /// The Kafka key's field path.
        key: Option<String>,
    },
    /// `"avro"`: Avro container files, each record as plain JSON (as a Kafka source reads
    /// Avro), the event time and key at field paths.
    Avro {
        /// The event time's field path.
        time: String,
        /// The Kafka key's field path.
        key: Option<String>,
    },
    /// Any other name: one of the formats the program running the job registers
    /// ([`LineFormats`](crate::engine::formats::LineFormats)); a name not registered stops the
    /// job at start.
    Registered(String),
}

impl LineFormatSpec {
    /// The format's name in the job file.
    pub fn name(&self) -> &str {
        match self {
            LineFormatSpec::Csv { .. } => "csv",
            LineFormatSpec::JsonLines { .. } => "json",
            LineFormatSpec::Avro { .. } => "avro",
            LineFormatSpec::Registered(name) => name,
        }
    }

    /// The line format itself: the engine's, or the one `registered` holds under its name.
    ///
    /// # Errors
    /// A name `registered` does not hold; settings the format refuses (a checked job's never
    /// are).
    pub fn line_format(&self, registered: &LineFormats) -> Result<Arc<dyn LineFormat>, String> {
        match self {
            LineFormatSpec::Csv {
                columns,
                header,
                delimiter,
                time,
                key,
            } => {
                let mut format = match columns {
                    Some(columns) => {
                        let format = CsvFormat::declared(columns.clone(), time)?;
                        if *header {
                            format.with_header()
                        } else {
                            format
                        }
                    }
                    None => CsvFormat::from_header(time),
                };
                format = format.with_delimiter(*delimiter)?;
                if let Some(key) = key {
                    format = format.with_key(key)?;
                }
                Ok(Arc::new(format))
            }
            LineFormatSpec::JsonLines { time, key } | LineFormatSpec::Avro { time, key } => {
                let mut format = JsonLinesFormat::new(time)?;
                if let Some(key) = key {
                    format = format.with_key(key)?;
                }
                Ok(Arc::new(format))
            }
            LineFormatSpec::Registered(name) => registered.resolve(name).map_err(|e| e.to_string()),
        }
    }
}

/// `[sink] type = "file"`: part files made final when the checkpoint that covers them is
/// durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSinkSpec {
    /// `path`: the output directory (this job's alone).
    pub path: PathBuf,
    /// `format`: `json` (JSON lines, the default), `csv` (with `columns`) or `avro` (with
    /// `schema` and `codec`).
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
    /// Avro container files of `schema` (an `.avsc`), blocks compressed with `codec`.
    Avro {
        /// The schema file.
        schema: PathBuf,
        /// `null`, `deflate`, `snappy` or `zstandard`.
        codec: String,
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
    /// An interval `join` of the source's two topics (the pipeline's first operator).
    Join(Box<IntervalJoin>),
    /// A SQL `WHERE`: keeps the records for which the expression is TRUE.
    Where(Expr),
    /// A SQL `SELECT` list: the record becomes the named expressions' values.
    Select(Select),
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
    /// `format` of a Kafka sink: how output values are written (JSON by default).
    pub value_format: RecordFormat,
    /// `schema`: the schema output values are written with (an `.avsc`, a `.proto` with an
    /// optional `#Message`, a JSON Schema `.json`), for the formats of the registry.
    pub value_schema: Option<String>,
    /// With `format = "csv"`: the fields written, in order (`columns`).
    pub value_columns: Vec<String>,
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
