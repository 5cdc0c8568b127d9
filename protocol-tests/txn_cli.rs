//! Transactions through the `onceflow` binary: two-phase commit across processes (prepare,
//! kill -9, commit or abort from another process), transactional produce, and ending a stale
//! transaction that stalls read_committed consumers. Runs at whatever transaction.version the
//! broker was formatted with (scripts/test runs the suite at 2 and at 1).

use crate::support::cli::{self, onceflow_async, shown, stderr, stdout};
use crate::support::java::java_values;
use crate::support::*;
use onceflow::client::{Admin, IsolationLevel, Offset, TopicPartition};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Bound on the CLI's own calls: generous, for a loaded 2-core machine.
const API_TIMEOUT: &str = "default.api.timeout.ms=60000";
/// The prepared transactions must outlive the test, never be aborted by the coordinator.
const TXN_TIMEOUT: &str = "transaction.timeout.ms=300000";

/// Runs `onceflow ARGS -b BROKER -X default.api.timeout.ms=...` with `stdin`, off the runtime.
async fn onceflow(args: &[&str], stdin: &str) -> Output {
    let mut argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    argv.extend(["-b".into(), broker(), "-X".into(), API_TIMEOUT.into()]);
    onceflow_async(argv, stdin).await
}

/// A `produce --prepare-only` child; killed (SIGKILL) on drop if still running.
struct Preparer {
    child: Child,
    /// The JSON line it printed.
    prepared: String,
}

impl Preparer {
    /// Starts `onceflow produce --prepare-only` with `lines` on stdin and waits for its JSON
    /// line (the transaction is then written and prepared, not committed).
    async fn start(topic: &str, transactional_id: &str, lines: &[String]) -> Preparer {
        let args = vec![
            "produce".to_owned(),
            "-b".into(),
            broker(),
            "-t".into(),
            topic.into(),
            "-K".into(),
            ":".into(),
            "--transactional-id".into(),
            transactional_id.into(),
            "--prepare-only".into(),
            "-X".into(),
            TXN_TIMEOUT.into(),
            "-X".into(),
            API_TIMEOUT.into(),
        ];
        let input = lines.join("\n") + "\n";
        tokio::task::spawn_blocking(move || {
            let mut child = cli::command()
                .args(&args)
                .spawn()
                .expect("run onceflow produce --prepare-only");
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(input.as_bytes()).unwrap();
            drop(stdin); // EOF: the whole input is one transaction
            let out = child.stdout.take().unwrap();
            // Read the line on a thread so that a hung child fails the test instead of hanging.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut line = String::new();
                let r = BufReader::new(out).read_line(&mut line).map(|_| line);
                let _ = tx.send(r);
            });
            let line = rx.recv_timeout(Duration::from_secs(120));
            let mut preparer = Preparer {
                child,
                prepared: String::new(),
            };
            match line {
                Ok(Ok(l)) if !l.trim().is_empty() => preparer.prepared = l.trim().to_owned(),
                other => {
                    preparer.kill();
                    let mut err = String::new();
                    if let Some(mut e) = preparer.child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    panic!("no prepared transaction on stdout ({other:?}); stderr:\n{err}");
                }
            }
            preparer
        })
        .await
        .unwrap()
    }

    fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// kill -9 while it waits, and check it really died of it (no chance to commit or abort).
    fn kill_and_check(&mut self) {
        assert!(
            matches!(self.child.try_wait(), Ok(None)),
            "--prepare-only must wait, not exit"
        );
        self.child.kill().expect("SIGKILL");
        let status = self.child.wait().expect("reap the child");
        assert_eq!(status.signal(), Some(9), "{status}");
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.prepared)
            .unwrap_or_else(|e| panic!("prepared transaction is not JSON ({e}): {}", self.prepared))
    }
}

impl Drop for Preparer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn expected_tv() -> i64 {
    std::env::var("ONCEFLOW_EXPECT_TV").map_or(2, |v| v.parse().unwrap())
}

