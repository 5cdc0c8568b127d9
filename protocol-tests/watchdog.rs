//! The watchdog (support::watchdog), tested the only way a process-ending check can be: this
//! binary runs itself as a child with tests that hang on purpose (ignored, and inert unless the
//! child's environment says so), and the parent reads the child's exit and report.

use crate::support::proxy::Blackhole;
use crate::support::{self, client_config, watchdog};
use onceflow::client::Admin;
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Set in the child's environment; without it the hanging tests return at once, so that
/// `--ignored` or `--include-ignored` runs of the whole suite do not trip the watchdog.
const CHILD: &str = "ONCEFLOW_WATCHDOG_SELF_TEST";

fn in_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

struct Run {
    status: ExitStatus,
    took: Duration,
    stderr: String,
    stdout: String,
}

/// Runs `tests` (exact names) of this binary in a child, with `env`; kills it past `bound`.
fn run_child(tests: &[&str], env: &[(&str, &str)], bound: Duration) -> Run {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--ignored", "--exact"])
        .args(tests)
        .env(CHILD, "1")
        .env_remove("ONCEFLOW_LOG")
        .env_remove("ONCEFLOW_TEST_DEADLINE_SECS")
        // The hanging tests are not the suite's: their times stay out of its list.
        .env_remove("ONCEFLOW_TEST_TIMES")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let mut child = cmd.spawn().expect("run the protocol test binary");
    // Read both pipes while it runs, so a full pipe cannot stall it. A pipe ends when every
    // process holding it has: a grandchild still holding one is what would hang CI.
    let drain = |mut r: Box<dyn Read + Send>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            let _ = tx.send(s);
        });
        rx
    };
    let ended = |rx: std::sync::mpsc::Receiver<String>, which: &str| {
        rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| {
            panic!("the child's {which} stayed open after it exited: a process it started lives on")
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the child running {tests:?} still ran after {bound:?}: the watchdog did not end \
                 it; its stderr:\n{}",
                ended(err, "stderr")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        status,
        took: start.elapsed(),
        stdout: ended(out, "stdout"),
        stderr: ended(err, "stderr"),
    }
}

/// The position of `needle` in `hay`, failing with the whole report when it is missing.
fn find(run: &Run, needle: &str) -> usize {
    run.stderr.find(needle).unwrap_or_else(|| {
        panic!(
            "the report lacks {needle:?}; stderr:\n{}\nstdout:\n{}",
            run.stderr, run.stdout
        )
    })
}

