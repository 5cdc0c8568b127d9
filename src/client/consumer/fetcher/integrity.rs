//! What a client can check of a Fetch answer. A batch's CRC covers its records, not its base
//! offset, its partition leader epoch, nor the answer's aborted-transaction list, high
//! watermark, log start or diverging epoch: each of those is checked here against what the
//! answer (or the one before it) says elsewhere, and an answer that fails is taken for damaged
//! on its way and fetched again, as one failing its CRC is; data that keeps failing at one
//! offset is the log, and the partition halts there (or walks back to where reading goes on).

use crate::client::config::ConsumerConfig;
use crate::client::consumer::{AnswerTrace, LastAnswer, Resync, Skip};
use crate::protocol::records::{decode_entries, CrcCheck, LogEntry, RecordError};

/// How many times data that fails its check at one offset is fetched again before the
/// partition halts on it.
pub(super) const REFETCHES_OF_CORRUPT_DATA: u32 = 2;

/// What to do about data that failed its check (CRC, framing) at `offset`, given the
/// partition's record of such failures (`corrupt_at`: offset, failures in a row there).
/// Returns the new record and whether the partition halts. Pure.
///
/// A batch damaged on its way (a flipped bit the TCP checksum missed, a faulty middlebox) is
/// whole in the broker's log: fetched again, it decodes. The Java consumer raises at once and
/// leaves the application to seek past the batch, which skips records that were fine in the
/// log. Only data that fails again, at the same offset, is taken for corrupt in the log.
pub(super) fn after_corrupt_data(
    corrupt_at: Option<(i64, u32)>,
    offset: i64,
) -> (Option<(i64, u32)>, bool) {
    let failures = match corrupt_at {
        Some((at, n)) if at == offset => n + 1,
        _ => 1,
    };
    (
        Some((offset, failures)),
        failures > REFETCHES_OF_CORRUPT_DATA,
    )
}

/// Whether decoding stopped where an entry starts, nothing of it handed out: framing, CRC,
/// offset and control-record checks, and decompression, all fail before an entry's first
/// record. A malformed record stops inside its batch. Pure.
pub(super) fn stopped_at_an_entry(e: &RecordError) -> bool {
    matches!(
        e,
        RecordError::InvalidBatchLength { .. }
            | RecordError::BatchTooShort { .. }
            | RecordError::UnsupportedMagic { .. }
            | RecordError::CrcMismatch { .. }
            | RecordError::UnknownCompression { .. }
            | RecordError::Decompress { .. }
            | RecordError::OffsetsOutOfPlace { .. }
            | RecordError::StartsBeforeTheLastAnswerEnded { .. }
            | RecordError::AbortedListContradicted { .. }
            | RecordError::AbortedTransactionLeftOut { .. }
            | RecordError::MalformedControlRecord { .. }
    )
}

/// `check.crcs` as the codec takes it.
pub(super) fn crc_check(cfg: &ConsumerConfig) -> CrcCheck {
    if cfg.check_crcs {
        CrcCheck::Verify
    } else {
        CrcCheck::Skip
    }
}

/// Whether a Fetch answer's log start offset bears out the position a ListOffsets answer gave
/// as the log start (`resolved`): it must not be below it, since a log start only moves up
/// (`< 0`: not known). Pure.
///
/// One flipped bit in the ListOffsets answer (0 → 16) started a group member at offset 16:
/// the first 16 records were skipped, silently (the group member under random flips). The
/// Fetch answer names the log start again for free; a contradiction is asked about once more,
/// and the second ListOffsets answer stands (a follower's log start may lag its leader's).
pub(super) fn earliest_borne_out(resolved: i64, log_start_offset: i64) -> bool {
    log_start_offset < 0 || log_start_offset >= resolved
}

