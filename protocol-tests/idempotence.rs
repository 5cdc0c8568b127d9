//! The idempotent producer: every record exactly once, in send order, while a proxy loses
//! responses, delays them and resets connections; and the inverse test showing the same faults
//! duplicate records when idempotence is off.

use crate::support::java::java_consume_exactly;
use crate::support::proxy::Proxy;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{ConsumerRecord, Producer, ProducerRecord};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

const KEYS: usize = 97;

/// Sends `n` keyed records through `producer`; returns how many deliveries failed.
async fn send_all(producer: &Producer, topic: &str, n: usize) -> usize {
    let mut fs = Vec::with_capacity(n);
    for i in 0..n {
        let r = ProducerRecord::new(topic.to_owned(), Bytes::from(i.to_string()))
            .with_key(Bytes::from(format!("k{}", i % KEYS)));
        fs.push(producer.send(r).await.expect("send accepted"));
        if i % 500 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let mut failed = 0;
    for f in fs {
        if let Err(e) = f.await {
            eprintln!("delivery failed: {e}");
            failed += 1;
        }
    }
    failed
}

/// Counts of each value, and whether every key's values came in increasing order.
fn tally(records: &[ConsumerRecord]) -> (HashMap<u64, usize>, Vec<String>) {
    let mut counts = HashMap::new();
    let mut last: HashMap<Bytes, u64> = HashMap::new();
    let mut disorder = Vec::new();
    for r in records {
        let v: u64 = std::str::from_utf8(r.value.as_deref().unwrap())
            .unwrap()
            .parse()
            .unwrap();
        *counts.entry(v).or_insert(0) += 1;
        let key = r.key.clone().unwrap();
        if let Some(prev) = last.insert(key.clone(), v) {
            if prev >= v && disorder.len() < 5 {
                disorder.push(format!("{key:?}: {v} after {prev}"));
            }
        }
    }
    (counts, disorder)
}

fn lossy_props(idempotence: &str) -> Vec<(&str, &str)> {
    vec![
        ("enable.idempotence", idempotence),
        ("acks", "all"),
        ("linger.ms", "2"),
        ("batch.size", "4096"),
        ("request.timeout.ms", "3000"),
        ("reconnect.backoff.max.ms", "200"),
        ("retry.backoff.ms", "20"),
    ]
}

/// A proxy that loses 4 % of Produce responses after the broker wrote the batch, and certainly
/// the first three (the tests must not depend on how the records happen to be batched).
async fn lossy_proxy() -> Proxy {
    let proxy = Proxy::start(&broker()).await;
    let f = &proxy.faults;
    f.drop_produce_responses_per_mille
        .store(40, Ordering::Relaxed);
    f.drop_next_produce_responses.store(3, Ordering::Relaxed);
    proxy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_writes_each_record_once_in_order_when_responses_are_lost() {
    let topic = TestTopic::create("idem-lossy", 3).await;
    let proxy = lossy_proxy().await;
    proxy.faults.reset_per_mille.store(3, Ordering::Relaxed);
    let producer = Producer::new(producer_config(&proxy.addr, &lossy_props("true")))
        .await
        .unwrap();
    let n = 20_000;
    assert_eq!(
        send_all(&producer, &topic.name, n).await,
        0,
        "no delivery fails"
    );
    let dropped = proxy.faults.dropped_responses.load(Ordering::Relaxed);
    assert!(dropped > 0, "the proxy really dropped responses");

    let got = consume_all(&broker(), &topic, n, &[]).await;
    let (counts, disorder) = tally(&got);
    let dups = counts.values().filter(|c| **c > 1).count();
    assert_eq!(
        dups, 0,
        "duplicates despite idempotence ({dropped} responses dropped)"
    );
    assert_eq!(counts.len(), n, "every record is in the log");
    assert!(disorder.is_empty(), "send order per key: {disorder:?}");

    // The Java consumer sees the same: exactly n records, each once.
    let dir = tempfile::tempdir().unwrap();
    let java = java_consume_exactly(&dir, &topic.name, n).await;
    let mut values: Vec<Vec<u8>> = java.into_iter().map(|r| r.value.unwrap()).collect();
    values.sort();
    values.dedup();
    assert_eq!(values.len(), n, "Java consumer: every record exactly once");
}

/// Inverse test: the same faults without idempotence duplicate records, which proves the test
/// above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_idempotence_lost_responses_duplicate_records() {
    let topic = TestTopic::create("idem-off-lossy", 3).await;
    let proxy = lossy_proxy().await;
    let producer = Producer::new(producer_config(&proxy.addr, &lossy_props("false")))
        .await
        .unwrap();
    let n = 5_000;
    assert_eq!(send_all(&producer, &topic.name, n).await, 0);
    let got = consume_all(&broker(), &topic, n, &[]).await;
    let (counts, _) = tally(&got);
    assert_eq!(counts.len(), n, "at least once: every record is there");
    let dups = counts.values().filter(|c| **c > 1).count();
    assert!(
        dups > 0,
        "expected duplicates without idempotence ({} responses dropped)",
        proxy.faults.dropped_responses.load(Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_survives_slow_responses_and_request_timeouts() {
    let topic = TestTopic::create("idem-slow", 2).await;
    let proxy = Proxy::start(&broker()).await;
    let mut props = lossy_props("true");
    props.retain(|(k, _)| *k != "request.timeout.ms");
    props.push(("request.timeout.ms", "500"));
    let producer = Producer::new(producer_config(&proxy.addr, &props))
        .await
        .unwrap();
    // Responses slower than request.timeout.ms: requests time out, connections are poisoned,
    // batches are resent while the broker already has them.
    proxy.faults.delay_ms.store(700, Ordering::Relaxed);
    let sender = {
        let producer = producer.clone();
        let topic = topic.name.clone();
        tokio::spawn(async move { send_all(&producer, &topic, 3_000).await })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.faults.delay_ms.store(0, Ordering::Relaxed);
    assert_eq!(sender.await.unwrap(), 0);
    let got = consume_all(&broker(), &topic, 3_000, &[]).await;
    let (counts, disorder) = tally(&got);
    assert_eq!(counts.len(), 3_000);
    assert!(counts.values().all(|c| *c == 1), "exactly once");
    assert!(disorder.is_empty(), "{disorder:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_batches_bump_the_epoch_instead_of_wedging_the_partition() {
    let topic = TestTopic::create("idem-expire", 1).await;
    let proxy = Proxy::start(&broker()).await;
    let producer = Producer::new(producer_config(
        &proxy.addr,
        &[
            ("linger.ms", "0"),
            ("request.timeout.ms", "300"),
            ("delivery.timeout.ms", "1000"),
            ("retry.backoff.ms", "50"),
        ],
    ))
    .await
    .unwrap();
    let (pid0, epoch0) = producer.producer_id_and_epoch().unwrap();
    // The first records are delivered; then the broker stops answering in time, so the next
    // batches expire after their sequence numbers were assigned.
    assert_eq!(send_all(&producer, &topic.name, 10).await, 0);
    proxy.faults.delay_ms.store(2_000, Ordering::Relaxed);
    let failed = send_all(&producer, &topic.name, 50).await;
    assert!(failed > 0, "records expired (delivery.timeout.ms)");
    proxy.faults.delay_ms.store(0, Ordering::Relaxed);
    // Later records still go through: the gap was closed by an epoch bump.
    let after: Vec<_> = {
        let mut fs = Vec::new();
        for i in 0..20 {
            fs.push(
                producer
                    .send(ProducerRecord::new(
                        topic.name.clone(),
                        Bytes::from(format!("after-{i}")),
                    ))
                    .await
                    .unwrap(),
            );
        }
        let mut out = Vec::new();
        for f in fs {
            out.push(f.await.expect("records after the gap are delivered"));
        }
        out
    };
    assert_eq!(after.len(), 20);
    let (pid1, epoch1) = producer.producer_id_and_epoch().unwrap();
    assert_eq!(pid1, pid0, "same producer id");
    assert!(epoch1 > epoch0, "epoch bumped: {epoch0} -> {epoch1}");
}
