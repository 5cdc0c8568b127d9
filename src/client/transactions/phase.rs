//! Where a transactional producer is in its life, as one enum with checked transitions, in
//! the spirit of the Java client's `TransactionManager.State`. The phase carries what belongs
//! to it: an open transaction's protocol version, start time and partitions
//! ([`OpenTxn`]); the error that dooms a transaction (`AbortableError`) or the producer
//! (`FatalError`); whether the broker stopped accepting our epoch, so that the abort must
//! re-initialize the producer id instead of sending EndTxn.
//!
//! ```text
//! Uninitialized ──init──▶ Initializing ──ok──▶ Ready ──begin──▶ InTransaction
//!        ▲                     │                 ▲  ▲                │
//!        └──────failed─────────┘                 │  └──(re-)init     ├─commit─▶ Committing ─┐
//!                                                │                   └─abort──▶ Aborting ───┤
//!                                                └────────────── ended ────────────────────┘
//!   an end that fails: Committing → InTransaction; Aborting → InTransaction, or
//!                      AbortableError when the transaction was doomed
//!   InTransaction / Committing ──a record or request failed──▶ AbortableError ──abort──▶ Aborting
//!   any phase ──fenced, not authorized──▶ FatalError (refuses everything, for good)
//! ```
//!
//! Every public call asks [`next`] first, so a call out of order fails at once with an error
//! that names the phase and says what to call instead, rather than writing records outside any
//! transaction or leaving the sender waiting for a partition that will never be added.

use super::committable::TxnEnd;
use crate::client::error::Error;
use crate::client::metadata::TopicPartition;
use std::collections::HashSet;
use std::time::Instant;

/// What an open transaction carries from `begin_transaction()` to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenTxn {
    /// KIP-890 (transaction.version 2) for this transaction: partitions join implicitly with
    /// the produce, EndTxn bumps the epoch. Fixed when the transaction begins.
    pub tv2: bool,
    /// When the transaction began, to tell a transaction.timeout.ms expiry from fencing.
    pub began: Instant,
    /// Something may have reached the broker in this transaction (a produce or offsets): the
    /// transaction must be ended with EndTxn. Data of the transaction, not a phase: it only
    /// ever goes from false to true while the transaction runs (and back once EndTxn ended it).
    pub started: bool,
    /// Partitions the coordinator has added to the transaction (classic protocol).
    pub added: HashSet<TopicPartition>,
}

impl OpenTxn {
    fn new(tv2: bool, began: Instant) -> Self {
        OpenTxn {
            tv2,
            began,
            started: false,
            added: HashSet::new(),
        }
    }
}

/// A transactional producer's phase.
#[derive(Debug, Clone)]
pub(crate) enum TxnPhase {
    /// `init_transactions()` has not succeeded yet.
    Uninitialized,
    /// InitProducerId is under way.
    Initializing,
    /// Initialized, no transaction open.
    Ready,
    /// Between `begin_transaction()` and the start of commit or abort.
    InTransaction(OpenTxn),
    /// `commit_transaction()` is flushing or waiting for EndTxn.
    Committing(OpenTxn),
    /// `abort_transaction()` is dropping, flushing or waiting for EndTxn (or re-initializing).
    Aborting {
        txn: OpenTxn,
        /// The error that doomed the transaction, until EndTxn ended it: under the classic
        /// protocol the abort then bumps the epoch, since a failed batch may have left a
        /// sequence gap.
        error: Option<Error>,
        /// See [`TxnPhase::AbortableError::reinit`].
        reinit: bool,
    },
    /// The transaction cannot commit (a record or a request failed): sends and commit fail
    /// with `error`, `abort_transaction()` recovers and the producer goes on.
    AbortableError {
        txn: OpenTxn,
        error: Error,
        /// The broker no longer accepts this producer id and epoch for the transaction
        /// (INVALID_PRODUCER_EPOCH or UNKNOWN_PRODUCER_ID on a produce, or the coordinator
        /// aborted it): EndTxn would be refused, so the abort re-initializes with
        /// InitProducerId(current id and epoch) instead (KIP-360, KIP-588).
        reinit: bool,
    },
    /// The producer cannot go on (fenced, not authorized): every call fails with this error.
    FatalError(Error),
}

