//! Filter predicates, compiled once from the job file and evaluated per record.
//!
//! The rules (pinned by `comparison_table` and `within_table`):
//! - A comparison is true only when the field exists, is not `null`, and has the literal's
//!   type: number with number (integers exactly, a float against anything as f64), string with
//!   string (byte-wise order), boolean with boolean (`=` and `!=` only, checked when the job is
//!   loaded). A missing field or a type mismatch makes the comparison **false, for `!=` too**:
//!   `{ field = "passengers", op = "!=", value = 0 }` does not keep a record without
//!   `passengers` or with `"passengers": "2"`. Use `not` to turn that around on purpose.
//! - Strings are never converted to numbers, nor numbers to strings.
//! - `within` is true when both fields are numbers inside the box, edges included.
//! - `and` and `or` short-circuit, left to right; the job file requires them non-empty.

use std::cmp::Ordering;

use serde::Deserialize;
use serde_json::Value;

use super::num::Num;
use super::path::FieldPath;

/// A comparison operator as written in a job file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum CmpOp {
    /// `=` (also `==`).
    #[serde(rename = "=", alias = "==")]
    Eq,
    /// `!=`.
    #[serde(rename = "!=")]
    Ne,
    /// `<`.
    #[serde(rename = "<")]
    Lt,
    /// `<=`.
    #[serde(rename = "<=")]
    Le,
    /// `>`.
    #[serde(rename = ">")]
    Gt,
    /// `>=`.
    #[serde(rename = ">=")]
    Ge,
}

impl CmpOp {
    fn holds(self, ord: Ordering) -> bool {
        match self {
            CmpOp::Eq => ord == Ordering::Equal,
            CmpOp::Ne => ord != Ordering::Equal,
            CmpOp::Lt => ord == Ordering::Less,
            CmpOp::Le => ord != Ordering::Greater,
            CmpOp::Gt => ord == Ordering::Greater,
            CmpOp::Ge => ord != Ordering::Less,
        }
    }

    /// Whether the operator orders its operands (so it needs a number or a string).
    pub fn is_ordering(self) -> bool {
        !matches!(self, CmpOp::Eq | CmpOp::Ne)
    }

    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// The constant side of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// An integer or a finite float.
    Number(Num),
    /// A string.
    String(String),
    /// A boolean.
    Bool(bool),
}

/// An axis-aligned box of longitudes and latitudes, edges included (no antimeridian crossing).
#[derive(Debug, Clone, PartialEq)]
pub struct BoundingBox {
    /// The longitude field.
    pub lon: FieldPath,
    /// The latitude field.
    pub lat: FieldPath,
    /// Smallest longitude.
    pub west: f64,
    /// Smallest latitude.
    pub south: f64,
    /// Largest longitude.
    pub east: f64,
    /// Largest latitude.
    pub north: f64,
}

/// A compiled filter predicate.
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    /// `field op value`.
    Compare {
        /// The record's field.
        field: FieldPath,
        /// The operator.
        op: CmpOp,
        /// The constant.
        value: Literal,
    },
    /// All of them (non-empty).
    And(Vec<Predicate>),
    /// Any of them (non-empty).
    Or(Vec<Predicate>),
    /// The negation.
    Not(Box<Predicate>),
    /// Both fields inside the box.
    Within(BoundingBox),
}

impl Predicate {
    /// Whether `record` passes the filter (rules in the module docs).
    pub fn matches(&self, record: &Value) -> bool {
        match self {
            Predicate::Compare { field, op, value } => field
                .lookup(record)
                .and_then(|found| compare(found, value))
                .is_some_and(|ord| op.holds(ord)),
            Predicate::And(all) => all.iter().all(|p| p.matches(record)),
            Predicate::Or(any) => any.iter().any(|p| p.matches(record)),
            Predicate::Not(inner) => !inner.matches(record),
            Predicate::Within(b) => {
                let coord = |path: &FieldPath| path.lookup(record).and_then(Value::as_f64);
                match (coord(&b.lon), coord(&b.lat)) {
                    (Some(lon), Some(lat)) => {
                        (b.west..=b.east).contains(&lon) && (b.south..=b.north).contains(&lat)
                    }
                    _ => false,
                }
            }
        }
    }
}

