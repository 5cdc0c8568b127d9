//! A hostile broker: the real broker behind the fault proxy in its hostile modes
//! (`support::hostile`), damaging responses (bit flips, truncation, wrong correlation ids, huge
//! lengths, a byte a second, silence) and connections (closed after ApiVersions, never
//! answered, a leader whose address refuses connections, ApiVersions without the API the
//! client needs).
//!
//! Every scenario asserts what a user on a bad network needs: no panic; every call returns or
//! fails within its configured timeout (plus a generous margin for a loaded machine, [`SLACK`]);
//! no record delivered that was never written; no duplicate; an error names the broker and
//! what went wrong. Producer results are checked with a read_committed consumer that talks to
//! the broker directly, not through the proxy.
//!
//! Random damage is seeded; the seed is printed and ONCEFLOW_HOSTILE_SEED repeats it.

use crate::support::hostile::{refusing_addr, seed, Damage, Rule};
use crate::support::proxy::{FakeLeader, Proxy};
use crate::support::*;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use onceflow::client::admin::NewTopic;
use onceflow::client::group::GroupConsumer;
use onceflow::client::{Admin, Consumer, Error, Offset, Producer, ProducerRecord, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// Margin on top of a configured timeout before a call counts as hung: the machine is loaded.
const SLACK: Duration = Duration::from_secs(30);

const REQUEST_TIMEOUT_MS: &str = "3000";
const DELIVERY_TIMEOUT_MS: u64 = 15_000;
const API_TIMEOUT_MS: u64 = 10_000;

/// Producer properties shared by the scenarios: small timeouts, so that a hang shows quickly.
fn producer_props<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut p = vec![
        ("linger.ms", "5"),
        ("request.timeout.ms", REQUEST_TIMEOUT_MS),
        ("delivery.timeout.ms", "15000"),
        ("default.api.timeout.ms", "10000"),
        ("max.block.ms", "10000"),
        ("retry.backoff.ms", "50"),
        ("reconnect.backoff.max.ms", "200"),
        ("socket.connection.setup.timeout.ms", "3000"),
    ];
    p.extend_from_slice(extra);
    p
}

fn consumer_props<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut p = vec![
        ("request.timeout.ms", REQUEST_TIMEOUT_MS),
        ("default.api.timeout.ms", "10000"),
        ("retry.backoff.ms", "50"),
        ("reconnect.backoff.max.ms", "200"),
        ("socket.connection.setup.timeout.ms", "3000"),
        ("fetch.max.wait.ms", "200"),
    ];
    p.extend_from_slice(extra);
    p
}

/// A proxy in front of the real broker, its random damage seeded for `test`.
async fn hostile_proxy(test: &str) -> Proxy {
    let proxy = Proxy::start(&broker()).await;
    proxy.faults.hostile.reseed(seed(test));
    proxy
}

/// Runs `f`, failing the test if it takes longer than `limit` + [`SLACK`]: the property under
/// test is that it returns (or fails) within its configured timeout.
async fn within<T>(what: &str, limit: Duration, f: impl Future<Output = T>) -> T {
    let started = Instant::now();
    match tokio::time::timeout(limit + SLACK, f).await {
        Ok(v) => v,
        Err(_) => panic!(
            "{what} did not return within {limit:?} (+{SLACK:?} slack): hung (started {:?} ago)",
            started.elapsed()
        ),
    }
}

/// The error names the broker (its address) and says what went wrong: an error code the
/// broker answered names the request, the code and the broker that sent it (`Error::at_broker`
/// where the connection is known); under bit flips a flipped error code is such an answer,
/// and nothing can tell it from a real one.
fn assert_names_broker(e: &Error, addr: &str, context: &str) {
    let msg = e.to_string();
    assert!(
        msg.contains(addr),
        "{context}: the error does not name the broker {addr}: {msg}"
    );
}

/// The value of record `i` of a run.
fn value(i: usize) -> Bytes {
    Bytes::from(format!("v{i}"))
}

fn index_of(v: &[u8]) -> Option<usize> {
    std::str::from_utf8(v).ok()?.strip_prefix('v')?.parse().ok()
}

/// What a producer run reported: values acknowledged, values failed (with the error).
#[derive(Default)]
struct Outcome {
    acked: BTreeSet<usize>,
    failed: BTreeMap<usize, Error>,
}

/// Sends values 0..n (round robin over `partitions`), waits for every delivery report, each
/// within delivery.timeout.ms.
async fn send_numbered(p: &Producer, topic: &str, partitions: i32, n: usize) -> Outcome {
    send_range(p, topic, partitions, 0..n, usize::MAX).await
}

/// Sends the values of `range` (value i to partition i % `partitions`) in waves of `wave`
/// records, each wave's delivery reports awaited (each within delivery.timeout.ms) before the
/// next wave: small waves make many small Produce requests, so more responses to damage.
async fn send_range(
    p: &Producer,
    topic: &str,
    partitions: i32,
    range: std::ops::Range<usize>,
    wave: usize,
) -> Outcome {
    let mut out = Outcome::default();
    let mut futures = Vec::new();
    let settle = |futures: Vec<(usize, onceflow::client::DeliveryFuture)>| async {
        let mut settled = Vec::new();
        for (i, f) in futures {
            let r = within(
                "a delivery report",
                Duration::from_millis(DELIVERY_TIMEOUT_MS),
                f,
            )
            .await;
            settled.push((i, r));
        }
        settled
    };
    for i in range {
        let r = ProducerRecord::new(topic.to_owned(), value(i))
            .with_partition((i % partitions as usize) as i32);
        let f = within("send", Duration::from_millis(10_000), p.send(r))
            .await
            .expect("send is accepted");
        futures.push((i, f));
        if futures.len() >= wave {
            for (i, r) in settle(std::mem::take(&mut futures)).await {
                out.record(i, r);
            }
        }
    }
    for (i, r) in settle(futures).await {
        out.record(i, r);
    }
    out
}

impl Outcome {
    fn record<T>(&mut self, i: usize, r: Result<T, Error>) {
        match r {
            Ok(_) => {
                self.acked.insert(i);
            }
            Err(e) => {
                self.failed.insert(i, e);
            }
        }
    }
}

/// Every record of `topic` as read_committed sees it, straight from the broker: the count of
/// each value index. Panics on a value that was never sent.
async fn committed_counts(topic: &TestTopic, at_least: usize, n: usize) -> BTreeMap<usize, u32> {
    let got = consume_all(
        &broker(),
        topic,
        at_least,
        &[("isolation.level", "read_committed")],
    )
    .await;
    let mut counts = BTreeMap::new();
    for r in got {
        let v = r.value.as_deref().unwrap_or_default();
        let i = index_of(v)
            .filter(|i| *i < n)
            .unwrap_or_else(|| panic!("a value that was never sent is in the log: {v:?}"));
        *counts.entry(i).or_insert(0) += 1;
    }
    counts
}

/// The exactly-once check of a producer run: each acknowledged value exactly once, each failed
/// one at most once, nothing else.
async fn assert_exactly_once(topic: &TestTopic, n: usize, out: &Outcome) {
    let counts = committed_counts(topic, out.acked.len(), n).await;
    let dups: Vec<_> = counts.iter().filter(|(_, c)| **c > 1).take(10).collect();
    assert!(dups.is_empty(), "values written more than once: {dups:?}");
    let lost: Vec<_> = out
        .acked
        .iter()
        .filter(|i| !counts.contains_key(i))
        .take(10)
        .collect();
    assert!(lost.is_empty(), "acknowledged values missing: {lost:?}");
}

/// Counts the duplicates in the log (for the inverses, which must see some).
async fn duplicates(topic: &TestTopic, n: usize, at_least: usize) -> usize {
    committed_counts(topic, at_least, n)
        .await
        .values()
        .filter(|c| **c > 1)
        .count()
}

fn first_failures(out: &Outcome) -> Vec<String> {
    out.failed
        .iter()
        .take(3)
        .map(|(i, e)| format!("v{i}: {e}"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Producer, idempotent.

/// A producer through a damaging proxy: a flipped bit can fail its bootstrap (an error code
/// flipped in InitProducerId is an answer like any other), so up to five tries, each within
/// its timeout and each failure naming the broker.
async fn new_producer_under_damage(proxy: &Proxy) -> Producer {
    let mut last = None;
    for _ in 0..5 {
        match within(
            "Producer::new",
            Duration::from_millis(API_TIMEOUT_MS),
            Producer::new(producer_config(&proxy.addr, &producer_props(&[]))),
        )
        .await
        {
            Ok(p) => return p,
            Err(e) => {
                assert_names_broker(&e, &proxy.addr, "Producer::new");
                eprintln!("Producer::new failed: {e}");
                last = Some(e);
            }
        }
    }
    panic!("five producers in a row failed to start: {last:?}");
}

/// The hostile setting: one random bit flipped in about one response in ten, every API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_under_bit_flips_writes_each_acknowledged_value_once() {
    let topic = TestTopic::create("hostile-idem-flips", 3).await;
    let proxy = hostile_proxy("idempotent_producer_under_bit_flips").await;
    proxy
        .faults
        .hostile
        .add(Rule::random(None, Damage::FlipBit, 100));
    let p = new_producer_under_damage(&proxy).await;
    let n = 2000;
    let out = send_range(&p, &topic.name, 3, 0..n, 20).await;
    assert!(
        proxy.faults.hostile.damaged(Damage::FlipBit) > 0,
        "no response was damaged: the scenario proved nothing"
    );
    eprintln!(
        "{} acknowledged, {} failed, {} responses flipped; first failures: {:?}",
        out.acked.len(),
        out.failed.len(),
        proxy.faults.hostile.damaged(Damage::FlipBit),
        first_failures(&out)
    );
    for (i, e) in &out.failed {
        assert_names_broker(e, &proxy.addr, &format!("the failure of v{i}"));
    }
    assert_exactly_once(&topic, n, &out).await;
}

/// An undecodable Produce response is a lost connection, as the Java client treats it: every
/// request on it is retried (idempotence makes the resend safe) and no batch fails for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_produce_response_is_retried_not_failed() {
    one_damaged_produce_answer_is_resent(
        "an_undecodable_produce_response",
        Damage::Mangle,
        603,
        "one Produce response was undecodable",
    )
    .await;
}

/// A Produce answer that decodes but leaves out a partition of the request is as nonsensical
/// as one that does not decode: the batch it leaves out is resent (idempotence makes that
/// safe), not failed with UNKNOWN_SERVER_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_response_that_leaves_out_a_partition_is_retried_not_failed() {
    one_damaged_produce_answer_is_resent(
        "produce_response_leaves_out_a_partition",
        Damage::OmitPartition,
        303,
        "one Produce response left their partition out",
    )
    .await;
}

