//! Feeds arbitrary bytes to the record batch decoder: `decode_batches`, then `records()` and
//! `control_record()` on every batch that frames, and to the any-format reader the consumer
//! uses (`decode_entries`, v0/v1 messages included), then every entry's records. Nothing may
//! panic, hang or allocate beyond the decompression limit.
//!
//! The first byte picks how the rest is used, so that the fuzzer is not stuck at the CRC check:
//! - 0: as a fetch response's records field, untouched (framing, magic, CRC handling);
//! - 1: the same with every framed v2 batch's CRC fixed up (header and record parsing);
//! - 2: as attributes (1 byte), records count (4 bytes) and payload of one v2 batch with a
//!   valid CRC (decompressors on arbitrary input, record parsing);
//! - 3: as a records field with every framed v0/v1 message's CRC-32 fixed up (legacy message
//!   parsing, compression wrappers and their inner message sets);
//! - 4: as magic (1 byte: 0 or 1), attributes (1 byte) and value of one v0/v1 wrapper with a
//!   valid CRC (legacy decompression and inner sets on arbitrary input).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use onceflow::protocol::records::{decode_batches, decode_entries};

const HEADER: usize = 61;

fn fix_crcs(buf: &mut [u8]) {
    let mut pos = 0;
    while buf.len() - pos >= HEADER {
        let len = i32::from_be_bytes(buf[pos + 8..pos + 12].try_into().unwrap());
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        let end = pos + 12 + len;
        if end > buf.len() {
            return;
        }
        if end - pos >= HEADER && buf[pos + 16] == 2 {
            let crc = crc32c::crc32c(&buf[pos + 21..end]);
            buf[pos + 17..pos + 21].copy_from_slice(&crc.to_be_bytes());
        }
        pos = end;
    }
}

fn fix_legacy_crcs(buf: &mut [u8]) {
    let mut pos = 0;
    while buf.len() - pos >= 17 {
        let len = i32::from_be_bytes(buf[pos + 8..pos + 12].try_into().unwrap());
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        let end = pos + 12 + len;
        if end > buf.len() {
            return;
        }
        if len >= 5 && buf[pos + 16] < 2 {
            let crc = crc32fast::hash(&buf[pos + 16..end]);
            buf[pos + 12..pos + 16].copy_from_slice(&crc.to_be_bytes());
        }
        pos = end;
    }
}

/// One v0/v1 message whose value is `value`: offset 100, null key.
fn legacy_wrap(magic: u8, attributes: u8, value: &[u8]) -> Vec<u8> {
    let magic = magic % 2;
    let mut body = vec![magic, attributes];
    if magic == 1 {
        body.extend_from_slice(&0i64.to_be_bytes());
    }
    body.extend_from_slice(&(-1i32).to_be_bytes());
    body.extend_from_slice(&(value.len() as i32).to_be_bytes());
    body.extend_from_slice(value);
    let mut b = 100i64.to_be_bytes().to_vec();
    b.extend_from_slice(&((4 + body.len()) as i32).to_be_bytes());
    b.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    b.extend_from_slice(&body);
    b
}

fn wrap(attributes: u8, count: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; HEADER];
    b.extend_from_slice(payload);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    b[16] = 2;
    b[21..23].copy_from_slice(&i16::from(attributes & 0x3F).to_be_bytes());
    b[57..61].copy_from_slice(&count);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let buf = match mode % 5 {
        0 => rest.to_vec(),
        1 => {
            let mut b = rest.to_vec();
            fix_crcs(&mut b);
            b
        }
        3 => {
            let mut b = rest.to_vec();
            fix_legacy_crcs(&mut b);
            b
        }
        4 => {
            if rest.len() < 2 {
                return;
            }
            legacy_wrap(rest[0], rest[1], &rest[2..])
        }
        _ => {
            if rest.len() < 5 {
                return;
            }
            wrap(rest[0], [rest[1], rest[2], rest[3], rest[4]], &rest[5..])
        }
    };
    let buf = Bytes::from(buf);
    for entry in decode_entries(buf.clone()) {
        let Ok(entry) = entry else { continue };
        let _ = entry.next_offset();
        if let Ok(iter) = entry.record_iter() {
            iter.for_each(drop);
        }
    }
    for batch in decode_batches(buf) {
        let Ok(batch) = batch else { continue };
        let _ = batch.compression();
        let _ = batch.last_offset();
        let _ = batch.next_offset();
        if let Ok(records) = batch.records() {
            assert!(records.len() <= batch.records_count as usize);
        }
        let _ = batch.control_record();
        if let Ok(iter) = batch.record_iter() {
            iter.for_each(drop);
        }
    }
});
