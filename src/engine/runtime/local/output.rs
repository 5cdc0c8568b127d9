//! A subtask's sink: its [`KafkaWriter`] (task id = subtask index, transactional ids
//! `<prefix>-<subtask>-<slot>`) or its [`FileWriter`] (part files `<prefix>-<subtask>-…`), the
//! outputs held back by the pool's back-pressure, and the bookkeeping of its commits and
//! slots.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use super::message::{Control, Counters, C};
use crate::client::ProducerRecord;
use crate::engine::checkpoint::{self, CheckpointId, CommitOutcome};
use crate::engine::job::codec::ValueEncoder;
use crate::engine::metrics::Metrics;
use crate::engine::runtime::observe;
use crate::engine::runtime::topology::Output;
use crate::engine::runtime::RuntimeError;
use crate::engine::sink::file::FileWriter;
use crate::engine::sink::{KafkaWriter, PreparedFiles, PreparedOutput, SinkCommit, Written};

/// A sink task's writer.
pub(crate) enum TaskSink {
    /// Transactions on the output topic (boxed, as the file sink: a task holds one of them,
    /// and the two differ much in size).
    Kafka(Box<KafkaWriter>),
    /// Part files in the output directory.
    File(Box<FileWriter>),
}

/// A subtask's sink and what it holds.
pub(crate) struct SinkTask {
    sink: TaskSink,
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
    /// How outputs for the sink's topic are written, when not as they are (JSON).
    encoder: Option<Arc<ValueEncoder>>,
}

fn sink_outcome(o: SinkCommit) -> CommitOutcome {
    match o {
        SinkCommit::Committed => CommitOutcome::Completed,
        SinkCommit::AlreadyCommitted => CommitOutcome::AlreadyCommitted,
    }
}

impl SinkTask {
    pub(crate) fn new(
        sink: TaskSink,
        topic: String,
        counters: Arc<Counters>,
        metrics: Arc<Metrics>,
        encoder: Option<Arc<ValueEncoder>>,
    ) -> SinkTask {
        if let TaskSink::Kafka(k) = &sink {
            observe::sink(&metrics, Some(k));
        }
        SinkTask {
            sink,
            topic,
            held: VecDeque::new(),
            slots: BTreeMap::new(),
            committed: BTreeMap::new(),
            counters,
            metrics,
            encoder,
        }
    }

    /// The Kafka sink, for the metrics.
    pub(crate) fn kafka(&self) -> Option<&KafkaWriter> {
        match &self.sink {
            TaskSink::Kafka(k) => Some(k),
            TaskSink::File(_) => None,
        }
    }

    /// Whether outputs are held back (no barrier may pass).
    pub(crate) fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Writes `outputs` (after any held ones); what the pool cannot take is held.
    pub(crate) async fn write(&mut self, outputs: Vec<Output>) -> Result<(), RuntimeError> {
        if let TaskSink::File(f) = &mut self.sink {
            // A file takes every record at once: nothing is ever held.
            for out in outputs {
                f.write(&out.value)?;
                self.counters.records_out.fetch_add(1, Ordering::Relaxed);
                self.metrics.record_out();
            }
            return Ok(());
        }
        for mut out in outputs {
            if let (None, Some(encoder)) = (&out.topic, &self.encoder) {
                out.value = encoder.encode(&self.topic, &out.value).await?;
            }
            self.held.push_back(out.into_record(&self.topic));
        }
        self.flush().await
    }

    /// Hands the held outputs to the sink until it pushes back.
    pub(crate) async fn flush(&mut self) -> Result<(), RuntimeError> {
        let TaskSink::Kafka(sink) = &mut self.sink else {
            return Ok(());
        };
        while let Some(r) = self.held.pop_front() {
            match sink.write(r).await? {
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

    /// The barrier reached the sink: prepare the open transaction, or close the open part
    /// file.
    pub(crate) async fn barrier(&mut self, id: CheckpointId) -> Result<Vec<C>, RuntimeError> {
        let sink = match &mut self.sink {
            TaskSink::File(f) => {
                let pending = f.on_barrier(id.0)?;
                return Ok(pending
                    .map(|p| PreparedOutput::Files(PreparedFiles::new(p)))
                    .into_iter()
                    .collect());
            }
            TaskSink::Kafka(k) => k,
        };
        let committable = sink.on_barrier(id.0).await?;
        let committables: Vec<C> = committable
            .map(|c| PreparedOutput::Transaction(c.transaction))
            .into_iter()
            .collect();
        for c in &committables {
            self.slots.insert(c.name().to_owned(), id);
        }
        observe::sink(&self.metrics, Some(sink));
        Ok(committables)
    }

    /// The sink commits every prepared transaction of checkpoints ≤ N (and owns the
    /// retries), or renames the part files of `committable`; returns how `committable` ended.
    pub(crate) async fn commit(
        &mut self,
        n: CheckpointId,
        committable: &C,
    ) -> Result<CommitOutcome, RuntimeError> {
        let sink = match (&mut self.sink, committable) {
            (TaskSink::File(f), PreparedOutput::Files(p)) => {
                return Ok(sink_outcome(f.commit(&p.pending)?));
            }
            (TaskSink::Kafka(k), PreparedOutput::Transaction(_)) => k,
            _ => {
                return Err(RuntimeError::Internal(format!(
                    "{} reached a sink of the other kind",
                    committable.name()
                )))
            }
        };
        for done in sink.on_checkpoint_durable(n.0).await? {
            self.committed
                .insert(done.transactional_id, sink_outcome(done.outcome));
        }
        observe::sink(&self.metrics, Some(sink));
        match self.committed.remove(committable.name()) {
            Some(o) => Ok(o),
            None if checkpoint::Committable::is_empty(committable) => {
                Ok(CommitOutcome::NothingToCommit)
            }
            None => Err(RuntimeError::Internal(format!(
                "the sink did not commit {} of checkpoint {n}",
                committable.name()
            ))),
        }
    }

    /// Frees the committable's pool slot (a file sink has none).
    pub(crate) fn release(&mut self, c: &C) {
        if let (Some(n), TaskSink::Kafka(k)) = (self.slots.remove(c.name()), &mut self.sink) {
            k.release(n.0);
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
