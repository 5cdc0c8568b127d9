//! `onceflow demo` and `onceflow taxi latency` against a real broker.
//!
//! The demo runs the per-driver-hourly job exactly-once as a child process, SIGKILLs it and
//! restarts it on its state while rides stream in, and must exit 0 with the verifier's OK;
//! its inverse (the hidden `--guarantee at-least-once`) must show duplicates and exit 1.
//! Transactional: run on TV2 (9192) and TV1 (9196).

use crate::support::cli::{onceflow_async, shown, stderr, stdout};
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Producer, ProducerRecord};
use onceflow_taxi::generate::{self, Config};
use onceflow_taxi::latency::now_ms;
use onceflow_taxi::NYC;
use std::process::Output;

const API_TIMEOUT: &str = "default.api.timeout.ms=60000";

/// `onceflow demo` with small numbers: two hours of rides (two kills need two closed hours)
/// fed at 2000 events/s, so a run takes seconds; `extra` after them.
async fn demo(extra: &[&str]) -> Output {
    let mut argv: Vec<String> = [
        "demo",
        "-b",
        &broker(),
        "-X",
        API_TIMEOUT,
        "--rides",
        "7500",
        "--kills",
        "2",
        "--rate",
        "2000",
        "--seed",
        "11",
        "--timeout-s",
        "240",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(extra.iter().map(|s| s.to_string()));
    onceflow_async(argv, "").await
}

/// The lines of stdout starting with `prefix`.
fn lines_starting(o: &Output, prefix: &str) -> Vec<String> {
    stdout(o)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_demo_killed_twice_writes_every_hourly_result_exactly_once_and_exits_0() {
    let o = demo(&[]).await;
    assert!(o.status.success(), "{}", shown(&o));
    assert_eq!(lines_starting(&o, "demo: kill ").len(), 2, "{}", shown(&o));
    let verdict = lines_starting(&o, "verify: ");
    assert_eq!(verdict.len(), 1, "{}", shown(&o));
    assert!(verdict[0].starts_with("verify: OK"), "{}", shown(&o));
    let stats = lines_starting(&o, "demo: the job took in 15000 records");
    assert_eq!(stats.len(), 1, "{}", shown(&o));
    assert!(stats[0].contains("latency: "), "{}", shown(&o));
    assert!(
        stdout(&o).contains("demo OK: every hour's result written exactly once despite 2 kills"),
        "{}",
        shown(&o)
    );
}

/// The inverse: without transactions, a restart replays what the killed job had written since
/// its last checkpoint. The checkpoint interval is longer than the run, so what each killed
/// incarnation wrote is replayed for sure (with 250 ms a checkpoint between the write and the
/// kill sometimes saves the run, and the test could not fail reliably).
#[tokio::test]
async fn the_demo_at_least_once_reports_duplicates_and_exits_1() {
    let o = demo(&[
        "--guarantee",
        "at-least-once",
        "--checkpoint-interval-ms",
        "60000",
    ])
    .await;
    assert_eq!(o.status.code(), Some(1), "{}", shown(&o));
    let verdict = lines_starting(&o, "verify: ");
    assert_eq!(verdict.len(), 1, "{}", shown(&o));
    assert!(
        verdict[0].starts_with("verify: FAILED") && verdict[0].contains("duplicated"),
        "{}",
        shown(&o)
    );
    assert!(stdout(&o).contains("demo FAILED"), "{}", shown(&o));
}

#[tokio::test]
async fn the_demo_without_a_broker_names_the_command_that_starts_one() {
    // Port 1 on localhost: nothing listens there.
    let argv = [
        "demo",
        "-b",
        "127.0.0.1:1",
        "-X",
        "default.api.timeout.ms=3000",
    ];
    let o = onceflow_async(argv.iter().map(|s| s.to_string()).collect(), "").await;
    crate::support::cli::assert_one_line_error(&o, "protocol-tests/kafka-broker.sh start");
    assert!(stderr(&o).contains("127.0.0.1:1"), "{}", shown(&o));
}

/// Produces `rides` generated rides to `topic` (keyed by driver); returns the events.
async fn produce_rides(topic: &str, rides: u64) -> Vec<onceflow_taxi::Ride> {
    let events: Vec<_> = generate::rides(Config {
        rides,
        ..Config::default()
    })
    .unwrap()
    .collect();
    let producer = Producer::new(producer_config(&broker(), &[("linger.ms", "5")]))
        .await
        .unwrap();
    let mut pending = Vec::new();
    for r in &events {
        let record = ProducerRecord::new(topic.to_owned(), Bytes::from(r.to_json()))
            .with_key(Bytes::from(r.key()));
        pending.push(producer.send(record).await.unwrap());
    }
    producer.flush().await.unwrap();
    for p in pending {
        p.await.unwrap();
    }
    events
}

/// `taxi latency --job cleansing` while a stand-in for the job writes the cleansed events:
/// the one line counts every result, and its numbers lie between the bounds the test's own
/// clock gives (from the last input append to the first output write, and from the first
/// input append to the command's end).
#[tokio::test]
async fn taxi_latency_times_each_result_from_its_inputs_append_to_its_visibility() {
    let input = TestTopic::create("latency-in", 3).await;
    let output = TestTopic::create("latency-out", 3).await;
    let before_input = now_ms();
    let events = produce_rides(&input.name, 200).await;
    let after_input = now_ms();
    let cleansed: Vec<_> = events.iter().filter(|r| r.inside(&NYC)).collect();
    let argv: Vec<String> = [
        "taxi",
        "latency",
        "--job",
        "cleansing",
        "--input",
        &input.name,
        "--output",
        &output.name,
        "--expect",
        &cleansed.len().to_string(),
        "--timeout-ms",
        "120000",
        "-b",
        &broker(),
        "-X",
        API_TIMEOUT,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let latency = tokio::spawn(onceflow_async(argv, ""));
    let before_output = now_ms();
    let producer = Producer::new(producer_config(&broker(), &[]))
        .await
        .unwrap();
    for r in &cleansed {
        let record = ProducerRecord::new(output.name.clone(), Bytes::from(r.to_json()))
            .with_key(Bytes::from(r.key()));
        producer.send(record).await.unwrap().await.unwrap();
    }
    let o = latency.await.unwrap();
    let after = now_ms();
    assert!(o.status.success(), "{}", shown(&o));
    let line = stdout(&o);
    let numbers: Vec<i64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let [n, _, p50, _, p99, max] = numbers[..] else {
        panic!("not the latency line: {line}");
    };
    assert!(
        line.starts_with(&format!(
            "latency: {n} results, p50 {p50} ms, p99 {p99} ms, max {max} ms"
        )),
        "{line}"
    );
    assert_eq!(n as usize, cleansed.len(), "{line}");
    assert!(p50 <= p99 && p99 <= max, "{line}");
    let (low, high) = (before_output - after_input, after - before_input);
    assert!(
        p50 >= low && max <= high,
        "{line} not within [{low}, {high}] ms"
    );
}

/// Fewer results than --expect by the timeout: the line still prints what came, and the
/// command fails with one line saying how many of how many came.
#[tokio::test]
async fn taxi_latency_short_of_its_expected_count_prints_the_line_and_fails() {
    let input = TestTopic::create("latency-in", 1).await;
    let output = TestTopic::create("latency-out", 1).await;
    produce_rides(&input.name, 5).await;
    let argv: Vec<String> = [
        "taxi",
        "latency",
        "--job",
        "per-driver-hourly",
        "--input",
        &input.name,
        "--output",
        &output.name,
        "--expect",
        "3",
        "--timeout-ms",
        "1500",
        "-b",
        &broker(),
        "-X",
        API_TIMEOUT,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let o = onceflow_async(argv, "").await;
    assert_eq!(o.status.code(), Some(1), "{}", shown(&o));
    assert_eq!(
        stdout(&o).trim(),
        "latency: 0 results, p50 - ms, p99 - ms, max - ms",
        "{}",
        shown(&o)
    );
    crate::support::cli::assert_one_line_error(&o, "0 of 3 output records");
}
