//! A graceful stop of `onceflow run` (SIGTERM) against a real broker: the shipped cleansing
//! job at parallelism 2, rides arriving while it runs, the stop landing while a checkpoint
//! with transactions is being written (the test pause `checkpoint-persisted`, ended by the
//! stop) and after records of the next checkpoint were written. The stop must take a final
//! checkpoint, commit it and record that: exit 0, every record the run wrote visible to
//! read_committed readers, no transaction of the job left Ongoing, and a restart later than
//! `transaction.timeout.ms` resuming nothing and finishing the input exactly once. The inverse
//! runs the same stop with the final checkpoint switched off (`ONCEFLOW_TEST_SKIP`).

use crate::engine_files::job_from;
use crate::engine_run::{
    feed, log_of, sigterm, start_job, start_job_with_env, wait_for_verify_ok, DEADLINE,
};
use crate::support::cli::{shown, stdout, Guarded};
use crate::support::*;
use onceflow::client::consumer::Offset;
use onceflow::client::{Admin, IsolationLevel};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// The job's transaction timeout: a restart later than this finds any transaction the stop
/// left open aborted by the broker.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(35);

/// One stop scenario: its topics, job file, state and the rides feeding it.
struct Scenario {
    input: TestTopic,
    output: TestTopic,
    dir: PathBuf,
    job: PathBuf,
    prefix: String,
    feeder: Guarded,
}

impl Scenario {
    /// The cleansing job at parallelism 2, with a transaction timeout short enough to wait out
    /// (the budget: 3 × (1 s + 8 s) + 2 s + 3 s = 32 s ≤ 35 s), fed rides at 1,000 a second.
    async fn new(label: &str) -> Scenario {
        let input = TestTopic::create(&format!("{label}-in"), 3).await;
        let output = TestTopic::create(&format!("{label}-out"), 3).await;
        let dir = std::env::temp_dir().join(unique_topic(&format!("onceflow-{label}")));
        std::fs::create_dir_all(&dir).unwrap();
        let prefix = unique_topic(label);
        let job = job_from(
            &dir,
            "rides-cleansing.toml",
            &[
                ("topics = ", format!("topics = [\"{}\"]", input.name)),
                ("topic = ", format!("topic = \"{}\"", output.name)),
                (
                    "transactional.id.prefix = ",
                    format!("transactional.id.prefix = \"{prefix}\""),
                ),
                ("parallelism = ", "parallelism = 2".into()),
                (
                    "checkpoint.timeout.ms = ",
                    "checkpoint.timeout.ms = 8000".into(),
                ),
                (
                    "transaction.timeout.ms = ",
                    format!(
                        "transaction.timeout.ms = {}",
                        TRANSACTION_TIMEOUT.as_millis()
                    ),
                ),
                (
                    "# checkpoint.tolerable.failures = ",
                    "checkpoint.tolerable.failures = 2".into(),
                ),
                (
                    "# checkpoint.commit.margin.ms = ",
                    "checkpoint.commit.margin.ms = 3000".into(),
                ),
                (
                    "# restart.allowance.ms = ",
                    "restart.allowance.ms = 2000".into(),
                ),
            ],
        );
        // 300,000 rides would take 300 s: the feeder outlasts the scenario and is stopped
        // (dropped) by it.
        let feeder = feed(&input.name, 300_000, 1000);
        Scenario {
            input,
            output,
            dir,
            job,
            prefix,
            feeder,
        }
    }

