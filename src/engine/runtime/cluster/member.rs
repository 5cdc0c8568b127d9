//! One membership of a process in the job's group: its transactional producer, its tasks, and
//! the loop that reads, processes and commits (module docs of `cluster`).
//!
//! **A commit's life.** Every `checkpoint.interval.ms` (and before giving tasks up in a
//! rebalance, and at a stop) the worker, holding its lock so no record is processed meanwhile:
//! 1. sends each source task's watermark marker to every repartition partition (when it
//!    changed, or a second passed: a keyed task's new owner needs every input's marker; in a
//!    rebalance callback, the watermarks that moved);
//! 2. freezes each keyed task's state changes (`OperatorState::snapshot`) and sends them to
//!    the task's changelog partition;
//! 3. adds the next offsets of every partition it processed to the transaction
//!    (TxnOffsetCommit with the member's generation and member id: KIP-447);
//! 4. commits the transaction: output, repartition records, markers, changelog and offsets
//!    become visible together, or (abort, fencing, a crash) none of them;
//! 5. then, and only then, writes the frozen changes to its local fjall store in one batch,
//!    with the changelog offsets they bring the local copy to. A crash between 4 and 5 leaves
//!    the local copy behind the changelog, which a restore reads forward; it is never ahead.
//!
//! Any failure of 2–4 (the transaction aborts, the group moved on, the producer was fenced)
//! gives the membership up: the worker and its in-memory state are dropped, the process joins
//! again with a new producer incarnation, and each task it gets restarts from the committed
//! offsets and the changelog.
//!
//! **The race of a pause and a rebalance (a zombie).** Member A is paused (SIGSTOP, a long GC)
//! in the middle of an interval, with output of its open transaction already sent. Its session
//! times out; the group gives A's tasks to B, which reads their committed offsets — with
//! RequireStable, so if A had already added offsets to its transaction, B waits until that
//! transaction ends — and restores their state from the changelog, waiting likewise for A's
//! transaction on it to end. B processes the records A had processed in its open transaction.
//! A resumes and tries to commit: its TxnOffsetCommit carries the generation A joined in, which
//! the coordinator has moved past, so it is refused (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID),
//! A aborts, and nothing A wrote after its last commit is ever read (the inverse test switches
//! the generation off — `ONCEFLOW_TEST_SKIP=fencing` — and sees duplicates). If A stayed paused
//! past `transaction.timeout.ms`, the broker aborted its transaction already and bumped its
//! epoch: A's next request is fenced.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::{watch, Mutex};
use tracing::{debug, info, warn};

use crate::client::group::{
    GroupConsumer, GroupMetadata, GroupMetadataHandle, RebalanceListener, Strategy,
};
use crate::client::{
    Admin, AutoOffsetReset, Consumer, ConsumerRecord, DeliveryFuture, IsolationLevel, Producer,
    ProducerRecord, TopicPartition,
};
use crate::engine::state::{
    key_group, ChangelogCopy, FrozenDelta, RecordPositions, SourcePosition, StateStore,
};
use crate::engine::time::{InputWatermarks, Watermark};

use super::super::bad_record;
use super::super::hook;
use super::super::idle::{IdleTimer, IDLE_AFTER};
use super::super::topology::Output;
use super::super::topology::{Emitted, InputRecord, KeyedStage, SourceChain};
use super::super::RuntimeError;
use super::changelog;
use super::exchange::{input_id, key_groups_of, task_of, Marker};
use super::Plan;
use crate::engine::clock::now_ms;

/// Why a membership ended.
#[derive(Debug)]
pub(super) enum Exit {
    /// Give the membership up and join again (fenced, lost, an aborted transaction).
    Rejoin(String),
    /// Stop the job.
    Fatal(Box<RuntimeError>),
}

impl Exit {
    pub(super) fn fatal(e: RuntimeError) -> Exit {
        Exit::Fatal(Box::new(e))
    }
}

impl From<RuntimeError> for Exit {
    fn from(e: RuntimeError) -> Exit {
        Exit::fatal(e)
    }
}

impl From<crate::engine::state::StateError> for Exit {
    fn from(e: crate::engine::state::StateError) -> Exit {
        Exit::fatal(e.into())
    }
}

