//! The sender task: closes batches, sends them to partition leaders, handles responses.
//!
//! One task per producer. Each round it
//! 1. under the accumulator lock, fails what a doomed transaction still holds unsent, then lets
//!    [`Accumulator::drain`](super::accumulator::Accumulator::drain) decide, without I/O: it
//!    closes open batches whose linger.ms passed or that filled up (all of them on
//!    flush/close); takes out ready batches past delivery.timeout.ms; if a sequence gap may
//!    exist, holds everything until every request in flight has settled and then asks for the
//!    epoch bump (see `producer_id`); and takes the head ready batch of every partition that
//!    may send (room in flight, the same leader as what is in flight, and for a retry: nothing
//!    else in flight, so a retried batch always goes out before anything with a higher
//!    sequence; under the classic transaction protocol, a partition already added; and a
//!    leader whose connection is ready: a leader that is not is skipped this round and
//!    connected to in the background);
//! 2. then, with the lock released, does the I/O: fails the expired batches, bumps the epoch,
//!    sends AddPartitionsToTxn, starts connects and metadata refreshes, and groups the taken
//!    batches by leader into one Produce request per broker.
//!
//! Responses are handled in their own tasks: [`verdict`](super::verdict) decides each batch's
//! fate from the response and a snapshot of its partition, and `finish` resolves its records,
//! or puts a retriable batch back in creation order, and wakes the sender.

use super::accumulator::{Accumulator, DrainConfig, Drained, EpochBump, ProducerBatch};
use super::metrics::Counters;
use super::verdict::{verdict, PartitionResult, PartitionView, Verdict};
use super::{producer_id, Inner};
use crate::client::cluster::NodeState;
use crate::client::config::Acks;
use crate::client::connection::Connection;
use crate::client::error::{Error, Op};
use crate::client::metadata::MetadataSnapshot;
use crate::client::metadata::TopicPartition;
use crate::client::retry::backoff;
use crate::client::transactions::phase::TxnPhase;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::{debug, debug_span, warn, Instrument};

/// Produce v13 addresses topics by id (KIP-516), when every topic of the request has one.
const MAX_PRODUCE_VERSION: i16 = 13;
/// v12 is KIP-890's first version (a KIP-890 transaction needs at least it) and the newest
/// that addresses topics by name.
const MAX_PRODUCE_VERSION_BY_NAME: i16 = 12;
/// Under the classic transaction protocol, as the Java client: v12 would mean KIP-890.
const MAX_PRODUCE_VERSION_CLASSIC_TXN: i16 = 11;

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
            note_connect_failure(&inner, leader, &e);
            let g = inner.cluster.metadata().generation;
            let _ = inner.cluster.refresh_if_older(g).await;
        }
        inner.wake.notify_one();
    });
}

/// Records why the leader could not be reached on the batches waiting for it that have no
/// error of their own yet, so that delivery.timeout.ms fails them naming the broker and what
/// went wrong (e.g. no common Produce version), not only that time ran out.
fn note_connect_failure(inner: &Inner, leader: i32, e: &Error) {
    let meta = inner.cluster.metadata();
    let mut acc = inner.lock();
    for (tp, q) in acc.partitions.iter_mut() {
        if meta.leader(tp) != Some(leader) {
            continue;
        }
        for b in q.ready.iter_mut().filter(|b| b.last_error.is_none()) {
            b.last_error = Some(format!("connect to broker {leader}: {e}"));
        }
    }
}

