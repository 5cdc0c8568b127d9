//! Projection (keep and rename fields) and key extraction.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::path::FieldPath;

/// Why a projection is malformed (the job file names the line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectError {
    /// Neither `keep` nor `rename`.
    #[error("give `keep`, `rename` or both")]
    Empty,
    /// A rename of a field that `keep` drops.
    #[error("`{0}` is renamed but not in `keep`; add it to `keep`")]
    RenameNotKept(String),
    /// Without `keep`, renames apply to top-level fields only.
    #[error("without `keep` only top-level fields can be renamed, got `{0}`; list it in `keep`")]
    RenameNested(String),
    /// Two fields would get the same output name.
    #[error("two fields would both be named `{0}` in the output; rename one")]
    Duplicate(String),
}

/// A compiled projection.
///
/// - With `keep`: the output holds only the kept paths, each named by its `rename` or else its
///   last segment (`"trip.start.lon"` becomes `lon`); a missing one is left out (not `null`).
///   A record that is not an object becomes `{}`.
/// - Without `keep`: every field stays; `rename` renames top-level fields (all at once, so
///   `a → b, b → a` swaps); a rename onto an existing field replaces it. A record that is not an
///   object passes unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    keep: Option<Vec<(FieldPath, String)>>,
    rename: Vec<(String, String)>,
}

impl Projection {
    /// Compiles `keep` and `rename`.
    ///
    /// # Errors
    /// A [`ProjectError`] naming what to change.
    pub fn new(
        keep: Option<Vec<FieldPath>>,
        rename: BTreeMap<String, String>,
    ) -> Result<Self, ProjectError> {
        match keep {
            None if rename.is_empty() => Err(ProjectError::Empty),
            None => {
                if let Some(nested) = rename.keys().find(|k| k.contains('.')) {
                    return Err(ProjectError::RenameNested(nested.clone()));
                }
                let mut targets = BTreeSet::new();
                for to in rename.values() {
                    if !targets.insert(to) {
                        return Err(ProjectError::Duplicate(to.clone()));
                    }
                }
                Ok(Self {
                    keep: None,
                    rename: rename.into_iter().collect(),
                })
            }
            Some(paths) => {
                let mut out = Vec::with_capacity(paths.len());
                let mut names = BTreeSet::new();
                for path in paths {
                    let name = rename
                        .get(path.as_str())
                        .cloned()
                        .unwrap_or_else(|| path.last().to_owned());
                    if !names.insert(name.clone()) {
                        return Err(ProjectError::Duplicate(name));
                    }
                    out.push((path, name));
                }
                if let Some(stray) = rename
                    .keys()
                    .find(|k| !out.iter().any(|(p, _)| p.as_str() == k.as_str()))
                {
                    return Err(ProjectError::RenameNotKept(stray.clone()));
                }
                Ok(Self {
                    keep: Some(out),
                    rename: Vec::new(),
                })
            }
        }
    }

    /// The projected record.
    pub fn apply(&self, record: Value) -> Value {
        match &self.keep {
            Some(keep) => {
                let mut out = Map::new();
                for (path, name) in keep {
                    if let Some(v) = path.lookup(&record) {
                        out.insert(name.clone(), v.clone());
                    }
                }
                Value::Object(out)
            }
            None => match record {
                Value::Object(mut map) => {
                    let moved: Vec<(String, Value)> = self
                        .rename
                        .iter()
                        .filter_map(|(from, to)| map.remove(from).map(|v| (to.clone(), v)))
                        .collect();
                    map.extend(moved);
                    Value::Object(map)
                }
                other => other,
            },
        }
    }
}

/// `key_by`: the field whose value keys the records from here on (the window's state, the
/// sink's Kafka key).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyBy {
    /// The key field.
    pub field: FieldPath,
}

impl std::fmt::Display for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.keep {
            Some(keep) => {
                let cols: Vec<String> = keep
                    .iter()
                    .map(|(p, name)| match p.last() == name {
                        true => p.to_string(),
                        false => format!("{p} AS {name}"),
                    })
                    .collect();
                write!(f, "keep {}", cols.join(", "))
            }
            None => {
                let cols: Vec<String> = self
                    .rename
                    .iter()
                    .map(|(a, b)| format!("{a} AS {b}"))
                    .collect();
                write!(f, "rename {}", cols.join(", "))
            }
        }
    }
}

/// A record's key: the field's value as compact JSON with object keys sorted, so equal values
/// always give equal bytes, in every process and version (`42`, `"abc"`, `{"a":1,"b":2}`).
/// Different JSON types never collide (`42` and `"42"` differ).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Key(Vec<u8>);

impl KeyBy {
    /// The record's key, or `None` when the field is missing or `null` (the runtime drops such
    /// records and counts them).
    pub fn extract(&self, record: &Value) -> Option<Key> {
        self.field.lookup(record).map(Key::of)
    }
}