/// Whether `group` is a membership the coordinator can fence: a member id and a generation.
/// After the group dropped the member, the heartbeat resets both (-1, ""), which is what a
/// group without members sends and what the coordinator accepts from anyone.
fn membership(group: &GroupMetadata) -> Result<(), String> {
    if group.generation_id < 0 || group.member_id.is_empty() {
        return Err(format!(
            "the group dropped this member (generation {}, member id {:?}): its tasks may belong to another member now",
            group.generation_id, group.member_id
        ));
    }
    Ok(())
}

fn rejoin(what: &str, e: impl std::fmt::Display) -> Exit {
    Exit::Rejoin(format!("{what}: {e}"))
}

/// What one membership did, for the run's summary.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counts {
    pub records_in: u64,
    pub records_out: u64,
    pub commits: u64,
}

/// Runs one membership until `stop` (Ok) or an [`Exit`].
pub(super) async fn run(
    plan: &Plan,
    store: &Arc<StdMutex<StateStore>>,
    counts: &mut Counts,
    mut stop: watch::Receiver<bool>,
) -> Result<(), Exit> {
    let producer = start_producer(plan).await?;
    let mut group = group_consumer(plan)?;
    let meta = group.metadata_handle();
    let (through, copy) = changelog_copy(store, plan)?;
    let worker = Arc::new(Mutex::new(Worker {
        plan: plan.clone(),
        store: store.clone(),
        producer,
        sources: BTreeMap::new(),
        keyed: BTreeMap::new(),
        positions: BTreeMap::new(),
        moved: false,
        idle: IdleTimer::default(),
        in_txn: false,
        through,
        copy,
        failure: None,
        counts: Counts::default(),
        fencing: !hook::skipped(hook::Protection::Fencing),
    }));
    group.set_listener(Arc::new(Listener {
        worker: worker.clone(),
        meta: meta.clone(),
    }));
    info!(group = %plan.group, transactional_id = %plan.transactional_id, "member joining");
    let final_commit = !hook::skipped(hook::Protection::FinalCheckpoint);
    let mut last_commit = Instant::now();
    let wait = plan.interval.min(Duration::from_millis(100));
    let result = loop {
        let stopping = *stop.borrow_and_update();
        if stopping {
            let mut w = worker.lock().await;
            if final_commit {
                let r = w.commit(&meta.get(), Some(group.consumer())).await;
                break r;
            }
            // The inverse test's member: it commits no more and leaves as soon as it holds
            // an open transaction, without leaving the group.
            if w.in_txn {
                *counts = w.counts;
                return Ok(());
            }
        }
        let records = match group.poll(wait).await {
            Ok(r) => r,
            Err(e) => break Err(rejoin("polling the group", e)),
        };
        let mut w = worker.lock().await;
        if let Some(exit) = w.failure.take() {
            break Err(exit);
        }
        if let Err(e) = w.process(records).await {
            break Err(e);
        }
        if let Err(e) = w.fire_processing_timers().await {
            break Err(e);
        }
        if !stopping && last_commit.elapsed() >= plan.interval {
            last_commit = Instant::now();
            if let Err(e) = w.commit(&meta.get(), Some(group.consumer())).await {
                break Err(e);
            }
        }
    };
    leave(
        group,
        &worker,
        result.is_err(),
        plan.transaction_timeout,
        counts,
    )
    .await;
    result
}

/// Leaves the group (a dynamic member's tasks move at once instead of after
/// session.timeout.ms); on_revoked commits what is left, unless the membership `failed`: then
/// the worker is poisoned first and commits nothing more. `counts` gets what it did.
async fn leave(
    group: GroupConsumer,
    worker: &Arc<Mutex<Worker>>,
    failed: bool,
    timeout: Duration,
    counts: &mut Counts,
) {
    {
        let mut w = worker.lock().await;
        if failed {
            w.poison().await;
        }
        *counts = w.counts;
    }
    match tokio::time::timeout(timeout, group.close()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(error = %e, "leaving the group"),
        Err(_) => debug!("leaving the group timed out"),
    }
    *counts = worker.lock().await.counts;
}

