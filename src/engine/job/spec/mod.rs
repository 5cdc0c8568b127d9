//! The job file: its serde shape (`Raw*`, `deny_unknown_fields` everywhere), the checks that
//! need more than one field, and the checked [`Job`].
//!
//! Line numbers come from toml's spans: a serde error carries the span of the offending key or
//! value, and each cross-field check holds a `Spanned` value. The dotted field name comes from
//! the span too: the file is parsed again into toml's spanned tree (`DeTable`) and the deepest
//! key whose key or value holds the span is named, its path joined with dots (array indices and
//! the `pipeline` prefix left out: the line already says which entry).
//!
//! - `model`: the checked job ([`Job`], its source, pipeline, sink and settings).
//! - `raw`: the file's serde shape, and the deserializers of brokers lists and durations.
//! - `locator`: spans to `file:line: field: message`.
//! - `lines`: a file source's line format (`csv` with its columns, `json`, or a registered
//!   name).
//! - `records`: the record formats of the Kafka ends and the `[registry]` they use.
//! - `check`: from the shape to the model: the name and the source here, then `pipeline`
//!   (with `predicate` for filters and `join` for a join's sides and bounds), `sink` and
//!   `settings`, each with its cross-field rules.

mod check;
mod join;
mod lines;
mod locator;
mod model;
mod pipeline;
mod predicate;
mod raw;
mod records;
mod settings;
mod sink;
mod window_kind;

use std::path::Path;

use super::JobError;
use check::check;
use locator::Locator;
use raw::RawJob;

pub use model::*;
pub(crate) use raw::parse_duration;

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
        if let Ok(table) = toml::from_str::<toml::Table>(text) {
            if table.contains_key("sql") {
                let line = text.lines().position(|l| l.trim_start().starts_with("sql"));
                return Err(JobError::Invalid {
                    file: file.to_owned(),
                    line: line.map_or(1, |i| i + 1),
                    field: "sql".into(),
                    message: "this job file holds a SQL job: `onceflow run` runs it (in Rust, \
                              `engine::sql::SqlJob::load_if_sql` reads it)"
                        .into(),
                });
            }
        }
        let loc = Locator::new(file, text);
        let raw: RawJob = toml::from_str(text).map_err(|e| loc.toml_error(&e))?;
        check(&loc, raw)
    }
}

#[cfg(test)]
mod tests;
