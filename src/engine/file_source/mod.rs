//! A checkpointed file source: replays a file (or a directory of files) of one event per line,
//! out of order by a bounded, deterministic delay and at a serving speed, its read position
//! saved in every checkpoint so that a restored job emits every event exactly once (the
//! replaying source of Flink's training exercises, as a library piece).
//!
//! How a line becomes a record (key, value, event time) is a
//! [`LineFormat`](crate::engine::formats::LineFormat), chosen by name from the registry in
//! [`crate::engine::formats`]. [`FileSource`] is the reader itself, with its [`FilePosition`]
//! in every checkpoint.
//!
//! The runtime drives one [`FileSource`] between records:
//!
//! ```text
//!   open(config, format, restored position or None)
//!   next()       -> Record(r)      emit r
//!                -> NotBefore(t)   the serving speed says the next record is due at t: wait
//!                                  (reading control messages meanwhile) and call again
//!                -> End            every record was emitted
//!   position()   at a checkpoint barrier: save it in the checkpoint
//! ```
//!
//! The rules (the pure ones table-tested below):
//! - **Delay.** A line of text T gets delay = FNV-1a-64(T) mod (max_delay_ms + 1) ms, so a
//!   re-run of the same file emits the same order; its `emit_at` = event time + delay.
//! - **Order.** Lines are read into a min-heap by (`emit_at`, seq), seq counting the lines put
//!   in it. The head is emitted once the largest event time read so far is ≥ its `emit_at`
//!   (for input sorted by event time no unread line can come before it), or the input is
//!   exhausted (`step`). Records keep their own event time: the stream is out of order by up
//!   to max_delay, plus whatever disorder the file itself has.
//! - **Serving speed.** The first record emitted after open anchors (wall clock, `emit_at`); a
//!   later one is due at anchor + (`emit_at` − anchor's `emit_at`) / factor (`serving_wait`).
//!   Factor 0 means as fast as possible. A restore re-anchors on its first record.
//! - **Position.** [`FilePosition`]: the file being read, the byte offset of the next line in
//!   its decompressed text, the lines read but not yet emitted, the sequence counter and the
//!   largest event time read. Restoring it emits exactly the records not yet returned, in the
//!   same order.

mod avro;
mod file;

pub use file::FileSource;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};


/// What a [`FileSource`] reads and how.
#[derive(Debug, Clone)]
pub struct FileSourceConfig {
    /// A file, or a directory whose regular, non-hidden files (names not starting with `.`)
    /// are read in name order. A name ending in `.gz` is read as gzip.
    pub path: PathBuf,
    /// 0 = as fast as possible; else event time advances this many times faster than wall
    /// time (600 = ten minutes of event time per second). Finite and ≥ 0.
    pub serving_speed_factor: f64,
    /// Each event is emitted up to this much (event time) late: the bounded out-of-orderness,
    /// in whole milliseconds.
    pub max_delay: Duration,
    /// When true, a first line of a file that the format rejects is skipped (a CSV header);
    /// any other rejected line is an error.
    pub skip_header: bool,
    /// How the files hold their records.
    pub framing: Framing,
}

/// How a file source's files hold their records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// One a line (`.gz` decompressed); the format parses each line.
    #[default]
    Lines,
    /// Avro container files: each record becomes its plain JSON text (a union's value without
    /// its branch, decimals and timestamps as numbers), which the format parses as a line.
    AvroContainer,
}

/// Where a [`FileSource`] is: what a checkpoint saves. See [`FileSource::position`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePosition {
    /// The name (relative to the directory, or the file's own name) of the file being read;
    /// None = none started yet.
    pub file: Option<String>,
    /// The byte offset, in the file's decompressed text, of the next line to read.
    pub offset: u64,
    /// That line's number (1-based), for error messages; 0 when no file was started.
    pub line: u64,
    /// What the reordering buffer held: read but not yet emitted, in emission order.
    pub buffered: Vec<BufferedLine>,
    /// The sequence number the next line read will get.
    pub next_seq: u64,
    /// The largest event time read so far (None before the first line): the emission rule
    /// needs it, and for a file that is not sorted by event time it can be larger than any
    /// buffered line's.
    #[serde(default)]
    pub max_event_time: Option<i64>,
    /// Every file read and every line emitted.
    pub finished: bool,
    /// In an Avro container file: the records of the block at `offset` already read (`offset`
    /// is that block's start, `line` the next record's number).
    #[serde(default)]
    pub in_block: u64,
}

/// A line in the reordering buffer: read, not yet emitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferedLine {
    /// The line's text, without its terminator (parsed again on restore).
    pub text: String,
    /// Its event time, ms since the epoch.
    pub event_time: i64,
    /// When (in event time) it may be emitted: event time + its delay.
    pub emit_at: i64,
    /// Its place among the lines read: breaks ties of `emit_at`.
    pub seq: u64,
    /// The file it was read from (as in [`FilePosition::file`]): the record names it.
    pub file: String,
    /// Its line number in that file (1-based).
    pub line: u64,
}

