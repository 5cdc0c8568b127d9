//! [`JsonLinesFormat`]: one JSON document a line, as it is, its event time and key read from
//! fields.

use serde_json::Value;

use super::{LineFormat, ParsedLine};
use crate::engine::job::FieldPath;

/// JSON Lines: each line is the record's value as written (checked to be JSON); the event
/// time is a field's value (a whole number of epoch milliseconds or an RFC 3339 string), the
/// Kafka key another field's (a string's text, any other value's JSON; none when missing).
/// A job file's `[source] format = "json"` builds one.
///
/// ```
/// use onceflow::engine::formats::{JsonLinesFormat, LineFormat};
///
/// let format = JsonLinesFormat::new("ride.time")?.with_key("driver")?;
/// let record = format.parse(r#"{"driver":"d7","ride":{"time":"2024-01-02T03:04:05Z"}}"#)?;
/// assert_eq!(record.event_time, 1_704_164_645_000);
/// assert_eq!(record.key.as_deref(), Some(&b"d7"[..]));
/// assert!(format.parse(r#"{"driver":"d7"}"#).is_err());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone)]
pub struct JsonLinesFormat {
    time: FieldPath,
    key: Option<FieldPath>,
}

impl JsonLinesFormat {
    /// Records whose event time is at `time` (a field path: `"event_time"`, `"ride.time"`).
    ///
    /// # Errors
    /// A path with an empty segment.
    pub fn new(time: &str) -> Result<JsonLinesFormat, String> {
        Ok(JsonLinesFormat {
            time: FieldPath::parse(time).map_err(|e| e.to_string())?,
            key: None,
        })
    }

    /// The Kafka key is the value at `key` (a field path).
    ///
    /// # Errors
    /// A path with an empty segment.
    pub fn with_key(mut self, key: &str) -> Result<JsonLinesFormat, String> {
        self.key = Some(FieldPath::parse(key).map_err(|e| e.to_string())?);
        Ok(self)
    }
}

impl LineFormat for JsonLinesFormat {
    fn parse(&self, line: &str) -> Result<ParsedLine, String> {
        let record: Value = serde_json::from_str(line)
            .map_err(|e| format!("not a JSON document ({e}): each line holds one, on one line"))?;
        let time = self.time.lookup(&record).ok_or_else(|| {
            format!(
                "the event time field {:?} is missing (or null): every record needs its time",
                self.time.as_str()
            )
        })?;
        let event_time = crate::engine::time::epoch_ms_of(time).ok_or_else(|| {
            format!(
                "the event time field {:?} is {time}, not epoch milliseconds or an RFC 3339 time",
                self.time.as_str()
            )
        })?;
        let key = self
            .key
            .as_ref()
            .and_then(|k| k.lookup(&record))
            .map(|v| match v {
                Value::String(s) => s.clone().into_bytes(),
                other => other.to_string().into_bytes(),
            });
        Ok(ParsedLine {
            key,
            value: line.trim().as_bytes().to_vec(),
            event_time,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_keeps_its_json_and_gets_its_time_and_key_or_is_named() {
        let format = JsonLinesFormat::new("t").unwrap().with_key("k").unwrap();
        #[rustfmt::skip]
        type Case<'a> = (&'a str, Result<(i64, Option<&'a str>), &'a str>);
        let cases: &[Case] = &[
            (r#"{"t":5,"k":"a"}"#, Ok((5, Some("a")))),
            (r#"{"t":5,"k":42}"#, Ok((5, Some("42")))),
            (
                r#"{"t":5,"k":{"b":1,"a":2}}"#,
                Ok((5, Some(r#"{"a":2,"b":1}"#))),
            ),
            (r#"{"t":5}"#, Ok((5, None))),
            (r#"{"t":"1970-01-01T00:00:01Z","k":null}"#, Ok((1000, None))),
            (
                r#"{"t":5.5}"#,
                Err(
                    "the event time field \"t\" is 5.5, not epoch milliseconds or an RFC 3339 time",
                ),
            ),
            (
                r#"{"k":"a"}"#,
                Err("the event time field \"t\" is missing (or null): every record needs its time"),
            ),
            (
                r#"[1,2]"#,
                Err("the event time field \"t\" is missing (or null): every record needs its time"),
            ),
        ];
        for (line, want) in cases {
            match (format.parse(line), want) {
                (Ok(got), Ok((time, key))) => {
                    assert_eq!(got.event_time, *time, "{line}");
                    assert_eq!(got.key.as_deref(), key.map(str::as_bytes), "{line}");
                    assert_eq!(got.value, line.as_bytes(), "{line}");
                }
                (Err(got), Err(message)) => assert_eq!(got, *message, "{line}"),
                (got, want) => panic!("{line}: got {got:?}, wanted {want:?}"),
            }
        }
        let e = format.parse("{\"t\":").unwrap_err();
        assert!(
            e.starts_with("not a JSON document (EOF while parsing"),
            "{e}"
        );
    }
}
