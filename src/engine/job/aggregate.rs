//! Keyed window aggregates: count / sum / min / max / avg, an accumulator that lives in state
//! (serde), and the JSON record of a window's result.
//!
//! Values that are missing, `null` or not numbers are skipped by sum / min / max / avg (as SQL
//! skips NULL); `count` counts records. Sums of integers stay exact integers (i128 inside,
//! saturating); once a float is added the sum is a float, the floats' exact sum rounded once
//! (module `fsum`: the same bits in any order of the records). With no value, sum / min / max / avg
//! give `null` and count gives 0 (SQL again).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::fsum::ExactSum;
use super::num::Num;
use super::path::FieldPath;
use crate::engine::time::{Window, WindowKind};

/// One aggregate function.
#[derive(Debug, Clone, PartialEq)]
pub enum AggFn {
    /// Number of records.
    Count,
    /// Sum of a numeric field.
    Sum(FieldPath),
    /// Smallest value of a numeric field.
    Min(FieldPath),
    /// Largest value of a numeric field.
    Max(FieldPath),
    /// Mean of a numeric field (a float).
    Avg(FieldPath),
    /// Number of records whose field is present and not null (SQL's `COUNT(field)`).
    CountOf(FieldPath),
    /// Number of distinct values of a field, null and missing left out (SQL's
    /// `COUNT(DISTINCT field)`); values compare as their canonical JSON (`1` and `1.0` differ,
    /// as `42` and `"42"` do).
    CountDistinct(FieldPath),
    /// The records with the largest values of a field, as the fields they keep, largest
    /// first (module `top`).
    Top(super::top::TopN),
}

/// The aggregate functions of a window, each with its output name, in output-name order.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregateSpec {
    /// (output name, function).
    pub outputs: Vec<(String, AggFn)>,
}

/// One function's running state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Slot {
    Count(u64),
    Sum {
        int: i128,
        /// Floats summed with `+=` (checkpoints written before `exact`; 0 since).
        float: f64,
        floats: bool,
        n: u64,
        /// The floats' exact sum (module `fsum`).
        #[serde(default)]
        exact: ExactSum,
    },
    Min(Option<Num>),
    Max(Option<Num>),
    Avg {
        int: i128,
        /// As in `Sum`.
        float: f64,
        n: u64,
        #[serde(default)]
        exact: ExactSum,
    },
    /// The distinct values seen, as canonical JSON.
    Distinct(std::collections::BTreeSet<String>),
    /// The best records so far, best first.
    Top(Vec<super::top::Ranked>),
}

/// The running state of one key's window: one slot per output, in the spec's order.
/// Serializable so it can live in operator state between checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Accumulator {
    slots: Vec<Slot>,
}

impl AggregateSpec {
    /// An empty accumulator for this spec.
    pub(crate) fn accumulator(&self) -> Accumulator {
        Accumulator {
            slots: self
                .outputs
                .iter()
                .map(|(_, f)| match f {
                    AggFn::Count | AggFn::CountOf(_) => Slot::Count(0),
                    AggFn::CountDistinct(_) => Slot::Distinct(Default::default()),
                    AggFn::Top(_) => Slot::Top(Vec::new()),
                    AggFn::Sum(_) => Slot::Sum {
                        int: 0,
                        float: 0.0,
                        floats: false,
                        n: 0,
                        exact: ExactSum::default(),
                    },
                    AggFn::Min(_) => Slot::Min(None),
                    AggFn::Max(_) => Slot::Max(None),
                    AggFn::Avg(_) => Slot::Avg {
                        int: 0,
                        float: 0.0,
                        n: 0,
                        exact: ExactSum::default(),
                    },
                })
                .collect(),
        }
    }

