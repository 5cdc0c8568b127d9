//! The coordinator's loop (the job master): feeds the pure [`Coordinator`] the subtasks'
//! reports and a tick, and carries out its decisions: barriers into the source subtasks,
//! Cancel/Completed to every subtask, persisting on a blocking thread, commits and slot
//! releases to the subtask owning the transactional id; during recovery, the resolutions made
//! durable, the sinks' pools started, the subtasks launched.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;

use super::launch::{launch, Launched, Plan};
use super::message::{Control, Counters, Report, C, D};
use super::offsets::GroupOffsets;
use super::output::TaskSink;
use super::persist::Persister;
use super::positions::{record_positions, restored, start_recorded, to_store};
use super::retire::abort_retired;
use crate::client::Admin;
use crate::engine::checkpoint::{
    self, CheckpointId, CommitOutcome, Coordinator, Decision, Event, Phase, Positions, TaskId,
};
use crate::engine::clock::now_ms;
use crate::engine::runtime::hook;
use crate::engine::runtime::observe;
use crate::engine::runtime::routing::key_group_range;
use crate::engine::runtime::{RunSummary, RuntimeError};
use crate::engine::sink;
use crate::engine::sink::file::{FileWriter, FileWriterConfig};
use crate::engine::state::{CheckpointRecord, FrozenDelta, OperatorState, StateStore};

/// How often the coordinator hears the time.
const TICK: Duration = Duration::from_millis(20);

/// The sinks after the start-up's recovery of the restored committables.
pub(crate) enum RecoveredSinks {
    /// Kafka sinks resumed (their pools start at AbortPool).
    Kafka(Vec<sink::Resumed>),
    /// File sinks: the restored part files are final and the others removed; the sinks open
    /// at AbortPool.
    Files {
        /// Each task's settings.
        configs: Vec<FileWriterConfig>,
        /// The restored committables, by name, and how they ended.
        committed: Vec<(String, CommitOutcome)>,
    },
}

/// The coordinator's side of a run.
pub(crate) struct Master {
    coord: Coordinator<C, D>,
    /// Shared with the persister's blocking thread (one write at a time: the coordinator
    /// never decides a second Persist before the first's Persisted).
    store: Arc<Mutex<StateStore>>,
    /// One checkpoint write at a time, bounded by checkpoint.timeout.ms.
    persister: Persister,
    /// The positions of the checkpoint being written, for the group's offsets once durable.
    persisted_positions: Option<(CheckpointId, Positions)>,
    group_offsets: GroupOffsets,
    /// The checkpoint being written when its record lists committables (the test hook).
    persisted_committables: Option<CheckpointId>,
    /// The Kafka sinks between their resume and their start (AbortPool), by sink task.
    resumed: Vec<sink::Resumed>,
    /// The file sinks' settings, by sink task, until their start (AbortPool).
    file_sinks: Vec<FileWriterConfig>,
    /// The restored file committables the start-up's recovery committed.
    files_recovered: Vec<(String, CommitOutcome)>,
    /// The started sinks, until the subtasks take them (StartTasks).
    sinks: Vec<TaskSink>,
    plan: Plan,
    launched: Option<Launched>,
    /// Transactional id → the subtask whose sink prepared it (commits and releases go there).
    owners: BTreeMap<String, TaskId>,
    reports_tx: UnboundedSender<Report>,
    reports: UnboundedReceiver<Report>,
    counters: Arc<Counters>,
    last_checkpoint: u64,
    queue: VecDeque<Decision<C, D>>,
    /// The coordinator decided `Stopped`: the stop's final checkpoint is committed and
    /// recorded as resolved.
    stopped: bool,
    /// The run's stop signal (for the test pause that ends at a stop).
    stop_signal: Option<watch::Receiver<bool>>,
    /// Where the sources start when no checkpoint above 0 is restored.
    start: Start,
}

/// Where the sources of a run start.
#[derive(Debug, Clone, PartialEq)]
enum Start {
    /// At the restored checkpoint's positions (the coordinator's StartTasks).
    Restored,
    /// At the positions checkpoint 0 recorded: a run that crashed before its first checkpoint
    /// starts where it started, not at a `source.start = "latest"` resolved again.
    Recorded(Positions),
    /// As `source.start` says, resolved now and recorded in checkpoint 0 before any source
    /// reads.
    Unrecorded,
}

