//! `settings.errors.tolerance` end to end: input records the cleansing job (a filter, no
//! window) cannot process (a value that is not JSON, a tombstone) stop the job naming the
//! record (`none`), are counted and logged (`skip`), or go to the dead-letter topic in the
//! checkpoint's transaction (`dead-letter`), exactly once across a SIGKILL. Transactional:
//! runs at TV2 and TV1.

use crate::engine_features::{end, scratch, BASE, MINUTE};
use crate::engine_metrics::{free_addr, scrape_until};
use crate::engine_run::{job_file, log_of, start_job, stop};
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{ConsumerRecord, ProducerRecord};
use onceflow_taxi::Ride;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(120);

/// What goes to the input, in order, on partition 0.
enum In {
    Ride(Ride),
    NotJson(&'static str),
    Tombstone,
}

/// Rides `from..to` (inside NYC: the cleansing filter lets them all through).
fn rides(from: u64, to: u64) -> Vec<In> {
    (from..to)
        .map(|i| In::Ride(end(i, i % 7, BASE + i as i64 * MINUTE, 1)))
        .collect()
}

async fn produce(topic: &str, input: Vec<In>) {
    let p = producer(&[("enable.idempotence", "true")]).await;
    for i in input {
        let mut r = match i {
            In::Ride(r) => {
                ProducerRecord::new(topic.to_owned(), Bytes::from(r.to_json())).with_key(r.key())
            }
            In::NotJson(text) => {
                ProducerRecord::new(topic.to_owned(), Bytes::from_static(text.as_bytes()))
            }
            In::Tombstone => {
                let mut r = ProducerRecord::new(topic.to_owned(), Bytes::new())
                    .with_key(Bytes::from_static(b"gone"));
                r.value = None;
                r
            }
        };
        r.partition = Some(0);
        p.send(r).await.unwrap().await.unwrap();
    }
}

/// The cleansing job on `input` → `output`, with `settings` lines added to [settings].
fn job(dir: &Path, input: &str, output: &str, settings: &str) -> PathBuf {
    let path = job_file(
        dir,
        "rides-cleansing.toml",
        input,
        output,
        &unique_topic("errors"),
    );
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replacen("[settings]\n", &format!("[settings]\n{settings}"), 1),
    )
    .unwrap();
    path
}

/// Every record of `topic` (one partition) read_committed, to its end.
pub(crate) async fn committed(topic: &TestTopic) -> Vec<ConsumerRecord> {
    let mut c = committed_reader(&broker(), &topic.tps()).await;
    let mut out = Vec::new();
    let start = Instant::now();
    loop {
        out.extend(c.poll(Duration::from_millis(200)).await.unwrap());
        if c.at_end() {
            return out;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "did not reach the end of {}",
            topic.name
        );
    }
}

fn ride_ids(records: &[ConsumerRecord]) -> Vec<u64> {
    records
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(r.value.as_ref().unwrap()).unwrap();
            v["ride_id"].as_u64().unwrap()
        })
        .collect()
}

