//! Field paths into JSON records: `"trip.start.lon"` walks objects key by key; a segment of
//! digits also indexes an array (`"stops.0.lon"`). A key that itself contains a dot cannot be
//! addressed (no escaping: keep paths obvious).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde_json::Value;

/// A parsed field path, compiled once and looked up per record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    segments: Vec<String>,
}

/// Why a string is not a field path (the job file names it, with its line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// `""`, `"a..b"`, `".a"` or `"a."`.
    #[error("expected a field path like \"trip.start.lon\", got {0:?} (empty segment)")]
    EmptySegment(String),
}

impl FieldPath {
    /// Parses `"a.b.c"`.
    ///
    /// # Errors
    /// [`PathError::EmptySegment`] when the path or one of its segments is empty.
    pub fn parse(text: &str) -> Result<Self, PathError> {
        let segments: Vec<String> = text.split('.').map(str::to_owned).collect();
        if segments.iter().any(String::is_empty) {
            return Err(PathError::EmptySegment(text.to_owned()));
        }
        Ok(Self {
            text: text.to_owned(),
            segments,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The last segment: the name a projected or grouped field gets by default.
    pub fn last(&self) -> &str {
        // `parse` guarantees at least one (non-empty) segment.
        self.segments.last().map_or("", String::as_str)
    }

    /// Whether the path is a single top-level key.
    pub fn is_top_level(&self) -> bool {
        self.segments.len() == 1
    }

    /// The value at this path, or `None` when a step is missing, indexes a non-container, or
    /// the value is JSON `null` (null and missing are the same to every operator).
    pub fn lookup<'a>(&self, record: &'a Value) -> Option<&'a Value> {
        let mut at = record;
        for segment in &self.segments {
            at = match at {
                Value::Object(map) => map.get(segment)?,
                Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        (!at.is_null()).then_some(at)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for FieldPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PathVisitor;
        impl Visitor<'_> for PathVisitor {
            type Value = FieldPath;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string like \"trip.start.lon\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FieldPath, E> {
                FieldPath::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(PathVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lookup_table() {
        let record = json!({
            "a": 1, "n": null, "trip": {"start": {"lon": -73.9}}, "stops": [{"lon": 1.5}, 2],
            "s": "x"
        });
        let cases: &[(&str, Option<Value>)] = &[
            ("a", Some(json!(1))),
            ("trip.start.lon", Some(json!(-73.9))),
            ("trip.start", Some(json!({"lon": -73.9}))),
            ("stops.0.lon", Some(json!(1.5))),
            ("stops.1", Some(json!(2))),
            ("stops.2", None),
            ("stops.x", None),
            ("n", None),
            ("missing", None),
            ("a.b", None),
            ("s.0", None),
        ];
        for (path, want) in cases {
            let got = FieldPath::parse(path).unwrap().lookup(&record).cloned();
            assert_eq!(&got, want, "path {path}");
        }
    }

    #[test]
    fn empty_segments_are_rejected() {
        for bad in ["", ".", "a..b", ".a", "a."] {
            assert!(FieldPath::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(FieldPath::parse("a.b").unwrap().last(), "b");
    }
}
