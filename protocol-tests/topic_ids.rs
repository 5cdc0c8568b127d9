//! Topic ids (KIP-516): a topic deleted and recreated under the same name is another topic.
//! A consumer's position in the old one must not be carried into the new one, and a
//! producer's writes go to the new topic without its old idempotence state getting in the way;
//! a batch sent to the old topic is never written to the new one (Produce v13 by topic id).

use crate::support::proxy::Proxy;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::admin::NewTopic;
use onceflow::client::{
    Admin, Cluster, Consumer, ConsumerRecord, Error, Offset, Producer, ProducerRecord,
};
use std::time::{Duration, Instant};

/// Sends `n` records "<tag>-<i>" to partition 0 of `topic` and waits for them.
async fn fill(p: &Producer, topic: &str, n: usize, tag: &str) {
    let mut fs = Vec::with_capacity(n);
    for i in 0..n {
        let r = ProducerRecord::new(topic.to_owned(), Bytes::from(format!("{tag}-{i}")))
            .with_partition(0);
        fs.push(p.send(r).await.expect("send accepted"));
    }
    for f in fs {
        f.await.expect("delivered");
    }
}

/// The topic's id as a fresh metadata lookup gives it, once the topic is known (60 s at most).
async fn topic_id(topic: &str) -> [u8; 16] {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let cluster = Cluster::connect(client_config(&broker()))
            .await
            .expect("cluster");
        match cluster.topic(topic).await {
            Ok(t) if t.id != [0; 16] => return t.id,
            other => assert!(
                Instant::now() < deadline,
                "no id for {topic} within 60 s: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deletes `topic` and creates it again with one partition, waiting (60 s at most) while the
/// broker still finishes the deletion (TOPIC_ALREADY_EXISTS).
async fn recreate(topic: &str) {
    let admin = Admin::new(client_config(&broker())).await.expect("admin");
    let before = topic_id(topic).await;
    admin.delete_topics(&[topic]).await.expect("delete");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match admin.create_topics(&[NewTopic::new(topic, 1)]).await {
            Ok(()) => break,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "{topic} not recreated within 60 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    // The broker's metadata may name the old topic for a moment after the creation.
    while topic_id(topic).await == before {
        assert!(
            Instant::now() < deadline,
            "{topic} still has its old id after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls until `want` records arrived (90 s at most).
async fn poll_at_least(c: &mut Consumer, out: &mut Vec<ConsumerRecord>, want: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while out.len() < want {
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {want} records within 90 s",
            out.len()
        );
        out.extend(c.poll(Duration::from_millis(200)).await.expect("poll"));
    }
}

fn values(rs: &[ConsumerRecord]) -> Vec<(i64, String)> {
    rs.iter()
        .map(|r| {
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default());
            (r.offset, v.into_owned())
        })
        .collect()
}

fn expected(tag: &str, n: usize) -> Vec<(i64, String)> {
    (0..n).map(|i| (i as i64, format!("{tag}-{i}"))).collect()
}

/// The consumer read the old topic to offset 100; the new topic has grown past that before
/// the consumer notices. Carried over, the position would silently skip the new topic's first
/// 100 records. With auto.offset.reset=earliest it starts the new topic from its beginning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_of_a_recreated_topic_resets_instead_of_keeping_the_old_position() {
    init_logging();
    let topic = TestTopic::create("recreated-consumer", 1).await;
    let p = producer(&[("linger.ms", "5")]).await;
    fill(&p, &topic.name, 100, "old").await;
    let tp = topic.tps()[0].clone();
    let mut c = Consumer::new(consumer_config(
        &broker(),
        &[("auto.offset.reset", "earliest")],
    ))
    .await
    .expect("consumer");
    c.assign([tp.clone()]).await.expect("assign");
    c.seek(&tp, Offset::Beginning).expect("seek");
    let mut old = Vec::new();
    poll_at_least(&mut c, &mut old, 100, "the old topic").await;
    assert_eq!(values(&old), expected("old", 100));

    recreate(&topic.name).await;
    let p = producer(&[("linger.ms", "5")]).await;
    fill(&p, &topic.name, 150, "new").await;
    let mut new = Vec::new();
    poll_at_least(&mut c, &mut new, 150, "the new topic").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.at_end() {
        assert!(Instant::now() < deadline, "not at the end of the new topic");
        new.extend(c.poll(Duration::from_millis(200)).await.expect("poll"));
    }
    assert_eq!(
        values(&new),
        expected("new", 150),
        "the new topic from its first record, each once"
    );
    assert!(c.metrics().topics_recreated >= 1, "{:?}", c.metrics());
}

/// Under auto.offset.reset=none the application is told, naming the topic; after its seek the
/// consumer reads the new topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_auto_offset_reset_none_a_recreated_topic_is_an_error_until_a_seek() {
    init_logging();
    let topic = TestTopic::create("recreated-none", 1).await;
    let p = producer(&[("linger.ms", "5")]).await;
    fill(&p, &topic.name, 20, "old").await;
    let tp = topic.tps()[0].clone();
    let mut c = Consumer::new(consumer_config(&broker(), &[("auto.offset.reset", "none")]))
        .await
        .expect("consumer");
    c.assign([tp.clone()]).await.expect("assign");
    c.seek(&tp, Offset::At(0)).expect("seek");
    let mut old = Vec::new();
    poll_at_least(&mut c, &mut old, 20, "the old topic").await;

    recreate(&topic.name).await;
    let p = producer(&[("linger.ms", "5")]).await;
    fill(&p, &topic.name, 30, "new").await;
    let deadline = Instant::now() + Duration::from_secs(90);
    let e = loop {
        assert!(Instant::now() < deadline, "no error within 90 s");
        match c.poll(Duration::from_millis(200)).await {
            Ok(rs) => assert!(rs.is_empty(), "records read on: {:?}", values(&rs)),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(&e, Error::TopicRecreated { topic: t, position: 20, .. } if *t == topic.name),
        "{e:?}"
    );
    assert!(
        c.poll(Duration::from_millis(100)).await.is_err(),
        "raised again until a seek"
    );
    c.seek(&tp, Offset::Beginning).expect("seek");
    let mut new = Vec::new();
    poll_at_least(&mut c, &mut new, 30, "the new topic after the seek").await;
    assert_eq!(values(&new), expected("new", 30));
}

/// An idempotent producer writes to a topic, the topic is deleted and recreated, and the same
/// producer writes on: every new record is acknowledged and lands once in the new topic, from
/// offset 0, whatever sequence numbers the old topic's partition had reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_to_a_recreated_topic_writes_the_new_topic_once() {
    init_logging();
    let topic = TestTopic::create("recreated-producer", 1).await;
    let p = producer(&[("linger.ms", "5"), ("enable.idempotence", "true")]).await;
    fill(&p, &topic.name, 100, "old").await;
    recreate(&topic.name).await;
    fill(&p, &topic.name, 100, "new").await;
    let got = consume_all(&broker(), &topic, 100, &[]).await;
    assert_eq!(values(&got), expected("new", 100));
}

fn expected_tv() -> i16 {
    std::env::var("ONCEFLOW_EXPECT_TV").map_or(2, |v| v.parse().unwrap())
}

/// An idempotent producer that talks to the broker through `proxy`.
async fn idempotent_producer_through(proxy: &Proxy) -> Producer {
    Producer::new(producer_config(
        &proxy.addr,
        &[("linger.ms", "5"), ("enable.idempotence", "true")],
    ))
    .await
    .expect("producer")
}

/// Sends one record "stale" through `proxy`: the broker writes it but the proxy drops the
/// answer, and holds the producer's retry at a gate while the topic is deleted and recreated;
/// then opens the gate. Returns the record's outcome.
async fn send_across_a_recreation(
    p: &Producer,
    proxy: &Proxy,
    topic: &str,
) -> Result<onceflow::client::RecordMetadata, Error> {
    use std::sync::atomic::Ordering::Relaxed;
    proxy.faults.gate_after_dropped_produce.store(true, Relaxed);
    proxy.faults.drop_next_produce_responses.store(1, Relaxed);
    let r = ProducerRecord::new(topic.to_owned(), Bytes::from_static(b"stale")).with_partition(0);
    let delivery = p.send(r).await.expect("send accepted");
    let deadline = Instant::now() + Duration::from_secs(60);
    while proxy.faults.gated_requests.load(Relaxed) == 0 {
        assert!(
            Instant::now() < deadline,
            "the retry never reached the gate"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(proxy.faults.dropped_responses.load(Relaxed), 1);
    recreate(topic).await;
    proxy.faults.open_gate();
    tokio::time::timeout(Duration::from_secs(120), delivery)
        .await
        .expect("the stale record settles within 120 s")
}

/// The broker writes a record but its answer is lost; before the producer's retry gets
/// through, the topic is deleted and recreated. The retry names the old topic by id (Produce
/// v13), so the broker refuses it; the producer fails the record with an error naming both ids
/// instead of writing it a second time, to the new topic, and the records sent after go to the
/// new topic, from offset 0, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_deleted_topic_may_hold_is_failed_not_written_to_the_new_topic() {
    init_logging();
    let topic = TestTopic::create("recreated-in-flight", 1).await;
    let proxy = Proxy::start(&broker()).await;
    let p = idempotent_producer_through(&proxy).await;
    fill(&p, &topic.name, 20, "old").await;
    let e = send_across_a_recreation(&p, &proxy, &topic.name)
        .await
        .expect_err("the stale record must not be acknowledged");
    assert!(
        matches!(&e, Error::RecreatedWhileInFlight { topic: t, partition: 0, records: 1, .. } if *t == topic.name),
        "{e:?}"
    );
    assert!(e.to_string().contains("deleted and recreated"), "{e}");
    fill(&p, &topic.name, 20, "new").await;
    let got = consume_all(&broker(), &topic, 20, &[]).await;
    assert_eq!(
        values(&got),
        expected("new", 20),
        "no stale record, nothing twice"
    );
}

/// Inverse: the same run without topic ids (the proxy strips them from Metadata, as an old
/// broker's): the retry goes by name (v12) and the record is written a second time, to the new
/// topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_topic_ids_a_record_the_deleted_topic_holds_is_written_again_to_the_new_one() {
    init_logging();
    let topic = TestTopic::create("recreated-in-flight-by-name", 1).await;
    let proxy = Proxy::start(&broker()).await;
    proxy
        .faults
        .hide_topic_ids
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let p = idempotent_producer_through(&proxy).await;
    fill(&p, &topic.name, 20, "old").await;
    let md = send_across_a_recreation(&p, &proxy, &topic.name)
        .await
        .expect("by name, the broker takes it");
    assert_eq!(
        md.offset, 0,
        "the old topic's record is the new topic's first"
    );
    let got = consume_all(&broker(), &topic, 1, &[]).await;
    assert_eq!(values(&got), vec![(0, "stale".to_owned())]);
}

/// The same in a transaction. At transaction.version 2 the retry goes by id (v13): the stale
/// record fails, the transaction cannot commit, and after the abort a new transaction writes
/// the new topic. At transaction.version 1 the producer must speak Produce v11 (v12 and later
/// mean KIP-890 to the broker), by name: the broker cannot tell the topics apart, and the
/// retried record may join the transaction in the new topic (the gap Produce v13 closes) or be
/// refused by the partition's verification, and then fail as at version 2; both are checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_caught_by_a_recreation_cannot_commit_at_transaction_version_2() {
    init_logging();
    let topic = TestTopic::create("recreated-in-txn", 1).await;
    let proxy = Proxy::start(&broker()).await;
    let id = unique_topic("recreated-txn-id");
    let p = Producer::new(producer_config(
        &proxy.addr,
        &[("linger.ms", "5"), ("transactional.id", id.as_str())],
    ))
    .await
    .expect("producer");
    p.init_transactions().await.expect("init");
    p.begin_transaction().expect("begin");
    fill(&p, &topic.name, 20, "old").await;
    p.commit_transaction().await.expect("commit");
    p.begin_transaction().expect("begin");
    let outcome = send_across_a_recreation(&p, &proxy, &topic.name).await;
    let committed = [("isolation.level", "read_committed")];
    match outcome {
        // At transaction.version 1 the by-name retry may reach the new topic and be written
        // there (the broker cannot tell the topics apart): the gap, shown, not asserted away.
        Ok(_) if expected_tv() < 2 => {
            p.commit_transaction().await.expect("commit");
            let got = consume_all(&broker(), &topic, 1, &committed).await;
            assert_eq!(values(&got), vec![(0, "stale".to_owned())]);
            return;
        }
        Ok(md) => panic!("the stale record was acknowledged at transaction.version 2: {md:?}"),
        // Always at transaction.version 2; at 1 when the broker refused the retry (the
        // partition's verification with the coordinator failed) before the producer saw the
        // new id.
        Err(e) => assert!(matches!(&e, Error::RecreatedWhileInFlight { .. }), "{e:?}"),
    }
    let c = p
        .commit_transaction()
        .await
        .expect_err("the transaction cannot commit");
    assert!(
        c.class() != onceflow::client::ErrorClass::Fatal,
        "abortable: {c:?}"
    );
    p.abort_transaction().await.expect("abort");
    p.begin_transaction().expect("begin");
    fill(&p, &topic.name, 20, "new").await;
    p.commit_transaction().await.expect("commit");
    let got = consume_all(&broker(), &topic, 20, &committed).await;
    let vals: Vec<String> = values(&got).into_iter().map(|(_, v)| v).collect();
    let want: Vec<String> = (0..20).map(|i| format!("new-{i}")).collect();
    assert_eq!(vals, want, "no stale record, nothing twice");
}