    /// Adds one record to `acc`.
    pub(crate) fn add(&self, acc: &mut Accumulator, record: &Value) {
        for ((_, f), slot) in self.outputs.iter().zip(acc.slots.iter_mut()) {
            let num = |path: &FieldPath| path.lookup(record).and_then(Num::from_value);
            match (f, slot) {
                (AggFn::Count, Slot::Count(c)) => *c = c.saturating_add(1),
                (AggFn::CountOf(p), Slot::Count(c))
                    if p.lookup(record).is_some_and(|v| !v.is_null()) =>
                {
                    *c = c.saturating_add(1);
                }
                // A missing or null field is not counted.
                (AggFn::CountOf(_), Slot::Count(_)) => {}
                (AggFn::Top(t), Slot::Top(best)) => t.add(best, record),
                (AggFn::CountDistinct(p), Slot::Distinct(seen)) => {
                    if let Some(v) = p.lookup(record).filter(|v| !v.is_null()) {
                        let key = super::project::Key::of(v);
                        seen.insert(String::from_utf8_lossy(key.as_bytes()).into_owned());
                    }
                }
                (
                    AggFn::Sum(p),
                    Slot::Sum {
                        int,
                        floats,
                        n,
                        exact,
                        ..
                    },
                ) => {
                    if let Some(v) = num(p) {
                        *n += 1;
                        match v {
                            Num::Int(i) => *int = int.saturating_add(i),
                            Num::Float(x) => {
                                exact.add(x);
                                *floats = true;
                            }
                        }
                    }
                }
                (AggFn::Min(p), Slot::Min(m)) => {
                    if let Some(v) = num(p) {
                        if m.is_none_or(|cur| v.cmp_num(&cur).is_some_and(|o| o.is_lt())) {
                            *m = Some(v);
                        }
                    }
                }
                (AggFn::Max(p), Slot::Max(m)) => {
                    if let Some(v) = num(p) {
                        if m.is_none_or(|cur| v.cmp_num(&cur).is_some_and(|o| o.is_gt())) {
                            *m = Some(v);
                        }
                    }
                }
                (AggFn::Avg(p), Slot::Avg { int, n, exact, .. }) => {
                    if let Some(v) = num(p) {
                        *n += 1;
                        match v {
                            Num::Int(i) => *int = int.saturating_add(i),
                            Num::Float(x) => exact.add(x),
                        }
                    }
                }
                // An accumulator from another spec: the state layout check at start refuses
                // it before records flow, so this is never reached.
                _ => {}
            }
        }
    }

    /// Merges `other` into `acc` (two session windows became one): the same result as adding
    /// both windows' records to one accumulator.
    pub(crate) fn merge(&self, acc: &mut Accumulator, other: Accumulator) {
        for ((_, f), (slot, other)) in self
            .outputs
            .iter()
            .zip(acc.slots.iter_mut().zip(other.slots))
        {
            match (slot, other) {
                (Slot::Top(best), Slot::Top(o)) => {
                    if let AggFn::Top(t) = f {
                        t.merge(best, o);
                    }
                }
                (Slot::Count(c), Slot::Count(o)) => *c = c.saturating_add(o),
                (Slot::Distinct(seen), Slot::Distinct(o)) => seen.extend(o),
                (
                    Slot::Sum {
                        int,
                        float,
                        floats,
                        n,
                        exact,
                    },
                    Slot::Sum {
                        int: oi,
                        float: of,
                        floats: ofs,
                        n: on,
                        exact: oe,
                    },
                ) => {
                    *int = int.saturating_add(oi);
                    *float += of;
                    *floats |= ofs;
                    *n = n.saturating_add(on);
                    exact.merge(&oe);
                }
                (Slot::Min(m), Slot::Min(Some(o)))
                    if m.is_none_or(|cur| o.cmp_num(&cur).is_some_and(|c| c.is_lt())) =>
                {
                    *m = Some(o);
                }
                (Slot::Max(m), Slot::Max(Some(o)))
                    if m.is_none_or(|cur| o.cmp_num(&cur).is_some_and(|c| c.is_gt())) =>
                {
                    *m = Some(o);
                }
                (
                    Slot::Avg {
                        int,
                        float,
                        n,
                        exact,
                    },
                    Slot::Avg {
                        int: oi,
                        float: of,
                        n: on,
                        exact: oe,
                    },
                ) => {
                    *int = int.saturating_add(oi);
                    *float += of;
                    *n = n.saturating_add(on);
                    exact.merge(&oe);
                }
                // An empty min or max, or slots of another spec (refused at start, as in
                // `add`): nothing to merge.
                _ => {}
            }
        }
    }

