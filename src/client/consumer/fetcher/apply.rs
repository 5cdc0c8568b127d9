//! One partition's answer applied to its state: a decoded chunk moves the position on, an
//! error code is retried, resets the position or is reported, a diverging epoch (KIP-320)
//! moves the position back; a partition backs off after an error.

use super::decode::decode_partition;
use super::integrity::{
    after_corrupt_data, after_out_of_place, crc_check, divergence_asked_for, earliest_borne_out,
    stopped_at_an_entry,
};
use super::request::Want;
use crate::client::config::AutoOffsetReset;
use crate::client::consumer::truncation::{on_diverging_epoch, Divergence};
use crate::client::consumer::{
    AnswerTrace, Chunk, Fetched, LastAnswer, Offset, PartitionState, Resolution, Resync, Shared,
};
use crate::client::error::{classify, Error, ErrorClass, Op, Result};
use crate::client::metadata::TopicPartition;
use crate::protocol::records::RecordError;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::fetch_response::PartitionData;
use std::collections::VecDeque;
use std::time::Instant;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// What one partition's answer came to, for the request as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Applied {
    /// Records went to the consumer: the partition moves to the end of the fetch order.
    Records,
    /// Nothing more to do.
    Nothing,
    /// Retried after a backoff; metadata must be refreshed first.
    Refresh,
    /// The consumer is gone: stop.
    ConsumerGone,
}

/// Applies one partition's answer: its error, a diverging epoch, or its records.
pub(super) async fn apply_partition(
    shared: &Shared,
    id: u64,
    w: &Want,
    p: &PartitionData,
    broker: &str,
    tx: &mpsc::Sender<Fetched>,
) -> Applied {
    if p.error_code != 0 {
        return on_error(shared, id, w, ErrorCode(p.error_code), broker, tx).await;
    }
    let diverging = &p.diverging_epoch;
    if diverging.epoch >= 0 || diverging.end_offset >= 0 {
        if let Some(chunk) = diverged(shared, id, w, p) {
            if tx.send(Fetched::Chunk(chunk)).await.is_err() {
                return Applied::ConsumerGone;
            }
        }
        return Applied::Nothing;
    }
    let mut chunk = decode_partition(w, p, crc_check(&shared.config));
    advance(shared, id, w, p.log_start_offset, &mut chunk);
    let records = !chunk.records.is_empty();
    if tx.send(Fetched::Chunk(chunk)).await.is_err() {
        return Applied::ConsumerGone;
    }
    if records {
        Applied::Records
    } else {
        Applied::Nothing
    }
}

/// Moves the partition past a decoded chunk, if the request is still current: the next fetch
/// starts after it. A chunk that ends at corrupt data is fetched again from there (the error
/// dropped, the records before it kept) until `after_corrupt_data` halts the partition.
fn advance(shared: &Shared, id: u64, w: &Want, log_start_offset: i64, chunk: &mut Chunk) {
    let mut parts = shared.lock();
    let Some(st) = release(parts.get_mut(&w.tp), id).filter(|st| st.epoch == w.epoch) else {
        return;
    };
    if earliest_asked_again(shared, w, st, log_start_offset) {
        return;
    }
    move_past(st, w, log_start_offset, chunk);
    let Some(e) = chunk.error.take() else {
        // Read past where data failed its check before: the failures there are over.
        if st.corrupt_at.is_some_and(|(at, _)| chunk.next_offset > at) {
            st.corrupt_at = None;
        }
        note_answer_end(st, w, chunk);
        return;
    };
    let fetched_again = match &e {
        Error::CorruptData {
            offset,
            source: RecordError::StartsBeforeTheLastAnswerEnded { offset: base, .. },
            ..
        } => {
            on_starts_before_last_answer(st, w, &e, *offset, *base);
            true
        }
        Error::CorruptData { offset, source, .. } => {
            on_corrupt_data(st, w, &e, *offset, source, chunk)
        }
        _ => {
            debug!(tp = %w.tp, error = %e, "fetching stopped");
            st.answer_end = None;
            st.halted = true;
            false
        }
    };
    // Data fetched again is not an error the application sees.
    if !fetched_again {
        chunk.error = Some(e);
    }
}

