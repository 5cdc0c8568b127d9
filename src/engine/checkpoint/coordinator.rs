//! The coordinator's states, events and decisions, and the one transition function,
//! [`Coordinator::on`].

use std::collections::{BTreeMap, BTreeSet};

use super::{CheckpointId, Committable, JobFailure, Millis, Positions, Settings, TaskId};
use crate::client::Op;
use crate::client::transactions::ResumeOutcome;
use crate::client::ErrorClass;

/// The coordinator's state. Every transition goes through [`Coordinator::on`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Recovery runs (the job has just started or a task failed); no checkpoint is triggered.
    Recovering(RecoveryStep),
    /// Running, no checkpoint in flight.
    Idle,
    /// Barrier `id` is on its way; `acks` have acknowledged it; it is cancelled at `deadline`.
    InFlight {
        /// The checkpoint.
        id: CheckpointId,
        /// The tasks that acknowledged it.
        acks: BTreeSet<TaskId>,
        /// When it times out.
        deadline: Millis,
    },
    /// Every task acknowledged `id`; its batch is being written.
    Persisting {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// The job failed; the coordinator decides nothing more.
    Failed(JobFailure),
    /// A stop ended: the final checkpoint is durable, every committable it lists committed
    /// and that recorded; nothing is open. The coordinator decides nothing more.
    Stopped(CheckpointId),
}

/// Where a stop with a final checkpoint stands (Flink's stop-with-savepoint; docs/design/stop.md).
/// Meanwhile no periodic checkpoint is triggered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopStep {
    /// Asked for while a checkpoint was in flight or being written: the final checkpoint is
    /// injected once that one ends.
    Requested,
    /// The final checkpoint is in flight or being written; the sources read nothing after its
    /// barrier.
    Final(CheckpointId),
    /// The final checkpoint is durable; the commits of the committables it lists are under way.
    Committing(CheckpointId),
    /// Every committable is committed; that is being recorded in the final checkpoint's record.
    Resolving(CheckpointId),
}

/// Where a recovery stands (docs/design/recovery.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryStep {
    /// Waiting for the latest durable record ([`Event::Loaded`]).
    Loading,
    /// Loaded; the record's unresolved committables are being resumed with commit.
    Loaded,
    /// Every committable is resolved; the resolutions are being written.
    Resumed,
    /// The resolutions are durable; the pool's lingering transactions are being aborted.
    ResolutionsDurable,
    /// The pool is clean; the tasks are starting from the restored positions.
    Aborted,
}

/// What happened. Time comes with the event, as the `now` argument of [`Coordinator::on`].
#[derive(Debug, Clone, PartialEq)]
pub enum Event<C, D> {
    /// Time passed.
    Tick,
    /// `task` snapshotted checkpoint `id`.
    Ack {
        /// The checkpoint.
        id: CheckpointId,
        /// The task.
        task: TaskId,
        /// Its frozen state delta (opaque here), if it keeps state.
        delta: Option<D>,
        /// A source's positions at the barrier (empty for other tasks).
        positions: Positions,
        /// A sink's prepared transactions (empty for other tasks).
        committables: Vec<C>,
    },
    /// `task` cannot take checkpoint `id` (e.g. a failed send in the sink).
    Decline {
        /// The checkpoint.
        id: CheckpointId,
        /// The task.
        task: TaskId,
        /// Why.
        reason: String,
    },
    /// The batch of `id` is durable (SyncAll returned).
    Persisted(CheckpointId),
    /// Writing a batch (or the recovered resolutions) failed.
    PersistFailed {
        /// What the store reported.
        reason: String,
    },
    /// The answer to a [`Decision::Commit`], [`Decision::RetryCommitAt`] or [`Decision::Resume`].
    CommitResult {
        /// The committable.
        committable: C,
        /// What the commit found.
        outcome: CommitOutcome,
    },
    /// A task failed: the job restarts from the latest durable checkpoint.
    TaskFailed {
        /// The task.
        task: TaskId,
        /// Why.
        reason: String,
    },
    /// Recovery: the latest durable record (`None` on a fresh start).
    Loaded(Option<Restored<C>>),
    /// Recovery: the resolutions of [`Decision::PersistResolutions`] are durable.
    ResolutionsPersisted,
    /// Recovery: [`Decision::AbortPool`] is done.
    PoolAborted,
    /// Recovery: [`Decision::StartTasks`] is done; the checkpoint timer starts now.
    TasksStarted,
    /// Stop the job gracefully: a final checkpoint, after whose barrier the sources read
    /// nothing, then its commits, then their resolutions recorded
    /// ([`Event::ResolutionsPersisted`]), then [`Decision::Stopped`].
    StopRequested,
}

