//! The sender task: closes batches, sends them to partition leaders, handles responses.
//!
//! One task per producer. Each round it
//! 1. closes open batches whose linger.ms passed or that filled up (all of them on flush/close);
//! 2. fails ready batches past delivery.timeout.ms;
//! 3. if a sequence gap may exist, sends nothing until every request in flight has settled,
//!    then bumps the epoch and renumbers (see `producer_id`);
//! 4. takes the head ready batch of every partition that may send (room in flight, the same
//!    leader as what is in flight, and for a retry: nothing else in flight, so a retried batch
//!    always goes out before anything with a higher sequence; and a leader whose connection is
//!    ready: a leader that is not is skipped this round and connected to in the background);
//! 5. groups them by leader and puts one Produce request per broker on the wire.
//!
//! Responses are handled in their own tasks, which resolve records, or put retriable batches
//! back in creation order, and wake the sender.

use super::accumulator::{close_open, ProducerBatch};
use super::metrics::Counters;
use super::{producer_id, Inner};
use crate::client::cluster::{backoff, NodeState};
use crate::client::config::Acks;
use crate::client::connection::Connection;
use crate::client::error::{Error, ErrorClass, Op};
use crate::protocol::ErrorCode;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::{debug, debug_span, warn, Instrument};

/// Produce v13 addresses topics by id; v12 (KIP-890's first version) is the newest by name.
const MAX_PRODUCE_VERSION: i16 = 12;

/// What the sender does with a partition whose leader is `state` this round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaderReadiness {
    /// The connection is up: send.
    Send,
    /// Not ready: leave the partition's batches queued and go on with the other brokers.
    /// `start_connect`: no background connect of ours is under way for it yet, start one (it
    /// wakes the sender when it ends, whatever the outcome).
    Skip { start_connect: bool },
}

/// The ready check, per leader (the Java Sender's `ready` + `initiateConnect`). Waiting for a
/// connect inside the round, as the sender once did, held every partition on healthy brokers
/// up for the connect and ApiVersions timeouts of one unreachable leader.
fn leader_readiness(state: &NodeState, connect_pending: bool) -> LeaderReadiness {
    match state {
        NodeState::Ready(_) => LeaderReadiness::Send,
        // Even when someone else (a consumer sharing the pool, a metadata refresh) is
        // connecting, our own task waits for that connect and wakes us when it ends.
        NodeState::Connecting | NodeState::BackingOff(_) | NodeState::Disconnected => {
            LeaderReadiness::Skip {
                start_connect: !connect_pending,
            }
        }
    }
}

/// Connects to `leader` in the background (after its backoff, if any), then wakes the sender.
/// A failed connect also refreshes metadata: the leader may have moved off a dead broker.
fn start_connect(inner: &Arc<Inner>, connecting: &Arc<Mutex<HashSet<i32>>>, leader: i32) {
    connecting
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(leader);
    let (inner, connecting) = (inner.clone(), connecting.clone());
    tokio::spawn(async move {
        let result = inner.cluster.broker(leader).await;
        connecting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&leader);
        if let Err(e) = result {
            debug!(leader, error = %e, "connect to partition leader failed");
            let g = inner.cluster.metadata().generation;
            let _ = inner.cluster.refresh_if_older(g).await;
        }
        inner.wake.notify_one();
    });
}