/// `key{i}:{prefix}-{i}`: keyed, so the transaction spans the topic's partitions.
fn keyed_lines(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("key{i}:{prefix}-{i}")).collect()
}

fn values_of(lines: &[String]) -> Vec<String> {
    let mut v: Vec<String> = lines
        .iter()
        .map(|l| l.split_once(':').map_or(l.as_str(), |(_, v)| v).to_owned())
        .collect();
    v.sort();
    v
}

/// Nothing of `lines` is visible under read_committed (to Java or onceflow), yet all of it is in
/// the log: read_uncommitted returns it (the proof the first check can fail).
async fn assert_aborted(topic: &TestTopic, lines: &[String]) {
    assert!(java_values(&topic.name, 0, "read_committed")
        .await
        .is_empty());
    assert!(our_values(topic, 0, "read_committed").await.is_empty());
    let expected = values_of(lines);
    let n = expected.len();
    assert_eq!(
        java_values(&topic.name, n, "read_uncommitted").await,
        expected
    );
    assert_eq!(our_values(topic, n, "read_uncommitted").await, expected);
}

/// What onceflow's consumer reads at an isolation level (at least `n`, then to the end).
async fn our_values(topic: &TestTopic, n: usize, isolation: &str) -> Vec<String> {
    let recs = consume_all(&broker(), topic, n, &[("isolation.level", isolation)]).await;
    let mut v: Vec<String> = recs
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
        .collect();
    v.sort();
    v
}

/// `{partition: (last stable offset, high watermark)}` as onceflow's admin client lists them.
async fn lso_and_hw(topic: &TestTopic) -> HashMap<i32, (i64, i64)> {
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let tps = topic.tps();
    let end = |level| admin.list_offsets(&tps, Offset::End, level);
    let lso = end(IsolationLevel::ReadCommitted).await.unwrap();
    let hw = end(IsolationLevel::ReadUncommitted).await.unwrap();
    tps.iter()
        .map(|tp| (tp.partition, (lso[tp], hw[tp])))
        .collect()
}

#[tokio::test]
async fn a_transaction_prepared_by_a_killed_process_is_committed_once_by_another() {
    let topic = TestTopic::create("txn-cli-2pc", 2).await;
    let id = unique_topic("txn-cli-2pc");
    let lines = keyed_lines("r", 20);
    let mut preparer = Preparer::start(&topic.name, &id, &lines).await;
    let p = preparer.json();
    assert_eq!(p["transactional_id"], id.as_str());
    assert_eq!(p["transaction_version"].as_i64(), Some(expected_tv()));
    preparer.kill_and_check();
    // Nothing is visible before the commit.
    assert!(our_values(&topic, 0, "read_committed").await.is_empty());

    let o = onceflow(&["txn", "commit", "--prepared", &preparer.prepared], "").await;
    assert!(o.status.success(), "{}", shown(&o));
    assert!(stdout(&o).starts_with("completed"), "{}", shown(&o));
    // Again, from a file this time: already committed, nothing written twice, exit 0.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prepared.json");
    std::fs::write(&file, format!("{}\n", preparer.prepared)).unwrap();
    let at_file = format!("@{}", file.display());
    let o = onceflow(&["txn", "commit", "--prepared", &at_file], "").await;
    assert!(o.status.success(), "{}", shown(&o));
    assert!(stdout(&o).starts_with("already committed"), "{}", shown(&o));
    // It cannot be aborted any more: exit 1.
    let o = onceflow(&["txn", "commit", "--prepared", &at_file, "--abort"], "").await;
    assert_eq!(o.status.code(), Some(1), "{}", shown(&o));
    assert!(stdout(&o).starts_with("not committed"), "{}", shown(&o));

    let expected = values_of(&lines);
    assert_eq!(
        java_values(&topic.name, 20, "read_committed").await,
        expected
    );
    assert_eq!(our_values(&topic, 20, "read_committed").await, expected);
}