/// Sends values 0..n to 3 partitions through a proxy that damages one Produce answer (after a
/// warm-up, so that the damaged answer carries batches of every partition): no record fails,
/// each value is written exactly once.
async fn one_damaged_produce_answer_is_resent(test: &str, damage: Damage, n: usize, what: &str) {
    let topic = TestTopic::create("hostile-one-damaged", 3).await;
    let proxy = hostile_proxy(test).await;
    let p = Producer::new(producer_config(&proxy.addr, &producer_props(&[])))
        .await
        .expect("producer");
    let warm = send_numbered(&p, &topic.name, 3, 3).await;
    assert_eq!(warm.acked.len(), 3);
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::Produce, damage));
    let out = send_range(&p, &topic.name, 3, 3..n, usize::MAX).await;
    assert_eq!(proxy.faults.hostile.damaged(damage), 1);
    assert!(
        out.failed.is_empty(),
        "{} records failed because {what} (they should have been resent): {:?}",
        out.failed.len(),
        first_failures(&out)
    );
    let mut all = out;
    all.acked.extend(warm.acked);
    assert_exactly_once(&topic, n, &all).await;
}

/// Found by the short runs under bit flips (TV1, seed 7464585367290131137): an InitProducerId
/// answer whose producer id came back negative was used. A broker does not deduplicate
/// batches with a negative producer id (to it they are not idempotent), so the next resend
/// duplicated its batch. A producer id no broker hands out is a damaged answer: ask again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_negative_producer_id_is_not_used_so_a_resend_is_still_deduplicated() {
    let topic = TestTopic::create("hostile-negative-pid", 1).await;
    let proxy = hostile_proxy("negative_producer_id").await;
    proxy.faults.hostile.add(Rule::next(
        1,
        ApiKey::InitProducerId,
        Damage::NegativeProducerId,
    ));
    let p = Producer::new(producer_config(&proxy.addr, &producer_props(&[])))
        .await
        .expect("producer");
    assert_eq!(proxy.faults.hostile.damaged(Damage::NegativeProducerId), 1);
    let warm = send_numbered(&p, &topic.name, 1, 1).await;
    assert_eq!(warm.acked.len(), 1, "{:?}", first_failures(&warm));
    // The next batch is written, its answer lost: the resend must be deduplicated.
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::Produce, Damage::Truncate));
    let out = send_range(&p, &topic.name, 1, 1..2, usize::MAX).await;
    assert_eq!(out.acked.len(), 1, "{:?}", first_failures(&out));
    assert_eq!(proxy.faults.hostile.damaged(Damage::Truncate), 1);
    assert_eq!(
        duplicates(&topic, 2, 2).await,
        0,
        "the resend was written twice"
    );
}

/// An error code is an answer from one broker: the error the application gets says which
/// (a message that names the broker and what went wrong). Here an
/// idempotent producer's InitProducerId is refused (CLUSTER_AUTHORIZATION_FAILED): before
/// `Error::at_broker`, the message named the request and the code, not the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_names_the_broker_that_answered_it() {
    let proxy = hostile_proxy("unauthorized").await;
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::InitProducerId, Damage::Unauthorized));
    let api = Duration::from_millis(API_TIMEOUT_MS);
    let e = within(
        "Producer::new",
        api * 2,
        Producer::new(producer_config(&proxy.addr, &producer_props(&[]))),
    )
    .await
    .err()
    .expect("the refusal reaches the application");
    assert_eq!(proxy.faults.hostile.damaged(Damage::Unauthorized), 1);
    assert!(
        e.to_string().contains("CLUSTER_AUTHORIZATION_FAILED"),
        "not the refusal: {e}"
    );
    assert_names_broker(&e, &proxy.addr, "a refused InitProducerId");
}

/// A Produce response cut in half (the broker wrote the batch) loses the connection; the resend
/// of an idempotent producer is deduplicated by the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_produce_response_is_resent_without_a_duplicate() {
    let dups = truncated_produce_response_run(&[]).await;
    assert_eq!(dups, 0, "values duplicated by the resend");
}

/// The inverse: without idempotence the same fault duplicates, so the check above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inverse_without_idempotence_a_truncated_produce_response_duplicates() {
    let dups = truncated_produce_response_run(&[
        ("enable.idempotence", "false"),
        ("max.in.flight.requests.per.connection", "1"),
    ])
    .await;
    assert!(
        dups > 0,
        "the resend duplicated nothing: the check above proves nothing"
    );
}

async fn truncated_produce_response_run(extra: &[(&str, &str)]) -> usize {
    let topic = TestTopic::create("hostile-truncated", 1).await;
    let proxy = hostile_proxy("truncated_produce_response").await;
    let p = Producer::new(producer_config(&proxy.addr, &producer_props(extra)))
        .await
        .expect("producer");
    let warm = send_numbered(&p, &topic.name, 1, 1).await;
    assert_eq!(warm.acked.len(), 1);
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::Produce, Damage::Truncate));
    // One record after the warm-up: the damaged response is its batch's.
    let f = p
        .send(ProducerRecord::new(topic.name.clone(), value(1)))
        .await
        .unwrap();
    within(
        "the delivery of v1",
        Duration::from_millis(DELIVERY_TIMEOUT_MS),
        f,
    )
    .await
    .expect("delivered after the lost response");
    assert_eq!(proxy.faults.hostile.damaged(Damage::Truncate), 1);
    duplicates(&topic, 2, 2).await
}

