//! The consume-transform-produce example under fire: three instances, members bounced with
//! kill -9 and restarted, and the output holds every input record exactly once — under the
//! classic group protocol (all three killed at once, again and again) and the KIP-848 consumer
//! protocol (members killed, left down and started again at random).

use crate::support::*;
use bytes::Bytes;
use onceflow::client::ProducerRecord;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The example binary; `cargo test` (and scripts/test) build examples before the tests run.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/protocol-… → target/<profile>/examples/…
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples/consume_transform_produce");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --examples`",
        path.display()
    );
    path
}

/// One run of the example: its topics, group, instance number, mode and group protocol.
#[derive(Clone, Copy)]
struct Run<'a> {
    input: &'a str,
    output: &'a str,
    group: &'a str,
    mode: &'a str,
    protocol: &'a str,
}

fn start(r: Run<'_>, instance: usize) -> Child {
    command(&broker(), r, instance)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Instance `instance` of the example against `bootstrap` (classic group protocol).
pub(crate) fn start_on(
    bootstrap: &str,
    input: &str,
    output: &str,
    group: &str,
    instance: usize,
    mode: &str,
    stderr: Stdio,
) -> Child {
    let r = Run {
        input,
        output,
        group,
        mode,
        protocol: "classic",
    };
    command(bootstrap, r, instance)
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// The example's command line for instance `instance` of run `r` (standard output discarded).
fn command(bootstrap: &str, r: Run<'_>, instance: usize) -> Command {
    let mut c = Command::new(example());
    c.args([
        "--bootstrap",
        bootstrap,
        "--input",
        r.input,
        "--output",
        r.output,
    ])
    .args([
        "--group",
        r.group,
        "--instance",
        &instance.to_string(),
        "--mode",
        r.mode,
        "--group-protocol",
        r.protocol,
    ])
    .stdout(Stdio::null());
    c
}

/// Runs three instances over `n` input records, bouncing them with kill -9 while they work;
/// returns how often each output value appears under read_committed.
async fn bounce(mode: &str, n: usize) -> HashMap<String, usize> {
    let input = TestTopic::create("ctp-in", 4).await;
    let output = TestTopic::create("ctp-out", 4).await;
    let group = unique_topic("ctp");
    let run = Run {
        input: &input.name,
        output: &output.name,
        group: &group,
        mode,
        protocol: "classic",
    };
    let p = producer(&[]).await;
    let produce = |range: std::ops::Range<usize>| {
        let (p, topic) = (&p, input.name.clone());
        async move {
            for i in range {
                p.send(
                    ProducerRecord::new(topic.clone(), Bytes::from(format!("ride-{i}")))
                        .with_key(Bytes::from(format!("k{}", i % 50))),
                )
                .await
                .unwrap();
            }
            p.flush().await.unwrap();
        }
    };
    // The second half is produced only after the first kill: the members cannot finish the
    // work before it (on a loaded machine they once did, between two looks at the offsets,
    // and the test bounced nobody).
    produce(0..n / 2).await;

    let admin = onceflow::client::Admin::new(client_config(&broker()))
        .await
        .unwrap();
    let tps = input.tps();
    let committed = || async {
        admin
            .committed_offsets(&group, &tps)
            .await
            .unwrap()
            .values()
            .sum::<i64>()
    };
    let mut members: Vec<Child> = (0..3).map(|i| start(run, i)).collect();
    // Bounce while they work: as soon as the group is making progress, kill every member with
    // SIGKILL and start them again; up to three times, at least once before the work is done
    // (the first kill comes before the second half of the input exists).
    // Killing all at once while progress is being made guarantees that some member dies between
    // writing output and committing offsets.
    let mut kills = 0;
    'bounce: for _ in 0..3 {
        let deadline = Instant::now() + Duration::from_secs(60);
        let before = committed().await;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = committed().await;
            if now >= n as i64 {
                break 'bounce; // done: later rounds would have nothing to interrupt
            }
            if now > before {
                break;
            }
            assert!(Instant::now() < deadline, "no progress within 60 s");
        }
        for m in members.iter_mut() {
            m.kill().unwrap();
            m.wait().unwrap();
        }
        kills += 1;
        if kills == 1 {
            produce(n / 2..n).await;
        }
        members = (0..3).map(|i| start(run, i)).collect();
    }
    assert!(kills >= 1, "the members were killed at least once mid-work");
    // Let them finish: every input offset committed for the group.
    let deadline = Instant::now() + Duration::from_secs(120);
    while committed().await < n as i64 {
        assert!(Instant::now() < deadline, "input not fully consumed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for m in &mut members {
        let _ = m.kill();
        let _ = m.wait();
    }
    output_counts(&broker(), &output, n).await
}

/// How often each value of the example's `output` appears under read_committed, once `n`
/// came; fails when one of "RIDE-0" … "RIDE-(n-1)" is missing.
pub(crate) async fn output_counts(
    bootstrap: &str,
    output: &TestTopic,
    n: usize,
) -> HashMap<String, usize> {
    let got = consume_all(
        bootstrap,
        output,
        n,
        &[("isolation.level", "read_committed")],
    )
    .await;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for r in &got {
        *counts
            .entry(String::from_utf8_lossy(r.value.as_deref().unwrap()).into_owned())
            .or_default() += 1;
    }
    let missing: Vec<usize> = (0..n)
        .filter(|i| !counts.contains_key(&format!("RIDE-{i}")))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "missing from the output: {missing:?}");
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounced_members_leave_every_input_record_exactly_once_in_the_output() {
    let n = 30_000;
    let counts = bounce("exactly-once", n).await;
    let dups: Vec<&String> = counts
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(v, _)| v)
        .take(5)
        .collect();
    assert!(dups.is_empty(), "duplicated in the output: {dups:?}");
    assert_eq!(counts.len(), n);
}

