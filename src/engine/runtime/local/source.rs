//! A source subtask: its own read_committed consumer on its share of the input partitions
//! (routing::assign_partitions), the stateless prefix chained, and then either its own sink
//! (a job without a window) or the keyed subtasks, one bounded channel each, records routed by
//! key group. It tracks a watermark per partition (bounded out-of-orderness) and sends the
//! smallest of them downstream when it advances. At the coordinator's InjectBarrier it records
//! its positions, sends the barrier into every channel (or prepares its sink's transaction),
//! and acks.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{Sender, UnboundedReceiver, UnboundedSender};

use super::message::{Control, Counters, Data, Report};
use super::output::SinkTask;
use super::partitions::{discover, Discovery};
use super::positions::{file_input, FILE_INPUT};
use crate::client::{Admin, Consumer, ConsumerRecord, Offset, TopicPartition};
use crate::engine::checkpoint::{CheckpointId, Positions, TaskId};
use crate::engine::file_source::{FileRecord, FileSource, Next};
use crate::engine::metrics::Metrics;
use crate::engine::runtime::bad_record;
use crate::engine::runtime::hook::{self, Protection};
use crate::engine::runtime::idle::{IdleTimer, IDLE_AFTER};
use crate::engine::runtime::observe;
use crate::engine::runtime::routing::{owner_of, subtask_of_key};
use crate::engine::runtime::topology::{Emitted, InputRecord, SourceChain};
use crate::engine::runtime::RuntimeError;
use crate::engine::settings::ErrorTolerance;
use crate::engine::time::{InputWatermarks, Watermark};

/// How long one poll waits for records (the subtask reads its control messages in between).
const POLL: Duration = Duration::from_millis(100);

/// Where a source subtask's records go.
pub(crate) enum Downstream {
    /// No window: the subtask's own sink, chained.
    Sink(Box<SinkTask>),
    /// The keyed subtasks: channel i goes to the subtask owning key groups kg·P/G = i.
    Keyed {
        channels: Vec<Sender<Data>>,
        key_groups: u16,
    },
}

/// The per-partition watermarks of a source subtask and the smallest of them.
pub(crate) struct PartitionWatermarks {
    partitions: BTreeMap<TopicPartition, (u32, Watermark)>,
    /// The minimum over the partitions (idle ones left out; a stopped stream resumes as a
    /// whole: `InputWatermarks`).
    combined: InputWatermarks,
    sent: Option<i64>,
    /// When the keyed subtasks were last told that every partition is idle (again every
    /// [`IDLE_RESEND`] while it lasts: after a resumption they count this subtask again until
    /// it says so a hold later); `None` once a partition is active.
    idle_sent: Option<Instant>,
    out_of_orderness: i64,
}

/// How often a source subtask whose partitions are all idle says so again.
const IDLE_RESEND: Duration = Duration::from_millis(250);

impl PartitionWatermarks {
    /// Watermarks trailing each partition's newest event time by `out_of_orderness` ms. A
    /// partition without records yet holds the subtask's watermark back.
    pub(crate) fn new(partitions: &[TopicPartition], out_of_orderness: i64) -> Self {
        let partitions: BTreeMap<TopicPartition, (u32, Watermark)> = partitions
            .iter()
            .enumerate()
            .map(|(i, tp)| {
                let i = u32::try_from(i).unwrap_or(u32::MAX);
                (tp.clone(), (i, Watermark::new(out_of_orderness)))
            })
            .collect();
        let combined = watermarks_of(partitions.values().map(|(i, _)| *i));
        PartitionWatermarks {
            partitions,
            combined,
            sent: None,
            idle_sent: None,
            out_of_orderness,
        }
    }

    /// A partition discovered while running: it holds the watermark back until its first
    /// record or until it is caught up (idle).
    fn add(&mut self, tp: &TopicPartition) {
        if self.partitions.contains_key(tp) {
            return;
        }
        let i = u32::try_from(self.partitions.len()).unwrap_or(u32::MAX);
        let out_of_orderness = self.out_of_orderness;
        self.partitions
            .insert(tp.clone(), (i, Watermark::new(out_of_orderness)));
        self.combined.add_input(i);
        self.idle_sent = None;
    }

