//! The `onceflow` binary: round trips and one-line errors for bad input.

use crate::support::cli::{assert_one_line_error, onceflow, stderr};
use crate::support::*;
use std::time::Duration;

#[test]
fn produce_then_consume_with_keys_as_json() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let topic = rt.block_on(TestTopic::create("cli", 2));
    let b = broker();
    let (o, _) = onceflow(
        &["produce", "-b", &b, "-t", &topic.name, "-K", ":", "-p", "1"],
        "k1:hello\nk2:world\nnokey\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("produced 3 record(s)"),
        "{}",
        stderr(&o)
    );
    let (o, _) = onceflow(&["consume", "-b", &b, "-t", &topic.name, "-e"], "");
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["key"], "k1");
    assert_eq!(lines[0]["value"], "hello");
    assert_eq!(lines[0]["partition"], 1);
    assert_eq!(lines[2]["key"], serde_json::Value::Null);
    assert_eq!(lines[2]["value"], "nokey");
    let (o, _) = onceflow(
        &[
            "consume",
            "-b",
            &b,
            "-t",
            &topic.name,
            "-p",
            "1",
            "-o",
            "1",
            "-c",
            "1",
            "--format",
            "value",
        ],
        "",
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "world\n");
    drop(rt);
}

#[test]
fn unreachable_broker_is_one_line_error_within_the_timeout() {
    let (o, took) = onceflow(
        &[
            "consume",
            "-b",
            "127.0.0.1:1",
            "-t",
            "x",
            "-e",
            "-X",
            "default.api.timeout.ms=2000",
        ],
        "",
    );
    assert_one_line_error(&o, "no broker reachable at 127.0.0.1:1");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let (o, took) = onceflow(&["topics", "list", "-b", "127.0.0.1:1"], "");
    assert_one_line_error(&o, "no broker reachable");
    assert!(
        took < Duration::from_secs(25),
        "default timeout bounds it: took {took:?}"
    );
}

/// Holds with the broker's auto-creation on or off: the consumer is told not to ask for it.
/// The producer's error for a broker that refuses to create a topic is tested in auto_create.rs.
#[test]
fn unknown_topic_is_one_line_error() {
    let missing = unique_topic("no-such-topic");
    let (o, _) = onceflow(
        &[
            "consume",
            "-b",
            &broker(),
            "-t",
            &missing,
            "-e",
            "-X",
            "allow.auto.create.topics=false",
        ],
        "",
    );
    assert_one_line_error(&o, &format!("topic '{missing}' does not exist"));
}

/// With -G the member's own consumer looks the topic up before joining (no second client), so
/// a missing topic fails at once instead of waiting in the group for partitions.
#[test]
fn consume_with_a_group_on_a_missing_topic_is_one_line_error() {
    let missing = unique_topic("no-such-topic");
    let group = unique_topic("cli-missing-group");
    let (o, _) = onceflow(
        &[
            "consume",
            "-b",
            &broker(),
            "-t",
            &missing,
            "-G",
            &group,
            "-e",
            "-X",
            "allow.auto.create.topics=false",
        ],
        "",
    );
    assert_one_line_error(&o, &format!("topic '{missing}' does not exist"));
}

#[test]
fn bad_property_is_one_line_error_naming_it() {
    let (o, _) = onceflow(
        &["produce", "-b", &broker(), "-t", "x", "-X", "lingr.ms=5"],
        "",
    );
    assert_one_line_error(&o, "unknown property 'lingr.ms'");
    let (o, _) = onceflow(
        &["produce", "-b", &broker(), "-t", "x", "-X", "acks=most"],
        "",
    );
    assert_one_line_error(&o, "invalid value 'most' for property 'acks'");
    let (o, _) = onceflow(
        &[
            "consume",
            "-b",
            &broker(),
            "-t",
            "x",
            "-X",
            "isolation.level",
        ],
        "",
    );
    assert_one_line_error(&o, "key=value");
}

#[test]
fn malformed_offset_is_one_line_error() {
    let (o, _) = onceflow(
        &["consume", "-b", &broker(), "-t", "x", "-o", "yesterday"],
        "",
    );
    assert_one_line_error(&o, "invalid offset 'yesterday'");
}

#[test]
fn consume_with_a_group_resumes_at_the_committed_offsets() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let topic = rt.block_on(TestTopic::create("cli-group", 2));
    let b = broker();
    let group = unique_topic("cli-group");
    let lines: String = (0..30).map(|i| format!("{i}\n")).collect();
    assert!(onceflow(&["produce", "-b", &b, "-t", &topic.name], &lines)
        .0
        .status
        .success());
    let (o, _) = onceflow(
        &[
            "consume",
            "-b",
            &b,
            "-t",
            &topic.name,
            "-G",
            &group,
            "-e",
            "--format",
            "value",
        ],
        "",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 30);
    let more: String = (30..35).map(|i| format!("{i}\n")).collect();
    assert!(onceflow(&["produce", "-b", &b, "-t", &topic.name], &more)
        .0
        .status
        .success());
    let (o, _) = onceflow(
        &[
            "consume",
            "-b",
            &b,
            "-t",
            &topic.name,
            "-G",
            &group,
            "-e",
            "--format",
            "value",
        ],
        "",
    );
    let mut got: Vec<i32> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    got.sort();
    assert_eq!(
        got,
        (30..35).collect::<Vec<_>>(),
        "only what came after the commit"
    );
    let (o, _) = onceflow(
        &[
            "consume",
            "-b",
            &b,
            "-t",
            &topic.name,
            "-G",
            &group,
            "-p",
            "0",
        ],
        "",
    );
    assert_one_line_error(&o, "-p cannot be combined with -G");
    drop(rt);
}

/// `onceflow run --explain` prints a SQL job's plan (and a job file's) without running it, and
/// a SQL mistake is one line naming the file, line and column.
#[test]
fn a_sql_job_explains_its_plan_and_names_a_mistake_by_line_and_column() {
    let jobs = repo().join("jobs");
    let sql = jobs.join("rides-and-fares.sql");
    let (o, _) = onceflow(&["run", "--explain", sql.to_str().unwrap()], "");
    assert!(o.status.success(), "{}", stderr(&o));
    let plan = String::from_utf8(o.stdout).unwrap();
    assert!(plan.starts_with("source  kafka [rides, fares]"), "{plan}");
    assert!(
        plan.contains("interval join, f - r within [-60000 ms, 60000 ms]"),
        "{plan}"
    );
    assert!(
        plan.contains("right fares as f: key ride_id, time event_time"),
        "{plan}"
    );
    assert!(
        plan.ends_with("sink    kafka rides-and-fares, exactly-once\n"),
        "{plan}"
    );
    let toml = jobs.join("rides-and-fares.toml");
    let (o, _) = onceflow(&["run", "--explain", toml.to_str().unwrap()], "");
    assert!(o.status.success(), "{}", stderr(&o));
    let dir = std::env::temp_dir().join(unique_topic("onceflow-sql"));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.sql");
    let text = std::fs::read_to_string(&sql)
        .unwrap()
        .replace("f.tip,", "f.tips,");
    std::fs::write(&bad, text).unwrap();
    let (o, _) = onceflow(&["run", bad.to_str().unwrap()], "");
    assert_one_line_error(&o, "bad.sql:");
    assert_one_line_error(
        &o,
        "table fares has no column tips: its columns are ride_id",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
