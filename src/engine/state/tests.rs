//! The state backend against a real fjall database in a temporary directory.

use std::path::Path;

use super::*;
use crate::client::transactions::PreparedTransaction;
use crate::engine::sink::PreparedOutput;

const COUNT: ValueState = ValueState::new(0);
const SEEN: MapState = MapState::new(1);
const PENDING: ListState = ListState::new(2);
const WINDOWS: TimerState = TimerState::new(3);

fn layout(key_groups: u16) -> Layout {
    Layout {
        key_groups,
        operators: vec![OperatorLayout::new("counts", "count")],
        sink_prefix: Some("job".to_string()),
        sink_ids: 3,
    }
}

fn open(dir: &Path, retain: u32, from: RestoreFrom) -> Result<(StateStore, CheckpointRecord)> {
    StateStore::open(
        dir,
        layout(128),
        StoreOptions {
            retain,
            ..StoreOptions::default()
        },
        from,
    )
}

fn position(next_offset: i64) -> Vec<SourcePosition> {
    vec![SourcePosition {
        topic: "rides".to_string(),
        partition: 0,
        next_offset,
    }]
}

fn committable(id: u64) -> PreparedOutput {
    PreparedOutput::Transaction(PreparedTransaction {
        transactional_id: format!("job-0-{}", id % 3),
        producer_id: 7,
        producer_epoch: id as i16,
        transaction_version: 2,
        transaction_start_ms: 1_000 + id as i64,
        empty: false,
    })
}

/// One checkpoint: snapshot, persist (with a position and a committable), complete.
fn checkpoint(store: &mut StateStore, op: &mut OperatorState, n: u64) {
    let delta = op.snapshot(n).expect("snapshot");
    store
        .persist(n, &[delta], position(n as i64 * 10), vec![committable(n)])
        .expect("persist");
    op.complete(n).expect("complete");
}

fn count(op: &OperatorState, key: &str) -> Option<String> {
    COUNT
        .get(op, key.as_bytes())
        .expect("read")
        .map(|v| String::from_utf8(v).expect("utf8"))
}

#[test]
fn crash_before_persist_restores_exactly_the_last_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut store, record) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        assert_eq!(record.id, 0);
        let mut op = store.operator("counts").expect("op");
        COUNT.set(&mut op, b"a", b"1");
        checkpoint(&mut store, &mut op, 1);
        // Checkpoint 2's writes: one in a frozen delta that never got persisted, one still in
        // the active buffer. Then the process "crashes" (drops everything).
        COUNT.set(&mut op, b"a", b"2");
        let _frozen = op.snapshot(2).expect("snapshot");
        COUNT.set(&mut op, b"b", b"2");
        assert_eq!(count(&op, "a").as_deref(), Some("2"));
        assert_eq!(count(&op, "b").as_deref(), Some("2"));
    }
    let (store, record) = open(dir.path(), 2, RestoreFrom::Latest).expect("reopen");
    assert_eq!(record.id, 1);
    assert_eq!(record.positions, position(10));
    assert_eq!(record.committables, vec![committable(1)]);
    assert_eq!(record.layout, layout(128));
    let op = store.operator("counts").expect("op");
    assert_eq!(count(&op, "a").as_deref(), Some("1"));
    assert_eq!(count(&op, "b"), None);
}

#[test]
fn the_sources_start_recorded_in_checkpoint_zero_is_what_a_restart_before_checkpoint_one_finds() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut store, record) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        assert!(record.positions.is_empty());
        let written = store
            .record_start(RecordPositions::from(position(41)))
            .expect("record the start");
        assert_eq!((written.id, written.positions.clone()), (0, position(41)));
    }
    let (mut store, record) = open(dir.path(), 2, RestoreFrom::Latest).expect("reopen");
    assert_eq!((record.id, record.positions), (0, position(41)));
    // Once a checkpoint is complete, its positions are where a restart starts.
    let mut op = store.operator("counts").expect("op");
    checkpoint(&mut store, &mut op, 1);
    let refused = store
        .record_start(RecordPositions::from(position(7)))
        .unwrap_err();
    assert!(
        refused.to_string().contains("checkpoint 1 is complete"),
        "{refused}"
    );
}

#[test]
fn a_persisted_checkpoint_is_what_restores() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        let mut op = store.operator("counts").expect("op");
        COUNT.set(&mut op, b"a", b"1");
        checkpoint(&mut store, &mut op, 1);
        COUNT.set(&mut op, b"a", b"2");
        COUNT.set(&mut op, b"b", b"2");
        // Persisted but the task never got to complete(): still durable.
        let delta = op.snapshot(2).expect("snapshot");
        store
            .persist(2, &[delta], position(20), vec![])
            .expect("persist");
        assert_eq!(store.latest(), 2);
    }
    let (store, record) = open(dir.path(), 2, RestoreFrom::Latest).expect("reopen");
    assert_eq!(record.id, 2);
    assert_eq!(record.positions, position(20));
    assert!(record.committables.is_empty());
    let op = store.operator("counts").expect("op");
    assert_eq!(count(&op, "a").as_deref(), Some("2"));
    assert_eq!(count(&op, "b").as_deref(), Some("2"));
    assert_eq!(store.generation(), 2, "every open bumps the generation");
}

