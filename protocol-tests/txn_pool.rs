//! The producer per checkpoint (`client::pool::TransactionalPool`) against the real broker, at
//! whatever transaction.version it was formatted with (run at 2 on 9192 and at 1 on 9196).
//!
//! Each test is one step of a checkpointing sink's life: checkpoint N stays prepared in one
//! slot while N+1 runs in another, and N must commit exactly once afterwards.

use crate::support::*;
use bytes::Bytes;
use onceflow::client::pool::{OpenTransaction, PoolCounts, SlotState, TransactionalPool};
use onceflow::client::transactions::{resume_transaction, ResumeOutcome, TxnEnd, TxnState};
use onceflow::client::{Admin, Cluster, Error, Producer, ProducerRecord};
use std::collections::BTreeMap;

fn expected_tv() -> i16 {
    std::env::var("ONCEFLOW_EXPECT_TV").map_or(2, |v| v.parse().unwrap())
}

async fn pool_on(cluster: std::sync::Arc<Cluster>, prefix: &str, size: usize) -> TransactionalPool {
    TransactionalPool::init(
        cluster,
        producer_config(&broker(), &[("linger.ms", "5")]),
        prefix,
        size,
    )
    .await
    .unwrap()
}

async fn pool(prefix: &str, size: usize) -> TransactionalPool {
    let cluster = Cluster::connect(client_config(&broker())).await.unwrap();
    pool_on(cluster, prefix, size).await
}