impl Master {
    pub(crate) fn new(
        settings: checkpoint::Settings,
        plan: Plan,
        store: StateStore,
        recovered: RecoveredSinks,
        restored_id: u64,
    ) -> Master {
        let (resumed, file_sinks, files_recovered) = match recovered {
            RecoveredSinks::Kafka(r) => (r, Vec::new(), Vec::new()),
            RecoveredSinks::Files { configs, committed } => (Vec::new(), configs, committed),
        };
        let (reports_tx, reports) = mpsc::unbounded_channel();
        Master {
            coord: Coordinator::new(settings, plan.task_ids()),
            store: Arc::new(Mutex::new(store)),
            persister: Persister::new(plan.patience),
            persisted_positions: None,
            persisted_committables: None,
            group_offsets: GroupOffsets::new(
                Admin::with_cluster(plan.cluster.clone()),
                plan.job.source.group.clone(),
            ),
            resumed,
            file_sinks,
            files_recovered,
            sinks: Vec::new(),
            plan,
            launched: None,
            owners: BTreeMap::new(),
            reports_tx,
            reports,
            counters: Arc::new(Counters::default()),
            last_checkpoint: restored_id,
            queue: VecDeque::new(),
            stopped: false,
            stop_signal: None,
            start: Start::Restored,
        }
    }

    fn event(&mut self, e: Event<C, D>) {
        let decisions = self.coord.on(now_ms(), e);
        self.queue.extend(decisions);
    }

    async fn drain(&mut self) -> Result<(), RuntimeError> {
        while let Some(d) = self.queue.pop_front() {
            self.apply(d).await?;
        }
        Ok(())
    }

    /// Recovery in the order of docs/design/recovery.md: the sinks' `resume` already resolved the restored
    /// committables, so the coordinator is told their outcomes; it then decides
    /// PersistResolutions (fsynced) and only after `ResolutionsPersisted` AbortPool, which
    /// starts the sinks (the pools' init). The other order would let a crash after the init
    /// restart with the same committable unresolved, and resuming it then finds its id's epoch
    /// bumped by the init: a committed transaction reported as lost or as a prefix clash.
    pub(crate) async fn recover(&mut self, record: &CheckpointRecord) -> Result<(), RuntimeError> {
        self.start = match (record.id, start_recorded(record)) {
            (0, true) => Start::Recorded(record_positions(record)),
            (0, false) => Start::Unrecorded,
            _ => Start::Restored,
        };
        self.event(Event::Loaded(restored(record)));
        let mut outcomes: Vec<(String, CommitOutcome)> = self
            .resumed
            .iter()
            .flat_map(|r| r.resumed().to_vec())
            .map(|r| {
                (
                    r.transactional_id,
                    CommitOutcome::from_resume(Ok(r.outcome)),
                )
            })
            .collect();
        outcomes.append(&mut self.files_recovered);
        for (name, outcome) in outcomes {
            let found = record.committables.iter().find(|c| c.name() == name);
            if let Some(c) = found {
                self.event(Event::CommitResult {
                    committable: c.clone(),
                    outcome,
                });
            }
        }
        self.drain().await?;
        match self.coord.phase() {
            Phase::Idle => Ok(()),
            Phase::Failed(f) => Err(f.clone().into()),
            other => Err(RuntimeError::Internal(format!(
                "recovery ended in {other:?}"
            ))),
        }
    }

