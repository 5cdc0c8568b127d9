//! The transactional producer against the real broker, at whatever transaction.version the
//! broker was formatted with (scripts/test runs the suite at 2 and at 1).

use crate::support::java::java_values;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::producer::GroupMetadata;
use onceflow::client::transactions::{ResumeOutcome, TxnEnd};
use onceflow::client::{Producer, ProducerRecord, TopicPartition};
use std::time::Duration;

async fn txn_producer(id: &str, extra: &[(&str, &str)]) -> Producer {
    let mut props = vec![("transactional.id", id), ("linger.ms", "5")];
    props.extend_from_slice(extra);
    let p = Producer::new(producer_config(&broker(), &props))
        .await
        .unwrap();
    p.init_transactions().await.unwrap();
    p
}

async fn send_values(
    p: &Producer,
    topic: &str,
    partitions: i32,
    values: impl Iterator<Item = String>,
) {
    for (i, v) in values.enumerate() {
        p.send(
            ProducerRecord::new(topic.to_owned(), Bytes::from(v))
                .with_partition(i as i32 % partitions),
        )
        .await
        .unwrap();
    }
}

fn sorted(v: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = v.collect();
    v.sort();
    v
}

#[tokio::test]
async fn committed_records_are_visible_to_read_committed_and_aborted_ones_are_not() {
    let topic = TestTopic::create("txn-visible", 2).await;
    let p = txn_producer(&unique_topic("txn-visible"), &[]).await;
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 2, (0..10).map(|i| format!("c1-{i}"))).await;
    p.commit_transaction().await.unwrap();
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 2, (0..10).map(|i| format!("a-{i}"))).await;
    p.flush().await.unwrap(); // the aborted records really reach the log
    p.abort_transaction().await.unwrap();
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 2, (0..10).map(|i| format!("c2-{i}"))).await;
    p.commit_transaction().await.unwrap();

    let committed = sorted(
        (0..10)
            .map(|i| format!("c1-{i}"))
            .chain((0..10).map(|i| format!("c2-{i}"))),
    );
    assert_eq!(
        java_values(&topic.name, 20, "read_committed").await,
        committed
    );
    // onceflow's read_committed consumer agrees.
    let ours = consume_all(
        &broker(),
        &topic,
        20,
        &[("isolation.level", "read_committed")],
    )
    .await;
    let ours = sorted(
        ours.iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap()),
    );
    assert_eq!(ours, committed);
    // Proof the test can fail: read_uncommitted sees the aborted records too.
    let all = java_values(&topic.name, 30, "read_uncommitted").await;
    assert_eq!(all.len(), 30);
    assert!(all.iter().any(|v| v.starts_with("a-")));
    let ours = consume_all(&broker(), &topic, 30, &[]).await;
    assert_eq!(
        ours.len(),
        30,
        "read_uncommitted returns the aborted records too"
    );
}

#[tokio::test]
async fn empty_transactions_commit_and_abort_cleanly() {
    let p = txn_producer(&unique_topic("txn-empty"), &[]).await;
    p.begin_transaction().unwrap();
    p.commit_transaction().await.unwrap();
    p.begin_transaction().unwrap();
    p.abort_transaction().await.unwrap();
    // And the producer is still usable.
    let topic = TestTopic::create("txn-empty", 1).await;
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["x".to_owned()].into_iter()).await;
    p.commit_transaction().await.unwrap();
    assert_eq!(
        java_values(&topic.name, 1, "read_committed").await,
        vec!["x"]
    );
}

#[tokio::test]
async fn an_older_producer_with_the_same_transactional_id_is_fenced() {
    let topic = TestTopic::create("txn-zombie", 1).await;
    let id = unique_topic("txn-zombie");
    let zombie = txn_producer(&id, &[]).await;
    zombie.begin_transaction().unwrap();
    send_values(&zombie, &topic.name, 1, ["zombie".to_owned()].into_iter()).await;
    zombie.flush().await.unwrap();
    // A new instance takes over the transactional id.
    let fresh = txn_producer(&id, &[]).await;
    let e = zombie.commit_transaction().await.unwrap_err().to_string();
    assert!(
        e.contains("PRODUCER_FENCED")
            || e.contains("INVALID_PRODUCER_EPOCH")
            || e.contains("fenced"),
        "{e}"
    );
    // The zombie refuses further use.
    assert!(zombie.begin_transaction().is_err());
    fresh.begin_transaction().unwrap();
    send_values(&fresh, &topic.name, 1, ["fresh".to_owned()].into_iter()).await;
    fresh.commit_transaction().await.unwrap();
    assert_eq!(
        java_values(&topic.name, 1, "read_committed").await,
        vec!["fresh"]
    );
}