/// What a commit of one committable found (the client's `ResumeOutcome`, plus errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Committed now.
    Completed,
    /// Committed before (a commit that raced with a crash).
    AlreadyCommitted,
    /// The committable was empty.
    NothingToCommit,
    /// A retriable error (connection, coordinator moving): try again before the deadline.
    Retriable(String),
    /// Aborted (by transaction.timeout.ms or a fence): the output is lost.
    NotCommitted(String),
    /// A later transaction of the same id exists: a foreign writer.
    Superseded(String),
    /// An error retrying cannot fix (authorization, configuration): the job stops; a restart
    /// after the fix resumes the committable from the durable record.
    Failed(String),
}

impl CommitOutcome {
    /// What the client's `resume_transaction` answered, as an outcome: connection and
    /// coordinator errors are retriable, anything the client classifies fatal is `Failed`.
    pub fn from_resume(answer: Result<ResumeOutcome, crate::client::Error>) -> CommitOutcome {
        match answer {
            Ok(ResumeOutcome::Completed) => CommitOutcome::Completed,
            Ok(ResumeOutcome::AlreadyCommitted) => CommitOutcome::AlreadyCommitted,
            Ok(ResumeOutcome::NothingToCommit) => CommitOutcome::NothingToCommit,
            Ok(ResumeOutcome::NotCommitted { reason }) => CommitOutcome::NotCommitted(reason),
            Ok(ResumeOutcome::Superseded { reason }) => CommitOutcome::Superseded(reason),
            Err(e) => match e.class_in(Op::TxnCoordinator) {
                ErrorClass::Retriable | ErrorClass::RefreshAndRetry => {
                    CommitOutcome::Retriable(e.to_string())
                }
                _ => CommitOutcome::Failed(e.to_string()),
            },
        }
    }
}

/// The latest durable record, as recovery reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Restored<C> {
    /// Its checkpoint id.
    pub id: CheckpointId,
    /// The source positions to seek to.
    pub positions: Positions,
    /// The committables it lists as unresolved, in checkpoint order.
    pub unresolved: Vec<Listed<C>>,
}

/// A committable with the checkpoint whose acknowledgement brought it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed<C> {
    /// The checkpoint.
    pub checkpoint: CheckpointId,
    /// The committable.
    pub committable: C,
}

/// A task's frozen state delta, with the checkpoint it was snapshotted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskDelta<D> {
    /// The checkpoint the task snapshotted for (earlier than the batch's id when that
    /// checkpoint was cancelled: its changes are still part of the state at the batch's id).
    pub checkpoint: CheckpointId,
    /// The task.
    pub task: TaskId,
    /// The delta.
    pub delta: D,
}

/// What one checkpoint writes, in ONE atomic, fsynced batch: the record `c/id`.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch<C, D> {
    /// The checkpoint.
    pub id: CheckpointId,
    /// The deltas to apply, in acknowledgement order (a task's earlier deltas first).
    pub deltas: Vec<TaskDelta<D>>,
    /// Every source position (the later acknowledgement wins).
    pub positions: Positions,
    /// Every committable not yet resolved, older ones included: a record alone says what a
    /// recovery must commit.
    pub unresolved: Vec<Listed<C>>,
    /// Records up to this id (and their undo images) are deleted in the same batch
    /// (retention K: N−K+1..N stay).
    pub retire_through: Option<CheckpointId>,
    /// When the batch must be durable: the checkpoint's deadline, its trigger +
    /// `checkpoint.timeout.ms`. The acks and the write share that one timeout, which is what
    /// the timeout budget counts per checkpoint ([`check_budget`](super::check_budget)).
    pub deadline: Millis,
}

