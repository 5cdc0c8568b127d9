//! read_committed: dropping aborted transactions from fetched batches.
//!
//! The broker returns data only up to the last stable offset, but the batches it returns can
//! still hold transactions that were aborted. The Fetch response lists them as (producer id,
//! first offset). Per producer id the list is kept sorted by first offset (brokers have sent
//! it unsorted). A batch is dropped only when it has the transactional bit and its base offset
//! is at or after the head entry for its producer; the abort marker of that transaction pops the
//! head, so the producer's next transaction is kept. Control batches are never returned.
//!
//! A marker that cannot be read is never guessed at. When its producer has an aborted
//! transaction pending (head entry at or before the marker), the marker decides whether the
//! producer's later data is kept: read as a commit it would leave the head in place and drop the
//! producer's next, committed, transaction; read as an abort it could expose aborted data. So
//! it is an error, and the consumer stops there with the records before it delivered. With
//! nothing pending for the producer (always under read_uncommitted) the marker changes nothing
//! and is skipped, as the Java client skips control batches it does not need to read.

use crate::protocol::records::{ControlRecord, RecordBatch, RecordError};
use std::collections::{HashMap, VecDeque};

/// The aborted transactions of one partition's fetch, by producer id.
#[derive(Debug, Default)]
pub struct AbortedTransactions {
    by_producer: HashMap<i64, VecDeque<i64>>,
}

impl AbortedTransactions {
    /// Builds the index from (producer id, first offset) pairs in any order.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::consumer::isolation::AbortedTransactions;
    /// // The aborted transactions of one partition, as its Fetch answer lists them.
    /// let aborted = AbortedTransactions::new([(4000, 120), (4001, 95), (4000, 80)]);
    /// ```
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

    /// The listed transactions no abort marker has ended yet that start before `end`, as
    /// (producer id, first offset), sorted: after a whole answer read to `end`, the aborted
    /// transactions still open there, which the next answer from `end` must list again.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::consumer::isolation::AbortedTransactions;
    /// let aborted = AbortedTransactions::new([(4000, 120), (4001, 95)]);
    /// assert_eq!(aborted.open_before(100), vec![(4001, 95)]);
    /// ```
    pub fn open_before(&self, end: i64) -> Vec<(i64, i64)> {
        let mut open: Vec<(i64, i64)> = self
            .by_producer
            .iter()
            .flat_map(|(pid, q)| q.iter().filter(|f| **f < end).map(|f| (*pid, *f)))
            .collect();
        open.sort_unstable();
        open
    }

