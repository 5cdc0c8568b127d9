//! A keyed subtask: owns a contiguous range of key groups (routing::key_group_range), reads one
//! bounded channel per subtask upstream (the sources, or the previous keyed stage), runs its
//! keyed stage on its slice of the state, writes to its own sink (task id = subtask index) or
//! on to the next keyed stage (`stage_out`), and aligns barriers (alignment::Alignment) before
//! it snapshots and acks with its state delta and its sink's committables.

use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{Receiver, UnboundedReceiver, UnboundedSender};

use super::alignment::{Alignment, Step};
use super::message::{Control, Data, Report};
use super::output::SinkTask;
use super::stage_out::StageOut;
use crate::engine::checkpoint::{CheckpointId, Positions, TaskId};
use crate::engine::runtime::hook;
use crate::engine::runtime::topology::KeyedStage;
use crate::engine::runtime::RuntimeError;
use crate::engine::time::InputWatermarks;

/// The wall clock, ms since the epoch (what processing-time timers are set in).
fn wall_ms() -> i64 {
    i64::try_from(crate::engine::clock::now_ms()).unwrap_or(i64::MAX)
}

/// Sleeps until `at` (for ever without one: the caller's `select!` guard leaves that out).
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One keyed subtask.
pub(crate) struct KeyedSubtask {
    pub task: TaskId,
    /// Input i is the channel from upstream subtask i (`None` once it is gone).
    pub inputs: Vec<Option<Receiver<Data>>>,
    pub alignment: Alignment,
    pub stage: Box<dyn KeyedStage>,
    /// The upstream watermarks (of sources with partitions), the smallest drives the stage.
    pub watermarks: InputWatermarks,
    /// The sink, or the next keyed stage.
    pub out: StageOut,
    /// A watermark the stage reached whose firing is still being written: the next stage
    /// hears it once the firing is done (`stage_out`).
    pub unsent_watermark: Option<i64>,
    pub control: UnboundedReceiver<Control>,
    pub reports: UnboundedSender<Report>,
    /// How long held outputs may wait for a free pool slot.
    pub patience: Duration,
    /// The input read first next time (round robin, so no input starves the others).
    pub next: usize,
    /// Test hook `ONCEFLOW_TEST_SKIP=alignment`: the last checkpoint snapshotted at its first
    /// barrier, unaligned (`None` in every real run: `unaligned` is false).
    pub unaligned: bool,
    pub last_unaligned: Option<CheckpointId>,
}

impl KeyedSubtask {
    /// Runs until the coordinator or every source is gone (Ok) or an error.
    pub(crate) async fn run(mut self) -> Result<(), RuntimeError> {
        loop {
            if self.out.is_holding() {
                self.out.flush().await?;
                if self.out.is_holding() {
                    let control = SinkTask::wait_for_control(&mut self.control, self.patience);
                    match control.await? {
                        Some(c) => self.on_control(c).await?,
                        None => return Ok(()),
                    }
                    continue;
                }
            }
            if !self.drain_control().await? {
                return Ok(());
            }
            if self.stage.firing() {
                // The rest of a watermark's firing, a chunk per turn, each written (or held)
                // before the next: no input is read until it is done, so no barrier passes it.
                let mut out = Vec::new();
                let more = self.stage.fire_more(&mut out)?;
                self.out.write(out).await?;
                if !more {
                    if let Some(w) = self.unsent_watermark.take() {
                        self.out.watermark(w).await?;
                    }
                }
                continue;
            }
            let start = self.next;
            self.next = (self.next + 1) % self.inputs.len().max(1);
            // The stage's next processing-time timer, as a point on the monotonic clock.
            let timer = self.stage.next_processing_timer();
            let due = timer.map(|t| {
                let wait = t.saturating_sub(wall_ms()).max(0);
                tokio::time::Instant::now() + Duration::from_millis(wait.unsigned_abs())
            });
            tokio::select! {
                biased;
                c = self.control.recv() => match c {
                    Some(c) => self.on_control(c).await?,
                    None => return Ok(()),
                },
                () = sleep_until_some(due), if due.is_some() => {
                    let mut out = Vec::new();
                    self.stage.on_processing_time(wall_ms(), &mut out)?;
                    self.out.write(out).await?;
                }
                d = recv_unblocked(&mut self.inputs, &self.alignment, start) => match d {
                    Some((i, d)) => self.on_data(i, d).await?,
                    None => return Ok(()),
                },
            }
        }
    }

    /// Handles every control message already queued; false when the coordinator is gone.
    async fn drain_control(&mut self) -> Result<bool, RuntimeError> {
        loop {
            match self.control.try_recv() {
                Ok(c) => self.on_control(c).await?,
                Err(TryRecvError::Empty) => return Ok(true),
                Err(TryRecvError::Disconnected) => return Ok(false),
            }
        }
    }

