//! `onceflow run` at parallelism 2 end to end against a real broker (engine_run.rs's approach):
//! the shipped jobs, their names replaced and `settings.parallelism = 2`, over rides in a
//! 3-partition topic (source subtask 0 reads partitions 0 and 2, subtask 1 partition 1),
//! SIGKILLed once some output is committed, started again on the same state; `onceflow taxi
//! verify` then finds every expected record once and each driver's records in order (a
//! driver's records go through one subtask). Transactional: run on TV2 (9192) and TV1 (9196).

use crate::engine_run::{
    assert_running, committed_count, job_file, log_of, plain_log, sigterm, start_job,
    start_job_with_env, taxi, wait_for_verify_ok,
};
use crate::support::cli::{shown, stdout};
use crate::support::*;
use onceflow::client::transactions::{ListTransactionsFilter, TxnState};
use onceflow::client::{Admin, IsolationLevel, Offset, TopicPartition};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(240);

/// The shipped job with its names replaced, `settings.parallelism = 2` and checkpoints every
/// 200 ms (so the first commit comes long before the input is read).
pub(crate) fn parallel_job(
    dir: &Path,
    shipped: &str,
    input: &str,
    output: &str,
    prefix: &str,
) -> PathBuf {
    let path = job_file(dir, shipped, input, output, prefix);
    let text = std::fs::read_to_string(&path).unwrap();
    for line in ["\nparallelism = 1", "\ncheckpoint.interval.ms = 1000"] {
        assert!(text.contains(line), "{shipped} has no {line:?}");
    }
    let text = text
        .replace("\nparallelism = 1", "\nparallelism = 2")
        .replace(
            "\ncheckpoint.interval.ms = 1000",
            "\ncheckpoint.interval.ms = 200",
        );
    std::fs::write(&path, text).unwrap();
    path
}

/// Whether the job's log says one of its sink's transactions committed.
fn committed_a_transaction(log: &Path) -> bool {
    plain_log(log)
        .lines()
        .any(|l| l.contains("transaction ended") && l.contains("commit=true"))
}

/// The sum over partitions of the input offsets the job's source started at (the restored
/// checkpoint's positions), from its "source positioned" line: `..., partition: 0 }: 12458, ...`;
/// `None` before that line.
fn positioned_total(log: &Path) -> Option<u64> {
    let text = plain_log(log);
    let line = text.lines().find(|l| l.contains("source positioned"))?;
    let offsets = line.split("}: ").skip(1).filter_map(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u64>().ok()
    });
    Some(offsets.sum())
}

/// Waits until the job's log says one of its transactions committed (failing if it exits or
/// DEADLINE passes).
async fn wait_for_a_commit(child: &mut std::process::Child, log: &Path) {
    wait_for_a_commit_unless(child, log, || false).await;
}