    /// The subtask's watermark, when it advanced past what was sent.
    fn advanced(&mut self, combined: Option<i64>) -> Option<i64> {
        let combined = combined?;
        if self.sent.is_some_and(|s| s >= combined) {
            return None;
        }
        self.sent = Some(combined);
        Some(combined)
    }

    /// `tp` has been caught up with its end since before `now`: it no longer holds the
    /// watermark back (until its next record), as a Flink source's idleness — unless the
    /// stream resumed less than a hold ago (`InputWatermarks::set_idle`). Without idleness, a
    /// partition read to its end before a crash gives no record after the restart and stops
    /// every window from firing. Called on every look while it lasts.
    fn set_idle(&mut self, tp: &TopicPartition, now: Instant) -> Option<i64> {
        let (i, _) = self.partitions.get(tp)?;
        if self.combined.is_idle(*i) {
            return None;
        }
        let combined = self.combined.set_idle(*i, now);
        self.advanced(combined)
    }

    /// Whether every partition is idle and the keyed subtasks are due to hear it (the first
    /// time, then every [`IDLE_RESEND`]).
    fn idle_due(&mut self, now: Instant) -> bool {
        // A subtask that reads no partition (parallelism above the input's partition count) is
        // idle from the start. It used to stay silent, holding back every keyed subtask's
        // combined watermark, so that after a restart at a higher parallelism no window closed
        // (engine_parallel's restart at 4 with 3 partitions: a third of the windows missing,
        // whenever the first run had not emitted them all before its kill).
        if !self.partitions.is_empty() && !self.combined.all_idle() {
            return false;
        }
        if self
            .idle_sent
            .is_some_and(|last| now.saturating_duration_since(last) < IDLE_RESEND)
        {
            return false;
        }
        self.idle_sent = Some(now);
        true
    }

    /// A record of `tp` at event time `t`, read at `now`; returns the subtask's watermark
    /// when it advanced past what was sent.
    fn observe(&mut self, tp: &TopicPartition, t: i64, now: Instant) -> Option<i64> {
        let (i, w) = self.partitions.get_mut(tp)?;
        let i = *i;
        let was_idle = self.combined.is_idle(i);
        if !w.observe(t) && !was_idle {
            return None;
        }
        let combined = self.combined.advance(i, w.current()?, now);
        // Woken after the keyed subtasks were told this subtask is idle: they count it again
        // only once they hear a watermark from it, advanced or not.
        if was_idle && self.idle_sent.take().is_some() {
            let c = combined?;
            self.sent = Some(self.sent.map_or(c, |s| s.max(c)));
            return Some(c);
        }
        self.advanced(combined)
    }
}

/// Combined watermarks over `inputs` with the idleness timeout as the resumption's hold (and
/// the resumption off under `ONCEFLOW_TEST_SKIP=resumption`, inverse test only).
pub(crate) fn watermarks_of(inputs: impl IntoIterator<Item = u32>) -> InputWatermarks {
    let w = InputWatermarks::new(inputs, IDLE_AFTER);
    if hook::skipped(Protection::Resumption) {
        w.without_resumption()
    } else {
        w
    }
}

/// What a source subtask reads.
pub(crate) enum Input {
    /// Its share of the input partitions, with its own read_committed consumer.
    Kafka(Consumer),
    /// The job's files (source subtask 0; `None` for the others, which only forward
    /// barriers).
    File(Option<FileReader>),
}

/// The file source's reader in a source subtask.
pub(crate) struct FileReader {
    pub source: FileSource,
    /// The end was reached and said (the final watermark sent).
    pub ended: bool,
}