/// Response-level damage that the connection must survive by closing and resending: each kind
/// alone, on the next Produce response. Every record is acknowledged within delivery.timeout.ms,
/// exactly once.
async fn one_damaged_produce_response(test: &str, damage: Damage) {
    let topic = TestTopic::create("hostile-one", 2).await;
    let proxy = hostile_proxy(test).await;
    let p = Producer::new(producer_config(&proxy.addr, &producer_props(&[])))
        .await
        .expect("producer");
    let warm = send_numbered(&p, &topic.name, 2, 2).await;
    assert_eq!(warm.acked.len(), 2);
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::Produce, damage));
    let n = 202;
    let started = Instant::now();
    let out = send_range(&p, &topic.name, 2, 2..n, usize::MAX).await;
    eprintln!("{test}: took {:?}", started.elapsed());
    assert_eq!(proxy.faults.hostile.damaged(damage), 1);
    assert!(
        out.failed.is_empty(),
        "records failed: {:?}",
        first_failures(&out)
    );
    let mut all = out;
    all.acked.extend(warm.acked);
    assert_exactly_once(&topic, n, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_for_the_wrong_correlation_id_is_a_lost_connection_and_resent() {
    one_damaged_produce_response("wrong_correlation_id", Damage::WrongCorrelationId).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_announcing_a_huge_length_times_out_and_is_resent() {
    one_damaged_produce_response("huge_length", Damage::HugeLength).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_at_a_byte_a_second_times_out_and_is_resent() {
    one_damaged_produce_response("trickle", Damage::Trickle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_never_comes_times_out_and_is_resent() {
    one_damaged_produce_response("silence", Damage::Silence).await;
}

/// A produce run under bit flips must end. Many short runs
/// (each its own producer: connect, metadata, producer id, send, flush, close), each bounded by
/// its timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_produce_runs_under_bit_flips_all_end_within_their_timeouts() {
    let topic = TestTopic::create("hostile-short-runs", 2).await;
    let proxy = hostile_proxy("short_produce_runs").await;
    // At least one flip (eight short runs get few answers).
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::Produce, Damage::FlipBit));
    proxy
        .faults
        .hostile
        .add(Rule::random(None, Damage::FlipBit, 100));
    let runs: usize = std::env::var("ONCEFLOW_HOSTILE_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let per_run = 100;
    let mut total = Outcome::default();
    for run in 0..runs {
        let p = match within(
            "Producer::new",
            Duration::from_millis(API_TIMEOUT_MS),
            Producer::new(producer_config(&proxy.addr, &producer_props(&[]))),
        )
        .await
        {
            Ok(p) => p,
            Err(e) => {
                assert_names_broker(&e, &proxy.addr, "Producer::new");
                continue;
            }
        };
        let out = send_range(&p, &topic.name, 2, run * per_run..(run + 1) * per_run, 10).await;
        within(
            "flush",
            Duration::from_millis(DELIVERY_TIMEOUT_MS),
            p.flush(),
        )
        .await
        .ok();
        within(
            "close",
            Duration::from_millis(DELIVERY_TIMEOUT_MS),
            p.close(),
        )
        .await
        .ok();
        total.acked.extend(out.acked);
        total.failed.extend(out.failed);
    }
    eprintln!(
        "{runs} runs: {} acknowledged, {} failed, {} responses flipped; first failures: {:?}",
        total.acked.len(),
        total.failed.len(),
        proxy.faults.hostile.damaged(Damage::FlipBit),
        first_failures(&total)
    );
    assert!(proxy.faults.hostile.damaged(Damage::FlipBit) > 0);
    for (i, e) in &total.failed {
        assert_names_broker(e, &proxy.addr, &format!("the failure of v{i}"));
    }
    assert_exactly_once(&topic, runs * per_run, &total).await;
}

// ---------------------------------------------------------------------------------------------
// Producer, transactional.

/// Transactions of numbered values under bit flips. Each transaction either commits (all its
/// values exactly once), aborts (none), or ends in doubt (commit reported failed: all or none,
/// never some, never twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_producer_under_bit_flips_commits_all_or_nothing_once() {
    let topic = TestTopic::create("hostile-txn-flips", 2).await;
    let proxy = hostile_proxy("transactional_producer_under_bit_flips").await;
    // At least one flip, however few answers a run gets: at one in ten, a run of ~40 answers
    // goes without any about one time in seventy (CI once did).
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::Produce, Damage::FlipBit));
    proxy
        .faults
        .hostile
        .add(Rule::random(None, Damage::FlipBit, 100));
    let id = unique_topic("hostile-txn");
    let props = producer_props(&[
        ("transactional.id", id.as_str()),
        ("transaction.timeout.ms", "20000"),
    ]);
    let api = Duration::from_millis(API_TIMEOUT_MS);
    let new_producer = || async {
        let p = within(
            "Producer::new",
            api,
            Producer::new(producer_config(&proxy.addr, &props)),
        )
        .await?;
        within("init_transactions", api, p.init_transactions()).await?;
        Ok::<Producer, Error>(p)
    };
    let per_txn = 100;
    let txns = 8;
    let mut committed = Vec::new();
    let mut aborted = Vec::new();
    let mut in_doubt = Vec::new();
    let mut producer = None;
    for t in 0..txns {
        if producer.is_none() {
            match new_producer().await {
                Ok(p) => producer = Some(p),
                Err(e) => {
                    assert_names_broker(&e, &proxy.addr, "init_transactions");
                    aborted.push(t); // nothing of t was sent
                    continue;
                }
            }
        }
        let p = producer.as_ref().unwrap();
        p.begin_transaction().expect("begin");
        let mut failed = None;
        let mut futures = Vec::new();
        for i in 0..per_txn {
            let r = ProducerRecord::new(topic.name.clone(), value(t * per_txn + i))
                .with_partition(i as i32 % 2);
            match within("send", api, p.send(r)).await {
                Ok(f) => futures.push(f),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if failed.is_none() {
            match within(
                "commit_transaction",
                Duration::from_millis(DELIVERY_TIMEOUT_MS),
                p.commit_transaction(),
            )
            .await
            {
                Ok(()) => {
                    committed.push(t);
                    continue;
                }
                Err(e) => failed = Some(e),
            }
        }
        let e = failed.unwrap();
        eprintln!("transaction {t}: {e}");
        // Whatever failed, the values of t may be committed (a lost EndTxn answer) until the
        // abort says otherwise.
        match within("abort_transaction", api, p.abort_transaction()).await {
            Ok(()) => aborted.push(t),
            Err(e2) => {
                eprintln!("transaction {t}: abort failed too: {e2}");
                in_doubt.push(t);
                producer = None;
            }
        }
        drop(futures);
    }
    eprintln!(
        "committed {committed:?}, aborted {aborted:?}, in doubt {in_doubt:?}; {} responses flipped",
        proxy.faults.hostile.damaged(Damage::FlipBit)
    );
    assert!(proxy.faults.hostile.damaged(Damage::FlipBit) > 0);
    drop(producer);
    let n = txns * per_txn;
    let counts = committed_counts(&topic, committed.len() * per_txn, n).await;
    for t in 0..txns {
        let present: Vec<u32> = (0..per_txn)
            .map(|i| counts.get(&(t * per_txn + i)).copied().unwrap_or(0))
            .collect();
        assert!(
            present.iter().all(|c| *c <= 1),
            "transaction {t}: values duplicated: {present:?}"
        );
        let all = present.iter().all(|c| *c == 1);
        let none = present.iter().all(|c| *c == 0);
        if committed.contains(&t) {
            assert!(all, "committed transaction {t} is not whole: {present:?}");
        } else if aborted.contains(&t) {
            assert!(none, "aborted transaction {t} is visible: {present:?}");
        } else {
            assert!(
                all || none,
                "transaction {t} is partly visible: {present:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Consumer, read_committed.

/// Writes committed transactions of values 0..n (clean, straight to the broker), and an aborted
/// one of values n..n+abort_n, so that read_committed has something to hide.
async fn fill_committed(topic: &TestTopic, n: usize, aborted: usize) {
    let id = unique_topic("hostile-fill");
    let p = Producer::new(producer_config(
        &broker(),
        &[("transactional.id", id.as_str()), ("linger.ms", "5")],
    ))
    .await
    .unwrap();
    p.init_transactions().await.unwrap();
    for (range, commit) in [(0..n / 2, true), (n..n + aborted, false), (n / 2..n, true)] {
        p.begin_transaction().unwrap();
        for i in range {
            p.send(
                ProducerRecord::new(topic.name.clone(), value(i))
                    .with_partition(i as i32 % topic.partitions),
            )
            .await
            .unwrap();
            // Small batches: many Fetch responses for the proxy to damage.
            if i % 20 == 19 {
                p.flush().await.unwrap();
            }
        }
        if commit {
            p.commit_transaction().await.unwrap();
        } else {
            p.flush().await.unwrap();
            p.abort_transaction().await.unwrap();
        }
    }
}

/// A read_committed consumer under bit flips: it delivers each committed value exactly once,
/// nothing aborted, nothing never written; every poll returns in time; an error names the
/// broker or the partition. A flip inside a record batch fails its CRC: the consumer halts the
/// partition there (CorruptData, as the Java client does) and the application seeks to the
/// same offset to read it again — from the network, undamaged this time.
///
/// Measured at TV2 on 2026-12-02, 40 runs per build, each failure then given its
/// deterministic scenario and fix: 35/40 (damaged ListOffsets answers reset by
/// auto.offset.reset; a base offset moved a few up), 37/40 (base offsets; a damaged topic id in
/// the assignment's first metadata), 38/40 (an aborted-transaction list; a base offset moved
/// across answers), 39/40 (a diverging epoch), 39/40 (an aborted transaction spanning answers
/// listed under a damaged producer id), then 40/40 with a fetch session id no longer adopted
/// when negative. At TV1 39/40 (the spanning transaction again) until the open-transaction
/// check (`an_aborted_transaction_spanning_answers_…`), then 80/80 at TV1 and 40/40 at TV2
/// (2026-12-03). ONCEFLOW_HOSTILE_LOG=1 prints every flip, ONCEFLOW_HOSTILE_SEED repeats a run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_consumer_under_bit_flips_delivers_each_committed_value_once() {
    let corrupt = read_committed_under_flips("read_committed_consumer_under_bit_flips").await;
    eprintln!("{corrupt} CRC failures, each read again after a seek to its offset");
}

/// A CRC failure is first taken for damage on the way, as an undecodable response is: the
/// batch is fetched again before the partition halts (`fetcher::after_corrupt_data`); only a
/// batch that keeps failing is corrupt in the log. Before, the consumer raised CorruptData at
/// once and advised seeking past the batch, which skipped committed records that were fine in
/// the log (this test failed so). One Fetch response gets a bit flipped inside a batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_damaged_on_the_way_is_fetched_again_not_reported_corrupt() {
    let topic = TestTopic::create("hostile-refetch", 1).await;
    let n = 200;
    fill_committed(&topic, n, 0).await;
    let proxy = hostile_proxy("batch_damaged_on_the_way").await;
    proxy
        .faults
        .hostile
        .flip_record_batches
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let mut c = Consumer::new(consumer_config(
        &proxy.addr,
        &consumer_props(&[("isolation.level", "read_committed")]),
    ))
    .await
    .expect("consumer");
    c.assign(topic.tps()).await.expect("assign");
    c.seek(&topic.tps()[0], Offset::Beginning).unwrap();
    let mut seen = BTreeSet::new();
    let api = Duration::from_millis(API_TIMEOUT_MS);
    let r = within("reading every value", api, async {
        while seen.len() < n {
            for r in c.poll(Duration::from_millis(200)).await? {
                let i = index_of(r.value.as_deref().unwrap_or_default()).expect("a value");
                assert!(seen.insert(i), "v{i} twice");
            }
        }
        Ok::<(), Error>(())
    })
    .await;
    assert_eq!(
        proxy
            .faults
            .hostile
            .record_flips
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "no batch was damaged: the scenario proved nothing"
    );
    if let Err(e) = r {
        panic!("a batch damaged on the way halted the partition: {e}");
    }
}

/// A topic id damaged in one Metadata answer must not make an idempotent producer believe its
/// topic recreated: that fails the batches the topic may hold (RecreatedWhileInFlight) and
/// starts the others over at sequence 0 under an id no broker knows. A change is believed only
/// when a later Metadata answer names the new id too; every record is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_id_damaged_in_one_metadata_answer_fails_no_record() {
    let topic = TestTopic::create("hostile-producer-topic-id", 2).await;
    let proxy = hostile_proxy("producer_damaged_topic_id").await;
    let p = Producer::new(producer_config(
        &proxy.addr,
        &producer_props(&[("metadata.max.age.ms", "200")]),
    ))
    .await
    .expect("producer");
    let mut out = send_range(&p, &topic.name, 2, 0..50, 10).await;
    proxy
        .faults
        .hostile
        .damage_topic_ids
        .store(1, std::sync::atomic::Ordering::SeqCst);
    // Waves until the damaged answer came and a few more waves went after it.
    let mut next = 50;
    let mut after = 0;
    while after < 5 && next < 2000 {
        let damaged = proxy
            .faults
            .hostile
            .topic_ids_damaged
            .load(std::sync::atomic::Ordering::Relaxed);
        let wave = send_range(&p, &topic.name, 2, next..next + 10, 10).await;
        out.acked.extend(wave.acked);
        out.failed.extend(wave.failed);
        next += 10;
        if damaged == 1 {
            after += 1;
        }
    }
    assert_eq!(
        proxy
            .faults
            .hostile
            .topic_ids_damaged
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "no Metadata answer was damaged: the scenario proved nothing"
    );
    assert!(
        out.failed.is_empty(),
        "records failed after one damaged topic id: {:?}",
        first_failures(&out)
    );
    assert_exactly_once(&topic, next, &out).await;
}

/// The very Metadata answer an assignment took its topic id from had it damaged: every later
/// answer, naming the real id, looked like a recreated topic, and auto.offset.reset=latest
/// moved a seek to the beginning past every record (the read_committed consumer under random
/// flips: nothing read). Only an id a Fetch answer bore out is compared against.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_id_damaged_in_the_first_metadata_answer_does_not_reset_the_position() {
    reads_each_value_once_despite(
        "first-topic-id",
        2,
        100,
        0,
        &[("auto.offset.reset", "latest")],
        true,
        |h| h.damage_topic_ids.store(1, SeqCst),
        |h| h.topic_ids_damaged.load(SeqCst),
    )
    .await;
}

/// A topic id damaged in one Metadata answer made a read_committed consumer believe its topic
/// deleted and recreated: auto.offset.reset moved it to the end (latest: nothing read in
/// 120 s under random flips) or to the start (earliest: everything again). A recreation is
/// believed only when a later Metadata answer names the new id too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_id_damaged_in_one_metadata_answer_does_not_reset_the_position() {
    let topic = TestTopic::create("hostile-topic-id", 1).await;
    let n = 100;
    fill_committed(&topic, n, 0).await;
    let proxy = hostile_proxy("damaged_topic_id").await;
    let mut c = Consumer::new(consumer_config(
        &proxy.addr,
        &consumer_props(&[
            ("isolation.level", "read_committed"),
            ("auto.offset.reset", "earliest"),
            // Metadata asked often, so that the damaged answer comes while reading.
            ("metadata.max.age.ms", "200"),
        ]),
    ))
    .await
    .expect("consumer");
    c.assign(topic.tps()).await.expect("assign");
    let mut seen = BTreeMap::<usize, u32>::new();
    let limit = Instant::now() + Duration::from_secs(30);
    let damaged = || {
        proxy
            .faults
            .hostile
            .topic_ids_damaged
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let fetches = |c: &Consumer| {
        let m = c.metrics();
        m.fetch_requests_full + m.fetch_requests_incremental
    };
    let mut armed = false;
    // Fetch requests when the damaged answer was first seen to have come.
    let mut damaged_at: Option<u64> = None;
    // Read everything, then arm the damage, then keep polling until three more fetches went
    // out after it came: a reset (decided in the round planning those fetches) would have
    // handed values out again by then.
    while Instant::now() < limit {
        for r in c.poll(Duration::from_millis(100)).await.expect("poll") {
            let i = index_of(r.value.as_deref().unwrap_or_default()).expect("a value");
            *seen.entry(i).or_insert(0) += 1;
        }
        if seen.len() == n && !armed {
            proxy
                .faults
                .hostile
                .damage_topic_ids
                .store(1, std::sync::atomic::Ordering::SeqCst);
            armed = true;
        }
        if armed && damaged() == 1 && damaged_at.is_none() {
            damaged_at = Some(fetches(&c));
        }
        if damaged_at.is_some_and(|at| fetches(&c) >= at + 3) {
            break;
        }
    }
    assert_eq!(
        damaged(),
        1,
        "no Metadata answer was damaged: the scenario proved nothing"
    );
    let twice: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).take(5).collect();
    assert!(
        twice.is_empty(),
        "values handed out again (value, times): {twice:?}"
    );
    assert_eq!(seen.len(), n, "values never read");
}

/// A ListOffsets answer for the log start damaged on the way (0 → 16, one bit) started the
/// consumer 16 records in: they were skipped, silently (the group member under random flips).
/// The first Fetch answer names the log start too; when it contradicts, the log start is asked
/// again and reading starts from that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_log_start_from_list_offsets_is_asked_again_not_skipped_to() {
    let topic = TestTopic::create("hostile-list-offsets", 1).await;
    let n = 100;
    fill_committed(&topic, n, 0).await;
    let proxy = hostile_proxy("damaged_log_start").await;
    proxy
        .faults
        .hostile
        .shift_list_offsets
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let mut c = Consumer::new(consumer_config(
        &proxy.addr,
        &consumer_props(&[
            ("isolation.level", "read_committed"),
            ("auto.offset.reset", "earliest"),
        ]),
    ))
    .await
    .expect("consumer");
    c.assign(topic.tps()).await.expect("assign");
    let mut seen = BTreeSet::new();
    let limit = Duration::from_secs(20);
    let started = Instant::now();
    while seen.len() < n && started.elapsed() < limit {
        for r in c.poll(Duration::from_millis(200)).await.expect("poll") {
            let i = index_of(r.value.as_deref().unwrap_or_default()).expect("a value");
            assert!(seen.insert(i), "v{i} twice");
        }
    }
    assert_eq!(
        proxy
            .faults
            .hostile
            .list_offsets_shifted
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "no ListOffsets answer was damaged: the scenario proved nothing"
    );
    let missing: Vec<usize> = (0..n).filter(|i| !seen.contains(i)).take(20).collect();
    assert!(missing.is_empty(), "values never read: {missing:?}");
}

