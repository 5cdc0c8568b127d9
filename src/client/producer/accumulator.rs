//! Per-partition record buffers: the open batch being filled, and closed batches waiting for
//! the sender; and, for the idempotent producer, each partition's sequence numbers.
//!
//! A batch's life (see docs/design/batch.md): records are appended to the partition's *open* batch until it
//! reaches batch.size or linger.ms passes (or flush/close asks); then it is *closed*: given its
//! base sequence and encoded once into the bytes that go on the wire, and queued as *ready*. The
//! sender takes ready batches (at most max.in.flight per partition). A batch that fails with a
//! retriable error goes back into its queue in creation order, and resends the same bytes, so its
//! sequence number never changes on a retry. Only an epoch bump rewrites the producer fields of
//! unsent batches, renumbering them from 0 under the new epoch.

use super::flush::{FlushTicket, FlushTracker};
use super::identity::Identity;
use super::{RecordMetadata, Result};
use crate::client::error::{ErrorClass, Op};
use crate::client::metadata::TopicPartition;
use crate::client::transactions::phase::{self, TxnEvent, TxnPhase};
use crate::protocol::records::{
    rewrite_producer_fields, BatchBuilder, Compression, Header, ProducerFields, RecordError,
};
use bytes::{Bytes, BytesMut};
use rustc_hash::FxHashMap;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Who is told a record's outcome: the future `send` returned, or the callback given to
/// `send_with_callback`. Told exactly once: a reply dropped untold (the producer's task gone
/// with the runtime) tells a callback `Closed`, as the future's receiver sees its sender gone.
pub(crate) struct Reply(Option<ReplyTo>);

pub(crate) enum ReplyTo {
    Future(oneshot::Sender<Result<RecordMetadata>>),
    Callback(super::Callback),
}

impl Reply {
    pub fn future(tx: oneshot::Sender<Result<RecordMetadata>>) -> Reply {
        Reply(Some(ReplyTo::Future(tx)))
    }

    pub fn callback(f: super::Callback) -> Reply {
        Reply(Some(ReplyTo::Callback(f)))
    }

    /// Tells the outcome. A callback never runs while this thread holds the accumulator lock:
    /// it is deferred until the lock is released (see `super::AccGuard`), so a callback may
    /// call the producer's methods.
    pub fn send(mut self, outcome: Result<RecordMetadata>) {
        match self.0.take() {
            Some(ReplyTo::Future(tx)) => {
                // The receiver may have been dropped: nobody waits for this record.
                let _ = tx.send(outcome);
            }
            Some(ReplyTo::Callback(f)) => super::run_or_defer(f, outcome),
            None => {}
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(ReplyTo::Callback(f)) = self.0.take() {
            super::run_or_defer(f, Err(crate::client::Error::Closed("producer")));
        }
    }
}

/// Where one record's outcome goes.
pub(crate) struct Delivery {
    pub tx: Reply,
    pub timestamp: i64,
}

/// The batch being filled.
pub(crate) struct OpenBatch {
    pub builder: BatchBuilder,
    pub created: Instant,
    pub deliveries: Vec<Delivery>,
    pub memory: u32,
    /// What `flush` waits for: a ticket per epoch its records were sent in. Last, so dropped
    /// after the deliveries were told.
    pub flush: Vec<FlushTicket>,
}

/// A closed batch: encoded bytes plus who to tell about the outcome.
pub(crate) struct ProducerBatch {
    pub tp: TopicPartition,
    pub data: Bytes,
    pub deliveries: Vec<Delivery>,
    pub created: Instant,
    /// Creation order within the partition: retries go back in this order.
    pub order: u64,
    /// Base sequence (-1 without idempotence).
    pub base_sequence: i32,
    pub attempts: u32,
    pub retry_at: Option<Instant>,
    /// Why its last attempt failed, when it is waiting to be retried: named when
    /// delivery.timeout.ms expires the batch, so the error says what kept failing (e.g.
    /// NOT_ENOUGH_REPLICAS), not only that time ran out.
    pub last_error: Option<String>,
    /// buffer.memory permits held until the batch completes.
    pub memory: u32,
    /// The topic id (KIP-516) it was last sent under, all zeros while unknown (never sent, or
    /// metadata without ids): Produce v13 addresses the topic by it.
    pub topic_id: [u8; 16],
    /// An attempt ended without telling whether the broker wrote the batch (see
    /// `verdict::may_have_been_written`): the topic it went to may hold it.
    pub maybe_written: bool,
    /// The open batch's flush tickets. Last, so dropped after the deliveries were told.
    pub _flush: Vec<FlushTicket>,
}

impl ProducerBatch {
    pub fn record_count(&self) -> usize {
        self.deliveries.len()
    }

    /// Resolves every record of the batch.
    pub fn complete(self, base_offset: i64, log_append_time: i64) -> u32 {
        let tp = self.tp;
        let topic = &tp.topic;
        for (i, d) in self.deliveries.into_iter().enumerate() {
            let offset = if base_offset >= 0 {
                base_offset + i as i64
            } else {
                -1
            };
            d.tx.send(Ok(RecordMetadata {
                topic: topic.clone(),
                partition: tp.partition,
                offset,
                timestamp: if log_append_time >= 0 {
                    log_append_time
                } else {
                    d.timestamp
                },
            }));
        }
        self.memory
    }

    /// Fails every record of the batch with `err`.
    pub fn fail(self, err: crate::client::Error) -> u32 {
        for d in self.deliveries {
            d.tx.send(Err(err.clone()));
        }
        self.memory
    }
}

#[cfg(test)]
impl ProducerBatch {
    /// A batch of no records for unit tests: partition 0 of "t", created now.
    pub(crate) fn for_test(order: u64, base_sequence: i32, attempts: u32) -> ProducerBatch {
        ProducerBatch {
            tp: TopicPartition::new("t", 0),
            data: Bytes::new(),
            deliveries: Vec::new(),
            created: Instant::now(),
            order,
            base_sequence,
            attempts,
            retry_at: None,
            last_error: None,
            memory: 0,
            topic_id: [0; 16],
            maybe_written: false,
            _flush: Vec::new(),
        }
    }
}

/// One partition's buffers and sequence state.
pub(crate) struct PartitionQueue {
    pub open: Option<OpenBatch>,
    /// Closed batches not in flight, in creation order.
    pub ready: VecDeque<ProducerBatch>,
    pub in_flight: usize,
    /// The broker the in-flight batches went to: nothing goes to another (a new leader) until
    /// they have settled, or the new leader could see sequences out of order.
    pub in_flight_leader: Option<i32>,
    /// Sequence the next closed batch gets.
    pub next_sequence: i32,
    /// Last sequence the broker acknowledged under the current epoch, -1 if none.
    pub acked_through: i32,
    /// Offset of the last acknowledged record, -1 if none.
    pub last_acked_offset: i64,
    pub next_order: u64,
    /// The topic id (KIP-516) the partition's sequences and sent batches belong to: adopted
    /// from metadata when first known; when metadata later names another id the topic was
    /// deleted and recreated (see [`incarnation`]).
    pub topic_id: Option<[u8; 16]>,
    /// Another id metadata named for the topic, and the metadata generation that named it
    /// first: believed only when a later metadata names it too (see [`incarnation`]).
    pub id_change: Option<([u8; 16], u64)>,
}

impl Default for PartitionQueue {
    fn default() -> Self {
        PartitionQueue {
            open: None,
            ready: VecDeque::new(),
            in_flight: 0,
            in_flight_leader: None,
            next_sequence: 0,
            acked_through: -1,
            last_acked_offset: -1,
            next_order: 0,
            topic_id: None,
            id_change: None,
        }
    }
}

impl PartitionQueue {
    /// Puts a batch back for a retry, before every batch created after it.
    pub fn requeue(&mut self, b: ProducerBatch) {
        let at = self.ready.partition_point(|x| x.order < b.order);
        self.ready.insert(at, b);
    }

