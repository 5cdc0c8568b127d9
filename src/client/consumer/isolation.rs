//! read_committed: dropping aborted transactions from fetched batches.
//!
//! The broker returns data only up to the last stable offset, but the batches it returns can
//! still hold transactions that were aborted. The Fetch response lists them as (producer id,
//! first offset). Per producer id the list is kept sorted by first offset (brokers have sent
//! it unsorted). A batch is dropped only when it has the transactional bit and its base offset
//! is at or after the head entry for its producer; the abort marker of that transaction pops the
//! head, so the producer's next transaction is kept. Control batches are never returned.

use crate::protocol::records::{ControlRecord, RecordBatch};
use std::collections::{HashMap, VecDeque};

/// The aborted transactions of one partition's fetch, by producer id.
#[derive(Debug, Default)]
pub struct AbortedTransactions {
    by_producer: HashMap<i64, VecDeque<i64>>,
}

impl AbortedTransactions {
    /// Builds the index from (producer id, first offset) pairs in any order.
    pub fn new(list: impl IntoIterator<Item = (i64, i64)>) -> Self {
        let mut by_producer: HashMap<i64, Vec<i64>> = HashMap::new();
        for (pid, first) in list {
            by_producer.entry(pid).or_default().push(first);
        }
        AbortedTransactions {
            by_producer: by_producer
                .into_iter()
                .map(|(pid, mut v)| {
                    v.sort_unstable();
                    (pid, v.into())
                })
                .collect(),
        }
    }

    /// Whether the records of `batch` are to be handed to the application. Call for every
    /// batch in log order, control batches included (they update the index).
    pub fn keep(&mut self, batch: &RecordBatch) -> bool {
        if batch.is_control() {
            // Only an abort marker ends an aborted transaction; a malformed marker is treated as
            // a commit marker, which keeps data rather than silently losing it.
            if let Ok(Some(ControlRecord::Abort { .. })) = batch.control_record() {
                if let Some(q) = self.by_producer.get_mut(&batch.producer_id) {
                    if q.front().is_some_and(|first| *first <= batch.base_offset) {
                        q.pop_front();
                    }
                }
            }
            return false;
        }
        if !batch.is_transactional() {
            return true;
        }
        match self
            .by_producer
            .get(&batch.producer_id)
            .and_then(|q| q.front())
        {
            Some(first) => batch.base_offset < *first,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::records::decode_batches;
    use bytes::Bytes;

    fn fixture() -> Bytes {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/transactional.log");
        Bytes::from(std::fs::read(path).unwrap())
    }

    fn kept_offsets(aborted: Vec<(i64, i64)>) -> Vec<i64> {
        let mut index = AbortedTransactions::new(aborted);
        let mut out = Vec::new();
        for b in decode_batches(fixture()) {
            let b = b.unwrap();
            if index.keep(&b) {
                out.extend(b.records().unwrap().iter().map(|r| r.offset));
            }
        }
        out
    }

    fn producer_id() -> i64 {
        decode_batches(fixture())
            .next()
            .unwrap()
            .unwrap()
            .producer_id
    }

    /// The fixture (written by the Java client) holds commit, abort, commit: offsets 6..=10 are
    /// the aborted transaction, 5, 11 and 17 markers.
    #[test]
    fn the_aborted_transaction_of_the_java_fixture_is_dropped() {
        let pid = producer_id();
        let kept = kept_offsets(vec![(pid, 6)]);
        let want: Vec<i64> = (0..5).chain(12..17).collect();
        assert_eq!(kept, want);
    }

    #[test]
    fn without_the_aborted_list_everything_but_markers_is_kept() {
        let kept = kept_offsets(vec![]);
        let want: Vec<i64> = (0..5).chain(6..11).chain(12..17).collect();
        assert_eq!(kept, want);
    }

    #[test]
    fn unsorted_lists_and_other_producers_are_handled() {
        let pid = producer_id();
        // Another producer's entry, and an entry past this fetch, given out of order.
        let kept = kept_offsets(vec![(pid, 1_000), (pid + 1, 0), (pid, 6)]);
        let want: Vec<i64> = (0..5).chain(12..17).collect();
        assert_eq!(kept, want);
    }
}
