//! The exactly-once file sink: part files written hidden, closed at each checkpoint's barrier,
//! and made visible by a rename once that checkpoint is durable (Flink's FileWriter model, the
//! file system's equivalent of the Kafka sink's transaction per checkpoint).
//!
//! A library piece the runtime drives, one [`FileWriter`] per sink task, synchronous (std::fs):
//!
//! ```text
//!   FileWriter::recover(dir, ..)  once per job, before any task writes: commit the restored
//!                               PendingFiles of every task, then remove the leftovers
//!   FileWriter::open(config)      per task, with a generation never used before
//!   write(value)*               into the task's open, hidden part file (rolled by size/age)
//!   on_barrier(N)               flush + fsync -> Some(PendingFiles) to save in checkpoint N
//!   commit(pending)             checkpoint N is durable: rename its files to their final names
//! ```
//!
//! # The directory, for readers
//!
//! - Read only names that do not start with `.`: those are finished part files, and a finished
//!   file never changes (it is complete when its name appears, and no name is ever reused).
//! - Names starting with `.` are in-progress files (`.<prefix>-<task>-<generation>-<seq>.<ext>.inprogress`):
//!   they may still grow, be deleted at a recovery, or never be committed.
//! - Finished names are `<prefix>-<task:05>-<generation:010>-<seq:08>.<ext>` (`ext` is `jsonl`
//!   or `csv`), so a plain lexicographic sort of the names of one task is the order they were
//!   written in; every CSV file starts with the header line.
//! - Do not delete or move the finished files of the latest checkpoints while the job may
//!   still recover from them: a recovery commits the files of the restored checkpoint again,
//!   and one it cannot find in either form fails the job ([`FileSinkError::Lost`]).
//!
//! # Exactly once
//!
//! The records of checkpoint N are in files that stay hidden until N is durable; a crash
//! before that restores N - 1, whose recovery deletes every hidden file it does not list, and
//! the replay writes those records again into new names (the generation is new). A crash after
//! N is durable restores N, and the recovery finishes N's renames. Each record therefore
//! appears in exactly one finished file.
//!
//! # At least once (`exactly_once == false`)
//!
//! A part file is renamed to its finished name as soon as it is closed (at a roll or a
//! barrier), so output is visible without waiting for the checkpoint; the barrier still
//! flushes and fsyncs, so nothing written before a durable checkpoint is lost. A recovery
//! renames the leftover in-progress files too (cut back to their last complete record) instead
//! of deleting them. The replay after a crash writes the records since the restored checkpoint
//! again: those already in finished files (and in the leftovers) then appear twice. That is
//! the at-least-once contract.
//!
//! # Where the code lives
//!
//! Here the settings and what a checkpoint keeps ([`PendingFiles`]); `writer` (the task's
//! [`FileWriter`]: part files, rolling, the barrier, the commit), `names` (finished and
//! in-progress names), `recover` (renames, a recovery's leftovers, fsyncs of the directory),
//! `encode` (a record as a JSON or CSV line), `error` ([`FileSinkError`]).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The default part file name prefix.
pub const DEFAULT_PREFIX: &str = "part";
/// The default size at which a part file is closed: 128 MiB.
pub const DEFAULT_ROLL_SIZE_BYTES: u64 = 128 * 1024 * 1024;
/// The default age at which a part file is closed: 60 s.
pub const DEFAULT_ROLL_INTERVAL: Duration = Duration::from_secs(60);

/// The largest task index that fits the 5 digits of a name (a wider one would break the
/// fixed-width names that recovery parses).
const MAX_TASK: u32 = 99_999;
/// The largest generation that fits the 10 digits of a name (a wider one would sort before
/// older generations).
const MAX_GENERATION: u64 = 9_999_999_999;
/// The largest sequence number that fits the 8 digits of a name.
const MAX_SEQ: u64 = 99_999_999;
const IN_PROGRESS_SUFFIX: &str = ".inprogress";
const WRITE_BUFFER: usize = 64 * 1024;
/// How much of a refused record its error shows.
const PREVIEW_BYTES: usize = 80;

/// How records are laid out in the part files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFormat {
    /// One JSON document per line (each value as given, then `\n`).
    JsonLines,
    /// Comma-separated values (RFC 4180 quoting, `\n` line ends) of these fields of each
    /// record, a JSON object; the first line of every part file is the header of column names.
    Csv {
        /// The columns, in order: the JSON object's field names.
        columns: Vec<String>,
    },
    /// An Avro container file of this schema: each record (JSON, as the pipeline holds Avro
    /// records) encoded with it, in blocks compressed with `codec`.
    Avro {
        /// The schema's text (an `.avsc`'s content).
        schema: String,
        /// `null`, `deflate`, `snappy` or `zstandard`.
        codec: String,
    },
}

impl FileFormat {
    fn extension(&self) -> &'static str {
        match self {
            FileFormat::JsonLines => "jsonl",
            FileFormat::Csv { .. } => "csv",
            FileFormat::Avro { .. } => "avro",
        }
    }
}