    /// Carries out one of the coordinator's decisions (one arm per decision).
    async fn apply(&mut self, d: Decision<C, D>) -> Result<(), RuntimeError> {
        match d {
            Decision::InjectBarrier(id) => {
                self.inject(id, Control::InjectBarrier);
                Ok(())
            }
            Decision::InjectFinalBarrier(id) => {
                tracing::info!(checkpoint = id.0, "stopping: the final checkpoint");
                self.inject(id, Control::InjectFinalBarrier);
                Ok(())
            }
            Decision::Stopped { final_checkpoint } => {
                tracing::info!(
                    checkpoint = final_checkpoint.0,
                    "stopped: the final checkpoint is committed; no transaction is open"
                );
                self.stopped = true;
                Ok(())
            }
            Decision::Cancel(id) => {
                self.plan.metrics.checkpoint_failed();
                self.broadcast(|| Control::Cancel(id));
                Ok(())
            }
            Decision::Persist(batch) => self.persist(batch),
            Decision::Completed(id) => {
                self.completed(id);
                Ok(())
            }
            Decision::Commit {
                checkpoint,
                committable,
                ..
            } => {
                let owner = self.owner(&committable)?;
                self.send(
                    owner,
                    Control::Commit {
                        checkpoint,
                        committable,
                    },
                );
                Ok(())
            }
            Decision::MarkResolved { .. } => Ok(()),
            Decision::ReleaseSlot(c) => {
                if let Some(&owner) = self.owners.get(c.name()) {
                    self.send(owner, Control::Release(c));
                }
                Ok(())
            }
            Decision::FailJob(f) => Err(f.into()),
            Decision::RetryCommitAt { committable, .. } => Err(RuntimeError::Internal(format!(
                "the coordinator asked to retry {}, but the sink owns commit retries",
                committable.name()
            ))),
            Decision::Restart { reason } => Err(RuntimeError::Internal(format!(
                "a restart was decided ({reason}); restart the job"
            ))),
            // The sinks' resume resolved them already (before the pools' init).
            Decision::Resume(_) => Ok(()),
            Decision::PersistResolutions {
                checkpoint,
                resolved,
            } => self.persist_resolutions(checkpoint, resolved).await,
            // The resolutions are durable now: the sinks' start inits the pools and aborts the
            // lingering ids.
            Decision::AbortPool => self.start_sinks().await,
            Decision::StartTasks { positions, .. } => self.start_tasks(positions).await,
        }
    }

    /// Checkpoint `id` is durable: its positions go to the group's offsets (for monitoring),
    /// the metrics and the log note it, and every task learns it (the sinks commit).
    fn completed(&mut self, id: CheckpointId) {
        self.last_checkpoint = id.0;
        if let Some((n, positions)) = self.persisted_positions.take() {
            if n == id {
                self.group_offsets.checkpoint_completed(id, positions);
            }
        }
        let t = self.plan.metrics.checkpoint_completed(id.0);
        tracing::info!(
            checkpoint = id.0,
            duration_ms = t.duration.as_millis() as u64,
            size_bytes = t.size_bytes,
            "checkpoint durable"
        );
        self.broadcast(|| Control::Completed(id));
    }

    fn inject(&mut self, id: CheckpointId, control: fn(CheckpointId) -> Control) {
        self.plan.metrics.barrier_injected(id.0);
        let sources = self.launched.as_ref().map(|l| l.sources.clone());
        for task in sources.unwrap_or_default() {
            self.send(task, control(id));
        }
    }

    fn owner(&self, c: &C) -> Result<TaskId, RuntimeError> {
        self.owners.get(c.name()).copied().ok_or_else(|| {
            RuntimeError::Internal(format!(
                "no subtask prepared {}, yet the coordinator asks to commit it",
                c.name()
            ))
        })
    }

    /// A message to a subtask; one that is gone failed, and its report says why.
    fn send(&self, task: TaskId, c: Control) {
        let sent = self
            .launched
            .as_ref()
            .and_then(|l| l.controls.get(&task))
            .map(|tx| tx.send(c).is_ok());
        if sent != Some(true) {
            tracing::warn!(%task, "a control message found its subtask gone");
        }
    }

    fn broadcast(&self, c: impl Fn() -> Control) {
        let tasks: Vec<TaskId> = self
            .launched
            .as_ref()
            .map(|l| l.controls.keys().copied().collect())
            .unwrap_or_default();
        for task in tasks {
            self.send(task, c());
        }
    }

    /// Steps 2 and 3 of the sinks' recovery, once the coordinator decided AbortPool (after
    /// the resolutions were persisted).
    async fn start_sinks(&mut self) -> Result<(), RuntimeError> {
        if !self.file_sinks.is_empty() {
            // The start-up's recovery committed the restored files and removed the rest;
            // each task opens its own, at this process's generation.
            for config in std::mem::take(&mut self.file_sinks) {
                let task = config.task;
                self.sinks
                    .push(TaskSink::File(Box::new(FileWriter::open(config)?)));
                tracing::info!(task, "file sink started");
            }
            self.event(Event::PoolAborted);
            return Ok(());
        }
        if self.resumed.is_empty() {
            return Err(RuntimeError::Internal(
                "AbortPool decided twice: the sinks were started already".into(),
            ));
        }
        for resumed in std::mem::take(&mut self.resumed) {
            let (sink, report) = resumed.start().await?;
            tracing::info!(
                task = sink.config().task,
                lingering = report.lingering_aborted.len(),
                "sink started (pool initialized)"
            );
            self.sinks.push(TaskSink::Kafka(Box::new(sink)));
        }
        // A rescale down: the ids of tasks that no longer exist have no pool to fence them.
        let prefix = self.plan.job.sink.transactional_id_prefix.as_deref();
        if let Some(prefix) = prefix.filter(|_| !hook::skipped(hook::Protection::Retire)) {
            let p = self.plan.parallelism;
            let aborted =
                abort_retired(&self.plan.cluster, prefix, p, self.plan.transaction_timeout).await?;
            if !aborted.is_empty() {
                tracing::info!(
                    aborted = aborted.len(),
                    parallelism = p,
                    "retired sink tasks' transactions aborted"
                );
            }
        }
        self.event(Event::PoolAborted);
        Ok(())
    }