pub(crate) async fn run(inner: Arc<Inner>) {
    // Leaders a background connect of ours is under way for.
    let connecting: Arc<Mutex<HashSet<i32>>> = Arc::default();
    loop {
        let now = Instant::now();
        let closing = inner.closed.load(Ordering::Acquire);
        let flushing = closing || inner.flushing.load(Ordering::Acquire) > 0;
        let mut next_wake: Option<Instant> = None;
        let mut to_send: Vec<(i32, ProducerBatch)> = Vec::new();
        let mut expired: Vec<ProducerBatch> = Vec::new();
        let mut released = 0u32;
        let mut missing_leader = false;
        let mut bump_now = None;
        let mut to_add: Vec<crate::client::TopicPartition> = Vec::new();
        // Each leader's connection, checked once per round: None when not ready.
        let mut leaders: HashMap<i32, Option<Arc<Connection>>> = HashMap::new();
        let mut to_connect: Vec<i32> = Vec::new();
        let meta = inner.cluster.metadata();
        let idle;
        {
            let mut acc = inner.lock();
            let identity = acc.identity;
            let transactional = acc.txn.is_some();
            // A doomed transaction sends nothing more: its batches fail at once, so that
            // commit reports the error and abort does not wait for them.
            let doomed = acc.txn.as_ref().and_then(|t| t.error.clone());
            if let Some(err) = &doomed {
                let (mem, n, batches) = acc.fail_unsent(err);
                if n > 0 {
                    inner.release(mem);
                    Counters::add(&inner.counters.batches_failed, batches as u64);
                }
            }
            // Classic protocol: a partition joins the transaction (AddPartitionsToTxn) before
            // anything is produced to it.
            let needs_add: Option<HashSet<crate::client::TopicPartition>> =
                acc.txn.as_ref().filter(|t| !t.tv2).map(|t| t.added.clone());
            let mut wanted_add: HashSet<crate::client::TopicPartition> = HashSet::new();
            let bumping = acc.bump_needed && identity.is_some() && !transactional;
            if bumping && acc.total_in_flight() == 0 {
                bump_now = identity;
            }
            let mut gap = false;
            for (tp, q) in acc.partitions.iter_mut() {
                if let Some(open) = &q.open {
                    let due = open.created + inner.config.linger;
                    if flushing || due <= now {
                        released += close_open(tp, q, identity, transactional);
                    } else {
                        next_wake = min_instant(next_wake, due);
                    }
                }
                // Expire batches that waited too long. Never ones in flight: their fate is
                // decided by the response.
                while q
                    .ready
                    .front()
                    .is_some_and(|b| b.created + inner.config.delivery_timeout <= now)
                {
                    if let Some(b) = q.ready.pop_front() {
                        gap |= b.base_sequence >= 0;
                        expired.push(b);
                    }
                }
                if let Some(b) = q.ready.front() {
                    next_wake = min_instant(next_wake, b.created + inner.config.delivery_timeout);
                }
                if bumping || q.in_flight >= inner.config.max_in_flight {
                    continue;
                }
                let Some(head) = q.ready.front() else {
                    continue;
                };
                if let Some(added) = &needs_add {
                    if !added.contains(tp) {
                        wanted_add.insert(tp.clone());
                        continue;
                    }
                }
                if let Some(at) = head.retry_at.filter(|at| *at > now) {
                    next_wake = min_instant(next_wake, at);
                    continue;
                }
                // A retry waits until everything sent after it has settled, so it is the
                // first of its partition the broker sees again.
                if head.attempts > 0 && q.in_flight > 0 {
                    continue;
                }
                // Until the partition has acknowledged a batch (per epoch), only one goes out.
                // A broker with no state for this producer accepts any first sequence: had
                // batch 1 succeeded while batch 0 hit NOT_LEADER_OR_FOLLOWER, batch 0 could
                // never be written in order again. Without idempotence the same rule keeps a
                // new topic's first retry from reordering records.
                if q.last_acked_offset < 0 && q.acked_through < 0 && q.in_flight > 0 {
                    continue;
                }
                let Some(leader) = meta.leader(tp) else {
                    missing_leader = true;
                    next_wake = min_instant(next_wake, now + inner.config.client.retry_backoff);
                    continue;
                };
                // Nothing goes to a new leader while requests to the old one are unsettled.
                if q.in_flight > 0 && q.in_flight_leader != Some(leader) {
                    continue;
                }
                let conn = leaders.entry(leader).or_insert_with(|| {
                    let state = inner.cluster.node_state(leader);
                    let pending = connecting
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .contains(&leader);
                    match (leader_readiness(&state, pending), state) {
                        (LeaderReadiness::Send, NodeState::Ready(c)) => Some(c),
                        (LeaderReadiness::Skip { start_connect }, _) => {
                            if start_connect {
                                to_connect.push(leader);
                            }
                            None
                        }
                        (LeaderReadiness::Send, _) => None,
                    }
                });
                if conn.is_none() {
                    continue;
                }
                if let Some(b) = q.ready.pop_front() {
                    q.in_flight += 1;
                    q.in_flight_leader = Some(leader);
                    to_send.push((leader, b));
                }
            }
            if gap && identity.is_some() {
                if let Some(t) = acc.txn.as_mut() {
                    t.error.get_or_insert(Error::Timeout {
                        what: "delivery of records in the transaction (delivery.timeout.ms)".into(),
                        after: inner.config.delivery_timeout,
                    });
                } else {
                    debug!("expired batches left a sequence gap; epoch bump needed");
                    acc.bump_needed = true;
                }
            }
            if let Some(t) = acc.txn.as_mut() {
                t.started |= !to_send.is_empty();
                if !wanted_add.is_empty() && !t.adding {
                    t.adding = true;
                    to_add = wanted_add.into_iter().collect();
                }
            }
            idle = acc.partitions.values().all(|q| q.is_idle());
            if idle {
                // Forget partitions with nothing buffered so the map does not grow forever;
                // their sequence state must survive, so only without idempotence.
                if identity.is_none() {
                    acc.partitions.clear();
                }
            }
        }
        if released > 0 {
            inner.release(released);
        }
        for b in expired {
            let n = b.record_count();
            let what = format!(
                "delivery of {n} record(s) to {} (delivery.timeout.ms)",
                b.tp
            );
            let mem = b.fail(Error::Timeout {
                what,
                after: inner.config.delivery_timeout,
            });
            inner.release(mem);
        }
        if let Some(current) = bump_now {
            bump_epoch(&inner, current).await;
            continue;
        }
        if !to_add.is_empty() {
            tokio::spawn(super::transaction::add_partitions(inner.clone(), to_add));
        }
        for leader in to_connect {
            start_connect(&inner, &connecting, leader);
        }
        if missing_leader {
            let cluster = inner.cluster.clone();
            let g = meta.generation;
            tokio::spawn(async move {
                let _ = cluster.refresh_if_older(g).await;
            });
        }
        let sent_any = !to_send.is_empty();
        if sent_any {
            let mut by_leader: HashMap<i32, Vec<ProducerBatch>> = HashMap::new();
            for (leader, b) in to_send {
                by_leader.entry(leader).or_default().push(b);
            }
            for (leader, batches) in by_leader {
                // Inline, not spawned: the request must be on the wire before the next round
                // sends this partition's next batch, or two requests could pass each other and
                // the broker would see sequences out of order. Never waits: the connection was
                // ready when the batches were taken.
                match leaders.get(&leader) {
                    Some(Some(conn)) => dispatch(&inner, conn, leader, batches),
                    _ => {
                        for b in batches {
                            let e = Error::InvalidState(format!(
                                "no connection to broker {leader} for {}",
                                b.tp
                            ));
                            finish(&inner, b, Err(e));
                        }
                    }
                }
            }
        }
        if closing && idle {
            debug!("producer sender stopped");
            return;
        }
        if sent_any {
            // More batches may be sendable right away (another in-flight slot, another batch).
            tokio::task::yield_now().await;
            continue;
        }
        let notified = inner.wake.notified();
        match next_wake {
            Some(at) => {
                let _ = tokio::time::timeout_at(at.into(), notified).await;
            }
            None => notified.await,
        }
    }
}

