//! Transactions: the transaction protocol, below and beside the producer. The producer's
//! transaction methods (`init_transactions` to `commit_transaction`, in `producer::transaction`)
//! move the phase enum and send the requests here; [`resume_transaction`] finishes a committable
//! from any process; the admin calls list, describe and fence transactional ids. The pool of
//! transactional producers, above the producer, is [`crate::client::pool`].
//!
//! - `phase`: where a transactional producer is in its life (`TxnPhase`: Uninitialized,
//!   Initializing, Ready, InTransaction, Committing, Aborting, AbortableError, FatalError), one
//!   enum moved only by the pure, table-tested `phase::next`.
//! - `requests`: what the producer sends its coordinators within a transaction: InitProducerId
//!   with the transactional id (fencing older instances, or bumping the epoch),
//!   AddPartitionsToTxn and AddOffsetsToTxn (classic protocol), TxnOffsetCommit (KIP-447).
//! - `committable`: [`PreparedTransaction`], the *committable* a producer prepares
//!   (transactional id, producer id and epoch, protocol version, start time) for any process to
//!   finish, and [`TxnEnd`], commit or abort.
//! - `resume/`: EndTxn, and finishing a committable from any process without InitProducerId
//!   ([`resume_transaction`], [`ResumeOutcome`]). `resume/judge.rs` decides, purely, what the
//!   coordinator reports means for a committable; `resume/end.rs` sends EndTxn and resolves a
//!   lost answer with that judgement. The producer's own commit and abort use both.
//! - `describe`: DescribeTransactions ([`TransactionDescription`]), the one implementation
//!   behind the admin call, the producer's checks and resume.
//! - `state`: [`TxnState`], the states a coordinator reports for a transactional id
//!   (DescribeTransactions, ListTransactions).
//! - `admin`: the [`Admin`](crate::client::Admin) calls for transactions: ListTransactions
//!   across the cluster ([`ListTransactionsFilter`], [`TransactionListing`]), DescribeProducers
//!   ([`ActiveProducer`]: whose open transaction holds a partition's LSO back) and fencing a
//!   transactional id ([`FenceOutcome`]) with the producer's own InitProducerId path.
//!
//! See docs/design/transaction.md (the producer's side) and docs/design/resume.md.

mod admin;
mod committable;
mod describe;
pub(crate) mod phase;
mod requests;
mod resume;
mod state;

pub use admin::{
    ActiveProducer, FenceOutcome, ListTransactionsFilter, TransactionListing, TRANSACTION_STATES,
};
pub use committable::{PreparedTransaction, TxnEnd};
pub(crate) use describe::describe;
pub use describe::TransactionDescription;
pub(crate) use requests::{
    add_offsets_to_txn, add_partitions_to_txn, init_transactional_id, txn_offset_commit,
};
pub(crate) use resume::{end_txn, judge, EndOutcome, Judgement};
pub use resume::{resume_transaction, ResumeOutcome};
pub use state::TxnState;
