//! `onceflow run --metrics-addr` end to end: the shipped cleansing job (job (a), names
//! replaced as engine_run.rs does) runs as a child process over rides from `onceflow taxi
//! generate`, and its `/metrics` endpoint is scraped until two checkpoints completed and the
//! records in equal what was generated; the names a Prometheus user relies on are there, with
//! values that agree with the run. Transactional: run on TV2 (9192) and TV1 (9196).

use crate::engine_run::{assert_running, job_file, log_of, start_job, taxi};
use crate::support::cli::{assert_one_line_error, onceflow_async, shown, stderr, stdout};
use crate::support::*;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Child;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RIDES: &str = "1000";
const DEADLINE: Duration = Duration::from_secs(180);

/// A port nobody listens on now (the child binds it right after).
pub(crate) fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// One HTTP/1.1 GET; (status line, headers and body), or None while nothing listens.
async fn get(addr: SocketAddr, path: &str) -> Option<(String, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    s.write_all(request.as_bytes()).await.ok()?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.to_owned(), body.to_owned()))
}

/// The samples of a scrape: `name{labels}` → value.
pub(crate) fn samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap();
            (name.to_owned(), value.parse().unwrap())
        })
        .collect()
}

fn value(s: &BTreeMap<String, f64>, name: &str) -> f64 {
    *s.get(name)
        .unwrap_or_else(|| panic!("{name} missing from the scrape: {s:#?}"))
}

/// Scrapes until `done` holds for the samples; returns them.
pub(crate) async fn scrape_until(
    addr: SocketAddr,
    child: &mut Child,
    log: &std::path::Path,
    done: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> (String, BTreeMap<String, f64>) {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        assert_running(child, log);
        if let Some((head, body)) = get(addr, "/metrics").await {
            let s = samples(&body);
            if done(&s) {
                return (head, s);
            }
            last = body;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the scrape did not show the run's progress within {DEADLINE:?}; last:\n{last}\njob log:\n{}",
            log_of(log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_running_job_exposes_its_checkpoints_transactions_records_and_lag_at_metrics() {
    let input = TestTopic::create("metrics-in", 3).await;
    let output = TestTopic::create("metrics-out", 3).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-metrics"));
    std::fs::create_dir_all(&dir).unwrap();
    let o = taxi(&["generate", "-t", &input.name, "--count", RIDES]).await;
    assert!(o.status.success(), "{}", shown(&o));
    let generated: f64 = stdout(&o)
        .strip_prefix("taxi generate: ")
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no event count in {}", shown(&o)));
    let prefix = unique_topic("metrics");
    let job = job_file(
        &dir,
        "rides-cleansing.toml",
        &input.name,
        &output.name,
        &prefix,
    );
    let log = dir.join("run.log");
    let addr = free_addr();
    let metrics_addr = addr.to_string();
    let mut child = start_job(&job, &log, &["--fresh", "--metrics-addr", &metrics_addr]);

    let filter_in = "onceflow_operator_records_in_total{operator=\"filter\",index=\"0\"}";
    let filter_out = "onceflow_operator_records_out_total{operator=\"filter\",index=\"0\"}";
    let lag = |p: i32| {
        format!(
            "onceflow_source_lag_records{{topic=\"{}\",partition=\"{p}\"}}",
            input.name
        )
    };
    // What the run reaches once it has read everything and checkpointed twice.
    let (head, s) = scrape_until(addr, &mut child, &log, |s| {
        let get = |n: &str| s.get(n).copied().unwrap_or(-1.0);
        get("onceflow_checkpoints_completed_total") >= 2.0
            && get("onceflow_source_records_total") == generated
            && get(filter_in) == generated
            && get(filter_out) == get("onceflow_sink_records_total")
            && get("onceflow_sink_commits_total") >= 1.0
            && (0..3).all(|p| get(&lag(p)) == 0.0)
    })
    .await;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );

    // Records: the filter let through what the sink got, not everything.
    let records_out = value(&s, "onceflow_sink_records_total");
    assert_eq!(value(&s, filter_out), records_out);
    assert!(
        records_out > 0.0 && records_out < generated,
        "{records_out}"
    );

    // Checkpoints: durations observed, bytes written, nothing failed.
    let completed = value(&s, "onceflow_checkpoints_completed_total");
    // (A scrape may fall between a completion's histogram update and its counter's.)
    let count = value(&s, "onceflow_checkpoint_duration_seconds_count");
    assert!(
        count == completed || count == completed + 1.0,
        "{count} {completed}"
    );
    assert_eq!(
        value(
            &s,
            "onceflow_checkpoint_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        count
    );
    assert!(value(&s, "onceflow_checkpoint_duration_seconds_sum") > 0.0);
    assert!(value(&s, "onceflow_checkpoint_alignment_seconds_count") >= completed);
    assert_eq!(value(&s, "onceflow_checkpoints_failed_total"), 0.0);
    assert!(value(&s, "onceflow_checkpoint_last_id") >= 2.0);
    assert!(value(&s, "onceflow_checkpoint_last_size_bytes") > 0.0);
    assert!(value(&s, "onceflow_checkpoint_persisted_bytes_total") > 0.0);

    // Transactions: committed, none aborted or fenced; the age gauge is there.
    assert_eq!(value(&s, "onceflow_sink_aborts_total"), 0.0);
    assert_eq!(value(&s, "onceflow_sink_fencings_total"), 0.0);
    let age = value(&s, "onceflow_sink_oldest_open_transaction_age_seconds");
    assert!((0.0..300.0).contains(&age), "{age}");

    // Lag: a gauge per partition of the input (read to its end by now).
    for p in 0..3 {
        assert_eq!(value(&s, &lag(p)), 0.0, "partition {p}");
    }

    let (missing, _) = get(addr, "/nope").await.expect("an answer");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    child.kill().unwrap();
    child.wait().unwrap();
    // stderr is a file here, not a terminal: no progress line.
    assert!(!log_of(&log).contains("oldest txn"), "{}", log_of(&log));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An address the metrics cannot be served on stops the run before it starts, in one line
/// naming the flag.
#[tokio::test]
async fn a_metrics_address_in_use_is_one_line_naming_the_flag() {
    let dir = std::env::temp_dir().join(unique_topic("onceflow-metrics-busy"));
    std::fs::create_dir_all(&dir).unwrap();
    let job = job_file(&dir, "rides-cleansing.toml", "in", "out", "busy");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let args = [
        "run",
        job.to_str().unwrap(),
        "-b",
        &broker(),
        "--metrics-addr",
        &addr,
    ];
    let o = onceflow_async(args.iter().map(|s| s.to_string()).collect(), "").await;
    assert_one_line_error(&o, "--metrics-addr");
    assert!(stderr(&o).contains(&addr), "{}", shown(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
