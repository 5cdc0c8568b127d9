//! How the file source makes a line a record, and the formats a job may name.
//!
//! - [`LineFormat`]: a line becomes a record (key, value, event time).
//! - The engine's own: [`CsvFormat`] (declared columns, or a header's names) and
//!   [`JsonLinesFormat`], which a job file's `[source] format = "csv"` / `"json"` builds from
//!   its settings.
//! - [`LineFormats`]: the registry of other named formats a job file's `[source] format =
//!   "…"` may choose from, supplied by the program running the job in
//!   [`RunConfig::formats`](crate::engine::runtime::RunConfig::formats); a name it does not
//!   hold is [`UnknownLineFormat`] when the job starts.

mod csv;
mod json_lines;

pub use crate::engine::time::TimestampFormat;
pub(crate) use csv::{check_delimiter, csv_header, csv_line, csv_value};
pub use csv::{ColumnType, CsvColumn, CsvFormat};
pub use json_lines::JsonLinesFormat;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// How a line becomes a record. The program running a job supplies its formats (by name, in
/// [`LineFormats`]; a typed job passes one to
/// [`JobBuilder::file_source`](crate::engine::dataflow::JobBuilder::file_source)). It must be
/// deterministic: a restore parses the buffered lines again.
///
/// A closure `Fn(&str) -> Result<ParsedLine, String>` is a format too.
///
/// ```
/// use onceflow::engine::formats::{LineFormat, ParsedLine};
///
/// /// `<event time ms>,<text>`: the text is the value, there is no key.
/// struct TimeAndText;
///
/// impl LineFormat for TimeAndText {
///     fn parse(&self, line: &str) -> Result<ParsedLine, String> {
///         let (time, text) = line
///             .split_once(',')
///             .ok_or_else(|| format!("expected <event time ms>,<text>, got {line:?}"))?;
///         let event_time = time
///             .parse()
///             .map_err(|e| format!("event time {time:?}: {e}"))?;
///         Ok(ParsedLine { key: None, value: text.as_bytes().to_vec(), event_time })
///     }
/// }
///
/// let record = TimeAndText.parse("1000,hello").unwrap();
/// assert_eq!((record.event_time, record.value.as_slice()), (1000, &b"hello"[..]));
/// assert!(TimeAndText.parse("hello").is_err());
/// ```
pub trait LineFormat: Send + Sync {
    /// Parses one line (without its terminator).
    ///
    /// # Errors
    /// A one-line description of what is wrong with the line; the source prefixes it with
    /// `FILE:LINE: `.
    fn parse(&self, line: &str) -> Result<ParsedLine, String>;

    /// Whether each file's first line is a header: given to [`check_header`](Self::check_header),
    /// never parsed as a record. The default: no header.
    fn has_header(&self) -> bool {
        false
    }

    /// Checks a file's header line (see [`has_header`](Self::has_header)); the file source
    /// gives it each file's first line before that file's records, also after a restore.
    ///
    /// # Errors
    /// A one-line description of what is wrong with it; the source prefixes it with
    /// `FILE:1: `.
    fn check_header(&self, line: &str) -> Result<(), String> {
        let _ = line;
        Ok(())
    }
}

impl<F> LineFormat for F
where
    F: Fn(&str) -> Result<ParsedLine, String> + Send + Sync,
{
    fn parse(&self, line: &str) -> Result<ParsedLine, String> {
        self(line)
    }
}

/// What [`LineFormat::parse`] makes of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedLine {
    /// The record key, if any.
    pub key: Option<Vec<u8>>,
    /// The record value.
    pub value: Vec<u8>,
    /// The event time, ms since the epoch.
    pub event_time: i64,
}

/// Named [`LineFormat`]s: what `[source] format = "NAME"` of a job file may name. The engine
/// registers none itself; the program that runs jobs registers the formats it knows and hands
/// the registry to the runtime in [`RunConfig::formats`](crate::engine::runtime::RunConfig).
///
/// Cloning is cheap (the formats are shared).
///
/// ```
/// use std::sync::Arc;
/// use onceflow::engine::formats::{LineFormats, ParsedLine};
///
/// // `<event time ms>,<text>`.
/// let time_and_text = |line: &str| -> Result<ParsedLine, String> {
///     let (time, text) = line.split_once(',').ok_or("expected <event time ms>,<text>")?;
///     let event_time = time.parse().map_err(|e| format!("event time {time:?}: {e}"))?;
///     Ok(ParsedLine { key: None, value: text.as_bytes().to_vec(), event_time })
/// };
/// let formats = LineFormats::new().with("time-and-text", Arc::new(time_and_text));
/// assert_eq!(formats.names().collect::<Vec<_>>(), ["time-and-text"]);
/// let format = formats.resolve("time-and-text").unwrap();
/// assert_eq!(format.parse("5,x").unwrap().event_time, 5);
/// assert_eq!(
///     formats.resolve("tsv").err().unwrap().to_string(),
///     "source.format = \"tsv\": no such line format: use \"csv\", \"json\" or \"avro\", or a registered one: time-and-text"
/// );
/// ```
#[derive(Clone, Default)]
pub struct LineFormats {
    formats: BTreeMap<String, Arc<dyn LineFormat>>,
}