/// Checkpoint 1's committable was committed after it (checkpoint 3's record no longer lists
/// it); checkpoint 2's was not (3 still lists it). Restoring 1 must not resume the first again
/// (its id may carry a later transaction by now), and a restore of 2 keeps the second.
#[test]
fn a_restore_of_an_older_checkpoint_drops_the_committables_committed_since() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |dir: &Path| {
        let (mut store, _) = open(dir, 3, RestoreFrom::Fresh).expect("fresh");
        let mut op = store.operator("counts").expect("op");
        checkpoint(&mut store, &mut op, 1);
        for (n, listed) in [
            (2, vec![committable(2)]),
            (3, vec![committable(2), committable(3)]),
        ] {
            let delta = op.snapshot(n).expect("snapshot");
            store
                .persist(n, &[delta], position(n as i64 * 10), listed)
                .expect("persist");
            op.complete(n).expect("complete");
        }
    };
    write(dir.path());
    let (store, record) = open(dir.path(), 3, RestoreFrom::Checkpoint(1)).expect("restore 1");
    assert_eq!((record.id, record.committables.len()), (1, 0), "{record:?}");
    let rollback = store.rollback().expect("a rollback");
    assert_eq!(
        (rollback.from, rollback.to, rollback.committed_since),
        (3, 1, 1)
    );
    assert_eq!(rollback.from_positions, Some(position(30)));
    drop(store);
    // Durable: a crash after the rollback finds checkpoint 1 as restored.
    let (store, record) = open(dir.path(), 3, RestoreFrom::Latest).expect("reopen");
    assert!(record.committables.is_empty() && store.rollback().is_none());
    drop(store);

    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path());
    let (_, record) = open(dir.path(), 3, RestoreFrom::Checkpoint(2)).expect("restore 2");
    assert_eq!(
        record.committables,
        vec![committable(2)],
        "still unresolved at 3"
    );
}

#[test]
fn restore_to_an_older_retained_checkpoint_applies_undo_images() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut store, _) = open(dir.path(), 3, RestoreFrom::Fresh).expect("fresh");
        let mut op = store.operator("counts").expect("op");
        COUNT.set(&mut op, b"kept", b"1");
        COUNT.set(&mut op, b"deleted-later", b"1");
        SEEN.insert(&mut op, b"d", b"x", b"1");
        checkpoint(&mut store, &mut op, 1);
        COUNT.set(&mut op, b"kept", b"2");
        COUNT.clear(&mut op, b"deleted-later");
        COUNT.set(&mut op, b"new-in-2", b"2");
        checkpoint(&mut store, &mut op, 2);
        COUNT.set(&mut op, b"kept", b"3");
        COUNT.set(&mut op, b"deleted-later", b"3");
        SEEN.insert(&mut op, b"d", b"y", b"3");
        checkpoint(&mut store, &mut op, 3);
        assert_eq!(store.list().expect("list"), vec![1, 2, 3]);
    }
    let (mut store, record) = open(dir.path(), 3, RestoreFrom::Checkpoint(1)).expect("restore 1");
    assert_eq!(record.id, 1);
    assert_eq!(record.positions, position(10));
    assert_eq!(store.latest(), 1);
    assert_eq!(store.list().expect("list"), vec![1]);
    assert!(store.undo_checkpoints().is_empty());
    let mut op = store.operator("counts").expect("op");
    assert_eq!(count(&op, "kept").as_deref(), Some("1"));
    assert_eq!(count(&op, "deleted-later").as_deref(), Some("1"));
    assert_eq!(count(&op, "new-in-2"), None);
    assert_eq!(
        SEEN.entries(&op, b"d").expect("entries"),
        vec![(b"x".to_vec(), b"1".to_vec())]
    );
    // The job goes on from 1.
    COUNT.set(&mut op, b"kept", b"2'");
    checkpoint(&mut store, &mut op, 2);
    drop((op, store));
    let (store, record) = open(dir.path(), 3, RestoreFrom::Latest).expect("reopen");
    assert_eq!(record.id, 2);
    let op = store.operator("counts").expect("op");
    assert_eq!(count(&op, "kept").as_deref(), Some("2'"));
    assert_eq!(count(&op, "new-in-2"), None);
}

