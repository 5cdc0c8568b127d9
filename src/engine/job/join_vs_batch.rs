//! Randomized: a join job's streaming run (the join prefix and the keyed join stage on a state
//! store, checkpointed, crashed and restored at random points, each input replayed from the
//! checkpoint's position) writes exactly the pairs the batch reference
//! (`batch::run_batch_of_topics`) computes, whenever each input's disorder stays within the
//! join's out-of-orderness.

use bytes::Bytes;
use serde_json::{json, Value};

use super::batch::run_batch_of_topics;
use super::codec::ValueDecoder;
use super::join_stage::{JoinPrefix, JoinStage, JOIN_KIND, JOIN_UID};
use super::streaming_vs_batch::Rng;
use super::{Job, Operator};
use crate::engine::runtime::topology::{Emitted, InputRecord, KeyedStage, Output, SourceChain};
use crate::engine::state::{
    FrozenDelta, Layout, OperatorLayout, RestoreFrom, StateStore, StoreOptions,
};

/// Out-of-orderness of every job here, ms.
const BOUND: i64 = 3_000;

fn job(between: &str, lateness: &str) -> Job {
    Job::parse(
        "j.toml",
        &format!(
            "name = \"j\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"a\", \"b\"]\n\
             [[pipeline]]\njoin.left = {{ topic = \"a\", key = \"k\", time = \"t\", \
             filter = {{ field = \"keep\", op = \"=\", value = true }} }}\n\
             join.right = {{ topic = \"b\", as = \"bee\", key = \"k\", time = \"t\" }}\n\
             join.between = {between}\n\
             join.out_of_orderness = \"{BOUND}ms\"\njoin.allowed_lateness = \"{lateness}\"\n\
             [[pipeline]]\nfilter = {{ field = \"bee.v\", op = \"!=\", value = 7 }}\n\
             [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{between}: {e}"))
}

/// `n` records of topics a and b, up to 4 keys, event times on a 500 ms grid advancing by 0–1 s
/// per topic, half of them arriving `BOUND` after their event time, the others less, on the same grid: ties, and records at the watermark (on time), are common, in arrival order.
fn input(rng: &mut Rng, n: usize) -> Vec<(String, Value)> {
    let mut t = [1_000_000i64, 1_000_000];
    let mut timed: Vec<(i64, u64, String, Value)> = (0..n)
        .map(|i| {
            let side = rng.below(2) as usize;
            t[side] += 500 * rng.below(3) as i64;
            let key = format!("k{}", rng.below(4));
            let v = json!({"k": key, "t": t[side], "v": rng.below(10), "keep": rng.below(5) != 0, "i": i});
            let delay = if rng.below(2) == 0 {
                BOUND
            } else {
                500 * rng.below(BOUND as u64 / 500) as i64
            };
            let arrival = t[side] + delay;
            // Records arriving at one instant come in any order.
            (arrival, rng.next(), ["a", "b"][side].to_owned(), v)
        })
        .collect();
    timed.sort_by_key(|(arrival, tie, _, _)| (*arrival, *tie));
    timed
        .into_iter()
        .map(|(_, _, topic, v)| (topic, v))
        .collect()
}

/// The streaming run: one partition per topic, one keyed subtask over 4 key groups, the
/// watermark the smaller of the two partitions'; after each record a checkpoint (1 in 50) or
/// a crash (1 in 100, back to the last checkpoint).
fn stream(job: &Job, records: &[(String, Value)], rng: &mut Rng) -> Vec<Value> {
    let Some(Operator::Join(join)) = job.pipeline.first() else {
        panic!("not a join job");
    };
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout {
        key_groups: 4,
        operators: vec![OperatorLayout::new(JOIN_UID, JOIN_KIND)],
        sink_prefix: None,
        sink_ids: 0,
    };
    let open = |from| StateStore::open(dir.path(), layout.clone(), StoreOptions::default(), from);
    let (mut store, _) = open(RestoreFrom::Fresh).unwrap();
    let stage_of = |store: &StateStore| {
        JoinStage::new(&job.pipeline, store.operator(JOIN_UID).unwrap()).unwrap()
    };
    let mut stage = stage_of(&store);
    let mut prefix = JoinPrefix::new((**join).clone(), ValueDecoder::json(), &[]);
    let (mut committed, mut pending): (Vec<Output>, Vec<Output>) = (Vec::new(), Vec::new());
    let (mut at, mut checkpointed_at, mut n) = (0, 0, 0);
    let mut newest: [Option<i64>; 2] = [None, None];
    while at < records.len() {
        let (topic, value) = &records[at];
        at += 1;
        let raw = Bytes::from(value.to_string());
        let record = InputRecord {
            topic,
            partition: 0,
            offset: 0,
            timestamp: 0,
            key: None,
            value: Some(&raw),
        };
        let mut emitted = Vec::new();
        let time = prefix.process(&record, &mut emitted);
        for e in emitted {
            match e {
                Emitted::Keyed { key, time, element } => {
                    stage.process(&key, time, element, &mut pending).unwrap();
                }
                Emitted::Out(_) | Emitted::Bad { .. } => panic!("{value}: not keyed"),
            }
        }
        let i = usize::from(topic == "b");
        newest[i] = newest[i].max(time);
        if let [Some(a), Some(b)] = newest {
            stage.advance_to(a.min(b) - BOUND, &mut pending).unwrap();
        }
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
                stage = stage_of(&store);
                prefix = JoinPrefix::new((**join).clone(), ValueDecoder::json(), &[]);
                at = checkpointed_at;
                newest = [None, None];
            }
            _ => {}
        }
    }
    committed.extend(pending);
    committed
        .into_iter()
        .map(|o| serde_json::from_slice(&o.value).unwrap())
        .collect()
}

#[test]
fn a_streaming_join_restored_at_random_checkpoints_writes_the_batch_reference() {
    let cases = [
        ("[\"-2s\", \"1s\"]", "0ms"),
        ("[\"0s\", \"0s\"]", "0ms"),
        ("[\"500ms\", \"4s\"]", "2s"),
        ("[\"-5s\", \"-1s\"]", "0ms"),
    ];
    let seeds: u64 = std::env::var("ONCEFLOW_REFERENCE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for seed in 0..seeds {
        for (between, lateness) in cases {
            let job = job(between, lateness);
            let mut rng = Rng(seed);
            let records = input(&mut rng, 300);
            let mut want: Vec<String> = run_batch_of_topics(
                &job.pipeline,
                records.iter().map(|(t, v)| (t.clone(), None, v.clone())),
            )
            .records
            .into_iter()
            .map(|(_, v)| v.to_string())
            .collect();
            let mut got: Vec<String> = stream(&job, &records, &mut rng)
                .into_iter()
                .map(|v| v.to_string())
                .collect();
            assert!(
                want.len() > 5,
                "seed {seed}, {between}: only {} pairs",
                want.len()
            );
            want.sort();
            got.sort();
            assert_eq!(
                got, want,
                "seed {seed}, between {between}, lateness {lateness}"
            );
        }
    }
}
