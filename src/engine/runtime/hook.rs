//! A test-only pause point, so the chaos test (protocol-tests/engine_chaos.rs) can SIGKILL
//! the runtime at a moment it has proven to be at, not one it hopes to hit.
//!
//! The hooks exist in debug builds only (the test builds the protocol tests run): in a release
//! build every point returns at once and every protection is on, whatever the environment
//! says, and a hook variable that is set is reported once as ignored. CI checks that the
//! release binary holds none of the hooks' text.
//!
//! `ONCEFLOW_TEST_PAUSE=<point>[:<nth>]` (read once, at the first point reached) arms the
//! `nth` (default 1st) time the runtime reaches `<point>`: it logs the marker line
//! `test pause at <point>, checkpoint N` (tracing, WARN) and then waits forever, until the
//! process is killed. Unset (every real run), a reached point costs one load of a
//! [`OnceLock`] and does nothing; a malformed value is logged once and ignored. The pause only
//! stops the task: nothing is written or sent while it waits, so a kill during it is exactly a
//! crash at that point.
//!
//! Points:
//! - `checkpoint-persisted`: checkpoint N, which has committables, is durable (the state
//!   store's SyncAll returned) and its transactions are not committed yet (the coordinator has
//!   not heard `Persisted`, so no commit was sent).
//! - `keyed-record`: a cluster member is about to process a record (or marker) of its keyed
//!   tasks' repartition partitions; it holds its worker, so nothing more is read, written or
//!   committed (`runtime::cluster::member`). The checkpoint it logs is 0.
//!
//! `ONCEFLOW_TEST_PAUSE_UNTIL=stop` ends the pause when the job is asked to stop (SIGTERM)
//! instead: a stop that lands while checkpoint N is being written, at a moment the test has
//! proven. The marker line then says "waiting to be asked to stop".
//!
//! `ONCEFLOW_TEST_SKIP=<protection>` switches one protection off, so that an inverse test
//! can show the failure it prevents (the project's rule: every fault test keeps one). It logs
//! a WARN line saying so each time the protection is skipped. Protections:
//! - `retire`: after a rescale down, the open transactions of the sink tasks that no longer
//!   exist are left open (`runtime::local::retire`), holding read_committed readers at their LSO.
//! - `alignment`: a keyed subtask snapshots at the first barrier N of its inputs instead of
//!   aligning them (`runtime::local::alignment`): records of the other inputs still before their
//!   barrier N are left out of N's state although N's positions are past them.
//! - `resumption`: when every input of a watermark was idle and one reports again, only that
//!   one counts again (`time::InputWatermarks`): the first partition back moves the
//!   watermark alone, past records the others are still delivering.
//! - `fencing`: a cluster member adds its offsets to its transaction without its generation
//!   and member id (`runtime::cluster`), so the group coordinator cannot refuse a zombie's,
//!   and commits the work of tasks it finds lost instead of aborting it.
//! - `final-checkpoint`: a stop returns at once instead of taking, committing and recording a
//!   final checkpoint (`runtime::local::coordinate`): the subtasks are dropped with their
//!   transactions open, and a checkpoint made durable just before may never be committed; a
//!   cluster member (`runtime::cluster::member`) leaves at a stop with its transaction open,
//!   without committing it or leaving the group.
//! - `start-record`: a run without checkpoints does not record where its sources start in
//!   checkpoint 0 (`runtime::local::coordinate`), so a restart before the first checkpoint resolves
//!   `source.start = "latest"` again and skips what arrived in between.
//! - `copy-age`: a cluster member reads its local copy of a task's changelog forward however
//!   old it is (`runtime::cluster::changelog::trusted`), so tombstones the cleaner removed
//!   meanwhile never reach it and fired windows come back.
//! - `revoke-markers`: a cluster member's commit inside a rebalance callback sends no watermark
//!   markers (`runtime::cluster::member`), so offsets can pass the records that moved a
//!   watermark that nobody reports.
//! - `repartition-retention`: a cluster job creates its repartition topic with the broker's
//!   default retention and accepts a finite one (`runtime::cluster::ensure_topics`), so the
//!   broker deletes repartition records by their event-time stamps, read or not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tokio::sync::watch;

