//! The typed stages in process, on a fjall store in a temp dir: state encoding, timer order
//! (also across a restore), window assignment and lateness, build refusals.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::*;
use crate::engine::runtime::topology::{Emitted, InputRecord, KeyedStage, Output, Topology};
use crate::engine::state::{Layout, OperatorLayout, StateStore, StoreOptions};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Ev {
    k: String,
    t: i64,
    v: i64,
}

fn job() -> JobBuilder {
    JobBuilder::new("t").delivery_guarantee(DeliveryGuarantee::None)
}

/// The dataflow's source chain and keyed stage on a fresh (or restored) store in `dir`.
struct Harness {
    store: StateStore,
    chain: Box<dyn crate::engine::runtime::topology::SourceChain>,
    stage: Box<dyn KeyedStage>,
    metrics: Arc<Metrics>,
    offset: i64,
}

impl Harness {
    fn open(dir: &std::path::Path, flow: &Dataflow, restore: RestoreFrom) -> Harness {
        let keyed = flow.topology.keyed().expect("a keyed stage");
        let layout = Layout {
            key_groups: 4,
            operators: vec![OperatorLayout::new(keyed.uid.clone(), keyed.kind)],
            sink_prefix: None,
            sink_ids: 0,
        };
        let (store, _) = StateStore::open(dir, layout, StoreOptions::default(), restore).unwrap();
        let state = store.operator(&keyed.uid).unwrap();
        let metrics = Arc::new(Metrics::new());
        let chain = flow.topology.source_chain(&metrics);
        let stage = flow.topology.keyed_stage(state, &metrics).unwrap();
        Harness {
            store,
            chain,
            stage,
            metrics,
            offset: 0,
        }
    }

    /// One input record through the chain and the stage; no watermark.
    fn feed(&mut self, value: &str) -> Result<Vec<Output>, RuntimeError> {
        let bytes = Bytes::from(value.to_owned());
        let record = InputRecord {
            topic: "in",
            partition: 0,
            offset: self.offset,
            timestamp: 7,
            key: None,
            value: Some(&bytes),
        };
        self.offset += 1;
        let mut emitted = Vec::new();
        self.chain.process(&record, &mut emitted);
        let mut out = Vec::new();
        for e in emitted {
            match e {
                Emitted::Keyed { key, time, element } => {
                    self.stage.process(&key, time, element, &mut out)?
                }
                Emitted::Out(o) => out.push(o),
                // What the runtime does with errors.tolerance = "none".
                Emitted::Bad { reason } => return Err(RuntimeError::BadRecord(reason)),
            }
        }
        Ok(out)
    }

    fn ev(&mut self, k: &str, t: i64, v: i64) -> Vec<Output> {
        let json = serde_json::to_string(&Ev { k: k.into(), t, v }).unwrap();
        self.feed(&json).unwrap()
    }

    fn advance(&mut self, w: i64) -> Vec<Output> {
        let mut out = Vec::new();
        self.stage.advance_to(w, &mut out).unwrap();
        out
    }

    /// Checkpoint `n` made durable.
    fn checkpoint(&mut self, n: u64) {
        let delta = self.stage.snapshot(n).unwrap();
        self.store
            .persist(n, &[delta], Vec::new(), Vec::new())
            .unwrap();
        self.stage.state_mut().complete(n).unwrap();
    }
}

