//! The client on a real 3-node cluster (support::cluster: three KRaft nodes, replication
//! factor 3, min.insync.replicas=2) while nodes die, stop and come back: what real clusters
//! live through and single-broker tests never show. One test at a time holds the cluster;
//! every node runs again after each. Run at TV2 (cluster on 19700) and TV1 (19710).

use crate::support::cluster::{cluster, leader_of};
use crate::support::java::java_consume_on;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Consumer, Offset, Producer, ProducerRecord};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(180);

/// Record `seq` of partition `p`: value "p:seq", so a reader can check each partition's
/// records are 0, 1, 2, … exactly once and in order.
fn numbered(topic: &str, p: i32, seq: usize) -> ProducerRecord {
    ProducerRecord::new(topic.to_owned(), Bytes::from(format!("{p}:{seq}")))
        .with_key(Bytes::from(format!("k{p}")))
        .with_partition(p)
}

/// Reads `topic` from the beginning until `n` records came; the values per partition.
async fn read_values(bootstrap: &str, topic: &TestTopic, n: usize) -> BTreeMap<i32, Vec<String>> {
    let mut c = Consumer::new(consumer_config(bootstrap, &[]))
        .await
        .unwrap();
    for tp in c.assign_topics(&[&topic.name]).await.unwrap() {
        c.seek(&tp, Offset::Beginning).unwrap();
    }
    let mut out: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut got = 0;
    let start = Instant::now();
    while got < n {
        for r in c.poll(Duration::from_millis(500)).await.unwrap() {
            let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            out.entry(r.partition).or_default().push(v);
            got += 1;
        }
        assert!(
            start.elapsed() < WAIT,
            "read {got} of {n} records of {} within {WAIT:?}",
            topic.name
        );
    }
    out
}

/// Every partition holds "p:0", "p:1", … up to its count, once each, in order.
fn assert_numbered(values: &BTreeMap<i32, Vec<String>>, counts: &BTreeMap<i32, usize>) {
    for (p, n) in counts {
        let got = values.get(p).map(Vec::as_slice).unwrap_or_default();
        let want: Vec<String> = (0..*n).map(|s| format!("{p}:{s}")).collect();
        if got != want.as_slice() {
            let first = got
                .iter()
                .zip(&want)
                .position(|(g, w)| g != w)
                .unwrap_or(got.len().min(want.len()));
            panic!(
                "partition {p}: {} records, {n} expected; first difference at {first}: got {:?}, expected {:?}",
                got.len(),
                got.get(first),
                want.get(first)
            );
        }
    }
}