/// The environment variable that arms a pause.
pub(crate) const ENV: &str = "ONCEFLOW_TEST_PAUSE";

/// Where the runtime may pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// A checkpoint with committables is durable; its commits are not sent.
    CheckpointPersisted,
    /// A cluster member is about to process a keyed task's record.
    KeyedRecord,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::CheckpointPersisted => "checkpoint-persisted",
            Point::KeyedRecord => "keyed-record",
        }
    }
}

/// The armed point and which arrival at it pauses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Armed {
    point: Point,
    nth: u64,
}

/// `<point>[:<nth>]`, nth ≥ 1; `None` for anything else.
fn parse(spec: &str) -> Option<Armed> {
    let (name, nth) = match spec.split_once(':') {
        Some((name, n)) => (name, n.trim().parse::<u64>().ok().filter(|n| *n >= 1)?),
        None => (spec, 1),
    };
    let point = [Point::CheckpointPersisted, Point::KeyedRecord]
        .into_iter()
        .find(|p| p.name() == name.trim())?;
    Some(Armed { point, nth })
}

/// Whether this build has the hooks: debug builds only.
const HOOKS: bool = cfg!(debug_assertions);

/// `var`'s value when the hooks are built; in a release build `None`, saying once that a set
/// variable is ignored.
fn hook_var(var: &str) -> Option<String> {
    let value = std::env::var(var).ok()?;
    if HOOKS {
        return Some(value);
    }
    tracing::warn!(
        "{var} is set, but this is a release build: the test hooks exist in debug builds only; ignored"
    );
    None
}

fn armed() -> Option<Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    *ARMED.get_or_init(|| {
        let spec = hook_var(ENV)?;
        let armed = parse(&spec);
        if armed.is_none() {
            tracing::warn!(
                value = %spec,
                "{ENV} is not <point>[:<nth>] with point checkpoint-persisted or keyed-record and nth >= 1; ignored"
            );
        }
        armed
    })
}

/// The environment variable that makes an armed pause end at the job's stop.
pub(crate) const UNTIL_ENV: &str = "ONCEFLOW_TEST_PAUSE_UNTIL";

/// The environment variable that switches a protection off.
pub(crate) const SKIP_ENV: &str = "ONCEFLOW_TEST_SKIP";

/// A protection an inverse test may switch off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protection {
    /// Aborting the open transactions of retired sink tasks after a rescale down.
    Retire,
    /// Aligning the barriers of a keyed subtask's inputs.
    Alignment,
    /// Counting every input again when a stopped stream resumes (`InputWatermarks`).
    Resumption,
    /// A cluster member's offsets carry its generation (KIP-447 zombie fencing).
    Fencing,
    /// A stop takes, commits and records a final checkpoint before it returns.
    FinalCheckpoint,
    /// A run without checkpoints records where its sources start in checkpoint 0.
    StartRecord,
    /// A cluster member reads a local changelog copy forward only while it is younger than
    /// the changelog's `delete.retention.ms`.
    CopyAge,
    /// A cluster member's commit in a rebalance callback sends the watermarks that moved.
    RevokeMarkers,
    /// A cluster job's repartition topic keeps its records for ever (`retention.ms=-1`).
    RepartitionRetention,
    /// A keyed stage passes its watermark on to the next one only once a firing is sent.
    StageWatermark,
}

impl Protection {
    fn name(self) -> &'static str {
        match self {
            Protection::Retire => "retire",
            Protection::Alignment => "alignment",
            Protection::Resumption => "resumption",
            Protection::Fencing => "fencing",
            Protection::FinalCheckpoint => "final-checkpoint",
            Protection::StartRecord => "start-record",
            Protection::CopyAge => "copy-age",
            Protection::RevokeMarkers => "revoke-markers",
            Protection::RepartitionRetention => "repartition-retention",
            Protection::StageWatermark => "stage-watermark",
        }
    }
}