/// The membership's transactional producer, its id's previous incarnation fenced and what
/// it left open aborted.
async fn start_producer(plan: &Plan) -> Result<Producer, Exit> {
    let mut pc = plan.producer.clone();
    pc.transactional_id = Some(plan.transactional_id.clone());
    pc.transaction_timeout = plan.transaction_timeout;
    let producer = Producer::with_cluster(pc, plan.cluster.clone())
        .await
        .map_err(|e| rejoin("starting the producer", e))?;
    producer
        .init_transactions()
        .await
        .map_err(|e| rejoin("InitProducerId", e))?;
    Ok(producer)
}

/// The job's group consumer (read_committed, no automatic commits, cooperative-sticky),
/// subscribed to the sources and, for a keyed job, the repartition topic.
fn group_consumer(plan: &Plan) -> Result<GroupConsumer, Exit> {
    let mut cc = plan.consumer.clone();
    cc.group_id = Some(plan.group.clone());
    cc.isolation_level = IsolationLevel::ReadCommitted;
    cc.enable_auto_commit = false;
    cc.auto_offset_reset = AutoOffsetReset::Earliest;
    let mut group = GroupConsumer::with_cluster(cc, plan.cluster.clone())
        .map_err(|e| Exit::fatal(RuntimeError::client("joining the job's group", e)))?;
    group.set_strategies(&[Strategy::CooperativeSticky]);
    let mut topics: Vec<&str> = plan.job.source.topics.iter().map(String::as_str).collect();
    if plan.keyed {
        topics.push(&plan.topics.repartition);
    }
    group.subscribe(&topics);
    Ok(group)
}

/// The local copy's changelog offsets and what else it knows of them (`ChangelogCopy`), from
/// the latest local checkpoint record. A copy of another topic id (the changelog was deleted
/// and created again) knows nothing of this one: its partitions count as never copied.
fn changelog_copy(
    store: &Arc<StdMutex<StateStore>>,
    plan: &Plan,
) -> Result<(BTreeMap<i32, i64>, ChangelogCopy), Exit> {
    let s = store
        .lock()
        .map_err(|_| Exit::fatal(RuntimeError::Internal("the state store's lock".into())))?;
    let fresh = ChangelogCopy {
        topic_id: plan.changelog_id.clone(),
        current_at_ms: BTreeMap::new(),
    };
    let latest = s.latest();
    if latest == 0 {
        return Ok((BTreeMap::new(), fresh));
    }
    let record = s.record(latest)?;
    let through = record
        .positions
        .iter()
        .filter(|p| p.topic == plan.topics.changelog)
        .map(|p| (p.partition, p.next_offset))
        .collect();
    let copy = record
        .changelog
        .filter(|c| c.topic_id == plan.changelog_id)
        .unwrap_or(fresh);
    Ok((through, copy))
}