    /// Whether nothing is buffered or in flight.
    pub fn is_idle(&self) -> bool {
        self.open.is_none() && self.ready.is_empty() && self.in_flight == 0
    }
}

/// A transactional producer's state, read by the sender and `send` under the accumulator lock.
pub(crate) struct TxnSend {
    pub transactional_id: String,
    /// Where the producer is in its transactional life, with the open transaction's data and
    /// the error that dooms it; moved only through [`phase::next`].
    pub phase: TxnPhase,
    /// An AddPartitionsToTxn request is in flight (classic protocol). Not a phase: it comes
    /// and goes many times within one transaction, in any phase that has one open, and is
    /// owned by the sender's request, not by a call of the application.
    pub adding: bool,
}

impl TxnSend {
    /// Moves the phase by `event`, or says why it cannot (the phase then stays).
    pub fn step(&mut self, event: TxnEvent) -> super::Result<()> {
        let phase = std::mem::replace(&mut self.phase, TxnPhase::Uninitialized);
        let (phase, result) = phase::next(phase, event);
        self.phase = phase;
        result
    }

    /// Records an error that dooms the transaction, or (when fatal in `op`) the producer.
    /// `reinit`: the broker no longer accepts our epoch (see `TxnPhase::AbortableError`).
    pub fn fail(&mut self, error: crate::client::Error, op: Op, reinit: bool) {
        let event = if error.class_in(op) == ErrorClass::Fatal {
            TxnEvent::Fatal(error)
        } else {
            TxnEvent::Abortable { error, reinit }
        };
        // Never refused: an error that arrives when no transaction is open dooms nothing.
        if let Err(e) = self.step(event) {
            tracing::error!(error = %e, "transaction error not recorded");
        }
    }

    pub fn new(transactional_id: String) -> Self {
        TxnSend {
            transactional_id,
            phase: TxnPhase::Uninitialized,
            adding: false,
        }
    }
}

/// The epoch of an idempotent producer *without* transactions. (A transactional producer's
/// epoch belongs to the transaction coordinator and its state to [`TxnPhase`].) Not a phase of
/// the application's calls: the sender decides it from responses and acts on it by itself.
#[derive(Debug, Clone, Default)]
pub(crate) enum EpochBump {
    /// Batches carry the current epoch.
    #[default]
    NotNeeded,
    /// A sequence gap may exist (a batch with a sequence failed or expired, or the broker
    /// reported OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID). The sender stops sending,
    /// waits for everything in flight to settle, bumps the epoch and renumbers.
    Needed,
    /// The bump failed: nothing can be sent safely any more, every send fails with this.
    Failed(crate::client::Error),
}

/// What `send` keeps per topic, so that a record costs one lookup under the lock it takes
/// anyway (FxHash: topic names are the application's, not an attacker's).
#[derive(Debug, Default)]
pub(crate) struct TopicSlot {
    /// The partition count, valid while the cluster's metadata version is `version`.
    pub partition_count: Option<(u64, usize)>,
    /// The sticky partition for keyless records (KIP-480).
    pub sticky: Option<i32>,
}

impl TopicSlot {
    /// The partition count if known at metadata version `version`.
    pub fn count_at(&self, version: u64) -> Option<usize> {
        match self.partition_count {
            Some((v, n)) if v == version => Some(n),
            _ => None,
        }
    }
}

impl Accumulator {
    /// The topic's slot, created on first use.
    pub fn topic_slot(&mut self, topic: &str) -> &mut TopicSlot {
        // Look up before inserting: `entry` would allocate the name for every record.
        if !self.topics.contains_key(topic) {
            self.topics.insert(topic.to_owned(), TopicSlot::default());
        }
        match self.topics.get_mut(topic) {
            Some(slot) => slot,
            None => unreachable!("inserted above"),
        }
    }
}

/// All partitions' buffers.
#[derive(Default)]
pub(crate) struct Accumulator {
    /// Transactional state, when transactional.id is set.
    pub txn: Option<TxnSend>,
    pub partitions: FxHashMap<TopicPartition, PartitionQueue>,
    /// Per topic: its partition count as of a metadata version, and its sticky partition.
    pub topics: FxHashMap<String, TopicSlot>,
    /// Producer id and epoch, when idempotence is on.
    pub identity: Option<Identity>,
    /// Without transactions: whether the epoch must be bumped (or could not be).
    pub bump: EpochBump,
    /// What `flush` waits for (the producer's, shared).
    pub flushes: Arc<FlushTracker>,
}

/// The configuration [`Accumulator::drain`] works to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DrainConfig {
    pub linger: Duration,
    pub delivery_timeout: Duration,
    pub max_in_flight: usize,
    /// How long to wait before looking again for a partition without a known leader.
    pub retry_backoff: Duration,
}

/// What a sender round needs to know of the cluster: the metadata snapshot, or a test's
/// stand-in.
pub(crate) trait ClusterView {
    /// The partition's leader, if known.
    fn leader(&self, tp: &TopicPartition) -> Option<i32>;
    /// The topic's id (KIP-516), if metadata gives one.
    fn topic_id(&self, topic: &str) -> Option<[u8; 16]>;
    /// The metadata's generation (one more on every refresh).
    fn generation(&self) -> u64;
}

impl ClusterView for crate::client::metadata::MetadataSnapshot {
    fn leader(&self, tp: &TopicPartition) -> Option<i32> {
        crate::client::metadata::MetadataSnapshot::leader(self, tp)
    }

    fn topic_id(&self, topic: &str) -> Option<[u8; 16]> {
        self.topics
            .get(topic)
            .map(|t| t.id)
            .filter(|id| *id != [0; 16])
    }

    fn generation(&self) -> u64 {
        self.generation
    }
}

/// What one sender round takes out of the accumulator, and the I/O it then has to do.
#[derive(Default)]
pub(crate) struct Drained {
    /// Batches to send, each with its leader; each already counts as in flight.
    pub to_send: Vec<(i32, ProducerBatch)>,
    /// Batches past delivery.timeout.ms, to fail.
    pub expired: Vec<ProducerBatch>,
    /// Batches to fail with the given error: sent to a topic that was since deleted and
    /// recreated, or broken while being renumbered for the new topic.
    pub recreated: Vec<(ProducerBatch, crate::client::Error)>,
    /// buffer.memory to release for batches that failed to encode when closed.
    pub released: u32,
    /// When the sender must look again even if nothing wakes it.
    pub next_wake: Option<Instant>,
    /// Partitions to add to the transaction (classic protocol) with one AddPartitionsToTxn;
    /// empty while such a request is already in flight.
    pub to_add: Vec<TopicPartition>,
    /// An expired batch had a sequence: the broker will see a gap.
    pub gap: bool,
    /// A partition with something to send has no known leader: refresh metadata.
    pub missing_leader: bool,
    /// Bump the epoch from this identity now (a gap was left and nothing is in flight).
    pub bump_now: Option<Identity>,
    /// Nothing is buffered or in flight anywhere.
    pub idle: bool,
}

fn min_instant(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// Result of appending one record.
pub(crate) struct Appended {
    /// A batch was closed and is ready for the sender.
    pub batch_closed: bool,
    /// The record started a new open batch (the sender must arm its linger timer).
    pub new_batch: bool,
    /// buffer.memory to give back because a batch failed to encode.
    pub release: u32,
}

/// One record to append.
pub(crate) struct NewRecord<'a> {
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header],
}

impl Accumulator {
    /// Whether a record may be appended now: without transactions unless the epoch could not
    /// be bumped; with them, inside an open transaction that is not doomed.
    pub fn check_can_send(&mut self) -> super::Result<()> {
        match &mut self.txn {
            // The common case, once a record: `next(InTransaction, Use)` keeps the phase and
            // says yes; moving the phase out and back in per record showed in profiles.
            Some(t) if matches!(t.phase, TxnPhase::InTransaction(_)) => Ok(()),
            Some(t) => t.step(TxnEvent::Use("send()")),
            None => match &self.bump {
                EpochBump::Failed(e) => Err(e.clone()),
                _ => Ok(()),
            },
        }
    }

    /// Without transactions: a sequence gap may exist, bump the epoch (unless it already
    /// failed to, for good).
    pub fn need_bump(&mut self) {
        if !matches!(self.bump, EpochBump::Failed(_)) {
            self.bump = EpochBump::Needed;
        }
    }

