//! The coordinator's invariants, one test each, and a seeded random-sequence test.

use super::*;
use crate::client::transactions::PreparedTransaction;

/// A committable small enough for tables.
#[derive(Debug, Clone, PartialEq)]
struct T {
    name: String,
    start: Option<Millis>,
    empty: bool,
}

impl Committable for T {
    fn name(&self) -> &str {
        &self.name
    }
    fn start_ms(&self) -> Option<Millis> {
        self.start
    }
    fn is_empty(&self) -> bool {
        self.empty
    }
}

fn txn(name: &str) -> T {
    T {
        name: name.into(),
        start: None,
        empty: false,
    }
}

fn empty(name: &str) -> T {
    T {
        empty: true,
        ..txn(name)
    }
}

type Co = Coordinator<T, u32>;
type D = Decision<T, u32>;
type E = Event<T, u32>;

const SOURCE: TaskId = TaskId(0);
const SINK: TaskId = TaskId(1);

fn settings() -> Settings {
    Settings {
        interval_ms: 100,
        min_pause_ms: 0,
        checkpoint_timeout_ms: 50,
        max_consecutive_failures: 1,
        transaction_timeout_ms: 10_000,
        commit_margin_ms: 1_000,
        commit_retry_backoff_ms: 10,
        retention: 2,
        restart_allowance_ms: 0,
    }
}

fn tp(partition: i32) -> TopicPartition {
    TopicPartition {
        topic: "in".into(),
        partition,
    }
}

/// A coordinator past a fresh start's recovery, its timer started at 0.
fn running(s: Settings) -> Co {
    let mut co = Co::new(s, [SOURCE, SINK]);
    assert_eq!(co.on(0, E::Loaded(None)), vec![D::AbortPool]);
    assert_eq!(
        co.on(0, E::PoolAborted),
        vec![D::StartTasks {
            from: None,
            positions: Positions::new()
        }]
    );
    assert_eq!(co.on(0, E::TasksStarted), vec![]);
    assert_eq!(co.phase(), &Phase::Idle);
    co
}

fn source_ack(id: u64, offset: i64) -> E {
    E::Ack {
        id: CheckpointId(id),
        task: SOURCE,
        delta: Some(id as u32),
        positions: [(tp(0), offset)].into_iter().collect(),
        committables: vec![],
    }
}

fn sink_ack(id: u64, committables: Vec<T>) -> E {
    E::Ack {
        id: CheckpointId(id),
        task: SINK,
        delta: None,
        positions: Positions::new(),
        committables,
    }
}

fn result(c: &T, outcome: CommitOutcome) -> E {
    E::CommitResult {
        committable: c.clone(),
        outcome,
    }
}

fn batch(decisions: &[D]) -> &Batch<T, u32> {
    match decisions {
        [D::Persist(b)] => b,
        other => panic!("expected one Persist, got {other:?}"),
    }
}

fn commits(decisions: &[D]) -> Vec<String> {
    decisions
        .iter()
        .filter_map(|d| match d {
            D::Commit { committable, .. } => Some(committable.name.clone()),
            _ => None,
        })
        .collect()
}

fn releases(decisions: &[D]) -> Vec<String> {
    decisions
        .iter()
        .filter_map(|d| match d {
            D::ReleaseSlot(c) => Some(c.name.clone()),
            _ => None,
        })
        .collect()
}

/// Runs checkpoint `id` at `now` to its Persist decision, the sink acknowledging `committables`.
fn to_persist(co: &mut Co, now: Millis, id: u64, committables: Vec<T>) -> Batch<T, u32> {
    assert_eq!(
        co.on(now, E::Tick),
        vec![D::InjectBarrier(CheckpointId(id))]
    );
    assert_eq!(co.on(now, source_ack(id, 10 * id as i64)), vec![]);
    batch(&co.on(now, sink_ack(id, committables))).clone()
}

#[test]
fn a_tick_before_the_interval_or_the_min_pause_does_nothing() {
    // Checkpoint 1 is triggered at 100 and declined at 120; does a tick at `now` trigger 2?
    for (interval, pause, now, triggers) in [
        (100, 0, 199, false),
        (100, 0, 200, true),
        (100, 150, 200, false),
        (100, 150, 269, false),
        (100, 150, 270, true),
    ] {
        let mut co = running(Settings {
            interval_ms: interval,
            min_pause_ms: pause,
            ..settings()
        });
        assert_eq!(co.on(99, E::Tick), vec![], "before the first interval");
        assert_eq!(co.on(100, E::Tick), vec![D::InjectBarrier(CheckpointId(1))]);
        let decline = E::Decline {
            id: CheckpointId(1),
            task: SINK,
            reason: "send failed".into(),
        };
        assert_eq!(co.on(120, decline), vec![D::Cancel(CheckpointId(1))]);
        let expected = if triggers {
            vec![D::InjectBarrier(CheckpointId(2))]
        } else {
            vec![]
        };
        assert_eq!(
            co.on(now, E::Tick),
            expected,
            "interval {interval}, pause {pause}, now {now}"
        );
    }
}

#[test]
fn ids_strictly_increase_and_a_cancelled_or_abandoned_id_is_never_reused() {
    let mut co = running(settings());
    assert_eq!(co.on(100, E::Tick), vec![D::InjectBarrier(CheckpointId(1))]);
    assert_eq!(co.on(150, E::Tick), vec![D::Cancel(CheckpointId(1))]);
    to_persist(&mut co, 200, 2, vec![]);
    assert_eq!(
        co.on(210, E::Persisted(CheckpointId(2)))[0],
        D::Completed(CheckpointId(2))
    );
    assert_eq!(co.on(300, E::Tick), vec![D::InjectBarrier(CheckpointId(3))]);
    let restart = co.on(
        310,
        E::TaskFailed {
            task: SOURCE,
            reason: "boom".into(),
        },
    );
    assert_eq!(restart[0], D::Cancel(CheckpointId(3)));
    // Recovery restores 2; the next id is 4, not 3 (3 was injected before the failure).
    let restored = Restored {
        id: CheckpointId(2),
        positions: [(tp(0), 20)].into_iter().collect(),
        unresolved: vec![],
    };
    assert_eq!(co.on(320, E::Loaded(Some(restored))), vec![D::AbortPool]);
    co.on(330, E::PoolAborted);
    co.on(340, E::TasksStarted);
    assert_eq!(co.on(440, E::Tick), vec![D::InjectBarrier(CheckpointId(4))]);
}

