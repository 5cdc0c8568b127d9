//! A job's pipeline run over a finite list of records, in memory: the reference a streaming run
//! is compared with (a verifier's "expected output").
//!
//! Same operators, same rules, except time: every record counts as on time, and every window
//! fires at the end. That is what a streaming run produces when no record is late, i.e. when
//! the window's `out_of_orderness` covers the input's real disorder across all partitions.
//!
//! The output key is what the sink writes: the input record's Kafka key until a `key_by`, then
//! the key's [`Key::kafka_key`].

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::aggregate::{Accumulator, WindowAggregate};
use super::join::{IntervalJoin, Refused};
use super::project::Key;
use super::spec::Operator;
use crate::engine::metrics::OperatorCounter;
use crate::engine::time::interval_join::Side;
use crate::engine::time::{Window, WindowKind};

/// The records a pipeline emits, and what it dropped.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchOutput {
    /// (Kafka key, value), stateless records in input order, then window results by window
    /// end, start and key (of the last window, when windows follow each other).
    pub records: Vec<(Option<Vec<u8>>, Value)>,
    /// Records dropped by `key_by` (key field missing or null).
    pub no_key: u64,
    /// Records a SQL expression could not be computed for.
    pub bad: u64,
    /// Records dropped by the window (event time missing or not an integer).
    pub no_event_time: u64,
}

/// The key a record carries: the input's Kafka key until a `key_by` replaces it. Shared by
/// the batch runner and the runtime, so both key their output alike.
#[derive(Debug, Clone)]
pub(crate) enum Carried {
    /// The input record's Kafka key.
    Input(Option<Vec<u8>>),
    /// The key `key_by` extracted.
    Keyed(Key),
}

impl Carried {
    /// The Kafka key of an output record.
    pub(crate) fn kafka_key(&self) -> Option<Vec<u8>> {
        match self {
            Carried::Input(k) => k.clone(),
            Carried::Keyed(k) => Some(k.kafka_key()),
        }
    }
}

/// Runs `pipeline` over the records of several topics ((topic, Kafka key, JSON value) in
/// input order): a pipeline that starts with a join gives each side its topic's records;
/// any other reads them all alike ([`run_batch`]).
pub fn run_batch_of_topics<I>(pipeline: &[Operator], input: I) -> BatchOutput
where
    I: IntoIterator<Item = (String, Option<Vec<u8>>, Value)>,
{
    match pipeline.first() {
        Some(Operator::Join(join)) => join_batch(join, &pipeline[1..], input),
        _ => run_batch(pipeline, input.into_iter().map(|(_, k, v)| (k, v))),
    }
}

/// A key's left and right records with their times, in input order.
type SideRecords = (Vec<(i64, Value)>, Vec<(i64, Value)>);

/// An interval join over finite inputs: every left and right record of a key whose times are
/// within the bounds make a pair (every record on time), by key, then left in input order,
/// then right in input order; each pair through the operators after the join.
fn join_batch<I>(join: &IntervalJoin, after: &[Operator], input: I) -> BatchOutput
where
    I: IntoIterator<Item = (String, Option<Vec<u8>>, Value)>,
{
    let mut out = BatchOutput::default();
    let mut sides: BTreeMap<Key, SideRecords> = BTreeMap::new();
    for (topic, _, value) in input {
        let Some(side) = join.side_of(&topic) else {
            continue;
        };
        let (key, t) = match join.side(side).admit(&value) {
            Ok(kt) => kt,
            Err(Refused::Filtered) => continue,
            Err(Refused::Bad(_)) => {
                if join.side(side).key.lookup(&value).is_none() {
                    out.no_key += 1;
                } else {
                    out.no_event_time += 1;
                }
                continue;
            }
        };
        let (lefts, rights) = sides.entry(key).or_default();
        match side {
            Side::Left => lefts.push((t, value)),
            Side::Right => rights.push((t, value)),
        }
    }
    if let Some(kind) = join.window {
        window_pairs(join, kind, after, sides, &mut out);
        return out;
    }
    let bounds = join.bounds();
    for (key, (lefts, rights)) in sides {
        for (l, left) in &lefts {
            for (r, right) in &rights {
                if !bounds.matches(*l, *r) {
                    continue;
                }
                let record = join.result_record(left.clone(), right.clone());
                if let Some((carried, v)) =
                    stateless_counted(after, Carried::Keyed(key.clone()), record, &mut out)
                {
                    out.records.push((carried.kafka_key(), v));
                }
            }
        }
    }
    out
}