#[tokio::test]
async fn a_transaction_prepared_by_a_killed_process_can_be_aborted() {
    let topic = TestTopic::create("txn-cli-2pc-abort", 2).await;
    let id = unique_topic("txn-cli-2pc-abort");
    let lines = keyed_lines("a", 12);
    let mut preparer = Preparer::start(&topic.name, &id, &lines).await;
    preparer.kill_and_check();

    let o = onceflow(
        &["txn", "commit", "--prepared", &preparer.prepared, "--abort"],
        "",
    )
    .await;
    assert!(o.status.success(), "{}", shown(&o));
    assert!(stdout(&o).starts_with("completed"), "{}", shown(&o));
    // Committing it now is refused: exit 1.
    let o = onceflow(&["txn", "commit", "--prepared", &preparer.prepared], "").await;
    assert_eq!(o.status.code(), Some(1), "{}", shown(&o));
    assert!(stdout(&o).starts_with("not committed"), "{}", shown(&o));

    assert_aborted(&topic, &lines).await;
}

#[tokio::test]
async fn produce_commits_every_n_records() {
    let topic = TestTopic::create("txn-cli-every-n", 1).await;
    let id = unique_topic("txn-cli-every-n");
    let lines: Vec<String> = (0..10).map(|i| format!("v-{i}")).collect();
    let o = onceflow(
        &[
            "produce",
            "-t",
            &topic.name,
            "--transactional-id",
            &id,
            "--txn-records",
            "3",
        ],
        &(lines.join("\n") + "\n"),
    )
    .await;
    assert!(o.status.success(), "{}", shown(&o));
    assert!(
        stderr(&o).contains("4 transaction(s) committed (10 records), 0 aborted"),
        "{}",
        shown(&o)
    );
    let expected = values_of(&lines);
    assert_eq!(
        java_values(&topic.name, 10, "read_committed").await,
        expected
    );
    assert_eq!(our_values(&topic, 10, "read_committed").await, expected);
    // Four transactions really were committed: one commit marker each after the 10 records.
    let (lso, hw) = lso_and_hw(&topic).await[&0];
    assert_eq!((lso, hw), (14, 14));
}

#[tokio::test]
async fn produce_with_abort_leaves_nothing_visible() {
    let topic = TestTopic::create("txn-cli-abort", 2).await;
    let id = unique_topic("txn-cli-abort");
    let lines = keyed_lines("x", 7);
    let o = onceflow(
        &[
            "produce",
            "-t",
            &topic.name,
            "-K",
            ":",
            "--transactional-id",
            &id,
            "--txn-records",
            "3",
            "--abort",
        ],
        &(lines.join("\n") + "\n"),
    )
    .await;
    assert!(o.status.success(), "{}", shown(&o));
    assert!(
        stderr(&o).contains("0 transaction(s) committed (0 records), 3 aborted (7 records)"),
        "{}",
        shown(&o)
    );
    assert_aborted(&topic, &lines).await;
}

