//! An answer's data decoded into records: record batches (v2) and legacy message sets (v0/v1),
//! without control batches and, under read_committed, aborted transactions; decoding stops at
//! the first entry that cannot be read or fails a check.

use super::integrity::{
    aborted_list_borne_out, aborted_list_repeats, batch_heads, entry_in_place, first_entry_in_place,
};
use super::request::Want;
use crate::client::consumer::isolation::AbortedTransactions;
use crate::client::consumer::{AnswerTrace, Chunk, ConsumerRecord, Skip};
use crate::client::error::Error;
use crate::client::metadata::TopicPartition;
use crate::protocol::records::{decode_entries, CrcCheck, EntryIter, LogEntry, RecordError};
use kafka_protocol::messages::fetch_response::PartitionData;
use std::collections::VecDeque;

/// Decodes one partition's records, skipping control batches and records before the fetch
/// offset (a compressed batch can start before it). Decoding stops at the first entry that
/// cannot be read: the chunk keeps the records before it, ends where they end, and carries the
/// error, as the Java client returns the records before corrupt data and raises on the next
/// poll.
pub(super) fn decode_partition(w: &Want, p: &PartitionData, crc: CrcCheck) -> Chunk {
    let (tp, fetch_offset, epoch) = (&w.tp, w.fetch_offset, w.epoch);
    let mut records = VecDeque::new();
    let mut next_offset = fetch_offset;
    // Under read_committed the broker sends the aborted transactions; under read_uncommitted
    // it sends none, and only control batches are skipped.
    let listed: Vec<(i64, i64)> = p
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    let mut aborted = AbortedTransactions::new(listed.iter().copied());
    let mut error = None;
    let mut last_epoch = None;
    let mut trace = AnswerTrace {
        skip_left: w.skip,
        ..AnswerTrace::default()
    };
    if let Some(bytes) = p.records.clone() {
        let decoded = if w.check_aborted_list && (!listed.is_empty() || !w.open_aborted.is_empty())
        {
            let heads = batch_heads(&bytes);
            aborted_list_borne_out(&heads, &listed).and_then(|()| {
                if heads.is_empty() {
                    // No data, no list: nothing to compare.
                    Ok(())
                } else {
                    aborted_list_repeats(&w.open_aborted, &listed, w.fetch_offset)
                }
            })
        } else {
            Ok(())
        };
        let decoded = decoded.and_then(|()| {
            decode_into(
                tp,
                decode_entries(bytes).crc_check(crc),
                fetch_offset,
                w.after_answer,
                p.high_watermark,
                &mut aborted,
                &mut records,
                &mut next_offset,
                &mut last_epoch,
                &mut trace,
            )
        });
        if let Err(source) = decoded {
            error = Some(Error::CorruptData {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: next_offset,
                source,
            });
        }
    }
    Chunk {
        tp: tp.clone(),
        epoch,
        records,
        next_offset,
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        error,
        last_epoch,
        open_aborted: aborted.open_before(next_offset),
        trace,
    }
}