/// Whether the first entry of a Fetch answer can start where it does: when the fetch offset is
/// where the whole entries of the answer before ended (`after_answer`), a v2 batch cannot
/// start before it — the broker answers from the batch holding the fetch offset, and that
/// batch starts there (compaction keeps a batch's offsets; v0/v1 message sets are left
/// alone). Pure.
///
/// A base offset is outside the batch's CRC. A low bit flipped there (+4) kept the batch
/// inside the log, so [`entry_in_place`] could not tell; the position after it was 4 past the
/// real one, and the next answer's batch, starting 4 before it, had its first 4 records
/// dropped as already read (the read_committed consumer under random flips: 4 values never
/// delivered). Flipped the other way, in the later answer, the records before the position
/// came again. Either way the two answers contradict each other: see
/// [`advance`](super::apply::advance) for which one is believed.
pub(super) fn first_entry_in_place(
    entry: &LogEntry,
    fetch_offset: i64,
    after_answer: bool,
) -> Result<(), RecordError> {
    match entry {
        LogEntry::Batch(b) if after_answer && b.base_offset < fetch_offset => {
            Err(RecordError::StartsBeforeTheLastAnswerEnded {
                offset: b.base_offset,
                position: fetch_offset,
            })
        }
        _ => Ok(()),
    }
}

/// Whether an entry's offsets can be where they are in a Fetch answer: ending at or before the
/// partition's high watermark (`< 0`: not known, not checked), and after the entry before it
/// (`previous_end`: where that one ended). Neither holds for an answer the broker wrote, so
/// one that fails is taken for damaged on the way, as a CRC failure is (fetched again, see
/// [`after_corrupt_data`]). Pure.
///
/// A batch's base offset is outside its CRC. One bit flipped high there moved the batch past
/// the end of the log: the consumer handed its records out under those offsets, its next
/// fetch was out of range, and auto.offset.reset=earliest read the partition again from the
/// start (the group member under random flips: duplicates). A flip in the low bits that keeps
/// the batch inside the log and after the one before it stays undetectable, for any client:
/// Kafka protects records, not their offsets.
pub(super) fn entry_in_place(
    entry: &LogEntry,
    previous_end: Option<i64>,
    high_watermark: i64,
) -> Result<(), RecordError> {
    let offset = entry.header_offset();
    let end = entry.next_offset();
    let reason = if high_watermark >= 0 && end > high_watermark {
        format!("ends at {end}, past the partition's high watermark {high_watermark}")
    } else if let (Some(before), LogEntry::Batch(b)) = (previous_end, entry) {
        if b.base_offset < before {
            format!("starts before {before}, where the batch before it ended")
        } else {
            return Ok(());
        }
    } else if previous_end.is_some_and(|before| end <= before) {
        format!("ends at {end}, not after the entry before it")
    } else {
        return Ok(());
    };
    Err(RecordError::OffsetsOutOfPlace { offset, reason })
}

/// Where reading goes on once an answer starting before the fetch offset (at `base`, see
/// [`first_entry_in_place`]) came fetch after fetch: that is the log, so the answer before
/// (`last`), whose whole entries ended at the fetch offset, was the damaged one — its last
/// batch's base offset (outside the CRC) was moved on the way, and its records went out under
/// offsets not their own. Where that batch really ends, reading goes on, and only its CRC
/// names it: the answer before is fetched again from where it was (`last.from`), its entries
/// skipped as handed out already, the last of them checked by its CRC (`decode_into`).
/// Without what that takes (no record of the answer before, or a v0/v1 last entry) reading
/// goes on from `base`, the start of the batch holding the position. Pure.
///
/// From `base` alone, a batch moved up across a batch boundary (one bit, +32, on batches of
/// 20) lost the batches between its real end and `base`. (One moved down starts before the
/// position itself and is fetched again at once, unless the position came from a seek.)
pub(super) fn after_out_of_place(
    last: Option<LastAnswer>,
    base: i64,
    epoch: u64,
) -> (i64, Option<Resync>) {
    match last {
        Some(LastAnswer {
            from,
            trace:
                AnswerTrace {
                    entries,
                    last_crc: Some(crc),
                    ..
                },
        }) if entries > 0 => (
            from,
            Some(Resync {
                epoch,
                at: from,
                skip: Skip { entries, crc },
            }),
        ),
        _ => (base, None),
    }
}

