//! Reading a Fetch response's records field in whatever format each entry is: v2 batches and
//! v0/v1 messages can follow each other in one response (a topic converted to the v2 format
//! keeps its old segments until retention removes them).

use std::iter::FusedIterator;

use bytes::Bytes;

use super::batch::{next_frame, parse_v2};
use super::legacy::{parse_frame, LegacyMessage, LegacyRecordIter, MAGIC_V0, MAGIC_V1};
use super::{CrcCheck, Record, RecordBatch, RecordError, RecordIter, MAGIC_V2};

/// One entry of a records buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEntry {
    /// A v2 record batch.
    Batch(RecordBatch),
    /// A v0 or v1 message, plain or a compression wrapper.
    Legacy(LegacyMessage),
}

impl LogEntry {
    /// The offset the entry's header names: a batch's base offset, a message's (last) offset.
    pub fn header_offset(&self) -> i64 {
        match self {
            LogEntry::Batch(b) => b.base_offset,
            LogEntry::Legacy(m) => m.offset,
        }
    }

    /// The offset after this entry, where the next fetch continues.
    pub fn next_offset(&self) -> i64 {
        match self {
            LogEntry::Batch(b) => b.next_offset(),
            LogEntry::Legacy(m) => m.next_offset(),
        }
    }

    /// The records, decoded one at a time.
    pub fn record_iter(&self) -> Result<LogRecordIter, RecordError> {
        Ok(match self {
            LogEntry::Batch(b) => LogRecordIter::Batch(b.record_iter()?),
            LogEntry::Legacy(m) => LogRecordIter::Legacy(m.record_iter()?),
        })
    }
}

/// Records of a [`LogEntry`].
#[derive(Debug, Clone)]
pub enum LogRecordIter {
    /// From a v2 batch.
    Batch(RecordIter),
    /// From a v0/v1 message.
    Legacy(LegacyRecordIter),
}

impl Iterator for LogRecordIter {
    type Item = Result<Record, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            LogRecordIter::Batch(i) => i.next(),
            LogRecordIter::Legacy(i) => i.next(),
        }
    }
}

impl FusedIterator for LogRecordIter {}

/// Iterates the entries of a records buffer in any message format (magic 0, 1 or 2). Framing,
/// truncation and error behaviour are those of [`decode_batches`](super::decode_batches): a
/// truncated last entry ends the iteration silently, a corrupt entry is an `Err` item, and the
/// iteration goes on after it only when its length could be trusted. Checksums are verified;
/// [`EntryIter::crc_check`] can turn that off.
pub fn decode_entries(buf: Bytes) -> EntryIter {
    EntryIter {
        buf,
        done: false,
        crc: CrcCheck::Verify,
    }
}

/// Iterator over the entries of a records buffer; see [`decode_entries`].
#[derive(Debug, Clone)]
pub struct EntryIter {
    buf: Bytes,
    done: bool,
    crc: CrcCheck,
}

impl EntryIter {
    /// Verifies checksums (the default) or skips them (the consumer's `check.crcs=false`).
    pub fn crc_check(mut self, crc: CrcCheck) -> EntryIter {
        self.crc = crc;
        self
    }
}

impl Iterator for EntryIter {
    type Item = Result<LogEntry, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        let frame = match next_frame(&mut self.buf, &mut self.done)? {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        };
        Some(match frame.magic {
            MAGIC_V2 => parse_v2(frame, self.crc).map(LogEntry::Batch),
            MAGIC_V0 | MAGIC_V1 => parse_frame(frame, self.crc).map(LogEntry::Legacy),
            magic => Err(RecordError::UnsupportedMagic {
                offset: frame.offset,
                magic,
            }),
        })
    }
}

impl FusedIterator for EntryIter {}
