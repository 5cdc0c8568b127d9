//! Consumer positions across reassignment: data fetched for an earlier assignment must never be
//! handed out, or move a position, after the partition is assigned again and sought.

use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Consumer, ConsumerRecord, Offset, ProducerRecord};
use std::time::{Duration, Instant};

/// Produces `n` records with values "0".."n-1" to partition 0 of `topic`.
async fn fill(topic: &TestTopic, n: usize) {
    let p = producer(&[("linger.ms", "5")]).await;
    let mut fs = Vec::with_capacity(n);
    for i in 0..n {
        let r =
            ProducerRecord::new(topic.name.clone(), Bytes::from(i.to_string())).with_partition(0);
        fs.push(p.send(r).await.expect("send accepted"));
    }
    for f in fs {
        f.await.expect("delivered");
    }
}

/// Polls until at least `want` records arrived (60 s at most).
async fn poll_at_least(c: &mut Consumer, want: usize, what: &str) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out: Vec<ConsumerRecord> = Vec::new();
    while out.len() < want {
        assert!(
            Instant::now() < deadline,
            "{what}: got {} of {want} records within 60 s (offsets so far: {:?})",
            out.len(),
            out.iter().map(|r| r.offset).take(20).collect::<Vec<_>>()
        );
        out.extend(c.poll(Duration::from_secs(5)).await.expect("poll"));
    }
    out
}

/// Before the fix every `assign` restarted the partition's fetch epoch at 0, so after
/// `assign([])`, `assign([tp])`, `seek` the partition was back at the epoch the chunks already
/// prefetched for the first assignment carried: they passed the check, records were skipped,
/// then delivered again, and the position moved backwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassigning_and_seeking_never_hands_out_data_fetched_for_the_old_assignment() {
    let topic = TestTopic::create("reassign-seek", 1).await;
    let n = 20_000;
    fill(&topic, n).await;
    let tp = topic.tps()[0].clone();
    let mut c = Consumer::new(consumer_config(&broker(), &[("max.poll.records", "10")]))
        .await
        .expect("consumer");
    c.assign([tp.clone()]).await.unwrap();
    c.seek(&tp, Offset::At(0)).unwrap();
    let first = poll_at_least(&mut c, 1, "first assignment").await;
    assert_eq!(first[0].offset, 0);
    // Give the fetcher time to prefetch ahead of the application, as it does in real use; the
    // bug needs chunks of the old assignment in flight or queued.
    tokio::time::sleep(Duration::from_millis(500)).await;

    c.assign(Vec::new()).await.unwrap();
    c.assign([tp.clone()]).await.unwrap();
    c.seek(&tp, Offset::At(0)).unwrap();

    let got = poll_at_least(&mut c, 1_000, "after reassign and seek(0)").await;
    let offsets: Vec<i64> = got.iter().map(|r| r.offset).collect();
    assert_eq!(
        offsets[0],
        0,
        "the first record after seek(At(0)) is offset 0 (first offsets: {:?})",
        &offsets[..offsets.len().min(20)]
    );
    for (i, w) in offsets.windows(2).enumerate() {
        assert_eq!(
            w[1],
            w[0] + 1,
            "records after the seek are consecutive; at index {i}: {} then {}",
            w[0],
            w[1]
        );
    }
    for r in &got {
        assert_eq!(
            r.value.as_deref(),
            Some(r.offset.to_string().as_bytes()),
            "value matches its offset"
        );
    }
    let pos = c.position(&tp).expect("position known");
    assert_eq!(
        pos,
        offsets[offsets.len() - 1] + 1,
        "position is just past the last record handed out"
    );
}