/// The sender loop: one [`Accumulator::drain`](super::accumulator::Accumulator::drain) under
/// the lock per round, then the round's I/O, then a wait for a wake-up or the next deadline.
pub(crate) async fn run(inner: Arc<Inner>) {
    // Leaders a background connect of ours is under way for.
    let connecting: Arc<Mutex<HashSet<i32>>> = Arc::default();
    let config = DrainConfig {
        linger: inner.config.linger,
        delivery_timeout: inner.config.delivery_timeout,
        max_in_flight: inner.config.max_in_flight,
        retry_backoff: inner.config.client.retry_backoff,
    };
    loop {
        // metadata.max.age.ms: checked once a round here, not once a record in `send` (a
        // clock read and a lock per record showed in profiles). An idle producer's sender
        // does not loop; its first record wakes it.
        inner.cluster.refresh_if_stale();
        let now = Instant::now();
        let closing = inner.closed.load(Ordering::Acquire);
        let flushing = closing || inner.flushing.load(Ordering::Acquire) > 0;
        let meta = inner.cluster.metadata();
        let mut leaders = Leaders::default();
        let Drained {
            to_send,
            expired,
            recreated,
            released,
            next_wake,
            to_add,
            gap: _,
            missing_leader,
            bump_now,
            idle,
        } = drain_round(
            &inner,
            &connecting,
            &config,
            &meta,
            now,
            flushing,
            &mut leaders,
        );
        if released > 0 {
            inner.release(released);
        }
        fail_expired(&inner, expired);
        for (b, e) in recreated {
            fail_unsendable(&inner, b, e);
        }
        if let Some(current) = bump_now {
            bump_epoch(&inner, current).await;
            continue;
        }
        if !to_add.is_empty() {
            tokio::spawn(super::transaction::add_partitions(inner.clone(), to_add));
        }
        for leader in leaders.to_connect {
            start_connect(&inner, &connecting, leader);
        }
        if missing_leader {
            refresh_in_background(&inner, meta.generation);
        }
        let sent_any = !to_send.is_empty();
        send_round(&inner, &leaders.conns, to_send);
        if closing && idle {
            debug!("producer sender stopped");
            return;
        }
        if sent_any {
            // More batches may be sendable right away (another in-flight slot, another batch).
            tokio::task::yield_now().await;
            continue;
        }
        wait_for_wake(&inner, next_wake).await;
    }
}

/// Refreshes metadata older than `generation` without holding the round up (a partition
/// without a known leader waits for it).
fn refresh_in_background(inner: &Inner, generation: u64) {
    let cluster = inner.cluster.clone();
    tokio::spawn(async move {
        let _ = cluster.refresh_if_older(generation).await;
    });
}

/// Until something wakes the sender (a batch is ready, a response came back, flush or close)
/// or the round's next deadline passes.
async fn wait_for_wake(inner: &Inner, next_wake: Option<Instant>) {
    let notified = inner.wake.notified();
    match next_wake {
        Some(at) => {
            let _ = tokio::time::timeout_at(at.into(), notified).await;
        }
        None => notified.await,
    }
}

/// What one round learnt of the leaders it asked about.
#[derive(Default)]
struct Leaders {
    /// Each leader's connection, checked once per round: None when not ready.
    conns: HashMap<i32, Option<Arc<Connection>>>,
    /// Leaders to connect to in the background.
    to_connect: Vec<i32>,
}

/// The round's decisions, under the accumulator lock: first a doomed transaction's queued
/// batches fail, then [`Accumulator::drain`](super::accumulator::Accumulator::drain) decides.
fn drain_round(
    inner: &Arc<Inner>,
    connecting: &Mutex<HashSet<i32>>,
    config: &DrainConfig,
    meta: &MetadataSnapshot,
    now: Instant,
    flushing: bool,
    leaders: &mut Leaders,
) -> Drained {
    let mut acc = inner.lock();
    // A doomed transaction sends nothing more: its batches fail at once, so that commit
    // reports the error and abort does not wait for them.
    let doomed = acc.txn.as_ref().and_then(|t| {
        let fatal = matches!(t.phase, TxnPhase::FatalError(_));
        t.phase.doom().map(|e| (e.clone(), fatal))
    });
    if let Some((err, fatal)) = &doomed {
        // A failed producer resends nothing: everything queued fails.
        let (mem, n, batches) = acc.fail_unsent(err, !fatal);
        if n > 0 {
            inner.release(mem);
            Counters::add(&inner.counters.batches_failed, batches as u64);
        }
    }
    let ready = |leader: i32| {
        let state = inner.cluster.node_state(leader);
        let pending = connecting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&leader);
        let conn = match (leader_readiness(&state, pending), state) {
            (LeaderReadiness::Send, NodeState::Ready(c)) => Some(c),
            (LeaderReadiness::Skip { start_connect }, _) => {
                if start_connect {
                    leaders.to_connect.push(leader);
                }
                None
            }
            (LeaderReadiness::Send, _) => None,
        };
        let ready = conn.is_some();
        leaders.conns.insert(leader, conn);
        ready
    };
    acc.drain(now, flushing, config, meta, ready)
}