#[test]
fn at_most_one_checkpoint_is_in_flight() {
    let mut co = running(Settings {
        checkpoint_timeout_ms: 10_000,
        ..settings()
    });
    assert_eq!(co.on(100, E::Tick), vec![D::InjectBarrier(CheckpointId(1))]);
    assert_eq!(co.on(500, E::Tick), vec![], "in flight");
    co.on(510, source_ack(1, 5));
    assert_eq!(co.on(600, E::Tick), vec![], "partly acknowledged");
    batch(&co.on(610, sink_ack(1, vec![])));
    assert_eq!(co.on(700, E::Tick), vec![], "persisting");
    co.on(710, E::Persisted(CheckpointId(1)));
    assert_eq!(co.on(710, E::Tick), vec![D::InjectBarrier(CheckpointId(2))]);
}

#[test]
fn no_commit_before_the_checkpoint_is_persisted() {
    let mut co = running(settings());
    assert_eq!(co.on(100, E::Tick), vec![D::InjectBarrier(CheckpointId(1))]);
    assert_eq!(co.on(101, sink_ack(1, vec![txn("s-0")])), vec![]);
    let b = batch(&co.on(102, source_ack(1, 7))).clone();
    assert_eq!(b.id, CheckpointId(1));
    assert_eq!(b.positions, [(tp(0), 7)].into_iter().collect());
    assert_eq!(b.deltas.len(), 1);
    assert_eq!(
        b.unresolved,
        vec![Listed {
            checkpoint: CheckpointId(1),
            committable: txn("s-0")
        }]
    );
    // A commit result before Persisted (a runtime bug) changes nothing either.
    assert_eq!(
        co.on(103, result(&txn("s-0"), CommitOutcome::Completed)),
        vec![]
    );
    assert_eq!(co.on(300, E::Tick), vec![], "no commit, no new checkpoint");
    let done = co.on(400, E::Persisted(CheckpointId(1)));
    assert_eq!(done[0], D::Completed(CheckpointId(1)));
    assert_eq!(commits(&done), vec!["s-0"]);
}

#[test]
fn a_batch_is_due_at_its_checkpoints_deadline_so_acks_and_write_share_one_timeout() {
    // Triggered at 100 with checkpoint.timeout.ms = 50: acknowledged at 140, the write has
    // the 10 ms left, not another 50 (the timeout budget counts one timeout per checkpoint).
    let mut co = running(settings());
    assert_eq!(co.on(100, E::Tick), vec![D::InjectBarrier(CheckpointId(1))]);
    co.on(120, source_ack(1, 10));
    let b = batch(&co.on(140, sink_ack(1, vec![txn("s-0")]))).clone();
    assert_eq!(b.deadline, 150);
}

#[test]
fn a_checkpoint_with_no_committables_commits_nothing() {
    for committables in [vec![], vec![empty("s-0")]] {
        let mut co = running(settings());
        let b = to_persist(&mut co, 100, 1, committables.clone());
        assert_eq!(b.unresolved, vec![], "an empty committable is not listed");
        let done = co.on(110, E::Persisted(CheckpointId(1)));
        assert_eq!(commits(&done), Vec::<String>::new());
        // An empty committable's slot is free once a durable record exists without it.
        let expected: Vec<String> = committables.iter().map(|c| c.name.clone()).collect();
        assert_eq!(releases(&done), expected);
    }
}

#[test]
fn completing_n_lists_and_commits_the_committables_of_earlier_checkpoints() {
    let mut co = running(settings());
    // Checkpoint 1: the sink acknowledges with s-0, then the source declines: cancelled.
    assert_eq!(co.on(100, E::Tick), vec![D::InjectBarrier(CheckpointId(1))]);
    co.on(101, sink_ack(1, vec![txn("s-0")]));
    co.on(
        102,
        E::Decline {
            id: CheckpointId(1),
            task: SOURCE,
            reason: "x".into(),
        },
    );
    // Checkpoint 2 carries s-0 (prepared for barrier 1, its records precede positions of 2).
    let b = to_persist(&mut co, 200, 2, vec![txn("s-1")]);
    let listed: Vec<_> = b
        .unresolved
        .iter()
        .map(|l| (l.checkpoint.0, l.committable.name.as_str()))
        .collect();
    assert_eq!(listed, vec![(1, "s-0"), (2, "s-1")]);
    let done = co.on(210, E::Persisted(CheckpointId(2)));
    assert_eq!(commits(&done), vec!["s-0", "s-1"]);
    // s-1 still retries when checkpoint 3 is written: record 3 lists it again.
    co.on(220, result(&txn("s-0"), CommitOutcome::Completed));
    co.on(
        221,
        result(&txn("s-1"), CommitOutcome::Retriable("timeout".into())),
    );
    let b = to_persist(&mut co, 300, 3, vec![txn("s-2")]);
    let names: Vec<_> = b
        .unresolved
        .iter()
        .map(|l| l.committable.name.as_str())
        .collect();
    assert_eq!(names, vec!["s-1", "s-2"]);
    // Completing 3 commits s-2 only: s-1's commit is already under way.
    assert_eq!(
        commits(&co.on(310, E::Persisted(CheckpointId(3)))),
        vec!["s-2"]
    );
}

#[test]
fn no_slot_is_released_while_a_durable_record_lists_it() {
    let mut co = running(settings());
    to_persist(&mut co, 100, 1, vec![txn("s-0")]);
    co.on(110, E::Persisted(CheckpointId(1)));
    // Committed: but record 1 lists s-0 as unresolved, so its slot stays busy.
    let r = co.on(120, result(&txn("s-0"), CommitOutcome::Completed));
    assert_eq!(
        r,
        vec![D::MarkResolved {
            checkpoint: CheckpointId(1),
            committable: txn("s-0")
        }]
    );
    let b = to_persist(&mut co, 200, 2, vec![txn("s-1")]);
    assert!(b.unresolved.iter().all(|l| l.committable.name != "s-0"));
    // s-1 resolves while record 2 (which lists it) is being written.
    co.on(205, E::Tick);
    let done = co.on(210, E::Persisted(CheckpointId(2)));
    assert_eq!(releases(&done), vec!["s-0"], "record 2 no longer lists s-0");
    co.on(220, result(&txn("s-1"), CommitOutcome::AlreadyCommitted));
    let b = to_persist(&mut co, 300, 3, vec![]);
    assert_eq!(b.unresolved, vec![]);
    assert_eq!(releases(&co.on(305, E::Tick)), Vec::<String>::new());
    assert_eq!(
        releases(&co.on(310, E::Persisted(CheckpointId(3)))),
        vec!["s-1"]
    );
}

