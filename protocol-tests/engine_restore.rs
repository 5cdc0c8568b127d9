//! `onceflow run --from-checkpoint N` end to end: the shipped per-driver-hourly job (its file
//! with names replaced, as engine_run.rs does, and `checkpoint.retained = 3`) runs as a child
//! process until several checkpoints are retained, stops, and starts again from an older
//! retained checkpoint; asking for one no longer retained is a one-line error naming the
//! retained ones. Transactional: run on TV2 (9192) and TV1 (9196).

use crate::engine_run::{assert_running, job_file, plain_log, start_job, stop, taxi, DEADLINE};
use crate::support::cli::{assert_one_line_error, onceflow_async, shown};
use crate::support::*;
use onceflow::client::TopicPartition;
use onceflow::engine::checkpoint::Positions;
use onceflow::engine::job::Job;
use onceflow::engine::state::{
    CheckpointRecord, Layout, OperatorLayout, RestoreFrom, StateStore, StoreOptions,
};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

const RETAINED: u64 = 3;

/// The hourly job's state layout (one window operator), as the runtime opens it.
fn layout(job: &Job) -> Layout {
    Layout {
        key_groups: 128,
        operators: vec![OperatorLayout::new("window", "window-aggregate")],
        sink_prefix: job.sink.transactional_id_prefix.clone(),
        sink_ids: 3,
    }
}

/// The retained checkpoint ids and the records of the oldest and the latest, read from the
/// stopped job's state (opening it as the next run would, without a rollback).
fn retained(job: &Job) -> (Vec<u64>, CheckpointRecord, CheckpointRecord) {
    let options = StoreOptions {
        retain: RETAINED as u32,
        ..StoreOptions::default()
    };
    let (store, latest) = StateStore::open(
        &job.settings.state_dir,
        layout(job),
        options,
        RestoreFrom::Latest,
    )
    .unwrap();
    let ids = store.list().unwrap();
    let oldest = store.record(ids[0]).unwrap();
    (ids, oldest, latest)
}

/// The positions as the runtime logs them ("source positioned").
fn logged(record: &CheckpointRecord) -> String {
    let p: Positions = record
        .positions
        .iter()
        .map(|s| {
            let tp = TopicPartition {
                topic: s.topic.clone(),
                partition: s.partition,
            };
            (tp, s.next_offset)
        })
        .collect();
    format!("{p:?}")
}

/// The job's log has a line containing every one of `needles`.
fn logged_line(log: &Path, needles: &[&str]) -> bool {
    plain_log(log)
        .lines()
        .any(|l| needles.iter().all(|n| l.contains(n)))
}

/// Waits until the job's log has a line containing every one of `needles`.
async fn wait_for_log(child: &mut Child, log: &Path, needles: &[&str]) {
    let start = Instant::now();
    while !logged_line(log, needles) {
        assert_running(child, log);
        assert!(
            start.elapsed() < DEADLINE,
            "no line with {needles:?} in the job's log within {DEADLINE:?}:\n{}",
            plain_log(log)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Rides to partition 0 of `topic`, one every 50 ms, until aborted.
async fn trickle(topic: String) {
    let p = producer(&[]).await;
    for i in 0u64.. {
        let ride = serde_json::json!({
            "ride_id": 1_000_000 + i, "driver_id": 999_999, "taxi_id": 1, "is_start": false,
            "start_lon": -73.98, "start_lat": 40.75, "end_lon": -73.95, "end_lat": 40.78,
            "passengers": 1, "event_time": 1_700_000_000_000_i64 + i as i64
        });
        let r = onceflow::client::ProducerRecord::new(topic.clone(), ride.to_string())
            .with_partition(0);
        p.send(r).await.unwrap().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Several checkpoints, a stop, then `--from-checkpoint <the oldest retained>`: the restart
/// says it restored that checkpoint, positions the source at its positions, and keeps the
/// checkpoints up to it (the later ones are rolled back); `--from-checkpoint 1`, retired by
/// then, is one line naming the retained range.
#[tokio::test]
async fn a_restart_from_an_older_retained_checkpoint_resumes_at_its_positions() {
    let input = TestTopic::create("restore-in", 3).await;
    let output = TestTopic::create("restore-out", 3).await;
    let dir = std::env::temp_dir().join(unique_topic("onceflow-restore"));
    std::fs::create_dir_all(&dir).unwrap();
    let o = taxi(&["generate", "-t", &input.name, "--count", "2000"]).await;
    assert!(o.status.success(), "{}", shown(&o));
    let prefix = unique_topic("restore");
    let path = job_file(
        &dir,
        "rides-per-driver-hourly.toml",
        &input.name,
        &output.name,
        &prefix,
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen(
        "# checkpoint.retained = 2",
        &format!("checkpoint.retained = {RETAINED}"),
        1,
    );
    std::fs::write(&path, text).unwrap();
    let job = Job::load(&path).unwrap();
    assert_eq!(job.settings.checkpoint_retained, RETAINED);

    // First run: until checkpoint RETAINED + 2 is durable (1 and 2 are retired by then),
    // with a trickle of rides so that every checkpoint has other positions.
    let log1 = dir.join("run1.log");
    let mut first = start_job(&path, &log1, &["--fresh"]);
    let trickle = tokio::spawn(trickle(input.name.clone()));
    let want = RETAINED + 2;
    let durable = format!("checkpoint={want}");
    wait_for_log(&mut first, &log1, &["checkpoint durable", &durable]).await;
    stop(first, &log1).await;
    trickle.abort();
    let (ids, oldest, latest) = retained(&job);
    assert_eq!(ids.len() as u64, RETAINED, "{ids:?}");
    assert!(latest.id >= want && ids[0] > 1, "{ids:?}");
    assert_ne!(
        logged(&oldest),
        logged(&latest),
        "the oldest and the latest retained checkpoints have the same positions"
    );
    let k = oldest.id;

    // A checkpoint no longer retained: one line naming what is.
    let argv: Vec<String> = [
        "run",
        path.to_str().unwrap(),
        "-b",
        &broker(),
        "--from-checkpoint",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let o = onceflow_async(argv, "").await;
    assert_one_line_error(
        &o,
        &format!(
            "checkpoint 1 is not retained in {}: restore can go back to checkpoints {k}..={}",
            job.settings.state_dir.display(),
            latest.id
        ),
    );

    // Restart from the oldest retained: it says so and resumes at its positions.
    let log2 = dir.join("run2.log");
    let mut second = start_job(&path, &log2, &["--from-checkpoint", &k.to_string()]);
    // Its first checkpoint is k + 1: the ids after k were rolled back with their state.
    let next = format!("checkpoint={}", k + 1);
    wait_for_log(&mut second, &log2, &["checkpoint durable", &next]).await;
    let restored = format!("checkpoint={k}");
    assert!(
        logged_line(&log2, &["state restored", &restored]),
        "the restart does not say it restored checkpoint {k}:\n{}",
        plain_log(&log2)
    );
    let positions = format!("positions={}", logged(&oldest));
    assert!(
        logged_line(&log2, &["source positioned", &positions]),
        "the restart is not positioned at checkpoint {k}'s {positions}:\n{}",
        plain_log(&log2)
    );
    stop(second, &log2).await;
    // It said before starting that the rollback replays, and counted what it read again.
    let said = plain_log(&log2);
    assert!(
        said.contains(&format!("run: checkpoint {k} is older than the latest"))
            && said.contains("input records read again after the rollback"),
        "the restart did not say it replays:\n{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
