//! Randomized: a join job's streaming run (the join prefix and the keyed join stage on a state
//! store, checkpointed, crashed and restored at random points, each input replayed from the
//! checkpoint's position) writes exactly the pairs the batch reference
//! (`batch::run_batch_of_topics`) computes, whenever each input's disorder stays within the
//! join's out-of-orderness: interval joins and window joins.

use bytes::Bytes;
use serde_json::{json, Value};

use super::batch::run_batch_of_topics;
use super::codec::ValueDecoder;
use super::join_stage::{JoinPrefix, JoinStage, JOIN_KIND, JOIN_UID};
use super::streaming_vs_batch::{replayed, Rng};
use super::window_join::{WindowJoinStage, WINDOW_JOIN_KIND};
use super::{Job, Operator};
use crate::engine::runtime::topology::{Emitted, InputRecord, KeyedStage, Output, SourceChain};

/// Out-of-orderness of every job here, ms.
const BOUND: i64 = 3_000;

/// A join job; `how` is `between = [...]` or `window = {...}`.
fn job(how: &str, lateness: &str) -> Job {
    Job::parse(
        "j.toml",
        &format!(
            "name = \"j\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"a\", \"b\"]\n\
             [[pipeline]]\njoin.left = {{ topic = \"a\", key = \"k\", time = \"t\", \
             filter = {{ field = \"keep\", op = \"=\", value = true }} }}\n\
             join.right = {{ topic = \"b\", as = \"bee\", key = \"k\", time = \"t\" }}\n\
             join.{how}\n\
             join.out_of_orderness = \"{BOUND}ms\"\njoin.allowed_lateness = \"{lateness}\"\n\
             [[pipeline]]\nfilter = {{ field = \"bee.v\", op = \"!=\", value = 7 }}\n\
             [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{how}: {e}"))
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

/// The join job's streaming run ([`replayed`]): one partition per topic, the watermark the
/// smaller of the two partitions'.
fn stream<S: KeyedStage>(
    job: &Job,
    records: &[(String, Value)],
    rng: &mut Rng,
    (kind, stage_of): (&str, impl Fn(crate::engine::state::OperatorState) -> S),
) -> Vec<Value> {
    let Some(Operator::Join(join)) = job.pipeline.first() else {
        panic!("not a join job");
    };
    let step = |(prefix, newest): &mut (JoinPrefix, [Option<i64>; 2]),
                stage: &mut S,
                i: usize,
                out: &mut Vec<Output>| {
        let (topic, value) = &records[i];
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
                    stage.process(&key, time, element, out).unwrap();
                }
                Emitted::Out(_) | Emitted::Bad { .. } => panic!("{value}: not keyed"),
            }
        }
        let side = usize::from(topic == "b");
        newest[side] = newest[side].max(time);
        if let [Some(a), Some(b)] = *newest {
            stage.advance_to(a.min(b) - BOUND, out).unwrap();
            while stage.fire_more(out).unwrap() {}
        }
    };
    replayed(
        (JOIN_UID, kind),
        records.len(),
        rng,
        stage_of,
        || {
            let prefix = JoinPrefix::new((**join).clone(), ValueDecoder::json(), &[]);
            (prefix, [None, None])
        },
        step,
        |stage, out| {
            stage.advance_to(i64::MAX, out).unwrap();
            while stage.fire_more(out).unwrap() {}
        },
    )
    .into_iter()
    .map(|o| serde_json::from_slice(&o.value).unwrap())
    .collect()
}

#[test]
fn a_streaming_join_restored_at_random_checkpoints_writes_the_batch_reference() {
    let cases = [
        ("between = [\"-2s\", \"1s\"]", "0ms"),
        ("between = [\"0s\", \"0s\"]", "0ms"),
        ("between = [\"500ms\", \"4s\"]", "2s"),
        ("between = [\"-5s\", \"-1s\"]", "0ms"),
        ("window = { tumbling = \"5s\" }", "0ms"),
        (
            "window = { sliding = { size = \"6s\", slide = \"2s\" } }",
            "0ms",
        ),
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
            let got = match between.starts_with("window") {
                true => stream(
                    &job,
                    &records,
                    &mut rng,
                    (WINDOW_JOIN_KIND, |state| {
                        WindowJoinStage::new(&job.pipeline, state).unwrap()
                    }),
                ),
                false => stream(
                    &job,
                    &records,
                    &mut rng,
                    (JOIN_KIND, |state| {
                        JoinStage::new(&job.pipeline, state).unwrap()
                    }),
                ),
            };
            let mut got: Vec<String> = got.into_iter().map(|v| v.to_string()).collect();
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