    /// The results, by output name.
    pub(crate) fn results(&self, acc: &Accumulator) -> Vec<(String, Value)> {
        self.outputs
            .iter()
            .zip(&acc.slots)
            .map(|((name, _), slot)| (name.clone(), slot_result(slot)))
            .collect()
    }
}

/// A slot's float sum: the exact one, and what a checkpoint written before it summed with `+=`.
fn float_total(float: f64, exact: &ExactSum) -> f64 {
    if float == 0.0 {
        return exact.total();
    }
    let mut all = exact.clone();
    all.add(float);
    all.total()
}

#[allow(clippy::cast_precision_loss)]
fn slot_result(slot: &Slot) -> Value {
    match slot {
        Slot::Count(c) => Value::from(*c),
        Slot::Distinct(seen) => Value::from(seen.len() as u64),
        Slot::Top(best) => super::top::TopN::result(best),
        Slot::Sum { n: 0, .. } | Slot::Avg { n: 0, .. } => Value::Null,
        Slot::Sum {
            int,
            float,
            floats,
            exact,
            ..
        } => {
            if *floats {
                Num::Float(*int as f64 + float_total(*float, exact)).to_json()
            } else {
                Num::Int(*int).to_json()
            }
        }
        Slot::Min(m) | Slot::Max(m) => m.map_or(Value::Null, Num::to_json),
        Slot::Avg {
            int,
            float,
            n,
            exact,
        } => Num::Float((*int as f64 + float_total(*float, exact)) / *n as f64).to_json(),
    }
}

/// The `window` + `aggregate` pair of a job, compiled: one keyed, event-time windowed
/// aggregate (rules in `crate::engine::time`).
#[derive(Debug, Clone, PartialEq)]
pub struct WindowAggregate {
    /// Tumbling or sliding, in ms.
    pub kind: WindowKind,
    /// The event-time field: integer epoch milliseconds.
    pub time: FieldPath,
    /// Bounded out-of-orderness B, ms.
    pub out_of_orderness: i64,
    /// Allowed lateness L, ms.
    pub allowed_lateness: i64,
    /// Where late records go, if anywhere (they are counted either way).
    pub late_topic: Option<String>,
    /// The name of the key in the output record (the key_by path's last segment).
    pub key_name: String,
    /// The functions.
    pub aggregate: AggregateSpec,
}

impl WindowAggregate {
    /// The record's event time: an integer of epoch milliseconds in the i64 range, or an RFC
    /// 3339 date-time string (a Protobuf `Timestamp` in the proto3 JSON mapping); else `None`
    /// (a record the job cannot process: its `errors.tolerance` decides).
    pub fn event_time(&self, record: &Value) -> Option<i64> {
        crate::engine::time::epoch_ms_of(self.time.lookup(record)?)
    }

    /// The output records of one key's window: its result record, or with a `top` stage one
    /// record per ranked record (module `top`).
    pub(crate) fn result_records(
        &self,
        key: &Value,
        window: Window,
        acc: &Accumulator,
    ) -> Vec<Value> {
        if let ([(_, AggFn::Top(t))], [Slot::Top(best)]) =
            (self.aggregate.outputs.as_slice(), acc.slots.as_slice())
        {
            if let Some(rank) = &t.rank {
                return super::top::TopN::rows(best, rank);
            }
        }
        vec![self.result_record(key, window, acc)]
    }