#[test]
fn retention_drops_old_records_and_undo_images() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
    let mut op = store.operator("counts").expect("op");
    for n in 1..=5u64 {
        COUNT.set(&mut op, b"a", n.to_string().as_bytes());
        checkpoint(&mut store, &mut op, n);
    }
    assert_eq!(store.list().expect("list"), vec![4, 5]);
    assert_eq!(store.undo_checkpoints(), vec![5]);
    drop((op, store));
    let err = open(dir.path(), 2, RestoreFrom::Checkpoint(3)).expect_err("3 is gone");
    assert!(matches!(
        err,
        StateError::NotRetained {
            requested: 3,
            oldest: 4,
            latest: 5,
            ..
        }
    ));
    assert!(
        err.to_string().contains("checkpoint 3 is not retained in"),
        "{err}"
    );
    assert!(
        err.to_string().contains("back to checkpoints 4..=5"),
        "{err}"
    );
    let err = open(dir.path(), 2, RestoreFrom::Checkpoint(9)).expect_err("9 never was");
    assert!(
        err.to_string().contains("checkpoint 9 does not exist"),
        "{err}"
    );
    let (store, record) = open(dir.path(), 2, RestoreFrom::Checkpoint(4)).expect("restore 4");
    assert_eq!(record.id, 4);
    let op = store.operator("counts").expect("op");
    assert_eq!(count(&op, "a").as_deref(), Some("4"));
}

#[test]
fn retention_one_keeps_no_undo_and_cannot_go_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path(), 1, RestoreFrom::Fresh).expect("fresh");
    let mut op = store.operator("counts").expect("op");
    for n in 1..=3u64 {
        COUNT.set(&mut op, b"a", n.to_string().as_bytes());
        checkpoint(&mut store, &mut op, n);
    }
    assert_eq!(store.list().expect("list"), vec![3]);
    assert!(store.undo_checkpoints().is_empty());
    let err = store.rollback_to(2).expect_err("no undo");
    assert!(
        matches!(
            err,
            StateError::NotRetained {
                oldest: 3,
                latest: 3,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_changed_layout_is_refused_naming_the_difference() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh"));
    let err = StateStore::open(
        dir.path(),
        layout(256),
        StoreOptions::default(),
        RestoreFrom::Latest,
    )
    .expect_err("layout changed");
    assert_eq!(
        err.to_string(),
        "the job's key groups changed from 128 to 256; restore needs the same job or --fresh"
    );
    // --fresh says it on purpose.
    let (_, record) = StateStore::open(
        dir.path(),
        layout(256),
        StoreOptions::default(),
        RestoreFrom::Fresh,
    )
    .expect("fresh with the new layout");
    assert_eq!(record.layout.key_groups, 256);
}

#[test]
fn a_second_open_of_the_directory_is_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _first = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
    let err = open(dir.path(), 2, RestoreFrom::Latest).expect_err("locked");
    assert!(matches!(err, StateError::Locked { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "another onceflow process holds {}: stop it or give this job its own state directory",
            dir.path().display()
        )
    );
}

#[test]
fn a_missing_directory_is_an_error_not_a_fresh_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nothing-here");
    let err = open(&missing, 2, RestoreFrom::Latest).expect_err("missing");
    assert!(
        matches!(err, StateError::MissingDirectory { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("--fresh"), "{err}");
    assert!(
        !missing.exists(),
        "a failed restore must not create the directory"
    );
}

#[test]
fn fresh_wipes_existing_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        let mut op = store.operator("counts").expect("op");
        COUNT.set(&mut op, b"a", b"1");
        checkpoint(&mut store, &mut op, 1);
        COUNT.set(&mut op, b"a", b"2");
        checkpoint(&mut store, &mut op, 2);
    }
    let (store, record) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh again");
    assert_eq!(record.id, 0);
    assert_eq!(store.list().expect("list"), vec![0]);
    assert!(store.undo_checkpoints().is_empty());
    let op = store.operator("counts").expect("op");
    assert_eq!(count(&op, "a"), None);
}

#[test]
fn map_and_list_state_round_trip_through_a_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        let mut op = store.operator("counts").expect("op");
        SEEN.insert(&mut op, b"driver-1", b"b", b"2");
        SEEN.insert(&mut op, b"driver-1", b"a", b"1");
        SEEN.insert(&mut op, b"driver-12", b"a", b"other key");
        PENDING.push(&mut op, b"driver-1", b"r1").expect("push");
        PENDING.push(&mut op, b"driver-1", b"r2").expect("push");
        checkpoint(&mut store, &mut op, 1);
        // While 2 is in flight, reads see active over frozen over fjall.
        SEEN.remove(&mut op, b"driver-1", b"a");
        SEEN.insert(&mut op, b"driver-1", b"c", b"3");
        let delta = op.snapshot(2).expect("snapshot");
        PENDING.push(&mut op, b"driver-1", b"r3").expect("push");
        SEEN.insert(&mut op, b"driver-1", b"d", b"4");
        let want_map = vec![
            (b"b".to_vec(), b"2".to_vec()),
            (b"c".to_vec(), b"3".to_vec()),
            (b"d".to_vec(), b"4".to_vec()),
        ];
        assert_eq!(SEEN.entries(&op, b"driver-1").expect("entries"), want_map);
        store.persist(2, &[delta], vec![], vec![]).expect("persist");
        assert_eq!(SEEN.entries(&op, b"driver-1").expect("entries"), want_map);
        op.complete(2).expect("complete");
        assert_eq!(SEEN.entries(&op, b"driver-1").expect("entries"), want_map);
        checkpoint(&mut store, &mut op, 3);
    }
    let (store, _) = open(dir.path(), 2, RestoreFrom::Latest).expect("reopen");
    let mut op = store.operator("counts").expect("op");
    assert_eq!(
        SEEN.entries(&op, b"driver-1").expect("entries"),
        vec![
            (b"b".to_vec(), b"2".to_vec()),
            (b"c".to_vec(), b"3".to_vec()),
            (b"d".to_vec(), b"4".to_vec()),
        ]
    );
    assert_eq!(
        SEEN.get(&op, b"driver-12", b"a").expect("get"),
        Some(b"other key".to_vec())
    );
    assert_eq!(
        PENDING.get(&op, b"driver-1").expect("list"),
        vec![b"r1".to_vec(), b"r2".to_vec(), b"r3".to_vec()]
    );
    SEEN.clear(&mut op, b"driver-1").expect("clear");
    PENDING.clear(&mut op, b"driver-1");
    assert!(SEEN.entries(&op, b"driver-1").expect("entries").is_empty());
    assert!(PENDING.get(&op, b"driver-1").expect("list").is_empty());
    assert_eq!(
        SEEN.get(&op, b"driver-12", b"a").expect("get"),
        Some(b"other key".to_vec())
    );
}

