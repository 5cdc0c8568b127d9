//! Top-N: a window's N records with the largest value of a numeric field, largest first.
//! Either the `top` aggregate function — an array of the fields each keeps, in a window's
//! result record beside other aggregates — or the `top` stage after a window, Flink SQL's
//! window Top-N (`ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY by DESC) <= N`): one
//! output record per ranked record, the record itself with its rank (1 to N).
//!
//! Records whose field is missing, `null` or not a number are not ranked (as `sum` skips
//! them). Equal values rank by the kept fields' canonical JSON, smallest first, so the result
//! does not depend on the order records arrive in: a streaming run and the batch reference
//! agree, and so do two runs. The N best of a union are among the N best of each part, so
//! two accumulators merge (session windows) without keeping more than N.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::num::Num;
use super::path::FieldPath;

/// `top`: the `n` records with the largest `by`, as the fields in `keep`.
#[derive(Debug, Clone, PartialEq)]
pub struct TopN {
    /// How many records a result keeps (at least 1).
    pub n: usize,
    /// The numeric field they rank by, largest first.
    pub by: FieldPath,
    /// The fields each kept record has in the result, named by their last segment (none: the
    /// whole record).
    pub keep: Vec<FieldPath>,
    /// The `top` stage: the window's result is one record per ranked record, with its rank
    /// (1 to N) in this field.
    pub rank: Option<String>,
}

/// One ranked record: its value of `by` and the fields it keeps (their canonical JSON breaks
/// ties).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Ranked {
    by: Num,
    kept: Value,
    tie: String,
}

impl TopN {
    /// Ranks `record` into `best` (largest first, at most `n`), unless its `by` is not a
    /// number.
    pub(crate) fn add(&self, best: &mut Vec<Ranked>, record: &Value) {
        let Some(by) = self.by.lookup(record).and_then(Num::from_value) else {
            return;
        };
        let kept = if self.keep.is_empty() {
            record.clone()
        } else {
            let mut kept = Map::new();
            for path in &self.keep {
                let v = path.lookup(record).cloned().unwrap_or(Value::Null);
                kept.insert(path.last().to_owned(), v);
            }
            Value::Object(kept)
        };
        let tie = kept.to_string();
        self.insert(best, Ranked { by, kept, tie });
    }

    /// Merges `other`'s ranked records into `best`.
    pub(crate) fn merge(&self, best: &mut Vec<Ranked>, other: Vec<Ranked>) {
        for r in other {
            self.insert(best, r);
        }
    }

    /// The result: the kept records, largest first.
    pub(crate) fn result(best: &[Ranked]) -> Value {
        Value::Array(best.iter().map(|r| r.kept.clone()).collect())
    }

    /// The `top` stage's result records: each ranked record with its rank in `rank` (a record
    /// that is not a JSON object is kept under `value`).
    pub(crate) fn rows(best: &[Ranked], rank: &str) -> Vec<Value> {
        best.iter()
            .enumerate()
            .map(|(i, r)| {
                let mut row = match &r.kept {
                    Value::Object(m) => m.clone(),
                    other => Map::from_iter([("value".to_owned(), other.clone())]),
                };
                row.insert(rank.to_owned(), Value::from(i as u64 + 1));
                Value::Object(row)
            })
            .collect()
    }

    fn insert(&self, best: &mut Vec<Ranked>, r: Ranked) {
        let at = best.partition_point(|b| ranks_before(b, &r));
        if at < self.n.max(1) {
            best.insert(at, r);
            best.truncate(self.n.max(1));
        }
    }
}

/// Whether `a` ranks before `b`: a larger `by`, or an equal one and smaller kept fields.
fn ranks_before(a: &Ranked, b: &Ranked) -> bool {
    match a.by.cmp_num(&b.by) {
        Some(std::cmp::Ordering::Greater) => true,
        Some(std::cmp::Ordering::Less) => false,
        _ => a.tie <= b.tie,
    }
}