fn values(out: &[Output]) -> Vec<String> {
    out.iter()
        .map(|o| String::from_utf8(o.value.to_vec()).unwrap())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Typed state.

const SUM: ValueStateDescriptor<i64> = ValueStateDescriptor::new(0, "sum");
const SEEN: MapStateDescriptor<i64, String> = MapStateDescriptor::new(1, "seen");
const LOG: ListStateDescriptor<Ev> = ListStateDescriptor::new(2, "log");
const WRONG: ValueStateDescriptor<String> = ValueStateDescriptor::new(0, "sum-as-text");
const RESERVED: ValueStateDescriptor<i64> = ValueStateDescriptor::new(250, "reserved");

/// Keeps a running sum (value), the times seen (map) and the events (list) per key; emits
/// "sum|map entries|list length". `v == -1` reads the sum as text (a wrong type), `v == -2`
/// uses a reserved id.
#[derive(Clone)]
struct Keeper;

impl KeyedProcessFunction<String, Ev, String> for Keeper {
    fn process_element(
        &mut self,
        _key: &String,
        ev: Ev,
        ctx: &mut Context<'_>,
        out: &mut Collector<String>,
    ) -> Result<(), FunctionError> {
        if ev.v == -1 {
            ctx.value_state(&WRONG).value()?;
        }
        if ev.v == -2 {
            ctx.value_state(&RESERVED).update(&1)?;
        }
        let sum = ctx.value_state(&SUM).value()?.unwrap_or(0) + ev.v;
        ctx.value_state(&SUM).update(&sum)?;
        ctx.map_state(&SEEN).put(&ev.t, &format!("v{}", ev.v))?;
        ctx.list_state(&LOG).add(&ev)?;
        let seen = ctx.map_state(&SEEN).entries()?;
        let log = ctx.list_state(&LOG).get()?;
        out.collect(format!("{sum}|{seen:?}|{}", log.len()));
        Ok(())
    }
}

fn keeper() -> Dataflow {
    job()
        .source(["in"], Json::<Ev>::new())
        .key_by(|e| e.k.clone())
        .process(Keeper)
        .sink(KafkaSink::with_serializer("out", |s: &String| {
            s.clone().into_bytes()
        }))
        .build()
        .unwrap()
}

#[test]
fn value_map_and_list_state_are_per_key_and_read_back_typed() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::open(dir.path(), &keeper(), RestoreFrom::Fresh);
    // (key, t, v, expected output)
    let cases = [
        ("a", 10, 5, r#"5|[(10, "v5")]|1"#),
        ("b", 3, 1, r#"1|[(3, "v1")]|1"#),
        ("a", 2, 4, r#"9|[(10, "v5"), (2, "v4")]|2"#),
        ("a", 10, 1, r#"10|[(10, "v1"), (2, "v4")]|3"#),
    ];
    for (k, t, v, want) in cases {
        assert_eq!(values(&h.ev(k, t, v)), [want], "{k} {t} {v}");
    }
}

#[test]
fn a_state_of_another_type_or_a_reserved_id_fails_the_job_naming_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::open(dir.path(), &keeper(), RestoreFrom::Fresh);
    h.ev("a", 1, 5);
    for (v, want) in [
        (-1, "is not a alloc::string::String"),
        (-2, "id 250 is reserved"),
    ] {
        let json = serde_json::to_string(&Ev {
            k: "a".into(),
            t: 1,
            v,
        })
        .unwrap();
        let e = h.feed(&json).unwrap_err().to_string();
        assert!(e.starts_with("operator process (process): state "), "{e}");
        assert!(e.contains(want), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn records_that_are_not_json_of_the_type_are_bad_records_with_a_reason_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::open(dir.path(), &keeper(), RestoreFrom::Fresh);
    for (input, want) in [
        ("not json", "the value is not JSON of "),
        (r#"{"k":"a"}"#, "missing field `t`"),
    ] {
        let e = h.feed(input).unwrap_err().to_string();
        assert!(e.contains(want), "{input}: {e}");
    }
    assert_eq!(h.ev("a", 1, 1).len(), 1);
    let ops = h.metrics.snapshot_at(0).operators;
    let counts: Vec<(&str, u64, u64)> = ops
        .iter()
        .map(|o| (o.kind.as_str(), o.records_in, o.records_out))
        .collect();
    assert_eq!(
        counts,
        [("source", 3, 1), ("key_by", 1, 1), ("process", 1, 1)]
    );
}

// ---------------------------------------------------------------------------------------
// Timers.

/// Registers a timer at `t + v` per element (v < 0: deletes the timer at `t - v`); on a
/// timer emits "key@time" and, for key "chain", registers one more at time + 1.
#[derive(Clone)]
struct Alarm;

impl KeyedProcessFunction<String, Ev, String> for Alarm {
    fn process_element(
        &mut self,
        _key: &String,
        ev: Ev,
        ctx: &mut Context<'_>,
        _out: &mut Collector<String>,
    ) -> Result<(), FunctionError> {
        if ev.v < 0 {
            ctx.delete_event_time_timer(ev.t - ev.v);
        } else {
            ctx.register_event_time_timer(ev.t + ev.v);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &String,
        timestamp: i64,
        ctx: &mut Context<'_>,
        out: &mut Collector<String>,
    ) -> Result<(), FunctionError> {
        assert_eq!(ctx.timestamp(), timestamp);
        out.collect(format!("{key}@{timestamp}"));
        if key == "chain" && timestamp < 103 {
            ctx.register_event_time_timer(timestamp + 1);
        }
        Ok(())
    }
}

/// `f` on the events keyed by `k`, event time `t` (out-of-orderness 0), named `uid`,
/// writing its strings.
fn timed(f: impl KeyedProcessFunction<String, Ev, String>, uid: &str) -> Dataflow {
    job()
        .source(["in"], Json::<Ev>::new())
        .event_time(|e: &Ev| e.t, Duration::ZERO)
        .key_by(|e| e.k.clone())
        .process(f)
        .uid(uid)
        .sink(KafkaSink::with_serializer("out", |s: &String| {
            s.clone().into_bytes()
        }))
        .build()
        .unwrap()
}

fn alarm() -> Dataflow {
    timed(Alarm, "alarm")
}

#[test]
fn timers_fire_in_time_order_once_the_watermark_passes_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::open(dir.path(), &alarm(), RestoreFrom::Fresh);
    h.ev("b", 0, 30);
    h.ev("a", 0, 20);
    h.ev("c", 0, 20);
    h.ev("a", 0, 20); // the same timer twice: fires once
    h.ev("d", 0, 25);
    h.ev("d", 0, -25); // deleted
    h.ev("chain", 0, 100);
    // (watermark, fired)
    let cases: Vec<(i64, Vec<&str>)> = vec![
        (19, vec![]),
        (20, vec!["a@20", "c@20"]),
        (20, vec![]),
        (29, vec![]),
        (50, vec!["b@30"]),
        // A timer a firing registers at or before the watermark fires in the same advance.
        (102, vec!["chain@100", "chain@101", "chain@102"]),
        (200, vec!["chain@103"]),
        (300, vec![]),
    ];
    for (w, want) in cases {
        assert_eq!(values(&h.advance(w)), want, "watermark {w}");
    }
}

#[test]
fn timers_and_the_watermark_survive_a_restore_from_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let flow = alarm();
    {
        let mut h = Harness::open(dir.path(), &flow, RestoreFrom::Fresh);
        h.ev("a", 0, 50);
        h.ev("b", 0, 10);
        assert_eq!(values(&h.advance(10)), ["b@10"]);
        h.checkpoint(1);
        // After the checkpoint: lost with the crash.
        h.ev("c", 0, 20);
    }
    let mut h = Harness::open(dir.path(), &flow, RestoreFrom::Latest);
    assert_eq!(h.stage.watermark(), Some(10));
    assert_eq!(values(&h.advance(60)), ["a@50"]);
}

/// Processing time: `v` > 0 sets a processing-time timer at `t` (ms since the epoch) and an
/// event-time timer at `t + v`; `v` < 0 deletes the processing-time timer at `t`. A timer
/// says which clock fired it.
#[derive(Clone)]
struct Clocks;

impl KeyedProcessFunction<String, Ev, String> for Clocks {
    fn process_element(
        &mut self,
        _key: &String,
        ev: Ev,
        ctx: &mut Context<'_>,
        _out: &mut Collector<String>,
    ) -> Result<(), FunctionError> {
        assert_eq!(ctx.time_domain(), TimeDomain::EventTime);
        if ev.v < 0 {
            ctx.delete_processing_time_timer(ev.t);
        } else {
            ctx.register_processing_time_timer(ev.t);
            ctx.register_event_time_timer(ev.t + ev.v);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &String,
        timestamp: i64,
        ctx: &mut Context<'_>,
        out: &mut Collector<String>,
    ) -> Result<(), FunctionError> {
        let clock = match ctx.time_domain() {
            TimeDomain::ProcessingTime => "wall",
            _ => "event",
        };
        out.collect(format!("{key}@{timestamp}:{clock}"));
        Ok(())
    }
}

fn clocks() -> Dataflow {
    timed(Clocks, "clocks")
}

fn at_wall_clock(h: &mut Harness, now: i64) -> Vec<String> {
    let mut out = Vec::new();
    h.stage.on_processing_time(now, &mut out).unwrap();
    values(&out)
}

#[test]
fn processing_time_timers_fire_by_the_wall_clock_apart_from_the_watermark_and_are_checkpointed() {
    let dir = tempfile::tempdir().unwrap();
    let flow = clocks();
    {
        let mut h = Harness::open(dir.path(), &flow, RestoreFrom::Fresh);
        h.ev("a", 1_000, 5);
        h.ev("b", 2_000, 5);
        h.ev("c", 3_000, 5);
        h.ev("c", 3_000, -1); // deleted
        assert_eq!(h.stage.next_processing_timer(), Some(1_000));
        assert_eq!(
            values(&h.advance(1_004)),
            Vec::<String>::new(),
            "the watermark fires no wall timer"
        );
        assert_eq!(at_wall_clock(&mut h, 999), Vec::<String>::new());
        assert_eq!(at_wall_clock(&mut h, 1_500), ["a@1000:wall"]);
        assert_eq!(values(&h.advance(1_005)), ["a@1005:event"]);
        h.checkpoint(1);
        assert_eq!(
            at_wall_clock(&mut h, 5_000),
            ["b@2000:wall"],
            "lost with the crash"
        );
    }
    // Restored: b's timer is due again (its firing came after the checkpoint), c's stays
    // deleted.
    let mut h = Harness::open(dir.path(), &flow, RestoreFrom::Latest);
    assert_eq!(h.stage.next_processing_timer(), Some(2_000));
    assert_eq!(at_wall_clock(&mut h, 10_000), ["b@2000:wall"]);
    assert_eq!(h.stage.next_processing_timer(), None);
}

// ---------------------------------------------------------------------------------------
// State time-to-live.

/// Event time, 10 ms; refreshed on read when `RENEWED`.
const LAST: ValueStateDescriptor<i64> =
    ValueStateDescriptor::new(0, "last").with_ttl(StateTtl::event_time(Duration::from_millis(10)));
const RENEWED: ValueStateDescriptor<i64> = ValueStateDescriptor::new(1, "renewed")
    .with_ttl(StateTtl::event_time(Duration::from_millis(10)).refreshed_on_read());
const BY_TIME: MapStateDescriptor<i64, i64> =
    MapStateDescriptor::new(2, "by time").with_ttl(StateTtl::event_time(Duration::from_millis(10)));
const ITEMS: ListStateDescriptor<i64> =
    ListStateDescriptor::new(3, "items").with_ttl(StateTtl::event_time(Duration::from_millis(10)));
/// Processing time, one second.
const WALL: ValueStateDescriptor<i64> = ValueStateDescriptor::new(4, "wall")
    .with_ttl(StateTtl::processing_time(Duration::from_secs(1)));

/// `v` >= 0 reads what each state holds (emitted as `k:last|renewed|map|list`), then writes
/// `v` to the value states, under `t` in the map and at the end of the list; `v` == -1 only
/// reads. `v` == -2 writes `WALL` and sets a processing-time timer at `t`, which reads it.
#[derive(Clone)]
struct Forgetful;

impl KeyedProcessFunction<String, Ev, String> for Forgetful {
    fn process_element(
        &mut self,
        key: &String,
        ev: Ev,
        ctx: &mut Context<'_>,
        out: &mut Collector<String>,
    ) -> Result<(), FunctionError> {
        if ev.v == -2 {
            ctx.value_state(&WALL).update(&1)?;
            ctx.register_processing_time_timer(ev.t);
            return Ok(());
        }
        let last = ctx.value_state(&LAST).value()?;
        let renewed = ctx.value_state(&RENEWED).value()?;
        let map = ctx.map_state(&BY_TIME).entries()?;
        let list = ctx.list_state(&ITEMS).get()?;
        out.collect(format!("{key}:{last:?}|{renewed:?}|{map:?}|{list:?}"));
        if ev.v >= 0 {
            ctx.value_state(&LAST).update(&ev.v)?;
            if renewed.is_none() {
                ctx.value_state(&RENEWED).update(&ev.v)?;
            }
            ctx.map_state(&BY_TIME).put(&ev.t, &ev.v)?;
            ctx.list_state(&ITEMS).add(&ev.v)?;
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &String,
        timestamp: i64,
        ctx: &mut Context<'_>,
        out: &mut Collector<String>,
    ) -> Result<(), FunctionError> {
        let wall = ctx.value_state(&WALL).value()?;
        out.collect(format!("{key}@{timestamp}:{wall:?}"));
        Ok(())
    }
}

fn forgetful() -> Dataflow {
    timed(Forgetful, "forgetful")
}

/// Feeds `k` at `t` with `v`, then moves the watermark to `t`; returns what it emitted.
fn at(h: &mut Harness, k: &str, t: i64, v: i64) -> Vec<String> {
    let out = values(&h.ev(k, t, v));
    h.advance(t);
    out
}

#[test]
fn a_value_is_not_read_back_once_the_watermark_is_its_ttl_past_the_time_it_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::open(dir.path(), &forgetful(), RestoreFrom::Fresh);
    // (time, value, what the element read): each element reads at the watermark the element
    // before it left (its own time comes after the read).
    let cases = [
        (0, 1, "a:None|None|[]|[]"),
        (5, 2, "a:Some(1)|Some(1)|[(0, 1)]|[1]"),
        (14, 3, "a:Some(2)|Some(1)|[(0, 1), (5, 2)]|[1, 2]"),
        // At 14 the map entry and list item written at 0 expired (each has its own time);
        // those written at 5 live until 15. The map's keys are ordered as JSON bytes.
        (16, -1, "a:Some(3)|Some(1)|[(14, 3), (5, 2)]|[2, 3]"),
        (24, -1, "a:Some(3)|Some(1)|[(14, 3)]|[3]"),
        // At 24 the values written at 14 expired; the renewed one was read at 24.
        (25, -1, "a:None|Some(1)|[]|[]"),
    ];
    for (t, v, read) in cases {
        assert_eq!(at(&mut h, "a", t, v), [read], "at {t}");
    }
    // Unread from 25 to 35: the renewed value expired too.
    h.advance(35);
    assert_eq!(at(&mut h, "a", 36, -1), ["a:None|None|[]|[]"]);
}

#[test]
fn expired_values_of_keys_that_get_no_more_elements_are_deleted_as_the_watermark_moves() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::open(dir.path(), &forgetful(), RestoreFrom::Fresh);
    let stored = |h: &mut Harness, id: u8| {
        let state = h.stage.state_mut();
        state
            .some_entries_of(id, None, 10_000)
            .unwrap()
            .entries
            .len()
    };
    for i in 0..40 {
        h.ev(&format!("k{i}"), i, 1);
    }
    assert_eq!(stored(&mut h, LAST.id()), 40);
    assert_eq!(stored(&mut h, BY_TIME.id()), 40);
    // Each watermark looks at a few entries of each state: enough of them clean them all.
    for w in 50..80 {
        h.advance(w);
    }
    h.ev("late", 80, 1);
    for id in [LAST.id(), RENEWED.id(), BY_TIME.id(), ITEMS.id()] {
        assert_eq!(stored(&mut h, id), 1, "state {id}: only the late key's");
    }
    assert_eq!(
        at(&mut h, "late", 85, -1),
        ["late:Some(1)|Some(1)|[(80, 1)]|[1]"]
    );
}

/// Writes `v` to state 0 without a TTL.
#[derive(Clone)]
struct Plain;

impl KeyedProcessFunction<String, Ev, String> for Plain {
    fn process_element(
        &mut self,
        _key: &String,
        ev: Ev,
        ctx: &mut Context<'_>,
        _out: &mut Collector<String>,
    ) -> Result<(), FunctionError> {
        const PLAIN: ValueStateDescriptor<i64> = ValueStateDescriptor::new(0, "last");
        ctx.value_state(&PLAIN).update(&ev.v)?;
        Ok(())
    }
}

#[test]
fn ttl_stamps_are_checkpointed_and_a_ttl_given_later_starts_counting_then() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut h = Harness::open(dir.path(), &timed(Plain, "forgetful"), RestoreFrom::Fresh);
        h.ev("a", 0, 5);
        h.advance(0);
        h.checkpoint(1);
    }
    {
        // a's value is plain JSON: read as it is, and stamped by the cleanup at b's time, 100.
        let mut h = Harness::open(dir.path(), &forgetful(), RestoreFrom::Latest);
        assert_eq!(at(&mut h, "b", 100, 7), ["b:None|None|[]|[]"]);
        h.checkpoint(2);
    }
    let mut h = Harness::open(dir.path(), &forgetful(), RestoreFrom::Latest);
    assert_eq!(
        at(&mut h, "b", 105, -1),
        ["b:Some(7)|Some(7)|[(100, 7)]|[7]"]
    );
    let last = |out: Vec<String>| out[0].split('|').next().unwrap().to_owned();
    assert_eq!(last(at(&mut h, "a", 106, -1)), "a:Some(5)");
    h.advance(110);
    assert_eq!(last(at(&mut h, "a", 111, -1)), "a:None");
    assert_eq!(last(at(&mut h, "b", 112, -1)), "b:None");
}

#[test]
fn a_processing_time_ttl_runs_on_the_wall_clock() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::open(dir.path(), &forgetful(), RestoreFrom::Fresh);
    let now = i64::try_from(crate::engine::clock::now_ms()).unwrap();
    // Written now (the wall clock, a TTL of 1 s); read by timers at 0.5 s and a minute.
    h.ev("a", now + 500, -2);
    h.ev("b", now + 60_000, -2);
    assert_eq!(
        at_wall_clock(&mut h, now + 60_000),
        [
            format!("a@{}:Some(1)", now + 500),
            format!("b@{}:None", now + 60_000),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Windows.

struct Sum;

impl AggregateFunction<Ev, (i64, u32), i64> for Sum {
    fn create_accumulator(&self) -> (i64, u32) {
        (0, 0)
    }
    fn add(&self, e: &Ev, acc: &mut (i64, u32)) {
        acc.0 += e.v;
        acc.1 += 1;
    }
    fn merge(&self, a: (i64, u32), b: (i64, u32)) -> (i64, u32) {
        (a.0 + b.0, a.1 + b.1)
    }
    fn get_result(&self, acc: &(i64, u32)) -> i64 {
        acc.0
    }
}

fn windowed(assigner: impl WindowAssigner, lateness: u64) -> Dataflow {
    job()
        .source(["in"], Json::<Ev>::new())
        .event_time(|e: &Ev| e.t, Duration::ZERO)
        .filter(|e| e.v != 0)
        .key_by(|e| e.k.clone())
        .window(assigner)
        .allowed_lateness(Duration::from_millis(lateness))
        .late_output(KafkaSink::json("late"))
        .aggregate_with(Sum, |k: &String, w: Window, sum: i64| {
            format!("{k}[{},{})={sum}", w.start, w.end)
        })
        .map(|s| s.to_uppercase())
        .sink(KafkaSink::with_serializer("out", |s: &String| {
            s.clone().into_bytes()
        }))
        .build()
        .unwrap()
}

/// One element, then the watermark at its time (out-of-orderness 0): the outputs, sorted
/// (windows ending together fire in key group order).
fn step(h: &mut Harness, k: &str, t: i64, v: i64) -> Vec<String> {
    let mut out = h.ev(k, t, v);
    out.extend(h.advance(t));
    let mut shown: Vec<String> = out
        .iter()
        .map(|o| {
            let body = String::from_utf8(o.value.to_vec()).unwrap();
            match &o.topic {
                Some(topic) => format!("{topic}:{body}"),
                None => body,
            }
        })
        .collect();
    shown.sort();
    shown
}

#[test]
fn tumbling_windows_fire_at_their_end_and_late_elements_go_to_the_side_output() {
    let dir = tempfile::tempdir().unwrap();
    let flow = windowed(TumblingEventTimeWindows::of(Duration::from_millis(10)), 0);
    let mut h = Harness::open(dir.path(), &flow, RestoreFrom::Fresh);
    let late = r#"late:{"k":"a","t":5,"v":7}"#;
    // (key, time, value, outputs)
    let cases: Vec<(&str, i64, i64, Vec<&str>)> = vec![
        ("a", 1, 1, vec![]),
        ("b", 3, 2, vec![]),
        ("a", 9, 4, vec![]),
        ("a", 0, 0, vec![]), // filtered out, before the window
        ("a", 10, 8, vec!["A[0,10)=5", "B[0,10)=2"]),
        ("a", 5, 7, vec![late]),
        ("a", 25, 1, vec!["A[10,20)=8"]),
    ];
    for (k, t, v, want) in cases {
        assert_eq!(step(&mut h, k, t, v), want, "{k} {t} {v}");
    }
    let snapshot = h.metrics.snapshot_at(0);
    assert_eq!(snapshot.late_records, 1);
    let counts: Vec<(&str, u64, u64)> = snapshot
        .operators
        .iter()
        .map(|o| (o.kind.as_str(), o.records_in, o.records_out))
        .collect();
    assert_eq!(
        counts,
        [
            ("source", 7, 7),
            ("filter", 7, 6),
            ("key_by", 6, 6),
            ("window_aggregate", 6, 3),
            ("map", 3, 3)
        ]
    );
}

/// Without a key_by the whole chain runs in the source subtask, straight to the sink; a
/// closure deserializer sees the record's coordinates.
#[test]
fn a_job_without_key_by_runs_its_chain_in_the_source_and_counts_each_operator() {
    let flow = job()
        .source(["in"], |r: &SourceRecord<'_>| {
            let text = std::str::from_utf8(r.value?).ok()?;
            Some(format!("{}/{}/{}:{text}", r.topic, r.partition, r.offset))
        })
        .flat_map(|s: String| s.split(',').map(str::to_owned).collect::<Vec<_>>())
        .filter(|s| !s.is_empty())
        .map(|s| s.to_uppercase())
        .sink(KafkaSink::json("out").key(|s: &String| s.as_bytes()[..1].to_vec()))
        .build()
        .unwrap();
    assert!(flow.topology.keyed().is_none());
    let metrics = Arc::new(Metrics::new());
    let mut chain = flow.topology.source_chain(&metrics);
    let mut out = Vec::new();
    for (offset, value) in [(4, Some("a,,b")), (5, None)] {
        let bytes = value.map(Bytes::from);
        let record = InputRecord {
            topic: "in",
            partition: 2,
            offset,
            timestamp: 0,
            key: None,
            value: bytes.as_ref(),
        };
        assert_eq!(chain.process(&record, &mut out), None, "no event time");
    }
    let got: Vec<(Option<Vec<u8>>, String)> = out
        .into_iter()
        .map(|e| match e {
            Emitted::Out(o) => (o.key, String::from_utf8(o.value.to_vec()).unwrap()),
            Emitted::Keyed { .. } => panic!("keyed without key_by"),
            Emitted::Bad { reason } => panic!("a bad record: {reason}"),
        })
        .collect();
    assert_eq!(
        got,
        [
            (Some(b"I".to_vec()), "\"IN/2/4:A\"".to_owned()),
            (Some(b"B".to_vec()), "\"B\"".to_owned())
        ]
    );
    let snapshot = metrics.snapshot_at(0);
    let counts: Vec<(&str, u64, u64)> = snapshot
        .operators
        .iter()
        .map(|o| (o.kind.as_str(), o.records_in, o.records_out))
        .collect();
    assert_eq!(
        counts,
        [
            ("source", 2, 1),
            ("flat_map", 1, 3),
            ("filter", 3, 2),
            ("map", 2, 2)
        ]
    );
}

#[test]
fn allowed_lateness_refires_a_window_and_then_drops_it() {
    let dir = tempfile::tempdir().unwrap();
    let flow = windowed(TumblingEventTimeWindows::of(Duration::from_millis(10)), 5);
    let mut h = Harness::open(dir.path(), &flow, RestoreFrom::Fresh);
    let cases: Vec<(&str, i64, i64, Vec<&str>)> = vec![
        ("a", 1, 1, vec![]),
        ("a", 12, 2, vec!["A[0,10)=1"]),
        // end ≤ W < end + L: added, fired again.
        ("a", 3, 3, vec!["A[0,10)=4"]),
        ("a", 15, 1, vec![]),
        // W ≥ end + L: late.
        ("a", 4, 9, vec![r#"late:{"k":"a","t":4,"v":9}"#]),
    ];
    for (k, t, v, want) in cases {
        assert_eq!(step(&mut h, k, t, v), want, "{k} {t} {v}");
    }
}

#[test]
fn sliding_windows_count_an_element_in_each_of_its_windows() {
    let dir = tempfile::tempdir().unwrap();
    let flow = windowed(
        SlidingEventTimeWindows::of(Duration::from_millis(10), Duration::from_millis(5)),
        0,
    );
    let mut h = Harness::open(dir.path(), &flow, RestoreFrom::Fresh);
    assert!(step(&mut h, "a", 7, 1).is_empty());
    assert_eq!(step(&mut h, "a", 10, 2), ["A[0,10)=1"]);
    assert_eq!(step(&mut h, "a", 15, 4), ["A[5,15)=3"]);
    assert_eq!(step(&mut h, "a", 30, 8), ["A[10,20)=6", "A[15,25)=4"]);
}

#[test]
fn session_windows_merge_elements_at_most_the_gap_apart_with_the_accumulators_merge() {
    let dir = tempfile::tempdir().unwrap();
    let flow = windowed(
        EventTimeSessionWindows::with_gap(Duration::from_millis(10)),
        0,
    );
    let mut h = Harness::open(dir.path(), &flow, RestoreFrom::Fresh);
    // Watermark = the element's time (out-of-orderness 0); the a-session [1, 11) would fire
    // at 11, but 8 comes first and extends it; b's element at 30 closes both.
    assert!(step(&mut h, "a", 1, 1).is_empty());
    assert!(step(&mut h, "b", 2, 2).is_empty());
    assert!(step(&mut h, "a", 8, 4).is_empty());
    assert_eq!(step(&mut h, "b", 30, 8), ["A[1,18)=5", "B[2,12)=2"]);
    assert_eq!(step(&mut h, "a", 50, 16), ["B[30,40)=8"]);
}

#[test]
fn fired_windows_stay_fired_after_a_restore() {
    let dir = tempfile::tempdir().unwrap();
    let flow = windowed(TumblingEventTimeWindows::of(Duration::from_millis(10)), 0);
    {
        let mut h = Harness::open(dir.path(), &flow, RestoreFrom::Fresh);
        step(&mut h, "a", 1, 1);
        assert_eq!(step(&mut h, "a", 12, 2), ["A[0,10)=1"]);
        h.checkpoint(1);
    }
    let mut h = Harness::open(dir.path(), &flow, RestoreFrom::Latest);
    // Late against the restored watermark; the open window's accumulator came back.
    assert_eq!(step(&mut h, "a", 2, 4), [r#"late:{"k":"a","t":2,"v":4}"#]);
    assert_eq!(step(&mut h, "a", 20, 1), ["A[10,20)=2"]);
}

// ---------------------------------------------------------------------------------------
// Build refusals.

#[test]
fn a_dataflow_that_cannot_run_is_refused_in_one_line() {
    let sink = || KafkaSink::with_serializer("out", |s: &String| s.clone().into_bytes());
    let no_time = job()
        .source(["in"], Json::<Ev>::new())
        .key_by(|e| e.k.clone())
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .aggregate_with(Sum, |_: &String, _: Window, s: i64| s.to_string())
        .sink(sink());
    let bad_slide = job()
        .source(["in"], Json::<Ev>::new())
        .event_time(|e: &Ev| e.t, Duration::ZERO)
        .key_by(|e| e.k.clone())
        .window(SlidingEventTimeWindows::of(
            Duration::from_secs(1),
            Duration::from_secs(2),
        ))
        .aggregate_with(Sum, |_: &String, _: Window, s: i64| s.to_string())
        .sink(sink());
    let bad_uid = job()
        .source(["in"], Json::<Ev>::new())
        .key_by(|e| e.k.clone())
        .process(Keeper)
        .uid("a b")
        .sink(sink());
    let no_prefix = JobBuilder::new("t")
        .source(["in"], Json::<String>::new())
        .sink(sink());
    let cases = [
        (no_time, "window(..) needs event time"),
        (
            bad_slide,
            "the slide (2000 ms) must be at least 1 ms and at most the size",
        ),
        (bad_uid, "uid \"a b\" is not usable"),
        (
            no_prefix,
            "sink.transactional.id.prefix (transactional_id_prefix): required",
        ),
    ];
    for (graph, want) in cases {
        let e = graph.build().unwrap_err().to_string();
        assert!(e.starts_with("job t: "), "{e}");
        assert!(e.contains(want), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn the_layout_kind_changes_with_the_stage_and_the_windows_sizes_and_lateness() {
    let a = alarm().topology.keyed().unwrap();
    let k = keeper().topology.keyed().unwrap();
    assert_eq!((a.uid.as_str(), k.uid.as_str()), ("alarm", "process"));
    assert_eq!((a.kind.as_str(), k.kind.as_str()), ("process", "process"));
    let ms = Duration::from_millis;
    let kinds: Vec<String> = [
        windowed(TumblingEventTimeWindows::of(ms(10)), 0),
        windowed(TumblingEventTimeWindows::of(ms(20)), 0),
        windowed(TumblingEventTimeWindows::of(ms(10)), 5),
        windowed(SlidingEventTimeWindows::of(ms(10), ms(5)), 0),
    ]
    .iter()
    .map(|f| f.topology.keyed().unwrap().kind)
    .collect();
    assert_eq!(
        kinds[0],
        "window-aggregate:Tumbling { size: 10 }:lateness=0"
    );
    for (i, a) in kinds.iter().enumerate() {
        for b in &kinds[i + 1..] {
            assert_ne!(a, b);
        }
    }
}

/// The source's watermark sees every record's event time, also of one the filter drops; a
/// record the deserializer cannot read has none, and is reported bad.
#[test]
fn the_source_gives_the_event_time_of_records_a_filter_drops() {
    let flow = windowed(TumblingEventTimeWindows::of(Duration::from_millis(10)), 0);
    assert_eq!(flow.topology.out_of_orderness(), Some(0));
    let mut chain = flow.topology.source_chain(&Arc::new(Metrics::new()));
    // (value, event time returned, what the chain emitted: elements or a bad record)
    let cases = [
        (r#"{"k":"a","t":42,"v":1}"#, Some(42), 1),
        (r#"{"k":"a","t":43,"v":0}"#, Some(43), 0),
        ("not json", None, 1),
    ];
    for (value, want_time, want_out) in cases {
        let bytes = Bytes::from(value);
        let record = InputRecord {
            topic: "in",
            partition: 0,
            offset: 0,
            timestamp: 7,
            key: None,
            value: Some(&bytes),
        };
        let mut out = Vec::new();
        assert_eq!(chain.process(&record, &mut out), want_time, "{value}");
        assert_eq!(out.len(), want_out, "{value}");
        let bad = out.iter().any(|e| matches!(e, Emitted::Bad { .. }));
        assert_eq!(bad, want_time.is_none(), "{value}");
    }
}

#[test]
fn uid_table() {
    let long = "u".repeat(201);
    // (uid, usable)
    let cases = [
        ("long-rides", true),
        ("a.b_c-1", true),
        ("", false),
        ("a b", false),
        ("a/b", false),
        ("é", false),
        (long.as_str(), false),
    ];
    for (uid, want) in cases {
        assert_eq!(stream::check_uid(uid).is_ok(), want, "{uid:?}");
    }
}

#[test]
fn window_assigner_table() {
    use crate::engine::time::WindowKind;
    let ms = Duration::from_millis;
    // (assigner's kind, expected kind or None for a refusal)
    let cases: Vec<(Result<WindowKind, String>, Option<WindowKind>)> = vec![
        (
            TumblingEventTimeWindows::of(ms(10)).window_kind(),
            Some(WindowKind::Tumbling { size: 10 }),
        ),
        (
            TumblingEventTimeWindows::of(Duration::from_micros(999)).window_kind(),
            None,
        ),
        (
            SlidingEventTimeWindows::of(ms(10), ms(5)).window_kind(),
            Some(WindowKind::Sliding { size: 10, slide: 5 }),
        ),
        (
            SlidingEventTimeWindows::of(ms(10), ms(10)).window_kind(),
            Some(WindowKind::Sliding {
                size: 10,
                slide: 10,
            }),
        ),
        (
            SlidingEventTimeWindows::of(ms(10), ms(11)).window_kind(),
            None,
        ),
        (
            SlidingEventTimeWindows::of(ms(10), ms(0)).window_kind(),
            None,
        ),
    ];
    for (i, (got, want)) in cases.into_iter().enumerate() {
        assert_eq!(got.ok(), want, "case {i}");
    }
}

/// The file ends in the builder set the job file's fields: a file source (with its serving
/// speed and delay) into a Kafka sink, and a topic into CSV part files.
#[test]
fn file_sources_and_file_sinks_build_the_job_files_ends() {
    use crate::engine::formats::{LineFormat, ParsedLine};
    use crate::engine::job::OutputFormat;

    /// A ride event (JSON), the fields these jobs use.
    #[derive(Serialize, Deserialize)]
    struct Ride {
        ride_id: u64,
        is_start: bool,
        event_time: i64,
    }

    /// `ride_id,START|END,event_time`.
    struct RideLine;
    impl LineFormat for RideLine {
        fn parse(&self, line: &str) -> Result<ParsedLine, String> {
            let c: Vec<&str> = line.split(',').collect();
            let &[id, kind, time] = c.as_slice() else {
                return Err(format!("not ride_id,START|END,event_time: {line:?}"));
            };
            let ride = Ride {
                ride_id: id.parse().map_err(|e| format!("{e}"))?,
                is_start: kind == "START",
                event_time: time.parse().map_err(|e| format!("{e}"))?,
            };
            Ok(ParsedLine {
                key: Some(id.as_bytes().to_vec()),
                value: serde_json::to_vec(&ride).map_err(|e| e.to_string())?,
                event_time: ride.event_time,
            })
        }
    }

    let flow = JobBuilder::new("c")
        .brokers("b:1")
        .transactional_id_prefix("c")
        .serving_speed_factor(600.0)
        .max_delay(Duration::from_secs(60))
        .file_source("rides.csv.gz", RideLine, Json::<Ride>::new())
        .sink(KafkaSink::json("rides"))
        .build()
        .unwrap();
    let file = flow.job().source.file.clone().expect("a file source");
    assert_eq!(file.path, std::path::PathBuf::from("rides.csv.gz"));
    assert_eq!((file.serving_speed_factor, file.max_delay_s), (600.0, 60));
    assert!(flow.job().source.topics.is_empty());
    assert_eq!(flow.job().sink.topic, "rides");
    // The job names the format by its type; the dataflow holds it under that name.
    assert!(
        file.format.name().ends_with("RideLine"),
        "{:?}",
        file.format
    );
    let format = flow.formats.resolve(file.format.name()).unwrap();
    let parsed = format.parse("7,END,1000").unwrap();
    assert_eq!((parsed.key, parsed.event_time), (Some(b"7".to_vec()), 1000));

    let flow = JobBuilder::new("d")
        .brokers("b:1")
        .source(["rides"], Json::<Ride>::new())
        .filter(|r| r.is_start)
        .sink(
            FileSink::csv("out/d", &["ride_id", "event_time"])
                .rolling(1 << 20, Duration::from_secs(5))
                .part_prefix("starts"),
        )
        .build()
        .unwrap();
    let sink = flow.job().sink.file.clone().expect("a file sink");
    assert_eq!(
        sink.format,
        OutputFormat::Csv {
            columns: vec!["ride_id".into(), "event_time".into()]
        }
    );
    assert_eq!(
        (
            sink.roll_size_bytes,
            sink.roll_interval_ms,
            sink.prefix.as_str()
        ),
        (1 << 20, 5000, "starts")
    );

    // A file sink has no transactions: the builder refuses the prefix as the job file does.
    let e = JobBuilder::new("d")
        .transactional_id_prefix("p")
        .source(["rides"], Json::<Ride>::new())
        .sink(FileSink::json("out/d"))
        .build()
        .unwrap_err();
    assert!(
        e.to_string().contains("a file sink has no transactions"),
        "{e}"
    );
}
