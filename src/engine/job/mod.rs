//! Job files (TOML) and the built-in operators, as pure code: no Kafka, no runtime.
//!
//! A job file names a source, a pipeline of built-in operators and a sink (docs/guide/engine.md
//! and docs/design/job-files.md walk through one; `jobs/` ships four). [`Job::parse`] turns it into a
//! checked [`Job`], or one [`JobError`] line naming the file, the line and the field:
//!
//! ```text
//! jobs/x.toml:12: filter.field: expected a string like "trip.start.lon", got integer `3`
//! ```
//!
//! The operators work on `serde_json::Value` records and are compiled once per job:
//! - [`filter::Predicate`]: comparisons, `and` / `or` / `not`, `within` a bounding box;
//! - [`project::Projection`]: keep and rename fields;
//! - [`project::KeyBy`]: the record's key, as stable bytes;
//! - [`aggregate::WindowAggregate`]: keyed count / sum / min / max / avg per event-time window,
//!   with the window assignment, watermark and lateness rules of `crate::engine::time`;
//! - [`join::IntervalJoin`]: an interval join of two topics on a key within event-time bounds
//!   (the rules are `crate::engine::time::interval_join`'s), run by `join_stage`;
//! - `batch::run_batch` (and `run_batch_of_topics` for a join's two inputs): a whole pipeline
//!   over a finite input, in memory: the expected output a streaming run is verified against;
//! - `layout`: what a checkpoint's state depends on, to refuse a changed job naming what
//!   differs.

pub mod aggregate;
pub mod expr;
pub mod filter;
pub mod join;
pub mod project;
mod spec;
pub mod top;
internal_modules! {
    mod batch;
    mod layout;
    mod num;
    mod path;
}
pub(crate) mod codec;
mod element;
mod explain;
mod fsum;
mod join_stage;
#[cfg(test)]
mod join_vs_batch;
#[cfg(test)]
mod stages_vs_batch;
#[cfg(test)]
mod streaming_vs_batch;
pub(crate) mod topology;
mod window_join;

pub(crate) use spec::parse_duration as parse_duration_text;

// The job model's value types: a field path, a JSON number, a window's kind.
pub use crate::engine::time::WindowKind;
pub use num::Num;
pub use path::{FieldPath, PathError};
pub use spec::{
    DeliveryGuarantee, ErrorTolerance, FileSinkSpec, FileSourceSpec, Job, LineFormatSpec, Mode,
    Operator, OutputFormat, RecordFormat, Settings, SinkSpec, SourceSpec, StartPosition,
};

/// A job file that cannot be used. Every variant is one line for the user.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The file could not be read.
    #[error("{file}: cannot read the job file: {source}")]
    Read {
        /// The path as given.
        file: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not TOML at all.
    #[error("{file}:{line}: {message}")]
    Syntax {
        /// The path as given.
        file: String,
        /// 1-based line.
        line: usize,
        /// What the TOML parser says.
        message: String,
    },
    /// A SQL job that cannot be planned: where, and what to change.
    #[error("{file}:{line}:{column}: {message}")]
    Sql {
        /// The path as given.
        file: String,
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
        /// What is wrong and what to change.
        message: String,
    },
    /// TOML, but not a valid job: a wrong type, an unknown or missing field, or a value that
    /// does not make sense (with what to change).
    #[error("{file}:{line}: {field}: {message}")]
    Invalid {
        /// The path as given.
        file: String,
        /// 1-based line.
        line: usize,
        /// The field, dotted (`filter.field`, `sink.transactional.id.prefix`).
        field: String,
        /// What is wrong and what to change.
        message: String,
    },
}

impl JobError {
    /// The 1-based line the error points at, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            JobError::Read { .. } => None,
            JobError::Syntax { line, .. } | JobError::Invalid { line, .. } => Some(*line),
            JobError::Sql { line, .. } => usize::try_from(*line).ok(),
        }
    }

    /// The dotted field the error names, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            JobError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}