#[test]
fn a_test_past_the_deadline_ends_the_run_with_the_spans_it_waited_in() {
    support::init_logging();
    let run = run_child(
        &["watchdog::hangs_connecting_to_a_blackhole"],
        &[("ONCEFLOW_TEST_DEADLINE_SECS", "3")],
        Duration::from_secs(60),
    );
    assert_eq!(
        run.status.code(),
        Some(watchdog::EXIT_CODE),
        "stderr:\n{}",
        run.stderr
    );
    assert!(
        run.took >= Duration::from_secs(3),
        "ended before the deadline: {:?}",
        run.took
    );
    find(
        &run,
        "==== watchdog: test watchdog::hangs_connecting_to_a_blackhole has run",
    );
    find(
        &run,
        "past its deadline of 3s (ONCEFLOW_TEST_DEADLINE_SECS)",
    );
    // The tree: the helper's wait, and under it the library's connect to the blackhole.
    let wait = find(&run, "waiting_for{what=an admin client of a blackhole}");
    let connect = find(&run, "connect{broker=127.0.0.1:");
    assert!(wait < connect, "stderr:\n{}", run.stderr);
    let line = &run.stderr[connect..];
    let line = &line[..line.find('\n').unwrap()];
    assert!(
        line.contains("onceflow::client::connection  age "),
        "{line}"
    );
    // Indented one level deeper than its parent.
    let indent = |at: usize| {
        let start = run.stderr[..at].rfind('\n').unwrap() + 1;
        at - start
    };
    assert_eq!(indent(connect), indent(wait) + 2, "stderr:\n{}", run.stderr);
    // The process it started: named, and killed (gone, or a zombie no one reaps here).
    let listed = find(
        &run,
        "Processes this test process started (killed now):\n  ",
    );
    let line = run.stderr[listed..].lines().nth(1).unwrap().trim();
    let (pid, cmd) = line.split_once(' ').unwrap();
    assert_eq!(cmd, "sleep 600", "{line}");
    // SIGKILL is delivered, not acted on at once: on a loaded machine the process can still be
    // scheduled (state R) for a moment after the watchdog's kill returned. Wait for it to go.
    let gone_by = Instant::now() + Duration::from_secs(30);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .map(|(_, r)| r.trim_start().chars().next());
        if stat.is_empty() || state == Some(Some('Z')) {
            break;
        }
        assert!(Instant::now() < gone_by, "sleep 600 still runs: {stat}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_test_past_its_own_deadline_ends_the_run_too() {
    support::init_logging();
    let run = run_child(
        &["watchdog::waits_forever_with_its_own_short_deadline"],
        // The process-wide deadline is far off: only the test's own can end it in time.
        &[("ONCEFLOW_TEST_DEADLINE_SECS", "600")],
        Duration::from_secs(30),
    );
    assert_eq!(
        run.status.code(),
        Some(watchdog::EXIT_CODE),
        "stderr:\n{}",
        run.stderr
    );
    find(
        &run,
        "==== watchdog: test watchdog::waits_forever_with_its_own_short_deadline has run",
    );
    find(
        &run,
        "past its deadline of 2s (set by support::watchdog::deadline)",
    );
    find(&run, "never_ready{reason=on purpose}");
    let spawned = find(&run, "in_a_spawned_task{}");
    let line = &run.stderr[spawned..];
    let line = &line[..line.find('\n').unwrap()];
    assert!(line.contains("@tokio-"), "not on a worker thread: {line}");
}

#[test]
fn neither_a_finished_test_nor_a_wait_for_a_turn_counts() {
    support::init_logging();
    let run = run_child(
        &[
            "watchdog::ends_within_a_one_second_deadline",
            "watchdog::outlives_the_deadline_of_a_finished_test",
            "watchdog::waits_for_its_turn_longer_than_its_deadline",
        ],
        &[],
        Duration::from_secs(60),
    );
    assert!(
        run.status.success(),
        "status {:?}; stderr:\n{}\nstdout:\n{}",
        run.status,
        run.stderr,
        run.stdout
    );
    assert!(run.stdout.contains("3 passed"), "stdout:\n{}", run.stdout);
    assert!(!run.stderr.contains("==== watchdog"), "{}", run.stderr);
}

// The children. They do nothing unless run by the tests above.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "hangs on purpose; the watchdog self-test runs it in a child process"]
async fn hangs_connecting_to_a_blackhole() {
    if !in_child() {
        return;
    }
    support::init_logging();
    // A process of its own holding the output pipes, as a CLI child or the Java peer would:
    // the watchdog must kill it, or whoever reads the output (CI) would wait for it.
    let mut sleeper = Command::new("sleep").arg("600").spawn().expect("run sleep");
    let hole = Blackhole::start().await;
    let mut config = client_config(&hole.addr);
    config.api_timeout = Duration::from_secs(600);
    // The blackhole accepts and never answers: ApiVersions waits, inside `connect`.
    let _ = Admin::new(config)
        .instrument(watchdog::waiting("an admin client of a blackhole"))
        .await;
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    panic!("the watchdog should have ended this process first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "hangs on purpose; the watchdog self-test runs it in a child process"]
async fn waits_forever_with_its_own_short_deadline() {
    if !in_child() {
        return;
    }
    watchdog::deadline(Duration::from_secs(2));
    // A span opened inside a spawned task, on a worker thread: the test's runtime ties it to
    // the test (as the producer's sender task's spans are).
    tokio::spawn(async {
        let span = tracing::info_span!("in_a_spawned_task");
        std::future::pending::<()>().instrument(span).await
    });
    std::future::pending::<()>()
        .instrument(tracing::info_span!("never_ready", reason = "on purpose"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child of the watchdog self-test"]
async fn ends_within_a_one_second_deadline() {
    if !in_child() {
        return;
    }
    watchdog::deadline(Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child of the watchdog self-test"]
async fn outlives_the_deadline_of_a_finished_test() {
    if !in_child() {
        return;
    }
    support::init_logging();
    // Past the other test's one second, by a margin over the watchdog's half-second look.
    tokio::time::sleep(Duration::from_millis(2500))
        .instrument(watchdog::waiting("the other test to end"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child of the watchdog self-test"]
async fn waits_for_its_turn_longer_than_its_deadline() {
    if !in_child() {
        return;
    }
    watchdog::deadline(Duration::from_secs(1));
    // As a cluster test queued behind the others: the wait does not count.
    watchdog::turn(tokio::time::sleep(Duration::from_millis(2500))).await;
}