    pub fn queue(&mut self, tp: &TopicPartition) -> &mut PartitionQueue {
        // Look up before inserting: `entry` would clone the topic name for every record.
        if !self.partitions.contains_key(tp) {
            self.partitions
                .insert(tp.clone(), PartitionQueue::default());
        }
        self.partitions.get_mut(tp).expect("inserted above")
    }

    pub fn append(
        &mut self,
        tp: &TopicPartition,
        compression: Compression,
        batch_size: usize,
        record: NewRecord<'_>,
        delivery: Delivery,
        memory: u32,
    ) -> Appended {
        let identity = self.identity;
        let transactional = self.txn.is_some();
        let flushes = self.flushes.clone();
        let q = self.queue(tp);
        let mut batch_closed = false;
        let mut release = 0;
        if let Some(open) = q.open.as_mut() {
            if open.builder.try_append(
                record.timestamp,
                record.key,
                record.value,
                record.headers,
                batch_size,
            ) {
                open.deliveries.push(delivery);
                open.memory += memory;
                // A ticket per epoch, not per record: most records find their epoch's ticket.
                if open.flush.last().map(FlushTicket::epoch) != Some(flushes.current_epoch()) {
                    open.flush.push(flushes.ticket());
                }
                if open.builder.size_estimate() >= batch_size {
                    release += close_open(tp, q, identity, transactional);
                    batch_closed = true;
                }
                return Appended {
                    batch_closed,
                    new_batch: false,
                    release,
                };
            }
            release += close_open(tp, q, identity, transactional);
            batch_closed = true;
        }
        // Sized for a full batch up front: growing from zero showed in profiles.
        let mut builder = BatchBuilder::with_capacity(compression, batch_size);
        // An empty builder always accepts one record, whatever its size.
        builder.try_append(
            record.timestamp,
            record.key,
            record.value,
            record.headers,
            batch_size,
        );
        let full = builder.size_estimate() >= batch_size;
        q.open = Some(OpenBatch {
            builder,
            created: Instant::now(),
            deliveries: vec![delivery],
            memory,
            flush: vec![flushes.ticket()],
        });
        if full {
            release += close_open(tp, q, identity, transactional);
            batch_closed = true;
        }
        Appended {
            batch_closed,
            new_batch: true,
            release,
        }
    }

    /// After an epoch bump: every partition starts again at sequence 0 under the new identity,
    /// and every batch not yet acknowledged is renumbered in order. Called only when nothing is
    /// in flight and no batch an unanswered attempt may have written is left unresolved (see
    /// `drain`), so no batch with an old sequence can still land and none is written twice.
    pub fn rebase(&mut self, identity: Identity) -> Vec<(ProducerBatch, RecordError)> {
        self.identity = Some(identity);
        self.bump = EpochBump::NotNeeded;
        let transactional = self.txn.is_some();
        let mut broken = Vec::new();
        for q in self.partitions.values_mut() {
            broken.extend(renumber(q, Some(identity), transactional));
        }
        broken
    }

    /// Fails every batch that never went out (the open one, and ready ones never sent) with
    /// `err`; returns (memory, records, batches) to release. Used when a transaction aborts or
    /// is doomed.
    ///
    /// A batch that was sent at least once stays queued, to be resent until it settles: its
    /// response may have been lost after the broker wrote it. Were it dropped, its sequence
    /// would be handed out again (the abort rewinds to the last acknowledged one) and, at
    /// transaction.version 1 where the epoch survives the abort, the broker would answer the
    /// next transaction's batch with that sequence as a duplicate of the aborted one: that
    /// record would be acknowledged and never written. (The Java client likewise aborts only
    /// undrained batches.) Batches are sent from the head of the queue and retries go back in
    /// creation order, so the never-sent batches are always a suffix of the queue.
    ///
    /// With `keep_sent` false (the producer failed for good, nothing will be resent) every
    /// queued batch fails, sent before or not.
    pub fn fail_unsent(
        &mut self,
        err: &crate::client::Error,
        keep_sent: bool,
    ) -> (u32, usize, usize) {
        let (mut mem, mut n, mut batches) = (0u32, 0usize, 0usize);
        for q in self.partitions.values_mut() {
            if let Some(open) = q.open.take() {
                n += open.deliveries.len();
                mem += open.memory;
                batches += 1;
                for d in open.deliveries {
                    d.tx.send(Err(err.clone()));
                }
            }
            let first_unsent = if keep_sent {
                let first = q
                    .ready
                    .iter()
                    .position(|b| b.attempts == 0)
                    .unwrap_or(q.ready.len());
                debug_assert!(q.ready.iter().skip(first).all(|b| b.attempts == 0));
                first
            } else {
                0
            };
            for b in q.ready.drain(first_unsent..) {
                n += b.record_count();
                batches += 1;
                mem += b.fail(err.clone());
            }
        }
        (mem, n, batches)
    }

    /// After batches that had sequences were dropped unsent (an aborted transaction) and
    /// nothing is in flight: the next batch of each partition takes the sequence the broker
    /// expects, the one after the last acknowledged. Without this the dropped batches leave a
    /// gap and every later batch is refused as out of order until the transaction times out.
    pub fn rewind_sequences(&mut self) {
        for q in self.partitions.values_mut() {
            if q.in_flight == 0 && q.ready.is_empty() && q.open.is_none() {
                q.next_sequence = next_seq(q.acked_through, 1);
            }
        }
    }

    /// After an epoch change that needs no renumbering of queued batches (nothing is queued:
    /// a transaction just ended): every partition starts again at sequence 0.
    pub fn reset_sequences(&mut self, identity: Identity) {
        self.identity = Some(identity);
        for q in self.partitions.values_mut() {
            q.next_sequence = 0;
            q.acked_through = -1;
            q.last_acked_offset = -1;
        }
    }

    /// One sender round's decisions, made under the accumulator lock the caller holds: closes
    /// open batches whose linger.ms passed (all of them when `flushing`), takes out the ready
    /// ones past delivery.timeout.ms, and picks the head batch of every partition that may send
    /// now. No I/O and no locking: `leader` is the metadata view, and `leader_ready` says whether
    /// a leader's connection is ready (asked at most once per leader and round, only for a leader
    /// a batch would go to; the caller starts connects to the ones that are not).
    ///
    /// A partition's head batch goes out only if
    /// - no gap awaits an epoch bump (non-transactional: nothing is sent until the bump);
    /// - fewer than max.in.flight of the partition are in flight;
    /// - under the classic transaction protocol, the partition was added to the transaction
    ///   (else it is listed in `to_add`);
    /// - a retry's backoff has passed, and nothing else of the partition is in flight (so a
    ///   retried batch is the first of its partition the broker sees again);
    /// - before the partition's first acknowledgement (per epoch) nothing else is in flight;
    /// - its leader is known, is the one the partition's in-flight requests went to, and is
    ///   ready.
    pub fn drain(
        &mut self,
        now: Instant,
        flushing: bool,
        config: &DrainConfig,
        cluster: &impl ClusterView,
        mut leader_ready: impl FnMut(i32) -> bool,
    ) -> Drained {
        let mut out = Drained::default();
        let identity = self.identity;
        let transactional = self.txn.is_some();
        let open = self.txn.as_ref().and_then(|t| t.phase.open());
        // Classic protocol: a partition joins the transaction (AddPartitionsToTxn) before
        // anything is produced to it.
        let needs_add: Option<&HashSet<TopicPartition>> = open.filter(|t| !t.tv2).map(|t| &t.added);
        // A transactional batch belongs to an open transaction; with none open (the producer
        // failed for good) nothing more goes out.
        let closed_txn = transactional && open.is_none();
        let mut wanted_add: HashSet<TopicPartition> = HashSet::new();
        let bumping =
            matches!(self.bump, EpochBump::Needed) && identity.is_some() && !transactional;
        if bumping && self.bump_due() {
            out.bump_now = identity;
        }
        // Each leader's readiness, asked once per round.
        let mut ready: HashMap<i32, bool> = HashMap::new();
        let mut next_wake = None;
        for (tp, q) in self.partitions.iter_mut() {
            let wake = close_and_expire(
                tp,
                q,
                now,
                flushing,
                config,
                identity,
                transactional,
                &mut out,
            );
            next_wake = wake.map_or(next_wake, |w| min_instant(next_wake, w));
            if closed_txn || (bumping && !unresolved(q)) {
                continue;
            }
            match follow_incarnation(tp, q, cluster, identity, transactional, &mut out) {
                Incarnated::Go => {}
                Incarnated::Hold => continue,
                Incarnated::AwaitMetadata => {
                    out.missing_leader = true;
                    next_wake = min_instant(next_wake, now + config.retry_backoff);
                    continue;
                }
            }
            let gate = head_gate(tp, q, now, config, needs_add);
            if !gate.opens(tp, &mut next_wake, &mut wanted_add) {
                continue;
            }
            let Some(leader) = cluster.leader(tp) else {
                out.missing_leader = true;
                next_wake = min_instant(next_wake, now + config.retry_backoff);
                continue;
            };
            // Nothing goes to a new leader while requests to the old one are unsettled.
            if q.in_flight > 0 && q.in_flight_leader != Some(leader) {
                continue;
            }
            if !*ready.entry(leader).or_insert_with(|| leader_ready(leader)) {
                continue;
            }
            if let Some(mut b) = q.ready.pop_front() {
                b.topic_id = q.topic_id.unwrap_or_default();
                q.in_flight += 1;
                q.in_flight_leader = Some(leader);
                out.to_send.push((leader, b));
            }
        }
        out.next_wake = next_wake;
        self.after_round(&mut out, wanted_add, config);
        out
    }