    async fn on_control(&mut self, c: Control) -> Result<(), RuntimeError> {
        match c {
            Control::Cancel(id) => {
                let state = self.stage.state_mut();
                if state.in_flight() == Some(id.0) {
                    // Its changes go back under the active buffer, into the next snapshot.
                    state.cancel(id.0)?;
                }
            }
            Control::Completed(id) => {
                let state = self.stage.state_mut();
                if state.in_flight() == Some(id.0) {
                    state.complete(id.0)?;
                }
            }
            Control::Commit {
                checkpoint,
                committable,
            } => {
                let outcome = self.out.commit(checkpoint, &committable).await?;
                let _ = self.reports.send(Report::CommitResult {
                    committable,
                    outcome,
                });
            }
            Control::Release(c) => self.out.release(&c),
            Control::InjectBarrier(id) | Control::InjectFinalBarrier(id) => {
                return Err(RuntimeError::Internal(format!(
                "{}: barrier {id} injected into a keyed subtask (barriers come from the sources)",
                self.task
            )))
            }
        }
        Ok(())
    }

    async fn on_data(&mut self, input: usize, data: Data) -> Result<(), RuntimeError> {
        match data {
            Data::Record { key, time, element } => {
                let mut out = Vec::new();
                self.stage.process(&key, time, element, &mut out)?;
                self.out.write(out).await?;
            }
            Data::Output(out) => self.out.write(vec![out]).await?,
            Data::Watermark(w) => {
                let input = u32::try_from(input).unwrap_or(u32::MAX);
                let before = self.watermarks.current();
                let combined = self.watermarks.advance(input, w, Instant::now());
                self.fire_to(before, combined).await?;
            }
            Data::Idle(since) => {
                let input = u32::try_from(input).unwrap_or(u32::MAX);
                let before = self.watermarks.current();
                let combined = self.watermarks.set_idle(input, since);
                self.fire_to(before, combined).await?;
            }
            Data::Barrier(id) if self.unaligned => {
                // Protection off (inverse test only): snapshot at N's first barrier, ignore
                // its others, never block an input.
                if self.last_unaligned.is_none_or(|last| id > last) {
                    self.last_unaligned = Some(id);
                    self.snapshot(id).await?;
                }
            }
            Data::Barrier(id) => {
                let step = self
                    .alignment
                    .on_barrier(input, id, self.inputs.len())
                    .map_err(|e| RuntimeError::Internal(format!("{}: {e}", self.task)))?;
                match step {
                    Step::Block => {
                        tracing::trace!(task = %self.task, checkpoint = id.0, input, "input blocked for alignment");
                    }
                    Step::Aligned(id) => self.snapshot(id).await?,
                }
            }
        }
        Ok(())
    }

    /// The combined watermark moved from `before` to `combined`: the stage fires what that
    /// closes (an idle source saying so again every few hundred ms changes nothing).
    async fn fire_to(
        &mut self,
        before: Option<i64>,
        combined: Option<i64>,
    ) -> Result<(), RuntimeError> {
        if let Some(combined) = combined.filter(|c| before.is_none_or(|b| *c > b)) {
            let mut out = Vec::new();
            self.stage.advance_to(combined, &mut out)?;
            self.out.write(out).await?;
            // Protection off (inverse test only): on at once, before the firing's last chunk.
            let early = || hook::skipped(hook::Protection::StageWatermark);
            if self.stage.firing() && !early() {
                self.unsent_watermark = Some(combined);
            } else {
                self.out.watermark(combined).await?;
            }
        }
        Ok(())
    }

    /// Aligned on barrier N: snapshot the state, prepare the sink's transaction, ack.
    async fn snapshot(&mut self, id: CheckpointId) -> Result<(), RuntimeError> {
        // The coordinator sent Completed/Cancel of the previous checkpoint before it injected
        // this barrier, so those messages are queued by now: handle them first.
        if !self.drain_control().await? {
            return Ok(());
        }
        let state = self.stage.state_mut();
        if let Some(m) = state.in_flight() {
            // Still in flight: checkpoint m was cancelled before its barrier got here (the
            // Cancel found nothing to cancel). Its changes belong to this snapshot.
            if m < id.0 {
                state.cancel(m)?;
            }
        }
        let delta = self.stage.snapshot(id.0)?;
        let committables = self.out.barrier(id).await?;
        tracing::debug!(task = %self.task, checkpoint = id.0, watermark = ?self.stage.watermark(), "aligned and snapshotted");
        let _ = self.reports.send(Report::Ack {
            id,
            task: self.task,
            delta: Some(vec![delta]),
            positions: Positions::new(),
            committables,
        });
        Ok(())
    }
}

/// The next message of any input not blocked by the alignment, trying them from `start` on;
/// `None` once every input is gone. Cancel-safe (a message is taken only when returned).
async fn recv_unblocked(
    inputs: &mut [Option<Receiver<Data>>],
    alignment: &Alignment,
    start: usize,
) -> Option<(usize, Data)> {
    let n = inputs.len();
    std::future::poll_fn(|cx| {
        let mut open = 0;
        for k in 0..n {
            let i = (start + k) % n;
            let Some(rx) = inputs[i].as_mut() else {
                continue;
            };
            open += 1;
            if alignment.is_blocked(i) {
                continue;
            }
            match rx.poll_recv(cx) {
                Poll::Ready(Some(d)) => return Poll::Ready(Some((i, d))),
                Poll::Ready(None) => {
                    inputs[i] = None;
                    open -= 1;
                }
                Poll::Pending => {}
            }
        }
        if open == 0 {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    })
    .await
}