/// The decoding loop of [`decode_partition`]: appends records and advances `next_offset` past
/// every entry read (and every record handed out, so an error inside a batch stops right
/// after the last good record), noting the leader epoch of the last v2 batch read and, in
/// `trace`, what a walk back needs (entries read, the last one's CRC, what is left to skip).
#[allow(clippy::too_many_arguments)]
fn decode_into(
    tp: &TopicPartition,
    entries: EntryIter,
    fetch_offset: i64,
    after_answer: bool,
    high_watermark: i64,
    aborted: &mut AbortedTransactions,
    records: &mut VecDeque<ConsumerRecord>,
    next_offset: &mut i64,
    last_epoch: &mut Option<i32>,
    trace: &mut AnswerTrace,
) -> Result<(), RecordError> {
    let mut previous_end = None;
    let mut first = true;
    // Where the chunk stood before the entry just read: (records, next offset, trace).
    let mut before_previous = (records.len(), *next_offset, *trace);
    for entry in entries {
        let entry = entry?;
        if std::mem::take(&mut first) {
            first_entry_in_place(&entry, fetch_offset, after_answer)?;
        }
        if let Err(e) = entry_in_place(&entry, previous_end, high_watermark) {
            if previous_end.is_some() {
                // Two entries that contradict each other: either may be the damaged one. The
                // entry before is taken back too (nothing of the chunk is out yet), and both
                // are fetched again: had its base offset been moved up, its records would have
                // gone out under offsets past their own, and the position with them.
                records.truncate(before_previous.0);
                *next_offset = before_previous.1;
                *trace = before_previous.2;
            }
            return Err(e);
        }
        before_previous = (records.len(), *next_offset, *trace);
        previous_end = Some(entry.next_offset());
        // Markers and aborted batches before the fetch offset still update the index.
        let keep = match &entry {
            LogEntry::Batch(batch) => aborted.keep(batch)?,
            // v0/v1 messages predate transactions.
            LogEntry::Legacy(_) => true,
        };
        trace.entries = trace.entries.saturating_add(1);
        trace.last_crc = match &entry {
            LogEntry::Batch(b) => Some(b.crc),
            LogEntry::Legacy(_) => None,
        };
        if handed_out_already(trace) {
            *next_offset = (*next_offset).max(entry.next_offset());
            note_epoch(&entry, last_epoch);
            continue;
        }
        if entry.next_offset() <= fetch_offset {
            continue;
        }
        if keep {
            hand_out(tp, &entry, fetch_offset, records, next_offset)?;
        }
        *next_offset = (*next_offset).max(entry.next_offset());
        note_epoch(&entry, last_epoch);
    }
    Ok(())
}

/// Whether a walk back under way skips the entry just read (noted in `trace`) as handed out
/// already, and counts it off.
fn handed_out_already(trace: &mut AnswerTrace) -> bool {
    let Some(skip) = trace.skip_left.take() else {
        return false;
    };
    match skip.entries {
        0 | 1 => {
            // The walk's last entry: the batch handed out last, unless the log changed
            // under the walk — then this entry is new, and goes out.
            let same = trace.last_crc == Some(skip.crc);
            trace.skip_mismatch = !same;
            same
        }
        n => {
            trace.skip_left = Some(Skip {
                entries: n - 1,
                ..skip
            });
            true
        }
    }
}

/// Appends the entry's records from the fetch offset on, moving `next_offset` past each.
fn hand_out(
    tp: &TopicPartition,
    entry: &LogEntry,
    fetch_offset: i64,
    records: &mut VecDeque<ConsumerRecord>,
    next_offset: &mut i64,
) -> Result<(), RecordError> {
    // Straight from the entry into the chunk: no intermediate Vec per batch.
    for r in entry.record_iter()? {
        let r = r?;
        if r.offset < fetch_offset {
            continue;
        }
        *next_offset = (*next_offset).max(r.offset.wrapping_add(1));
        records.push_back(ConsumerRecord {
            topic: tp.topic.clone(),
            partition: tp.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key,
            value: r.value,
            headers: r.headers,
        });
    }
    Ok(())
}

