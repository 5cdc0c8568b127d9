//! `onceflow run` end to end against a real broker: the shipped cleansing job (its file with
//! the topic names, transactional id prefix and state directory replaced) runs as a child
//! process over rides from `onceflow taxi generate`; it is SIGKILLed once some of its output
//! is committed, started again on the same state, and `onceflow taxi verify` then finds every
//! expected record once (no loss, no duplicates, order kept per key). Transactional: run on
//! TV2 (9192) and TV1 (9196).

use crate::support::cli::{command, onceflow_async, shown, stdout, Guarded};
use crate::support::proxy::Proxy;
use crate::support::*;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use onceflow::client::{Cluster, Consumer, Offset, ProducerRecord};
use onceflow::engine::formats::LineFormats;
use onceflow::engine::job::Job;
use onceflow::engine::runtime::{run, RunConfig};
use onceflow::engine::sink::{Delivery, KafkaWriter, SinkConfig, Written};
use onceflow::engine::state::{
    CheckpointRecord, Layout, RestoreFrom, StateError, StateStore, StoreOptions,
};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(crate) const API_TIMEOUT: &str = "default.api.timeout.ms=60000";
const RIDES: &str = "2000";
pub(crate) const DEADLINE: Duration = Duration::from_secs(240);

/// The shipped job file with its names replaced for this test.
pub(crate) fn job_file(
    dir: &Path,
    shipped: &str,
    input: &str,
    output: &str,
    prefix: &str,
) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("jobs").join(shipped)).unwrap();
    let state = dir.join("state");
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("topics = ") {
                format!("topics = [\"{input}\"]")
            } else if l.starts_with("topic = ") {
                format!("topic = \"{output}\"")
            } else if l.starts_with("transactional.id.prefix = ") {
                format!("transactional.id.prefix = \"{prefix}\"")
            } else if l.starts_with("state.dir = ") {
                format!("state.dir = \"{}\"", state.display())
            } else {
                l.to_owned()
            }
        })
        .collect();
    let path = dir.join(shipped);
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

/// How a test runs a shipped SQL job (`jobs/*.sql`).
pub(crate) struct SqlRewrite<'a> {
    /// `'topic' = 'from'` becomes `'topic' = 'to'`, per pair.
    pub topics: &'a [(&'a str, &'a str)],
    /// The sink's `sink.delivery-guarantee`.
    pub guarantee: &'a str,
    /// The sink's `sink.transactional-id-prefix`.
    pub prefix: &'a str,
    /// More WITH options of every table the job reads (after its `'scan.startup.mode'`).
    pub source_options: &'a str,
    /// The SET statements (the shipped ones are dropped; `state.dir` is the test's).
    pub sets: &'a [(&'a str, String)],
}

