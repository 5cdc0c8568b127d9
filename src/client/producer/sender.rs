//! The sender task: closes batches, sends them to partition leaders, handles responses.
//!
//! One task per producer. Each round it (1) closes open batches whose linger.ms passed or that
//! filled up (or all of them on flush/close), (2) fails ready batches past delivery.timeout.ms,
//! (3) takes the head ready batch of every partition with room in flight (max.in.flight),
//! (4) groups them by leader and spawns one Produce request per broker. Responses come back
//! in their own tasks, which resolve records, or put retriable batches back at the front of
//! their partition's queue, and wake the sender.

use super::accumulator::{close_open, ProducerBatch};
use super::Inner;
use crate::client::cluster::backoff;
use crate::client::config::Acks;
use crate::client::error::{Error, ErrorClass};
use crate::protocol::ErrorCode;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tracing::{debug, debug_span, warn, Instrument};

/// Produce v13 addresses topics by id; v12 (KIP-890's first version) is the newest by name.
const MAX_PRODUCE_VERSION: i16 = 12;

pub(crate) async fn run(inner: Arc<Inner>) {
    loop {
        let now = Instant::now();
        let closing = inner.closed.load(Ordering::Acquire);
        let flushing = closing || inner.flushing.load(Ordering::Acquire) > 0;
        let mut next_wake: Option<Instant> = None;
        let mut to_send: Vec<ProducerBatch> = Vec::new();
        let mut expired: Vec<ProducerBatch> = Vec::new();
        let mut released = 0u32;
        let mut missing_leader = false;
        let meta = inner.cluster.metadata();
        let idle;
        {
            let mut acc = inner.lock();
            for (tp, q) in acc.partitions.iter_mut() {
                if let Some(open) = &q.open {
                    let due = open.created + inner.config.linger;
                    if flushing || due <= now {
                        released += close_open(tp, q);
                    } else {
                        next_wake = min_instant(next_wake, due);
                    }
                }
                // Expire batches that waited too long (never ones in flight: their fate is
                // decided by the response).
                while let Some(b) = q.ready.front() {
                    if b.created + inner.config.delivery_timeout <= now {
                        if let Some(b) = q.ready.pop_front() {
                            expired.push(b);
                        }
                    } else {
                        break;
                    }
                }
                if q.in_flight >= inner.config.max_in_flight {
                    continue;
                }
                if let Some(b) = q.ready.front() {
                    if let Some(at) = b.retry_at.filter(|at| *at > now) {
                        next_wake = min_instant(next_wake, at);
                        continue;
                    }
                    if meta.leader(tp).is_none() {
                        missing_leader = true;
                        next_wake = min_instant(next_wake, now + inner.config.client.retry_backoff);
                        continue;
                    }
                    if let Some(b) = q.ready.pop_front() {
                        q.in_flight += 1;
                        to_send.push(b);
                    }
                }
                if let Some(b) = q.ready.front() {
                    next_wake = min_instant(next_wake, b.created + inner.config.delivery_timeout);
                }
            }
            idle = acc
                .partitions
                .values()
                .all(|q| q.open.is_none() && q.ready.is_empty() && q.in_flight == 0);
            if idle {
                // Forget partitions with nothing buffered so the map does not grow forever.
                acc.partitions.retain(|_, q| q.open.is_some() || !q.ready.is_empty() || q.in_flight > 0);
            }
        }
        if released > 0 {
            inner.release(released, 0);
        }
        for b in expired {
            let n = b.record_count();
            let what = format!(
                "delivery of {} record(s) to {} (delivery.timeout.ms)",
                n, b.tp
            );
            let mem = b.fail(Error::Timeout {
                what,
                after: inner.config.delivery_timeout,
            });
            inner.release(mem, n);
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
            for b in to_send {
                let leader = meta.leader(&b.tp).unwrap_or(-1);
                by_leader.entry(leader).or_default().push(b);
            }
            for (leader, batches) in by_leader {
                tokio::spawn(produce(inner.clone(), leader, batches));
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

fn min_instant(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// Sends one Produce request with the given batches (one per partition) to `leader`.
async fn produce(inner: Arc<Inner>, leader: i32, batches: Vec<ProducerBatch>) {
    let span = debug_span!("produce", leader, batches = batches.len());
    async {
        let conn = match inner.cluster.broker(leader).await {
            Ok(c) => c,
            Err(e) => {
                for b in batches {
                    finish(&inner, b, Err(e.clone()));
                }
                return;
            }
        };
        let version = match conn.version_for::<ProduceRequest>(Some(MAX_PRODUCE_VERSION)) {
            Ok(v) => v,
            Err(e) => {
                for b in batches {
                    finish(&inner, b, Err(e.clone()));
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
        let req = ProduceRequest::default()
            .with_acks(inner.config.acks.wire())
            .with_timeout_ms(inner.config.client.request_timeout.as_millis().min(i32::MAX as u128) as i32)
            .with_topic_data(topics);
        if inner.config.acks == Acks::None {
            let r = conn.send_no_response(&req, version);
            for b in batches {
                finish(&inner, b, r.clone().map(|_| (-1, -1)));
            }
            return;
        }
        let resp = match conn.request_at(&req, version).await {
            Ok(r) => r,
            Err(e) => {
                for b in batches {
                    finish(&inner, b, Err(e.clone()));
                }
                return;
            }
        };
        let mut results: HashMap<(String, i32), (i16, i64, i64)> = HashMap::new();
        for t in &resp.responses {
            for p in &t.partition_responses {
                results.insert(
                    (t.name.0.to_string(), p.index),
                    (p.error_code, p.base_offset, p.log_append_time_ms),
                );
            }
        }
        for b in batches {
            let outcome = match results.get(&(b.tp.topic.clone(), b.tp.partition)) {
                Some((0, base, lat)) => Ok((*base, *lat)),
                Some((code, _, _)) => Err(classify_produce_error(&b, ErrorCode(*code))),
                None => Err(Error::broker(
                    format!("produce to {}: the response did not mention the partition", b.tp),
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                )),
            };
            finish(&inner, b, outcome);
        }
    }
    .instrument(span)
    .await
}

fn classify_produce_error(b: &ProducerBatch, code: ErrorCode) -> Error {
    let context = format!("produce to {}", b.tp);
    if code == ErrorCode::MESSAGE_TOO_LARGE || code == ErrorCode::RECORD_LIST_TOO_LARGE {
        return Error::BatchTooLarge {
            context,
            size: b.data.len(),
            code,
        };
    }
    Error::broker(context, code)
}

/// Settles one batch after its request: resolve, retry, or fail.
fn finish(inner: &Arc<Inner>, mut b: ProducerBatch, outcome: Result<(i64, i64), Error>) {
    match outcome {
        Ok((base_offset, log_append_time)) => {
            let n = b.record_count();
            let tp = b.tp.clone();
            let mem = b.complete(base_offset, log_append_time);
            inner.lock().partitions.entry(tp).or_default().in_flight -= 1;
            inner.release(mem, n);
        }
        Err(e) => {
            let class = e.class();
            let now = Instant::now();
            let retriable = matches!(class, ErrorClass::Retriable | ErrorClass::RefreshAndRetry);
            let within_time = b.created + inner.config.delivery_timeout > now;
            if retriable && within_time && b.attempts < inner.config.retries {
                b.attempts += 1;
                let wait = backoff(
                    inner.config.client.retry_backoff,
                    inner.config.client.retry_backoff_max,
                    b.attempts,
                );
                debug!(tp = %b.tp, attempt = b.attempts, error = %e, ?wait, "retrying batch");
                b.retry_at = Some(now + wait);
                if class == ErrorClass::RefreshAndRetry {
                    let cluster = inner.cluster.clone();
                    let g = cluster.metadata().generation;
                    tokio::spawn(async move {
                        let _ = cluster.refresh_if_older(g).await;
                    });
                }
                let mut acc = inner.lock();
                let q = acc.partitions.entry(b.tp.clone()).or_default();
                q.in_flight -= 1;
                // Back to the front: it was sent before anything still queued.
                q.ready.push_front(b);
            } else {
                let e = if retriable && !within_time {
                    Error::Timeout {
                        what: format!("delivery to {} (last error: {e})", b.tp),
                        after: inner.config.delivery_timeout,
                    }
                } else {
                    e
                };
                warn!(tp = %b.tp, error = %e, "batch failed");
                let n = b.record_count();
                let tp = b.tp.clone();
                let mem = b.fail(e);
                inner.lock().partitions.entry(tp).or_default().in_flight -= 1;
                inner.release(mem, n);
            }
        }
    }
    inner.wake.notify_one();
}