/// One source subtask.
pub(crate) struct SourceSubtask {
    pub task: TaskId,
    pub input_kind: Input,
    /// The operators chained before the key exchange (all of them without one).
    pub chain: Box<dyn SourceChain>,
    /// What the chain emitted for the record at hand (kept, so it allocates once).
    pub emitted: Vec<Emitted>,
    /// `errors.tolerance`: what a record the chain cannot process becomes.
    pub errors: ErrorTolerance,
    pub downstream: Downstream,
    /// Per partition: the next offset to fetch after the records processed so far.
    pub positions: Positions,
    pub watermarks: Option<PartitionWatermarks>,
    /// How long each partition has been caught up (idleness after [`IDLE_AFTER`]).
    pub idle: IdleTimer,
    pub control: UnboundedReceiver<Control>,
    pub reports: UnboundedSender<Report>,
    pub counters: Arc<Counters>,
    pub metrics: Arc<Metrics>,
    /// How long held outputs may wait for a free pool slot.
    pub patience: Duration,
    pub input: VecDeque<ConsumerRecord>,
    /// A barrier that came while outputs were held: it goes once they are written.
    pub pending_barrier: Option<CheckpointId>,
    /// A stop's final barrier came: no more input is read (what was polled and not processed
    /// is after the barrier's positions; a restart reads it again).
    pub reading_stopped: bool,
    /// When to look for new input partitions (those of this subtask's share).
    pub discovery: Discovery,
    pub admin: Admin,
    pub topics: Vec<String>,
    /// This subtask's index and the parallelism (its share: `routing::owner_of`).
    pub index: usize,
    pub parallelism: usize,
}

impl SourceSubtask {
    /// Runs until the coordinator is gone (Ok) or an error.
    pub(crate) async fn run(mut self) -> Result<(), RuntimeError> {
        loop {
            if self.holding() {
                self.flush().await?;
                if self.holding() {
                    let control = SinkTask::wait_for_control(&mut self.control, self.patience);
                    match control.await? {
                        Some(c) => self.on_control(c).await?,
                        None => return Ok(()),
                    }
                    continue;
                }
            }
            if let Some(id) = self.pending_barrier.take() {
                self.barrier(id).await?;
            }
            loop {
                match self.control.try_recv() {
                    Ok(c) => self.on_control(c).await?,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Ok(()),
                }
            }
            if self.holding() || self.pending_barrier.is_some() {
                continue;
            }
            if self.reading_stopped {
                match self.control.recv().await {
                    Some(c) => self.on_control(c).await?,
                    None => return Ok(()),
                }
                continue;
            }
            match self.input.pop_front() {
                Some(record) => self.process(record).await?,
                None if matches!(self.input_kind, Input::File(_)) => {
                    if !self.read_file().await? {
                        return Ok(());
                    }
                }
                None => {
                    self.discover().await?;
                    let Input::Kafka(consumer) = &mut self.input_kind else {
                        continue;
                    };
                    let polled = consumer
                        .poll(POLL)
                        .await
                        .map_err(|e| RuntimeError::client("polling the source", e))?;
                    self.input.extend(polled);
                    let sink = match &self.downstream {
                        Downstream::Sink(s) => s.kafka(),
                        Downstream::Keyed { .. } => None,
                    };
                    observe::polled(&self.metrics, consumer, &self.positions, sink);
                    self.idleness().await?;
                }
            }
        }
    }

    fn holding(&self) -> bool {
        matches!(&self.downstream, Downstream::Sink(s) if s.is_holding())
    }

    async fn flush(&mut self) -> Result<(), RuntimeError> {
        match &mut self.downstream {
            Downstream::Sink(s) => s.flush().await,
            Downstream::Keyed { .. } => Ok(()),
        }
    }

    fn sink(&mut self) -> Result<&mut SinkTask, RuntimeError> {
        match &mut self.downstream {
            Downstream::Sink(s) => Ok(s),
            Downstream::Keyed { .. } => Err(RuntimeError::Internal(format!(
                "{}: a sink's message to a source subtask that has none",
                self.task
            ))),
        }
    }