/// What the runtime must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<C, D> {
    /// Sources record their positions and send Barrier(id).
    InjectBarrier(CheckpointId),
    /// The final checkpoint of a stop: like [`Decision::InjectBarrier`], and the sources read
    /// nothing after the barrier (a cancelled final checkpoint is injected again).
    InjectFinalBarrier(CheckpointId),
    /// Abort checkpoint `id` in every task (it declined or timed out).
    Cancel(CheckpointId),
    /// Write this batch with SyncAll, then report [`Event::Persisted`].
    Persist(Batch<C, D>),
    /// Checkpoint `id` is durable: tasks drop its frozen buffers.
    Completed(CheckpointId),
    /// Commit (resume with commit) this committable; report [`Event::CommitResult`].
    Commit {
        /// The checkpoint that brought it (durable, or covered by a later durable one).
        checkpoint: CheckpointId,
        /// The committable.
        committable: C,
        /// Give up (and report the error) by then.
        deadline: Millis,
    },
    /// Commit it again at `at` (before `deadline`); report [`Event::CommitResult`].
    RetryCommitAt {
        /// The durable checkpoint that lists it.
        checkpoint: CheckpointId,
        /// The committable.
        committable: C,
        /// When to retry.
        at: Millis,
        /// The deadline.
        deadline: Millis,
    },
    /// It is committed; the next record no longer lists it.
    MarkResolved {
        /// The checkpoint that listed it.
        checkpoint: CheckpointId,
        /// The committable.
        committable: C,
    },
    /// Its pool slot may be reused: no durable record lists it any more.
    ReleaseSlot(C),
    /// Stop the job with this error.
    FailJob(JobFailure),
    /// Stop the tasks (cancel the persister's work only after it returns) and run recovery.
    Restart {
        /// Why.
        reason: String,
    },
    /// Recovery: resume these with commit, in this order, each reported by
    /// [`Event::CommitResult`].
    Resume(Vec<(Listed<C>, Millis)>),
    /// Recovery, and a stop's end: record durably (SyncAll) that record `checkpoint`'s
    /// committables are resolved; report [`Event::ResolutionsPersisted`].
    PersistResolutions {
        /// The record.
        checkpoint: CheckpointId,
        /// The committables now resolved.
        resolved: Vec<C>,
    },
    /// Recovery: abort the pool's lingering transactions (InitProducerId on every id,
    /// ListTransactions).
    AbortPool,
    /// Recovery: seek the sources and start the tasks.
    StartTasks {
        /// The restored checkpoint (`None`: a fresh start).
        from: Option<CheckpointId>,
        /// Where the sources resume.
        positions: Positions,
    },
    /// The stop is done: checkpoint `final_checkpoint` is durable, its output committed and
    /// its record lists nothing to resume. The tasks may be dropped: nothing they hold is open.
    Stopped {
        /// The final checkpoint (a restart resumes from it).
        final_checkpoint: CheckpointId,
    },
}

/// Where one committable stands once its checkpoint's batch is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// In a batch that is not durable yet: no commit may be sent.
    Listed,
    /// Its checkpoint is durable; a commit is under way.
    Committing,
    /// Committed, but the latest durable record still lists it. `unlisted_by` is the first
    /// batch built without it: once that batch is durable, its slot is free.
    Resolved { unlisted_by: Option<CheckpointId> },
}

#[derive(Debug, Clone)]
struct Pending<C> {
    listed: Listed<C>,
    deadline: Millis,
    standing: Standing,
}

/// The acknowledgements collected since the last batch: the in-flight checkpoint's and those
/// of cancelled checkpoints (their deltas and prepared transactions belong to the next batch).
#[derive(Debug, Clone)]
struct Collected<C, D> {
    deltas: Vec<TaskDelta<D>>,
    positions: Positions,
    committables: Vec<(Listed<C>, Millis)>,
    empties: Vec<C>,
    /// (checkpoint, task) acknowledgements taken, to ignore duplicates.
    taken: BTreeSet<(CheckpointId, TaskId)>,
}

impl<C, D> Default for Collected<C, D> {
    fn default() -> Self {
        Collected {
            deltas: Vec::new(),
            positions: Positions::new(),
            committables: Vec::new(),
            empties: Vec::new(),
            taken: BTreeSet::new(),
        }
    }
}

