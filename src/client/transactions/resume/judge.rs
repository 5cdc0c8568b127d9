//! Judging a transaction by what its coordinator reports: a pure function of the saved
//! committable and the DescribeTransactions answer, table-tested for every state × producer id
//! × epoch × protocol version (docs/design/resume.md).

use crate::client::producer::Identity;
use crate::client::transactions::committable::PreparedTransaction;
use crate::client::transactions::describe::TransactionDescription;
use crate::client::transactions::state::TxnState;

/// The highest epoch a producer may use (Short.MaxValue - 1): the coordinator keeps
/// Short.MaxValue to fence with. A transaction ended at this epoch under KIP-890 moves the
/// transactional id to a new producer id at epoch 0.
pub(crate) const LAST_USABLE_EPOCH: i16 = i16::MAX - 1;

/// Classifies what the coordinator's view `d` means for the transaction `p`: a pure function
/// of the two, table-tested below.
///
/// Under the classic protocol the epoch does not change when a transaction ends, so "ours" is
/// `epoch == saved`; an InitProducerId (fencing) or the coordinator's timeout abort bumps it.
/// Under KIP-890 every EndTxn and every timeout abort bumps the epoch once, so the transaction
/// we wrote ended at `saved + 1`; a later producer's transaction would end at `saved + 2` or
/// beyond. One exception: a KIP-890 transaction at the last usable epoch (32766) ends by moving
/// the transactional id to a *new producer id at epoch 0* (while its markers are written the
/// coordinator shows the old id at epoch 32767). DescribeTransactions does not name the
/// previous id, but a new id at epoch 0 in a Complete state arises only from that move (a
/// transaction begun at epoch 0 ends at epoch 1), so it is ours when our epoch was the last.
///
/// Long on purpose: one decision table over (state, producer id, epoch, protocol version),
/// row for row with the 40-row table test; splitting it would hide the epoch rules that tie
/// the rows together.
pub(crate) fn judge(p: &PreparedTransaction<&str>, d: &TransactionDescription) -> Judgement {
    let tv2 = p.transaction_version >= 2;
    let saved = p.producer_epoch as i32;
    let epoch = d.producer_epoch as i32;
    let complete = d.state.is_complete();
    let rotated = tv2
        && p.producer_epoch >= LAST_USABLE_EPOCH
        && d.producer_id != p.producer_id
        && epoch == 0;
    if d.producer_id != p.producer_id && !(rotated && complete) {
        if rotated && d.state == TxnState::Ongoing {
            return Judgement::Superseded(format!(
                "the transactional id moved to producer id {} after ours (epochs exhausted) and a later transaction is open; ours ended before it",
                d.producer_id
            ));
        }
        return Judgement::Gone(format!(
            "the transactional id now belongs to producer id {} (ours was {}): it was fenced or expired",
            d.producer_id, p.producer_id
        ));
    }
    // A different start time: a later transaction of the same id (same id and epoch under the
    // classic protocol) has begun since; ours ended before it.
    let start_ms = d.start_time_ms.unwrap_or(-1);
    if p.transaction_start_ms >= 0 && start_ms >= 0 && start_ms != p.transaction_start_ms {
        return Judgement::Superseded(format!(
            "a later transaction of this transactional id started at {} ms (ours at {} ms; state {}); ours ended before it",
            start_ms, p.transaction_start_ms, d.state
        ));
    }
    // The epoch (of this producer id) at which our transaction's end shows.
    let ended = |e: i32| {
        if rotated {
            true // new id at epoch 0, checked above
        } else if tv2 {
            e == saved + 1
        } else {
            e == saved
        }
    };
    let (next, pending) = if !tv2 {
        (None, false)
    } else if rotated {
        (
            Some(Identity {
                producer_id: d.producer_id,
                epoch: 0,
            }),
            false,
        )
    } else if p.producer_epoch >= LAST_USABLE_EPOCH {
        // Markers are being written; the new producer id shows once they are.
        (None, true)
    } else {
        (
            Some(Identity {
                producer_id: p.producer_id,
                epoch: p.producer_epoch + 1,
            }),
            false,
        )
    };
    match &d.state {
        TxnState::Ongoing if !rotated && epoch == saved => Judgement::Open,
        // KIP-890: ours ended at saved + 1 and the producer began the next one there.
        TxnState::Ongoing if tv2 && epoch == saved + 1 => Judgement::Superseded(format!(
            "a later transaction of this producer is open at epoch {epoch}; ours ended before it"
        )),
        s if s.is_commit() && ended(epoch) => Judgement::Committed { next, pending },
        // Aborted by us, or by the coordinator after transaction.timeout.ms (which bumps the
        // epoch under the classic protocol too).
        s if s.is_abort() && (ended(epoch) || (!tv2 && epoch == saved + 1)) => {
            Judgement::Aborted {
                reason: format!("the coordinator aborted it (state {}, epoch {epoch})", d.state),
                next,
                pending,
            }
        }
        other => Judgement::Gone(format!(
            "the coordinator has moved on (state {other}, producer id {}, epoch {epoch}; ours {} epoch {}): it was fenced, timed out or ended already",
            d.producer_id, p.producer_id, p.producer_epoch
        )),
    }
}

