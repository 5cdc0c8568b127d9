//! JSON numbers for comparisons and aggregates: integers kept exact (i64 and u64 both fit an
//! i128), floats as f64. An integer against a float compares as f64.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

/// A JSON number.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Num {
    /// Any JSON integer (i64 or u64 range).
    Int(i128),
    /// A float (always finite: JSON has no NaN or infinity).
    Float(f64),
}

impl Num {
    /// The number in a JSON value, if it is one.
    pub fn from_json(n: &Number) -> Option<Num> {
        if let Some(i) = n.as_i64() {
            Some(Num::Int(i128::from(i)))
        } else if let Some(u) = n.as_u64() {
            Some(Num::Int(i128::from(u)))
        } else {
            n.as_f64().map(Num::Float)
        }
    }

    /// The number in `value`, or `None` when it is not a number.
    pub fn from_value(value: &Value) -> Option<Num> {
        match value {
            Value::Number(n) => Num::from_json(n),
            _ => None,
        }
    }

    /// As f64 (large integers round).
    #[allow(clippy::cast_precision_loss)]
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    /// Total order between two numbers; `None` only for NaN, which JSON cannot carry.
    pub fn cmp_num(&self, other: &Num) -> Option<Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(b)),
            _ => self.as_f64().partial_cmp(&other.as_f64()),
        }
    }

    /// As a JSON value: an integer when it fits i64 or u64, else a float; `null` for a
    /// non-finite float (which sums can reach by overflowing).
    #[allow(clippy::cast_precision_loss)]
    pub fn to_json(self) -> Value {
        match self {
            Num::Int(i) => {
                if let Ok(v) = i64::try_from(i) {
                    Value::from(v)
                } else if let Ok(v) = u64::try_from(i) {
                    Value::from(v)
                } else {
                    Number::from_f64(i as f64).map_or(Value::Null, Value::Number)
                }
            }
            Num::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
        }
    }
}
