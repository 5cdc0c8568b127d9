//! Resuming a prepared transaction: [`resume_transaction`] commits or aborts a committable from
//! any process without InitProducerId (which would abort it), and says what it found
//! ([`ResumeOutcome`]). It asks the coordinator first (DescribeTransactions), judges the answer,
//! and sends EndTxn only to a transaction still open at the committable's epoch.
//!
//! - `judge`: what the coordinator reports means for a committable (open, committed, aborted,
//!   gone, superseded), under the epoch rules of both protocol versions.
//! - `end`: EndTxn through the retry executor; an answer that does not come is resolved with
//!   DescribeTransactions and `judge`, never by sending the EndTxn again blindly.
//!
//! Two files rather than one: `judge` is a pure function whose table test lists every state ×
//! producer id × epoch × protocol version, and reads best without I/O around it; `end` is the
//! I/O that uses it. The producer's own commit and abort use both without going through
//! [`resume_transaction`], so an EndTxn whose answer is lost is resolved the same way whoever
//! sent it. See docs/design/resume.md.

mod end;
mod judge;

pub(crate) use end::{end_txn, EndOutcome};
pub(crate) use judge::{judge, Judgement};

use super::committable::{PreparedTransaction, TxnEnd};
use super::describe::describe;
use crate::client::cluster::Cluster;
use crate::client::error::Result;
use crate::protocol::ErrorCode;

/// What [`resume_transaction`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResumeOutcome {
    /// The transaction was open and is now committed (or aborted, when abort was asked).
    Completed,
    /// It had been committed already (e.g. a commit that raced with a crash); nothing was
    /// written twice.
    AlreadyCommitted,
    /// It had been aborted already, or it can no longer be committed: the coordinator aborted
    /// it (transaction.timeout.ms) or another producer fenced it. `reason` says which.
    NotCommitted {
        /// What the coordinator reported.
        reason: String,
    },
    /// The committable is empty (nothing was sent in its transaction): nothing was done.
    NothingToCommit,
    /// A later transaction of the same transactional id has started, so this one ended before
    /// it — committed or aborted; the coordinator keeps only the latest transaction. Nothing was
    /// done: in particular the later transaction was not committed in its place. Engines avoid
    /// this by never reusing a transactional id before its committable is resolved.
    Superseded {
        /// What the coordinator reported.
        reason: String,
    },
}

/// Commits (or aborts) a transaction prepared by another producer instance — typically one
/// that crashed after saving its [`PreparedTransaction`] — without InitProducerId, which would
/// abort it. Safe to call more than once: a second commit reports
/// [`ResumeOutcome::AlreadyCommitted`], never writes twice.
///
/// # Errors
/// Connection and authorization failures; the transaction's fate is in the `Ok` value.
///
/// # Examples
/// ```no_run
/// # async fn demo(saved: onceflow::client::transactions::PreparedTransaction) -> onceflow::client::Result<()> {
/// use onceflow::client::{Cluster, ClientConfig};
/// use onceflow::client::transactions::{resume_transaction, ResumeOutcome, TxnEnd};
/// let cluster = Cluster::connect(ClientConfig::default()).await?;
/// match resume_transaction(&cluster, &saved, TxnEnd::Commit).await? {
///     ResumeOutcome::Completed | ResumeOutcome::AlreadyCommitted => println!("committed once"),
///     other => println!("lost: {other:?}"),
/// }
/// # Ok(()) }
/// ```
pub async fn resume_transaction(
    cluster: &Cluster,
    prepared: &PreparedTransaction,
    end: TxnEnd,
) -> Result<ResumeOutcome> {
    let p = PreparedTransaction {
        transactional_id: prepared.transactional_id.as_str(),
        producer_id: prepared.producer_id,
        producer_epoch: prepared.producer_epoch,
        transaction_version: prepared.transaction_version,
        transaction_start_ms: prepared.transaction_start_ms,
        empty: prepared.empty,
    };
    if p.empty {
        return Ok(ResumeOutcome::NothingToCommit);
    }
    let commit = end.is_commit();
    let Some(d) = describe(cluster, p.transactional_id).await? else {
        return Ok(ResumeOutcome::NotCommitted {
            reason: "the coordinator does not know the transactional id (never used, or expired after transactional.id.expiration.ms)".into(),
        });
    };
    match judge(&p, &d) {
        Judgement::Superseded(reason) => return Ok(ResumeOutcome::Superseded { reason }),
        Judgement::Committed { .. } if commit => return Ok(ResumeOutcome::AlreadyCommitted),
        Judgement::Aborted { reason, .. } => return Ok(ResumeOutcome::NotCommitted { reason }),
        Judgement::Committed { .. } => {
            return Ok(ResumeOutcome::NotCommitted {
                reason: "it was committed already; it cannot be aborted".into(),
            })
        }
        Judgement::Gone(reason) => return Ok(ResumeOutcome::NotCommitted { reason }),
        Judgement::Open => {}
    }
    let budget = cluster.config().api_timeout;
    match end_txn(cluster, &p, end, budget).await {
        Ok(EndOutcome::Done(_)) => Ok(ResumeOutcome::Completed),
        Ok(EndOutcome::Not { reason, .. }) => Ok(ResumeOutcome::NotCommitted { reason }),
        Err(e) if matches!(e.code(), Some(c) if c == ErrorCode::PRODUCER_FENCED || c == ErrorCode::INVALID_PRODUCER_EPOCH) => {
            Ok(ResumeOutcome::NotCommitted {
                reason: e.to_string(),
            })
        }
        Err(e) => Err(e),
    }
}