/// A transaction left open past transaction.timeout.ms (2 s), once the coordinator has aborted
/// it: (topic, transactional id, producer).
async fn a_transaction_the_coordinator_aborted(prefix: &str) -> (TestTopic, String, Producer) {
    let topic = TestTopic::create(prefix, 1).await;
    let id = unique_topic(prefix);
    let p = txn_producer(
        &id,
        &[
            ("transaction.timeout.ms", "2000"),
            ("delivery.timeout.ms", "1500"),
            ("request.timeout.ms", "1000"),
        ],
    )
    .await;
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["late".to_owned()].into_iter()).await;
    p.flush().await.unwrap();
    wait_until_the_coordinator_aborted(&id).await;
    (topic, id, p)
}

/// What follows the coordinator's abort. At transaction.version 2 the coordinator accepts the
/// producer's InitProducerId with its own id and epoch (it remembers the epoch it bumped), so
/// the same producer carries on. At transaction.version 1 it does not (the Java client is
/// fenced there too): the abort reports the fencing clearly and a new producer instance
/// carries on.
async fn carry_on_after_the_coordinator_aborted(p: Producer, id: &str, topic: &TestTopic) {
    let tv: i16 = std::env::var("ONCEFLOW_EXPECT_TV").map_or(2, |v| v.parse().unwrap());
    let p = if tv >= 2 {
        p.abort_transaction().await.unwrap();
        p
    } else {
        let e = p.abort_transaction().await.unwrap_err().to_string();
        assert!(e.contains("transaction.version 1"), "{e}");
        txn_producer(id, &[]).await
    };
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["ok".to_owned()].into_iter()).await;
    p.commit_transaction().await.unwrap();
    assert_eq!(
        java_values(&topic.name, 1, "read_committed").await,
        vec!["ok"]
    );
}

/// KIP-588: once the coordinator has aborted a transaction that ran past
/// transaction.timeout.ms, commit reports the timeout (naming the setting), abort_transaction() re-initializes the
/// producer id (InitProducerId with its current id and epoch, which the coordinator accepts
/// because it bumped the epoch itself), and the same producer carries on: no new instance.
#[tokio::test]
async fn a_producer_whose_transaction_timed_out_aborts_and_carries_on() {
    let (topic, id, p) = a_transaction_the_coordinator_aborted("txn-timeout").await;
    let e = p.commit_transaction().await.unwrap_err();
    assert!(e.to_string().contains("transaction.timeout.ms=2000"), "{e}");
    assert_eq!(
        e.class(),
        onceflow::client::ErrorClass::Abortable,
        "a timed-out transaction is abortable, not fatal: {e}"
    );
    carry_on_after_the_coordinator_aborted(p, &id, &topic).await;
}

/// KIP-588, learnt by the abort itself: an application that aborts (say, after a failed
/// TxnOffsetCommit) a transaction the coordinator has already aborted gets from EndTxn that the
/// epoch is over; the same abort_transaction() call re-initializes (and at transaction.version
/// 1 reports the fencing), never an error asking for another abort.
#[tokio::test]
async fn an_abort_of_a_transaction_the_coordinator_aborted_finishes_in_one_call() {
    let (topic, id, p) = a_transaction_the_coordinator_aborted("txn-timeout-abort").await;
    carry_on_after_the_coordinator_aborted(p, &id, &topic).await;
}

/// KIP-588, the other way the producer learns it: a record sent into the transaction after the
/// coordinator aborted it is refused (INVALID_PRODUCER_EPOCH); that dooms the transaction but
/// not the producer.
#[tokio::test]
async fn a_send_after_the_coordinator_aborted_the_transaction_is_abortable() {
    let (topic, id, p) = a_transaction_the_coordinator_aborted("txn-timeout-send").await;
    let delivery = p
        .send(ProducerRecord::new(topic.name.clone(), "refused").with_partition(0))
        .await
        .unwrap();
    let e = delivery.await.unwrap_err();
    assert_eq!(
        e.class_in(onceflow::client::Op::TxnProduce),
        onceflow::client::ErrorClass::Abortable,
        "{e}"
    );
    assert!(p.commit_transaction().await.is_err());
    carry_on_after_the_coordinator_aborted(p, &id, &topic).await;
}

