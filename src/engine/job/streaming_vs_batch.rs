//! Randomized: a window job's streaming run (the source prefix and the keyed window stage on a
//! state store, checkpointed, crashed and restored at random points, the input replayed from
//! the checkpoint's position as the runtime does) writes exactly what the batch reference
//! (`batch::run_batch`) computes, for tumbling, sliding and session windows, whenever the
//! input's disorder stays within the window's out-of-orderness.

use bytes::Bytes;
use serde_json::{json, Value};

use super::batch::run_batch;
use super::topology::{Prefix, Prefixed, WindowStage, WINDOW_KIND, WINDOW_UID};
use super::Job;
use crate::engine::runtime::topology::{KeyedStage, Output};
use crate::engine::state::{
    FrozenDelta, Layout, OperatorLayout, OperatorState, RestoreFrom, StateStore, StoreOptions,
};

/// SplitMix64: a seeded sequence, the seed named in every failure.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Out-of-orderness of every job here, ms.
const BOUND: i64 = 3_000;

fn job(window: &str, lateness: &str) -> Job {
    Job::parse(
        "r.toml",
        &format!(
            "name = \"r\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"in\"]\n\
             [[pipeline]]\nkey_by = \"k\"\n\
             [[pipeline]]\nwindow = {{ {window}, time = \"t\", out_of_orderness = \"{BOUND}ms\", \
             allowed_lateness = \"{lateness}\" }}\n\
             [[pipeline]]\naggregate = {{ n = \"count\", s = {{ sum = \"v\" }}, lo = {{ min = \"v\" }}, \
             hi = {{ max = \"v\" }}, a = {{ avg = \"v\" }}, \
             d = {{ count_distinct = \"v\" }} }}\n\
             [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{window}: {e}"))
}

/// `n` records of up to 5 keys, event times advancing by 0–2 s, each arriving up to `BOUND`
/// (exclusive) after its event time, in arrival order; values integers or halves (sums exact
/// in any order).
fn input(rng: &mut Rng, n: usize) -> Vec<(Option<Vec<u8>>, Value)> {
    let mut t = 1_000_000;
    let mut timed: Vec<(i64, usize, Value)> = (0..n)
        .map(|i| {
            t += rng.below(2_000) as i64;
            let key = format!("k{}", rng.below(5));
            let v = if rng.below(3) == 0 {
                json!(rng.below(100) as f64 + 0.5)
            } else {
                json!(rng.below(100))
            };
            let arrival = t + rng.below(BOUND as u64) as i64;
            (arrival, i, json!({"k": key, "t": t, "v": v}))
        })
        .collect();
    timed.sort_by_key(|(arrival, i, _)| (*arrival, *i));
    timed
        .into_iter()
        .map(|(_, _, v)| (v["k"].as_str().map(|k| k.as_bytes().to_vec()), v))
        .collect()
}

/// A keyed stage's streaming run on a real state store, as the runtime would make it: `step`
/// feeds input `i` (through the source side `C`, whose watermark a crash forgets), and after
/// each a checkpoint (1 in 50: its output committed) or a crash (1 in 100: what the last
/// checkpoint did not hold is gone, the stage restored from it and the input replayed from its
/// position). One keyed subtask over 4 key groups. `finish` flushes the stage at the end; the
/// committed output is returned.
pub(super) fn replayed<S: KeyedStage, C>(
    (uid, kind): (&str, &str),
    len: usize,
    rng: &mut Rng,
    stage_of: impl Fn(OperatorState) -> S,
    fresh: impl Fn() -> C,
    mut step: impl FnMut(&mut C, &mut S, usize, &mut Vec<Output>),
    finish: impl FnOnce(&mut S, &mut Vec<Output>),
) -> Vec<Output> {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout {
        key_groups: 4,
        operators: vec![OperatorLayout::new(uid, kind)],
        sink_prefix: None,
        sink_ids: 0,
    };
    let open = |from| StateStore::open(dir.path(), layout.clone(), StoreOptions::default(), from);
    let (mut store, _) = open(RestoreFrom::Fresh).unwrap();
    let mut stage = stage_of(store.operator(uid).unwrap());
    let mut source = fresh();
    let (mut committed, mut pending): (Vec<Output>, Vec<Output>) = (Vec::new(), Vec::new());
    let (mut at, mut checkpointed_at, mut n) = (0, 0, 0);
    while at < len {
        step(&mut source, &mut stage, at, &mut pending);
        at += 1;
        match rng.below(100) {
            0 | 1 => {
                n += 1;
                let delta = stage.snapshot(n).unwrap();
                store
                    .persist(n, &FrozenDelta::merge([delta]), Vec::new(), Vec::new())
                    .unwrap();
                stage.state_mut().complete(n).unwrap();
                committed.append(&mut pending);
                checkpointed_at = at;
            }
            2 => {
                drop(stage);
                drop(store);
                pending.clear();
                (store, _) = open(RestoreFrom::Latest).unwrap();
                stage = stage_of(store.operator(uid).unwrap());
                source = fresh();
                at = checkpointed_at;
            }
            _ => {}
        }
    }
    committed.extend(pending);
    finish(&mut stage, &mut committed);
    committed
}

