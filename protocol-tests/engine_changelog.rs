//! Cluster mode and a compacted changelog whose cleaner removes tombstones: a member that gets
//! a keyed task back after another member fired (and deleted) its windows must not keep them.
//!
//! Job (b) by two members on a private broker whose cleaner runs every half second, the
//! changelog created beforehand with `delete.retention.ms=1000`, `segment.ms=1000` and
//! `min.cleanable.dirty.ratio=0.01`. Member A alone takes in hour 0 for 40 drivers (both
//! keyed tasks' state in its local store); B joins and A leaves, so B owns every task; hour 2
//! arrives and B fires hour 0, writing tombstones for its state; the cleaner removes them; A
//! starts again on its state directory and B leaves, so A restores the tasks it had before.
//! Its local copy is older than
//! `delete.retention.ms`, so it reads the changelog from the start instead of forward from
//! its offset (whose suffix no longer holds the tombstones): hour 0 is written once per
//! driver. The inverse (`ONCEFLOW_TEST_SKIP=copy-age`) reads forward and fires hour 0 again.
//! Transactional: run at TV2 and TV1 (private brokers 19572 and 19582, 1000 more at TV1).

use crate::engine_cluster_chaos::OutputReader;
use crate::engine_members::{cluster_job_with, Members};
use crate::engine_run::{plain_log, DEADLINE};
use crate::support::broker::PrivateBroker;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{Admin, Producer, ProducerRecord};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const PORT: u16 = 19572;
const HOUR_MS: i64 = 3_600_000;
const EPOCH_MS: i64 = 1_767_225_600_000;
const DRIVERS: u64 = 40;

/// END events of every driver at `t` (+ the driver's index in seconds), both partitions.
async fn rides(p: &Producer, topic: &str, t: i64, id: &mut u64) {
    for d in 0..DRIVERS {
        *id += 1;
        let v = format!(
            "{{\"ride_id\":{id},\"is_start\":false,\"driver_id\":{d},\"event_time\":{},\"passengers\":1}}",
            t + d as i64 * 1000
        );
        p.send(ProducerRecord::new(topic, Bytes::from(v)).with_partition((d % 2) as i32))
            .await
            .unwrap();
    }
    p.flush().await.unwrap();
}