impl LineFormats {
    /// An empty registry.
    pub fn new() -> LineFormats {
        LineFormats::default()
    }

    /// Registers `format` under `name`; returns the format that name had before, if any
    /// (replaced).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use onceflow::engine::formats::{LineFormats, ParsedLine};
    ///
    /// let text = |line: &str| -> Result<ParsedLine, String> {
    ///     Ok(ParsedLine { key: None, value: line.as_bytes().to_vec(), event_time: 0 })
    /// };
    /// let mut formats = LineFormats::new();
    /// assert!(formats.register("text", Arc::new(text)).is_none());
    /// assert!(formats.register("text", Arc::new(text)).is_some());
    /// ```
    pub fn register(
        &mut self,
        name: impl Into<String>,
        format: Arc<dyn LineFormat>,
    ) -> Option<Arc<dyn LineFormat>> {
        self.formats.insert(name.into(), format)
    }

    /// [`Self::register`], by value: `LineFormats::new().with("a", a).with("b", b)`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use onceflow::engine::formats::{LineFormats, ParsedLine};
    ///
    /// let text = |line: &str| -> Result<ParsedLine, String> {
    ///     Ok(ParsedLine { key: None, value: line.as_bytes().to_vec(), event_time: 0 })
    /// };
    /// let formats = LineFormats::new().with("text", Arc::new(text));
    /// assert!(formats.get("text").is_some());
    /// ```
    pub fn with(mut self, name: impl Into<String>, format: Arc<dyn LineFormat>) -> LineFormats {
        self.register(name, format);
        self
    }

    /// The format registered under `name`.
    ///
    /// ```
    /// use onceflow::engine::formats::LineFormats;
    /// assert!(LineFormats::new().get("text").is_none());
    /// ```
    pub fn get(&self, name: &str) -> Option<&Arc<dyn LineFormat>> {
        self.formats.get(name)
    }

    /// The format registered under `name`, for a job whose `[source] format` names it.
    ///
    /// # Errors
    /// [`UnknownLineFormat`] naming `name` and the registered formats.
    ///
    /// ```
    /// use onceflow::engine::formats::LineFormats;
    /// let e = LineFormats::new().resolve("text").err().unwrap();
    /// assert!(e.to_string().starts_with("source.format = \"text\": no such line format"));
    /// ```
    pub fn resolve(&self, name: &str) -> Result<Arc<dyn LineFormat>, UnknownLineFormat> {
        self.formats
            .get(name)
            .cloned()
            .ok_or_else(|| UnknownLineFormat {
                name: name.to_owned(),
                registered: self.formats.keys().cloned().collect(),
            })
    }

    /// The registered names, in name order.
    ///
    /// ```
    /// use onceflow::engine::formats::LineFormats;
    /// assert_eq!(LineFormats::new().names().count(), 0);
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.formats.keys().map(String::as_str)
    }
}

/// The names only: a format has no printable form.
impl fmt::Debug for LineFormats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

/// A job's `[source] format` names no registered format: one line naming it and the
/// registered ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("source.format = \"{name}\": no such line format: use \"csv\", \"json\" or \"avro\", or {}", registered_list(.registered))]
pub struct UnknownLineFormat {
    /// The name the job gave.
    pub name: String,
    /// The names registered, in name order.
    pub registered: Vec<String>,
}

fn registered_list(registered: &[String]) -> String {
    if registered.is_empty() {
        "one the program running the job registers (none is: it registers them in \
         RunConfig::formats)"
            .to_owned()
    } else {
        format!("a registered one: {}", registered.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constant(event_time: i64) -> Arc<dyn LineFormat> {
        Arc::new(move |line: &str| -> Result<ParsedLine, String> {
            Ok(ParsedLine {
                key: None,
                value: line.as_bytes().to_vec(),
                event_time,
            })
        })
    }

    #[test]
    fn a_registered_name_resolves_and_an_unknown_one_lists_the_registered() {
        let mut formats = LineFormats::new().with("b", constant(2));
        assert!(formats.register("a", constant(1)).is_none());
        let replaced = formats.register("b", constant(3));
        assert_eq!(replaced.map(|f| f.parse("x").unwrap().event_time), Some(2));
        assert_eq!(
            formats.resolve("b").unwrap().parse("x").unwrap().event_time,
            3
        );
        assert_eq!(formats.names().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(format!("{formats:?}"), r#"{"a", "b"}"#);
        let e = formats.resolve("c").err().unwrap();
        assert_eq!(
            e.to_string(),
            "source.format = \"c\": no such line format: use \"csv\", \"json\" or \"avro\", or a registered one: a, b"
        );
        assert_eq!(
            LineFormats::new().resolve("c").err().unwrap().to_string(),
            "source.format = \"c\": no such line format: use \"csv\", \"json\" or \"avro\", or one the \
             program running the job registers (none is: it registers them in RunConfig::formats)"
        );
    }
}