/// A ListOffsets answer for the log start with a high bit flipped (0 → 4194304, bit 22): the
/// position was past the log, the Fetch answered OFFSET_OUT_OF_RANGE (confirmed: the position
/// really was out of the log), and the consumer reset it by auto.offset.reset=latest — a seek to
/// the beginning skipped the whole partition (the read_committed consumer under random flips,
/// 2 runs in 19). A position ListOffsets gave, never borne out by a Fetch answer, has its own
/// question asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seek_to_the_beginning_answered_past_the_log_is_asked_again_not_reset_to_the_end() {
    reads_each_value_once_despite(
        "seek-answered-past-the-log",
        2,
        100,
        0,
        &[("auto.offset.reset", "latest")],
        true,
        |h| {
            h.list_offsets_shift.store(1 << 22, SeqCst);
            h.shift_list_offsets.store(1, SeqCst);
        },
        |h| h.list_offsets_shifted.load(SeqCst),
    )
    .await;
}

/// A low bit flipped in a batch's base offset (0 → 4) keeps the batch inside the log: its
/// records went out under offsets 4 too high, the position was 4 past the real one, and the
/// next answer's batch, starting 4 before it, had its first 4 records dropped as already read
/// (the read_committed consumer under random flips: 4 values never delivered). After whole
/// entries, the next answer cannot start before the position; when it keeps doing so, the
/// answer before was the damaged one and reading goes on from this batch's start. Each Fetch
/// answer carries one batch here (max.partition.fetch.bytes=1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_moved_4_up_does_not_cost_the_next_answer_its_first_records() {
    batch_moved_4_up("1").await;
}

/// As above, with answers carrying several batches: the next batch in the same answer starts
/// before the damaged one ends; fetched again from there, the answer starts before it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_moved_4_up_does_not_cost_the_batch_after_it_in_the_answer_its_first_records() {
    batch_moved_4_up("1048576").await;
}

async fn batch_moved_4_up(max_partition_fetch_bytes: &str) {
    reads_each_value_once_despite(
        "base-plus-4",
        1,
        200,
        0,
        &[
            ("auto.offset.reset", "earliest"),
            ("max.partition.fetch.bytes", max_partition_fetch_bytes),
        ],
        false,
        |h| {
            h.base_offset_bit.store(2, SeqCst);
            h.shift_base_offsets.store(1, SeqCst);
        },
        |h| h.base_offset_shifts.load(SeqCst),
    )
    .await;
}

/// A bit flipped in a base offset can move a batch by more than the batch after it is long
/// (bit 5: 32, on batches of at most 20 records here; one batch per answer). Moved up, the
/// position lands inside a batch further on; the answer from there starts before it, fetch
/// after fetch, and reading went on from that batch's start: the batches in between were
/// never read ("never read: [20, 21, …]"). Only the handed-out batch's CRC says where it
/// really ends: the answer before is fetched again and walked to that batch. (Moved down, the
/// damaged answer itself starts before the position: fetched again at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_moved_up_across_batches_is_found_by_its_crc_and_nothing_after_it_skipped() {
    reads_each_value_once_despite(
        "base-up-32",
        1,
        200,
        0,
        &[
            ("auto.offset.reset", "earliest"),
            ("max.partition.fetch.bytes", "1"),
        ],
        false,
        |h| {
            h.base_offset_bit.store(5, SeqCst);
            h.shift_up_only.store(true, SeqCst);
            h.shift_base_offsets.store(1, SeqCst);
        },
        |h| h.base_offset_shifts.load(SeqCst),
    )
    .await;
}

