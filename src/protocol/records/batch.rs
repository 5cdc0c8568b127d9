//! Decoding: framing batches out of a fetch response and records out of a batch.

use std::iter::FusedIterator;

use bytes::Bytes;

use super::layout::*;
use super::varint::{get_varint, get_varlong};
use super::{
    Compression, ControlRecord, CrcCheck, Header, Record, RecordError, TimestampType,
    BATCH_HEADER_LEN, LOG_OVERHEAD, MAGIC_V2,
};
use crate::protocol::compression::{decompress_with_limit, DEFAULT_MAX_DECOMPRESSED_BYTES};

/// Smallest possible encoded record: length, attributes, timestamp delta, offset delta, key
/// length, value length and header count, one byte each.
const MIN_RECORD_SIZE: usize = 7;
/// Most records [`RecordBatch::records`] reserves room for before parsing (about 400 KiB).
const MAX_PREALLOCATED_RECORDS: usize = 4096;
/// Most headers reserved for per record before parsing.
const MAX_PREALLOCATED_HEADERS: usize = 64;
/// Smallest possible encoded header: key length and value length, one byte each.
const MIN_HEADER_SIZE: usize = 2;
/// Enough of any message format to reach the magic byte (offset 16 in v0, v1 and v2 alike).
const MIN_TO_MAGIC: i32 = (MAGIC + 1 - LOG_OVERHEAD) as i32;

/// One decoded batch header and its (possibly compressed) records payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Epoch of the leader that appended the batch (-1 from producers).
    pub partition_leader_epoch: i32,
    /// Raw attributes: compression, timestamp type, transactional and control bits.
    pub attributes: i16,
    /// Offset of the last record relative to `base_offset`. Compaction may leave gaps, so this
    /// is not necessarily `records_count - 1`.
    pub last_offset_delta: i32,
    /// Timestamp of the first record; record timestamps are deltas from it.
    pub base_timestamp: i64,
    /// Largest timestamp in the batch (the append time for `LogAppendTime` batches).
    pub max_timestamp: i64,
    /// Producer id, or -1.
    pub producer_id: i64,
    /// Producer epoch, or -1.
    pub producer_epoch: i16,
    /// Sequence of the first record, or -1.
    pub base_sequence: i32,
    /// Number of records the header declares.
    pub records_count: i32,
    /// The CRC-32C the header states, over everything from the attributes on (checked against
    /// the bytes unless the check was skipped). What names the batch's contents whatever its
    /// base offset says: the base offset is outside it.
    pub crc: u32,
    /// The records section, still compressed if the batch is.
    payload: Bytes,
    /// Whole encoded size including the 12-byte log overhead.
    encoded_len: usize,
}

impl RecordBatch {
    /// The compression codec of the records.
    pub fn compression(&self) -> Result<Compression, RecordError> {
        let codec = self.attributes & COMPRESSION_MASK;
        Compression::from_id(codec).ok_or(RecordError::UnknownCompression {
            offset: self.base_offset,
            codec,
        })
    }

