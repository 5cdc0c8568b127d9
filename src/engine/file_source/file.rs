//! [`FileSource`]: the files read line by line, the reordering buffer, the serving speed and
//! the position a checkpoint saves.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flate2::read::MultiGzDecoder;

use super::{
    delay_ms, serving_wait, step, BufferedLine, FilePosition, FileSourceConfig, FileSourceError,
    Next, FileRecord, Step,
};
use super::avro::AvroFile;
use super::Framing;
use crate::engine::formats::{LineFormat, ParsedLine};

/// The read buffer per file: large enough that a line rarely spans two refills.
const READ_BUFFER: usize = 64 * 1024;

/// When a due instant is too far to represent, the caller is told to come back after this
/// long (and is told again then): a factor that small means "never" in practice.
const FAR_WAIT: Duration = Duration::from_secs(3600);

/// A file read through this: plain (seekable) or a gzip decoder.
type Reader = Box<dyn BufRead + Send>;

/// A line in the reordering buffer, with what the format made of it: keeping the key and
/// value costs memory but parses every line once (a restore parses its buffer again).
struct Pending {
    line: BufferedLine,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
}

impl Pending {
    fn order(&self) -> (i64, u64) {
        (self.line.emit_at, self.line.seq)
    }
}

// Ordered by (emit_at, seq) alone; seq is unique, so this agrees with equality.
impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.order() == other.order()
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        self.order().cmp(&other.order())
    }
}

/// Where the reading is: the file (index into the listing), the byte offset and the line
/// number of the next line, and the open reader (None until the next read opens it there).
struct Cursor {
    index: usize,
    offset: u64,
    line: u64,
    /// In an Avro container file: the records of the block at `offset` already read.
    in_block: u64,
    reader: Option<Reader>,
    /// The open Avro container file (with [`Framing::AvroContainer`]); boxed, as it holds the
    /// file's schema and read buffer.
    avro: Option<Box<AvroFile>>,
}

impl Cursor {
    /// The start of file `index`.
    fn start(index: usize) -> Cursor {
        Cursor {
            index,
            offset: 0,
            line: 1,
            in_block: 0,
            reader: None,
            avro: None,
        }
    }
}

/// A line read, not yet parsed.
struct RawLine {
    file: String,
    line: u64,
    text: String,
}

/// The files, listed once at open, and the cursor through them.
struct Input {
    /// `source.path`.
    root: PathBuf,
    /// Whether `root` is a directory (else the one file in `files` is `root` itself).
    is_dir: bool,
    /// The names to read, in order; never empty unless `done`.
    files: Vec<String>,
    cursor: Cursor,
    /// Whether a line was read (or a position restored): the position names a file.
    started: bool,
    /// Every file was read to its end.
    done: bool,
    /// How the files hold their records.
    framing: Framing,
}

impl Input {
    /// Lists `root`: the file itself, or the directory's regular, non-hidden files by name.
    fn list(root: &Path, framing: Framing) -> Result<Input, FileSourceError> {
        let shown = root.display().to_string();
        let meta = fs::metadata(root).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => FileSourceError::PathMissing {
                path: shown.clone(),
            },
            _ => io_error("reading", &shown, e),
        })?;
        let (is_dir, files) = if meta.is_file() {
            let name = root.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
                FileSourceError::NonUtf8Name {
                    path: shown.clone(),
                }
            })?;
            (false, vec![name.to_owned()])
        } else if meta.is_dir() {
            (true, list_directory(root)?)
        } else {
            return Err(FileSourceError::NotFileOrDirectory { path: shown });
        };
        if files.is_empty() {
            return Err(FileSourceError::EmptyDirectory { path: shown });
        }
        Ok(Input {
            root: root.to_path_buf(),
            is_dir,
            files,
            cursor: Cursor::start(0),
            started: false,
            done: false,
            framing,
        })
    }

    /// An input with nothing left to read, for a restored position that had finished: the
    /// files need not exist any more.
    fn finished(root: &Path, position: &FilePosition, framing: Framing) -> Input {
        Input {
            root: root.to_path_buf(),
            is_dir: false,
            files: position.file.iter().cloned().collect(),
            cursor: Cursor {
                offset: position.offset,
                line: position.line,
                in_block: position.in_block,
                ..Cursor::start(0)
            },
            started: position.file.is_some(),
            done: true,
            framing,
        }
    }

    fn path_of(&self, name: &str) -> PathBuf {
        if self.is_dir {
            self.root.join(name)
        } else {
            self.root.clone()
        }
    }

    /// How errors name a file: its path as configured.
    fn display(&self, name: &str) -> String {
        self.path_of(name).display().to_string()
    }

    /// Moves the cursor to `name` at `offset` (a restored position) and opens the file there
    /// now, so a file that changed is reported by open rather than by the first read.
    fn restore(&mut self, name: &str, position: &FilePosition) -> Result<(), FileSourceError> {
        let index = self.files.iter().position(|f| f == name).ok_or_else(|| {
            FileSourceError::CheckpointFileGone {
                file: name.to_owned(),
                path: self.root.display().to_string(),
            }
        })?;
        let (path, shown) = (self.path_of(name), self.display(name));
        let (offset, in_block) = (position.offset, position.in_block);
        self.cursor = Cursor {
            offset,
            line: position.line,
            in_block,
            ..Cursor::start(index)
        };
        match self.framing {
            Framing::Lines => {
                self.cursor.reader = Some(open_at(&path, &shown, name, offset)?);
            }
            Framing::AvroContainer => {
                self.cursor.avro = Some(Box::new(AvroFile::open(&path, &shown, offset, in_block)?));
            }
        }
        self.started = true;
        Ok(())
    }

    /// The next record of the Avro container files, as its plain JSON text, or None once every
    /// file was read to its end. The cursor's offset is the block of the next record.
    fn read_avro_record(&mut self) -> Result<Option<RawLine>, FileSourceError> {
        while !self.done {
            self.started = true;
            let Some(name) = self.files.get(self.cursor.index).cloned() else {
                self.done = true;
                break;
            };
            let avro = match self.cursor.avro.take() {
                Some(avro) => avro,
                None => Box::new(AvroFile::open(
                    &self.path_of(&name),
                    &self.display(&name),
                    self.cursor.offset,
                    self.cursor.in_block,
                )?),
            };
            let avro = self.cursor.avro.insert(avro);
            let Some(text) = avro.next()? else {
                (self.cursor.offset, self.cursor.in_block) = avro.position();
                if self.cursor.index + 1 < self.files.len() {
                    tracing::debug!(file = %name, records = self.cursor.line - 1, "file source: file read");
                    self.cursor = Cursor::start(self.cursor.index + 1);
                } else {
                    // Keep the cursor at the last file's end: that is the position to save.
                    self.cursor.avro = None;
                    self.done = true;
                }
                continue;
            };
            (self.cursor.offset, self.cursor.in_block) = avro.position();
            let line = self.cursor.line;
            self.cursor.line += 1;
            return Ok(Some(RawLine {
                file: name,
                line,
                text,
            }));
        }
        Ok(None)
    }

    /// The first line of file `name` (without its terminator), None for an empty file.
    fn first_line(&self, name: &str) -> Result<Option<String>, FileSourceError> {
        let shown = self.display(name);
        let mut reader = open_at(&self.path_of(name), &shown, name, 0)?;
        let mut bytes = Vec::new();
        reader
            .read_until(b'\n', &mut bytes)
            .map_err(|e| io_error("reading line 1 of", &shown, e))?;
        if bytes.is_empty() {
            return Ok(None);
        }
        strip_terminator(&mut bytes);
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| FileSourceError::InvalidUtf8 { file: shown, line: 1 })
    }

    /// The next line of the input, or None once every file was read to its end.
    fn read_line(&mut self) -> Result<Option<RawLine>, FileSourceError> {
        if self.framing == Framing::AvroContainer {
            return self.read_avro_record();
        }
        while !self.done {
            self.started = true;
            let Some(name) = self.files.get(self.cursor.index).cloned() else {
                self.done = true;
                break;
            };
            let reader = match self.cursor.reader.take() {
                Some(reader) => reader,
                None => open_at(
                    &self.path_of(&name),
                    &self.display(&name),
                    &name,
                    self.cursor.offset,
                )?,
            };
            let reader = self.cursor.reader.insert(reader);
            let mut bytes = Vec::new();
            let read = reader.read_until(b'\n', &mut bytes).map_err(|e| {
                io_error(
                    &format!("reading line {} of", self.cursor.line),
                    &self.display(&name),
                    e,
                )
            })?;
            if read == 0 {
                if self.cursor.index + 1 < self.files.len() {
                    tracing::debug!(file = %name, lines = self.cursor.line - 1, "file source: file read");
                    self.cursor = Cursor::start(self.cursor.index + 1);
                } else {
                    // Keep the cursor at the last file's end: that is the position to save.
                    self.cursor.reader = None;
                    self.done = true;
                }
                continue;
            }
            let line = self.cursor.line;
            self.cursor.offset += read as u64;
            self.cursor.line += 1;
            strip_terminator(&mut bytes);
            let text = String::from_utf8(bytes).map_err(|_| FileSourceError::InvalidUtf8 {
                file: self.display(&name),
                line,
            })?;
            return Ok(Some(RawLine {
                file: name,
                line,
                text,
            }));
        }
        Ok(None)
    }
}

