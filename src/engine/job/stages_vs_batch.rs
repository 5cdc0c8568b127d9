//! Randomized: a job with two keyed stages (a window whose results a second window, keyed by
//! the hour, ranks with `top`), run as the runtime runs it — the source chain, stage 1, the
//! link, stage 2, each stage's watermark passed on only once its firing is out, checkpointed,
//! crashed and restored at random points with the input replayed from the checkpoint —
//! writes exactly what the batch reference computes.

use bytes::Bytes;
use serde_json::{json, Value};

use super::batch::run_batch;
use super::streaming_vs_batch::Rng;
use super::topology::JsonTopology;
use super::Job;
use crate::engine::metrics::Metrics;
use crate::engine::runtime::topology::{
    state_layout, Emitted, InputRecord, KeyedStage, Output, SourceChain, Topology,
};
use crate::engine::state::{FrozenDelta, RestoreFrom, StateStore, StoreOptions};

/// Out-of-orderness of the job, ms.
const BOUND: i64 = 3_000;

fn job(first: &str, (second_time, second_size): (&str, &str), last: &str) -> Job {
    Job::parse(
        "s.toml",
        &format!(
            "name = \"s\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"in\"]\n\
             [[pipeline]]\nkey_by = \"k\"\n\
             [[pipeline]]\nwindow = {{ {first}, time = \"t\", out_of_orderness = \"{BOUND}ms\" }}\n\
             [[pipeline]]\naggregate = {{ s = {{ sum = \"v\" }}, n = \"count\" }}\n\
             [[pipeline]]\nkey_by = \"{second_time}\"\n\
             [[pipeline]]\nwindow = {{ tumbling = \"{second_size}\", time = \"{second_time}\" }}\n\
             [[pipeline]]\n{last}\n\
             [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{first}: {e}"))
}

/// `n` records of up to 8 keys, event times advancing by 0–1 s, each arriving up to `BOUND`
/// after its event time; values floats of cents (their sums depend on the order unless
/// summed exactly) and integers, ties common.
fn input(rng: &mut Rng, n: usize) -> Vec<(Option<Vec<u8>>, Value)> {
    let mut t = 1_000_000;
    let mut timed: Vec<(i64, usize, Value)> = (0..n)
        .map(|i| {
            t += rng.below(1_000) as i64;
            let key = format!("k{}", rng.below(8));
            let v = match rng.below(3) {
                0 => json!(rng.below(4)),
                _ => json!(rng.below(300) as f64 / 100.0),
            };
            let arrival = t + rng.below(BOUND as u64) as i64;
            (arrival, i, json!({"k": key, "t": t, "v": v}))
        })
        .collect();
    timed.sort_by_key(|(arrival, i, _)| (*arrival, *i));
    timed.into_iter().map(|(_, _, v)| (None, v)).collect()
}

/// One record through the source chain: its keyed elements and its event time.
fn chain(
    c: &mut dyn SourceChain,
    key: Option<&Bytes>,
    value: &Bytes,
) -> (Vec<Emitted>, Option<i64>) {
    let record = InputRecord {
        topic: "in",
        partition: 0,
        offset: 0,
        timestamp: 0,
        key,
        value: Some(value),
    };
    let mut out = Vec::new();
    let t = c.process(&record, &mut out);
    (out, t)
}

/// The two stages and the link, as one keyed subtask of each runs them.
struct Stages {
    first: Box<dyn KeyedStage>,
    link: Box<dyn SourceChain>,
    second: Box<dyn KeyedStage>,
}

impl Stages {
    fn open(
        topology: &JsonTopology,
        store: &StateStore,
        metrics: &std::sync::Arc<Metrics>,
    ) -> Stages {
        let layouts = topology.stages();
        let state = |k: usize| store.operator(&layouts[k].uid).unwrap();
        Stages {
            first: topology.keyed_stage_at(0, state(0), metrics).unwrap(),
            link: topology.link(0, metrics).unwrap(),
            second: topology.keyed_stage_at(1, state(1), metrics).unwrap(),
        }
    }

    /// Stage 1's outputs through the link into stage 2.
    fn pass_on(&mut self, outputs: Vec<Output>, out: &mut Vec<Output>) {
        for o in outputs {
            assert!(o.topic.is_none(), "nothing is late: {o:?}");
            let (emitted, _) = chain(self.link.as_mut(), None, &o.value);
            for e in emitted {
                let Emitted::Keyed { key, time, element } = e else {
                    panic!("a stage 1 result the link does not key");
                };
                self.second.process(&key, time, element, out).unwrap();
            }
        }
    }

    /// Stage 1 reaches watermark `w`: its firing, chunk by chunk, goes on first; then stage 2
    /// reaches `w`.
    fn advance_to(&mut self, w: i64, out: &mut Vec<Output>) {
        let mut fired = Vec::new();
        self.first.advance_to(w, &mut fired).unwrap();
        self.pass_on(std::mem::take(&mut fired), out);
        while self.first.fire_more(&mut fired).unwrap() {
            self.pass_on(std::mem::take(&mut fired), out);
        }
        self.pass_on(fired, out);
        self.second.advance_to(w, out).unwrap();
        while self.second.fire_more(out).unwrap() {}
    }
}

