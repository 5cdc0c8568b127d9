//! Why the file sink failed, each with the path and what to change.

use std::io::{self, ErrorKind};
use std::path::PathBuf;

/// The file sink's errors; each a single line naming what is wrong and what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileSinkError {
    /// Settings that cannot work.
    #[error("file sink configuration: {0}")]
    Config(String),
    /// The output directory could not be created (or synced after creating it).
    #[error("cannot create the file sink's directory {path}: {source}; {hint}", hint = io_hint(.source))]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A part file could not be created.
    #[error("cannot create the part file {path}: {source}; {hint}", hint = io_hint(.source))]
    CreateFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Writing (or flushing) a part file failed.
    #[error("cannot write the part file {path}: {source}; {hint}", hint = io_hint(.source))]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// fsync of a part file or of the directory failed.
    #[error("cannot fsync {path}: {source}; {hint}", hint = io_hint(.source))]
    Sync {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Renaming a part file to its finished name failed.
    #[error("cannot rename {from} to {to}: {source}; {hint}", hint = io_hint(.source))]
    Rename {
        /// The in-progress file.
        from: PathBuf,
        /// Its finished name.
        to: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Deleting a stale in-progress file failed.
    #[error("cannot delete the stale in-progress file {path}: {source}; {hint}", hint = io_hint(.source))]
    Delete {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Listing the directory failed.
    #[error("cannot list the file sink's directory {path}: {source}; {hint}", hint = io_hint(.source))]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Looking at, reading or cutting a file failed.
    #[error("cannot inspect {path}: {source}; {hint}", hint = io_hint(.source))]
    Inspect {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The sink stopped at an earlier I/O error; its open part file is abandoned.
    #[error("the file sink stopped at an earlier error ({cause}); restart the job: the recovery removes the abandoned part file and the replay writes its records again")]
    Failed {
        /// The earlier error.
        cause: String,
    },
    /// A part file name of this task and generation exists already.
    #[error("the part file {path} exists already: this generation was used before (by an earlier start or by another live process of this job); give every start, and every open after a recovery, a new increasing generation, and give each job its own sink.path")]
    GenerationReused {
        /// The existing file.
        path: PathBuf,
    },
    /// The 8-digit sequence of a task's generation is used up.
    #[error("task {task} of generation {generation} has written 100000000 part files, all its 8-digit sequence can name in order; restart the job (a new generation starts again at 0), and raise roll_size_bytes or roll_interval")]
    TooManyParts {
        /// The task.
        task: u32,
        /// The generation.
        generation: u64,
    },
    /// A record the format cannot hold; nothing of it was written.
    #[error("the file sink refuses a record ({len} bytes, beginning {preview}): {reason}")]
    InvalidRecord {
        /// What is wrong and what to change.
        reason: String,
        /// The record's size.
        len: usize,
        /// Its first bytes, escaped.
        preview: String,
    },
    /// A checkpoint's PendingFiles that this sink did not write that way.
    #[error("checkpoint {checkpoint}'s pending files of task {task} are malformed: {reason}; the checkpoint record is damaged or not from this file sink: restore a good checkpoint")]
    InvalidCommittable {
        /// The checkpoint.
        checkpoint: u64,
        /// The task.
        task: u32,
        /// What is wrong.
        reason: String,
    },
    /// A durable checkpoint's part file exists neither in-progress nor finished.
    #[error("DATA LOSS: checkpoint {checkpoint}'s part file {path} (task {task}) exists neither as {in_progress} nor as {finished} in {dir}: someone deleted it, and the output of that checkpoint is gone; restore the file from a backup, or start the job afresh into an empty sink.path (and let nothing delete part files the job may still recover)")]
    Lost {
        /// The checkpoint.
        checkpoint: u64,
        /// The task that wrote it.
        task: u32,
        /// The missing finished file's path.
        path: PathBuf,
        /// Its in-progress name.
        in_progress: String,
        /// Its finished name.
        finished: String,
        /// The directory looked in.
        dir: String,
    },
    /// A restored checkpoint's files are missing, and it was written to another directory.
    #[error("checkpoint {checkpoint}'s part file {finished} (task {task}) was written to {written_to} but is not in {dir}: sink.path changed since; set sink.path back to {written_to} (or move the directory's files there)")]
    DirChanged {
        /// The checkpoint.
        checkpoint: u64,
        /// The task.
        task: u32,
        /// The file's finished name.
        finished: String,
        /// The directory the checkpoint names.
        written_to: String,
        /// The directory looked in.
        dir: String,
    },
    /// A part file exists both in-progress and finished: the commit cannot pick one.
    #[error("checkpoint {checkpoint}'s part file exists both as {in_progress} and as {finished}: a generation was used twice (or something copies files into sink.path); give every start a new generation and keep sink.path for this job alone, then remove the one that is not this checkpoint's")]
    Conflict {
        /// The checkpoint (0 for a leftover at recovery).
        checkpoint: u64,
        /// The in-progress file.
        in_progress: PathBuf,
        /// The finished file.
        finished: PathBuf,
    },
    /// A part file's size differs from the size recorded at its barrier.
    #[error("checkpoint {checkpoint}'s part file {path} has {found} bytes but had {expected} when its checkpoint was taken: something changed it (sink.path must belong to this job alone); restore it, or start the job afresh into an empty sink.path")]
    SizeMismatch {
        /// The checkpoint.
        checkpoint: u64,
        /// The file.
        path: PathBuf,
        /// The size at the barrier.
        expected: u64,
        /// The size now.
        found: u64,
    },
    /// Calls out of order (e.g. a barrier for an older checkpoint).
    #[error("file sink misuse: {0}")]
    Misuse(String),
}

impl FileSinkError {
    /// Whether a restart (recovery from the last durable checkpoint) may help: true for I/O
    /// errors (and a used-up sequence, which a new generation resets); false for lost or
    /// changed files, bad records (the replay brings the same record back), settings and
    /// misuse.
    pub fn is_restartable(&self) -> bool {
        matches!(
            self,
            FileSinkError::CreateDir { .. }
                | FileSinkError::CreateFile { .. }
                | FileSinkError::Write { .. }
                | FileSinkError::Sync { .. }
                | FileSinkError::Rename { .. }
                | FileSinkError::Delete { .. }
                | FileSinkError::ReadDir { .. }
                | FileSinkError::Inspect { .. }
                | FileSinkError::Failed { .. }
                | FileSinkError::TooManyParts { .. }
        )
    }
}

/// What to change for an I/O error, by its kind.
pub(super) fn io_hint(error: &io::Error) -> &'static str {
    match error.kind() {
        ErrorKind::PermissionDenied => {
            "give the job write access there, or set sink.path to a writable directory"
        }
        ErrorKind::ReadOnlyFilesystem => {
            "the file system is read-only: set sink.path to a writable directory"
        }
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::FileTooLarge => {
            "free disk space (or raise the quota, or lower roll_size_bytes), then restart the job"
        }
        ErrorKind::NotFound => {
            "it vanished: nothing but this job may touch sink.path; restart the job"
        }
        ErrorKind::NotADirectory | ErrorKind::AlreadyExists => {
            "a file is in the way: set sink.path to a directory"
        }
        _ => "check the disk and the file system, then restart the job (it resumes from the last checkpoint)",
    }
}