/// The aborted-transaction list of a Fetch answer is outside every CRC: one bit flipped in a
/// listed producer id, and the aborted transaction's batches were handed out as committed
/// (the read_committed consumer under random flips: "an aborted value was delivered"). A
/// transaction listed from an offset inside the answer's data must start at a transactional
/// batch of its producer there; when not, the answer is fetched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_aborted_transaction_list_does_not_expose_aborted_records() {
    reads_each_value_once_despite(
        "aborted-list",
        1,
        100,
        40,
        &[("auto.offset.reset", "earliest")],
        false,
        |h| h.damage_aborted_lists.store(1, SeqCst),
        |h| h.aborted_lists_damaged.load(SeqCst),
    )
    .await;
}

/// The same damage where the list cannot be checked against the answer's own batches: an
/// aborted transaction spanning answers (one batch per answer here), met again in the answer
/// after its first batch, listed under a damaged producer id — its later batches were handed
/// out as committed (the read_committed consumer under random flips at transaction.version
/// 1: "an aborted value was delivered: v2000"). The answer before left the transaction open;
/// an answer from where it ended must list it again, or it is fetched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_transaction_spanning_answers_is_listed_again_or_fetched_again() {
    reads_each_value_once_despite(
        "aborted-span",
        1,
        100,
        60,
        &[
            ("auto.offset.reset", "earliest"),
            ("max.partition.fetch.bytes", "1"),
        ],
        false,
        |h| {
            h.aborted_lists_begun_before.store(true, SeqCst);
            h.damage_aborted_lists.store(1, SeqCst)
        },
        |h| h.aborted_lists_damaged.load(SeqCst),
    )
    .await;
}

/// A damaged Fetch answer named a diverging epoch (KIP-320) the fetch never asked about: kept
/// as the last fetched epoch, it made every later fetch of the partition OFFSET_OUT_OF_RANGE,
/// for ever (the read_committed consumer under random flips: 220 values never read). A
/// diverging epoch is believed only as an answer to the epoch sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diverging_epoch_the_fetch_did_not_ask_about_is_not_believed() {
    reads_each_value_once_despite(
        "diverging",
        1,
        100,
        0,
        &[("auto.offset.reset", "earliest")],
        false,
        |h| h.damage_diverging_epochs.store(1, SeqCst),
        |h| h.diverging_epochs_damaged.load(SeqCst),
    )
    .await;
}

/// A fetch session id with its sign bit flipped on the way: sent back, it made a Kafka 4.1
/// broker fail every Fetch with UNKNOWN_SERVER_ERROR (its session cache shard is the id modulo
/// a count: IndexOutOfBoundsException), and the consumer sent it again and again — nothing read
/// for minutes (the group member under random flips). Kafka's session ids are positive: a
/// negative one is not adopted, and after a failed request nothing of the session is reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_negative_fetch_session_id_is_not_sent_back() {
    // Small answers (one batch each): many requests after the damaged one.
    reads_each_value_once_despite(
        "session-id",
        2,
        200,
        0,
        &[
            ("auto.offset.reset", "earliest"),
            ("max.partition.fetch.bytes", "1"),
        ],
        false,
        |h| h.damage_session_ids.store(1, SeqCst),
        |h| h.session_ids_damaged.load(SeqCst),
    )
    .await;
}

/// A new topic of `partitions` holding values 0..n committed (and `aborted` more in an aborted
/// transaction), read through a proxy armed by `arm` with a read_committed consumer of `props`
/// (from the beginning by a seek when `seek`): every value once, no aborted one, within 20 s,
/// and `damaged` says the armed damage happened once.
#[allow(clippy::too_many_arguments)]
async fn reads_each_value_once_despite(
    test: &str,
    partitions: i32,
    n: usize,
    aborted: usize,
    props: &[(&str, &str)],
    seek: bool,
    arm: impl Fn(&crate::support::hostile::Hostile),
    damaged: impl Fn(&crate::support::hostile::Hostile) -> u64,
) {
    let topic = TestTopic::create(&format!("hostile-{test}"), partitions).await;
    fill_committed(&topic, n, aborted).await;
    let proxy = hostile_proxy(test).await;
    let h = &proxy.faults.hostile;
    arm(h);
    let mut all = vec![("isolation.level", "read_committed")];
    all.extend_from_slice(props);
    let mut c = Consumer::new(consumer_config(&proxy.addr, &consumer_props(&all)))
        .await
        .expect("consumer");
    c.assign(topic.tps()).await.expect("assign");
    if seek {
        for tp in topic.tps() {
            c.seek(&tp, Offset::Beginning).unwrap();
        }
    }
    let mut seen = BTreeSet::new();
    let limit = Duration::from_secs(20);
    let started = Instant::now();
    while seen.len() < n && started.elapsed() < limit {
        for r in c.poll(Duration::from_millis(200)).await.expect("poll") {
            let i = index_of(r.value.as_deref().unwrap_or_default()).expect("a value");
            assert!(i < n, "an aborted value was delivered: v{i}");
            assert!(seen.insert(i), "v{i} twice");
        }
    }
    assert_eq!(
        damaged(h),
        1,
        "the damage did not happen: the scenario proved nothing"
    );
    let missing: Vec<usize> = (0..n).filter(|i| !seen.contains(i)).take(20).collect();
    assert!(
        missing.is_empty(),
        "{} of {n} values read in {limit:?}; never read: {missing:?}",
        seen.len()
    );
}

/// A batch's base offset is outside its CRC: one bit flipped high there (bit 40 here) put the
/// batch past the end of the log. The consumer handed its records out under those offsets,
/// its next fetch was out of range (confirmed: the position really was past the end), and
/// auto.offset.reset=earliest read the partition again from the start — every value before
/// the batch twice (the group member under random flips, 2 runs in 24). An entry ending past
/// the partition's high watermark cannot be what the broker wrote: it is fetched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_moved_past_the_high_watermark_is_fetched_again_not_handed_out() {
    let topic = TestTopic::create("hostile-base-offset", 1).await;
    let n = 200;
    fill_committed(&topic, n, 0).await;
    let proxy = hostile_proxy("batch_moved_past_the_high_watermark").await;
    // The first answer with records: its batch lands past the log; the values in it come
    // again after the reset.
    proxy
        .faults
        .hostile
        .shift_base_offsets
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let mut c = Consumer::new(consumer_config(
        &proxy.addr,
        &consumer_props(&[
            ("isolation.level", "read_committed"),
            ("auto.offset.reset", "earliest"),
            ("max.partition.fetch.bytes", "1024"),
        ]),
    ))
    .await
    .expect("consumer");
    c.assign(topic.tps()).await.expect("assign");
    let mut seen = BTreeMap::<usize, Vec<i64>>::new();
    let api = Duration::from_millis(API_TIMEOUT_MS);
    let r = within("reading every value", api, async {
        while seen.len() < n {
            for r in c.poll(Duration::from_millis(200)).await? {
                let i = index_of(r.value.as_deref().unwrap_or_default()).expect("a value");
                seen.entry(i).or_default().push(r.offset);
            }
        }
        Ok::<(), Error>(())
    })
    .await;
    assert_eq!(
        proxy
            .faults
            .hostile
            .base_offset_shifts
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "no base offset was moved: the scenario proved nothing"
    );
    if let Err(e) = r {
        panic!("read {} of {n} values: {e}", seen.len());
    }
    let twice: Vec<_> = seen.iter().filter(|(_, o)| o.len() > 1).take(5).collect();
    assert!(
        twice.is_empty(),
        "values handed out more than once (value, offsets): {twice:?}"
    );
    let moved: Vec<_> = seen
        .iter()
        .filter(|(_, o)| o.iter().any(|o| *o >= 1 << 40))
        .take(5)
        .collect();
    assert!(
        moved.is_empty(),
        "values handed out at offsets past the log: {moved:?}"
    );
}

