//! `source.start = "latest"` and a crash before the first checkpoint: the cleansing job starts
//! at the end of its input (records written before are not its to read), is SIGKILLed before
//! it takes a checkpoint, and starts again. Checkpoint 0 recorded where it started, so the
//! restart reads every record written since the first start — none skipped because "latest"
//! was resolved again — and still none from before. The inverse switches the record off
//! (`ONCEFLOW_TEST_SKIP=start-record`) and must see the records written between the two
//! starts missing. Transactional: run at TV2 and TV1.

use crate::engine_files::job_from;
use crate::engine_run::{log_of, start_job_with_env, stop, DEADLINE};
use crate::support::*;
use bytes::Bytes;
use onceflow::client::ProducerRecord;
use std::path::Path;
use std::time::{Duration, Instant};

/// Rides `range` (inside the cleansing job's box) into `topic`, in order.
async fn produce(topic: &TestTopic, range: std::ops::Range<u64>) {
    let p = producer(&[("enable.idempotence", "true"), ("acks", "all")]).await;
    for i in range {
        let value = format!(
            "{{\"ride_id\":{i},\"driver_id\":7,\"taxi_id\":3,\"is_start\":true,\"start_lon\":-73.98,\"start_lat\":40.75,\"end_lon\":-73.95,\"end_lat\":40.78,\"passengers\":2,\"event_time\":{}}}",
            1_767_225_600_000u64 + i * 1000
        );
        p.send(
            ProducerRecord::new(topic.name.clone(), Bytes::from(value)).with_key(Bytes::from("7")),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    p.close().await.unwrap();
}

/// The ride ids the output holds (read_committed), in order, once it holds `last`.
async fn output_until(topic: &TestTopic, last: u64) -> Vec<u64> {
    let mut c = committed_reader(&broker(), &topic.tps()).await;
    let mut ids = Vec::new();
    let start = Instant::now();
    while !ids.contains(&last) {
        assert!(
            start.elapsed() < DEADLINE,
            "ride {last} not in the output within {DEADLINE:?}; read {ids:?}"
        );
        for r in c.poll(Duration::from_millis(300)).await.unwrap() {
            let v: serde_json::Value =
                serde_json::from_slice(r.value.as_deref().unwrap_or_default()).unwrap();
            ids.push(v["ride_id"].as_u64().unwrap());
        }
    }
    ids
}

/// The cleansing job at `start = "latest"` on this test's topics, checkpointing every
/// `interval_ms`.
fn job(
    dir: &Path,
    input: &str,
    output: &str,
    prefix: &str,
    interval_ms: u64,
) -> std::path::PathBuf {
    let sub = dir.join(format!("interval-{interval_ms}"));
    std::fs::create_dir_all(&sub).unwrap();
    let path = job_from(
        &sub,
        "rides-cleansing.toml",
        &[
            ("topics = ", format!("topics = [\"{input}\"]")),
            ("start = ", "start = \"latest\"".into()),
            ("topic = ", format!("topic = \"{output}\"")),
            (
                "transactional.id.prefix = ",
                format!("transactional.id.prefix = \"{prefix}\""),
            ),
            (
                "checkpoint.interval.ms = ",
                format!("checkpoint.interval.ms = {interval_ms}"),
            ),
            // What a two-minute interval needs (and the brokers' default maximum).
            (
                "transaction.timeout.ms = ",
                "transaction.timeout.ms = 900000".into(),
            ),
            (
                "state.dir = ",
                format!("state.dir = \"{}\"", dir.join("state").display()),
            ),
        ],
    );
    path
}

/// Waits until `run` positioned its source (and, unless switched off, recorded where).
async fn reading(run: &mut std::process::Child, log: &Path) {
    let start = Instant::now();
    while !log_of(log).contains("source subtask starting") {
        assert!(
            run.try_wait().unwrap().is_none(),
            "the run exited: {}",
            log_of(log)
        );
        assert!(
            start.elapsed() < DEADLINE,
            "the run never started its source"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Rides 0..20 before the first start, 20..60 after it, the run killed before any
/// checkpoint, the second run, 60..80: returns the ride ids of the output, in order.
async fn killed_before_the_first_checkpoint(label: &str, env: &[(&str, &str)]) -> Vec<u64> {
    let input = TestTopic::create(&format!("{label}-in"), 1).await;
    let output = TestTopic::create(&format!("{label}-out"), 1).await;
    let dir = std::env::temp_dir().join(unique_topic(&format!("onceflow-{label}")));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = unique_topic(label);
    produce(&input, 0..20).await;
    // No checkpoint in the first run: its interval is two minutes.
    let first = job(&dir, &input.name, &output.name, &prefix, 120_000);
    let log = dir.join("first.log");
    let mut run = start_job_with_env(&first, &log, &["--fresh"], env);
    reading(&mut run, &log).await;
    produce(&input, 20..60).await;
    run.kill().unwrap();
    run.wait().unwrap();
    assert!(
        !log_of(&log).contains("checkpoint durable"),
        "the first run took a checkpoint"
    );
    let second = job(&dir, &input.name, &output.name, &prefix, 300);
    let log = dir.join("second.log");
    let mut run = start_job_with_env(&second, &log, &[], env);
    reading(&mut run, &log).await;
    produce(&input, 60..80).await;
    let ids = output_until(&output, 79).await;
    stop(run, &log).await;
    let _ = std::fs::remove_dir_all(&dir);
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latest_start_killed_before_its_first_checkpoint_starts_again_where_it_started() {
    let ids = killed_before_the_first_checkpoint("latest-restart", &[]).await;
    let want: Vec<u64> = (20..80).collect();
    assert_eq!(
        ids, want,
        "the output is not rides 20..80 once each, in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_recorded_start_a_restart_skips_what_arrived_in_between() {
    let env = [("ONCEFLOW_TEST_SKIP", "start-record")];
    let ids = killed_before_the_first_checkpoint("latest-restart-off", &env).await;
    assert!(
        !ids.contains(&20) && ids.contains(&60),
        "with the start not recorded the restart read rides from before it: {ids:?}"
    );
}
