//! What flows between the runtime's tasks: [`Data`] on the bounded channels from a source
//! subtask to the keyed subtasks (records, watermarks, barriers, in one FIFO per channel, so a
//! barrier never overtakes a record on its channel), [`Control`] from the coordinator to a
//! subtask, [`Report`] from a subtask to the coordinator.

use std::sync::atomic::AtomicU64;

use crate::engine::checkpoint::{CheckpointId, CommitOutcome, Positions, TaskId};
use crate::engine::runtime::topology::{Element, Output};
use crate::engine::runtime::RuntimeError;
use crate::engine::sink::PreparedOutput;
use crate::engine::state::FrozenDelta;

/// The committable of this runtime.
pub(crate) type C = PreparedOutput;
/// A task's state delta in an ack.
pub(crate) type D = Vec<FrozenDelta>;

/// Source subtask → keyed subtask.
#[derive(Debug)]
pub(crate) enum Data {
    /// A keyed element for the keyed stage: its key's canonical bytes and its event time.
    Record {
        key: Vec<u8>,
        time: i64,
        element: Element,
    },
    /// An output made by the source chain itself (a dead-letter record), for the keyed
    /// subtask's sink as it is.
    Output(Output),
    /// The source subtask's watermark advanced to this.
    Watermark(i64),
    /// Every partition of the source subtask has been caught up (idle) as of this instant:
    /// leave it out of the watermark until its next watermark. Said again while it lasts,
    /// since after a resumption only an idleness established a hold later counts.
    Idle(std::time::Instant),
    /// Everything before this on the channel belongs to checkpoint N, everything after to
    /// later ones.
    Barrier(CheckpointId),
}

/// Coordinator → subtask.
#[derive(Debug)]
pub(crate) enum Control {
    /// Sources only: record positions, send the barrier downstream (or snapshot the chained
    /// sink), ack.
    InjectBarrier(CheckpointId),
    /// Sources only: the final checkpoint of a stop. Like `InjectBarrier`, then read no more
    /// input (the subtask still answers the coordinator: commits, releases, another final
    /// barrier when this one is cancelled).
    InjectFinalBarrier(CheckpointId),
    /// The checkpoint was cancelled: its frozen state goes back into the active buffer.
    Cancel(CheckpointId),
    /// The checkpoint is durable: drop its frozen state.
    Completed(CheckpointId),
    /// Commit this committable of the subtask's sink (and every prepared one ≤ checkpoint).
    Commit {
        /// The durable checkpoint.
        checkpoint: CheckpointId,
        /// Which one the coordinator waits for.
        committable: C,
    },
    /// The committable's pool slot is free again.
    Release(C),
}

/// Subtask → coordinator.
#[derive(Debug)]
pub(crate) enum Report {
    /// The subtask took checkpoint `id`.
    Ack {
        id: CheckpointId,
        task: TaskId,
        delta: Option<D>,
        positions: Positions,
        committables: Vec<C>,
    },
    /// How a [`Control::Commit`] ended.
    CommitResult {
        committable: C,
        outcome: CommitOutcome,
    },
    /// The subtask stopped with this error: the job stops.
    Failed { task: TaskId, error: RuntimeError },
}

/// Counters the subtasks share with the coordinator's summary.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
}