    async fn start_tasks(&mut self, positions: Positions) -> Result<(), RuntimeError> {
        let sinks = std::mem::take(&mut self.sinks);
        let states = match self.plan.has_window() {
            true => {
                let store = self
                    .store
                    .lock()
                    .map_err(|e| RuntimeError::Internal(format!("the state store's lock: {e}")))?;
                window_states(&store, &self.plan)?
            }
            false => Vec::new(),
        };
        // The coordinator's positions are those of the latest complete checkpoint: none
        // before the first one.
        let positions = match &self.start {
            Start::Recorded(recorded) if positions.is_empty() => recorded.clone(),
            _ => positions,
        };
        let record =
            self.start == Start::Unrecorded && !hook::skipped(hook::Protection::StartRecord);
        let store = self.store.clone();
        let launched = launch(
            &self.plan,
            states,
            sinks,
            &positions,
            &self.counters,
            &self.reports_tx,
            |resolved| {
                if !record {
                    return Ok(());
                }
                let mut store = store
                    .lock()
                    .map_err(|e| RuntimeError::Internal(format!("the state store's lock: {e}")))?;
                store.record_start(to_store(resolved))?;
                Ok(())
            },
        )
        .await?;
        if record {
            self.start = Start::Recorded(launched.positions.clone());
            // A partition the recorded start does not list is new from now on.
            self.plan.from_checkpoint = true;
        }
        tracing::info!(positions = ?launched.positions, "source positioned");
        tracing::info!(parallelism = self.plan.parallelism, "subtasks started");
        self.launched = Some(launched);
        self.event(Event::TasksStarted);
        Ok(())
    }

    fn persist(&mut self, batch: checkpoint::Batch<C, D>) -> Result<(), RuntimeError> {
        let id = batch.id;
        let batch_deadline = batch.deadline;
        self.plan.metrics.barriers_aligned(id.0);
        // A cancelled checkpoint's delta went back into its operator (cancel), so its changes
        // are in this checkpoint's delta already. The keyed subtasks' deltas of one operator
        // (disjoint key-group ranges) become one.
        let deltas = FrozenDelta::merge(
            batch
                .deltas
                .into_iter()
                .filter(|d| d.checkpoint == id)
                .flat_map(|d| d.delta),
        );
        self.persisted_positions = Some((id, batch.positions.clone()));
        let positions = to_store(&batch.positions);
        let committables: Vec<C> = batch
            .unresolved
            .into_iter()
            .map(|l| l.committable)
            .collect();
        self.persisted_committables = (!committables.is_empty()).then_some(id);
        let store = self.store.clone();
        let metrics = self.plan.metrics.clone();
        let within = Duration::from_millis(batch_deadline.saturating_sub(now_ms()));
        self.persister.start(id, within, move || {
            let mut store = store.lock().map_err(|e| e.to_string())?;
            let written = store.persist(id.0, &deltas, positions, committables);
            observe::persisted(&metrics, written)
        })
    }

    /// Feeds the persister's answer once it has one.
    async fn check_persist(&mut self) -> Result<(), RuntimeError> {
        let Some(answer) = self.persister.poll().await else {
            return Ok(());
        };
        match answer {
            Ok(id) => {
                // The chaos test's pause point: durable, with transactions not yet committed.
                if self.persisted_committables == Some(id) {
                    let stop = self.stop_signal.clone();
                    hook::reached(hook::Point::CheckpointPersisted, id.0, stop).await;
                }
                self.event(Event::Persisted(id))
            }
            Err(reason) => self.event(Event::PersistFailed { reason }),
        }
        self.drain().await
    }