/// Removes a line's `\n` or `\r\n`.
fn strip_terminator(bytes: &mut Vec<u8>) {
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
}

/// The regular (symbolic links followed), non-hidden files of `dir`, sorted by name.
fn list_directory(dir: &Path) -> Result<Vec<String>, FileSourceError> {
    let shown = dir.display().to_string();
    let entries = fs::read_dir(dir).map_err(|e| io_error("listing", &shown, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error("listing", &shown, e))?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => {}
            Ok(_) => continue,
            // A dangling link, or a file removed while listing: nothing to read.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tracing::warn!(path = %path.display(), "file source: skipping a dangling entry");
                continue;
            }
            Err(e) => return Err(io_error("reading", &path.display().to_string(), e)),
        }
        // Skipping a file whose name is not text would silently drop its records.
        let name = name
            .into_string()
            .map_err(|_| FileSourceError::NonUtf8Name {
                path: path.display().to_string(),
            })?;
        names.push(name);
    }
    names.sort();
    Ok(names)
}

/// Whether a file is read as gzip: by its name.
fn is_gzip(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".gz")
}

/// Opens `path` positioned at byte `offset` of its decompressed text, checking the offset is
/// a line boundary: the byte before it is `\n`, or it is 0, or it is the end of the text (a
/// final line without `\n`).
///
/// A plain file seeks. A gzip stream cannot: it is decompressed from the start and `offset`
/// bytes are discarded, so restoring deep into a large gzip file costs the time to decompress
/// that far (hundreds of MB/s; a few seconds for a file of a few hundred MB).
///
/// # Errors
/// [`FileSourceError::CheckpointBeyondEnd`], [`FileSourceError::NotLineBoundary`], or
/// [`FileSourceError::Io`].
fn open_at(path: &Path, shown: &str, name: &str, offset: u64) -> Result<Reader, FileSourceError> {
    let mut file = File::open(path).map_err(|e| io_error("opening", shown, e))?;
    let seek_error = |e| io_error(&format!("seeking to byte {offset} of"), shown, e);
    if is_gzip(name) {
        let mut reader: Reader = Box::new(BufReader::with_capacity(
            READ_BUFFER,
            MultiGzDecoder::new(file),
        ));
        if offset > 0 {
            let want = offset - 1;
            let skipped =
                io::copy(&mut (&mut reader).take(want), &mut io::sink()).map_err(seek_error)?;
            if skipped < want {
                return Err(FileSourceError::CheckpointBeyondEnd {
                    file: shown.to_owned(),
                    offset,
                    len: skipped,
                });
            }
            check_boundary(&mut reader, shown, offset)?;
        }
        Ok(reader)
    } else {
        let len = file
            .metadata()
            .map_err(|e| io_error("reading", shown, e))?
            .len();
        if offset > len {
            return Err(FileSourceError::CheckpointBeyondEnd {
                file: shown.to_owned(),
                offset,
                len,
            });
        }
        if offset > 0 {
            file.seek(SeekFrom::Start(offset - 1)).map_err(seek_error)?;
        }
        let mut reader: Reader = Box::new(BufReader::with_capacity(READ_BUFFER, file));
        if offset > 0 {
            check_boundary(&mut reader, shown, offset)?;
        }
        Ok(reader)
    }
}

/// Reads the byte before `offset` (the reader is there) and checks the offset starts a line.
fn check_boundary(reader: &mut Reader, shown: &str, offset: u64) -> Result<(), FileSourceError> {
    let seek_error = |e| io_error(&format!("seeking to byte {offset} of"), shown, e);
    let mut byte = [0u8; 1];
    if let Err(e) = reader.read_exact(&mut byte) {
        return Err(match e.kind() {
            io::ErrorKind::UnexpectedEof => FileSourceError::CheckpointBeyondEnd {
                file: shown.to_owned(),
                offset,
                len: offset - 1,
            },
            _ => seek_error(e),
        });
    }
    if byte[0] == b'\n' || reader.fill_buf().map_err(seek_error)?.is_empty() {
        return Ok(());
    }
    Err(FileSourceError::NotLineBoundary {
        file: shown.to_owned(),
        offset,
    })
}

