//! The engine's file ends, as the Flink field report ran them: job (c), taxi rides from a
//! CSV file into Kafka (`jobs/rides-file-to-kafka.toml`), and job (d), Kafka through the NYC
//! filter into part files (`jobs/rides-cleansing-to-files.toml`). Each runs as a child
//! `onceflow run`, SIGKILLed again and again on the same state, at random moments and in the
//! pause between "checkpoint persisted" and its commit (the runtime's test hook: for the file
//! sink, after the checkpoint is durable and before its files are renamed); a last run then
//! catches up and `onceflow taxi verify` must say OK: every input ride exactly once. The
//! inverses run the same kills at-least-once and must see duplicates.
//!
//! The seed (ONCEFLOW_CHAOS_SEED) picks the random moments; it is in every failure message.
//! Job (c) reads its file at a serving speed that makes the input last ~10 s, so kills land
//! while rides are still being read; job (d)'s input topic is produced while it runs.
//! Transactional: run at TV2 (9192) and TV1 (9196).

use crate::engine_run::{chaos_seed, feed, log_of, plain_log, sigterm, spawn_run, taxi, DEADLINE};
use crate::support::cli::{shown, stdout, Guarded};
use crate::support::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Kills per exactly-once test (half at random, half at the checkpoint-persisted pause).
const KILLS: usize = 8;

/// A shipped job file with its paths, names and settings replaced for this test: each
/// `(prefix, line)` pair replaces the line starting with `prefix`.
pub(crate) fn job_from(dir: &Path, shipped: &str, replace: &[(&str, String)]) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("jobs").join(shipped)).unwrap();
    let state = dir.join("state");
    let mut lines: Vec<String> = Vec::new();
    for l in text.lines() {
        let replaced = replace
            .iter()
            .find(|(p, _)| l.starts_with(p))
            .map(|(_, line)| line.clone());
        lines.push(match replaced {
            Some(line) => line,
            None if l.starts_with("state.dir = ") => {
                format!("state.dir = \"{}\"", state.display())
            }
            None => l.to_owned(),
        });
    }
    for (p, line) in replace {
        assert!(
            text.lines().any(|l| l.starts_with(p)),
            "{shipped} has no line starting with {p:?} (for {line:?})"
        );
    }
    let path = dir.join(shipped);
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

/// Where a kill lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    /// 0–`max_ms` after the run's first log line.
    Random { max_ms: u64 },
    /// In the pause the test hook makes once a checkpoint with committables is durable,
    /// before its commit (the Kafka transaction's, or the part files' rename).
    Persisted,
    /// As soon as the run's output topic grew past its end at the run's first durable
    /// checkpoint: records written after that checkpoint's barrier, which only the next
    /// checkpoint would cover (a kill at a random moment may land, on a loaded machine, where
    /// every record written is covered, and an at-least-once run then shows no duplicate).
    AfterCheckpoint,
}

/// The runs of one job on one state directory.
struct Runs {
    label: &'static str,
    job: PathBuf,
    dir: PathBuf,
    runs: usize,
    rng: StdRng,
    seed: u64,
    /// The partitions of the job's output topic (a Kafka sink), for [`Kill::AfterCheckpoint`].
    output: Vec<onceflow::client::TopicPartition>,
}

impl Runs {
    fn new(label: &'static str, job: PathBuf, dir: PathBuf) -> Runs {
        let seed = chaos_seed();
        Runs {
            label,
            job,
            dir,
            runs: 0,
            rng: StdRng::seed_from_u64(seed),
            seed,
            output: Vec::new(),
        }
    }

    /// The job's records and markers in its output topic, committed or not.
    async fn output_end(&self) -> i64 {
        let admin = onceflow::client::Admin::new(client_config(&broker()))
            .await
            .unwrap();
        admin
            .list_offsets(
                &self.output,
                onceflow::client::consumer::Offset::End,
                onceflow::client::IsolationLevel::ReadUncommitted,
            )
            .await
            .unwrap()
            .values()
            .sum()
    }

    fn spawn(&mut self, pause: Option<&str>) -> (Guarded, PathBuf) {
        self.runs += 1;
        let log = self.dir.join(format!("run{}.log", self.runs));
        let child = spawn_run(&self.job, &broker(), &log, self.runs == 1, pause);
        (child, log)
    }