/// A file sink task's settings.
#[derive(Debug, Clone)]
pub struct FileWriterConfig {
    /// The output directory (created if missing). It must be used by this job only: a recovery
    /// removes the in-progress files of `prefix` it does not know.
    pub dir: PathBuf,
    /// The part file name prefix: letters, digits, `-`, `_` and `.`, not starting with `.`.
    pub prefix: String,
    /// This sink task's index (at most 99999).
    pub task: u32,
    /// The incarnation of this task's writer: unique and increasing per start, and new for
    /// every `open` after a recovery (at most 9999999999, e.g. seconds since the epoch).
    /// Names carry it, so no start reuses a name of an earlier one.
    pub generation: u64,
    /// The record layout.
    pub format: FileFormat,
    /// A part file is closed once it reaches this size (at least 1).
    pub roll_size_bytes: u64,
    /// ... or once it has been open this long (more than zero); checked at each write (and
    /// every barrier closes the open file anyway).
    pub roll_interval: Duration,
    /// True: files become visible when their checkpoint is durable. False: at least once,
    /// visible when closed (see the module docs).
    pub exactly_once: bool,
}

impl FileWriterConfig {
    /// Settings with the defaults: prefix `part`, 128 MiB, 60 s, exactly once.
    pub fn new(
        dir: impl Into<PathBuf>,
        task: u32,
        generation: u64,
        format: FileFormat,
    ) -> FileWriterConfig {
        FileWriterConfig {
            dir: dir.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            task,
            generation,
            format,
            roll_size_bytes: DEFAULT_ROLL_SIZE_BYTES,
            roll_interval: DEFAULT_ROLL_INTERVAL,
            exactly_once: true,
        }
    }
}

/// One closed part file, not yet committed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingFile {
    /// Its current (hidden) name, relative to the directory.
    pub in_progress: String,
    /// The name it gets at the commit, relative to the directory.
    pub finished: String,
    /// Its size, checked at the commit.
    pub bytes: u64,
}

/// What a file sink task hands to checkpoint N: the files to commit once N is durable.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingFiles {
    /// The directory as configured (for messages; commits use the committing sink's).
    pub dir: String,
    /// The task that wrote them.
    pub task: u32,
    /// The checkpoint whose records they hold.
    pub checkpoint: u64,
    /// The files, in the order they were written.
    pub files: Vec<PendingFile>,
}

/// What [`FileWriter::recover`] did, for its log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The restored PendingFiles (checkpoint and task pairs) given.
    pub restored: usize,
    /// Their files renamed now.
    pub files_committed: usize,
    /// Their files found renamed already.
    pub files_already_committed: usize,
    /// In-progress files deleted: unlisted ones (exactly once), and leftovers without a
    /// complete record (at least once).
    pub in_progress_deleted: usize,
    /// Leftover in-progress files renamed to their finished names (at least once).
    pub leftovers_finished: usize,
    /// Bytes of incomplete last records cut from those leftovers.
    pub torn_bytes_dropped: u64,
}

impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} restored pending file lists: {} files committed, {} already committed; {} in-progress files deleted, {} leftovers finished ({} torn bytes dropped)",
            self.restored,
            self.files_committed,
            self.files_already_committed,
            self.in_progress_deleted,
            self.leftovers_finished,
            self.torn_bytes_dropped
        )
    }
}

fn check_prefix(prefix: &str) -> Result<(), FileSinkError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if prefix.is_empty() || prefix.starts_with('.') || !prefix.chars().all(allowed) {
        return Err(FileSinkError::Config(format!(
            "part file prefix '{prefix}' must be letters, digits, '-', '_' and '.', not starting with '.' (a name starting with '.' is hidden from readers, and a path separator would leave the directory)"
        )));
    }
    Ok(())
}

fn check_config(config: &FileWriterConfig) -> Result<(), FileSinkError> {
    check_prefix(&config.prefix)?;
    if config.dir.as_os_str().is_empty() {
        return Err(FileSinkError::Config(
            "the output directory is empty: set sink.path".into(),
        ));
    }
    if config.task > MAX_TASK {
        return Err(FileSinkError::Config(format!(
            "task {} does not fit the 5 digits of part file names: at most {MAX_TASK} sink tasks",
            config.task
        )));
    }
    if config.generation > MAX_GENERATION {
        return Err(FileSinkError::Config(format!(
            "generation {} does not fit the 10 digits of part file names (wider ones would sort before older generations): use a smaller increasing number, e.g. seconds since the epoch, not milliseconds",
            config.generation
        )));
    }
    if config.roll_size_bytes == 0 {
        return Err(FileSinkError::Config(
            "roll_size_bytes is 0: set at least 1 (the default is 128 MiB)".into(),
        ));
    }
    if config.roll_interval.is_zero() {
        return Err(FileSinkError::Config(
            "roll_interval is 0: set more than zero (the default is 60 s)".into(),
        ));
    }
    if let FileFormat::Csv { columns } = &config.format {
        if columns.is_empty() {
            return Err(FileSinkError::Config(
                "CSV output needs at least one column: list the record fields to write".into(),
            ));
        }
    }
    Ok(())
}


mod encode;
mod error;
mod names;
mod recover;
mod writer;
#[cfg(test)]
mod tests;

pub use error::FileSinkError;
pub use writer::FileWriter;