    async fn on_control(&mut self, c: Control) -> Result<(), RuntimeError> {
        match c {
            Control::InjectBarrier(id) if self.holding() => self.pending_barrier = Some(id),
            Control::InjectBarrier(id) => self.barrier(id).await?,
            Control::InjectFinalBarrier(id) => {
                self.reading_stopped = true;
                tracing::info!(task = %self.task, checkpoint = id.0, "final barrier: reading stopped");
                if self.holding() {
                    self.pending_barrier = Some(id);
                } else {
                    self.barrier(id).await?;
                }
            }
            Control::Commit {
                checkpoint,
                committable,
            } => {
                let outcome = self.sink()?.commit(checkpoint, &committable).await?;
                self.report(Report::CommitResult {
                    committable,
                    outcome,
                });
            }
            Control::Release(c) => self.sink()?.release(&c),
            // A source keeps no state.
            Control::Cancel(_) | Control::Completed(_) => {}
        }
        Ok(())
    }

    fn report(&self, r: Report) {
        // The coordinator gone means the job is stopping: nothing to tell.
        let _ = self.reports.send(r);
    }

    /// Positions recorded, barrier sent on (behind every record sent before it), ack.
    async fn barrier(&mut self, id: CheckpointId) -> Result<(), RuntimeError> {
        // The reader's position is after the last record it returned, and that record was
        // handed on before this barrier: barriers come only between records.
        if let Input::File(Some(r)) = &self.input_kind {
            self.positions.file = Some(r.source.position());
        }
        let positions = self.positions.clone();
        let committables = match &mut self.downstream {
            Downstream::Sink(s) => s.barrier(id).await?,
            Downstream::Keyed { channels, .. } => {
                for (i, ch) in channels.iter().enumerate() {
                    ch.send(Data::Barrier(id)).await.map_err(|_| gone(i))?;
                }
                Vec::new()
            }
        };
        tracing::debug!(task = %self.task, checkpoint = id.0, "barrier sent");
        self.report(Report::Ack {
            id,
            task: self.task,
            delta: None,
            positions,
            committables,
        });
        Ok(())
    }

    /// One record through the chain, then to the sink or the keyed subtasks of its elements'
    /// key groups (waiting while a channel is full: back-pressure).
    async fn process(&mut self, record: ConsumerRecord) -> Result<(), RuntimeError> {
        let tp = TopicPartition::new(record.topic.clone(), record.partition);
        self.idle.active(&tp);
        let input = InputRecord {
            topic: &record.topic,
            partition: record.partition,
            offset: record.offset,
            timestamp: record.timestamp,
            key: record.key.as_ref(),
            value: record.value.as_ref(),
        };
        let key = TopicPartition::new(record.topic.clone(), record.partition);
        self.positions.insert(key, record.offset + 1);
        self.handle(&input, &tp).await
    }

    /// A record of the file source (its position is the reader's, taken at the barrier).
    async fn process_file(&mut self, record: FileRecord) -> Result<(), RuntimeError> {
        let tp = file_input();
        let key = record.key.map(bytes::Bytes::from);
        let value = bytes::Bytes::from(record.value);
        let input = InputRecord {
            topic: FILE_INPUT,
            partition: 0,
            offset: i64::try_from(record.line).unwrap_or(i64::MAX),
            timestamp: record.event_time,
            key: key.as_ref(),
            value: Some(&value),
        };
        self.handle(&input, &tp).await
    }

    /// The chain, the sending on, and the watermark, for one input record of `tp`.
    async fn handle(
        &mut self,
        input: &InputRecord<'_>,
        tp: &TopicPartition,
    ) -> Result<(), RuntimeError> {
        self.counters.records_in.fetch_add(1, Ordering::Relaxed);
        self.metrics.record_in();
        if let Some(prepared) = self.chain.prepare(input) {
            prepared.await?;
        }
        let mut emitted = std::mem::take(&mut self.emitted);
        let time = self.chain.process(input, &mut emitted);
        let settled = self.settle_bad(input, &mut emitted);
        let sent = match settled {
            Ok(()) => self.send(&mut emitted).await,
            Err(e) => Err(e),
        };
        self.emitted = emitted;
        sent?;
        // The watermark follows every record's event time, also of those the chain drops (as
        // a source's watermark strategy sees its records before any operator).
        let advanced = match (time, self.watermarks.as_mut()) {
            (Some(t), Some(w)) => w.observe(tp, t, Instant::now()),
            _ => None,
        };
        if let Some(w) = advanced {
            broadcast(&self.downstream, || Data::Watermark(w)).await?;
        }
        Ok(())
    }