    /// How the timestamps were assigned.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_FLAG != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Whether the batch is part of a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_FLAG != 0
    }

    /// Whether the batch holds a control record (transaction marker) rather than data.
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_FLAG != 0
    }

    /// Offset of the last record: `base_offset + last_offset_delta`.
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .wrapping_add(i64::from(self.last_offset_delta))
    }

    /// The offset after this batch, where the next fetch continues.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }

    /// Size of the encoded batch in the fetch response, header included.
    pub fn size_in_bytes(&self) -> usize {
        self.encoded_len
    }

    /// Whether the batch has an idempotent producer id.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Decodes the records, decompressing first if needed (output bounded by
    /// [`DEFAULT_MAX_DECOMPRESSED_BYTES`]).
    pub fn records(&self) -> Result<Vec<Record>, RecordError> {
        self.records_with_limit(DEFAULT_MAX_DECOMPRESSED_BYTES)
    }

    /// Like [`records`](Self::records) with an explicit bound on the decompressed size.
    pub fn records_with_limit(&self, max_decompressed: usize) -> Result<Vec<Record>, RecordError> {
        let data = self.uncompressed_payload(max_decompressed)?;
        self.parse_records(data)
    }

    /// The first record of a control batch decoded as a transaction marker; `None` for data
    /// batches and for control batches that compaction has emptied.
    pub fn control_record(&self) -> Result<Option<ControlRecord>, RecordError> {
        if !self.is_control() {
            return Ok(None);
        }
        let records = self.records()?;
        match records.first() {
            None => Ok(None),
            Some(r) => ControlRecord::parse(self.base_offset, r).map(Some),
        }
    }

    fn uncompressed_payload(&self, max_decompressed: usize) -> Result<Bytes, RecordError> {
        match self.compression()? {
            Compression::None => Ok(self.payload.clone()),
            codec => decompress_with_limit(codec, &self.payload, max_decompressed)
                .map(Bytes::from)
                .map_err(|source| RecordError::Decompress {
                    offset: self.base_offset,
                    source,
                }),
        }
    }

    fn parse_records(&self, data: Bytes) -> Result<Vec<Record>, RecordError> {
        let iter = RecordIter::new(self, data)?;
        // Bounded by the bytes present, and by a fixed cap: even the byte bound allows ~15 bytes
        // of Record per payload byte, too much to commit before anything has been parsed.
        let cap = iter
            .count
            .min(iter.data.len() / MIN_RECORD_SIZE)
            .min(MAX_PREALLOCATED_RECORDS);
        let mut records = Vec::with_capacity(cap);
        for r in iter {
            records.push(r?);
        }
        Ok(records)
    }

    /// Decompresses once and returns an iterator that decodes one record per step, for callers
    /// that want to bound memory by what they keep rather than by the batch size.
    pub fn record_iter(&self) -> Result<RecordIter, RecordError> {
        self.record_iter_with_limit(DEFAULT_MAX_DECOMPRESSED_BYTES)
    }

    /// Like [`record_iter`](Self::record_iter) with an explicit bound on the decompressed size.
    pub fn record_iter_with_limit(
        &self,
        max_decompressed: usize,
    ) -> Result<RecordIter, RecordError> {
        let data = self.uncompressed_payload(max_decompressed)?;
        RecordIter::new(self, data)
    }
}

/// Records of one batch, decoded lazily; see [`RecordBatch::record_iter`]. Yields an error (and
/// then stops) on a malformed record, or when the payload and the header's count disagree.
#[derive(Debug, Clone)]
pub struct RecordIter {
    data: Bytes,
    pos: usize,
    index: usize,
    count: usize,
    declared: i32,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    done: bool,
}

impl RecordIter {
    fn new(batch: &RecordBatch, data: Bytes) -> Result<RecordIter, RecordError> {
        let declared = batch.records_count;
        let count = usize::try_from(declared).map_err(|_| RecordError::RecordCountMismatch {
            offset: batch.base_offset,
            declared,
            reason: "a count cannot be negative".to_owned(),
        })?;
        Ok(RecordIter {
            data,
            pos: 0,
            index: 0,
            count,
            declared,
            base_offset: batch.base_offset,
            base_timestamp: batch.base_timestamp,
            log_append_time: (batch.timestamp_type() == TimestampType::LogAppendTime)
                .then_some(batch.max_timestamp),
            done: false,
        })
    }

    fn count_mismatch(&self, reason: String) -> RecordError {
        RecordError::RecordCountMismatch {
            offset: self.base_offset,
            declared: self.declared,
            reason,
        }
    }

    fn step(&mut self) -> Option<Result<Record, RecordError>> {
        if self.index == self.count {
            if self.pos != self.data.len() {
                let extra = self.data.len() - self.pos;
                return Some(Err(
                    self.count_mismatch(format!("{extra} bytes follow the last one"))
                ));
            }
            return None;
        }
        if self.pos >= self.data.len() {
            let reason = format!("the payload ends after {}", self.index);
            return Some(Err(self.count_mismatch(reason)));
        }
        let index = self.index;
        match parse_record(&self.data, self.pos, self.base_offset, self.base_timestamp) {
            Ok((record, used)) => {
                self.pos += used;
                self.index += 1;
                Some(Ok(Record {
                    timestamp: self.log_append_time.unwrap_or(record.timestamp),
                    ..record
                }))
            }
            Err(reason) => Some(Err(RecordError::MalformedRecord {
                offset: self.base_offset,
                index,
                reason,
            })),
        }
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            // One more for a possible trailing error item.
            (0, Some(self.count - self.index + 1))
        }
    }
}

impl FusedIterator for RecordIter {}

/// A bounds-checked cursor over a `Bytes`, handing out zero-copy slices.
struct Cursor<'a> {
    buf: &'a Bytes,
    pos: usize,
    end: usize,
}