/// The shipped SQL job `shipped` rewritten for a test (see [`SqlRewrite`]), in `dir`.
pub(crate) fn sql_job_file(dir: &Path, shipped: &str, r: &SqlRewrite<'_>) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("jobs").join(shipped)).unwrap();
    let state = dir.join("state");
    let mut lines = vec![format!("SET 'state.dir' = '{}';", state.display())];
    lines.extend(r.sets.iter().map(|(k, v)| format!("SET '{k}' = '{v}';")));
    let mut seen = (0, false);
    for l in text.lines() {
        let t = l.trim_start();
        if t.starts_with("SET '") && !t.starts_with("SET 'pipeline.name'") {
            continue;
        }
        if t.starts_with("'sink.delivery-guarantee'") {
            continue;
        }
        let mut line = l.to_owned();
        for (from, to) in r.topics {
            let (a, b) = (format!("'topic' = '{from}'"), format!("'topic' = '{to}'"));
            if line.contains(&a) {
                seen.0 += 1;
                line = line.replace(&a, &b);
            }
        }
        if t.starts_with("'sink.transactional-id-prefix'") {
            seen.1 = true;
            line = format!(
                "  'sink.transactional-id-prefix' = '{}', 'sink.delivery-guarantee' = '{}'",
                r.prefix, r.guarantee
            );
        }
        if t.starts_with("'scan.startup.mode'") && !r.source_options.is_empty() {
            line = format!(
                "  'scan.startup.mode' = 'earliest-offset', {},",
                r.source_options
            );
        }
        lines.push(line);
    }
    assert_eq!(
        seen,
        (r.topics.len(), true),
        "{shipped}: topics or sink prefix not found"
    );
    let path = dir.join(shipped);
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

/// `onceflow run JOB -b BROKER EXTRA` in the background, its stderr into `log`.
pub(crate) fn start_job(job: &Path, log: &Path, extra: &[&str]) -> Child {
    start_job_with_env(job, log, extra, &[])
}

/// [`start_job`] with these environment variables set (test hooks).
pub(crate) fn start_job_with_env(
    job: &Path,
    log: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Child {
    let log = std::fs::File::create(log).unwrap();
    command()
        .args([
            "run",
            job.to_str().unwrap(),
            "-b",
            &broker(),
            "-X",
            API_TIMEOUT,
        ])
        .args(extra)
        .envs(env.iter().copied())
        .env("ONCEFLOW_LOG", "onceflow=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start onceflow run")
}

/// `taxi generate` producing `count` rides to `topic` at `rate` events a second, in the
/// background; the returned guard kills it when dropped.
pub(crate) fn feed(topic: &str, count: u32, rate: u32) -> Guarded {
    feed_with(topic, count, rate, &[])
}

/// [`feed`] with more `taxi generate` arguments (e.g. `--rate 1`: a ride per second of event
/// time).
pub(crate) fn feed_with(topic: &str, count: u32, rate: u32, extra: &[&str]) -> Guarded {
    Guarded(
        command()
            .args([
                "taxi",
                "generate",
                "-t",
                topic,
                "--count",
                &count.to_string(),
            ])
            .args(extra)
            .args(["--produce-rate", &rate.to_string(), "-b", &broker()])
            .args(["-X", API_TIMEOUT])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start taxi generate"),
    )
}

pub(crate) async fn taxi(args: &[&str]) -> Output {
    taxi_at(&broker(), args).await
}

/// `onceflow taxi ARGS -b BROKER`.
pub(crate) async fn taxi_at(broker: &str, args: &[&str]) -> Output {
    let mut argv: Vec<String> = vec!["taxi".into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    argv.extend(["-b".into(), broker.into(), "-X".into(), API_TIMEOUT.into()]);
    onceflow_async(argv, "").await
}

/// How many records of `topic` a read_committed reader sees now.
pub(crate) async fn committed_count(topic: &TestTopic) -> usize {
    let config = consumer_config(&broker(), &[("isolation.level", "read_committed")]);
    let mut c = Consumer::new(config).await.unwrap();
    for tp in c.assign_topics(&[&topic.name]).await.unwrap() {
        c.seek(&tp, Offset::Beginning).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n = 0;
    loop {
        n += c.poll(Duration::from_millis(200)).await.unwrap().len();
        if c.at_end() {
            return n;
        }
        assert!(
            Instant::now() < deadline,
            "reading {} to its end took over 60 s",
            topic.name
        );
    }
}

pub(crate) fn log_of(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Fails the test with the job's log when it exited.
pub(crate) fn assert_running(child: &mut Child, log: &Path) {
    if let Some(status) = child.try_wait().unwrap() {
        panic!("onceflow run exited ({status}):\n{}", log_of(log));
    }
}

/// Polls `taxi verify` until it says OK; returns its output.
pub(crate) async fn wait_for_verify_ok(
    job: &str,
    input: &str,
    output: &str,
    child: &mut Child,
    log: &Path,
) -> Output {
    let args = ["--job", job, "--input", input, "--output", output];
    poll_verify(&args, child, log, "say OK", |o| o.status.success()).await
}

/// Polls `taxi verify ARGS` (read timeout 60 s) every 500 ms while the job runs, until `done`
/// holds for its output (failing after [`DEADLINE`], saying it did not `what`); returns it.
pub(crate) async fn poll_verify(
    args: &[&str],
    child: &mut Child,
    log: &Path,
    what: &str,
    done: impl Fn(&Output) -> bool,
) -> Output {
    poll_verify_at(&broker(), args, child, log, what, done).await
}

/// [`poll_verify`] against `broker`.
pub(crate) async fn poll_verify_at(
    broker: &str,
    args: &[&str],
    child: &mut Child,
    log: &Path,
    what: &str,
    done: impl Fn(&Output) -> bool,
) -> Output {
    let start = Instant::now();
    loop {
        assert_running(child, log);
        let mut argv = vec!["verify", "--read-timeout-ms", "60000"];
        argv.extend(args);
        let o = taxi_at(broker, &argv).await;
        if done(&o) {
            return o;
        }
        if start.elapsed() >= DEADLINE {
            // The job must not outlive the failed test (it kept committing offsets to the
            // shared broker for minutes after a CI failure).
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "taxi verify did not {what} within {DEADLINE:?}; last: {}\njob log:\n{}",
                shown(&o),
                log_of(log)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub(crate) fn sigterm(child: &Child) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// SIGTERM and wait for a clean exit.
pub(crate) async fn stop(child: Child, log: &Path) {
    sigterm(&child);
    let mut child = child;
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}:\n{}", log_of(log));
}

/// The job's log without the terminal colour codes the log lines carry (`ESC[...m`).
pub(crate) fn plain_log(log: &Path) -> String {
    let text = log_of(log);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test]
async fn cleansing_run_killed_mid_stream_and_restarted_writes_every_ride_exactly_once() {
    let input = TestTopic::create("run-clean-in", 3).await;
    let output = TestTopic::create("run-clean-out", 3).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-run"));
    std::fs::create_dir_all(&dir).unwrap();
    let o = taxi(&["generate", "-t", &input.name, "--count", RIDES]).await;
    assert!(o.status.success(), "{}", shown(&o));
    let prefix = unique_topic("run-clean");
    let job = job_file(
        &dir,
        "rides-cleansing.toml",
        &input.name,
        &output.name,
        &prefix,
    );
    let log1 = dir.join("run1.log");

    // First run: SIGKILL as soon as one checkpoint's output is committed.
    let mut first = start_job(&job, &log1, &["--fresh"]);
    let start = Instant::now();
    while committed_count(&output).await == 0 {
        assert_running(&mut first, &log1);
        assert!(
            start.elapsed() < DEADLINE,
            "no output committed within {DEADLINE:?}:\n{}",
            log_of(&log1)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();

    // Second run on the same state: recovers, catches up; the output is exact.
    let log2 = dir.join("run2.log");
    let mut second = start_job(&job, &log2, &[]);
    let o = wait_for_verify_ok("cleansing", &input.name, &output.name, &mut second, &log2).await;
    assert!(stdout(&o).starts_with("verify: OK"), "{}", shown(&o));
    assert!(
        log_of(&log2).contains("state restored"),
        "{}",
        log_of(&log2)
    );

    // SIGTERM: a clean stop, exit 0, one summary line.
    sigterm(&second);
    let status = tokio::task::spawn_blocking(move || second.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}:\n{}", log_of(&log2));
    assert!(
        log_of(&log2).contains("run: stopped after checkpoint"),
        "{}",
        log_of(&log2)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens the job's state store, retrying while the dropped runtime's handle still holds its
/// lock.
async fn open_state(
    dir: &Path,
    layout: Layout,
    from: RestoreFrom,
) -> (StateStore, CheckpointRecord) {
    let start = Instant::now();
    loop {
        match StateStore::open(dir, layout.clone(), StoreOptions::default(), from) {
            Ok(opened) => return opened,
            Err(StateError::Locked { .. }) if start.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("opening the state store at {}: {e}", dir.display()),
        }
    }
}

/// The runtime's recovery order: the resolutions of the restored committables are durable
/// BEFORE the sink's pool init sends its first InitProducerId. The state holds checkpoint 1
/// with an unresolved committable (prepared by a sink that then crashed); the runtime starts
/// through a proxy that holds the first InitProducerId, and "crashes" (is dropped) while it is
/// held. The state must then list checkpoint 1's committable as resolved: a restart resuming it
/// after the init had bumped its id's epoch would fail on a transaction that committed.
#[tokio::test]
async fn the_runtime_persists_the_resolutions_before_the_sinks_pool_init() {
    let input = TestTopic::create("run-order-in", 1).await;
    let output = TestTopic::create("run-order-out", 1).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-order"));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = unique_topic("run-order");
    let path = job_file(
        &dir,
        "rides-cleansing.toml",
        &input.name,
        &output.name,
        &prefix,
    );
    let job = Job::load(&path).unwrap();
    let state_dir = job.settings.state_dir.clone();
    let layout = Layout {
        key_groups: u16::try_from(job.settings.key_groups).unwrap(),
        operators: Vec::new(),
        sink_prefix: Some(prefix.clone()),
        sink_ids: 3,
    };

    // Checkpoint 1 is durable with a prepared, uncommitted transaction of task 0's slot 0.
    let cluster = Cluster::connect(client_config(&broker())).await.unwrap();
    let sink_config = SinkConfig::new(
        Delivery::ExactlyOnce,
        &prefix,
        0,
        producer_config(&broker(), &[("linger.ms", "5")]),
    );
    let (mut sink, _) = KafkaWriter::recover(sink_config, cluster, &[])
        .await
        .unwrap();
    let record = ProducerRecord::new(output.name.clone(), Bytes::from("r-0")).with_partition(0);
    assert!(matches!(sink.write(record).await.unwrap(), Written::Sent));
    let c = sink.on_barrier(1).await.unwrap().expect("a committable");
    drop(sink); // the crash
    let (mut store, _) = open_state(&state_dir, layout.clone(), RestoreFrom::Fresh).await;
    store
        .persist(
            1,
            &[],
            Vec::new(),
            vec![onceflow::engine::sink::PreparedOutput::Transaction(
                c.transaction.clone(),
            )],
        )
        .unwrap();
    drop(store);

    // The restart, through a proxy holding the pool init's first InitProducerId.
    let proxy = Proxy::start(&broker()).await;
    *proxy.faults.hold_next_request.lock().unwrap() =
        Some((ApiKey::InitProducerId, Duration::from_secs(600)));
    let config = RunConfig {
        job,
        client: client_config(&proxy.addr),
        producer: producer_config(&proxy.addr, &[]),
        consumer: consumer_config(&proxy.addr, &[]),
        restore: RestoreFrom::Latest,
        state_dir: state_dir.clone(),
        formats: LineFormats::new(),
    };
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let held = async {
        let start = Instant::now();
        while proxy.faults.held_requests.load(Ordering::Relaxed) == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the runtime's pool init sent no InitProducerId within 120 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        r = run(config, stop) => panic!("the runtime ended while its pool init was held: {r:?}"),
        () = held => {} // the crash: the runtime is dropped with the init in flight
    }

    let (_store, record) = open_state(&state_dir, layout, RestoreFrom::Latest).await;
    assert_eq!(record.id, 1);
    assert!(
        record.committables.is_empty(),
        "checkpoint 1's committable is still unresolved in the state although the pool's init \
         was already under way: {:?}",
        record.committables
    );
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The chaos tests' seed: ONCEFLOW_CHAOS_SEED replays one, else the clock picks it.
pub(crate) fn chaos_seed() -> u64 {
    std::env::var("ONCEFLOW_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// `onceflow run JOB -b BOOTSTRAP` killed when dropped, its stderr into `log` (at
/// ONCEFLOW_CHAOS_LOG's level, default info), `--fresh` when asked, armed with the test pause
/// `pause` (ONCEFLOW_TEST_PAUSE) or with none.
pub(crate) fn spawn_run(
    job: &Path,
    bootstrap: &str,
    log: &Path,
    fresh: bool,
    pause: Option<&str>,
) -> crate::support::cli::Guarded {
    spawn_run_with(job, bootstrap, log, fresh, pause, &[], &[])
}

/// [`spawn_run`] with more arguments (`extra`, e.g. `-X session.timeout.ms=6000` or
/// `--state-dir D`) and environment variables (`env`, e.g. a test's ONCEFLOW_TEST_SKIP).
pub(crate) fn spawn_run_with(
    job: &Path,
    bootstrap: &str,
    log: &Path,
    fresh: bool,
    pause: Option<&str>,
    extra: &[&str],
    env: &[(&str, &str)],
) -> crate::support::cli::Guarded {
    let file = std::fs::File::create(log).unwrap();
    let mut c = command();
    c.args(["run", job.to_str().unwrap(), "-b", bootstrap])
        .args(["-X", API_TIMEOUT])
        .args(extra)
        .envs(env.iter().copied())
        .env(
            "ONCEFLOW_LOG",
            std::env::var("ONCEFLOW_CHAOS_LOG").unwrap_or_else(|_| "onceflow=info".into()),
        )
        .env_remove("ONCEFLOW_TEST_PAUSE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file);
    if fresh {
        c.arg("--fresh");
    }
    if let Some(p) = pause {
        c.env("ONCEFLOW_TEST_PAUSE", p);
    }
    crate::support::cli::Guarded(c.spawn().expect("start onceflow run"))
}
