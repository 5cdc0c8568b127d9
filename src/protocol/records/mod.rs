//! The v2 RecordBatch format (magic 2), our own codec, and a reader for the old v0/v1 message
//! sets beside it ([`LegacyMessage`], layout in `legacy.rs`). [`decode_batches`] reads v2 only;
//! [`decode_entries`] reads any format, which is what a consumer needs.
//!
//! Decoding ([`decode_batches`], [`RecordBatch::records`]) is zero-copy: keys, values and header
//! values are [`Bytes`] slices of the fetch response buffer, or of the single buffer a compressed
//! batch is decompressed into. Nothing is sized from a count on the wire, so a hostile batch
//! costs at most a small multiple of its own size (plus the bounded decompression output).
//!
//! Encoding ([`BatchBuilder`]) accumulates encoded records while the producer fills a batch and
//! compresses once when the batch is closed; [`rewrite_producer_fields`] patches an already
//! built batch in place when the producer epoch is bumped.
//!
//! Layout of a v2 batch header (61 bytes, big-endian), as the offsets below assume:
//!
//! | bytes  | field                                     |
//! |--------|-------------------------------------------|
//! | 0..8   | baseOffset i64                            |
//! | 8..12  | batchLength i32 (bytes after this field)  |
//! | 12..16 | partitionLeaderEpoch i32                  |
//! | 16     | magic i8 (2)                              |
//! | 17..21 | crc u32 (CRC-32C of bytes 21..end)        |
//! | 21..23 | attributes i16                            |
//! | 23..27 | lastOffsetDelta i32                       |
//! | 27..35 | baseTimestamp i64                         |
//! | 35..43 | maxTimestamp i64                          |
//! | 43..51 | producerId i64                            |
//! | 51..53 | producerEpoch i16                         |
//! | 53..57 | baseSequence i32                          |
//! | 57..61 | records count i32                         |

use bytes::Bytes;

mod batch;
mod builder;
mod control;
mod entry;
mod legacy;
pub mod varint;

#[cfg(test)]
mod legacy_tests;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fixture_tests;

pub use self::batch::{decode_batches, BatchIter, RecordBatch, RecordIter};
pub use self::builder::{rewrite_producer_fields, set_base_offset, BatchBuilder};
#[cfg(test)]
pub(crate) use self::control::encode_raw_control_batch;
pub use self::control::{
    encode_control_batch, ControlRecord, CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT,
};
pub use self::entry::{decode_entries, EntryIter, LogEntry, LogRecordIter};
pub use self::legacy::{
    LegacyMessage, LegacyRecordIter, MAGIC_V0, MAGIC_V1, V0_MIN_SIZE, V1_MIN_SIZE,
};
pub use crate::protocol::compression::{Compression, CompressionError};

/// Whether decoding checks each entry's checksum: the CRC-32C of a v2 batch, the CRC-32 of a
/// v0/v1 message (and of the messages inside a compressed one). A consumer verifies unless the
/// application sets `check.crcs=false`, as in the Java client; the length, offset and varint
/// checks that keep decoding safe apply either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CrcCheck {
    /// Refuse an entry whose stored checksum does not match its bytes.
    #[default]
    Verify,
    /// Do not compute checksums.
    Skip,
}

/// Size of the v2 batch header, everything before the first record.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes before the part counted by batchLength (baseOffset + batchLength).
pub const LOG_OVERHEAD: usize = 12;
/// The message format this codec writes, and the only one [`decode_batches`] reads.
pub const MAGIC_V2: i8 = 2;

pub(crate) mod layout {
    //! Byte offsets of the header fields, shared by the decoder, builder and rewriter.
    pub const BASE_OFFSET: usize = 0;
    pub const BATCH_LENGTH: usize = 8;
    pub const PARTITION_LEADER_EPOCH: usize = 12;
    pub const MAGIC: usize = 16;
    pub const CRC: usize = 17;
    pub const ATTRIBUTES: usize = 21;
    pub const LAST_OFFSET_DELTA: usize = 23;
    pub const BASE_TIMESTAMP: usize = 27;
    pub const MAX_TIMESTAMP: usize = 35;
    pub const PRODUCER_ID: usize = 43;
    pub const PRODUCER_EPOCH: usize = 51;
    pub const BASE_SEQUENCE: usize = 53;
    pub const RECORDS_COUNT: usize = 57;