impl Cursor<'_> {
    fn remaining(&self) -> usize {
        self.end - self.pos
    }

    fn varint(&mut self, what: &'static str) -> Result<i32, &'static str> {
        let (v, n) = get_varint(&self.buf[self.pos..self.end]).map_err(|_| what)?;
        self.pos += n;
        Ok(v)
    }

    fn varlong(&mut self, what: &'static str) -> Result<i64, &'static str> {
        let (v, n) = get_varlong(&self.buf[self.pos..self.end]).map_err(|_| what)?;
        self.pos += n;
        Ok(v)
    }

    fn byte(&mut self, what: &'static str) -> Result<u8, &'static str> {
        let b = *self.buf[self.pos..self.end].first().ok_or(what)?;
        self.pos += 1;
        Ok(b)
    }

    fn slice(&mut self, len: usize, what: &'static str) -> Result<Bytes, &'static str> {
        if len > self.remaining() {
            return Err(what);
        }
        let s = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(s)
    }

    /// A length-prefixed field where -1 means null.
    fn nullable(
        &mut self,
        bad_len: &'static str,
        overrun: &'static str,
    ) -> Result<Option<Bytes>, &'static str> {
        match self.varint(bad_len)? {
            -1 => Ok(None),
            n => {
                let len = usize::try_from(n).map_err(|_| bad_len)?;
                self.slice(len, overrun).map(Some)
            }
        }
    }
}

/// Parses one record starting at `pos`; returns it and the bytes it occupied.
fn parse_record(
    data: &Bytes,
    pos: usize,
    base_offset: i64,
    base_timestamp: i64,
) -> Result<(Record, usize), &'static str> {
    let mut outer = Cursor {
        buf: data,
        pos,
        end: data.len(),
    };
    let length = outer.varint("truncated record length")?;
    let length = usize::try_from(length).map_err(|_| "negative record length")?;
    if length > outer.remaining() {
        return Err("record length runs past the end of the batch");
    }
    // Everything below is confined to the declared length, so a record cannot read its
    // neighbour and must account for every byte it claims (as the Java client insists).
    let mut c = Cursor {
        buf: data,
        pos: outer.pos,
        end: outer.pos + length,
    };
    let _attributes = c.byte("record ends before its attributes")?;
    let timestamp_delta = c.varlong("bad timestamp delta")?;
    let offset_delta = c.varint("bad offset delta")?;
    let key = c.nullable("bad key length", "key runs past the end of the record")?;
    let value = c.nullable("bad value length", "value runs past the end of the record")?;
    let header_count = c.varint("bad header count")?;
    let header_count = usize::try_from(header_count).map_err(|_| "negative header count")?;
    let mut headers = Vec::with_capacity(
        header_count
            .min(c.remaining() / MIN_HEADER_SIZE)
            .min(MAX_PREALLOCATED_HEADERS),
    );
    for _ in 0..header_count {
        let key_len = c.varint("bad header key length")?;
        let key_len = usize::try_from(key_len).map_err(|_| "negative header key length")?;
        let key = c.slice(key_len, "header key runs past the end of the record")?;
        let value = c.nullable(
            "bad header value length",
            "header value runs past the end of the record",
        )?;
        headers.push(Header { key, value });
    }
    if c.pos != c.end {
        return Err("record has bytes left over after its headers");
    }
    let record = Record {
        offset: base_offset.wrapping_add(i64::from(offset_delta)),
        timestamp: base_timestamp.wrapping_add(timestamp_delta),
        key,
        value,
        headers,
    };
    Ok((record, c.end - pos))
}

/// Iterates the batches in a Fetch response's records field. A truncated last batch ends the
/// iteration silently (the broker cuts the response at its byte limit); a corrupt batch (bad
/// CRC, unsupported magic, impossible length) is an `Err` item.
///
/// After an error item the iterator continues with the next batch when the bad batch's length
/// could still be trusted to skip it, and ends when it could not (a negative length). Only the
/// header and CRC are checked here; records are decoded by [`RecordBatch::records`].
pub fn decode_batches(buf: Bytes) -> BatchIter {
    BatchIter { buf, done: false }
}

/// Iterator over the batches of a records buffer; see [`decode_batches`].
#[derive(Debug, Clone)]
pub struct BatchIter {
    /// What is left to decode.
    buf: Bytes,
    done: bool,
}

impl BatchIter {
    /// The undecoded remainder: empty after a clean end, or the partial batch the broker cut.
    pub fn remaining(&self) -> &Bytes {
        &self.buf
    }
}

pub(super) fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

pub(super) fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(super) fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// One entry of a records buffer, framed by its 12-byte log overhead (offset, length) but not
/// yet checked beyond reaching its magic byte, which sits at byte 16 in every format.
pub(super) struct Frame {
    /// The first 8 bytes: a v2 batch's base offset, a v0/v1 message's (last) offset.
    pub offset: i64,
    /// The length field: bytes after it.
    pub length: i32,
    pub magic: i8,
    /// The whole entry, log overhead included.
    pub bytes: Bytes,
}

/// Frames the next entry of `buf`, shared by every format. `None` at a clean end or a
/// truncated last entry (the broker cuts at its byte limit); sets `done` when the rest of the
/// buffer cannot be framed.
pub(super) fn next_frame(buf: &mut Bytes, done: &mut bool) -> Option<Result<Frame, RecordError>> {
    if *done || buf.len() < LOG_OVERHEAD {
        *done = true;
        return None;
    }
    let offset = be_i64(buf, BASE_OFFSET);
    let length = be_i32(buf, BATCH_LENGTH);
    let Ok(body_len) = usize::try_from(length) else {
        *done = true;
        return Some(Err(RecordError::InvalidBatchLength { offset, length }));
    };
    let total = LOG_OVERHEAD + body_len;
    if total > buf.len() {
        // The broker stops at its byte limit mid-batch; the consumer fetches the rest later.
        *done = true;
        return None;
    }
    let bytes = buf.split_to(total);
    if length < MIN_TO_MAGIC {
        return Some(Err(RecordError::BatchTooShort {
            offset,
            length,
            min: MIN_TO_MAGIC as usize,
        }));
    }
    Some(Ok(Frame {
        offset,
        length,
        magic: bytes[MAGIC] as i8,
        bytes,
    }))
}

/// Checks a framed magic-2 entry (header length, and its CRC-32C unless `crc` says to skip it)
/// and reads its header.
pub(super) fn parse_v2(frame: Frame, crc: CrcCheck) -> Result<RecordBatch, RecordError> {
    let Frame {
        offset,
        length,
        bytes: batch,
        ..
    } = frame;
    let total = batch.len();
    if total < BATCH_HEADER_LEN {
        return Err(RecordError::BatchTooShort {
            offset,
            length,
            min: BATCH_HEADER_LEN - LOG_OVERHEAD,
        });
    }
    if crc == CrcCheck::Verify {
        verify_crc32c(offset, &batch)?;
    }
    Ok(RecordBatch {
        base_offset: offset,
        partition_leader_epoch: be_i32(&batch, PARTITION_LEADER_EPOCH),
        attributes: be_i16(&batch, ATTRIBUTES),
        last_offset_delta: be_i32(&batch, LAST_OFFSET_DELTA),
        base_timestamp: be_i64(&batch, BASE_TIMESTAMP),
        max_timestamp: be_i64(&batch, MAX_TIMESTAMP),
        producer_id: be_i64(&batch, PRODUCER_ID),
        producer_epoch: be_i16(&batch, PRODUCER_EPOCH),
        base_sequence: be_i32(&batch, BASE_SEQUENCE),
        records_count: be_i32(&batch, RECORDS_COUNT),
        crc: be_i32(&batch, CRC) as u32,
        payload: batch.slice(BATCH_HEADER_LEN..),
        encoded_len: total,
    })
}

/// The stored CRC-32C of a framed v2 batch (over everything from the attributes on) matches.
fn verify_crc32c(offset: i64, batch: &[u8]) -> Result<(), RecordError> {
    let stored = be_i32(batch, CRC) as u32;
    let computed = crc32c::crc32c(&batch[ATTRIBUTES..]);
    if stored != computed {
        return Err(RecordError::CrcMismatch {
            offset,
            stored,
            computed,
        });
    }
    Ok(())
}

impl Iterator for BatchIter {
    type Item = Result<RecordBatch, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        let frame = match next_frame(&mut self.buf, &mut self.done)? {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        };
        if frame.magic != MAGIC_V2 {
            return Some(Err(RecordError::UnsupportedMagic {
                offset: frame.offset,
                magic: frame.magic,
            }));
        }
        Some(parse_v2(frame, CrcCheck::Verify))
    }
}

impl FusedIterator for BatchIter {}