fn io_error(action: &str, path: &str, source: io::Error) -> FileSourceError {
    FileSourceError::Io {
        action: action.to_owned(),
        path: path.to_owned(),
        source,
    }
}

/// A checkpointed file source: see the [module documentation](super).
pub struct FileSource {
    format: Arc<dyn LineFormat>,
    serving_speed_factor: f64,
    max_delay_ms: i64,
    skip_header: bool,
    input: Input,
    /// The reordering buffer: a min-heap by (emit_at, seq). It holds only what max_delay
    /// requires: lines whose emit_at is beyond the largest event time read, i.e. those within
    /// max_delay of it (see `step`), whatever the file's size.
    heap: BinaryHeap<Reverse<Pending>>,
    next_seq: u64,
    max_event_time: Option<i64>,
    finished: bool,
    /// (wall clock, emit_at) of the first record emitted since open: the serving speed's
    /// origin. Not checkpointed: a restore re-anchors, as Flink's source does.
    anchor: Option<(Instant, i64)>,
}

impl fmt::Debug for FileSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSource")
            .field("path", &self.input.root)
            .field("files", &self.input.files.len())
            .field("file_index", &self.input.cursor.index)
            .field("offset", &self.input.cursor.offset)
            .field("buffered", &self.heap.len())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl FileSource {
    /// Opens the source: lists `config.path` (a directory's listing is taken now; files added
    /// later are not read) and, with `from`, continues after the position: files named before
    /// its file are done, its file is opened at its offset, its buffered lines are parsed again.
    ///
    /// # Errors
    /// [`FileSourceError::Setting`] for a negative or non-finite serving speed or a max_delay
    /// beyond i64 milliseconds; [`FileSourceError::PathMissing`],
    /// [`FileSourceError::NotFileOrDirectory`], [`FileSourceError::EmptyDirectory`],
    /// [`FileSourceError::NonUtf8Name`]; restoring, [`FileSourceError::CheckpointFileGone`],
    /// [`FileSourceError::CheckpointBeyondEnd`], [`FileSourceError::NotLineBoundary`], or
    /// [`FileSourceError::Parse`] for a buffered line the format now rejects,
    /// [`FileSourceError::Container`] for an Avro container file that is not one or not at the
    /// checkpoint's block; [`FileSourceError::Io`].
    pub fn open(
        config: FileSourceConfig,
        format: Arc<dyn LineFormat>,
        from: Option<FilePosition>,
    ) -> Result<FileSource, FileSourceError> {
        let factor = config.serving_speed_factor;
        if !(factor.is_finite() && factor >= 0.0) {
            return Err(FileSourceError::Setting {
                field: "source.serving_speed_factor",
                message: format!(
                    "must be 0 (as fast as possible) or a positive number of event-time seconds per second, got {factor}"
                ),
            });
        }
        let max_delay_ms = i64::try_from(config.max_delay.as_millis()).map_err(|_| {
            FileSourceError::Setting {
                field: "source.max_delay",
                message: format!(
                    "{:?} is beyond what event times (i64 milliseconds) can hold: set a smaller bound",
                    config.max_delay
                ),
            }
        })?;
        let finished = from.as_ref().is_some_and(|p| p.finished);
        let input = if let Some(position) = from.as_ref().filter(|p| p.finished) {
            Input::finished(&config.path, position, config.framing)
        } else {
            Input::list(&config.path, config.framing)?
        };
        let mut source = FileSource {
            format,
            serving_speed_factor: factor,
            max_delay_ms,
            skip_header: config.skip_header,
            input,
            heap: BinaryHeap::new(),
            next_seq: 0,
            max_event_time: None,
            finished,
            anchor: None,
        };
        if let Some(position) = from {
            source.restore(position)?;
        }
        tracing::info!(
            path = %config.path.display(),
            files = source.input.files.len(),
            restored = source.input.started,
            buffered = source.heap.len(),
            finished = source.finished,
            "file source opened"
        );
        Ok(source)
    }

    fn restore(&mut self, position: FilePosition) -> Result<(), FileSourceError> {
        self.next_seq = position.next_seq;
        self.max_event_time = position.max_event_time;
        if position.finished {
            return Ok(());
        }
        if let Some(name) = &position.file {
            self.input.restore(name, &position)?;
            if self.format.has_header() {
                // The format learns or checks its columns from a header: it sees the restored
                // file's again before parsing the buffered lines (every file's is the same).
                if let Some(header) = self.input.first_line(name)? {
                    self.check_header(name, &header)?;
                }
            }
        }
        for line in position.buffered {
            // The key and value come from parsing again; the event time and emit_at are the
            // saved ones, so the order stays the checkpointed one.
            let parsed =
                self.format
                    .parse(&line.text)
                    .map_err(|message| FileSourceError::Parse {
                        file: self.input.display(&line.file),
                        line: line.line,
                        message,
                    })?;
            self.heap.push(Reverse(Pending {
                line,
                key: parsed.key,
                value: parsed.value,
            }));
        }
        Ok(())
    }

    /// The next record due now; [`Next::NotBefore`] when the serving speed says the next is
    /// due at that instant (the caller waits, reading its control messages meanwhile, and
    /// calls again); [`Next::End`] once everything was emitted.
    ///
    /// # Errors
    /// [`FileSourceError::Parse`] for a line the format rejects,
    /// [`FileSourceError::InvalidUtf8`], [`FileSourceError::Io`]. The source cannot go on
    /// after an error: restore it from the last checkpoint.
    // Not an Iterator: it fails, and "not yet" (NotBefore) is neither an item nor the end.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Next, FileSourceError> {
        self.next_at(Instant::now())
    }

    /// [`next`](Self::next) with the wall clock given, for tests of the serving speed.
    fn next_at(&mut self, now: Instant) -> Result<Next, FileSourceError> {
        if self.finished {
            return Ok(Next::End);
        }
        loop {
            let head = self.heap.peek().map(|Reverse(p)| p.line.emit_at);
            match step(head, self.max_event_time, self.input.done) {
                Step::Read => self.read_one()?,
                Step::End => {
                    self.finished = true;
                    tracing::info!(path = %self.input.root.display(), "file source: every line emitted");
                    return Ok(Next::End);
                }
                Step::Emit(emit_at) => {
                    if let Some(due) = self.not_due_until(emit_at, now) {
                        return Ok(Next::NotBefore(due));
                    }
                    if let Some(Reverse(p)) = self.heap.pop() {
                        return Ok(Next::Record(FileRecord {
                            key: p.key,
                            value: p.value,
                            event_time: p.line.event_time,
                            file: p.line.file,
                            line: p.line.line,
                        }));
                    }
                }
            }
        }
    }

    /// When a record of `emit_at` is due if that is later than `now`; anchors on the first.
    fn not_due_until(&mut self, emit_at: i64, now: Instant) -> Option<Instant> {
        if self.serving_speed_factor <= 0.0 {
            return None;
        }
        let Some((wall, anchor_emit_at)) = self.anchor else {
            self.anchor = Some((now, emit_at));
            return None;
        };
        let wait = serving_wait(anchor_emit_at, emit_at, self.serving_speed_factor);
        let due = wall
            .checked_add(wait)
            .or_else(|| now.checked_add(FAR_WAIT))
            .unwrap_or(now);
        (now < due).then_some(due)
    }

    /// Reads one line into the buffer (or skips a header, or finds the input's end).
    fn read_one(&mut self) -> Result<(), FileSourceError> {
        let Some(raw) = self.input.read_line()? else {
            return Ok(());
        };
        if raw.line == 1 && self.format.has_header() {
            return self.check_header(&raw.file, &raw.text);
        }
        match self.format.parse(&raw.text) {
            Ok(parsed) => {
                self.push(raw, parsed);
                Ok(())
            }
            Err(message) if self.skip_header && raw.line == 1 => {
                tracing::debug!(file = %raw.file, %message, "file source: skipping a header line");
                Ok(())
            }
            Err(message) => Err(FileSourceError::Parse {
                file: self.input.display(&raw.file),
                line: raw.line,
                message,
            }),
        }
    }

    /// A file's header line, checked by the format.
    fn check_header(&self, file: &str, header: &str) -> Result<(), FileSourceError> {
        self.format
            .check_header(header)
            .map_err(|message| FileSourceError::Parse {
                file: self.input.display(file),
                line: 1,
                message,
            })
    }

    fn push(&mut self, raw: RawLine, parsed: ParsedLine) {
        let emit_at = parsed
            .event_time
            .saturating_add(delay_ms(&raw.text, self.max_delay_ms));
        let seq = self.next_seq;
        self.next_seq += 1;
        self.max_event_time = Some(
            self.max_event_time
                .map_or(parsed.event_time, |m| m.max(parsed.event_time)),
        );
        self.heap.push(Reverse(Pending {
            line: BufferedLine {
                text: raw.text,
                event_time: parsed.event_time,
                emit_at,
                seq,
                file: raw.file,
                line: raw.line,
            },
            key: parsed.key,
            value: parsed.value,
        }));
    }

    /// The position after the last record [`next`](Self::next) returned: saving it and
    /// opening with it later emits exactly the records not yet returned, in the same order
    /// (as long as the files are unchanged and the format parses the same).
    pub fn position(&self) -> FilePosition {
        let (file, offset, line, in_block) = if self.input.started {
            let cursor = &self.input.cursor;
            (
                self.input.files.get(cursor.index).cloned(),
                cursor.offset,
                cursor.line,
                cursor.in_block,
            )
        } else {
            (None, 0, 0, 0)
        };
        let mut buffered: Vec<BufferedLine> =
            self.heap.iter().map(|Reverse(p)| p.line.clone()).collect();
        buffered.sort_by_key(|b| (b.emit_at, b.seq));
        FilePosition {
            file,
            offset,
            line,
            buffered,
            next_seq: self.next_seq,
            max_event_time: self.max_event_time,
            finished: self.finished,
            in_block,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// `<event_time_ms>,<payload>`; the payload is both key and value.
    struct TestFormat;

    impl LineFormat for TestFormat {
        fn parse(&self, line: &str) -> Result<ParsedLine, String> {
            let (time, payload) = line
                .split_once(',')
                .ok_or_else(|| format!("expected <event_time_ms>,<payload>, got {line:?}"))?;
            let event_time = time
                .parse::<i64>()
                .map_err(|e| format!("event time {time:?}: {e}"))?;
            Ok(ParsedLine {
                key: Some(payload.as_bytes().to_vec()),
                value: payload.as_bytes().to_vec(),
                event_time,
            })
        }
    }

    fn config(path: &Path, max_delay_ms: u64) -> FileSourceConfig {
        FileSourceConfig {
            path: path.to_path_buf(),
            serving_speed_factor: 0.0,
            max_delay: Duration::from_millis(max_delay_ms),
            skip_header: false,
            framing: Framing::Lines,
        }
    }

    fn open(config: FileSourceConfig, from: Option<FilePosition>) -> FileSource {
        match FileSource::open(config, Arc::new(TestFormat), from) {
            Ok(source) => source,
            Err(e) => panic!("open: {e}"),
        }
    }

    fn open_err(config: FileSourceConfig, from: Option<FilePosition>) -> FileSourceError {
        match FileSource::open(config, Arc::new(TestFormat), from) {
            Ok(source) => panic!("opened {source:?}"),
            Err(e) => e,
        }
    }

    /// `n` lines 10 ms apart; with `disorder`, some are up to 12 ms early (a file that is
    /// itself out of order, as many real files of events are).
    fn lines(n: u64, disorder: bool) -> Vec<String> {
        lines_early_by(n, if disorder { 3 } else { 0 })
    }

    /// `n` lines 10 ms apart, some up to 4 × `step` ms early.
    fn lines_early_by(n: u64, step: i64) -> Vec<String> {
        (0..n)
            .map(|i| {
                let jitter = (i * 7 % 5) as i64 * step;
                format!("{},r{i}", 1_000_000 + 10 * i as i64 - jitter)
            })
            .collect()
    }

    /// Writes `lines` joined by `eol`, with `eol` after the last when `final_eol`.
    fn write_plain(path: &Path, lines: &[String], eol: &str, final_eol: bool) {
        let mut text = lines.join(eol);
        if final_eol {
            text.push_str(eol);
        }
        fs::write(path, text).unwrap();
    }

    /// Writes `lines` as gzip, split into `members` concatenated gzip members.
    fn write_gzip(path: &Path, lines: &[String], members: usize) {
        let mut out = Vec::new();
        let per = lines.len().div_ceil(members.max(1)).max(1);
        for chunk in lines.chunks(per) {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            for line in chunk {
                gz.write_all(line.as_bytes()).unwrap();
                gz.write_all(b"\n").unwrap();
            }
            out.extend(gz.finish().unwrap());
        }
        fs::write(path, out).unwrap();
    }

    /// Reads up to `limit` records (factor 0: never told to wait).
    fn take(source: &mut FileSource, limit: usize) -> Vec<FileRecord> {
        let mut out = Vec::new();
        while out.len() < limit {
            match source.next().unwrap() {
                Next::Record(r) => out.push(r),
                Next::End => break,
                Next::NotBefore(t) => panic!("told to wait until {t:?} at factor 0"),
            }
        }
        out
    }

    fn all(source: &mut FileSource) -> Vec<FileRecord> {
        take(source, usize::MAX)
    }

    /// What a record says of its line: (event time, payload, file, line).
    fn summary(records: &[FileRecord]) -> Vec<(i64, String, String, u64)> {
        records
            .iter()
            .map(|r| {
                assert_eq!(r.key.as_deref(), Some(&r.value[..]));
                (
                    r.event_time,
                    String::from_utf8(r.value.clone()).unwrap(),
                    r.file.clone(),
                    r.line,
                )
            })
            .collect()
    }

    /// (event time, payload) of the lines, in file order.
    fn expected(lines: &[String]) -> Vec<(i64, String)> {
        lines
            .iter()
            .map(|l| {
                let (t, p) = l.split_once(',').unwrap();
                (t.parse().unwrap(), p.to_owned())
            })
            .collect()
    }

    fn events(records: &[FileRecord]) -> Vec<(i64, String)> {
        summary(records)
            .into_iter()
            .map(|(t, p, _, _)| (t, p))
            .collect()
    }

    #[test]
    fn file_source_is_send() {
        fn send<T: Send>() {}
        send::<FileSource>();
    }

    #[test]
    fn plain_and_gzip_files_give_the_same_records() {
        let dir = tempfile::tempdir().unwrap();
        let input = lines(40, true);
        let plain = dir.path().join("rides.csv");
        let crlf = dir.path().join("rides-crlf.csv");
        let gzip = dir.path().join("rides.csv.gz");
        write_plain(&plain, &input, "\n", true);
        // '\r\n' accepted, and a final line without a terminator still counts.
        write_plain(&crlf, &input, "\r\n", false);
        write_gzip(&gzip, &input, 3);
        for max_delay in [0, 25] {
            let from_plain = all(&mut open(config(&plain, max_delay), None));
            let from_crlf = all(&mut open(config(&crlf, max_delay), None));
            let from_gzip = all(&mut open(config(&gzip, max_delay), None));
            assert_eq!(from_plain.len(), input.len());
            let strip = |s: &[FileRecord]| {
                summary(s)
                    .into_iter()
                    .map(|(t, p, _, line)| (t, p, line))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                strip(&from_plain),
                strip(&from_crlf),
                "max_delay {max_delay}"
            );
            assert_eq!(
                strip(&from_plain),
                strip(&from_gzip),
                "max_delay {max_delay}"
            );
            assert!(from_gzip.iter().all(|r| r.file == "rides.csv.gz"));
            assert!(from_plain.iter().all(|r| r.file == "rides.csv"));
        }
    }

    #[test]
    fn a_directory_is_read_in_name_order_without_hidden_files_and_subdirectories() {
        let dir = tempfile::tempdir().unwrap();
        let input = lines(30, false);
        write_plain(&dir.path().join("b.csv"), &input[10..20], "\n", true);
        write_gzip(&dir.path().join("a.csv.gz"), &input[..10], 1);
        write_plain(&dir.path().join("c.csv"), &input[20..], "\n", false);
        write_plain(
            &dir.path().join(".hidden.csv"),
            &lines(3, false),
            "\n",
            true,
        );
        fs::create_dir(dir.path().join("b-sub")).unwrap();
        write_plain(
            &dir.path().join("b-sub/x.csv"),
            &lines(3, false),
            "\n",
            true,
        );
        let records = all(&mut open(config(dir.path(), 0), None));
        assert_eq!(events(&records), expected(&input));
        let files: Vec<(String, u64)> = records.iter().map(|r| (r.file.clone(), r.line)).collect();
        assert_eq!(files[0], ("a.csv.gz".to_owned(), 1));
        assert_eq!(files[10], ("b.csv".to_owned(), 1));
        assert_eq!(files[29], ("c.csv".to_owned(), 10));
    }

    #[test]
    fn max_delay_zero_keeps_file_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rides.csv");
        let input = lines(200, true);
        write_plain(&path, &input, "\n", true);
        let records = all(&mut open(config(&path, 0), None));
        assert_eq!(events(&records), expected(&input));
        let numbers: Vec<u64> = records.iter().map(|r| r.line).collect();
        assert_eq!(numbers, (1..=200).collect::<Vec<_>>());
    }

    #[test]
    fn with_max_delay_the_output_is_a_permutation_out_of_order_by_at_most_max_delay_and_the_same_every_run(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rides.csv");
        let input = lines(500, false);
        write_plain(&path, &input, "\n", true);
        let max_delay = 50;
        let first = all(&mut open(config(&path, max_delay), None));
        let second = all(&mut open(config(&path, max_delay), None));
        assert_eq!(first, second);
        let mut sorted = events(&first);
        sorted.sort();
        assert_eq!(sorted, expected(&input));
        let mut latest = first[0].event_time;
        let mut disordered = 0;
        for r in &first {
            assert!(
                r.event_time >= latest - max_delay as i64,
                "{} after {latest}",
                r.event_time
            );
            if r.event_time < latest {
                disordered += 1;
            }
            latest = latest.max(r.event_time);
        }
        assert!(disordered > 50, "only {disordered} records out of order");
    }

    /// The buffer holds only the lines within max_delay of the newest event read.
    #[test]
    fn the_buffer_holds_only_what_max_delay_requires() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rides.csv");
        write_plain(&path, &lines(1000, false), "\n", true);
        let mut source = open(config(&path, 100), None);
        let mut most = 0;
        while let Next::Record(_) = source.next().unwrap() {
            let position = source.position();
            most = most.max(position.buffered.len());
            // Before the last line read, every buffered line was within max_delay of the
            // newest event; that line moved the newest on by one step (10 ms).
            let newest = position.max_event_time.unwrap();
            assert!(position
                .buffered
                .iter()
                .all(|b| b.event_time > newest - 110));
        }
        // Events 10 ms apart, 100 ms of delay: at most 10 lines, plus the one just read.
        assert!(most <= 11, "{most}");
    }

    /// Reads `cut` records, saves the position through JSON, restores and reads the rest.
    fn cut_and_restore(config: &FileSourceConfig, cut: usize) -> (FilePosition, Vec<FileRecord>) {
        let mut source = open(config.clone(), None);
        let mut records = take(&mut source, cut);
        let position = source.position();
        let json = serde_json::to_string(&position).unwrap();
        let restored: FilePosition = serde_json::from_str(&json).unwrap();
        assert_eq!(restored, position);
        drop(source);
        records.extend(all(&mut open(config.clone(), Some(restored))));
        (position, records)
    }

    #[test]
    fn a_restore_from_any_cut_point_emits_the_rest_exactly_once_in_the_same_order() {
        let dir = tempfile::tempdir().unwrap();
        let input = lines(60, true);
        let plain = dir.path().join("rides.csv");
        let gzip = dir.path().join("rides.csv.gz");
        write_plain(&plain, &input, "\n", true);
        write_gzip(&gzip, &input, 2);
        let len = fs::metadata(&plain).unwrap().len();
        for path in [&plain, &gzip] {
            let config = config(path, 35);
            let full = all(&mut open(config.clone(), None));
            assert_eq!(full.len(), input.len());
            let (mut mid_file, mut after_last_line) = (0, 0);
            for cut in 0..=full.len() + 1 {
                let (position, records) = cut_and_restore(&config, cut);
                assert_eq!(records, full, "{} cut after {cut}", path.display());
                if !position.buffered.is_empty() {
                    if position.offset < len {
                        mid_file += 1;
                    } else {
                        after_last_line += 1;
                    }
                }
            }
            // The cuts covered both phases: buffer full while reading, and after the last line.
            assert!(
                mid_file > 10 && after_last_line > 0,
                "{mid_file} {after_last_line}"
            );
        }
    }

    /// A file far more out of order than max_delay: the newest event read is often already
    /// emitted, so a restore needs the saved largest event time, not the buffer's.
    #[test]
    fn a_restore_of_a_file_out_of_order_beyond_max_delay_keeps_the_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rides.csv");
        write_plain(&path, &lines_early_by(80, 12), "\n", true);
        let config = config(&path, 5);
        let full = all(&mut open(config.clone(), None));
        let mut newest_not_buffered = 0;
        for cut in 0..=full.len() {
            let (position, records) = cut_and_restore(&config, cut);
            assert_eq!(records, full, "cut after {cut}");
            let buffered_max = position.buffered.iter().map(|b| b.event_time).max();
            // None (nothing buffered) < Some: the newest line read was emitted too.
            if buffered_max < position.max_event_time {
                newest_not_buffered += 1;
            }
        }
        assert!(newest_not_buffered > 5, "{newest_not_buffered}");
    }

    #[test]
    fn a_restore_across_files_of_a_directory_emits_the_rest_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let input = lines(45, true);
        write_gzip(&dir.path().join("1.csv.gz"), &input[..15], 1);
        write_plain(&dir.path().join("2.csv"), &input[15..30], "\r\n", false);
        write_plain(&dir.path().join("3.csv"), &input[30..], "\n", true);
        let config = config(dir.path(), 35);
        let full = all(&mut open(config.clone(), None));
        let mut files_at_cut = std::collections::BTreeSet::new();
        for cut in 0..=full.len() {
            let (position, records) = cut_and_restore(&config, cut);
            assert_eq!(records, full, "cut after {cut}");
            files_at_cut.insert(position.file);
        }
        assert_eq!(files_at_cut.len(), 4, "{files_at_cut:?}");
    }

    #[test]
    fn restoring_after_every_record_still_emits_each_record_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rides.csv.gz");
        write_gzip(&path, &lines(50, true), 1);
        let config = config(&path, 40);
        let full = all(&mut open(config.clone(), None));
        let mut records = Vec::new();
        let mut position = None;
        loop {
            let mut source = open(config.clone(), position.take());
            let got = take(&mut source, 1);
            position = Some(source.position());
            if got.is_empty() {
                break;
            }
            records.extend(got);
        }
        assert_eq!(records, full);
        let end = position.unwrap();
        assert!(end.finished && end.buffered.is_empty());
    }

    #[test]
    fn a_finished_position_restores_to_the_end_even_without_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rides.csv");
        write_plain(&path, &lines(5, false), "\n", true);
        let mut source = open(config(&path, 10), None);
        assert_eq!(source.position().file, None);
        assert_eq!(all(&mut source).len(), 5);
        let end = source.position();
        assert!(end.finished);
        assert_eq!(end.file.as_deref(), Some("rides.csv"));
        fs::remove_file(&path).unwrap();
        let mut restored = open(config(&path, 10), Some(end.clone()));
        assert_eq!(restored.next().unwrap(), Next::End);
        assert_eq!(restored.position(), end);
    }

    fn serving_config(path: &Path) -> FileSourceConfig {
        FileSourceConfig {
            serving_speed_factor: 1000.0,
            ..config(path, 0)
        }
    }

    fn record(next: Next) -> FileRecord {
        match next {
            Next::Record(r) => r,
            other => panic!("expected a record, got {other:?}"),
        }
    }

    #[test]
    fn at_serving_speed_a_record_is_due_its_event_time_distance_over_the_factor_after_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rides.csv");
        // One second of event time apart: 1 ms apart at factor 1000.
        write_plain(
            &path,
            &["0,a".into(), "1000,b".into(), "2000,c".into()],
            "\n",
            true,
        );
        let mut source = open(serving_config(&path), None);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(record(source.next_at(t0).unwrap()).event_time, 0);
        assert_eq!(source.next_at(t0).unwrap(), Next::NotBefore(t0 + ms(1)));
        let almost = t0 + Duration::from_micros(999);
        assert_eq!(source.next_at(almost).unwrap(), Next::NotBefore(t0 + ms(1)));
        // While waiting, the position still holds the record not yet returned.
        let waiting = source.position();
        assert_eq!(record(source.next_at(t0 + ms(1)).unwrap()).event_time, 1000);
        // Late calls do not shift the schedule: the anchor stays the first record.
        assert_eq!(
            source.next_at(t0 + ms(1)).unwrap(),
            Next::NotBefore(t0 + ms(2))
        );
        assert_eq!(record(source.next_at(t0 + ms(5)).unwrap()).event_time, 2000);
        assert_eq!(source.next_at(t0 + ms(5)).unwrap(), Next::End);

        // A restore re-anchors on its first record: due at once, then 1 ms after it.
        let mut restored = open(serving_config(&path), Some(waiting));
        let t1 = t0 + ms(100);
        assert_eq!(record(restored.next_at(t1).unwrap()).event_time, 1000);
        assert_eq!(restored.next_at(t1).unwrap(), Next::NotBefore(t1 + ms(1)));
    }

    #[test]
    fn at_serving_speed_next_waits_on_the_real_clock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rides.csv");
        write_plain(&path, &["0,a".into(), "1000,b".into()], "\n", true);
        let mut source = open(serving_config(&path), None);
        let before = Instant::now();
        record(source.next().unwrap());
        let after = Instant::now();
        let ms = Duration::from_millis(1);
        // Whatever the machine's load, the due instant is 1 ms after the first record.
        loop {
            match source.next().unwrap() {
                Next::NotBefore(due) => {
                    assert!(before + ms <= due && due <= after + ms, "{due:?}");
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                }
                Next::Record(r) => {
                    assert_eq!(r.event_time, 1000);
                    assert!(Instant::now() >= before + ms);
                    break;
                }
                Next::End => panic!("ended early"),
            }
        }
    }

    #[test]
    fn a_rejected_first_line_is_skipped_as_a_header_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        write_plain(
            &dir.path().join("a.csv"),
            &["time,payload".into(), "5,x".into()],
            "\n",
            true,
        );
        write_gzip(
            &dir.path().join("b.csv.gz"),
            &["time,payload".into(), "6,y".into()],
            1,
        );
        let skipping = FileSourceConfig {
            skip_header: true,
            ..config(dir.path(), 0)
        };
        let records = all(&mut open(skipping.clone(), None));
        let lines: Vec<(String, u64)> = records.iter().map(|r| (r.file.clone(), r.line)).collect();
        assert_eq!(lines, [("a.csv".into(), 2), ("b.csv.gz".into(), 2)]);

        let mut strict = open(config(dir.path(), 0), None);
        let e = strict.next().unwrap_err();
        let a = dir.path().join("a.csv").display().to_string();
        assert_eq!(
            e.to_string(),
            format!("{a}:1: event time \"time\": invalid digit found in string")
        );

        // Only a first line: a rejected second line is an error even when skipping headers.
        write_plain(
            &dir.path().join("a.csv"),
            &["time,payload".into(), "oops".into()],
            "\n",
            true,
        );
        let mut source = open(skipping, None);
        let e = source.next().unwrap_err();
        assert!(matches!(e, FileSourceError::Parse { line: 2, .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("{a}:2: expected <event_time_ms>,<payload>, got \"oops\"")
        );
    }

    /// Restored at each position of an uninterrupted read (`whole`), a source opened by
    /// `open_with` emits exactly the records that read had left.
    fn restored_at_every_cut(
        whole: &[FileRecord],
        open_with: impl Fn(Option<FilePosition>) -> FileSource,
    ) {
        let want: Vec<&[u8]> = whole.iter().map(|r| &r.value[..]).collect();
        for cut in 0..=whole.len() {
            let mut first = open_with(None);
            let before = take(&mut first, cut);
            let position = first.position();
            let mut restored = open_with(Some(position.clone()));
            let after = all(&mut restored);
            let got: Vec<&[u8]> = before.iter().chain(&after).map(|r| &r.value[..]).collect();
            assert_eq!(got, want, "restored after {cut} records at {position:?}");
        }
    }

    /// The first error reading `source` gives (it must give one before its end).
    fn first_error(source: &mut FileSource) -> FileSourceError {
        loop {
            match source.next() {
                Ok(Next::End) => panic!("read to the end without an error"),
                Ok(_) => {}
                Err(e) => return e,
            }
        }
    }

    /// A format with a header (the engine's CSV reading its columns' names from it) sees each
    /// file's first line as a header, never as a record; restored in the middle of a file, at
    /// every position, it learns the names again from that file before parsing the buffered
    /// lines, and the records are those of an uninterrupted read.
    #[test]
    fn a_header_format_reads_each_files_header_first_also_after_a_restore() {
        use crate::engine::formats::CsvFormat;
        let dir = tempfile::tempdir().unwrap();
        let body = |from: u64| -> Vec<String> {
            let mut l = vec!["at,name".to_owned()];
            l.extend((from..from + 6).map(|i| format!("{},r{i}", 1_000 + 10 * i)));
            l
        };
        write_plain(&dir.path().join("a.csv"), &body(0), "\n", true);
        write_gzip(&dir.path().join("b.csv.gz"), &body(6), 2);
        let format = || -> Arc<dyn LineFormat> { Arc::new(CsvFormat::from_header("at").with_key("name").unwrap()) };
        let open_with = |from| FileSource::open(config(dir.path(), 25), format(), from).unwrap();
        let whole = all(&mut open_with(None));
        let names: Vec<String> = whole
            .iter()
            .map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort_by_key(|n| n[1..].parse::<u32>().unwrap());
        assert_eq!(sorted, (0..12).map(|i| format!("r{i}")).collect::<Vec<_>>());
        assert!(whole.iter().all(|r| r.line > 1));
        restored_at_every_cut(&whole, open_with);
        // Another file with other columns: named at its first line.
        write_plain(&dir.path().join("c.csv"), &["at,label".into(), "2000,x".into()], "\n", true);
        let e = first_error(&mut open_with(None));
        let c = dir.path().join("c.csv").display().to_string();
        assert_eq!(
            e.to_string(),
            format!("{c}:1: the header names the columns at, label, the first file's named at, name: every file needs the same columns")
        );
    }

    /// Avro container files (several blocks each, deflated or not) read record by record as
    /// plain JSON; restored at every position, the records are those of an uninterrupted
    /// read. A file that is not a container is named.
    #[test]
    fn avro_container_files_are_read_record_by_record_and_restored_anywhere() {
        use crate::engine::formats::JsonLinesFormat;
        use crate::schema::apache_avro::{types::Record, Codec, Schema, Writer};
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::parse_str(
            r#"{"type":"record","name":"E","fields":[{"name":"id","type":"string"},{"name":"at","type":"long"}]}"#,
        )
        .unwrap();
        for (f, codec) in [("a.avro", Codec::Null), ("b.avro", Codec::Deflate(Default::default()))] {
            let mut w = Writer::with_codec(&schema, Vec::new(), codec).unwrap();
            for i in 0..9i64 {
                let n = if f == "a.avro" { i } else { 9 + i };
                let mut r = Record::new(&schema).unwrap();
                r.put("id", format!("r{n}"));
                r.put("at", 1_000 + 10 * n - (n % 3) * 4);
                w.append_value(r).unwrap();
                if i % 4 == 3 {
                    w.flush().unwrap();
                }
            }
            fs::write(dir.path().join(f), w.into_inner().unwrap()).unwrap();
        }
        let avro = FileSourceConfig {
            framing: Framing::AvroContainer,
            ..config(dir.path(), 15)
        };
        let format = || -> Arc<dyn LineFormat> {
            Arc::new(JsonLinesFormat::new("at").unwrap().with_key("id").unwrap())
        };
        let open_with =
            |from| FileSource::open(avro.clone(), format(), from).unwrap();
        let whole = all(&mut open_with(None));
        let mut ids: Vec<String> = whole
            .iter()
            .map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap())
            .collect();
        assert_eq!(String::from_utf8(whole[0].value.clone()).unwrap(), r#"{"at":1000,"id":"r0"}"#);
        ids.sort_by_key(|n| n[1..].parse::<u32>().unwrap());
        assert_eq!(ids, (0..18).map(|i| format!("r{i}")).collect::<Vec<_>>());
        restored_at_every_cut(&whole, open_with);
        fs::write(dir.path().join("c.avro"), "id,at\n").unwrap();
        let e = first_error(&mut open_with(None));
        let c = dir.path().join("c.avro").display().to_string();
        assert_eq!(
            e.to_string(),
            format!("{c}: not an Avro container file (it does not start with Obj\\x01): write it with an Avro library's DataFileWriter, or read it with another format")
        );
    }

    #[test]
    fn opening_a_missing_path_or_an_empty_directory_fails() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.csv");
        let e = open_err(config(&missing, 0), None);
        assert!(matches!(e, FileSourceError::PathMissing { .. }), "{e:?}");
        assert!(e
            .to_string()
            .contains("set source.path to an existing file or directory"));
        assert!(e.to_string().contains(&missing.display().to_string()));

        write_plain(&dir.path().join(".hidden"), &lines(2, false), "\n", true);
        fs::create_dir(dir.path().join("sub")).unwrap();
        let e = open_err(config(dir.path(), 0), None);
        assert!(matches!(e, FileSourceError::EmptyDirectory { .. }), "{e:?}");

        for factor in [-1.0, f64::NAN, f64::INFINITY] {
            let bad = FileSourceConfig {
                serving_speed_factor: factor,
                ..config(dir.path(), 0)
            };
            let e = open_err(bad, None);
            assert!(
                matches!(
                    e,
                    FileSourceError::Setting {
                        field: "source.serving_speed_factor",
                        ..
                    }
                ),
                "{e:?}"
            );
        }
        let e = open_err(
            FileSourceConfig {
                max_delay: Duration::MAX,
                ..config(dir.path(), 0)
            },
            None,
        );
        assert!(
            matches!(
                e,
                FileSourceError::Setting {
                    field: "source.max_delay",
                    ..
                }
            ),
            "{e:?}"
        );
    }

    /// A position mid-file with lines buffered, of `path` (read with max_delay 30).
    fn position_in(path: &Path) -> FilePosition {
        let mut source = open(config(path, 30), None);
        take(&mut source, 10);
        let position = source.position();
        assert!(position.offset > 0 && !position.buffered.is_empty());
        position
    }

    #[test]
    fn restoring_fails_when_the_checkpoints_file_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        write_plain(&dir.path().join("a.csv"), &lines(30, false), "\n", true);
        write_plain(&dir.path().join("b.csv"), &lines(30, false), "\n", true);
        let position = position_in(dir.path());
        assert_eq!(position.file.as_deref(), Some("a.csv"));
        fs::remove_file(dir.path().join("a.csv")).unwrap();
        let e = open_err(config(dir.path(), 30), Some(position));
        assert!(
            matches!(e, FileSourceError::CheckpointFileGone { .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("a.csv"), "{e}");
    }

    #[test]
    fn restoring_fails_when_the_file_is_shorter_than_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["rides.csv", "rides.csv.gz"] {
            let path = dir.path().join(name);
            let input = lines(30, false);
            let write = |lines: &[String]| {
                if name.ends_with(".gz") {
                    write_gzip(&path, lines, 1);
                } else {
                    write_plain(&path, lines, "\n", true);
                }
            };
            write(&input);
            let position = position_in(&path);
            write(&input[..5]);
            let e = open_err(config(&path, 30), Some(position.clone()));
            match &e {
                FileSourceError::CheckpointBeyondEnd { offset, len, .. } => {
                    assert_eq!(*offset, position.offset);
                    assert_eq!(*len, 5 * 11, "{name}");
                }
                other => panic!("{name}: {other:?}"),
            }
            assert!(e.to_string().contains(name), "{e}");
        }
    }

    #[test]
    fn restoring_fails_when_the_offset_is_not_a_line_boundary() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["rides.csv", "rides.csv.gz"] {
            let path = dir.path().join(name);
            let mut input = lines(30, false);
            let write = |lines: &[String]| {
                if name.ends_with(".gz") {
                    write_gzip(&path, lines, 1);
                } else {
                    write_plain(&path, lines, "\n", true);
                }
            };
            write(&input);
            let position = position_in(&path);
            input[0].push('0');
            write(&input);
            let e = open_err(config(&path, 30), Some(position));
            assert!(
                matches!(e, FileSourceError::NotLineBoundary { .. }),
                "{name}: {e:?}"
            );
            assert_eq!(
                e.to_string(),
                format!(
                    "the checkpoint's position (byte {}) does not fall on a line boundary of {}: \
                     the file changed since the checkpoint; put the original back, or start the \
                     job without the checkpoint",
                    match &e {
                        FileSourceError::NotLineBoundary { offset, .. } => *offset,
                        _ => 0,
                    },
                    path.display()
                )
            );
        }
    }

    #[test]
    fn a_line_that_is_not_utf8_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rides.csv");
        fs::write(&path, b"1,a\n2,\xff\xfe\n").unwrap();
        let mut source = open(config(&path, 0), None);
        record(source.next().unwrap());
        let e = source.next().unwrap_err();
        assert!(
            matches!(e, FileSourceError::InvalidUtf8 { line: 2, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("{}:2: ", path.display())),
            "{e}"
        );
    }

    #[test]
    fn a_corrupt_gzip_file_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rides.csv.gz");
        fs::write(&path, b"this is not gzip\n").unwrap();
        let mut source = open(config(&path, 0), None);
        let e = source.next().unwrap_err();
        assert!(matches!(e, FileSourceError::Io { .. }), "{e:?}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }
}
