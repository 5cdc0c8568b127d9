//! The engine's exactly-once Kafka sink (`engine::sink::KafkaWriter`) against the real broker, at
//! whatever transaction.version it was formatted with (run at 2 on 9192 and at 1 on 9196).
//!
//! Each test drives the sink as the runtime will, without a runtime: write, barrier N,
//! checkpoint N durable, release; and a "crash" is dropping the sink, a restart is
//! `KafkaWriter::resume` with the committables the durable checkpoint holds, then
//! `Resumed::start` (`KafkaWriter::recover` does both where no resolution needs persisting).

use crate::support::*;
use bytes::Bytes;
use onceflow::client::transactions::{ResumeOutcome, TxnState};
use onceflow::client::{Admin, Cluster, IsolationLevel, Offset, Producer, ProducerRecord};
use onceflow::engine::checkpoint::Settings;
use onceflow::engine::sink::{
    check_timeout_budget, Delivery, KafkaWriter, RecoveryReport, Resumed, SinkCommit,
    SinkCommittable, SinkConfig, SinkError, Written,
};
use std::time::Duration;

fn config(prefix: &str, delivery: Delivery, props: &[(&str, &str)]) -> SinkConfig {
    let mut p = vec![("linger.ms", "5")];
    p.extend_from_slice(props);
    SinkConfig::new(delivery, prefix, 0, producer_config(&broker(), &p))
}

async fn start(config: SinkConfig, restored: &[SinkCommittable]) -> (KafkaWriter, RecoveryReport) {
    let cluster = Cluster::connect(client_config(&broker())).await.unwrap();
    KafkaWriter::recover(config, cluster, restored)
        .await
        .unwrap()
}

fn values(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

async fn write_all(sink: &mut KafkaWriter, topic: &str, values: &[String]) {
    for v in values {
        let w = sink
            .write(ProducerRecord::new(topic.to_owned(), Bytes::from(v.clone())).with_partition(0))
            .await
            .unwrap();
        assert!(matches!(w, Written::Sent), "{w:?}");
    }
}

/// Every value a read_committed reader sees in the one-partition `topic`, in order (to the end).
async fn committed(topic: &TestTopic, expected: usize) -> Vec<String> {
    consume_all(
        &broker(),
        topic,
        expected,
        &[("isolation.level", "read_committed")],
    )
    .await
    .into_iter()
    .map(|r| String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap())
    .collect()
}

/// (last stable offset, high watermark) of partition 0.
async fn lso_and_hw(topic: &TestTopic) -> (i64, i64) {
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let tps = topic.tps();
    let lso = admin
        .list_offsets(&tps, Offset::End, IsolationLevel::ReadCommitted)
        .await
        .unwrap()[&tps[0]];
    let hw = admin
        .list_offsets(&tps, Offset::End, IsolationLevel::ReadUncommitted)
        .await
        .unwrap()[&tps[0]];
    (lso, hw)
}

/// Waits until partition 0 holds at least `n` entries (records sent but maybe not committed).
async fn wait_for_high_watermark(topic: &TestTopic, n: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, hw) = lso_and_hw(topic).await;
        if hw >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "partition 0 of {} did not reach {n} entries (at {hw})",
            topic.name
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Records of checkpoint N are written (and flushed by the barrier) but a read_committed
/// reader cannot see them — the last stable offset stays at the transaction's first record —
/// until checkpoint N is durable; then it sees each exactly once.
#[tokio::test]
async fn records_of_checkpoint_n_are_invisible_until_n_is_durable_then_visible_once() {
    let topic = TestTopic::create("sink-visible", 1).await;
    let prefix = unique_topic("sink-visible");
    let (mut sink, _) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    let v = values("n", 5);
    write_all(&mut sink, &topic.name, &v).await;
    let c = sink.on_barrier(1).await.unwrap().expect("a committable");
    assert_eq!(c.checkpoint, 1);
    assert_eq!(c.transaction.transactional_id, format!("{prefix}-0-0"));
    assert_eq!(
        lso_and_hw(&topic).await,
        (0, 5),
        "flushed by the barrier, invisible to read_committed"
    );
    assert!(sink.oldest_open_transaction_age() > Duration::ZERO);

    let done = sink.on_checkpoint_durable(1).await.unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].outcome, SinkCommit::Committed);
    sink.release(1);
    assert_eq!(sink.oldest_open_transaction_age(), Duration::ZERO);
    assert_eq!(committed(&topic, 5).await, v);
}

