//! Order per partition, keyed partitioning, metadata at scale, seeks.

use crate::support::*;
use bytes::Bytes;
use onceflow::client::partition_for_key;
use onceflow::client::{Consumer, Offset, ProducerRecord, TopicPartition};
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test]
async fn records_keep_send_order_within_each_partition() {
    let topic = TestTopic::create("order", 4).await;
    let p = producer(&[("linger.ms", "2"), ("batch.size", "2048")]).await;
    let n = 20_000;
    let mut futures = Vec::with_capacity(n);
    for i in 0..n {
        let key = format!("k{}", i % 64);
        futures.push(
            p.send(
                ProducerRecord::new(topic.name.clone(), Bytes::from(i.to_string()))
                    .with_key(Bytes::from(key)),
            )
            .await
            .unwrap(),
        );
    }
    let mut acked = Vec::new();
    for f in futures {
        acked.push(f.await.unwrap());
    }
    let got = consume_all(&broker(), &topic, n, &[]).await;
    assert_eq!(got.len(), n);
    // Each key's records come back in the order they were sent, on the partition the Java
    // client's partitioner picks.
    let mut last: HashMap<Bytes, i64> = HashMap::new();
    for r in &got {
        let key = r.key.clone().unwrap();
        let seq: i64 = std::str::from_utf8(r.value.as_deref().unwrap())
            .unwrap()
            .parse()
            .unwrap();
        if let Some(prev) = last.insert(key.clone(), seq) {
            assert!(prev < seq, "key {key:?}: {seq} came after {prev}");
        }
        assert_eq!(r.partition, partition_for_key(&key, 4));
    }
    // Acknowledged offsets match what the consumer sees.
    for (i, m) in acked.iter().enumerate().step_by(997) {
        let r = got
            .iter()
            .find(|r| r.partition == m.partition && r.offset == m.offset)
            .expect("acked record is in the log");
        assert_eq!(r.value.as_deref().unwrap(), i.to_string().as_bytes());
    }
}

#[tokio::test]
async fn metadata_covers_a_topic_with_1000_partitions() {
    let topic = TestTopic::create("wide", 1000).await;
    let admin = onceflow::client::Admin::new(client_config(&broker()))
        .await
        .unwrap();
    let t = admin.cluster().topic(&topic.name).await.unwrap();
    assert_eq!(t.partitions.len(), 1000);
    assert!(
        t.partitions.iter().all(|p| p.leader >= 0),
        "every partition has a leader"
    );
    // A record to every partition is acknowledged at that partition.
    let p = producer(&[("linger.ms", "5")]).await;
    let mut fs = Vec::new();
    for part in 0..1000 {
        fs.push(
            p.send(ProducerRecord::new(topic.name.clone(), "x").with_partition(part))
                .await
                .unwrap(),
        );
    }
    for (part, f) in fs.into_iter().enumerate() {
        let m = f.await.unwrap();
        assert_eq!((m.partition, m.offset), (part as i32, 0));
    }
}

#[tokio::test]
async fn seek_to_offset_timestamp_and_end() {
    let topic = TestTopic::create("seek", 1).await;
    let p = producer(&[]).await;
    for i in 0..100i64 {
        p.send(
            ProducerRecord::new(topic.name.clone(), Bytes::from(i.to_string()))
                .with_timestamp(1_600_000_000_000 + i * 1000),
        )
        .await
        .unwrap();
    }
    p.flush().await.unwrap();
    let tp = TopicPartition::new(topic.name.clone(), 0);
    let mut c = Consumer::new(consumer_config(&broker(), &[]))
        .await
        .unwrap();
    c.assign([tp.clone()]).await.unwrap();

    c.seek(&tp, Offset::At(42)).unwrap();
    let r = c.recv().await.unwrap();
    assert_eq!((r.offset, r.value.as_deref()), (42, Some(&b"42"[..])));

    c.seek(&tp, Offset::Timestamp(1_600_000_000_000 + 70_500))
        .unwrap();
    assert_eq!(c.recv().await.unwrap().offset, 71);

    c.seek(&tp, Offset::Beginning).unwrap();
    assert_eq!(c.recv().await.unwrap().offset, 0);

    c.seek(&tp, Offset::End).unwrap();
    assert!(c.poll(Duration::from_millis(700)).await.unwrap().is_empty());
    assert_eq!(c.position(&tp), Some(100));
    let w = c.watermarks(std::slice::from_ref(&tp)).await.unwrap();
    assert_eq!(w[&tp], (0, 100));
}