#[test]
fn a_slot_resolved_while_a_record_listing_it_is_written_waits_for_the_next_record() {
    let mut co = running(settings());
    to_persist(&mut co, 100, 1, vec![txn("s-0")]);
    co.on(110, E::Persisted(CheckpointId(1)));
    // Record 2 is built while s-0's commit is under way: it lists s-0.
    let b = to_persist(&mut co, 200, 2, vec![]);
    assert_eq!(b.unresolved.len(), 1);
    assert_eq!(
        co.on(205, result(&txn("s-0"), CommitOutcome::Completed))
            .len(),
        1
    );
    let done = co.on(210, E::Persisted(CheckpointId(2)));
    assert_eq!(releases(&done), Vec::<String>::new(), "record 2 lists s-0");
    let b = to_persist(&mut co, 300, 3, vec![]);
    assert_eq!(b.unresolved, vec![]);
    assert_eq!(
        releases(&co.on(310, E::Persisted(CheckpointId(3)))),
        vec!["s-0"]
    );
}

#[test]
fn every_commit_retry_has_a_deadline_then_fails_the_job() {
    // T_txn 10 000, margin 1 000, backoff 10. Deadline = start + 9 000; without a known start
    // it counts from the trigger before the checkpoint's (0 here: the tasks' start).
    for (start, now, expected) in [
        (Some(1_000), 5_000, Some((5_010, 10_000))),
        (Some(1_000), 9_995, Some((10_000, 10_000))),
        (Some(1_000), 10_000, None),
        (None, 8_000, Some((8_010, 9_000))),
        (None, 9_000, None),
    ] {
        let mut co = running(settings());
        let c = T {
            start,
            ..txn("s-0")
        };
        to_persist(&mut co, 100, 1, vec![c.clone()]);
        co.on(110, E::Persisted(CheckpointId(1)));
        let got = co.on(
            now,
            result(&c, CommitOutcome::Retriable("not coordinator".into())),
        );
        match (expected, got.as_slice()) {
            (
                Some((at, deadline)),
                [D::RetryCommitAt {
                    at: a, deadline: d, ..
                }],
            ) => {
                assert_eq!((*a, *d), (at, deadline), "start {start:?}, now {now}")
            }
            (None, [D::FailJob(JobFailure::CommitDeadline { .. })]) => {
                assert!(matches!(co.phase(), Phase::Failed(_)));
                let line = match &got[0] {
                    D::FailJob(f) => f.to_string(),
                    _ => unreachable!(),
                };
                assert!(line.contains("s-0") && line.contains("transaction.timeout.ms 10000 ms"));
            }
            (e, g) => panic!("start {start:?}, now {now}: expected {e:?}, got {g:?}"),
        }
    }
}

