//! `onceflow run` features beyond the first version, end to end against a real broker: late
//! records to `window.late_topic` inside the sink's transactions, the consumer group's offsets
//! after each checkpoint (for monitoring), input partitions added while the job runs. The job
//! runs as a child process on a shipped job file with its names replaced (as engine_run.rs).
//! Transactional: run on TV2 (9192) and TV1 (9196).

use crate::engine_run::{job_file, log_of, poll_verify, start_job, stop, taxi};
use crate::support::cli::shown;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::ProducerRecord;
use onceflow_taxi::Ride;
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::Instant;

/// An hour boundary (ms since the epoch).
pub(crate) const BASE: i64 = 1_699_999_200_000;
pub(crate) const MINUTE: i64 = 60_000;
pub(crate) const HOUR: i64 = 3_600_000;

/// A ride's END event inside NYC for `driver` at `t`.
pub(crate) fn end(ride_id: u64, driver: u64, t: i64, passengers: u32) -> Ride {
    Ride {
        ride_id,
        driver_id: driver,
        taxi_id: 1000 + driver,
        is_start: false,
        start_lon: -73.98,
        start_lat: 40.75,
        end_lon: -73.95,
        end_lat: 40.78,
        passengers,
        event_time: t,
    }
}

/// Produces `rides` in order to partition `partition` of `topic`, keyed by driver.
pub(crate) async fn produce(topic: &str, partition: i32, rides: &[Ride]) {
    let p = producer(&[("enable.idempotence", "true")]).await;
    for r in rides {
        let rec = ProducerRecord::new(topic.to_owned(), Bytes::from(r.to_json()))
            .with_key(r.key())
            .with_partition(partition);
        p.send(rec).await.unwrap().await.unwrap();
    }
}

