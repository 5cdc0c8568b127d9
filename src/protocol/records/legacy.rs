//! The old message formats, magic 0 and magic 1 ("message sets"), decode only.
//!
//! Kafka 4 brokers no longer write them, but they still serve log segments written before a
//! topic moved to the v2 format, so a consumer must read them as the Java client does.
//!
//! Layout of one entry (big-endian). The first 12 bytes (offset and size) are the same log
//! overhead a v2 batch has, and the magic byte is at byte 16 in every format, which is how a
//! records buffer is framed before the format is known:
//!
//! | bytes                 | field                                                              |
//! |-----------------------|--------------------------------------------------------------------|
//! | 0..8                  | offset i64                                                         |
//! | 8..12                 | message_size i32 (bytes after this field)                          |
//! | 12..16                | crc u32: CRC-32 (IEEE, the zlib one) of bytes 16..end              |
//! | 16                    | magic i8 (0 or 1)                                                  |
//! | 17                    | attributes i8: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 (magic 1 only) LogAppendTime |
//! | 18..26                | timestamp i64, magic 1 only                                        |
//! | next 4 + n            | key: i32 length n (-1 null), then n bytes                          |
//! | next 4 + n            | value: i32 length n (-1 null), then n bytes                        |
//!
//! so message_size is at least 14 (magic 0) or 22 (magic 1), and the key and value must end
//! exactly where message_size says.
//!
//! **Compression.** An entry with a codec is a *wrapper*: its value is the compressed bytes of
//! an *inner* message set, entries of the same layout that are never compressed themselves. The
//! wrapper's offset is the offset of its last inner message. Inner offsets:
//! - magic 0 wrapper: the inner offsets are absolute, as the broker assigned them;
//! - magic 1 wrapper: the inner offsets are relative (0, 1, ... as the producer wrote them) and
//!   absolute = wrapper offset - last inner offset + inner offset, as the Java client computes
//!   them. A wrapper offset of 0 means base 0 (some librdkafka versions wrote 0), and a wrapper
//!   offset below the last inner offset is corrupt.
//!
//! **Timestamps.** Magic 0 has none (-1, as the Java client reports). An inner magic 1 message
//! keeps its own timestamp unless its wrapper's timestamp type is LogAppendTime: then the
//! wrapper's timestamp (the broker's append time) applies to every inner message.
//!
//! **LZ4 under magic 0** (KAFKA-3160): the Java client of that era computed the LZ4 frame
//! header checksum over the frame magic too. Java reads such frames ignoring that checksum; we
//! recompute it before handing the frame to the decoder.
//!
//! **Bounds.** Decompression output is bounded (the same limit as v2 batches). The inner set is
//! walked once to validate it and find the last inner offset without allocating per message,
//! then records are produced one at a time as zero-copy slices of the decompressed buffer, so
//! a hostile wrapper costs its decompressed size plus what the caller keeps.

use std::iter::FusedIterator;

use bytes::Bytes;

use super::batch::{be_i32, be_i64, next_frame, Frame};
use super::{Compression, CrcCheck, Record, RecordError, TimestampType};
use crate::protocol::compression::{decompress_with_limit, DEFAULT_MAX_DECOMPRESSED_BYTES};

/// Magic byte of the original message format.
pub const MAGIC_V0: i8 = 0;
/// Magic byte of the format with timestamps (Kafka 0.10).
pub const MAGIC_V1: i8 = 1;
/// Smallest message_size of a magic 0 message: crc, magic, attributes, key and value lengths.
pub const V0_MIN_SIZE: usize = 14;
/// Smallest message_size of a magic 1 message: a magic 0 message plus the timestamp.
pub const V1_MIN_SIZE: usize = 22;

const CRC: usize = 12;
const MAGIC: usize = 16;
const ATTRIBUTES: usize = 17;
const TIMESTAMP: usize = 18;
const CODEC_MASK: i8 = 0x07;
const LOG_APPEND_TIME_FLAG: i8 = 0x08;
/// Timestamp Kafka reports for messages that have none.
const NO_TIMESTAMP: i64 = -1;

/// One top-level entry of a v0/v1 message set: a plain message, or a compression wrapper
/// around an inner message set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyMessage {
    /// Offset of the message; for a wrapper, the offset of its last inner message.
    pub offset: i64,
    /// 0 or 1.
    pub magic: i8,
    /// Raw attributes: codec (bits 0-2) and, for magic 1, the timestamp type (bit 3).
    pub attributes: i8,
    /// The timestamp field (magic 1), or -1 (magic 0).
    pub timestamp: i64,
    /// Key; `None` is a null key.
    pub key: Option<Bytes>,
    /// Value; for a wrapper the compressed inner message set.
    pub value: Option<Bytes>,
    encoded_len: usize,
    /// How it was read; a wrapper's inner messages are read the same way.
    crc: CrcCheck,
}