/// A checkpoint with no records gives no committable, and making it durable commits nothing:
/// no transaction was begun, the pool's ids stay as init left them.
#[tokio::test]
async fn a_checkpoint_without_records_gives_no_committable_and_commits_nothing() {
    let prefix = unique_topic("sink-empty");
    let (mut sink, _) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let id = format!("{prefix}-0-0");
    let before = admin.describe_transaction(&id).await.unwrap();

    assert_eq!(sink.on_barrier(1).await.unwrap(), None);
    assert!(sink.on_checkpoint_durable(1).await.unwrap().is_empty());
    sink.release(1);
    assert_eq!(sink.metrics().empty_checkpoints, 1);
    assert_eq!(sink.metrics().commits, 0);
    assert_eq!(sink.pool_counts().unwrap().free, 3);
    let after = admin.describe_transaction(&id).await.unwrap();
    assert_eq!(before, after, "nothing was sent for the empty checkpoint");
}

/// The crash between "checkpoint N persisted" and "N committed", with N+1's records already
/// on the broker in an open transaction: recovery resumes N's committable FIRST (it commits),
/// THEN the new pool's init aborts N+1. A read_committed reader sees N exactly once and never
/// N+1, and nothing is left open (LSO = high watermark).
#[tokio::test]
async fn recovery_commits_the_restored_committable_first_then_aborts_the_next_checkpoints_records()
{
    let topic = TestTopic::create("sink-crash", 1).await;
    let prefix = unique_topic("sink-crash");
    let (vn, vn1) = (values("n", 3), values("lingering", 3));
    let (mut old, _) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    write_all(&mut old, &topic.name, &vn).await;
    let c = old.on_barrier(1).await.unwrap().expect("a committable");
    write_all(&mut old, &topic.name, &vn1).await;
    wait_for_high_watermark(&topic, 6).await;
    drop(old); // the crash: checkpoint 1 is durable, its transaction not committed

    let (mut new, report) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[c]).await;
    assert_eq!(report.resumed.len(), 1);
    assert_eq!(
        report.resumed[0].outcome,
        onceflow::client::transactions::ResumeOutcome::Completed,
        "resumed before the pool's init could abort it"
    );
    assert_eq!(committed(&topic, 3).await, vn);
    let (lso, hw) = lso_and_hw(&topic).await;
    assert_eq!(lso, hw, "the lingering N+1 transaction was aborted");

    // And the new incarnation writes on.
    let v2 = values("n2", 2);
    write_all(&mut new, &topic.name, &v2).await;
    new.on_barrier(2).await.unwrap().expect("a committable");
    new.on_checkpoint_durable(2).await.unwrap();
    let mut want = vn.clone();
    want.extend(v2);
    assert_eq!(committed(&topic, 5).await, want);
}

/// The crash after the commit and before its resolution was durable: the restored committable
/// is already committed; resuming it is fine (AlreadyCommitted) and writes nothing twice.
#[tokio::test]
async fn resuming_an_already_committed_committable_at_recovery_is_fine() {
    let topic = TestTopic::create("sink-again", 1).await;
    let prefix = unique_topic("sink-again");
    let v = values("n", 4);
    let (mut old, _) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    write_all(&mut old, &topic.name, &v).await;
    let c = old.on_barrier(1).await.unwrap().expect("a committable");
    assert_eq!(
        old.on_checkpoint_durable(1).await.unwrap()[0].outcome,
        SinkCommit::Committed
    );
    drop(old);

    let (_new, report) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[c]).await;
    assert_eq!(
        report.resumed[0].outcome,
        onceflow::client::transactions::ResumeOutcome::AlreadyCommitted
    );
    assert_eq!(committed(&topic, 4).await, v);
}