/// A window join's pairs: per window (by end, then start) and key, every left × right pair of
/// the key's records in that window (left records in input order, each with the right ones in
/// input order), each through the operators after the join.
fn window_pairs(
    join: &IntervalJoin,
    kind: WindowKind,
    after: &[Operator],
    sides: BTreeMap<Key, SideRecords>,
    out: &mut BatchOutput,
) {
    let mut windows: BTreeMap<(i64, i64, Key), super::join::Sides> =
        BTreeMap::new();
    for (key, (lefts, rights)) in sides {
        for (side, records) in [(Side::Left, lefts), (Side::Right, rights)] {
            for (t, v) in records {
                for w in kind.assign(t) {
                    let entry = windows.entry((w.end, w.start, key.clone())).or_default();
                    entry.push(side, v.clone());
                }
            }
        }
    }
    for ((_, _, key), sides) in windows {
        for (l, r) in sides.pairs() {
            let record = join.result_record(l.clone(), r.clone());
            if let Some((carried, v)) =
                stateless_counted(after, Carried::Keyed(key.clone()), record, out)
            {
                out.records.push((carried.kafka_key(), v));
            }
        }
    }
}

/// Runs `pipeline` over `input` ((Kafka key, JSON value) in input order).
pub fn run_batch<I>(pipeline: &[Operator], input: I) -> BatchOutput
where
    I: IntoIterator<Item = (Option<Vec<u8>>, Value)>,
{
    let split = pipeline
        .iter()
        .position(|op| matches!(op, Operator::WindowAggregate(_)));
    let (before, window, after) = match split {
        Some(i) => (&pipeline[..i], pipeline.get(i), &pipeline[i + 1..]),
        None => (pipeline, None, &[][..]),
    };
    let mut out = BatchOutput::default();
    let mut windows: BTreeMap<(Window, Key), Accumulator> = BTreeMap::new();
    // Session windows: each key's records, sessionized at the end.
    let mut sessions: BTreeMap<Key, Vec<(i64, Value)>> = BTreeMap::new();
    for (kafka_key, value) in input {
        let Some((carried, value)) =
            stateless_counted(before, Carried::Input(kafka_key), value, &mut out)
        else {
            continue;
        };
        match window {
            Some(Operator::WindowAggregate(w)) => {
                let Some(t) = w.event_time(&value) else {
                    out.no_event_time += 1;
                    continue;
                };
                // check_pipeline puts a key_by before every window, so the record is keyed.
                let Carried::Keyed(key) = carried else {
                    out.no_key += 1;
                    continue;
                };
                if let WindowKind::Session { .. } = w.kind {
                    sessions.entry(key).or_default().push((t, value));
                    continue;
                }
                for win in w.kind.assign(t) {
                    let acc = windows
                        .entry((win, key.clone()))
                        .or_insert_with(|| w.aggregate.accumulator());
                    w.aggregate.add(acc, &value);
                }
            }
            _ => out.records.push((carried.kafka_key(), value)),
        }
    }
    if let Some(Operator::WindowAggregate(w)) = window {
        if let WindowKind::Session { gap } = w.kind {
            for (key, records) in sessions {
                for (win, acc) in sessionize(w, gap, records) {
                    windows.insert((win, key.clone()), acc);
                }
            }
        }
        fire_all(w, windows, after, &mut out);
    }
    out
}

