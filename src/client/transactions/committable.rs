//! The committable and how a transaction ends: [`PreparedTransaction`], everything another
//! process needs to finish a transaction the producer has prepared, and [`TxnEnd`], commit or
//! abort (EndTxn's `committed` field, never a bare boolean).

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
    /// use onceflow::client::transactions::TxnEnd;
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
///
/// [`resume_transaction`]: crate::client::transactions::resume_transaction
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
    ///
    /// [`resume_transaction`]: crate::client::transactions::resume_transaction
    /// [`ResumeOutcome::NothingToCommit`]: crate::client::transactions::ResumeOutcome::NothingToCommit
    #[serde(default)]
    pub empty: bool,
}

fn unknown_start() -> i64 {
    -1
}