/// Bumps the epoch (nothing is in flight) and renumbers every unacknowledged batch.
///
/// A non-transactional producer owns its producer id outright, so, as KIP-360 allows and the
/// Java client does, it bumps the epoch itself: the broker accepts a higher epoch starting again
/// at sequence 0. Only when the epoch is exhausted does it ask InitProducerId for a new id.
async fn bump_epoch(inner: &Arc<Inner>, current: super::accumulator::Identity) {
    let next = if current.epoch < i16::MAX - 1 {
        Ok(super::accumulator::Identity {
            producer_id: current.producer_id,
            epoch: current.epoch + 1,
        })
    } else {
        producer_id::init_producer_id(&inner.cluster, None, inner.config.max_block).await
    };
    match next {
        Ok(next) => {
            warn!(
                producer_id = next.producer_id,
                epoch = next.epoch,
                old_epoch = current.epoch,
                "bumped producer epoch after a possible sequence gap"
            );
            let broken = inner.lock().rebase(next);
            Counters::add(&inner.counters.epoch_bumps, 1);
            for (b, e) in broken {
                let mem = b.fail(Error::Record(e));
                inner.release(mem);
            }
        }
        Err(e) => {
            // Without a new epoch nothing buffered can be sent safely: fail it all, and let the
            // next send see the error.
            warn!(error = %e, "epoch bump failed; failing buffered records");
            let drained: Vec<ProducerBatch> = {
                let mut acc = inner.lock();
                acc.bump_needed = false;
                acc.identity = None;
                *inner.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                acc.partitions
                    .values_mut()
                    .flat_map(|q| q.ready.drain(..).collect::<Vec<_>>())
                    .collect()
            };
            for b in drained {
                let mem = b.fail(e.clone());
                inner.release(mem);
            }
        }
    }
}

