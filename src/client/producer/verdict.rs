//! What to do with a batch after its Produce request: a pure decision, no locks, no I/O.
//!
//! The sender's response handling (`sender::finish`) snapshots what the decision needs from
//! the accumulator into a [`PartitionView`] and acts on the returned [`Verdict`].

use super::accumulator::{next_seq, seq_after, ProducerBatch};
use crate::client::error::{Error, ErrorClass, Op};
use crate::protocol::ErrorCode;

/// What the broker said about one batch.
pub(crate) struct PartitionResult {
    pub error_code: i16,
    pub base_offset: i64,
    pub log_append_time: i64,
    pub log_start_offset: i64,
    /// The broker that answered (its address), named in the error a code becomes.
    pub broker: std::sync::Arc<str>,
}

/// What the decision needs to know about the producer and the batch's partition, read from
/// the accumulator when the response is handled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PartitionView {
    /// The producer is transactional.
    pub transactional: bool,
    /// Batches of the partition in flight, this one included (it counts until settled).
    pub in_flight: usize,
    /// Creation order of the partition's first ready batch, if any.
    pub ready_head_order: Option<u64>,
    /// Last sequence the broker acknowledged under the current epoch, -1 if none.
    pub acked_through: i32,
    /// Offset of the last acknowledged record, -1 if none.
    pub last_acked_offset: i64,
    /// An epoch bump is pending (a batch failed): the batches before it are being resolved.
    pub bump_pending: bool,
}

impl Default for PartitionView {
    /// A partition the accumulator does not know: nothing in flight or acknowledged.
    fn default() -> Self {
        PartitionView {
            transactional: false,
            in_flight: 0,
            ready_head_order: None,
            acked_through: -1,
            last_acked_offset: -1,
            bump_pending: false,
        }
    }
}

/// What to do with a batch after its request.
#[derive(Debug)]
pub(crate) enum Verdict {
    Done {
        base_offset: i64,
        log_append_time: i64,
    },
    Retry {
        error: Error,
        bump: bool,
        refresh: bool,
    },
    Fail {
        error: Error,
    },
}

/// Whether a failed attempt may still have written the batch: its request got no answer
/// (connection lost, request.timeout.ms), or the leader answered that it appended the batch
/// but could not replicate it in time. Any other broker error means the batch was not
/// appended. Decides whether a batch may go to a recreated topic (see
/// `accumulator::Incarnation`): one the deleted topic may hold must not be written again.
///
/// A batch the broker refused as out of order is not in the log under its producer id and
/// epoch (a written one is answered as a duplicate), whatever earlier attempts left unknown:
/// [`refused_as_unwritten`].
pub(crate) fn may_have_been_written(error: &Error) -> bool {
    match error.code() {
        Some(code) => matches!(
            code,
            ErrorCode::REQUEST_TIMED_OUT | ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND
        ),
        None => true,
    }
}

