//! Many transactional producers across a broker crash: 10 producers, 10 partitions, 1,000
//! transactions, the broker killed with kill -9 and restarted in the middle. Every record of a
//! committed transaction is read exactly once under read_committed, no record of an aborted one
//! is, and a transaction whose outcome the producer could not learn is all or nothing.

use crate::support::broker::PrivateBroker;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Error, Producer, ProducerRecord};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const PRODUCERS: usize = 10;
const TXNS_PER_PRODUCER: usize = 100;
const RECORDS_PER_TXN: usize = 10;
const PARTITIONS: i32 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Committed,
    Aborted,
    /// The producer could not learn the outcome (e.g. fenced while committing).
    Unknown,
}

async fn run_producer(
    addr: String,
    topic: String,
    p: usize,
    done: Arc<AtomicUsize>,
) -> Vec<(usize, Fate)> {
    let id = format!("{topic}-producer-{p}");
    let config = producer_config(
        &addr,
        &[
            ("transactional.id", &id),
            ("linger.ms", "2"),
            ("request.timeout.ms", "5000"),
            ("delivery.timeout.ms", "30000"),
            ("transaction.timeout.ms", "60000"),
            ("reconnect.backoff.max.ms", "500"),
        ],
    );
    let mut producer = Producer::new(config.clone()).await.unwrap();
    init_with_retries(&producer).await;
    let mut fates = Vec::new();
    for t in 0..TXNS_PER_PRODUCER {
        if producer.begin_transaction().is_err() {
            producer = Producer::new(config.clone()).await.unwrap();
            init_with_retries(&producer).await;
            producer.begin_transaction().unwrap();
        }
        let mut failed = false;
        for r in 0..RECORDS_PER_TXN {
            let value = format!("p{p}-t{t}-r{r}");
            let rec = ProducerRecord::new(topic.clone(), Bytes::from(value))
                .with_partition(((p + t + r) % PARTITIONS as usize) as i32);
            if producer.send(rec).await.is_err() {
                failed = true;
                break;
            }
        }
        let want_abort = t % 5 == 4;
        if want_abort && !failed {
            // Deliberate aborts write their records first, so the log really holds aborted
            // data for read_committed to hide.
            let _ = producer.flush().await;
        }
        let fate = if failed || want_abort {
            match producer.abort_transaction().await {
                Ok(()) => Fate::Aborted,
                Err(_) => Fate::Unknown,
            }
        } else {
            match producer.commit_transaction().await {
                Ok(()) => Fate::Committed,
                Err(Error::Fenced(_)) => Fate::Unknown,
                Err(_) => match producer.abort_transaction().await {
                    Ok(()) => Fate::Aborted,
                    Err(_) => Fate::Unknown,
                },
            }
        };
        fates.push((t, fate));
        done.fetch_add(1, Ordering::Relaxed);
    }
    fates
}

async fn init_with_retries(p: &Producer) {
    for attempt in 0.. {
        match p.init_transactions().await {
            Ok(()) => return,
            Err(e) if attempt < 20 => {
                eprintln!("init_transactions: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("init_transactions kept failing: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_producers_a_thousand_transactions_and_a_broker_crash() {
    let _heavy = crate::support::turns::heavy().await;
    let broker = PrivateBroker::start(19094);
    let topic = TestTopic::create_with(&broker.addr, "txn-stress", PARTITIONS, &[]).await;
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        tasks.push(tokio::spawn(run_producer(
            broker.addr.clone(),
            topic.name.clone(),
            p,
            done.clone(),
        )));
    }
    // Crash the broker once a tenth of the transactions are done.
    while done.load(Ordering::Relaxed) < PRODUCERS * TXNS_PER_PRODUCER / 10 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before_crash = done.load(Ordering::Relaxed);
    broker.run("kill");
    tokio::time::sleep(Duration::from_secs(1)).await;
    broker.run("start");
    let mut fates: HashMap<(usize, usize), Fate> = HashMap::new();
    for (p, t) in tasks.into_iter().enumerate() {
        for (txn, fate) in t.await.unwrap() {
            fates.insert((p, txn), fate);
        }
    }
    let committed = fates.values().filter(|f| **f == Fate::Committed).count();
    let unknown = fates.values().filter(|f| **f == Fate::Unknown).count();
    eprintln!(
        "transactions: {committed} committed, {} aborted, {unknown} unknown",
        fates.len() - committed - unknown
    );
    assert_eq!(fates.len(), PRODUCERS * TXNS_PER_PRODUCER);
    assert!(
        before_crash < PRODUCERS * TXNS_PER_PRODUCER / 2,
        "the crash came in the middle ({before_crash} transactions done before it)"
    );
    assert!(committed >= 600, "most transactions commit ({committed})");

    // Everything that is visible under read_committed, read to the end.
    let at_least = committed * RECORDS_PER_TXN;
    let got = consume_all(
        &broker.addr,
        &topic,
        at_least,
        &[("isolation.level", "read_committed")],
    )
    .await;
    let mut seen: HashSet<String> = HashSet::new();
    let mut per_txn: HashMap<(usize, usize), usize> = HashMap::new();
    for r in &got {
        let v = String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap();
        assert!(seen.insert(v.clone()), "record {v} read twice");
        let mut parts = v.split('-');
        let p: usize = parts.next().unwrap()[1..].parse().unwrap();
        let t: usize = parts.next().unwrap()[1..].parse().unwrap();
        *per_txn.entry((p, t)).or_default() += 1;
    }
    for (key, fate) in &fates {
        let n = per_txn.get(key).copied().unwrap_or(0);
        match fate {
            Fate::Committed => assert_eq!(
                n, RECORDS_PER_TXN,
                "committed transaction {key:?} has {n} records visible"
            ),
            Fate::Aborted => {
                assert_eq!(n, 0, "aborted transaction {key:?} has {n} records visible")
            }
            Fate::Unknown => assert!(
                n == 0 || n == RECORDS_PER_TXN,
                "transaction {key:?} is torn: {n} records"
            ),
        }
    }
    // Proof the check can fail: the aborted transactions' records are in the log, and a
    // read_uncommitted reader sees them.
    let all = consume_all(&broker.addr, &topic, got.len(), &[]).await;
    let aborted_visible = all
        .iter()
        .filter(|r| !seen.contains(&*String::from_utf8_lossy(r.value.as_deref().unwrap())))
        .count();
    assert!(
        aborted_visible > 0,
        "read_uncommitted shows aborted records"
    );
    drop(topic);
}
