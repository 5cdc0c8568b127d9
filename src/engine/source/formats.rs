//! [`LineFormats`]: the registry of named line formats a job file's `[source] format = "…"`
//! chooses from, and [`UnknownLineFormat`], the start-up error for a name it does not hold.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::LineFormat;

/// Named [`LineFormat`]s: what `[source] format = "NAME"` of a job file may name. The engine
/// registers none itself; the program that runs jobs registers the formats it knows and hands
/// the registry to the runtime in [`RunConfig::formats`](crate::engine::runtime::RunConfig).
///
/// Cloning is cheap (the formats are shared).
///
/// ```
/// use std::sync::Arc;
/// use onceflow::engine::source::{LineFormats, ParsedLine};
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
///     formats.resolve("csv").err().unwrap().to_string(),
///     "source.format = \"csv\": no such line format; registered: time-and-text"
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
    /// use onceflow::engine::source::{LineFormats, ParsedLine};
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
    /// use onceflow::engine::source::{LineFormats, ParsedLine};
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
    /// use onceflow::engine::source::LineFormats;
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
    /// use onceflow::engine::source::LineFormats;
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
    /// use onceflow::engine::source::LineFormats;
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
#[error("source.format = \"{name}\": no such line format; {}", registered_list(.registered))]
pub struct UnknownLineFormat {
    /// The name the job gave.
    pub name: String,
    /// The names registered, in name order.
    pub registered: Vec<String>,
}

fn registered_list(registered: &[String]) -> String {
    if registered.is_empty() {
        "none is registered (the program running the job registers its formats in \
         RunConfig::formats)"
            .to_owned()
    } else {
        format!("registered: {}", registered.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::source::ParsedLine;

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
            "source.format = \"c\": no such line format; registered: a, b"
        );
        assert_eq!(
            LineFormats::new().resolve("c").err().unwrap().to_string(),
            "source.format = \"c\": no such line format; none is registered (the program \
             running the job registers its formats in RunConfig::formats)"
        );
    }
}
