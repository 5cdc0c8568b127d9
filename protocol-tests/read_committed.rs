//! read_committed interop: onceflow's read_committed consumer returns exactly what the Java
//! read_committed consumer returns, in the same order per partition, over data mixing committed
//! and aborted transactions (written by the Java client and by onceflow), plain records and a
//! transaction left open for a while.

use crate::support::java::{java, java_consume_at, Rec};
use crate::support::proxy::Proxy;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{
    Admin, Consumer, IsolationLevel, Offset, Producer, ProducerRecord, TopicPartition,
};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// (partition, value) in log order per partition, as the Java consumer reads them.
async fn java_read(topic: &str, n: usize, isolation: &str) -> Vec<(i32, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    java_consume_at(&dir, topic, n, isolation)
        .await
        .into_iter()
        .map(|r| (r.partition.unwrap(), r.value.unwrap()))
        .collect()
}

async fn ours_read(topic: &TestTopic, n: usize, isolation: &str) -> Vec<(i32, Vec<u8>)> {
    let mut got = consume_all(&broker(), topic, n, &[("isolation.level", isolation)]).await;
    got.sort_by_key(|r| (r.partition, r.offset));
    got.into_iter()
        .map(|r| (r.partition, r.value.unwrap().to_vec()))
        .collect()
}