/// Inverse test: the same bouncing without transactions duplicates records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_transactions_bounced_members_duplicate_records() {
    let counts = bounce("at-least-once", 30_000).await;
    let dups = counts.values().filter(|c| **c > 1).count();
    assert!(dups > 0, "expected duplicates without transactions");
}

/// What the random chaos does to the members in one round.
#[derive(Debug, Clone, Copy)]
enum Blow {
    /// SIGKILL a running member and start it again at once (a crash and a restart).
    KillAndRestart(usize),
    /// SIGKILL a running member and leave it down (the group goes on without it).
    KillAndLeaveDown(usize),
    /// Start a member that is down (it joins).
    Start(usize),
    /// SIGSTOP a running member until the others have taken its partitions over (its session
    /// expired: every partition's committed offset moved on, or is at the end), then SIGCONT:
    /// a zombie, whose transaction's offsets carry a member epoch the coordinator has fenced.
    PauseUntilTakenOver(usize),
}

/// Under the consumer protocol: three members of the example, and in every round, once the
/// group makes progress, one blow chosen at random (seeded: the run prints its seed) — a
/// member killed and restarted, killed and left down, or a down member started. Returns how
/// often each output value appears under read_committed.
async fn chaos(mode: &str, n: usize) -> HashMap<String, usize> {
    use rand::{Rng, SeedableRng};
    let seed: u64 = rand::rng().random();
    eprintln!("pipeline chaos seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let input = TestTopic::create("ctp848-in", 4).await;
    let output = TestTopic::create("ctp848-out", 4).await;
    let group = unique_topic("ctp848");
    let run = Run {
        input: &input.name,
        output: &output.name,
        group: &group,
        mode,
        protocol: "consumer",
    };
    let p = producer(&[]).await;
    let produce = |range: std::ops::Range<usize>| {
        let (p, topic) = (&p, input.name.clone());
        async move {
            for i in range {
                p.send(
                    ProducerRecord::new(topic.clone(), Bytes::from(format!("ride-{i}")))
                        .with_key(Bytes::from(format!("k{}", i % 50))),
                )
                .await
                .unwrap();
            }
            p.flush().await.unwrap();
        }
    };
    produce(0..n / 2).await;
    let admin = onceflow::client::Admin::new(client_config(&broker()))
        .await
        .unwrap();
    let tps = input.tps();
    let by_partition = || async { admin.committed_offsets(&group, &tps).await.unwrap() };
    let committed = || async { by_partition().await.values().sum::<i64>() };
    let mut members = Members::start(run, seed);
    let mut blows = Vec::new();
    'rounds: for _ in 0..5 {
        let deadline = Instant::now() + Duration::from_secs(90);
        let before = committed().await;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            members.reap();
            let now = committed().await;
            if now >= n as i64 {
                break 'rounds;
            }
            if now > before {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no progress within 90 s after {blows:?} (seed {seed}){}",
                members.logs()
            );
        }
        members.reap();
        let up = members.up();
        let down = members.down();
        // The victim owns work in flight when one does (a random one otherwise): right after a
        // commit, a member picked blindly may have nothing uncommitted (CI once saw the
        // at-least-once run end without a duplicate).
        let owners = owners_of_work_in_flight(&admin, &group, &input, &output, &up).await;
        let victim = if owners.is_empty() {
            up[rng.random_range(0..up.len())]
        } else {
            owners[rng.random_range(0..owners.len())]
        };
        // The first blow makes a zombie (the case the member epoch is there for); then at random.
        let blow = match if blows.is_empty() {
            3
        } else {
            rng.random_range(0..4)
        } {
            0 if !down.is_empty() => Blow::Start(down[rng.random_range(0..down.len())]),
            1 if up.len() > 1 => Blow::KillAndLeaveDown(victim),
            3 if up.len() > 1 => Blow::PauseUntilTakenOver(victim),
            _ => Blow::KillAndRestart(victim),
        };
        match blow {
            Blow::KillAndRestart(i) | Blow::KillAndLeaveDown(i) => {
                members.kill(i);
                if matches!(blow, Blow::KillAndRestart(_)) {
                    members.start_one(i);
                }
            }
            Blow::Start(i) => members.start_one(i),
            Blow::PauseUntilTakenOver(i) => {
                let pid = members.pid(i);
                let signal = |sig: &str| {
                    let ok = Command::new("kill").args([sig, &pid]).status().unwrap();
                    assert!(ok.success(), "kill {sig} {pid}");
                };
                signal("-STOP");
                let at_pause = by_partition().await;
                let ends = admin
                    .list_offsets(
                        &tps,
                        onceflow::client::consumer::Offset::End,
                        onceflow::client::IsolationLevel::ReadUncommitted,
                    )
                    .await
                    .unwrap();
                let deadline = Instant::now() + Duration::from_secs(90);
                loop {
                    let now = by_partition().await;
                    let taken_over = tps.iter().all(|tp| {
                        let (was, is) = (at_pause.get(tp), now.get(tp));
                        is > was || is >= ends.get(tp)
                    });
                    if taken_over {
                        break;
                    }
                    // A member that ended is restarted (or fails the test) here too: the
                    // others must be running to take the paused member's partitions over.
                    members.reap();
                    assert!(
                        Instant::now() < deadline,
                        "the paused member's partitions were not taken over within 90 s after {blows:?} (seed {seed}){}",
                        members.logs()
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                signal("-CONT");
            }
        }
        blows.push(blow);
        if blows.len() == 1 {
            produce(n / 2..n).await;
        }
    }
    assert!(
        !blows.is_empty(),
        "at least one blow mid-work (seed {seed})"
    );
    for i in members.down() {
        members.start_one(i);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while committed().await < n as i64 {
        members.reap();
        assert!(
            Instant::now() < deadline,
            "input not fully consumed after {blows:?} (seed {seed}){}",
            members.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "pipeline chaos: {blows:?}; restarted after being fenced: {:?}",
        members.fenced
    );
    drop(members);
    output_counts(&broker(), &output, n).await
}

/// The three members of a chaos run. Each one's standard error, with the client's log at info
/// level, goes to a file of its own (appended to across restarts), so that a failure can show
/// what the members did. The chaos only ends members it kills; a member that ends by itself
/// is told apart: fenced (the example's exit status 3: a zombie whose transactional id or
/// membership was taken over) is restarted at once, as a supervisor would; anything else fails
/// the test with the end of its log.
struct Members<'a> {
    run: Run<'a>,
    seed: u64,
    children: Vec<Option<Child>>,
    logs: Vec<PathBuf>,
    /// The members restarted after ending fenced, in order.
    fenced: Vec<usize>,
}

/// The example's exit status when it stops because it was fenced.
pub(crate) const FENCED_EXIT: i32 = 3;

impl<'a> Members<'a> {
    fn start(run: Run<'a>, seed: u64) -> Self {
        let dir = example()
            .parent()
            .and_then(|d| d.parent())
            .unwrap()
            .join("pipeline-chaos");
        std::fs::create_dir_all(&dir).unwrap();
        let logs = (0..3)
            .map(|i| dir.join(format!("{}-{i}.log", run.group)))
            .collect();
        let mut m = Self {
            run,
            seed,
            children: vec![None, None, None],
            logs,
            fenced: Vec::new(),
        };
        for i in 0..3 {
            m.start_one(i);
        }
        m
    }

    fn start_one(&mut self, i: usize) {
        assert!(self.children[i].is_none(), "member {i} is running");
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.logs[i])
            .unwrap();
        use std::io::Write;
        writeln!(log, "== started").unwrap();
        let child = command(&broker(), self.run, i)
            .env("ONCEFLOW_LOG", "onceflow=info")
            .stderr(log)
            .spawn()
            .unwrap();
        self.children[i] = Some(child);
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut m) = self.children[i].take() {
            let _ = m.kill();
            let _ = m.wait();
        }
    }

    fn pid(&self, i: usize) -> String {
        self.children[i].as_ref().unwrap().id().to_string()
    }

    fn up(&self) -> Vec<usize> {
        (0..3).filter(|i| self.children[*i].is_some()).collect()
    }

    fn down(&self) -> Vec<usize> {
        (0..3).filter(|i| self.children[*i].is_none()).collect()
    }

    /// Restarts the members that ended fenced; fails on one that ended otherwise.
    fn reap(&mut self) {
        for i in 0..3 {
            let Some(child) = self.children[i].as_mut() else {
                continue;
            };
            let Some(status) = child.try_wait().unwrap() else {
                continue;
            };
            self.children[i] = None;
            assert_eq!(
                status.code(),
                Some(FENCED_EXIT),
                "member {i} ended by itself ({status}) (seed {}){}",
                self.seed,
                self.logs()
            );
            self.fenced.push(i);
            self.start_one(i);
        }
    }

    /// The last lines of every member's log, for a failure message.
    fn logs(&self) -> String {
        let mut out = String::new();
        for (i, path) in self.logs.iter().enumerate() {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(15)..];
            out.push_str(&format!(
                "\n-- member {i} ({}), the end of {}:\n{}",
                if self.children[i].is_some() {
                    "running"
                } else {
                    "down"
                },
                path.display(),
                tail.join("\n")
            ));
        }
        out
    }
}