/// [`wait_for_a_commit`], but gives up (returning false) as soon as `give_up` holds.
async fn wait_for_a_commit_unless(
    child: &mut std::process::Child,
    log: &Path,
    give_up: impl Fn() -> bool,
) -> bool {
    let start = Instant::now();
    while !committed_a_transaction(log) {
        assert_running(child, log);
        if give_up() {
            return false;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no output committed within {DEADLINE:?}:\n{}",
            log_of(log)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Generates `generate` rides into a 3-partition topic, runs `shipped` at parallelism 2,
/// SIGKILLs it once output is committed, restarts it at parallelism `restart_at` on the same
/// state, and waits for `taxi verify --job verify_job` to say OK.
async fn killed_and_restarted(
    shipped: &str,
    verify_job: &str,
    generate: &[&str],
    name: &str,
    restart_at: usize,
) {
    let input = TestTopic::create(&format!("{name}-in"), 3).await;
    let output = TestTopic::create(&format!("{name}-out"), 3).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-par"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut args = vec!["generate", "-t", &input.name];
    args.extend_from_slice(generate);
    let o = taxi(&args).await;
    assert!(o.status.success(), "{}", shown(&o));
    let prefix = unique_topic(name);
    let job = parallel_job(&dir, shipped, &input.name, &output.name, &prefix);
    let log1 = dir.join("run1.log");

    // First run: SIGKILL as soon as one checkpoint's output is committed.
    let mut first = start_job(&job, &log1, &["--fresh"]);
    wait_for_a_commit(&mut first, &log1).await;
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(
        plain_log(&log1).matches("source subtask starting").count(),
        2,
        "the first run did not start two source subtasks:\n{}",
        log_of(&log1)
    );

    // Second run on the same state: recovers, catches up; the output is exact.
    let text = std::fs::read_to_string(&job).unwrap();
    let text = text.replace(
        "\nparallelism = 2",
        &format!("\nparallelism = {restart_at}"),
    );
    std::fs::write(&job, text).unwrap();
    let log2 = dir.join("run2.log");
    let mut second = start_job(&job, &log2, &[]);
    let o = wait_for_verify_ok(verify_job, &input.name, &output.name, &mut second, &log2).await;
    assert!(stdout(&o).starts_with("verify: OK"), "{}", shown(&o));
    assert!(
        log_of(&log2).contains("state restored"),
        "{}",
        log_of(&log2)
    );
    assert_eq!(
        plain_log(&log2).matches("source subtask starting").count(),
        restart_at,
        "the second run did not start {restart_at} source subtasks:\n{}",
        log_of(&log2)
    );
    sigterm(&second);
    let status = tokio::task::spawn_blocking(move || second.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}:\n{}", log_of(&log2));
    // Proof the kill left work to recover. (Not the output visible at the kill: a killed sink
    // task's open transaction holds read_committed readers at its LSO, on partitions the
    // other task committed to, until the restart fences it or transaction.timeout.ms.)
    let read = records_in_of_stopped_run(&log2);
    assert!(
        read > 0,
        "the restart read no input: the kill came after everything"
    );
    let total = committed_count(&output).await;
    eprintln!("{name}: the restart read {read} input records; {total} outputs in all");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `records_in` of the summary a run logs when it stops cleanly.
fn records_in_of_stopped_run(log: &Path) -> u64 {
    let text = plain_log(log);
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("stopped") && l.contains("records_in"))
        .unwrap_or_else(|| panic!("no stop summary in the log:\n{text}"));
    let after = line.split("records_in: ").nth(1).unwrap_or_default();
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no records_in in {line:?}"))
}

#[tokio::test]
async fn cleansing_at_parallelism_2_killed_and_restarted_writes_every_ride_exactly_once() {
    killed_and_restarted(
        "rides-cleansing.toml",
        "cleansing",
        &["--count", "20000"],
        "par-clean",
        2,
    )
    .await;
}

/// 20000 rides at two per second span 2.8 hours of event time: the first hour's windows close
/// (the first output) with about two thirds of the input still to read, and the restart
/// carries the open windows' accumulators over from the checkpoint.
#[tokio::test]
async fn per_driver_hourly_at_parallelism_2_killed_and_restarted_counts_every_ride_once() {
    killed_and_restarted(
        "rides-per-driver-hourly.toml",
        "per-driver-hourly",
        &["--count", "20000", "--rate", "2"],
        "par-hourly",
        2,
    )
    .await;
}

/// Rescale down: a cleansing job killed at parallelism 2 (sink task 1's transaction open: its
/// output is continuous) restarts at parallelism 1. Task 1's ids have no pool any more; unless
/// the restart aborts the transaction it left open, read_committed readers stay at its LSO
/// and the verifier never sees the rest of the output.
#[tokio::test]
async fn cleansing_killed_at_parallelism_2_and_restarted_at_1_writes_every_ride_exactly_once() {
    killed_and_restarted(
        "rides-cleansing.toml",
        "cleansing",
        &["--count", "20000"],
        "par-down",
        1,
    )
    .await;
}

/// Rescale up: the per-driver windows of a job killed at parallelism 2 move, with their key
/// groups, to 4 keyed subtasks (ranges of 32 instead of 64), and source subtask 3 has no
/// partition of the 3 to read: it still forwards barriers, and must not hold the watermark back.
#[tokio::test]
async fn per_driver_hourly_killed_at_parallelism_2_and_restarted_at_4_counts_every_ride_once() {
    killed_and_restarted(
        "rides-per-driver-hourly.toml",
        "per-driver-hourly",
        &["--count", "20000", "--rate", "2"],
        "par-up",
        4,
    )
    .await;
}

/// The transactional ids of sink task `task` (`<prefix>-<task>-<slot>`) whose open
/// transaction holds records on one of `partitions` now, with the offset its records start at
/// there (where that partition's last stable offset stops).
async fn holding_of_task(
    admin: &Admin,
    prefix: &str,
    task: u32,
    partitions: &[TopicPartition],
) -> BTreeMap<String, Vec<(TopicPartition, i64)>> {
    let filter = ListTransactionsFilter {
        states: vec![TxnState::Ongoing.as_str().to_owned()],
        ..Default::default()
    };
    let mine = format!("{prefix}-{task}-");
    let ongoing: Vec<_> = admin
        .list_transactions(&filter)
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.transactional_id.starts_with(&mine))
        .collect();
    let producers = admin.describe_producers(partitions).await.unwrap();
    let mut out = BTreeMap::new();
    for t in ongoing {
        let starts: Vec<_> = producers
            .iter()
            .filter(|p| p.producer_id == t.producer_id)
            .filter_map(|p| Some((p.partition.clone(), p.current_txn_start_offset?)))
            .collect();
        if !starts.is_empty() {
            out.insert(t.transactional_id, starts);
        }
    }
    out
}

/// The inverse of the rescale-down test: with the restart's abort of the retired tasks'
/// transactions switched off (`ONCEFLOW_TEST_SKIP=retire`), a transaction sink task 1 opened
/// after the restored checkpoint and left open when it was killed at parallelism 2 is still
/// open after the restart at parallelism 1 has committed output of its own, and that
/// committed output is invisible: the output's last stable offset stops at the retired
/// transaction's first record, so read_committed readers (the verifier) miss what follows.
///
/// Whether the kill leaves such a transaction is up to timing: the one open at the kill may
/// hold no records yet (at transaction.version 1, a kill between AddPartitionsToTxn and the
/// Produce; a CI run saw this), or be the restored checkpoint's prepared transaction, which
/// the restart rightly commits. Such an attempt proves nothing and is run again on fresh
/// topics and state (up to five); one must show the loss.
#[tokio::test]
async fn rescaled_down_without_aborting_the_retired_tasks_transaction_readers_miss_committed_output(
) {
    for attempt in 1..=5 {
        match retired_transaction_left_open(attempt).await {
            Some(verdict) => {
                eprintln!("par-noretire (attempt {attempt}): {}", verdict.trim());
                return;
            }
            None => eprintln!(
                "par-noretire (attempt {attempt}): no transaction of task 1 outlived the restore"
            ),
        }
    }
    panic!("in five attempts, no transaction of the retired task outlived the restart's restore");
}

/// One kill at parallelism 2 and restart at 1 with `retire` off; the verifier's verdict once
/// a transaction of retired task 1 holding records outlives the restart's recovery, `None`
/// when none did.
async fn retired_transaction_left_open(attempt: u32) -> Option<String> {
    let name = "par-noretire";
    let input = TestTopic::create(&format!("{name}-in"), 3).await;
    let output = TestTopic::create(&format!("{name}-out"), 3).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-par"));
    std::fs::create_dir_all(&dir).unwrap();
    let o = taxi(&["generate", "-t", &input.name, "--count", "20000"]).await;
    assert!(o.status.success(), "{}", shown(&o));
    let prefix = unique_topic(name);
    let job = parallel_job(
        &dir,
        "rides-cleansing.toml",
        &input.name,
        &output.name,
        &prefix,
    );
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let partitions: Vec<TopicPartition> = (0..3)
        .map(|p| TopicPartition::new(output.name.clone(), p))
        .collect();

    // First run(s) at parallelism 2: killed once sink task 1 has a transaction open (checked
    // again after the kill, with no writer running: a commit in flight may have closed it,
    // or it may hold no records yet; then run again).
    let mut lingering = BTreeMap::new();
    for run in 1..=5 {
        let log = dir.join(format!("run1-{run}.log"));
        let fresh: &[&str] = if run == 1 { &["--fresh"] } else { &[] };
        let mut first = start_job(&job, &log, fresh);
        let start = Instant::now();
        while !committed_a_transaction(&log)
            || holding_of_task(&admin, &prefix, 1, &partitions)
                .await
                .is_empty()
        {
            assert_running(&mut first, &log);
            if start.elapsed() > DEADLINE / 4 {
                // The job can read its whole input in a second or two; on a loaded machine the
                // moment task 1 holds records may pass between two looks, and then it never
                // comes again (a CI dry run waited the whole DEADLINE). This attempt proves
                // nothing: the caller runs another on fresh topics.
                assert!(
                    committed_a_transaction(&log),
                    "no output committed within {:?}:\n{}",
                    DEADLINE / 4,
                    log_of(&log)
                );
                first.kill().unwrap();
                first.wait().unwrap();
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        first.kill().unwrap();
        first.wait().unwrap();
        lingering = holding_of_task(&admin, &prefix, 1, &partitions).await;
        if !lingering.is_empty() {
            break;
        }
    }
    assert!(
        !lingering.is_empty(),
        "sink task 1 never left a transaction holding records open at a kill"
    );

    // The restart at parallelism 1, protection off: it commits output of its own.
    let text = std::fs::read_to_string(&job).unwrap();
    std::fs::write(&job, text.replace("\nparallelism = 2", "\nparallelism = 1")).unwrap();
    let log2 = dir.join("run2.log");
    let mut second = start_job_with_env(&job, &log2, &[], &[("ONCEFLOW_TEST_SKIP", "retire")]);
    // When the restored checkpoint had read the whole input (a kill late on a loaded machine: a
    // CI run restored positions 12458 + 12238 + 15304 of 40000 events), the restart has nothing
    // to write and never commits: this attempt proves nothing either.
    let inputs: Vec<TopicPartition> = (0..3)
        .map(|p| TopicPartition::new(input.name.clone(), p))
        .collect();
    let end: u64 = admin
        .list_offsets(&inputs, Offset::End, IsolationLevel::ReadCommitted)
        .await
        .unwrap()
        .values()
        .map(|&o| o as u64)
        .sum();
    if !wait_for_a_commit_unless(&mut second, &log2, || positioned_total(&log2) == Some(end)).await
    {
        eprintln!("par-noretire (attempt {attempt}): the restored checkpoint had read all {end} input records");
        second.kill().unwrap();
        second.wait().unwrap();
        for id in lingering.keys() {
            let _ = admin
                .fence_transactional_id(id, Duration::from_secs(60))
                .await;
        }
        let _ = std::fs::remove_dir_all(&dir);
        return None;
    }
    assert!(
        plain_log(&log2).contains("protection retire switched off"),
        "{}",
        log_of(&log2)
    );
    // The restored checkpoint's prepared transaction is committed by the restart, as it must
    // be; one opened after that checkpoint is the one that lingers, holding the LSO at the
    // offset its records start at.
    let still: BTreeMap<_, _> = holding_of_task(&admin, &prefix, 1, &partitions)
        .await
        .into_iter()
        .filter(|(id, starts)| lingering.get(id) == Some(starts))
        .collect();
    let verdict = if still.is_empty() {
        None
    } else {
        // The failure: behind the retired transaction, committed output is beyond what
        // read_committed readers can reach.
        let o = taxi(&[
            "verify",
            "--job",
            "cleansing",
            "--input",
            &input.name,
            "--output",
            &output.name,
        ])
        .await;
        let verdict = stdout(&o);
        assert!(
            verdict.contains("FAILED") && verdict.contains("missing"),
            "readers missed nothing with the retired transaction {still:?} open \
             (attempt {attempt}): {}",
            shown(&o)
        );
        Some(format!("held back by {still:?}; {}", verdict.trim()))
    };
    sigterm(&second);
    let status = tokio::task::spawn_blocking(move || second.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}:\n{}", log_of(&log2));
    // Abort what lingers, so the topics go quietly.
    for id in lingering.keys() {
        let _ = admin
            .fence_transactional_id(id, Duration::from_secs(60))
            .await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    verdict
}

/// The inverse of the parallel window tests: with barrier alignment switched off
/// (`ONCEFLOW_TEST_SKIP=alignment`), a keyed subtask snapshots at the first barrier N of its
/// two inputs, so the records of the other input still before its barrier N are in neither
/// N's state nor (their positions being in N) the replay after a restore. Killed once output
/// is committed and restarted from such a checkpoint, the job counts some drivers' hours
/// short: the verifier finds wrong counts.
///
/// Whether a kill catches records in flight at the restored checkpoint is up to timing (about
/// one run in six restores a checkpoint with nothing in flight and loses nothing; a CI dry run
/// once saw three such runs in a row): up to six attempts, each on fresh topics and state, and
/// one must show the wrong counts.
#[tokio::test]
async fn per_driver_hourly_at_parallelism_2_with_unaligned_barriers_counts_wrong_after_a_restart() {
    for attempt in 1..=6 {
        match unaligned_attempt().await {
            Some(verdict) => {
                eprintln!("par-unaligned (attempt {attempt}): {}", verdict.trim());
                return;
            }
            None => eprintln!("par-unaligned (attempt {attempt}): the restart lost nothing"),
        }
    }
    panic!("in six attempts, unaligned snapshots never lost a record across a restart");
}

/// One kill and restart with alignment off; the verifier's verdict once it finds wrong
/// counts, `None` when the restart caught up with none.
async fn unaligned_attempt() -> Option<String> {
    let name = "par-unaligned";
    let input = TestTopic::create(&format!("{name}-in"), 3).await;
    let output = TestTopic::create(&format!("{name}-out"), 3).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-par"));
    std::fs::create_dir_all(&dir).unwrap();
    let args = [
        "generate",
        "-t",
        &input.name,
        "--count",
        "20000",
        "--rate",
        "2",
    ];
    let o = taxi(&args).await;
    assert!(o.status.success(), "{}", shown(&o));
    let prefix = unique_topic(name);
    let shipped = "rides-per-driver-hourly.toml";
    let job = parallel_job(&dir, shipped, &input.name, &output.name, &prefix);
    let off = [("ONCEFLOW_TEST_SKIP", "alignment")];
    let log1 = dir.join("run1.log");
    let mut first = start_job_with_env(&job, &log1, &["--fresh"], &off);
    wait_for_a_commit(&mut first, &log1).await;
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(
        plain_log(&log1).contains("protection alignment switched off"),
        "{}",
        log_of(&log1)
    );
    let log2 = dir.join("run2.log");
    let mut second = start_job_with_env(&job, &log2, &[], &off);
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let inputs: Vec<TopicPartition> = (0..3)
        .map(|p| TopicPartition::new(input.name.clone(), p))
        .collect();
    let start = Instant::now();
    // Done: the restart's checkpointed positions (published to the job's group) reached the
    // input's end, and no transaction committed for 2 s since (the last watermark's firing
    // goes into a checkpoint's transaction every 200 ms). Deciding "done" early only costs
    // another attempt: the test passes only on wrong counts.
    let mut done_at: Option<(usize, Instant)> = None;
    let verdict = loop {
        assert_running(&mut second, &log2);
        let commits = plain_log(&log2)
            .lines()
            .filter(|l| l.contains("transaction ended") && l.contains("commit=true"))
            .count();
        let o = taxi(&[
            "verify",
            "--job",
            "per-driver-hourly",
            "--input",
            &input.name,
            "--output",
            &output.name,
        ])
        .await;
        let verdict = stdout(&o);
        if verdict.contains("wrong") {
            break Some(verdict);
        }
        match done_at {
            Some((c, since)) if c == commits && since.elapsed() >= Duration::from_secs(2) => {
                break None
            }
            Some((c, _)) if c != commits => done_at = Some((commits, Instant::now())),
            _ => {}
        }
        if done_at.is_none() {
            let end = admin
                .list_offsets(&inputs, Offset::End, IsolationLevel::ReadCommitted)
                .await
                .unwrap();
            let read = admin
                .committed_offsets("rides-per-driver-hourly", &inputs)
                .await
                .unwrap();
            if inputs.iter().all(|tp| read.get(tp) == end.get(tp)) {
                done_at = Some((commits, Instant::now()));
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no wrong count within {DEADLINE:?}: {}\n{}",
            shown(&o),
            log_of(&log2)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    sigterm(&second);
    let status = tokio::task::spawn_blocking(move || second.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}:\n{}", log_of(&log2));
    let _ = std::fs::remove_dir_all(&dir);
    verdict
}

#[test]
fn the_positions_a_source_started_at_are_summed_from_its_log_line() {
    let dir = std::env::temp_dir().join(unique_topic("onceflow-positioned"));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("run.log");
    for (text, expected) in [
        ("state restored checkpoint=4\n", None),
        (
            "INFO source positioned positions=Positions { offsets: {TopicPartition { topic: \"in\", \
             partition: 0 }: 12458, TopicPartition { topic: \"in\", partition: 1 }: 12238, \
             TopicPartition { topic: \"in\", partition: 2 }: 15304}, file: None }\n",
            Some(40000),
        ),
        (
            "INFO source positioned positions=Positions { offsets: {}, file: None }\n",
            Some(0),
        ),
    ] {
        std::fs::write(&log, text).unwrap();
        assert_eq!(positioned_total(&log), expected, "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