/// The checkpoint coordinator. [`Coordinator::on`] is pure and deterministic: the same events
/// at the same times give the same decisions.
#[derive(Debug, Clone)]
pub struct Coordinator<C, D> {
    settings: Settings,
    tasks: BTreeSet<TaskId>,
    phase: Phase,
    now: Millis,
    next_id: CheckpointId,
    last_durable: Option<CheckpointId>,
    last_trigger: Millis,
    /// When the last checkpoint ended (completed or cancelled); the min pause counts from
    /// there. `None` since the tasks started: the pause is between checkpoints.
    last_end: Option<Millis>,
    failures: u32,
    /// Per injected checkpoint not yet covered by a durable one: when it was triggered.
    triggered: BTreeMap<CheckpointId, Millis>,
    /// Per task: the trigger time of the last checkpoint it acknowledged (or the tasks'
    /// start). A sink's next committable began after that barrier passed it, so a commit
    /// deadline without a known start counts from there. (Not from the trigger before the
    /// acknowledged checkpoint: a sink that missed a cancelled barrier carries an older
    /// transaction.)
    floors: BTreeMap<TaskId, Millis>,
    collected: Collected<C, D>,
    pending: Vec<Pending<C>>,
    /// During recovery: the restored positions.
    restored: Option<(CheckpointId, Positions)>,
    /// A stop under way.
    stop: Option<StopStep>,
}

impl<C: Committable, D> Coordinator<C, D> {
    /// A coordinator for these tasks (every one acknowledges every checkpoint), waiting for
    /// [`Event::Loaded`].
    pub fn new(settings: Settings, tasks: impl IntoIterator<Item = TaskId>) -> Self {
        Coordinator {
            settings,
            tasks: tasks.into_iter().collect(),
            phase: Phase::Recovering(RecoveryStep::Loading),
            now: 0,
            next_id: CheckpointId(1),
            last_durable: None,
            last_trigger: 0,
            last_end: None,
            failures: 0,
            triggered: BTreeMap::new(),
            floors: BTreeMap::new(),
            collected: Collected::default(),
            pending: Vec::new(),
            restored: None,
            stop: None,
        }
    }

    /// The current state.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The latest durable checkpoint.
    pub fn last_durable(&self) -> Option<CheckpointId> {
        self.last_durable
    }

    /// The stop under way, if one is.
    pub fn stop_step(&self) -> Option<StopStep> {
        self.stop
    }