fn min_instant(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// What the broker said about one batch.
struct PartitionResult {
    error_code: i16,
    base_offset: i64,
    log_append_time: i64,
    log_start_offset: i64,
}

/// Puts one Produce request with the given batches (one per partition) on the wire to
/// `leader`, and spawns the task that handles its response. Never waits.
fn dispatch(inner: &Arc<Inner>, conn: &Connection, leader: i32, batches: Vec<ProducerBatch>) {
    let span = debug_span!("produce", leader, batches = batches.len());
    let _entered = span.enter();
    {
        let version = match conn.version_for::<ProduceRequest>(Some(MAX_PRODUCE_VERSION)) {
            Ok(v) => v,
            Err(e) => {
                for b in batches {
                    finish(inner, b, Err(e.clone()));
                }
                return;
            }
        };
        let mut topics: Vec<TopicProduceData> = Vec::new();
        for b in &batches {
            let pd = PartitionProduceData::default()
                .with_index(b.tp.partition)
                .with_records(Some(b.data.clone()));
            match topics.iter_mut().find(|t| t.name.0.as_str() == b.tp.topic) {
                Some(t) => t.partition_data.push(pd),
                None => topics.push(
                    TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_string(b.tp.topic.clone())))
                        .with_partition_data(vec![pd]),
                ),
            }
        }
        let timeout_ms = inner
            .config
            .client
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32;
        let transactional_id = inner.lock().txn.as_ref().map(|t| {
            kafka_protocol::messages::TransactionalId(StrBytes::from_string(
                t.transactional_id.clone(),
            ))
        });
        let req = ProduceRequest::default()
            .with_transactional_id(transactional_id)
            .with_acks(inner.config.acks.wire())
            .with_timeout_ms(timeout_ms)
            .with_topic_data(topics);
        if inner.config.acks == Acks::None {
            let sent = conn.send_no_response(&req, version);
            for b in batches {
                let outcome = match &sent {
                    Ok(()) => Ok(PartitionResult {
                        error_code: 0,
                        base_offset: -1,
                        log_append_time: -1,
                        log_start_offset: -1,
                    }),
                    Err(e) => Err(e.clone()),
                };
                finish(inner, b, outcome);
            }
            return;
        }
        let pending = match conn.start_request(&req, version) {
            Ok(p) => p,
            Err(e) => {
                for b in batches {
                    finish(inner, b, Err(e.clone()));
                }
                return;
            }
        };
        let inner = inner.clone();
        tokio::spawn(
            async move {
                match pending.response().await {
                    Ok(resp) => settle_response(&inner, batches, resp),
                    Err(e) => {
                        for b in batches {
                            finish(&inner, b, Err(e.clone()));
                        }
                    }
                }
            }
            .in_current_span(),
        );
    }
}