#[tokio::test]
async fn transaction_timeout_above_the_broker_maximum_names_both_settings() {
    let p = Producer::new(producer_config(
        &broker(),
        &[
            ("transactional.id", &unique_topic("txn-max")),
            ("transaction.timeout.ms", "3600000"),
        ],
    ))
    .await
    .unwrap();
    let e = p.init_transactions().await.unwrap_err().to_string();
    assert!(e.contains("transaction.timeout.ms=3600000"), "{e}");
    assert!(e.contains("transaction.max.timeout.ms=900000"), "{e}");
}

#[tokio::test]
async fn a_prepared_transaction_is_committed_once_by_another_producer() {
    let topic = TestTopic::create("txn-resume", 1).await;
    let id = unique_topic("txn-resume");
    let p = txn_producer(&id, &[]).await;
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, (0..5).map(|i| format!("r-{i}"))).await;
    let prepared = p.prepare_commit().await.unwrap();
    // The client picked the protocol the broker was formatted with (KIP-890 at version 2).
    let expected_tv: i16 = std::env::var("ONCEFLOW_EXPECT_TV").map_or(2, |v| v.parse().unwrap());
    assert_eq!(prepared.transaction_version, expected_tv);
    drop(p);
    let cluster = onceflow::client::Cluster::connect(client_config(&broker()))
        .await
        .unwrap();
    let first =
        onceflow::client::transactions::resume_transaction(&cluster, &prepared, TxnEnd::Commit)
            .await
            .unwrap();
    assert_eq!(first, ResumeOutcome::Completed);
    let second =
        onceflow::client::transactions::resume_transaction(&cluster, &prepared, TxnEnd::Commit)
            .await
            .unwrap();
    assert_eq!(second, ResumeOutcome::AlreadyCommitted);
    assert_eq!(
        java_values(&topic.name, 5, "read_committed").await,
        sorted((0..5).map(|i| format!("r-{i}")))
    );
}

#[tokio::test]
async fn offsets_sent_to_a_transaction_move_only_when_it_commits() {
    let topic = TestTopic::create("txn-offsets", 1).await;
    let out = TestTopic::create("txn-offsets-out", 1).await;
    let group = unique_topic("txn-group");
    let p = txn_producer(&unique_topic("txn-offsets"), &[]).await;
    let tp = TopicPartition::new(topic.name.clone(), 0);
    let admin = onceflow::client::Admin::new(client_config(&broker()))
        .await
        .unwrap();

    p.begin_transaction().unwrap();
    send_values(&p, &out.name, 1, ["o1".to_owned()].into_iter()).await;
    p.send_offsets_to_transaction(&[(tp.clone(), 42)], &GroupMetadata::new(group.clone()))
        .await
        .unwrap();
    p.abort_transaction().await.unwrap();
    let committed = admin
        .committed_offsets(&group, std::slice::from_ref(&tp))
        .await
        .unwrap();
    assert_eq!(committed.get(&tp), None, "aborted: no offset for the group");

    p.begin_transaction().unwrap();
    send_values(&p, &out.name, 1, ["o2".to_owned()].into_iter()).await;
    p.send_offsets_to_transaction(&[(tp.clone(), 43)], &GroupMetadata::new(group.clone()))
        .await
        .unwrap();
    p.commit_transaction().await.unwrap();
    let committed = admin
        .committed_offsets(&group, std::slice::from_ref(&tp))
        .await
        .unwrap();
    assert_eq!(committed.get(&tp), Some(&43));
}

/// A saved committable resumed after its producer went on to a later transaction with the same
/// transactional id must not commit that later transaction (under the classic protocol both have
/// the same producer id and epoch).
#[tokio::test]
async fn resuming_an_old_committable_never_commits_a_later_transaction() {
    let topic = TestTopic::create("txn-superseded", 1).await;
    let id = unique_topic("txn-superseded");
    let p = txn_producer(&id, &[]).await;
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["a".to_owned()].into_iter()).await;
    let a = p.prepare_commit().await.unwrap();
    assert!(a.transaction_start_ms > 0);
    p.commit_transaction().await.unwrap();
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["b".to_owned()].into_iter()).await;
    p.flush().await.unwrap();
    let cluster = onceflow::client::Cluster::connect(client_config(&broker()))
        .await
        .unwrap();
    let outcome = onceflow::client::transactions::resume_transaction(&cluster, &a, TxnEnd::Commit)
        .await
        .unwrap();
    assert!(
        matches!(outcome, ResumeOutcome::Superseded { .. }),
        "{outcome:?}"
    );
    // b was not committed by the resume: aborting it leaves only a visible.
    p.abort_transaction().await.unwrap();
    assert_eq!(
        java_values(&topic.name, 1, "read_committed").await,
        vec!["a"]
    );
}