#[test]
fn a_cancelled_checkpoint_keeps_its_changes_for_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
    let mut op = store.operator("counts").expect("op");
    COUNT.set(&mut op, b"a", b"1");
    COUNT.set(&mut op, b"b", b"1");
    let _declined = op.snapshot(1).expect("snapshot");
    COUNT.set(&mut op, b"b", b"2");
    assert!(
        op.snapshot(2).is_err(),
        "one checkpoint in flight at a time"
    );
    op.cancel(1).expect("cancel");
    assert!(op.complete(1).is_err(), "cancelled");
    checkpoint(&mut store, &mut op, 2);
    drop((op, store));
    let (store, _) = open(dir.path(), 2, RestoreFrom::Latest).expect("reopen");
    let op = store.operator("counts").expect("op");
    assert_eq!(count(&op, "a").as_deref(), Some("1"));
    assert_eq!(count(&op, "b").as_deref(), Some("2"));
}

#[test]
fn committables_can_be_marked_resolved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
    let mut op = store.operator("counts").expect("op");
    checkpoint(&mut store, &mut op, 1);
    store.update_committables(1, vec![]).expect("resolve");
    drop((op, store));
    let (_, record) = open(dir.path(), 2, RestoreFrom::Latest).expect("reopen");
    assert!(record.committables.is_empty());
    assert_eq!(record.positions, position(10));
}

#[test]
fn persist_refuses_an_old_id_or_a_foreign_delta() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
    let mut op = store.operator("counts").expect("op");
    checkpoint(&mut store, &mut op, 1);
    let delta = op.snapshot(2).expect("snapshot");
    assert!(matches!(
        store.persist(1, &[], vec![], vec![]),
        Err(StateError::Misuse(_))
    ));
    assert!(matches!(
        store.persist(3, std::slice::from_ref(&delta), vec![], vec![]),
        Err(StateError::Misuse(_))
    ));
    assert!(matches!(
        store.persist(2, &[delta.clone(), delta], vec![], vec![]),
        Err(StateError::Misuse(_))
    ));
    assert!(store.operator("nope").is_err());
}

/// Keys the crash child rewrites every checkpoint.
const CRASH_KEYS: u32 = 500;
const CRASH_DIR_ENV: &str = "ONCEFLOW_STATE_CRASH_DIR";

