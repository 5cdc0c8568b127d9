//! Feeds arbitrary bytes to the record batch decoder: `decode_batches`, then `records()` and
//! `control_record()` on every batch that frames. Nothing may panic, hang or allocate beyond
//! the decompression limit.
//!
//! The first byte picks how the rest is used, so that the fuzzer is not stuck at the CRC check:
//! - 0: as a fetch response's records field, untouched (framing, magic, CRC handling);
//! - 1: the same with every framed v2 batch's CRC fixed up (header and record parsing);
//! - 2: as attributes (1 byte), records count (4 bytes) and payload of one v2 batch with a
//!   valid CRC (decompressors on arbitrary input, record parsing).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use onceflow::protocol::records::decode_batches;

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
    let buf = match mode % 3 {
        0 => rest.to_vec(),
        1 => {
            let mut b = rest.to_vec();
            fix_crcs(&mut b);
            b
        }
        _ => {
            if rest.len() < 5 {
                return;
            }
            wrap(rest[0], [rest[1], rest[2], rest[3], rest[4]], &rest[5..])
        }
    };
    for batch in decode_batches(Bytes::from(buf)) {
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