/// What [`judge`] concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Judgement {
    /// Still open at our epoch: EndTxn can end it.
    Open,
    /// Ours, committed. Under KIP-890 `next` is the identity the producer's next transaction
    /// uses; `pending` when that is not known yet (a new producer id, shown once the markers
    /// are written): ask again.
    Committed {
        next: Option<Identity>,
        pending: bool,
    },
    /// Ours, aborted; `next` and `pending` as for `Committed`.
    Aborted {
        reason: String,
        next: Option<Identity>,
        pending: bool,
    },
    /// Fenced, expired, or the coordinator moved past it without telling how it ended.
    Gone(String),
    /// A later transaction of the same transactional id has begun: ours ended before it.
    Superseded(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(tv: i16, pid: i64, epoch: i16, start: i64) -> PreparedTransaction<&'static str> {
        PreparedTransaction {
            transactional_id: "t",
            producer_id: pid,
            producer_epoch: epoch,
            transaction_version: tv,
            transaction_start_ms: start,
            empty: false,
        }
    }

    fn seen(state: &str, pid: i64, epoch: i16, start: i64) -> TransactionDescription {
        TransactionDescription {
            transactional_id: "t".into(),
            state: TxnState::parse(state),
            producer_id: pid,
            producer_epoch: epoch,
            timeout: std::time::Duration::from_secs(60),
            start_time_ms: (start >= 0).then_some(start),
            partitions: Vec::new(),
            coordinator: 1,
        }
    }

    /// The outcome's kind and, for ended transactions, the next identity and pending flag.
    #[derive(Debug, PartialEq)]
    enum J {
        Open,
        Committed(Option<(i64, i16)>, bool),
        Aborted(Option<(i64, i16)>, bool),
        Gone,
        Superseded,
    }

    fn kind(j: Judgement) -> J {
        let id = |n: Option<Identity>| n.map(|i| (i.producer_id, i.epoch));
        match j {
            Judgement::Open => J::Open,
            Judgement::Committed { next, pending } => J::Committed(id(next), pending),
            Judgement::Aborted { next, pending, .. } => J::Aborted(id(next), pending),
            Judgement::Gone(_) => J::Gone,
            Judgement::Superseded(_) => J::Superseded,
        }
    }

    #[test]
    fn judge_every_state_id_and_epoch() {
        const MAX: i16 = LAST_USABLE_EPOCH; // 32766
        let c = |n: Option<(i64, i16)>| J::Committed(n, false);
        let a = |n: Option<(i64, i16)>| J::Aborted(n, false);
        #[rustfmt::skip]
        let table: &[(PreparedTransaction<&str>, TransactionDescription, J)] = &[
            // Classic protocol: ours is at the saved id and epoch.
            (prepared(1, 7, 3, 100), seen("Ongoing", 7, 3, 100), J::Open),
            (prepared(1, 7, 3, -1), seen("Ongoing", 7, 3, 100), J::Open),
            (prepared(1, 7, 3, 100), seen("Ongoing", 7, 3, 200), J::Superseded),
            (prepared(1, 7, 3, 100), seen("PrepareCommit", 7, 3, 100), c(None)),
            (prepared(1, 7, 3, 100), seen("CompleteCommit", 7, 3, 100), c(None)),
            (prepared(1, 7, 3, 100), seen("CompleteCommit", 7, 3, 200), J::Superseded),
            (prepared(1, 7, 3, 100), seen("CompleteCommit", 7, 4, -1), J::Gone),
            (prepared(1, 7, 3, 100), seen("PrepareAbort", 7, 3, 100), a(None)),
            (prepared(1, 7, 3, 100), seen("CompleteAbort", 7, 3, 100), a(None)),
            // The coordinator's timeout abort bumps the epoch.
            (prepared(1, 7, 3, 100), seen("CompleteAbort", 7, 4, 100), a(None)),
            (prepared(1, 7, 3, 100), seen("CompleteAbort", 7, 5, -1), J::Gone),
            (prepared(1, 7, 3, 100), seen("Empty", 7, 4, -1), J::Gone),
            (prepared(1, 7, 3, 100), seen("PrepareEpochFence", 7, 3, 100), J::Gone),
            (prepared(1, 7, 3, 100), seen("Ongoing", 8, 0, 300), J::Gone),
            (prepared(1, 7, 3, 100), seen("CompleteCommit", 8, 0, 100), J::Gone),
            (prepared(1, 7, MAX, 100), seen("CompleteCommit", 8, 0, 100), J::Gone),
            // KIP-890: ours ends one epoch up.
            (prepared(2, 7, 3, 100), seen("Ongoing", 7, 3, 100), J::Open),
            (prepared(2, 7, 3, 100), seen("PrepareCommit", 7, 4, 100), c(Some((7, 4)))),
            (prepared(2, 7, 3, 100), seen("CompleteCommit", 7, 4, 100), c(Some((7, 4)))),
            // The previous transaction's end, or a later producer's: not ours.
            (prepared(2, 7, 3, 100), seen("CompleteCommit", 7, 3, 50), J::Superseded),
            (prepared(2, 7, 3, -1), seen("CompleteCommit", 7, 3, 50), J::Gone),
            (prepared(2, 7, 3, -1), seen("CompleteCommit", 7, 5, -1), J::Gone),
            (prepared(2, 7, 3, 100), seen("PrepareAbort", 7, 4, 100), a(Some((7, 4)))),
            (prepared(2, 7, 3, 100), seen("CompleteAbort", 7, 4, 100), a(Some((7, 4)))),
            (prepared(2, 7, 3, -1), seen("CompleteAbort", 7, 6, -1), J::Gone),
            (prepared(2, 7, 3, -1), seen("Ongoing", 7, 4, 300), J::Superseded),
            (prepared(2, 7, 3, -1), seen("Empty", 7, 5, -1), J::Gone),
            (prepared(2, 7, 3, 100), seen("CompleteCommit", 9, 0, 100), J::Gone),
            // KIP-890 at the last usable epoch: the end moves the id to a new producer id.
            (prepared(2, 7, MAX, 100), seen("Ongoing", 7, MAX, 100), J::Open),
            (prepared(2, 7, MAX, 100), seen("PrepareCommit", 7, MAX + 1, 100), J::Committed(None, true)),
            (prepared(2, 7, MAX, 100), seen("CompleteCommit", 9, 0, 100), c(Some((9, 0)))),
            (prepared(2, 7, MAX, -1), seen("CompleteCommit", 9, 0, 100), c(Some((9, 0)))),
            (prepared(2, 7, MAX, 100), seen("PrepareAbort", 7, MAX + 1, 100), J::Aborted(None, true)),
            (prepared(2, 7, MAX, 100), seen("CompleteAbort", 9, 0, 100), a(Some((9, 0)))),
            (prepared(2, 7, MAX, 100), seen("Ongoing", 9, 0, 300), J::Superseded),
            (prepared(2, 7, MAX, 100), seen("Empty", 9, 0, -1), J::Gone),
            (prepared(2, 7, MAX, 100), seen("CompleteCommit", 9, 1, 300), J::Gone),
            (prepared(2, 7, MAX - 1, 100), seen("CompleteCommit", 7, MAX, 100), c(Some((7, MAX)))),
            (prepared(2, 7, MAX - 1, 100), seen("CompleteCommit", 9, 0, 100), J::Gone),
        ];
        for (p, d, want) in table {
            let got = kind(judge(p, d));
            assert_eq!(
                &got,
                want,
                "saved tv{} id {} epoch {} start {} / seen {} id {} epoch {} start {:?}",
                p.transaction_version,
                p.producer_id,
                p.producer_epoch,
                p.transaction_start_ms,
                d.state,
                d.producer_id,
                d.producer_epoch,
                d.start_time_ms
            );
        }
    }
}
