//! The one retry executor. Every request the client retries (metadata, topic lookups, leader
//! waits, coordinator lookups and calls, admin calls, offset fetches and commits, InitProducerId,
//! EndTxn, joining a group, listing offsets) goes through [`run`], so they agree on what is
//! retried, how long to wait and when to stop:
//!
//! - **What:** the error's [`ErrorClass`] in the caller's [`Op`] (see [`crate::client::classify`]):
//!   `Retriable` and `RefreshAndRetry` are retried, `Abortable` and `Fatal` are returned at once.
//!   A call may also say "not yet" without an error ([`Step::Again`]: a topic still being
//!   created, a leader not elected yet, a join that must be redone), or "again, now"
//!   ([`Step::Now`]: JoinGroup's MEMBER_ID_REQUIRED).
//! - **How long to wait:** exponential backoff from retry.backoff.ms to retry.backoff.max.ms
//!   with jitter; CONCURRENT_TRANSACTIONS starts at 20 ms (the previous transaction's markers
//!   take milliseconds to write), never waiting past the deadline.
//! - **When to stop:** the caller's budget (default.api.timeout.ms unless it says otherwise).
//!   The last attempt starts before the deadline; what comes back then is final.
//! - **Stale views:** before retrying a `RefreshAndRetry` error (or a `Step::Again` that asks
//!   for it) the caller's `on_stale` runs: refresh metadata, or forget a coordinator so that the
//!   next attempt looks it up again ([`crate::client::Cluster::retrying`] wires these).
//!
//! The decision itself is [`decide`], a pure function with a table test; [`run`] only sleeps
//! and calls.
//!
//! Not retry loops, and so not here: the sender's per-batch retry (a batch waits in the
//! accumulator for its backoff, ordered with its partition's other batches), the fetcher's
//! per-partition backoff, and the connection pool's reconnect pacing. They use [`backoff`]
//! for the wait.

use super::error::{Error, ErrorClass, Op, Result};
use crate::protocol::ErrorCode;
use rand::Rng;
use std::future::Future;
use std::time::{Duration, Instant};
use tracing::debug;

/// Exponential backoff with ±20 % jitter: `base * 2^(attempt-1)`, capped at `max`.
///
/// # Examples
/// ```
/// use onceflow::client::backoff;
/// use std::time::Duration;
/// let (base, max) = (Duration::from_millis(100), Duration::from_secs(1));
/// let third = backoff(base, max, 3); // 400 ms ± 20 %
/// assert!(third >= Duration::from_millis(320) && third <= Duration::from_millis(480));
/// ```
pub fn backoff(base: Duration, max: Duration, attempt: u32) -> Duration {
    let jitter = rand::rng().random_range(0.8..1.2);
    exponential_backoff(base, max, attempt).mul_f64(jitter)
}

/// The same without jitter (for decisions that must be deterministic, e.g. under table test):
/// `base * 2^(attempt-1)`, capped at `max`, at least 1 ms.
///
/// # Examples
/// ```
/// use onceflow::client::exponential_backoff;
/// use std::time::Duration;
/// let (base, max) = (Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(exponential_backoff(base, max, 1), Duration::from_millis(100));
/// assert_eq!(exponential_backoff(base, max, 3), Duration::from_millis(400));
/// assert_eq!(exponential_backoff(base, max, 10), max);
/// ```
pub fn exponential_backoff(base: Duration, max: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    exp.min(max).max(Duration::from_millis(1))
}

/// CONCURRENT_TRANSACTIONS clears in milliseconds: its backoff starts here, capped at
/// [`CONCURRENT_TRANSACTIONS_MAX`].
const CONCURRENT_TRANSACTIONS_BASE: Duration = Duration::from_millis(20);
const CONCURRENT_TRANSACTIONS_MAX: Duration = Duration::from_secs(1);

/// How a caller retries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// retry.backoff.ms.
    pub base: Duration,
    /// retry.backoff.max.ms.
    pub max: Duration,
    /// When the caller started (for the timeout message).
    pub start: Instant,
    /// When to stop trying.
    pub deadline: Instant,
    /// What the client is doing, for [`Error::class_in`].
    pub op: Op,
    /// What to return when a retriable error meets the deadline.
    pub at_deadline: AtDeadline,
}

impl Policy {
    /// Backoff from `base` to `max`, for `budget` from now, as `op`, a timeout at the deadline.
    pub(crate) fn new(base: Duration, max: Duration, budget: Duration, op: Op) -> Policy {
        let start = Instant::now();
        Policy {
            base,
            max,
            start,
            deadline: start + budget,
            op,
            at_deadline: AtDeadline::Timeout,
        }
    }

    /// The same, ending at `deadline` instead.
    pub(crate) fn until(mut self, deadline: Instant) -> Policy {
        self.deadline = deadline;
        self
    }