/// Records dropped unsent by an abort had sequence numbers; the next transaction must not be
/// refused for the gap (it was, at transaction.version 1, until the coordinator timed it out).
#[tokio::test]
async fn an_abort_that_drops_unsent_records_leaves_no_sequence_gap() {
    let topic = TestTopic::create("txn-gap", 1).await;
    // One record per batch: many closed batches (with sequences) wait when the abort comes.
    let p = txn_producer(
        &unique_topic("txn-gap"),
        &[("linger.ms", "0"), ("batch.size", "1")],
    )
    .await;
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["x0".to_owned()].into_iter()).await;
    p.commit_transaction().await.unwrap();
    for _ in 0..3 {
        p.begin_transaction().unwrap();
        send_values(&p, &topic.name, 1, (0..200).map(|i| format!("dropped-{i}"))).await;
        p.abort_transaction().await.unwrap(); // at once: some batches never left
    }
    // With a gap the next batch was refused as out of order until the coordinator timed the
    // transaction out and fenced the producer: the commit failed.
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["x2".to_owned()].into_iter()).await;
    p.commit_transaction().await.unwrap();
    assert_eq!(
        java_values(&topic.name, 2, "read_committed").await,
        vec!["x0", "x2"]
    );
}

/// A batch that was sent once and waits to be retried may already be in the log (only its
/// response was lost). An abort must settle it rather than drop it: at transaction.version 1
/// the epoch stays the same, and had its sequence number been handed to the next transaction's
/// batch, the broker would have answered that batch as a duplicate of the aborted one and never
/// written it.
#[tokio::test]
async fn an_abort_never_reuses_the_sequence_of_a_batch_the_broker_may_have_written() {
    let topic = TestTopic::create("txn-abort-retry", 1).await;
    let proxy = crate::support::proxy::Proxy::start(&broker()).await;
    let id = unique_topic("txn-abort-retry");
    let p = Producer::new(producer_config(
        &proxy.addr,
        &[
            ("transactional.id", id.as_str()),
            ("linger.ms", "0"),
            // Long enough that the abort surely comes while the batch waits for its resend.
            ("retry.backoff.ms", "3000"),
            ("retry.backoff.max.ms", "3000"),
        ],
    ))
    .await
    .unwrap();
    p.init_transactions().await.unwrap();
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["first".to_owned()].into_iter()).await;
    p.commit_transaction().await.unwrap();

    p.begin_transaction().unwrap();
    proxy
        .faults
        .drop_next_produce_responses
        .store(1, std::sync::atomic::Ordering::Relaxed);
    let before = p.metrics().batches_retried;
    send_values(&p, &topic.name, 1, ["aborted".to_owned()].into_iter()).await;
    // The broker wrote the batch, its response was dropped: wait until it is queued again.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while p.metrics().batches_retried == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the batch whose response was dropped was never queued for a retry"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    p.abort_transaction().await.unwrap();

    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["next".to_owned()].into_iter()).await;
    p.commit_transaction().await.unwrap();
    assert_eq!(
        java_values(&topic.name, 2, "read_committed").await,
        vec!["first", "next"],
        "the next transaction's record must be visible"
    );
}

/// A committable prepared with nothing sent has nothing to commit. The producer's next
/// transaction has the same producer id and epoch (no EndTxn ended the empty one), so a resume
/// that sent EndTxn would commit that later transaction in its place.
#[tokio::test]
async fn resuming_an_empty_committable_commits_nothing() {
    let topic = TestTopic::create("txn-empty-resume", 1).await;
    let p = txn_producer(&unique_topic("txn-empty-resume"), &[]).await;
    p.begin_transaction().unwrap();
    let empty = p.prepare_commit().await.unwrap();
    p.commit_transaction().await.unwrap();
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["later".to_owned()].into_iter()).await;
    p.flush().await.unwrap();
    let cluster = onceflow::client::Cluster::connect(client_config(&broker()))
        .await
        .unwrap();
    let outcome =
        onceflow::client::transactions::resume_transaction(&cluster, &empty, TxnEnd::Commit)
            .await
            .unwrap();
    assert!(empty.empty);
    assert_eq!(
        outcome,
        ResumeOutcome::NothingToCommit,
        "resuming the empty committable must do nothing"
    );
    // The later transaction is still the producer's own to end: aborted, nothing is visible.
    p.abort_transaction().await.unwrap();
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["after".to_owned()].into_iter()).await;
    p.commit_transaction().await.unwrap();
    assert_eq!(
        java_values(&topic.name, 1, "read_committed").await,
        vec!["after"]
    );
}

