//! One task's operator chain: the stateless operators run inline, the window aggregate keeps
//! its accumulators, timers and watermark in the task's [`OperatorState`].

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::RuntimeError;
use crate::engine::job::aggregate::{Accumulator, WindowAggregate};
use crate::engine::job::batch::{stateless, Carried};
use crate::engine::job::project::Key;
use crate::engine::job::window::{route, Admission, InputWatermarks, Window, WindowKind};
use crate::engine::job::Operator;
use crate::engine::metrics::OperatorCounter;
use crate::engine::state::{MapState, OperatorState, TimerState, ValueState};

/// The uid (keyspace `op-window`) of the one window operator a job may have.
pub(crate) const WINDOW_UID: &str = "window";
/// Its kind in the state layout.
pub(crate) const WINDOW_KIND: &str = "window-aggregate";

/// Per record key: window start (u64 BE, sign flipped) → accumulator (JSON).
const ACCUMULATORS: MapState = MapState::new(0);
/// (window end, record key): fire the window.
const FIRE: TimerState = TimerState::new(1);
/// (window end + allowed lateness, record key): drop the window's state.
const CLEANUP: TimerState = TimerState::new(2);
/// Under the empty key: the watermark of each input and the combined one (JSON), so a restart
/// does not re-open fired windows.
const WATERMARK: ValueState = ValueState::new(3);

/// A record on its way to the sink: its topic (`None`: the sink's), Kafka key and value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Output {
    pub topic: Option<String>,
    pub key: Option<Vec<u8>>,
    pub value: Bytes,
}

/// A late record as `window.late_topic` receives it: the input record as it came (key and
/// bytes), so a reader can tell which input records the aggregate left out.
fn late_output(spec: &WindowAggregate, key: Option<Vec<u8>>, raw: &Bytes) -> Option<Output> {
    spec.late_topic.as_ref().map(|topic| Output {
        topic: Some(topic.clone()),
        key,
        value: raw.clone(),
    })
}

/// The window operator with its state.
struct WindowOp {
    spec: WindowAggregate,
    state: OperatorState,
    /// One bounded out-of-orderness watermark per input (source partition), combined as their
    /// minimum: a task reads its partitions in chunks, so one partition's events may run far
    /// ahead of another's; a single max-based watermark would then make the other's on-time
    /// events late. Each partition is a subsequence of an input within the bound, so it stays
    /// within it.
    watermark: InputWatermarks,
    /// The watermark up to which timers were last looked for (timers are scanned only when
    /// the watermark crosses a window boundary: a scan visits every key group).
    scanned_to: Option<i64>,
}

/// The operator chain of one task.
pub(crate) struct Pipeline {
    before: Vec<Operator>,
    window: Option<WindowOp>,
    after: Vec<Operator>,
    /// Counters: records dropped for a missing key, a missing event time, lateness.
    pub dropped: u64,
    /// Per operator of the job file (by index), records in and out; empty: not observed.
    counters: Vec<Arc<OperatorCounter>>,
}