fn values(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

/// Sends value i to partition i % partitions.
async fn send_all(open: &OpenTransaction, topic: &str, partitions: i32, values: &[String]) {
    for (i, v) in values.iter().enumerate() {
        open.send(
            ProducerRecord::new(topic.to_owned(), Bytes::from(v.clone()))
                .with_partition(i as i32 % partitions),
        )
        .await
        .unwrap();
    }
}

/// What a read_committed reader must see per partition, in offset order, when the groups of
/// `values` were sent with `send_all` and committed in this order.
fn expected_per_partition(partitions: i32, groups: &[&[String]]) -> BTreeMap<i32, Vec<String>> {
    let mut want: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for group in groups {
        for (i, v) in group.iter().enumerate() {
            want.entry(i as i32 % partitions)
                .or_default()
                .push(v.clone());
        }
    }
    want
}

/// Everything a read_committed consumer sees in `topic` (to the end of every partition), per
/// partition in offset order.
async fn committed_per_partition(topic: &TestTopic, expected: usize) -> BTreeMap<i32, Vec<String>> {
    let records = consume_all(
        &broker(),
        topic,
        expected,
        &[("isolation.level", "read_committed")],
    )
    .await;
    let mut got: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for r in records {
        got.entry(r.partition)
            .or_default()
            .push(String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap());
    }
    got
}

/// Checkpoint N stays prepared in slot 0 while N+1 is written through slot 1; N then commits
/// through its prepared slot, N+1 after it; a read_committed reader sees each record once, N's
/// before N+1's on every partition; and once N's slot is released, N+2 reuses slot 0 (the
/// lowest free id), whose producer learnt its next epoch from the commit, without
/// InitProducerId.
#[tokio::test]
async fn checkpoint_n_commits_from_its_prepared_slot_while_n_plus_1_runs_in_the_next() {
    let topic = TestTopic::create("pool-ckpt", 2).await;
    let pool = pool(&unique_topic("pool-ckpt"), 3).await;
    let (vn, vn1, vn2) = (values("n", 6), values("n1", 6), values("n2", 6));

    let n = pool.begin().await.unwrap();
    assert_eq!(n.slot(), 0);
    send_all(&n, &topic.name, 2, &vn).await;
    let n = n.prepare().await.unwrap();
    assert_eq!(n.committable().transaction_version, expected_tv());
    assert!(!n.committable().empty);

    let n1 = pool.begin().await.unwrap();
    assert_eq!(n1.slot(), 1, "N+1 takes the next free id");
    send_all(&n1, &topic.name, 2, &vn1).await;
    n1.flush().await.unwrap();
    assert_eq!(
        pool.counts(),
        PoolCounts {
            free: 1,
            open: 1,
            prepared: 1,
            ended: 0
        }
    );

    let n_epoch = n.committable().producer_epoch;
    let n = n.commit().await.unwrap();
    let n1 = n1.prepare().await.unwrap().commit().await.unwrap();
    n.release();
    let n2 = pool.begin().await.unwrap();
    assert_eq!(n2.slot(), 0, "N+2 reuses the lowest free slot");
    send_all(&n2, &topic.name, 2, &vn2).await;
    let n2 = n2.prepare().await.unwrap();
    // KIP-890: the commit's EndTxn gave slot 0's producer the next epoch; classic: unchanged.
    let bump = i16::from(expected_tv() >= 2);
    assert_eq!(n2.committable().producer_epoch, n_epoch + bump);
    n2.commit().await.unwrap().release();
    n1.release();
    assert_eq!(pool.states(), vec![SlotState::Free; 3]);

    assert_eq!(
        committed_per_partition(&topic, 18).await,
        expected_per_partition(2, &[&vn, &vn1, &vn2])
    );
}

/// While slot 0's transaction is prepared, slot 1's transaction (on another topic, so the open
/// one does not hold its last stable offset back) commits and is visible; slot 0's
/// transaction is still open at the coordinator with the producer id and epoch of its
/// committable (InitProducerId never touched its id) and commits afterwards.
#[tokio::test]
async fn a_prepared_slot_survives_the_next_slots_transaction_and_commits_after_it() {
    let topic_a = TestTopic::create("pool-survive-a", 1).await;
    let topic_b = TestTopic::create("pool-survive-b", 1).await;
    let pool = pool(&unique_topic("pool-survive"), 3).await;
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let (va, vb) = (values("a", 4), values("b", 4));

    let a = pool.begin().await.unwrap();
    send_all(&a, &topic_a.name, 1, &va).await;
    let a = a.prepare().await.unwrap();

    let b = pool.begin().await.unwrap();
    send_all(&b, &topic_b.name, 1, &vb).await;
    b.prepare().await.unwrap().commit().await.unwrap().release();
    assert_eq!(
        committed_per_partition(&topic_b, 4).await,
        expected_per_partition(1, &[&vb])
    );

    let saved = a.committable().clone();
    let d = admin
        .describe_transaction(&saved.transactional_id)
        .await
        .unwrap()
        .expect("slot 0's transactional id is known to its coordinator");
    assert_eq!(d.state, TxnState::Ongoing, "{d:?}");
    assert_eq!(
        (d.producer_id, d.producer_epoch),
        (saved.producer_id, saved.producer_epoch),
        "the prepared transaction's producer id and epoch were not changed"
    );

    a.commit().await.unwrap().release();
    assert_eq!(
        committed_per_partition(&topic_a, 4).await,
        expected_per_partition(1, &[&va])
    );
}

/// A crash with N prepared (slot 0) and N+1 open (slot 1): recovery resumes N's committable from
/// a new cluster connection FIRST, which commits it; only then does the new pool's init() run
/// InitProducerId on every id, which fences the old pool (its N+1 can no longer prepare) and
/// aborts N+1. The new pool then writes N+2 through slot 0.
#[tokio::test]
async fn recovery_resumes_the_prepared_committable_then_the_new_pool_fences_the_old_one() {
    let topic = TestTopic::create("pool-crash", 1).await;
    let prefix = unique_topic("pool-crash");
    let (vn, vn1, vn2) = (values("n", 3), values("zombie", 3), values("n2", 3));

    let old = pool(&prefix, 2).await;
    let n = old.begin().await.unwrap();
    send_all(&n, &topic.name, 1, &vn).await;
    let n = n.prepare().await.unwrap();
    let saved = n.committable().clone(); // in the durable checkpoint
    let zombie = old.begin().await.unwrap();
    send_all(&zombie, &topic.name, 1, &vn1).await;
    zombie.flush().await.unwrap();
    drop(n); // the crash: nothing ends N

    let cluster = Cluster::connect(client_config(&broker())).await.unwrap();
    assert_eq!(
        resume_transaction(&cluster, &saved, TxnEnd::Commit)
            .await
            .unwrap(),
        ResumeOutcome::Completed
    );
    let new = pool_on(cluster, &prefix, 2).await;
    assert!(
        zombie.prepare().await.is_err(),
        "the old pool's open transaction must be fenced by the new pool's init()"
    );

    let n2 = new.begin().await.unwrap();
    assert_eq!(n2.slot(), 0);
    send_all(&n2, &topic.name, 1, &vn2).await;
    n2.prepare()
        .await
        .unwrap()
        .commit()
        .await
        .unwrap()
        .release();
    assert_eq!(
        committed_per_partition(&topic, 6).await,
        expected_per_partition(1, &[&vn, &vn2]),
        "N once, the zombie's N+1 never, then N+2"
    );
}

/// With two slots busy (one open, one prepared, later one ended but not released), begin()
/// fails at once with an error that names the pool and what to do; it never grows the pool.
#[tokio::test]
async fn begin_on_a_pool_with_every_slot_busy_fails_with_a_clear_error() {
    let topic = TestTopic::create("pool-full", 1).await;
    let prefix = unique_topic("pool-full");
    let pool = pool(&prefix, 2).await;
    let a = pool.begin().await.unwrap();
    send_all(&a, &topic.name, 1, &values("a", 1)).await;
    let a = a.prepare().await.unwrap();
    let b = pool.begin().await.unwrap();

    let e = pool.begin().await.unwrap_err();
    assert!(matches!(e, Error::PoolExhausted { size: 2, .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "all 2 transactional ids of pool '{prefix}' are busy"
        )),
        "{msg}"
    );
    assert!(msg.contains("1 open, 1 prepared, 0 ended"), "{msg}");

    // An ended slot stays busy until released.
    let a = a.commit().await.unwrap();
    assert!(matches!(
        pool.begin().await.unwrap_err(),
        Error::PoolExhausted { ended: 1, .. }
    ));
    a.release();
    let c = pool.begin().await.unwrap();
    assert_eq!(c.slot(), 0);
    assert_eq!(pool.transactional_ids().len(), 2, "the pool never grows");
    c.abort().await.unwrap();
    b.abort().await.unwrap();
    assert_eq!(pool.counts().free, 2);
}

/// Dropping an open transaction frees its slot; the next begin() on it starts a fresh producer
/// whose InitProducerId aborts the dropped transaction, so its records are never visible.
#[tokio::test]
async fn an_open_transaction_dropped_is_aborted_before_its_slot_is_reused() {
    let topic = TestTopic::create("pool-drop-open", 1).await;
    let pool = pool(&unique_topic("pool-drop-open"), 2).await;
    let (dropped, next) = (values("dropped", 3), values("next", 3));
    let t = pool.begin().await.unwrap();
    send_all(&t, &topic.name, 1, &dropped).await;
    t.flush().await.unwrap();
    drop(t);
    assert_eq!(pool.counts().free, 2);

    let t = pool.begin().await.unwrap();
    assert_eq!(t.slot(), 0);
    send_all(&t, &topic.name, 1, &next).await;
    t.prepare().await.unwrap().commit().await.unwrap().release();
    assert_eq!(
        committed_per_partition(&topic, 3).await,
        expected_per_partition(1, &[&next])
    );
}

/// A slot ended through `resume` (the recovery path, which the slot's producer does not learn
/// the next epoch from under KIP-890) gets a fresh producer for its next transaction, which
/// commits.
#[tokio::test]
async fn a_slot_ended_through_resume_starts_its_next_transaction_on_a_fresh_producer() {
    let topic = TestTopic::create("pool-resume-slot", 1).await;
    let pool = pool(&unique_topic("pool-resume-slot"), 2).await;
    let (first, second) = (values("first", 3), values("second", 3));
    let t = pool.begin().await.unwrap();
    send_all(&t, &topic.name, 1, &first).await;
    let (outcome, ended) = t
        .prepare()
        .await
        .unwrap()
        .resume(TxnEnd::Commit)
        .await
        .unwrap();
    assert_eq!(outcome, ResumeOutcome::Completed);
    ended.release();

    let t = pool.begin().await.unwrap();
    assert_eq!(t.slot(), 0);
    send_all(&t, &topic.name, 1, &second).await;
    t.prepare().await.unwrap().commit().await.unwrap().release();
    assert_eq!(
        committed_per_partition(&topic, 6).await,
        expected_per_partition(1, &[&first, &second])
    );
}

/// Why the pool exists (the protection switched off): with ONE transactional id, getting a
/// producer for checkpoint N+1 with init_transactions while N is prepared aborts N. Resuming N's
/// committable then cannot commit it, and a read_committed reader never sees N's records.
#[tokio::test]
async fn without_a_pool_init_transactions_for_the_next_checkpoint_aborts_the_prepared_one() {
    let topic = TestTopic::create("pool-naive", 1).await;
    let id = unique_topic("pool-naive");
    let (vn, vn1) = (values("n", 3), values("n1", 3));
    let props = [("transactional.id", id.as_str()), ("linger.ms", "5")];

    let p = Producer::new(producer_config(&broker(), &props))
        .await
        .unwrap();
    p.init_transactions().await.unwrap();
    p.begin_transaction().unwrap();
    for v in &vn {
        p.send(ProducerRecord::new(
            topic.name.clone(),
            Bytes::from(v.clone()),
        ))
        .await
        .unwrap();
    }
    let saved = p.prepare_commit().await.unwrap();

    // The naive next checkpoint: the same id, a new producer, init_transactions.
    let next = Producer::new(producer_config(&broker(), &props))
        .await
        .unwrap();
    next.init_transactions().await.unwrap();
    next.begin_transaction().unwrap();
    for v in &vn1 {
        next.send(ProducerRecord::new(
            topic.name.clone(),
            Bytes::from(v.clone()),
        ))
        .await
        .unwrap();
    }
    next.commit_transaction().await.unwrap();

    let cluster = Cluster::connect(client_config(&broker())).await.unwrap();
    let outcome = resume_transaction(&cluster, &saved, TxnEnd::Commit)
        .await
        .unwrap();
    assert!(
        matches!(
            outcome,
            ResumeOutcome::NotCommitted { .. } | ResumeOutcome::Superseded { .. }
        ),
        "checkpoint N cannot be committed any more: {outcome:?}"
    );
    assert_eq!(
        committed_per_partition(&topic, 3).await,
        expected_per_partition(1, &[&vn1]),
        "N's records were aborted by the next checkpoint's InitProducerId"
    );
}

/// A crashed incarnation that is still running (a zombie) must not take its ids back: the new
/// pool's init() fenced it, and when the zombie's next begin() would replace a slot's producer
/// (here after it dropped an open transaction) it must refuse, naming the clash, instead of
/// running InitProducerId, which would fence the new pool in turn and abort its transaction.
#[tokio::test]
async fn a_fenced_pool_refuses_to_take_its_ids_back_from_the_new_incarnation() {
    let topic = TestTopic::create("pool-zombie", 1).await;
    let prefix = unique_topic("pool-zombie");
    let (lost, kept) = (values("lost", 3), values("kept", 3));

    let old = pool(&prefix, 2).await;
    let t = old.begin().await.unwrap();
    send_all(&t, &topic.name, 1, &lost).await;
    t.flush().await.unwrap();
    drop(t); // slot 0 of the old pool now needs a fresh producer before reuse

    let new = pool(&prefix, 2).await;
    let n = new.begin().await.unwrap();
    assert_eq!(n.slot(), 0);
    send_all(&n, &topic.name, 1, &kept).await;
    n.flush().await.unwrap();

    let e = old
        .begin()
        .await
        .expect_err("the fenced pool must not take slot 0's id back");
    assert!(matches!(e, Error::Fenced(_)), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&format!("{prefix}-0")), "{msg}");
    assert!(msg.contains("another producer"), "{msg}");

    n.prepare().await.unwrap().commit().await.unwrap().release();
    assert_eq!(
        committed_per_partition(&topic, 3).await,
        expected_per_partition(1, &[&kept])
    );
}