/// What the application (or the end of a request) asks of the phase.
#[derive(Debug, Clone)]
pub(crate) enum TxnEvent {
    InitStart,
    InitDone,
    InitFailed,
    /// `begin_transaction()`, with the protocol the transaction uses and the time it began.
    Begin {
        tv2: bool,
        now: Instant,
    },
    /// `send`, `send_offsets_to_transaction`, `prepare_commit`: need an open transaction that
    /// is not doomed, and leave the phase as it is.
    Use(&'static str),
    EndStart(TxnEnd),
    /// The end has flushed every record: a commit goes on only if nothing failed meanwhile.
    Flushed,
    /// EndTxn ended the transaction on the coordinator; what is left of the end is local (and,
    /// for an abort, possibly the re-initialization). Nothing of this transaction is on the
    /// broker any more: a retried abort sends no second EndTxn.
    EndTxnDone,
    EndDone,
    EndFailed(Error),
    /// A record or request failed in a way that dooms the transaction. `reinit`: the broker
    /// no longer accepts our epoch (see [`TxnPhase::AbortableError::reinit`]).
    Abortable {
        error: Error,
        reinit: bool,
    },
    /// An error that dooms the producer.
    Fatal(Error),
}

impl TxnPhase {
    /// The phase's name, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            TxnPhase::Uninitialized => "Uninitialized",
            TxnPhase::Initializing => "Initializing",
            TxnPhase::Ready => "Ready",
            TxnPhase::InTransaction(_) => "InTransaction",
            TxnPhase::Committing(_) => "Committing",
            TxnPhase::Aborting { .. } => "Aborting",
            TxnPhase::AbortableError { .. } => "AbortableError",
            TxnPhase::FatalError(_) => "FatalError",
        }
    }

    /// The open transaction, in every phase that has one.
    pub fn open(&self) -> Option<&OpenTxn> {
        match self {
            TxnPhase::InTransaction(t)
            | TxnPhase::Committing(t)
            | TxnPhase::Aborting { txn: t, .. }
            | TxnPhase::AbortableError { txn: t, .. } => Some(t),
            _ => None,
        }
    }

    /// The open transaction's data, to record what reached the broker (not a transition).
    pub fn open_mut(&mut self) -> Option<&mut OpenTxn> {
        match self {
            TxnPhase::InTransaction(t)
            | TxnPhase::Committing(t)
            | TxnPhase::Aborting { txn: t, .. }
            | TxnPhase::AbortableError { txn: t, .. } => Some(t),
            _ => None,
        }
    }

    /// The error that dooms the transaction or the producer, if any: the sender fails what is
    /// still queued with it.
    pub fn doom(&self) -> Option<&Error> {
        match self {
            TxnPhase::AbortableError { error, .. } | TxnPhase::FatalError(error) => Some(error),
            _ => None,
        }
    }
}

