//! `onceflow run` started while its broker is down (restarting): it waits for a broker within
//! `restart.allowance.ms`, saying so, and then runs exactly once; with no allowance it fails
//! once `default.api.timeout.ms` has passed (as every start did before the wait), one line
//! naming both settings. A private broker (stopped and started again on its
//! data), so the shared one stays up for the other tests.

use crate::engine_files::job_from;
use crate::engine_run::{
    log_of, plain_log, poll_verify_at, sigterm, taxi_at, API_TIMEOUT, DEADLINE,
};
use crate::support::broker::PrivateBroker;
use crate::support::cli::{command, shown, stdout, Guarded};
use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// The private broker's port (port + 1000 in the TV1 run).
const PORT: u16 = 19542;

/// The cleansing job on the private broker's topics, its restart allowance `allowance_ms`.
async fn scenario(
    broker: &PrivateBroker,
    label: &str,
    allowance_ms: u64,
) -> (PathBuf, PathBuf, TestTopic, TestTopic) {
    let input = TestTopic::create_with(&broker.addr, &format!("{label}-in"), 3, &[]).await;
    let output = TestTopic::create_with(&broker.addr, &format!("{label}-out"), 3, &[]).await;
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
            (
                "# restart.allowance.ms = ",
                format!("restart.allowance.ms = {allowance_ms}"),
            ),
        ],
    );
    (dir, job, input, output)
}

/// `onceflow run JOB -b ADDR -X API_TIMEOUT` with its log in `log`.
fn start_run(job: &Path, addr: &str, api_timeout: &str, log: &Path) -> Guarded {
    let file = std::fs::File::create(log).unwrap();
    Guarded(
        command()
            .args([
                "run",
                job.to_str().unwrap(),
                "--fresh",
                "-b",
                addr,
                "-X",
                api_timeout,
            ])
            .env("ONCEFLOW_LOG", "onceflow=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start onceflow run"),
    )
}

/// Waits (up to [`DEADLINE`]) until the run's log says `what`, failing if the run exits first.
async fn wait_for_line(run: &mut Guarded, log: &Path, what: &str) {
    let start = Instant::now();
    while !plain_log(log).contains(what) {
        if let Some(status) = run.try_wait().unwrap() {
            panic!(
                "onceflow run exited ({status}) before saying {what:?}:\n{}",
                log_of(log)
            );
        }
        assert!(
            start.elapsed() < DEADLINE,
            "onceflow run did not say {what:?} within {DEADLINE:?}:\n{}",
            log_of(log)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_while_its_broker_restarts_waits_for_it_and_then_runs_exactly_once() {
    let broker = tokio::task::block_in_place(|| PrivateBroker::start(PORT));
    let (dir, job, input, output) = scenario(&broker, "start-wait", 120_000).await;
    let o = taxi_at(
        &broker.addr,
        &["generate", "-t", &input.name, "--count", "300"],
    )
    .await;
    assert!(o.status.success(), "{}", shown(&o));
    tokio::task::block_in_place(|| broker.run("stop"));

    let log = dir.join("run.log");
    let mut run = start_run(&job, &broker.addr, API_TIMEOUT, &log);
    wait_for_line(&mut run, &log, "no broker answers yet").await;
    tokio::task::block_in_place(|| broker.run("start"));
    wait_for_line(&mut run, &log, "a broker answered").await;

    let args = [
        "--job",
        "cleansing",
        "--input",
        &input.name,
        "--output",
        &output.name,
    ];
    let ok = |o: &Output| stdout(o).starts_with("verify: OK");
    poll_verify_at(&broker.addr, &args, &mut run, &log, "say OK", ok).await;
    sigterm(&run);
    let status = tokio::task::block_in_place(|| run.wait().unwrap());
    assert!(status.success(), "{status}:\n{}", log_of(&log));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The inverse: with no allowance (`restart.allowance.ms = 0`) the same start fails once
/// `default.api.timeout.ms` (here 3 s) has passed, exit 1, one line naming both settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_restart_allowance_a_run_started_while_its_broker_is_down_fails_at_once() {
    let broker = tokio::task::block_in_place(|| PrivateBroker::start(PORT + 10));
    let (dir, job, _input, _output) = scenario(&broker, "start-now", 0).await;
    tokio::task::block_in_place(|| broker.run("stop"));
    let log = dir.join("run.log");
    let mut run = start_run(&job, &broker.addr, "default.api.timeout.ms=3000", &log);
    let status = tokio::task::block_in_place(|| run.wait().unwrap());
    let text = plain_log(&log);
    assert_eq!(status.code(), Some(1), "{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.contains("restart.allowance.ms = 0 ms")
            && last.contains("default.api.timeout.ms = 3000 ms")
            && last.contains("connecting to the brokers"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