    /// The end of a round: a sequence gap dooms the transaction or asks for an epoch bump;
    /// the open transaction learns that records went out and which partitions to add; a
    /// producer without idempotence forgets idle partitions.
    fn after_round(
        &mut self,
        out: &mut Drained,
        wanted_add: HashSet<TopicPartition>,
        config: &DrainConfig,
    ) {
        let identity = self.identity;
        if out.gap && identity.is_some() {
            if let Some(t) = self.txn.as_mut() {
                let error = crate::client::Error::Timeout {
                    what: "delivery of records in the transaction (delivery.timeout.ms)".into(),
                    after: config.delivery_timeout,
                };
                t.fail(error, Op::TxnProduce, false);
            } else {
                tracing::debug!("expired batches left a sequence gap; epoch bump needed");
                self.need_bump();
            }
        }
        if let Some(t) = self.txn.as_mut() {
            if let Some(open) = t.phase.open_mut() {
                open.started |= !out.to_send.is_empty();
            }
            if !wanted_add.is_empty() && !t.adding {
                t.adding = true;
                out.to_add = wanted_add.into_iter().collect();
            }
        }
        out.idle = self.partitions.values().all(|q| q.is_idle());
        // Forget partitions with nothing buffered so the map does not grow forever; their
        // sequence state must survive, so only without idempotence.
        if out.idle && identity.is_none() {
            self.partitions.clear();
        }
    }

    /// Whether a pending epoch bump may happen now: nothing in flight, and no queue's head a
    /// batch an unanswered attempt may have written.
    ///
    /// Before the bump, such a batch goes out again under the old epoch and its sequence
    /// (`drain` sends only those while a bump is pending), until the broker says what became
    /// of it: renumbered under the new epoch, a batch already in the log would be written a
    /// second time (the broker deduplicates by producer id, epoch and sequence; a new epoch
    /// starts a new history).
    ///   1. batches A (sequence 0) and B (1) of a partition are written; A's answer comes back
    ///      damaged (a non-retriable code), B's is lost (a retry, maybe written);
    ///   2. A fails: a sequence gap may exist, the epoch must be bumped;
    ///   3. renumbered at once, B would go out as sequence 0 of the new epoch and be written
    ///      again. Resent as it was, the broker answers it as a duplicate (or writes it, or
    ///      refuses it as out of order: then it is not in the log, and is renumbered with the
    ///      rest).
    ///
    /// Only a queue's head needs it: a batch behind one the broker never wrote cannot be in the
    /// log either (the broker refuses sequences out of order).
    fn bump_due(&self) -> bool {
        self.total_in_flight() == 0 && !self.partitions.values().any(unresolved)
    }

    /// Batches in flight across all partitions.
    pub fn total_in_flight(&self) -> usize {
        self.partitions.values().map(|q| q.in_flight).sum()
    }
}

/// Whether the queue's head is a batch an unanswered attempt may have written (see
/// `Accumulator::bump_due`).
fn unresolved(q: &PartitionQueue) -> bool {
    q.ready.front().is_some_and(|b| b.maybe_written)
}

/// Whether sequence `a` comes after `b`, allowing for the wrap at i32::MAX: `a` is ahead by
/// less than half the sequence space.
pub(crate) fn seq_after(a: i32, b: i32) -> bool {
    let diff = (a as i64 - b as i64).rem_euclid(i32::MAX as i64 + 1);
    diff > 0 && diff < (1 << 30)
}

/// What a partition's topic incarnation lets it do this round.
enum Incarnated {
    /// Same topic (or a recreated one, started over): it may send.
    Go,
    /// A topic id change is settling (its in-flight requests first): it waits.
    Hold,
    /// The metadata names another topic id than its batches: refreshed, it waits for it.
    AwaitMetadata,
}

/// Follows the partition's topic through deletions and re-creations (`incarnation`): adopts
/// the first id seen, holds while a change settles, and starts the partition over in a new
/// topic of the same name.
fn follow_incarnation(
    tp: &TopicPartition,
    q: &mut PartitionQueue,
    cluster: &impl ClusterView,
    identity: Option<Identity>,
    transactional: bool,
    out: &mut Drained,
) -> Incarnated {
    let current = cluster.topic_id(&tp.topic);
    let generation = cluster.generation();
    match incarnation(q.topic_id, current, q.in_flight, q.id_change, generation) {
        Incarnation::Same => q.id_change = None,
        Incarnation::Adopt(id) => q.topic_id = Some(id),
        Incarnation::Suspect(id) => {
            if q.id_change.map(|(seen, _)| seen) != Some(id) {
                q.id_change = Some((id, generation));
            }
            return Incarnated::AwaitMetadata;
        }
        Incarnation::Settle => return Incarnated::Hold,
        Incarnation::Recreated { old, new } => {
            start_over_in_new_topic(tp, q, (old, new), identity, transactional, out)
        }
    }
    Incarnated::Go
}

/// A partition's own part of a round: closes its open batch when linger.ms passed (or on
/// flush), takes out ready batches past delivery.timeout.ms (never ones in flight: their fate
/// is decided by the response). Returns when the partition needs looking at again.
#[allow(clippy::too_many_arguments)]
fn close_and_expire(
    tp: &TopicPartition,
    q: &mut PartitionQueue,
    now: Instant,
    flushing: bool,
    config: &DrainConfig,
    identity: Option<Identity>,
    transactional: bool,
    out: &mut Drained,
) -> Option<Instant> {
    let mut wake = None;
    if let Some(open) = &q.open {
        let due = open.created + config.linger;
        if flushing || due <= now {
            out.released += close_open(tp, q, identity, transactional);
        } else {
            wake = min_instant(wake, due);
        }
    }
    while q
        .ready
        .front()
        .is_some_and(|b| b.created + config.delivery_timeout <= now)
    {
        if let Some(b) = q.ready.pop_front() {
            out.gap |= b.base_sequence >= 0;
            out.expired.push(b);
        }
    }
    if let Some(b) = q.ready.front() {
        wake = min_instant(wake, b.created + config.delivery_timeout);
    }
    wake
}

/// Whether a partition's head batch may go out, as far as the partition alone decides (the
/// leader is checked after).
#[derive(Debug, PartialEq, Eq)]
enum HeadGate {
    Go,
    /// Not now; something else wakes the sender (a response, a new batch).
    Hold,
    /// Not before this time (a retry's backoff).
    Until(Instant),
    /// Classic protocol: the partition must join the transaction first.
    AddFirst,
}