/// What [`FileSource::next`] has for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The next record, due now.
    Record(FileRecord),
    /// The next record is due at this instant (serving speed): wait and call again.
    NotBefore(Instant),
    /// Every record was emitted.
    End,
}

/// One record of the file source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    /// The key from the format.
    pub key: Option<Vec<u8>>,
    /// The value from the format.
    pub value: Vec<u8>,
    /// The event time from the format, ms since the epoch (not delayed).
    pub event_time: i64,
    /// The file it was read from (as in [`FilePosition::file`]).
    pub file: String,
    /// Its line number in that file (1-based).
    pub line: u64,
}

/// A file source that cannot open or read: one line naming the file (and line) and what to
/// change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileSourceError {
    /// A setting is out of range.
    #[error("{field}: {message}")]
    Setting {
        /// The setting (`source.serving_speed_factor`).
        field: &'static str,
        /// What is wrong and what to change.
        message: String,
    },
    /// `source.path` does not exist.
    #[error("source.path {path} does not exist: set source.path to an existing file or directory")]
    PathMissing {
        /// The configured path.
        path: String,
    },
    /// `source.path` is neither a regular file nor a directory (a socket, a device ...).
    #[error("source.path {path} is neither a regular file nor a directory: set source.path to a file or a directory of files")]
    NotFileOrDirectory {
        /// The configured path.
        path: String,
    },
    /// The directory holds no regular, non-hidden file.
    #[error("directory {path} holds no regular, non-hidden file to read: put the input files there, or set source.path to a file")]
    EmptyDirectory {
        /// The directory.
        path: String,
    },
    /// A file name is not UTF-8 (a checkpoint stores names as text).
    #[error("the file name {path} is not valid UTF-8: rename the file (checkpoints store file names as text)")]
    NonUtf8Name {
        /// The path, lossily converted.
        path: String,
    },
    /// The checkpoint's file is no longer in the listing.
    #[error("the checkpoint's file {file} is no longer in {path}: put it back, or start the job without the checkpoint")]
    CheckpointFileGone {
        /// The checkpoint's file name.
        file: String,
        /// The configured path.
        path: String,
    },
    /// The checkpoint's file is shorter than the checkpoint's offset.
    #[error("{file} holds {len} bytes (decompressed), fewer than the checkpoint's offset {offset}: the file changed since the checkpoint; put the original back, or start the job without the checkpoint")]
    CheckpointBeyondEnd {
        /// The file.
        file: String,
        /// The checkpoint's offset.
        offset: u64,
        /// The file's (decompressed) length.
        len: u64,
    },
    /// The byte before the checkpoint's offset is not a line end.
    #[error("the checkpoint's position (byte {offset}) does not fall on a line boundary of {file}: the file changed since the checkpoint; put the original back, or start the job without the checkpoint")]
    NotLineBoundary {
        /// The file.
        file: String,
        /// The checkpoint's offset.
        offset: u64,
    },
    /// An Avro container file that cannot be read: not one, damaged, or not at the
    /// checkpoint's block.
    #[error("{file}: {message}")]
    Container {
        /// The file.
        file: String,
        /// What is wrong, and what to do.
        message: String,
    },
    /// A line (or an Avro record) the format rejects.
    #[error("{file}:{line}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// The line number (1-based).
        line: u64,
        /// The format's message.
        message: String,
    },
    /// A line is not UTF-8.
    #[error("{file}:{line}: the line is not valid UTF-8: convert the file to UTF-8")]
    InvalidUtf8 {
        /// The file.
        file: String,
        /// The line number (1-based).
        line: u64,
    },
    /// Listing, opening or reading failed (a corrupt gzip stream shows up here).
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done ("reading line 12 of").
        action: String,
        /// The file or directory.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// 64-bit FNV-1a: a tiny hash fixed by its definition, so the delays (and so the emission
/// order) stay the same across versions and platforms.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// A line's delay in ms, in [0, `max_delay_ms`]: chosen from its text, not at random, so a
/// re-run (and a restore) orders the file the same way. `max_delay_ms` < 0 counts as 0.
pub(crate) fn delay_ms(text: &str, max_delay_ms: i64) -> i64 {
    let Ok(max) = u64::try_from(max_delay_ms) else {
        return 0;
    };
    // max ≤ i64::MAX, so max + 1 does not overflow and the remainder fits an i64.
    i64::try_from(fnv1a64(text.as_bytes()) % (max + 1)).unwrap_or(0)
}

/// What the source does next, from the reordering buffer's head and what was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Read another line (the head, if any, may still be overtaken).
    Read,
    /// Emit the head, whose `emit_at` this is.
    Emit(i64),
    /// Nothing is buffered and the input is exhausted.
    End,
}

