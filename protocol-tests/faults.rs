//! Faults: the broker killed with kill -9 and restarted while the producer is sending.
//!
//! These tests run their own broker on another port, so killing it does not disturb the other
//! tests sharing the main one.

use crate::support::broker::PrivateBroker;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Producer, ProducerRecord};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_carries_on_when_the_broker_is_killed_and_restarted() {
    let broker = PrivateBroker::start(19092);
    let topic = TestTopic::create_with(&broker.addr, "kill9", 3, &[]).await;
    let producer = Producer::new(producer_config(
        &broker.addr,
        &[
            ("linger.ms", "5"),
            ("request.timeout.ms", "5000"),
            ("delivery.timeout.ms", "120000"),
            ("reconnect.backoff.max.ms", "500"),
        ],
    ))
    .await
    .unwrap();
    let n = 30_000usize;
    let sender = {
        let producer = producer.clone();
        let topic = topic.name.clone();
        tokio::spawn(async move {
            let mut fs = Vec::with_capacity(n);
            for i in 0..n {
                let r = ProducerRecord::new(topic.clone(), Bytes::from(i.to_string()))
                    .with_key(Bytes::from(format!("k{}", i % 97)));
                fs.push(producer.send(r).await.expect("send is accepted"));
                if i % 100 == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            fs
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    broker.run("kill");
    tokio::time::sleep(Duration::from_secs(1)).await;
    broker.run("start");
    let fs = sender.await.unwrap();
    let mut failures = 0;
    for f in fs {
        if let Err(e) = f.await {
            failures += 1;
            eprintln!("delivery failed: {e}");
        }
    }
    assert_eq!(failures, 0, "every record is delivered without user action");
    // Idempotence is on by default: every record exactly once, each key's records in order.
    let got = consume_all(&broker.addr, &topic, n, &[]).await;
    let mut count = vec![0u32; n];
    let mut last: std::collections::HashMap<Bytes, usize> = Default::default();
    for r in &got {
        let i: usize = std::str::from_utf8(r.value.as_deref().unwrap())
            .unwrap()
            .parse()
            .unwrap();
        count[i] += 1;
        let key = r.key.clone().unwrap();
        if let Some(prev) = last.insert(key.clone(), i) {
            assert!(prev < i, "key {key:?}: record {i} came after {prev}");
        }
    }
    let missing: Vec<usize> = (0..n).filter(|i| count[*i] == 0).take(5).collect();
    let dups: Vec<usize> = (0..n).filter(|i| count[*i] > 1).take(5).collect();
    assert!(missing.is_empty(), "records missing: {missing:?}");
    assert!(dups.is_empty(), "records duplicated: {dups:?}");
    drop(topic);
}