    /// Records the chain could not process, as `errors.tolerance` says: the job stops, or
    /// they are left out (counted, logged), or they become dead-letter outputs in place.
    fn settle_bad(
        &mut self,
        input: &InputRecord<'_>,
        emitted: &mut Vec<Emitted>,
    ) -> Result<(), RuntimeError> {
        if !emitted.iter().any(|e| matches!(e, Emitted::Bad { .. })) {
            return Ok(());
        }
        let mut settled = Vec::with_capacity(emitted.len());
        for e in emitted.drain(..) {
            match e {
                Emitted::Bad { reason } => {
                    if let Some(out) =
                        bad_record::settle(&self.errors, input, &reason, &self.metrics)?
                    {
                        settled.push(Emitted::Out(out));
                    }
                }
                other => settled.push(other),
            }
        }
        *emitted = settled;
        Ok(())
    }

    /// What the chain emitted for one record, in order, to the sink or the key exchange.
    async fn send(&mut self, emitted: &mut Vec<Emitted>) -> Result<(), RuntimeError> {
        for e in emitted.drain(..) {
            match (e, &mut self.downstream) {
                (Emitted::Out(out), Downstream::Sink(s)) => s.write(vec![out]).await?,
                (
                    Emitted::Keyed { key, time, element },
                    Downstream::Keyed {
                        channels,
                        key_groups,
                    },
                ) => {
                    let i = subtask_of_key(&key, channels.len(), *key_groups);
                    let ch = channels.get(i).ok_or_else(|| gone(i))?;
                    ch.send(Data::Record { key, time, element })
                        .await
                        .map_err(|_| gone(i))?;
                }
                // An output of the source chain itself (a dead-letter record) in a keyed
                // job: the sinks are the keyed subtasks'; this subtask's own channel index
                // carries it, in order with the barriers, into the same checkpoint.
                (Emitted::Out(out), Downstream::Keyed { channels, .. }) => {
                    let i = self.index % channels.len().max(1);
                    let ch = channels.get(i).ok_or_else(|| gone(i))?;
                    ch.send(Data::Output(out)).await.map_err(|_| gone(i))?;
                }
                _ => {
                    return Err(RuntimeError::Internal(
                        "a record's shape does not match its source subtask's downstream".into(),
                    ))
                }
            }
        }
        Ok(())
    }

    /// The file source's next step: a record due now is processed; one due later is waited
    /// for (and the end, once reached, for ever), reading control messages meanwhile.
    /// Returns false when the coordinator is gone.
    async fn read_file(&mut self) -> Result<bool, RuntimeError> {
        let Input::File(Some(reader)) = &mut self.input_kind else {
            return self.wait_for_control(Instant::now() + POLL).await;
        };
        match reader.source.next()? {
            Next::Record(r) => {
                self.process_file(r).await?;
                Ok(true)
            }
            Next::NotBefore(due) => self.wait_for_control(due.min(Instant::now() + POLL)).await,
            Next::End => {
                if !reader.ended {
                    reader.ended = true;
                    tracing::info!(task = %self.task, "file source: every file read; the job keeps running until stopped");
                    // No event will ever come again: every window may fire (as Flink's bounded
                    // sources end with the largest watermark). A restore at the end says so again.
                    if self.watermarks.is_some() {
                        broadcast(&self.downstream, || Data::Watermark(i64::MAX)).await?;
                    }
                }
                self.wait_for_control(Instant::now() + POLL).await
            }
        }
    }