/// Fails the batches that waited past delivery.timeout.ms.
fn fail_expired(inner: &Inner, expired: Vec<ProducerBatch>) {
    for b in expired {
        let n = b.record_count();
        let what = match &b.last_error {
            Some(e) => format!(
                "delivery of {n} record(s) to {} (delivery.timeout.ms; last error: {e})",
                b.tp
            ),
            None => format!(
                "delivery of {n} record(s) to {} (delivery.timeout.ms)",
                b.tp
            ),
        };
        let mem = b.fail(Error::Timeout {
            what,
            after: inner.config.delivery_timeout,
        });
        inner.release(mem);
    }
}

/// Fails a queued batch that may not be sent again (see `accumulator::Incarnation`): its
/// records fail, and a transaction it belongs to must abort. Not in flight, so nothing to
/// settle; sequences were renumbered, so no gap to bump the epoch over.
fn fail_unsendable(inner: &Inner, b: ProducerBatch, error: Error) {
    warn!(tp = %b.tp, sequence = b.base_sequence, error = %error, "batch failed");
    // The transaction is doomed before the records are told (see `failed`).
    if let Some(t) = inner.lock().txn.as_mut() {
        t.fail(error.clone(), Op::TxnProduce, false);
    }
    let mem = b.fail(error);
    Counters::add(&inner.counters.batches_failed, 1);
    inner.release(mem);
}

/// Puts the round's batches on the wire, one Produce request per leader.
fn send_round(
    inner: &Arc<Inner>,
    conns: &HashMap<i32, Option<Arc<Connection>>>,
    to_send: Vec<(i32, ProducerBatch)>,
) {
    let mut by_leader: HashMap<i32, Vec<ProducerBatch>> = HashMap::new();
    for (leader, b) in to_send {
        by_leader.entry(leader).or_default().push(b);
    }
    for (leader, batches) in by_leader {
        // Inline, not spawned: the request must be on the wire before the next round sends
        // this partition's next batch, or two requests could pass each other and the broker
        // would see sequences out of order. Never waits: the connection was ready when the
        // batches were taken.
        match conns.get(&leader) {
            Some(Some(conn)) => dispatch(inner, conn, leader, batches),
            _ => {
                for b in batches {
                    let e =
                        Error::Internal(format!("no connection to broker {leader} for {}", b.tp));
                    finish(inner, b, Err(e));
                }
            }
        }
    }
}