impl Key {
    /// The key of a JSON value.
    pub fn of(value: &Value) -> Key {
        // serde_json's Map is a BTreeMap here (no `preserve_order`), so keys come out sorted,
        // and serializing a Value cannot fail.
        Key(serde_json::to_vec(value).unwrap_or_default())
    }

    /// The canonical bytes (state keys, key groups).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The canonical bytes, taken.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// A key from its canonical bytes (as [`Key::as_bytes`] gave them).
    pub fn from_bytes(bytes: Vec<u8>) -> Key {
        Key(bytes)
    }

    /// The JSON value again, for the output record; `None` if the bytes are not JSON.
    pub fn to_value(&self) -> Option<Value> {
        serde_json::from_slice(&self.0).ok()
    }

    /// The Kafka record key to write: a string key's text without quotes, any other value's
    /// JSON (`42` for a driver id).
    pub fn kafka_key(&self) -> Vec<u8> {
        match self.to_value() {
            Some(Value::String(s)) => s.into_bytes(),
            _ => self.0.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(p: &[&str]) -> Option<Vec<FieldPath>> {
        Some(p.iter().map(|s| FieldPath::parse(s).unwrap()).collect())
    }
    fn renames(r: &[(&str, &str)]) -> BTreeMap<String, String> {
        r.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn projection_table() {
        let record = json!({"a": 1, "b": 2, "trip": {"start": {"lon": -73.9}}, "n": null});
        let cases = vec![
            (paths(&["a"]), renames(&[]), json!({"a": 1})),
            (
                paths(&["a", "trip.start.lon"]),
                renames(&[]),
                json!({"a": 1, "lon": -73.9}),
            ),
            (
                paths(&["a", "trip.start.lon"]),
                renames(&[("trip.start.lon", "start_lon")]),
                json!({"a": 1, "start_lon": -73.9}),
            ),
            // Missing and null are left out.
            (paths(&["a", "zzz", "n"]), renames(&[]), json!({"a": 1})),
            (
                None,
                renames(&[("a", "x")]),
                json!({"x": 1, "b": 2, "trip": {"start": {"lon": -73.9}}, "n": null}),
            ),
            // Simultaneous renames swap.
            (
                None,
                renames(&[("a", "b"), ("b", "a")]),
                json!({"b": 1, "a": 2, "trip": {"start": {"lon": -73.9}}, "n": null}),
            ),
            // Renaming a missing field does nothing.
            (
                None,
                renames(&[("zzz", "y")]),
                json!({"a": 1, "b": 2, "trip": {"start": {"lon": -73.9}}, "n": null}),
            ),
        ];
        for (keep, rename, want) in cases {
            let p = Projection::new(keep.clone(), rename.clone()).unwrap();
            assert_eq!(
                p.apply(record.clone()),
                want,
                "keep {keep:?} rename {rename:?}"
            );
        }
        let p = Projection::new(paths(&["a"]), renames(&[])).unwrap();
        assert_eq!(p.apply(json!(5)), json!({}));
        let p = Projection::new(None, renames(&[("a", "b")])).unwrap();
        assert_eq!(p.apply(json!(5)), json!(5));
    }

    #[test]
    fn projection_errors() {
        let cases = vec![
            (None, renames(&[]), ProjectError::Empty),
            (
                paths(&["a"]),
                renames(&[("b", "c")]),
                ProjectError::RenameNotKept("b".into()),
            ),
            (
                None,
                renames(&[("a.b", "c")]),
                ProjectError::RenameNested("a.b".into()),
            ),
            (
                paths(&["x.lon", "y.lon"]),
                renames(&[]),
                ProjectError::Duplicate("lon".into()),
            ),
            (
                None,
                renames(&[("a", "c"), ("b", "c")]),
                ProjectError::Duplicate("c".into()),
            ),
        ];
        for (keep, rename, want) in cases {
            assert_eq!(Projection::new(keep, rename), Err(want));
        }
    }

    #[test]
    fn keys_are_canonical_and_typed() {
        let by = KeyBy {
            field: FieldPath::parse("k").unwrap(),
        };
        let cases = vec![
            (json!({"k": 42}), Some(&b"42"[..]), Some(&b"42"[..])),
            (json!({"k": "42"}), Some(&b"\"42\""[..]), Some(&b"42"[..])),
            (
                json!({"k": u64::MAX}),
                Some(&b"18446744073709551615"[..]),
                None,
            ),
            (
                json!({"k": {"b": 1, "a": [true]}}),
                Some(&b"{\"a\":[true],\"b\":1}"[..]),
                None,
            ),
            (json!({"k": null}), None, None),
            (json!({"x": 1}), None, None),
        ];
        for (record, bytes, kafka) in cases {
            let key = by.extract(&record);
            assert_eq!(key.as_ref().map(Key::as_bytes), bytes, "{record}");
            if let (Some(key), Some(kafka)) = (&key, kafka) {
                assert_eq!(key.kafka_key(), kafka);
            }
            if let Some(key) = key {
                assert_eq!(key.to_value().as_ref(), by.field.lookup(&record));
            }
        }
    }
}
