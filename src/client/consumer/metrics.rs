//! Counters a consumer keeps about its Fetch requests, as the Java client's fetch-manager
//! metrics: cheap atomics bumped by the fetcher, read with [`Consumer::metrics`].
//!
//! [`Consumer::metrics`]: super::Consumer::metrics

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a consumer's counters since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerMetrics {
    /// Fetch requests that named every partition wanted from their leader: outside a session,
    /// or the first of one (KIP-227).
    pub fetch_requests_full: u64,
    /// Fetch requests that continued a session and named only what changed.
    pub fetch_requests_incremental: u64,
    /// Bytes of the Fetch requests sent (their encoded bodies, without the header).
    pub fetch_request_bytes: u64,
    /// Times a session was dropped on the broker's word (FETCH_SESSION_ID_NOT_FOUND,
    /// INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR) or because its request got
    /// no answer.
    pub fetch_session_restarts: u64,
    /// Partitions whose topic was found deleted and recreated under a new id while assigned.
    pub topics_recreated: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub fetch_requests_full: AtomicU64,
    pub fetch_requests_incremental: AtomicU64,
    pub fetch_request_bytes: AtomicU64,
    pub fetch_session_restarts: AtomicU64,
    pub topics_recreated: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ConsumerMetrics {
        ConsumerMetrics {
            fetch_requests_full: self.fetch_requests_full.load(Ordering::Relaxed),
            fetch_requests_incremental: self.fetch_requests_incremental.load(Ordering::Relaxed),
            fetch_request_bytes: self.fetch_request_bytes.load(Ordering::Relaxed),
            fetch_session_restarts: self.fetch_session_restarts.load(Ordering::Relaxed),
            topics_recreated: self.topics_recreated.load(Ordering::Relaxed),
        }
    }
}