/// Every window's results, by window end, start and key, through the operators `after` the
/// window, into `out`.
fn fire_all(
    w: &WindowAggregate,
    windows: BTreeMap<(Window, Key), Accumulator>,
    after: &[Operator],
    out: &mut BatchOutput,
) {
    // A window after this one: this one's results are its input, as a keyed stage's outputs
    // are the next stage's (their Kafka key is the result's key).
    let next_stage = after
        .iter()
        .any(|op| matches!(op, Operator::WindowAggregate(_)));
    let mut results = Vec::new();
    let mut fired: Vec<_> = windows.into_iter().collect();
    fired.sort_by(|((a, ka), _), ((b, kb), _)| (a.end, a.start, ka).cmp(&(b.end, b.start, kb)));
    for ((win, key), acc) in fired {
        let Some(key_value) = key.to_value() else {
            continue;
        };
        for result in w.result_records(&key_value, win, &acc) {
            if next_stage {
                results.push((Some(key.kafka_key()), result));
                continue;
            }
            if let Some((carried, v)) =
                stateless_counted(after, Carried::Keyed(key.clone()), result, out)
            {
                out.records.push((carried.kafka_key(), v));
            }
        }
    }
    if next_stage {
        let next = run_batch(after, results);
        out.records.extend(next.records);
        out.no_key += next.no_key;
        out.bad += next.bad;
        out.no_event_time += next.no_event_time;
    }
}

/// One key's records cut into sessions: sorted by event time, a new session wherever two
/// records are more than `gap` apart; each session `[first, last + gap)` with its records
/// aggregated in event-time order.
fn sessionize(
    w: &WindowAggregate,
    gap: i64,
    mut records: Vec<(i64, Value)>,
) -> Vec<(Window, Accumulator)> {
    records.sort_by_key(|(t, _)| *t);
    let mut out: Vec<(Window, Accumulator)> = Vec::new();
    for (t, value) in records {
        let end = t.saturating_add(gap);
        match out.last_mut() {
            Some((win, acc)) if t <= win.end => {
                win.end = win.end.max(end);
                w.aggregate.add(acc, &value);
            }
            _ => {
                let mut acc = w.aggregate.accumulator();
                w.aggregate.add(&mut acc, &value);
                out.push((Window { start: t, end }, acc));
            }
        }
    }
    out
}

/// Why the stateless operators dropped a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// A filter did not match.
    Filtered,
    /// `key_by`'s field is missing or null.
    NoKey,
    /// A SQL expression could not be computed for the record: why.
    Bad(String),
}

/// Filters, projections and key_by, shared by the batch runner and the runtime: the record's
/// key and value, and whether a projection changed the value (the runtime then re-encodes it;
/// otherwise the input bytes go out as they came).
pub(crate) fn stateless(
    ops: &[Operator],
    mut carried: Carried,
    mut value: Value,
) -> Result<(Carried, Value, bool), Dropped> {
    let mut projected = false;
    for op in ops {
        match op {
            Operator::Filter(p) => {
                if !p.matches(&value) {
                    return Err(Dropped::Filtered);
                }
            }
            Operator::Project(p) => {
                value = p.apply(value);
                projected = true;
            }
            Operator::KeyBy(k) => {
                carried = Carried::Keyed(k.extract(&value).ok_or(Dropped::NoKey)?)
            }
            Operator::Where(e) => {
                if !e.holds(&value).map_err(|e| Dropped::Bad(format!("WHERE: {e}")))? {
                    return Err(Dropped::Filtered);
                }
            }
            Operator::Select(s) => {
                value = s.apply(&value).map_err(|e| Dropped::Bad(format!("SELECT: {e}")))?;
                projected = true;
            }
            // Only one window or join per job (check_pipeline); the caller splits there.
            Operator::WindowAggregate(_) | Operator::Join(_) => {}
        }
    }
    Ok((carried, value, projected))
}

