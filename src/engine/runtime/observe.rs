//! What the runtime tells the [`Metrics`] besides its one-line event updates: the source lag
//! and how a failed run counts (fencing, lost transaction).

use crate::client::Consumer;
use crate::engine::checkpoint::{JobFailure, Positions};
use crate::engine::metrics::{Metrics, SinkReport};
use crate::engine::sink::{KafkaWriter, SinkError};

use super::RuntimeError;

/// How a run's fatal error counts in the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// Another producer took one of the job's transactional ids.
    Fencing,
    /// A durable checkpoint's transaction was aborted before its commit.
    Abort,
    /// Neither.
    Other,
}

/// Pure: which counter a run's error moves.
pub(crate) fn counted(e: &RuntimeError) -> Counted {
    let fenced = |c: &crate::client::Error| matches!(c, crate::client::Error::Fenced(_));
    match e {
        RuntimeError::Sink(SinkError::PrefixClash { .. })
        | RuntimeError::Checkpoint(JobFailure::Clash { .. }) => Counted::Fencing,
        RuntimeError::Sink(SinkError::Client { source, .. }) if fenced(source) => Counted::Fencing,
        RuntimeError::Client { source, .. } if fenced(source) => Counted::Fencing,
        RuntimeError::Sink(SinkError::DataLoss { .. })
        | RuntimeError::Checkpoint(JobFailure::DataLoss { .. }) => Counted::Abort,
        _ => Counted::Other,
    }
}

/// Counts a run's fatal error.
pub(crate) fn run_failed(metrics: &Metrics, e: &RuntimeError) {
    match counted(e) {
        Counted::Fencing => metrics.fenced(),
        Counted::Abort => metrics.aborted(),
        Counted::Other => {}
    }
}

/// Pure: a partition's lag, the records between `position` and `end` (never negative: the
/// end a fetch reported may be older than a position moved since).
pub(crate) fn lag(end: Option<i64>, position: Option<i64>) -> Option<i64> {
    Some(end?.saturating_sub(position?).max(0))
}

/// Per assigned partition with a known end and position: its lag, from the source's fetch
/// position (as Kafka consumers report lag: at most one poll ahead of the records processed,
/// and past transaction markers, which a processed record's offset + 1 is not), else the
/// job's position (restored, before the first fetch).
pub(crate) fn source_lag(consumer: &Consumer, positions: &Positions) -> Vec<((String, i32), i64)> {
    consumer
        .assignment()
        .into_iter()
        .filter_map(|tp| {
            let position = consumer.position(&tp).or(positions.get(&tp).copied());
            let lag = lag(consumer.end_offset(&tp), position)?;
            Some(((tp.topic, tp.partition), lag))
        })
        .collect()
}

/// The persister's answer: its size counted, or a failed checkpoint (the error as the
/// coordinator's `PersistFailed` takes it).
pub(crate) fn persisted(
    metrics: &Metrics,
    written: Result<u64, crate::engine::state::StateError>,
) -> Result<(), String> {
    match written {
        Ok(bytes) => {
            metrics.checkpoint_persisted(bytes);
            Ok(())
        }
        Err(e) => {
            metrics.checkpoint_failed();
            Err(e.to_string())
        }
    }
}

/// After a poll: the source lag, and the sink's counters and oldest open transaction.
pub(crate) fn polled(
    metrics: &Metrics,
    consumer: &Consumer,
    positions: &Positions,
    sink: Option<&KafkaWriter>,
) {
    metrics.set_source_lag(source_lag(consumer, positions));
    self::sink(metrics, sink);
}

/// Reports the sink task's counters and its oldest open transaction's start.
pub(crate) fn sink(metrics: &Metrics, sink: Option<&KafkaWriter>) {
    if let Some(s) = sink {
        let m = s.metrics();
        let report = SinkReport {
            commits: m.commits,
            aborts: m.lingering_aborted,
            oldest_open_ms: s.oldest_open_transaction_start_ms(),
        };
        metrics.sink(s.config().task, report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_end_minus_the_position_and_never_negative() {
        let cases = [
            (Some(100), Some(40), Some(60)),
            (Some(100), Some(100), Some(0)),
            (Some(100), Some(120), Some(0)),
            (None, Some(5), None),
            (Some(5), None, None),
        ];
        for (end, position, want) in cases {
            assert_eq!(lag(end, position), want, "{end:?} {position:?}");
        }
    }

    #[test]
    fn fencing_and_lost_transactions_count_and_nothing_else_does() {
        let fenced = crate::client::Error::Fenced("epoch bumped".into());
        let cases = [
            (
                RuntimeError::Sink(SinkError::PrefixClash {
                    prefix: "p".into(),
                    detail: "d".into(),
                }),
                Counted::Fencing,
            ),
            (
                RuntimeError::Sink(SinkError::client("sending", fenced.clone())),
                Counted::Fencing,
            ),
            (
                RuntimeError::client("polling the source", fenced),
                Counted::Fencing,
            ),
            (
                RuntimeError::Sink(SinkError::DataLoss {
                    checkpoint: 3,
                    transactional_id: "p-0-1".into(),
                    reason: "aborted".into(),
                    transaction_timeout_ms: 1,
                    interval_ms: 1,
                    checkpoint_timeout_ms: 1,
                }),
                Counted::Abort,
            ),
            (
                RuntimeError::Sink(SinkError::client(
                    "sending",
                    crate::client::Error::Closed("producer"),
                )),
                Counted::Other,
            ),
            (RuntimeError::Internal("bug".into()), Counted::Other),
        ];
        for (e, want) in cases {
            assert_eq!(counted(&e), want, "{e}");
        }
    }
}