impl HeadGate {
    /// Whether the head batch may go; a closed gate notes when to look again, or that the
    /// partition must join the transaction first.
    fn opens(
        self,
        tp: &TopicPartition,
        next_wake: &mut Option<Instant>,
        wanted_add: &mut HashSet<TopicPartition>,
    ) -> bool {
        match self {
            HeadGate::Go => true,
            HeadGate::Hold => false,
            HeadGate::Until(at) => {
                *next_wake = min_instant(*next_wake, at);
                false
            }
            HeadGate::AddFirst => {
                wanted_add.insert(tp.clone());
                false
            }
        }
    }
}

fn head_gate(
    tp: &TopicPartition,
    q: &PartitionQueue,
    now: Instant,
    config: &DrainConfig,
    needs_add: Option<&HashSet<TopicPartition>>,
) -> HeadGate {
    if q.in_flight >= config.max_in_flight {
        return HeadGate::Hold;
    }
    let Some(head) = q.ready.front() else {
        return HeadGate::Hold;
    };
    if needs_add.is_some_and(|added| !added.contains(tp)) {
        return HeadGate::AddFirst;
    }
    if let Some(at) = head.retry_at.filter(|at| *at > now) {
        return HeadGate::Until(at);
    }
    // A retry waits until everything sent after it has settled, so it is the first of its
    // partition the broker sees again.
    if head.attempts > 0 && q.in_flight > 0 {
        return HeadGate::Hold;
    }
    // Until the partition has acknowledged a batch (per epoch), only one goes out. A broker
    // with no state for this producer accepts any first sequence: had batch 1 succeeded while
    // batch 0 hit NOT_LEADER_OR_FOLLOWER, batch 0 could never be written in order again.
    // Without idempotence the same rule keeps a new topic's first retry from reordering
    // records.
    if q.last_acked_offset < 0 && q.acked_through < 0 && q.in_flight > 0 {
        return HeadGate::Hold;
    }
    HeadGate::Go
}

/// Starts the partition's sequences again at 0 and renumbers its queued batches in order
/// (under `identity`; none: the batches carry no producer fields and only the counters reset).
/// Called only when nothing of the partition is in flight. Returns the batches whose bytes
/// could not be rewritten, to fail.
fn renumber(
    q: &mut PartitionQueue,
    identity: Option<Identity>,
    transactional: bool,
) -> Vec<(ProducerBatch, RecordError)> {
    q.next_sequence = 0;
    q.acked_through = -1;
    let Some(identity) = identity else {
        return Vec::new();
    };
    let mut broken = Vec::new();
    for mut b in std::mem::take(&mut q.ready) {
        let fields = ProducerFields {
            producer_id: identity.producer_id,
            producer_epoch: identity.epoch,
            base_sequence: q.next_sequence,
            transactional,
        };
        let mut data = BytesMut::from(&b.data[..]);
        match rewrite_producer_fields(&mut data, fields) {
            Ok(()) => {
                b.data = data.freeze();
                // Under the new identity nothing of it has been sent yet.
                b.maybe_written = false;
                b.base_sequence = q.next_sequence;
                q.next_sequence = next_seq(q.next_sequence, b.record_count());
                q.ready.push_back(b);
            }
            Err(e) => broken.push((b, e)),
        }
    }
    broken
}

/// What a partition does about the topic id metadata gives its topic now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Incarnation {
    /// The id the partition already has, or none to compare (metadata without ids).
    Same,
    /// The partition had no id yet: it takes this one.
    Adopt([u8; 16]),
    /// Metadata names this other id, but no later metadata has said so yet: nothing goes out
    /// until a refreshed one does (or names the old id again: the answer was damaged).
    Suspect([u8; 16]),
    /// Another id: the topic was deleted and recreated. Requests to the old one are still in
    /// flight; nothing more goes out until they settle (under Produce v13 the broker answers
    /// them UNKNOWN_TOPIC_ID, and they come back as retries).
    Settle,
    /// Another id and nothing in flight: the batches the deleted topic may hold fail, the rest
    /// start over at sequence 0 in the new topic.
    Recreated { old: [u8; 16], new: [u8; 16] },
}

/// Whether a partition bound to topic id `bound` (if any) is still in the topic metadata of
/// `generation` calls `current`, `in_flight` batches being unsettled, and another id seen
/// before (`seen`: which, in what generation). Pure.
///
/// A change takes two metadata answers: one flipped bit in a Metadata answer's topic id would
/// otherwise fail the batches the topic may hold and start the others over at sequence 0 under
/// an id no broker knows, and again under the real one when the next answer named it.
pub(crate) fn incarnation(
    bound: Option<[u8; 16]>,
    current: Option<[u8; 16]>,
    in_flight: usize,
    seen: Option<([u8; 16], u64)>,
    generation: u64,
) -> Incarnation {
    let Some(current) = current.filter(|id| *id != [0; 16]) else {
        return Incarnation::Same;
    };
    let confirmed = seen.is_some_and(|(id, g)| id == current && generation > g);
    match bound {
        None => Incarnation::Adopt(current),
        Some(old) if old == current => Incarnation::Same,
        Some(_) if !confirmed => Incarnation::Suspect(current),
        Some(_) if in_flight > 0 => Incarnation::Settle,
        Some(old) => Incarnation::Recreated { old, new: current },
    }
}

/// The partition's topic was recreated (`Incarnation::Recreated`) and nothing is in flight:
/// a batch the deleted topic may hold (an attempt went unanswered) fails rather than be written
/// a second time, to the new topic; the others (never sent, or refused, e.g. UNKNOWN_TOPIC_ID)
/// are renumbered from 0, as the first writes of this producer to a partition the broker has no
/// state for.
fn start_over_in_new_topic(
    tp: &TopicPartition,
    q: &mut PartitionQueue,
    (old, new): ([u8; 16], [u8; 16]),
    identity: Option<Identity>,
    transactional: bool,
    out: &mut Drained,
) {
    let (maybe_written, rest): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut q.ready)
        .into_iter()
        .partition(|b| b.maybe_written);
    q.ready = rest;
    tracing::warn!(topic = %tp.topic, partition = tp.partition, old_id = %uuid::Uuid::from_bytes(old), new_id = %uuid::Uuid::from_bytes(new), failed_batches = maybe_written.len(), "topic deleted and recreated under a new id; failing what the old one may hold, starting sequences over");
    for b in maybe_written {
        let e = crate::client::Error::RecreatedWhileInFlight {
            topic: tp.topic.clone(),
            partition: tp.partition,
            records: b.record_count(),
            old_id: uuid::Uuid::from_bytes(old),
            new_id: uuid::Uuid::from_bytes(new),
        };
        out.recreated.push((b, e));
    }
    for (b, e) in renumber(q, identity, transactional) {
        out.recreated.push((b, crate::client::Error::Record(e)));
    }
    q.last_acked_offset = -1;
    q.topic_id = Some(new);
}

/// Sequence numbers wrap from i32::MAX to 0, as the broker expects.
pub(crate) fn next_seq(seq: i32, count: usize) -> i32 {
    ((seq as i64 + count as i64) % (i32::MAX as i64 + 1)) as i32
}

