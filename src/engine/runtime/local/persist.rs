//! The checkpoint write on a blocking thread, with a deadline.
//!
//! `StateStore::persist` is a synchronous fjall batch with SyncAll; a disk that stops
//! answering would leave it (and so the checkpoint, the sink's pool and finally the task)
//! waiting forever. [`Persister::poll`] reports a write still running at its checkpoint's
//! deadline (trigger + `checkpoint.timeout.ms`: the acks and the write share one timeout, as
//! the timeout budget counts it) as failed, so the coordinator fails the job (PersistFailed)
//! with a line saying so, and the restart recovers from the latest durable checkpoint.
//!
//! **Single writer.** A thread blocked in fsync cannot be cancelled: the timed-out write may
//! still finish (or not) later. The store allows one writer at a time, so the handle of a
//! timed-out write is kept, not dropped, and [`Persister::start`] refuses to start another
//! while it runs; on top of that the coordinator decides no Persist after failing the job,
//! and the store's mutex would hold a second writer back.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::engine::checkpoint::CheckpointId;
use crate::engine::runtime::RuntimeError;

/// The one write under way.
struct Running {
    id: CheckpointId,
    handle: JoinHandle<Result<(), String>>,
    deadline: Instant,
    /// Its timeout was reported already.
    timed_out: bool,
}

/// Runs checkpoint writes one at a time, each within a timeout.
pub(crate) struct Persister {
    timeout: Duration,
    running: Option<Running>,
}

impl Persister {
    /// Writes time out after `timeout` (`checkpoint.timeout.ms`).
    pub(crate) fn new(timeout: Duration) -> Self {
        Persister {
            timeout,
            running: None,
        }
    }

    /// `checkpoint.timeout.ms`.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A write is under way (also one that timed out and still runs).
    #[cfg(test)]
    pub(crate) fn is_busy(&self) -> bool {
        self.running.is_some()
    }

    /// Starts writing checkpoint `id` with `write` on a blocking thread; it times out after
    /// `within` (what is left of the checkpoint's timeout once every task acknowledged it).
    ///
    /// # Errors
    /// [`RuntimeError::Internal`] while another write still runs (the single-writer rule).
    pub(crate) fn start<F>(
        &mut self,
        id: CheckpointId,
        within: Duration,
        write: F,
    ) -> Result<(), RuntimeError>
    where
        F: FnOnce() -> Result<(), String> + Send + 'static,
    {
        if let Some(r) = &self.running {
            return Err(RuntimeError::Internal(format!(
                "checkpoint {id}'s write was decided while checkpoint {}'s still runs; the state store takes one writer at a time",
                r.id
            )));
        }
        self.running = Some(Running {
            id,
            handle: tokio::task::spawn_blocking(write),
            deadline: Instant::now() + within.min(self.timeout),
            timed_out: false,
        });
        Ok(())
    }

    /// The write's outcome once there is one: `Ok(id)` written, `Err(reason)` failed or past
    /// its timeout (reported once; the write keeps its slot until its thread returns).
    pub(crate) async fn poll(&mut self) -> Option<Result<CheckpointId, String>> {
        let r = self.running.as_mut()?;
        if r.handle.is_finished() {
            let r = self.running.take()?;
            let answer = match r.handle.await {
                Ok(written) => written.map(|()| r.id),
                Err(e) => Err(format!("the writer's thread: {e}")),
            };
            // A timed-out write was reported already; its late answer changes nothing.
            return (!r.timed_out).then_some(answer);
        }
        if r.timed_out || Instant::now() < r.deadline {
            return None;
        }
        r.timed_out = true;
        tracing::error!(
            checkpoint = r.id.0,
            timeout_ms = self.timeout.as_millis() as u64,
            "checkpoint write timed out"
        );
        Some(Err(format!(
            "the checkpoint was not acknowledged and written within checkpoint.timeout.ms = {} ms of its trigger (is the state directory's disk answering?)",
            self.timeout.as_millis()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A write that blocks until the test lets it go.
    fn gated() -> (
        mpsc::Sender<()>,
        impl FnOnce() -> Result<(), String> + Send + 'static,
    ) {
        let (tx, rx) = mpsc::channel::<()>();
        (tx, move || rx.recv().map_err(|e| e.to_string()))
    }

    /// The next answer; a bounded wait, so a persister that never answers fails the test.
    async fn answer(p: &mut Persister) -> Result<CheckpointId, String> {
        let wait = async {
            loop {
                if let Some(a) = p.poll().await {
                    return a;
                }
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .expect("the persister gave no answer within 30 s")
    }

    #[tokio::test]
    async fn a_write_in_time_is_reported_written() {
        let mut p = Persister::new(Duration::from_secs(600));
        let (go, write) = gated();
        p.start(CheckpointId(1), Duration::from_secs(600), write)
            .unwrap();
        assert_eq!(p.poll().await, None, "not finished, not timed out");
        go.send(()).unwrap();
        assert_eq!(answer(&mut p).await, Ok(CheckpointId(1)));
        assert!(!p.is_busy());
    }

    #[tokio::test]
    async fn a_write_gets_only_what_the_acks_left_of_the_checkpoint_timeout() {
        let mut p = Persister::new(Duration::from_secs(600));
        let (_go, write) = gated();
        p.start(CheckpointId(1), Duration::ZERO, write).unwrap();
        let failed = answer(&mut p).await.unwrap_err();
        assert!(failed.contains("of its trigger"), "{failed}");
    }

    #[tokio::test]
    async fn a_write_past_its_timeout_fails_once_and_blocks_the_next_until_it_returns() {
        let mut p = Persister::new(Duration::ZERO);
        let (go, write) = gated();
        p.start(CheckpointId(1), Duration::from_secs(600), write)
            .unwrap();
        let failed = answer(&mut p).await.unwrap_err();
        assert!(failed.contains("checkpoint.timeout.ms = 0 ms"), "{failed}");
        assert_eq!(p.poll().await, None, "reported once");
        // Single writer: no second write while the first still runs.
        let (_go2, write2) = gated();
        assert!(p
            .start(CheckpointId(2), Duration::from_secs(600), write2)
            .is_err());
        go.send(()).unwrap();
        while p.is_busy() {
            assert_eq!(p.poll().await, None, "a late answer changes nothing");
            tokio::task::yield_now().await;
        }
        let (go3, write3) = gated();
        p.start(CheckpointId(3), Duration::from_secs(600), write3)
            .unwrap();
        drop(go3);
    }
}