    pub const COMPRESSION_MASK: i16 = 0x07;
    pub const TIMESTAMP_TYPE_FLAG: i16 = 0x08;
    pub const TRANSACTIONAL_FLAG: i16 = 0x10;
    pub const CONTROL_FLAG: i16 = 0x20;
}

/// Producer id, epoch or base sequence meaning "none" (idempotence off).
pub const NO_PRODUCER_ID: i64 = -1;
/// Producer epoch meaning "none".
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Base sequence meaning "none".
pub const NO_SEQUENCE: i32 = -1;
/// Partition leader epoch a producer writes; the broker fills in the real one.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;

/// One record header. Keys are UTF-8 on the wire but kept as bytes; duplicate keys are legal
/// and kept in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Header {
    /// Header key.
    pub key: Bytes,
    /// Header value; `None` is a null value (length -1), distinct from empty.
    pub value: Option<Bytes>,
}

impl Header {
    /// A header from anything convertible to `Bytes` (copies `&'static` data for free).
    pub fn new(key: impl Into<Bytes>, value: Option<impl Into<Bytes>>) -> Header {
        Header {
            key: key.into(),
            value: value.map(Into::into),
        }
    }
}

/// One decoded record. Key, value and header values are slices of the batch buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset: the batch's base offset plus this record's offset delta.
    pub offset: i64,
    /// Create time, or for `LogAppendTime` batches the broker's append time (the batch max
    /// timestamp), as the Java client reports it.
    pub timestamp: i64,
    /// Key; `None` is a null key, distinct from an empty one.
    pub key: Option<Bytes>,
    /// Value; `None` is a null value (a tombstone on compacted topics).
    pub value: Option<Bytes>,
    /// Headers in wire order.
    pub headers: Vec<Header>,
}

/// The idempotence / transaction fields of a batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerFields {
    /// Producer id, or -1.
    pub producer_id: i64,
    /// Producer epoch, or -1.
    pub producer_epoch: i16,
    /// Sequence number of the first record, or -1.
    pub base_sequence: i32,
    /// Whether the batch belongs to a transaction (attributes bit 4).
    pub transactional: bool,
}

impl ProducerFields {
    /// No producer id, epoch or sequence: a plain non-idempotent producer.
    pub const NONE: ProducerFields = ProducerFields {
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        base_sequence: NO_SEQUENCE,
        transactional: false,
    };
}

impl Default for ProducerFields {
    fn default() -> Self {
        ProducerFields::NONE
    }
}

/// How a batch's timestamps were assigned (attributes bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Overwritten by the broker on append (topic `message.timestamp.type=LogAppendTime`).
    LogAppendTime,
}