/// Decides a batch's fate. The error classes come from [`crate::client::classify`]; what is
/// particular to produce is the idempotence handling of sequence errors (KIP-360).
///
/// Long on purpose: one `match` over (outcome, error class, idempotence state) read as a
/// decision table, row for row with its table test; splitting it would scatter the rows.
pub(crate) fn verdict(
    view: &PartitionView,
    b: &ProducerBatch,
    outcome: Result<PartitionResult, Error>,
) -> Verdict {
    let op = if view.transactional {
        Op::TxnProduce
    } else {
        Op::General
    };
    let r = match outcome {
        Ok(r) => r,
        // No answer: the batch may or may not be in the log. With idempotence a resend of the
        // same sequence is deduplicated by the broker; without it this is where duplicates
        // come from.
        Err(error) => {
            let retriable = matches!(
                error.class_in(op),
                ErrorClass::Retriable | ErrorClass::RefreshAndRetry
            );
            return if retriable {
                Verdict::Retry {
                    error,
                    bump: false,
                    refresh: true,
                }
            } else {
                Verdict::Fail { error }
            };
        }
    };
    let code = ErrorCode(r.error_code);
    let context = || format!("produce to {} (broker {})", b.tp, r.broker);
    match code {
        ErrorCode(0) => Verdict::Done {
            base_offset: r.base_offset,
            log_append_time: r.log_append_time,
        },
        // The broker already has this batch (its offset is no longer known).
        ErrorCode::DUPLICATE_SEQUENCE_NUMBER if b.base_sequence >= 0 => Verdict::Done {
            base_offset: -1,
            log_append_time: -1,
        },
        ErrorCode::MESSAGE_TOO_LARGE | ErrorCode::RECORD_LIST_TOO_LARGE => Verdict::Fail {
            error: Error::BatchTooLarge {
                context: context(),
                size: b.data.len(),
                code,
            },
        },
        // Resent under the old epoch before a bump (an unanswered attempt may have written
        // it): refused, so it is not in the log; the bump renumbers it with the rest.
        ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER
            if b.base_sequence >= 0 && view.bump_pending && !view.transactional =>
        {
            Verdict::Retry {
                error: Error::broker(context(), code),
                bump: false,
                refresh: false,
            }
        }
        ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER if b.base_sequence >= 0 => {
            // Another batch of this partition still unsettled (this one counts as in flight
            // until it is settled), or an earlier one queued for a retry.
            let earlier_pending =
                view.in_flight > 1 || view.ready_head_order.is_some_and(|o| o < b.order);
            let expected = next_seq(view.acked_through, 1);
            if earlier_pending && seq_after(b.base_sequence, expected) {
                // An earlier batch is being retried; this one follows it.
                Verdict::Retry {
                    error: Error::broker(context(), code),
                    bump: false,
                    refresh: false,
                }
            } else {
                // Either the broker expected an earlier sequence than the first one we have
                // not seen acknowledged (records it had acknowledged are gone), or it already
                // holds later records: writing this batch now would reorder them. Never paper
                // over either; the epoch bump that follows lets later batches go on.
                Verdict::Fail {
                    error: Error::broker(
                        format!(
                            "{}: sequence {} is out of order (the broker expected another); records may be missing or out of order",
                            context(),
                            b.base_sequence
                        ),
                        code,
                    ),
                }
            }
        }
        // In a transaction the batch fails (abortable) and the abort re-initializes the
        // producer id (KIP-360): the sender never bumps a transactional epoch by itself.
        ErrorCode::UNKNOWN_PRODUCER_ID if op == Op::TxnProduce => Verdict::Fail {
            error: Error::broker(context(), code),
        },
        ErrorCode::UNKNOWN_PRODUCER_ID if b.base_sequence >= 0 => {
            if r.log_start_offset > view.last_acked_offset {
                // Retention removed everything we wrote, and the producer state with it:
                // nothing was lost, start over under a new epoch.
                Verdict::Retry {
                    error: Error::broker(context(), code),
                    bump: true,
                    refresh: false,
                }
            } else {
                Verdict::Fail {
                    error: Error::broker(
                        format!("{}: the broker lost this producer's state while its records are still in the log; records may be missing", context()),
                        code,
                    ),
                }
            }
        }
        _ => {
            let error = Error::broker(context(), code);
            match error.class_in(op) {
                ErrorClass::Retriable => Verdict::Retry {
                    error,
                    bump: false,
                    refresh: false,
                },
                ErrorClass::RefreshAndRetry => Verdict::Retry {
                    error,
                    bump: false,
                    refresh: true,
                },
                _ => Verdict::Fail { error },
            }
        }
    }
}