/// Whether a Fetch answer's diverging epoch can answer a fetch that sent `last_fetched_epoch`:
/// the leader checks only what was sent (an epoch of ours, KIP-320), and names the largest
/// epoch of its own at or below it, with where it ends (one it cannot name is an
/// OFFSET_OUT_OF_RANGE, not a divergence). Pure.
///
/// A damaged answer named epoch 17462833 ending at offset 3834587484168126476; kept as the last
/// fetched epoch, it made every later fetch of the partition OFFSET_OUT_OF_RANGE, for ever (the
/// read_committed consumer under random flips: 220 values never read).
pub(super) fn divergence_asked_for(last_fetched_epoch: i32, epoch: i32, end_offset: i64) -> bool {
    last_fetched_epoch >= 0 && (0..=last_fetched_epoch).contains(&epoch) && end_offset >= 0
}

/// The v2 batches of an answer as (base offset, producer id, transactional, next offset),
/// framed without their CRC (the decoding pass checks it), up to the first that cannot be.
pub(super) fn batch_heads(bytes: &bytes::Bytes) -> Vec<(i64, i64, bool, i64)> {
    decode_entries(bytes.clone())
        .crc_check(CrcCheck::Skip)
        .map_while(|e| e.ok())
        .filter_map(|e| match e {
            LogEntry::Batch(b) => Some((
                b.base_offset,
                b.producer_id,
                b.is_transactional(),
                b.next_offset(),
            )),
            LogEntry::Legacy(_) => None,
        })
        .collect()
}

/// Whether an answer's aborted-transaction list agrees with its batches (`heads`, from
/// [`batch_heads`]): an aborted transaction listed from an offset inside the data must start
/// at a transactional batch of its producer there — Kafka lists a transaction from its first
/// batch. Pure.
///
/// The list is outside every CRC. One bit flipped in a listed producer id (or first offset)
/// and the aborted transaction's batches were handed out as committed (the read_committed
/// consumer under random flips: an aborted value delivered). Taken for damage, as a CRC
/// failure is: fetched again. A listed transaction starting before the answer's data cannot
/// be checked here.
pub(super) fn aborted_list_borne_out(
    heads: &[(i64, i64, bool, i64)],
    listed: &[(i64, i64)],
) -> Result<(), RecordError> {
    let (Some(first), Some(last)) = (heads.first(), heads.last()) else {
        return Ok(());
    };
    let inside = |offset: i64| first.0 <= offset && offset < last.3;
    for &(producer_id, first_offset) in listed {
        let starts_there = heads
            .iter()
            .any(|h| h.0 == first_offset && h.1 == producer_id && h.2);
        if inside(first_offset) && !starts_there {
            return Err(RecordError::AbortedListContradicted {
                producer_id,
                first_offset,
            });
        }
    }
    Ok(())
}

