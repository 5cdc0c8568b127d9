//! Limits: records too large for the client or the broker are refused with a clear error.

use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Error, ErrorClass, ProducerRecord};

#[tokio::test]
async fn record_over_the_topic_limit_is_refused_by_the_broker_with_a_clear_error() {
    let topic =
        TestTopic::create_with(&broker(), "too-large", 1, &[("max.message.bytes", "10000")]).await;
    // The client would allow it (max.request.size is larger), so the broker decides.
    let p = producer(&[("max.request.size", "5000000")]).await;
    let f = p
        .send(ProducerRecord::new(
            topic.name.clone(),
            Bytes::from(vec![7u8; 50_000]),
        ))
        .await
        .unwrap();
    let e = f.await.unwrap_err();
    assert!(matches!(e, Error::BatchTooLarge { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("MESSAGE_TOO_LARGE") && msg.contains("max.message.bytes"),
        "{msg}"
    );
    // The producer is still usable for records that fit.
    let ok = p
        .send(ProducerRecord::new(
            topic.name.clone(),
            Bytes::from(vec![1u8; 100]),
        ))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(ok.offset, 0);
}

#[tokio::test]
async fn record_over_max_request_size_is_refused_before_sending() {
    let topic = TestTopic::create("too-large-client", 1).await;
    let p = producer(&[]).await;
    let e = p
        .send(ProducerRecord::new(
            topic.name.clone(),
            Bytes::from(vec![0u8; 2 * 1024 * 1024]),
        ))
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("max.request.size=1048576"), "{e}");
}

/// An unknown topic is created or refused depending on the broker's auto.create.topics.enable:
/// both are tested in auto_create.rs.
#[tokio::test]
async fn unknown_partition_is_named() {
    let p = producer(&[]).await;
    let topic = TestTopic::create("two", 2).await;
    let e = p
        .send(ProducerRecord::new(topic.name.clone(), "x").with_partition(5))
        .await
        .err()
        .expect("unknown partition");
    assert!(e.to_string().contains("has 2 partitions"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_buffer_memory_blocks_send_then_fails_it_naming_buffer_memory() {
    let topic = TestTopic::create("buffer-full", 1).await;
    // The broker never answers a Produce: nothing the producer buffers is ever freed.
    let proxy = crate::support::proxy::Proxy::start(&broker()).await;
    *proxy.faults.hold_responses.lock().unwrap() = Some(kafka_protocol::messages::ApiKey::Produce);
    let p = onceflow::client::Producer::new(producer_config(
        &proxy.addr,
        &[
            ("buffer.memory", "65536"),
            ("batch.size", "16384"),
            ("max.block.ms", "1500"),
        ],
    ))
    .await
    .expect("producer");
    let mut accepted = 0usize;
    let error = loop {
        match p
            .send(ProducerRecord::new(topic.name.clone(), vec![1u8; 1024]))
            .await
        {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
        assert!(
            accepted < 1000,
            "send never blocked: buffer.memory is not enforced"
        );
    };
    assert!(matches!(error, Error::Timeout { .. }), "{error:?}");
    assert!(error.to_string().contains("buffer.memory"), "{error}");
    // 64 KiB holds fewer than 64 records of 1 KiB: each costs its bytes plus its framing and
    // bookkeeping; and the buffer was really used, not refused at once.
    assert!(
        (32..64).contains(&accepted),
        "{accepted} records of 1 KiB fitted in buffer.memory=65536"
    );
    *proxy.faults.hold_responses.lock().unwrap() = None;
}

/// In a transaction, a record the broker refuses as too large dooms the transaction — every
/// time: the commit fails (abortable), abort_transaction() succeeds and the producer goes on.
/// Before the fix the commit now and then sent EndTxn(commit) without the record (the flush saw
/// the record failed before the transaction was marked doomed), returning Ok or a Usage error,
/// 3 runs of 3 here; and otherwise the error made the producer
/// unusable (BatchTooLarge was fatal rather than abortable in a transaction). Multi-threaded:
/// the race needs the sender task and the commit on two threads at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_refused_as_too_large_dooms_its_transaction_every_time() {
    let topic = TestTopic::create_with(
        &broker(),
        "too-large-txn",
        1,
        &[("max.message.bytes", "1024")],
    )
    .await;
    let id = unique_topic("too-large-txn");
    let p = producer(&[("transactional.id", id.as_str())]).await;
    p.init_transactions().await.unwrap();
    for round in 0..20 {
        p.begin_transaction().unwrap();
        let f = p
            .send(ProducerRecord::new(
                topic.name.clone(),
                Bytes::from(vec![0u8; 10_000]),
            ))
            .await
            .unwrap();
        let e = p.commit_transaction().await.err().unwrap_or_else(|| {
            panic!("round {round}: the commit succeeded without its refused record")
        });
        assert!(
            matches!(e, Error::TransactionAbortable(_)),
            "round {round}: {e:?}"
        );
        assert_eq!(e.class(), ErrorClass::Abortable, "round {round}: {e}");
        assert!(matches!(f.await, Err(Error::BatchTooLarge { .. })));
        p.abort_transaction().await.unwrap();
    }
    p.begin_transaction().unwrap();
    p.send(ProducerRecord::new(topic.name.clone(), "fits"))
        .await
        .unwrap();
    p.commit_transaction().await.unwrap();
    let got = consume_all(
        &broker(),
        &topic,
        1,
        &[("isolation.level", "read_committed")],
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
}
