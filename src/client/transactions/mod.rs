//! Transactions: what the producer, the pool and the admin calls share about a transactional
//! id, from the committable to what its coordinator reports.
//!
//! - `committable`: [`PreparedTransaction`], the *committable* a producer prepares (transactional
//!   id, producer id and epoch, protocol version, start time) for any process to finish, and
//!   [`TxnEnd`], commit or abort.
//! - `resume/`: finishing a committable from any process ([`resume_transaction`],
//!   [`ResumeOutcome`]), without InitProducerId. `resume/judge.rs` decides, purely, what the
//!   coordinator's answer means for a committable; `resume/end.rs` sends EndTxn and resolves a
//!   lost answer with that judgement. The producer's own commit and abort use both.
//! - `describe`: DescribeTransactions ([`TransactionDescription`]), the one implementation behind
//!   the admin call, the producer's checks and resume.
//! - `state`: [`TxnState`], the states a coordinator reports for a transactional id.
//! - `phase`: where a transactional producer is in its life (`TxnPhase`: Uninitialized,
//!   Ready, InTransaction, Committing, Aborting, AbortableError, FatalError), one enum moved
//!   only by the pure, table-tested `phase::next`.
//! - `requests`: what the producer sends its coordinators within a transaction: InitProducerId
//!   with the transactional id, AddPartitionsToTxn and AddOffsetsToTxn (classic protocol),
//!   TxnOffsetCommit (KIP-447).
//!
//! See docs/design/resume.md.

mod committable;
mod describe;
pub(crate) mod phase;
mod requests;
mod resume;
mod state;

pub use committable::{PreparedTransaction, TxnEnd};
pub(crate) use describe::describe;
pub use describe::TransactionDescription;
pub(crate) use requests::{
    add_offsets_to_txn, add_partitions_to_txn, init_transactional_id, txn_offset_commit,
};
pub(crate) use resume::{end_txn, judge, EndOutcome, Judgement};
pub use resume::{resume_transaction, ResumeOutcome};
pub use state::TxnState;