/// Found by the group member under bit flips (TV1, seed 15533353987736321747): a Fetch
/// answer's error code flipped from 0 to 1 (OFFSET_OUT_OF_RANGE) made the consumer reset the
/// partition by auto.offset.reset — to the beginning (everything read again: duplicates) or,
/// with latest, to the end (records skipped). The position was inside the log all along: the
/// fetcher now confirms OFFSET_OUT_OF_RANGE with ListOffsets (`fetcher::within_the_log`)
/// before it throws the position away (this test failed before, at both TVs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_offset_out_of_range_does_not_move_the_position() {
    let topic = TestTopic::create("hostile-out-of-range", 1).await;
    let n = 200;
    fill_committed(&topic, n, 0).await;
    let proxy = hostile_proxy("damaged_offset_out_of_range").await;
    let mut c = Consumer::new(consumer_config(
        &proxy.addr,
        &consumer_props(&[
            ("auto.offset.reset", "earliest"),
            ("max.partition.fetch.bytes", "1024"),
            ("max.poll.records", "20"),
        ]),
    ))
    .await
    .expect("consumer");
    c.assign(topic.tps()).await.expect("assign");
    c.seek(&topic.tps()[0], Offset::Beginning).unwrap();
    let mut seen = BTreeMap::<usize, u32>::new();
    let mut armed = false;
    let api = Duration::from_millis(API_TIMEOUT_MS);
    let damaged = || proxy.faults.hostile.damaged(Damage::OutOfRange);
    within(
        "reading every value, a Fetch answer damaged",
        api * 3,
        async {
            while seen.len() < n || damaged() == 0 {
                for r in c.poll(Duration::from_millis(200)).await.expect("poll") {
                    let i = index_of(r.value.as_deref().unwrap_or_default()).expect("a value");
                    *seen.entry(i).or_insert(0) += 1;
                }
                if seen.len() >= n / 2 && !armed {
                    armed = true;
                    proxy
                        .faults
                        .hostile
                        .add(Rule::next(1, ApiKey::Fetch, Damage::OutOfRange));
                }
            }
        },
    )
    .await;
    assert_eq!(damaged(), 1);
    // The consumer fetches ahead, so the damaged answer may have come after the last value was
    // read: one more value, read after the damage, shows whether the position moved (a reset
    // to the beginning hands every value out again before it).
    let p = Producer::new(producer_config(&broker(), &[]))
        .await
        .unwrap();
    let sent = p
        .send(ProducerRecord::new(topic.name.clone(), value(n)))
        .await
        .unwrap();
    p.flush().await.unwrap();
    sent.await.unwrap();
    p.close().await.unwrap();
    within("reading the value sent after the damage", api * 3, async {
        while !seen.contains_key(&n) {
            for r in c.poll(Duration::from_millis(200)).await.expect("poll") {
                let i = index_of(r.value.as_deref().unwrap_or_default()).expect("a value");
                *seen.entry(i).or_insert(0) += 1;
            }
        }
    })
    .await;
    let dups: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).take(10).collect();
    assert!(
        dups.is_empty(),
        "a damaged OFFSET_OUT_OF_RANGE reset the position: values read again: {dups:?}"
    );
}

/// Reads committed values 0..n through a flipping proxy; a CorruptData error is answered by a
/// seek to its offset. Returns the CRC failures seen.
async fn read_committed_under_flips(test: &str) -> usize {
    let topic = TestTopic::create("hostile-rc-flips", 2).await;
    let n = 2000;
    fill_committed(&topic, n, 200).await;
    let proxy = hostile_proxy(test).await;
    // Fetch responses are few (each carries many batches): flip more of them, to cover the
    // record path; every other API at the hostile setting's rate.
    proxy
        .faults
        .hostile
        .add(Rule::random(Some(ApiKey::Fetch), Damage::FlipBit, 250));
    proxy
        .faults
        .hostile
        .add(Rule::random(None, Damage::FlipBit, 100));
    let mut c = within(
        "Consumer::new",
        Duration::from_millis(API_TIMEOUT_MS),
        Consumer::new(consumer_config(
            &proxy.addr,
            &consumer_props(&[
                ("isolation.level", "read_committed"),
                ("max.partition.fetch.bytes", "1024"),
            ]),
        )),
    )
    .await
    .expect("consumer");
    within(
        "assign",
        Duration::from_millis(API_TIMEOUT_MS),
        c.assign(topic.tps()),
    )
    .await
    .expect("assign");
    for tp in topic.tps() {
        c.seek(&tp, Offset::Beginning).unwrap();
    }
    let mut seen = BTreeMap::<usize, u32>::new();
    let mut errors = Vec::new();
    let mut corrupt = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < n {
        assert!(
            Instant::now() < deadline,
            "read {} of {n} committed values in 120 s (never: {:?}); errors: {:?}",
            seen.len(),
            (0..n)
                .filter(|i| !seen.contains_key(i))
                .take(12)
                .collect::<Vec<_>>(),
            errors.iter().rev().take(3).collect::<Vec<_>>()
        );
        match within(
            "poll",
            Duration::from_millis(API_TIMEOUT_MS),
            c.poll(Duration::from_millis(200)),
        )
        .await
        {
            Ok(records) => {
                for r in records {
                    let v = r.value.as_deref().unwrap_or_default();
                    let i = index_of(v).unwrap_or_else(|| {
                        panic!(
                            "a value never written was delivered: {v:?} at {}-{}@{}",
                            r.topic, r.partition, r.offset
                        )
                    });
                    assert!(i < n, "an aborted value was delivered: v{i}");
                    *seen.entry(i).or_insert(0) += 1;
                }
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(&proxy.addr) || msg.contains(&topic.name),
                    "the error names neither the broker nor the partition: {msg}"
                );
                if let Error::CorruptData {
                    topic: t,
                    partition,
                    offset,
                    ..
                } = &e
                {
                    corrupt += 1;
                    c.seek(
                        &TopicPartition::new(t.clone(), *partition),
                        Offset::At(*offset),
                    )
                    .expect("seek");
                }
                errors.push(msg);
            }
        }
    }
    eprintln!(
        "{} responses flipped, {} errors: {:?}",
        proxy.faults.hostile.damaged(Damage::FlipBit),
        errors.len(),
        errors.iter().take(3).collect::<Vec<_>>()
    );
    assert!(proxy.faults.hostile.damaged(Damage::FlipBit) > 0);
    let dups: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).take(10).collect();
    assert!(dups.is_empty(), "values delivered more than once: {dups:?}");
    corrupt
}

// ---------------------------------------------------------------------------------------------
// Finding 1: no shared Fetch version.

/// A broker (or a damaged ApiVersions answer, for ever) without any Fetch version this client
/// speaks: retrying cannot fix it, so poll must fail within default.api.timeout.ms, naming the
/// broker and Fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_without_a_shared_fetch_version_fails_within_default_api_timeout() {
    let topic = TestTopic::create("hostile-no-fetch", 1).await;
    let proxy = hostile_proxy("no_shared_fetch_version").await;
    let mut c = Consumer::new(consumer_config(&proxy.addr, &consumer_props(&[])))
        .await
        .expect("consumer");
    c.assign(topic.tps()).await.expect("assign");
    c.seek(&topic.tps()[0], Offset::Beginning).unwrap();
    // Bootstrapped: from now on, every connection (the leader's own, and every replacement)
    // offers no Fetch at all. The fetcher, not the constructor, must give up and say so.
    proxy
        .faults
        .hostile
        .strip_from_api_versions(ApiKey::Fetch, u32::MAX);
    // The leader's connection may have been negotiated already (resolving the seek raced the
    // line above; CI once polled empty for 40 s): its next Fetch answer is cut short, so that
    // the connection is replaced, and negotiated without Fetch.
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::Fetch, Damage::Truncate));
    let api = Duration::from_millis(API_TIMEOUT_MS);
    let started = Instant::now();
    let e = within("polling until an error", api, async {
        loop {
            match c.poll(Duration::from_millis(200)).await {
                Ok(r) => assert!(r.is_empty(), "records without a Fetch version?"),
                Err(e) => return e,
            }
        }
    })
    .await;
    eprintln!("failed after {:?}: {e}", started.elapsed());
    assert!(
        proxy
            .faults
            .hostile
            .stripped
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    assert_names_broker(&e, &proxy.addr, "poll");
    assert!(
        e.to_string().contains("Fetch"),
        "the error does not say Fetch: {e}"
    );
}

/// A damaged ApiVersions answer once: the connection that negotiated nonsense is replaced and
/// negotiated again, and the consumer reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_renegotiates_after_an_api_versions_answer_without_fetch() {
    let topic = TestTopic::create("hostile-renegotiate", 1).await;
    let p = producer(&[]).await;
    for i in 0..10 {
        p.send(ProducerRecord::new(topic.name.clone(), value(i)))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let proxy = hostile_proxy("renegotiate_after_api_versions_without_fetch").await;
    // The first two connections (bootstrap, then the broker by its node id) lose Fetch.
    proxy
        .faults
        .hostile
        .strip_from_api_versions(ApiKey::Fetch, 2);
    let mut c = Consumer::new(consumer_config(&proxy.addr, &consumer_props(&[])))
        .await
        .expect("consumer");
    c.assign(topic.tps()).await.expect("assign");
    c.seek(&topic.tps()[0], Offset::Beginning).unwrap();
    let mut got = Vec::new();
    let mut errors = Vec::new();
    within(
        "reading 10 records",
        Duration::from_millis(API_TIMEOUT_MS),
        async {
            while got.len() < 10 {
                match c.poll(Duration::from_millis(200)).await {
                    Ok(r) => got.extend(r),
                    Err(e) => errors.push(e.to_string()),
                }
            }
        },
    )
    .await;
    assert!(
        proxy
            .faults
            .hostile
            .stripped
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    eprintln!("errors on the way: {errors:?}");
}

/// The same for the producer: no Produce version shared, the records fail within
/// delivery.timeout.ms with an error naming the broker and Produce.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_without_a_shared_produce_version_fails_within_delivery_timeout() {
    let topic = TestTopic::create("hostile-no-produce", 1).await;
    let proxy = hostile_proxy("no_shared_produce_version").await;
    let p = Producer::new(producer_config(
        &proxy.addr,
        &producer_props(&[("enable.idempotence", "false")]),
    ))
    .await
    .expect("producer");
    // Bootstrapped: the leader's own connection, and every replacement, offer no Produce.
    proxy
        .faults
        .hostile
        .strip_from_api_versions(ApiKey::Produce, u32::MAX);
    let out = send_numbered(&p, &topic.name, 1, 5).await;
    assert!(out.acked.is_empty());
    let e = out.failed.values().next().expect("failed");
    assert_names_broker(e, &proxy.addr, "send");
    assert!(e.to_string().contains("Produce"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Connections that go wrong.

/// Every connection closed right after ApiVersions: an admin call fails within
/// default.api.timeout.ms with an error naming the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_closed_after_api_versions_fail_admin_calls_within_default_api_timeout() {
    let proxy = hostile_proxy("closed_after_api_versions").await;
    proxy
        .faults
        .hostile
        .close_after_api_versions
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let mut cfg = client_config(&proxy.addr);
    cfg.api_timeout = Duration::from_millis(API_TIMEOUT_MS);
    cfg.set("request.timeout.ms", REQUEST_TIMEOUT_MS).unwrap();
    let api = Duration::from_millis(API_TIMEOUT_MS);
    let r = within("Admin::new and list_topics", api * 2, async {
        let admin = Admin::new(cfg).await?;
        within("list_topics", api, admin.list_topics()).await
    })
    .await;
    let e = r.expect_err("no connection lasts past ApiVersions");
    eprintln!("{e}");
    assert!(
        proxy
            .faults
            .hostile
            .closed_after_api_versions
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    assert_names_broker(&e, &proxy.addr, "list_topics");
}

/// The same for the producer: records fail within delivery.timeout.ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_closed_after_api_versions_fail_records_within_delivery_timeout() {
    let topic = TestTopic::create("hostile-closed-after-av", 1).await;
    let proxy = hostile_proxy("closed_after_api_versions_producer").await;
    let p = Producer::new(producer_config(
        &proxy.addr,
        &producer_props(&[("enable.idempotence", "false")]),
    ))
    .await
    .expect("producer");
    let warm = send_numbered(&p, &topic.name, 1, 1).await;
    assert_eq!(warm.acked.len(), 1);
    proxy
        .faults
        .hostile
        .close_after_api_versions
        .store(true, std::sync::atomic::Ordering::SeqCst);
    // Lose the current connections: every new one dies after ApiVersions.
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::Produce, Damage::Truncate));
    let out = send_numbered(&p, &topic.name, 1, 5).await;
    eprintln!("{:?}", first_failures(&out));
    assert!(
        !out.failed.is_empty(),
        "records were acknowledged over dead connections?"
    );
    for (i, e) in &out.failed {
        assert_names_broker(e, &proxy.addr, &format!("the failure of v{i}"));
    }
}