/// Moves `phase` by `event`: the new phase, or the unchanged phase and the error that tells the
/// caller what to do instead. A pure function, table-tested; it takes the phase by value so
/// that the open transaction's data moves along without a copy.
///
/// Long on purpose: it is the transition table itself, one arm per (phase, event) pair that
/// is allowed, then one per refusal with its message. Split up, the table could no longer be
/// read (or checked for a missing pair) in one place.
pub(crate) fn next(phase: TxnPhase, event: TxnEvent) -> (TxnPhase, Result<(), Error>) {
    use TxnEvent as E;
    use TxnPhase as P;
    let usage = |msg: String| Err(Error::Usage(msg));
    match (phase, event) {
        // Nothing brings a fenced producer back; requests still under way when it failed
        // change nothing.
        (
            P::FatalError(e),
            E::InitStart | E::Begin { .. } | E::Use(_) | E::EndStart(_) | E::Flushed,
        ) => {
            let err = e.clone();
            (P::FatalError(e), Err(err))
        }
        (p @ P::FatalError(_), _) => (p, Ok(())),
        (_, E::Fatal(e)) => (P::FatalError(e), Ok(())),

        (P::Uninitialized | P::Ready, E::InitStart) => (P::Initializing, Ok(())),
        (P::Initializing, E::InitDone) => (P::Ready, Ok(())),
        (P::Initializing, E::InitFailed) => (P::Uninitialized, Ok(())),
        (P::Ready, E::Begin { tv2, now }) => (P::InTransaction(OpenTxn::new(tv2, now)), Ok(())),
        (p @ P::InTransaction(_), E::Use(_)) => (p, Ok(())),
        (P::InTransaction(t), E::EndStart(TxnEnd::Commit)) => (P::Committing(t), Ok(())),
        (P::InTransaction(t), E::EndStart(TxnEnd::Abort)) => (
            P::Aborting {
                txn: t,
                error: None,
                reinit: false,
            },
            Ok(()),
        ),
        (P::AbortableError { txn, error, reinit }, E::EndStart(TxnEnd::Abort)) => (
            P::Aborting {
                txn,
                error: Some(error),
                reinit,
            },
            Ok(()),
        ),
        (p @ (P::Committing(_) | P::Aborting { .. }), E::Flushed) => (p, Ok(())),
        (P::Committing(mut t), E::EndTxnDone) => {
            t.started = false;
            t.added.clear();
            (P::Committing(t), Ok(()))
        }
        (P::Aborting { mut txn, reinit, .. }, E::EndTxnDone) => {
            txn.started = false;
            txn.added.clear();
            (
                P::Aborting {
                    txn,
                    error: None,
                    reinit,
                },
                Ok(()),
            )
        }
        (P::Committing(_) | P::Aborting { .. }, E::EndDone) => (P::Ready, Ok(())),
        // Not ended: the transaction is still open. A failed commit can be tried again (or the
        // transaction aborted); a failed abort must be tried again.
        (P::Committing(t), E::EndFailed(_)) => (P::InTransaction(t), Ok(())),
        (
            P::Aborting {
                txn,
                error: None,
                reinit: false,
            },
            E::EndFailed(_),
        ) => (P::InTransaction(txn), Ok(())),
        (P::Aborting { txn, error, reinit }, E::EndFailed(failure)) => (
            P::AbortableError {
                txn,
                error: error.unwrap_or(failure),
                reinit,
            },
            Ok(()),
        ),
        // A commit refused because the transaction failed while it flushed.
        (p @ P::AbortableError { .. }, E::EndFailed(_)) => (p, Ok(())),

        // An error that dooms the transaction: the first one is kept (it says why).
        (P::InTransaction(txn) | P::Committing(txn), E::Abortable { error, reinit }) => {
            (P::AbortableError { txn, error, reinit }, Ok(()))
        }
        (
            P::AbortableError {
                txn,
                error,
                reinit: r,
            },
            E::Abortable { reinit, .. },
        ) => (
            P::AbortableError {
                txn,
                error,
                reinit: r || reinit,
            },
            Ok(()),
        ),
        (
            P::Aborting {
                txn,
                error,
                reinit: r,
            },
            E::Abortable {
                error: e,
                reinit,
            },
        ) => (
            P::Aborting {
                txn,
                error: error.or(Some(e)),
                reinit: r || reinit,
            },
            Ok(()),
        ),
        // No transaction is open: a late answer of one that has ended dooms nothing.
        (p @ (P::Uninitialized | P::Initializing | P::Ready), E::Abortable { .. }) => {
            (p, Ok(()))
        }

        // Refusals: say what to call instead.
        (p @ P::Initializing, _) => (
            p,
            usage("init_transactions() is still running (Initializing); wait for it to finish first".into()),
        ),
        (p @ P::Uninitialized, E::Use(what)) => (
            p,
            usage(format!(
                "the producer is not initialized (Uninitialized): call init_transactions() and then begin_transaction() before {what}"
            )),
        ),
        (p @ P::Uninitialized, _) => (
            p,
            usage("the producer is not initialized (Uninitialized): call init_transactions() first".into()),
        ),
        (p @ P::Ready, E::Use(what)) => (
            p,
            usage(format!(
                "no transaction is open (Ready): call begin_transaction() before {what}"
            )),
        ),
        (p @ P::Ready, E::EndStart(_)) => (
            p,
            usage("no transaction is open (Ready): call begin_transaction() first".into()),
        ),
        (p @ P::InTransaction(_), E::Begin { .. }) => (
            p,
            usage("a transaction is already open (InTransaction); commit or abort it before begin_transaction()".into()),
        ),
        (p @ P::InTransaction(_), E::InitStart) => (
            p,
            usage("a transaction is open (InTransaction); commit or abort it before init_transactions()".into()),
        ),
        (P::AbortableError { txn, error, reinit }, E::Use(_)) => {
            // As the Java client: once the transaction is doomed, sends fail with its error
            // (which keeps its class) until it is aborted.
            let err = error.clone();
            (P::AbortableError { txn, error, reinit }, Err(err))
        }
        (P::AbortableError { txn, error, reinit }, E::Flushed | E::EndStart(TxnEnd::Commit)) => {
            let err = match &error {
                // Already says what happened and what to do.
                Error::TransactionAbortable(_) => error.clone(),
                e => Error::TransactionAbortable(format!(
                    "cannot commit: the transaction failed ({e}); call abort_transaction() and redo the work"
                )),
            };
            (P::AbortableError { txn, error, reinit }, Err(err))
        }
        (p @ P::AbortableError { .. }, _) => {
            let msg = format!(
                "the transaction failed (AbortableError: {}); call abort_transaction() first",
                p.doom().map_or(String::new(), |e| e.to_string())
            );
            (p, usage(msg))
        }
        (p @ (P::Committing(_) | P::Aborting { .. }), E::Use(what)) => {
            let msg = format!(
                "the transaction is being {} ({}); call begin_transaction() after it has ended, then {what}",
                if matches!(p, P::Committing(_)) { "committed" } else { "aborted" },
                p.name()
            );
            (p, usage(msg))
        }
        (p @ (P::Committing(_) | P::Aborting { .. }), E::Begin { .. } | E::InitStart | E::EndStart(_)) => {
            let msg = format!(
                "the transaction is being {} ({}); wait for that to finish",
                if matches!(p, P::Committing(_)) { "committed" } else { "aborted" },
                p.name()
            );
            (p, usage(msg))
        }
        // Request completions that do not match the phase are bugs of ours, not of the
        // caller: refuse them loudly rather than move to a phase nothing expects.
        (p, e) => {
            let msg = format!("transaction event {e:?} in phase {}", p.name());
            (p, Err(Error::Internal(msg)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TxnEvent as E;
    use super::TxnPhase as P;
    use super::*;

    fn open() -> OpenTxn {
        OpenTxn::new(false, Instant::now())
    }

    fn started() -> OpenTxn {
        let mut t = open();
        t.started = true;
        t.added.insert(TopicPartition::new("t", 0));
        t
    }

    fn failed(msg: &str) -> Error {
        Error::broker(msg, crate::protocol::ErrorCode::TOPIC_AUTHORIZATION_FAILED)
    }

    fn fenced() -> Error {
        Error::Fenced("fenced by another producer".into())
    }

    fn abortable(reinit: bool) -> E {
        E::Abortable {
            error: failed("produce to t-0"),
            reinit,
        }
    }

    fn doomed(reinit: bool) -> P {
        P::AbortableError {
            txn: started(),
            error: failed("produce to t-0"),
            reinit,
        }
    }

    fn aborting(error: Option<Error>, reinit: bool) -> P {
        P::Aborting {
            txn: started(),
            error,
            reinit,
        }
    }

    /// What a test expects of a phase: its name, and for phases with data the data that
    /// matters (reinit, whether an error is kept, whether the transaction started).
    fn shape(p: &P) -> String {
        match p {
            P::Aborting { txn, error, reinit } => format!(
                "Aborting(started={}, error={}, reinit={reinit})",
                txn.started,
                error.is_some()
            ),
            P::AbortableError { txn, reinit, .. } => {
                format!("AbortableError(started={}, reinit={reinit})", txn.started)
            }
            P::Committing(t) => format!("Committing(started={})", t.started),
            P::FatalError(e) => format!("FatalError({e})"),
            p => p.name().to_owned(),
        }
    }

    #[test]
    fn transitions() {
        let send = || E::Use("send()");
        let commit = || E::EndStart(TxnEnd::Commit);
        let abort = || E::EndStart(TxnEnd::Abort);
        let begin = || E::Begin {
            tv2: false,
            now: Instant::now(),
        };
        // (from, event, Ok(shape of the phase after) or Err(part of the message)); a refusal
        // leaves the phase as it was.
        let table: Vec<(P, E, Result<&str, &str>)> = vec![
            (P::Uninitialized, E::InitStart, Ok("Initializing")),
            (P::Ready, E::InitStart, Ok("Initializing")),
            (P::Initializing, E::InitDone, Ok("Ready")),
            (P::Initializing, E::InitFailed, Ok("Uninitialized")),
            (P::Initializing, begin(), Err("still running (Initializing)")),
            (
                P::Uninitialized,
                send(),
                Err("(Uninitialized): call init_transactions() and then begin_transaction() before send()"),
            ),
            (P::Uninitialized, begin(), Err("call init_transactions() first")),
            (P::Uninitialized, commit(), Err("call init_transactions() first")),
            (P::Ready, send(), Err("(Ready): call begin_transaction() before send()")),
            (P::Ready, begin(), Ok("InTransaction")),
            (P::Ready, commit(), Err("no transaction is open")),
            (P::Ready, abort(), Err("no transaction is open")),
            (P::InTransaction(open()), send(), Ok("InTransaction")),
            (P::InTransaction(open()), begin(), Err("already open (InTransaction)")),
            (
                P::InTransaction(open()),
                E::InitStart,
                Err("commit or abort it before init_transactions()"),
            ),
            (P::InTransaction(started()), commit(), Ok("Committing(started=true)")),
            (
                P::InTransaction(started()),
                abort(),
                Ok("Aborting(started=true, error=false, reinit=false)"),
            ),
            (
                P::Committing(open()),
                send(),
                Err("being committed (Committing); call begin_transaction() after it has ended"),
            ),
            (aborting(None, false), send(), Err("being aborted (Aborting)")),
            (P::Committing(open()), begin(), Err("being committed (Committing); wait")),
            (P::Committing(open()), abort(), Err("being committed")),
            (P::Committing(open()), E::Flushed, Ok("Committing(started=false)")),
            (P::Committing(started()), E::EndTxnDone, Ok("Committing(started=false)")),
            (P::Committing(open()), E::EndDone, Ok("Ready")),
            (aborting(None, false), E::EndDone, Ok("Ready")),
            (aborting(Some(failed("x")), true), E::EndDone, Ok("Ready")),
            (P::Committing(open()), E::EndFailed(failed("x")), Ok("InTransaction")),
            (aborting(None, false), E::EndFailed(failed("x")), Ok("InTransaction")),
            // A failed abort of a doomed transaction leaves it doomed: sends stay refused.
            (
                aborting(Some(failed("x")), false),
                E::EndFailed(failed("y")),
                Ok("AbortableError(started=true, reinit=false)"),
            ),
            // EndTxn ended it, the re-initialization failed: abort again re-initializes only.
            (
                aborting(Some(failed("x")), true),
                E::EndTxnDone,
                Ok("Aborting(started=false, error=false, reinit=true)"),
            ),
            (
                aborting(None, true),
                E::EndFailed(failed("y")),
                Ok("AbortableError(started=true, reinit=true)"),
            ),
            // Errors that doom the transaction.
            (P::InTransaction(started()), abortable(false), Ok("AbortableError(started=true, reinit=false)")),
            (P::InTransaction(started()), abortable(true), Ok("AbortableError(started=true, reinit=true)")),
            (P::Committing(started()), abortable(false), Ok("AbortableError(started=true, reinit=false)")),
            (doomed(false), abortable(true), Ok("AbortableError(started=true, reinit=true)")),
            (doomed(true), abortable(false), Ok("AbortableError(started=true, reinit=true)")),
            (
                aborting(None, false),
                abortable(true),
                Ok("Aborting(started=true, error=true, reinit=true)"),
            ),
            (P::Ready, abortable(false), Ok("Ready")),
            (doomed(false), send(), Err("produce to t-0: broker returned")),
            (doomed(false), commit(), Err("cannot commit: the transaction failed (produce to t-0")),
            (doomed(false), begin(), Err("(AbortableError: produce to t-0")),
            (doomed(false), E::InitStart, Err("call abort_transaction() first")),
            (
                doomed(true),
                abort(),
                Ok("Aborting(started=true, error=true, reinit=true)"),
            ),
            // A commit whose flush saw a record fail is refused; the refusal leaves it doomed.
            (doomed(false), E::Flushed, Err("cannot commit")),
            (doomed(false), E::EndFailed(failed("x")), Ok("AbortableError(started=true, reinit=false)")),
            (aborting(Some(failed("x")), false), E::Flushed, Ok("Aborting(started=true, error=true, reinit=false)")),
            // Fatal errors doom the producer, from any phase, for good.
            (P::InTransaction(open()), E::Fatal(fenced()), Ok("FatalError(fenced by another producer)")),
            (P::Committing(open()), E::Fatal(fenced()), Ok("FatalError(fenced by another producer)")),
            (doomed(false), E::Fatal(fenced()), Ok("FatalError(fenced by another producer)")),
            (P::Ready, E::Fatal(fenced()), Ok("FatalError(fenced by another producer)")),
            (P::FatalError(fenced()), abortable(false), Ok("FatalError(fenced by another producer)")),
            (P::FatalError(fenced()), E::Fatal(failed("x")), Ok("FatalError(fenced by another producer)")),
            (P::FatalError(fenced()), send(), Err("fenced by another producer")),
            (P::FatalError(fenced()), commit(), Err("fenced by another producer")),
            (P::FatalError(fenced()), abort(), Err("fenced by another producer")),
            (P::FatalError(fenced()), begin(), Err("fenced by another producer")),
            (P::FatalError(fenced()), E::InitStart, Err("fenced by another producer")),
            (P::FatalError(fenced()), E::Flushed, Err("fenced by another producer")),
            (P::FatalError(fenced()), E::EndFailed(failed("x")), Ok("FatalError(fenced by another producer)")),
            // Completions that do not fit the phase are our bugs.
            (P::Ready, E::EndDone, Err("internal")),
            (P::InTransaction(open()), E::InitDone, Err("internal")),
        ];
        for (from, event, want) in table {
            let before = shape(&from);
            let what = format!("{before} + {event:?}");
            let (after, result) = next(from, event);
            match (want, result) {
                (Ok(w), Ok(())) => assert_eq!(shape(&after), w, "{what}"),
                (Err(part), Err(e)) => {
                    assert!(e.to_string().contains(part), "{what}: {e}");
                    assert_eq!(shape(&after), before, "{what}: a refusal keeps the phase");
                }
                (w, g) => panic!("{what}: wanted {w:?}, got {g:?} ({})", shape(&after)),
            }
        }
    }

    #[test]
    fn refusals_are_usage_errors_and_doomed_commits_are_abortable() {
        use crate::client::error::ErrorClass;
        let (_, r) = next(P::Ready, E::Use("send()"));
        assert!(matches!(r, Err(Error::Usage(_))));
        let (_, r) = next(doomed(false), E::EndStart(TxnEnd::Commit));
        assert_eq!(r.map_err(|e| e.class()), Err(ErrorClass::Abortable));
        let (_, r) = next(P::FatalError(fenced()), E::EndStart(TxnEnd::Abort));
        assert_eq!(r.map_err(|e| e.class()), Err(ErrorClass::Fatal));
    }
}