/// Whether the answer's log start contradicts the position ListOffsets gave as the log start
/// (see [`earliest_borne_out`]): then the log start is asked again, and the chunk, fetched
/// under the epoch the partition leaves, is dropped.
fn earliest_asked_again(
    shared: &Shared,
    w: &Want,
    st: &mut PartitionState,
    log_start_offset: i64,
) -> bool {
    let Some(Resolution::Unconfirmed {
        at: Offset::Beginning,
        offset: resolved,
    }) = st.resolution
    else {
        return false;
    };
    if earliest_borne_out(resolved, log_start_offset) {
        return false;
    }
    // The chunk goes out under the old epoch and is dropped: reading starts again
    // from the beginning asked anew.
    warn!(tp = %w.tp, resolved, log_start_offset, "the log start ListOffsets gave is past the one the Fetch answer names; asking again");
    st.epoch = shared.next_epoch();
    st.pending = Some(Offset::Beginning);
    st.position = None;
    st.resolution = Some(Resolution::AskedAgain);
    true
}

/// Moves the fetch offset to the chunk's end, with what the answer bore out (the position,
/// the topic id), how far a walk back got, the log start, and the leader epoch the next fetch
/// sends as last_fetched_epoch.
fn move_past(st: &mut PartitionState, w: &Want, log_start_offset: i64, chunk: &Chunk) {
    // Any answer with the partition's data (or none, at its end) bears the position out, and
    // the topic id it was fetched under.
    st.resolution = None;
    st.topic_id_borne_out = st.topic_id.is_some();
    st.fetch_offset = chunk.next_offset;
    // A walk back goes on from where this answer left it (or is over).
    st.resync = chunk.trace.skip_left.map(|skip| Resync {
        epoch: st.epoch,
        at: chunk.next_offset,
        skip,
    });
    if chunk.trace.skip_mismatch {
        warn!(tp = %w.tp, "walking back: the entry where the batch handed out last should be is another (the log changed?); reading on from it");
    }
    st.log_start_offset = log_start_offset;
    // A batch's partition leader epoch is not covered by its CRC: one flipped bit there, kept
    // and sent back as last_fetched_epoch, made every later Fetch of the partition fail at the
    // broker. An epoch above the leader's (as metadata has it) cannot be real: not kept.
    if let Some(e) = chunk
        .last_epoch
        .filter(|e| w.leader_epoch < 0 || *e <= w.leader_epoch)
    {
        st.last_fetched_epoch = e;
    }
}

/// Notes where the whole entries of the answer ended, if it read any: the next answer from
/// there is checked against it (its first batch, the aborted transactions still open) and a
/// walk back starts from it.
fn note_answer_end(st: &mut PartitionState, w: &Want, chunk: &mut Chunk) {
    if chunk.next_offset > w.fetch_offset {
        st.answer_end = Some(chunk.next_offset);
        st.open_aborted = std::mem::take(&mut chunk.open_aborted);
        st.last_answer = Some(LastAnswer {
            from: w.fetch_offset,
            trace: chunk.trace,
        });
    }
}

/// An answer whose first batch starts (at `base`) before the last answer ended, where it was
/// fetched (`offset`): fetched again; when the same answer keeps coming, the answer before was
/// the damaged one, and reading walks back to where that one really ends.
fn on_starts_before_last_answer(
    st: &mut PartitionState,
    w: &Want,
    e: &Error,
    offset: i64,
    base: i64,
) {
    // Nothing of this answer was read; `answer_end` stays, so the check is made again.
    let (record, again) = after_corrupt_data(st.corrupt_at, offset);
    st.corrupt_at = record;
    if again {
        // The same answer, fetch after fetch: that is the log, and the answer before
        // was the damaged one — its last batch went out under offsets not its own.
        // `last_answer` is the answer whose end the position is (an answer is checked
        // so only while its fetch offset is `answer_end`, set with `last_answer`).
        let (from, resync) = after_out_of_place(st.last_answer, base, st.epoch);
        if resync.is_some() {
            warn!(tp = %w.tp, error = %e, from, "the last answer's batch was out of place; walking back to where it really ends");
        } else {
            warn!(tp = %w.tp, error = %e, "the last answer's batch was out of place; reading from this one's start");
        }
        st.fetch_offset = from;
        st.resync = resync;
        st.answer_end = None;
        st.corrupt_at = None;
    } else {
        warn!(tp = %w.tp, error = %e, "data out of place; fetching it again (damaged on the way?)");
    }
}