/// A bootstrap address that accepts connections and never answers: the consumer fails within
/// default.api.timeout.ms, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_never_answers_fails_the_consumer_within_default_api_timeout() {
    let proxy = hostile_proxy("never_answers").await;
    proxy
        .faults
        .hostile
        .silent_accept
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let api = Duration::from_millis(API_TIMEOUT_MS);
    let tp = TopicPartition::new(unique_topic("hostile-silent"), 0);
    let r = within("Consumer::new, assign, poll", api * 2, async {
        let mut c = Consumer::new(consumer_config(&proxy.addr, &consumer_props(&[]))).await?;
        c.assign(vec![tp.clone()]).await?;
        loop {
            if let Err(e) = c.poll(Duration::from_millis(200)).await {
                break Err::<(), Error>(e);
            }
        }
    })
    .await;
    let e: Error = r.expect_err("nothing was ever answered");
    eprintln!("{e}");
    assert_names_broker(&e, &proxy.addr, "the consumer");
}

/// The same for the producer: Producer::new, or the record, fails in time, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_never_answers_fails_the_producer_within_its_timeouts() {
    let proxy = hostile_proxy("never_answers_producer").await;
    proxy
        .faults
        .hostile
        .silent_accept
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let r = within(
        "Producer::new and a send",
        Duration::from_millis(API_TIMEOUT_MS + DELIVERY_TIMEOUT_MS),
        async {
            let p = Producer::new(producer_config(&proxy.addr, &producer_props(&[]))).await?;
            p.send(ProducerRecord::new(unique_topic("hostile-silent"), "x"))
                .await?
                .await
        },
    )
    .await;
    let e = r.expect_err("nothing was ever answered");
    eprintln!("{e}");
    assert_names_broker(&e, &proxy.addr, "the producer");
}

/// Metadata advertises, as partition 1's leader, an address that refuses connections: records
/// for partition 1 fail within delivery.timeout.ms naming that address; partition 0's go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_address_refuses_connections_fails_its_records_within_delivery_timeout() {
    let topic = TestTopic::create("hostile-refused", 2).await;
    let refused = refusing_addr().await;
    let proxy = hostile_proxy("leader_refuses_connections").await;
    *proxy.faults.fake_leader.lock().unwrap() = Some(FakeLeader {
        node_id: 4343,
        addr: refused.clone(),
        topic: topic.name.clone(),
        partitions: vec![1],
    });
    let p = Producer::new(producer_config(&proxy.addr, &producer_props(&[])))
        .await
        .expect("producer");
    let out = send_numbered(&p, &topic.name, 2, 20).await;
    let failed: BTreeSet<usize> = out.failed.keys().copied().collect();
    let odd: BTreeSet<usize> = (0..20).filter(|i| i % 2 == 1).collect();
    assert_eq!(failed, odd, "exactly partition 1's records fail");
    for (i, e) in &out.failed {
        assert_names_broker(e, &refused, &format!("the failure of v{i}"));
    }
    assert_exactly_once(&topic, 20, &out).await;
}

// ---------------------------------------------------------------------------------------------
// Group member and admin.

/// A group member under bit flips reads every value, each once as long as its commits succeed;
/// every poll returns within max.poll.interval.ms.
///
/// Each stall class it found has its deterministic scenario and fix (a damaged broker host,
/// leader id, member list, assigned topic or partition, a batch past the high watermark, a
/// damaged log start, a negative fetch session id); what it could still hit are the fields no
/// client can check (docs/design/damaged-answers.md). Measured: 29/30 at TV1 before
/// the session-id fix, then 20/20 at TV1 and at TV2 (2026-12-02) and again 20/20 at both on
/// 2026-12-03. ONCEFLOW_HOSTILE_LOG=1 prints every flip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_member_under_bit_flips_reads_every_value_within_max_poll_interval() {
    let topic = TestTopic::create("hostile-group-flips", 2).await;
    let n = 1000;
    fill_committed(&topic, n, 100).await;
    let proxy = hostile_proxy("group_member_under_bit_flips").await;
    // At least one flip, however few answers a quick run gets (a run once ended with none).
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::Fetch, Damage::FlipBit));
    // Fetch responses are few (each carries many batches): flip more of them, to cover the
    // record path; every other API at the hostile setting's rate.
    proxy
        .faults
        .hostile
        .add(Rule::random(Some(ApiKey::Fetch), Damage::FlipBit, 250));
    proxy
        .faults
        .hostile
        .add(Rule::random(None, Damage::FlipBit, 100));
    let group = unique_topic("hostile-group");
    let max_poll = Duration::from_millis(20_000);
    let mut m = within(
        "GroupConsumer::new",
        Duration::from_millis(API_TIMEOUT_MS),
        GroupConsumer::new(consumer_config(
            &proxy.addr,
            &consumer_props(&[
                ("group.id", group.as_str()),
                ("isolation.level", "read_committed"),
                ("auto.offset.reset", "earliest"),
                ("enable.auto.commit", "false"),
                ("heartbeat.interval.ms", "500"),
                ("session.timeout.ms", "10000"),
                ("max.poll.interval.ms", "20000"),
                ("max.partition.fetch.bytes", "1024"),
            ]),
        )),
    )
    .await
    .expect("member");
    m.subscribe(&[topic.name.as_str()]);
    let mut seen = BTreeMap::<usize, u32>::new();
    let mut errors = Vec::new();
    let mut commit_failed = false;
    let mut tolerated = 0;
    let deadline = Instant::now() + Duration::from_secs(150);
    while seen.len() < n {
        assert!(
            Instant::now() < deadline,
            "read {} of {n} values in 150 s (missing: {:?}); errors: {errors:?}",
            seen.len(),
            (0..n)
                .filter(|i| !seen.contains_key(i))
                .take(10)
                .collect::<Vec<_>>()
        );
        match within("poll", max_poll, m.poll(Duration::from_millis(200))).await {
            Ok(records) => {
                for r in &records {
                    let v = r.value.as_deref().unwrap_or_default();
                    let i = index_of(v)
                        .filter(|i| *i < n)
                        .unwrap_or_else(|| panic!("a value never committed: {v:?}"));
                    let c = seen.entry(i).or_insert(0);
                    *c += 1;
                    if *c > 1 {
                        eprintln!(
                            "v{i} again at {}-{} offset {} (commit failed before: {commit_failed})",
                            r.topic, r.partition, r.offset
                        );
                        // Only after a failed commit may the group hand a record out again.
                        assert!(commit_failed, "v{i} delivered twice with every commit done");
                        tolerated += 1;
                    }
                }
                if !records.is_empty() {
                    if let Err(e) = within("commit", max_poll, m.commit_positions()).await {
                        errors.push(e.to_string());
                        commit_failed = true;
                    }
                }
            }
            Err(e) => {
                // A flip inside a record batch: read it again (see the read_committed
                // scenario, and the refetch proposal).
                if let Error::CorruptData {
                    topic: t,
                    partition,
                    offset,
                    ..
                } = &e
                {
                    m.seek(
                        &TopicPartition::new(t.clone(), *partition),
                        Offset::At(*offset),
                    )
                    .expect("seek");
                }
                errors.push(e.to_string());
            }
        }
    }
    eprintln!(
        "{} responses flipped, {tolerated} redeliveries after failed commits, {} errors: {:?}",
        proxy.faults.hostile.damaged(Damage::FlipBit),
        errors.len(),
        errors.iter().take(5).collect::<Vec<_>>()
    );
    assert!(proxy.faults.hostile.damaged(Damage::FlipBit) > 0);
    within("close", max_poll, m.close()).await.ok();
}