/// The window job's streaming run ([`replayed`]): one source partition, its watermark the
/// newest event time less the bound.
fn stream(job: &Job, records: &[(Option<Vec<u8>>, Value)], rng: &mut Rng) -> Vec<(Vec<u8>, Value)> {
    let step = |(prefix, newest): &mut (Prefix, Option<i64>),
                stage: &mut WindowStage,
                i: usize,
                out: &mut Vec<Output>| {
        let (key, value) = &records[i];
        let raw = Bytes::from(value.to_string());
        let Prefixed::Keyed {
            key, time, value, ..
        } = prefix.prefixed(key.clone(), &raw)
        else {
            panic!("not keyed: {raw:?}");
        };
        out.extend(stage.add(&key, time, &value, None).unwrap());
        *newest = (*newest).max(Some(time));
        if let Some(w) = *newest {
            KeyedStage::advance_to(stage, w - BOUND, out).unwrap();
            while KeyedStage::fire_more(stage, out).unwrap() {}
        }
    };
    let finish = |stage: &mut WindowStage, out: &mut Vec<Output>| {
        KeyedStage::advance_to(stage, i64::MAX, out).unwrap();
        while KeyedStage::fire_more(stage, out).unwrap() {}
        assert_eq!(stage.late, 0, "nothing is late within the bound");
    };
    replayed(
        (WINDOW_UID, WINDOW_KIND),
        records.len(),
        rng,
        |state| WindowStage::new(&job.pipeline, state).unwrap(),
        || (Prefix::new(&job.pipeline), None),
        step,
        finish,
    )
    .into_iter()
    .map(|o| {
        let v: Value = serde_json::from_slice(&o.value).unwrap();
        (o.key.unwrap_or_default(), v)
    })
    .collect()
}

#[test]
fn a_streaming_window_run_restored_at_random_checkpoints_writes_the_batch_reference() {
    let windows = [
        ("tumbling = \"10s\"", "0ms"),
        ("sliding = { size = \"10s\", slide = \"4s\" }", "0ms"),
        ("session = \"2500ms\"", "0ms"),
        ("session = \"2500ms\"", "5s"),
        ("session = \"7s\"", "0ms"),
    ];
    // ONCEFLOW_REFERENCE_SEEDS=N runs more (each seed takes ~0.5 s a window in a debug build).
    let seeds: u64 = std::env::var("ONCEFLOW_REFERENCE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for seed in 0..seeds {
        for (window, lateness) in windows {
            let job = job(window, lateness);
            let mut rng = Rng(seed);
            let records = input(&mut rng, 300);
            let mut want: Vec<(Vec<u8>, Value)> = run_batch(&job.pipeline, records.clone())
                .records
                .into_iter()
                .map(|(k, v)| (k.unwrap_or_default(), v))
                .collect();
            let mut got = stream(&job, &records, &mut rng);
            // Per key, results come in window order in both.
            let per_key = |rows: &[(Vec<u8>, Value)], key: &[u8]| -> Vec<Value> {
                rows.iter()
                    .filter(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .collect()
            };
            for key in ["k0", "k1", "k2", "k3", "k4"] {
                let (w, g) = (
                    per_key(&want, key.as_bytes()),
                    per_key(&got, key.as_bytes()),
                );
                assert!(!w.is_empty(), "seed {seed}: no result for {key}");
                assert_eq!(
                    g, w,
                    "seed {seed}, {window}, lateness {lateness}, key {key}"
                );
            }
            want.sort_by_key(|a| a.1.to_string());
            got.sort_by_key(|a| a.1.to_string());
            assert_eq!(got, want, "seed {seed}, {window}, lateness {lateness}");
        }
    }
}