#[tokio::test]
async fn txn_abort_unblocks_a_stalled_read_committed_consumer() {
    let topic = TestTopic::create("txn-cli-stall", 1).await;
    let tp = TopicPartition::new(topic.name.clone(), 0);
    let stale_id = unique_topic("txn-cli-stale");
    let live_id = unique_topic("txn-cli-live");
    let produce = |id: String, lines: Vec<String>| {
        let name = topic.name.clone();
        async move {
            let o = onceflow(
                &["produce", "-t", &name, "-K", ":", "--transactional-id", &id],
                &(lines.join("\n") + "\n"),
            )
            .await;
            assert!(o.status.success(), "{}", shown(&o));
        }
    };
    let before = keyed_lines("before", 3);
    let stuck = keyed_lines("stuck", 5);
    let after = keyed_lines("after", 4);

    // Committed, then a dead job's open transaction, then committed records behind it.
    produce(live_id.clone(), before.clone()).await;
    let mut preparer = Preparer::start(&topic.name, &stale_id, &stuck).await;
    preparer.kill_and_check();
    produce(live_id.clone(), after.clone()).await;
    // EndTxn returns before the markers are written; wait for them, so the offsets below hold.
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = admin.describe_transaction(&live_id).await.unwrap().unwrap();
        if d.state == onceflow::client::transactions::TxnState::CompleteCommit {
            break;
        }
        assert!(Instant::now() < deadline, "{live_id} stays in {}", d.state);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // `txn list` shows it ongoing (and old enough for --older-than-ms).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for args in [
        vec!["txn", "list"],
        vec!["txn", "list", "--state", "Ongoing"],
        vec![
            "txn",
            "list",
            "--state",
            "ongoing",
            "--older-than-ms",
            "1000",
        ],
    ] {
        let o = onceflow(&args, "").await;
        assert!(o.status.success(), "{}", shown(&o));
        let line = stdout(&o)
            .lines()
            .find(|l| l.split('\t').next() == Some(stale_id.as_str()))
            .map(str::to_owned);
        let line = line.unwrap_or_else(|| panic!("{args:?} misses {stale_id}: {}", shown(&o)));
        assert!(line.ends_with("\tOngoing"), "{line}");
    }
    let o = onceflow(&["txn", "list", "--older-than-ms", "3600000"], "").await;
    assert!(o.status.success(), "{}", shown(&o));
    assert!(!stdout(&o).contains(&stale_id), "{}", shown(&o));

    // The LSO is stuck at the open transaction's first offset, below the high watermark.
    let (lso, hw) = lso_and_hw(&topic).await[&0];
    assert!(lso < hw, "lso {lso} hw {hw}");
    let stale_pid = preparer.json()["producer_id"].as_i64().unwrap();
    let producers = admin
        .describe_producers(std::slice::from_ref(&tp))
        .await
        .unwrap();
    let stale = producers.iter().find(|p| p.producer_id == stale_pid);
    assert_eq!(
        stale.and_then(|p| p.current_txn_start_offset),
        Some(lso),
        "the stale transaction holds the LSO: {producers:?}"
    );
    assert_eq!(
        producers
            .iter()
            .filter_map(|p| p.current_txn_start_offset)
            .min(),
        Some(lso)
    );
    // `txn describe` shows the same.
    let o = onceflow(&["txn", "describe", "--transactional-id", &stale_id], "").await;
    assert!(o.status.success(), "{}", shown(&o));
    let text = stdout(&o);
    assert!(text.contains("state: Ongoing"), "{text}");
    assert!(text.contains(&format!("partitions: {tp}")), "{text}");
    assert!(
        text.contains(&format!("last stable offset {lso}, high watermark {hw}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("transaction open since offset {lso}")),
        "{text}"
    );
    // A read_committed consumer stalls: it sees the first transaction only, not the committed
    // records behind the open one.
    assert_eq!(
        our_values(&topic, 3, "read_committed").await,
        values_of(&before)
    );

    let o = onceflow(&["txn", "abort", "--transactional-id", &stale_id], "").await;
    assert!(o.status.success(), "{}", shown(&o));
    assert!(
        stdout(&o).contains("before: state Ongoing"),
        "{}",
        shown(&o)
    );
    assert!(stdout(&o).contains("fenced: "), "{}", shown(&o));
    let o = onceflow(&["txn", "describe", "--transactional-id", &stale_id], "").await;
    assert!(o.status.success(), "{}", shown(&o));
    assert!(!stdout(&o).contains("state: Ongoing"), "{}", shown(&o));

    // The LSO reaches the high watermark (the abort marker is written before InitProducerId
    // returns; allow for a slow machine anyway).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (lso, hw) = lso_and_hw(&topic).await[&0];
        if lso == hw {
            break;
        }
        assert!(Instant::now() < deadline, "lso {lso} stuck below hw {hw}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // read_committed now sees both committed transactions and none of the aborted records.
    let mut committed: Vec<String> = values_of(&before);
    committed.extend(values_of(&after));
    committed.sort();
    assert_eq!(our_values(&topic, 7, "read_committed").await, committed);
    assert_eq!(
        java_values(&topic.name, 7, "read_committed").await,
        committed
    );
    // Proof: the aborted records are in the log.
    assert_eq!(our_values(&topic, 12, "read_uncommitted").await.len(), 12);
}