/// Not a test on its own: the child process of
/// `a_kill_mid_persist_restores_a_complete_checkpoint`. Checkpoints forever, each setting
/// every key to its id, and after each persist writes the id to `progress`.
#[test]
fn crash_child_writer() {
    let Some(dir) = std::env::var_os(CRASH_DIR_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let (mut store, record) = open(&dir.join("state"), 2, RestoreFrom::Latest).expect("open");
    let mut op = store.operator("counts").expect("op");
    let started = std::time::Instant::now();
    let mut n = record.id;
    // Bounded so an orphan (parent gone) stops by itself.
    while started.elapsed() < std::time::Duration::from_secs(120) {
        n += 1;
        for i in 0..CRASH_KEYS {
            COUNT.set(&mut op, &i.to_be_bytes(), n.to_string().as_bytes());
        }
        let delta = op.snapshot(n).expect("snapshot");
        store
            .persist(n, &[delta], position(n as i64), vec![])
            .expect("persist");
        op.complete(n).expect("complete");
        let tmp = dir.join("progress.tmp");
        std::fs::write(&tmp, n.to_string()).expect("progress");
        std::fs::rename(&tmp, dir.join("progress")).expect("progress");
    }
}

/// SIGKILL a process that checkpoints in a loop, at random moments (mostly inside a persist:
/// building the batch, writing the journal or in fsync); after each kill the state must be
/// exactly one complete checkpoint's — every key equal to the restored id — and no older than
/// the last checkpoint the child reported durable.
#[test]
fn a_kill_mid_persist_restores_a_complete_checkpoint() {
    use rand::Rng;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().expect("tempdir");
    drop(open(&dir.path().join("state"), 2, RestoreFrom::Fresh).expect("fresh"));
    let progress = |dir: &Path| -> u64 {
        std::fs::read_to_string(dir.join("progress"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let exe = std::env::current_exe().expect("current exe");
    for round in 0..3 {
        let before = progress(dir.path());
        let mut child = std::process::Command::new(&exe)
            .args([
                "engine::state::tests::crash_child_writer",
                "--exact",
                "--test-threads=1",
            ])
            .env(CRASH_DIR_ENV, dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn child");
        let deadline = Instant::now() + Duration::from_secs(90);
        while progress(dir.path()) < before + 3 {
            if let Some(status) = child.try_wait().expect("child status") {
                panic!("round {round}: the child exited ({status}) before 3 more checkpoints");
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: waited 90 s for the child to persist 3 more checkpoints (at {})",
                progress(dir.path())
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // A random point in the child's loop, not a wait for a condition.
        std::thread::sleep(Duration::from_micros(rand::rng().random_range(0..20_000)));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        let durable = progress(dir.path());

        let (store, record) =
            open(&dir.path().join("state"), 2, RestoreFrom::Latest).expect("reopen after kill");
        assert!(
            record.id >= durable,
            "round {round}: restored {} but the child had persisted {durable}",
            record.id
        );
        assert_eq!(record.positions, position(record.id as i64));
        let op = store.operator("counts").expect("op");
        let want = record.id.to_string();
        for i in 0..CRASH_KEYS {
            let got = COUNT.get(&op, &i.to_be_bytes()).expect("read");
            assert_eq!(
                got.as_deref(),
                Some(want.as_bytes()),
                "round {round}: key {i} is not checkpoint {}'s",
                record.id
            );
        }
    }
}

#[test]
fn a_corrupt_checkpoint_record_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        let mut op = store.operator("counts").expect("op");
        checkpoint(&mut store, &mut op, 1);
    }
    {
        // Damage c/1 behind the store's back.
        let db = fjall::Database::builder(dir.path()).open().expect("fjall");
        let meta = db
            .keyspace("meta", fjall::KeyspaceCreateOptions::default)
            .expect("meta");
        meta.insert(super::keys::checkpoint_key(1), b"\x01{not json".to_vec())
            .expect("insert");
        db.persist(fjall::PersistMode::SyncAll).expect("persist");
    }
    let err = open(dir.path(), 2, RestoreFrom::Latest).expect_err("corrupt");
    assert!(matches!(err, StateError::Corrupt { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("checkpoint record 1"), "{msg}");
    assert!(
        msg.contains("--from-checkpoint") && msg.contains("--fresh"),
        "{msg}"
    );
}

/// A damaged latest record does not block going back to an older retained checkpoint.
#[test]
fn from_checkpoint_goes_back_past_a_corrupt_latest_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        let mut op = store.operator("counts").expect("op");
        COUNT.set(&mut op, b"a", b"1");
        checkpoint(&mut store, &mut op, 1);
        COUNT.set(&mut op, b"a", b"2");
        checkpoint(&mut store, &mut op, 2);
    }
    {
        let db = fjall::Database::builder(dir.path()).open().expect("fjall");
        let meta = db
            .keyspace("meta", fjall::KeyspaceCreateOptions::default)
            .expect("meta");
        meta.insert(super::keys::checkpoint_key(2), b"\x07".to_vec())
            .expect("insert");
        db.persist(fjall::PersistMode::SyncAll).expect("persist");
    }
    let err = open(dir.path(), 2, RestoreFrom::Latest).expect_err("corrupt latest");
    assert!(
        err.to_string()
            .contains("checkpoint record 2: unknown format 7"),
        "{err}"
    );
    let (store, record) = open(dir.path(), 2, RestoreFrom::Checkpoint(1)).expect("back to 1");
    assert_eq!(record.id, 1);
    assert_eq!(store.list().expect("list"), vec![1]);
    let op = store.operator("counts").expect("op");
    assert_eq!(count(&op, "a").as_deref(), Some("1"));
}

/// A flipped byte inside a complete journal batch: fjall refuses to recover, and the store
/// says the state is corrupt instead of starting from nothing.
#[test]
fn a_corrupt_journal_is_an_error_not_a_fresh_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Below fjall's journal compression threshold (4 KiB), so it is stored as is.
    let marker = vec![b'Q'; 1000];
    {
        let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        let mut op = store.operator("counts").expect("op");
        COUNT.set(&mut op, b"big", &marker);
        checkpoint(&mut store, &mut op, 1);
        COUNT.set(&mut op, b"a", b"2");
        checkpoint(&mut store, &mut op, 2);
    }
    let mut damaged = false;
    for entry in std::fs::read_dir(dir.path()).expect("read dir") {
        let path = entry.expect("entry").path();
        if !path.is_file() {
            continue;
        }
        let mut bytes = std::fs::read(&path).expect("read");
        if let Some(at) = bytes
            .windows(marker.len())
            .position(|w| w == marker.as_slice())
        {
            bytes[at + 100] ^= 0xff;
            std::fs::write(&path, bytes).expect("write");
            damaged = true;
        }
    }
    assert!(
        damaged,
        "found no journal holding the marker value in {:?}",
        dir.path()
    );
    let err = open(dir.path(), 2, RestoreFrom::Latest).expect_err("corrupt journal");
    assert!(matches!(err, StateError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("journal"), "{err}");
    assert!(
        err.to_string().contains("move the directory aside"),
        "{err}"
    );
}

/// The persister runs on its own thread and tasks own their operator state.
#[test]
fn store_and_operator_state_can_move_to_other_threads() {
    fn send<T: Send + 'static>() {}
    send::<StateStore>();
    send::<OperatorState>();
    send::<FrozenDelta>();
    send::<StateError>();
}

#[test]
fn timers_fire_in_time_order_across_key_groups_and_survive_a_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        let mut op = store.operator("counts").expect("op");
        // "21", "foobar" and "abc" fall in key groups 108, 62 and 27 of 128.
        WINDOWS.register(&mut op, b"21", 3_000);
        WINDOWS.register(&mut op, b"foobar", -1_000);
        WINDOWS.register(&mut op, b"abc", 2_000);
        WINDOWS.register(&mut op, b"abc", 9_000);
        WINDOWS.register(&mut op, b"gone", 1_000);
        checkpoint(&mut store, &mut op, 1);
        WINDOWS.delete(&mut op, b"gone", 1_000);
        WINDOWS.register(&mut op, b"foobar", 2_000);
        checkpoint(&mut store, &mut op, 2);
    }
    let (store, _) = open(dir.path(), 2, RestoreFrom::Latest).expect("reopen");
    let mut op = store.operator("counts").expect("op");
    let due = WINDOWS.due(&mut op, 3_000).expect("due");
    let want: Vec<(i64, Vec<u8>)> = vec![
        (-1_000, b"foobar".to_vec()),
        (2_000, b"abc".to_vec()),
        (2_000, b"foobar".to_vec()),
        (3_000, b"21".to_vec()),
    ];
    assert_eq!(due, want);
    // Unpersisted changes count too: a deleted timer no longer fires, a new one does.
    WINDOWS.delete(&mut op, b"abc", 2_000);
    WINDOWS.register(&mut op, b"late", 2_500);
    assert_eq!(
        WINDOWS.due(&mut op, 2_999).expect("due"),
        vec![
            (-1_000, b"foobar".to_vec()),
            (2_000, b"foobar".to_vec()),
            (2_500, b"late".to_vec()),
        ]
    );
    assert_eq!(WINDOWS.due(&mut op, i64::MAX).expect("due").len(), 5);
    // A key group's timers after a bound, up to another: stored and unpersisted alike.
    let kg = op.key_group(b"abc");
    WINDOWS.register(&mut op, b"abc", 4_000);
    // (after, up to, times)
    let cases: [(Option<i64>, i64, &[i64]); 7] = [
        (None, 9_000, &[2_500, 4_000, 9_000]), // "late" shares the key group
        (Some(2_000), 9_000, &[2_500, 4_000, 9_000]),
        (Some(2_500), 3_999, &[]),
        (Some(4_000), 9_000, &[9_000]),
        (Some(3_999), 4_000, &[4_000]),
        (Some(9_000), i64::MAX, &[]),
        (Some(i64::MAX), i64::MAX, &[]),
    ];
    for (after, up_to, want) in cases {
        let got: Vec<i64> = WINDOWS
            .due_in_group_after(&mut op, kg, after, up_to)
            .expect("due")
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        assert_eq!(got, want, "after {after:?}, up to {up_to}");
    }
    // Timers do not leak into value state of the same operator (other state ids).
    assert_eq!(COUNT.get(&op, b"abc").expect("read"), None);
}

/// Two keyed subtasks of one operator (key groups 0..64 and 64..128 of 128) write their own
/// keys; their deltas merge into the one delta per operator that persist takes, and after a
/// restore each subtask's timer scan sees only its own key groups' timers.
#[test]
fn subtasks_on_key_group_ranges_merge_their_deltas_and_scan_only_their_timers() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        let mut low = store.operator("counts").expect("op").for_key_groups(0..64);
        let mut high = store
            .operator("counts")
            .expect("op")
            .for_key_groups(64..128);
        // "abc" and "foobar" fall in key groups 27 and 62 (low), "21" in 108 (high).
        WINDOWS.register(&mut low, b"abc", 2_000);
        WINDOWS.register(&mut low, b"foobar", 1_000);
        WINDOWS.register(&mut high, b"21", 3_000);
        COUNT.set_in_group(&mut low, 0, b"watermark", b"5");
        COUNT.set_in_group(&mut high, 64, b"watermark", b"7");
        let deltas = vec![
            low.snapshot(1).expect("snap"),
            high.snapshot(1).expect("snap"),
        ];
        let merged = FrozenDelta::merge(deltas);
        assert_eq!(merged.len(), 1, "one delta per operator");
        assert_eq!(merged[0].len(), 5);
        store
            .persist(1, &merged, position(10), Vec::new())
            .expect("persist");
    }
    let (store, _) = open(dir.path(), 2, RestoreFrom::Latest).expect("reopen");
    let mut low = store.operator("counts").expect("op").for_key_groups(0..64);
    let mut high = store
        .operator("counts")
        .expect("op")
        .for_key_groups(64..128);
    let mut all = store.operator("counts").expect("op");
    let due = |op: &mut OperatorState| -> Vec<Vec<u8>> {
        WINDOWS
            .due(op, i64::MAX)
            .expect("due")
            .into_iter()
            .map(|(_, k)| k)
            .collect()
    };
    assert_eq!(due(&mut low), vec![b"foobar".to_vec(), b"abc".to_vec()]);
    assert_eq!(due(&mut high), vec![b"21".to_vec()]);
    assert_eq!(due(&mut all).len(), 3);
    assert_eq!(
        COUNT.get_in_group(&low, 0, b"watermark").expect("read"),
        Some(b"5".to_vec())
    );
    assert_eq!(
        COUNT.get_in_group(&high, 64, b"watermark").expect("read"),
        Some(b"7".to_vec())
    );
}

#[test]
fn persist_reports_the_bytes_its_batch_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
    let mut op = store.operator("counts").expect("op");
    // No state change: only the record (positions, layout) is written.
    let empty = op.snapshot(1).expect("snapshot");
    let record_only = store
        .persist(1, &[empty], position(1), vec![])
        .expect("persist");
    op.complete(1).expect("complete");
    assert!(record_only > 0);
    // A 1000-byte value (with its key and its undo image) on top of a record of the same size.
    COUNT.set(&mut op, b"a", &[b'x'; 1000]);
    let delta = op.snapshot(2).expect("snapshot");
    let with_value = store
        .persist(2, &[delta], position(2), vec![])
        .expect("persist");
    assert!(
        with_value >= record_only + 1000,
        "{with_value} after {record_only}"
    );
}

