//! Two keyed stages: the first stage's watermark reaches the second only after the whole
//! firing it caused.
//!
//! The hourly top drivers by tips (jobs/hourly-top-drivers-by-tips.toml) over fares of 20,000
//! drivers: about 3,200 of them earn tips in each hour, so the watermark that closes an hour
//! fires the first stage's sums in chunks of ~1,024 (`FIRE_CHUNK`). The second stage must
//! rank all of them: the verifier's exact top 3 of every closed hour. The inverse
//! (`ONCEFLOW_TEST_SKIP=stage-watermark`: the watermark goes on after the first chunk) ranks
//! an hour from its first chunk alone, and the sums of the later chunks come late: the
//! verifier reports wrong ranks. Transactional: run at TV2 and TV1.

use crate::engine_run::{job_file, poll_verify, start_job_with_env, stop, taxi};
use crate::support::cli::shown;
use crate::support::*;

/// Drivers in the pool (two thirds on duty at a time).
const DRIVERS: &str = "20000";
/// Rides (and so fares) at one a second of event time: three hours and a little, all three
/// closed (9 ranks).
const RIDES: &str = "11000";

/// Runs the job over fresh fares with `env` until `taxi verify` says what `done` wants;
/// returns its verdict.
async fn ranked(label: &str, env: &[(&str, &str)], done: impl Fn(&str) -> bool) -> String {
    let rides = TestTopic::create_with(&broker(), &format!("{label}-rides"), 1, &[]).await;
    let fares = TestTopic::create_with(&broker(), &format!("{label}-fares"), 3, &[]).await;
    let output = TestTopic::create_with(&broker(), &format!("{label}-out"), 1, &[]).await;
    let generated = taxi(&[
        "generate",
        "-t",
        &rides.name,
        "--fares",
        &fares.name,
        "--count",
        RIDES,
        "--rate",
        "1",
        "--drivers",
        DRIVERS,
        "--partitions",
        "3",
    ])
    .await;
    assert!(generated.status.success(), "{}", shown(&generated));
    let dir = std::env::temp_dir().join(unique_topic("onceflow-stages"));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = unique_topic(label);
    let job = job_file(
        &dir,
        "hourly-top-drivers-by-tips.toml",
        &fares.name,
        &output.name,
        &prefix,
    );
    let log = dir.join("run.log");
    let mut child = start_job_with_env(&job, &log, &["--fresh"], env);
    let args = [
        "--job",
        "hourly-top-drivers-by-tips",
        "--input",
        &fares.name,
        "--output",
        &output.name,
    ];
    let verdict = poll_verify(&args, &mut child, &log, "give the verdict wanted", |o| {
        done(&String::from_utf8_lossy(&o.stdout))
    })
    .await;
    stop(child, &log).await;
    let _ = std::fs::remove_dir_all(&dir);
    drop((rides, fares, output));
    String::from_utf8_lossy(&verdict.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_stage_ranks_every_sum_of_a_firing_in_chunks() {
    let verdict = ranked("stages", &[], |v| v.starts_with("verify: OK")).await;
    assert!(verdict.contains("OK — 9 records"), "{verdict}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watermark_passed_on_before_the_firings_end_ranks_from_part_of_the_sums() {
    let env = [("ONCEFLOW_TEST_SKIP", "stage-watermark")];
    let verdict = ranked("stages-off", &env, |v| v.contains("wrong")).await;
    eprintln!("stage-watermark off: {verdict}");
    assert!(verdict.contains("FAILED"), "{verdict}");
}