/// A group member alone in its group, reading `n` values through `proxy`: every value once,
/// within `limit`; the error of the poll that failed otherwise.
async fn a_member_reads(
    proxy: &Proxy,
    topic: &TestTopic,
    n: usize,
    limit: Duration,
) -> Result<(), String> {
    let group = unique_topic("hostile-member");
    let mut m = within(
        "GroupConsumer::new",
        limit,
        GroupConsumer::new(consumer_config(
            &proxy.addr,
            &consumer_props(&[
                ("group.id", group.as_str()),
                ("auto.offset.reset", "earliest"),
                ("enable.auto.commit", "false"),
            ]),
        )),
    )
    .await
    .map_err(|e| e.to_string())?;
    m.subscribe(&[topic.name.as_str()]);
    let mut seen = BTreeSet::new();
    let started = Instant::now();
    let read = async {
        while seen.len() < n {
            for r in m.poll(Duration::from_millis(200)).await? {
                let i = index_of(r.value.as_deref().unwrap_or_default()).expect("a value");
                assert!(seen.insert(i), "v{i} twice");
            }
        }
        Ok::<(), Error>(())
    };
    let out = match tokio::time::timeout(limit, read).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("read {} of {n} values: {e}", seen.len())),
        Err(_) => Err(format!(
            "read {} of {n} values in {:?}",
            seen.len(),
            started.elapsed()
        )),
    };
    within("close", limit, m.close()).await.ok();
    out
}

/// One damage to a group member's answers (`damage` arms it on the proxy; `done` counts how
/// often it happened): a member alone in its group still reads each of 20 values once within
/// 30 s, and the damage happened exactly once.
async fn member_reads_despite(
    name: &str,
    damage: impl FnOnce(&crate::support::hostile::Hostile, &str),
    done: impl Fn(&crate::support::hostile::Hostile) -> u64,
) {
    let topic = TestTopic::create(&format!("hostile-{name}"), 2).await;
    let n = 20;
    fill_committed(&topic, n, 0).await;
    let proxy = hostile_proxy(name).await;
    damage(&proxy.faults.hostile, &topic.name);
    let read = a_member_reads(&proxy, &topic, n, Duration::from_secs(30)).await;
    assert_eq!(
        done(&proxy.faults.hostile),
        1,
        "{name}: the answer was not damaged once: the scenario proved nothing"
    );
    read.unwrap();
}

/// The coordinator lists the group's members to the leader only. A JoinGroup answer whose
/// leader id was damaged on the way made the only member a follower: nobody assigned
/// anything, the group was stable, and no partition was ever read (the group member under
/// random flips, 1 run in 41). The list decides now: a member that gets it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_leader_id_does_not_leave_the_group_with_nothing_assigned() {
    member_reads_despite(
        "leader-id",
        |h, _| {
            h.damage_leader_ids
                .store(1, std::sync::atomic::Ordering::SeqCst)
        },
        |h| {
            h.leader_ids_damaged
                .load(std::sync::atomic::Ordering::Relaxed)
        },
    )
    .await;
}

/// A SyncGroup answer whose assignment names a partition the topic does not have (a flipped
/// bit made partition 0 into 2048) left the member failing every poll on it, in a stable
/// group (the group member under random flips, 1 run in 40). Checked against fresh metadata,
/// it makes the member join again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_naming_a_partition_the_topic_lacks_makes_the_member_join_again() {
    member_reads_despite(
        "assigned-partition",
        |h, topic| *h.damage_assigned_partition.lock().unwrap() = Some(topic.to_owned()),
        |h| {
            h.assigned_partitions_damaged
                .load(std::sync::atomic::Ordering::Relaxed)
        },
    )
    .await;
}

/// A Metadata answer listing a topic's partition 1 as 3 made a topic of 2 partitions look like
/// one of 4: the group leader assigned partitions that do not exist and every poll failed on
/// them (the group member under random flips, 1 run in 20). A topic must list each partition
/// 0..n once; an answer that does not is damaged and not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_answer_with_a_damaged_partition_index_is_not_used() {
    member_reads_despite(
        "partition-index",
        |h, _| {
            h.damage_partition_indexes
                .store(1, std::sync::atomic::Ordering::SeqCst)
        },
        |h| {
            h.partition_indexes_damaged
                .load(std::sync::atomic::Ordering::Relaxed)
        },
    )
    .await;
}

/// The leader's own id damaged in the member list of its JoinGroup answer made it assign its
/// partitions to a member that does not exist: stable, nothing read (the group member under
/// random flips, 1 run in 31). A list without the leader contradicts itself: joined again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_list_without_the_leader_makes_it_join_again() {
    member_reads_despite(
        "listed-ids",
        |h, _| {
            h.damage_listed_ids
                .store(1, std::sync::atomic::Ordering::SeqCst)
        },
        |h| {
            h.listed_ids_damaged
                .load(std::sync::atomic::Ordering::Relaxed)
        },
    )
    .await;
}

/// A SyncGroup answer whose assignment names a topic altered on the way (one character: a
/// topic that does not exist) left the member owning nothing it could read, in a stable group,
/// for ever (the group member under random flips, 1 run in 41). As the Java member does with an
/// assignment that does not match its subscription, it joins again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_naming_a_topic_outside_the_subscription_makes_the_member_join_again() {
    member_reads_despite(
        "assigned-topic",
        |h, topic| *h.damage_assigned_topic.lock().unwrap() = Some(topic.to_owned()),
        |h| {
            h.assigned_topics_damaged
                .load(std::sync::atomic::Ordering::Relaxed)
        },
    )
    .await;
}

/// A Metadata answer naming the brokers at an address that cannot be reached (a host name no
/// resolver knows, as one flipped bit makes "127.0.0.1" into "127.0.0.!") does not keep a group
/// member from joining: the failed connect to the coordinator refreshes the metadata, and the
/// next attempt finds the coordinator at its real address. Before, every FindCoordinator named
/// the same node and every connect went to the same bad address — the join timed out, and the
/// next one too (the group member under random flips: 2 runs in 24 read nothing in 150 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_broker_address_in_metadata_does_not_keep_a_member_from_joining() {
    let topic = TestTopic::create("hostile-bad-host", 1).await;
    let n = 10;
    fill_committed(&topic, n, 0).await;
    let proxy = hostile_proxy("bad_broker_host").await;
    proxy
        .faults
        .hostile
        .add(Rule::next(1, ApiKey::Metadata, Damage::BadBrokerHost));
    let group = unique_topic("hostile-bad-host");
    let api = Duration::from_millis(API_TIMEOUT_MS);
    let mut m = within(
        "GroupConsumer::new",
        api,
        GroupConsumer::new(consumer_config(
            &proxy.addr,
            &consumer_props(&[
                ("group.id", group.as_str()),
                ("auto.offset.reset", "earliest"),
                ("enable.auto.commit", "false"),
            ]),
        )),
    )
    .await
    .expect("member");
    assert_eq!(
        proxy.faults.hostile.damaged(Damage::BadBrokerHost),
        1,
        "the bootstrap Metadata answer was not damaged: the scenario proves nothing"
    );
    m.subscribe(&[topic.name.as_str()]);
    let mut read = 0;
    let joined = within("joining and reading every value", api, async {
        while read < n {
            read += m.poll(Duration::from_millis(200)).await?.len();
        }
        Ok::<(), Error>(())
    })
    .await;
    if let Err(e) = joined {
        panic!("read {read} of {n} values: {e}");
    }
    within("close", api, m.close()).await.ok();
}

/// Admin calls under bit flips return or fail within default.api.timeout.ms, naming the broker
/// when they fail; a topic reported created exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_calls_under_bit_flips_end_within_default_api_timeout() {
    let proxy = hostile_proxy("admin_under_bit_flips").await;
    proxy
        .faults
        .hostile
        .add(Rule::random(None, Damage::FlipBit, 100));
    let api = Duration::from_millis(API_TIMEOUT_MS);
    let mut cfg = client_config(&proxy.addr);
    cfg.api_timeout = api;
    cfg.set("request.timeout.ms", REQUEST_TIMEOUT_MS).unwrap();
    let admin = within("Admin::new", api, Admin::new(cfg))
        .await
        .expect("admin");
    let mut created = Vec::new();
    let mut tried = Vec::new();
    let mut errors = Vec::new();
    for i in 0..10 {
        let name = unique_topic("hostile-admin");
        tried.push(name.clone());
        match within(
            "create_topics",
            api,
            admin.create_topics(&[NewTopic::new(name.clone(), 1)]),
        )
        .await
        {
            Ok(()) => created.push(name.clone()),
            Err(e) => {
                eprintln!("create {i}: {e}");
                errors.push(e)
            }
        }
        if let Err(e) = within("list_topics", api, admin.list_topics()).await {
            errors.push(e);
        }
        if let Err(e) = within(
            "describe_topic_configs",
            api,
            admin.describe_topic_configs(created.last().unwrap_or(&name)),
        )
        .await
        {
            errors.push(e);
        }
    }
    eprintln!(
        "{} responses flipped; {} errors",
        proxy.faults.hostile.damaged(Damage::FlipBit),
        errors.len()
    );
    for e in &errors {
        assert_names_broker(e, &proxy.addr, "an admin call");
    }
    let direct = Admin::new(client_config(&broker())).await.unwrap();
    let topics = direct.list_topics().await.unwrap();
    for t in &created {
        assert!(
            topics.contains_key(t),
            "{t} was reported created but does not exist"
        );
    }
    // A create reported failed may have happened all the same (its answer was damaged).
    let names: Vec<&str> = tried.iter().map(String::as_str).collect();
    let _ = direct.delete_topics(&names).await;
}