/// Bumps the epoch (nothing is in flight) and renumbers every unacknowledged batch.
///
/// A non-transactional producer owns its producer id outright, so, as KIP-360 allows and the
/// Java client does, it bumps the epoch itself: the broker accepts a higher epoch starting again
/// at sequence 0. Only when the epoch is exhausted does it ask InitProducerId for a new id.
async fn bump_epoch(inner: &Arc<Inner>, current: super::identity::Identity) {
    let next = if current.epoch < i16::MAX - 1 {
        Ok(super::identity::Identity {
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
                acc.bump = EpochBump::Failed(e.clone());
                acc.identity = None;
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

/// Puts one Produce request with the given batches (one per partition) on the wire to
/// `leader`, and spawns the task that handles its response. Never waits.
fn dispatch(inner: &Arc<Inner>, conn: &Connection, leader: i32, batches: Vec<ProducerBatch>) {
    let span = debug_span!("produce", leader, batches = batches.len());
    let _entered = span.enter();
    let fail_all = |batches: Vec<ProducerBatch>, e: Error| {
        for b in batches {
            finish(inner, b, Err(e.clone()));
        }
    };
    // A transaction's Produce requests go at its protocol's versions, as the Java client's:
    // ≤ v11 under the classic protocol, v12+ under KIP-890 (where v12 adds the partition to
    // the transaction). A broker offering less than v12 to a KIP-890 transaction has just
    // restarted and not caught up: its connection is retired and the batches retried. v13
    // (topics by id) only when every batch's topic id is known, as in the Java client.
    let tv2 = {
        let acc = inner.lock();
        acc.txn.as_ref().and_then(|t| t.phase.open()).map(|t| t.tv2)
    };
    let newest = if batches.iter().all(|b| b.topic_id != [0; 16]) {
        MAX_PRODUCE_VERSION
    } else {
        MAX_PRODUCE_VERSION_BY_NAME
    };
    let version = match tv2 {
        Some(true) => conn
            .tv2_version_for::<ProduceRequest>(MAX_PRODUCE_VERSION_BY_NAME)
            .map(|v| v.min(newest)),
        Some(false) => conn.version_for::<ProduceRequest>(Some(MAX_PRODUCE_VERSION_CLASSIC_TXN)),
        None => conn.version_for::<ProduceRequest>(Some(newest)),
    };
    let version = match version {
        Ok(v) => v,
        Err(e) => return fail_all(batches, e),
    };
    let req = produce_request(inner, &batches);
    if inner.config.acks == Acks::None {
        // acks=0: the broker never answers; a batch on the wire counts as written.
        let sent = conn.send_no_response(&req, version);
        for b in batches {
            let outcome = match &sent {
                Ok(()) => Ok(PartitionResult {
                    error_code: 0,
                    base_offset: -1,
                    log_append_time: -1,
                    log_start_offset: -1,
                    broker: conn.addr().into(),
                }),
                Err(e) => Err(e.clone()),
            };
            finish(inner, b, outcome);
        }
        return;
    }
    let pending = match conn.start_produce(&req, version) {
        Ok(p) => p,
        Err(e) => return fail_all(batches, e),
    };
    let inner = inner.clone();
    let broker = conn.addr().to_owned();
    tokio::spawn(
        async move {
            match pending.response().await {
                Ok(resp) => settle_response(&inner, &broker, batches, resp),
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

/// One Produce request carrying `batches` (one per partition), topics in first-seen order.
fn produce_request(inner: &Inner, batches: &[ProducerBatch]) -> ProduceRequest {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for b in batches {
        let pd = PartitionProduceData::default()
            .with_index(b.tp.partition)
            .with_records(Some(b.data.clone()));
        // Both the name and the id: the version picked writes one of them. Batches of one
        // topic always share an id (a partition's batches go out under its current one).
        match topics.iter_mut().find(|t| t.name.0.as_str() == b.tp.topic) {
            Some(t) => t.partition_data.push(pd),
            None => topics.push(
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(b.tp.topic.clone())))
                    .with_topic_id(uuid::Uuid::from_bytes(b.topic_id))
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
        kafka_protocol::messages::TransactionalId(StrBytes::from_string(t.transactional_id.clone()))
    });
    ProduceRequest::default()
        .with_transactional_id(transactional_id)
        .with_acks(inner.config.acks.wire())
        .with_timeout_ms(timeout_ms)
        .with_topic_data(topics)
}

/// Resolves every batch of a Produce response.
fn settle_response(
    inner: &Arc<Inner>,
    broker: &str,
    batches: Vec<ProducerBatch>,
    resp: kafka_protocol::messages::ProduceResponse,
) {
    {
        // From v13 the response names topics by id only: map them back through the batches.
        let names: HashMap<[u8; 16], &str> = batches
            .iter()
            .filter(|b| b.topic_id != [0; 16])
            .map(|b| (b.topic_id, b.tp.topic.as_str()))
            .collect();
        let mut results: HashMap<(String, i32), PartitionResult> = HashMap::new();
        let answered: std::sync::Arc<str> = broker.into();
        for t in &resp.responses {
            let name = match names.get(t.topic_id.as_bytes()) {
                Some(n) if t.name.0.is_empty() => (*n).to_owned(),
                _ => t.name.0.to_string(),
            };
            for p in &t.partition_responses {
                results.insert(
                    (name.clone(), p.index),
                    PartitionResult {
                        error_code: p.error_code,
                        base_offset: p.base_offset,
                        log_append_time: p.log_append_time_ms,
                        log_start_offset: p.log_start_offset,
                        broker: answered.clone(),
                    },
                );
            }
        }
        for b in batches {
            let outcome = match results.remove(&(b.tp.topic.clone(), b.tp.partition)) {
                Some(r) => Ok(r),
                // A broker answers for every partition it was sent; an answer that leaves one
                // out was damaged on the way (a flipped bit in a partition index or a topic
                // name still decodes). Its batch is treated as a lost response: resent (the
                // broker may have written it; idempotence deduplicates), never failed, as an
                // undecodable response is.
                None => Err(Error::Io {
                    broker: broker.to_owned(),
                    message: format!(
                        "the Produce response left out {} (a damaged answer); resending",
                        b.tp
                    ),
                }),
            };
            finish(inner, b, outcome);
        }
    }
}

/// Settles one batch after its request: resolve, retry, or fail.
fn finish(inner: &Arc<Inner>, b: ProducerBatch, outcome: Result<PartitionResult, Error>) {
    let view = {
        let acc = inner.lock();
        let q = acc.partitions.get(&b.tp);
        PartitionView {
            transactional: acc.txn.is_some(),
            in_flight: q.map_or(0, |q| q.in_flight),
            ready_head_order: q.and_then(|q| q.ready.front().map(|r| r.order)),
            acked_through: q.map_or(-1, |q| q.acked_through),
            last_acked_offset: q.map_or(-1, |q| q.last_acked_offset),
            bump_pending: matches!(acc.bump, EpochBump::Needed),
        }
    };
    let now = Instant::now();
    match verdict(&view, &b, outcome) {
        Verdict::Done {
            base_offset,
            log_append_time,
        } => acknowledged(inner, b, base_offset, log_append_time),
        Verdict::Retry {
            error,
            bump,
            refresh,
        } if b.created + inner.config.delivery_timeout > now
            && b.attempts < inner.config.retries =>
        {
            retry(inner, b, now, &error, bump, refresh)
        }
        Verdict::Retry { error, .. } | Verdict::Fail { error } => {
            let error = if b.created + inner.config.delivery_timeout <= now {
                Error::Timeout {
                    what: format!(
                        "delivery to {} (delivery.timeout.ms; last error: {error})",
                        b.tp
                    ),
                    after: inner.config.delivery_timeout,
                }
            } else {
                error
            };
            failed(inner, b, error)
        }
    }
    inner.wake.notify_one();
}

/// One batch of the partition is no longer in flight.
fn settle(acc: &mut Accumulator, tp: &TopicPartition) {
    let q = acc.queue(tp);
    q.in_flight = q.in_flight.saturating_sub(1);
    if q.in_flight == 0 {
        q.in_flight_leader = None;
    }
}

/// The broker wrote the batch: move the acknowledged sequence and offset, then resolve its
/// records.
fn acknowledged(inner: &Inner, b: ProducerBatch, base_offset: i64, log_append_time: i64) {
    let mem = acknowledge(&inner.acc, b, base_offset, log_append_time);
    Counters::add(&inner.counters.batches_acknowledged, 1);
    inner.release(mem);
}

/// The accumulator learns of the acknowledgement *before* the records are told (and the batch's
/// flush tickets dropped). The other way round, a transaction's end raced it:
///   1. this task resolves the last records of the transaction, which completes the flush a
///      `commit_transaction()` is waiting in;
///   2. the commit goes on: EndTxn bumps the epoch (KIP-890) and `reset_sequences` starts every
///      partition again at sequence 0, acknowledged through -1;
///   3. this task records the acknowledgement, too late: acknowledged through 4 again;
///   4. the next transaction is empty and aborted: `rewind_sequences` takes the sequence after
///      the acknowledged one, 5, and the transaction after it sends sequence 5 at the new epoch,
///      which the broker refuses (OUT_OF_ORDER_SEQUENCE_NUMBER, "expected sequence 0").
///
/// Seen once in CI on a loaded machine (hostile.rs `fill_committed`, transaction.version 2).
/// Returns the batch's buffer.memory permits.
fn acknowledge(
    acc: &Mutex<Accumulator>,
    b: ProducerBatch,
    base_offset: i64,
    log_append_time: i64,
) -> u32 {
    let n = b.record_count();
    let seq = b.base_sequence;
    {
        let mut acc = Inner::lock_of(acc);
        settle(&mut acc, &b.tp);
        let q = acc.queue(&b.tp);
        // Responses are handled in their own tasks, which may run out of order: only ever
        // move forward.
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
    b.complete(base_offset, log_append_time)
}

/// The batch goes back into its queue in creation order, after a backoff.
fn retry(
    inner: &Inner,
    mut b: ProducerBatch,
    now: Instant,
    error: &Error,
    bump: bool,
    refresh: bool,
) {
    b.attempts += 1;
    let wait = backoff(
        inner.config.client.retry_backoff,
        inner.config.client.retry_backoff_max,
        b.attempts,
    );
    debug!(tp = %b.tp, attempt = b.attempts, sequence = b.base_sequence, error = %error, ?wait, "retrying batch");
    b.retry_at = Some(now + wait);
    b.last_error = Some(error.to_string());
    if super::verdict::refused_as_unwritten(error) {
        b.maybe_written = false;
    } else {
        b.maybe_written |= super::verdict::may_have_been_written(error);
    }
    if refresh {
        let cluster = inner.cluster.clone();
        let g = cluster.metadata().generation;
        tokio::spawn(async move {
            let _ = cluster.refresh_if_older(g).await;
        });
    }
    let mut acc = inner.lock();
    // A transactional producer's epoch is the coordinator's to bump.
    if bump && acc.txn.is_none() {
        acc.need_bump();
    }
    let tp = b.tp.clone();
    settle(&mut acc, &tp);
    acc.queue(&tp).requeue(b);
    // Counted once the batch is back in its queue, so a reader of the counter knows where the
    // batch is.
    Counters::add(&inner.counters.batches_retried, 1);
}

/// The batch failed for good: fail its records; in a transaction that dooms the transaction
/// (or, fenced, the producer), without one a batch with a sequence needs an epoch bump.
fn failed(inner: &Inner, b: ProducerBatch, error: Error) {
    warn!(tp = %b.tp, sequence = b.base_sequence, error = %error, "batch failed");
    let tp = b.tp.clone();
    let had_sequence = b.base_sequence >= 0;
    // The transaction is doomed *before* the records' futures are told. The other way round,
    // a commit raced the doom:
    //   1. this task fails the record's future (which may also complete a flush that a
    //      commit_transaction() is waiting in);
    //   2. the application (or that commit) goes on: the phase is still InTransaction, so
    //      the commit goes ahead (EndTxn) without the failed record;
    //   3. this task records the doom, too late (ignored once the commit ended, or turning
    //      the committed transaction's EndDone into a usage error).
    // Seen in topic_ids' transaction test and examples/errors.rs (a record larger than the
    // topic's max.message.bytes), in one run in five to one in two under load.
    {
        let mut acc = inner.lock();
        settle(&mut acc, &tp);
        match acc.txn.as_mut() {
            // In a transaction a failed batch dooms the transaction (it must abort; the abort
            // resets sequences); fencing dooms the producer.
            Some(t) => {
                let reinit = matches!(
                    error.code(),
                    Some(ErrorCode::INVALID_PRODUCER_EPOCH | ErrorCode::UNKNOWN_PRODUCER_ID)
                );
                t.fail(error.clone(), Op::TxnProduce, reinit);
            }
            // A failed batch leaves a hole in the sequence: later batches would be refused as
            // out of order until the epoch is bumped and they are renumbered.
            None if had_sequence => acc.need_bump(),
            None => {}
        }
    }
    let mem = b.fail(error);
    Counters::add(&inner.counters.batches_failed, 1);
    inner.release(mem);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// See `acknowledge`: whoever a record's outcome wakes (a flush, then a commit and its
    /// sequence reset) must find the accumulator already past the batch. A callback runs as the
    /// record is told, so it sees what the accumulator knew then.
    #[test]
    fn a_batch_is_settled_and_its_sequence_acknowledged_before_its_records_are_told() {
        use super::super::accumulator::{Delivery, Reply};
        let acc = Arc::new(Mutex::new(Accumulator::default()));
        let tp = TopicPartition::new("t", 0);
        Inner::lock_of(&acc).queue(&tp).in_flight = 1;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut b = ProducerBatch::for_test(0, 0, 1);
        for _ in 0..5 {
            let (acc, seen) = (acc.clone(), seen.clone());
            b.deliveries.push(Delivery {
                tx: Reply::callback(Box::new(move |outcome| {
                    let mut a = Inner::lock_of(&acc);
                    let q = a.queue(&TopicPartition::new("t", 0));
                    let state = (q.in_flight, q.acked_through, q.last_acked_offset);
                    seen.lock().unwrap().push((outcome.is_ok(), state));
                })),
                timestamp: 0,
            });
        }
        acknowledge(&acc, b, 100, -1);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 5, "every record is told");
        for s in seen.iter() {
            assert_eq!(
                *s,
                (true, (0, 4, 104)),
                "(told ok, (in flight, acknowledged through, last acknowledged offset)) as a record was told"
            );
        }
    }

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