impl Pipeline {
    /// The chain of `operators`; `state` is the window operator's state (restored), required
    /// when the chain has a window.
    pub(crate) fn new(
        operators: &[Operator],
        state: Option<OperatorState>,
    ) -> Result<Pipeline, RuntimeError> {
        let split = operators
            .iter()
            .position(|op| matches!(op, Operator::WindowAggregate(_)));
        let Some(i) = split else {
            return Ok(Pipeline {
                before: operators.to_vec(),
                window: None,
                after: Vec::new(),
                dropped: 0,
                counters: Vec::new(),
            });
        };
        let Some(Operator::WindowAggregate(spec)) = operators.get(i) else {
            return Err(RuntimeError::Internal("window operator not found".into()));
        };
        let state =
            state.ok_or_else(|| RuntimeError::Internal("window operator without state".into()))?;
        let watermark = match WATERMARK.get(&state, b"")? {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| RuntimeError::Internal(format!("stored watermark: {e}")))?,
            None => InputWatermarks::new([]),
        };
        Ok(Pipeline {
            before: operators[..i].to_vec(),
            window: Some(WindowOp {
                spec: spec.clone(),
                state,
                watermark,
                // None: the first advance after a restore scans the restored timers.
                scanned_to: None,
            }),
            after: operators[i + 1..].to_vec(),
            dropped: 0,
            counters: Vec::new(),
        })
    }

    /// The pipeline, counting each operator's records in and out into `counters` (one per
    /// operator of the job file, in order; another count leaves it unobserved).
    pub(crate) fn observed(mut self, counters: Vec<Arc<OperatorCounter>>) -> Pipeline {
        let window = usize::from(self.window.is_some());
        if counters.len() == self.before.len() + window + self.after.len() {
            self.counters = counters;
        }
        self
    }

    /// The counters of the operators `from..from + n`, or none when unobserved.
    fn counters(&self, from: usize, n: usize) -> &[Arc<OperatorCounter>] {
        self.counters.get(from..from + n).unwrap_or_default()
    }

    /// The window operator's state, for snapshots.
    pub(crate) fn state_mut(&mut self) -> Option<&mut OperatorState> {
        self.window.as_mut().map(|w| &mut w.state)
    }

    /// The task's inputs (see [`input_id`]): each holds the window's watermark back until its
    /// first record. Inputs restored with the state are kept.
    pub(crate) fn add_inputs(&mut self, inputs: impl IntoIterator<Item = u32>) {
        if let Some(window) = self.window.as_mut() {
            for input in inputs {
                window.watermark.add_input(input);
            }
        }
    }

    /// Runs one input record, read from `input` (see [`input_id`]), through the chain; returns
    /// what goes to the sink, in order.
    pub(crate) fn process(
        &mut self,
        input: u32,
        key: Option<Vec<u8>>,
        raw: &Bytes,
    ) -> Result<Vec<Output>, RuntimeError> {
        let Ok(value) = serde_json::from_slice::<Value>(raw) else {
            self.dropped += 1;
            return Ok(Vec::new());
        };
        let input_key = key.clone();
        let before = self.counters(0, self.before.len());
        let Some((carried, value, changed)) =
            counted(&self.before, before, Carried::Input(key), value)
        else {
            return Ok(Vec::new());
        };
        let Some(window) = self.window.as_mut() else {
            // Unchanged records go out as they came (bytes and all).
            let value = if changed {
                Bytes::from(value.to_string())
            } else {
                raw.clone()
            };
            return Ok(vec![Output {
                topic: None,
                key: carried.kafka_key(),
                value,
            }]);
        };
        let at = self.before.len();
        if let Some(c) = self.counters.get(at) {
            c.record_in();
        }
        let Carried::Keyed(key) = carried else {
            self.dropped += 1;
            return Ok(Vec::new());
        };
        let Some(t) = window.spec.event_time(&value) else {
            self.dropped += 1;
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        if route(
            window.spec.kind,
            t,
            window.watermark.current(),
            window.spec.allowed_lateness,
        )
        .is_late()
        {
            // Counted either way; written to the side topic, in the same transaction as the
            // main output, when the job has one.
            self.dropped += 1;
            out.extend(late_output(&window.spec, input_key, raw));
        }
        let mut results = window.add(&key, t, &value)?;
        results.extend(window.advance(input, t)?);
        if let Some(c) = self.counters.get(at) {
            c.records_out(results.len() as u64);
        }
        let after = self.counters(at + 1, self.after.len());
        for (key, result) in results {
            if let Some((carried, v, _)) = counted(&self.after, after, Carried::Keyed(key), result)
            {
                out.push(Output {
                    topic: None,
                    key: carried.kafka_key(),
                    value: Bytes::from(v.to_string()),
                });
            }
        }
        Ok(out)
    }
}

/// [`stateless`] one operator at a time when observed, counting each operator's records in
/// and out (the same result: `stateless` is a fold over the operators).
fn counted(
    ops: &[Operator],
    counters: &[Arc<OperatorCounter>],
    carried: Carried,
    value: Value,
) -> Option<(Carried, Value, bool)> {
    if counters.len() != ops.len() {
        return stateless(ops, carried, value).ok();
    }
    let (mut carried, mut value, mut changed) = (carried, value, false);
    for (op, counter) in ops.iter().zip(counters) {
        counter.record_in();
        let (c, v, projected) = stateless(std::slice::from_ref(op), carried, value).ok()?;
        counter.records_out(1);
        (carried, value, changed) = (c, v, changed || projected);
    }
    Some((carried, value, changed))
}

/// The input a record comes from, as the window's watermark tracks it: the topic's index in
/// the job's source topics (stable while the job file is) and the partition.
pub(crate) fn input_id(topic_index: usize, partition: i32) -> u32 {
    let topic = u32::try_from(topic_index).unwrap_or(u32::MAX) << 16;
    topic | (u32::try_from(partition).unwrap_or(0) & 0xffff)
}

/// A window start as a map key that sorts like the number.
fn start_key(start: i64) -> [u8; 8] {
    ((start as u64) ^ (1 << 63)).to_be_bytes()
}

