//! A sink task's [`FileWriter`]: its open part file, rolling, the barrier and the commit.

use super::*;
use super::encode::encode;
use super::names::{finished_name, in_progress_name, parse_in_progress};
use super::recover::{commit_in, create_dir, finish_leftover, metadata, rename, sync_dir};
use crate::engine::sink::SinkCommit;
use crate::schema::ContainerWriter;
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::Path;
use std::time::Instant;
use tracing::{debug, info};

/// An Avro part file's records are written as a block once their encodings reach this size
/// (and at the file's close).
const AVRO_BLOCK_BYTES: usize = 64 * 1024;

/// An Avro container's sync marker for this writer's files: 16 random bytes (the standard
/// library's random hash keys over the writer's directory, task and generation). Any value
/// works; it need only be unlikely inside the data.
fn sync_marker(config: &FileWriterConfig) -> [u8; 16] {
    use std::hash::BuildHasher;
    let mut out = [0u8; 16];
    for (i, half) in out.chunks_mut(8).enumerate() {
        let hash = std::collections::hash_map::RandomState::new().hash_one((
            i,
            &config.dir,
            config.task,
            config.generation,
        ));
        half.copy_from_slice(&hash.to_le_bytes());
    }
    out
}

/// The part file being written.
#[derive(Debug)]
pub(super) struct OpenPart {
    file: BufWriter<File>,
    in_progress: String,
    finished: String,
    /// Bytes written to the file (an Avro file's pending block not yet).
    bytes: u64,
    opened: Instant,
    /// An Avro file's records not yet written as a block: their encodings and count.
    block: Vec<u8>,
    block_count: u64,
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
    /// The CSV header line or the Avro container header, written first into every part file.
    header: Option<Vec<u8>>,
    /// Avro: the container writer (records are written in blocks).
    avro: Option<ContainerWriter>,
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
        let avro = match &config.format {
            FileFormat::Avro { schema, codec } => Some(
                ContainerWriter::new(schema, codec, sync_marker(&config))
                    .map_err(|m| FileSinkError::Config(format!("the Avro output: {m}")))?,
            ),
            _ => None,
        };
        let header = match &config.format {
            FileFormat::JsonLines => None,
            FileFormat::Csv { columns } => Some(crate::engine::formats::csv_header(columns)),
            FileFormat::Avro { .. } => avro.as_ref().map(ContainerWriter::header),
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
            avro,
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
        let result = match encode(&self.config.format, self.avro.as_ref(), value, &mut line) {
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
        if self.avro.is_some() {
            open.block.extend_from_slice(line);
            open.block_count += 1;
            if open.block.len() >= AVRO_BLOCK_BYTES {
                self.write_block(&mut open)?;
            }
        } else {
            open.file
                .write_all(line)
                .map_err(|source| FileSinkError::Write {
                    path: self.config.dir.join(&open.in_progress),
                    source,
                })?;
            open.bytes += line.len() as u64;
        }
        // An Avro file's pending block counts uncompressed: it rolls a little early.
        if open.bytes + open.block.len() as u64 >= self.config.roll_size_bytes {
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
            block: Vec::new(),
            block_count: 0,
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
    fn close(&mut self, mut open: OpenPart) -> Result<(), FileSinkError> {
        self.write_block(&mut open)?;
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

    /// Writes an Avro file's pending records as one block (none pending: nothing).
    fn write_block(&self, open: &mut OpenPart) -> Result<(), FileSinkError> {
        let Some(avro) = &self.avro else {
            return Ok(());
        };
        if open.block_count == 0 {
            return Ok(());
        }
        let path = self.config.dir.join(&open.in_progress);
        let block = avro
            .block(open.block_count, &open.block)
            .map_err(|m| FileSinkError::Write {
                path: path.clone(),
                source: std::io::Error::other(m),
            })?;
        open.file
            .write_all(&block)
            .map_err(|source| FileSinkError::Write { path, source })?;
        open.bytes += block.len() as u64;
        open.block.clear();
        open.block_count = 0;
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