/// A scratch directory for one test's job file, state and logs.
pub(crate) fn scratch(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique_topic(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Polls `taxi verify ARGS` until it says OK.
async fn verify_ok(args: &[&str], child: &mut Child, log: &Path) -> Output {
    poll_verify(args, child, log, "say OK", |o| o.status.success()).await
}

/// The hourly job with `window.late_topic` over input with two deliberately late END events:
/// the side topic holds exactly those two (read_committed), and `taxi verify --late` finds
/// the windows exact without them (without `--late` it counts them and fails).
#[tokio::test]
async fn late_records_go_to_the_late_topic_exactly_once_and_the_windows_leave_them_out() {
    let input = TestTopic::create("late-in", 1).await;
    let output = TestTopic::create("late-out", 1).await;
    let late = TestTopic::create("late-side", 1).await;
    let dir = scratch("onceflow-late");
    let prefix = unique_topic("late");
    let path = job_file(
        &dir,
        "rides-per-driver-hourly.toml",
        &input.name,
        &output.name,
        &prefix,
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let with_late = text.replace(
        "# window.late_topic = \"rides-late\"",
        &format!("window.late_topic = \"{}\"", late.name),
    );
    assert_ne!(
        with_late, text,
        "the shipped job lost its late_topic comment"
    );
    std::fs::write(&path, with_late).unwrap();

    let late_rides = [
        end(4, 1, BASE + 20 * MINUTE, 3),
        end(5, 3, BASE + 30 * MINUTE, 4),
    ];
    let mut rides = vec![
        end(1, 1, BASE + 10 * MINUTE, 1),
        end(2, 2, BASE + 11 * MINUTE, 2),
        // Watermark BASE + 2 h − 60 s: the first hour fires.
        end(3, 1, BASE + 2 * HOUR, 1),
    ];
    rides.extend(late_rides.iter().cloned()); // the first hour fired; lateness 0: late
                                              // Watermark BASE + 4 h − 60 s: the hour of ride 3 fires too.
    rides.push(end(6, 2, BASE + 4 * HOUR, 2));
    produce(&input.name, 0, &rides).await;

    let log = dir.join("run.log");
    let mut job = start_job(&path, &log, &["--fresh"]);
    let common = [
        "--job",
        "per-driver-hourly",
        "--input",
        &input.name,
        "--output",
        &output.name,
    ];
    let mut with_late = common.to_vec();
    with_late.extend(["--late", &late.name]);
    let o = verify_ok(&with_late, &mut job, &log).await;
    assert!(
        crate::support::cli::stdout(&o).starts_with("verify: OK"),
        "{}",
        shown(&o)
    );
    let got = consume_all(
        &broker(),
        &late,
        2,
        &[("isolation.level", "read_committed")],
    )
    .await;
    let got: Vec<(Option<Bytes>, Option<Bytes>)> =
        got.into_iter().map(|r| (r.key, r.value)).collect();
    let want: Vec<(Option<Bytes>, Option<Bytes>)> = late_rides
        .iter()
        .map(|r| (Some(Bytes::from(r.key())), Some(Bytes::from(r.to_json()))))
        .collect();
    assert_eq!(
        got, want,
        "the late topic holds exactly the late rides, once"
    );
    // The verifier without the late topic expects the late rides in their window.
    let o = taxi(&[&["verify", "--read-timeout-ms", "60000"], &common[..]].concat()).await;
    assert!(!o.status.success(), "{}", shown(&o));
    stop(job, &log).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The job file of the cleansing job for this test, with its own consumer group.
fn cleansing_job(dir: &Path, input: &str, output: &str, group: &str) -> PathBuf {
    let prefix = unique_topic("feat");
    let path = job_file(dir, "rides-cleansing.toml", input, output, &prefix);
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen(
        "[source]\n",
        &format!("[source]\ngroup.id = \"{group}\"\n"),
        1,
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// After a run and a clean stop, the job's consumer group holds exactly the positions of the
/// last durable checkpoint (what a restart would resume from), read with the Admin client.
#[tokio::test]
async fn after_a_run_the_groups_committed_offsets_are_the_last_checkpoints_positions() {
    let input = TestTopic::create("offsets-in", 3).await;
    let output = TestTopic::create("offsets-out", 3).await;
    let dir = scratch("onceflow-offsets");
    let o = taxi(&["generate", "-t", &input.name, "--count", "500"]).await;
    assert!(o.status.success(), "{}", shown(&o));
    let group = unique_topic("offsets-group");
    let path = cleansing_job(&dir, &input.name, &output.name, &group);
    let log = dir.join("run.log");
    let mut job = start_job(&path, &log, &["--fresh"]);
    let args = [
        "--job",
        "cleansing",
        "--input",
        &input.name,
        "--output",
        &output.name,
    ];
    verify_ok(&args, &mut job, &log).await;
    stop(job, &log).await;

    let parsed = onceflow::engine::job::Job::load(&path).unwrap();
    let layout = onceflow::engine::state::Layout {
        key_groups: 128,
        operators: Vec::new(),
        sink_prefix: parsed.sink.transactional_id_prefix.clone(),
        sink_ids: 3,
    };
    let (_store, record) = onceflow::engine::state::StateStore::open(
        &parsed.settings.state_dir,
        layout,
        onceflow::engine::state::StoreOptions::default(),
        onceflow::engine::state::RestoreFrom::Latest,
    )
    .unwrap();
    assert!(record.id > 0, "no checkpoint was taken");
    let positions: std::collections::BTreeMap<onceflow::client::TopicPartition, i64> = record
        .positions
        .iter()
        .map(|p| {
            (
                onceflow::client::TopicPartition::new(p.topic.clone(), p.partition),
                p.next_offset,
            )
        })
        .collect();
    assert_eq!(positions.len(), 3, "{positions:?}");
    let admin = onceflow::client::Admin::new(client_config(&broker()))
        .await
        .unwrap();
    let committed = admin.committed_offsets(&group, &input.tps()).await.unwrap();
    assert_eq!(
        committed, positions,
        "group {group} vs checkpoint {}",
        record.id
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Partitions added to the input while the job runs are found (partition.discovery.ms,
/// default 10 s) and read from their beginning: rides produced to the new partition (before
/// and after it is found) reach the output exactly once, as `taxi verify` checks.
#[tokio::test]
async fn a_partition_added_mid_run_is_read_from_its_beginning_exactly_once() {
    let input = TestTopic::create("discover-in", 1).await;
    let output = TestTopic::create("discover-out", 2).await;
    let dir = scratch("onceflow-discover");
    let o = taxi(&["generate", "-t", &input.name, "--count", "300"]).await;
    assert!(o.status.success(), "{}", shown(&o));
    let path = cleansing_job(&dir, &input.name, &output.name, &unique_topic("discover-g"));
    let log = dir.join("run.log");
    let mut job = start_job(&path, &log, &["--fresh"]);
    let args = [
        "--job",
        "cleansing",
        "--input",
        &input.name,
        "--output",
        &output.name,
    ];
    verify_ok(&args, &mut job, &log).await;

    let admin = onceflow::client::Admin::new(client_config(&broker()))
        .await
        .unwrap();
    admin.create_partitions(&input.name, 2).await.unwrap();
    // Drivers and rides of their own, so each driver's events stay in one partition (the
    // verifier checks the order per driver).
    let rides: Vec<Ride> = (0..20)
        .map(|i| {
            end(
                10_000_000 + i,
                1_000_000 + i % 4,
                BASE + i as i64 * MINUTE,
                1,
            )
        })
        .collect();
    produce(&input.name, 1, &rides[..10]).await;
    let before = Instant::now();
    let o = verify_ok(&args, &mut job, &log).await;
    assert!(
        crate::support::cli::stdout(&o).starts_with("verify: OK"),
        "{}",
        shown(&o)
    );
    assert!(
        log_of(&log).contains("new source partitions"),
        "{}",
        log_of(&log)
    );
    tracing::info!(took = ?before.elapsed(), "new partition found");
    // Once found, the partition is read like the others.
    produce(&input.name, 1, &rides[10..]).await;
    verify_ok(&args, &mut job, &log).await;
    stop(job, &log).await;
    let _ = std::fs::remove_dir_all(&dir);
}