fn window_size(kind: WindowKind) -> (i64, i64) {
    match kind {
        WindowKind::Tumbling { size } => (size, size),
        WindowKind::Sliding { size, slide } => (size, slide),
    }
}

/// Whether a timer may have become due as the watermark went from `scanned` to `w`. Window
/// ends are ≡ size (mod slide) and cleanups ≡ size + lateness (mod slide), so a timer in
/// (scanned, w] means `w` crossed one of those residues. Pure, so the scan (which visits
/// every key group) runs once per window boundary, not once per record.
pub(crate) fn timers_may_be_due(
    scanned: Option<i64>,
    w: i64,
    size: i64,
    slide: i64,
    lateness: i64,
) -> bool {
    let Some(s) = scanned else {
        return true;
    };
    let phase = |x: i64, offset: i64| x.saturating_sub(offset).div_euclid(slide.max(1));
    [size, size.saturating_add(lateness)]
        .iter()
        .any(|&off| phase(w, off) != phase(s, off))
}

impl WindowOp {
    /// Adds a record at event time `t` to its windows; a late update fires its window again.
    fn add(&mut self, key: &Key, t: i64, value: &Value) -> Result<Vec<(Key, Value)>, RuntimeError> {
        let lateness = self.spec.allowed_lateness;
        let routed = route(self.spec.kind, t, self.watermark.current(), lateness);
        let mut fired = Vec::new();
        for (window, admission) in routed.windows {
            if admission == Admission::Late {
                continue;
            }
            let k = key.as_bytes();
            let mut acc = self.accumulator(k, window)?;
            self.spec.aggregate.add(&mut acc, value);
            let bytes = serde_json::to_vec(&acc)
                .map_err(|e| RuntimeError::Internal(format!("accumulator: {e}")))?;
            ACCUMULATORS.insert(&mut self.state, k, &start_key(window.start), &bytes);
            if admission == Admission::LateUpdate {
                fired.extend(self.result(key, window, &acc));
            } else {
                FIRE.register(&mut self.state, k, window.end);
                CLEANUP.register(&mut self.state, k, window.end.saturating_add(lateness));
            }
        }
        Ok(fired)
    }

