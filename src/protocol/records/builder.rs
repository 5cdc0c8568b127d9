//! Encoding: accumulating records into a batch, and patching built batches.

use bytes::{Bytes, BytesMut};

use super::layout::*;
use super::varint::{put_varint, put_varlong, varint_size, varlong_size};
use super::{
    Compression, Header, ProducerFields, RecordError, BATCH_HEADER_LEN, LOG_OVERHEAD, MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
};
use crate::protocol::compression::compress_into;

/// Largest body the i32 length fields (record length, batch length) can describe.
const MAX_LEN: usize = i32::MAX as usize;

/// Accumulates records for one batch while the producer's accumulator fills it.
///
/// Records are encoded as they are appended (offset deltas 0, 1, 2, ...; timestamps as deltas
/// from the first record's), so closing the batch only compresses and writes the header.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    compression: Compression,
    /// Header space followed by the uncompressed records, so an uncompressed build is a single
    /// copy with the header patched in.
    buf: Vec<u8>,
    count: usize,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl BatchBuilder {
    /// An empty batch that will be compressed with `compression` when built.
    pub fn new(compression: Compression) -> Self {
        Self::with_capacity(compression, 0)
    }

    /// Like [`new`](Self::new), reserving room for `records_bytes` of encoded records up front
    /// (typically the producer's `batch.size`).
    pub fn with_capacity(compression: Compression, records_bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(BATCH_HEADER_LEN.saturating_add(records_bytes));
        buf.resize(BATCH_HEADER_LEN, 0);
        BatchBuilder {
            compression,
            buf,
            count: 0,
            base_timestamp: 0,
            max_timestamp: 0,
        }
    }

    /// The codec the batch will be compressed with.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Appends a record unless the batch already has records and the uncompressed estimate
    /// would then exceed `max_bytes`. The first record is always accepted, however large, so a
    /// record bigger than `batch.size` still gets a batch of its own; the only exception is a
    /// record the format cannot represent at all (over 2 GiB, or a 2^31st record).
    pub fn try_append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header],
        max_bytes: usize,
    ) -> bool {
        let Ok(offset_delta) = i32::try_from(self.count) else {
            return false;
        };
        let timestamp_delta = if self.count == 0 {
            0
        } else {
            timestamp.wrapping_sub(self.base_timestamp)
        };
        let Some(body) = body_size(offset_delta, timestamp_delta, key, value, headers) else {
            return false;
        };
        let size = varint_size(body as i32) + body;
        let new_size = self.buf.len().saturating_add(size);
        if self.count > 0 && new_size > max_bytes {
            return false;
        }
        if new_size - LOG_OVERHEAD > MAX_LEN {
            return false;
        }
        if self.count == 0 {
            self.base_timestamp = timestamp;
            self.max_timestamp = timestamp;
        } else {
            self.max_timestamp = self.max_timestamp.max(timestamp);
        }
        self.buf.reserve(size);
        let before = self.buf.len();
        encode_record(
            &mut self.buf,
            body,
            offset_delta,
            timestamp_delta,
            key,
            value,
            headers,
        );
        debug_assert_eq!(self.buf.len() - before, size);
        self.count += 1;
        true
    }

    /// Number of records appended.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no record has been appended.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Uncompressed encoded size: the 61-byte header plus the records so far. Exact for an
    /// uncompressed batch; an upper bound in practice for a compressed one.
    pub fn size_estimate(&self) -> usize {
        self.buf.len()
    }

    /// Encoded size of one record with this timestamp delta, as the first record of a batch
    /// (offset delta 0; later records may need up to 4 more bytes for a larger offset delta).
    pub fn encoded_record_size(
        timestamp_delta: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header],
    ) -> usize {
        match body_size(0, timestamp_delta, key, value, headers) {
            Some(body) => varint_size(body as i32) + body,
            None => usize::MAX,
        }
    }

    /// Closes the batch: compresses, writes the header with the producer fields, computes the
    /// CRC. The builder is left as it was, so a failed send can build again.
    pub fn build(&self, producer: ProducerFields) -> Result<Bytes, RecordError> {
        if self.count == 0 {
            return Err(RecordError::EmptyBatch);
        }
        let out = match self.compression {
            Compression::None => self.buf.clone(),
            codec => self.compressed(codec)?,
        };
        self.seal(out, producer)
    }

    /// Like [`build`](Self::build) but consumes the builder, which saves copying the records of
    /// an uncompressed batch.
    pub fn finish(mut self, producer: ProducerFields) -> Result<Bytes, RecordError> {
        if self.count == 0 {
            return Err(RecordError::EmptyBatch);
        }
        let out = match self.compression {
            Compression::None => std::mem::take(&mut self.buf),
            codec => self.compressed(codec)?,
        };
        self.seal(out, producer)
    }

    /// Header space followed by the compressed records.
    fn compressed(&self, codec: Compression) -> Result<Vec<u8>, RecordError> {
        let records = &self.buf[BATCH_HEADER_LEN..];
        // Half the input is a fair first guess for typical record data; compress_into grows the
        // buffer if it is wrong.
        let mut out = Vec::with_capacity(BATCH_HEADER_LEN + records.len() / 2 + 64);
        out.resize(BATCH_HEADER_LEN, 0);
        compress_into(codec, records, &mut out).map_err(RecordError::Compress)?;
        Ok(out)
    }

    /// Writes the header into `out` (header space + records) and computes the CRC.
    fn seal(&self, mut out: Vec<u8>, producer: ProducerFields) -> Result<Bytes, RecordError> {
        if out.len() - LOG_OVERHEAD > MAX_LEN {
            return Err(RecordError::BatchTooLarge { size: out.len() });
        }
        let mut attributes = self.compression.id();
        if producer.transactional {
            attributes |= TRANSACTIONAL_FLAG;
        }
        put_header_fields(
            &mut out,
            HeaderFields {
                base_offset: 0,
                partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
                attributes,
                last_offset_delta: (self.count - 1) as i32,
                base_timestamp: self.base_timestamp,
                max_timestamp: self.max_timestamp,
                producer,
                records_count: self.count as i32,
            },
        );
        finish_crc(&mut out);
        // A batch closed by linger.ms well short of its capacity (batch.size, reserved up
        // front) would keep the whole allocation for as long as it is buffered or in flight:
        // memory the producer's buffer.memory does not count. Give the spare back when it is
        // more than a quarter (one realloc per batch; shrinking in place is the common case).
        if out.capacity() - out.len() > out.len() / 4 {
            out.shrink_to_fit();
        }
        Ok(Bytes::from(out))
    }
}