    /// Starts the job with the pause at its third checkpoint with transactions, ended by the
    /// stop (and `env` besides); waits for the pause, then for output written after it (the
    /// next checkpoint's records, in a transaction the pause's checkpoint does not hold);
    /// then SIGTERMs it and waits for it to exit. Returns its log.
    async fn stop_during_a_persist(&self, log_name: &str, env: &[(&str, &str)]) -> PathBuf {
        let log = self.dir.join(log_name);
        let mut env = env.to_vec();
        env.extend([
            ("ONCEFLOW_TEST_PAUSE", "checkpoint-persisted:3"),
            ("ONCEFLOW_TEST_PAUSE_UNTIL", "stop"),
        ]);
        let mut job = start_job_with_env(&self.job, &log, &["--fresh"], &env);
        let start = Instant::now();
        while !log_of(&log).contains("test pause at checkpoint-persisted") {
            still_running(&mut job, &log, start, "reach the pause");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // More than the markers of the commits still under way (3 partitions × 2 sinks) can
        // add: records of the next transaction.
        let at_pause = written(&self.output).await;
        while written(&self.output).await < at_pause + 20 {
            still_running(&mut job, &log, start, "write output after the pause");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        sigterm(&job);
        let stopped = Instant::now();
        loop {
            if let Some(status) = job.try_wait().unwrap() {
                assert!(status.success(), "{status}:\n{}", log_of(&log));
                break;
            }
            if stopped.elapsed() > DEADLINE {
                let _ = job.kill();
                let _ = job.wait();
                panic!(
                    "the stop did not end within {DEADLINE:?}:\n{}",
                    log_of(&log)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        log
    }

    /// The job's transactional ids in state Ongoing now.
    async fn ongoing(&self) -> Vec<String> {
        ongoing_transactions(&broker(), &format!("{}-", self.prefix)).await
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        let _ = self.feeder.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Fails the test with the job's log when it exited or `what` took longer than [`DEADLINE`].
fn still_running(job: &mut Child, log: &Path, start: Instant, what: &str) {
    if let Some(status) = job.try_wait().unwrap() {
        panic!(
            "onceflow run exited ({status}) before it did {what}:\n{}",
            log_of(log)
        );
    }
    if start.elapsed() > DEADLINE {
        let _ = job.kill();
        let _ = job.wait();
        panic!(
            "onceflow run did not {what} within {DEADLINE:?}:\n{}",
            log_of(log)
        );
    }
}

/// The output's records and markers, committed or not: the sum of its end offsets.
async fn written(topic: &TestTopic) -> i64 {
    ends(topic, IsolationLevel::ReadUncommitted).await
}

async fn ends(topic: &TestTopic, isolation: IsolationLevel) -> i64 {
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    admin
        .list_offsets(&topic.tps(), Offset::End, isolation)
        .await
        .unwrap()
        .values()
        .sum()
}

/// "run: stopped after checkpoint N: X records in, Y out" → Y.
fn records_out(log: &Path) -> usize {
    let text = log_of(log);
    let line = text
        .lines()
        .find(|l| l.starts_with("run: stopped after checkpoint"))
        .unwrap_or_else(|| panic!("no summary line:\n{text}"));
    line.rsplit_once(", ")
        .and_then(|(_, out)| out.strip_suffix(" out"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("summary line not understood: {line}"))
}

/// How many records of `topic` read_committed readers see once its last stable offset has
/// caught up with its end (a commit's markers may still be on their way), waited for up to
/// 30 s; otherwise what they see then.
async fn committed_once_stable(topic: &TestTopic) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    while ends(topic, IsolationLevel::ReadCommitted).await
        < ends(topic, IsolationLevel::ReadUncommitted).await
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    crate::engine_run::committed_count(topic).await
}

#[tokio::test]
async fn a_stop_while_a_checkpoint_is_written_commits_everything_read_and_leaves_nothing_open() {
    let mut s = Scenario::new("stop-final").await;
    let log = s.stop_during_a_persist("run1.log", &[]).await;
    let stopped = Instant::now();
    assert!(
        s.feeder.try_wait().unwrap().is_none(),
        "the rides stopped arriving before the stop"
    );
    let text = log_of(&log);
    assert!(
        text.contains("stopped: the final checkpoint is committed"),
        "{text}"
    );

    // Nothing open, and everything the run wrote is visible to read_committed readers.
    let ongoing = s.ongoing().await;
    assert!(
        ongoing.is_empty(),
        "Ongoing after the stop: {ongoing:?}\n{text}"
    );
    let out = records_out(&log);
    assert!(out > 0, "the run wrote nothing:\n{text}");
    let committed = committed_once_stable(&s.output).await;
    assert_eq!(
        committed, out,
        "read_committed records vs the run's records out"
    );

    // A restart later than transaction.timeout.ms resumes nothing (the stop recorded its
    // commits) and, once the input stops growing, finishes it exactly once.
    let _ = s.feeder.kill();
    let _ = s.feeder.wait();
    // Not a window for something to happen: the scenario's condition is the time itself (a
    // transaction the stop had left open would be aborted by then, and nothing on the broker
    // shows that one is merely still open), so it is waited for as a duration.
    let wait = TRANSACTION_TIMEOUT + Duration::from_secs(2);
    tokio::time::sleep(wait.saturating_sub(stopped.elapsed())).await;
    let log2 = s.dir.join("run2.log");
    let mut second = start_job(&s.job, &log2, &[]);
    let o = wait_for_verify_ok(
        "cleansing",
        &s.input.name,
        &s.output.name,
        &mut second,
        &log2,
    )
    .await;
    assert!(stdout(&o).starts_with("verify: OK"), "{}", shown(&o));
    let text2 = crate::engine_run::plain_log(&log2);
    assert!(
        text2.contains("resumed=0"),
        "the restart resumed committables the stop left:\n{text2}"
    );
    crate::engine_run::stop(second, &log2).await;
    let ongoing = s.ongoing().await;
    assert!(
        ongoing.is_empty(),
        "Ongoing after the second stop: {ongoing:?}"
    );
}

/// The inverse: the same stop with the final checkpoint switched off returns at once. The
/// records written after the paused checkpoint's barrier stay in a transaction left Ongoing,
/// invisible to read_committed readers until the broker aborts it.
#[tokio::test]
async fn without_the_final_checkpoint_a_stop_leaves_a_transaction_open_and_output_unseen() {
    let s = Scenario::new("stop-nofinal").await;
    let log = s
        .stop_during_a_persist("run.log", &[("ONCEFLOW_TEST_SKIP", "final-checkpoint")])
        .await;
    let text = log_of(&log);
    assert!(
        text.contains("protection final-checkpoint switched off"),
        "{text}"
    );
    let ongoing = s.ongoing().await;
    assert!(
        !ongoing.is_empty(),
        "expected a transaction of the job left Ongoing:\n{text}"
    );
    let out = records_out(&log);
    let committed = crate::engine_run::committed_count(&s.output).await;
    assert!(
        committed < out,
        "expected records the run wrote to be unseen: {committed} of {out} seen"
    );
}