/// Partitions as a log line names them: `topic-partition`, comma-separated.
fn names(partitions: &[TopicPartition]) -> String {
    partitions
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A source partition's task: the stateless chain and the partition's watermark.
struct SourceTask {
    chain: Box<dyn SourceChain>,
    input: u32,
    watermark: Watermark,
    /// The marker last sent, and when.
    sent: Option<(Marker, Instant)>,
}

/// A repartition partition's task: the keyed stage on its key groups' state.
struct KeyedTask {
    stage: Box<dyn KeyedStage>,
    inputs: InputWatermarks,
}

struct Worker {
    plan: Plan,
    store: Arc<StdMutex<StateStore>>,
    producer: Producer,
    sources: BTreeMap<TopicPartition, SourceTask>,
    keyed: BTreeMap<i32, KeyedTask>,
    /// The next offset of every owned partition processed so far.
    positions: BTreeMap<TopicPartition, i64>,
    /// Whether positions moved since the last commit.
    moved: bool,
    /// Since when each caught-up source partition has had no record.
    idle: IdleTimer,
    in_txn: bool,
    /// Changelog partition → the offset the local store is current to.
    through: BTreeMap<i32, i64>,
    /// When each partition's local copy was last current, and of which topic id.
    copy: ChangelogCopy,
    /// Set by a callback that cannot return it (lost partitions, a failed commit).
    failure: Option<Exit>,
    counts: Counts,
    /// False only in the inverse test (`ONCEFLOW_TEST_SKIP=fencing`): offsets go into
    /// transactions without the generation, and lost tasks' work is committed, not aborted.
    fencing: bool,
}

impl Worker {
    async fn send(&mut self, record: ProducerRecord) -> Result<DeliveryFuture, Exit> {
        if !self.in_txn {
            self.producer
                .begin_transaction()
                .map_err(|e| rejoin("beginning a transaction", e))?;
            self.in_txn = true;
        }
        self.producer
            .send(record)
            .await
            .map_err(|e| rejoin("sending", e))
    }

    async fn send_outputs(&mut self, outputs: Vec<Output>) -> Result<(), Exit> {
        let encoder = self.plan.topology.sink_encoder();
        for mut o in outputs {
            if let (None, Some(encoder)) = (&o.topic, &encoder) {
                let topic = &self.plan.job.sink.topic;
                o.value = encoder.encode(topic, &o.value).await.map_err(Exit::fatal)?;
            }
            let r = o.into_record(&self.plan.job.sink.topic);
            self.send(r).await?;
            self.counts.records_out += 1;
            self.plan.metrics.record_out();
        }
        Ok(())
    }

    async fn process(&mut self, records: Vec<ConsumerRecord>) -> Result<(), Exit> {
        for r in records {
            self.counts.records_in += 1;
            self.plan.metrics.record_in();
            let owned = if self.plan.keyed && r.topic == self.plan.topics.repartition {
                self.keyed_record(&r).await?
            } else {
                self.source_record(&r).await?
            };
            // A record of a partition without a task (its assignment failed: the worker is
            // failing) is not processed, so its offset must not be committed.
            if owned {
                self.positions
                    .insert(TopicPartition::new(r.topic, r.partition), r.offset + 1);
                self.moved = true;
            }
        }
        Ok(())
    }

    async fn source_record(&mut self, r: &ConsumerRecord) -> Result<bool, Exit> {
        let tp = TopicPartition::new(r.topic.clone(), r.partition);
        let Some(task) = self.sources.get_mut(&tp) else {
            return Ok(false);
        };
        let input = InputRecord {
            topic: &r.topic,
            partition: r.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.as_ref(),
            value: r.value.as_ref(),
        };
        if let Some(prepared) = task.chain.prepare(&input) {
            prepared.await.map_err(Exit::fatal)?;
        }
        let mut out = Vec::new();
        if let Some(t) = task.chain.process(&input, &mut out) {
            task.watermark.observe(t);
        }
        self.idle.active(&tp);
        for e in out {
            match e {
                Emitted::Out(o) => self.send_outputs(vec![o]).await?,
                Emitted::Bad { reason } => {
                    let tolerance = &self.plan.job.settings.errors;
                    let dead_letter =
                        bad_record::settle(tolerance, &input, &reason, &self.plan.metrics)
                            .map_err(Exit::fatal)?;
                    if let Some(o) = dead_letter {
                        self.send_outputs(vec![o]).await?;
                    }
                }
                Emitted::Keyed { key, time, element } => {
                    let bytes = self.plan.topology.encode_element(&element).ok_or_else(|| {
                        Exit::fatal(RuntimeError::Unsupported(
                            "this job's keyed elements cannot cross processes: run it with mode = \"local\"".into(),
                        ))
                    })?;
                    let kg = key_group(&key, self.plan.key_groups);
                    let task = task_of(kg, self.plan.key_groups, self.plan.tasks);
                    let rec = ProducerRecord::new(self.plan.topics.repartition.clone(), bytes)
                        .with_key(key)
                        .with_partition(task)
                        .with_timestamp(time);
                    self.send(rec).await?;
                }
            }
        }
        Ok(true)
    }

    /// Fires the keyed tasks' processing-time timers the wall clock has reached (looked at
    /// after every poll, so at most the poll's wait late).
    async fn fire_processing_timers(&mut self) -> Result<(), Exit> {
        let now = i64::try_from(crate::engine::clock::now_ms()).unwrap_or(i64::MAX);
        let due: Vec<i32> = self
            .keyed
            .iter()
            .filter(|(_, t)| t.stage.next_processing_timer().is_some_and(|at| at <= now))
            .map(|(p, _)| *p)
            .collect();
        for p in due {
            let mut out = Vec::new();
            if let Some(task) = self.keyed.get_mut(&p) {
                task.stage.on_processing_time(now, &mut out)?;
            }
            self.send_outputs(out).await?;
        }
        Ok(())
    }

    async fn keyed_record(&mut self, r: &ConsumerRecord) -> Result<bool, Exit> {
        if !self.keyed.contains_key(&r.partition) {
            return Ok(false);
        }
        hook::reached(hook::Point::KeyedRecord, 0, None).await;
        let Some(task) = self.keyed.get_mut(&r.partition) else {
            return Ok(false);
        };
        let mut out = Vec::new();
        match Marker::of(&r.headers) {
            Some(marker) => {
                let marker = marker.map_err(|e| {
                    Exit::fatal(RuntimeError::Unsupported(format!(
                        "{}-{} offset {}: {e}: is another program writing this job's repartition topic?",
                        r.topic, r.partition, r.offset
                    )))
                })?;
                let now = Instant::now();
                let w = match marker {
                    Marker::At { input, watermark } => task.inputs.advance(input, watermark, now),
                    Marker::Idle { input } => task.inputs.set_idle(input, now),
                };
                if let Some(w) = w {
                    task.stage.advance_to(w, &mut out)?;
                }
            }
            None => {
                let value = r.value.as_deref().unwrap_or_default();
                let element = self.plan.topology.decode_element(value)?;
                let key = r.key.as_deref().unwrap_or_default();
                task.stage.process(key, r.timestamp, element, &mut out)?;
            }
        }
        self.send_outputs(out).await?;
        // A watermark that closes many windows fires them a chunk at a time.
        while let Some(task) = self.keyed.get_mut(&r.partition) {
            if !task.stage.firing() {
                break;
            }
            let mut out = Vec::new();
            task.stage.fire_more(&mut out)?;
            self.send_outputs(out).await?;
        }
        Ok(true)
    }

    /// The commit of the module docs; `consumer` (absent inside a rebalance callback) tells
    /// which source partitions are caught up, for idleness.
    async fn commit(
        &mut self,
        group: &GroupMetadata,
        consumer: Option<&Consumer>,
    ) -> Result<(), Exit> {
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        // The group may have dropped this member already (a pause past its session): the
        // heartbeat then resets the member id and generation, and offsets sent with those
        // (-1, "") are the unfenced kind the coordinator accepts from anyone. Never commit so.
        if self.fencing {
            membership(group).map_err(Exit::Rejoin)?;
        }
        // 1. Markers. From the main loop every due one (it knows which partitions are caught
        //    up, and adds every owned partition's offset, so a transaction of markers is
        //    fenced too). From a rebalance callback the watermarks that moved since they were
        //    last sent: the offsets this commit adds go past the records that moved them, and a
        //    partition's next owner starts after those records with no watermark of its own —
        //    at the end of the input it would never report one, and the windows the moved
        //    watermark closes would never fire.
        if self.plan.keyed {
            let markers = match consumer {
                Some(c) => self.due_markers(c),
                None if hook::skipped(hook::Protection::RevokeMarkers) => Vec::new(),
                None => self.moved_markers(),
            };
            for marker in markers {
                for task in 0..i32::from(self.plan.tasks) {
                    let mut rec =
                        ProducerRecord::new(self.plan.topics.repartition.clone(), Bytes::new())
                            .with_partition(task);
                    if let Some(t) = marker.timestamp(i64::try_from(now_ms()).unwrap_or(i64::MAX)) {
                        rec = rec.with_timestamp(t);
                    }
                    rec.headers.push(marker.header());
                    self.send(rec).await?;
                }
            }
        }
        // 2. State changes.
        let n = self.store_lock()?.latest() + 1;
        let (deltas, last) = self.send_changes(n).await?;
        // 3. and 4. Offsets and the commit.
        if self.in_txn || self.moved {
            let offsets = self.offsets(consumer);
            self.end_transaction(group, &offsets).await?;
        }
        // 5. The local copy.
        let mut changed = false;
        for (r, fut) in last {
            let md = fut
                .await
                .map_err(|e| rejoin("a changelog record of a committed transaction", e))?;
            self.through.insert(r, md.offset + 1);
            changed = true;
        }
        let deltas: Vec<FrozenDelta> =
            FrozenDelta::merge(deltas.into_iter().filter(|d| !d.is_empty()));
        if changed || !deltas.is_empty() {
            // Committed: the copy of every owned task's changelog is current (this member is
            // its only writer).
            let now = now_ms();
            for r in self.keyed.keys() {
                self.copy.current_at_ms.insert(*r, now);
            }
            self.persist(n, deltas).await?;
        }
        for task in self.keyed.values_mut() {
            task.stage.state_mut().complete(n)?;
        }
        Ok(())
    }

    /// The watermarks of source tasks that moved since their last marker, as markers (a
    /// rebalance callback's commit: no idleness is judged there).
    fn moved_markers(&mut self) -> Vec<Marker> {
        let now = Instant::now();
        let mut due = Vec::new();
        for task in self.sources.values_mut() {
            let Some(w) = task.watermark.current() else {
                continue;
            };
            let marker = Marker::At {
                input: task.input,
                watermark: w,
            };
            if task.sent.is_none_or(|(m, _)| m != marker) {
                task.sent = Some((marker, now));
                due.push(marker);
            }
        }
        due
    }

    /// The source tasks' markers to send now: a changed one, or an unchanged one a second
    /// after it was last sent (a keyed task's new owner needs every input's marker).
    fn due_markers(&mut self, consumer: &Consumer) -> Vec<Marker> {
        let now = Instant::now();
        let mut due = Vec::new();
        for (tp, task) in &mut self.sources {
            // The local runtime's rule: idle once caught up, with no record, for IDLE_AFTER.
            let idle = if consumer.caught_up(tp) {
                self.idle.caught_up(tp, now, IDLE_AFTER)
            } else {
                self.idle.active(tp);
                false
            };
            let marker = if idle {
                Some(Marker::Idle { input: task.input })
            } else {
                task.watermark.current().map(|w| Marker::At {
                    input: task.input,
                    watermark: w,
                })
            };
            let Some(marker) = marker else { continue };
            let fresh = task
                .sent
                .is_some_and(|(m, at)| m == marker && now.duration_since(at) < IDLE_AFTER);
            if !fresh {
                task.sent = Some((marker, now));
                due.push(marker);
            }
        }
        due
    }

    /// Freezes every keyed task's changes as local checkpoint `n` and sends them to its
    /// changelog partition; returns the deltas and, per task, its last record's delivery.
    async fn send_changes(
        &mut self,
        n: u64,
    ) -> Result<(Vec<FrozenDelta>, BTreeMap<i32, DeliveryFuture>), Exit> {
        let mut deltas = Vec::new();
        let mut last = BTreeMap::new();
        let tasks: Vec<i32> = self.keyed.keys().copied().collect();
        for r in tasks {
            let Some(task) = self.keyed.get_mut(&r) else {
                continue;
            };
            let delta = task.stage.snapshot(n)?;
            for (k, v) in delta.entries().iter() {
                let rec = changelog::record(&self.plan.topics.changelog, r, k, v.as_deref());
                last.insert(r, self.send(rec).await?);
            }
            deltas.push(delta);
        }
        Ok((deltas, last))
    }

    /// The next offset of every processed partition and, from the main loop, the position
    /// of every other owned one (so that every transaction names offsets to fence it by).
    fn offsets(&self, consumer: Option<&Consumer>) -> Vec<(TopicPartition, i64)> {
        let mut offsets = self.positions.clone();
        if let Some(c) = consumer {
            let repartition = &self.plan.topics.repartition;
            let owned = self.sources.keys().cloned().chain(
                self.keyed
                    .keys()
                    .map(|r| TopicPartition::new(repartition.clone(), *r)),
            );
            for tp in owned {
                if let (false, Some(p)) = (offsets.contains_key(&tp), c.position(&tp)) {
                    offsets.insert(tp, p);
                }
            }
        }
        offsets.into_iter().collect()
    }

    /// Adds `offsets` with the member's generation (KIP-447) and commits.
    async fn end_transaction(
        &mut self,
        group: &GroupMetadata,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<(), Exit> {
        if offsets.is_empty() && self.fencing {
            // Nothing the coordinator could fence: abort rather than commit unchecked.
            return Err(Exit::Rejoin(
                "a transaction without offsets to fence it".into(),
            ));
        }
        if !self.in_txn {
            self.producer
                .begin_transaction()
                .map_err(|e| rejoin("beginning a transaction", e))?;
            self.in_txn = true;
        }
        let group = if self.fencing {
            group.clone()
        } else {
            GroupMetadata::new(group.group_id.clone())
        };
        if !offsets.is_empty() {
            self.producer
                .send_offsets_to_transaction(offsets, &group)
                .await
                .map_err(|e| rejoin("adding the offsets to the transaction", e))?;
        }
        self.producer
            .commit_transaction()
            .await
            .map_err(|e| rejoin("committing the transaction", e))?;
        self.in_txn = false;
        self.moved = false;
        self.counts.commits += 1;
        debug!(
            offsets = %offsets
                .iter()
                .map(|(tp, o)| format!("{tp}@{o}"))
                .collect::<Vec<_>>()
                .join(","),
            generation = group.generation_id,
            "committed"
        );
        Ok(())
    }

    fn store_lock(&self) -> Result<std::sync::MutexGuard<'_, StateStore>, Exit> {
        self.store
            .lock()
            .map_err(|_| Exit::fatal(RuntimeError::Internal("the state store's lock".into())))
    }

    /// Writes `deltas` and the changelog offsets as local checkpoint `n` (one fsynced batch).
    fn persist(
        &self,
        n: u64,
        deltas: Vec<FrozenDelta>,
    ) -> impl std::future::Future<Output = Result<(), Exit>> + Send + 'static {
        let partitions: Vec<SourcePosition> = self
            .through
            .iter()
            .map(|(r, o)| SourcePosition {
                topic: self.plan.topics.changelog.clone(),
                partition: *r,
                next_offset: *o,
            })
            .collect();
        let positions = RecordPositions {
            partitions,
            file: None,
            changelog: Some(self.copy.clone()),
        };
        let store = self.store.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let mut s = store
                    .lock()
                    .map_err(|_| RuntimeError::Internal("the state store's lock".into()))?;
                s.persist(n, &deltas, positions, Vec::new())
                    .map_err(RuntimeError::from)
            })
            .await
            .map_err(|e| {
                Exit::fatal(RuntimeError::Internal(format!(
                    "the state store's thread: {e}"
                )))
            })??;
            Ok(())
        }
    }

    /// Takes on newly assigned partitions: a source partition's task starts at once (the
    /// group set its position to the committed offset); a repartition partition's task first
    /// restores its key groups' state from the changelog.
    async fn assign(&mut self, partitions: &[TopicPartition]) -> Result<(), Exit> {
        for tp in partitions {
            if self.plan.keyed && tp.topic == self.plan.topics.repartition {
                self.restore(tp.partition).await?;
            } else if let Some(i) = self
                .plan
                .job
                .source
                .topics
                .iter()
                .position(|t| *t == tp.topic)
            {
                let chain = self.plan.topology.source_chain(&self.plan.metrics);
                let ooo = self.plan.topology.out_of_orderness().unwrap_or(0);
                self.sources.insert(
                    tp.clone(),
                    SourceTask {
                        chain,
                        input: input_id(i, tp.partition),
                        watermark: Watermark::new(ooo),
                        sent: None,
                    },
                );
            }
        }
        info!(
            sources = self.sources.len(),
            keyed = self.keyed.len(),
            added = %names(partitions),
            "tasks assigned"
        );
        Ok(())
    }

    async fn restore(&mut self, r: i32) -> Result<(), Exit> {
        let tp = TopicPartition::new(self.plan.topics.changelog.clone(), r);
        let admin = Admin::with_cluster(self.plan.cluster.clone());
        let patience = self.plan.transaction_timeout + Duration::from_secs(15);
        let (start, end) = changelog::stable_bounds(&admin, &tp, patience)
            .await
            .map_err(|e| rejoin("restoring", e))?;
        let now = now_ms();
        let trusted = changelog::trusted(
            self.copy.current_at_ms.get(&r).copied(),
            now,
            self.plan.delete_retention,
        ) || (self.through.contains_key(&r)
            && hook::skipped(hook::Protection::CopyAge));
        if !trusted && self.through.contains_key(&r) {
            info!(task = r, "the local copy of this task's state is too old to read forward (the cleaner may have removed tombstones since): reading its changelog from the start");
        }
        let local = self.through.get(&r).copied().filter(|_| trusted);
        let span = changelog::span(local, start, end);
        let groups = key_groups_of(r, self.plan.key_groups, self.plan.tasks);
        let mut entries = changelog::Entries::new();
        let uid = self.plan.keyed_uid.clone();
        if span.wipe {
            let state = self.store_lock()?.operator(&uid)?;
            for k in state.stored_keys_in(groups.clone())? {
                entries.insert(k, None);
            }
        }
        entries.extend(changelog::read(&self.plan.cluster, &self.plan.consumer, &tp, span).await?);
        self.copy.current_at_ms.insert(r, now);
        if !entries.is_empty() || self.through.get(&r) != Some(&end) || !trusted {
            self.through.insert(r, end);
            let (n, index) = {
                let s = self.store_lock()?;
                (s.latest() + 1, s.operator(&uid)?.index())
            };
            self.persist(n, vec![FrozenDelta::restored(n, index, entries)])
                .await?;
        }
        let state = self.store_lock()?.operator(&uid)?.for_key_groups(groups);
        let stage = self.plan.topology.keyed_stage(state, &self.plan.metrics)?;
        self.keyed.insert(
            r,
            KeyedTask {
                stage,
                inputs: InputWatermarks::new(self.plan.inputs.iter().copied(), IDLE_AFTER),
            },
        );
        Ok(())
    }

    fn revoke(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.positions.remove(tp);
            self.idle.active(tp);
            if self.plan.keyed && tp.topic == self.plan.topics.repartition {
                self.keyed.remove(&tp.partition);
            } else {
                self.sources.remove(tp);
            }
        }
        info!(
            sources = self.sources.len(),
            keyed = self.keyed.len(),
            removed = %names(partitions),
            "tasks revoked"
        );
    }

    /// Ends this membership's work: aborts the open transaction (best effort: a fenced
    /// producer cannot, and the broker aborts it anyway) and drops every task.
    async fn poison(&mut self) {
        if self.in_txn {
            if let Err(e) = self.producer.abort_transaction().await {
                debug!(error = %e, "aborting after a failure");
            }
            self.in_txn = false;
        }
        self.sources.clear();
        self.keyed.clear();
        self.positions.clear();
        self.failure.get_or_insert(Exit::Rejoin("poisoned".into()));
    }
}

