//! A job file's join of two input topics, each with its key, event time and optional filter,
//! joined on equal keys: an interval join within event-time bounds (the rules are
//! `crate::engine::time::interval_join`'s), or a window join, the pairs of a key whose records
//! fall in the same window, written when the window closes (`job::window_join`). Its output
//! record holds each side's record under the side's name: `{"ride": {...}, "fare": {...}}`,
//! keyed by the join key.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::expr::Expr;
use super::filter::Predicate;
use super::path::FieldPath;
use super::project::Key;
use crate::engine::time::interval_join::{Bounds, Side};
use crate::engine::time::WindowKind;

/// One input of a join.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinSide {
    /// The source topic whose records are this side's.
    pub topic: String,
    /// The side's name in the output record (`as`; default: the topic).
    pub name: String,
    /// The field the records are joined on.
    pub key: FieldPath,
    /// The event-time field: epoch milliseconds or an RFC 3339 date-time.
    pub time: FieldPath,
    /// Only the records that match take part (`filter`, as the pipeline's).
    pub filter: Option<Predicate>,
    /// Only the records for which it is TRUE take part (a SQL condition on this side alone).
    pub condition: Option<Expr>,
}

/// Why a side's record takes no part in the join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its filter left it out.
    Filtered,
    /// The job cannot process it: the reason, for the job's `errors.tolerance`.
    Bad(String),
}

impl JoinSide {
    /// The record's key and event time, or why it takes no part.
    pub(crate) fn admit(&self, record: &Value) -> Result<(Key, i64), Refused> {
        if self.filter.as_ref().is_some_and(|p| !p.matches(record)) {
            return Err(Refused::Filtered);
        }
        if let Some(c) = &self.condition {
            match c.holds(record) {
                Ok(true) => {}
                Ok(false) => return Err(Refused::Filtered),
                Err(e) => return Err(Refused::Bad(format!("the condition on {}: {e}", self.name))),
            }
        }
        let key = self.key.lookup(record).map(Key::of).ok_or_else(|| {
            Refused::Bad(format!(
                "the join key {} of {} is missing or null",
                self.key, self.name
            ))
        })?;
        let time = self.event_time(record).ok_or_else(|| {
            Refused::Bad(format!(
                "the join's time field {} of {} is missing, or neither an integer (ms since the epoch) nor an RFC 3339 date-time",
                self.time, self.name
            ))
        })?;
        Ok((key, time))
    }

    /// The record's event time (as a window reads it), if it has one.
    pub fn event_time(&self, record: &Value) -> Option<i64> {
        crate::engine::time::epoch_ms_of(self.time.lookup(record)?)
    }
}

/// `join`: an inner join of two topics (module docs), within bounds or within windows.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalJoin {
    /// The first input.
    pub left: JoinSide,
    /// The second input.
    pub right: JoinSide,
    /// `between = [lower, upper]`: a right record at r meets a left one at l when
    /// `lower ≤ r − l ≤ upper` (ms).
    pub lower: i64,
    /// See `lower`.
    pub upper: i64,
    /// `window = { tumbling = ... }` (or sliding): a window join, whose pairs are the records of
    /// a key in the same window (then `lower` and `upper` are not used).
    pub window: Option<WindowKind>,
    /// Bounded out-of-orderness of the inputs, ms.
    pub out_of_orderness: i64,
    /// Allowed lateness, ms: a record is late (joins nothing) when its time is before the
    /// watermark less this.
    pub allowed_lateness: i64,
    /// Where late records go as they came, if anywhere (they are counted either way).
    pub late_topic: Option<String>,
}

impl IntervalJoin {
    /// The side that reads `topic`, if one does.
    pub(crate) fn side_of(&self, topic: &str) -> Option<Side> {
        if self.left.topic == topic {
            Some(Side::Left)
        } else if self.right.topic == topic {
            Some(Side::Right)
        } else {
            None
        }
    }

    /// The spec of `side`.
    pub(crate) fn side(&self, side: Side) -> &JoinSide {
        match side {
            Side::Left => &self.left,
            Side::Right => &self.right,
        }
    }

    /// The bounds the join operator applies.
    pub(crate) fn bounds(&self) -> Bounds {
        Bounds {
            lower: self.lower,
            upper: self.upper,
        }
    }

    /// The output record of a joined pair: each side's record under its name.
    pub(crate) fn result_record(&self, left: Value, right: Value) -> Value {
        let mut out = Map::new();
        out.insert(self.left.name.clone(), left);
        out.insert(self.right.name.clone(), right);
        Value::Object(out)
    }
}

/// One key's records of one window, by side, in arrival order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Sides {
    left: Vec<Value>,
    right: Vec<Value>,
}

impl Sides {
    /// Every left × right pair, left records in arrival order, each with the right ones in
    /// arrival order.
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (&Value, &Value)> {
        self.left
            .iter()
            .flat_map(move |l| self.right.iter().map(move |r| (l, r)))
    }

    /// Adds `other`'s records after these.
    pub(crate) fn extend(&mut self, other: Sides) {
        self.left.extend(other.left);
        self.right.extend(other.right);
    }

    /// Adds a record of `side`.
    pub(crate) fn push(&mut self, side: Side, value: Value) {
        match side {
            Side::Left => self.left.push(value),
            Side::Right => self.right.push(value),
        }
    }
}