    /// The output record of one key's window:
    /// `{"<key name>": key, "window_start": ms, "window_end": ms, "<output>": value, ...}`
    /// (`window_end` exclusive).
    pub(crate) fn result_record(&self, key: &Value, window: Window, acc: &Accumulator) -> Value {
        let mut out = Map::new();
        out.insert(self.key_name.clone(), key.clone());
        out.insert("window_start".to_owned(), Value::from(window.start));
        out.insert("window_end".to_owned(), Value::from(window.end));
        out.extend(self.aggregate.results(acc));
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> FieldPath {
        FieldPath::parse(s).unwrap()
    }

    fn spec() -> AggregateSpec {
        AggregateSpec {
            outputs: vec![
                ("avg".into(), AggFn::Avg(p("v"))),
                ("max".into(), AggFn::Max(p("v"))),
                ("min".into(), AggFn::Min(p("v"))),
                ("n".into(), AggFn::Count),
                ("sum".into(), AggFn::Sum(p("v"))),
            ],
        }
    }

    #[test]
    fn aggregate_table() {
        let cases: Vec<(Vec<Value>, Value)> = vec![
            (
                vec![],
                json!({"avg": null, "max": null, "min": null, "n": 0, "sum": null}),
            ),
            (
                vec![json!({"v": 2}), json!({"v": 5}), json!({"v": -1})],
                json!({"avg": 2.0, "max": 5, "min": -1, "n": 3, "sum": 6}),
            ),
            // Floats make the sum a float; min/max keep each value's own type.
            (
                vec![json!({"v": 1}), json!({"v": 0.5})],
                json!({"avg": 0.75, "max": 1, "min": 0.5, "n": 2, "sum": 1.5}),
            ),
            // Missing, null and non-numbers are skipped but still counted by count.
            (
                vec![
                    json!({"v": 4}),
                    json!({}),
                    json!({"v": null}),
                    json!({"v": "9"}),
                ],
                json!({"avg": 4.0, "max": 4, "min": 4, "n": 4, "sum": 4}),
            ),
            (
                vec![json!({"x": 1})],
                json!({"avg": null, "max": null, "min": null, "n": 1, "sum": null}),
            ),
            // Integer sums are exact beyond f64's precision and beyond i64.
            (
                vec![json!({"v": u64::MAX}), json!({"v": 1})],
                json!({"avg": 9_223_372_036_854_775_808.0_f64, "max": u64::MAX, "min": 1, "n": 2,
                       "sum": 18_446_744_073_709_551_616.0_f64}),
            ),
            (
                vec![json!({"v": 9_007_199_254_740_993_i64}), json!({"v": 1})],
                json!({"avg": 4_503_599_627_370_497.0_f64, "max": 9_007_199_254_740_993_i64,
                       "min": 1, "n": 2, "sum": 9_007_199_254_740_994_i64}),
            ),
        ];
        let spec = spec();
        for (records, want) in cases {
            let mut acc = spec.accumulator();
            for r in &records {
                spec.add(&mut acc, r);
            }
            let got = Value::Object(spec.results(&acc).into_iter().collect());
            assert_eq!(got, want, "records {records:?}");
        }
    }

    #[test]
    fn accumulator_survives_serialization_mid_window() {
        let spec = spec();
        let mut acc = spec.accumulator();
        spec.add(&mut acc, &json!({"v": 3}));
        spec.add(&mut acc, &json!({"v": 1.5}));
        let bytes = serde_json::to_vec(&acc).unwrap();
        let mut back: Accumulator = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, acc);
        spec.add(&mut back, &json!({"v": 10}));
        spec.add(&mut acc, &json!({"v": 10}));
        assert_eq!(spec.results(&back), spec.results(&acc));
    }

    #[test]
    fn result_record_shape() {
        let op = WindowAggregate {
            kind: WindowKind::Tumbling { size: 3_600_000 },
            time: p("event_time"),
            out_of_orderness: 60_000,
            allowed_lateness: 0,
            late_topic: None,
            key_name: "driver_id".into(),
            aggregate: AggregateSpec {
                outputs: vec![
                    ("passengers".into(), AggFn::Sum(p("passengers"))),
                    ("rides".into(), AggFn::Count),
                ],
            },
        };
        let mut acc = op.aggregate.accumulator();
        for r in [json!({"passengers": 2}), json!({"passengers": 3})] {
            op.aggregate.add(&mut acc, &r);
        }
        let window = Window {
            start: 0,
            end: 3_600_000,
        };
        assert_eq!(
            op.result_record(&json!(7), window, &acc),
            json!({"driver_id": 7, "window_start": 0, "window_end": 3_600_000,
                   "passengers": 5, "rides": 2})
        );
        assert_eq!(
            op.event_time(&json!({"event_time": 1_700_000_000_000_i64})),
            Some(1_700_000_000_000)
        );
        assert_eq!(op.event_time(&json!({"event_time": 1.5})), None);
        assert_eq!(op.event_time(&json!({"event_time": "1"})), None);
        assert_eq!(op.event_time(&json!({})), None);
    }
}