    async fn persist_resolutions(
        &mut self,
        n: CheckpointId,
        resolved: Vec<C>,
    ) -> Result<(), RuntimeError> {
        let store = self.store.clone();
        let write = tokio::task::spawn_blocking(move || {
            let mut store = store
                .lock()
                .map_err(|e| RuntimeError::Internal(e.to_string()))?;
            let record = store.record(n.0)?;
            let left = record
                .committables
                .into_iter()
                .filter(|c| !resolved.iter().any(|r| r.name() == c.name()))
                .collect();
            store.update_committables(n.0, left)?;
            Ok::<(), RuntimeError>(())
        });
        // Bounded like a checkpoint's write: past the timeout the coordinator fails the job;
        // the write's thread keeps the store's lock, so no second writer runs.
        let Ok(joined) = tokio::time::timeout(self.persister.timeout(), write).await else {
            let reason = format!(
                "the recovered resolutions' write did not finish within checkpoint.timeout.ms = {} ms",
                self.persister.timeout().as_millis()
            );
            self.event(Event::PersistFailed { reason });
            return Ok(());
        };
        joined.map_err(|e| RuntimeError::Internal(format!("the state store's thread: {e}")))??;
        self.event(Event::ResolutionsPersisted);
        Ok(())
    }

    fn on_report(&mut self, r: Report) -> Result<(), RuntimeError> {
        match r {
            Report::Ack {
                id,
                task,
                delta,
                positions,
                committables,
            } => {
                for c in &committables {
                    self.owners.insert(c.name().to_owned(), task);
                }
                self.event(Event::Ack {
                    id,
                    task,
                    delta,
                    positions,
                    committables,
                });
                Ok(())
            }
            Report::CommitResult {
                committable,
                outcome,
            } => {
                self.event(Event::CommitResult {
                    committable,
                    outcome,
                });
                Ok(())
            }
            Report::Failed { task, error } => {
                tracing::error!(%task, %error, "subtask failed: the job stops");
                Err(error)
            }
        }
    }

    /// The loop: reports, ticks, the persister, until a stop asked for by `stop` has ended
    /// (the coordinator's `Stopped`) or an error.
    pub(crate) async fn run(
        mut self,
        mut stop: watch::Receiver<bool>,
    ) -> Result<RunSummary, RuntimeError> {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut stop_open = true;
        let mut stop_asked = false;
        self.stop_signal = Some(stop.clone());
        while !self.stopped {
            if !stop_asked && *stop.borrow_and_update() {
                if hook::skipped(hook::Protection::FinalCheckpoint) {
                    return self.finish().await;
                }
                // A graceful stop: the coordinator takes a final checkpoint (the sources read
                // nothing after its barrier), commits it and records that; each step is
                // bounded by its own timeout, and a failure fails the run as usual.
                stop_asked = true;
                tracing::info!("stop requested: taking a final checkpoint");
                self.event(Event::StopRequested);
                self.drain().await?;
                continue;
            }
            tokio::select! {
                changed = stop.changed(), if stop_open && !stop_asked => stop_open = changed.is_ok(),
                r = self.reports.recv() => match r {
                    Some(r) => self.on_report(r)?,
                    None => return Err(RuntimeError::Internal("the report channel closed".into())),
                },
                _ = tick.tick() => {
                    self.check_persist().await?;
                    self.event(Event::Tick);
                }
            }
            self.drain().await?;
        }
        self.finish().await
    }

    /// After the stop: the group's offsets written; the subtasks stop when `Launched` is
    /// dropped (they hold no open transaction: nothing was read after the final barrier).
    async fn finish(mut self) -> Result<RunSummary, RuntimeError> {
        self.group_offsets.flush().await;
        let summary = RunSummary {
            records_in: self.counters.records_in.load(Ordering::Relaxed),
            records_out: self.counters.records_out.load(Ordering::Relaxed),
            last_checkpoint: self.last_checkpoint,
        };
        tracing::info!(summary = ?summary, "stopped");
        Ok(summary)
    }
}

/// Per keyed stage, keyed subtask i's handle on the stage's state, restricted to its key
/// groups.
fn window_states(store: &StateStore, plan: &Plan) -> Result<Vec<Vec<OperatorState>>, RuntimeError> {
    let stages = plan.topology.stages();
    if stages.is_empty() {
        return Err(RuntimeError::Internal(
            "no keyed stage to restore state for".into(),
        ));
    }
    stages
        .iter()
        .map(|stage| {
            (0..plan.parallelism)
                .map(|i| {
                    let groups = key_group_range(i, plan.parallelism, plan.key_groups);
                    Ok(store.operator(&stage.uid)?.for_key_groups(groups))
                })
                .collect()
        })
        .collect()
}
