//! Cluster mode and the broker's time retention: repartition records carry their event time as
//! their timestamp, and a broker deletes records by timestamp. A keyed task that had not read
//! old-stamped repartition records before its member died must still find them when it starts
//! again.
//!
//! Job (b) by one member on a private broker whose retention check runs every half second.
//! Hour 0 of 40 drivers (event times in January 2026: older than the broker's 7-day
//! `retention.ms`) arrives; the member's source tasks write it to the repartition topic and
//! commit, and the member pauses before its keyed tasks read the first of those records
//! (`ONCEFLOW_TEST_PAUSE=keyed-record`). Once two retention checks have run (seen on a canary
//! topic holding one old-stamped record at a time), the member is SIGKILLed and started again:
//! its keyed tasks have no committed position and read the repartition topic from its start.
//! Rides of recent hours (inside the retention) then move the watermark past hour 0 and fire
//! witness windows; every hour-0 window must be there, once. The inverse
//! (`ONCEFLOW_TEST_SKIP=repartition-retention`: the topic keeps the broker's default retention)
//! sees the hour-0 records deleted and its windows missing.
//! Transactional: run at TV2 and TV1 (private brokers 19612 and 19622, 1000 more at TV1).

use crate::engine_cluster_chaos::OutputReader;
use crate::engine_members::{cluster_job_with, Members};
use crate::engine_run::DEADLINE;
use crate::support::broker::PrivateBroker;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::consumer::Offset;
use onceflow::client::{Admin, IsolationLevel, Producer, ProducerRecord, TopicPartition};
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PORT: u16 = 19612;
const HOUR_MS: i64 = 3_600_000;
/// 2026-01-01T00:00:00Z: hour 0, long past any 7-day retention.
const EPOCH_MS: i64 = 1_767_225_600_000;
const DRIVERS: u64 = 40;
/// The witness drivers' ids start here.
const WITNESS: u64 = 1_000;

/// END events of drivers `first..first + DRIVERS` at `t` (+ the driver's index in seconds),
/// alternating between the input's two partitions.
async fn rides(p: &Producer, topic: &str, first: u64, t: i64, id: &mut u64) {
    for i in 0..DRIVERS {
        *id += 1;
        let v = format!(
            "{{\"ride_id\":{id},\"is_start\":false,\"driver_id\":{},\"event_time\":{},\"passengers\":1}}",
            first + i,
            t + i as i64 * 1000
        );
        p.send(ProducerRecord::new(topic, Bytes::from(v)).with_partition((i % 2) as i32))
            .await
            .unwrap();
    }
    p.flush().await.unwrap();
}

/// The sum of the partitions' start (`Offset::Beginning`) or end offsets.
async fn offsets(admin: &Admin, tps: &[TopicPartition], at: Offset) -> i64 {
    admin
        .list_offsets(tps, at, IsolationLevel::ReadUncommitted)
        .await
        .unwrap()
        .values()
        .sum()
}