/// Resolves every batch of a Produce response.
fn settle_response(
    inner: &Arc<Inner>,
    batches: Vec<ProducerBatch>,
    resp: kafka_protocol::messages::ProduceResponse,
) {
    {
        let mut results: HashMap<(String, i32), PartitionResult> = HashMap::new();
        for t in &resp.responses {
            for p in &t.partition_responses {
                results.insert(
                    (t.name.0.to_string(), p.index),
                    PartitionResult {
                        error_code: p.error_code,
                        base_offset: p.base_offset,
                        log_append_time: p.log_append_time_ms,
                        log_start_offset: p.log_start_offset,
                    },
                );
            }
        }
        for b in batches {
            let outcome = match results.remove(&(b.tp.topic.clone(), b.tp.partition)) {
                Some(r) => Ok(r),
                None => Err(Error::broker(
                    format!(
                        "produce to {}: the response did not mention the partition",
                        b.tp
                    ),
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                )),
            };
            finish(inner, b, outcome);
        }
    }
}

/// What to do with a batch after its request.
enum Verdict {
    Done {
        base_offset: i64,
        log_append_time: i64,
    },
    Retry {
        error: Error,
        bump: bool,
        refresh: bool,
    },
    Fail {
        error: Error,
    },
}

/// Decides a batch's fate. The error classes come from [`crate::client::classify`]; what is
/// particular to produce is the idempotence handling of sequence errors (KIP-360).
fn verdict(inner: &Inner, b: &ProducerBatch, outcome: Result<PartitionResult, Error>) -> Verdict {
    let op = if inner.lock().txn.is_some() {
        Op::TxnProduce
    } else {
        Op::General
    };
    let r = match outcome {
        Ok(r) => r,
        // No answer: the batch may or may not be in the log. With idempotence a resend of the
        // same sequence is deduplicated by the broker; without it this is where duplicates
        // come from.
        Err(error) => {
            let retriable = matches!(
                error.class_in(op),
                ErrorClass::Retriable | ErrorClass::RefreshAndRetry
            );
            return if retriable {
                Verdict::Retry {
                    error,
                    bump: false,
                    refresh: true,
                }
            } else {
                Verdict::Fail { error }
            };
        }
    };
    let code = ErrorCode(r.error_code);
    let context = || format!("produce to {}", b.tp);
    match code {
        ErrorCode(0) => Verdict::Done {
            base_offset: r.base_offset,
            log_append_time: r.log_append_time,
        },
        // The broker already has this batch (its offset is no longer known).
        ErrorCode::DUPLICATE_SEQUENCE_NUMBER if b.base_sequence >= 0 => Verdict::Done {
            base_offset: -1,
            log_append_time: -1,
        },
        ErrorCode::MESSAGE_TOO_LARGE | ErrorCode::RECORD_LIST_TOO_LARGE => Verdict::Fail {
            error: Error::BatchTooLarge {
                context: context(),
                size: b.data.len(),
                code,
            },
        },
        ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER if b.base_sequence >= 0 => {
            let (expected, earlier_pending) =
                inner.lock().partitions.get(&b.tp).map_or((0, false), |q| {
                    // Another batch of this partition still unsettled (this one counts as in
                    // flight until it is settled), or an earlier one queued for a retry.
                    let pending =
                        q.in_flight > 1 || q.ready.front().is_some_and(|r| r.order < b.order);
                    (super::accumulator::next_seq(q.acked_through, 1), pending)
                });
            if earlier_pending && super::accumulator::seq_after(b.base_sequence, expected) {
                // An earlier batch is being retried; this one follows it.
                Verdict::Retry {
                    error: Error::broker(context(), code),
                    bump: false,
                    refresh: false,
                }
            } else {
                // Either the broker expected an earlier sequence than the first one we have
                // not seen acknowledged (records it had acknowledged are gone), or it already
                // holds later records: writing this batch now would reorder them. Never paper
                // over either; the epoch bump that follows lets later batches go on.
                Verdict::Fail {
                    error: Error::broker(
                        format!(
                            "{}: sequence {} is out of order (the broker expected another); records may be missing or out of order",
                            context(),
                            b.base_sequence
                        ),
                        code,
                    ),
                }
            }
        }
        // In a transaction the batch fails (abortable) and the abort re-initializes the
        // producer id (KIP-360): the sender never bumps a transactional epoch by itself.
        ErrorCode::UNKNOWN_PRODUCER_ID if op == Op::TxnProduce => Verdict::Fail {
            error: Error::broker(context(), code),
        },
        ErrorCode::UNKNOWN_PRODUCER_ID if b.base_sequence >= 0 => {
            let last_acked = inner
                .lock()
                .partitions
                .get(&b.tp)
                .map_or(-1, |q| q.last_acked_offset);
            if r.log_start_offset > last_acked {
                // Retention removed everything we wrote, and the producer state with it:
                // nothing was lost, start over under a new epoch.
                Verdict::Retry {
                    error: Error::broker(context(), code),
                    bump: true,
                    refresh: false,
                }
            } else {
                Verdict::Fail {
                    error: Error::broker(
                        format!("{}: the broker lost this producer's state while its records are still in the log; records may be missing", context()),
                        code,
                    ),
                }
            }
        }
        _ => {
            let error = Error::broker(context(), code);
            match error.class_in(op) {
                ErrorClass::Retriable => Verdict::Retry {
                    error,
                    bump: false,
                    refresh: false,
                },
                ErrorClass::RefreshAndRetry => Verdict::Retry {
                    error,
                    bump: false,
                    refresh: true,
                },
                _ => Verdict::Fail { error },
            }
        }
    }
}