/// Size of a record after its length prefix, or `None` if a length does not fit an i32.
pub(super) fn body_size(
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header],
) -> Option<usize> {
    let mut size = 1 // attributes
        + varlong_size(timestamp_delta)
        + varint_size(offset_delta)
        + nullable_size(key)?
        + nullable_size(value)?
        + varint_size(i32::try_from(headers.len()).ok()?);
    for h in headers {
        size = size
            .checked_add(nullable_size(Some(&h.key))?)?
            .checked_add(nullable_size(h.value.as_deref())?)?;
    }
    (size <= MAX_LEN).then_some(size)
}

fn nullable_size(field: Option<&[u8]>) -> Option<usize> {
    match field {
        None => Some(varint_size(-1)),
        Some(b) => Some(varint_size(i32::try_from(b.len()).ok()?) + b.len()),
    }
}

/// Writes one record; every length has already been checked to fit an i32 by `body_size`.
pub(super) fn encode_record(
    out: &mut Vec<u8>,
    body: usize,
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header],
) {
    put_varint(out, body as i32);
    out.push(0); // record attributes: unused
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    put_nullable(out, key);
    put_nullable(out, value);
    put_varint(out, headers.len() as i32);
    for h in headers {
        put_nullable(out, Some(&h.key));
        put_nullable(out, h.value.as_deref());
    }
}

fn put_nullable(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}