/// Whether `error` says the broker does not hold the batch under its sequence (see
/// [`may_have_been_written`]).
pub(crate) fn refused_as_unwritten(error: &Error) -> bool {
    error.code() == Some(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unanswered_or_appended_attempt_may_have_written_the_batch() {
        let broker = |code| Error::broker("produce to t-0", code);
        let cases = [
            (broker(ErrorCode::UNKNOWN_TOPIC_ID), false),
            (broker(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION), false),
            (broker(ErrorCode::NOT_LEADER_OR_FOLLOWER), false),
            (broker(ErrorCode::NOT_ENOUGH_REPLICAS), false),
            (broker(ErrorCode::REQUEST_TIMED_OUT), true),
            (broker(ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND), true),
            (
                Error::ConnectionClosed {
                    broker: "b:9092".into(),
                    reason: "reset".into(),
                },
                true,
            ),
            (
                Error::Timeout {
                    what: "produce".into(),
                    after: std::time::Duration::from_secs(30),
                },
                true,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(may_have_been_written(&e), want, "{e}");
        }
    }

    /// An error a broker's code becomes names that broker.
    #[test]
    fn a_failed_batch_names_the_broker_that_answered() {
        let b = batch(0, -1);
        let out = verdict(
            &PartitionView::default(),
            &b,
            answer(ErrorCode::TOPIC_AUTHORIZATION_FAILED, -1),
        );
        let Verdict::Fail { error } = out else {
            panic!("not a failure: {out:?}");
        };
        let text = error.to_string();
        assert!(text.contains("127.0.0.1:9092"), "{text}");
    }

    fn batch(order: u64, base_sequence: i32) -> ProducerBatch {
        ProducerBatch::for_test(order, base_sequence, 0)
    }

    fn answer(code: ErrorCode, log_start_offset: i64) -> Result<PartitionResult, Error> {
        Ok(PartitionResult {
            error_code: code.0,
            base_offset: if code.0 == 0 { 42 } else { -1 },
            log_append_time: -1,
            log_start_offset,
            broker: "127.0.0.1:9092".into(),
        })
    }

    /// The verdict reduced to what the table compares.
    #[derive(Debug, PartialEq, Eq)]
    enum Want {
        Done(i64),
        Retry { bump: bool, refresh: bool },
        Fail(ErrorClass),
    }

    fn reduce(v: Verdict, op: Op) -> Want {
        match v {
            Verdict::Done { base_offset, .. } => Want::Done(base_offset),
            Verdict::Retry { bump, refresh, .. } => Want::Retry { bump, refresh },
            Verdict::Fail { error } => Want::Fail(error.class_in(op)),
        }
    }

    /// (what, partition snapshot, batch, response, expected verdict).
    type Case = (
        &'static str,
        PartitionView,
        ProducerBatch,
        Result<PartitionResult, Error>,
        Want,
    );

    #[test]
    fn produce_verdicts() {
        use ErrorClass::*;
        let plain = PartitionView::default();
        let txn = PartitionView {
            transactional: true,
            ..plain
        };
        // Batch 5 (sequence 10) out of order while the partition acknowledged through 4.
        let acked = PartitionView {
            in_flight: 1,
            acked_through: 4,
            last_acked_offset: 100,
            ..plain
        };
        let earlier_in_flight = PartitionView {
            in_flight: 2,
            ..acked
        };
        let bumping = PartitionView {
            bump_pending: true,
            ..acked
        };
        let earlier_queued = PartitionView {
            ready_head_order: Some(4),
            ..acked
        };
        let lost = || {
            Err(Error::ConnectionClosed {
                broker: "b:9092".into(),
                reason: "reset".into(),
            })
        };
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("success", plain, batch(0, 0), answer(ErrorCode(0), 0), Want::Done(42)),
            ("duplicate with a sequence: already written", plain, batch(0, 0),
                answer(ErrorCode::DUPLICATE_SEQUENCE_NUMBER, 0), Want::Done(-1)),
            ("duplicate without a sequence", plain, batch(0, -1),
                answer(ErrorCode::DUPLICATE_SEQUENCE_NUMBER, 0), Want::Fail(Fatal)),
            ("message too large", plain, batch(0, 0),
                answer(ErrorCode::MESSAGE_TOO_LARGE, 0), Want::Fail(Fatal)),
            ("out of order, an earlier batch in flight", earlier_in_flight, batch(5, 10),
                answer(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER, 0),
                Want::Retry { bump: false, refresh: false }),
            ("out of order, an earlier batch queued for a retry", earlier_queued, batch(5, 10),
                answer(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER, 0),
                Want::Retry { bump: false, refresh: false }),
            ("out of order, nothing earlier pending", acked, batch(5, 10),
                answer(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER, 0), Want::Fail(Fatal)),
            ("out of order at the expected sequence", earlier_in_flight, batch(5, 5),
                answer(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER, 0), Want::Fail(Fatal)),
            ("out of order, resent before a bump: not in the log, renumbered by the bump",
                bumping, batch(5, 10), answer(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER, 0),
                Want::Retry { bump: false, refresh: false }),
            ("out of order before a bump, transactional (no bump of its own)",
                PartitionView { transactional: true, ..bumping }, batch(5, 10),
                answer(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER, 0), Want::Fail(Abortable)),
            ("unknown producer id, transactional", txn, batch(0, 0),
                answer(ErrorCode::UNKNOWN_PRODUCER_ID, 0), Want::Fail(Abortable)),
            ("unknown producer id, log start past the last ack", acked, batch(5, 10),
                answer(ErrorCode::UNKNOWN_PRODUCER_ID, 101),
                Want::Retry { bump: true, refresh: false }),
            ("unknown producer id, acknowledged records still in the log", acked, batch(5, 10),
                answer(ErrorCode::UNKNOWN_PRODUCER_ID, 100), Want::Fail(Fatal)),
            ("invalid epoch, transactional", txn, batch(0, 0),
                answer(ErrorCode::INVALID_PRODUCER_EPOCH, 0), Want::Fail(Abortable)),
            ("retriable", plain, batch(0, 0), answer(ErrorCode::REQUEST_TIMED_OUT, 0),
                Want::Retry { bump: false, refresh: false }),
            ("refresh and retry", plain, batch(0, 0), answer(ErrorCode::NOT_LEADER_OR_FOLLOWER, 0),
                Want::Retry { bump: false, refresh: true }),
            ("no answer", plain, batch(0, 0), lost(), Want::Retry { bump: false, refresh: true }),
            ("no answer, transactional", txn, batch(0, 0), lost(),
                Want::Retry { bump: false, refresh: true }),
        ];
        for (name, view, b, outcome, want) in cases {
            let op = if view.transactional {
                Op::TxnProduce
            } else {
                Op::General
            };
            assert_eq!(reduce(verdict(&view, &b, outcome), op), want, "{name}");
        }
    }
}
