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

use super::SinkCommit;
use serde::de::IgnoredAny;
use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

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
}

impl FileFormat {
    fn extension(&self) -> &'static str {
        match self {
            FileFormat::JsonLines => "jsonl",
            FileFormat::Csv { .. } => "csv",
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
fn io_hint(error: &io::Error) -> &'static str {
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

/// The part file being written.
#[derive(Debug)]
struct OpenPart {
    file: BufWriter<File>,
    in_progress: String,
    finished: String,
    bytes: u64,
    opened: Instant,
}

/// One file sink task's writer. See the module docs for the life of a checkpoint through it.
///
/// Driven by one task (`&mut self`); [`FileWriter::commit`] takes `&self` and may commit any
/// task's files of the same directory.
#[derive(Debug)]
pub struct FileWriter {
    config: FileWriterConfig,
    /// `config.dir` as text, for PendingFiles and messages.
    dir_display: String,
    /// The CSV header line, written first into every part file.
    header: Option<Vec<u8>>,
    open: Option<OpenPart>,
    next_seq: u64,
    /// Files closed since the last barrier (exactly once).
    closed: Vec<PendingFile>,
    last_barrier: Option<u64>,
    /// The first I/O error: after it the open file's content is unknown (a record may be torn),
    /// so the sink takes nothing more rather than commit such a file.
    failed: Option<String>,
    /// The encoded record, reused between writes.
    line: Vec<u8>,
}

impl FileWriter {
    /// Checks the settings and creates the directory if missing (no part file is created
    /// until the first record).
    ///
    /// # Errors
    ///
    /// [`FileSinkError::Config`] for settings that cannot work; [`FileSinkError::CreateDir`]
    /// when the directory cannot be created.
    pub fn open(config: FileWriterConfig) -> Result<FileWriter, FileSinkError> {
        check_config(&config)?;
        create_dir(&config.dir)?;
        let header = match &config.format {
            FileFormat::JsonLines => None,
            FileFormat::Csv { columns } => {
                let mut header = Vec::new();
                for (i, column) in columns.iter().enumerate() {
                    if i > 0 {
                        header.push(b',');
                    }
                    push_csv_field(&mut header, column);
                }
                header.push(b'\n');
                Some(header)
            }
        };
        debug!(
            dir = %config.dir.display(),
            task = config.task,
            generation = config.generation,
            exactly_once = config.exactly_once,
            "file sink open"
        );
        Ok(FileWriter {
            dir_display: config.dir.display().to_string(),
            config,
            header,
            open: None,
            next_seq: 0,
            closed: Vec::new(),
            last_barrier: None,
            failed: None,
            line: Vec::new(),
        })
    }

    /// Appends one output record.
    ///
    /// JSON Lines: `value` must be one JSON document on one line; it is written as given, then
    /// `\n`. CSV: `value` is a JSON object; the configured columns are written in order:
    /// strings as they are (quoted, RFC 4180, when they hold a comma, quote or line break),
    /// numbers and booleans as their JSON text, missing and null as empty, arrays and objects
    /// as their compact JSON text (quoted).
    ///
    /// The open part file is closed first if it has been open for `roll_interval`, and right
    /// after the record once it reaches `roll_size_bytes`.
    ///
    /// # Errors
    ///
    /// [`FileSinkError::InvalidRecord`] for a record the format cannot hold (nothing is written,
    /// the sink goes on); I/O errors (after which the sink refuses every call but
    /// [`FileWriter::commit`] with [`FileSinkError::Failed`]: restart the job).
    pub fn write(&mut self, value: &[u8]) -> Result<(), FileSinkError> {
        self.check_usable()?;
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        let result = match encode(&self.config.format, value, &mut line) {
            Ok(()) => match self.append(&line) {
                Ok(()) => Ok(()),
                Err(error) => Err(self.fail(error)),
            },
            Err(error) => Err(error),
        };
        self.line = line;
        result
    }

    /// The barrier of checkpoint N: closes the open part file (flush, fsync) and returns every
    /// part file closed since the previous barrier, rolled ones included, in write order, to
    /// save in checkpoint N, or None when nothing was written since (and always None at least
    /// once, whose files are final already).
    ///
    /// # Errors
    ///
    /// [`FileSinkError::Misuse`] for a checkpoint not after the previous barrier's; I/O errors
    /// (the sink then refuses further writes: restart the job).
    pub fn on_barrier(&mut self, checkpoint: u64) -> Result<Option<PendingFiles>, FileSinkError> {
        self.check_usable()?;
        if let Some(last) = self.last_barrier {
            if checkpoint <= last {
                return Err(FileSinkError::Misuse(format!(
                    "barrier of checkpoint {checkpoint} after the barrier of checkpoint {last}: checkpoint ids must increase"
                )));
            }
        }
        match self.barrier(checkpoint) {
            Ok(pending) => Ok(pending),
            Err(error) => Err(self.fail(error)),
        }
    }

    /// Checkpoint `pending.checkpoint` is durable: makes its files final (renames each
    /// in-progress file to its finished name, then fsyncs the directory). Idempotent: a file
    /// found finished (and no longer in progress) was committed before. Works for any task's
    /// files in this sink's directory.
    ///
    /// # Errors
    ///
    /// [`FileSinkError::Lost`] when a file exists in neither form (someone deleted it);
    /// [`FileSinkError::DirChanged`] when, moreover, the checkpoint names another directory;
    /// [`FileSinkError::Conflict`], [`FileSinkError::SizeMismatch`],
    /// [`FileSinkError::InvalidCommittable`] for files that are not what the checkpoint says;
    /// I/O errors. Nothing is renamed when any file is lost or wrong.
    pub fn commit(&self, pending: &PendingFiles) -> Result<SinkCommit, FileSinkError> {
        let counts = commit_in(&self.config.dir, pending)?;
        debug!(
            checkpoint = pending.checkpoint,
            task = pending.task,
            renamed = counts.renamed,
            already = counts.already,
            "file sink commit"
        );
        Ok(if counts.renamed > 0 {
            SinkCommit::Committed
        } else {
            SinkCommit::AlreadyCommitted
        })
    }

    /// The recovery, once for the whole job before any task writes: commits every restored
    /// PendingFiles (any task's) with the rules of [`FileWriter::commit`], THEN removes every
    /// in-progress file of `prefix` in `dir` that they do not list: they hold records after
    /// the restored checkpoint, which the replay writes again. At least once
    /// (`exactly_once == false`), such leftovers are cut back to their last complete record
    /// and renamed to their finished names instead (deleted if no record is left), so their
    /// records may appear twice after the replay. Finished files, other prefixes and other
    /// files are not touched. A missing `dir` with nothing restored is an empty recovery.
    ///
    /// # Errors
    ///
    /// [`FileSinkError::Config`] for a bad prefix; the errors of [`FileWriter::commit`] (nothing
    /// is removed then); I/O errors.
    pub fn recover(
        dir: &Path,
        prefix: &str,
        exactly_once: bool,
        restored: &[PendingFiles],
    ) -> Result<Recovery, FileSinkError> {
        check_prefix(prefix)?;
        let mut recovery = Recovery {
            restored: restored.len(),
            ..Recovery::default()
        };
        let mut listed = HashSet::new();
        for pending in restored {
            let counts = commit_in(dir, pending)?;
            recovery.files_committed += counts.renamed;
            recovery.files_already_committed += counts.already;
            listed.extend(pending.files.iter().map(|f| f.in_progress.as_str()));
        }

        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == ErrorKind::NotFound => {
                info!(dir = %dir.display(), "file sink recovery: {recovery}");
                return Ok(recovery);
            }
            Err(source) => {
                return Err(FileSinkError::ReadDir {
                    path: dir.to_path_buf(),
                    source,
                })
            }
        };
        let mut leftovers = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| FileSinkError::ReadDir {
                path: dir.to_path_buf(),
                source,
            })?;
            let name = entry.file_name();
            // A name that is not UTF-8 is not one of ours.
            let Some(name) = name.to_str() else { continue };
            if listed.contains(name) {
                continue;
            }
            let Some(finished) = parse_in_progress(name, prefix) else {
                continue;
            };
            let file_type = entry.file_type().map_err(|source| FileSinkError::Inspect {
                path: entry.path(),
                source,
            })?;
            if file_type.is_file() {
                leftovers.push((name.to_owned(), finished.to_owned()));
            }
        }
        // Sorted, so the log and the order of the work do not depend on the directory's order.
        leftovers.sort();
        for (name, finished) in &leftovers {
            let path = dir.join(name);
            if exactly_once {
                fs::remove_file(&path).map_err(|source| FileSinkError::Delete {
                    path: path.clone(),
                    source,
                })?;
                debug!(file = %path.display(), "file sink recovery: deleted an uncommitted part file");
                recovery.in_progress_deleted += 1;
            } else {
                finish_leftover(dir, name, finished, &mut recovery)?;
            }
        }
        if !leftovers.is_empty() {
            sync_dir(dir)?;
        }
        info!(dir = %dir.display(), "file sink recovery: {recovery}");
        Ok(recovery)
    }

    fn check_usable(&self) -> Result<(), FileSinkError> {
        match &self.failed {
            Some(cause) => Err(FileSinkError::Failed {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Marks the sink failed by an I/O error and abandons the open file (its content is
    /// unknown; the recovery deletes it).
    fn fail(&mut self, error: FileSinkError) -> FileSinkError {
        if self.failed.is_none() {
            self.failed = Some(error.to_string());
        }
        if let Some(open) = self.open.take() {
            // into_parts drops the buffer without writing it: nothing more goes into that file.
            drop(open.file.into_parts());
        }
        error
    }

    /// Writes an encoded record, rolling around it.
    fn append(&mut self, line: &[u8]) -> Result<(), FileSinkError> {
        let now = Instant::now();
        let mut open = match self.open.take() {
            Some(open) if now.duration_since(open.opened) >= self.config.roll_interval => {
                self.close(open)?;
                self.new_part(now)?
            }
            Some(open) => open,
            None => self.new_part(now)?,
        };
        open.file
            .write_all(line)
            .map_err(|source| FileSinkError::Write {
                path: self.config.dir.join(&open.in_progress),
                source,
            })?;
        open.bytes += line.len() as u64;
        if open.bytes >= self.config.roll_size_bytes {
            self.close(open)
        } else {
            self.open = Some(open);
            Ok(())
        }
    }

    /// Creates the next part file (hidden), with the CSV header.
    fn new_part(&mut self, now: Instant) -> Result<OpenPart, FileSinkError> {
        if self.next_seq > MAX_SEQ {
            return Err(FileSinkError::TooManyParts {
                task: self.config.task,
                generation: self.config.generation,
            });
        }
        let finished = finished_name(
            &self.config.prefix,
            self.config.task,
            self.config.generation,
            self.next_seq,
            self.config.format.extension(),
        );
        let in_progress = in_progress_name(&finished);
        // A finished file of this name was committed by an earlier user of this generation:
        // committing ours later would replace it.
        let finished_path = self.config.dir.join(&finished);
        if metadata(&finished_path)?.is_some() {
            return Err(FileSinkError::GenerationReused {
                path: finished_path,
            });
        }
        let path = self.config.dir.join(&in_progress);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| {
                if source.kind() == ErrorKind::AlreadyExists {
                    FileSinkError::GenerationReused { path: path.clone() }
                } else {
                    FileSinkError::CreateFile {
                        path: path.clone(),
                        source,
                    }
                }
            })?;
        self.next_seq += 1;
        let mut part = OpenPart {
            file: BufWriter::with_capacity(WRITE_BUFFER, file),
            in_progress,
            finished,
            bytes: 0,
            opened: now,
        };
        if let Some(header) = &self.header {
            part.file
                .write_all(header)
                .map_err(|source| FileSinkError::Write { path, source })?;
            part.bytes += header.len() as u64;
        }
        debug!(file = %part.in_progress, "file sink: part file opened");
        Ok(part)
    }

    /// Closes a part file: flush, fsync; then pending until its checkpoint's commit (exactly
    /// once), or renamed to its finished name at once (at least once).
    fn close(&mut self, open: OpenPart) -> Result<(), FileSinkError> {
        let path = self.config.dir.join(&open.in_progress);
        let file = open
            .file
            .into_inner()
            .map_err(|error| FileSinkError::Write {
                path: path.clone(),
                source: error.into_error(),
            })?;
        file.sync_all()
            .map_err(|source| FileSinkError::Sync { path, source })?;
        let pending = PendingFile {
            in_progress: open.in_progress,
            finished: open.finished,
            bytes: open.bytes,
        };
        debug!(file = %pending.in_progress, bytes = pending.bytes, "file sink: part file closed");
        if self.config.exactly_once {
            self.closed.push(pending);
        } else {
            rename(&self.config.dir, &pending)?;
            sync_dir(&self.config.dir)?;
        }
        Ok(())
    }

    fn barrier(&mut self, checkpoint: u64) -> Result<Option<PendingFiles>, FileSinkError> {
        if let Some(open) = self.open.take() {
            self.close(open)?;
        }
        self.last_barrier = Some(checkpoint);
        if self.closed.is_empty() {
            return Ok(None);
        }
        // Once checkpoint N is durable its files must survive a crash under their in-progress
        // names: a file's fsync does not cover its directory entry.
        sync_dir(&self.config.dir)?;
        Ok(Some(PendingFiles {
            dir: self.dir_display.clone(),
            task: self.config.task,
            checkpoint,
            files: std::mem::take(&mut self.closed),
        }))
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

/// Creates `dir` and makes each new level durable in its parent (a crash must not take the
/// directory, and the committed files in it, away).
fn create_dir(dir: &Path) -> Result<(), FileSinkError> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(level) = at {
        if level.as_os_str().is_empty() || level.exists() {
            break;
        }
        missing.push(level);
        at = level.parent();
    }
    fs::create_dir_all(dir).map_err(|source| FileSinkError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    for created in missing.iter().rev() {
        let parent = match created.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        File::open(parent)
            .and_then(|f| f.sync_all())
            .map_err(|source| FileSinkError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
    }
    Ok(())
}

fn finished_name(prefix: &str, task: u32, generation: u64, seq: u64, ext: &str) -> String {
    format!("{prefix}-{task:05}-{generation:010}-{seq:08}.{ext}")
}

fn in_progress_name(finished: &str) -> String {
    format!(".{finished}{IN_PROGRESS_SUFFIX}")
}

/// The finished name of `name` if it is an in-progress file of `prefix`: exactly
/// `.<prefix>-<5 digits>-<10 digits>-<8 digits>.<jsonl|csv>.inprogress`, so that another
/// prefix that merely starts with this one never matches.
fn parse_in_progress<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let finished = name.strip_prefix('.')?.strip_suffix(IN_PROGRESS_SUFFIX)?;
    let rest = finished.strip_prefix(prefix)?.strip_prefix('-')?;
    let (stem, ext) = rest.rsplit_once('.')?;
    if ext != "jsonl" && ext != "csv" {
        return None;
    }
    let mut parts = stem.split('-');
    for width in [5, 10, 8] {
        let part = parts.next()?;
        if part.len() != width || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
    }
    if parts.next().is_some() {
        return None;
    }
    Some(finished)
}

/// The file's metadata, None when it does not exist (a symlink is not followed).
fn metadata(path: &Path) -> Result<Option<Metadata>, FileSinkError> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileSinkError::Inspect {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn sync_dir(dir: &Path) -> Result<(), FileSinkError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|source| FileSinkError::Sync {
            path: dir.to_path_buf(),
            source,
        })
}

fn rename(dir: &Path, file: &PendingFile) -> Result<(), FileSinkError> {
    let from = dir.join(&file.in_progress);
    let to = dir.join(&file.finished);
    fs::rename(&from, &to).map_err(|source| FileSinkError::Rename { from, to, source })
}

/// A pending file's names must be the pair this sink makes, in the directory itself: a
/// damaged record must not rename files elsewhere.
fn check_names(pending: &PendingFiles, file: &PendingFile) -> Result<(), FileSinkError> {
    let finished = &file.finished;
    let plain =
        !finished.is_empty() && !finished.starts_with('.') && !finished.contains(['/', '\\', '\0']);
    if !plain || file.in_progress != in_progress_name(finished) {
        return Err(FileSinkError::InvalidCommittable {
            checkpoint: pending.checkpoint,
            task: pending.task,
            reason: format!(
                "'{}' -> '{}' is not a part file's in-progress and finished name pair",
                file.in_progress, file.finished
            ),
        });
    }
    Ok(())
}

#[derive(Debug, Default)]
struct CommitCounts {
    renamed: usize,
    already: usize,
}

/// [`FileWriter::commit`] in `dir`: every file is checked before any is renamed.
fn commit_in(dir: &Path, pending: &PendingFiles) -> Result<CommitCounts, FileSinkError> {
    let mut counts = CommitCounts::default();
    let mut to_rename = Vec::new();
    for file in &pending.files {
        check_names(pending, file)?;
        let in_progress = dir.join(&file.in_progress);
        let finished = dir.join(&file.finished);
        match (metadata(&in_progress)?, metadata(&finished)?) {
            (Some(meta), None) => {
                if meta.len() != file.bytes {
                    return Err(FileSinkError::SizeMismatch {
                        checkpoint: pending.checkpoint,
                        path: in_progress,
                        expected: file.bytes,
                        found: meta.len(),
                    });
                }
                to_rename.push(file);
            }
            (None, Some(_)) => counts.already += 1,
            (Some(_), Some(_)) => {
                return Err(FileSinkError::Conflict {
                    checkpoint: pending.checkpoint,
                    in_progress,
                    finished,
                })
            }
            (None, None) => {
                let dir_display = dir.display().to_string();
                return Err(if pending.dir == dir_display {
                    FileSinkError::Lost {
                        checkpoint: pending.checkpoint,
                        task: pending.task,
                        path: finished,
                        in_progress: file.in_progress.clone(),
                        finished: file.finished.clone(),
                        dir: dir_display,
                    }
                } else {
                    FileSinkError::DirChanged {
                        checkpoint: pending.checkpoint,
                        task: pending.task,
                        finished: file.finished.clone(),
                        written_to: pending.dir.clone(),
                        dir: dir_display,
                    }
                });
            }
        }
    }
    for file in to_rename {
        rename(dir, file)?;
        counts.renamed += 1;
    }
    // Also when every file was renamed before: that rename may not have reached the disk yet
    // (a crash between it and its directory fsync), and once this commit is recorded nothing
    // would redo it.
    sync_dir(dir)?;
    Ok(counts)
}

/// At least once: cuts a leftover in-progress file back to its last complete record, then
/// renames it to its finished name, or deletes it when no record is left.
fn finish_leftover(
    dir: &Path,
    name: &str,
    finished: &str,
    recovery: &mut Recovery,
) -> Result<(), FileSinkError> {
    let path = dir.join(name);
    let finished_path = dir.join(finished);
    if metadata(&finished_path)?.is_some() {
        return Err(FileSinkError::Conflict {
            checkpoint: 0,
            in_progress: path,
            finished: finished_path,
        });
    }
    let inspect = |source| FileSinkError::Inspect {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(inspect)?;
    let len = file.metadata().map_err(inspect)?.len();
    let csv = finished.ends_with(".csv");
    let (end, lines) = complete_records(&mut file, csv).map_err(inspect)?;
    if end < len {
        // The crash cut the last record short; the replay writes it again.
        file.set_len(end).map_err(inspect)?;
        recovery.torn_bytes_dropped += len - end;
        warn!(file = %path.display(), bytes = len - end, "file sink recovery: cut an incomplete last record");
    }
    // A CSV file's first line is the header, not a record.
    let records = if csv { lines.saturating_sub(1) } else { lines };
    if records == 0 {
        drop(file);
        fs::remove_file(&path).map_err(|source| FileSinkError::Delete {
            path: path.clone(),
            source,
        })?;
        recovery.in_progress_deleted += 1;
        return Ok(());
    }
    file.sync_all().map_err(|source| FileSinkError::Sync {
        path: path.clone(),
        source,
    })?;
    drop(file);
    fs::rename(&path, &finished_path).map_err(|source| FileSinkError::Rename {
        from: path.clone(),
        to: finished_path.clone(),
        source,
    })?;
    debug!(file = %finished_path.display(), "file sink recovery: finished a leftover part file");
    recovery.leftovers_finished += 1;
    Ok(())
}

/// The length of the file's complete records (up to the last line end outside CSV quotes)
/// and the number of lines in it.
fn complete_records(file: &mut File, csv: bool) -> io::Result<(u64, u64)> {
    let mut buffer = vec![0u8; WRITE_BUFFER];
    let mut position = 0u64;
    let mut end = 0u64;
    let mut lines = 0u64;
    // Only CSV quotes line breaks inside a field ("" inside quotes toggles twice); a JSON line
    // never holds one.
    let mut quoted = false;
    loop {
        let read = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        for (i, &byte) in buffer[..read].iter().enumerate() {
            if csv && byte == b'"' {
                quoted = !quoted;
            } else if byte == b'\n' && !quoted {
                end = position + i as u64 + 1;
                lines += 1;
            }
        }
        position += read as u64;
    }
    Ok((end, lines))
}

fn invalid_record(value: &[u8], reason: String) -> FileSinkError {
    let shown = &value[..value.len().min(PREVIEW_BYTES)];
    let mut preview = format!("{:?}", String::from_utf8_lossy(shown));
    if value.len() > PREVIEW_BYTES {
        preview.push_str("...");
    }
    FileSinkError::InvalidRecord {
        reason,
        len: value.len(),
        preview,
    }
}

/// Encodes one record into `line`, checked whole before anything reaches the file.
fn encode(format: &FileFormat, value: &[u8], line: &mut Vec<u8>) -> Result<(), FileSinkError> {
    match format {
        FileFormat::JsonLines => {
            // A lone '\r' ends a line for many readers too.
            if let Some(at) = value.iter().position(|&b| b == b'\n' || b == b'\r') {
                return Err(invalid_record(
                    value,
                    format!("it has a line break at byte {at}, and JSON Lines holds one document per line: make the job emit compact JSON (no pretty-printing)"),
                ));
            }
            serde_json::from_slice::<IgnoredAny>(value).map_err(|error| {
                invalid_record(
                    value,
                    format!("it is not one JSON document ({error}): make the job emit JSON values, or write another format"),
                )
            })?;
            line.extend_from_slice(value);
            line.push(b'\n');
        }
        FileFormat::Csv { columns } => {
            let record: serde_json::Value = serde_json::from_slice(value).map_err(|error| {
                invalid_record(
                    value,
                    format!("CSV output takes JSON objects and this is not JSON ({error}): make the job emit JSON objects"),
                )
            })?;
            let serde_json::Value::Object(fields) = record else {
                return Err(invalid_record(
                    value,
                    "CSV output takes JSON objects (one field per column) and this is another JSON value: make the job emit JSON objects".into(),
                ));
            };
            for (i, column) in columns.iter().enumerate() {
                if i > 0 {
                    line.push(b',');
                }
                match fields.get(column) {
                    None | Some(serde_json::Value::Null) => {}
                    Some(serde_json::Value::String(text)) => push_csv_field(line, text),
                    Some(serde_json::Value::Number(number)) => {
                        line.extend_from_slice(number.to_string().as_bytes());
                    }
                    Some(serde_json::Value::Bool(flag)) => {
                        line.extend_from_slice(if *flag { b"true" } else { b"false" });
                    }
                    Some(nested) => push_csv_field(line, &nested.to_string()),
                }
            }
            line.push(b'\n');
        }
    }
    Ok(())
}

/// One CSV field, RFC 4180: quoted (with quotes doubled) when it holds a comma, a quote or a
/// line break, as it is otherwise.
fn push_csv_field(line: &mut Vec<u8>, text: &str) {
    if !text.contains([',', '"', '\n', '\r']) {
        line.extend_from_slice(text.as_bytes());
        return;
    }
    line.push(b'"');
    for byte in text.bytes() {
        if byte == b'"' {
            line.push(b'"');
        }
        line.push(byte);
    }
    line.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, task: u32, generation: u64) -> FileWriterConfig {
        FileWriterConfig::new(dir, task, generation, FileFormat::JsonLines)
    }

    /// The directory's names, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// What a reader sees: the names not starting with '.', sorted.
    fn visible(dir: &Path) -> Vec<String> {
        names(dir)
            .into_iter()
            .filter(|n| !n.starts_with('.'))
            .collect()
    }

    /// The visible files' contents, concatenated in name order.
    fn read_visible(dir: &Path) -> String {
        visible(dir)
            .iter()
            .map(|n| fs::read_to_string(dir.join(n)).unwrap())
            .collect()
    }

    fn record(n: u32) -> Vec<u8> {
        format!("{{\"n\":{n}}}").into_bytes()
    }

    fn lines(range: std::ops::Range<u32>) -> String {
        range.map(|n| format!("{{\"n\":{n}}}\n")).collect()
    }

    #[test]
    fn write_barrier_commit_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut sink = FileWriter::open(config(&out, 3, 7)).unwrap();
        assert!(out.is_dir());
        assert!(names(&out).is_empty(), "no file before the first record");
        for n in 0..3 {
            sink.write(&record(n)).unwrap();
        }
        let pending = sink.on_barrier(1).unwrap().unwrap();
        assert_eq!(pending.task, 3);
        assert_eq!(pending.checkpoint, 1);
        assert_eq!(pending.dir, out.display().to_string());
        assert_eq!(
            pending.files,
            vec![PendingFile {
                in_progress: ".part-00003-0000000007-00000000.jsonl.inprogress".into(),
                finished: "part-00003-0000000007-00000000.jsonl".into(),
                bytes: lines(0..3).len() as u64,
            }]
        );
        assert!(
            visible(&out).is_empty(),
            "nothing visible before the commit"
        );

        assert_eq!(sink.commit(&pending).unwrap(), SinkCommit::Committed);
        assert_eq!(names(&out), vec!["part-00003-0000000007-00000000.jsonl"]);
        assert_eq!(read_visible(&out), lines(0..3));

        // Nothing written since: no pending files, and no new file.
        assert_eq!(sink.on_barrier(2).unwrap(), None);
        assert_eq!(names(&out).len(), 1);
    }

    #[test]
    fn rolling_by_size_gives_several_pending_files_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path(), 0, 1);
        // Each record is 8 bytes: a file closes after its third.
        cfg.roll_size_bytes = 20;
        let mut sink = FileWriter::open(cfg).unwrap();
        for n in 0..7 {
            sink.write(&record(n)).unwrap();
        }
        let pending = sink.on_barrier(1).unwrap().unwrap();
        let finished: Vec<&str> = pending.files.iter().map(|f| f.finished.as_str()).collect();
        assert_eq!(
            finished,
            vec![
                "part-00000-0000000001-00000000.jsonl",
                "part-00000-0000000001-00000001.jsonl",
                "part-00000-0000000001-00000002.jsonl",
            ]
        );
        let sizes: Vec<u64> = pending.files.iter().map(|f| f.bytes).collect();
        assert_eq!(sizes, vec![24, 24, 8]);
        sink.commit(&pending).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join(finished[1])).unwrap(),
            lines(3..6)
        );
        assert_eq!(read_visible(dir.path()), lines(0..7));
    }

    #[test]
    fn rolling_by_interval_closes_an_old_file_at_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path(), 0, 1);
        cfg.roll_interval = Duration::from_millis(1);
        let mut sink = FileWriter::open(cfg).unwrap();
        sink.write(&record(0)).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        sink.write(&record(1)).unwrap();
        let pending = sink.on_barrier(1).unwrap().unwrap();
        assert_eq!(pending.files.len(), 2);
        sink.commit(&pending).unwrap();
        assert_eq!(read_visible(dir.path()), lines(0..2));
    }

    #[test]
    fn commit_twice_is_already_committed() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
        sink.write(&record(0)).unwrap();
        let pending = sink.on_barrier(1).unwrap().unwrap();
        assert_eq!(sink.commit(&pending).unwrap(), SinkCommit::Committed);
        assert_eq!(sink.commit(&pending).unwrap(), SinkCommit::AlreadyCommitted);
        // Another sink of the same directory (recovery commits other tasks' files).
        let other = FileWriter::open(config(dir.path(), 1, 2)).unwrap();
        assert_eq!(
            other.commit(&pending).unwrap(),
            SinkCommit::AlreadyCommitted
        );
        assert_eq!(read_visible(dir.path()), lines(0..1));
    }

    #[test]
    fn commit_after_deleting_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
        sink.write(&record(0)).unwrap();
        let pending = sink.on_barrier(4).unwrap().unwrap();
        fs::remove_file(dir.path().join(&pending.files[0].in_progress)).unwrap();
        let error = sink.commit(&pending).unwrap_err();
        assert!(matches!(error, FileSinkError::Lost { checkpoint: 4, .. }));
        assert!(!error.is_restartable());
        let message = error.to_string();
        assert!(message.contains("part-00000-0000000001-00000000.jsonl"));
        assert!(message.contains("gone"));
        assert!(!message.contains('\n'));
    }

    #[test]
    fn commit_refuses_a_moved_directory_a_changed_file_and_foreign_names() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
        sink.write(&record(0)).unwrap();
        let pending = sink.on_barrier(1).unwrap().unwrap();

        let mut moved = pending.clone();
        moved.dir = "/elsewhere".into();
        moved.files[0].finished = "part-00000-0000000001-00000009.jsonl".into();
        moved.files[0].in_progress = in_progress_name(&moved.files[0].finished);
        let error = sink.commit(&moved).unwrap_err();
        assert!(matches!(error, FileSinkError::DirChanged { .. }), "{error}");
        assert!(error.to_string().contains("/elsewhere"));

        let mut escaping = pending.clone();
        escaping.files[0].finished = "../x.jsonl".into();
        escaping.files[0].in_progress = in_progress_name("../x.jsonl");
        assert!(matches!(
            sink.commit(&escaping).unwrap_err(),
            FileSinkError::InvalidCommittable { .. }
        ));

        let mut resized = pending.clone();
        resized.files[0].bytes += 1;
        assert!(matches!(
            sink.commit(&resized).unwrap_err(),
            FileSinkError::SizeMismatch { .. }
        ));
        // Nothing was renamed by the refused commits.
        assert!(visible(dir.path()).is_empty());
        assert_eq!(sink.commit(&pending).unwrap(), SinkCommit::Committed);
    }

    #[test]
    fn recover_commits_listed_and_deletes_unlisted_in_progress_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut t0 = FileWriter::open(config(d, 0, 1)).unwrap();
        let mut t1 = FileWriter::open(config(d, 1, 1)).unwrap();
        // Checkpoint 1, committed before the crash.
        t0.write(&record(0)).unwrap();
        let p = t0.on_barrier(1).unwrap().unwrap();
        t0.commit(&p).unwrap();
        // Checkpoint 2 is durable, not committed yet.
        t0.write(&record(1)).unwrap();
        t1.write(&record(2)).unwrap();
        let p0 = t0.on_barrier(2).unwrap().unwrap();
        let p1 = t1.on_barrier(2).unwrap().unwrap();
        // Records after checkpoint 2, in files the crash leaves behind.
        t0.write(&record(3)).unwrap();
        t1.write(&record(4)).unwrap();
        t1.on_barrier(3).unwrap().unwrap();
        drop((t0, t1));
        let before_finished = visible(d);
        // Things that are not this prefix's in-progress files.
        let others = [
            ".other-00000-0000000001-00000000.jsonl.inprogress",
            ".part-extra-00000-0000000001-00000000.jsonl.inprogress",
            ".part-00000-0000000001-0000000.jsonl.inprogress",
            ".part-00000-0000000001-00000000.txt.inprogress",
            "notes.txt",
        ];
        for name in others {
            fs::write(d.join(name), "x").unwrap();
        }

        let recovery = FileWriter::recover(d, "part", true, &[p0.clone(), p1.clone()]).unwrap();
        assert_eq!(
            recovery,
            Recovery {
                restored: 2,
                files_committed: 2,
                files_already_committed: 0,
                in_progress_deleted: 2,
                leftovers_finished: 0,
                torn_bytes_dropped: 0,
            }
        );
        let mut expected: Vec<String> = others.iter().map(|s| (*s).to_owned()).collect();
        expected.extend(before_finished);
        expected.push(p0.files[0].finished.clone());
        expected.push(p1.files[0].finished.clone());
        expected.sort();
        assert_eq!(names(d), expected);
        assert_eq!(
            fs::read_to_string(d.join(&p1.files[0].finished)).unwrap(),
            lines(2..3)
        );

        // Again (a crash during the recovery): the same end state.
        let again = FileWriter::recover(d, "part", true, &[p0, p1]).unwrap();
        assert_eq!(again.files_committed, 0);
        assert_eq!(again.files_already_committed, 2);
        assert_eq!(again.in_progress_deleted, 0);
        assert_eq!(names(d), expected);
    }

    #[test]
    fn recover_of_a_missing_directory_is_empty_unless_files_are_restored() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("never");
        let recovery = FileWriter::recover(&missing, "part", true, &[]).unwrap();
        assert_eq!(recovery, Recovery::default());
        let restored = PendingFiles {
            dir: missing.display().to_string(),
            task: 0,
            checkpoint: 5,
            files: vec![PendingFile {
                in_progress: ".part-00000-0000000001-00000000.jsonl.inprogress".into(),
                finished: "part-00000-0000000001-00000000.jsonl".into(),
                bytes: 8,
            }],
        };
        let error = FileWriter::recover(&missing, "part", true, &[restored]).unwrap_err();
        assert!(matches!(error, FileSinkError::Lost { checkpoint: 5, .. }));
        assert!(FileWriter::recover(&missing, "../x", true, &[]).is_err());
    }

    #[test]
    fn at_least_once_renames_at_barrier_and_recover_keeps_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut cfg = config(d, 0, 1);
        cfg.exactly_once = false;
        cfg.roll_size_bytes = 20;
        let mut sink = FileWriter::open(cfg).unwrap();
        for n in 0..4 {
            sink.write(&record(n)).unwrap();
        }
        // The roll after the third record made the first file final at once.
        assert_eq!(visible(d), vec!["part-00000-0000000001-00000000.jsonl"]);
        assert_eq!(sink.on_barrier(1).unwrap(), None);
        assert_eq!(names(d).len(), 2);
        assert_eq!(read_visible(d), lines(0..4));
        // Records after the barrier; the crash cuts the last one short.
        sink.write(&record(4)).unwrap();
        drop(sink);
        let leftover = d.join(".part-00000-0000000001-00000002.jsonl.inprogress");
        let mut file = OpenOptions::new().append(true).open(&leftover).unwrap();
        file.write_all(b"{\"n\":").unwrap();
        drop(file);
        // A leftover of another task with nothing complete in it.
        let torn_only = d.join(".part-00001-0000000001-00000000.jsonl.inprogress");
        fs::write(&torn_only, "{\"n\"").unwrap();

        let recovery = FileWriter::recover(d, "part", false, &[]).unwrap();
        assert_eq!(recovery.leftovers_finished, 1);
        assert_eq!(recovery.in_progress_deleted, 1);
        assert_eq!(recovery.torn_bytes_dropped, 5 + 4);
        assert_eq!(
            names(d),
            vec![
                "part-00000-0000000001-00000000.jsonl",
                "part-00000-0000000001-00000001.jsonl",
                "part-00000-0000000001-00000002.jsonl",
            ]
        );
        assert_eq!(read_visible(d), lines(0..5));
    }

    #[test]
    fn csv_quoting_and_header_in_every_part_file() {
        let dir = tempfile::tempdir().unwrap();
        let columns = [
            "id", "name", "score", "ok", "gone", "none", "tags", "odd,col",
        ];
        let mut cfg = FileWriterConfig::new(
            dir.path(),
            0,
            1,
            FileFormat::Csv {
                columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            },
        );
        cfg.roll_size_bytes = 1;
        let mut sink = FileWriter::open(cfg).unwrap();
        sink.write(
            br#"{"id":1,"name":"a, \"b\"\nc","score":1.5,"ok":true,"none":null,"tags":["x",2],"odd,col":"plain","extra":0}"#,
        )
        .unwrap();
        sink.write(br#"{"id":-2,"name":"","ok":false}"#).unwrap();
        let error = sink.write(b"[1,2]").unwrap_err();
        assert!(matches!(error, FileSinkError::InvalidRecord { .. }));
        assert!(!error.is_restartable());
        let pending = sink.on_barrier(1).unwrap().unwrap();
        assert_eq!(pending.files.len(), 2);
        assert!(pending.files[0].finished.ends_with(".csv"));
        sink.commit(&pending).unwrap();
        let header = "id,name,score,ok,gone,none,tags,\"odd,col\"\n";
        let files: Vec<String> = visible(dir.path())
            .iter()
            .map(|n| fs::read_to_string(dir.path().join(n)).unwrap())
            .collect();
        assert_eq!(
            files,
            vec![
                format!("{header}1,\"a, \"\"b\"\"\nc\",1.5,true,,,\"[\"\"x\"\",2]\",plain\n"),
                format!("{header}-2,,,false,,,,\n"),
            ]
        );
    }

    #[test]
    fn a_value_with_a_newline_is_refused_and_the_sink_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
        let error = sink.write(b"{\"a\":\n1}").unwrap_err();
        assert!(matches!(error, FileSinkError::InvalidRecord { .. }));
        assert!(!error.is_restartable());
        let message = error.to_string();
        assert!(message.contains("line break at byte 5"), "{message}");
        assert!(message.contains(r#""{\"a\":\n1}""#), "{message}");
        assert!(!message.contains('\n'));
        assert!(sink.write(b"not json").is_err());
        assert!(
            names(dir.path()).is_empty(),
            "a refused record creates no file"
        );
        sink.write(&record(0)).unwrap();
        let pending = sink.on_barrier(1).unwrap().unwrap();
        sink.commit(&pending).unwrap();
        assert_eq!(read_visible(dir.path()), lines(0..1));
    }

    #[test]
    fn names_sort_in_write_order_across_seq_9_to_10_and_generations() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = 0;
        for (generation, count) in [(9, 12), (10, 3)] {
            let mut cfg = config(dir.path(), 0, generation);
            cfg.roll_size_bytes = 1;
            let mut sink = FileWriter::open(cfg).unwrap();
            for _ in 0..count {
                sink.write(&record(n)).unwrap();
                n += 1;
            }
            let pending = sink.on_barrier(1).unwrap().unwrap();
            assert_eq!(pending.files.len(), count as usize);
            sink.commit(&pending).unwrap();
        }
        let names = visible(dir.path());
        assert!(names.contains(&"part-00000-0000000009-00000010.jsonl".to_owned()));
        assert!(names.contains(&"part-00000-0000000010-00000000.jsonl".to_owned()));
        assert_eq!(read_visible(dir.path()), lines(0..n));
    }

    #[test]
    fn a_reused_generation_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
        first.write(&record(0)).unwrap();
        let pending = first.on_barrier(1).unwrap().unwrap();
        first.commit(&pending).unwrap();
        let mut second = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
        let error = second.write(&record(1)).unwrap_err();
        assert!(matches!(error, FileSinkError::GenerationReused { .. }));
        // The sink stops: its state is not what it would commit.
        assert!(matches!(
            second.write(&record(2)).unwrap_err(),
            FileSinkError::Failed { .. }
        ));
        assert_eq!(read_visible(dir.path()), lines(0..1));
    }

    #[test]
    fn barriers_must_increase() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
        assert_eq!(sink.on_barrier(2).unwrap(), None);
        assert!(matches!(
            sink.on_barrier(2).unwrap_err(),
            FileSinkError::Misuse(_)
        ));
        assert_eq!(sink.on_barrier(3).unwrap(), None);
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let bad: [fn(&mut FileWriterConfig); 8] = [
            |c| c.prefix = String::new(),
            |c| c.prefix = ".hidden".into(),
            |c| c.prefix = "a/b".into(),
            |c| c.task = 100_000,
            |c| c.generation = 10_000_000_000,
            |c| c.roll_size_bytes = 0,
            |c| c.roll_interval = Duration::ZERO,
            |c| c.format = FileFormat::Csv { columns: vec![] },
        ];
        for change in bad {
            let mut cfg = config(d, 0, 1);
            change(&mut cfg);
            let error = FileWriter::open(cfg.clone()).unwrap_err();
            assert!(
                matches!(error, FileSinkError::Config(_)),
                "{cfg:?}: {error}"
            );
            assert!(!error.is_restartable());
        }
        // A file where the directory should be.
        fs::write(d.join("file"), "x").unwrap();
        let error = FileWriter::open(config(&d.join("file").join("out"), 0, 1)).unwrap_err();
        assert!(matches!(error, FileSinkError::CreateDir { .. }), "{error}");
        assert!(error.is_restartable());
        assert!(error.to_string().contains("sink.path"), "{error}");
    }

    #[test]
    fn in_progress_names_parse_only_for_their_prefix() {
        let finished = finished_name("a.b", 12, 345, 6, "csv");
        assert_eq!(finished, "a.b-00012-0000000345-00000006.csv");
        let name = in_progress_name(&finished);
        assert_eq!(parse_in_progress(&name, "a.b"), Some(finished.as_str()));
        assert_eq!(parse_in_progress(&name, "a"), None);
        assert_eq!(parse_in_progress(&finished, "a.b"), None);
    }
}