/// Data that failed its check (`source`) at `offset`: fetched again from there until
/// [`after_corrupt_data`] halts the partition. Whether it is fetched again.
fn on_corrupt_data(
    st: &mut PartitionState,
    w: &Want,
    e: &Error,
    offset: i64,
    source: &RecordError,
    chunk: &mut Chunk,
) -> bool {
    // Refetched from where decoding stopped: still after whole entries when it stopped
    // at an entry's start (a batch out of place in the same answer: the next answer's
    // first batch must not start before it either).
    if !stopped_at_an_entry(source) {
        st.answer_end = None;
    } else {
        note_answer_end(st, w, chunk);
    }
    let (record, halt) = after_corrupt_data(st.corrupt_at, offset);
    st.corrupt_at = record;
    if halt {
        warn!(tp = %w.tp, error = %e, "fetching stopped at data that failed its check again");
        st.halted = true;
        false
    } else {
        warn!(tp = %w.tp, error = %e, "data failed its check; fetching it again (damaged on the way?)");
        true
    }
}

/// What a partition's error code in a Fetch response makes the fetcher do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnError {
    /// OFFSET_OUT_OF_RANGE with a reset policy: the position is resolved again from there.
    Reset(Offset),
    /// OFFSET_OUT_OF_RANGE under auto.offset.reset=none: the application is told, and the
    /// partition waits retry.backoff.max.ms.
    OutOfRange,
    /// Fetched again after retry.backoff.ms; with `refresh`, after a metadata refresh (the
    /// leader moved, or its epoch is not ours).
    Retry { refresh: bool },
    /// The application is told; fetched again after retry.backoff.ms.
    Fail,
}

/// The one decision about a partition's error code, with [`classify`] for all but
/// OFFSET_OUT_OF_RANGE.
fn on_partition_error(code: ErrorCode, reset: AutoOffsetReset) -> OnError {
    if code == ErrorCode::OFFSET_OUT_OF_RANGE {
        return match reset {
            AutoOffsetReset::Earliest => OnError::Reset(Offset::Beginning),
            AutoOffsetReset::Latest => OnError::Reset(Offset::End),
            AutoOffsetReset::None => OnError::OutOfRange,
        };
    }
    match classify(code, Op::General) {
        ErrorClass::Retriable => OnError::Retry { refresh: false },
        ErrorClass::RefreshAndRetry => OnError::Retry { refresh: true },
        _ => OnError::Fail,
    }
}

/// Applies [`on_partition_error`]'s decision to the partition and tells the application when
/// it must know.
async fn on_error(
    shared: &Shared,
    id: u64,
    w: &Want,
    code: ErrorCode,
    broker: &str,
    tx: &mpsc::Sender<Fetched>,
) -> Applied {
    let tp = &w.tp;
    match on_partition_error(code, shared.config.auto_offset_reset) {
        action @ (OnError::Reset(_) | OnError::OutOfRange) => {
            if !out_of_range_confirmed(shared, id, w, tx).await {
                return Applied::Nothing;
            }
            if reset_out_of_range(shared, id, w, action) {
                let e = Error::broker(
                    format!(
                        "fetch {tp} at offset {} from broker {broker} (auto.offset.reset=none)",
                        w.fetch_offset
                    ),
                    code,
                );
                let _ = tx.send(Fetched::Error(e)).await;
            }
            Applied::Nothing
        }
        OnError::Retry { refresh } => {
            // last_fetched_epoch kept: after a leader moved, the next fetch's divergence check
            // (KIP-320) is what detects a truncated log.
            set_backoff(shared, id, tp);
            if refresh {
                Applied::Refresh
            } else {
                Applied::Nothing
            }
        }
        OnError::Fail => {
            forget_last_fetched_epochs(shared, std::slice::from_ref(w));
            set_backoff(shared, id, tp);
            let _ = tx
                .send(Fetched::Error(Error::broker(
                    format!("fetch {tp} from broker {broker}"),
                    code,
                )))
                .await;
            Applied::Nothing
        }
    }
}

/// Whether ListOffsets confirms an answer's OFFSET_OUT_OF_RANGE (see [`within_the_log`]);
/// if not, the partition is fetched again after a backoff (and a fatal error asking reaches
/// the application).
async fn out_of_range_confirmed(
    shared: &Shared,
    id: u64,
    w: &Want,
    tx: &mpsc::Sender<Fetched>,
) -> bool {
    let tp = &w.tp;
    match within_the_log(shared, tp, w.fetch_offset).await {
        Ok(false) => true,
        outcome => {
            // Not confirmed (the offset is within the log: an answer damaged on its
            // way, or the log check failed): moving the position by
            // auto.offset.reset would skip or re-read records. Fetched again.
            warn!(%tp, fetch_offset = w.fetch_offset, ?outcome, "OFFSET_OUT_OF_RANGE not confirmed by ListOffsets; fetching again");
            set_backoff(shared, id, tp);
            if let Err(e) = outcome {
                if e.class() == ErrorClass::Fatal {
                    let _ = tx.send(Fetched::Error(e)).await;
                }
            }
            false
        }
    }
}