/// The streaming run, checkpointed (1 in 50), crashed and restored (1 in 100) at random.
fn stream(job: &Job, records: &[(Option<Vec<u8>>, Value)], rng: &mut Rng) -> Vec<Value> {
    let topology = JsonTopology::new(&job.pipeline);
    let metrics = std::sync::Arc::new(Metrics::default());
    let dir = tempfile::tempdir().unwrap();
    let mut layout = state_layout(job, &topology);
    layout.key_groups = 4;
    let open = |from| StateStore::open(dir.path(), layout.clone(), StoreOptions::default(), from);
    let (mut store, _) = open(RestoreFrom::Fresh).unwrap();
    let mut stages = Stages::open(&topology, &store, &metrics);
    let mut source = topology.source_chain(&metrics);
    let (mut newest, mut committed, mut pending) = (None::<i64>, Vec::new(), Vec::new());
    let (mut at, mut checkpointed_at, mut n) = (0, 0, 0);
    while at < records.len() {
        let raw = Bytes::from(records[at].1.to_string());
        let (emitted, t) = chain(source.as_mut(), None, &raw);
        for e in emitted {
            let Emitted::Keyed { key, time, element } = e else {
                panic!("not keyed: {raw:?}");
            };
            let mut fired = Vec::new();
            stages
                .first
                .process(&key, time, element, &mut fired)
                .unwrap();
            stages.pass_on(fired, &mut pending);
        }
        newest = newest.max(t);
        if let Some(t) = newest {
            stages.advance_to(t - BOUND, &mut pending);
        }
        at += 1;
        match rng.below(100) {
            0 | 1 => {
                n += 1;
                let deltas = [
                    stages.first.snapshot(n).unwrap(),
                    stages.second.snapshot(n).unwrap(),
                ];
                store
                    .persist(n, &FrozenDelta::merge(deltas), Vec::new(), Vec::new())
                    .unwrap();
                stages.first.state_mut().complete(n).unwrap();
                stages.second.state_mut().complete(n).unwrap();
                committed.append(&mut pending);
                checkpointed_at = at;
            }
            2 => {
                drop(stages);
                drop(store);
                pending.clear();
                (store, _) = open(RestoreFrom::Latest).unwrap();
                stages = Stages::open(&topology, &store, &metrics);
                source = topology.source_chain(&metrics);
                // The watermark restarts from the replayed input (stored per key group in
                // each stage, so it does not go back there).
                newest = None;
                at = checkpointed_at;
            }
            _ => {}
        }
    }
    committed.extend(pending);
    stages.advance_to(i64::MAX, &mut committed);
    committed
        .into_iter()
        .map(|o| serde_json::from_slice(&o.value).unwrap())
        .collect()
}

#[test]
fn a_two_stage_run_restored_at_random_checkpoints_writes_the_batch_reference() {
    let seeds: u64 = std::env::var("ONCEFLOW_REFERENCE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for seed in 0..seeds {
        // A second window groups the first's results of one hour (tumbling: by their start)
        // or those that end at one slide (sliding: by their end: a window that ends later
        // fires later, after the second window of an earlier start would have closed).
        // The second window ranks with the `top` aggregate (an array beside a count) or the
        // `top` stage (a record per rank).
        let array = "aggregate = { best = { top = { n = 3, by = \"s\", keep = [\"k\", \"s\", \"n\"] } }, keys = \"count\" }";
        let rows = "top = { n = 3, by = \"s\" }";
        for (first, second, last) in [
            ("tumbling = \"10s\"", ("window_start", "10s"), array),
            ("tumbling = \"10s\"", ("window_start", "10s"), rows),
            (
                "sliding = { size = \"10s\", slide = \"5s\" }",
                ("window_end", "5s"),
                array,
            ),
        ] {
            let job = job(first, second, last);
            let mut rng = Rng(seed);
            let records = input(&mut rng, 400);
            let mut want: Vec<Value> = run_batch(&job.pipeline, records.clone())
                .records
                .into_iter()
                .map(|(_, v)| v)
                .collect();
            assert!(want.len() > 10, "seed {seed}: {} hours", want.len());
            let mut got = stream(&job, &records, &mut rng);
            want.sort_by_key(Value::to_string);
            got.sort_by_key(Value::to_string);
            assert_eq!(got, want, "seed {seed}, {first}, {last}");
        }
    }
}

/// A stage's results reach the next stage as JSON text: a float must read back as the same
/// bits (serde_json's `float_roundtrip`; without it about a fifth of 17-digit floats come
/// back one unit in the last place off, and a ranking by them may change).
#[test]
fn a_float_result_reads_back_from_its_json_text_bit_for_bit() {
    let mut rng = Rng(7);
    for _ in 0..10_000 {
        let mut sum = super::fsum::ExactSum::default();
        for _ in 0..1 + rng.below(20) {
            sum.add(rng.below(10_000) as f64 / 100.0);
        }
        let x = sum.total();
        let text = json!({"tips": x}).to_string();
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back["tips"].as_f64().map(f64::to_bits),
            Some(x.to_bits()),
            "{text}"
        );
    }
}
