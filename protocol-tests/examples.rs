//! The client guide's "Using the library" examples (docs/guide/client.md; examples/*.rs), run as the programs a user runs:
//! each against the test broker (ONCEFLOW_BROKER), each must exit 0 and print its last line.
//! Each example checks its own outcome (what read_committed reads, what the group committed,
//! the class of each error) and exits non-zero otherwise; the two-phase commit is checked here
//! across its two processes. `examples/consume_transform_produce.rs` is run by pipeline.rs.

use crate::support::*;
use onceflow::client::{Admin, IsolationLevel, Offset, TopicPartition};
use std::path::PathBuf;
use std::process::Output;

/// An example binary; scripts/test builds the examples before the protocol tests.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/protocol-… → target/<profile>/examples/…
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --examples`",
        path.display()
    );
    path
}

/// Runs an example against the test broker, off the runtime, bounded (each ends by itself
/// within seconds; the examples bound themselves at 60 s).
async fn run(name: &str, args: &[&str]) -> Output {
    let mut cmd = std::process::Command::new(example(name));
    cmd.args(args)
        .env("ONCEFLOW_BROKER", broker())
        .env_remove("ONCEFLOW_LOG");
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("run example {name}: {e}"));
    assert!(
        out.status.success(),
        "example {name} {args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs an example and checks its last stdout line starts with `name:` (its summary).
async fn run_quick(name: &str) -> String {
    let out = run(name, &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("{name}: ")),
        "example {name} ended without its summary line:\n{stdout}"
    );
    stdout
}

#[tokio::test]
async fn example_produce() {
    let out = run_quick("produce").await;
    let written = out.lines().filter(|l| l.starts_with("written to ")).count();
    assert_eq!(written, 10, "{out}");
}

#[tokio::test]
async fn example_idempotent_and_transactional() {
    run_quick("idempotent_and_transactional").await;
}

#[tokio::test]
async fn example_avro_registry() {
    let registry = crate::support::registry::registry_url().await;
    let mut cmd = std::process::Command::new(example("avro_registry"));
    cmd.env("ONCEFLOW_BROKER", broker())
        .env("ONCEFLOW_SCHEMA_REGISTRY", registry)
        .env_remove("ONCEFLOW_LOG");
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout
                .lines()
                .last()
                .unwrap_or_default()
                .starts_with("avro_registry: "),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Fields print in the schema's order.
    assert!(
        stdout.starts_with(r#"{"ride_id":1,"zone":{"string":"JFK"},"fare":52.5}"#),
        "{stdout}"
    );
}

#[tokio::test]
async fn example_read_committed() {
    run_quick("read_committed").await;
}

#[tokio::test]
async fn example_group_commit() {
    run_quick("group_commit").await;
}

#[tokio::test]
async fn example_admin() {
    let out = run_quick("admin").await;
    assert!(out.contains("retention.ms = Some(\"3600000\")"), "{out}");
}

#[tokio::test]
async fn example_java_properties() {
    let out = run_quick("java_properties").await;
    assert!(
        out.contains("refused: unknown property 'lingr.ms'"),
        "{out}"
    );
}

#[tokio::test]
async fn example_errors() {
    let out = run_quick("errors").await;
    for line in [
        "unreachable broker: RefreshAndRetry",
        "aborted; the producer goes on",
        "the next transaction committed",
        "fenced by a newer instance: Fatal",
        "misspelled setting: Fatal",
    ] {
        assert!(out.contains(line), "no '{line}' in:\n{out}");
    }
}

#[tokio::test]
async fn example_tracing_and_metrics() {
    let out = run("tracing_and_metrics", &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The default filter shows the client's info events, e.g. the producer id it was given.
    assert!(stderr.contains("producer id assigned"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a pipe: {stderr}"
    );
}

/// Prepared in one process, committed from another; a second resume writes nothing twice.
#[tokio::test]
async fn example_two_phase_commit_across_processes() {
    let topic = TestTopic::create("example-2pc", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("txn.json");
    let file = file.to_str().unwrap();
    run("two_phase_commit", &["prepare", file, &topic.name]).await;

    // The preparing process is gone and the transaction is open: read_committed readers wait.
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let tp = TopicPartition::new(topic.name.clone(), 0);
    let end = |isolation| {
        let admin = admin.clone();
        let tp = tp.clone();
        async move {
            admin
                .list_offsets(std::slice::from_ref(&tp), Offset::End, isolation)
                .await
                .unwrap()[&tp]
        }
    };
    assert_eq!(
        end(IsolationLevel::ReadUncommitted).await,
        3,
        "3 records written"
    );
    assert_eq!(
        end(IsolationLevel::ReadCommitted).await,
        0,
        "not committed yet"
    );

    let first = run("two_phase_commit", &["resume", file]).await;
    assert_eq!(String::from_utf8_lossy(&first.stdout).trim(), "committed");
    let again = run("two_phase_commit", &["resume", file]).await;
    assert!(
        String::from_utf8_lossy(&again.stdout).starts_with("already committed"),
        "{again:?}"
    );
    let got = consume_all(
        &broker(),
        &topic,
        3,
        &[("isolation.level", "read_committed")],
    )
    .await;
    let values: Vec<_> = got.iter().map(|r| r.value.clone().unwrap()).collect();
    assert_eq!(values, ["prepared 0", "prepared 1", "prepared 2"]);
    // The commit marker follows the 3 records; read_committed readers read up to it.
    assert_eq!(end(IsolationLevel::ReadCommitted).await, 4);
}
