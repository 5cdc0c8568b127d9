//! EndTxn, whose outcome is never guessed: an answer that does not come is resolved with
//! DescribeTransactions (docs/design/transaction.md, step 7).

use super::judge::{judge, Judgement};
use crate::client::cluster::{Cluster, Stale};
use crate::client::coordinator::CoordinatorKind;
use crate::client::error::{Error, ErrorClass, Op, Result};
use crate::client::producer::Identity;
use crate::client::retry::Step;
use crate::client::transactions::committable::{PreparedTransaction, TxnEnd};
use crate::client::transactions::describe::describe;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing::{info_span, warn, Instrument};

/// EndTxn v5 is KIP-890's: it bumps the epoch and returns the next one.
pub(crate) const TV2_END_TXN_VERSION: i16 = 5;

/// How an EndTxn ended.
pub(crate) enum EndOutcome {
    /// Done; under KIP-890 with the identity for the next transaction.
    Done(Option<Identity>),
    /// The coordinator had already ended it the other way (`aborted`: it aborted it), or it
    /// moved past it.
    Not { reason: String, aborted: bool },
}

/// Sends EndTxn through the retry executor; an unknown outcome (lost connection, timeout) is
/// resolved with DescribeTransactions, never by blindly re-sending a commit that could land in a
/// later transaction.
pub(crate) async fn end_txn(
    cluster: &Cluster,
    p: &PreparedTransaction<&str>,
    end: TxnEnd,
    budget: Duration,
) -> Result<EndOutcome> {
    let id = p.transactional_id;
    let commit = end.is_commit();
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_owned())))
        .with_producer_id(ProducerId(p.producer_id))
        .with_producer_epoch(p.producer_epoch)
        .with_committed(commit);
    let what = format!(
        "EndTxn({}) for '{id}'",
        if commit { "commit" } else { "abort" }
    );
    let policy = cluster
        .policy(Op::TxnCoordinator, budget.max(cluster.config().api_timeout))
        .last_error_at_deadline();
    // Set when an EndTxn got no answer: the coordinator may or may not have acted on it, so the
    // next attempt asks it before sending again.
    let unknown = AtomicBool::new(false);
    let stale = Stale::Coordinator(CoordinatorKind::Transaction, id);
    cluster
        .retrying(&what, policy, stale, |_| async {
            if unknown.load(Ordering::Relaxed) {
                match resolve_unknown(cluster, p, end).await? {
                    Resolved::Final(outcome) => return Ok(Step::Done(outcome)),
                    Resolved::Pending => {
                        return Ok(Step::Again {
                            why: "the coordinator has not shown the transaction's end yet".into(),
                            refresh: false,
                        })
                    }
                    // It never reached the coordinator: send it again, now.
                    Resolved::NotReached => unknown.store(false, Ordering::Relaxed),
                }
            }
            match send(cluster, p, &req, &what).await {
                Ok(next) => Ok(Step::Done(EndOutcome::Done(next))),
                // No answer (a broker error code is an answer).
                Err(e) if e.code().is_none() && e.class() == ErrorClass::RefreshAndRetry => {
                    warn!(error = %e, "EndTxn outcome unknown; asking the coordinator");
                    unknown.store(true, Ordering::Relaxed);
                    Err(e)
                }
                Err(e) => Err(e),
            }
        })
        .await
}

/// One EndTxn; under KIP-890 the answer names the identity for the next transaction.
async fn send(
    cluster: &Cluster,
    p: &PreparedTransaction<&str>,
    req: &EndTxnRequest,
    what: &str,
) -> Result<Option<Identity>> {
    let id = p.transactional_id;
    let conn = cluster
        .coordinator(CoordinatorKind::Transaction, id)
        .await?;
    let v = if p.transaction_version >= 2 {
        conn.tv2_version_for::<EndTxnRequest>(TV2_END_TXN_VERSION)?
            .min(TV2_END_TXN_VERSION)
    } else {
        conn.version_for::<EndTxnRequest>(Some(TV2_END_TXN_VERSION - 1))?
    };
    let r: EndTxnResponse = conn
        .request_at(req, v)
        .instrument(info_span!(
            "end_txn",
            transactional_id = id,
            commit = req.committed,
            epoch = p.producer_epoch
        ))
        .await?;
    ErrorCode::check(r.error_code)
        .map_err(|code| Error::broker(what, code).at_broker("coordinator", conn.addr()))?;
    Ok(
        (v >= TV2_END_TXN_VERSION && r.producer_id.0 >= 0).then_some(Identity {
            producer_id: r.producer_id.0,
            epoch: r.producer_epoch,
        }),
    )
}

/// What the coordinator says about an EndTxn whose answer was lost.
enum Resolved {
    /// The transaction ended (our way or not), or is gone.
    Final(EndOutcome),
    /// Ended our way, but the coordinator does not show the next identity yet.
    Pending,
    /// Still open at our epoch: the EndTxn never reached it.
    NotReached,
}

async fn resolve_unknown(
    cluster: &Cluster,
    p: &PreparedTransaction<&str>,
    end: TxnEnd,
) -> Result<Resolved> {
    let Some(d) = describe(cluster, p.transactional_id).await? else {
        return Ok(Resolved::Final(EndOutcome::Not {
            reason: "the coordinator no longer knows the transactional id".into(),
            aborted: false,
        }));
    };
    let not =
        |reason: String, aborted: bool| Ok(Resolved::Final(EndOutcome::Not { reason, aborted }));
    match (judge(p, &d), end) {
        (Judgement::Open, _) => Ok(Resolved::NotReached),
        (Judgement::Committed { pending: true, .. }, TxnEnd::Commit)
        | (Judgement::Aborted { pending: true, .. }, TxnEnd::Abort) => Ok(Resolved::Pending),
        (Judgement::Committed { next, .. }, TxnEnd::Commit)
        | (Judgement::Aborted { next, .. }, TxnEnd::Abort) => {
            Ok(Resolved::Final(EndOutcome::Done(next)))
        }
        (Judgement::Committed { .. }, TxnEnd::Abort) => not("it was committed".into(), false),
        (Judgement::Aborted { reason, .. }, TxnEnd::Commit) => not(reason, true),
        (Judgement::Gone(reason), _) | (Judgement::Superseded(reason), _) => not(reason, false),
    }
}