    fn accumulator(&self, key: &[u8], window: Window) -> Result<Accumulator, RuntimeError> {
        match ACCUMULATORS.get(&self.state, key, &start_key(window.start))? {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| RuntimeError::Internal(format!("stored accumulator: {e}"))),
            None => Ok(self.spec.aggregate.accumulator()),
        }
    }

    fn result(&self, key: &Key, window: Window, acc: &Accumulator) -> Option<(Key, Value)> {
        let key_value = key.to_value()?;
        Some((
            key.clone(),
            self.spec.result_record(&key_value, window, acc),
        ))
    }

    /// Observes `t` from `input`; when the combined watermark crosses a window boundary, fires
    /// the due windows (by end, then key) and drops the expired ones.
    fn advance(&mut self, input: u32, t: i64) -> Result<Vec<(Key, Value)>, RuntimeError> {
        let before = self.watermark.current();
        let own = t.saturating_sub(self.spec.out_of_orderness);
        let combined = self.watermark.advance(input, own);
        // Written every time: the input's own watermark may have moved without the combined.
        let bytes = serde_json::to_vec(&self.watermark)
            .map_err(|e| RuntimeError::Internal(format!("watermark: {e}")))?;
        WATERMARK.set(&mut self.state, b"", &bytes);
        let Some(w) = combined.filter(|w| before != Some(*w)) else {
            return Ok(Vec::new());
        };
        let (size, slide) = window_size(self.spec.kind);
        let lateness = self.spec.allowed_lateness;
        if !timers_may_be_due(self.scanned_to, w, size, slide, lateness) {
            return Ok(Vec::new());
        }
        self.scanned_to = Some(w);
        let mut out = Vec::new();
        for (end, k) in FIRE.due(&self.state, w)? {
            FIRE.delete(&mut self.state, &k, end);
            let window = Window {
                start: end - size,
                end,
            };
            let key = Key::from_bytes(k);
            let acc = self.accumulator(key.as_bytes(), window)?;
            out.extend(self.result(&key, window, &acc));
        }
        for (at, k) in CLEANUP.due(&self.state, w)? {
            CLEANUP.delete(&mut self.state, &k, at);
            let start = at - lateness - size;
            ACCUMULATORS.remove(&mut self.state, &k, &start_key(start));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::timers_may_be_due;
    use super::*;
    use crate::engine::metrics::Metrics;

    #[test]
    fn each_operator_counts_what_reached_it_and_what_it_let_through() {
        let text = "name = \"c\"\n[source]\nbrokers = \"b:9092\"\ntopics = [\"i\"]\n\
            [[pipeline]]\nfilter = { field = \"v\", op = \">\", value = 1 }\n\
            [[pipeline]]\nkey_by = \"k\"\n\
            [[pipeline]]\nproject.keep = [\"k\"]\n\
            [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n";
        let job = crate::engine::job::Job::parse("t.toml", text).expect("job");
        let metrics = Metrics::new();
        let mut p = Pipeline::new(&job.pipeline, None)
            .expect("pipeline")
            .observed(metrics.operators(&job.pipeline));
        // (value, outputs): filtered out, dropped at key_by (no k), through.
        let cases = [
            (r#"{"v":0,"k":1}"#, 0),
            (r#"{"v":5}"#, 0),
            (r#"{"v":5,"k":2}"#, 1),
        ];
        for (value, want) in cases {
            let out = p.process(0, None, &Bytes::from(value)).expect("process");
            assert_eq!(out.len(), want, "{value}");
        }
        let counts: Vec<(u64, u64)> = metrics
            .snapshot_at(0)
            .operators
            .iter()
            .map(|o| (o.records_in, o.records_out))
            .collect();
        assert_eq!(counts, [(3, 2), (2, 1), (1, 1)]);
    }

    #[test]
    fn the_window_counts_the_records_it_took_and_the_results_it_fired() {
        use crate::engine::state::{RestoreFrom, StateStore, StoreOptions};
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("jobs")
            .join("rides-per-driver-hourly.toml");
        let job = crate::engine::job::Job::load(&file).expect("the shipped job (b)");
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = super::super::task::state_layout(&job);
        let (store, _) = StateStore::open(
            dir.path(),
            layout,
            StoreOptions::default(),
            RestoreFrom::Fresh,
        )
        .expect("state");
        let state = store.operator(WINDOW_UID).expect("window state");
        let metrics = Metrics::new();
        let mut p = Pipeline::new(&job.pipeline, Some(state))
            .expect("pipeline")
            .observed(metrics.operators(&job.pipeline));
        let hour = 3_600_000;
        // A start (filtered out), an end in hour 0, an end in hour 2 (its watermark fires hour 0).
        let ride = |is_start: bool, t: i64| {
            let v = format!(
                r#"{{"is_start":{is_start},"driver_id":7,"passengers":2,"event_time":{t}}}"#
            );
            Bytes::from(v)
        };
        let mut outputs = 0;
        for (is_start, t) in [(true, 10), (false, 20), (false, 2 * hour)] {
            outputs += p
                .process(0, None, &ride(is_start, t))
                .expect("process")
                .len();
        }
        assert_eq!(outputs, 1);
        let snapshot = metrics.snapshot_at(0);
        let counts: Vec<(&str, u64, u64)> = snapshot
            .operators
            .iter()
            .map(|o| (o.kind.as_str(), o.records_in, o.records_out))
            .collect();
        assert_eq!(
            counts,
            [
                ("filter", 3, 2),
                ("key_by", 2, 2),
                ("window_aggregate", 2, 1)
            ]
        );
    }

    use crate::engine::job::Job;
    use crate::engine::state::{Layout, OperatorLayout, RestoreFrom, StateStore, StoreOptions};

    /// A counting hourly window with 1 s out-of-orderness, `late_topic` as given.
    fn pipeline(dir: &std::path::Path, late: &str) -> (StateStore, Pipeline) {
        let job = Job::parse(
            "l.toml",
            &format!(
                "name = \"l\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"in\"]\n\
                 [[pipeline]]\nkey_by = \"k\"\n\
                 [[pipeline]]\nwindow = {{ tumbling = \"1h\", time = \"t\", out_of_orderness = \"1s\" {late} }}\n\
                 [[pipeline]]\naggregate.n = \"count\"\n\
                 [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n"
            ),
        )
        .unwrap();
        let layout = Layout {
            key_groups: 4,
            operators: vec![OperatorLayout::new(WINDOW_UID, WINDOW_KIND)],
            sink_prefix: None,
            sink_ids: 0,
        };
        let (store, _) =
            StateStore::open(dir, layout, StoreOptions::default(), RestoreFrom::Fresh).unwrap();
        let state = store.operator(WINDOW_UID).unwrap();
        let p = Pipeline::new(&job.pipeline, Some(state)).unwrap();
        (store, p)
    }

    fn feed(p: &mut Pipeline, key: &str, t: i64) -> Vec<Output> {
        let raw = Bytes::from(format!("{{\"k\": \"{key}\", \"t\": {t}}}"));
        p.process(0, Some(key.as_bytes().to_vec()), &raw).unwrap()
    }

    #[test]
    fn a_late_record_goes_to_the_late_topic_as_it_came_and_only_then() {
        let h = 3_600_000;
        for (late_topic, want_late) in [(", late_topic = \"side\"", true), ("", false)] {
            let dir = tempfile::tempdir().unwrap();
            let (_store, mut p) = pipeline(dir.path(), late_topic);
            assert!(feed(&mut p, "a", 10).is_empty());
            // Watermark 2h - 1 s + 1: the first hour fires (one result, to the sink's topic).
            let fired = feed(&mut p, "a", 2 * h);
            assert_eq!(fired.len(), 1);
            assert_eq!(fired[0].topic, None);
            // Inside the out-of-orderness of the second hour: on time, no output.
            assert!(feed(&mut p, "b", 2 * h - 500).is_empty());
            // The first hour has fired and allowed lateness is 0: late.
            let late = feed(&mut p, "b", 20);
            assert_eq!(p.dropped, 1);
            let want: Vec<Output> = match want_late {
                true => vec![Output {
                    topic: Some("side".into()),
                    key: Some(b"b".to_vec()),
                    value: Bytes::from("{\"k\": \"b\", \"t\": 20}"),
                }],
                false => Vec::new(),
            };
            assert_eq!(late, want, "late_topic {late_topic:?}");
        }
    }

    use crate::engine::runtime::task::state_layout;

    const HOURLY: &str = include_str!("../../../jobs/rides-per-driver-hourly.toml");

    fn end(driver: u64, t: i64) -> Bytes {
        Bytes::from(format!(
            r#"{{"driver_id":{driver},"is_start":false,"passengers":1,"event_time":{t}}}"#
        ))
    }

    /// Partition 0 read far ahead (a whole chunk) must not make partition 1's on-time events
    /// late: the window waits for the slower partition (a single watermark over all records
    /// dropped them).
    #[test]
    fn a_partition_read_ahead_does_not_make_anothers_events_late() {
        let job = Job::parse("hourly.toml", HOURLY).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = StateStore::open(
            dir.path(),
            state_layout(&job),
            StoreOptions::default(),
            RestoreFrom::Fresh,
        )
        .unwrap();
        let state = store.operator(WINDOW_UID).unwrap();
        let mut p = Pipeline::new(&job.pipeline, Some(state)).unwrap();
        p.add_inputs([input_id(0, 0), input_id(0, 1)]);
        let h = 3_600_000;
        let key = || Some(b"7".to_vec());
        // Partition 0 runs two hours ahead: nothing fires, partition 1 has not spoken.
        for t in [10, h + 10, 2 * h + 10] {
            assert!(p
                .process(input_id(0, 0), key(), &end(7, t))
                .unwrap()
                .is_empty());
        }
        // Partition 1's event of the first hour still counts.
        assert!(p
            .process(input_id(0, 1), key(), &end(7, 20))
            .unwrap()
            .is_empty());
        assert_eq!(p.dropped, 0);
        // Partition 1 moves on: the first hour closes, with both of its rides.
        let out = p
            .process(input_id(0, 1), key(), &end(7, 2 * h + 90_000))
            .unwrap();
        assert_eq!(out.len(), 1, "{out:?}");
        let first: Value = serde_json::from_slice(&out[0].value).unwrap();
        assert_eq!(first["rides"], 2, "{first}");
        assert_eq!(first["window_start"], 0, "{first}");
    }

    #[test]
    fn timers_are_scanned_only_when_the_watermark_crosses_a_window_end_or_cleanup() {
        let h = 3_600_000;
        // (scanned, w, size, slide, lateness, expected)
        let cases = [
            (None, 5, h, h, 0, true),              // first advance after a restore
            (Some(10), 20, h, h, 0, false),        // inside one hour
            (Some(h - 1), h, h, h, 0, true),       // reaches the end at h
            (Some(h), h + 5, h, h, 0, false),      // already scanned at h
            (Some(h + 1), h + 9, h, h, 10, false), // the cleanup at h + 10 is not reached yet
            (Some(4), 6, 10, 5, 0, true),          // sliding: ends at 5, 10, 15 …
            (Some(6), 9, 10, 5, 0, false),
        ];
        for (scanned, w, size, slide, lateness, want) in cases {
            let got = timers_may_be_due(scanned, w, size, slide, lateness);
            assert_eq!(
                got, want,
                "{scanned:?} → {w}, size {size}, slide {slide}, L {lateness}"
            );
        }
        assert!(timers_may_be_due(Some(h + 9), h + 10, h, h, 10));
    }
}
