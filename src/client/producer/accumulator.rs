//! Per-partition record buffers: the open batch being filled, and closed batches waiting for
//! the sender; and, for the idempotent producer, each partition's sequence numbers.
//!
//! A batch's life (see DESIGN.md): records are appended to the partition's *open* batch until it
//! reaches batch.size or linger.ms passes (or flush/close asks); then it is *closed*: given its
//! base sequence and encoded once into the bytes that go on the wire, and queued as *ready*. The
//! sender takes ready batches (at most max.in.flight per partition). A batch that fails with a
//! retriable error goes back into its queue in creation order, and resends the same bytes, so its
//! sequence number never changes on a retry. Only an epoch bump rewrites the producer fields of
//! unsent batches, renumbering them from 0 under the new epoch.

use super::{RecordMetadata, Result};
use crate::client::metadata::TopicPartition;
use crate::protocol::records::{
    rewrite_producer_fields, BatchBuilder, Compression, Header, ProducerFields, RecordError,
};
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;
use tokio::sync::oneshot;

/// The producer id and epoch every batch carries when idempotence is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub producer_id: i64,
    pub epoch: i16,
}

/// Where one record's outcome goes.
pub(crate) struct Delivery {
    pub tx: oneshot::Sender<Result<RecordMetadata>>,
    pub timestamp: i64,
    /// Released when the delivery is dropped, after `tx` was used: what `flush` waits for.
    pub _flush: super::flush::FlushTicket,
}

/// The batch being filled.
pub(crate) struct OpenBatch {
    pub builder: BatchBuilder,
    pub created: Instant,
    pub deliveries: Vec<Delivery>,
    pub memory: u32,
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
    /// buffer.memory permits held until the batch completes.
    pub memory: u32,
}

impl ProducerBatch {
    pub fn record_count(&self) -> usize {
        self.deliveries.len()
    }