/// The group's rebalance callbacks, onto the worker.
struct Listener {
    worker: Arc<Mutex<Worker>>,
    meta: GroupMetadataHandle,
}

impl RebalanceListener for Listener {
    fn on_assigned<'a>(&'a self, partitions: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut w = self.worker.lock().await;
            if w.failure.is_some() {
                return;
            }
            if let Err(e) = w.assign(partitions).await {
                w.failure = Some(e);
            }
        })
    }

    fn on_revoked<'a>(&'a self, partitions: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut w = self.worker.lock().await;
            if w.failure.is_none() {
                // Commit what was done for them before their next owner starts from the
                // committed offsets.
                if let Err(e) = w.commit(&self.meta.get(), None).await {
                    warn!("committing before a rebalance failed; joining again");
                    w.failure = Some(e);
                }
            }
            w.revoke(partitions);
        })
    }

    fn on_lost<'a>(&'a self, partitions: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut w = self.worker.lock().await;
            warn!(
                partitions = partitions.len(),
                "tasks lost (the group moved on without this member): joining again"
            );
            if !w.fencing && w.failure.is_none() {
                // The inverse test's naive member: it commits what it did for tasks it no
                // longer owns, as if nothing happened.
                let _ = w.commit(&self.meta.get(), None).await;
            }
            w.poison().await;
            w.failure = Some(Exit::Rejoin("tasks lost".into()));
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_membership_the_coordinator_can_fence_may_commit_offsets() {
        let m = |generation_id, member_id: &str| GroupMetadata {
            group_id: "g".into(),
            generation_id,
            member_id: member_id.into(),
            group_instance_id: None,
        };
        // (generation, member id) → may commit
        for (g, id, ok) in [
            (5, "m-1", true),
            (0, "m-1", true),
            (-1, "", false), // the heartbeat found the member gone and reset it
            (-1, "m-1", false),
            (5, "", false),
        ] {
            assert_eq!(membership(&m(g, id)).is_ok(), ok, "{g} {id:?}");
        }
        assert!(membership(&m(-1, ""))
            .unwrap_err()
            .contains("dropped this member"));
    }
}
