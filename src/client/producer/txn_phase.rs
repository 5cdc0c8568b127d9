//! Where a transactional producer is in its life, as one enum with checked transitions (the
//! Java client's `TransactionManager.State`, without its error states: an abortable error is
//! kept beside the phase, a fatal one dooms the whole producer).
//!
//! ```text
//! Uninitialized ──init──▶ Initializing ──ok──▶ Ready ──begin──▶ InTransaction
//!        ▲                     │                 ▲  ▲                │
//!        └──────failed─────────┘                 │  └──(re-)init     ├─commit─▶ Committing ─┐
//!                                                │                   └─abort──▶ Aborting ───┤
//!                                                └────────────── ended ────────────────────┘
//!                                       (an end that fails goes back to InTransaction)
//! ```
//!
//! Every public call asks [`next`] first, so a call out of order fails at once with an error
//! that says what to call instead, rather than writing records outside any transaction or
//! leaving the sender waiting for a partition that will never be added.

use crate::client::error::Error;

/// A transactional producer's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnPhase {
    /// `init_transactions()` has not succeeded yet.
    Uninitialized,
    /// InitProducerId is under way.
    Initializing,
    /// Initialized, no transaction open.
    Ready,
    /// Between `begin_transaction()` and the start of commit or abort.
    InTransaction,
    /// `commit_transaction()` is flushing or waiting for EndTxn.
    Committing,
    /// `abort_transaction()` is dropping, flushing or waiting for EndTxn.
    Aborting,
}

/// What the application (or the end of a request) asks of the phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnEvent {
    InitStart,
    InitDone,
    InitFailed,
    Begin,
    /// `send`, `send_offsets_to_transaction`, `prepare_commit`: need an open transaction and
    /// leave the phase as it is.
    Use(&'static str),
    EndStart {
        commit: bool,
    },
    EndDone,
    EndFailed,
}

/// The phase after `event`, or the error that tells the caller what to do instead.
pub(crate) fn next(phase: TxnPhase, event: TxnEvent) -> Result<TxnPhase, Error> {
    use TxnEvent as E;
    use TxnPhase as P;
    let refuse = |msg: String| Err(Error::InvalidState(msg));
    match (phase, event) {
        (P::Uninitialized | P::Ready, E::InitStart) => Ok(P::Initializing),
        (P::Initializing, E::InitDone) => Ok(P::Ready),
        (P::Initializing, E::InitFailed) => Ok(P::Uninitialized),
        (P::Ready, E::Begin) => Ok(P::InTransaction),
        (P::InTransaction, E::Use(_)) => Ok(P::InTransaction),
        (P::InTransaction, E::EndStart { commit: true }) => Ok(P::Committing),
        (P::InTransaction, E::EndStart { commit: false }) => Ok(P::Aborting),
        (P::Committing | P::Aborting, E::EndDone) => Ok(P::Ready),
        (P::Committing | P::Aborting, E::EndFailed) => Ok(P::InTransaction),

        (P::Initializing, _) => {
            refuse("init_transactions() is still running; wait for it to finish first".into())
        }
        (P::Uninitialized, E::Use(what)) => refuse(format!(
            "call init_transactions() and then begin_transaction() before {what}"
        )),
        (P::Uninitialized, _) => refuse("call init_transactions() first".into()),
        (P::Ready, E::Use(what)) => refuse(format!(
            "no transaction is open: call begin_transaction() before {what}"
        )),
        (P::Ready, E::EndStart { .. }) => {
            refuse("no transaction is open: call begin_transaction() first".into())
        }
        (P::InTransaction, E::Begin) => refuse(
            "a transaction is already open; commit or abort it before begin_transaction()".into(),
        ),
        (P::InTransaction, E::InitStart) => {
            refuse("a transaction is open; commit or abort it before init_transactions()".into())
        }
        (P::Committing | P::Aborting, E::Use(what)) => {
            refuse(format!(
            "the transaction is being {}; call begin_transaction() after it has ended, then {what}",
            if phase == P::Committing { "committed" } else { "aborted" }
        ))
        }
        (P::Committing | P::Aborting, _) => refuse(format!(
            "the transaction is being {}; wait for that to finish",
            if phase == P::Committing {
                "committed"
            } else {
                "aborted"
            }
        )),
        // Request completions that do not match the phase are bugs of ours, not of the
        // caller: refuse them loudly rather than move to a phase nothing expects.
        (p, e) => refuse(format!("internal: transaction event {e:?} in phase {p:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::TxnEvent as E;
    use super::TxnPhase as P;
    use super::*;

    #[test]
    fn transitions() {
        let send = E::Use("send()");
        // (from, event, Ok(to) or Err(part of the message))
        let table: &[(P, E, Result<P, &str>)] = &[
            (P::Uninitialized, E::InitStart, Ok(P::Initializing)),
            (P::Ready, E::InitStart, Ok(P::Initializing)),
            (P::Initializing, E::InitDone, Ok(P::Ready)),
            (P::Initializing, E::InitFailed, Ok(P::Uninitialized)),
            (P::Initializing, E::Begin, Err("still running")),
            (
                P::Uninitialized,
                send,
                Err("call init_transactions() and then begin_transaction() before send()"),
            ),
            (
                P::Uninitialized,
                E::Begin,
                Err("call init_transactions() first"),
            ),
            (
                P::Uninitialized,
                E::EndStart { commit: true },
                Err("call init_transactions() first"),
            ),
            (
                P::Ready,
                send,
                Err("call begin_transaction() before send()"),
            ),
            (P::Ready, E::Begin, Ok(P::InTransaction)),
            (
                P::Ready,
                E::EndStart { commit: true },
                Err("no transaction is open"),
            ),
            (
                P::Ready,
                E::EndStart { commit: false },
                Err("no transaction is open"),
            ),
            (P::InTransaction, send, Ok(P::InTransaction)),
            (P::InTransaction, E::Begin, Err("already open")),
            (
                P::InTransaction,
                E::InitStart,
                Err("commit or abort it before init_transactions()"),
            ),
            (
                P::InTransaction,
                E::EndStart { commit: true },
                Ok(P::Committing),
            ),
            (
                P::InTransaction,
                E::EndStart { commit: false },
                Ok(P::Aborting),
            ),
            (
                P::Committing,
                send,
                Err("being committed; call begin_transaction() after it has ended"),
            ),
            (P::Aborting, send, Err("being aborted")),
            (P::Committing, E::Begin, Err("being committed; wait")),
            (
                P::Committing,
                E::EndStart { commit: false },
                Err("being committed"),
            ),
            (P::Committing, E::EndDone, Ok(P::Ready)),
            (P::Aborting, E::EndDone, Ok(P::Ready)),
            (P::Committing, E::EndFailed, Ok(P::InTransaction)),
            (P::Aborting, E::EndFailed, Ok(P::InTransaction)),
            (P::Ready, E::EndDone, Err("internal")),
            (P::InTransaction, E::InitDone, Err("internal")),
        ];
        for (from, event, want) in table {
            let got = next(*from, *event);
            match (want, got) {
                (Ok(w), Ok(g)) => assert_eq!(*w, g, "{from:?} + {event:?}"),
                (Err(part), Err(e)) => {
                    assert!(e.to_string().contains(part), "{from:?} + {event:?}: {e}")
                }
                (w, g) => panic!("{from:?} + {event:?}: wanted {w:?}, got {g:?}"),
            }
        }
    }
}
