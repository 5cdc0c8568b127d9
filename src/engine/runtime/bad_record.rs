//! An input record the job cannot process (the source chain's [`Emitted::Bad`]): what the
//! job's `errors.tolerance` makes of it, the same in both runtime modes. The decision is
//! [`verdict`], a pure function; [`settle`] logs and counts it.
//!
//! [`Emitted::Bad`]: super::topology::Emitted::Bad

use bytes::Bytes;

use super::error::RuntimeError;
use super::topology::{InputRecord, Output};
use crate::client::Header;
use crate::engine::metrics::Metrics;
use crate::engine::settings::ErrorTolerance;

/// The headers a dead-letter record carries: where the record came from and why it is there.
pub(crate) const HEADER_TOPIC: &str = "onceflow.error.topic";
/// The input partition.
pub(crate) const HEADER_PARTITION: &str = "onceflow.error.partition";
/// The input offset (the line number, for a file source).
pub(crate) const HEADER_OFFSET: &str = "onceflow.error.offset";
/// Why the job could not process it.
pub(crate) const HEADER_REASON: &str = "onceflow.error.reason";

/// What happens to one bad record.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// The job stops with this error (`none`).
    Fail(RuntimeError),
    /// Left out (`skip`).
    Skip,
    /// Written to the dead-letter topic (`dead-letter`): the record as it came, with headers.
    DeadLetter(Output),
}

/// Where a record came from, for messages: `rides-3 offset 17`.
pub(crate) fn coordinates(input: &InputRecord<'_>) -> String {
    format!(
        "{}-{} offset {}",
        input.topic, input.partition, input.offset
    )
}

/// The verdict on `input`, which the job cannot process for `reason`.
pub(crate) fn verdict(
    tolerance: &ErrorTolerance,
    input: &InputRecord<'_>,
    reason: &str,
) -> Verdict {
    match tolerance {
        ErrorTolerance::Skip => Verdict::Skip,
        ErrorTolerance::DeadLetter { topic } => {
            let header = |k: &str, v: String| Header {
                key: Bytes::copy_from_slice(k.as_bytes()),
                value: Some(Bytes::from(v)),
            };
            Verdict::DeadLetter(Output {
                topic: Some(topic.clone()),
                key: input.key.map(|k| k.to_vec()),
                value: input.value.cloned().unwrap_or_default(),
                headers: vec![
                    header(HEADER_TOPIC, input.topic.to_owned()),
                    header(HEADER_PARTITION, input.partition.to_string()),
                    header(HEADER_OFFSET, input.offset.to_string()),
                    header(HEADER_REASON, reason.to_owned()),
                ],
            })
        }
        // ErrorTolerance is non-exhaustive; none and anything unknown stop the job.
        _ => Verdict::Fail(RuntimeError::BadRecord(format!(
            "input record {}: {reason}; the job stops (errors.tolerance = \"none\"): fix the input or the job and restart, or set errors.tolerance = \"skip\" or \"dead-letter\" in [settings]",
            coordinates(input)
        ))),
    }
}

/// Applies the verdict's side effects: a skipped record is counted and logged, a dead-letter
/// record counted; returns the dead-letter output to write with the checkpoint's output.
///
/// # Errors
/// [`RuntimeError::BadRecord`] with `errors.tolerance = "none"`.
pub(crate) fn settle(
    tolerance: &ErrorTolerance,
    input: &InputRecord<'_>,
    reason: &str,
    metrics: &Metrics,
) -> Result<Option<Output>, RuntimeError> {
    match verdict(tolerance, input, reason) {
        Verdict::Fail(e) => Err(e),
        Verdict::Skip => {
            metrics.record_skipped();
            tracing::warn!(record = %coordinates(input), reason, "input record skipped (errors.tolerance = \"skip\")");
            Ok(None)
        }
        Verdict::DeadLetter(out) => {
            metrics.record_dead_lettered();
            tracing::debug!(record = %coordinates(input), reason, "input record to the dead-letter topic");
            Ok(Some(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_table() {
        let (key, value) = (Bytes::from_static(b"k"), Bytes::from_static(b"not json"));
        let input = InputRecord {
            topic: "rides",
            partition: 3,
            offset: 17,
            timestamp: 0,
            key: Some(&key),
            value: Some(&value),
        };
        let reason = "the value is not JSON (expected value at line 1 column 1)";
        match verdict(&ErrorTolerance::None, &input, reason) {
            Verdict::Fail(e) => {
                let m = e.to_string();
                assert!(
                    m.starts_with("input record rides-3 offset 17: the value is not JSON"),
                    "{m}"
                );
                assert!(m.contains("errors.tolerance"), "{m}");
            }
            v => panic!("{v:?}"),
        }
        assert!(matches!(
            verdict(&ErrorTolerance::Skip, &input, reason),
            Verdict::Skip
        ));
        let dlq = ErrorTolerance::DeadLetter {
            topic: "rides-dlq".into(),
        };
        let Verdict::DeadLetter(out) = verdict(&dlq, &input, reason) else {
            panic!("expected a dead-letter record");
        };
        assert_eq!(out.topic.as_deref(), Some("rides-dlq"));
        assert_eq!(out.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(out.value, value, "the record as it came");
        let headers: Vec<(String, String)> = out
            .headers
            .iter()
            .map(|h| {
                let v = h.value.clone().unwrap_or_default();
                (
                    String::from_utf8_lossy(&h.key).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect();
        assert_eq!(
            headers,
            [
                (HEADER_TOPIC.to_owned(), "rides".to_owned()),
                (HEADER_PARTITION.to_owned(), "3".to_owned()),
                (HEADER_OFFSET.to_owned(), "17".to_owned()),
                (HEADER_REASON.to_owned(), reason.to_owned()),
            ]
        );
        // A tombstone goes as one (no value).
        let tombstone = InputRecord {
            value: None,
            ..input
        };
        let Verdict::DeadLetter(out) = verdict(&dlq, &tombstone, "a tombstone") else {
            panic!("expected a dead-letter record");
        };
        assert!(out.value.is_empty());
    }
}
