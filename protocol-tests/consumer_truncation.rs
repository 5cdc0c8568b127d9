//! KIP-320 against the real broker: the consumer sends the leader epoch of the last batch it
//! fetched, and a log that no longer holds what it fetched comes back as a diverging epoch.
//!
//! A single-node broker cannot lose records in an unclean leader election, but a topic deleted
//! and created again under the same name looks exactly like one to a consumer that fetches by
//! name: its fetch offset is past the new log's end, and the new log's epoch 0 ends before it.
//! Our consumer knows topic ids (KIP-516) and would see the recreation for what it is
//! (protocol-tests/topic_ids.rs), so here it reaches the broker through the proxy with the ids
//! taken out of Metadata, as from a broker without them: it then fetches by name (Fetch v12).

use crate::support::proxy::Proxy;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::admin::NewTopic;
use onceflow::client::{Admin, Consumer, Error, Offset, ProducerRecord, TopicPartition};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

async fn produce(topic: &str, values: impl IntoIterator<Item = String>) {
    let p = producer(&[]).await;
    let mut fs = Vec::new();
    for v in values {
        fs.push(
            p.send(ProducerRecord::new(topic.to_owned(), Bytes::from(v)))
                .await
                .expect("send accepted"),
        );
    }
    for f in fs {
        f.await.expect("delivered");
    }
}

/// Before KIP-320 support the consumer fetched with no last fetched epoch and got
/// OFFSET_OUT_OF_RANGE; now the broker answers with a diverging epoch (epoch 0 ends at 5, below
/// the position 50), and without a reset policy that is a truncation the application is told
/// of, naming where the log now diverges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_gone_from_under_the_position_are_reported_as_log_truncation() {
    let name = unique_topic("truncated");
    let admin = Admin::new(client_config(&broker())).await.expect("admin");
    admin
        .create_topics(&[NewTopic::new(name.clone(), 1)])
        .await
        .expect("create");
    produce(&name, (0..50).map(|i| format!("old-{i}"))).await;

    let tp = TopicPartition::new(name.clone(), 0);
    let proxy = Proxy::start(&broker()).await;
    proxy.faults.hide_topic_ids.store(true, Ordering::Relaxed);
    let mut c = Consumer::new(consumer_config(
        &proxy.addr,
        &[("auto.offset.reset", "none"), ("fetch.max.wait.ms", "100")],
    ))
    .await
    .expect("consumer");
    c.assign([tp.clone()]).await.unwrap();
    c.seek(&tp, Offset::Beginning).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut read = 0;
    while read < 50 {
        assert!(
            Instant::now() < deadline,
            "read {read} of 50 old records in 60 s"
        );
        read += c.poll(Duration::from_secs(1)).await.expect("poll").len();
    }
    assert_eq!(c.position(&tp), Some(50));

    // The same name, a new log with 5 records, all in leader epoch 0.
    admin.delete_topics(&[name.as_str()]).await.expect("delete");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match admin.create_topics(&[NewTopic::new(name.clone(), 1)]).await {
            Ok(()) => break,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "could not create {name} again within 60 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    produce(&name, (0..5).map(|i| format!("new-{i}"))).await;

    let deadline = Instant::now() + Duration::from_secs(60);
    let err = loop {
        assert!(
            Instant::now() < deadline,
            "no error within 60 s after the log was replaced under the position"
        );
        match c.poll(Duration::from_secs(1)).await {
            Ok(records) => assert!(
                records.is_empty(),
                "no record may be handed out: {:?}",
                records.iter().map(|r| r.offset).collect::<Vec<_>>()
            ),
            // The topic is briefly unknown while it is deleted and created.
            Err(e) if e.to_string().contains("UNKNOWN_TOPIC") => {}
            Err(e) => break e,
        }
    };
    // The fetcher runs ahead of poll: it may have asked before the 5 new records landed, when
    // the new log ended at 0. Either end is where the log diverges from what we read.
    assert!(
        matches!(
            &err,
            Error::LogTruncation { topic, partition: 0, position: 50, divergent_offset: Some(d) }
                if *topic == name && (0..=5).contains(d)
        ),
        "{err:?}: {err}"
    );
    // Raised again until the application seeks.
    let again = c.poll(Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(again, Error::LogTruncation { .. }), "{again:?}");
    c.seek(&tp, Offset::At(5)).unwrap();
    produce(&name, ["after".to_owned()]).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            Instant::now() < deadline,
            "no record after the seek in 60 s"
        );
        let rs = c
            .poll(Duration::from_secs(1))
            .await
            .expect("poll after seek");
        if let Some(r) = rs.first() {
            assert_eq!((r.offset, r.value.as_deref()), (5, Some(&b"after"[..])));
            break;
        }
    }
    let _ = admin.delete_topics(&[name.as_str()]).await;
}
