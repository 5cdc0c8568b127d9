//! A subtask's sink: its [`KafkaSink`] (task id = subtask index, transactional ids
//! `<prefix>-<subtask>-<slot>`), the outputs held back by the pool's back-pressure, and the
//! bookkeeping of its commits and slots.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use super::message::{Control, Counters, C};
use super::observe;
use super::pipeline::Output;
use super::RuntimeError;
use crate::client::ProducerRecord;
use crate::engine::checkpoint::{CheckpointId, CommitOutcome};
use crate::engine::metrics::Metrics;
use crate::engine::sink::{self, KafkaSink, Written};

/// A subtask's sink and what it holds.
pub(crate) struct SinkTask {
    sink: KafkaSink,
    topic: String,
    /// Outputs the pool could not take yet; no barrier passes while any is held (they
    /// belong before it).
    held: VecDeque<ProducerRecord>,
    /// Transactional id → the checkpoint it was prepared for (to release its slot).
    slots: BTreeMap<String, CheckpointId>,
    /// Commits done by an earlier `on_checkpoint_durable`, not yet asked for.
    committed: BTreeMap<String, CommitOutcome>,
    counters: Arc<Counters>,
    metrics: Arc<Metrics>,
}

fn sink_outcome(o: sink::CommitOutcome) -> CommitOutcome {
    match o {
        sink::CommitOutcome::Committed => CommitOutcome::Completed,
        sink::CommitOutcome::AlreadyCommitted => CommitOutcome::AlreadyCommitted,
        _ => CommitOutcome::NotCommitted("lost, and continue_on_data_loss went on".into()),
    }
}

impl SinkTask {
    pub(crate) fn new(
        sink: KafkaSink,
        topic: String,
        counters: Arc<Counters>,
        metrics: Arc<Metrics>,
    ) -> SinkTask {
        observe::sink(&metrics, Some(&sink));
        SinkTask {
            sink,
            topic,
            held: VecDeque::new(),
            slots: BTreeMap::new(),
            committed: BTreeMap::new(),
            counters,
            metrics,
        }
    }

    /// The sink, for the metrics.
    pub(crate) fn sink(&self) -> &KafkaSink {
        &self.sink
    }

    /// Whether outputs are held back (no barrier may pass).
    pub(crate) fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Writes `outputs` (after any held ones); what the pool cannot take is held.
    pub(crate) async fn write(&mut self, outputs: Vec<Output>) -> Result<(), RuntimeError> {
        for out in outputs {
            let topic = out.topic.unwrap_or_else(|| self.topic.clone());
            let mut r = ProducerRecord::new(topic, out.value);
            if let Some(k) = out.key {
                r = r.with_key(k);
            }
            self.held.push_back(r);
        }
        self.flush().await
    }

    /// Hands the held outputs to the sink until it pushes back.
    pub(crate) async fn flush(&mut self) -> Result<(), RuntimeError> {
        while let Some(r) = self.held.pop_front() {
            match self.sink.write(r).await? {
                Written::Sent => {
                    self.counters.records_out.fetch_add(1, Ordering::Relaxed);
                    self.metrics.record_out();
                }
                Written::Backpressure { record, reason } => {
                    tracing::debug!(reason, "sink back-pressure");
                    self.held.push_front(*record);
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The barrier reached the sink: prepare the open transaction.
    pub(crate) async fn barrier(&mut self, id: CheckpointId) -> Result<Vec<C>, RuntimeError> {
        let committable = self.sink.on_barrier(id.0).await?;
        let committables = committable.map(|c| vec![c.transaction]).unwrap_or_default();
        for c in &committables {
            self.slots.insert(c.transactional_id.clone(), id);
        }
        observe::sink(&self.metrics, Some(&self.sink));
        Ok(committables)
    }

    /// The sink commits every prepared transaction of checkpoints ≤ N (and owns the
    /// retries); returns how `committable` ended.
    pub(crate) async fn commit(
        &mut self,
        n: CheckpointId,
        committable: &C,
    ) -> Result<CommitOutcome, RuntimeError> {
        for done in self.sink.on_checkpoint_durable(n.0).await? {
            self.committed
                .insert(done.transactional_id, sink_outcome(done.outcome));
        }
        observe::sink(&self.metrics, Some(&self.sink));
        match self.committed.remove(&committable.transactional_id) {
            Some(o) => Ok(o),
            None if committable.empty => Ok(CommitOutcome::NothingToCommit),
            None => Err(RuntimeError::Internal(format!(
                "the sink did not commit {} of checkpoint {n}",
                committable.transactional_id
            ))),
        }
    }

    /// Frees the committable's pool slot.
    pub(crate) fn release(&mut self, c: &C) {
        if let Some(n) = self.slots.remove(&c.transactional_id) {
            self.sink.release(n.0);
        }
    }

    /// Back-pressure: waits for the coordinator's next message (a release, a commit) while
    /// outputs are held; `None` when the coordinator is gone.
    pub(crate) async fn wait_for_control(
        control: &mut UnboundedReceiver<Control>,
        patience: Duration,
    ) -> Result<Option<Control>, RuntimeError> {
        match tokio::time::timeout(patience, control.recv()).await {
            Ok(c) => Ok(c),
            Err(_) => Err(RuntimeError::Unsupported(format!(
                "every transactional id of the sink's pool stayed busy for {} ms (checkpoint.timeout.ms) with no checkpoint freeing one; restart the job",
                patience.as_millis()
            ))),
        }
    }
}