#[tokio::test]
async fn out_of_range_position_resets_with_auto_offset_reset() {
    let topic = TestTopic::create("reset", 1).await;
    let p = producer(&[]).await;
    for i in 0..10 {
        p.send(ProducerRecord::new(
            topic.name.clone(),
            Bytes::from(format!("{i}")),
        ))
        .await
        .unwrap();
    }
    p.flush().await.unwrap();
    let tp = TopicPartition::new(topic.name.clone(), 0);
    let mut c = Consumer::new(consumer_config(
        &broker(),
        &[("auto.offset.reset", "earliest")],
    ))
    .await
    .unwrap();
    c.assign([tp.clone()]).await.unwrap();
    c.seek(&tp, Offset::At(5_000)).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), c.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.offset, 0, "reset to earliest after OFFSET_OUT_OF_RANGE");

    let mut strict = Consumer::new(consumer_config(&broker(), &[("auto.offset.reset", "none")]))
        .await
        .unwrap();
    strict.assign([tp.clone()]).await.unwrap();
    strict.seek(&tp, Offset::At(5_000)).unwrap();
    let e = tokio::time::timeout(Duration::from_secs(20), strict.recv())
        .await
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("OFFSET_OUT_OF_RANGE"), "{e}");
}

#[tokio::test]
async fn the_producer_uses_partitions_added_while_it_runs() {
    let topic = TestTopic::create("grow", 2).await;
    let p = producer(&[
        ("metadata.max.age.ms", "300"),
        ("linger.ms", "0"),
        ("batch.size", "200"),
    ])
    .await;
    let send_batch = |from: usize| {
        let p = p.clone();
        let topic = topic.name.clone();
        async move {
            let mut fs = Vec::new();
            for i in from..from + 200 {
                fs.push(
                    p.send(ProducerRecord::new(
                        topic.clone(),
                        Bytes::from(format!("v{i}")),
                    ))
                    .await
                    .unwrap(),
                );
            }
            let mut parts = std::collections::BTreeSet::new();
            for f in fs {
                parts.insert(f.await.unwrap().partition);
            }
            parts
        }
    };
    let before = send_batch(0).await;
    assert!(before.iter().all(|p| *p < 2));
    let admin = onceflow::client::Admin::new(client_config(&broker()))
        .await
        .unwrap();
    admin.create_partitions(&topic.name, 4).await.unwrap();
    // The producer learns of them at its next metadata refresh (metadata.max.age.ms): keep
    // sending until keyless records land there, or a generous deadline passes.
    let mut after = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let mut round = 0;
    while !after.iter().any(|p| *p >= 2) {
        assert!(
            std::time::Instant::now() < deadline,
            "keyless records never reached the new partitions: {after:?}"
        );
        round += 1;
        after.extend(send_batch(1000 * round).await);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn every_acks_level_delivers_and_the_consumer_works_as_a_stream() {
    use futures::StreamExt;
    let topic = TestTopic::create("acks", 1).await;
    for (acks, n) in [("0", 10), ("1", 10), ("all", 10)] {
        let p = producer(&[("acks", acks), ("enable.idempotence", "false")]).await;
        for i in 0..n {
            let m = p
                .send(ProducerRecord::new(
                    topic.name.clone(),
                    Bytes::from(format!("{acks}-{i}")),
                ))
                .await
                .unwrap();
            if acks == "0" {
                // No response: no offset to report.
                assert_eq!(m.await.unwrap().offset, -1);
            } else {
                assert!(m.await.unwrap().offset >= 0);
            }
        }
        p.flush().await.unwrap();
    }
    let mut c = Consumer::new(consumer_config(
        &broker(),
        &[("auto.offset.reset", "earliest")],
    ))
    .await
    .unwrap();
    c.assign(topic.tps()).await.unwrap();
    let got: Vec<String> = c
        .into_stream()
        .take(30)
        .map(|r| String::from_utf8(r.unwrap().value.unwrap().to_vec()).unwrap())
        .collect()
        .await;
    // Per producer, in order. Across producers only the acknowledged ones are ordered: acks=0
    // records are on their way when flush returns (there is no answer to wait for), so under
    // load the next producer's first records can reach the log before them.
    for a in ["0", "1", "all"] {
        let mine: Vec<&String> = got
            .iter()
            .filter(|v| v.rsplit_once('-').map(|(p, _)| p) == Some(a))
            .collect();
        let want: Vec<String> = (0..10).map(|i| format!("{a}-{i}")).collect();
        assert_eq!(
            mine,
            want.iter().collect::<Vec<_>>(),
            "acks={a}, all read: {got:?}"
        );
    }
    let acked: Vec<&String> = got.iter().filter(|v| !v.starts_with("0-")).collect();
    let want: Vec<String> = ["1", "all"]
        .iter()
        .flat_map(|a| (0..10).map(move |i| format!("{a}-{i}")))
        .collect();
    assert_eq!(acked, want.iter().collect::<Vec<_>>());
}
