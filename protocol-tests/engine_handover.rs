//! Cluster mode: a source partition handed to another member right after the records that
//! close a window still closes it.
//!
//! Job (b) on one input partition (so one keyed task), checkpoints every 10 s, a private
//! broker. Member A owns both the source partition and the keyed task; it commits hour 0 of 10
//! drivers; at once the closing record (hour 2) arrives and member B joins, so A revokes a
//! partition in the rebalance callback, long before its next checkpoint. The cooperative-sticky
//! assignor lets A keep the first of its partitions by name and gives B the other: the input
//! topic's name sorts after the repartition topic's, so B gets the source partition. A's
//! callback commits the offsets past the closing record; B starts after it with no watermark of
//! its own and, the input over, reports only idleness. The closing record's watermark must
//! therefore go with that commit: the repartition topic then holds, before B's first marker of
//! the input, one at the closing watermark, and hour 0 fires. The inverse
//! (`ONCEFLOW_TEST_SKIP=revoke-markers`: no markers from a callback's commit) has no such
//! marker. Transactional: run at TV2 and TV1 (private brokers 19592 and 19602, 1000 more at TV1).

use crate::engine_cluster_chaos::OutputReader;
use crate::engine_members::{cluster_job_with, Members};
use crate::engine_run::{plain_log, DEADLINE};
use crate::support::broker::PrivateBroker;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Admin, ProducerRecord};
use std::time::{Duration, Instant};

const PORT: u16 = 19592;
const HOUR_MS: i64 = 3_600_000;
const EPOCH_MS: i64 = 1_767_225_600_000;
const DRIVERS: u64 = 10;
const MARKER_HEADER: &[u8] = b"onceflow.watermark";

/// A marker of the repartition topic: (input, watermark or `None` for idle).
type Marker = (u32, Option<i64>);

/// The markers of the repartition topic's partition 0, in log order, read_committed.
async fn markers(addr: &str, repartition: &str) -> Vec<Marker> {
    let tp = onceflow::client::TopicPartition::new(repartition, 0);
    let mut c = committed_reader(addr, &[tp]).await;
    let mut out = Vec::new();
    let start = Instant::now();
    while !c.at_end() && start.elapsed() < DEADLINE {
        for r in c.poll(Duration::from_millis(200)).await.unwrap_or_default() {
            let Some(h) = r.headers.iter().find(|h| h.key.as_ref() == MARKER_HEADER) else {
                continue;
            };
            let v = h.value.as_deref().unwrap_or_default();
            let input = u32::from_be_bytes(v[..4].try_into().unwrap());
            let w = (v.len() == 12).then(|| i64::from_be_bytes(v[4..12].try_into().unwrap()));
            out.push((input, w));
        }
    }
    out
}