impl LegacyMessage {
    /// The codec of a wrapper; [`Compression::None`] for a plain message. Zstd did not exist
    /// before magic 2, so codec 4 is as invalid here as 5 to 7.
    pub fn compression(&self) -> Result<Compression, RecordError> {
        let codec = i16::from(self.attributes & CODEC_MASK);
        match Compression::from_id(codec) {
            Some(Compression::Zstd) | None => Err(RecordError::UnknownCompression {
                offset: self.offset,
                codec,
            }),
            Some(c) => Ok(c),
        }
    }

    /// Whether this entry wraps a compressed inner message set.
    pub fn is_wrapper(&self) -> bool {
        self.attributes & CODEC_MASK != 0
    }

    /// How the timestamp was assigned (always `CreateTime` for magic 0, which has none).
    pub fn timestamp_type(&self) -> TimestampType {
        if self.magic >= MAGIC_V1 && self.attributes & LOG_APPEND_TIME_FLAG != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Offset of the last message (the wrapper's own offset).
    pub fn last_offset(&self) -> i64 {
        self.offset
    }

    /// The offset after this entry, where the next fetch continues.
    pub fn next_offset(&self) -> i64 {
        self.offset.wrapping_add(1)
    }

    /// Size of the encoded entry, log overhead included.
    pub fn size_in_bytes(&self) -> usize {
        self.encoded_len
    }

    /// Decodes the records (decompressing a wrapper, output bounded by
    /// [`DEFAULT_MAX_DECOMPRESSED_BYTES`]).
    pub fn records(&self) -> Result<Vec<Record>, RecordError> {
        self.record_iter()?.collect()
    }

    /// The records one at a time; a wrapper is decompressed and validated first, so an error
    /// here means none of its records is handed out.
    pub fn record_iter(&self) -> Result<LegacyRecordIter, RecordError> {
        self.record_iter_with_limit(DEFAULT_MAX_DECOMPRESSED_BYTES)
    }

    /// Like [`record_iter`](Self::record_iter) with an explicit bound on the decompressed size.
    pub fn record_iter_with_limit(
        &self,
        max_decompressed: usize,
    ) -> Result<LegacyRecordIter, RecordError> {
        if !self.is_wrapper() {
            return Ok(LegacyRecordIter {
                state: State::Single(Some(Record {
                    offset: self.offset,
                    timestamp: self.timestamp,
                    key: self.key.clone(),
                    value: self.value.clone(),
                    headers: Vec::new(),
                })),
            });
        }
        let codec = self.compression()?;
        let bad = |reason| RecordError::MalformedMessage {
            offset: self.offset,
            reason,
        };
        let compressed = self
            .value
            .as_ref()
            .ok_or_else(|| bad("compressed wrapper has a null value"))?;
        let decompressed = if self.magic == MAGIC_V0 && codec == Compression::Lz4 {
            let mut fixed = compressed.to_vec();
            fix_lz4_header_checksum(&mut fixed);
            decompress_with_limit(codec, &fixed, max_decompressed)
        } else {
            decompress_with_limit(codec, compressed, max_decompressed)
        }
        .map_err(|source| RecordError::Decompress {
            offset: self.offset,
            source,
        })?;
        let inner = Bytes::from(decompressed);

        // Walk the inner set once: every message valid, none compressed, and the last offset.
        let mut rest = inner.clone();
        let mut done = false;
        let mut last_inner = None;
        while let Some(frame) = next_frame(&mut rest, &mut done) {
            let m = parse_frame(frame.map_err(|e| inner_error(self.offset, &e))?, self.crc)
                .map_err(|e| inner_error(self.offset, &e))?;
            if m.is_wrapper() {
                return Err(bad("an inner message is compressed"));
            }
            last_inner = Some(m.offset);
        }
        if !rest.is_empty() {
            return Err(bad("the inner message set ends in a truncated message"));
        }
        let last_inner = last_inner.ok_or_else(|| bad("compressed wrapper holds no messages"))?;
        let base = if self.magic == MAGIC_V1 {
            if self.offset == 0 {
                Some(0)
            } else if self.offset < last_inner {
                return Err(bad(
                    "wrapper offset is below its last inner offset (and not zero)",
                ));
            } else {
                Some(self.offset - last_inner)
            }
        } else {
            None
        };
        let append_time =
            (self.timestamp_type() == TimestampType::LogAppendTime).then_some(self.timestamp);
        Ok(LegacyRecordIter {
            state: State::Inner {
                rest: inner,
                done: false,
                base,
                append_time,
                wrapper_offset: self.offset,
                crc: self.crc,
            },
        })
    }
}

/// An error inside a wrapper's inner set, reported at the wrapper's offset (the entry the
/// consumer stops at); the inner message's own offset is relative under magic 1.
fn inner_error(wrapper_offset: i64, e: &RecordError) -> RecordError {
    let reason = match e {
        RecordError::CrcMismatch { .. } => "an inner message fails its CRC check",
        RecordError::BatchTooShort { .. } | RecordError::InvalidBatchLength { .. } => {
            "an inner message has an impossible size"
        }
        RecordError::UnsupportedMagic { .. } => "an inner message has a magic other than 0 or 1",
        _ => "an inner message is malformed",
    };
    RecordError::MalformedMessage {
        offset: wrapper_offset,
        reason,
    }
}

/// Checks a framed magic 0/1 entry (size, and its CRC-32 unless `crc` says to skip it) and
/// reads its fields.
pub(super) fn parse_frame(frame: Frame, crc: CrcCheck) -> Result<LegacyMessage, RecordError> {
    let Frame {
        offset,
        length,
        magic,
        bytes,
    } = frame;
    let min = match magic {
        MAGIC_V0 => V0_MIN_SIZE,
        MAGIC_V1 => V1_MIN_SIZE,
        _ => return Err(RecordError::UnsupportedMagic { offset, magic }),
    };
    if bytes.len() < CRC + min {
        return Err(RecordError::BatchTooShort {
            offset,
            length,
            min,
        });
    }
    if crc == CrcCheck::Verify {
        let stored = be_i32(&bytes, CRC) as u32;
        let computed = crc32fast::hash(&bytes[MAGIC..]);
        if stored != computed {
            return Err(RecordError::CrcMismatch {
                offset,
                stored,
                computed,
            });
        }
    }
    let attributes = bytes[ATTRIBUTES] as i8;
    let (timestamp, mut pos) = if magic == MAGIC_V1 {
        (be_i64(&bytes, TIMESTAMP), TIMESTAMP + 8)
    } else {
        (NO_TIMESTAMP, TIMESTAMP)
    };
    let bad = |reason| RecordError::MalformedMessage { offset, reason };
    let mut field = |what_len, what_overrun| -> Result<Option<Bytes>, RecordError> {
        // At least 8 bytes remain for the two length fields: the size minimum guarantees it.
        let Some(len_bytes) = bytes.get(pos..pos + 4) else {
            return Err(bad(what_overrun));
        };
        let len = i32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        pos += 4;
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| bad(what_len))?;
        if len > bytes.len() - pos {
            return Err(bad(what_overrun));
        }
        let s = bytes.slice(pos..pos + len);
        pos += len;
        Ok(Some(s))
    };
    let key = field(
        "negative key length",
        "key runs past the end of the message",
    )?;
    let value = field(
        "negative value length",
        "value runs past the end of the message",
    )?;
    if pos != bytes.len() {
        return Err(bad("message has bytes left over after its value"));
    }
    Ok(LegacyMessage {
        offset,
        magic,
        attributes,
        timestamp,
        key,
        value,
        encoded_len: bytes.len(),
        crc,
    })
}

/// Rewrites the header checksum of the first LZ4 frame in `frame`, which Kafka clients of the
/// magic 0 era computed wrongly (over the frame magic too, KAFKA-3160). Anything that is not
/// an LZ4 frame header is left alone for the decoder to reject.
fn fix_lz4_header_checksum(frame: &mut [u8]) {
    const LZ4_MAGIC: [u8; 4] = [0x04, 0x22, 0x4D, 0x18];
    let Some(&flg) = frame.get(4) else { return };
    if frame[..4] != LZ4_MAGIC {
        return;
    }
    // FLG, BD, then optional content size (8) and dictionary id (4), then the checksum byte.
    let hc = 6 + if flg & 0x08 != 0 { 8 } else { 0 } + if flg & 0x01 != 0 { 4 } else { 0 };
    if hc >= frame.len() {
        return;
    }
    let sum = twox_hash::XxHash32::oneshot(0, &frame[4..hc]);
    frame[hc] = (sum >> 8) as u8;
}

/// Records of one [`LegacyMessage`]; see [`LegacyMessage::record_iter`].
#[derive(Debug, Clone)]
pub struct LegacyRecordIter {
    state: State,
}

#[derive(Debug, Clone)]
enum State {
    Single(Option<Record>),
    Inner {
        /// The inner set still to read (already validated).
        rest: Bytes,
        done: bool,
        /// Magic 1: the absolute offset of relative offset 0. Magic 0: `None`, offsets are
        /// absolute.
        base: Option<i64>,
        /// The wrapper's timestamp when its type is LogAppendTime.
        append_time: Option<i64>,
        wrapper_offset: i64,
        crc: CrcCheck,
    },
}

impl Iterator for LegacyRecordIter {
    type Item = Result<Record, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.state {
            State::Single(r) => r.take().map(Ok),
            State::Inner {
                rest,
                done,
                base,
                append_time,
                wrapper_offset,
                crc,
            } => {
                let item = next_frame(rest, done)?
                    .and_then(|f| parse_frame(f, *crc))
                    .map_err(|e| inner_error(*wrapper_offset, &e));
                let m = match item {
                    Ok(m) => m,
                    Err(e) => {
                        // Cannot happen after the validating walk; stop rather than loop.
                        *done = true;
                        return Some(Err(e));
                    }
                };
                let timestamp = match (m.magic, *append_time) {
                    (MAGIC_V0, _) => NO_TIMESTAMP,
                    (_, Some(t)) => t,
                    (_, None) => m.timestamp,
                };
                Some(Ok(Record {
                    offset: base.map_or(m.offset, |b| b.wrapping_add(m.offset)),
                    timestamp,
                    key: m.key,
                    value: m.value,
                    headers: Vec::new(),
                }))
            }
        }
    }
}

impl FusedIterator for LegacyRecordIter {}