/// Polls `c` until its reported end of partition 0 is `want` (60 s at most).
async fn wait_for_end(c: &mut Consumer, topic: &TestTopic, want: i64, what: &str) {
    let tp = onceflow::client::TopicPartition::new(topic.name.clone(), 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.end_offset(&tp) != Some(want) {
        assert!(
            Instant::now() < deadline,
            "{what}: end_offset stayed {:?}, expected {want}",
            c.end_offset(&tp)
        );
        c.poll(Duration::from_millis(200)).await.expect("poll");
    }
}

/// `Consumer::end_offset` is what a lag is computed against: under read_committed the LSO (an
/// open transaction holds it back), otherwise the high watermark. Transactional: TV1 and TV2.
#[tokio::test]
async fn end_offset_is_the_lso_under_read_committed_and_the_high_watermark_otherwise() {
    let topic = TestTopic::create("end-offset", 1).await;
    fill(&topic, 5).await;
    let id = unique_topic("end-offset-txn");
    let txn = onceflow::client::Producer::new(producer_config(
        &broker(),
        &[("transactional.id", id.as_str()), ("linger.ms", "5")],
    ))
    .await
    .unwrap();
    txn.init_transactions().await.unwrap();
    txn.begin_transaction().unwrap();
    for i in 0..3 {
        let r =
            ProducerRecord::new(topic.name.clone(), Bytes::from(format!("t{i}"))).with_partition(0);
        txn.send(r).await.unwrap().await.unwrap();
    }
    let tp = onceflow::client::TopicPartition::new(topic.name.clone(), 0);
    let open = |isolation: &'static str| {
        let config = consumer_config(&broker(), &[("isolation.level", isolation)]);
        let tp = tp.clone();
        async move {
            let mut c = Consumer::new(config).await.unwrap();
            c.assign([tp.clone()]).await.unwrap();
            assert_eq!(c.end_offset(&tp), None, "no fetch yet");
            c.seek(&tp, Offset::Beginning).unwrap();
            c
        }
    };
    // Offsets 0..5 committed (plain), 5..8 in the open transaction.
    let mut committed = open("read_committed").await;
    wait_for_end(
        &mut committed,
        &topic,
        5,
        "read_committed, transaction open",
    )
    .await;
    let mut uncommitted = open("read_uncommitted").await;
    wait_for_end(&mut uncommitted, &topic, 8, "read_uncommitted").await;
    txn.commit_transaction().await.unwrap();
    // The commit marker is offset 8: the LSO moves past it.
    wait_for_end(&mut committed, &topic, 9, "read_committed, committed").await;
}

/// `Consumer::caught_up` tells a stream processor which partition is idle: an empty partition
/// is caught up once fetched, a partition with records only once they are all handed out
/// (buffered records count as not caught up), and never before a fetch.
#[tokio::test]
async fn a_partition_is_caught_up_once_fetched_and_read_to_its_end() {
    let topic = TestTopic::create("caught-up", 2).await;
    fill(&topic, 5).await;
    let config = consumer_config(
        &broker(),
        &[
            ("isolation.level", "read_committed"),
            ("max.poll.records", "1"),
        ],
    );
    let mut c = Consumer::new(config).await.unwrap();
    let full = onceflow::client::TopicPartition::new(topic.name.clone(), 0);
    let empty = onceflow::client::TopicPartition::new(topic.name.clone(), 1);
    c.assign([full.clone(), empty.clone()]).await.unwrap();
    for tp in [&full, &empty] {
        c.seek(tp, Offset::Beginning).unwrap();
        assert!(!c.caught_up(tp), "{tp} before any fetch");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut read = 0;
    while read < 5 {
        assert!(
            Instant::now() < deadline,
            "read {read} of 5 records in 60 s"
        );
        read += c.poll(Duration::from_millis(200)).await.unwrap().len();
        if read > 0 && read < 5 {
            assert!(
                !c.caught_up(&full),
                "{full} with {read} of 5 records handed out"
            );
        }
    }
    while !(c.caught_up(&full) && c.caught_up(&empty)) {
        assert!(
            Instant::now() < deadline,
            "not caught up in 60 s: {full} {}, {empty} {}",
            c.caught_up(&full),
            c.caught_up(&empty)
        );
        assert!(c.poll(Duration::from_millis(200)).await.unwrap().is_empty());
    }
}