/// Closes the partition's open batch into a ready one. Returns the buffer.memory to release
/// when encoding failed (its records are then failed with the encoding error).
pub(crate) fn close_open(
    tp: &TopicPartition,
    q: &mut PartitionQueue,
    identity: Option<Identity>,
    transactional: bool,
) -> u32 {
    let Some(open) = q.open.take() else {
        return 0;
    };
    let fields = match identity {
        Some(id) => ProducerFields {
            producer_id: id.producer_id,
            producer_epoch: id.epoch,
            base_sequence: q.next_sequence,
            transactional,
        },
        None => ProducerFields::NONE,
    };
    let data = match open.builder.finish(fields) {
        Ok(data) => data,
        Err(e) => {
            let err = crate::client::Error::Record(e);
            for d in open.deliveries {
                d.tx.send(Err(err.clone()));
            }
            return open.memory;
        }
    };
    let count = open.deliveries.len();
    let base_sequence = fields.base_sequence;
    if identity.is_some() {
        q.next_sequence = next_seq(q.next_sequence, count);
    }
    let order = q.next_order;
    q.next_order += 1;
    q.ready.push_back(ProducerBatch {
        tp: tp.clone(),
        data,
        deliveries: open.deliveries,
        created: open.created,
        order,
        base_sequence,
        attempts: 0,
        retry_at: None,
        last_error: None,
        memory: open.memory,
        topic_id: [0; 16],
        maybe_written: false,
        _flush: open.flush,
    });
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_order_survives_the_wrap() {
        assert!(seq_after(5, 3));
        assert!(!seq_after(3, 5));
        assert!(!seq_after(3, 3));
        assert!(seq_after(2, i32::MAX - 1));
    }

    #[test]
    fn sequences_wrap_to_zero() {
        assert_eq!(next_seq(5, 3), 8);
        assert_eq!(next_seq(i32::MAX, 1), 0);
        assert_eq!(next_seq(i32::MAX - 1, 5), 3);
    }

    fn batch(order: u64) -> ProducerBatch {
        ProducerBatch::for_test(order, -1, 1)
    }

    fn record(value: &[u8]) -> NewRecord<'_> {
        NewRecord {
            timestamp: 0,
            key: None,
            value: Some(value),
            headers: &[],
        }
    }

    fn delivery() -> Delivery {
        Delivery {
            tx: Reply::future(oneshot::channel().0),
            timestamp: 0,
        }
    }

    #[test]
    fn a_batch_holds_one_flush_ticket_per_epoch_its_records_were_sent_in() {
        let mut acc = Accumulator::default();
        let flushes = acc.flushes.clone();
        let tp = TopicPartition::new("t", 0);
        for _ in 0..3 {
            acc.append(
                &tp,
                Compression::None,
                1 << 20,
                record(b"a"),
                delivery(),
                10,
            );
        }
        let first = flushes.close_epoch();
        // Sent after the flush was called: a second ticket, in the next epoch.
        acc.append(
            &tp,
            Compression::None,
            1 << 20,
            record(b"b"),
            delivery(),
            10,
        );
        acc.append(
            &tp,
            Compression::None,
            1 << 20,
            record(b"c"),
            delivery(),
            10,
        );
        let second = flushes.close_epoch();
        let open = acc.queue(&tp).open.as_ref().expect("open batch");
        assert_eq!(
            open.flush
                .iter()
                .map(FlushTicket::epoch)
                .collect::<Vec<_>>(),
            vec![first, second],
            "a ticket per epoch, not per record"
        );
        assert!(!flushes.drained(first) && !flushes.drained(second));
        // The batch resolved (here: dropped with the accumulator): both flushes are done.
        drop(acc);
        assert!(flushes.drained(first) && flushes.drained(second));
    }

    #[test]
    fn an_abort_drops_only_batches_that_never_went_out() {
        let mut acc = Accumulator::default();
        let tp = TopicPartition::new("t", 0);
        let q = acc.queue(&tp);
        // Batch 3 was sent and waits for its resend; 4 and 5 never left.
        for (order, attempts) in [(3, 1), (4, 0), (5, 0)] {
            let mut b = batch(order);
            b.attempts = attempts;
            q.ready.push_back(b);
        }
        let err = crate::client::Error::TransactionAbortable("aborted".into());
        let (_, _, batches) = acc.fail_unsent(&err, true);
        assert_eq!(batches, 2);
        let left: Vec<u64> = acc.queue(&tp).ready.iter().map(|b| b.order).collect();
        assert_eq!(left, vec![3], "the batch the broker may have written stays");
    }

    #[test]
    fn a_failed_producer_fails_every_queued_batch() {
        let mut acc = Accumulator::default();
        let tp = TopicPartition::new("t", 0);
        for (order, attempts) in [(3, 1), (4, 0)] {
            let mut b = batch(order);
            b.attempts = attempts;
            acc.queue(&tp).ready.push_back(b);
        }
        let err = crate::client::Error::Fenced("fenced".into());
        let (_, _, batches) = acc.fail_unsent(&err, false);
        assert_eq!(
            batches, 2,
            "nothing will be resent: the sent batch fails too"
        );
        assert!(acc.queue(&tp).ready.is_empty());
    }

    #[test]
    fn retried_batches_go_back_in_creation_order() {
        let mut q = PartitionQueue::default();
        q.ready.push_back(batch(7));
        // Responses for 3, 4, 5 fail in that order; each goes back before later batches.
        for o in [3, 4, 5] {
            q.requeue(batch(o));
        }
        let orders: Vec<u64> = q.ready.iter().map(|b| b.order).collect();
        assert_eq!(orders, vec![3, 4, 5, 7]);
    }
}

#[cfg(test)]
mod drain_tests {
    use super::*;
    use std::time::Duration;

    const CONFIG: DrainConfig = DrainConfig {
        linger: Duration::from_millis(5),
        delivery_timeout: Duration::from_secs(60),
        max_in_flight: 5,
        retry_backoff: Duration::from_millis(100),
    };
    const LEADER: i32 = 1;

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    fn ready(order: u64, base_sequence: i32, attempts: u32, created: Instant) -> ProducerBatch {
        ProducerBatch {
            created,
            ..ProducerBatch::for_test(order, base_sequence, attempts)
        }
    }

    /// The cluster as a test round sees it: every partition led by `leader`, every topic
    /// called `id`.
    struct View {
        leader: Option<i32>,
        id: Option<[u8; 16]>,
        generation: u64,
    }

    impl ClusterView for View {
        fn leader(&self, _: &TopicPartition) -> Option<i32> {
            self.leader
        }
        fn topic_id(&self, _: &str) -> Option<[u8; 16]> {
            self.id
        }
        fn generation(&self) -> u64 {
            self.generation
        }
    }

    const LED: View = View {
        leader: Some(LEADER),
        id: None,
        generation: 0,
    };

    /// An idempotent producer whose partition has `n` fresh ready batches (sequences 0..n) and
    /// has already had a batch acknowledged.
    fn acked_partition(n: u64) -> Accumulator {
        let mut acc = Accumulator {
            identity: Some(Identity {
                producer_id: 7,
                epoch: 0,
            }),
            ..Accumulator::default()
        };
        let now = Instant::now();
        let q = acc.queue(&tp());
        q.acked_through = 9;
        q.last_acked_offset = 100;
        for o in 0..n {
            q.ready.push_back(ready(o, 10 + o as i32, 0, now));
        }
        acc
    }

    /// A transactional producer with a transaction open.
    fn in_transaction(tv2: bool) -> TxnSend {
        let mut t = TxnSend::new("x".into());
        for event in [
            TxnEvent::InitStart,
            TxnEvent::InitDone,
            TxnEvent::Begin {
                tv2,
                now: Instant::now(),
            },
        ] {
            assert!(t.step(event).is_ok());
        }
        t
    }

    #[test]
    fn a_failed_producer_sends_nothing_more() {
        let mut acc = acked_partition(1);
        let mut t = in_transaction(true);
        t.fail(
            crate::client::Error::Fenced("fenced".into()),
            Op::TxnProduce,
            false,
        );
        acc.txn = Some(t);
        let d = round(&mut acc, Instant::now(), &CONFIG);
        assert!(d.to_send.is_empty());
    }

    #[test]
    fn an_idempotent_producer_whose_bump_failed_refuses_sends() {
        let mut acc = acked_partition(0);
        assert!(acc.check_can_send().is_ok());
        acc.bump = EpochBump::Failed(crate::client::Error::Fenced("x".into()));
        assert!(acc.check_can_send().is_err());
    }

    /// One round with every partition led by `LEADER` and every leader ready.
    fn round(acc: &mut Accumulator, now: Instant, config: &DrainConfig) -> Drained {
        acc.drain(now, false, config, &LED, |_| true)
    }

    const OLD: [u8; 16] = [1; 16];
    const NEW: [u8; 16] = [2; 16];