/// Waits until `done` holds, failing with the members' logs after [`DEADLINE`].
async fn wait_until<F, Fut>(ms: &mut Members, what: &str, done: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !done().await {
        ms.assert_alive();
        assert!(
            start.elapsed() < DEADLINE,
            "{what} not within {DEADLINE:?}: {}",
            ms.context()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The tombstones (records without a value) the changelog holds now, read_committed.
async fn tombstones(addr: &str, changelog: &TestTopic) -> usize {
    let mut c = committed_reader(addr, &changelog.tps()).await;
    let mut n = 0;
    let start = Instant::now();
    while !c.at_end() && start.elapsed() < DEADLINE {
        n += c
            .poll(Duration::from_millis(200))
            .await
            .map_or(0, |rs| rs.iter().filter(|r| r.value.is_none()).count());
    }
    n
}

/// The scenario of the module docs; returns the hour-0 windows per driver in the output.
async fn a_task_back_after_the_cleaner_removed_its_tombstones(
    label: &'static str,
    port: u16,
    env: &[(&'static str, &'static str)],
) -> BTreeMap<u64, usize> {
    let broker = tokio::task::block_in_place(|| {
        PrivateBroker::start_with(port, "log.cleaner.backoff.ms=500")
    });
    let addr = broker.addr.clone();
    let dir = std::env::temp_dir().join(unique_topic(&format!("onceflow-{label}")));
    std::fs::create_dir_all(&dir).unwrap();
    let input = TestTopic::create_with(&addr, &format!("{label}-in"), 2, &[]).await;
    let output = TestTopic::create_with(&addr, &format!("{label}-out"), 2, &[]).await;
    let name = unique_topic(label);
    let admin = Admin::new(client_config(&addr)).await.unwrap();
    let changelog = format!("{name}-window-changelog");
    admin
        .create_topics(
            &[onceflow::client::admin::NewTopic::new(changelog.clone(), 2)
                .with_config("cleanup.policy", "compact")
                .with_config("delete.retention.ms", "1000")
                .with_config("segment.ms", "1000")
                .with_config("min.cleanable.dirty.ratio", "0.01")
                .with_config("min.compaction.lag.ms", "0")],
        )
        .await
        .unwrap();
    let mut changelog = TestTopic::adopt(&changelog);
    changelog.partitions = 2;
    let job = cluster_job_with(
        &dir,
        "rides-per-driver-hourly.toml",
        &input.name,
        &output.name,
        &name,
        &[],
    );
    let mut ms = Members::on(label, (job, dir.clone()), &addr, 0, env);
    let producer = idempotent_producer(&addr).await;
    let mut id = 0;

    // A alone: hour 0 of every driver, in both keyed tasks' state.
    ms.start(0);
    ms.wait_log(0, "tasks assigned").await;
    rides(&producer, &input.name, EPOCH_MS + 10_000, &mut id).await;
    let group = name.clone();
    let fed = DRIVERS as i64;
    let committed = || async {
        admin
            .committed_offsets(&group, &input.tps())
            .await
            .map(|m| m.values().sum::<i64>() >= fed)
            .unwrap_or(false)
    };
    wait_until(&mut ms, "member A's commit of hour 0", committed).await;

    // B joins; A leaves: B owns every task.
    ms.start(1);
    ms.wait_log(1, "tasks assigned").await;
    ms.leave(0).await;
    let b_log = ms.members[1].log.clone();
    let all_keyed = |log: std::path::PathBuf| async move {
        plain_log(&log)
            .lines()
            .any(|l| l.contains("tasks assigned") && l.contains("keyed=2"))
    };
    wait_until(&mut ms, "member B owning every keyed task", || {
        all_keyed(b_log.clone())
    })
    .await;

    // Hour 2: hour 0 fires (tombstones for its state), then more of hour 2 keeps the
    // changelog's segments rolling until the cleaner has removed every tombstone.
    let mut out = OutputReader::new(&addr, &output).await;
    let mut t = EPOCH_MS + 2 * HOUR_MS;
    let start = Instant::now();
    loop {
        rides(&producer, &input.name, t, &mut id).await;
        t += 1_000;
        out.poll().await;
        let fired = out.read.iter().filter(|((_, s), _)| *s == EPOCH_MS).count();
        if fired >= DRIVERS as usize && tombstones(&addr, &changelog).await == 0 {
            break;
        }
        ms.assert_alive();
        assert!(
            start.elapsed() < DEADLINE,
            "hour 0 fired for {fired} drivers, tombstones still there: {}",
            ms.context()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // A starts again on its state directory (its local copy is current to before hour 2),
    // B leaves: A takes every task back, from its local copy and the changelog.
    ms.start(0);
    ms.wait_log(0, "tasks assigned").await;
    ms.leave(1).await;
    let a_log = ms.members[0].log.clone();
    wait_until(&mut ms, "member A owning every keyed task again", || {
        all_keyed(a_log.clone())
    })
    .await;
    // Hour 4: what A's restored state holds fires (hour 2, and hour 0 again if it came back).
    rides(&producer, &input.name, EPOCH_MS + 4 * HOUR_MS, &mut id).await;
    let start = Instant::now();
    loop {
        out.poll().await;
        let hour2 = out
            .read
            .iter()
            .filter(|((_, s), _)| *s == EPOCH_MS + 2 * HOUR_MS)
            .count();
        if hour2 >= DRIVERS as usize {
            break;
        }
        ms.assert_alive();
        assert!(
            start.elapsed() < DEADLINE,
            "hour 2 fired for {hour2} drivers: {}",
            ms.context()
        );
    }
    ms.leave(0).await;
    out.read_to_end().await;
    let hour0 = out.per_driver(EPOCH_MS);
    eprintln!(
        "{label}: hour 0 per driver {hour0:?}; events {:?}",
        ms.events
    );
    drop(ms);
    let _ = std::fs::remove_dir_all(&dir);
    hour0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_taken_back_after_the_cleaner_removed_its_tombstones_fires_each_window_once() {
    let hour0 =
        a_task_back_after_the_cleaner_removed_its_tombstones("changelog-age", PORT, &[]).await;
    assert_eq!(hour0.len(), DRIVERS as usize, "{hour0:?}");
    assert!(
        hour0.values().all(|n| *n == 1),
        "hour 0 written again: {hour0:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_an_old_local_copy_forward_fires_deleted_windows_again() {
    let env = [("ONCEFLOW_TEST_SKIP", "copy-age")];
    let hour0 =
        a_task_back_after_the_cleaner_removed_its_tombstones("changelog-age-off", PORT + 10, &env)
            .await;
    assert!(
        hour0.values().any(|n| *n > 1),
        "with the copy's age ignored no window fired twice: {hour0:?}"
    );
}