/// The reordering rule. `head_emit_at` is the smallest buffered `emit_at` (None when empty),
/// `max_event_time` the largest event time read so far, `input_done` whether every file was
/// read to its end. The head goes once the largest event time read is ≥ its `emit_at`: a line
/// still unread of a file sorted by event time has an event time (and so an `emit_at`) ≥ that,
/// and an equal `emit_at` gets a larger seq, so nothing unread can go before the head.
///
/// Reading stops as soon as the head may go, so the buffer holds only lines with
/// `emit_at` > the largest event time read, i.e. event time > (largest read − max_delay),
/// plus the line just read: the lines of the last max_delay of event time, no more.
pub(crate) fn step(
    head_emit_at: Option<i64>,
    max_event_time: Option<i64>,
    input_done: bool,
) -> Step {
    match head_emit_at {
        None if input_done => Step::End,
        None => Step::Read,
        Some(emit_at) if input_done || max_event_time.is_some_and(|m| m >= emit_at) => {
            Step::Emit(emit_at)
        }
        Some(_) => Step::Read,
    }
}

/// How long after the anchor's wall clock a record of `emit_at` is due, at serving speed
/// `factor` (> 0), the anchor's event time being `anchor_emit_at`. A record earlier than the
/// anchor (a file not sorted by event time) is due at once.
pub(crate) fn serving_wait(anchor_emit_at: i64, emit_at: i64, factor: f64) -> Duration {
    let ahead_ms = i128::from(emit_at) - i128::from(anchor_emit_at);
    if ahead_ms <= 0 || factor.is_nan() || factor <= 0.0 {
        return Duration::ZERO;
    }
    // In nanoseconds, rounded: f64 keeps 53 bits, far more than the precision a wait needs;
    // `as` saturates, so an absurd wait becomes ~584 years rather than wrapping.
    let nanos = (ahead_ms as f64 * 1e6 / factor).round();
    Duration::from_nanos(nanos as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        // From the FNV reference test suite (Fowler, Noll, Vo).
        let table: [(&[u8], u64); 3] = [
            (b"", 0xcbf2_9ce4_8422_2325),
            (b"a", 0xaf63_dc4c_8601_ec8c),
            (b"foobar", 0x8594_4171_f739_67e8),
        ];
        for (input, want) in table {
            assert_eq!(fnv1a64(input), want, "{input:?}");
        }
    }

    #[test]
    fn the_delay_is_in_range_and_fixed_by_the_text() {
        // (text, max_delay_ms) -> delay
        let table: [(&str, i64, i64); 6] = [
            ("a", 0, 0),
            ("a", -5, 0),
            ("", 1000, (0xcbf2_9ce4_8422_2325u64 % 1001) as i64),
            ("a", 1000, (0xaf63_dc4c_8601_ec8cu64 % 1001) as i64),
            ("foobar", 9, (0x8594_4171_f739_67e8u64 % 10) as i64),
            (
                "a",
                i64::MAX,
                (0xaf63_dc4c_8601_ec8cu64 % (i64::MAX as u64 + 1)) as i64,
            ),
        ];
        for (text, max, want) in table {
            assert_eq!(delay_ms(text, max), want, "{text:?} {max}");
        }
        for i in 0..1000 {
            let d = delay_ms(&format!("line {i}"), 50);
            assert!((0..=50).contains(&d), "{d}");
        }
    }

    #[test]
    fn the_head_goes_once_the_largest_event_time_read_reaches_its_emit_at() {
        // (head emit_at, largest event time read, input done) -> step
        let table: [(Option<i64>, Option<i64>, bool, Step); 9] = [
            (None, None, false, Step::Read),
            (None, None, true, Step::End),
            (None, Some(5), false, Step::Read),
            (None, Some(5), true, Step::End),
            (Some(10), Some(9), false, Step::Read),
            (Some(10), Some(10), false, Step::Emit(10)),
            (Some(10), Some(11), false, Step::Emit(10)),
            (Some(10), Some(9), true, Step::Emit(10)),
            // Restored from a hand-written position without the largest event time.
            (Some(10), None, false, Step::Read),
        ];
        for (head, max, done, want) in table {
            assert_eq!(step(head, max, done), want, "{head:?} {max:?} {done}");
        }
    }

    #[test]
    fn a_record_is_due_its_event_time_distance_divided_by_the_factor_after_the_anchor() {
        let ms = Duration::from_millis;
        // (anchor emit_at, emit_at, factor) -> wait
        let table: [(i64, i64, f64, Duration); 8] = [
            (0, 0, 1.0, Duration::ZERO),
            (0, 1000, 1000.0, ms(1)),
            (0, 600_000, 600.0, ms(1000)),
            (5000, 4000, 1.0, Duration::ZERO),
            (0, 1000, 0.5, ms(2000)),
            (0, 3, 2.0, Duration::from_micros(1500)),
            (0, 1000, 0.0, Duration::ZERO),
            (i64::MIN, i64::MAX, 1e-9, Duration::from_nanos(u64::MAX)),
        ];
        for (anchor, emit_at, factor, want) in table {
            assert_eq!(
                serving_wait(anchor, emit_at, factor),
                want,
                "{anchor} {emit_at} {factor}"
            );
        }
    }
}