/// Whether an answer fetched from where the whole entries of the answer before ended lists
/// again every aborted transaction that answer left open (`open`: listed, started, no abort
/// marker yet): the broker lists each aborted transaction whose marker is at or after the
/// fetch offset, and an open one's marker is past it. Call only for an answer with batches
/// (an answer without data lists nothing). Pure.
///
/// A transaction that began in an earlier answer cannot be checked against this answer's
/// batches ([`aborted_list_borne_out`]): one bit flipped in its listed producer id, and its
/// batches here were handed out as committed (the read_committed consumer under random flips
/// at transaction.version 1: an aborted value delivered). The answer before named it, and
/// that is enough to catch the damage either way round: whichever list was damaged, the two
/// disagree and the answer is fetched again, and one that keeps disagreeing is the log (the
/// check is then off, as for [`aborted_list_borne_out`]; a marker removed by compaction
/// between the two fetches looks the same).
pub(super) fn aborted_list_repeats(
    open: &[(i64, i64)],
    listed: &[(i64, i64)],
    position: i64,
) -> Result<(), RecordError> {
    match open.iter().find(|o| !listed.contains(o)) {
        Some(&(producer_id, first_offset)) => Err(RecordError::AbortedTransactionLeftOut {
            producer_id,
            first_offset,
            position,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::v2_batch;
    use super::*;
    use bytes::Bytes;

    #[test]
    fn a_log_start_from_list_offsets_is_borne_out_by_the_fetch_answer() {
        // (resolved by ListOffsets, log start in the Fetch answer, borne out)
        let cases = [(0, 0, true), (0, -1, true), (16, 0, false), (10, 12, true)];
        for (resolved, log_start, want) in cases {
            assert_eq!(
                earliest_borne_out(resolved, log_start),
                want,
                "{resolved} / {log_start}"
            );
        }
    }

    /// (base offset, records, end of the entry before, high watermark, in place)
    #[test]
    fn entries_must_end_by_the_high_watermark_and_follow_each_other() {
        let cases: [(i64, usize, Option<i64>, i64, bool); 9] = [
            (0, 5, None, 5, true),
            (0, 5, None, 10, true),
            (0, 5, None, 4, false),
            // A base offset with a high bit flipped: far past the end of the log.
            ((1 << 40) + 3, 5, None, 100, false),
            (5, 5, Some(5), 10, true),
            // A gap after the batch before (a compacted log) is allowed.
            (7, 3, Some(5), 10, true),
            (4, 5, Some(5), 10, false),
            // High watermark unknown: only the order is checked.
            (100, 5, None, -1, true),
            (2, 5, Some(5), -1, false),
        ];
        for (base, n, before, hw, want) in cases {
            let bytes = v2_batch(base, n);
            let entry = decode_entries(bytes::Bytes::from(bytes))
                .next()
                .expect("one entry")
                .expect("decodes");
            let got = entry_in_place(&entry, before, hw);
            assert_eq!(
                got.is_ok(),
                want,
                "base {base}, {n} records, before {before:?}, hw {hw}: {got:?}"
            );
        }
    }

    #[test]
    fn data_that_fails_its_check_is_fetched_again_before_the_partition_halts() {
        // (failures recorded so far, offset failing now, new record, halt)
        let cases = [
            (None, 40, Some((40, 1)), false),
            (Some((40, 1)), 40, Some((40, 2)), false),
            (Some((40, 2)), 40, Some((40, 3)), true),
            // Another offset: the count starts again (the earlier spot decoded on refetch).
            (Some((40, 2)), 55, Some((55, 1)), false),
        ];
        for (before, offset, record, halt) in cases {
            assert_eq!(
                after_corrupt_data(before, offset),
                (record, halt),
                "{before:?} at {offset}"
            );
        }
    }

    /// (base offset of the answer's first batch, fetch offset, fetch offset after the last
    /// answer's whole entries, accepted)
    #[test]
    fn after_whole_entries_the_next_answer_cannot_start_before_the_fetch_offset() {
        let cases = [
            (20, 20, true, true),   // starts where the last answer ended
            (25, 20, true, true),   // a gap: compaction removed a batch
            (16, 20, true, false),  // 4 before: one of the two answers was damaged
            (16, 20, false, true),  // a seek (or committed offset) inside a batch
            (-12, 20, true, false), // the sign bit
        ];
        for (base, fetch_offset, after_answer, ok) in cases {
            let entry = decode_entries(Bytes::from(v2_batch(base, 5)))
                .next()
                .unwrap()
                .unwrap();
            assert_eq!(
                first_entry_in_place(&entry, fetch_offset, after_answer).is_ok(),
                ok,
                "batch at {base}, fetched at {fetch_offset}, after an answer: {after_answer}"
            );
        }
        // v0/v1 message sets are not checked (a wrapper's inner offsets run before its own).
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy/mixed.log");
        let legacy = decode_entries(Bytes::from(std::fs::read(path).unwrap()))
            .next()
            .unwrap()
            .unwrap();
        assert!(first_entry_in_place(&legacy, 1_000, true).is_ok());
    }

    /// (what, the answer before as (from, entries, last CRC), base of the batch holding the
    /// position, where reading goes on, a walk).
    #[test]
    fn a_batch_out_of_place_is_found_again_by_its_crc_not_by_the_next_answers_start() {
        let last = |from, entries, crc| {
            Some(LastAnswer {
                from,
                trace: AnswerTrace {
                    entries,
                    last_crc: crc,
                    ..AnswerTrace::default()
                },
            })
        };
        let walk = |at, entries| {
            Some(Resync {
                epoch: 9,
                at,
                skip: Skip { entries, crc: 77 },
            })
        };
        type Case = (&'static str, Option<LastAnswer>, i64, i64, Option<Resync>);
        let cases: [Case; 5] = [
            // One batch [20, 40) moved up 32: the position 72 lies in [60, 80).
            (
                "moved up across batches",
                last(20, 1, Some(77)),
                60,
                20,
                walk(20, 1),
            ),
            // [40, 60) moved down 32: the position 28 lies in [20, 40).
            ("moved down", last(40, 1, Some(77)), 20, 40, walk(40, 1)),
            (
                "an answer of three",
                last(0, 3, Some(77)),
                60,
                0,
                walk(0, 3),
            ),
            ("nothing known of the answer before", None, 60, 60, None),
            (
                "its last entry a v0/v1 message",
                last(20, 1, None),
                60,
                60,
                None,
            ),
        ];
        for (what, before, base, from, resync) in cases {
            assert_eq!(
                after_out_of_place(before, base, 9),
                (from, resync),
                "{what}"
            );
        }
    }

    /// (what, listed (producer, first offset), borne out) against batches of producer 7:
    /// transactional at 10 and 20, a plain one at 30, and producer 8's transactional at 40;
    /// the data ends at 50.
    #[test]
    fn an_aborted_transaction_listed_inside_the_data_starts_at_a_batch_of_its_producer() {
        let heads = [
            (10, 7, true, 20),
            (20, 7, true, 30),
            (30, 7, false, 40),
            (40, 8, true, 50),
        ];
        type Case = (&'static str, Vec<(i64, i64)>, bool);
        let cases: [Case; 8] = [
            ("nothing listed", vec![], true),
            ("at a batch of its producer", vec![(7, 20)], true),
            ("two, each at its own", vec![(7, 10), (8, 40)], true),
            ("began before the data", vec![(9, 3)], true),
            ("begins after the data", vec![(9, 50)], true),
            ("producer id flipped", vec![(6, 20)], false),
            ("first offset flipped", vec![(7, 24)], false),
            ("at a batch outside any transaction", vec![(7, 30)], false),
        ];
        for (what, listed, ok) in cases {
            assert_eq!(
                aborted_list_borne_out(&heads, &listed).is_ok(),
                ok,
                "{what}"
            );
        }
    }

    /// (last fetched epoch sent, diverging epoch and end offset answered, can be an answer)
    #[test]
    fn a_diverging_epoch_answers_only_the_epoch_sent() {
        let cases = [
            (5, 5, 100, true),
            (5, 3, 0, true),
            (5, 17_462_833, 3_834_587_484_168_126_476, false),
            (5, -1, i64::MAX, false), // the sign bit of "none" (-1) flipped
            (5, 3, -1, false),
            (-1, 3, 100, false), // nothing was sent to check
        ];
        for (sent, epoch, end, ok) in cases {
            assert_eq!(
                divergence_asked_for(sent, epoch, end),
                ok,
                "{sent} / {epoch} / {end}"
            );
        }
    }

    /// (what, open where the last answer ended, listed now, consistent)
    #[test]
    fn an_answer_lists_again_the_aborted_transactions_left_open() {
        type Case = (&'static str, Vec<(i64, i64)>, Vec<(i64, i64)>, bool);
        let cases: [Case; 6] = [
            ("nothing open", vec![], vec![(7, 40)], true),
            ("listed again", vec![(7, 10)], vec![(7, 10)], true),
            (
                "listed again among others",
                vec![(7, 10)],
                vec![(8, 30), (7, 10)],
                true,
            ),
            ("producer id flipped", vec![(7, 10)], vec![(6, 10)], false),
            ("first offset flipped", vec![(7, 10)], vec![(7, 11)], false),
            ("left out", vec![(7, 10), (8, 12)], vec![(8, 12)], false),
        ];
        for (what, open, listed, ok) in cases {
            assert_eq!(
                aborted_list_repeats(&open, &listed, 20).is_ok(),
                ok,
                "{what}"
            );
        }
    }

    /// The property reaches the decoder: default and "true" verify, "false" skips.
    #[test]
    fn check_crcs_property_chooses_the_crc_check() {
        let cases = [
            (None, CrcCheck::Verify),
            (Some("true"), CrcCheck::Verify),
            (Some("false"), CrcCheck::Skip),
        ];
        for (value, want) in cases {
            let props: Vec<(&str, &str)> = value.map(|v| ("check.crcs", v)).into_iter().collect();
            let cfg = ConsumerConfig::from_properties(props).unwrap();
            assert_eq!(crc_check(&cfg), want, "check.crcs={value:?}");
        }
    }
}