/// The seeds' pitfall: the coordinator aborts checkpoint N's transaction (transaction.timeout.ms
/// too short) before N is durable. The commit must not pass silently: it fails with a
/// data-loss error that names transaction.timeout.ms and the checkpoint interval and timeout.
#[tokio::test]
async fn a_transaction_the_coordinator_aborted_before_the_commit_is_reported_as_data_loss() {
    let topic = TestTopic::create("sink-loss", 1).await;
    let prefix = unique_topic("sink-loss");
    let mut cfg = config(
        &prefix,
        Delivery::ExactlyOnce,
        &[("transaction.timeout.ms", "2000")],
    );
    cfg.commit_margin = Duration::from_millis(500);
    let (mut sink, _) = start(cfg, &[]).await;
    write_all(&mut sink, &topic.name, &values("lost", 3)).await;
    let c = sink.on_barrier(1).await.unwrap().expect("a committable");
    wait_until_the_coordinator_aborted(&c.transaction.transactional_id).await;

    let e = sink.on_checkpoint_durable(1).await.unwrap_err();
    assert!(
        matches!(e, SinkError::DataLoss { checkpoint: 1, .. }),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    for w in [
        "DATA LOSS",
        "transaction.timeout.ms=2000",
        "checkpoint.interval.ms",
        "checkpoint.timeout.ms",
        &c.transaction.transactional_id,
    ] {
        assert!(msg.contains(w), "'{w}' missing in: {msg}");
    }
    assert!(!e.is_restartable());
    let (lso, hw) = lso_and_hw(&topic).await;
    assert_eq!(lso, hw, "nothing left open");
}

/// The budget check against the real brokers' transaction.max.timeout.ms (Kafka's default,
/// 900000): transaction.timeout.ms=1000000 is refused with one line naming the setting and
/// the value to set; a budget that fits passes and reports the maximum.
#[tokio::test]
async fn the_budget_check_refuses_a_transaction_timeout_above_the_brokers_maximum() {
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let settings = Settings {
        transaction_timeout_ms: 1_000_000,
        interval_ms: 1_000,
        checkpoint_timeout_ms: 60_000,
        restart_allowance_ms: 60_000,
        ..Settings::default()
    };
    let msg = check_timeout_budget(&admin, &settings)
        .await
        .unwrap_err()
        .to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    for w in [
        "transaction.timeout.ms = 1000000",
        "transaction.max.timeout.ms = 900000",
        "set transaction.timeout.ms to 900000",
    ] {
        assert!(msg.contains(w), "'{w}' missing in: {msg}");
    }
    // 4 · (1 s + 60 s) + 60 s + 10 s = 314 s needed; 400 s fits under 900 s.
    let fits = Settings {
        transaction_timeout_ms: 400_000,
        ..settings
    };
    assert_eq!(
        check_timeout_budget(&admin, &fits).await.unwrap(),
        Duration::from_millis(900_000)
    );
}

/// An Ongoing transaction of this task's ids beyond the pool (an earlier run had a larger
/// pool) is found with ListTransactions at recovery and aborted: its records never become
/// visible and it no longer holds read_committed readers back.
#[tokio::test]
async fn recovery_aborts_an_ongoing_transaction_of_this_task_beyond_the_pool() {
    let topic = TestTopic::create("sink-beyond", 1).await;
    let prefix = unique_topic("sink-beyond");
    let beyond = format!("{prefix}-0-5");
    let p = Producer::new(producer_config(
        &broker(),
        &[("transactional.id", beyond.as_str()), ("linger.ms", "5")],
    ))
    .await
    .unwrap();
    p.init_transactions().await.unwrap();
    p.begin_transaction().unwrap();
    for v in values("beyond", 3) {
        p.send(ProducerRecord::new(topic.name.clone(), Bytes::from(v)).with_partition(0))
            .await
            .unwrap();
    }
    p.flush().await.unwrap();
    assert_eq!(lso_and_hw(&topic).await, (0, 3));

    let (_sink, report) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    assert_eq!(report.lingering_aborted, vec![beyond.clone()]);
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let d = admin.describe_transaction(&beyond).await.unwrap().unwrap();
    assert_ne!(d.state, TxnState::Ongoing, "{d:?}");
    let (lso, hw) = lso_and_hw(&topic).await;
    assert_eq!(lso, hw, "nothing left open");
    assert!(committed(&topic, 0).await.is_empty());
}

/// Two live jobs with one prefix: the second job's start fences the first's ids. The first
/// job's commit then finds its transaction aborted long before transaction.timeout.ms could
/// expire, and stops with a prefix-clash error (not restartable: a restart would fence the
/// other job back) rather than fencing in a loop.
#[tokio::test]
async fn a_second_job_with_the_same_prefix_stops_the_first_with_a_prefix_clash() {
    let topic = TestTopic::create("sink-clash", 1).await;
    let prefix = unique_topic("sink-clash");
    let (mut first, _) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    write_all(&mut first, &topic.name, &values("first", 2)).await;
    first.on_barrier(1).await.unwrap().expect("a committable");

    let (_second, _) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    let e = first.on_checkpoint_durable(1).await.unwrap_err();
    assert!(matches!(e, SinkError::PrefixClash { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&format!("'{prefix}-0'")), "{msg}");
    assert!(
        msg.contains("give each job its own transactional id prefix"),
        "{msg}"
    );
    assert!(!e.is_restartable());
}

/// The inverse (proof that the checks can fail): at-least-once, a crash after the barrier
/// flushed checkpoint N's records but before N was durable replays them from N's start, and a
/// reader sees every record twice.
#[tokio::test]
async fn at_least_once_replay_after_a_crash_shows_duplicates() {
    let topic = TestTopic::create("sink-alo", 1).await;
    let v = values("r", 3);
    let (mut old, _) = start(config("", Delivery::AtLeastOnce, &[]), &[]).await;
    write_all(&mut old, &topic.name, &v).await;
    assert_eq!(old.on_barrier(1).await.unwrap(), None);
    drop(old); // the crash: checkpoint 1 never became durable, the sources rewind

    let (mut new, _) = start(config("", Delivery::AtLeastOnce, &[]), &[]).await;
    write_all(&mut new, &topic.name, &v).await;
    new.on_barrier(1).await.unwrap();
    let mut want = v.clone();
    want.extend(v.clone());
    assert_eq!(committed(&topic, 6).await, want, "each record twice");
}

/// A restart that finds its restored committable aborted long before transaction.timeout.ms
/// could expire (another job with the same prefix started and fenced our ids meanwhile) stops
/// with a prefix-clash error at step 1, before its pool's init could fence the other job back.
#[tokio::test]
async fn a_restart_whose_restored_transaction_another_job_aborted_stops_with_a_prefix_clash() {
    let topic = TestTopic::create("sink-clash-restart", 1).await;
    let prefix = unique_topic("sink-clash-restart");
    let (mut first, _) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    write_all(&mut first, &topic.name, &values("first", 2)).await;
    let c = first.on_barrier(1).await.unwrap().expect("a committable");
    drop(first); // the crash, with checkpoint 1 durable

    let (_other, _) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    let cluster = Cluster::connect(client_config(&broker())).await.unwrap();
    let e = KafkaWriter::recover(config(&prefix, Delivery::ExactlyOnce, &[]), cluster, &[c])
        .await
        .unwrap_err();
    assert!(matches!(e, SinkError::PrefixClash { .. }), "{e:?}");
    assert!(e.to_string().contains("restored checkpoint 1"), "{e}");
}

/// Two live jobs with one prefix, the second starting while the first has records in an open
/// transaction: the second's init fences the first's id and aborts that transaction. The
/// first job's barrier then cannot prepare, and — the abort coming long before
/// transaction.timeout.ms could expire — it stops with a prefix-clash error, not a
/// restartable failure whose restart would fence the second job back.
#[tokio::test]
async fn a_second_job_fencing_an_open_transaction_stops_the_first_at_its_barrier() {
    let topic = TestTopic::create("sink-clash-open", 1).await;
    let prefix = unique_topic("sink-clash-open");
    let (mut first, _) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    write_all(&mut first, &topic.name, &values("first", 2)).await;
    wait_for_high_watermark(&topic, 2).await;

    let (_second, _) = start(config(&prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    let e = first.on_barrier(1).await.unwrap_err();
    assert!(matches!(e, SinkError::PrefixClash { .. }), "{e:?}");
    assert!(!e.is_restartable());
}

/// With every transactional id busy (two checkpoints prepared in a pool of two), `write` does
/// not wait and does not grow the pool: it answers back-pressure and hands the record back.
/// A committed checkpoint's slot stays busy until its resolution is durable (`release`); then
/// the record handed back is written, into the lowest slot.
#[tokio::test]
async fn a_full_pool_answers_backpressure_with_the_record_until_a_release() {
    let topic = TestTopic::create("sink-full", 1).await;
    let prefix = unique_topic("sink-full");
    let mut cfg = config(&prefix, Delivery::ExactlyOnce, &[]);
    cfg.pool_size = 2;
    let (mut sink, _) = start(cfg, &[]).await;
    let (v1, v2) = (values("one", 1), values("two", 1));
    write_all(&mut sink, &topic.name, &v1).await;
    sink.on_barrier(1).await.unwrap().expect("a committable");
    write_all(&mut sink, &topic.name, &v2).await;
    sink.on_barrier(2).await.unwrap().expect("a committable");

    let record = ProducerRecord::new(topic.name.clone(), Bytes::from("three-0")).with_partition(0);
    let Written::Backpressure { record, reason } = sink.write(record).await.unwrap() else {
        panic!("a pool of 2 with 2 prepared transactions must answer back-pressure");
    };
    assert!(reason.contains("2 prepared"), "{reason}");
    sink.on_checkpoint_durable(1).await.unwrap();
    let Written::Backpressure { record, .. } = sink.write(*record).await.unwrap() else {
        panic!("checkpoint 1's slot must stay busy until its resolution is durable");
    };
    assert_eq!(sink.metrics().backpressure, 2);
    sink.release(1);
    assert!(matches!(sink.write(*record).await.unwrap(), Written::Sent));
    let c3 = sink.on_barrier(3).await.unwrap().expect("a committable");
    assert_eq!(c3.transaction.transactional_id, format!("{prefix}-0-0"));
    sink.on_checkpoint_durable(3).await.unwrap();
    assert_eq!(
        committed(&topic, 3).await,
        vec!["one-0".to_owned(), "two-0".into(), "three-0".into()]
    );
}

/// A committable prepared for checkpoint 1 (durable) whose sink then crashed.
async fn prepared_and_crashed(topic: &TestTopic, prefix: &str, v: &[String]) -> SinkCommittable {
    let (mut old, _) = start(config(prefix, Delivery::ExactlyOnce, &[]), &[]).await;
    write_all(&mut old, &topic.name, v).await;
    let c = old.on_barrier(1).await.unwrap().expect("a committable");
    drop(old); // the crash: checkpoint 1 durable, its transaction not committed
    c
}

async fn resume(prefix: &str, restored: &[SinkCommittable]) -> Result<Resumed, SinkError> {
    let cluster = Cluster::connect(client_config(&broker())).await.unwrap();
    KafkaWriter::resume(
        config(prefix, Delivery::ExactlyOnce, &[]),
        cluster,
        restored,
    )
    .await
}

/// The crash window between a recovery's commit of the restored committable and its
/// resolution becoming durable, in the right order (resume, persist, start): the crash comes
/// before the pool's init, so the restart resumes the same committable again, finds it
/// AlreadyCommitted (nothing was lost) and starts.
#[tokio::test]
async fn a_crash_before_the_resolutions_are_durable_resumes_the_same_committable_as_already_committed(
) {
    let topic = TestTopic::create("sink-window", 1).await;
    let prefix = unique_topic("sink-window");
    let v = values("n", 3);
    let c = prepared_and_crashed(&topic, &prefix, &v).await;

    let first = resume(&prefix, std::slice::from_ref(&c)).await.unwrap();
    assert_eq!(first.resumed()[0].outcome, ResumeOutcome::Completed);
    drop(first); // the crash: the resolution was never persisted, the pool never started

    let again = resume(&prefix, &[c]).await.unwrap();
    assert_eq!(again.resumed()[0].outcome, ResumeOutcome::AlreadyCommitted);
    let (mut sink, report) = again.start().await.unwrap();
    assert_eq!(report.resumed.len(), 1);
    assert_eq!(committed(&topic, 3).await, v);
    let v2 = values("n2", 2);
    write_all(&mut sink, &topic.name, &v2).await;
    sink.on_barrier(2).await.unwrap().expect("a committable");
    sink.on_checkpoint_durable(2).await.unwrap();
    let mut want = v;
    want.extend(v2);
    assert_eq!(committed(&topic, 5).await, want);
}

/// The inverse (why the order matters): the pool's init (start) before the resolution is
/// durable, then the crash. The restart resumes the same committable, finds its id's epoch
/// bumped by that init, and fails — a prefix clash (or data loss) although it committed.
#[tokio::test]
async fn starting_the_pool_before_the_resolutions_are_durable_fails_the_next_restart() {
    let topic = TestTopic::create("sink-window-inv", 1).await;
    let prefix = unique_topic("sink-window-inv");
    let v = values("n", 3);
    let c = prepared_and_crashed(&topic, &prefix, &v).await;

    let (first, report) = resume(&prefix, std::slice::from_ref(&c))
        .await
        .unwrap()
        .start()
        .await
        .unwrap();
    assert_eq!(report.resumed[0].outcome, ResumeOutcome::Completed);
    drop(first); // the crash: the resolution was never persisted, but the pool's init ran

    let e = resume(&prefix, &[c]).await.unwrap_err();
    assert!(
        matches!(
            e,
            SinkError::PrefixClash { .. } | SinkError::DataLoss { .. }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("checkpoint 1's"), "{e}");
    assert_eq!(committed(&topic, 3).await, v, "yet nothing was lost");
}