/// Moves a partition whose fetch offset is out of range (confirmed), if the request is still
/// current: by `action`, the decision for OFFSET_OUT_OF_RANGE. Whether the application must be
/// told (auto.offset.reset=none: the partition waits retry.backoff.max.ms).
fn reset_out_of_range(shared: &Shared, id: u64, w: &Want, action: OnError) -> bool {
    let tp = &w.tp;
    let mut parts = shared.lock();
    match release(parts.get_mut(tp), id).filter(|st| st.epoch == w.epoch) {
        // A position ListOffsets gave, never borne out: that answer was damaged
        // on its way (0 → 4194304, one bit) or the log moved since. Its own
        // question is asked again, once, rather than auto.offset.reset's: a seek
        // to the beginning under auto.offset.reset=latest skipped the partition.
        Some(st) => match (st.resolution, action) {
            (Some(Resolution::Unconfirmed { at, offset }), _) => {
                warn!(%tp, offset, ?at, "a position ListOffsets gave is out of range; asking again");
                st.epoch = shared.next_epoch();
                st.pending = Some(at);
                st.position = None;
                st.resolution = Some(Resolution::AskedAgain);
                false
            }
            (_, OnError::Reset(r)) => {
                debug!(%tp, fetch_offset = w.fetch_offset, ?r, "offset out of range; resetting");
                st.epoch = shared.next_epoch();
                st.pending = Some(r);
                st.position = None;
                false
            }
            _ => {
                st.backoff_until = Some(Instant::now() + shared.config.client.retry_backoff_max);
                true
            }
        },
        None => false,
    }
}

/// Whether `offset` is within the partition's log, [log start, high watermark], as ListOffsets
/// says (read_uncommitted: the high watermark, not the LSO). Asked before acting on
/// OFFSET_OUT_OF_RANGE, which resets the position: one flipped bit turns a fetch's error code 0
/// into 1, and the Java consumer would reset at once (earliest: read everything again; latest:
/// skip to the end). The answer is rare enough that the two requests cost nothing.
async fn within_the_log(shared: &Shared, tp: &TopicPartition, offset: i64) -> Result<bool> {
    let tps = [tp.clone()];
    let ask = |at| {
        crate::client::list_offsets::list_offsets(
            &shared.cluster,
            crate::client::config::IsolationLevel::ReadUncommitted,
            &tps,
            at,
        )
    };
    let start = ask(Offset::Beginning).await?;
    let end = ask(Offset::End).await?;
    let missing = || Error::Internal(format!("ListOffsets left out {tp}"));
    let start = *start.get(tp).ok_or_else(missing)?;
    let end = *end.get(tp).ok_or_else(missing)?;
    Ok(start <= offset && offset <= end)
}

/// Applies a diverging epoch (KIP-320) to the partition, if the request is still current;
/// returns the chunk that reports a truncation to the application, if it must be told.
fn diverged(shared: &Shared, id: u64, w: &Want, p: &PartitionData) -> Option<Chunk> {
    let d = &p.diverging_epoch;
    let mut parts = shared.lock();
    let st = release(parts.get_mut(&w.tp), id).filter(|st| st.epoch == w.epoch)?;
    if !divergence_asked_for(w.last_fetched_epoch, d.epoch, d.end_offset) {
        // Damaged on the way: fetched again as it was.
        warn!(tp = %w.tp, last_fetched_epoch = w.last_fetched_epoch, epoch = d.epoch, end_offset = d.end_offset, "a diverging epoch this fetch cannot have been answered; fetching again");
        st.backoff_until = Some(Instant::now() + shared.config.client.retry_backoff);
        return None;
    }
    let position = st.position.unwrap_or(w.fetch_offset);
    let action = on_diverging_epoch(
        position,
        d.epoch,
        d.end_offset,
        shared.config.auto_offset_reset,
    );
    // Whatever happens, data fetched before this answer is not to be handed out.
    st.epoch = shared.next_epoch();
    st.last_fetched_epoch = -1;
    match action {
        Divergence::Refetch { offset, last_epoch } => {
            if offset < position {
                warn!(tp = %w.tp, position, offset, epoch = d.epoch, "log truncation detected; moving to the first offset known to diverge");
            } else {
                info!(tp = %w.tp, position, fetch_offset = w.fetch_offset, epoch = d.epoch, end_offset = d.end_offset, "leader log diverges after the position; fetching again");
            }
            st.position = Some(offset);
            st.fetch_offset = offset;
            st.last_fetched_epoch = last_epoch;
            None
        }
        Divergence::Reset(r) => {
            warn!(tp = %w.tp, position, ?r, "log truncation at an unknown offset; resetting");
            st.pending = Some(r);
            st.position = None;
            None
        }
        Divergence::Fail { divergent_offset } => {
            warn!(tp = %w.tp, position, ?divergent_offset, "log truncation detected and auto.offset.reset=none");
            st.halted = true;
            Some(Chunk {
                tp: w.tp.clone(),
                epoch: st.epoch,
                records: VecDeque::new(),
                next_offset: position,
                high_watermark: p.high_watermark,
                last_stable_offset: p.last_stable_offset,
                error: Some(Error::LogTruncation {
                    topic: w.tp.topic.clone(),
                    partition: w.tp.partition,
                    position,
                    divergent_offset,
                }),
                last_epoch: None,
                open_aborted: Vec::new(),
                trace: AnswerTrace::default(),
            })
        }
    }
}

