//! EndTxn, whose outcome is never guessed: an answer that does not come is resolved with
//! DescribeTransactions (DESIGN.md, "A transaction's life", step 7).

use super::judge::{judge, Judgement};
use super::{describe, PreparedTransaction, TxnEnd};
use crate::client::cluster::{backoff, Cluster};
use crate::client::coordinator::CoordinatorKind;
use crate::client::error::{Error, ErrorClass, Op, Result};
use crate::client::producer::Identity;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use std::time::{Duration, Instant};
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

/// Sends EndTxn; an unknown outcome (lost connection, timeout) is resolved with
/// DescribeTransactions, never by blindly re-sending a commit that could land in a later
/// transaction.
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
    let deadline = Instant::now() + budget.max(cluster.config().api_timeout);
    let mut attempt = 0u32;
    loop {
        let sent = async {
            let conn = cluster
                .coordinator(CoordinatorKind::Transaction, id)
                .await?;
            let cap = if p.transaction_version >= 2 {
                Some(TV2_END_TXN_VERSION)
            } else {
                Some(TV2_END_TXN_VERSION - 1)
            };
            let v = conn.version_for::<EndTxnRequest>(cap)?;
            let r: EndTxnResponse = conn.request_at(&req, v).await?;
            Ok::<_, Error>((v, r))
        }
        .instrument(info_span!(
            "end_txn",
            transactional_id = id,
            commit,
            epoch = p.producer_epoch
        ))
        .await;
        attempt += 1;
        let wait = |code: Option<ErrorCode>| {
            if code == Some(ErrorCode::CONCURRENT_TRANSACTIONS) {
                backoff(Duration::from_millis(20), Duration::from_secs(1), attempt)
            } else {
                backoff(
                    cluster.config().retry_backoff,
                    cluster.config().retry_backoff_max,
                    attempt,
                )
            }
        };
        match sent {
            Ok((v, r)) if r.error_code == 0 => {
                let next = (v >= TV2_END_TXN_VERSION && r.producer_id.0 >= 0).then_some(Identity {
                    producer_id: r.producer_id.0,
                    epoch: r.producer_epoch,
                });
                return Ok(EndOutcome::Done(next));
            }
            Ok((_, r)) => {
                let e = Error::broker(
                    format!(
                        "EndTxn({}) for '{id}'",
                        if commit { "commit" } else { "abort" }
                    ),
                    ErrorCode(r.error_code),
                );
                let class = e.class_in(Op::TxnCoordinator);
                match class {
                    ErrorClass::Retriable | ErrorClass::RefreshAndRetry
                        if Instant::now() < deadline =>
                    {
                        if class == ErrorClass::RefreshAndRetry {
                            cluster.forget_coordinator(CoordinatorKind::Transaction, id);
                        }
                        tokio::time::sleep(wait(e.code())).await;
                    }
                    _ => return Err(e),
                }
            }
            // No answer: the coordinator may or may not have acted on it.
            Err(e) if e.class() == ErrorClass::RefreshAndRetry && Instant::now() < deadline => {
                warn!(error = %e, "EndTxn outcome unknown; asking the coordinator");
                cluster.forget_coordinator(CoordinatorKind::Transaction, id);
                tokio::time::sleep(wait(None)).await;
                let d = match describe(cluster, id).await {
                    Ok(Some(d)) => d,
                    Ok(None) => {
                        return Ok(EndOutcome::Not {
                            reason: "the coordinator no longer knows the transactional id".into(),
                            aborted: false,
                        })
                    }
                    Err(_) => continue,
                };
                match (judge(p, &d), commit) {
                    (Judgement::Open, _) => continue, // never reached it: send again
                    // Ended our way, but the next producer id is not shown yet: ask again.
                    (Judgement::Committed { pending: true, .. }, true)
                    | (Judgement::Aborted { pending: true, .. }, false) => continue,
                    (Judgement::Committed { next, .. }, true) => return Ok(EndOutcome::Done(next)),
                    (Judgement::Aborted { next, .. }, false) => return Ok(EndOutcome::Done(next)),
                    (Judgement::Committed { .. }, false) => {
                        return Ok(EndOutcome::Not {
                            reason: "it was committed".into(),
                            aborted: false,
                        })
                    }
                    (Judgement::Aborted { reason, .. }, true) => {
                        return Ok(EndOutcome::Not {
                            reason,
                            aborted: true,
                        })
                    }
                    (Judgement::Gone(reason), _) | (Judgement::Superseded(reason), _) => {
                        return Ok(EndOutcome::Not {
                            reason,
                            aborted: false,
                        })
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
}
