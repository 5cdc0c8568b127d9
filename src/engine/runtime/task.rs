//! The task loop and the start-up recovery of [`run`].

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use super::hook;
use super::observe;
use super::offsets::GroupOffsets;
use super::persist::Persister;
use super::pipeline::{input_id, Pipeline, WINDOW_KIND, WINDOW_UID};
use super::source::{self, Discovery};
use super::{RunConfig, RunSummary, RuntimeError};
use crate::client::txn::PreparedTransaction;
use crate::client::{
    Admin, Cluster, Consumer, ConsumerRecord, IsolationLevel, Offset, ProducerRecord,
};
use crate::engine::checkpoint::{
    self, CheckpointId, CommitOutcome, Coordinator, Decision, Event, Listed, Millis, Phase,
    Positions, Restored, TaskId,
};
use crate::engine::job::{DeliveryGuarantee, Job, Operator, StartPosition};
use crate::engine::metrics::Metrics;
use crate::engine::sink::{
    self, check_timeout_budget, Delivery, KafkaSink, SinkCommittable, SinkConfig, Written,
};
use crate::engine::state::{
    CheckpointRecord, FrozenDelta, Layout, OperatorLayout, RestoreFrom, SourcePosition, StateStore,
    StoreOptions,
};

type C = PreparedTransaction;
type D = Vec<FrozenDelta>;

/// The one task of this version.
const TASK: TaskId = TaskId(0);
/// Transactional ids per sink task: the open, the prepared and the just-committed one.
const POOL_SIZE: usize = 3;
/// How long one poll waits for records (the loop ticks the coordinator in between).
const POLL: Duration = Duration::from_millis(100);
/// How long a stop waits for the checkpoint under way.
const STOP_GRACE: Duration = Duration::from_secs(10);

fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs `config.job` until `stop` turns true (then finishes the checkpoint under way, if
/// quick, and returns) or a fatal error.
///
/// # Errors
/// Every [`RuntimeError`]: an unsupported job, a state store that cannot restore, a timeout
/// budget the brokers refuse, data loss or a prefix clash found by the sink, a checkpoint
/// failure, a source that cannot read.
pub async fn run(
    config: RunConfig,
    stop: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> Result<RunSummary, RuntimeError> {
    let job = &config.job;
    check_supported(job)?;
    let settings = checkpoint_settings(job);
    let layout = state_layout(job);
    let options = StoreOptions {
        retain: u32::try_from(settings.retention).unwrap_or(2),
        cache_bytes: job.settings.state_cache_bytes,
        memtable_bytes: job.settings.state_memtable_bytes,
    };
    let (store, record) =
        open_store(config.state_dir.clone(), layout, options, config.restore).await?;
    let cluster = Cluster::connect(config.client.clone())
        .await
        .map_err(|e| RuntimeError::client("connecting to the brokers", e))?;
    let delivery = delivery(job.sink.guarantee);
    if delivery == Delivery::ExactlyOnce {
        check_timeout_budget(&Admin::with_cluster(cluster.clone()), &settings).await?;
    }
    let restored: Vec<SinkCommittable> = record
        .committables
        .iter()
        .map(|t| SinkCommittable {
            checkpoint: record.id,
            transaction: t.clone(),
        })
        .collect();
    // Step 1 only: the pool's init waits until the resolutions are durable (AbortPool).
    let resumed = KafkaSink::resume(
        sink_config(&config, delivery, &settings),
        cluster.clone(),
        &restored,
    )
    .await?;
    tracing::info!(
        checkpoint = record.id,
        resumed = resumed.resumed().len(),
        "restored committables resumed"
    );
    let state = match has_window(job) {
        true => Some(store.operator(WINDOW_UID)?),
        false => None,
    };
    let pipeline = Pipeline::new(&job.pipeline, state)?.observed(metrics.operators(&job.pipeline));
    let mut consumer_config = config.consumer.clone();
    consumer_config.isolation_level = IsolationLevel::ReadCommitted;
    // The source has connections of its own: a broker answers a connection's requests one at
    // a time, in order, so on a shared connection each Fetch long-poll (fetch.max.wait.ms,
    // 500 ms, whenever the source is caught up) held the sink's Produce requests behind it:
    // ~1,000 records/s (BENCHMARKS.md, "Engine").
    let source_cluster = Cluster::connect(config.client.clone())
        .await
        .map_err(|e| RuntimeError::client("connecting the source to the brokers", e))?;
    // The source's metadata is the one partition discovery refreshes (a new partition must be
    // known to the consumer's cluster), and the group's offsets are the source's too.
    let admin = Admin::with_cluster(source_cluster.clone());
    let group_offsets = GroupOffsets::new(admin.clone(), job.source.group.clone());
    let mut consumer = Consumer::with_cluster(consumer_config, source_cluster);
    let topics: Vec<&str> = job.source.topics.iter().map(String::as_str).collect();
    consumer
        .assign_topics(&topics)
        .await
        .map_err(|e| RuntimeError::client("assigning the source topics", e))?;
    let mut task = Task {
        coord: Coordinator::new(settings, [TASK]),
        store: Arc::new(Mutex::new(store)),
        pipeline,
        resumed: None,
        sink: None,
        consumer,
        sink_topic: job.sink.topic.clone(),
        topics: job.source.topics.clone(),
        start: job.source.start,
        positions: Positions::new(),
        persister: Persister::new(Duration::from_millis(job.settings.checkpoint_timeout_ms)),
        persisted_positions: None,
        group_offsets,
        admin,
        discovery: Discovery::new(job.source.partition_discovery_ms),
        slots: BTreeMap::new(),
        committed: BTreeMap::new(),
        queue: VecDeque::new(),
        input: VecDeque::new(),
        held: VecDeque::new(),
        summary: RunSummary {
            last_checkpoint: record.id,
            ..RunSummary::default()
        },
        metrics,
    };
    task.recover(&record, resumed).await?;
    task.run(stop).await
}

/// Refuses what this version does not run, in one line naming the setting.
fn check_supported(job: &Job) -> Result<(), RuntimeError> {
    if job.settings.parallelism != 1 {
        return Err(RuntimeError::Unsupported(format!(
            "settings.parallelism = {}: this runtime runs one task only; set settings.parallelism = 1",
            job.settings.parallelism
        )));
    }
    Ok(())
}

fn has_window(job: &Job) -> bool {
    job.pipeline
        .iter()
        .any(|op| matches!(op, Operator::WindowAggregate(_)))
}

/// The coordinator's settings from the job file (the commit retry backoff at its default:
/// the sink owns commit retries).
pub(crate) fn checkpoint_settings(job: &Job) -> checkpoint::Settings {
    let s = &job.settings;
    checkpoint::Settings {
        interval_ms: s.checkpoint_interval_ms,
        min_pause_ms: s.checkpoint_min_pause_ms,
        checkpoint_timeout_ms: s.checkpoint_timeout_ms,
        max_consecutive_failures: s.checkpoint_tolerable_failures,
        transaction_timeout_ms: s.transaction_timeout_ms,
        commit_margin_ms: s.checkpoint_commit_margin_ms,
        retention: s.checkpoint_retained,
        restart_allowance_ms: s.restart_allowance_ms,
        ..checkpoint::Settings::default()
    }
}

/// What a checkpoint of this job depends on, as the state store checks it.
pub(crate) fn state_layout(job: &Job) -> Layout {
    let operators = match has_window(job) {
        true => vec![OperatorLayout::new(WINDOW_UID, WINDOW_KIND)],
        false => Vec::new(),
    };
    Layout {
        key_groups: u16::try_from(job.settings.key_groups).unwrap_or(u16::MAX),
        operators,
        sink_prefix: job.sink.transactional_id_prefix.clone(),
        sink_ids: u32::try_from(POOL_SIZE).unwrap_or(u32::MAX) * job.settings.parallelism,
    }
}

pub(crate) fn delivery(g: DeliveryGuarantee) -> Delivery {
    match g {
        DeliveryGuarantee::ExactlyOnce => Delivery::ExactlyOnce,
        DeliveryGuarantee::AtLeastOnce => Delivery::AtLeastOnce,
        DeliveryGuarantee::None => Delivery::None,
    }
}

fn sink_config(config: &RunConfig, delivery: Delivery, s: &checkpoint::Settings) -> SinkConfig {
    let mut producer = config.producer.clone();
    producer.transaction_timeout = Duration::from_millis(s.transaction_timeout_ms);
    let prefix = config
        .job
        .sink
        .transactional_id_prefix
        .clone()
        .unwrap_or_default();
    let mut c = SinkConfig::new(delivery, prefix, TASK.0, producer);
    c.pool_size = POOL_SIZE;
    c.checkpoint_interval = Duration::from_millis(s.interval_ms);
    c.checkpoint_timeout = Duration::from_millis(s.checkpoint_timeout_ms);
    c.restart_allowance = Duration::from_millis(s.restart_allowance_ms);
    c.commit_margin = Duration::from_millis(s.commit_margin_ms);
    c
}

async fn open_store(
    dir: PathBuf,
    layout: Layout,
    options: StoreOptions,
    restore: RestoreFrom,
) -> Result<(StateStore, CheckpointRecord), RuntimeError> {
    tokio::task::spawn_blocking(move || StateStore::open(dir, layout, options, restore))
        .await
        .map_err(|e| RuntimeError::Internal(format!("the state store's thread: {e}")))?
        .map_err(RuntimeError::from)
}

/// Positions as the coordinator keeps them ⇄ as the store writes them.
pub(crate) fn to_store(positions: &Positions) -> Vec<SourcePosition> {
    positions
        .iter()
        .map(|(tp, &next_offset)| SourcePosition {
            topic: tp.topic.clone(),
            partition: tp.partition,
            next_offset,
        })
        .collect()
}

pub(crate) fn from_store(positions: &[SourcePosition]) -> Positions {
    positions
        .iter()
        .map(|p| {
            let tp = checkpoint::TopicPartition {
                topic: p.topic.clone(),
                partition: p.partition,
            };
            (tp, p.next_offset)
        })
        .collect()
}

/// The record as the coordinator's recovery reads it; checkpoint 0 (a fresh start, or a crash
/// before the first checkpoint) is no record.
pub(crate) fn restored(record: &CheckpointRecord) -> Option<Restored<C>> {
    (record.id > 0).then(|| Restored {
        id: CheckpointId(record.id),
        positions: from_store(&record.positions),
        unresolved: record
            .committables
            .iter()
            .map(|c| Listed {
                checkpoint: CheckpointId(record.id),
                committable: c.clone(),
            })
            .collect(),
    })
}

fn checkpoint_tp(tp: &crate::client::TopicPartition) -> checkpoint::TopicPartition {
    checkpoint::TopicPartition {
        topic: tp.topic.clone(),
        partition: tp.partition,
    }
}

fn sink_outcome(o: sink::CommitOutcome) -> CommitOutcome {
    match o {
        sink::CommitOutcome::Committed => CommitOutcome::Completed,
        sink::CommitOutcome::AlreadyCommitted => CommitOutcome::AlreadyCommitted,
        _ => CommitOutcome::NotCommitted("lost, and continue_on_data_loss went on".into()),
    }
}

struct Task {
    coord: Coordinator<C, D>,
    /// Shared with the persister's blocking thread (one write at a time: the coordinator
    /// never decides a second Persist before the first's Persisted).
    store: Arc<Mutex<StateStore>>,
    pipeline: Pipeline,
    /// The sink between its resume and its start: taken at `AbortPool`, once the
    /// resolutions are durable.
    resumed: Option<sink::Resumed>,
    /// The sink, from `AbortPool` on.
    sink: Option<KafkaSink>,
    consumer: Consumer,
    sink_topic: String,
    /// The source topics, in job-file order (a record's input id for the watermark).
    topics: Vec<String>,
    start: StartPosition,
    /// Per partition: the next offset to fetch after the records processed so far.
    positions: Positions,
    /// The checkpoint write under way (one at a time, within checkpoint.timeout.ms).
    persister: Persister,
    /// The positions of the checkpoint being written, for the group once it is durable.
    persisted_positions: Option<(CheckpointId, Positions)>,
    /// Publishes durable positions as the group's offsets (monitoring only).
    group_offsets: GroupOffsets,
    admin: Admin,
    /// When to look for new partitions of `topics`.
    discovery: Discovery,
    /// Transactional id → the checkpoint whose committable it is (for `release`).
    slots: BTreeMap<String, CheckpointId>,
    /// Transactional id → how the sink's commit ended, until reported to the coordinator.
    committed: BTreeMap<String, CommitOutcome>,
    queue: VecDeque<Decision<C, D>>,
    input: VecDeque<ConsumerRecord>,
    /// Outputs the sink handed back (back-pressure), written first once a slot is free.
    held: VecDeque<ProducerRecord>,
    summary: RunSummary,
    metrics: Arc<Metrics>,
}

impl Task {
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

    /// Recovery in the DESIGN order: the sink's `resume` already resolved the restored
    /// committables, so the coordinator is told their outcomes; it then decides
    /// PersistResolutions (fsynced) and only after `ResolutionsPersisted` AbortPool, which
    /// starts the sink (the pool's init). The other order would let a crash after the init
    /// restart with the same committable unresolved, and resuming it then finds its id's epoch
    /// bumped by the init: a committed transaction reported as lost or as a prefix clash.
    async fn recover(
        &mut self,
        record: &CheckpointRecord,
        resumed: sink::Resumed,
    ) -> Result<(), RuntimeError> {
        self.event(Event::Loaded(restored(record)));
        let outcomes = resumed.resumed().to_vec();
        self.resumed = Some(resumed);
        for r in outcomes {
            let found = record
                .committables
                .iter()
                .find(|c| c.transactional_id == r.transactional_id);
            if let Some(c) = found {
                let outcome = CommitOutcome::from_resume(Ok(r.outcome));
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

    async fn apply(&mut self, d: Decision<C, D>) -> Result<(), RuntimeError> {
        match d {
            Decision::InjectBarrier(id) => self.barrier(id).await,
            Decision::Cancel(id) => self.cancel(id),
            Decision::Persist(batch) => self.persist(batch),
            Decision::Completed(id) => self.completed(id),
            Decision::Commit {
                checkpoint,
                committable,
                ..
            } => self.commit(checkpoint, committable).await,
            Decision::MarkResolved { .. } => Ok(()),
            Decision::ReleaseSlot(c) => {
                if let (Some(n), Some(sink)) =
                    (self.slots.remove(&c.transactional_id), self.sink.as_mut())
                {
                    sink.release(n.0);
                }
                Ok(())
            }
            Decision::FailJob(f) => Err(f.into()),
            Decision::RetryCommitAt { committable, .. } => Err(RuntimeError::Internal(format!(
                "the coordinator asked to retry {}, but the sink owns commit retries",
                committable.transactional_id
            ))),
            Decision::Restart { reason } => Err(RuntimeError::Internal(format!(
                "a restart was decided ({reason}); restart the job"
            ))),
            // The sink's resume resolved them already (before the pool's init).
            Decision::Resume(_) => Ok(()),
            Decision::PersistResolutions {
                checkpoint,
                resolved,
            } => self.persist_resolutions(checkpoint, resolved).await,
            // The resolutions are durable now: the sink's start inits the pool and aborts the
            // lingering ids.
            Decision::AbortPool => self.start_sink().await,
            Decision::StartTasks { from, positions } => {
                self.start_tasks(from.is_some(), positions).await
            }
        }
    }

    /// Steps 2 and 3 of the sink's recovery, once the coordinator decided AbortPool (after
    /// the resolutions were persisted).
    async fn start_sink(&mut self) -> Result<(), RuntimeError> {
        let Some(resumed) = self.resumed.take() else {
            return Err(RuntimeError::Internal(
                "AbortPool decided twice: the sink was started already".into(),
            ));
        };
        let (sink, report) = resumed.start().await?;
        tracing::info!(
            lingering = report.lingering_aborted.len(),
            "sink started (pool initialized)"
        );
        self.sink = Some(sink);
        observe::sink(&self.metrics, self.sink.as_ref());
        self.event(Event::PoolAborted);
        Ok(())
    }

    /// The started sink; it exists from AbortPool on, before any barrier or record.
    fn sink(&mut self) -> Result<&mut KafkaSink, RuntimeError> {
        self.sink.as_mut().ok_or_else(|| {
            RuntimeError::Internal("the sink was used before the recovery started it".into())
        })
    }

    async fn barrier(&mut self, id: CheckpointId) -> Result<(), RuntimeError> {
        self.metrics.barrier_injected(id.0);
        let delta = match self.pipeline.state_mut() {
            Some(state) => Some(vec![state.snapshot(id.0)?]),
            None => None,
        };
        let committable = self.sink()?.on_barrier(id.0).await?;
        let committables = committable.map(|c| vec![c.transaction]).unwrap_or_default();
        for c in &committables {
            self.slots.insert(c.transactional_id.clone(), id);
        }
        let positions = self.positions.clone();
        self.event(Event::Ack {
            id,
            task: TASK,
            delta,
            positions,
            committables,
        });
        Ok(())
    }

    fn cancel(&mut self, id: CheckpointId) -> Result<(), RuntimeError> {
        self.metrics.checkpoint_failed();
        if let Some(state) = self.pipeline.state_mut() {
            if state.in_flight() == Some(id.0) {
                // Its changes go back under the active buffer, into the next snapshot.
                state.cancel(id.0)?;
            }
        }
        Ok(())
    }

    fn persist(&mut self, batch: checkpoint::Batch<C, D>) -> Result<(), RuntimeError> {
        let id = batch.id;
        self.metrics.barriers_aligned(id.0);
        // A cancelled checkpoint's delta went back into the operator (cancel), so its changes
        // are in this checkpoint's delta already.
        let deltas: Vec<FrozenDelta> = batch
            .deltas
            .into_iter()
            .filter(|d| d.checkpoint == id)
            .flat_map(|d| d.delta)
            .collect();
        self.persisted_positions = Some((id, batch.positions.clone()));
        let positions = to_store(&batch.positions);
        let committables: Vec<C> = batch
            .unresolved
            .into_iter()
            .map(|l| l.committable)
            .collect();
        let store = self.store.clone();
        let metrics = self.metrics.clone();
        self.persister.start(id, move || {
            let mut store = store.lock().map_err(|e| e.to_string())?;
            let written = store.persist(id.0, &deltas, positions, committables);
            observe::persisted(&metrics, written)
        })
    }

    /// Feeds the persister's answer once it has one (a write past checkpoint.timeout.ms is
    /// a PersistFailed, which fails the job).
    async fn check_persist(&mut self) -> Result<(), RuntimeError> {
        let Some(answer) = self.persister.poll().await else {
            return Ok(());
        };
        match answer {
            Ok(id) => {
                if self.slots.values().any(|&c| c == id) {
                    hook::reached(hook::Point::CheckpointPersisted, id.0).await;
                }
                self.event(Event::Persisted(id))
            }
            Err(reason) => self.event(Event::PersistFailed { reason }),
        }
        self.drain().await
    }

    fn completed(&mut self, id: CheckpointId) -> Result<(), RuntimeError> {
        self.summary.last_checkpoint = id.0;
        if let Some((n, positions)) = self.persisted_positions.take() {
            if n == id {
                self.group_offsets.checkpoint_completed(id, positions);
            }
        }
        if let Some(state) = self.pipeline.state_mut() {
            if state.in_flight() == Some(id.0) {
                state.complete(id.0)?;
            }
        }
        let t = self.metrics.checkpoint_completed(id.0);
        tracing::info!(
            checkpoint = id.0,
            duration_ms = t.duration.as_millis() as u64,
            size_bytes = t.size_bytes,
            "checkpoint durable"
        );
        Ok(())
    }

    /// The sink commits every prepared transaction of checkpoints ≤ N (and owns the retries);
    /// the coordinator hears how each ended.
    async fn commit(&mut self, n: CheckpointId, committable: C) -> Result<(), RuntimeError> {
        for done in self.sink()?.on_checkpoint_durable(n.0).await? {
            self.committed
                .insert(done.transactional_id, sink_outcome(done.outcome));
        }
        observe::sink(&self.metrics, self.sink.as_ref());
        let outcome = match self.committed.remove(&committable.transactional_id) {
            Some(o) => o,
            None if committable.empty => CommitOutcome::NothingToCommit,
            None => {
                return Err(RuntimeError::Internal(format!(
                    "the sink did not commit {} of checkpoint {n}",
                    committable.transactional_id
                )))
            }
        };
        self.event(Event::CommitResult {
            committable,
            outcome,
        });
        Ok(())
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
                .filter(|c| {
                    !resolved
                        .iter()
                        .any(|r| r.transactional_id == c.transactional_id)
                })
                .collect();
            store.update_committables(n.0, left)?;
            Ok::<(), RuntimeError>(())
        });
        // Bounded like a checkpoint's write (see `persist`): past the timeout the coordinator
        // fails the job; the write's thread keeps the store's lock, so no second writer runs.
        let Ok(joined) = tokio::time::timeout(self.persister.timeout(), write).await else {
            let reason = format!(
                "the recovered resolutions' write did not finish within checkpoint.timeout.ms = {} ms",
                self.persister.timeout().as_millis()
            );
            // The coordinator's FailJob is next in the queue being drained.
            self.event(Event::PersistFailed { reason });
            return Ok(());
        };
        joined.map_err(|e| RuntimeError::Internal(format!("the state store's thread: {e}")))??;
        self.event(Event::ResolutionsPersisted);
        Ok(())
    }

    /// Seeks every assigned partition and records its position at once, so every checkpoint
    /// lists every partition (see `source`).
    async fn start_tasks(
        &mut self,
        from_checkpoint: bool,
        restored: Positions,
    ) -> Result<(), RuntimeError> {
        let starts = self
            .consumer
            .assignment()
            .into_iter()
            .map(|tp| {
                let at = restored.get(&checkpoint_tp(&tp)).copied();
                let offset = source::start_offset(at, from_checkpoint, self.start);
                (tp, offset)
            })
            .collect();
        self.seek_all(source::resolve(&self.admin, starts).await?)?;
        tracing::info!(positions = ?self.positions, "source positioned");
        self.event(Event::TasksStarted);
        Ok(())
    }

    fn seek_all(
        &mut self,
        offsets: BTreeMap<crate::client::TopicPartition, i64>,
    ) -> Result<(), RuntimeError> {
        for (tp, o) in offsets {
            self.consumer
                .seek(&tp, Offset::At(o))
                .map_err(|e| RuntimeError::client(format!("seeking {tp}"), e))?;
            // The window's watermark waits for every partition read (a new one included).
            let input = self.input_of(&tp.topic, tp.partition);
            self.pipeline.add_inputs([input]);
            self.positions.insert(checkpoint_tp(&tp), o);
        }
        Ok(())
    }

    /// Partition discovery, when due (see `source`): the new partitions' positions join the
    /// next checkpoint.
    async fn discover(&mut self) -> Result<(), RuntimeError> {
        if self.discovery.due() {
            let found = source::discover(&self.admin, &mut self.consumer, &self.topics).await?;
            self.seek_all(found)?;
        }
        Ok(())
    }

    async fn run(mut self, mut stop: watch::Receiver<bool>) -> Result<RunSummary, RuntimeError> {
        loop {
            if *stop.borrow_and_update() {
                return self.finish().await;
            }
            self.check_persist().await?;
            if !self.held.is_empty() {
                self.write_held().await?;
                if !self.held.is_empty() {
                    self.wait_for_release().await?;
                    continue;
                }
            }
            self.event(Event::Tick);
            self.drain().await?;
            self.discover().await?;
            match self.input.pop_front() {
                Some(record) => self.process(record).await?,
                None => {
                    let polled = self
                        .consumer
                        .poll(POLL)
                        .await
                        .map_err(|e| RuntimeError::client("polling the source", e))?;
                    self.input.extend(polled);
                    observe::polled(
                        &self.metrics,
                        &self.consumer,
                        &self.positions,
                        self.sink.as_ref(),
                    );
                }
            }
        }
    }

    /// One record through the operators into the sink; its position counts once its outputs
    /// are handed to the sink (or held, which stops barriers until they are written).
    async fn process(&mut self, record: ConsumerRecord) -> Result<(), RuntimeError> {
        self.summary.records_in += 1;
        self.metrics.record_in();
        let tp = checkpoint::TopicPartition {
            topic: record.topic.clone(),
            partition: record.partition,
        };
        self.positions.insert(tp, record.offset + 1);
        let Some(value) = record.value.as_ref() else {
            return Ok(());
        };
        let key = record.key.as_ref().map(|k| k.to_vec());
        let input = self.input_of(&record.topic, record.partition);
        for out in self.pipeline.process(input, key, value)? {
            // A late record goes to window.late_topic, in the same transaction.
            let topic = out.topic.unwrap_or_else(|| self.sink_topic.clone());
            let mut r = ProducerRecord::new(topic, out.value);
            if let Some(k) = out.key {
                r = r.with_key(k);
            }
            self.held.push_back(r);
        }
        self.write_held().await
    }

    fn input_of(&self, topic: &str, partition: i32) -> u32 {
        let index = self.topics.iter().position(|t| t == topic).unwrap_or(0);
        input_id(index, partition)
    }

    async fn write_held(&mut self) -> Result<(), RuntimeError> {
        while let Some(r) = self.held.pop_front() {
            match self.sink()?.write(r).await? {
                Written::Sent => {
                    self.summary.records_out += 1;
                    self.metrics.record_out();
                }
                Written::Backpressure { record, reason } => {
                    tracing::debug!(reason, "sink back-pressure");
                    self.held.push_front(*record);
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Back-pressure: no barrier may pass while outputs are held (they belong before it), so
    /// only a checkpoint already under way can free a slot.
    async fn wait_for_release(&mut self) -> Result<(), RuntimeError> {
        let under_way = self.persister.is_busy()
            || matches!(
                self.coord.phase(),
                Phase::InFlight { .. } | Phase::Persisting { .. }
            );
        if !under_way {
            return Err(RuntimeError::Unsupported(
                "every transactional id of the sink's pool is busy and no checkpoint is under way to free one; restart the job".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(())
    }

    /// Stop: let the checkpoint under way finish (and commit) if it does so quickly.
    async fn finish(mut self) -> Result<RunSummary, RuntimeError> {
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        while self.persister.is_busy() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
            self.check_persist().await?;
        }
        self.group_offsets.flush().await;
        tracing::info!(summary = ?self.summary, "stopped");
        Ok(self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_files_checkpoint_settings_reach_the_coordinator_and_the_budget() {
        let text = |extra: &str| {
            format!(
                "name = \"x\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"in\"]\n\
                 [sink]\ntopic = \"o\"\ntransactional.id.prefix = \"x\"\n[settings]\n{extra}"
            )
        };
        let job = Job::parse(
            "j.toml",
            &text(
                "checkpoint.min.pause.ms = 7\ncheckpoint.tolerable.failures = 1\n\
                 checkpoint.commit.margin.ms = 8\ncheckpoint.retained = 4\nrestart.allowance.ms = 9\n",
            ),
        )
        .unwrap();
        let s = checkpoint_settings(&job);
        assert_eq!(
            (
                s.min_pause_ms,
                s.max_consecutive_failures,
                s.commit_margin_ms,
                s.retention,
                s.restart_allowance_ms
            ),
            (7, 1, 8, 4, 9)
        );
        // Defaults fit a 15 min broker maximum; 9 tolerated failures need 10 · 31 s + 70 s.
        let broker_max = 900_000;
        let fits = Job::parse("j.toml", &text("")).unwrap();
        assert_eq!(
            checkpoint::check_budget(&checkpoint_settings(&fits), broker_max),
            Ok(())
        );
        let job = Job::parse("j.toml", &text("checkpoint.tolerable.failures = 9\n")).unwrap();
        assert_eq!(
            checkpoint::check_budget(&checkpoint_settings(&job), broker_max),
            Err(checkpoint::BudgetError::TooShort {
                transaction_timeout_ms: 300_000,
                required_ms: 380_000,
            })
        );
    }

    #[test]
    fn positions_survive_the_store_and_back() {
        let mut p = Positions::new();
        p.insert(
            checkpoint::TopicPartition {
                topic: "a".into(),
                partition: 2,
            },
            41,
        );
        assert_eq!(from_store(&to_store(&p)), p);
    }

    #[test]
    fn checkpoint_zero_restores_nothing() {
        let record = CheckpointRecord {
            id: 0,
            generation: 1,
            layout: Layout {
                key_groups: 1,
                operators: Vec::new(),
                sink_prefix: None,
                sink_ids: 0,
            },
            positions: Vec::new(),
            committables: Vec::new(),
        };
        assert!(restored(&record).is_none());
        let r = restored(&CheckpointRecord { id: 3, ..record }).unwrap();
        assert_eq!(r.id, CheckpointId(3));
    }
}