    /// Return the last error itself at the deadline.
    pub(crate) fn last_error_at_deadline(mut self) -> Policy {
        self.at_deadline = AtDeadline::LastError;
        self
    }
}

/// What a retriable error at the deadline becomes. (A [`Step::Again`] at the deadline is
/// always [`Error::Timeout`]: there is no error to return.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtDeadline {
    /// The last error itself (callers that match on broker codes).
    LastError,
    /// [`Error::Timeout`] naming what was tried, the budget and the last error.
    Timeout,
}

/// What one attempt produced, besides an error.
#[derive(Debug)]
pub(crate) enum Step<T> {
    /// Done.
    Done(T),
    /// Not yet (no error): try again after a backoff; `refresh` runs `on_stale` first. `why`
    /// goes into the timeout error if the deadline comes first.
    Again {
        /// What is not ready, e.g. "the leader of rides-0 is not known yet".
        why: String,
        /// Refresh the stale view before the next attempt.
        refresh: bool,
    },
    /// Try again at once (the answer told us how to redo the request).
    Now,
}

/// Where an attempt stands, passed to the call. A call that answers [`Step::Again`] always
/// gets a last attempt with `last` set before the deadline error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// 1 for the first attempt.
    pub number: u32,
    /// The deadline has passed: whatever this attempt returns is final, so a call with its
    /// own notion of "not found yet" answers definitively now.
    pub last: bool,
}

/// A failed attempt, as [`decide`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// An error of this class (and broker code, if any).
    Error(ErrorClass, Option<ErrorCode>),
    /// [`Step::Again`].
    NotYet {
        /// Whether it asked for a refresh.
        refresh: bool,
    },
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Wait (before jitter), refresh if asked, and try again.
    Retry {
        /// The backoff before jitter, never past the deadline.
        wait: Duration,
        /// Run `on_stale` first.
        refresh: bool,
    },
    /// Return the error: retrying cannot help.
    GiveUp,
    /// A retriable failure, but the deadline has passed.
    OutOfTime,
}

/// The retry decision: a pure function of the failure, the attempt number, the time left and
/// the backoff settings.
pub(crate) fn decide(
    failure: Failure,
    attempt: u32,
    left: Duration,
    base: Duration,
    max: Duration,
) -> Decision {
    let (refresh, code) = match failure {
        Failure::Error(ErrorClass::Retriable, code) => (false, code),
        Failure::Error(ErrorClass::RefreshAndRetry, code) => (true, code),
        Failure::Error(_, _) => return Decision::GiveUp,
        Failure::NotYet { refresh } => (refresh, None),
    };
    if left.is_zero() {
        return Decision::OutOfTime;
    }
    let wait = if code == Some(ErrorCode::CONCURRENT_TRANSACTIONS) {
        exponential_backoff(
            CONCURRENT_TRANSACTIONS_BASE,
            CONCURRENT_TRANSACTIONS_MAX,
            attempt,
        )
    } else {
        exponential_backoff(base, max, attempt)
    };
    Decision::Retry {
        wait: wait.min(left),
        refresh,
    }
}

/// An error [`run`] can retry: the Kafka client's [`Error`], and the schema registry's
/// errors (an HTTP service, retried by the same rules and the same budget).
pub(crate) trait Retried: Sized + std::fmt::Display {
    /// What retrying can do about it, in `op`.
    fn class_in(&self, op: Op) -> ErrorClass;
    /// The broker's code, if it is one (CONCURRENT_TRANSACTIONS backs off shorter).
    fn code(&self) -> Option<ErrorCode>;
    /// The timeout error: `what` was tried for `after`.
    fn timeout(what: String, after: Duration) -> Self;
}

impl Retried for Error {
    fn class_in(&self, op: Op) -> ErrorClass {
        Error::class_in(self, op)
    }
    fn code(&self) -> Option<ErrorCode> {
        Error::code(self)
    }
    fn timeout(what: String, after: Duration) -> Error {
        Error::Timeout { what, after }
    }
}