    /// Whether the records of `batch` are to be handed to the application. Call for every
    /// batch in log order, control batches included (they update the index).
    ///
    /// # Errors
    /// A control batch whose marker cannot be read (malformed, or of an unknown type) while its
    /// producer has an aborted transaction pending: see the module documentation.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(records: bytes::Bytes, listed: Vec<(i64, i64)>) -> Result<(), onceflow::protocol::records::RecordError> {
    /// use onceflow::client::consumer::isolation::AbortedTransactions;
    /// use onceflow::protocol::records::decode_batches;
    /// // `records` and `listed`: one partition's records and aborted transactions from a Fetch.
    /// let mut aborted = AbortedTransactions::new(listed);
    /// for batch in decode_batches(records) {
    ///     let batch = batch?;
    ///     if aborted.keep(&batch)? {
    ///         println!("{} committed records from offset {}", batch.records()?.len(), batch.base_offset);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn keep(&mut self, batch: &RecordBatch) -> Result<bool, RecordError> {
        if batch.is_control() {
            let queue = self.by_producer.get_mut(&batch.producer_id);
            let Some(q) = queue.filter(|q| q.front().is_some_and(|f| *f <= batch.base_offset))
            else {
                // Nothing of this producer to end here: whatever the marker says changes nothing.
                return Ok(false);
            };
            match batch.control_record()? {
                Some(ControlRecord::Abort { .. }) => {
                    q.pop_front();
                }
                // An inconsistent log (a commit where the abort belongs), or a marker emptied by
                // compaction: as the Java client, the transaction stays aborted.
                Some(ControlRecord::Commit { .. }) | None => {}
                Some(ControlRecord::Other { .. }) => {
                    return Err(RecordError::MalformedControlRecord {
                        offset: batch.base_offset,
                        reason: "unknown control type where an abort marker is expected",
                    });
                }
            }
            return Ok(false);
        }
        if !batch.is_transactional() {
            return Ok(true);
        }
        Ok(
            match self
                .by_producer
                .get(&batch.producer_id)
                .and_then(|q| q.front())
            {
                Some(first) => batch.base_offset < *first,
                None => true,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::records::{decode_batches, Record};
    use bytes::Bytes;
    use serde_json::{json, Value};

    fn fixture() -> Bytes {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/transactional.log");
        Bytes::from(std::fs::read(path).unwrap())
    }

    fn kept_offsets(aborted: Vec<(i64, i64)>) -> Vec<i64> {
        let mut index = AbortedTransactions::new(aborted);
        let mut out = Vec::new();
        for b in decode_batches(fixture()) {
            let b = b.unwrap();
            if index.keep(&b).unwrap() {
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

    // --------------------------------------------------------------------------------------------
    // Malformed markers.

    const PID: i64 = 4_242;

    fn txn_batch(base_offset: i64, n: usize) -> RecordBatch {
        let mut b = crate::protocol::records::BatchBuilder::new(
            crate::protocol::records::Compression::None,
        );
        for i in 0..n {
            assert!(b.try_append(1, None, Some(format!("{i}").as_bytes()), &[], usize::MAX));
        }
        let fields = crate::protocol::records::ProducerFields {
            producer_id: PID,
            producer_epoch: 0,
            base_sequence: 0,
            transactional: true,
        };
        let mut out = bytes::BytesMut::from(&b.build(fields).unwrap()[..]);
        crate::protocol::records::set_base_offset(&mut out, base_offset).unwrap();
        decode_batches(out.freeze()).next().unwrap().unwrap()
    }

    fn marker(base_offset: i64, key: &[u8], value: Option<&[u8]>) -> RecordBatch {
        let bytes = crate::protocol::records::encode_raw_control_batch(
            base_offset,
            0,
            1,
            PID,
            0,
            key,
            value,
        );
        decode_batches(bytes).next().unwrap().unwrap()
    }

    /// Data 0..=2 of an aborted transaction, its marker at 3 given as `key` / `value`, then a
    /// committed transaction 4..=6 and its commit marker at 7.
    fn aborted_then_committed(key: &[u8], value: Option<&[u8]>) -> Vec<RecordBatch> {
        vec![
            txn_batch(0, 3),
            marker(3, key, value),
            txn_batch(4, 3),
            marker(7, &[0, 0, 0, 1], Some(&[0, 0, 0, 0, 0, 5])),
        ]
    }

    const ABORT_VALUE: &[u8] = &[0, 0, 0, 0, 0, 5];

    /// Runs the batches through `keep`: the offsets kept, and the error that stopped it.
    fn run(batches: Vec<RecordBatch>, aborted: Vec<(i64, i64)>) -> (Vec<i64>, Option<RecordError>) {
        let mut index = AbortedTransactions::new(aborted);
        let mut kept = Vec::new();
        for b in batches {
            match index.keep(&b) {
                Ok(true) => kept.extend(b.records().unwrap().iter().map(|r| r.offset)),
                Ok(false) => {}
                Err(e) => return (kept, Some(e)),
            }
        }
        (kept, None)
    }

    /// Before the fix a marker that could not be read counted as a commit: the aborted
    /// transaction's entry stayed at the head and the producer's next, committed, transaction
    /// (4..=6) was dropped without a word (seen: kept `[]` for every case below).
    #[test]
    fn a_malformed_marker_ending_an_aborted_transaction_is_not_read_as_a_commit() {
        // (what, marker key, marker value)
        type Case = (&'static str, &'static [u8], Option<&'static [u8]>);
        let cases: [Case; 4] = [
            ("key of 2 bytes", &[0, 0], Some(ABORT_VALUE)),
            (
                "negative key version",
                &[0xFF, 0xFF, 0, 0],
                Some(ABORT_VALUE),
            ),
            ("unknown control type", &[0, 0, 0, 9], Some(ABORT_VALUE)),
            ("abort value of 3 bytes", &[0, 0, 0, 0], Some(&[0, 0, 0])),
        ];
        for (what, key, value) in cases {
            let (kept, err) = run(aborted_then_committed(key, value), vec![(PID, 0)]);
            assert_eq!(
                kept,
                Vec::<i64>::new(),
                "{what}: nothing of the aborted data"
            );
            let err = err.unwrap_or_else(|| panic!("{what}: no error"));
            assert!(
                matches!(err, RecordError::MalformedControlRecord { offset: 3, .. }),
                "{what}: {err:?}"
            );
        }
    }

    #[test]
    fn a_well_formed_abort_marker_keeps_the_next_transaction() {
        let (kept, err) = run(
            aborted_then_committed(&[0, 0, 0, 0], Some(ABORT_VALUE)),
            vec![(PID, 0)],
        );
        assert_eq!((kept, err), (vec![4, 5, 6], None));
        // A newer key version is read as version 0, as the Java client does.
        let (kept, err) = run(
            aborted_then_committed(&[0, 7, 0, 0], Some(ABORT_VALUE)),
            vec![(PID, 0)],
        );
        assert_eq!((kept, err), (vec![4, 5, 6], None));
    }

    /// With no aborted transaction pending (read_uncommitted, or a marker of a producer with
    /// none), an unreadable marker changes nothing and is skipped.
    #[test]
    fn a_malformed_marker_with_nothing_pending_is_skipped() {
        let (kept, err) = run(aborted_then_committed(&[0, 0], None), vec![]);
        assert_eq!((kept, err), (vec![0, 1, 2, 4, 5, 6], None));
        // Another producer's aborted transaction is not this marker's business either.
        let (kept, err) = run(aborted_then_committed(&[0, 0], None), vec![(PID + 1, 0)]);
        assert_eq!((kept, err), (vec![0, 1, 2, 4, 5, 6], None));
    }

    /// Marker before the aborted transaction's first offset: a commit of the producer's previous
    /// transaction, which must not consume the later abort entry, malformed or not.
    #[test]
    fn a_marker_before_the_pending_abort_does_not_end_it() {
        let batches = vec![
            txn_batch(0, 2),
            marker(2, &[0, 0], None),
            txn_batch(3, 2),
            marker(5, &[0, 0, 0, 0], Some(ABORT_VALUE)),
            txn_batch(6, 1),
        ];
        let (kept, err) = run(batches, vec![(PID, 3)]);
        assert_eq!((kept, err), (vec![0, 1, 6], None));
    }

    // --------------------------------------------------------------------------------------------
    // fixtures/transactional-zstd (see fixtures/README.md): zstd-compressed transactions of 5
    // written by the Java client to the real broker, commit and abort alternating, with a plain
    // batch between the 2nd and 3rd. Offsets: 0-4 data, 5 COMMIT, 6-10 data, 11 ABORT,
    // 12-13 plain, 14-18 data, 19 COMMIT, 20-24 data, 25 ABORT, 26-30 data, 31 COMMIT.

    fn fixture_file(file: &str) -> Vec<u8> {
        let path = format!("{}/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
    }

    fn zstd_batches() -> Vec<RecordBatch> {
        decode_batches(Bytes::from(fixture_file("transactional-zstd.log")))
            .map(|b| b.expect("valid batch"))
            .collect()
    }

    /// The Fetch response's aborted-transactions list for the whole fixture, as the broker builds
    /// it: for every ABORT marker, its producer id and the offset of that transaction's first
    /// record (the first data batch of the producer after its previous marker).
    fn aborted_list(batches: &[RecordBatch]) -> Vec<(i64, i64)> {
        let mut open: HashMap<i64, i64> = HashMap::new();
        let mut list = Vec::new();
        for b in batches {
            if b.is_control() {
                let first = open.remove(&b.producer_id);
                if let Ok(Some(ControlRecord::Abort { .. })) = b.control_record() {
                    list.push((
                        b.producer_id,
                        first.expect("an aborted transaction has data"),
                    ));
                }
            } else if b.is_transactional() {
                open.entry(b.producer_id).or_insert(b.base_offset);
            }
        }
        assert!(open.is_empty(), "no transaction left open");
        list
    }

    /// A kept record in the Java interop consumer's JSON-lines shape (partition 0).
    fn as_json(r: &Record) -> Value {
        let bytes = |b: &Option<Bytes>| {
            b.as_ref()
                .map(|b| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b))
        };
        let headers: Vec<Value> = r
            .headers
            .iter()
            .map(|h| {
                let key = std::str::from_utf8(&h.key).expect("UTF-8 header key");
                json!({"key": key, "value": bytes(&h.value)})
            })
            .collect();
        json!({
            "partition": 0,
            "offset": r.offset,
            "timestamp": r.timestamp,
            "key": bytes(&r.key),
            "value": bytes(&r.value),
            "headers": headers,
        })
    }

    fn jsonl(file: &str) -> Vec<Value> {
        String::from_utf8(fixture_file(file))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Runs every batch, in log order, through `keep`; returns the kept records.
    fn kept_records(batches: &[RecordBatch], aborted: Vec<(i64, i64)>) -> Vec<Value> {
        let mut index = AbortedTransactions::new(aborted);
        let mut out = Vec::new();
        for b in batches {
            if index.keep(b).unwrap() {
                assert!(
                    !b.is_control(),
                    "a control batch was kept at {}",
                    b.base_offset
                );
                out.extend(b.records().unwrap().iter().map(as_json));
            }
        }
        out
    }

    fn offsets(records: &[Value]) -> Vec<i64> {
        records
            .iter()
            .map(|r| r["offset"].as_i64().unwrap())
            .collect()
    }

    /// read_committed over the zstd fixture: the list the broker would send drops exactly the two
    /// aborted transactions, keeping the commits and the plain records between them, which is
    /// exactly what the Java consumer read with isolation.level=read_committed.
    #[test]
    fn zstd_fixture_read_committed_keeps_exactly_what_the_java_consumer_read() {
        let batches = zstd_batches();
        let pid = batches[0].producer_id;
        let aborted = aborted_list(&batches);
        assert_eq!(aborted, [(pid, 6), (pid, 20)]);

        let want = jsonl("transactional-zstd.expected-committed.jsonl");
        let want_offsets: Vec<i64> = (0..5).chain(12..19).chain(26..31).collect();
        assert_eq!(offsets(&want), want_offsets, "the Java consumer's view");

        let kept = kept_records(&batches, aborted.clone());
        assert_eq!(offsets(&kept), want_offsets);
        assert_eq!(kept, want, "kept records vs read_committed Java consumer");

        // The same list given in reverse order (brokers have sent it unsorted).
        let reversed: Vec<(i64, i64)> = aborted.into_iter().rev().collect();
        assert_eq!(kept_records(&batches, reversed), want);
    }

    /// read_uncommitted (an empty list) over the zstd fixture: every data record, aborted ones
    /// included, and no control record; exactly what the Java consumer read that way.
    #[test]
    fn zstd_fixture_read_uncommitted_keeps_every_data_record_and_no_marker() {
        let batches = zstd_batches();
        let kept = kept_records(&batches, vec![]);
        let data: Vec<i64> = batches
            .iter()
            .filter(|b| !b.is_control())
            .flat_map(|b| b.base_offset..=b.base_offset + i64::from(b.last_offset_delta))
            .collect();
        let want_offsets: Vec<i64> = (0..5)
            .chain(6..11)
            .chain(12..19)
            .chain(20..25)
            .chain(26..31)
            .collect();
        assert_eq!(data, want_offsets);
        assert_eq!(offsets(&kept), want_offsets);
        for marker in [5, 11, 19, 25, 31] {
            assert!(!offsets(&kept).contains(&marker), "marker {marker} kept");
        }
        assert_eq!(kept, jsonl("transactional-zstd.expected.jsonl"));
    }
}
