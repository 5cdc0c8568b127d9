//! The sink's decisions as pure functions, table-tested: when a commit must be done by, what
//! a resume outcome means for the job, whether to retry a failed commit, and which
//! transactional ids under the prefix are lingering leftovers.

use crate::client::transactions::ResumeOutcome;
use crate::client::ErrorClass;
use std::time::Duration;

/// The first wait between two commit attempts; it doubles up to [`RETRY_MAX`].
pub(crate) const RETRY_BASE: Duration = Duration::from_millis(100);
/// The longest wait between two commit attempts.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(5);

/// The last moment (ms since the epoch) a commit may still be attempted: the transaction's
/// start + transaction.timeout.ms − margin. After it the coordinator may abort the transaction
/// at any moment (its sweep runs every 10 s), so a commit sent later races that abort.
///
/// `start_ms` is the coordinator's start time from the committable (-1 when unknown); then
/// `fallback_start_ms` is used: when this process began the transaction (which is later than
/// the coordinator's start, so the deadline errs late by the time to the first send) or, for a
/// restored committable of unknown start, now (the transaction cannot have been open longer
/// than transaction.timeout.ms when we learn about it; the coordinator's answer decides).
pub(crate) fn commit_deadline_ms(
    start_ms: i64,
    fallback_start_ms: i64,
    transaction_timeout: Duration,
    margin: Duration,
) -> i64 {
    let start = if start_ms >= 0 {
        start_ms
    } else {
        fallback_start_ms
    };
    let budget = transaction_timeout.saturating_sub(margin);
    start.saturating_add(i64::try_from(budget.as_millis()).unwrap_or(i64::MAX))
}

/// What a resume outcome means for a committable the checkpoint says must be committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// Its records are visible exactly once (committed now, earlier, or there were none).
    Committed,
    /// The coordinator aborted it (timeout) or a fencing producer did: its records are lost.
    Lost(String),
    /// A later transaction of the id exists: someone else writes with our ids (we never
    /// reuse an id before its committable is resolved).
    Clash(String),
}

/// See [`Resolution`].
pub(crate) fn resolution(outcome: &ResumeOutcome) -> Resolution {
    match outcome {
        ResumeOutcome::Completed
        | ResumeOutcome::AlreadyCommitted
        | ResumeOutcome::NothingToCommit => Resolution::Committed,
        ResumeOutcome::NotCommitted { reason } => Resolution::Lost(reason.clone()),
        ResumeOutcome::Superseded { reason } => Resolution::Clash(reason.clone()),
    }
}

/// Why a transaction this sink still held was aborted, judged by time alone: the coordinator
/// aborts for transaction.timeout.ms only once start + timeout has passed, so an abort found
/// earlier (with `skew` for the two clocks) was done by another producer's InitProducerId on
/// our id: another job with our prefix (or a newer incarnation of this one). Later, a timeout
/// and a fencing look the same to the coordinator's description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AbortCause {
    /// Too early for a timeout: someone fenced our id.
    Fenced,
    /// The timeout had passed: most likely the coordinator's timeout (or a fencing).
    TimedOutOrFenced,
}

/// See [`AbortCause`]. `start_ms` is the transaction's start (coordinator's or our own).
pub(crate) fn abort_cause(
    start_ms: i64,
    now_ms: i64,
    transaction_timeout: Duration,
    skew: Duration,
) -> AbortCause {
    let earliest_timeout = commit_deadline_ms(start_ms, start_ms, transaction_timeout, skew);
    if now_ms < earliest_timeout {
        AbortCause::Fenced
    } else {
        AbortCause::TimedOutOrFenced
    }
}

/// What to do after a commit attempt failed with an error (not with an outcome).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Wait this long, then ask again.
    RetryAfter(Duration),
    /// The deadline has passed: the coordinator may abort the transaction any moment.
    DeadlinePassed,
    /// Retrying cannot help (authorization, a bug, ...).
    Fatal,
}

/// After failed attempt number `attempt` (1 for the first) with an error of class `class`:
/// retriable errors are retried with a doubling backoff until the deadline, never given up
/// after a number of tries; the last wait is cut to end at the deadline, so one more attempt
/// happens just before it.
pub(crate) fn after_failure(
    class: ErrorClass,
    attempt: u32,
    now_ms: i64,
    deadline_ms: i64,
) -> AfterFailure {
    match class {
        ErrorClass::Retriable | ErrorClass::RefreshAndRetry => {}
        _ => return AfterFailure::Fatal,
    }
    if now_ms >= deadline_ms {
        return AfterFailure::DeadlinePassed;
    }
    let left = Duration::from_millis(u64::try_from(deadline_ms - now_ms).unwrap_or(0));
    let exp = crate::client::exponential_backoff(RETRY_BASE, RETRY_MAX, attempt);
    AfterFailure::RetryAfter(exp.min(left))
}

