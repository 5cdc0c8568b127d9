//! Where a keyed subtask's outputs go: the last keyed stage writes them to its sink; an
//! earlier one passes them through the topology's link to the next stage's keyed subtasks
//! (one bounded channel per pair, as from the sources), with its barriers and, once a
//! firing is written, its watermark.
//!
//! Why the watermark waits for the firing: stage k fires the windows a watermark W closes in
//! chunks. If W went on before the last chunk, the next stage could close its own window at W
//! and only then receive results that belong in it (late there, though nothing was late). On
//! one channel nothing overtakes, so results first, then W, keeps the next stage's output
//! the same as a run with one subtask per stage.

use std::sync::Arc;

use tokio::sync::mpsc::Sender;

use super::message::{Data, C};
use super::output::SinkTask;
use crate::engine::checkpoint::{CheckpointId, CommitOutcome};
use crate::engine::metrics::Metrics;
use crate::engine::runtime::bad_record;
use crate::engine::runtime::routing::subtask_of_key;
use crate::engine::runtime::topology::{Emitted, InputRecord, Output, SourceChain};
use crate::engine::runtime::RuntimeError;
use crate::engine::settings::ErrorTolerance;

/// A keyed subtask's downstream.
pub(crate) enum StageOut {
    /// The last stage: its own sink (task id = subtask index).
    Sink(Box<SinkTask>),
    /// An earlier stage: the next stage's keyed subtasks.
    Next(NextStage),
}

/// The way from keyed stage k to stage k + 1.
pub(crate) struct NextStage {
    /// Stage k's outputs to stage k + 1's elements.
    pub link: Box<dyn SourceChain>,
    /// Channel i goes to stage k + 1's subtask i.
    pub channels: Vec<Sender<Data>>,
    pub key_groups: u16,
    /// This subtask's index (its own channel carries outputs that pass as they are).
    pub index: usize,
    /// Stage k (1-based in what records and logs say).
    pub stage: usize,
    /// What a result the link cannot process becomes (`errors.tolerance`).
    pub errors: ErrorTolerance,
    pub metrics: Arc<Metrics>,
    /// Position of the next output passed through the link (its offset in messages).
    pub sequence: i64,
}

impl StageOut {
    /// Whether the sink holds outputs until a pool slot is free (never for a next stage: its
    /// channels wait instead).
    pub(crate) fn is_holding(&self) -> bool {
        matches!(self, StageOut::Sink(s) if s.is_holding())
    }

    /// Writes what the sink holds, if it can now.
    pub(crate) async fn flush(&mut self) -> Result<(), RuntimeError> {
        match self {
            StageOut::Sink(s) => s.flush().await,
            StageOut::Next(_) => Ok(()),
        }
    }

    /// Writes `outputs` to the sink, or sends them on to the next stage in order (waiting
    /// while a channel is full: back-pressure).
    pub(crate) async fn write(&mut self, outputs: Vec<Output>) -> Result<(), RuntimeError> {
        match self {
            StageOut::Sink(s) => s.write(outputs).await,
            StageOut::Next(next) => next.send(outputs).await,
        }
    }

    /// The stage's watermark is now `w` and what it fired is written: the next stage hears it.
    pub(crate) async fn watermark(&mut self, w: i64) -> Result<(), RuntimeError> {
        match self {
            StageOut::Sink(_) => Ok(()),
            StageOut::Next(next) => {
                broadcast(&next.channels, next.stage, || Data::Watermark(w)).await
            }
        }
    }

    /// Barrier `id` after the snapshot: the sink prepares its transaction (its committables),
    /// or the barrier goes on to every subtask of the next stage (none).
    pub(crate) async fn barrier(&mut self, id: CheckpointId) -> Result<Vec<C>, RuntimeError> {
        match self {
            StageOut::Sink(s) => s.barrier(id).await,
            StageOut::Next(next) => {
                broadcast(&next.channels, next.stage, || Data::Barrier(id)).await?;
                Ok(Vec::new())
            }
        }
    }

    /// Commits the sink's committable.
    ///
    /// # Errors
    /// As the sink's commit; a stage without a sink has no committable (a bug if asked).
    pub(crate) async fn commit(
        &mut self,
        checkpoint: CheckpointId,
        committable: &C,
    ) -> Result<CommitOutcome, RuntimeError> {
        match self {
            StageOut::Sink(s) => s.commit(checkpoint, committable).await,
            StageOut::Next(next) => Err(no_sink(next.stage)),
        }
    }

    /// Frees the committable's pool slot (a stage without a sink has none).
    pub(crate) fn release(&mut self, c: &C) {
        if let StageOut::Sink(s) = self {
            s.release(c);
        }
    }
}

fn no_sink(stage: usize) -> RuntimeError {
    RuntimeError::Internal(format!(
        "keyed stage {stage} has no sink, but was asked to commit"
    ))
}

/// Sends `d` to every subtask of the stage after `stage`.
async fn broadcast(
    channels: &[Sender<Data>],
    stage: usize,
    d: impl Fn() -> Data,
) -> Result<(), RuntimeError> {
    for (i, ch) in channels.iter().enumerate() {
        ch.send(d()).await.map_err(|_| gone(stage, i))?;
    }
    Ok(())
}

/// Sends `d` on subtask `index`'s own channel.
async fn to_own(
    channels: &[Sender<Data>],
    stage: usize,
    index: usize,
    d: Data,
) -> Result<(), RuntimeError> {
    let i = index % channels.len().max(1);
    let ch = channels.get(i).ok_or_else(|| gone(stage, i))?;
    ch.send(d).await.map_err(|_| gone(stage, i))
}

impl NextStage {
    async fn send(&mut self, outputs: Vec<Output>) -> Result<(), RuntimeError> {
        let mut emitted = Vec::new();
        for out in outputs {
            if out.topic.is_some() {
                // A late record or a dead letter: as it is, to the last stage's sink, on this
                // subtask's own channel (in order with its barriers).
                to_own(&self.channels, self.stage, self.index, Data::Output(out)).await?;
                continue;
            }
            let topic = format!("(keyed stage {} results)", self.stage);
            let key = out.key.map(bytes::Bytes::from);
            let input = InputRecord {
                topic: &topic,
                partition: i32::try_from(self.index).unwrap_or(i32::MAX),
                offset: self.sequence,
                timestamp: 0,
                key: key.as_ref(),
                value: Some(&out.value),
            };
            self.sequence = self.sequence.saturating_add(1);
            self.link.process(&input, &mut emitted);
            for e in emitted.drain(..) {
                match e {
                    Emitted::Keyed { key, time, element } => {
                        let i = subtask_of_key(&key, self.channels.len(), self.key_groups);
                        let ch = self.channels.get(i).ok_or_else(|| gone(self.stage, i))?;
                        ch.send(Data::Record { key, time, element })
                            .await
                            .map_err(|_| gone(self.stage, i))?;
                    }
                    Emitted::Out(o) => {
                        to_own(&self.channels, self.stage, self.index, Data::Output(o)).await?
                    }
                    Emitted::Bad { reason } => {
                        if let Some(o) =
                            bad_record::settle(&self.errors, &input, &reason, &self.metrics)?
                        {
                            to_own(&self.channels, self.stage, self.index, Data::Output(o)).await?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn gone(stage: usize, i: usize) -> RuntimeError {
    RuntimeError::Internal(format!("subtask {i} of keyed stage {} is gone", stage + 1))
}