impl Drop for Members<'_> {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
    }
}

/// The running instances (of `up`) that own an input partition whose output runs ahead of its
/// committed offset, waited for up to 20 s (none: an empty list). Input and output have the
/// same partition count and the example keeps each record's key, so input partition p's output
/// is in output partition p: without transactions (and before any duplicate), output past the
/// committed offset is work a kill makes the group do again. With transactions, markers keep
/// every output partition ahead: any owner qualifies, which changes nothing there.
async fn owners_of_work_in_flight(
    admin: &onceflow::client::Admin,
    group: &str,
    input: &TestTopic,
    output: &TestTopic,
    up: &[usize],
) -> Vec<usize> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let committed = admin.committed_offsets(group, &input.tps()).await;
        let ends = admin
            .list_offsets(
                &output.tps(),
                onceflow::client::consumer::Offset::End,
                onceflow::client::IsolationLevel::ReadUncommitted,
            )
            .await;
        let described = admin.describe_consumer_group(group).await;
        if let (Ok(committed), Ok(ends), Ok(Some(described))) = (committed, ends, described) {
            let in_flight = |p: i32| {
                let done = input
                    .tps()
                    .into_iter()
                    .find(|tp| tp.partition == p)
                    .and_then(|tp| committed.get(&tp).copied())
                    .unwrap_or(0);
                let written = ends
                    .iter()
                    .find(|(tp, _)| tp.partition == p)
                    .map_or(0, |(_, end)| *end);
                written > done
            };
            let owners: Vec<usize> = up
                .iter()
                .copied()
                .filter(|i| {
                    described.members.iter().any(|m| {
                        m.client_id == format!("{group}-{i}")
                            && m.assignment
                                .iter()
                                .any(|tp| tp.topic == input.name && in_flight(tp.partition))
                    })
                })
                .collect();
            if !owners.is_empty() {
                return owners;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Vec::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_consumer_protocol_members_killed_and_started_at_random_leave_every_record_exactly_once(
) {
    let n = 20_000;
    let counts = chaos("exactly-once", n).await;
    let dups: Vec<&String> = counts
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(v, _)| v)
        .take(5)
        .collect();
    assert!(dups.is_empty(), "duplicated in the output: {dups:?}");
    assert_eq!(counts.len(), n);
}

/// Inverse test: the same random chaos without transactions duplicates records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_consumer_protocol_without_transactions_members_killed_at_random_duplicate_records(
) {
    let counts = chaos("at-least-once", 20_000).await;
    let dups = counts.values().filter(|c| **c > 1).count();
    eprintln!("{dups} values duplicated");
    assert!(dups > 0, "expected duplicates without transactions");
}