/// How `found` orders against `literal`, or `None` when their types differ (the comparison is
/// then false whatever the operator).
fn compare(found: &Value, literal: &Literal) -> Option<Ordering> {
    match (found, literal) {
        (Value::Number(n), Literal::Number(lit)) => Num::from_json(n)?.cmp_num(lit),
        (Value::String(s), Literal::String(lit)) => Some(s.as_str().cmp(lit.as_str())),
        (Value::Bool(b), Literal::Bool(lit)) => Some(b.cmp(lit)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cmp(field: &str, op: CmpOp, value: Literal) -> Predicate {
        Predicate::Compare {
            field: FieldPath::parse(field).unwrap(),
            op,
            value,
        }
    }

    #[test]
    fn comparison_table() {
        use CmpOp::*;
        let record = json!({
            "i": 5, "big": u64::MAX, "neg": -3, "f": 2.5, "s": "abc", "b": true,
            "n": null, "o": {"x": 1}, "num_str": "5"
        });
        let int = |v: i128| Literal::Number(Num::Int(v));
        let float = |v: f64| Literal::Number(Num::Float(v));
        let string = |v: &str| Literal::String(v.to_owned());
        let cases: Vec<(&str, CmpOp, Literal, bool)> = vec![
            ("i", Eq, int(5), true),
            ("i", Ne, int(5), false),
            ("i", Lt, int(6), true),
            ("i", Le, int(5), true),
            ("i", Gt, int(5), false),
            ("i", Ge, int(5), true),
            ("i", Eq, float(5.0), true),
            ("i", Lt, float(5.5), true),
            ("f", Gt, int(2), true),
            ("f", Le, float(2.5), true),
            ("neg", Lt, int(0), true),
            // Integers compare exactly, beyond f64's 53 bits.
            ("big", Gt, int(i128::from(u64::MAX) - 1), true),
            ("big", Eq, int(i128::from(u64::MAX)), true),
            ("s", Eq, string("abc"), true),
            ("s", Lt, string("abd"), true),
            ("s", Ge, string("ab"), true),
            ("s", Ne, string("x"), true),
            ("b", Eq, Literal::Bool(true), true),
            ("b", Ne, Literal::Bool(true), false),
            // Missing and null: false for every operator, `!=` included.
            ("missing", Eq, int(5), false),
            ("missing", Ne, int(5), false),
            ("n", Ne, int(5), false),
            ("n", Eq, int(5), false),
            // Type mismatch: false for every operator, `!=` included; no coercion.
            ("num_str", Eq, int(5), false),
            ("num_str", Ne, int(5), false),
            ("i", Eq, string("5"), false),
            ("i", Ne, string("5"), false),
            ("b", Eq, int(1), false),
            ("o", Ne, int(1), false),
        ];
        for (field, op, value, want) in cases {
            let p = cmp(field, op, value.clone());
            assert_eq!(
                p.matches(&record),
                want,
                "{field} {} {value:?}",
                op.as_str()
            );
        }
    }

    #[test]
    fn boolean_logic_table() {
        let record = json!({"a": 1, "b": 2});
        let t = || cmp("a", CmpOp::Eq, Literal::Number(Num::Int(1)));
        let f = || cmp("b", CmpOp::Eq, Literal::Number(Num::Int(1)));
        let missing = || cmp("zzz", CmpOp::Ne, Literal::Number(Num::Int(1)));
        let cases = vec![
            (Predicate::And(vec![t(), t()]), true),
            (Predicate::And(vec![t(), f()]), false),
            (Predicate::Or(vec![f(), t()]), true),
            (Predicate::Or(vec![f(), f()]), false),
            (Predicate::Not(Box::new(f())), true),
            (Predicate::Not(Box::new(t())), false),
            // A missing field's comparison is false, so its negation keeps the record.
            (Predicate::Not(Box::new(missing())), true),
            (
                Predicate::And(vec![
                    t(),
                    Predicate::Or(vec![f(), Predicate::Not(Box::new(f()))]),
                ]),
                true,
            ),
        ];
        for (i, (p, want)) in cases.into_iter().enumerate() {
            assert_eq!(p.matches(&record), want, "case {i}: {p:?}");
        }
    }

    #[test]
    fn within_table() {
        let nyc = Predicate::Within(BoundingBox {
            lon: FieldPath::parse("lon").unwrap(),
            lat: FieldPath::parse("lat").unwrap(),
            west: -74.05,
            south: 40.50,
            east: -73.70,
            north: 41.00,
        });
        let cases = vec![
            (json!({"lon": -73.98, "lat": 40.75}), true),
            // Edges are inside.
            (json!({"lon": -74.05, "lat": 40.50}), true),
            (json!({"lon": -73.70, "lat": 41.00}), true),
            (json!({"lon": -74.0501, "lat": 40.75}), false),
            (json!({"lon": -73.6999, "lat": 40.75}), false),
            (json!({"lon": -73.98, "lat": 40.4999}), false),
            (json!({"lon": -73.98, "lat": 41.0001}), false),
            // Integers are numbers too.
            (json!({"lon": -74, "lat": 41}), true),
            (json!({"lon": -73.98}), false),
            (json!({"lon": "-73.98", "lat": 40.75}), false),
            (json!({"lon": null, "lat": 40.75}), false),
            (json!([1, 2]), false),
        ];
        for (record, want) in cases {
            assert_eq!(nyc.matches(&record), want, "{record}");
        }
    }
}
