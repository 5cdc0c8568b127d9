//! The demo's input: generated rides produced at a steady rate while the job runs, so a
//! window's latency is the job's, not the wait behind a backlog.

use crate::error::Result;
use bytes::Bytes;
use onceflow::client::{DeliveryFuture, Producer, ProducerConfig, ProducerRecord};
use onceflow::engine::taxi::Ride;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Deliveries awaited at most this far behind the newest send.
const MAX_UNACKED: usize = 10_000;

/// When event `i` (from 0) is due at `rate` events per second after the start.
pub fn due(i: u64, rate: u32) -> Duration {
    Duration::from_secs_f64(i as f64 / f64::from(rate.max(1)))
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
/// The client's error when the brokers cannot be reached.
pub async fn producer(config: ProducerConfig) -> Result<Producer> {
    Ok(Producer::new(config).await?)
}

/// Produces `events` to `topic` (keyed by driver), event `i` not before `start` +
/// [`due`]`(i, rate)` (the demo aims its kills from the same `start`); returns once every one
/// is acknowledged.
///
/// # Errors
/// The producer's error when a record cannot be delivered.
pub async fn feed(
    producer: Producer,
    topic: String,
    events: Vec<Ride>,
    rate: u32,
    start: Instant,
) -> Result<Fed> {
    let mut unacked: VecDeque<DeliveryFuture> = VecDeque::new();
    let mut sent = 0u64;
    for ride in events {
        let at = start + due(sent, rate);
        // Sleeping per record costs more than it evens out: only when 5 ms ahead.
        if at > Instant::now() + Duration::from_millis(5) {
            tokio::time::sleep_until(at.into()).await;
        }
        let record = ProducerRecord::new(topic.clone(), Bytes::from(ride.to_json()))
            .with_key(Bytes::from(ride.key()));
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
