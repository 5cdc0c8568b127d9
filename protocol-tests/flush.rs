//! flush() waits for the records sent before it was called, not for every record any clone
//! sends while it waits (the Java client's contract).

use crate::support::proxy::Proxy;
use crate::support::*;
use futures::FutureExt;
use onceflow::client::{Producer, ProducerRecord};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_returns_while_another_clone_keeps_sending() {
    let topic = TestTopic::create("flush-busy", 1).await;
    // A clone sends every 20 ms; each record waits up to linger.ms (1 s) in its batch and every
    // response is held 300 ms: from the moment that clone starts until it stops, some record of
    // the producer is always unacknowledged. (The proxy holds responses one after the other, so
    // the long linger also keeps the number of requests low.)
    let proxy = Proxy::start(&broker()).await;
    proxy.faults.delay_ms.store(300, Ordering::Relaxed);
    let p = Producer::new(producer_config(&proxy.addr, &[("linger.ms", "1000")]))
        .await
        .expect("producer");
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let busy = {
        let (p, stop, sent, topic) = (p.clone(), stop.clone(), sent.clone(), topic.name.clone());
        tokio::spawn(async move {
            let mut fs = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let f = p
                    .send(ProducerRecord::new(topic.clone(), "busy"))
                    .await
                    .expect("send");
                fs.push(f);
                sent.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            fs
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while sent.load(Ordering::Relaxed) < 20 {
        assert!(Instant::now() < deadline, "the busy clone did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut early = Vec::new();
    for i in 0..5 {
        early.push(
            p.send(ProducerRecord::new(
                topic.name.clone(),
                format!("early {i}"),
            ))
            .await
            .expect("send"),
        );
    }
    let flushed = tokio::time::timeout(Duration::from_secs(60), p.flush()).await;
    stop.store(true, Ordering::Relaxed);
    flushed
        .expect("flush did not return within 60 s while another clone kept sending")
        .expect("flush");
    for (i, f) in early.into_iter().enumerate() {
        let done = f.now_or_never();
        assert!(
            matches!(done, Some(Ok(_))),
            "record {i} sent before flush() was not acknowledged when it returned: {done:?}"
        );
    }
    for f in busy.await.expect("busy clone") {
        f.await.expect("busy record delivered");
    }
}