/// Settles one batch after its request: resolve, retry, or fail.
fn finish(inner: &Arc<Inner>, mut b: ProducerBatch, outcome: Result<PartitionResult, Error>) {
    let verdict = verdict(inner, &b, outcome);
    let now = Instant::now();
    let settle = |acc: &mut super::accumulator::Accumulator, tp| {
        let q = acc.queue(tp);
        q.in_flight = q.in_flight.saturating_sub(1);
        if q.in_flight == 0 {
            q.in_flight_leader = None;
        }
    };
    match verdict {
        Verdict::Done {
            base_offset,
            log_append_time,
        } => {
            let n = b.record_count();
            let tp = b.tp.clone();
            let seq = b.base_sequence;
            let mem = b.complete(base_offset, log_append_time);
            Counters::add(&inner.counters.batches_acknowledged, 1);
            {
                let mut acc = inner.lock();
                settle(&mut acc, &tp);
                let q = acc.queue(&tp);
                // Responses are handled in their own tasks, which may run out of order:
                // only ever move forward.
                if seq >= 0 {
                    let last = super::accumulator::next_seq(seq, n.saturating_sub(1));
                    if q.acked_through < 0 || super::accumulator::seq_after(last, q.acked_through) {
                        q.acked_through = last;
                    }
                }
                if base_offset >= 0 {
                    q.last_acked_offset = q.last_acked_offset.max(base_offset + n as i64 - 1);
                }
            }
            inner.release(mem);
        }
        Verdict::Retry {
            error,
            bump,
            refresh,
        } if b.created + inner.config.delivery_timeout > now
            && b.attempts < inner.config.retries =>
        {
            b.attempts += 1;
            let wait = backoff(
                inner.config.client.retry_backoff,
                inner.config.client.retry_backoff_max,
                b.attempts,
            );
            debug!(tp = %b.tp, attempt = b.attempts, sequence = b.base_sequence, error = %error, ?wait, "retrying batch");
            b.retry_at = Some(now + wait);
            if refresh {
                let cluster = inner.cluster.clone();
                let g = cluster.metadata().generation;
                tokio::spawn(async move {
                    let _ = cluster.refresh_if_older(g).await;
                });
            }
            let mut acc = inner.lock();
            acc.bump_needed |= bump;
            let tp = b.tp.clone();
            settle(&mut acc, &tp);
            acc.queue(&tp).requeue(b);
            // Counted once the batch is back in its queue, so a reader of the counter knows
            // where the batch is.
            Counters::add(&inner.counters.batches_retried, 1);
        }
        Verdict::Retry { error, .. } | Verdict::Fail { error } => {
            let error = if b.created + inner.config.delivery_timeout <= now {
                Error::Timeout {
                    what: format!("delivery to {} (last error: {error})", b.tp),
                    after: inner.config.delivery_timeout,
                }
            } else {
                error
            };
            warn!(tp = %b.tp, sequence = b.base_sequence, error = %error, "batch failed");

            let tp = b.tp.clone();
            let had_sequence = b.base_sequence >= 0;
            let mem = b.fail(error.clone());
            Counters::add(&inner.counters.batches_failed, 1);
            {
                let mut acc = inner.lock();
                settle(&mut acc, &tp);
                let fatal = error.class_in(Op::TxnProduce) == ErrorClass::Fatal;
                match acc.txn.as_mut() {
                    // In a transaction a failed batch dooms the transaction (it must abort;
                    // the abort resets sequences); fencing dooms the producer.
                    Some(t) => {
                        t.reinit |= matches!(
                            error.code(),
                            Some(
                                ErrorCode::INVALID_PRODUCER_EPOCH | ErrorCode::UNKNOWN_PRODUCER_ID
                            )
                        );
                        t.error.get_or_insert(error.clone());
                        if fatal {
                            *inner.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
                        }
                    }
                    // A failed batch leaves a hole in the sequence: later batches would be
                    // refused as out of order until the epoch is bumped and they are renumbered.
                    None if had_sequence => acc.bump_needed = true,
                    None => {}
                }
            }
            inner.release(mem);
        }
    }
    inner.wake.notify_one();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaders_that_are_not_ready_are_skipped_and_connected_to_once() {
        use LeaderReadiness::*;
        let later = Instant::now() + std::time::Duration::from_secs(1);
        // (state, a connect of ours under way, decision). Ready needs a live connection, which
        // a unit test cannot build without a broker; the protocol test covers it.
        let cases = [
            (
                NodeState::Disconnected,
                false,
                Skip {
                    start_connect: true,
                },
            ),
            (
                NodeState::Disconnected,
                true,
                Skip {
                    start_connect: false,
                },
            ),
            (
                NodeState::Connecting,
                false,
                Skip {
                    start_connect: true,
                },
            ),
            (
                NodeState::Connecting,
                true,
                Skip {
                    start_connect: false,
                },
            ),
            (
                NodeState::BackingOff(later),
                false,
                Skip {
                    start_connect: true,
                },
            ),
            (
                NodeState::BackingOff(later),
                true,
                Skip {
                    start_connect: false,
                },
            ),
        ];
        for (state, pending, want) in cases {
            assert_eq!(
                leader_readiness(&state, pending),
                want,
                "{state:?} {pending}"
            );
        }
    }
}