/// Waits until `topic` holds at least `n` committed records.
pub(crate) async fn wait_for(
    topic: &TestTopic,
    n: usize,
    child: &mut Child,
    log: &Path,
) -> Vec<ConsumerRecord> {
    let start = Instant::now();
    loop {
        let got = committed(topic).await;
        if got.len() >= n {
            return got;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "onceflow run exited ({status}) with {} of {n} records in {}:\n{}",
                got.len(),
                topic.name,
                log_of(log)
            );
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{} of {n} records in {} within {DEADLINE:?}:\n{}",
            got.len(),
            topic.name,
            log_of(log)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn by_default_a_record_that_is_not_json_stops_the_job_naming_it_and_nothing_after_it_is_committed(
) {
    let input = TestTopic::create("errors-none-in", 1).await;
    let output = TestTopic::create("errors-none-out", 1).await;
    let dir = scratch("onceflow-errors-none");
    let mut records = rides(0, 50);
    records.push(In::NotJson("{\"ride_id\": 50,"));
    records.extend(rides(51, 100));
    produce(&input.name, records).await;
    let log = dir.join("run.log");
    let path = job(&dir, &input.name, &output.name, "");
    let child = start_job(&path, &log, &["--fresh"]);
    let status = tokio::task::spawn_blocking(move || {
        let mut child = child;
        child.wait().unwrap()
    })
    .await
    .unwrap();
    assert!(
        !status.success(),
        "the job went on past a record it cannot process:\n{}",
        log_of(&log)
    );
    let text = log_of(&log);
    assert!(
        text.contains(&format!(
            "input record {}-0 offset 50: the value is not JSON",
            input.name
        )) && text.contains("errors.tolerance"),
        "{text}"
    );
    let out = ride_ids(&committed(&output).await);
    assert!(
        out.iter().all(|id| *id < 50),
        "committed past the bad record: {out:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn skip_counts_and_logs_each_bad_record_and_every_good_one_arrives_once() {
    let input = TestTopic::create("errors-skip-in", 1).await;
    let output = TestTopic::create("errors-skip-out", 1).await;
    let dir = scratch("onceflow-errors-skip");
    let mut records = rides(0, 40);
    records.push(In::NotJson("ride 40"));
    records.extend(rides(41, 80));
    records.push(In::Tombstone);
    records.extend(rides(81, 120));
    produce(&input.name, records).await;
    let log = dir.join("run.log");
    let path = job(
        &dir,
        &input.name,
        &output.name,
        "errors.tolerance = \"skip\"\n",
    );
    let addr = free_addr().to_string();
    let mut child = start_job(&path, &log, &["--fresh", "--metrics-addr", &addr]);
    let (_, s) = scrape_until(addr.parse().unwrap(), &mut child, &log, |s| {
        s.get("onceflow_skipped_records_total").copied() == Some(2.0)
            && s.get("onceflow_sink_records_total").copied() == Some(118.0)
    })
    .await;
    assert_eq!(s["onceflow_source_records_total"], 120.0);
    let out = wait_for(&output, 118, &mut child, &log).await;
    let mut ids = ride_ids(&out);
    ids.sort_unstable();
    let want: Vec<u64> = (0..120).filter(|i| *i != 40 && *i != 80).collect();
    assert_eq!(ids, want, "every good ride once");
    stop(child, &log).await;
    let text = log_of(&log);
    for offset in [40, 80] {
        assert!(
            text.contains(&format!("{}-0 offset {offset}", input.name)) && text.contains("skipped"),
            "offset {offset} not logged:\n{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn dead_letters_go_to_their_topic_with_headers_exactly_once_across_a_sigkill() {
    let input = TestTopic::create("errors-dlq-in", 1).await;
    let output = TestTopic::create("errors-dlq-out", 1).await;
    let dlq = TestTopic::create("errors-dlq", 1).await;
    let dir = scratch("onceflow-errors-dlq");
    let mut first = rides(0, 30);
    first.push(In::NotJson("not json"));
    first.extend(rides(31, 60));
    produce(&input.name, first).await;
    let log = dir.join("run.log");
    let settings = format!(
        "errors.tolerance = \"dead-letter\"\nerrors.deadletterqueue.topic.name = \"{}\"\n",
        dlq.name
    );
    let path = job(&dir, &input.name, &output.name, &settings);
    let mut child = start_job(&path, &log, &["--fresh"]);
    wait_for(&dlq, 1, &mut child, &log).await;
    // SIGKILL once the first dead letter is committed; the rest of the input comes after,
    // and a restart resumes from the last checkpoint.
    child.kill().unwrap();
    child.wait().unwrap();
    let mut second = rides(60, 90);
    second.push(In::Tombstone);
    second.extend(rides(91, 120));
    produce(&input.name, second).await;
    let log2 = dir.join("run2.log");
    let mut child = start_job(&path, &log2, &[]);
    wait_for(&output, 118, &mut child, &log2).await;
    wait_for(&dlq, 2, &mut child, &log2).await;
    stop(child, &log2).await;
    let mut ids = ride_ids(&committed(&output).await);
    ids.sort_unstable();
    let want: Vec<u64> = (0..120).filter(|i| *i != 30 && *i != 90).collect();
    assert_eq!(ids, want, "every good ride once");
    type Letter = (Option<Vec<u8>>, BTreeMap<String, String>);
    let got: Vec<Letter> = committed(&dlq)
        .await
        .into_iter()
        .map(|r| {
            let headers = r
                .headers
                .iter()
                .map(|h| {
                    (
                        String::from_utf8_lossy(&h.key).into_owned(),
                        String::from_utf8_lossy(h.value.as_deref().unwrap_or_default())
                            .into_owned(),
                    )
                })
                .collect();
            (r.value.map(|v| v.to_vec()), headers)
        })
        .collect();
    assert_eq!(got.len(), 2, "each dead letter once: {got:?}");
    assert_eq!(
        got[0].0.as_deref(),
        Some(&b"not json"[..]),
        "the record as it came"
    );
    assert_eq!(got[0].1["onceflow.error.topic"], input.name);
    assert_eq!(got[0].1["onceflow.error.partition"], "0");
    assert_eq!(got[0].1["onceflow.error.offset"], "30");
    assert!(
        got[0].1["onceflow.error.reason"].starts_with("the value is not JSON"),
        "{got:?}"
    );
    assert_eq!(got[1].1["onceflow.error.offset"], "90");
    assert!(
        got[1].1["onceflow.error.reason"].contains("tombstone"),
        "{got:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// In a keyed job (the hourly window after key_by) the dead letter is made in the source
/// subtask, before the key exchange, and written by a keyed subtask's sink: it arrives once, and
/// the windows go on.
#[tokio::test]
async fn a_keyed_job_writes_its_dead_letters_through_the_keyed_subtasks_sink() {
    let input = TestTopic::create("errors-keyed-in", 1).await;
    let output = TestTopic::create("errors-keyed-out", 1).await;
    let dlq = TestTopic::create("errors-keyed-dlq", 1).await;
    let dir = scratch("onceflow-errors-keyed");
    let mut records = rides(0, 20);
    records.push(In::NotJson("{broken"));
    // Rides two hours later close the first hour's windows.
    records.extend((20..25).map(|i| In::Ride(end(i, i % 7, BASE + 2 * 60 * MINUTE + i as i64, 1))));
    produce(&input.name, records).await;
    let settings = format!(
        "errors.tolerance = \"dead-letter\"\nerrors.deadletterqueue.topic.name = \"{}\"\n",
        dlq.name
    );
    let path = job_file(
        &dir,
        "rides-per-driver-hourly.toml",
        &input.name,
        &output.name,
        &unique_topic("errors-keyed"),
    );
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replacen("[settings]\n", &format!("[settings]\n{settings}"), 1),
    )
    .unwrap();
    let log = dir.join("run.log");
    let mut child = start_job(&path, &log, &["--fresh"]);
    wait_for(&dlq, 1, &mut child, &log).await;
    // The first hour's windows (7 drivers) fire once the later rides pass the watermark.
    wait_for(&output, 7, &mut child, &log).await;
    stop(child, &log).await;
    let letters = committed(&dlq).await;
    assert_eq!(letters.len(), 1, "the dead letter once");
    assert_eq!(letters[0].value.as_deref(), Some(&b"{broken"[..]));
    let _ = std::fs::remove_dir_all(&dir);
}
