//! Two-phase commit without reflection: the *committable* a transactional producer prepares
//! ([`PreparedTransaction`]), and finishing it from any process ([`resume_transaction`]),
//! which decides from what the coordinator reports ([`TransactionDescription`], one
//! DescribeTransactions implementation for the whole crate) with a pure, table-tested `judge`.
//!
//! The producer's own commit and abort use the same EndTxn path (`end`), so an EndTxn whose
//! answer is lost is resolved the same way whoever sent it. See docs/design/resume.md.

mod describe;
mod end;
mod judge;
mod state;

pub(crate) use describe::describe;
pub use describe::TransactionDescription;
pub(crate) use end::{end_txn, EndOutcome};
pub(crate) use judge::{judge, Judgement};
pub use state::TxnState;

use crate::client::cluster::Cluster;
use crate::client::error::Result;
use crate::protocol::ErrorCode;

/// How to end a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnEnd {
    /// Make its records and offsets visible.
    Commit,
    /// Discard them.
    Abort,
}

impl TxnEnd {
    /// EndTxn's `committed` field.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::txn::TxnEnd;
    /// assert!(TxnEnd::Commit.is_commit());
    /// assert!(!TxnEnd::Abort.is_commit());
    /// ```
    pub fn is_commit(self) -> bool {
        self == TxnEnd::Commit
    }
}

/// Everything needed to finish a transaction from another process: the *committable*.
///
/// Save it durably after [`crate::client::Producer::prepare_commit`]; any process can then commit (or abort)
/// the transaction with [`resume_transaction`] without InitProducerId, which would abort it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedTransaction<S = String> {
    /// The transactional id.
    pub transactional_id: S,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch the transaction was written with.
    pub producer_epoch: i16,
    /// The transaction protocol version it was written with (1 classic, 2 KIP-890).
    pub transaction_version: i16,
    /// When the coordinator started this transaction (ms since the epoch; -1 unknown). It
    /// tells this transaction from a later one of the same transactional id: under the classic
    /// protocol both can have the same producer id and epoch.
    #[serde(default = "unknown_start")]
    pub transaction_start_ms: i64,
    /// Nothing reached the broker in this transaction: there is nothing to commit, and
    /// [`resume_transaction`] answers [`ResumeOutcome::NothingToCommit`] without a request.
    /// (The producer's next transaction has the same producer id and epoch, so an EndTxn sent
    /// for an empty committable would end that later transaction instead.)
    #[serde(default)]
    pub empty: bool,
}

fn unknown_start() -> i64 {
    -1
}

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
/// # async fn demo(saved: onceflow::client::txn::PreparedTransaction) -> onceflow::client::Result<()> {
/// use onceflow::client::{Cluster, ClientConfig};
/// use onceflow::client::txn::{resume_transaction, ResumeOutcome, TxnEnd};
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