#[test]
fn without_a_known_start_the_deadline_counts_from_the_last_barrier_the_sink_acknowledged() {
    // Checkpoint 1 (triggered at 100) times out before the sink sees it; the sink's
    // transaction acknowledged with 2 (triggered at 200) was begun after the tasks started
    // (0), so its deadline is 0 + 10 000 − 1 000, not 100 + 9 000. Checkpoint 3's next one
    // began after barrier 2 passed the sink: 200 + 9 000.
    let mut co = running(settings());
    co.on(100, E::Tick);
    assert_eq!(co.on(150, E::Tick), vec![D::Cancel(CheckpointId(1))]);
    to_persist(&mut co, 200, 2, vec![txn("s-0")]);
    let deadlines = |ds: &[D]| -> Vec<Millis> {
        ds.iter()
            .filter_map(|d| match d {
                D::Commit { deadline, .. } => Some(*deadline),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        deadlines(&co.on(210, E::Persisted(CheckpointId(2)))),
        vec![9_000]
    );
    to_persist(&mut co, 300, 3, vec![txn("s-1")]);
    assert_eq!(
        deadlines(&co.on(310, E::Persisted(CheckpointId(3)))),
        vec![9_200]
    );
}

#[test]
fn a_lost_or_superseded_transaction_fails_the_job_naming_ids_and_settings() {
    for (outcome, words) in [
        (
            CommitOutcome::NotCommitted("aborted by timeout".into()),
            vec![
                "s-0",
                "checkpoint 1",
                "output is lost",
                "transaction.timeout.ms (10000 ms)",
            ],
        ),
        (
            CommitOutcome::Superseded("a later transaction".into()),
            vec!["s-0", "checkpoint 1", "another job", "prefix"],
        ),
    ] {
        let mut co = running(settings());
        to_persist(&mut co, 100, 1, vec![txn("s-0")]);
        co.on(110, E::Persisted(CheckpointId(1)));
        let got = co.on(120, result(&txn("s-0"), outcome.clone()));
        let [D::FailJob(failure)] = got.as_slice() else {
            panic!("{outcome:?}: {got:?}")
        };
        let line = failure.to_string();
        for w in words {
            assert!(line.contains(w), "{line:?} lacks {w:?}");
        }
        assert_eq!(
            co.on(1_000, E::Tick),
            vec![],
            "a failed job decides nothing more"
        );
    }
}

#[test]
fn a_decline_or_a_timeout_cancels_and_more_than_f_in_a_row_fail_the_job() {
    // F = 1: one failure is tolerated, a success resets the count, two in a row fail.
    let mut co = running(settings());
    co.on(100, E::Tick);
    assert_eq!(
        co.on(150, E::Tick),
        vec![D::Cancel(CheckpointId(1))],
        "timeout"
    );
    assert_eq!(co.consecutive_failures(), 1);
    to_persist(&mut co, 200, 2, vec![]);
    co.on(210, E::Persisted(CheckpointId(2)));
    assert_eq!(co.consecutive_failures(), 0);
    co.on(310, E::Tick);
    let decline = |id| E::Decline {
        id: CheckpointId(id),
        task: SINK,
        reason: "flush failed".into(),
    };
    assert_eq!(co.on(320, decline(3)), vec![D::Cancel(CheckpointId(3))]);
    assert_eq!(co.on(420, E::Tick), vec![D::InjectBarrier(CheckpointId(4))]);
    let got = co.on(430, decline(4));
    assert_eq!(got[0], D::Cancel(CheckpointId(4)));
    let [_, D::FailJob(f @ JobFailure::TooManyFailures { failures: 2, .. })] = got.as_slice()
    else {
        panic!("{got:?}")
    };
    assert!(f.to_string().contains("checkpoint.tolerable.failures = 1"));
}

#[test]
fn late_acks_of_a_cancelled_checkpoint_count_for_nothing_but_are_carried() {
    let mut co = running(settings());
    co.on(100, E::Tick);
    co.on(150, E::Tick); // 1 times out
    assert_eq!(co.on(200, E::Tick), vec![D::InjectBarrier(CheckpointId(2))]);
    // Both tasks acknowledge 1 late: 2 does not complete, nothing is persisted.
    assert_eq!(co.on(201, source_ack(1, 5)), vec![]);
    assert_eq!(co.on(202, sink_ack(1, vec![txn("s-0")])), vec![]);
    assert_eq!(
        co.on(203, sink_ack(1, vec![txn("dup")])),
        vec![],
        "a duplicate"
    );
    assert!(matches!(
        co.phase(),
        Phase::InFlight {
            id: CheckpointId(2),
            ..
        }
    ));
    co.on(204, source_ack(2, 9));
    let got = co.on(205, sink_ack(2, vec![txn("s-1")]));
    let b = batch(&got);
    let deltas: Vec<_> = b.deltas.iter().map(|d| (d.checkpoint.0, d.delta)).collect();
    assert_eq!(deltas, vec![(1, 1), (2, 2)], "1's frozen delta goes first");
    assert_eq!(b.positions, [(tp(0), 9)].into_iter().collect());
    let names: Vec<_> = b
        .unresolved
        .iter()
        .map(|l| l.committable.name.as_str())
        .collect();
    assert_eq!(names, vec!["s-0", "s-1"], "the duplicate ack was ignored");
    // An ack of an already durable checkpoint, or from an unknown task, is ignored.
    co.on(210, E::Persisted(CheckpointId(2)));
    assert_eq!(co.on(211, sink_ack(2, vec![txn("x")])), vec![]);
    co.on(300, E::Tick);
    let stranger = E::Ack {
        id: CheckpointId(3),
        task: TaskId(9),
        delta: None,
        positions: Positions::new(),
        committables: vec![txn("y")],
    };
    assert_eq!(co.on(301, stranger), vec![]);
    co.on(302, source_ack(3, 11));
    let b = batch(&co.on(303, sink_ack(3, vec![]))).clone();
    assert!(b
        .unresolved
        .iter()
        .all(|l| l.committable.name != "x" && l.committable.name != "y"));
}

#[test]
fn a_second_ack_while_the_checkpoint_is_written_is_ignored() {
    let mut co = running(settings());
    to_persist(&mut co, 100, 1, vec![txn("s-0")]);
    assert_eq!(co.on(101, sink_ack(1, vec![txn("dup")])), vec![]);
    assert_eq!(co.on(102, source_ack(1, 99)), vec![]);
    co.on(110, E::Persisted(CheckpointId(1)));
    let b = to_persist(&mut co, 200, 2, vec![]);
    let names: Vec<_> = b
        .unresolved
        .iter()
        .map(|l| l.committable.name.as_str())
        .collect();
    assert_eq!(
        names,
        vec!["s-0"],
        "the second ack's committable is not listed"
    );
    let deltas: Vec<_> = b.deltas.iter().map(|d| d.checkpoint.0).collect();
    assert_eq!(
        deltas,
        vec![2],
        "the second ack's delta is not applied again"
    );
}

#[test]
fn a_task_failure_cancels_the_checkpoint_in_flight_and_restarts() {
    let mut co = running(settings());
    co.on(100, E::Tick);
    let got = co.on(
        110,
        E::TaskFailed {
            task: SINK,
            reason: "broker gone".into(),
        },
    );
    assert_eq!(got[0], D::Cancel(CheckpointId(1)));
    assert!(
        matches!(&got[1], D::Restart { reason } if reason.contains("task 1") && reason.contains("broker gone"))
    );
    assert_eq!(co.phase(), &Phase::Recovering(RecoveryStep::Loading));
    assert_eq!(
        co.on(500, E::Tick),
        vec![],
        "no checkpoint while recovering"
    );
    assert_eq!(
        co.on(501, sink_ack(1, vec![txn("s-0")])),
        vec![],
        "old incarnation"
    );
}

#[test]
fn a_stop_takes_a_final_checkpoint_at_once_commits_it_records_the_resolutions_then_stops() {
    let mut co = running(settings());
    to_persist(&mut co, 100, 1, vec![txn("s-0")]);
    assert_eq!(
        commits(&co.on(110, E::Persisted(CheckpointId(1)))),
        vec!["s-0"]
    );
    // Idle, long before the interval: the final checkpoint goes at once.
    assert_eq!(
        co.on(120, E::StopRequested),
        vec![D::InjectFinalBarrier(CheckpointId(2))]
    );
    assert_eq!(co.stop_step(), Some(StopStep::Final(CheckpointId(2))));
    assert_eq!(co.on(121, E::StopRequested), vec![], "asked twice");
    co.on(130, source_ack(2, 20));
    let b = batch(&co.on(131, sink_ack(2, vec![txn("s-1")]))).clone();
    let listed: Vec<_> = b
        .unresolved
        .iter()
        .map(|l| l.committable.name.as_str())
        .collect();
    assert_eq!(
        listed,
        vec!["s-0", "s-1"],
        "s-0's commit is still unanswered"
    );
    let done = co.on(140, E::Persisted(CheckpointId(2)));
    assert_eq!(done[0], D::Completed(CheckpointId(2)));
    assert_eq!(commits(&done), vec!["s-1"]);
    assert_eq!(co.stop_step(), Some(StopStep::Committing(CheckpointId(2))));
    // No periodic checkpoint while stopping, even past the interval.
    assert_eq!(co.on(500, E::Tick), vec![]);
    let got = co.on(510, result(&txn("s-1"), CommitOutcome::Completed));
    assert_eq!(got.len(), 1, "s-0 is unanswered yet: {got:?}");
    let got = co.on(520, result(&txn("s-0"), CommitOutcome::AlreadyCommitted));
    assert_eq!(
        got.last(),
        Some(&D::PersistResolutions {
            checkpoint: CheckpointId(2),
            resolved: vec![txn("s-0"), txn("s-1")],
        })
    );
    assert_eq!(
        co.on(530, E::ResolutionsPersisted),
        vec![D::Stopped {
            final_checkpoint: CheckpointId(2)
        }]
    );
    assert_eq!(co.phase(), &Phase::Stopped(CheckpointId(2)));
    assert_eq!(co.on(900, E::Tick), vec![], "nothing after the stop");
}

#[test]
fn a_stop_asked_for_during_a_checkpoint_waits_for_it_then_takes_the_final_one() {
    for while_persisting in [false, true] {
        let mut co = running(settings());
        assert_eq!(co.on(100, E::Tick), vec![D::InjectBarrier(CheckpointId(1))]);
        co.on(101, source_ack(1, 10));
        if while_persisting {
            batch(&co.on(102, sink_ack(1, vec![txn("s-0")])));
            assert_eq!(co.on(103, E::StopRequested), vec![]);
        } else {
            assert_eq!(co.on(102, E::StopRequested), vec![]);
            batch(&co.on(103, sink_ack(1, vec![txn("s-0")])));
        }
        assert_eq!(co.stop_step(), Some(StopStep::Requested));
        let done = co.on(110, E::Persisted(CheckpointId(1)));
        assert_eq!(commits(&done), vec!["s-0"]);
        assert_eq!(
            done.last(),
            Some(&D::InjectFinalBarrier(CheckpointId(2))),
            "while persisting: {while_persisting}"
        );
    }
}

#[test]
fn a_final_checkpoint_with_nothing_to_commit_records_that_and_stops() {
    let mut co = running(settings());
    assert_eq!(
        co.on(10, E::StopRequested),
        vec![D::InjectFinalBarrier(CheckpointId(1))]
    );
    co.on(11, source_ack(1, 10));
    batch(&co.on(12, sink_ack(1, vec![empty("s-0")])));
    let done = co.on(13, E::Persisted(CheckpointId(1)));
    assert_eq!(
        done,
        vec![
            D::Completed(CheckpointId(1)),
            D::ReleaseSlot(empty("s-0")),
            D::PersistResolutions {
                checkpoint: CheckpointId(1),
                resolved: vec![],
            },
        ]
    );
    assert_eq!(
        co.on(14, E::ResolutionsPersisted),
        vec![D::Stopped {
            final_checkpoint: CheckpointId(1)
        }]
    );
}

#[test]
fn a_cancelled_final_checkpoint_goes_again_and_too_many_cancels_fail_the_job() {
    let mut co = running(settings());
    assert_eq!(
        co.on(10, E::StopRequested),
        vec![D::InjectFinalBarrier(CheckpointId(1))]
    );
    co.on(11, source_ack(1, 10));
    assert_eq!(co.on(61, E::Tick), vec![D::Cancel(CheckpointId(1))]);
    assert_eq!(co.stop_step(), Some(StopStep::Requested));
    assert_eq!(
        co.on(62, E::Tick),
        vec![D::InjectFinalBarrier(CheckpointId(2))],
        "again at once, no interval"
    );
    let got = co.on(113, E::Tick);
    assert_eq!(got[0], D::Cancel(CheckpointId(2)));
    assert!(
        matches!(got[1], D::FailJob(JobFailure::TooManyFailures { .. })),
        "{got:?}"
    );
}

#[test]
fn a_commit_lost_during_a_stop_fails_the_job_instead_of_stopping() {
    let mut co = running(settings());
    co.on(10, E::StopRequested);
    co.on(11, source_ack(1, 10));
    batch(&co.on(12, sink_ack(1, vec![txn("s-0")])));
    co.on(13, E::Persisted(CheckpointId(1)));
    let got = co.on(
        14,
        result(&txn("s-0"), CommitOutcome::NotCommitted("timed out".into())),
    );
    assert!(
        matches!(got.as_slice(), [D::FailJob(JobFailure::DataLoss { .. })]),
        "{got:?}"
    );
    assert_eq!(co.on(15, E::ResolutionsPersisted), vec![]);
}

#[test]
fn a_task_failure_during_a_stop_restarts_and_drops_the_stop() {
    let mut co = running(settings());
    co.on(10, E::StopRequested);
    let got = co.on(
        11,
        E::TaskFailed {
            task: SINK,
            reason: "x".into(),
        },
    );
    assert!(matches!(got.last(), Some(D::Restart { .. })), "{got:?}");
    assert_eq!(co.stop_step(), None);
}

#[test]
fn a_failed_write_fails_the_job() {
    let mut co = running(settings());
    to_persist(&mut co, 100, 1, vec![txn("s-0")]);
    let got = co.on(
        110,
        E::PersistFailed {
            reason: "Poisoned".into(),
        },
    );
    assert!(matches!(
        got.as_slice(),
        [D::FailJob(JobFailure::PersistFailed {
            checkpoint: CheckpointId(1),
            ..
        })]
    ));
    assert_eq!(co.on(120, E::Persisted(CheckpointId(1))), vec![]);
}

#[test]
fn a_batch_retires_the_records_beyond_the_retention() {
    for (k, id, expected) in [
        (2, 1, None),
        (2, 2, None),
        (2, 3, Some(1)),
        (2, 7, Some(5)),
        (1, 2, Some(1)),
        (3, 3, None),
    ] {
        // Ids below `id` time out (F is high enough), so checkpoint `id` is the first durable.
        let mut co = running(Settings {
            retention: k,
            max_consecutive_failures: 100,
            ..settings()
        });
        let mut now = 0;
        for _ in 1..id {
            now += 100;
            co.on(now, E::Tick);
            co.on(now + 50, E::Tick);
            now += 50;
        }
        now += 100;
        let b = to_persist(&mut co, now, id, vec![]);
        assert_eq!(
            b.retire_through,
            expected.map(CheckpointId),
            "K {k}, id {id}"
        );
    }
}

#[test]
fn recovery_commits_first_persists_the_resolutions_then_aborts_the_pool_then_starts() {
    let mut co = Co::new(settings(), [SOURCE, SINK]);
    let listed = |n, name: &str| Listed {
        checkpoint: CheckpointId(n),
        committable: T {
            start: Some(1_000),
            ..txn(name)
        },
    };
    let restored = Restored {
        id: CheckpointId(5),
        positions: [(tp(0), 42)].into_iter().collect(),
        unresolved: vec![listed(4, "s-1"), listed(5, "s-2")],
    };
    let got = co.on(2_000, E::Loaded(Some(restored)));
    assert_eq!(
        got,
        vec![D::Resume(vec![
            (listed(4, "s-1"), 10_000),
            (listed(5, "s-2"), 10_000)
        ])]
    );
    // Out-of-order steps change nothing: no AbortPool before the resolutions are durable.
    assert_eq!(co.on(2_001, E::ResolutionsPersisted), vec![]);
    assert_eq!(co.on(2_002, E::PoolAborted), vec![]);
    assert_eq!(co.on(2_003, E::TasksStarted), vec![]);
    assert_eq!(co.on(2_004, E::Tick), vec![]);
    let s1 = listed(4, "s-1").committable;
    let s2 = listed(5, "s-2").committable;
    assert!(matches!(
        co.on(
            2_010,
            result(&s1, CommitOutcome::Retriable("coordinator loading".into()))
        )
        .as_slice(),
        [D::RetryCommitAt {
            at: 2_020,
            deadline: 10_000,
            ..
        }]
    ));
    assert_eq!(
        co.on(2_020, result(&s1, CommitOutcome::AlreadyCommitted))
            .len(),
        1
    );
    assert_eq!(co.phase(), &Phase::Recovering(RecoveryStep::Loaded));
    let got = co.on(2_030, result(&s2, CommitOutcome::Completed));
    assert_eq!(
        got[1],
        D::PersistResolutions {
            checkpoint: CheckpointId(5),
            resolved: vec![s1, s2]
        }
    );
    assert_eq!(
        co.on(2_031, E::PoolAborted),
        vec![],
        "resolutions not durable yet"
    );
    assert_eq!(co.on(2_040, E::ResolutionsPersisted), vec![D::AbortPool]);
    assert_eq!(
        co.on(2_050, E::PoolAborted),
        vec![D::StartTasks {
            from: Some(CheckpointId(5)),
            positions: [(tp(0), 42)].into_iter().collect()
        }]
    );
    assert_eq!(co.on(2_060, E::TasksStarted), vec![]);
    assert_eq!(
        co.on(2_159, E::Tick),
        vec![],
        "the timer starts with the tasks"
    );
    assert_eq!(
        co.on(2_160, E::Tick),
        vec![D::InjectBarrier(CheckpointId(6))]
    );
}

#[test]
fn recovery_fails_on_a_transaction_it_cannot_commit() {
    for (outcome, is_loss) in [
        (CommitOutcome::NotCommitted("aborted".into()), true),
        (CommitOutcome::Superseded("later".into()), false),
    ] {
        let mut co = Co::new(settings(), [SOURCE]);
        let restored = Restored {
            id: CheckpointId(3),
            positions: Positions::new(),
            unresolved: vec![Listed {
                checkpoint: CheckpointId(3),
                committable: txn("s-0"),
            }],
        };
        co.on(0, E::Loaded(Some(restored)));
        let got = co.on(1, result(&txn("s-0"), outcome));
        match got.as_slice() {
            [D::FailJob(JobFailure::DataLoss { .. })] => assert!(is_loss),
            [D::FailJob(JobFailure::Clash { .. })] => assert!(!is_loss),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            co.on(2, E::ResolutionsPersisted),
            vec![],
            "no AbortPool after a failure"
        );
    }
}

#[test]
fn the_client_resume_answer_maps_to_an_outcome() {
    use crate::client::transactions::ResumeOutcome as R;
    use crate::client::Error;
    use crate::client::ErrorCode;
    let broker = |code| Err(Error::broker("EndTxn", code));
    for (answer, expected) in [
        (Ok(R::Completed), "Completed"),
        (Ok(R::AlreadyCommitted), "AlreadyCommitted"),
        (Ok(R::NothingToCommit), "NothingToCommit"),
        (Ok(R::NotCommitted { reason: "r".into() }), "NotCommitted"),
        (Ok(R::Superseded { reason: "r".into() }), "Superseded"),
        (broker(ErrorCode::NOT_COORDINATOR), "Retriable"),
        (broker(ErrorCode::COORDINATOR_NOT_AVAILABLE), "Retriable"),
        (broker(ErrorCode::CONCURRENT_TRANSACTIONS), "Retriable"),
        (
            broker(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            "Failed",
        ),
    ] {
        let got = format!("{:?}", CommitOutcome::from_resume(answer.clone()));
        assert!(got.starts_with(expected), "{answer:?}: {got}");
    }
    // A fatal commit error fails the job naming the transaction.
    let mut co = running(settings());
    to_persist(&mut co, 100, 1, vec![txn("s-0")]);
    co.on(110, E::Persisted(CheckpointId(1)));
    let got = co.on(
        120,
        result(&txn("s-0"), CommitOutcome::Failed("not authorized".into())),
    );
    let [D::FailJob(f @ JobFailure::CommitFailed { .. })] = got.as_slice() else {
        panic!("{got:?}")
    };
    assert!(f.to_string().contains("s-0") && f.to_string().contains("not authorized"));
}

#[test]
fn the_client_committable_gives_its_name_start_and_emptiness() {
    let p = PreparedTransaction {
        transactional_id: "job-0-1".to_string(),
        producer_id: 7,
        producer_epoch: 2,
        transaction_version: 2,
        transaction_start_ms: -1,
        empty: false,
    };
    assert_eq!(
        (p.name(), p.start_ms(), p.is_empty()),
        ("job-0-1", None, false)
    );
    let p = PreparedTransaction {
        transaction_start_ms: 1_700,
        empty: true,
        ..p
    };
    assert_eq!((p.start_ms(), p.is_empty()), (Some(1_700), true));
}

#[test]
fn the_timeout_budget_says_which_setting_to_change_and_to_what() {
    const MAX: Millis = 900_000; // the broker's default transaction.max.timeout.ms
    let s = |interval, timeout, failures, restart, txn| Settings {
        interval_ms: interval,
        checkpoint_timeout_ms: timeout,
        min_pause_ms: 0,
        max_consecutive_failures: failures,
        restart_allowance_ms: restart,
        commit_margin_ms: 10_000,
        transaction_timeout_ms: txn,
        ..Settings::default()
    };
    // required = (F + 1) · (interval + timeout) + restart + margin
    for (settings, broker_max, expected) in [
        (Settings::default(), MAX, Ok(())),
        (s(1_000, 30_000, 3, 60_000, 194_000), MAX, Ok(())),
        (
            s(1_000, 30_000, 3, 60_000, 193_999),
            MAX,
            Err("transaction.timeout.ms = 193999 ms is shorter than a transaction may have to live, 194000 ms ((checkpoint.tolerable.failures + 1) · (checkpoint.interval.ms + checkpoint.timeout.ms + checkpoint.min.pause.ms) + restart.allowance.ms + checkpoint.commit.margin.ms): set transaction.timeout.ms to 194000"),
        ),
        (
            s(1_000, 30_000, 3, 60_000, 3_600_000),
            MAX,
            Err("transaction.timeout.ms = 3600000 ms exceeds the broker's transaction.max.timeout.ms = 900000 ms: set transaction.timeout.ms to 900000"),
        ),
        (
            // 4 · (300 s + 30 s) + 60 s + 10 s = 1 390 s > 900 s; the interval that fits:
            // (900 000 − 70 000) / 4 − 30 000 = 177 500.
            s(300_000, 30_000, 3, 60_000, 900_000),
            MAX,
            Err("the checkpoint settings need transaction.timeout.ms ≥ 1390000 ms, above the broker's transaction.max.timeout.ms = 900000 ms: set checkpoint.interval.ms to 177500 (or raise the broker's transaction.max.timeout.ms to 1390000)"),
        ),
        (
            s(1_000, 600_000, 3, 60_000, 900_000),
            MAX,
            Err("the checkpoint settings need transaction.timeout.ms ≥ 2474000 ms, above the broker's transaction.max.timeout.ms = 900000 ms, even at a 1 ms interval: raise the broker's transaction.max.timeout.ms to 2474000, or lower checkpoint.timeout.ms, restart.allowance.ms or checkpoint.tolerable.failures"),
        ),
        (
            s(0, 30_000, 3, 60_000, 300_000),
            MAX,
            Err("checkpoint.interval.ms = 0 is invalid: it must be at least 1"),
        ),
    ] {
        let got = check_budget(&settings, broker_max).map_err(|e| e.to_string());
        assert_eq!(got, expected.map_err(str::to_string), "{settings:?}");
    }
}

/// Random event sequences (fixed seeds) against the invariants, checked on the decisions.
#[test]
fn random_event_sequences_keep_every_invariant() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;

    // How often each decision came up, so the test proves it reaches them.
    let mut seen: std::collections::BTreeMap<&'static str, u32> = Default::default();
    for seed in 0..300u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let tasks = [SOURCE, SINK, TaskId(2)];
        let mut co = Co::new(
            Settings {
                max_consecutive_failures: 3,
                checkpoint_timeout_ms: 300,
                commit_margin_ms: 500,
                transaction_timeout_ms: 3_000,
                ..settings()
            },
            tasks,
        );
        let mut now: Millis = 0;
        let mut names = 0u32;
        // What the checker knows, from decisions and the events it fed.
        let mut last_inject: Option<CheckpointId> = None;
        let mut open: Option<CheckpointId> = None;
        let mut persisting: Option<Batch<T, u32>> = None;
        let mut durable: Option<Batch<T, u32>> = None;
        let mut durable_listed: Vec<String> = Vec::new();
        let mut in_commit: Vec<T> = Vec::new();
        // Recovery's resolutions: 0 none needed, 1 resuming, 2 being written, 3 durable.
        let mut resolutions = 0;
        let mut failed = false;
        // A stop asked for (until a restart drops it), and the stop's end decided.
        let mut stopping = false;
        let mut stopped = false;
        for step in 0..400 {
            now += rng.random_range(0..40);
            let top = last_inject.map_or(1, |n| n.0 + 1);
            let some_id = CheckpointId(rng.random_range(top.saturating_sub(3).max(1)..=top));
            let event: E = match rng.random_range(0..1000) / 10 {
                _ if rng.random_bool(0.006) => E::StopRequested,
                0..=29 => E::Tick,
                30..=59 => {
                    let task = tasks[rng.random_range(0..tasks.len())];
                    let mut committables = Vec::new();
                    if task == SINK {
                        for _ in 0..rng.random_range(0..3) {
                            names += 1;
                            let mut c = txn(&format!("s-{names}"));
                            c.empty = rng.random_bool(0.2);
                            if rng.random_bool(0.5) {
                                c.start = Some(now);
                            }
                            committables.push(c);
                        }
                    }
                    E::Ack {
                        id: open.filter(|_| rng.random_bool(0.8)).unwrap_or(some_id),
                        task,
                        delta: Some(rng.random_range(0..100)),
                        positions: [(tp(0), rng.random_range(0..1000))].into_iter().collect(),
                        committables,
                    }
                }
                60..=63 => E::Decline {
                    id: some_id,
                    task: SOURCE,
                    reason: "x".into(),
                },
                64..=73 => E::Persisted(persisting.as_ref().map_or(some_id, |b| b.id)),
                74..=83 if !in_commit.is_empty() => {
                    let c = in_commit.swap_remove(rng.random_range(0..in_commit.len()));
                    let outcome = match rng.random_range(0..100) {
                        0..=69 => CommitOutcome::Completed,
                        70..=79 => CommitOutcome::AlreadyCommitted,
                        80..=96 => CommitOutcome::Retriable("e".into()),
                        97 => CommitOutcome::NotCommitted("timed out".into()),
                        98 => CommitOutcome::Failed("denied".into()),
                        _ => CommitOutcome::Superseded("later".into()),
                    };
                    E::CommitResult {
                        committable: c,
                        outcome,
                    }
                }
                84 => E::PersistFailed {
                    reason: "io".into(),
                },
                85..=86 => E::TaskFailed {
                    task: SINK,
                    reason: "x".into(),
                },
                87..=90 => E::Loaded(rng.random_bool(0.8).then(|| durable.clone()).flatten().map(
                    |b| Restored {
                        id: b.id,
                        positions: b.positions,
                        unresolved: b.unresolved,
                    },
                )),
                91..=93 => E::ResolutionsPersisted,
                94..=96 => E::PoolAborted,
                _ => E::TasksStarted,
            };
            let ctx = format!("seed {seed}, step {step}, event {event:?}");
            // Effects of the event on the checker's knowledge, before the decisions.
            let mut just_durable = false;
            match &event {
                E::Persisted(id) if persisting.as_ref().is_some_and(|b| b.id == *id) => {
                    just_durable = true;
                }
                E::ResolutionsPersisted if resolutions == 2 => resolutions = 3,
                _ => {}
            }
            let stop_asked = event == E::StopRequested;
            let decisions = co.on(now, event);
            if failed || stopped {
                assert_eq!(
                    decisions,
                    vec![],
                    "{ctx}: decisions after FailJob or Stopped"
                );
            }
            if stop_asked && co.stop_step().is_some() {
                stopping = true;
            }
            if just_durable
                && decisions.first()
                    == Some(&D::Completed(
                        persisting.as_ref().map_or(CheckpointId(0), |b| b.id),
                    ))
            {
                let b = persisting.take();
                durable_listed = b
                    .iter()
                    .flat_map(|b| b.unresolved.iter().map(|l| l.committable.name.clone()))
                    .collect();
                durable = b;
            }
            for d in decisions {
                let kind = match &d {
                    D::InjectBarrier(_) => "inject",
                    D::InjectFinalBarrier(_) => "inject-final",
                    D::Stopped { .. } => "stopped",
                    D::Cancel(_) => "cancel",
                    D::Persist(_) => "persist",
                    D::Completed(_) => "completed",
                    D::Commit { .. } => "commit",
                    D::RetryCommitAt { .. } => "retry",
                    D::MarkResolved { .. } => "resolved",
                    D::ReleaseSlot(_) => "release",
                    D::FailJob(_) => "fail",
                    D::Restart { .. } => "restart",
                    D::Resume(_) => "resume",
                    D::PersistResolutions { .. } => "persist-resolutions",
                    D::AbortPool => "abort-pool",
                    D::StartTasks { .. } => "start",
                };
                *seen.entry(kind).or_default() += 1;
                match d {
                    D::InjectBarrier(id) | D::InjectFinalBarrier(id) => {
                        assert_eq!(
                            stopping,
                            matches!(d, D::InjectFinalBarrier(_)),
                            "{ctx}: only final checkpoints once a stop is asked for, and only then"
                        );
                        assert!(
                            last_inject.is_none_or(|l| id > l),
                            "{ctx}: id {id} after {last_inject:?}"
                        );
                        assert_eq!(
                            open, None,
                            "{ctx}: {id} injected while another is in flight"
                        );
                        assert!(persisting.is_none(), "{ctx}: injected while persisting");
                        last_inject = Some(id);
                        open = Some(id);
                    }
                    D::Cancel(id) => {
                        assert_eq!(
                            open,
                            Some(id),
                            "{ctx}: cancel of a checkpoint not in flight"
                        );
                        open = None;
                    }
                    D::Persist(b) => {
                        assert_eq!(
                            open,
                            Some(b.id),
                            "{ctx}: persist of a checkpoint not in flight"
                        );
                        let names: BTreeSet<_> = b
                            .unresolved
                            .iter()
                            .map(|l| l.committable.name.clone())
                            .collect();
                        assert_eq!(names.len(), b.unresolved.len(), "{ctx}: listed twice");
                        assert!(
                            b.unresolved.iter().all(|l| !l.committable.empty),
                            "{ctx}: empty listed"
                        );
                        open = None;
                        persisting = Some(b);
                    }
                    D::Commit {
                        committable,
                        deadline,
                        ..
                    } => {
                        assert!(!committable.empty, "{ctx}: commit of an empty committable");
                        assert!(
                            durable_listed.contains(&committable.name),
                            "{ctx}: commit of {} which no durable record lists",
                            committable.name
                        );
                        assert!(deadline > 0);
                        in_commit.push(committable);
                    }
                    D::RetryCommitAt {
                        committable,
                        at,
                        deadline,
                        ..
                    } => {
                        assert!(
                            at <= deadline && now < deadline,
                            "{ctx}: retry past its deadline"
                        );
                        in_commit.push(committable);
                    }
                    D::Resume(list) => {
                        assert_eq!(resolutions, 0, "{ctx}: resume twice");
                        resolutions = 1;
                        in_commit = list.into_iter().map(|(l, _)| l.committable).collect();
                    }
                    D::ReleaseSlot(c) => {
                        assert!(
                            !durable_listed.contains(&c.name),
                            "{ctx}: release of {} while the durable record lists it",
                            c.name
                        );
                    }
                    D::AbortPool => {
                        assert!(
                            resolutions == 0 || resolutions == 3,
                            "{ctx}: AbortPool before the resolutions are durable"
                        );
                        resolutions = 0;
                        in_commit.clear();
                        durable_listed.clear();
                    }
                    D::Restart { .. } => {
                        open = None;
                        persisting = None;
                        in_commit.clear();
                        stopping = false;
                    }
                    D::PersistResolutions { checkpoint, .. } if stopping => {
                        assert!(
                            in_commit.is_empty(),
                            "{ctx}: a stop records its resolutions with commits unanswered"
                        );
                        assert_eq!(
                            durable.as_ref().map(|b| b.id),
                            Some(checkpoint),
                            "{ctx}: a stop's resolutions are the latest durable record's"
                        );
                        assert_eq!(open, None, "{ctx}: resolutions with a checkpoint in flight");
                    }
                    D::Stopped { final_checkpoint } => {
                        assert!(stopping, "{ctx}: stopped without a stop request");
                        assert_eq!(
                            durable.as_ref().map(|b| b.id),
                            Some(final_checkpoint),
                            "{ctx}: stopped at a checkpoint that is not the latest durable one"
                        );
                        assert!(
                            open.is_none() && persisting.is_none() && in_commit.is_empty(),
                            "{ctx}: stopped with a checkpoint or a commit under way"
                        );
                        stopped = true;
                    }
                    D::FailJob(_) => failed = true,
                    D::Completed(_) | D::MarkResolved { .. } | D::StartTasks { .. } => {}
                    D::PersistResolutions { .. } => {
                        assert_eq!(resolutions, 1, "{ctx}: resolutions without a resume");
                        resolutions = 2;
                    }
                }
            }
        }
    }
    for kind in [
        "inject",
        "cancel",
        "persist",
        "completed",
        "commit",
        "retry",
        "resolved",
        "release",
        "fail",
        "restart",
        "resume",
        "persist-resolutions",
        "abort-pool",
        "start",
        "inject-final",
        "stopped",
    ] {
        assert!(
            seen.get(kind).copied().unwrap_or(0) >= 20,
            "{kind} barely reached: {seen:?}"
        );
    }
}