/// A prepared transaction the coordinator aborted after transaction.timeout.ms (checkpoint N's
/// output is lost): commit() fails and hands the slot back; committing it again goes through
/// resume_transaction and says it cannot be committed; `resume(Abort)` ends the slot. The pool
/// then refuses to take the id back (the coordinator moved its epoch, exactly as a newer
/// incarnation would), and a recovered pool's init() starts clean.
#[tokio::test]
async fn a_prepared_slot_that_timed_out_is_reported_and_ended_and_the_pool_stops() {
    let topic = TestTopic::create("pool-timeout", 1).await;
    let prefix = unique_topic("pool-timeout");
    let cluster = Cluster::connect(client_config(&broker())).await.unwrap();
    let pool = TransactionalPool::init(
        cluster,
        producer_config(
            &broker(),
            &[("linger.ms", "5"), ("transaction.timeout.ms", "2000")],
        ),
        prefix.clone(),
        2,
    )
    .await
    .unwrap();
    let t = pool.begin().await.unwrap();
    send_all(&t, &topic.name, 1, &values("lost", 3)).await;
    let t = t.prepare().await.unwrap();
    wait_until_the_coordinator_aborted(&t.committable().transactional_id).await;

    let failed = t.commit().await.unwrap_err();
    assert!(
        failed
            .error()
            .to_string()
            .contains("transaction.timeout.ms"),
        "{}",
        failed.error()
    );
    let failed = failed.into_slot().commit().await.unwrap_err();
    assert!(matches!(failed.error(), Error::Fenced(_)), "{failed:?}");
    assert!(
        failed.error().to_string().contains("cannot be committed"),
        "{}",
        failed.error()
    );
    let (outcome, ended) = failed.into_slot().resume(TxnEnd::Abort).await.unwrap();
    assert!(
        matches!(outcome, ResumeOutcome::NotCommitted { .. }),
        "{outcome:?}"
    );
    ended.release();

    let e = pool.begin().await.unwrap_err();
    assert!(matches!(e, Error::Fenced(_)), "{e:?}");
    assert!(e.to_string().contains(&format!("{prefix}-0")), "{e}");

    let recovered = pool_on(
        Cluster::connect(client_config(&broker())).await.unwrap(),
        &prefix,
        2,
    )
    .await;
    let t = recovered.begin().await.unwrap();
    let next = values("next", 3);
    send_all(&t, &topic.name, 1, &next).await;
    t.prepare().await.unwrap().commit().await.unwrap().release();
    assert_eq!(
        committed_per_partition(&topic, 3).await,
        expected_per_partition(1, &[&next])
    );
}