fn java_input(prefix: &str, n: usize, partitions: i32) -> Vec<Rec> {
    (0..n)
        .map(|i| Rec {
            partition: Some(i as i32 % partitions),
            offset: None,
            timestamp: None,
            key: None,
            value: Some(format!("{prefix}-{i}").into_bytes()),
            headers: Vec::new(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_matches_the_java_consumer_on_java_and_onceflow_transactions() {
    let topic = TestTopic::create_with(&broker(), "rc-interop", 3, &[("retention.ms", "-1")]).await;
    let dir = tempfile::tempdir().unwrap();
    // Java: 8 transactions of 12 records across 3 partitions, every 3rd aborted, zstd.
    let input = java_input("java-txn", 96, 3);
    let path = dir.path().join("in.jsonl");
    std::fs::write(
        &path,
        input.iter().map(|r| r.to_json() + "\n").collect::<String>(),
    )
    .unwrap();
    java(
        "produce",
        &topic.name,
        &[
            "--input",
            path.to_str().unwrap(),
            "--transactional-id",
            &unique_topic("rc-java"),
            "--txn-size",
            "12",
            "--abort-every",
            "3",
            "--compression",
            "zstd",
        ],
    )
    .await;
    // Plain records in between.
    let plain = producer(&[]).await;
    for i in 0..9 {
        plain
            .send(
                ProducerRecord::new(topic.name.clone(), Bytes::from(format!("plain-{i}")))
                    .with_partition(i % 3),
            )
            .await
            .unwrap();
    }
    plain.flush().await.unwrap();
    // onceflow's transactional producer: commit, abort, commit, lz4.
    let p = Producer::new(producer_config(
        &broker(),
        &[
            ("transactional.id", &unique_topic("rc-ours")),
            ("compression.type", "lz4"),
        ],
    ))
    .await
    .unwrap();
    p.init_transactions().await.unwrap();
    for (t, commit) in [(0, true), (1, false), (2, true)] {
        p.begin_transaction().unwrap();
        for i in 0..9 {
            p.send(
                ProducerRecord::new(topic.name.clone(), Bytes::from(format!("ours-t{t}-{i}")))
                    .with_partition(i % 3),
            )
            .await
            .unwrap();
        }
        p.flush().await.unwrap();
        if commit {
            p.commit_transaction().await.unwrap();
        } else {
            p.abort_transaction().await.unwrap();
        }
    }
    // 96 Java records, 6 of 8 transactions committed = 72; 9 plain; 18 of ours.
    // A transaction left open on partition 0, with plain records after it: read_committed
    // stops at its first offset (the LSO) on that partition.
    let open = Producer::new(producer_config(
        &broker(),
        &[("transactional.id", &unique_topic("rc-open-txn"))],
    ))
    .await
    .unwrap();
    open.init_transactions().await.unwrap();
    open.begin_transaction().unwrap();
    for i in 0..3 {
        open.send(
            ProducerRecord::new(topic.name.clone(), Bytes::from(format!("open-{i}")))
                .with_partition(0),
        )
        .await
        .unwrap();
    }
    open.flush().await.unwrap();
    for i in 0..3 {
        plain
            .send(
                ProducerRecord::new(topic.name.clone(), Bytes::from(format!("held-{i}")))
                    .with_partition(0),
            )
            .await
            .unwrap();
    }
    plain.flush().await.unwrap();

    // 96 Java records, 6 of 8 transactions committed = 72; 9 plain; 18 of ours.
    let committed = 72 + 9 + 18;
    let java_rc = java_read(&topic.name, committed, "read_committed").await;
    let ours_rc = ours_read(&topic, committed, "read_committed").await;
    assert_eq!(ours_rc.len(), committed);
    assert_eq!(ours_rc, java_rc, "same records, same order per partition");
    // Proof the filter is what removes them: read_uncommitted returns the aborted records, and
    // the open transaction and what follows it.
    let all = 96 + 9 + 27 + 6;
    let ours_ru = ours_read(&topic, all, "read_uncommitted").await;
    assert_eq!(ours_ru.len(), all);
    assert_eq!(
        ours_ru,
        java_read(&topic.name, all, "read_uncommitted").await
    );
    // Once the open transaction commits, both read it and the records held behind it.
    open.commit_transaction().await.unwrap();
    let java_rc = java_read(&topic.name, committed + 6, "read_committed").await;
    let ours_rc = ours_read(&topic, committed + 6, "read_committed").await;
    assert_eq!(ours_rc, java_rc);
    assert_eq!(ours_rc.len(), committed + 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_waits_at_an_open_transaction_without_busy_looping() {
    let topic = TestTopic::create("rc-open", 1).await;
    let plain = producer(&[]).await;
    plain
        .send(ProducerRecord::new(topic.name.clone(), "before"))
        .await
        .unwrap();
    plain.flush().await.unwrap();
    let p = Producer::new(producer_config(
        &broker(),
        &[("transactional.id", &unique_topic("rc-open"))],
    ))
    .await
    .unwrap();
    p.init_transactions().await.unwrap();
    p.begin_transaction().unwrap();
    p.send(ProducerRecord::new(topic.name.clone(), "in-txn"))
        .await
        .unwrap();
    p.flush().await.unwrap();
    // Records after the open transaction are held back with it.
    plain
        .send(ProducerRecord::new(topic.name.clone(), "after"))
        .await
        .unwrap();
    plain.flush().await.unwrap();

    // Count the consumer's Fetch requests through the proxy.
    let proxy = Proxy::start(&broker()).await;
    let tp = TopicPartition::new(topic.name.clone(), 0);
    let mut c = Consumer::new(consumer_config(
        &proxy.addr,
        &[
            ("isolation.level", "read_committed"),
            ("auto.offset.reset", "earliest"),
            ("fetch.max.wait.ms", "500"),
        ],
    ))
    .await
    .unwrap();
    c.assign([tp.clone()]).await.unwrap();
    let mut got = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        got.extend(c.poll(Duration::from_millis(200)).await.unwrap());
    }
    let values = |v: &[onceflow::client::ConsumerRecord]| -> Vec<String> {
        v.iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap()).into_owned())
            .collect()
    };
    assert_eq!(
        values(&got),
        vec!["before"],
        "stops at the open transaction (LSO)"
    );
    let fetches = proxy.faults.fetch_requests.load(Ordering::Relaxed);
    assert!(
        (1..=12).contains(&fetches),
        "long-polls at the LSO instead of spinning: {fetches} fetches in 3 s"
    );
    // It continues once the transaction ends.
    p.commit_transaction().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "continued after the commit: {:?}",
            values(&got)
        );
        got.extend(c.poll(Duration::from_millis(200)).await.unwrap());
    }
    assert_eq!(values(&got), vec!["before", "in-txn", "after"]);
}

/// `Admin::list_offsets`: while a transaction with records is open, the end under
/// read_committed (the LSO) stays at the transaction's first offset and the end under
/// read_uncommitted (the high watermark) is past its records; after the commit (and its marker)
/// the two are equal.
#[tokio::test]
async fn admin_list_offsets_reports_lso_below_an_open_transaction_and_hw_above_it() {
    let topic = TestTopic::create("admin-lso", 1).await;
    let tp = TopicPartition::new(topic.name.clone(), 0);
    let tps = [tp.clone()];
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let end = |level| {
        let admin = admin.clone();
        let tps = tps.clone();
        async move { admin.list_offsets(&tps, Offset::End, level).await.unwrap()[&tps[0]] }
    };
    // Three plain records first, so the LSO is not simply the log start.
    let plain = producer(&[]).await;
    for i in 0..3 {
        plain
            .send(
                ProducerRecord::new(topic.name.clone(), Bytes::from(format!("p{i}")))
                    .with_partition(0),
            )
            .await
            .unwrap();
    }
    plain.flush().await.unwrap();
    let p = producer(&[("transactional.id", &unique_topic("admin-lso"))]).await;
    p.init_transactions().await.unwrap();
    p.begin_transaction().unwrap();
    for i in 0..5 {
        p.send(
            ProducerRecord::new(topic.name.clone(), Bytes::from(format!("t{i}"))).with_partition(0),
        )
        .await
        .unwrap();
    }
    p.flush().await.unwrap(); // the records are in the log, the transaction open

    assert_eq!(
        end(IsolationLevel::ReadUncommitted).await,
        8,
        "high watermark past the open transaction's records"
    );
    assert_eq!(
        end(IsolationLevel::ReadCommitted).await,
        3,
        "LSO at the open transaction's first offset"
    );
    let start = admin
        .list_offsets(&tps, Offset::Beginning, IsolationLevel::ReadCommitted)
        .await
        .unwrap();
    assert_eq!(start[&tp], 0);

    p.commit_transaction().await.unwrap();
    // The coordinator writes the commit marker after EndTxn returns; the LSO moves then.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (lso, hw) = (
            end(IsolationLevel::ReadCommitted).await,
            end(IsolationLevel::ReadUncommitted).await,
        );
        if lso == hw && hw == 9 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "waited 60 s for the commit marker (offset 8) to make LSO == HW == 9; LSO {lso}, HW {hw}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