    #[test]
    fn a_partition_follows_its_topic_id() {
        use Incarnation::*;
        // NEW seen first in generation 5; metadata of generation 6 names it again.
        let seen = Some((NEW, 5));
        // (bound, metadata now, in flight, seen before, generation, decision)
        let cases = [
            (None, None, 0, None, 5, Same),
            (None, Some([0; 16]), 3, None, 5, Same),
            (None, Some(NEW), 3, None, 5, Adopt(NEW)),
            (Some(OLD), Some(OLD), 3, seen, 6, Same),
            (Some(OLD), None, 0, None, 5, Same),
            (Some(OLD), Some([0; 16]), 0, None, 5, Same),
            // One metadata answer is not believed (a damaged id would do this).
            (Some(OLD), Some(NEW), 0, None, 5, Suspect(NEW)),
            (Some(OLD), Some(NEW), 0, seen, 5, Suspect(NEW)),
            (Some(OLD), Some(NEW), 1, seen, 6, Settle),
            (
                Some(OLD),
                Some(NEW),
                0,
                seen,
                6,
                Recreated { old: OLD, new: NEW },
            ),
        ];
        for (bound, current, in_flight, seen, generation, want) in cases {
            assert_eq!(
                incarnation(bound, current, in_flight, seen, generation),
                want,
                "{bound:?} {current:?} {in_flight} {seen:?} {generation}"
            );
        }
    }

    fn delivery() -> Delivery {
        Delivery {
            tx: Reply::future(oneshot::channel().0),
            timestamp: 0,
        }
    }

    /// Appends one record and closes the batch (real bytes, so that it can be renumbered).
    fn closed_batch(acc: &mut Accumulator, value: &[u8]) {
        let rec = NewRecord {
            timestamp: 0,
            key: None,
            value: Some(value),
            headers: &[],
        };
        acc.append(&tp(), Compression::None, 1 << 20, rec, delivery(), 10);
        let identity = acc.identity;
        assert_eq!(close_open(&tp(), acc.queue(&tp()), identity, false), 0);
    }

    fn at(id: [u8; 16], generation: u64) -> View {
        View {
            leader: Some(LEADER),
            id: Some(id),
            generation,
        }
    }

    /// See `Accumulator::bump_due`: a batch an unanswered attempt may have written goes out
    /// again under the old epoch and sequence before an epoch bump renumbers the queue; only
    /// once the broker said it is not in the log (or acknowledged it) does the bump come.
    #[test]
    fn an_epoch_bump_first_resends_what_an_unanswered_attempt_may_have_written() {
        let old = Identity {
            producer_id: 7,
            epoch: 0,
        };
        let mut acc = Accumulator {
            identity: Some(old),
            ..Accumulator::default()
        };
        let now = Instant::now();
        // The producer epoch of a v2 record batch: bytes 51 and 52.
        let epoch = |b: &ProducerBatch| i16::from_be_bytes([b.data[51], b.data[52]]);
        closed_batch(&mut acc, b"lost");
        let mut d = acc.drain(now, false, &CONFIG, &at(OLD, 1), |_| true);
        let (_, mut lost) = d.to_send.pop().expect("sent");
        // Its answer was lost: it may be in the log.
        lost.attempts = 1;
        lost.maybe_written = true;
        let q = acc.queue(&tp());
        q.in_flight = 0;
        q.requeue(lost);
        closed_batch(&mut acc, b"never sent");
        // A batch of another partition failed: a sequence gap may exist.
        acc.need_bump();
        let mut d = acc.drain(now, false, &CONFIG, &at(OLD, 1), |_| true);
        assert_eq!(d.bump_now, None, "no bump while it may be in the log");
        let (_, mut again) = d.to_send.pop().expect("the lost batch, again");
        assert!(d.to_send.is_empty(), "nothing else goes out before the bump");
        assert_eq!((again.order, again.base_sequence, epoch(&again)), (0, 0, 0));
        // In flight: still no bump.
        let d = acc.drain(now, false, &CONFIG, &at(OLD, 1), |_| true);
        assert_eq!((d.bump_now, d.to_send.len()), (None, 0));
        // The broker refused it as out of order: not in the log after all (the sender clears
        // the flag, `verdict::refused_as_unwritten`).
        again.maybe_written = false;
        let q = acc.queue(&tp());
        q.in_flight = 0;
        q.requeue(again);
        let d = acc.drain(now, false, &CONFIG, &at(OLD, 1), |_| true);
        assert_eq!(d.bump_now, Some(old));
        acc.rebase(Identity { epoch: 1, ..old });
        let queue: Vec<(u64, i32, i16, bool)> = acc
            .queue(&tp())
            .ready
            .iter()
            .map(|b| (b.order, b.base_sequence, epoch(b), b.maybe_written))
            .collect();
        assert_eq!(queue, vec![(0, 0, 1, false), (1, 1, 1, false)]);
    }

    #[test]
    fn a_recreated_topic_fails_what_the_old_one_may_hold_and_renumbers_the_rest_from_zero() {
        let mut acc = Accumulator {
            identity: Some(Identity {
                producer_id: 7,
                epoch: 0,
            }),
            ..Accumulator::default()
        };
        let now = Instant::now();
        // Batch 0 (sequence 0) goes out under the old id and comes back for a retry.
        closed_batch(&mut acc, b"sent");
        let mut d = acc.drain(now, false, &CONFIG, &at(OLD, 1), |_| true);
        let (_, mut sent) = d.to_send.pop().expect("sent");
        assert_eq!(sent.topic_id, OLD, "stamped with the id it went under");
        // Its response was lost.
        sent.attempts = 1;
        sent.maybe_written = true;
        let q = acc.queue(&tp());
        q.in_flight = 0;
        q.acked_through = 4;
        q.last_acked_offset = 40;
        q.requeue(sent);
        // Batch 1 (sequence 1) was refused (UNKNOWN_TOPIC_ID: not written); batch 2 never left.
        closed_batch(&mut acc, b"refused");
        acc.queue(&tp()).ready.back_mut().expect("batch 1").attempts = 1;
        closed_batch(&mut acc, b"unsent");
        assert_eq!(
            acc.queue(&tp()).ready.back().map(|b| b.base_sequence),
            Some(2)
        );

        // One metadata answer naming NEW is not believed: nothing moves, metadata is asked.
        let d = acc.drain(now, false, &CONFIG, &at(NEW, 2), |_| true);
        assert!(d.recreated.is_empty() && d.to_send.is_empty() && d.missing_leader);
        let d = acc.drain(now, false, &CONFIG, &at(NEW, 3), |_| true);
        assert_eq!(d.recreated.len(), 1);
        let (failed, e) = &d.recreated[0];
        assert_eq!(failed.order, 0);
        assert!(
            matches!(
                e,
                crate::client::Error::RecreatedWhileInFlight { records: 1, .. }
            ),
            "{e}"
        );
        assert_eq!(d.to_send.len(), 1);
        let next = &d.to_send[0].1;
        assert_eq!((next.order, next.base_sequence), (1, 0));
        assert_eq!(next.topic_id, NEW);
        let q = acc.queue(&tp());
        let rest: Vec<(u64, i32)> = q.ready.iter().map(|b| (b.order, b.base_sequence)).collect();
        assert_eq!(rest, vec![(2, 1)]);
        assert_eq!(
            (q.next_sequence, q.acked_through, q.last_acked_offset),
            (2, -1, -1)
        );
        assert_eq!(q.topic_id, Some(NEW));
    }

    #[test]
    fn nothing_goes_to_a_recreated_topic_while_requests_to_the_old_one_are_unsettled() {
        let mut acc = acked_partition(2);
        let q = acc.queue(&tp());
        q.topic_id = Some(OLD);
        q.in_flight = 1;
        q.in_flight_leader = Some(LEADER);
        let now = Instant::now();
        acc.drain(now, false, &CONFIG, &at(NEW, 1), |_| true);
        let d = acc.drain(now, false, &CONFIG, &at(NEW, 2), |_| true);
        assert!(d.to_send.is_empty() && d.recreated.is_empty());
        assert_eq!(acc.queue(&tp()).ready.len(), 2);
    }

    fn sent_orders(d: &Drained) -> Vec<u64> {
        d.to_send.iter().map(|(_, b)| b.order).collect()
    }

