//! Control records: the commit / abort markers a transaction coordinator writes.

use bytes::Bytes;

use super::builder::{body_size, encode_record, finish_crc, put_header_fields, HeaderFields};
use super::layout::{CONTROL_FLAG, TRANSACTIONAL_FLAG};
use super::{ProducerFields, Record, RecordError, BATCH_HEADER_LEN, NO_SEQUENCE};

/// Control record key type of an abort marker.
pub const CONTROL_TYPE_ABORT: i16 = 0;
/// Control record key type of a commit marker.
pub const CONTROL_TYPE_COMMIT: i16 = 1;

/// The record of a control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlRecord {
    /// The producer's transaction up to this offset was aborted.
    Abort {
        /// Epoch of the coordinator that wrote the marker.
        coordinator_epoch: i32,
    },
    /// The producer's transaction up to this offset was committed.
    Commit {
        /// Epoch of the coordinator that wrote the marker.
        coordinator_epoch: i32,
    },
    /// Another control type (KRaft leader change, snapshot markers, ...); consumers skip these.
    Other {
        /// The type field of the control key.
        key_type: i16,
    },
}

impl ControlRecord {
    /// The type field of the control key.
    pub fn key_type(&self) -> i16 {
        match *self {
            ControlRecord::Abort { .. } => CONTROL_TYPE_ABORT,
            ControlRecord::Commit { .. } => CONTROL_TYPE_COMMIT,
            ControlRecord::Other { key_type } => key_type,
        }
    }

    /// Decodes a control batch's record. Newer key / value versions are read as version 0, as
    /// the Java client does, since later versions only append fields.
    pub(super) fn parse(offset: i64, record: &Record) -> Result<ControlRecord, RecordError> {
        let err = |reason| RecordError::MalformedControlRecord { offset, reason };
        let key = record.key.as_deref().ok_or_else(|| err("null key"))?;
        let &[v0, v1, t0, t1, ..] = key else {
            return Err(err("key shorter than 4 bytes"));
        };
        if i16::from_be_bytes([v0, v1]) < 0 {
            return Err(err("negative key version"));
        }
        let key_type = i16::from_be_bytes([t0, t1]);
        if key_type != CONTROL_TYPE_ABORT && key_type != CONTROL_TYPE_COMMIT {
            return Ok(ControlRecord::Other { key_type });
        }
        let value = record
            .value
            .as_deref()
            .ok_or_else(|| err("null marker value"))?;
        let &[v0, v1, e0, e1, e2, e3, ..] = value else {
            return Err(err("marker value shorter than 6 bytes"));
        };
        if i16::from_be_bytes([v0, v1]) < 0 {
            return Err(err("negative marker value version"));
        }
        let coordinator_epoch = i32::from_be_bytes([e0, e1, e2, e3]);
        Ok(if key_type == CONTROL_TYPE_ABORT {
            ControlRecord::Abort { coordinator_epoch }
        } else {
            ControlRecord::Commit { coordinator_epoch }
        })
    }
}

/// Builds one control batch holding `marker`, as a transaction coordinator has the partition
/// leader write it: transactional and control bits set, base sequence -1, a single record at
/// `base_offset`. Used by tests and the in-process fake broker.
pub fn encode_control_batch(
    base_offset: i64,
    partition_leader_epoch: i32,
    timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    marker: ControlRecord,
) -> Bytes {
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&marker.key_type().to_be_bytes());
    let value = match marker {
        ControlRecord::Abort { coordinator_epoch }
        | ControlRecord::Commit { coordinator_epoch } => {
            let mut v = [0u8; 6];
            v[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
            Some(v)
        }
        ControlRecord::Other { .. } => None,
    };
    let value = value.as_ref().map(|v| &v[..]);
    encode_raw_control_batch(
        base_offset,
        partition_leader_epoch,
        timestamp,
        producer_id,
        producer_epoch,
        &key,
        value,
    )
}

/// A control batch with the given key and value bytes, valid or not: tests use it to build
/// markers a coordinator would never write (too short, negative version, unknown type).
pub(crate) fn encode_raw_control_batch(
    base_offset: i64,
    partition_leader_epoch: i32,
    timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    key: &[u8],
    value: Option<&[u8]>,
) -> Bytes {
    // Keys and values here are a few bytes: no length field can overflow.
    let body = body_size(0, 0, Some(key), value, &[]).unwrap_or_default();
    let mut out = vec![0u8; BATCH_HEADER_LEN];
    encode_record(&mut out, body, 0, 0, Some(key), value, &[]);
    put_header_fields(
        &mut out,
        HeaderFields {
            base_offset,
            partition_leader_epoch,
            attributes: CONTROL_FLAG | TRANSACTIONAL_FLAG,
            last_offset_delta: 0,
            base_timestamp: timestamp,
            max_timestamp: timestamp,
            producer: ProducerFields {
                producer_id,
                producer_epoch,
                base_sequence: NO_SEQUENCE,
                transactional: true,
            },
            records_count: 1,
        },
    );
    finish_crc(&mut out);
    Bytes::from(out)
}
