//! Fetch sessions (KIP-227): a consumer keeps one session per leader, sends only what changed,
//! and starts a new session, without losing or repeating a record, when the broker no longer
//! knows its session or the connection under it is lost.

use crate::support::proxy::Proxy;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Consumer, ConsumerMetrics, ConsumerRecord, Offset, ProducerRecord};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Produces `per_partition` records to every partition of `topic`, values "<wave>-<i>".
async fn fill(topic: &TestTopic, per_partition: usize, wave: &str) {
    fill_some(topic, topic.partitions, per_partition, wave).await;
}

/// As [`fill`], to the first `partitions` partitions only.
async fn fill_some(topic: &TestTopic, partitions: i32, per_partition: usize, wave: &str) {
    let p = producer(&[("linger.ms", "5")]).await;
    let mut fs = Vec::new();
    for i in 0..per_partition {
        for tp in topic.tps().into_iter().take(partitions as usize) {
            let v = Bytes::from(format!("{wave}-{i}"));
            let r = ProducerRecord::new(topic.name.clone(), v).with_partition(tp.partition);
            fs.push(p.send(r).await.expect("send accepted"));
        }
    }
    for f in fs {
        f.await.expect("delivered");
    }
}

/// A consumer of every partition of `topic` from the beginning.
async fn consumer_of(bootstrap: &str, topic: &TestTopic, props: &[(&str, &str)]) -> Consumer {
    let mut c = Consumer::new(consumer_config(bootstrap, props))
        .await
        .expect("consumer");
    c.assign(topic.tps()).await.expect("assign");
    for tp in topic.tps() {
        c.seek(&tp, Offset::Beginning).expect("seek");
    }
    c
}

/// Polls until `total` records arrived and every partition is at its end (so duplicates past
/// `total` would be seen too); 90 s at most.
async fn read_until(c: &mut Consumer, out: &mut Vec<ConsumerRecord>, total: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while out.len() < total || !c.at_end() {
        assert!(
            Instant::now() < deadline,
            "{what}: read {} of {total} records within 90 s (metrics {:?})",
            out.len(),
            c.metrics()
        );
        out.extend(c.poll(Duration::from_millis(200)).await.expect("poll"));
    }
}

/// Every partition's offsets 0..per_partition exactly once, in order, with the values of the
/// waves in turn.
fn assert_exactly_once(records: &[ConsumerRecord], partitions: i32, waves: &[(&str, usize)]) {
    assert_exactly_once_by(records, partitions, |_| waves.to_vec());
}

/// As [`assert_exactly_once`], with the waves each partition got.
fn assert_exactly_once_by<'a>(
    records: &[ConsumerRecord],
    partitions: i32,
    waves_of: impl Fn(i32) -> Vec<(&'a str, usize)>,
) {
    let mut by_partition: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    for r in records {
        let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
        by_partition
            .entry(r.partition)
            .or_default()
            .push((r.offset, v));
    }
    assert_eq!(
        by_partition.len(),
        partitions as usize,
        "every partition read"
    );
    for (p, got) in by_partition {
        let want: Vec<(i64, String)> = waves_of(p)
            .iter()
            .flat_map(|(w, n)| (0..*n).map(move |i| format!("{w}-{i}")))
            .enumerate()
            .map(|(o, v)| (o as i64, v))
            .collect();
        assert_eq!(
            got.len(),
            want.len(),
            "partition {p}: {} records, {} expected (a loss or a duplicate)",
            got.len(),
            want.len()
        );
        assert_eq!(got, want, "partition {p}: each offset once, in order");
    }
}

fn mean_request_bytes(m: &ConsumerMetrics) -> f64 {
    m.fetch_request_bytes as f64 / (m.fetch_requests_full + m.fetch_requests_incremental) as f64
}