/// The slot number of `id` if it is a transactional id of the sink task whose pool prefix is
/// `pool_prefix` (`<job prefix>-<task>`): `<pool_prefix>-<digits>`. Requiring digits after
/// the prefix keeps another task's ids out (`job-1-0-3` is not task 1 of job `job`: after
/// `job-1-` comes `0-3`).
pub(crate) fn slot_of(id: &str, pool_prefix: &str) -> Option<u64> {
    let rest = id.strip_prefix(pool_prefix)?.strip_prefix('-')?;
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

/// Whether an Ongoing transaction of `id` is a leftover of an earlier incarnation of this sink
/// task that the new pool's init did not reach: an id of the task beyond the pool's size
/// (an earlier run with a larger pool).
pub(crate) fn is_lingering(id: &str, pool_prefix: &str, pool_size: usize) -> bool {
    slot_of(id, pool_prefix).is_some_and(|slot| slot >= pool_size as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_deadline_is_start_plus_timeout_minus_margin() {
        // (start, fallback, timeout, margin) -> deadline
        let table: [(i64, i64, Duration, Duration, i64); 4] = [
            (1_000, 5_000, 60 * S, 5 * S, 56_000),
            (-1, 5_000, 60 * S, 5 * S, 60_000),
            (1_000, 5_000, 2 * S, 5 * S, 1_000), // a margin above the timeout: no time
            (0, 0, Duration::ZERO, Duration::ZERO, 0),
        ];
        for (start, fallback, timeout, margin, want) in table {
            assert_eq!(
                commit_deadline_ms(start, fallback, timeout, margin),
                want,
                "{start} {fallback} {timeout:?} {margin:?}"
            );
        }
    }

    #[test]
    fn an_abort_before_the_timeout_could_fire_is_a_fencing() {
        use AbortCause::*;
        let table = [
            // (start, now, timeout, skew) -> cause
            (0, 1_000, 60 * S, 5 * S, Fenced),
            (0, 54_999, 60 * S, 5 * S, Fenced),
            (0, 55_000, 60 * S, 5 * S, TimedOutOrFenced),
            (0, 120_000, 60 * S, 5 * S, TimedOutOrFenced),
            (0, 0, 2 * S, 5 * S, TimedOutOrFenced), // skew above the timeout: never sure
        ];
        for (start, now, timeout, skew, want) in table {
            assert_eq!(
                abort_cause(start, now, timeout, skew),
                want,
                "{start} {now}"
            );
        }
    }

    #[test]
    fn outcomes_map_to_resolutions() {
        let table = [
            (ResumeOutcome::Completed, Resolution::Committed),
            (ResumeOutcome::AlreadyCommitted, Resolution::Committed),
            (ResumeOutcome::NothingToCommit, Resolution::Committed),
            (
                ResumeOutcome::NotCommitted {
                    reason: "timed out".into(),
                },
                Resolution::Lost("timed out".into()),
            ),
            (
                ResumeOutcome::Superseded {
                    reason: "later".into(),
                },
                Resolution::Clash("later".into()),
            ),
        ];
        for (outcome, want) in table {
            assert_eq!(resolution(&outcome), want, "{outcome:?}");
        }
    }

    #[test]
    fn failures_are_retried_until_the_deadline_never_after_a_count() {
        use AfterFailure::*;
        let ms = Duration::from_millis;
        let table = [
            // (class, attempt, now, deadline) -> decision
            (ErrorClass::Retriable, 1, 0, 10_000, RetryAfter(ms(100))),
            (
                ErrorClass::RefreshAndRetry,
                2,
                0,
                10_000,
                RetryAfter(ms(200)),
            ),
            (ErrorClass::Retriable, 7, 0, 10_000, RetryAfter(ms(5_000))),
            // far past any try count, still before the deadline: retried
            (
                ErrorClass::Retriable,
                10_000,
                0,
                10_000,
                RetryAfter(ms(5_000)),
            ),
            // the last wait ends at the deadline
            (ErrorClass::Retriable, 7, 9_950, 10_000, RetryAfter(ms(50))),
            (ErrorClass::Retriable, 1, 10_000, 10_000, DeadlinePassed),
            (
                ErrorClass::RefreshAndRetry,
                1,
                20_000,
                10_000,
                DeadlinePassed,
            ),
            (ErrorClass::Fatal, 1, 0, 10_000, Fatal),
            (ErrorClass::Abortable, 1, 0, 10_000, Fatal),
        ];
        for (class, attempt, now, deadline, want) in table {
            assert_eq!(
                after_failure(class, attempt, now, deadline),
                want,
                "{class:?} attempt {attempt} at {now} (deadline {deadline})"
            );
        }
    }

    #[test]
    fn only_ids_of_this_task_beyond_the_pool_are_lingering() {
        let table = [
            // (id, pool prefix, pool size) -> lingering
            ("job-1-5", "job-1", 3, true),
            ("job-1-3", "job-1", 3, true),
            ("job-1-2", "job-1", 3, false), // in the pool: its init aborted it
            ("job-1-0", "job-1", 3, false),
            ("job-10-5", "job-1", 3, false),  // task 10
            ("job-1-0-5", "job-1", 3, false), // job "job-1", task 0
            ("job-1-", "job-1", 3, false),
            ("job-1-x", "job-1", 3, false),
            ("job-1", "job-1", 3, false),
            ("other-1-5", "job-1", 3, false),
            ("job-1-99999999999999999999999", "job-1", 3, false), // not a slot number
        ];
        for (id, prefix, size, want) in table {
            assert_eq!(
                is_lingering(id, prefix, size),
                want,
                "{id} / {prefix} / {size}"
            );
        }
    }
}