    /// Checkpoints failed in a row.
    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }

    /// Committables a durable record (or the batch being written) lists and that are not
    /// resolved yet; their slots are busy.
    pub fn unresolved(&self) -> impl Iterator<Item = &Listed<C>> {
        self.pending
            .iter()
            .filter(|p| !matches!(p.standing, Standing::Resolved { .. }))
            .map(|p| &p.listed)
    }

    /// The one transition function: `event` happened at `now`; returns what to do. The time
    /// never goes backwards here (the largest `now` seen counts).
    pub fn on(&mut self, now: Millis, event: Event<C, D>) -> Vec<Decision<C, D>> {
        self.now = self.now.max(now);
        if matches!(self.phase, Phase::Failed(_) | Phase::Stopped(_)) {
            return Vec::new();
        }
        match event {
            Event::Tick => self.on_tick(),
            Event::Ack {
                id,
                task,
                delta,
                positions,
                committables,
            } => self.on_ack(id, task, delta, positions, committables),
            Event::Decline { id, task, reason } => match self.phase {
                Phase::InFlight { id: current, .. } if current == id => {
                    self.cancel(id, format!("{task} declined it: {reason}"))
                }
                _ => ignored("a decline of a checkpoint not in flight", id),
            },
            Event::Persisted(id) => self.on_persisted(id),
            Event::PersistFailed { reason } => match self.phase {
                Phase::Persisting { id } => self.fail(JobFailure::PersistFailed {
                    checkpoint: id,
                    reason,
                }),
                Phase::Recovering(RecoveryStep::Resumed) => {
                    let checkpoint = self.last_durable.unwrap_or(CheckpointId(0));
                    self.fail(JobFailure::PersistFailed { checkpoint, reason })
                }
                _ => ignored("a persist failure with no write under way", CheckpointId(0)),
            },
            Event::CommitResult {
                committable,
                outcome,
            } => self.on_commit_result(committable, outcome),
            Event::TaskFailed { task, reason } => self.on_task_failed(task, reason),
            Event::Loaded(restored) => match self.phase {
                Phase::Recovering(RecoveryStep::Loading) => self.on_loaded(restored),
                _ => ignored("a loaded record outside recovery", CheckpointId(0)),
            },
            Event::ResolutionsPersisted => match (&self.phase, self.stop) {
                (Phase::Recovering(RecoveryStep::Resumed), _) => self.abort_pool(),
                (Phase::Idle, Some(StopStep::Resolving(id))) => {
                    self.phase = Phase::Stopped(id);
                    self.stop = None;
                    vec![Decision::Stopped {
                        final_checkpoint: id,
                    }]
                }
                _ => ignored("resolutions persisted out of order", CheckpointId(0)),
            },
            Event::PoolAborted => match self.phase {
                Phase::Recovering(RecoveryStep::ResolutionsDurable) => {
                    self.phase = Phase::Recovering(RecoveryStep::Aborted);
                    let (from, positions) = match self.restored.take() {
                        Some((id, positions)) => (Some(id), positions),
                        None => (None, Positions::new()),
                    };
                    vec![Decision::StartTasks { from, positions }]
                }
                _ => ignored("pool aborted out of order", CheckpointId(0)),
            },
            Event::TasksStarted => match self.phase {
                Phase::Recovering(RecoveryStep::Aborted) => {
                    self.phase = Phase::Idle;
                    self.last_trigger = self.now;
                    self.last_end = None;
                    let now = self.now;
                    self.floors = self.tasks.iter().map(|&t| (t, now)).collect();
                    Vec::new()
                }
                _ => ignored("tasks started out of order", CheckpointId(0)),
            },
            Event::StopRequested => self.on_stop_requested(),
        }
    }

    fn on_stop_requested(&mut self) -> Vec<Decision<C, D>> {
        if self.stop.is_some() {
            return ignored("a second stop request", CheckpointId(0));
        }
        match self.phase {
            Phase::Idle => self.inject_final(),
            Phase::InFlight { .. } | Phase::Persisting { .. } => {
                self.stop = Some(StopStep::Requested);
                Vec::new()
            }
            _ => ignored("a stop request outside a run", CheckpointId(0)),
        }
    }

    /// Triggers checkpoint `next_id` now, as the stop's final one.
    fn inject_final(&mut self) -> Vec<Decision<C, D>> {
        let id = self.trigger();
        self.stop = Some(StopStep::Final(id));
        vec![Decision::InjectFinalBarrier(id)]
    }

    /// Starts checkpoint `next_id` (InFlight from now).
    fn trigger(&mut self) -> CheckpointId {
        let id = self.next_id;
        self.next_id = id.next();
        self.triggered.insert(id, self.now);
        self.last_trigger = self.now;
        self.phase = Phase::InFlight {
            id,
            acks: BTreeSet::new(),
            deadline: self.now.saturating_add(self.settings.checkpoint_timeout_ms),
        };
        id
    }

    /// During a stop, once the final checkpoint `id` is durable: when every committable is
    /// resolved, the resolutions are recorded (the stop's last step).
    fn resolve_if_committed(&mut self, id: CheckpointId) -> Vec<Decision<C, D>> {
        if !self
            .pending
            .iter()
            .all(|p| matches!(p.standing, Standing::Resolved { .. }))
        {
            return Vec::new();
        }
        self.stop = Some(StopStep::Resolving(id));
        let resolved = self
            .pending
            .iter()
            .map(|p| p.listed.committable.clone())
            .collect();
        vec![Decision::PersistResolutions {
            checkpoint: id,
            resolved,
        }]
    }

    fn on_tick(&mut self) -> Vec<Decision<C, D>> {
        match self.phase {
            Phase::InFlight { id, deadline, .. } if self.now >= deadline => self.cancel(
                id,
                format!(
                    "not acknowledged by every task within checkpoint.timeout.ms ({} ms)",
                    self.settings.checkpoint_timeout_ms
                ),
            ),
            // A stop's final checkpoint goes at once (no interval, no pause), once nothing is
            // in flight; a cancelled one goes again.
            Phase::Idle if self.stop == Some(StopStep::Requested) => self.inject_final(),
            Phase::Idle
                if self.stop.is_none()
                    && self.now >= self.last_trigger.saturating_add(self.settings.interval_ms)
                    && self.last_end.is_none_or(|end| {
                        self.now >= end.saturating_add(self.settings.min_pause_ms)
                    }) =>
            {
                vec![Decision::InjectBarrier(self.trigger())]
            }
            _ => Vec::new(),
        }
    }

    fn on_ack(
        &mut self,
        id: CheckpointId,
        task: TaskId,
        delta: Option<D>,
        positions: Positions,
        committables: Vec<C>,
    ) -> Vec<Decision<C, D>> {
        let running = matches!(
            self.phase,
            Phase::Idle | Phase::InFlight { .. } | Phase::Persisting { .. }
        );
        // An ack is taken once, only from a known task, only for a checkpoint injected since
        // the last durable one (older ones were all acknowledged or cancelled before it).
        let Some(&triggered) = self.triggered.get(&id) else {
            return ignored(
                "an ack of a checkpoint not injected since the last durable one",
                id,
            );
        };
        if !running || !self.tasks.contains(&task) || !self.collected.taken.insert((id, task)) {
            return ignored("an ack outside a run, from an unknown task, or twice", id);
        }
        // A late ack of a cancelled checkpoint does not count towards any checkpoint, but its
        // delta and prepared transactions are still carried into the next batch: the task
        // froze its delta and the sink prepared its transaction for that barrier, and dropping
        // them would lose state changes and output that the next positions already cover.
        if let Some(delta) = delta {
            self.collected.deltas.push(TaskDelta {
                checkpoint: id,
                task,
                delta,
            });
        }
        self.collected.positions.extend(positions);
        let floor = self.floors.insert(task, triggered).unwrap_or(0);
        let (timeout, margin) = (
            self.settings.transaction_timeout_ms,
            self.settings.commit_margin_ms,
        );
        let deadline_from = |c: &C| {
            c.start_ms()
                .unwrap_or(floor)
                .saturating_add(timeout)
                .saturating_sub(margin)
        };
        for committable in committables {
            if committable.is_empty() {
                self.collected.empties.push(committable);
            } else {
                let deadline = deadline_from(&committable);
                self.collected.committables.push((
                    Listed {
                        checkpoint: id,
                        committable,
                    },
                    deadline,
                ));
            }
        }
        let Phase::InFlight {
            id: current,
            ref mut acks,
            deadline,
        } = self.phase
        else {
            return Vec::new();
        };
        if current != id {
            return Vec::new();
        }
        acks.insert(task);
        if *acks != self.tasks {
            return Vec::new();
        }
        self.phase = Phase::Persisting { id };
        vec![Decision::Persist(self.batch(id, deadline))]
    }

    /// Builds batch `id`, due at `deadline`, from what was collected and what is still
    /// unresolved.
    fn batch(&mut self, id: CheckpointId, deadline: Millis) -> Batch<C, D> {
        let collected = std::mem::take(&mut self.collected);
        // The empties' slots are free once batch `id` is durable (no record lists them), and
        // the acks taken stay taken: a second ack while `id` is written must not count again.
        self.collected.empties = collected.empties;
        self.collected.taken = collected.taken;
        for p in &mut self.pending {
            if let Standing::Resolved { unlisted_by: None } = p.standing {
                p.standing = Standing::Resolved {
                    unlisted_by: Some(id),
                };
            }
        }
        for (listed, deadline) in collected.committables {
            self.pending.push(Pending {
                listed,
                deadline,
                standing: Standing::Listed,
            });
        }
        let unresolved = self.unresolved().cloned().collect();
        let retire_through =
            id.0.checked_sub(self.settings.retention.max(1))
                .filter(|&n| n > 0)
                .map(CheckpointId);
        Batch {
            id,
            deltas: collected.deltas,
            positions: collected.positions,
            unresolved,
            retire_through,
            deadline,
        }
    }

    fn on_persisted(&mut self, id: CheckpointId) -> Vec<Decision<C, D>> {
        if self.phase != (Phase::Persisting { id }) {
            return ignored("persisted without a matching write", id);
        }
        self.phase = Phase::Idle;
        self.failures = 0;
        self.last_durable = Some(id);
        self.last_end = Some(self.now);
        self.triggered.retain(|&n, _| n > id);
        self.collected.taken.retain(|&(n, _)| n > id);
        let mut decisions = vec![Decision::Completed(id)];
        for empty in std::mem::take(&mut self.collected.empties) {
            decisions.push(Decision::ReleaseSlot(empty));
        }
        let mut still = Vec::with_capacity(self.pending.len());
        for mut p in std::mem::take(&mut self.pending) {
            match p.standing {
                Standing::Resolved {
                    unlisted_by: Some(n),
                } if n <= id => {
                    decisions.push(Decision::ReleaseSlot(p.listed.committable));
                    continue;
                }
                Standing::Listed => {
                    p.standing = Standing::Committing;
                    decisions.push(Decision::Commit {
                        checkpoint: p.listed.checkpoint,
                        committable: p.listed.committable.clone(),
                        deadline: p.deadline,
                    });
                }
                _ => {}
            }
            still.push(p);
        }
        self.pending = still;
        match self.stop {
            Some(StopStep::Requested) => decisions.extend(self.inject_final()),
            Some(StopStep::Final(n)) if n == id => {
                self.stop = Some(StopStep::Committing(id));
                decisions.extend(self.resolve_if_committed(id));
            }
            _ => {}
        }
        decisions
    }

    fn on_commit_result(&mut self, committable: C, outcome: CommitOutcome) -> Vec<Decision<C, D>> {
        let recovering = matches!(self.phase, Phase::Recovering(RecoveryStep::Loaded));
        let running = matches!(
            self.phase,
            Phase::Idle | Phase::InFlight { .. } | Phase::Persisting { .. }
        );
        let Some(index) = self.pending.iter().position(|p| {
            p.standing == Standing::Committing && p.listed.committable == committable
        }) else {
            return ignored("a commit result for no commit under way", CheckpointId(0));
        };
        if !recovering && !running {
            return ignored("a commit result outside a run", CheckpointId(0));
        }
        let p = &mut self.pending[index];
        let checkpoint = p.listed.checkpoint;
        let transactional_id = committable.name().to_owned();
        match outcome {
            CommitOutcome::Completed
            | CommitOutcome::AlreadyCommitted
            | CommitOutcome::NothingToCommit => {
                p.standing = Standing::Resolved { unlisted_by: None };
                self.on_resolved(checkpoint, committable, recovering)
            }
            CommitOutcome::Retriable(error) => {
                let deadline = p.deadline;
                if self.now >= deadline {
                    return self.fail(JobFailure::CommitDeadline {
                        checkpoint,
                        transactional_id,
                        deadline_ms: deadline,
                        transaction_timeout_ms: self.settings.transaction_timeout_ms,
                        commit_margin_ms: self.settings.commit_margin_ms,
                        last_error: error,
                    });
                }
                let at = self
                    .now
                    .saturating_add(self.settings.commit_retry_backoff_ms)
                    .min(deadline);
                vec![Decision::RetryCommitAt {
                    checkpoint,
                    committable,
                    at,
                    deadline,
                }]
            }
            CommitOutcome::NotCommitted(reason) => self.fail(JobFailure::DataLoss {
                checkpoint,
                transactional_id,
                reason,
                transaction_timeout_ms: self.settings.transaction_timeout_ms,
                interval_ms: self.settings.interval_ms,
                checkpoint_timeout_ms: self.settings.checkpoint_timeout_ms,
            }),
            CommitOutcome::Superseded(reason) => self.fail(JobFailure::Clash {
                checkpoint,
                transactional_id,
                reason,
            }),
            CommitOutcome::Failed(error) => self.fail(JobFailure::CommitFailed {
                checkpoint,
                transactional_id,
                error,
            }),
        }
    }

    /// A committable resolved (committed, or found committed): marked so; a stop waiting for
    /// its checkpoint's commits may go on; a recovery whose committables are all resolved
    /// persists the resolutions.
    fn on_resolved(
        &mut self,
        checkpoint: CheckpointId,
        committable: C,
        recovering: bool,
    ) -> Vec<Decision<C, D>> {
        let mut decisions = vec![Decision::MarkResolved {
            checkpoint,
            committable,
        }];
        if let Some(StopStep::Committing(id)) = self.stop {
            decisions.extend(self.resolve_if_committed(id));
        }
        if recovering
            && self
                .pending
                .iter()
                .all(|p| matches!(p.standing, Standing::Resolved { .. }))
        {
            self.phase = Phase::Recovering(RecoveryStep::Resumed);
            let resolved = self
                .pending
                .iter()
                .map(|p| p.listed.committable.clone())
                .collect();
            decisions.push(Decision::PersistResolutions {
                checkpoint: self.last_durable.unwrap_or(CheckpointId(0)),
                resolved,
            });
        }
        decisions
    }

    fn on_task_failed(&mut self, task: TaskId, reason: String) -> Vec<Decision<C, D>> {
        let mut decisions = Vec::new();
        match self.phase {
            Phase::InFlight { id, .. } => decisions.push(Decision::Cancel(id)),
            Phase::Idle | Phase::Persisting { .. } | Phase::Recovering(RecoveryStep::Aborted) => {}
            _ => {
                return ignored(
                    "a task failure while its tasks are stopped",
                    CheckpointId(0),
                )
            }
        }
        // Everything in memory goes: recovery rebuilds it from the latest durable record,
        // whose unresolved committables it resumes, and the pool abort ends the rest.
        self.phase = Phase::Recovering(RecoveryStep::Loading);
        self.stop = None;
        self.collected = Collected::default();
        self.pending.clear();
        self.triggered.clear();
        self.floors.clear();
        decisions.push(Decision::Restart {
            reason: format!("{task} failed: {reason}"),
        });
        decisions
    }

    fn on_loaded(&mut self, restored: Option<Restored<C>>) -> Vec<Decision<C, D>> {
        let Some(restored) = restored else {
            self.restored = None;
            return self.abort_pool();
        };
        let id = restored.id;
        self.last_durable = Some(id);
        // Ids strictly increase: past the record, and past any id this process injected.
        self.next_id = self.next_id.max(id.next());
        self.restored = Some((id, restored.positions));
        // The transaction started before the crash; without its start time, count from now
        // (later than the truth: a retry past the real deadline then reports NotCommitted,
        // which fails the job loudly).
        let margin = self.settings.commit_margin_ms;
        let timeout = self.settings.transaction_timeout_ms;
        self.pending = restored
            .unresolved
            .into_iter()
            .map(|listed| Pending {
                deadline: listed
                    .committable
                    .start_ms()
                    .unwrap_or(self.now)
                    .saturating_add(timeout)
                    .saturating_sub(margin),
                standing: Standing::Committing,
                listed,
            })
            .collect();
        if self.pending.is_empty() {
            return self.abort_pool();
        }
        self.phase = Phase::Recovering(RecoveryStep::Loaded);
        let resume = self
            .pending
            .iter()
            .map(|p| (p.listed.clone(), p.deadline))
            .collect();
        vec![Decision::Resume(resume)]
    }

    fn abort_pool(&mut self) -> Vec<Decision<C, D>> {
        // The pool starts over (InitProducerId on every id): no slot stays busy.
        self.pending.clear();
        self.phase = Phase::Recovering(RecoveryStep::ResolutionsDurable);
        vec![Decision::AbortPool]
    }

    fn cancel(&mut self, id: CheckpointId, reason: String) -> Vec<Decision<C, D>> {
        self.failures = self.failures.saturating_add(1);
        let mut decisions = vec![Decision::Cancel(id)];
        if self.failures > self.settings.max_consecutive_failures {
            decisions.extend(self.fail(JobFailure::TooManyFailures {
                failures: self.failures,
                tolerated: self.settings.max_consecutive_failures,
                checkpoint: id,
                last_reason: reason,
            }));
            return decisions;
        }
        tracing::warn!(
            checkpoint = id.0,
            failures = self.failures,
            "checkpoint cancelled: {reason}"
        );
        if self.stop == Some(StopStep::Final(id)) {
            // Injected again at the next tick: the stop still needs its final checkpoint.
            self.stop = Some(StopStep::Requested);
        }
        self.phase = Phase::Idle;
        self.last_end = Some(self.now);
        decisions
    }

    fn fail(&mut self, failure: JobFailure) -> Vec<Decision<C, D>> {
        self.phase = Phase::Failed(failure.clone());
        vec![Decision::FailJob(failure)]
    }
}

/// An event that does not apply in the current state changes nothing.
fn ignored<C, D>(what: &str, id: CheckpointId) -> Vec<Decision<C, D>> {
    tracing::debug!(checkpoint = id.0, "checkpoint coordinator ignores {what}");
    Vec::new()
}