/// The waves of the first test: every partition gets "a", the first five then get "b".."f".
fn waves_of_many(p: i32) -> Vec<(&'static str, usize)> {
    match p < 5 {
        true => vec![("a", 5), ("b", 4), ("c", 4), ("d", 4), ("e", 4), ("f", 4)],
        false => vec![("a", 5)],
    }
}

/// With sessions on, a consumer of many partitions, few of them busy, reads every record once,
/// most of its requests are incremental, and its requests are on average much smaller than
/// those of the same consumer with sessions off (every request naming every partition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_partitions_read_exactly_once_with_smaller_incremental_requests() {
    let partitions = 100;
    let topic = TestTopic::create("sessions-many", partitions).await;
    fill(&topic, 5, "a").await;
    let mut on = consumer_of(&broker(), &topic, &[]).await;
    let mut got = Vec::new();
    read_until(&mut on, &mut got, 500, "sessions on, first wave").await;
    // The first wave moved every partition's position, so the requests that read it name all
    // 100 (the full one, and the incremental ones after it for the positions that moved).
    let after_first_wave = on.metrics();
    // Later waves go to five partitions while the session is established: incremental
    // requests name only those, and nothing for the 95 idle ones.
    let mut total = 500;
    for wave in ["b", "c", "d", "e", "f"] {
        fill_some(&topic, 5, 4, wave).await;
        total += 20;
        read_until(&mut on, &mut got, total, "sessions on, later waves").await;
    }
    assert_exactly_once_by(&got, partitions, waves_of_many);
    let with = on.metrics();
    assert!(
        with.fetch_requests_full >= 1 && with.fetch_requests_incremental > with.fetch_requests_full,
        "most requests continue the session: {with:?}"
    );
    // What the later waves' requests cost, alone: how many requests read the first wave depends
    // on how the records met the polls (a loaded machine makes fewer, larger ones), and those
    // name every partition anyway.
    let later_full = with.fetch_requests_full - after_first_wave.fetch_requests_full;
    let later_requests =
        later_full + with.fetch_requests_incremental - after_first_wave.fetch_requests_incremental;
    let later_bytes = with.fetch_request_bytes - after_first_wave.fetch_request_bytes;
    assert_eq!(
        later_full, 0,
        "the session went on: {after_first_wave:?} then {with:?}"
    );
    let later_mean = later_bytes as f64 / later_requests.max(1) as f64;

    let mut off = consumer_of(&broker(), &topic, &[("fetch.sessions.enable", "false")]).await;
    let mut got = Vec::new();
    read_until(&mut off, &mut got, total, "sessions off").await;
    assert_exactly_once_by(&got, partitions, waves_of_many);
    let without = off.metrics();
    assert_eq!(without.fetch_requests_incremental, 0, "{without:?}");
    assert!(
        later_mean * 2.0 < mean_request_bytes(&without),
        "requests within the session ({later_mean:.0} bytes on average over {later_requests}; \
         {after_first_wave:?} after the first wave, {with:?} in all) are smaller than without one \
         ({:.0}, {without:?})",
        mean_request_bytes(&without)
    );
}