/// `send` before init_transactions() is refused with an error that says what to call, and
/// the producer then works normally (it used to accept the record and hang the next commit).
#[tokio::test]
async fn send_before_init_transactions_is_refused() {
    let topic = TestTopic::create("txn-send-early", 1).await;
    let p = Producer::new(producer_config(
        &broker(),
        &[("transactional.id", unique_topic("txn-send-early").as_str())],
    ))
    .await
    .unwrap();
    let e = match p
        .send(ProducerRecord::new(topic.name.clone(), "early").with_partition(0))
        .await
    {
        Ok(_) => panic!("send before init_transactions() was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("init_transactions()"), "{e}");
    tokio::time::timeout(Duration::from_secs(120), async {
        p.init_transactions().await.unwrap();
        p.begin_transaction().unwrap();
        send_values(&p, &topic.name, 1, ["ok".to_owned()].into_iter()).await;
        p.commit_transaction().await.unwrap();
    })
    .await
    .expect("init, begin, send, commit after the refused send did not finish");
    assert_eq!(
        java_values(&topic.name, 1, "read_committed").await,
        vec!["ok"]
    );
}

/// Between commit and the next begin_transaction() there is no transaction: a record sent then
/// would be written outside any transaction (and later aborted by the coordinator). Refused.
#[tokio::test]
async fn send_outside_a_transaction_is_refused() {
    let topic = TestTopic::create("txn-send-between", 1).await;
    let p = txn_producer(&unique_topic("txn-send-between"), &[]).await;
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["in".to_owned()].into_iter()).await;
    p.commit_transaction().await.unwrap();
    let e = match p
        .send(ProducerRecord::new(topic.name.clone(), "between").with_partition(0))
        .await
    {
        Ok(_) => panic!("send between commit and begin_transaction() was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("begin_transaction()"), "{e}");
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["next".to_owned()].into_iter()).await;
    p.commit_transaction().await.unwrap();
    assert_eq!(
        java_values(&topic.name, 2, "read_committed").await,
        vec!["in", "next"]
    );
}

/// At the last usable epoch (32766) a KIP-890 commit moves the transactional id to a new
/// producer id at epoch 0. The producer must carry on with the new id, and the committable
/// saved before the commit must resume as committed (not "fenced": the coordinator now shows
/// another producer id). At transaction.version 1 the commit keeps the id and epoch, and the
/// same steps must hold too.
#[tokio::test]
async fn a_commit_at_the_last_epoch_moves_to_a_new_producer_id_and_resumes_as_committed() {
    let topic = TestTopic::create("txn-epoch-exhausted", 1).await;
    let p = txn_producer(&unique_topic("txn-epoch-exhausted"), &[]).await;
    let (pid, _) = p.producer_id_and_epoch().unwrap();
    // Each InitProducerId bumps the epoch by one (well under a millisecond each here).
    loop {
        let (id, epoch) = p.producer_id_and_epoch().unwrap();
        assert_eq!(id, pid, "the producer id changed before the last epoch");
        if epoch == i16::MAX - 1 {
            break;
        }
        p.init_transactions().await.unwrap();
    }
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["last-epoch".to_owned()].into_iter()).await;
    let saved = p.prepare_commit().await.unwrap();
    assert_eq!(saved.producer_epoch, i16::MAX - 1);
    p.commit_transaction().await.unwrap();
    let (next_id, next_epoch) = p.producer_id_and_epoch().unwrap();
    if saved.transaction_version >= 2 {
        assert_ne!(next_id, pid, "KIP-890 moves to a new producer id");
        assert_eq!(next_epoch, 0);
    }
    let cluster = onceflow::client::Cluster::connect(client_config(&broker()))
        .await
        .unwrap();
    let outcome =
        onceflow::client::transactions::resume_transaction(&cluster, &saved, TxnEnd::Commit)
            .await
            .unwrap();
    assert_eq!(outcome, ResumeOutcome::AlreadyCommitted);
    // The next transaction runs under the new identity.
    p.begin_transaction().unwrap();
    send_values(&p, &topic.name, 1, ["next".to_owned()].into_iter()).await;
    p.commit_transaction().await.unwrap();
    assert_eq!(
        java_values(&topic.name, 2, "read_committed").await,
        vec!["last-epoch", "next"]
    );
}
