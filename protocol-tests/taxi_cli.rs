//! `onceflow taxi generate|verify` against a real broker: the generator's events land keyed by
//! driver, in order; the verifier accepts a faithful cleansing output and names what is
//! missing and duplicated in a faulty one. No transactions are written; the verifier's reads
//! are read_committed, so one transaction.version is enough.

use crate::support::cli::{onceflow_async, shown, stdout};
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Admin, Consumer, Offset, ProducerRecord};
use onceflow_taxi::generate::{self, Config};
use onceflow_taxi::verify::{ExpectationBuilder, Job, TopicRecord};
use onceflow_taxi::{Ride, NYC};
use std::collections::HashMap;
use std::process::Output;
use std::time::{Duration, Instant};

/// Bound on the CLI's own calls: generous, for a loaded 2-core machine.
const API_TIMEOUT: &str = "default.api.timeout.ms=60000";
const RIDES: u64 = 2000;

/// Runs `onceflow taxi ARGS -b BROKER -X default.api.timeout.ms=...`, off the runtime.
async fn taxi(args: &[&str]) -> Output {
    let mut argv: Vec<String> = vec!["taxi".into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    argv.extend(["-b".into(), broker(), "-X".into(), API_TIMEOUT.into()]);
    onceflow_async(argv, "").await
}

/// The events `taxi generate --count RIDES --seed SEED` produces (the defaults otherwise).
fn generated(seed: u64) -> Vec<Ride> {
    generate::rides(Config {
        seed,
        rides: RIDES,
        ..Config::default()
    })
    .unwrap()
    .collect()
}

/// Reads `expected` records from every partition of `topic`, from the beginning.
async fn read_all(topic: &str, expected: usize) -> Vec<onceflow::client::ConsumerRecord> {
    let mut c = Consumer::new(consumer_config(&broker(), &[]))
        .await
        .unwrap();
    for tp in c.assign_topics(&[topic]).await.unwrap() {
        c.seek(&tp, Offset::Beginning).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut out = Vec::new();
    while out.len() < expected || !c.at_end() {
        assert!(
            Instant::now() < deadline,
            "read {} of {expected} records of {topic} (and its end) before the deadline",
            out.len()
        );
        out.extend(c.poll(Duration::from_millis(200)).await.unwrap());
    }
    out
}

#[tokio::test]
async fn generate_creates_the_topic_and_writes_every_ride_keyed_by_driver_in_order() {
    let topic = unique_topic("taxi-gen");
    let _cleanup = TestTopic::adopt(&topic);
    let count = RIDES.to_string();
    let o = taxi(&[
        "generate",
        "-t",
        &topic,
        "--count",
        &count,
        "--seed",
        "5",
        "--partitions",
        "2",
    ])
    .await;
    assert!(o.status.success(), "{}", shown(&o));
    let line = stdout(&o);
    assert!(
        line.starts_with("taxi generate: 4000 events (2000 rides, "),
        "{line}"
    );
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    assert_eq!(admin.list_topics().await.unwrap().get(&topic), Some(&2));

    let records = read_all(&topic, 4000).await;
    assert_eq!(records.len(), 4000, "exactly the generated events, no more");
    // Per driver, the events in the order the generator emitted them, and each record keyed by
    // its driver.
    let mut by_driver: HashMap<u64, Vec<Ride>> = HashMap::new();
    let mut sorted = records;
    sorted.sort_by_key(|r| (r.partition, r.offset));
    for r in &sorted {
        let ride: Ride = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        assert_eq!(r.key.as_deref(), Some(ride.key().as_slice()), "{ride:?}");
        by_driver.entry(ride.driver_id).or_default().push(ride);
    }
    let mut want: HashMap<u64, Vec<Ride>> = HashMap::new();
    for ride in generated(5) {
        want.entry(ride.driver_id).or_default().push(ride);
    }
    assert_eq!(by_driver, want);
}

/// `--fares`: beside the rides, one fare per ride in a second topic, keyed by ride id, each
/// the fare the generator's `fare::fares` gives; per ride id, in the rides' START order.
#[tokio::test]
async fn generate_with_fares_writes_one_fare_per_ride_keyed_by_ride_id() {
    let rides = TestTopic::create("taxi-fares-rides", 2).await;
    let fares = TestTopic::create("taxi-fares", 2).await;
    let o = taxi(&[
        "generate",
        "-t",
        &rides.name,
        "--fares",
        &fares.name,
        "--count",
        "1000",
        "--seed",
        "3",
    ])
    .await;
    assert!(o.status.success(), "{}", shown(&o));
    assert!(
        stdout(&o).contains(&format!(" and 1000 fares to {}", fares.name)),
        "{}",
        shown(&o)
    );
    let records = read_all(&fares.name, 1000).await;
    assert_eq!(records.len(), 1000, "one fare per ride, no more");
    let mut got: HashMap<u64, onceflow_taxi::fare::Fare> = HashMap::new();
    for r in &records {
        let fare: onceflow_taxi::fare::Fare =
            serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        assert_eq!(r.key.as_deref(), Some(fare.key().as_slice()), "{fare:?}");
        got.insert(fare.ride_id, fare);
    }
    let config = Config {
        seed: 3,
        rides: 1000,
        ..Config::default()
    };
    let want: HashMap<u64, onceflow_taxi::fare::Fare> = onceflow_taxi::fare::fares(config)
        .unwrap()
        .map(|f| (f.ride_id, f))
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        read_all(&rides.name, 2000).await.len(),
        2000,
        "the rides too"
    );
}

/// An input topic filled by `taxi generate` (seed 1), an empty output topic, and the
/// cleansing job's expected output computed from the generator (not from the topic), in
/// emission order.
async fn input_and_expected_cleansing(prefix: &str) -> (TestTopic, TestTopic, Vec<Ride>) {
    let input = TestTopic::create(&format!("{prefix}-in"), 3).await;
    let output = TestTopic::create(&format!("{prefix}-out"), 3).await;
    let count = RIDES.to_string();
    let o = taxi(&["generate", "-t", &input.name, "--count", &count]).await;
    assert!(o.status.success(), "{}", shown(&o));
    let expected: Vec<Ride> = generated(1)
        .into_iter()
        .filter(|r| r.inside(&NYC))
        .collect();
    assert!(expected.len() > 3000, "{}", expected.len());
    (input, output, expected)
}

/// Writes `rides` to `topic` as the cleansing job would (keyed by driver, in order), with a
/// plain idempotent producer.
async fn write(topic: &TestTopic, rides: &[Ride]) {
    let p = producer(&[]).await;
    let mut acks = Vec::new();
    for r in rides {
        let rec = ProducerRecord::new(topic.name.clone(), Bytes::from(r.to_json()))
            .with_key(Bytes::from(r.key()));
        acks.push(p.send(rec).await.unwrap());
    }
    p.flush().await.unwrap();
    for a in acks {
        a.await.unwrap();
    }
}

async fn verify_cleansing(input: &TestTopic, output: &TestTopic) -> Output {
    taxi(&[
        "verify",
        "--job",
        "cleansing",
        "--input",
        &input.name,
        "--output",
        &output.name,
    ])
    .await
}

#[tokio::test]
async fn verify_accepts_a_faithful_cleansing_output() {
    let (input, output, expected) = input_and_expected_cleansing("taxi-ok").await;
    write(&output, &expected).await;
    let o = verify_cleansing(&input, &output).await;
    assert!(o.status.success(), "{}", shown(&o));
    assert_eq!(
        stdout(&o).trim_end(),
        format!(
            "verify: OK — {} records, no loss, no duplicates, order kept per key",
            expected.len()
        )
    );
}

#[tokio::test]
async fn verify_names_a_dropped_and_a_duplicated_record() {
    let (input, output, expected) = input_and_expected_cleansing("taxi-bad").await;
    let (dropped, doubled) = (&expected[100], &expected[200]);
    let mut faulty: Vec<Ride> = Vec::new();
    for r in &expected {
        if r == dropped {
            continue;
        }
        faulty.push(r.clone());
        if r == doubled {
            faulty.push(r.clone());
        }
    }
    write(&output, &faulty).await;
    let o = verify_cleansing(&input, &output).await;
    assert_eq!(o.status.code(), Some(1), "{}", shown(&o));
    let verdict = stdout(&o);
    assert_eq!(verdict.lines().count(), 1, "{verdict}");
    assert!(verdict.starts_with("verify: FAILED — "), "{verdict}");
    assert!(
        verdict.contains(&format!("— 1 missing (first: {})", dropped.describe())),
        "{verdict}"
    );
    assert!(
        verdict.contains(&format!(
            ", 1 duplicated (first: {} again at",
            doubled.describe()
        )),
        "{verdict}"
    );
    assert!(
        !verdict.contains("wrong") && !verdict.contains("order"),
        "{verdict}"
    );
}

/// Per driver per hour, over three hours of event time (one ride per second): every window,
/// the closed and the still open ones, written right, verifies.
#[tokio::test]
async fn verify_accepts_a_faithful_per_driver_hourly_output() {
    let input = TestTopic::create("taxi-hourly-in", 3).await;
    let output = TestTopic::create("taxi-hourly-out", 3).await;
    let o = taxi(&[
        "generate",
        "-t",
        &input.name,
        "--count",
        "10800",
        "--rate",
        "1",
        "--drivers",
        "20",
        "--shift-hours",
        "12",
        "--shift-period-hours",
        "12",
    ])
    .await;
    assert!(o.status.success(), "{}", shown(&o));
    // The windows from the generator's own events (one pseudo-partition; which windows are
    // still open does not matter when all of them are written); every driver on duty.
    let events = generate::rides(Config {
        rides: 10_800,
        rides_per_second: 1,
        drivers: 20,
        shift_ms: 12 * 3_600_000,
        shift_period_ms: 12 * 3_600_000,
        ..Config::default()
    })
    .unwrap();
    let mut b = ExpectationBuilder::new(Job::PerDriverHourly, 60_000);
    for (i, r) in events.enumerate() {
        b.push(&TopicRecord {
            partition: 0,
            offset: i as i64,
            value: Some(r.to_json().into_bytes()),
        })
        .unwrap();
    }
    let windows = b.finish().records;
    assert!(
        windows.len() >= 60,
        "20 drivers over 3 hours: {}",
        windows.len()
    );
    let p = producer(&[]).await;
    let mut acks = Vec::new();
    for w in &windows {
        let rec = ProducerRecord::new(output.name.clone(), Bytes::from(w.value.to_string()))
            .with_key(Bytes::from(w.driver_id.to_string()));
        acks.push(p.send(rec).await.unwrap());
    }
    p.flush().await.unwrap();
    for a in acks {
        a.await.unwrap();
    }
    let o = taxi(&[
        "verify",
        "--job",
        "per-driver-hourly",
        "--input",
        &input.name,
        "--output",
        &output.name,
    ])
    .await;
    assert!(o.status.success(), "{}", shown(&o));
    let verdict = stdout(&o);
    assert!(
        verdict.starts_with("verify: OK — ") && verdict.contains("order kept per key"),
        "{verdict}"
    );
}

/// Sends `rides` to `topic` keyed by driver inside `p`'s open transaction, and flushes.
async fn send_in_transaction(p: &onceflow::client::Producer, topic: &TestTopic, rides: &[Ride]) {
    for r in rides {
        let rec = ProducerRecord::new(topic.name.clone(), Bytes::from(r.to_json()))
            .with_key(Bytes::from(r.key()));
        p.send(rec).await.unwrap();
    }
    p.flush().await.unwrap();
}

/// The verifier reads the output read_committed: copies written in an aborted transaction,
/// and in one still open when it runs, are not duplicates. Transactional: run at TV1 and TV2.
#[tokio::test]
async fn verify_counts_only_committed_output_records() {
    let (input, output, expected) = input_and_expected_cleansing("taxi-rc").await;
    write(&output, &expected).await;
    let aborted = producer(&[("transactional.id", &unique_topic("taxi-rc-aborted"))]).await;
    aborted.init_transactions().await.unwrap();
    aborted.begin_transaction().unwrap();
    send_in_transaction(&aborted, &output, &expected[..50]).await;
    aborted.abort_transaction().await.unwrap();
    let open = producer(&[("transactional.id", &unique_topic("taxi-rc-open"))]).await;
    open.init_transactions().await.unwrap();
    open.begin_transaction().unwrap();
    send_in_transaction(&open, &output, &expected[..50]).await;

    let o = verify_cleansing(&input, &output).await;
    open.abort_transaction().await.unwrap();
    assert!(o.status.success(), "{}", shown(&o));
    assert_eq!(
        stdout(&o).trim_end(),
        format!(
            "verify: OK — {} records, no loss, no duplicates, order kept per key",
            expected.len()
        )
    );
}