/// The leader epoch of a v2 batch read whole (sent back as last_fetched_epoch).
fn note_epoch(entry: &LogEntry, last_epoch: &mut Option<i32>) {
    if let LogEntry::Batch(b) = entry {
        if b.partition_leader_epoch >= 0 {
            *last_epoch = Some(b.partition_leader_epoch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::integrity::stopped_at_an_entry;
    use super::super::testing::{crc_of, tagged_batch, txn_batch, v2_batch};
    use super::*;
    use crate::client::consumer::{accept_chunk, take_records, PartitionState};
    use bytes::Bytes;
    use std::collections::BTreeMap;

    fn tp() -> TopicPartition {
        TopicPartition::new("orders", 3)
    }

    /// A request for `tp()` at `fetch_offset`, in the partition's fetch epoch `epoch`.
    fn at(fetch_offset: i64, epoch: u64) -> Want {
        Want {
            tp: tp(),
            fetch_offset,
            epoch,
            leader_epoch: -1,
            last_fetched_epoch: -1,
            topic_id: [0; 16],
            after_answer: false,
            check_aborted_list: true,
            open_aborted: Vec::new(),
            skip: None,
        }
    }

    fn data(records: Vec<u8>) -> PartitionData {
        PartitionData::default()
            .with_high_watermark(1_000)
            .with_last_stable_offset(1_000)
            .with_records(Some(Bytes::from(records)))
    }

    /// The contradiction fails the answer before anything of it is handed out, and decoding
    /// stays where it was: the answer is fetched again.
    #[test]
    fn an_answer_starting_before_the_last_one_ended_hands_nothing_out() {
        let w = Want {
            after_answer: true,
            ..at(7, 1)
        };
        let chunk = decode_partition(&w, &data(v2_batch(5, 5)), CrcCheck::Verify);
        assert!(chunk.records.is_empty());
        assert_eq!(chunk.next_offset, 7);
        match &chunk.error {
            Some(Error::CorruptData {
                offset: 7,
                source:
                    RecordError::StartsBeforeTheLastAnswerEnded {
                        offset: 5,
                        position: 7,
                    },
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(stopped_at_an_entry(
            &RecordError::StartsBeforeTheLastAnswerEnded {
                offset: 5,
                position: 7
            }
        ));
        // The same batch fetched at 7 after a seek: records 7, 8, 9.
        let chunk = decode_partition(&at(7, 1), &data(v2_batch(5, 5)), CrcCheck::Verify);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [7, 8, 9]);
    }

    /// Two batches of one answer that contradict each other (the first moved up, 0 → 8): the
    /// first is taken back too, and the answer fetched again from before it.
    #[test]
    fn a_batch_contradicting_the_one_before_takes_that_one_back_too() {
        let mut bytes = v2_batch(0, 5);
        bytes.extend(v2_batch(8, 5));
        bytes.extend(v2_batch(5, 5));
        let chunk = decode_partition(&at(0, 1), &data(bytes), CrcCheck::Verify);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [0, 1, 2, 3, 4], "the batch at 8 is not handed out");
        assert_eq!(chunk.next_offset, 5);
        assert!(matches!(
            chunk.error,
            Some(Error::CorruptData {
                offset: 5,
                source: RecordError::OffsetsOutOfPlace { offset: 5, .. },
                ..
            })
        ));
    }

    /// A walk back reads the answer before again and hands out only what follows its last
    /// batch: (fetch offset, entries to skip, the CRC the last must have: batch 0/1/2 or
    /// another, offsets handed out, where the chunk ends, left of the walk, mismatch).
    #[test]
    fn a_walk_back_skips_the_entries_handed_out_and_checks_the_last_by_its_crc() {
        let batches = [
            tagged_batch(0, 5, "a"),
            tagged_batch(5, 5, "b"),
            tagged_batch(10, 5, "c"),
        ];
        let crcs: Vec<u32> = batches.iter().map(|b| crc_of(b)).collect();
        let bytes: Vec<u8> = batches.concat();
        type Case = (i64, u32, Option<usize>, Vec<i64>, i64, Option<u32>, bool);
        let cases: [Case; 6] = [
            // The second batch was handed out last: the third goes out.
            (0, 2, Some(1), (10..15).collect(), 15, None, false),
            // The answer before was fetched from inside the first batch: the same entries.
            (3, 2, Some(1), (10..15).collect(), 15, None, false),
            // The first only.
            (0, 1, Some(0), (5..15).collect(), 15, None, false),
            // The answer before reached further than this one: the walk goes on.
            (0, 4, Some(1), vec![], 15, Some(1), false),
            // Nothing is handed out twice, even where every entry was.
            (0, 3, Some(2), vec![], 15, None, false),
            // The last skipped entry is another batch (the log changed): it goes out, with
            // everything after it — never lost.
            (0, 2, None, (5..15).collect(), 15, None, true),
        ];
        for (fetch_offset, entries, last, offsets, end, left, mismatch) in cases {
            let crc = last.map_or(crcs[1] ^ 1, |i| crcs[i]);
            let w = Want {
                skip: Some(Skip { entries, crc }),
                ..at(fetch_offset, 1)
            };
            let chunk = decode_partition(&w, &data(bytes.clone()), CrcCheck::Verify);
            let out: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
            let what = format!("from {fetch_offset}, skipping {entries}, last {last:?}");
            assert!(chunk.error.is_none(), "{what}: {:?}", chunk.error);
            assert_eq!(out, offsets, "{what}");
            assert_eq!(chunk.next_offset, end, "{what}");
            assert_eq!(chunk.trace.skip_left.map(|s| s.entries), left, "{what}");
            assert_eq!(chunk.trace.skip_mismatch, mismatch, "{what}");
        }
        // Without a walk the answer is traced for one: three entries, the last one's CRC.
        let chunk = decode_partition(&at(0, 1), &data(bytes), CrcCheck::Verify);
        assert_eq!(chunk.records.len(), 15);
        assert_eq!(
            (chunk.trace.entries, chunk.trace.last_crc),
            (3, Some(crcs[2]))
        );
    }

    /// Before: `Record(UnsupportedMagic { offset: 0, magic: 0 })` and the partition never
    /// moved (seen).
    #[test]
    fn legacy_entries_are_read_by_the_fetcher() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy/mixed.log");
        let bytes = std::fs::read(path).unwrap();
        let chunk = decode_partition(&at(0, 1), &data(bytes), CrcCheck::Verify);
        assert!(chunk.error.is_none(), "{:?}", chunk.error);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..8).collect::<Vec<_>>());
        assert_eq!(chunk.next_offset, 8);
        // From the middle of a v1 wrapper (offsets 2..=4): the records before are skipped.
        let bytes = std::fs::read(path).unwrap();
        let chunk = decode_partition(&at(3, 1), &data(bytes), CrcCheck::Verify);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (3..8).collect::<Vec<_>>());
    }

    /// Three batches, the middle one with a broken CRC.
    fn good_corrupt_good() -> Vec<u8> {
        let mut bytes = v2_batch(0, 5);
        let mut bad = v2_batch(5, 5);
        let last = bad.len() - 1;
        bad[last] ^= 0xFF;
        bytes.extend(bad);
        bytes.extend(v2_batch(10, 5));
        bytes
    }

    fn assert_corrupt_at_5(e: &Error) {
        match e {
            Error::CorruptData {
                topic,
                partition,
                offset,
                source,
            } => {
                assert_eq!((topic.as_str(), *partition, *offset), ("orders", 3, 5));
                assert!(
                    matches!(source, RecordError::CrcMismatch { offset: 5, .. }),
                    "{source:?}"
                );
            }
            other => panic!("not CorruptData: {other:?}"),
        }
        let msg = e.to_string();
        assert!(
            msg.starts_with("cannot read topic 'orders' partition 3 at offset 5: batch at offset 5: CRC mismatch"),
            "{msg}"
        );
    }

    /// Before: the whole response was an error, `Record(CrcMismatch { offset: 5, .. })`, the
    /// five good records were thrown away and fetched (and thrown away) again after the backoff
    /// (seen).
    #[test]
    fn good_records_before_a_corrupt_batch_are_kept() {
        let chunk = decode_partition(&at(0, 1), &data(good_corrupt_good()), CrcCheck::Verify);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..5).collect::<Vec<_>>());
        assert_eq!(
            chunk.next_offset, 5,
            "decoding stops where the corrupt batch starts"
        );
        assert_corrupt_at_5(
            chunk
                .error
                .as_ref()
                .expect("the error travels with the chunk"),
        );
    }

    /// check.crcs=false, as in the Java consumer: a batch whose stored CRC does not match its
    /// (intact) bytes is read like any other. check.crcs=true is the test above.
    #[test]
    fn with_check_crcs_false_a_batch_whose_crc_does_not_match_is_read() {
        let mut bytes = v2_batch(0, 5);
        let mut bad_crc = v2_batch(5, 5);
        bad_crc[17] ^= 0xFF; // the CRC field itself
        bytes.extend(bad_crc);
        bytes.extend(v2_batch(10, 5));
        let verified = decode_partition(&at(0, 1), &data(bytes.clone()), CrcCheck::Verify);
        assert_corrupt_at_5(verified.error.as_ref().expect("refused when verifying"));
        let chunk = decode_partition(&at(0, 1), &data(bytes), CrcCheck::Skip);
        assert!(chunk.error.is_none(), "{:?}", chunk.error);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..15).collect::<Vec<_>>());
        assert_eq!(chunk.next_offset, 15);
    }

    fn assigned(epoch: u64, position: i64) -> BTreeMap<TopicPartition, PartitionState> {
        let mut st = PartitionState::new(epoch, None);
        st.position = Some(position);
        st.fetch_offset = position;
        BTreeMap::from([(tp(), st)])
    }

    /// What the application sees: the good records, then (on the next poll) the error naming
    /// topic, partition and offset, raised again on every poll until a seek; the position stays
    /// at the corrupt batch.
    #[test]
    fn the_application_gets_the_records_then_the_error_until_it_seeks() {
        let mut parts = assigned(1, 0);
        let mut buffered = VecDeque::new();
        let chunk = decode_partition(&at(0, 1), &data(good_corrupt_good()), CrcCheck::Verify);
        accept_chunk(&mut buffered, &mut parts, chunk);

        let first = take_records(&mut buffered, &mut parts, 500).expect("records first");
        assert_eq!(
            first.iter().map(|r| r.offset).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert_eq!(parts[&tp()].position, Some(5));
        for _ in 0..2 {
            let e = take_records(&mut buffered, &mut parts, 500).unwrap_err();
            assert_corrupt_at_5(&e);
            assert_eq!(parts[&tp()].position, Some(5));
        }
        // A seek gives the partition a new epoch: the chunk is stale and dropped.
        parts.get_mut(&tp()).unwrap().epoch = 2;
        assert!(take_records(&mut buffered, &mut parts, 500)
            .unwrap()
            .is_empty());
        assert!(buffered.is_empty());
    }

    /// With max.poll.records smaller than the good records, they come out over several polls
    /// and the error only after the last of them.
    #[test]
    fn the_error_waits_for_every_record_before_it() {
        let mut parts = assigned(1, 0);
        let mut buffered = VecDeque::new();
        let chunk = decode_partition(&at(0, 1), &data(good_corrupt_good()), CrcCheck::Verify);
        accept_chunk(&mut buffered, &mut parts, chunk);
        let mut got = Vec::new();
        loop {
            match take_records(&mut buffered, &mut parts, 2) {
                Ok(rs) => {
                    assert!(!rs.is_empty());
                    got.extend(rs.iter().map(|r| r.offset));
                }
                Err(e) => {
                    assert_corrupt_at_5(&e);
                    break;
                }
            }
        }
        assert_eq!(got, [0, 1, 2, 3, 4]);
    }

    /// A chunk fetched under an epoch the partition has left (the old assignment, before
    /// `assign([])`, `assign([tp])`, `seek`) is never handed out and never moves the position.
    #[test]
    fn chunks_of_another_epoch_are_dropped() {
        let mut parts = assigned(7, 0);
        let mut buffered = VecDeque::new();
        let old = decode_partition(&at(0, 6), &data(v2_batch(0, 5)), CrcCheck::Verify);
        accept_chunk(&mut buffered, &mut parts, old);
        assert!(buffered.is_empty());
        assert_eq!(parts[&tp()].position, Some(0));
        // Queued while current, then the partition was sought: dropped at take.
        let current = decode_partition(&at(0, 7), &data(v2_batch(0, 5)), CrcCheck::Verify);
        accept_chunk(&mut buffered, &mut parts, current);
        parts.get_mut(&tp()).unwrap().epoch = 8;
        assert!(take_records(&mut buffered, &mut parts, 500)
            .unwrap()
            .is_empty());
        assert_eq!(parts[&tp()].position, Some(0));
    }

    /// A Fetch answer's data with its aborted-transaction list.
    fn with_aborted(bytes: Vec<u8>, listed: &[(i64, i64)]) -> PartitionData {
        use kafka_protocol::messages::fetch_response::AbortedTransaction;
        use kafka_protocol::messages::ProducerId;
        data(bytes).with_aborted_transactions(Some(
            listed
                .iter()
                .map(|&(pid, first)| {
                    AbortedTransaction::default()
                        .with_producer_id(ProducerId(pid))
                        .with_first_offset(first)
                })
                .collect(),
        ))
    }

    /// An aborted transaction open where one answer ended must be listed by the next: a
    /// damaged producer id in the second list would expose the rest of the transaction.
    #[test]
    fn an_aborted_transaction_open_at_an_answer_end_must_be_listed_again() {
        use crate::protocol::records::encode_raw_control_batch;
        let pid = 77;
        // The first answer: plain 0, 1, then the aborted transaction's first batch, 2..=4.
        let mut first = v2_batch(0, 2);
        first.extend(txn_batch(pid, 2, 3));
        let chunk = decode_partition(
            &at(0, 1),
            &with_aborted(first, &[(pid, 2)]),
            CrcCheck::Verify,
        );
        assert_eq!(
            chunk.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(
            (chunk.next_offset, &chunk.open_aborted[..]),
            (5, &[(pid, 2)][..])
        );
        // The next answer: the transaction's second batch, 5..=6, and its abort marker at 7.
        let mut second = txn_batch(pid, 5, 2);
        second.extend_from_slice(&encode_raw_control_batch(
            7,
            0,
            1,
            pid,
            0,
            &[0, 0, 0, 0],
            Some(&[0, 0, 0, 0, 0, 0]),
        ));
        let mut w = at(5, 1);
        w.after_answer = true;
        w.open_aborted = chunk.open_aborted.clone();
        // Listed again: nothing handed out, the transaction ended.
        let ok = decode_partition(
            &w,
            &with_aborted(second.clone(), &[(pid, 2)]),
            CrcCheck::Verify,
        );
        assert!(ok.error.is_none(), "{:?}", ok.error);
        assert!(ok.records.is_empty());
        assert_eq!((ok.next_offset, ok.open_aborted.len()), (8, 0));
        // The producer id flipped in the second list: fetched again, nothing handed out.
        let bad = decode_partition(
            &w,
            &with_aborted(second.clone(), &[(pid ^ 1024, 2)]),
            CrcCheck::Verify,
        );
        assert!(bad.records.is_empty());
        assert!(
            matches!(
                bad.error,
                Some(Error::CorruptData {
                    offset: 5,
                    source: RecordError::AbortedTransactionLeftOut {
                        producer_id: 77,
                        first_offset: 2,
                        position: 5
                    },
                    ..
                })
            ),
            "{:?}",
            bad.error
        );
        // Without the first answer (a seek to 5) it cannot be told: the check needs it.
        let unchecked = decode_partition(
            &at(5, 1),
            &with_aborted(second, &[(pid ^ 1024, 2)]),
            CrcCheck::Verify,
        );
        assert_eq!(
            unchecked.records.len(),
            2,
            "the damage this check exists for"
        );
    }

    /// read_committed through the fetcher: a malformed marker ending an aborted transaction
    /// stops the partition with the records before it delivered.
    #[test]
    fn a_malformed_marker_stops_read_committed_with_the_records_before_it() {
        use crate::protocol::records::encode_raw_control_batch;
        use kafka_protocol::messages::fetch_response::AbortedTransaction;
        use kafka_protocol::messages::ProducerId;
        let pid = 77;
        let txn = |base: i64, n: usize| txn_batch(pid, base, n);
        let mut bytes = v2_batch(0, 2); // plain records 0, 1
        bytes.extend(txn(2, 3)); // aborted 2..=4
        bytes.extend_from_slice(&encode_raw_control_batch(5, 0, 1, pid, 0, &[0, 0], None));
        bytes.extend(txn(6, 2));
        let p = data(bytes).with_aborted_transactions(Some(vec![AbortedTransaction::default()
            .with_producer_id(ProducerId(pid))
            .with_first_offset(2)]));
        let chunk = decode_partition(&at(0, 1), &p, CrcCheck::Verify);
        assert_eq!(
            chunk.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(chunk.next_offset, 5);
        let e = chunk.error.expect("an error");
        assert!(
            matches!(
                e,
                Error::CorruptData {
                    offset: 5,
                    source: RecordError::MalformedControlRecord { offset: 5, .. },
                    ..
                }
            ),
            "{e:?}"
        );
    }

    /// The leader epoch of the last batch read becomes the next fetch's last_fetched_epoch;
    /// batches without one (v0/v1, or -1) leave it as it was.
    #[test]
    fn the_last_batch_leader_epoch_is_noted() {
        let with_epoch = |mut b: Vec<u8>, e: i32| {
            // The partition leader epoch (bytes 12..16) is outside the CRC, as the broker
            // stamps it on append.
            b[12..16].copy_from_slice(&e.to_be_bytes());
            b
        };
        let mut bytes = with_epoch(v2_batch(0, 2), 3);
        bytes.extend(with_epoch(v2_batch(2, 2), 4));
        bytes.extend(v2_batch(4, 2)); // -1
        let chunk = decode_partition(&at(0, 1), &data(bytes), CrcCheck::Verify);
        assert_eq!((chunk.last_epoch, chunk.next_offset), (Some(4), 6));
        let legacy = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/legacy/v1-gzip.log"
        ))
        .unwrap();
        assert_eq!(
            decode_partition(&at(0, 1), &data(legacy), CrcCheck::Verify).last_epoch,
            None
        );
    }
}