/// Waits until the broker's retention check has run twice after this call: one old-stamped
/// record at a time on `canary`, each deleted (the log start passes it) before the next is
/// written. A check that deletes the second began after the one that deleted the first had
/// ended, so after this call, too.
async fn two_retention_checks(ms: &mut Members, admin: &Admin, p: &Producer, canary: &TestTopic) {
    for _ in 0..2 {
        p.send(
            ProducerRecord::new(&canary.name, Bytes::from_static(b"old")).with_timestamp(EPOCH_MS),
        )
        .await
        .unwrap();
        p.flush().await.unwrap();
        let end = offsets(admin, &canary.tps(), Offset::End).await;
        let start = Instant::now();
        while offsets(admin, &canary.tps(), Offset::Beginning).await < end {
            assert!(
                start.elapsed() < DEADLINE,
                "the broker's retention check did not delete the canary within {DEADLINE:?}: {}",
                ms.context()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The scenario of the module docs; returns the hour-0 windows per driver in the output and
/// the repartition topic's start offsets (their sum) before the restart.
async fn keyed_tasks_restarted_after_a_retention_check(
    label: &'static str,
    port: u16,
    skip: Option<&'static str>,
) -> (BTreeMap<u64, usize>, i64) {
    let broker = tokio::task::block_in_place(|| {
        PrivateBroker::start_with(
            port,
            "log.retention.check.interval.ms=500;log.initial.task.delay.ms=0",
        )
    });
    let addr = broker.addr.clone();
    let dir = std::env::temp_dir().join(unique_topic(&format!("onceflow-{label}")));
    std::fs::create_dir_all(&dir).unwrap();
    let input = TestTopic::create_with(&addr, &format!("{label}-in"), 2, &[]).await;
    let output = TestTopic::create_with(&addr, &format!("{label}-out"), 2, &[]).await;
    let canary = TestTopic::create_with(&addr, &format!("{label}-canary"), 1, &[]).await;
    let name = unique_topic(label);
    let job = cluster_job_with(
        &dir,
        "rides-per-driver-hourly.toml",
        &input.name,
        &output.name,
        &name,
        &[],
    );
    let env: Vec<_> = skip
        .map(|p| ("ONCEFLOW_TEST_SKIP", p))
        .into_iter()
        .collect();
    let mut ms = Members::on(label, (job, dir.clone()), &addr, 0, &env);
    ms.test_pause = Some("keyed-record");
    let admin = Admin::new(client_config(&addr)).await.unwrap();
    let producer = idempotent_producer(&addr).await;
    let mut id = 0;

    // Hour 0 in before the member starts; its source tasks commit it to the repartition
    // topic, and the member pauses before its keyed tasks read any of it. (Written first, the
    // old-stamped records and watermark markers open the repartition partitions' first log
    // segments; the broker rolls a segment when a record stamped later than its first by
    // segment.ms arrives, so the commit's transaction marker starts a new one, and the first
    // holds old-stamped records only: the retention can delete it. An idle source's marker,
    // stamped now, written first — had the member waited a second for input — would share the
    // old records' segment and keep it from the retention.)
    rides(&producer, &input.name, 0, EPOCH_MS + 10_000, &mut id).await;
    ms.start(0);
    ms.wait_log(0, "test pause at keyed-record").await;
    two_retention_checks(&mut ms, &admin, &producer, &canary).await;
    let repartition: Vec<TopicPartition> = (0..2)
        .map(|p| TopicPartition::new(format!("{name}-repartition"), p))
        .collect();
    let log_start = offsets(&admin, &repartition, Offset::Beginning).await;

    // Killed and started again (without the pause): its keyed tasks read the repartition
    // topic from its start.
    ms.test_pause = None;
    ms.kill_and_restart(0, Duration::ZERO).await;
    ms.wait_log(0, "tasks assigned").await;

    // Recent hours (inside the retention): the witnesses' hour, then one that fires it.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let witness_hour = now - 3 * HOUR_MS - now.rem_euclid(HOUR_MS);
    rides(
        &producer,
        &input.name,
        WITNESS,
        witness_hour + 10_000,
        &mut id,
    )
    .await;
    rides(&producer, &input.name, WITNESS, now - 10 * 60_000, &mut id).await;
    let mut out = OutputReader::new(&addr, &output).await;
    let start = Instant::now();
    loop {
        out.poll().await;
        let witnessed = out
            .read
            .iter()
            .filter(|((_, s), _)| *s == witness_hour)
            .count();
        if witnessed >= DRIVERS as usize {
            break;
        }
        ms.assert_alive();
        assert!(
            start.elapsed() < DEADLINE,
            "the witnesses' hour fired for {witnessed} drivers: {}",
            ms.context()
        );
    }
    out.read_to_end().await;
    let hour0 = out.per_driver(EPOCH_MS);
    eprintln!(
        "{label}: repartition log start {log_start} before the restart; hour 0 per driver {hour0:?}; events {:?}",
        ms.events
    );
    drop(ms);
    let _ = std::fs::remove_dir_all(&dir);
    (hour0, log_start)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_tasks_started_again_after_a_retention_check_find_every_old_repartition_record() {
    let (hour0, log_start) =
        keyed_tasks_restarted_after_a_retention_check("repartition-kept", PORT, None).await;
    assert_eq!(log_start, 0, "the broker deleted repartition records");
    assert_eq!(hour0.len(), DRIVERS as usize, "{hour0:?}");
    assert!(hour0.values().all(|n| *n == 1), "{hour0:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_default_retention_old_repartition_records_are_deleted_unread() {
    let (hour0, log_start) = keyed_tasks_restarted_after_a_retention_check(
        "repartition-deleted",
        PORT + 10,
        Some("repartition-retention"),
    )
    .await;
    assert!(log_start > 0, "no repartition record was deleted");
    assert!(
        hour0.len() < DRIVERS as usize,
        "with the default retention every hour-0 window was still written: {hour0:?}"
    );
}