fn put_i16(out: &mut [u8], at: usize, v: i16) {
    out[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn put_i32(out: &mut [u8], at: usize, v: i32) {
    out[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn put_i64(out: &mut [u8], at: usize, v: i64) {
    out[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

fn put_producer(out: &mut [u8], producer: ProducerFields) {
    put_i64(out, PRODUCER_ID, producer.producer_id);
    put_i16(out, PRODUCER_EPOCH, producer.producer_epoch);
    put_i32(out, BASE_SEQUENCE, producer.base_sequence);
}

/// Computes and stores the CRC; the batch header must be otherwise complete.
pub(super) fn finish_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[ATTRIBUTES..]);
    batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Writes the header into the first 61 bytes of `out`, which already holds the records.
pub(super) fn put_header_fields(out: &mut [u8], fields: HeaderFields) {
    put_i64(out, BASE_OFFSET, fields.base_offset);
    put_i32(out, BATCH_LENGTH, (out.len() - LOG_OVERHEAD) as i32);
    put_i32(out, PARTITION_LEADER_EPOCH, fields.partition_leader_epoch);
    out[MAGIC] = MAGIC_V2 as u8;
    put_i16(out, ATTRIBUTES, fields.attributes);
    put_i32(out, LAST_OFFSET_DELTA, fields.last_offset_delta);
    put_i64(out, BASE_TIMESTAMP, fields.base_timestamp);
    put_i64(out, MAX_TIMESTAMP, fields.max_timestamp);
    put_producer(out, fields.producer);
    put_i32(out, RECORDS_COUNT, fields.records_count);
}

/// Every header field except the length, magic and CRC, which are derived from the buffer.
pub(super) struct HeaderFields {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    /// Only id, epoch and sequence are used; the transactional bit is in `attributes`.
    pub producer: ProducerFields,
    pub records_count: i32,
}

/// Checks that `batch` is exactly one v2 batch, as rewriting requires.
fn check_whole_batch(batch: &[u8]) -> Result<(), RecordError> {
    if batch.len() < BATCH_HEADER_LEN {
        return Err(RecordError::NotABatch {
            reason: format!(
                "{} bytes is shorter than the {BATCH_HEADER_LEN}-byte header",
                batch.len()
            ),
        });
    }
    let magic = batch[MAGIC] as i8;
    if magic != MAGIC_V2 {
        return Err(RecordError::NotABatch {
            reason: format!("magic is {magic}, not 2"),
        });
    }
    let length = i32::from_be_bytes([
        batch[BATCH_LENGTH],
        batch[BATCH_LENGTH + 1],
        batch[BATCH_LENGTH + 2],
        batch[BATCH_LENGTH + 3],
    ]);
    if usize::try_from(length).ok() != Some(batch.len() - LOG_OVERHEAD) {
        return Err(RecordError::NotABatch {
            reason: format!(
                "batch length field says {length} but the buffer holds {}",
                batch.len() - LOG_OVERHEAD
            ),
        });
    }
    Ok(())
}

/// Rewrites producer id / epoch / base sequence (and the transactional bit) of an encoded batch
/// and recomputes the CRC, for epoch bumps. `batch` must be exactly one v2 batch.
pub fn rewrite_producer_fields(
    batch: &mut BytesMut,
    producer: ProducerFields,
) -> Result<(), RecordError> {
    check_whole_batch(batch)?;
    put_producer(batch, producer);
    let mut attributes = i16::from_be_bytes([batch[ATTRIBUTES], batch[ATTRIBUTES + 1]]);
    if producer.transactional {
        attributes |= TRANSACTIONAL_FLAG;
    } else {
        attributes &= !TRANSACTIONAL_FLAG;
    }
    put_i16(batch, ATTRIBUTES, attributes);
    finish_crc(batch);
    Ok(())
}

/// Sets the base offset of an encoded batch, as a broker does on append. The base offset is not
/// covered by the CRC, so nothing else changes. `batch` must be exactly one v2 batch.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) -> Result<(), RecordError> {
    check_whole_batch(batch)?;
    put_i64(batch, BASE_OFFSET, base_offset);
    Ok(())
}
