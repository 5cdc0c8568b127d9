//! `Producer::send_with_callback`: the throughput API without a future per record. Every record
//! sent is reported exactly once, with its real offset; and a callback may call the producer
//! even when the producer fails its records while holding its own lock (an abort).

use crate::support::*;
use onceflow::client::ProducerRecord;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_report_every_record_once_with_the_offset_it_was_written_at() {
    let topic = TestTopic::create("send-callback", 3).await;
    let p = producer(&[("linger.ms", "5"), ("batch.size", "4096")]).await;
    const N: usize = 6000;
    // (partition, offset) -> the value sent, as each callback reports it.
    let reported: Arc<Mutex<BTreeMap<(i32, i64), String>>> = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));
    for i in 0..N {
        let value = format!("record {i}");
        let (reported, calls, v) = (reported.clone(), calls.clone(), value.clone());
        p.send_with_callback(ProducerRecord::new(topic.name.clone(), value), move |r| {
            calls.fetch_add(1, Ordering::SeqCst);
            let meta = r.expect("record acknowledged");
            reported
                .lock()
                .unwrap()
                .insert((meta.partition, meta.offset), v);
        })
        .await
        .expect("send_with_callback");
    }
    p.flush().await.expect("flush");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        N,
        "flush returned before every callback ran, or one ran twice"
    );
    let reported = reported.lock().unwrap().clone();
    assert_eq!(reported.len(), N, "two callbacks reported the same offset");
    // What the log holds at each offset is what the callback said was written there.
    let records = consume_all(&broker(), &topic, N, &[]).await;
    assert_eq!(
        records.len(),
        N,
        "the log holds a different number of records"
    );
    for r in &records {
        let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string();
        assert_eq!(
            reported.get(&(r.partition, r.offset)),
            Some(&value),
            "partition {} offset {}: the log and the callback disagree",
            r.partition,
            r.offset
        );
    }
}

#[test]
fn a_callback_may_call_the_producer_while_abort_fails_its_records() {
    // Its own runtime: were a callback to deadlock on the producer's lock, the runtime's worker
    // threads would block for good, and dropping a runtime waits for them; this test then
    // leaves it behind (shutdown_background) and fails instead of hanging.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (topic, p, aborted) = rt.block_on(async {
        let topic = TestTopic::create("send-callback-abort", 1).await;
        let id = unique_topic("send-callback-abort-txn");
        // linger.ms far beyond the test: the records stay in their open batch until the abort
        // fails them, which it does while holding the producer's accumulator lock.
        let p = producer(&[("transactional.id", &id), ("linger.ms", "60000")]).await;
        p.init_transactions().await.expect("init_transactions");
        p.begin_transaction().expect("begin_transaction");
        let aborted = Arc::new(AtomicUsize::new(0));
        for i in 0..N_DOOMED {
            let (aborted, producer) = (aborted.clone(), p.clone());
            p.send_with_callback(
                ProducerRecord::new(topic.name.clone(), format!("doomed {i}")),
                move |r: onceflow::client::Result<_>| {
                    // Both take the lock the abort holds while failing the record.
                    let _ = producer.producer_id_and_epoch();
                    let _ = producer.metrics();
                    if r.is_err() {
                        aborted.fetch_add(1, Ordering::SeqCst);
                    }
                },
            )
            .await
            .expect("send_with_callback");
        }
        (topic, p, aborted)
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let (handle, q) = (rt.handle().clone(), p.clone());
    std::thread::spawn(move || {
        let _ = tx.send(handle.block_on(q.abort_transaction()));
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(outcome) => outcome.expect("abort_transaction"),
        Err(_) => {
            rt.shutdown_background();
            panic!("abort_transaction did not return: a callback deadlocked on the producer");
        }
    }
    assert_eq!(
        aborted.load(Ordering::SeqCst),
        N_DOOMED,
        "every record of the aborted transaction is reported failed, once"
    );
    drop(p);
    drop(rt);
    drop(topic);
}

const N_DOOMED: usize = 50;