impl std::fmt::Display for TopN {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keep: Vec<String> = self.keep.iter().map(ToString::to_string).collect();
        match &self.rank {
            Some(rank) => write!(f, "top({} by {}, ranked in {rank})", self.n, self.by),
            None => write!(f, "top({} by {} keep {})", self.n, self.by, keep.join(",")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn top(n: usize) -> TopN {
        TopN {
            n,
            by: FieldPath::parse("tips").unwrap(),
            keep: vec![
                FieldPath::parse("driver_id").unwrap(),
                FieldPath::parse("tips").unwrap(),
            ],
            rank: None,
        }
    }

    #[test]
    fn the_n_largest_largest_first_ties_by_kept_fields_and_any_order() {
        // (n, records, result)
        let cases: Vec<(usize, Vec<Value>, Value)> = vec![
            (2, vec![], json!([])),
            (
                2,
                vec![
                    json!({"driver_id": 1, "tips": 5}),
                    json!({"driver_id": 2, "tips": 9.5}),
                    json!({"driver_id": 3, "tips": 7}),
                ],
                json!([{"driver_id": 2, "tips": 9.5}, {"driver_id": 3, "tips": 7}]),
            ),
            // Not a number, null or missing: not ranked.
            (
                3,
                vec![
                    json!({"driver_id": 1, "tips": "5"}),
                    json!({"driver_id": 2, "tips": null}),
                    json!({"driver_id": 3}),
                    json!({"driver_id": 4, "tips": 1}),
                ],
                json!([{"driver_id": 4, "tips": 1}]),
            ),
            // Ties: the smaller kept fields first; a missing kept field is null.
            (
                2,
                vec![
                    json!({"driver_id": 9, "tips": 3}),
                    json!({"driver_id": 10, "tips": 3}),
                    json!({"tips": 3}),
                ],
                json!([{"driver_id": 10, "tips": 3}, {"driver_id": 9, "tips": 3}]),
            ),
            // n = 0 is kept as 1 (the job file refuses it).
            (
                0,
                vec![
                    json!({"driver_id": 1, "tips": 1}),
                    json!({"driver_id": 2, "tips": 2}),
                ],
                json!([{"driver_id": 2, "tips": 2}]),
            ),
        ];
        for (n, records, want) in cases {
            let t = top(n);
            for order in [records.clone(), records.iter().rev().cloned().collect()] {
                let mut best = Vec::new();
                for r in &order {
                    t.add(&mut best, r);
                }
                assert_eq!(TopN::result(&best), want, "n {n}, records {order:?}");
            }
            // Split in two parts, ranked apart, merged: the same.
            let (a, b) = records.split_at(records.len() / 2);
            let (mut x, mut y) = (Vec::new(), Vec::new());
            a.iter().for_each(|r| t.add(&mut x, r));
            b.iter().for_each(|r| t.add(&mut y, r));
            t.merge(&mut x, y);
            assert_eq!(TopN::result(&x), want, "merged, n {n}");
        }
    }

    #[test]
    fn the_top_stage_ranks_whole_records_one_row_each() {
        let t = TopN {
            rank: Some("rank".into()),
            keep: Vec::new(),
            ..top(2)
        };
        let mut best = Vec::new();
        for r in [
            json!({"driver_id": 1, "tips": 5, "window_start": 0}),
            json!({"driver_id": 2, "tips": 7, "window_start": 0}),
            json!({"driver_id": 3, "tips": 5, "window_start": 0}),
        ] {
            t.add(&mut best, &r);
        }
        assert_eq!(
            TopN::rows(&best, "rank"),
            vec![
                json!({"driver_id": 2, "tips": 7, "window_start": 0, "rank": 1}),
                json!({"driver_id": 1, "tips": 5, "window_start": 0, "rank": 2}),
            ]
        );
        assert_eq!(t.to_string(), "top(2 by tips, ranked in rank)");
    }
}
