//! The state backend's errors: each one line naming what is wrong and what to change.

use std::path::{Path, PathBuf};

/// An error of the state backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Restore was asked for, but the directory holds no state store.
    #[error("no state at {}: start the job with --fresh to begin without state, or point it at its state directory", dir.display())]
    MissingDirectory {
        /// The state directory.
        dir: PathBuf,
    },
    /// The store exists but holds no completed checkpoint (a `--fresh` start was interrupted).
    #[error("the state at {} holds no completed checkpoint: start the job with --fresh", dir.display())]
    NoCheckpoint {
        /// The state directory.
        dir: PathBuf,
    },
    /// The requested checkpoint is newer than the latest one.
    #[error("checkpoint {requested} does not exist in {}: the latest is {latest}", dir.display())]
    CheckpointNotFound {
        /// The state directory.
        dir: PathBuf,
        /// The checkpoint asked for.
        requested: u64,
        /// The latest complete checkpoint.
        latest: u64,
    },
    /// The requested checkpoint is older than what retention keeps.
    #[error("checkpoint {requested} is not retained in {}: restore can go back to checkpoints {oldest}..={latest}; choose one of those or start with --fresh", dir.display())]
    NotRetained {
        /// The state directory.
        dir: PathBuf,
        /// The checkpoint asked for.
        requested: u64,
        /// The oldest checkpoint a restore can still reach.
        oldest: u64,
        /// The latest complete checkpoint.
        latest: u64,
    },
    /// The job's layout differs from the one the checkpoint was written with.
    #[error("{difference}; restore needs the same job or --fresh")]
    LayoutMismatch {
        /// What differs, e.g. "the job's key groups changed from 128 to 256".
        difference: String,
    },
    /// A record could not be decoded.
    #[error("corrupt state in {}: {what}; {remedy}", dir.display())]
    Corrupt {
        /// The state directory.
        dir: PathBuf,
        /// What is corrupt.
        what: String,
        /// What the user can do.
        remedy: &'static str,
    },
    /// Another process (or another store in this process) holds the directory.
    #[error("another onceflow process holds {}: stop it or give this job its own state directory", dir.display())]
    Locked {
        /// The state directory.
        dir: PathBuf,
    },
    /// fjall refuses writes after an I/O error; only a restart (recovery) can continue.
    #[error("the state store at {} refuses writes after an I/O error: restart the job to recover from its latest checkpoint", dir.display())]
    Poisoned {
        /// The state directory.
        dir: PathBuf,
    },
    /// Any other storage error.
    #[error("state store at {}: {message}", dir.display())]
    Storage {
        /// The state directory.
        dir: PathBuf,
        /// fjall's description.
        message: String,
    },
    /// A caller broke the store's protocol (a bug in the engine, not in the user's job).
    #[error("state store misuse: {0}")]
    Misuse(String),
    /// A setting is out of range.
    #[error("invalid state setting: {0}")]
    InvalidSetting(String),
}

/// The remedy for a corrupt record or value.
pub(crate) const RESTORE_OLDER: &str =
    "restore an older retained checkpoint with --from-checkpoint, or start with --fresh";
/// The remedy when fjall cannot open the directory at all.
pub(crate) const MOVE_ASIDE: &str =
    "fjall cannot open it: move the directory aside and start with --fresh";

/// The state backend's result.
pub type Result<T, E = StateError> = std::result::Result<T, E>;

/// Maps a fjall error at `dir` to the error a user can act on.
pub(crate) fn fjall_error(dir: &Path, e: fjall::Error) -> StateError {
    let dir = dir.to_path_buf();
    match e {
        fjall::Error::Locked => StateError::Locked { dir },
        fjall::Error::Poisoned => StateError::Poisoned { dir },
        fjall::Error::JournalRecovery(inner) => StateError::Corrupt {
            dir,
            what: format!("the journal cannot be recovered ({inner:?})"),
            remedy: MOVE_ASIDE,
        },
        fjall::Error::InvalidTrailer | fjall::Error::InvalidTag(_) => StateError::Corrupt {
            dir,
            what: format!("fjall found invalid data ({e:?})"),
            remedy: MOVE_ASIDE,
        },
        other => StateError::Storage {
            dir,
            message: format!("{other:?}"),
        },
    }
}