/// Calls `call` until it is done, fails with an error retrying cannot help, or the policy's
/// deadline passes (see the module docs). The first attempt is always made.
///
/// # Errors
/// The first abortable or fatal error; at the deadline the last error or [`Error::Timeout`]
/// (per [`Policy::at_deadline`]).
pub(crate) async fn run<T, E, C, CF, S, SF>(
    what: &str,
    policy: Policy,
    mut on_stale: S,
    mut call: C,
) -> Result<T, E>
where
    E: Retried,
    C: FnMut(Attempt) -> CF,
    CF: Future<Output = Result<Step<T>, E>>,
    S: FnMut() -> SF,
    SF: Future<Output = ()>,
{
    let mut number = 0u32;
    let mut one_more = false;
    loop {
        number += 1;
        let attempt = Attempt {
            number,
            last: one_more || Instant::now() >= policy.deadline,
        };
        let (failure, error) = match call(attempt).await {
            Ok(Step::Done(v)) => return Ok(v),
            Ok(Step::Now) => continue,
            Ok(Step::Again { why, refresh }) => (Failure::NotYet { refresh }, Err(why)),
            Err(e) => (Failure::Error(e.class_in(policy.op), e.code()), Ok(e)),
        };
        let left = policy.deadline.saturating_duration_since(Instant::now());
        match decide(failure, number, left, policy.base, policy.max) {
            Decision::Retry { wait, refresh } => {
                let wait = jitter(wait).min(left);
                match &error {
                    Ok(e) => debug!(op = what, attempt = number, error = %e, ?wait, "retrying"),
                    Err(why) => {
                        debug!(op = what, attempt = number, why, ?wait, "not yet; retrying")
                    }
                }
                tokio::time::sleep(wait).await;
                if refresh {
                    on_stale().await;
                }
            }
            // `decide` never gives up on a Step::Again; were it to, say why.
            Decision::GiveUp => {
                return Err(error.unwrap_or_else(|why| {
                    E::timeout(
                        format!("{what}: {why}"),
                        policy.deadline.saturating_duration_since(policy.start),
                    )
                }))
            }
            // "Not yet" when the deadline passed during the attempt: the call did not know that
            // answer was its last, so it gets one more, told so, to answer definitively (e.g.
            // "the broker does not create topics" rather than a bare timeout).
            Decision::OutOfTime if error.is_err() && !attempt.last => one_more = true,
            Decision::OutOfTime => {
                let after = policy.deadline.saturating_duration_since(policy.start);
                return Err(match (error, policy.at_deadline) {
                    (Ok(e), AtDeadline::LastError) => e,
                    (Ok(e), AtDeadline::Timeout) => {
                        E::timeout(format!("{what} (last error: {e})"), after)
                    }
                    (Err(why), _) => E::timeout(format!("{what}: {why}"), after),
                });
            }
        }
    }
}

fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::rng().random_range(0.8..1.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn retry_decisions() {
        use ErrorClass as C;
        let base = MS(100);
        let max = MS(1000);
        let ct = Some(ErrorCode::CONCURRENT_TRANSACTIONS);
        let nl = Some(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        #[rustfmt::skip]
        let table: &[(Failure, u32, Duration, Decision)] = &[
            // failure                                   attempt  left       decision
            (Failure::Error(C::Retriable, None),         1, MS(60_000), Decision::Retry { wait: MS(100), refresh: false }),
            (Failure::Error(C::Retriable, None),         2, MS(60_000), Decision::Retry { wait: MS(200), refresh: false }),
            (Failure::Error(C::Retriable, None),         4, MS(60_000), Decision::Retry { wait: MS(800), refresh: false }),
            (Failure::Error(C::Retriable, None),         9, MS(60_000), Decision::Retry { wait: MS(1000), refresh: false }),
            (Failure::Error(C::Retriable, None),        99, MS(60_000), Decision::Retry { wait: MS(1000), refresh: false }),
            (Failure::Error(C::RefreshAndRetry, nl),     1, MS(60_000), Decision::Retry { wait: MS(100), refresh: true }),
            // CONCURRENT_TRANSACTIONS clears in milliseconds: start short.
            (Failure::Error(C::Retriable, ct),           1, MS(60_000), Decision::Retry { wait: MS(20), refresh: false }),
            (Failure::Error(C::Retriable, ct),           3, MS(60_000), Decision::Retry { wait: MS(80), refresh: false }),
            (Failure::Error(C::Retriable, ct),          20, MS(60_000), Decision::Retry { wait: MS(1000), refresh: false }),
            // Never wait past the deadline.
            (Failure::Error(C::Retriable, None),         4, MS(300),    Decision::Retry { wait: MS(300), refresh: false }),
            (Failure::Error(C::Retriable, None),         1, MS(0),      Decision::OutOfTime),
            (Failure::Error(C::RefreshAndRetry, None),   1, MS(0),      Decision::OutOfTime),
            // Retrying cannot help, whatever the time left.
            (Failure::Error(C::Abortable, None),         1, MS(60_000), Decision::GiveUp),
            (Failure::Error(C::Fatal, None),             1, MS(60_000), Decision::GiveUp),
            (Failure::Error(C::Fatal, ct),               1, MS(0),      Decision::GiveUp),
            // "Not yet" is retried like a retriable error, refreshing when asked.
            (Failure::NotYet { refresh: false },         1, MS(60_000), Decision::Retry { wait: MS(100), refresh: false }),
            (Failure::NotYet { refresh: true },          2, MS(60_000), Decision::Retry { wait: MS(200), refresh: true }),
            (Failure::NotYet { refresh: true },          2, MS(0),      Decision::OutOfTime),
        ];
        for (i, (failure, attempt, left, want)) in table.iter().enumerate() {
            assert_eq!(
                decide(*failure, *attempt, *left, base, max),
                *want,
                "row {i}: {failure:?} attempt {attempt} left {left:?}"
            );
        }
    }

    #[test]
    fn backoff_grows_and_caps_with_jitter() {
        let (b, m) = (MS(100), MS(1000));
        assert!(backoff(b, m, 1) <= MS(120));
        assert!(backoff(b, m, 3) >= MS(320));
        assert!(backoff(b, m, 30) <= MS(1200));
    }

    fn policy(budget: Duration, at_deadline: AtDeadline) -> Policy {
        let p = Policy::new(MS(1), MS(5), budget, Op::General);
        match at_deadline {
            AtDeadline::LastError => p.last_error_at_deadline(),
            AtDeadline::Timeout => p,
        }
    }

    fn retriable() -> Error {
        Error::broker("x", ErrorCode::REQUEST_TIMED_OUT)
    }

    #[tokio::test]
    async fn retries_until_done_refreshing_on_stale() {
        let mut calls = 0;
        let mut refreshes = 0;
        let stale = Error::broker("x", ErrorCode::NOT_LEADER_OR_FOLLOWER);
        let v = run(
            "test",
            policy(Duration::from_secs(60), AtDeadline::LastError),
            || {
                refreshes += 1;
                async {}
            },
            |a| {
                calls += 1;
                let out = match a.number {
                    1 => Err(retriable()),
                    2 => Err(stale.clone()),
                    3 => Ok(Step::Now),
                    4 => Ok(Step::Again {
                        why: "not yet".into(),
                        refresh: true,
                    }),
                    _ => Ok(Step::Done(a.number)),
                };
                async move { out }
            },
        )
        .await;
        assert_eq!(v.ok(), Some(5));
        assert_eq!(calls, 5);
        assert_eq!(
            refreshes, 2,
            "one for the stale error, one for Again{{refresh}}"
        );
    }

    #[tokio::test]
    async fn fatal_errors_are_returned_at_once() {
        let mut calls = 0;
        let e = run::<(), Error, _, _, _, _>(
            "test",
            policy(Duration::from_secs(60), AtDeadline::LastError),
            || async {},
            |_| {
                calls += 1;
                async { Err(Error::broker("x", ErrorCode::TOPIC_AUTHORIZATION_FAILED)) }
            },
        )
        .await;
        assert_eq!(calls, 1);
        assert_eq!(
            e.err().and_then(|e| e.code()),
            Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED)
        );
    }

    #[tokio::test]
    async fn the_op_decides_the_class() {
        // INVALID_PRODUCER_EPOCH is abortable on a transactional produce, fatal elsewhere:
        // either way not retried.
        let mut calls = 0;
        let mut p = policy(Duration::from_secs(60), AtDeadline::LastError);
        p.op = Op::TxnCoordinator;
        let _ = run::<(), Error, _, _, _, _>(
            "test",
            p,
            || async {},
            |_| {
                calls += 1;
                async { Err(Error::broker("x", ErrorCode::INVALID_PRODUCER_EPOCH)) }
            },
        )
        .await;
        assert_eq!(calls, 1);
    }

    #[tokio::test]
    async fn at_the_deadline_the_last_attempt_is_final_and_named() {
        let mut last_seen = false;
        let e = run::<(), Error, _, _, _, _>(
            "finding the leader of rides-0",
            policy(MS(30), AtDeadline::Timeout),
            || async {},
            |a| {
                last_seen |= a.last;
                async { Err(retriable()) }
            },
        )
        .await;
        assert!(last_seen, "the call is told when its attempt is the last");
        let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.contains("finding the leader of rides-0") && msg.contains("REQUEST_TIMED_OUT"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn at_the_deadline_last_error_policy_returns_the_error_itself() {
        let e = run::<(), Error, _, _, _, _>(
            "test",
            policy(MS(20), AtDeadline::LastError),
            || async {},
            |_| async { Err(retriable()) },
        )
        .await;
        assert_eq!(
            e.err().and_then(|e| e.code()),
            Some(ErrorCode::REQUEST_TIMED_OUT)
        );
    }

    #[tokio::test]
    async fn not_yet_at_the_deadline_is_a_timeout_naming_why() {
        let e = run::<(), Error, _, _, _, _>(
            "joining group 'g'",
            policy(MS(20), AtDeadline::Timeout),
            || async {},
            |_| async {
                Ok(Step::Again {
                    why: "the coordinator is loading".into(),
                    refresh: false,
                })
            },
        )
        .await;
        let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("the coordinator is loading"), "{msg}");
    }
}