/// The scenario of the module docs; returns whether a marker at the closing watermark came
/// before B's first marker, and the hour-0 windows in the output once B has sent one.
async fn handed_over(
    label: &'static str,
    port: u16,
    env: &[(&'static str, &'static str)],
) -> (bool, usize) {
    let broker = tokio::task::block_in_place(|| PrivateBroker::start(port));
    let addr = broker.addr.clone();
    let dir = std::env::temp_dir().join(unique_topic(&format!("onceflow-{label}")));
    std::fs::create_dir_all(&dir).unwrap();
    // "zz": sorts after the repartition topic, whose name starts with the group's.
    let input = TestTopic::create_with(&addr, &format!("zz-{label}-in"), 1, &[]).await;
    let output = TestTopic::create_with(&addr, &format!("{label}-out"), 1, &[]).await;
    let name = unique_topic(label);
    let job = cluster_job_with(
        &dir,
        "rides-per-driver-hourly.toml",
        &input.name,
        &output.name,
        &name,
        &[
            (
                "checkpoint.interval.ms = ",
                "checkpoint.interval.ms = 10000".into(),
            ),
            // What a 10 s interval needs.
            (
                "transaction.timeout.ms = ",
                "transaction.timeout.ms = 300000".into(),
            ),
        ],
    );
    let mut ms = Members::on(label, (job, dir.clone()), &addr, 0, env);
    let producer = idempotent_producer(&addr).await;
    let send = |t: i64, d: u64, id: u64| {
        let v = format!(
            "{{\"ride_id\":{id},\"is_start\":false,\"driver_id\":{d},\"event_time\":{t},\"passengers\":1}}"
        );
        ProducerRecord::new(input.name.clone(), Bytes::from(v))
    };

    ms.start(0);
    ms.wait_log(0, "tasks assigned").await;
    for d in 0..DRIVERS {
        producer
            .send(send(EPOCH_MS + 10_000 + d as i64, d, d))
            .await
            .unwrap();
    }
    producer.flush().await.unwrap();
    // A's checkpoint of hour 0: its next one is 10 s away.
    let admin = Admin::new(client_config(&addr)).await.unwrap();
    let start = Instant::now();
    loop {
        let committed: i64 = admin
            .committed_offsets(&name, &input.tps())
            .await
            .map(|m| m.values().sum())
            .unwrap_or(0);
        if committed >= DRIVERS as i64 {
            break;
        }
        ms.assert_alive();
        assert!(
            start.elapsed() < DEADLINE,
            "A never committed hour 0: {}",
            ms.context()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The closing record, and B at once.
    producer
        .send(send(EPOCH_MS + 2 * HOUR_MS, 0, 1_000))
        .await
        .unwrap();
    producer.flush().await.unwrap();
    ms.start(1);
    let b_log = ms.members[1].log.clone();
    let start = Instant::now();
    while !plain_log(&b_log).contains("tasks assigned") {
        ms.assert_alive();
        assert!(
            start.elapsed() < DEADLINE,
            "B got no task: {}",
            ms.context()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        plain_log(&b_log)
            .lines()
            .any(|l| l.contains("tasks assigned") && l.contains(&format!("added={}-0", input.name))),
        "B did not get the source partition (the assignor moved the other one): {}",
        ms.context()
    );
    // B's first marker: idleness (nothing after the closing record). What came before it?
    let repartition = format!("{name}-repartition");
    let closing = EPOCH_MS + 2 * HOUR_MS - 60_000;
    let start = Instant::now();
    let reported = loop {
        let ms_ = markers(&addr, &repartition).await;
        if let Some(first_idle) = ms_.iter().rposition(|(_, w)| w.is_none()) {
            // The idle markers at the end are B's (A sent At markers while it read).
            let before = &ms_[..first_idle];
            break before.iter().any(|(_, w)| *w == Some(closing));
        }
        ms.assert_alive();
        assert!(
            start.elapsed() < DEADLINE,
            "no idle marker: {}",
            ms.context()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut out = OutputReader::new(&addr, &output).await;
    let hour0 = if reported {
        let start = Instant::now();
        loop {
            out.poll().await;
            let n = out.read.iter().filter(|((_, s), _)| *s == EPOCH_MS).count();
            if n >= DRIVERS as usize || start.elapsed() > DEADLINE {
                break n;
            }
        }
    } else {
        out.poll().await;
        out.read.len()
    };
    eprintln!(
        "{label}: closing watermark reported {reported}, hour-0 windows {hour0}; events {:?}",
        ms.events
    );
    drop(ms);
    let _ = std::fs::remove_dir_all(&dir);
    (reported, hour0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_partition_handed_over_right_after_the_closing_record_still_closes_the_hour() {
    let (reported, hour0) = handed_over("handover", PORT, &[]).await;
    assert!(
        reported,
        "no marker at the closing watermark before the new owner's"
    );
    assert_eq!(
        hour0, DRIVERS as usize,
        "hour 0 did not fire for every driver"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_markers_from_the_rebalance_commit_the_closing_watermark_is_never_reported() {
    let env = [("ONCEFLOW_TEST_SKIP", "revoke-markers")];
    let (reported, _) = handed_over("handover-off", PORT + 10, &env).await;
    assert!(
        !reported,
        "the closing watermark was reported without the callback's markers"
    );
}