/// `memtable_bytes` reaches fjall: ~3 MiB of state over a 1 MiB memtable has been sealed or
/// written out as tables by the last persist, while fjall's default (64 MiB) still holds it
/// all in the active memtable. (The memory budget of state larger than RAM rests on it.)
#[test]
fn a_small_memtable_moves_state_out_of_memory() {
    for (memtable, moved_out) in [(Some(1 << 20), true), (None, false)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = StoreOptions {
            retain: 1,
            cache_bytes: Some(1 << 20),
            memtable_bytes: memtable,
        };
        let (mut store, _) =
            StateStore::open(dir.path(), layout(128), options, RestoreFrom::Fresh).expect("open");
        let mut op = store.operator("counts").expect("op");
        let value = vec![b'v'; 1000];
        for n in 1..=3u64 {
            for i in 0..1000u64 {
                COUNT.set(&mut op, format!("key-{n}-{i}").as_bytes(), &value);
            }
            checkpoint(&mut store, &mut op, n);
        }
        let out = op.keyspace.table_count() + op.keyspace.sealed_memtable_count();
        assert_eq!(
            out > 0,
            moved_out,
            "memtable {memtable:?}: {out} tables/sealed"
        );
        assert_eq!(
            COUNT.get(&op, b"key-1-7").expect("read").as_deref(),
            Some(&value[..])
        );
    }
}