    /// Waits until `until` or a control message (handled); false when the coordinator is gone.
    async fn wait_for_control(&mut self, until: Instant) -> Result<bool, RuntimeError> {
        let until = tokio::time::Instant::from_std(until);
        match tokio::time::timeout_at(until, self.control.recv()).await {
            Ok(Some(c)) => {
                self.on_control(c).await?;
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(_) => Ok(true),
        }
    }

    /// Partition discovery, when due (see `partitions`): new partitions of this subtask's
    /// share are assigned from their beginning and their positions recorded at once, between
    /// two records, so the next barrier's checkpoint lists them.
    async fn discover(&mut self) -> Result<(), RuntimeError> {
        if !self.discovery.due() {
            return Ok(());
        }
        let (index, p) = (self.index, self.parallelism);
        let owns = move |tp: &TopicPartition| owner_of(tp, p) == index;
        let Input::Kafka(consumer) = &mut self.input_kind else {
            return Ok(());
        };
        let found = discover(&self.admin, consumer, &self.topics, owns).await?;
        for (tp, o) in found {
            consumer
                .seek(&tp, Offset::At(o))
                .map_err(|e| RuntimeError::client(format!("seeking {tp}"), e))?;
            self.positions.insert(tp.clone(), o);
            if let Some(w) = self.watermarks.as_mut() {
                w.add(&tp);
            }
        }
        Ok(())
    }

    /// After a poll: partitions caught up with their end (and none of their records waiting
    /// here) are idle; the keyed subtasks hear the watermark that results, or that this
    /// subtask is idle altogether.
    async fn idleness(&mut self) -> Result<(), RuntimeError> {
        let (Some(w), Input::Kafka(consumer)) = (self.watermarks.as_mut(), &self.input_kind) else {
            return Ok(());
        };
        let mut advanced = None;
        let now = std::time::Instant::now();
        for tp in consumer.assignment() {
            let waiting = self
                .input
                .iter()
                .any(|r| r.partition == tp.partition && r.topic == tp.topic);
            if waiting || !consumer.caught_up(&tp) {
                self.idle.active(&tp);
            } else if self.idle.caught_up(&tp, now, IDLE_AFTER) {
                advanced = w.set_idle(&tp, now).or(advanced);
            }
        }
        let first = w.idle_sent.is_none();
        let all_idle = w.idle_due(now);
        if let Some(wm) = advanced {
            broadcast(&self.downstream, || Data::Watermark(wm)).await?;
        }
        if all_idle {
            if first {
                tracing::info!(task = %self.task, "source idle: every partition caught up");
            }
            broadcast(&self.downstream, || Data::Idle(now)).await?;
        }
        Ok(())
    }
}

/// Sends `d()` into every channel to the keyed subtasks (a job without them: nothing).
async fn broadcast(downstream: &Downstream, d: impl Fn() -> Data) -> Result<(), RuntimeError> {
    if let Downstream::Keyed { channels, .. } = downstream {
        for (i, ch) in channels.iter().enumerate() {
            ch.send(d()).await.map_err(|_| gone(i))?;
        }
    }
    Ok(())
}

fn gone(i: usize) -> RuntimeError {
    RuntimeError::Internal(format!("keyed subtask {i} is gone"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source subtask with no partition says it is idle at once (and again every
    /// IDLE_RESEND); one with a partition not yet caught up does not.
    #[test]
    fn a_subtask_without_partitions_is_idle_from_the_start() {
        let now = Instant::now();
        let mut none = PartitionWatermarks::new(&[], 0);
        assert!(none.idle_due(now), "no partition: idle at once");
        assert!(!none.idle_due(now), "said once per IDLE_RESEND");
        assert!(none.idle_due(now + IDLE_RESEND));
        let mut one = PartitionWatermarks::new(&[TopicPartition::new("rides", 0)], 0);
        assert!(
            !one.idle_due(now),
            "a partition not caught up holds it back"
        );
    }

    enum Step {
        Observe(i32, i64),
        Idle(i32),
        AllIdle,
        /// The clock moves to this many ms.
        At(u64),
    }

    /// The source subtask's watermark over two partitions (out-of-orderness 10): the minimum
    /// of the active ones, sent only when it advances; an idle partition leaves the minimum,
    /// and a subtask waking after it said "idle" sends its watermark again.
    /// Partition 0 read far ahead must not make partition 1's on-time events late: the keyed
    /// subtask's window waits for the slower partition's watermark (one watermark over all
    /// records dropped them).
    #[test]
    fn a_partition_read_ahead_does_not_make_anothers_events_late() {
        use crate::engine::job::topology::{Prefix, Prefixed, WindowStage, WINDOW_UID};
        use crate::engine::runtime::topology::Output;
        use crate::engine::state::{RestoreFrom, StateStore, StoreOptions};
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("jobs")
            .join("rides-per-driver-hourly.toml");
        let job = crate::engine::job::Job::load(&file).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let layout = crate::engine::runtime::topology::state_layout(
            &job,
            &crate::engine::job::topology::JsonTopology::new(&job.pipeline),
        );
        let (store, _) = StateStore::open(
            dir.path(),
            layout,
            StoreOptions::default(),
            RestoreFrom::Fresh,
        )
        .unwrap();
        let mut stage =
            WindowStage::new(&job.pipeline, store.operator(WINDOW_UID).unwrap()).unwrap();
        let mut prefix = Prefix::new(&job.pipeline);
        let tp = |p: i32| TopicPartition::new("t", p);
        let mut w = PartitionWatermarks::new(&[tp(0), tp(1)], 60_000);
        let mut feed = |p: i32, t: i64| -> Vec<Output> {
            let raw = bytes::Bytes::from(format!(
                r#"{{"is_start":false,"driver_id":7,"passengers":1,"event_time":{t}}}"#
            ));
            let Prefixed::Keyed {
                key,
                time,
                value,
                input,
            } = prefix.prefixed(Some(b"7".to_vec()), &raw)
            else {
                panic!("not keyed");
            };
            let mut out = stage.add(&key, time, &value, input).unwrap();
            if let Some(wm) = w.observe(&tp(p), t, Instant::now()) {
                out.extend(stage.advance_to(wm).unwrap());
            }
            out
        };
        let h = 3_600_000;
        // Partition 0 runs two hours ahead: nothing fires, partition 1 has not spoken.
        for t in [10, h + 10, 2 * h + 10] {
            assert!(feed(0, t).is_empty());
        }
        // Partition 1's event of the first hour still counts.
        assert!(feed(1, 20).is_empty());
        // Partition 1 moves on: the first hour closes, with both of its rides.
        let out = feed(1, 2 * h + 90_000);
        assert_eq!(out.len(), 1, "{out:?}");
        let first: serde_json::Value = serde_json::from_slice(&out[0].value).unwrap();
        assert_eq!(first["rides"], 2, "{first}");
        assert_eq!(first["window_start"], 0, "{first}");
        assert_eq!(stage.late, 0);
    }

    #[test]
    fn partition_watermarks_table() {
        use Step::*;
        let tp = |p: i32| TopicPartition::new("t", p);
        let steps: &[(Step, Option<i64>)] = &[
            (Observe(0, 100), None), // partition 1 has no watermark yet
            (Observe(1, 50), Some(40)),
            (Observe(1, 45), None),  // older: no advance
            (Observe(0, 200), None), // partition 1 still holds it at 40
            (Idle(1), Some(190)),    // caught up: left out of the minimum
            (Idle(1), None),         // already idle
            (AllIdle, None),         // partition 0 still active
            (Idle(0), None),         // all idle: the watermark stays
            (AllIdle, Some(1)),      // told
            (AllIdle, None),         // not again within the resend interval
            (At(250), None),
            (AllIdle, Some(1)), // told again while it lasts
            // The stream resumes with partition 1: sent again so downstream counts this
            // subtask, and partition 0 counts again too, at 190.
            (Observe(1, 60), Some(190)),
            (Observe(1, 70), None),  // below what was sent
            (Observe(1, 300), None), // partition 0 holds it at 190
            (Idle(0), None),         // idle, but not a hold (1 s) after the resumption
            (At(1250), None),
            (Idle(0), Some(290)), // now it is left out again
        ];
        let mut w = PartitionWatermarks::new(&[tp(0), tp(1)], 10);
        let base = Instant::now();
        let mut now = base;
        for (i, (step, want)) in steps.iter().enumerate() {
            let got = match step {
                Observe(p, t) => w.observe(&tp(*p), *t, now),
                Idle(p) => w.set_idle(&tp(*p), now),
                AllIdle => w.idle_due(now).then_some(1),
                At(ms) => {
                    now = base + Duration::from_millis(*ms);
                    None
                }
            };
            assert_eq!(got, *want, "step {i}");
        }
    }
}