/// [`stateless`] one operator at a time when observed, counting each operator's records in
/// and out (the same result: `stateless` is a fold over the operators).
pub(crate) fn counted(
    ops: &[Operator],
    counters: &[Arc<OperatorCounter>],
    carried: Carried,
    value: Value,
) -> Result<(Carried, Value, bool), Dropped> {
    if counters.len() != ops.len() {
        return stateless(ops, carried, value);
    }
    let (mut carried, mut value, mut changed) = (carried, value, false);
    for (op, counter) in ops.iter().zip(counters) {
        counter.record_in();
        let (c, v, projected) = stateless(std::slice::from_ref(op), carried, value)?;
        counter.records_out(1);
        (carried, value, changed) = (c, v, changed || projected);
    }
    Ok((carried, value, changed))
}

/// A keyed stage's result that an operator after it cannot compute (a SQL expression of the
/// SELECT list failing on it): left out, counted as skipped and logged, never silently.
pub(crate) fn result_left_out(metrics: Option<&crate::engine::metrics::Metrics>, why: &str) {
    if let Some(m) = metrics {
        m.record_skipped();
    }
    tracing::warn!(reason = why, "a result of the keyed stage is left out");
}

/// [`stateless`], counting what key_by drops.
fn stateless_counted(
    ops: &[Operator],
    carried: Carried,
    value: Value,
    out: &mut BatchOutput,
) -> Option<(Carried, Value)> {
    match stateless(ops, carried, value) {
        Ok((carried, value, _)) => Some((carried, value)),
        Err(Dropped::NoKey) => {
            out.no_key += 1;
            None
        }
        Err(Dropped::Filtered) => None,
        Err(Dropped::Bad(_)) => {
            out.bad += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::job::Job;
    use serde_json::json;

    fn ride(ride_id: u64, driver: u64, is_start: bool, lon: f64, passengers: u32, t: i64) -> Value {
        json!({
            "ride_id": ride_id, "driver_id": driver, "is_start": is_start,
            "start_lon": lon, "start_lat": 40.75, "end_lon": -73.95, "end_lat": 40.78,
            "passengers": passengers, "event_time": t
        })
    }

    fn keyed(v: Value) -> (Option<Vec<u8>>, Value) {
        (Some(v["driver_id"].to_string().into_bytes()), v)
    }

    #[test]
    fn the_cleansing_job_in_batch_keeps_nyc_rides_in_order_with_their_keys() {
        let job = Job::parse("c.toml", include_str!("../../../jobs/rides-cleansing.toml")).unwrap();
        let input = vec![
            keyed(ride(1, 7, true, -73.98, 1, 10)),
            keyed(ride(2, 8, true, -74.17, 1, 20)), // Newark: dropped
            keyed(ride(1, 7, false, -73.98, 1, 30)),
        ];
        let out = run_batch(&job.pipeline, input.clone());
        assert_eq!(out.records, vec![input[0].clone(), input[2].clone()]);
    }

    #[test]
    fn the_hourly_job_in_batch_counts_ends_per_driver_per_hour() {
        let job = Job::parse(
            "h.toml",
            include_str!("../../../jobs/rides-per-driver-hourly.toml"),
        )
        .unwrap();
        let h = 3_600_000;
        let input = vec![
            keyed(ride(1, 7, false, -73.98, 2, h + 5)),
            keyed(ride(1, 7, true, -73.98, 2, h - 60_000)), // START: not counted
            keyed(ride(2, 8, false, -73.98, 4, h + 10)),
            keyed(ride(3, 7, false, -73.98, 1, 2 * h - 1)),
            keyed(ride(4, 7, false, -73.98, 3, 2 * h)),
            keyed(json!({"is_start": false, "event_time": h})), // no driver_id
            keyed(json!({"is_start": false, "driver_id": 9})),  // no event_time
        ];
        let out = run_batch(&job.pipeline, input);
        let row = |d: u64, start: i64, rides: u64, passengers: u64| {
            (
                Some(d.to_string().into_bytes()),
                json!({"driver_id": d, "window_start": start, "window_end": start + h,
                       "rides": rides, "passengers": passengers}),
            )
        };
        assert_eq!(
            out.records,
            vec![row(7, h, 2, 3), row(8, h, 1, 4), row(7, 2 * h, 1, 3)]
        );
        assert_eq!((out.no_key, out.no_event_time), (1, 1));
    }

    #[test]
    fn sliding_windows_in_batch_count_a_record_in_each_of_its_windows() {
        let job = Job::parse(
            "s.toml",
            "name = \"s\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"in\"]\n\
             [[pipeline]]\nkey_by = \"k\"\n\
             [[pipeline]]\nwindow = { sliding = { size = \"10ms\", slide = \"5ms\" }, time = \"t\" }\n\
             [[pipeline]]\naggregate.n = \"count\"\n\
             [[pipeline]]\nfilter = { field = \"n\", op = \">\", value = 1 }\n\
             [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n",
        )
        .unwrap();
        let input = vec![
            (None, json!({"k": "a", "t": 3})),
            (None, json!({"k": "a", "t": 7})),
        ];
        let out = run_batch(&job.pipeline, input);
        // [-5,5) has one record (filtered out by n > 1), [0,10) has two, [5,15) one.
        assert_eq!(
            out.records,
            vec![(
                Some(b"a".to_vec()),
                json!({"k": "a", "window_start": 0, "window_end": 10, "n": 2})
            )]
        );
    }

    /// The shipped driver-shifts job in batch over a day of generated rides (drivers on
    /// shifts) writes what `taxi verify --job driver-shifts` expects: the verifier's own
    /// sessionizing agrees with the engine's batch reference.
    #[test]
    fn the_driver_shifts_job_in_batch_writes_the_verifiers_shifts() {
        use onceflow_taxi::generate::{rides, Config};
        use onceflow_taxi::verify::{expected, Job as Verified, TopicRecord};
        let job = Job::parse("s.toml", include_str!("../../../jobs/driver-shifts.toml")).unwrap();
        let config = Config {
            rides: 24 * 3600,
            rides_per_second: 1,
            drivers: 20,
            ..Config::default()
        };
        let events: Vec<_> = rides(config).unwrap().collect();
        let input: Vec<TopicRecord> = events
            .iter()
            .enumerate()
            .map(|(i, r)| TopicRecord {
                partition: 0,
                offset: i as i64,
                value: Some(r.to_json().into_bytes()),
            })
            .collect();
        let want: Vec<Value> = expected(Verified::DriverShifts, 60_000, &input)
            .unwrap()
            .records
            .into_iter()
            .map(|r| r.value)
            .collect();
        let batch = events
            .iter()
            .map(|r| keyed(serde_json::from_str(&r.to_json()).unwrap()));
        let mut got: Vec<Value> = run_batch(&job.pipeline, batch)
            .records
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        let by_driver = |v: &Value| (v["driver_id"].as_u64(), v["window_start"].as_i64());
        got.sort_by_key(by_driver);
        assert_eq!(got, want);
        // A day of 8-hour shifts every 12 hours: about two shifts a driver.
        assert!((30..=70).contains(&want.len()), "{} shifts", want.len());
    }

    #[test]
    fn session_windows_in_batch_hold_the_records_at_most_the_gap_apart() {
        let job = Job::parse(
            "s.toml",
            "name = \"s\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"in\"]\n\
             [[pipeline]]\nkey_by = \"k\"\n\
             [[pipeline]]\nwindow = { session = \"10ms\", time = \"t\" }\n\
             [[pipeline]]\naggregate = { n = \"count\", s = { sum = \"v\" } }\n\
             [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n",
        )
        .unwrap();
        // Out of order: 30 bridges nothing, 20 and 10 are exactly the gap apart.
        let input = [(20, 1), (3, 2), (10, 4), (41, 8), (30, 16)]
            .into_iter()
            .map(|(t, v)| (None, json!({"k": "a", "t": t, "v": v})))
            .collect::<Vec<_>>();
        let out = run_batch(&job.pipeline, input);
        let a = Some(b"a".to_vec());
        assert_eq!(
            out.records,
            vec![
                (a.clone(), json!({"k": "a", "window_start": 3, "window_end": 40, "n": 4, "s": 23})),
                (a, json!({"k": "a", "window_start": 41, "window_end": 51, "n": 1, "s": 8})),
            ]
        );
    }
}