/// The broker forgets the session (FETCH_SESSION_ID_NOT_FOUND, as when its session cache
/// evicts it) or finds it out of step (INVALID_FETCH_SESSION_EPOCH): the consumer starts a new
/// session with a full request and reads on without a loss or a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_broker_no_longer_knows_is_replaced_without_loss_or_duplicates() {
    let partitions = 20;
    let topic = TestTopic::create("sessions-evicted", partitions).await;
    let proxy = Proxy::start(&broker()).await;
    fill(&topic, 20, "a").await;
    let mut c = consumer_of(&proxy.addr, &topic, &[]).await;
    let mut got = Vec::new();
    read_until(&mut c, &mut got, 400, "before the faults").await;
    let before = c.metrics();

    proxy
        .faults
        .spoil_fetch_session_ids
        .store(2, Ordering::Relaxed);
    proxy
        .faults
        .skew_fetch_session_epochs
        .store(2, Ordering::Relaxed);
    // Records arrive in waves while the faults hit the session's requests.
    for wave in ["b", "c", "d"] {
        fill(&topic, 20, wave).await;
    }
    read_until(&mut c, &mut got, 1_600, "after the faults").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while proxy.faults.spoiled_fetches.load(Ordering::Relaxed) < 4 {
        assert!(
            Instant::now() < deadline,
            "the proxy spoiled {} session requests of 4 within 60 s",
            proxy.faults.spoiled_fetches.load(Ordering::Relaxed)
        );
        got.extend(c.poll(Duration::from_millis(200)).await.expect("poll"));
    }
    fill(&topic, 20, "e").await;
    read_until(&mut c, &mut got, 2_000, "after the new sessions").await;
    assert_exactly_once(
        &got,
        partitions,
        &[("a", 20), ("b", 20), ("c", 20), ("d", 20), ("e", 20)],
    );
    let after = c.metrics();
    assert!(
        after.fetch_session_restarts >= before.fetch_session_restarts + 4,
        "each spoiled request restarted the session: before {before:?}, after {after:?}"
    );
    assert!(
        after.fetch_requests_full >= before.fetch_requests_full + 4
            && after.fetch_requests_incremental > before.fetch_requests_incremental,
        "new sessions started with full requests and went on incrementally: before {before:?}, after {after:?}"
    );
}

/// Connections cut at random under the consumer: each session ends with its connection, the
/// next request on a new connection is full, and every record is read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ends_with_its_connection_without_loss_or_duplicates() {
    let partitions = 20;
    let topic = TestTopic::create("sessions-reset", partitions).await;
    let proxy = Proxy::start(&broker()).await;
    fill(&topic, 10, "a").await;
    let mut c = consumer_of(&proxy.addr, &topic, &[]).await;
    let mut got = Vec::new();
    read_until(&mut c, &mut got, 200, "before the resets").await;
    proxy.faults.reset_per_mille.store(200, Ordering::Relaxed);
    let mut waves = vec![("a", 10)];
    // Waves until the proxy has cut three connections (at most 40 waves).
    let names: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
    for wave in &names {
        if proxy.faults.resets.load(Ordering::Relaxed) >= 3 {
            break;
        }
        fill(&topic, 10, wave).await;
        waves.push((wave.as_str(), 10));
        read_until(&mut c, &mut got, 200 * waves.len(), "under resets").await;
    }
    let resets = proxy.faults.resets.load(Ordering::Relaxed);
    proxy.faults.reset_per_mille.store(0, Ordering::Relaxed);
    assert!(resets >= 3, "the proxy cut {resets} connections of 3");
    assert_exactly_once(&got, partitions, &waves);
    let m = c.metrics();
    assert!(
        m.fetch_requests_full >= 2 && m.fetch_requests_incremental > 0,
        "new sessions after lost connections: {m:?} ({resets} resets)"
    );
}

/// Dropping the consumer closes its session on the broker (a request with the session's id at
/// epoch -1) instead of leaving it to idle out of the broker's cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_consumer_closes_its_session() {
    let topic = TestTopic::create("sessions-close", 3).await;
    let proxy = Proxy::start(&broker()).await;
    fill(&topic, 5, "a").await;
    let mut c = consumer_of(&proxy.addr, &topic, &[]).await;
    let mut got = Vec::new();
    read_until(&mut c, &mut got, 15, "before the drop").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.metrics().fetch_requests_incremental == 0 {
        assert!(Instant::now() < deadline, "no session within 30 s");
        c.poll(Duration::from_millis(100)).await.expect("poll");
    }
    assert_eq!(
        proxy.faults.closed_fetch_sessions.load(Ordering::Relaxed),
        0
    );
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(30);
    while proxy.faults.closed_fetch_sessions.load(Ordering::Relaxed) == 0 {
        assert!(
            Instant::now() < deadline,
            "no request closed the session within 30 s of the drop"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