    fn context(&self, log: &Path) -> String {
        format!(
            "{} (seed {}, run {}):\n{}",
            self.label,
            self.seed,
            self.runs,
            log_of(log)
        )
    }

    async fn wait_for(&self, what: &str, child: &mut Child, log: &Path, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "onceflow run exited ({status}) before {what}: {}",
                    self.context(log)
                );
            }
            assert!(
                start.elapsed() < DEADLINE,
                "no {what} within {DEADLINE:?}: {}",
                self.context(log)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// One run, killed (SIGKILL) where `kind` says.
    async fn kill_once(&mut self, kind: Kill) {
        let pause = (kind == Kill::Persisted).then_some("checkpoint-persisted");
        let (mut child, log) = self.spawn(pause);
        match kind {
            Kill::Random { max_ms } => {
                self.wait_for("first log line", &mut child, &log, || {
                    !log_of(&log).is_empty()
                })
                .await;
                let until =
                    Instant::now() + Duration::from_millis(self.rng.random_range(0..max_ms));
                self.wait_for("random moment", &mut child, &log, || {
                    Instant::now() >= until
                })
                .await;
            }
            Kill::AfterCheckpoint => {
                self.wait_for("a durable checkpoint", &mut child, &log, || {
                    plain_log(&log).contains("checkpoint durable")
                })
                .await;
                let covered = self.output_end().await;
                let start = Instant::now();
                while self.output_end().await <= covered {
                    if let Some(status) = child.try_wait().unwrap() {
                        panic!(
                            "onceflow run exited ({status}) before writing after its checkpoint: {}",
                            self.context(&log)
                        );
                    }
                    assert!(
                        start.elapsed() < DEADLINE,
                        "no output after the checkpoint within {DEADLINE:?}: {}",
                        self.context(&log)
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            Kill::Persisted => {
                self.wait_for("checkpoint-persisted pause", &mut child, &log, || {
                    plain_log(&log).contains("test pause at checkpoint-persisted")
                })
                .await;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// `kills` runs, alternating the kinds.
    async fn kill(&mut self, kinds: &[Kill], kills: usize) {
        for i in 0..kills {
            self.kill_once(kinds[i % kinds.len()]).await;
        }
    }

    /// A last run; polls `verify` until `done` holds for its verdict, then stops the run
    /// (SIGTERM) and returns the verdict.
    async fn last_run<F, Fut>(&mut self, verify: F, done: impl Fn(&str) -> bool) -> String
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Output>,
    {
        let (mut child, log) = self.spawn(None);
        let start = Instant::now();
        let verdict = loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the last run exited ({status}): {}", self.context(&log));
            }
            let o = verify().await;
            let verdict = stdout(&o);
            if done(&verdict) {
                break verdict.trim().to_owned();
            }
            assert!(
                start.elapsed() < DEADLINE,
                "verify did not settle within {DEADLINE:?}; last: {}\n{}",
                shown(&o),
                self.context(&log)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        sigterm(&child);
        let status = tokio::task::spawn_blocking(move || {
            let status = child.wait().unwrap();
            drop(child);
            status
        })
        .await
        .unwrap();
        assert!(status.success(), "{status}: {}", self.context(&log));
        eprintln!(
            "{}: {} runs, seed {}, {:.1} s to settle: {verdict}",
            self.label,
            self.runs,
            self.seed,
            start.elapsed().as_secs_f64()
        );
        verdict
    }
}

/// Job (c)'s input: `rides` rides (two events each) as TaxiRide CSV, gzip-compressed.
async fn rides_file(dir: &Path, rides: u32) -> PathBuf {
    let path = dir.join("rides.csv.gz");
    let o = taxi(&[
        "generate",
        "--format",
        "csv",
        "--output",
        path.to_str().unwrap(),
        "--count",
        &rides.to_string(),
        "--rate",
        "10",
    ])
    .await;
    assert!(o.status.success(), "{}", shown(&o));
    path
}

/// Job (c) with this test's file, topic, prefix and guarantee, served so that the input
/// lasts about fifteen seconds (2000 rides at 10 pick-ups per second of event time, drop-offs up
/// to ~45 min later: ~2900 s of event time at 200×, ~15 s) with events up to 60 s out of
/// order.
async fn file_to_kafka(label: &'static str, guarantee: &str) -> (Runs, PathBuf, TestTopic) {
    let dir = std::env::temp_dir().join(unique_topic("onceflow-files"));
    std::fs::create_dir_all(&dir).unwrap();
    let input = rides_file(&dir, 2000).await;
    let output = TestTopic::create(&format!("{label}-out"), 3).await;
    let prefix = unique_topic(label);
    let job = job_from(
        &dir,
        "rides-file-to-kafka.toml",
        &[
            ("path = ", format!("path = \"{}\"", input.display())),
            (
                "serving_speed_factor = ",
                "serving_speed_factor = 200".into(),
            ),
            ("topic = ", format!("topic = \"{}\"", output.name)),
            (
                "transactional.id.prefix = ",
                format!("transactional.id.prefix = \"{prefix}\""),
            ),
            (
                "delivery.guarantee = ",
                format!("delivery.guarantee = \"{guarantee}\""),
            ),
            (
                "checkpoint.interval.ms = ",
                "checkpoint.interval.ms = 200".into(),
            ),
        ],
    );
    let mut runs = Runs::new(label, job, dir);
    runs.output = output.tps();
    (runs, input, output)
}

async fn verify_copy(input: &Path, output: &str) -> Output {
    taxi(&[
        "verify",
        "--job",
        "copy",
        "--input-file",
        input.to_str().unwrap(),
        "--output",
        output,
        "--read-timeout-ms",
        "60000",
    ])
    .await
}

/// Job (c), SIGKILLed at random and in the pause after a checkpoint is durable, before its
/// transaction's commit: the output topic (read_committed) holds every ride of the file
/// exactly once. The restored reader resumes at the checkpoint's file offset with the events
/// its reordering buffer held then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rides_file_to_kafka_killed_again_and_again_writes_every_ride_exactly_once() {
    let (mut runs, input, output) = file_to_kafka("file-to-kafka", "exactly-once").await;
    runs.kill(&[Kill::Random { max_ms: 3000 }, Kill::Persisted], KILLS)
        .await;
    let verdict = runs
        .last_run(
            || verify_copy(&input, &output.name),
            |v| v.starts_with("verify: OK"),
        )
        .await;
    assert!(
        verdict.starts_with("verify: OK"),
        "seed {}: {verdict}",
        runs.seed
    );
    let _ = std::fs::remove_dir_all(&runs.dir);
}

/// The inverse: at-least-once, the same job killed at random moments while it writes writes
/// some rides twice (the replay from the last checkpoint), and the verifier says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rides_file_to_kafka_at_least_once_under_kills_writes_duplicates() {
    let (mut runs, input, output) = file_to_kafka("file-to-kafka-alo", "at-least-once").await;
    runs.kill(&[Kill::AfterCheckpoint], KILLS / 2).await;
    let verdict = runs
        .last_run(
            || verify_copy(&input, &output.name),
            |v| v.contains("duplicated") && !v.contains("missing"),
        )
        .await;
    assert!(
        verdict.contains("duplicated"),
        "seed {}: {verdict}",
        runs.seed
    );
    let _ = std::fs::remove_dir_all(&runs.dir);
}

/// Job (d) on an input topic produced while it runs (`taxi generate --produce-rate`), writing
/// part files of `roll_bytes` into `<dir>/out`.
async fn kafka_to_files(
    label: &'static str,
    guarantee: &str,
    roll_bytes: u64,
) -> (Runs, TestTopic, PathBuf, Guarded) {
    let dir = std::env::temp_dir().join(unique_topic("onceflow-files"));
    std::fs::create_dir_all(&dir).unwrap();
    let input = TestTopic::create(&format!("{label}-in"), 3).await;
    let out = dir.join("out");
    let job = job_from(
        &dir,
        "rides-cleansing-to-files.toml",
        &[
            ("topics = ", format!("topics = [\"{}\"]", input.name)),
            ("path = ", format!("path = \"{}\"", out.display())),
            (
                "rolling.size.bytes = ",
                format!("rolling.size.bytes = {roll_bytes}"),
            ),
            (
                "delivery.guarantee = ",
                format!("delivery.guarantee = \"{guarantee}\""),
            ),
            (
                "checkpoint.interval.ms = ",
                "checkpoint.interval.ms = 200".into(),
            ),
        ],
    );
    // Rides at 1500 events/s arriving while the job runs, for as long as the kills go on (the
    // caller stops the feeder after them, `stop_feeding`): a run killed at the
    // checkpoint-persisted pause needs input still coming (on a loaded machine eight kills
    // outlast any small amount fed at a fixed rate). 300,000 rides would take 400 s.
    let feeder = feed(&input.name, 300_000, 1500);
    (Runs::new(label, job, dir), input, out, feeder)
}

async fn verify_files(input: &str, out: &Path) -> Output {
    taxi(&[
        "verify",
        "--job",
        "cleansing",
        "--input",
        input,
        "--output-dir",
        out.to_str().unwrap(),
        "--read-timeout-ms",
        "60000",
    ])
    .await
}

/// Stops the feeder (SIGKILL): the input is what it had produced by then, which is what the
/// verifier reads. It must still have been running: a feeder that ended early (its 300,000
/// rides all sent, or a failure) would have left the last kills without input.
async fn stop_feeding(mut feeder: Guarded) {
    let early = feeder.try_wait().unwrap();
    assert!(
        early.is_none(),
        "taxi generate ended before the kills did: {early:?}"
    );
    tokio::task::spawn_blocking(move || {
        let _ = feeder.kill();
        feeder.wait().unwrap()
    })
    .await
    .unwrap();
}

/// Readers of the finished files never see a name starting with '.', and every finished
/// file's records are whole lines of JSON.
fn finished_files_are_whole(out: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(out).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{name} ends mid-line"
        );
        for line in text.lines() {
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap_or_else(|e| panic!("{name}: {e}: {line}"));
        }
        n += 1;
    }
    n
}

/// Job (d), SIGKILLed at random and between "checkpoint persisted" and "files renamed": the
/// finished part files hold every ride the filter keeps exactly once, in input order per
/// driver; the in-progress files of checkpoints that never completed are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rides_kafka_to_files_killed_again_and_again_writes_every_ride_exactly_once() {
    let (mut runs, input, out, feeder) =
        kafka_to_files("kafka-to-files", "exactly-once", 64 << 10).await;
    runs.kill(&[Kill::Random { max_ms: 2000 }, Kill::Persisted], KILLS)
        .await;
    stop_feeding(feeder).await;
    // At least one restart found a durable checkpoint's part files still in progress (a kill
    // in the persisted pause) and renamed them: the path the kills are there to prove.
    let renamed_at_recovery = (1..=runs.runs).any(|n| {
        plain_log(&runs.dir.join(format!("run{n}.log")))
            .lines()
            .any(|l| l.contains("file sink recovered") && !l.contains("files_committed: 0"))
    });
    assert!(
        renamed_at_recovery,
        "no restart renamed a restored checkpoint's files (seed {})",
        runs.seed
    );
    let verdict = runs
        .last_run(
            || verify_files(&input.name, &out),
            |v| v.starts_with("verify: OK"),
        )
        .await;
    assert!(
        verdict.starts_with("verify: OK"),
        "seed {}: {verdict}",
        runs.seed
    );
    let files = finished_files_are_whole(&out);
    assert!(files > 1, "only {files} finished part files");
    let _ = std::fs::remove_dir_all(&runs.dir);
}

/// The inverse: at-least-once, part files are final as soon as they close (here they roll
/// every 4 KiB, many times between two checkpoints), so a kill leaves rides of the records
/// after the last checkpoint in finished files, and the replay writes them again. (What a
/// crashed run left in progress is kept too, but only what reached the disk before the kill:
/// usually little.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rides_kafka_to_files_at_least_once_under_kills_writes_duplicates() {
    let (mut runs, input, out, feeder) =
        kafka_to_files("kafka-to-files-alo", "at-least-once", 4 << 10).await;
    runs.kill(&[Kill::Random { max_ms: 2000 }], KILLS / 2).await;
    stop_feeding(feeder).await;
    let verdict = runs
        .last_run(
            || verify_files(&input.name, &out),
            |v| v.contains("duplicated") && !v.contains("missing"),
        )
        .await;
    assert!(
        verdict.contains("duplicated"),
        "seed {}: {verdict}",
        runs.seed
    );
    let _ = std::fs::remove_dir_all(&runs.dir);
}