/// Scans of a few entries at a time, through fjall and both deltas, see each live entry of the
/// state once, in key order, and only that state's.
#[test]
fn a_scan_a_few_entries_at_a_time_sees_every_live_entry_once_across_fjall_and_the_deltas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
    let mut op = store.operator("counts").expect("op").for_key_groups(0..64);
    let keys: Vec<String> = (0..60).map(|i| format!("k{i}")).collect();
    let ours: Vec<&String> = keys.iter().filter(|k| op.key_group(k.as_bytes()) < 64).collect();
    // In fjall: every key; then deleted and rewritten in the frozen delta and the active one.
    for k in &keys {
        COUNT.set(&mut op, k.as_bytes(), b"disk");
        SEEN.insert(&mut op, k.as_bytes(), b"m", b"other state");
    }
    checkpoint(&mut store, &mut op, 1);
    for k in ours.iter().step_by(3) {
        COUNT.clear(&mut op, k.as_bytes());
    }
    let _in_flight = op.snapshot(2).expect("snapshot");
    for k in ours.iter().step_by(5) {
        COUNT.set(&mut op, k.as_bytes(), b"active");
    }
    let mut expected: Vec<(Vec<u8>, Vec<u8>)> = ours
        .iter()
        .enumerate()
        .filter_map(|(i, k)| {
            let value = match (i % 5 == 0, i % 3 == 0) {
                (true, _) => "active",
                (false, true) => return None,
                (false, false) => "disk",
            };
            let kg = op.key_group(k.as_bytes());
            Some((keys::state_key(kg, 0, k.as_bytes()), value.as_bytes().to_vec()))
        })
        .collect();
    expected.sort();
    for limit in [1, 2, 7, 1000] {
        let (mut seen, mut after, mut scans) = (Vec::new(), None, 0);
        loop {
            let step = op.some_entries_of(0, after.as_deref(), limit).expect("scan");
            assert!(step.entries.len() <= limit, "at most {limit} a scan");
            seen.extend(step.entries);
            scans += 1;
            match step.resume {
                Some(k) => after = Some(k),
                None => break,
            }
        }
        assert_eq!(seen, expected, "limit {limit}");
        assert!(scans >= ours.len() / limit, "limit {limit}: {scans} scans");
    }
}

