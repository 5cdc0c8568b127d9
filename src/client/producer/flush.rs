//! What `flush` waits for: the records sent before it was called, and no others.
//!
//! Every record is covered by a [`FlushTicket`] from `send` until it is resolved (acknowledged,
//! failed, or dropped with the producer). Tickets belong to batches, not records (a lock and
//! two atomic operations per record showed in profiles): a batch holds one ticket for each
//! epoch its records were sent in, usually one, and a batch's records are resolved together.
//! The tickets are the batch's last field, so whatever path resolves it, they are released
//! after every record's future or callback has been told. Tickets are counted per *epoch*; `flush` closes the current epoch and waits
//! until it and every earlier one has no ticket left. Records sent after the call belong to a
//! later epoch and do not hold it up.
//!
//! Waiting for the global count of unresolved records instead, as flush once did, never
//! returned while another clone of the producer kept sending.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

pub(crate) struct FlushTracker {
    state: Mutex<State>,
    /// The current epoch, readable without the lock. A reader may see an older epoch than the
    /// current one; a record then joins an earlier epoch, which only makes a flush wait for it.
    current: AtomicU64,
    drained: Notify,
}

struct State {
    /// The epoch of `pending[0]`.
    base: u64,
    /// Unresolved records per epoch, oldest first; the last entry is the current epoch.
    pending: VecDeque<usize>,
}

impl State {
    /// Drops leading epochs that are closed and empty; whether any was dropped.
    fn advance(&mut self) -> bool {
        let mut advanced = false;
        while self.pending.len() > 1 && self.pending.front() == Some(&0) {
            self.pending.pop_front();
            self.base += 1;
            advanced = true;
        }
        advanced
    }
}

/// Held by one unresolved record; releases it when dropped.
pub(crate) struct FlushTicket {
    tracker: Arc<FlushTracker>,
    epoch: u64,
}

impl FlushTicket {
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

impl Drop for FlushTicket {
    fn drop(&mut self) {
        self.tracker.release(self.epoch);
    }
}

impl Default for FlushTracker {
    fn default() -> Self {
        FlushTracker {
            state: Mutex::new(State {
                base: 0,
                pending: VecDeque::from([0]),
            }),
            current: AtomicU64::new(0),
            drained: Notify::new(),
        }
    }
}

impl FlushTracker {
    pub fn new() -> Arc<FlushTracker> {
        Arc::new(FlushTracker::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current epoch, as of a moment ago (see `current`).
    pub fn current_epoch(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    /// A ticket in the current epoch, for a batch taking a record of that epoch.
    pub fn ticket(self: &Arc<Self>) -> FlushTicket {
        let mut s = self.lock();
        let epoch = s.base + s.pending.len() as u64 - 1;
        if let Some(n) = s.pending.back_mut() {
            *n += 1;
        }
        FlushTicket {
            tracker: self.clone(),
            epoch,
        }
    }

    fn release(&self, epoch: u64) {
        let advanced = {
            let mut s = self.lock();
            let i = epoch.saturating_sub(s.base) as usize;
            if let Some(n) = s.pending.get_mut(i) {
                *n = n.saturating_sub(1);
            }
            s.advance()
        };
        if advanced {
            self.drained.notify_waiters();
        }
    }

    /// Closes the current epoch (later tickets go to a new one) and returns it.
    pub fn close_epoch(&self) -> u64 {
        let (epoch, advanced) = {
            let mut s = self.lock();
            let epoch = s.base + s.pending.len() as u64 - 1;
            s.pending.push_back(0);
            self.current.store(epoch + 1, Ordering::Release);
            (epoch, s.advance())
        };
        if advanced {
            self.drained.notify_waiters();
        }
        epoch
    }

    /// Whether every record of `epoch` and of the epochs before it is resolved.
    pub fn drained(&self, epoch: u64) -> bool {
        self.lock().base > epoch
    }

    /// Waits until [`Self::drained`].
    pub async fn wait(&self, epoch: u64) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            // Registered before the check, so a release between the check and the await is
            // not missed.
            notified.as_mut().enable();
            if self.drained(epoch) {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_waits_for_earlier_records_only() {
        let t = FlushTracker::new();
        let a = t.ticket();
        let b = t.ticket();
        let first = t.close_epoch();
        let later = t.ticket(); // sent after the flush call
        assert!(!t.drained(first));
        drop(a);
        assert!(!t.drained(first));
        drop(b);
        assert!(
            t.drained(first),
            "the later record does not hold the flush up"
        );
        let second = t.close_epoch();
        assert!(!t.drained(second));
        drop(later);
        assert!(t.drained(second));
    }

    #[test]
    fn a_flush_with_nothing_outstanding_is_done_at_once() {
        let t = FlushTracker::new();
        let e = t.close_epoch();
        assert!(t.drained(e));
        let e2 = t.close_epoch();
        assert!(t.drained(e2));
    }

    #[test]
    fn a_later_flush_also_waits_for_an_earlier_epoch() {
        let t = FlushTracker::new();
        let old = t.ticket();
        let first = t.close_epoch();
        let second = t.close_epoch();
        assert!(
            !t.drained(second),
            "records before the first flush were before the second too"
        );
        drop(old);
        assert!(t.drained(first) && t.drained(second));
    }

    #[test]
    fn a_record_resolved_out_of_order_does_not_release_the_wrong_epoch() {
        let t = FlushTracker::new();
        let old = t.ticket();
        let first = t.close_epoch();
        let newer = t.ticket();
        drop(newer); // a later record on a faster partition
        assert!(!t.drained(first));
        drop(old);
        assert!(t.drained(first));
    }
}
