//! Generated rides produced to a topic, at a steady rate or unthrottled: `taxi generate` and
//! the demo's input (produced while the job runs, so a window's latency is the job's, not the
//! wait behind a backlog).

use crate::error::Result;
use crate::props::Conn;
use bytes::Bytes;
use onceflow::client::{DeliveryFuture, Producer, ProducerRecord};
use onceflow_taxi::Ride;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Deliveries awaited at most this far behind the newest send.
const MAX_UNACKED: usize = 10_000;

/// When event `i` (from 0) is due at `rate` events per second after the start.
pub fn due(i: u64, rate: u32) -> Duration {
    Duration::from_secs_f64(i as f64 / f64::from(rate.max(1)))
}

/// When event number `sent` (from 0) is due, after the start, producing `rate` events per
/// second (`None`: unthrottled, rate 0). Due times come from the count, not from the previous
/// send, so a late send does not slow the rest down.
pub fn send_due(sent: u64, rate: u32) -> Option<Duration> {
    (rate > 0).then(|| due(sent, rate))
}

/// What was produced.
#[derive(Debug, Clone, Copy)]
pub struct Fed {
    pub events: u64,
    pub secs: f64,
}

/// The feed's task, aborted when dropped (an error path included).
pub struct Task(pub tokio::task::JoinHandle<Result<Fed>>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A producer for the feed: idempotent and acks=all, so a retry cannot duplicate or reorder a
/// driver's events (the verifier's per-key order relies on it).
///
/// # Errors
/// A bad `-X` property, or the client's error when the brokers cannot be reached.
pub async fn producer(conn: &Conn) -> Result<Producer> {
    let config = conn.producer(&["enable.idempotence=true".into(), "acks=all".into()])?;
    Ok(Producer::new(config).await?)
}

/// The record of ride event `ride` in `topic`: keyed by driver.
pub fn ride_record(topic: &str, ride: &Ride) -> ProducerRecord {
    ProducerRecord::new(topic.to_owned(), Bytes::from(ride.to_json()))
        .with_key(Bytes::from(ride.key()))
}

/// Produces `records`, record `i` not before `start` + [`send_due`]`(i, rate)` (the demo aims
/// its kills from the same `start`); returns once every one is acknowledged, and closes the
/// producer.
///
/// # Errors
/// The producer's error when a record cannot be delivered.
pub async fn feed(
    producer: Producer,
    records: impl IntoIterator<Item = ProducerRecord>,
    rate: u32,
    start: Instant,
) -> Result<Fed> {
    let mut unacked: VecDeque<DeliveryFuture> = VecDeque::new();
    let mut sent = 0u64;
    for record in records {
        // Sleeping per record costs more than it evens out: only when 5 ms ahead.
        if let Some(at) = send_due(sent, rate).map(|d| start + d) {
            if at > Instant::now() + Duration::from_millis(5) {
                tokio::time::sleep_until(at.into()).await;
            }
        }
        unacked.push_back(producer.send(record).await?);
        sent += 1;
        if unacked.len() > MAX_UNACKED {
            if let Some(f) = unacked.pop_front() {
                f.await?;
            }
        }
    }
    producer.flush().await?;
    for f in unacked {
        f.await?;
    }
    producer.close().await?;
    Ok(Fed {
        events: sent,
        secs: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produce_rate_paces_by_count() {
        for (sent, rate, due) in [
            (0, 0, None),
            (5_000, 0, None),
            (0, 1_000, Some(Duration::ZERO)),
            (1, 1_000, Some(Duration::from_millis(1))),
            (2_500, 1_000, Some(Duration::from_millis(2_500))),
            (3, 2, Some(Duration::from_millis(1_500))),
        ] {
            assert_eq!(send_due(sent, rate), due, "event {sent} at {rate}/s");
        }
    }

    #[test]
    fn events_are_due_evenly_at_the_rate() {
        for (i, rate, ms) in [
            (0, 1000, 0),
            (1, 1000, 1),
            (500, 1000, 500),
            (3, 2, 1500),
            (1, 0, 1000),
        ] {
            assert_eq!(due(i, rate), Duration::from_millis(ms), "{i} at {rate}/s");
        }
    }
}