/// The timer heads a handle keeps (the scans they answer do not read the store) answer what
/// the store would, through registrations below and above the watermark, deletions, writes of
/// timer keys not made by the timer state, and checkpoints completed and cancelled: a model
/// of the live timers is compared with every scan, at random (the seed in every failure).
#[test]
fn timer_scans_answer_like_a_model_of_the_live_timers() {
    use std::collections::BTreeSet;
    for seed in 1..=6u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path(), 2, RestoreFrom::Fresh).expect("fresh");
        let mut op = store.operator("counts").expect("op");
        let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut below = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n.max(1)
        };
        // Keys of two key groups: a group's head (64 timers with 128 groups) runs out often.
        let kg_of = |k: &[u8]| key_group(k, 128);
        let groups = [kg_of(b"k0"), kg_of(b"k1")];
        let keys: Vec<Vec<u8>> = (0..5_000)
            .map(|i| format!("k{i}").into_bytes())
            .filter(|k| groups.contains(&kg_of(k)))
            .take(300)
            .collect();
        let mut live: BTreeSet<(u16, i64, Vec<u8>)> = BTreeSet::new();
        let (mut w, mut next_checkpoint, mut in_flight) = (0i64, 1u64, None::<FrozenDelta>);
        for step in 0..4_000 {
            let key = keys[below(keys.len() as u64) as usize].clone();
            let kg = kg_of(&key);
            let why = format!("seed {seed}, step {step}, watermark {w}");
            match below(100) {
                0..=44 => {
                    // Mostly after the watermark; some at or below it (not due from here on).
                    let t = w - 200 + below(4_000) as i64;
                    WINDOWS.register(&mut op, &key, t);
                    live.insert((kg, t, key));
                }
                45..=59 => {
                    let nth = below(live.len() as u64) as usize;
                    if let Some((kg, t, key)) = live.iter().nth(nth).cloned() {
                        WINDOWS.delete(&mut op, &key, t);
                        live.remove(&(kg, t, key));
                    }
                }
                60..=64 => {
                    // A timer key written as a stored key (as a state-wide rewrite does).
                    let t = w + below(3_000) as i64;
                    let stored = super::keys::timer_key(kg, 3, t, &key);
                    if below(2) == 0 {
                        op.put_stored(stored, Some(Vec::new()));
                        live.insert((kg, t, key));
                    } else {
                        op.put_stored(stored, None);
                        live.remove(&(kg, t, key));
                    }
                }
                65..=69 => match in_flight.take() {
                    None => {
                        in_flight = Some(op.snapshot(next_checkpoint).expect("snapshot"));
                        next_checkpoint += 1;
                    }
                    Some(delta) if below(3) == 0 => {
                        op.cancel(delta.checkpoint()).expect("cancel");
                    }
                    Some(delta) => {
                        let n = delta.checkpoint();
                        store
                            .persist(n, &[delta], position(n as i64), Vec::new())
                            .expect("persist");
                        op.complete(n).expect("complete");
                    }
                },
                70..=94 => {
                    // The watermark advances: each group's timers in (w, w'] fire and go.
                    let to = w + below(400) as i64;
                    for kg in groups {
                        let got = WINDOWS
                            .due_in_group_after(&mut op, kg, Some(w), to)
                            .expect("due");
                        let want: Vec<(i64, Vec<u8>)> = live
                            .iter()
                            .filter(|(g, t, _)| *g == kg && *t > w && *t <= to)
                            .map(|(_, t, k)| (*t, k.clone()))
                            .collect();
                        assert_eq!(got, want, "{why}: group {kg} in ({w}, {to}]");
                        for (t, k) in got {
                            WINDOWS.delete(&mut op, &k, t);
                            live.remove(&(kg, t, k));
                        }
                    }
                    w = to;
                }
                _ => {
                    // A whole group's scan, from its first timer.
                    let to = w + below(2_000) as i64 - 500;
                    let got = WINDOWS.due_in_group(&mut op, kg, to).expect("due");
                    let want: Vec<(i64, Vec<u8>)> = live
                        .iter()
                        .filter(|(g, t, _)| *g == kg && *t <= to)
                        .map(|(_, t, k)| (*t, k.clone()))
                        .collect();
                    assert_eq!(got, want, "{why}: group {kg} up to {to}");
                }
            }
        }
    }
}
