//! Counters a producer keeps about its batches, as the Java client's `record-retry-total` and
//! friends: cheap atomics bumped by the sender, read with [`Producer::metrics`].
//!
//! [`Producer::metrics`]: super::Producer::metrics

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a producer's counters since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProducerMetrics {
    /// Batches acknowledged by the broker (DUPLICATE_SEQUENCE_NUMBER included).
    pub batches_acknowledged: u64,
    /// Times a batch went back into its queue to be sent again (after a retriable error or
    /// a request with no answer).
    pub batches_retried: u64,
    /// Batches whose records were failed (for good, expired, or dropped by an abort).
    pub batches_failed: u64,
    /// Epoch bumps after a possible sequence gap (KIP-360), and under KIP-890 the epochs each
    /// transaction's end moved to.
    pub epoch_bumps: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub batches_acknowledged: AtomicU64,
    pub batches_retried: AtomicU64,
    pub batches_failed: AtomicU64,
    pub epoch_bumps: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ProducerMetrics {
        ProducerMetrics {
            batches_acknowledged: self.batches_acknowledged.load(Ordering::Relaxed),
            batches_retried: self.batches_retried.load(Ordering::Relaxed),
            batches_failed: self.batches_failed.load(Ordering::Relaxed),
            epoch_bumps: self.epoch_bumps.load(Ordering::Relaxed),
        }
    }
}