fn skip_of(spec: &str) -> Option<Protection> {
    [
        Protection::Retire,
        Protection::Alignment,
        Protection::Resumption,
        Protection::Fencing,
        Protection::FinalCheckpoint,
        Protection::StartRecord,
        Protection::CopyAge,
        Protection::RevokeMarkers,
        Protection::RepartitionRetention,
        Protection::StageWatermark,
    ]
    .into_iter()
    .find(|p| p.name() == spec.trim())
}

/// Whether a test switched `protection` off (`ONCEFLOW_TEST_SKIP`); logs it when so. Unset
/// (every real run): false.
pub(crate) fn skipped(protection: Protection) -> bool {
    static SKIP: OnceLock<Option<Protection>> = OnceLock::new();
    if !HOOKS {
        // Once, when a protection is first asked about: whether the variable was set.
        SKIP.get_or_init(|| hook_var(SKIP_ENV).and(None));
        return false;
    }
    let skip = *SKIP.get_or_init(|| {
        let spec = std::env::var(SKIP_ENV).ok()?;
        let p = skip_of(&spec);
        if p.is_none() {
            tracing::warn!(value = %spec, "{SKIP_ENV} names no protection (retire, alignment, resumption, fencing, final-checkpoint, start-record, copy-age, revoke-markers, repartition-retention); ignored");
        }
        p
    });
    let off = skip == Some(protection);
    if off {
        tracing::warn!(
            "test: protection {} switched off ({SKIP_ENV})",
            protection.name()
        );
    }
    off
}

/// The runtime reached `point` at checkpoint `checkpoint`: pauses if this is the armed
/// arrival (until killed, or under `ONCEFLOW_TEST_PAUSE_UNTIL=stop` until `stop` turns true),
/// else returns at once.
pub(crate) async fn reached(point: Point, checkpoint: u64, stop: Option<watch::Receiver<bool>>) {
    static ARRIVALS: AtomicU64 = AtomicU64::new(0);
    if !HOOKS {
        armed();
        return;
    }
    let Some(armed) = armed().filter(|a| a.point == point) else {
        return;
    };
    if ARRIVALS.fetch_add(1, Ordering::Relaxed) + 1 != armed.nth {
        return;
    }
    let until_stop = std::env::var(UNTIL_ENV).is_ok_and(|v| v.trim() == "stop");
    match stop.filter(|_| until_stop) {
        Some(mut stop) => {
            tracing::warn!(
                checkpoint,
                "test pause at {}, checkpoint {checkpoint} ({ENV}); waiting to be asked to stop",
                point.name()
            );
            let _ = stop.wait_for(|s| *s).await;
        }
        None => {
            tracing::warn!(
                checkpoint,
                "test pause at {}, checkpoint {checkpoint} ({ENV}); waiting to be killed",
                point.name()
            );
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_spec_names_a_point_and_an_arrival() {
        let at = |nth| {
            Some(Armed {
                point: Point::CheckpointPersisted,
                nth,
            })
        };
        let cases = [
            ("checkpoint-persisted", at(1)),
            ("checkpoint-persisted:3", at(3)),
            ("checkpoint-persisted:0", None),
            ("checkpoint-persisted:x", None),
            (
                "keyed-record",
                Some(Armed {
                    point: Point::KeyedRecord,
                    nth: 1,
                }),
            ),
            ("commit-sent", None),
            ("", None),
        ];
        for (spec, want) in cases {
            assert_eq!(parse(spec), want, "{spec}");
        }
    }

    #[test]
    fn the_skip_spec_names_a_protection() {
        let cases = [
            ("retire", Some(Protection::Retire)),
            (" retire ", Some(Protection::Retire)),
            ("alignment", Some(Protection::Alignment)),
            ("final-checkpoint", Some(Protection::FinalCheckpoint)),
            ("start-record", Some(Protection::StartRecord)),
            (
                "repartition-retention",
                Some(Protection::RepartitionRetention),
            ),
            ("watermarks", None),
            ("", None),
        ];
        for (spec, want) in cases {
            assert_eq!(skip_of(spec), want, "{spec}");
        }
    }
}