/// The partition's state if it is still in request `id` (not reassigned since), with the
/// request's claim on it released.
pub(super) fn release(st: Option<&mut PartitionState>, id: u64) -> Option<&mut PartitionState> {
    let st = st?;
    if st.in_flight != Some(id) {
        return None;
    }
    st.in_flight = None;
    Some(st)
}

/// The partition, if still in request `id`, is fetched again after retry.backoff.ms.
fn set_backoff(shared: &Shared, id: u64, tp: &TopicPartition) {
    let mut parts = shared.lock();
    if let Some(st) = release(parts.get_mut(tp), id) {
        st.backoff_until = Some(Instant::now() + shared.config.client.retry_backoff);
        st.fetch_failed = true;
    }
}

/// The partitions' last fetched epochs are forgotten (the next fetch of each skips the
/// KIP-320 divergence check once), if they are still what the request sent.
pub(super) fn forget_last_fetched_epochs(shared: &Shared, list: &[Want]) {
    let mut parts = shared.lock();
    for w in list {
        if let Some(st) = parts.get_mut(&w.tp).filter(|st| st.epoch == w.epoch) {
            if st.last_fetched_epoch == w.last_fetched_epoch {
                st.last_fetched_epoch = -1;
            }
        }
    }
}

/// The partitions of request `id` back off ([`set_backoff`]), after a metadata refresh with
/// `refresh`.
pub(super) async fn back_off(shared: &Shared, id: u64, list: &[Want], refresh: bool) {
    for w in list {
        set_backoff(shared, id, &w.tp);
    }
    if refresh {
        let g = shared.cluster.metadata().generation;
        let _ = shared.cluster.refresh_if_older(g).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a partition's error code makes the fetcher do.
    #[test]
    fn partition_error_decisions() {
        use AutoOffsetReset::{Earliest, Latest};
        let none = AutoOffsetReset::None;
        let cases = [
            (
                ErrorCode::OFFSET_OUT_OF_RANGE,
                Earliest,
                OnError::Reset(Offset::Beginning),
            ),
            (
                ErrorCode::OFFSET_OUT_OF_RANGE,
                Latest,
                OnError::Reset(Offset::End),
            ),
            (ErrorCode::OFFSET_OUT_OF_RANGE, none, OnError::OutOfRange),
            (
                ErrorCode::NOT_LEADER_OR_FOLLOWER,
                Latest,
                OnError::Retry { refresh: true },
            ),
            (
                ErrorCode::FENCED_LEADER_EPOCH,
                Latest,
                OnError::Retry { refresh: true },
            ),
            (
                ErrorCode::UNKNOWN_LEADER_EPOCH,
                Latest,
                OnError::Retry { refresh: true },
            ),
            (
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                Latest,
                OnError::Retry { refresh: true },
            ),
            (
                ErrorCode::KAFKA_STORAGE_ERROR,
                none,
                OnError::Retry { refresh: true },
            ),
            (
                ErrorCode::REQUEST_TIMED_OUT,
                Latest,
                OnError::Retry { refresh: false },
            ),
            (
                ErrorCode::CORRUPT_MESSAGE,
                Latest,
                OnError::Retry { refresh: false },
            ),
            (ErrorCode::TOPIC_AUTHORIZATION_FAILED, Latest, OnError::Fail),
            (ErrorCode::UNSUPPORTED_VERSION, Earliest, OnError::Fail),
        ];
        for (code, reset, want) in cases {
            assert_eq!(on_partition_error(code, reset), want, "{code:?} {reset:?}");
        }
    }
}