    /// Resolves every record of the batch.
    pub fn complete(self, base_offset: i64, log_append_time: i64) -> u32 {
        let tp = self.tp;
        for (i, d) in self.deliveries.into_iter().enumerate() {
            let offset = if base_offset >= 0 {
                base_offset + i as i64
            } else {
                -1
            };
            let _ = d.tx.send(Ok(RecordMetadata {
                topic: tp.topic.clone(),
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
            let _ = d.tx.send(Err(err.clone()));
        }
        self.memory
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

/// What the sender needs to know about the open transaction.
pub(crate) struct TxnSend {
    pub transactional_id: String,
    /// KIP-890 (transaction.version 2) for this transaction: partitions join implicitly with
    /// the produce, EndTxn bumps the epoch. Fixed when the transaction begins.
    pub tv2: bool,
    /// Where the producer is in its transactional life; moved only through
    /// [`super::txn_phase::next`].
    pub phase: super::txn_phase::TxnPhase,
    /// Partitions the coordinator has added to the transaction (classic protocol).
    pub added: HashSet<TopicPartition>,
    /// An AddPartitionsToTxn request is in flight.
    pub adding: bool,
    /// Something may have reached the broker in this transaction (a produce or offsets): the
    /// transaction must be ended with EndTxn.
    pub started: bool,
    /// The first error that dooms this transaction; commit refuses, abort clears it.
    pub error: Option<crate::client::Error>,
    /// When the transaction began, to tell a transaction.timeout.ms expiry from fencing.
    pub began: Option<Instant>,
    /// The broker no longer accepts this producer id and epoch for the transaction
    /// (INVALID_PRODUCER_EPOCH or UNKNOWN_PRODUCER_ID on a produce, or the coordinator aborted
    /// it): EndTxn would be refused, so the abort re-initializes with InitProducerId(current
    /// id and epoch) instead (KIP-360, KIP-588).
    pub reinit: bool,
}

impl TxnSend {
    /// Moves the phase by `event`, or says why it cannot.
    pub fn step(&mut self, event: super::txn_phase::TxnEvent) -> super::Result<()> {
        self.phase = super::txn_phase::next(self.phase, event)?;
        Ok(())
    }

    pub fn new(transactional_id: String) -> Self {
        TxnSend {
            transactional_id,
            tv2: false,
            phase: super::txn_phase::TxnPhase::Uninitialized,
            added: HashSet::new(),
            adding: false,
            started: false,
            error: None,
            began: None,
            reinit: false,
        }
    }
}

/// All partitions' buffers.
#[derive(Default)]
pub(crate) struct Accumulator {
    /// Transactional state, when transactional.id is set.
    pub txn: Option<TxnSend>,
    pub partitions: HashMap<TopicPartition, PartitionQueue>,
    /// The sticky partition of each topic for keyless records.
    pub sticky: HashMap<String, i32>,
    /// Producer id and epoch, when idempotence is on.
    pub identity: Option<Identity>,
    /// Set when a sequence gap may exist (a batch with a sequence failed or expired, or the
    /// broker reported OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID). The sender then
    /// stops sending, waits for everything in flight to settle, bumps the epoch and renumbers.
    pub bump_needed: bool,
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
    /// Whether a record may be appended now: always without transactions; inside an open
    /// transaction that is not doomed otherwise.
    pub fn check_can_send(&self) -> super::Result<()> {
        let Some(t) = &self.txn else {
            return Ok(());
        };
        super::txn_phase::next(t.phase, super::txn_phase::TxnEvent::Use("send()"))?;
        match &t.error {
            // As the Java client: once the transaction is doomed, sends fail with its error
            // until it is aborted.
            // (The error keeps its class, abortable or fatal.)
            Some(e) => Err(e.clone()),
            None => Ok(()),
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
    /// in flight, so no batch with an old sequence can still land.
    pub fn rebase(&mut self, identity: Identity) -> Vec<(ProducerBatch, RecordError)> {
        self.identity = Some(identity);
        self.bump_needed = false;
        let transactional = self.txn.is_some();
        let mut broken = Vec::new();
        for q in self.partitions.values_mut() {
            q.next_sequence = 0;
            q.acked_through = -1;
            let ready = std::mem::take(&mut q.ready);
            for mut b in ready {
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
                        b.base_sequence = q.next_sequence;
                        q.next_sequence = next_seq(q.next_sequence, b.record_count());
                        q.ready.push_back(b);
                    }
                    Err(e) => broken.push((b, e)),
                }
            }
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
    pub fn fail_unsent(&mut self, err: &crate::client::Error) -> (u32, usize, usize) {
        let (mut mem, mut n, mut batches) = (0u32, 0usize, 0usize);
        for q in self.partitions.values_mut() {
            if let Some(open) = q.open.take() {
                n += open.deliveries.len();
                mem += open.memory;
                batches += 1;
                for d in open.deliveries {
                    let _ = d.tx.send(Err(err.clone()));
                }
            }
            let first_unsent = q
                .ready
                .iter()
                .position(|b| b.attempts == 0)
                .unwrap_or(q.ready.len());
            debug_assert!(q.ready.iter().skip(first_unsent).all(|b| b.attempts == 0));
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

    /// Batches in flight across all partitions.
    pub fn total_in_flight(&self) -> usize {
        self.partitions.values().map(|q| q.in_flight).sum()
    }
}

/// Whether sequence `a` comes after `b`, allowing for the wrap at i32::MAX: `a` is ahead by
/// less than half the sequence space.
pub(crate) fn seq_after(a: i32, b: i32) -> bool {
    let diff = (a as i64 - b as i64).rem_euclid(i32::MAX as i64 + 1);
    diff > 0 && diff < (1 << 30)
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
                let _ = d.tx.send(Err(err.clone()));
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
        memory: open.memory,
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
        ProducerBatch {
            tp: TopicPartition::new("t", 0),
            data: Bytes::new(),
            deliveries: Vec::new(),
            created: Instant::now(),
            order,
            base_sequence: -1,
            attempts: 1,
            retry_at: None,
            memory: 0,
        }
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
        let err = crate::client::Error::InvalidState("aborted".into());
        let (_, _, batches) = acc.fail_unsent(&err);
        assert_eq!(batches, 2);
        let left: Vec<u64> = acc.queue(&tp).ready.iter().map(|b| b.order).collect();
        assert_eq!(left, vec![3], "the batch the broker may have written stays");
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