    #[test]
    fn a_retry_waits_while_its_partition_has_something_in_flight() {
        let mut acc = acked_partition(0);
        let now = Instant::now();
        let q = acc.queue(&tp());
        q.ready.push_back(ready(0, 10, 1, now));
        q.in_flight = 1;
        q.in_flight_leader = Some(LEADER);
        assert!(round(&mut acc, now, &CONFIG).to_send.is_empty());
        let q = acc.queue(&tp());
        q.in_flight = 0;
        q.in_flight_leader = None;
        assert_eq!(sent_orders(&round(&mut acc, now, &CONFIG)), vec![0]);
    }

    #[test]
    fn a_retry_waits_for_its_backoff() {
        let mut acc = acked_partition(0);
        let now = Instant::now();
        let mut b = ready(0, 10, 1, now);
        b.retry_at = Some(now + Duration::from_secs(1));
        acc.queue(&tp()).ready.push_back(b);
        let d = round(&mut acc, now, &CONFIG);
        assert!(d.to_send.is_empty());
        assert_eq!(d.next_wake, Some(now + Duration::from_secs(1)));
        let later = now + Duration::from_secs(1);
        assert_eq!(sent_orders(&round(&mut acc, later, &CONFIG)), vec![0]);
    }

    #[test]
    fn only_one_batch_is_in_flight_before_the_first_ack() {
        let mut acc = acked_partition(2);
        let q = acc.queue(&tp());
        q.acked_through = -1;
        q.last_acked_offset = -1;
        let now = Instant::now();
        assert_eq!(sent_orders(&round(&mut acc, now, &CONFIG)), vec![0]);
        assert!(round(&mut acc, now, &CONFIG).to_send.is_empty());
        // The first batch is acknowledged (still counting one in flight would not matter).
        acc.queue(&tp()).acked_through = 10;
        assert_eq!(sent_orders(&round(&mut acc, now, &CONFIG)), vec![1]);
    }

    #[test]
    fn nothing_goes_to_a_new_leader_while_the_old_has_requests_in_flight() {
        let mut acc = acked_partition(1);
        let q = acc.queue(&tp());
        q.in_flight = 1;
        q.in_flight_leader = Some(LEADER + 1);
        let now = Instant::now();
        assert!(round(&mut acc, now, &CONFIG).to_send.is_empty());
        acc.queue(&tp()).in_flight_leader = Some(LEADER);
        assert_eq!(sent_orders(&round(&mut acc, now, &CONFIG)), vec![0]);
    }

    #[test]
    fn max_in_flight_is_respected() {
        let mut acc = acked_partition(3);
        let config = DrainConfig {
            max_in_flight: 2,
            ..CONFIG
        };
        let now = Instant::now();
        assert_eq!(sent_orders(&round(&mut acc, now, &config)), vec![0]);
        assert_eq!(sent_orders(&round(&mut acc, now, &config)), vec![1]);
        assert!(round(&mut acc, now, &config).to_send.is_empty());
        assert_eq!(acc.queue(&tp()).in_flight, 2);
    }

    #[test]
    fn an_expired_batch_with_a_sequence_reports_a_gap_and_asks_for_a_bump() {
        let mut acc = acked_partition(0);
        let now = Instant::now() + Duration::from_secs(120);
        let old = now - CONFIG.delivery_timeout;
        acc.queue(&tp()).ready.push_back(ready(0, 10, 0, old));
        let d = round(&mut acc, now, &CONFIG);
        assert_eq!(d.expired.len(), 1);
        assert!(d.gap);
        assert!(d.to_send.is_empty());
        assert!(matches!(acc.bump, EpochBump::Needed));
        // Nothing is in flight: the next round bumps, and sends nothing until then.
        acc.queue(&tp()).ready.push_back(ready(1, 11, 0, now));
        let d = round(&mut acc, now, &CONFIG);
        assert_eq!(d.bump_now, acc.identity);
        assert!(d.to_send.is_empty());
    }

    #[test]
    fn an_expired_batch_without_a_sequence_leaves_no_gap() {
        let mut acc = Accumulator::default();
        let now = Instant::now() + Duration::from_secs(120);
        let old = now - CONFIG.delivery_timeout;
        acc.queue(&tp()).ready.push_back(ready(0, -1, 0, old));
        let d = round(&mut acc, now, &CONFIG);
        assert_eq!(d.expired.len(), 1);
        assert!(!d.gap);
        assert!(matches!(acc.bump, EpochBump::NotNeeded));
    }

    #[test]
    fn an_expired_batch_in_a_transaction_dooms_it() {
        let mut acc = acked_partition(0);
        acc.txn = Some(in_transaction(true));
        let now = Instant::now() + Duration::from_secs(120);
        let old = now - CONFIG.delivery_timeout;
        acc.queue(&tp()).ready.push_back(ready(0, 10, 0, old));
        let d = round(&mut acc, now, &CONFIG);
        assert!(d.gap);
        assert!(
            matches!(acc.bump, EpochBump::NotNeeded),
            "a transactional epoch is never bumped by the sender"
        );
        let phase = acc.txn.as_ref().map(|t| t.phase.name());
        assert_eq!(phase, Some("AbortableError"));
    }

    #[test]
    fn a_partition_not_yet_added_is_not_sent_under_the_classic_protocol() {
        let mut acc = acked_partition(1);
        acc.txn = Some(in_transaction(false));
        let now = Instant::now();
        let d = round(&mut acc, now, &CONFIG);
        assert!(d.to_send.is_empty());
        assert_eq!(d.to_add, vec![tp()]);
        // One AddPartitionsToTxn at a time.
        let d = round(&mut acc, now, &CONFIG);
        assert!(d.to_add.is_empty());
        assert!(d.to_send.is_empty());
        if let Some(t) = acc.txn.as_mut() {
            t.adding = false;
            if let Some(open) = t.phase.open_mut() {
                open.added.insert(tp());
            }
        }
        let d = round(&mut acc, now, &CONFIG);
        assert_eq!(sent_orders(&d), vec![0]);
        let started = acc
            .txn
            .as_ref()
            .and_then(|t| t.phase.open())
            .map(|o| o.started);
        assert_eq!(started, Some(true));
    }

    #[test]
    fn kip_890_partitions_need_no_add() {
        let mut acc = acked_partition(1);
        acc.txn = Some(in_transaction(true));
        let d = round(&mut acc, Instant::now(), &CONFIG);
        assert_eq!(sent_orders(&d), vec![0]);
        assert!(d.to_add.is_empty());
    }

    #[test]
    fn a_leader_that_is_not_ready_is_skipped_and_asked_once() {
        let mut acc = acked_partition(1);
        let other = TopicPartition::new("t", 1);
        let mut b = ready(0, 0, 0, Instant::now());
        b.tp = other.clone();
        acc.queue(&other).ready.push_back(b);
        let mut asked = 0;
        let d = acc.drain(Instant::now(), false, &CONFIG, &LED, |_| {
            asked += 1;
            false
        });
        assert!(d.to_send.is_empty());
        assert_eq!(asked, 1);
        assert_eq!(acc.total_in_flight(), 0);
    }

    #[test]
    fn a_partition_without_a_leader_asks_for_metadata() {
        let mut acc = acked_partition(1);
        let now = Instant::now();
        let no_leader = View {
            leader: None,
            id: None,
            generation: 0,
        };
        let d = acc.drain(now, false, &CONFIG, &no_leader, |_| true);
        assert!(d.to_send.is_empty());
        assert!(d.missing_leader);
        assert_eq!(d.next_wake, Some(now + CONFIG.retry_backoff));
    }

    #[test]
    fn sending_is_held_until_the_epoch_bump_and_its_wait_for_in_flight() {
        let mut acc = acked_partition(2);
        acc.bump = EpochBump::Needed;
        acc.queue(&tp()).in_flight = 1;
        acc.queue(&tp()).in_flight_leader = Some(LEADER);
        let d = round(&mut acc, Instant::now(), &CONFIG);
        assert!(d.to_send.is_empty());
        assert_eq!(d.bump_now, None, "something is still in flight");
        acc.queue(&tp()).in_flight = 0;
        let d = round(&mut acc, Instant::now(), &CONFIG);
        assert!(d.to_send.is_empty());
        assert_eq!(d.bump_now, acc.identity);
    }
}