/// An idempotent producer (acks=all) sends without pause while the leader of partition 0 is
/// SIGKILLed: the new leader takes over, the producer retries its in-flight batches with
/// their sequence numbers, and every record is in its partition exactly once and in order —
/// as our consumer and the Java consumer both read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_leader_killed_mid_produce_loses_and_duplicates_no_record() {
    let c = cluster().await;
    let topic = TestTopic::create_with(&c.bootstrap, "leader-kill", 3, &[]).await;
    let victim = leader_of(&c.bootstrap, &topic.name, 0).await;
    let producer = Producer::new(producer_config(
        &c.bootstrap,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("linger.ms", "5"),
        ],
    ))
    .await
    .unwrap();
    let acked = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(AtomicBool::new(false));
    // Sends until 5,000 records after the kill, each partition numbered from 0; the
    // acknowledgements are awaited in order on another task.
    let sender = {
        let (acked, killed, name) = (acked.clone(), killed.clone(), topic.name.clone());
        tokio::spawn(async move {
            let (tx, mut rx) =
                tokio::sync::mpsc::unbounded_channel::<onceflow::client::DeliveryFuture>();
            let waiter = tokio::spawn(async move {
                while let Some(ack) = rx.recv().await {
                    ack.await.expect("a record failed");
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            });
            let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
            let (mut i, mut after_kill) = (0usize, 0usize);
            while after_kill < 5_000 {
                let p = (i % 3) as i32;
                let seq = counts.entry(p).or_default();
                tx.send(producer.send(numbered(&name, p, *seq)).await.unwrap())
                    .unwrap();
                *seq += 1;
                i += 1;
                if killed.load(Ordering::Relaxed) {
                    after_kill += 1;
                }
                if i % 100 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            drop(tx);
            waiter.await.unwrap();
            producer.close().await.unwrap();
            counts
        })
    };
    let start = Instant::now();
    while acked.load(Ordering::Relaxed) < 3_000 {
        assert!(start.elapsed() < WAIT, "3,000 records not acknowledged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.kill(victim).await;
    killed.store(true, Ordering::Relaxed);
    let counts = sender.await.unwrap();
    let total: usize = counts.values().sum();
    let new_leader = leader_of(&c.bootstrap, &topic.name, 0).await;
    assert_ne!(
        new_leader, victim,
        "partition 0 still led by the killed node"
    );
    c.start_node(victim).await;

    assert_numbered(&read_values(&c.bootstrap, &topic, total).await, &counts);
    let dir = tempfile::tempdir().unwrap();
    let java = java_consume_on(&c.bootstrap, &dir, &topic.name, total, "read_uncommitted").await;
    let mut by_java: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for r in java {
        by_java
            .entry(r.partition.unwrap())
            .or_default()
            .push(String::from_utf8(r.value.unwrap()).unwrap());
    }
    assert_numbered(&by_java, &counts);
}

/// One node stopped (controlled shutdown): two in-sync replicas remain, min.insync.replicas=2
/// holds, and acks=all keeps acknowledging every record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_with_one_node_stopped_still_acknowledges_every_record() {
    let c = cluster().await;
    let topic = TestTopic::create_with(&c.bootstrap, "one-down", 3, &[]).await;
    c.stop_node(3).await;
    let producer = Producer::new(producer_config(
        &c.bootstrap,
        &[("enable.idempotence", "true"), ("acks", "all")],
    ))
    .await
    .unwrap();
    let mut acks = Vec::new();
    let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
    for i in 0..3_000 {
        let p = i % 3;
        let seq = counts.entry(p).or_default();
        acks.push(producer.send(numbered(&topic.name, p, *seq)).await.unwrap());
        *seq += 1;
    }
    for a in acks {
        a.await
            .expect("acks=all with two of three replicas in sync");
    }
    producer.close().await.unwrap();
    assert_numbered(&read_values(&c.bootstrap, &topic, 3_000).await, &counts);
    c.start_node(3).await;
}

/// A topic that needs three in-sync replicas (min.insync.replicas=3) with one node stopped:
/// every attempt gets NOT_ENOUGH_REPLICAS, which is retried until delivery.timeout.ms and then
/// reported naming it. (Two nodes down would take the KRaft quorum with them: the three nodes
/// are the controllers too, so the in-sync set could no longer shrink.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_in_sync_replicas_is_retried_until_the_delivery_timeout_then_named() {
    let c = cluster().await;
    let topic =
        TestTopic::create_with(&c.bootstrap, "isr3", 1, &[("min.insync.replicas", "3")]).await;
    c.stop_node(3).await;
    let producer = Producer::new(producer_config(
        &c.bootstrap,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("delivery.timeout.ms", "12000"),
            ("request.timeout.ms", "5000"),
            ("linger.ms", "0"),
        ],
    ))
    .await
    .unwrap();
    let start = Instant::now();
    let ack = producer.send(numbered(&topic.name, 0, 0)).await.unwrap();
    let err = ack
        .await
        .expect_err("acks=all with 2 of 3 required replicas");
    let took = start.elapsed();
    let text = err.to_string();
    assert!(text.contains("NOT_ENOUGH_REPLICAS"), "{text}");
    assert!(text.contains("delivery.timeout.ms"), "{text}");
    assert!(!text.contains('\n'), "{text}");
    // Retried, not failed at the first answer.
    assert!(
        took >= Duration::from_secs(11),
        "failed after {took:?}: {text}"
    );
    producer.close().await.ok();
    c.start_node(3).await;
}

/// The same topic, node back while the record is being retried: it is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_enough_replicas_is_retried_until_the_node_is_back_and_the_record_written_once() {
    let c = cluster().await;
    let topic = TestTopic::create_with(
        &c.bootstrap,
        "isr3-back",
        1,
        &[("min.insync.replicas", "3")],
    )
    .await;
    c.stop_node(3).await;
    // A probe proves the partition refuses writes now (the in-sync set shrank to two).
    let probe = Producer::new(producer_config(
        &c.bootstrap,
        &[
            ("acks", "all"),
            ("delivery.timeout.ms", "4000"),
            ("request.timeout.ms", "3000"),
            ("linger.ms", "0"),
        ],
    ))
    .await
    .unwrap();
    let refused = probe
        .send(ProducerRecord::new(
            topic.name.clone(),
            Bytes::from("probe"),
        ))
        .await
        .unwrap()
        .await
        .expect_err("written with one of three replicas stopped");
    assert!(
        refused.to_string().contains("NOT_ENOUGH_REPLICAS"),
        "{refused}"
    );
    probe.close().await.ok();
    let producer = Producer::new(producer_config(
        &c.bootstrap,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("delivery.timeout.ms", "180000"),
            ("linger.ms", "0"),
        ],
    ))
    .await
    .unwrap();
    let ack = producer.send(numbered(&topic.name, 0, 0)).await.unwrap();
    c.start_node(3).await;
    tokio::time::timeout(WAIT, ack)
        .await
        .expect("the record was not acknowledged after the node came back")
        .expect("the record failed although the node came back");
    producer.close().await.unwrap();
    let counts = BTreeMap::from([(0, 1)]);
    assert_numbered(&read_values(&c.bootstrap, &topic, 1).await, &counts);
}
