//! The consume-transform-produce example under fire: three instances, members bounced with
//! kill -9 and restarted, and the output holds every input record exactly once.

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

fn start(input: &str, output: &str, group: &str, instance: usize, mode: &str) -> Child {
    start_on(
        &broker(),
        input,
        output,
        group,
        instance,
        mode,
        Stdio::null(),
    )
}

/// Instance `instance` of the example against `bootstrap`.
pub(crate) fn start_on(
    bootstrap: &str,
    input: &str,
    output: &str,
    group: &str,
    instance: usize,
    mode: &str,
    stderr: Stdio,
) -> Child {
    Command::new(example())
        .args([
            "--bootstrap",
            bootstrap,
            "--input",
            input,
            "--output",
            output,
        ])
        .args([
            "--group",
            group,
            "--instance",
            &instance.to_string(),
            "--mode",
            mode,
        ])
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// Runs three instances over `n` input records, bouncing them with kill -9 while they work;
/// returns how often each output value appears under read_committed.
async fn bounce(mode: &str, n: usize) -> HashMap<String, usize> {
    let input = TestTopic::create("ctp-in", 4).await;
    let output = TestTopic::create("ctp-out", 4).await;
    let group = unique_topic("ctp");
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
    let mut members: Vec<Child> = (0..3)
        .map(|i| start(&input.name, &output.name, &group, i, mode))
        .collect();
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
        members = (0..3)
            .map(|i| start(&input.name, &output.name, &group, i, mode))
            .collect();
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
