//! [`Probe`]: a read_committed reader tailing a job's output topic from the beginning, stamping
//! each record with the wall-clock time ([`now_ms`]) a poll handed it over: the visibility
//! times of `onceflow taxi latency` and the demo.

use crate::error::{CliError, Result};
use onceflow::client::{Consumer, ConsumerConfig, IsolationLevel, Offset};
use onceflow_taxi::latency::{now_ms, Visible};
use onceflow_taxi::verify::TopicRecord;
use std::time::{Duration, Instant};

/// A read_committed reader tailing every partition of a topic from the beginning, stamping
/// each record with the time a poll handed it over.
pub struct Probe {
    consumer: Consumer,
    topic: String,
    seen: Vec<Visible>,
}

impl Probe {
    /// Assigns every partition of `topic` (isolation.level forced to read_committed) at the
    /// beginning.
    ///
    /// # Errors
    /// [`CliError::Failed`] naming what it was doing when the brokers cannot be reached or the
    /// topic is unknown.
    pub async fn start(config: ConsumerConfig, topic: &str) -> Result<Probe> {
        Probe::start_with(config, topic, IsolationLevel::ReadCommitted).await
    }

    /// As [`Probe::start`] at `isolation`: read_uncommitted also sees what sits in open (and
    /// aborted) transactions, which the latency never counts but a demo may show.
    ///
    /// # Errors
    /// As [`Probe::start`].
    pub async fn start_with(
        mut config: ConsumerConfig,
        topic: &str,
        isolation: IsolationLevel,
    ) -> Result<Probe> {
        config.isolation_level = isolation;
        let client = |doing: &str| {
            let doing = format!("{doing} {topic}");
            move |e| CliError::Failed(format!("{doing}: {e}"))
        };
        let mut consumer = Consumer::new(config)
            .await
            .map_err(client("connecting to read"))?;
        let tps = consumer
            .assign_topics(&[topic])
            .await
            .map_err(client("assigning the partitions of"))?;
        for tp in &tps {
            consumer
                .seek(tp, Offset::Beginning)
                .map_err(client("seeking to the beginning of"))?;
        }
        tracing::debug!(topic, partitions = tps.len(), "latency probe started");
        Ok(Probe {
            consumer,
            topic: topic.to_owned(),
            seen: Vec::new(),
        })
    }

    /// One poll of at most `max_wait`; returns how many records it brought.
    ///
    /// # Errors
    /// [`CliError::Failed`] naming the topic when the read fails.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<usize> {
        let records = self
            .consumer
            .poll(max_wait)
            .await
            .map_err(|e| CliError::Failed(format!("reading {}: {e}", self.topic)))?;
        let at = now_ms();
        let n = records.len();
        self.seen.extend(records.into_iter().map(|r| Visible {
            record: TopicRecord {
                partition: r.partition,
                offset: r.offset,
                value: r.value.map(|v| v.to_vec()),
            },
            visible_at: at,
        }));
        Ok(n)
    }

    /// Polls until at least `count` records were seen or `deadline`; returns whether the
    /// count was reached.
    ///
    /// # Errors
    /// As [`Probe::poll`].
    pub async fn until(&mut self, count: usize, deadline: Instant) -> Result<bool> {
        while self.seen.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.poll(left.min(Duration::from_millis(200))).await?;
        }
        Ok(true)
    }

    /// The records seen so far, in the order seen.
    pub fn seen(&self) -> &[Visible] {
        &self.seen
    }
}
