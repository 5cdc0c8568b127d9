//! Committing a checkpoint's files by renaming them, and a recovery's leftovers: finished,
//! cut back to their last complete record, or deleted; the directory's fsyncs.

use super::*;
use super::names::in_progress_name;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, ErrorKind, Read};
use std::path::Path;
use tracing::{debug, warn};

/// Creates `dir` and makes each new level durable in its parent (a crash must not take the
/// directory, and the committed files in it, away).
pub(super) fn create_dir(dir: &Path) -> Result<(), FileSinkError> {
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


/// The file's metadata, None when it does not exist (a symlink is not followed).
pub(super) fn metadata(path: &Path) -> Result<Option<Metadata>, FileSinkError> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileSinkError::Inspect {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), FileSinkError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|source| FileSinkError::Sync {
            path: dir.to_path_buf(),
            source,
        })
}

pub(super) fn rename(dir: &Path, file: &PendingFile) -> Result<(), FileSinkError> {
    let from = dir.join(&file.in_progress);
    let to = dir.join(&file.finished);
    fs::rename(&from, &to).map_err(|source| FileSinkError::Rename { from, to, source })
}

/// A pending file's names must be the pair this sink makes, in the directory itself: a
/// damaged record must not rename files elsewhere.
pub(super) fn check_names(pending: &PendingFiles, file: &PendingFile) -> Result<(), FileSinkError> {
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
pub(super) struct CommitCounts {
    pub(super) renamed: usize,
    pub(super) already: usize,
}

/// [`FileWriter::commit`] in `dir`: every file is checked before any is renamed.
pub(super) fn commit_in(dir: &Path, pending: &PendingFiles) -> Result<CommitCounts, FileSinkError> {
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
pub(super) fn finish_leftover(
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
pub(super) fn complete_records(file: &mut File, csv: bool) -> io::Result<(u64, u64)> {
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
