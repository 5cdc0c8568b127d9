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

/// Produces `events` to `topic` (keyed by driver, idempotent, acks=all), event `i` not before
/// [`due`]`(i, rate)`; returns once every one is acknowledged.
///
/// # Errors
/// The producer's error when a record cannot be delivered.
pub async fn feed(
    config: ProducerConfig,
    topic: String,
    events: Vec<Ride>,
    rate: u32,
) -> Result<Fed> {
    let producer = Producer::new(config).await?;
    let start = Instant::now();
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