/// What is wrong with a batch or record. Messages are one line and name the batch's base offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The batch length field is negative, so the rest of the buffer cannot be framed.
    #[error("batch at offset {offset}: invalid batch length {length}")]
    InvalidBatchLength {
        /// Base offset of the batch.
        offset: i64,
        /// The length field as read.
        length: i32,
    },
    /// The batch is shorter than its format's header.
    #[error(
        "batch at offset {offset}: batch length {length} is shorter than the {min}-byte minimum"
    )]
    BatchTooShort {
        /// Base offset of the batch.
        offset: i64,
        /// The length field as read.
        length: i32,
        /// The minimum for the format.
        min: usize,
    },
    /// A magic this reader does not handle: v0/v1 in `decode_batches` (use
    /// `decode_entries`), or garbage.
    #[error("batch at offset {offset}: message format v{magic} is not supported")]
    UnsupportedMagic {
        /// Base offset of the batch.
        offset: i64,
        /// The magic byte as read.
        magic: i8,
    },
    /// The stored CRC does not match the data.
    #[error(
        "batch at offset {offset}: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    CrcMismatch {
        /// Base offset of the batch.
        offset: i64,
        /// CRC in the header.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// Compression bits name no known codec.
    #[error("batch at offset {offset}: unknown compression codec {codec}")]
    UnknownCompression {
        /// Base offset of the batch.
        offset: i64,
        /// The 3-bit codec id.
        codec: i16,
    },
    /// The compressed records could not be decompressed (corrupt, or beyond the size limit).
    #[error("batch at offset {offset}: {source}")]
    Decompress {
        /// Base offset of the batch.
        offset: i64,
        /// What the codec reported.
        source: CompressionError,
    },
    /// A record inside the batch is malformed.
    #[error("batch at offset {offset}: record {index}: {reason}")]
    MalformedRecord {
        /// Base offset of the batch.
        offset: i64,
        /// Zero-based position of the record in the batch.
        index: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// The record count in the header disagrees with the records present.
    #[error("batch at offset {offset}: header declares {declared} records but {reason}")]
    RecordCountMismatch {
        /// Base offset of the batch.
        offset: i64,
        /// The count field as read.
        declared: i32,
        /// How the payload disagrees.
        reason: String,
    },
    /// A v0/v1 message, or a compressed wrapper's inner message set, is malformed.
    #[error("message at offset {offset}: {reason}")]
    MalformedMessage {
        /// Offset of the message (for a wrapper, its own offset).
        offset: i64,
        /// What is wrong.
        reason: &'static str,
    },
    /// An entry of a Fetch answer whose offsets cannot be where they are: past the partition's
    /// high watermark (the broker never returns data beyond it), or not after the entry
    /// before it. A batch's base offset is outside its CRC: a bit flipped there on the way
    /// moves every record of the batch, and the consumer's position with them.
    #[error("batch at offset {offset}: {reason}")]
    OffsetsOutOfPlace {
        /// Base offset of the batch (as read).
        offset: i64,
        /// What is wrong.
        reason: String,
    },
    /// The first batch of a Fetch answer starts before `position`, where the whole entries of
    /// the answer before ended: an honest broker answers from the batch holding the fetch
    /// offset, and after whole entries that batch starts there. One of the two answers had a
    /// base offset damaged on the way (outside the CRC).
    #[error(
        "batch at offset {offset} starts before {position}, where the last answer's data ended"
    )]
    StartsBeforeTheLastAnswerEnded {
        /// Base offset of the batch (as read).
        offset: i64,
        /// Where the answer before ended.
        position: i64,
    },
    /// A Fetch answer lists an aborted transaction of `producer_id` from `first_offset`, inside
    /// the data it carries, but no transactional batch of that producer starts there: the
    /// list (outside every CRC) was damaged on the way, and a batch it should drop would be
    /// handed out.
    #[error("the aborted transaction listed for producer {producer_id} from offset {first_offset} matches no batch of the answer")]
    AbortedListContradicted {
        /// The producer id listed.
        producer_id: i64,
        /// The first offset listed.
        first_offset: i64,
    },
    /// An aborted transaction of `producer_id` from `first_offset` was still open where the
    /// whole entries of the answer before ended (`position`, this answer's fetch offset), yet
    /// this answer, carrying data from there, does not list it: an honest broker lists every
    /// aborted transaction whose abort marker is at or after the fetch offset. The list
    /// (outside every CRC) of one of the two answers was damaged on the way.
    #[error("the aborted transaction of producer {producer_id} from offset {first_offset}, open at {position} where the last answer ended, is missing from this answer's list")]
    AbortedTransactionLeftOut {
        /// The producer id of the open transaction.
        producer_id: i64,
        /// Its first offset, as the answer before listed it.
        first_offset: i64,
        /// Where the answer before ended.
        position: i64,
    },
    /// A control batch whose record is not a valid control record.
    #[error("batch at offset {offset}: malformed control record: {reason}")]
    MalformedControlRecord {
        /// Base offset of the batch.
        offset: i64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A buffer handed to `rewrite_producer_fields` or `set_base_offset` is not one whole v2
    /// batch.
    #[error("not a single v2 batch: {reason}")]
    NotABatch {
        /// What is wrong.
        reason: String,
    },
    /// `BatchBuilder::build` was called with no records.
    #[error("cannot build a batch with no records")]
    EmptyBatch,
    /// The encoded batch would not fit the i32 length field.
    #[error("batch of {size} bytes exceeds the format's 2 GiB limit")]
    BatchTooLarge {
        /// Encoded size.
        size: usize,
    },
    /// Compressing the records failed.
    #[error("{0}")]
    Compress(CompressionError),
}