/// Consumed offsets sent into a slot's transaction are committed for the group when its
/// prepared slot commits (KIP-447 through the pool), together with its records.
#[tokio::test]
async fn offsets_sent_into_a_slot_commit_with_its_prepared_transaction() {
    let input = TestTopic::create("pool-offsets-in", 1).await;
    let out = TestTopic::create("pool-offsets-out", 1).await;
    let group = unique_topic("pool-offsets-group");
    let tp = onceflow::client::TopicPartition::new(input.name.clone(), 0);
    let pool = pool(&unique_topic("pool-offsets"), 2).await;
    let admin = Admin::new(client_config(&broker())).await.unwrap();

    let t = pool.begin().await.unwrap();
    let v = values("out", 2);
    send_all(&t, &out.name, 1, &v).await;
    t.send_offsets_to_transaction(
        &[(tp.clone(), 42)],
        &onceflow::client::producer::GroupMetadata::new(group.clone()),
    )
    .await
    .unwrap();
    t.prepare().await.unwrap().commit().await.unwrap().release();

    let committed = admin
        .committed_offsets(&group, std::slice::from_ref(&tp))
        .await
        .unwrap();
    assert_eq!(committed.get(&tp), Some(&42));
    assert_eq!(
        committed_per_partition(&out, 2).await,
        expected_per_partition(1, &[&v])
    );
}
