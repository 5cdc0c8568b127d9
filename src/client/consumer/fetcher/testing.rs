//! Record batches the fetcher's unit tests build.

use crate::protocol::records::{
    decode_entries, BatchBuilder, Compression, LogEntry, ProducerFields,
};
use bytes::{Bytes, BytesMut};

/// A batch of `n` records (values `v0`, `v1`, …) from `base_offset`.
pub(super) fn v2_batch(base_offset: i64, n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None);
    for i in 0..n {
        assert!(b.try_append(1, None, Some(format!("v{i}").as_bytes()), &[], usize::MAX));
    }
    let mut out = BytesMut::from(&b.build(ProducerFields::NONE).unwrap()[..]);
    crate::protocol::records::set_base_offset(&mut out, base_offset).unwrap();
    out.to_vec()
}

/// A batch of `n` records whose values (`{tag}{i}`) make its CRC its own.
pub(super) fn tagged_batch(base_offset: i64, n: usize, tag: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None);
    for i in 0..n {
        assert!(b.try_append(
            1,
            None,
            Some(format!("{tag}{i}").as_bytes()),
            &[],
            usize::MAX
        ));
    }
    let mut out = BytesMut::from(&b.build(ProducerFields::NONE).unwrap()[..]);
    crate::protocol::records::set_base_offset(&mut out, base_offset).unwrap();
    out.to_vec()
}

/// The CRC a batch carries.
pub(super) fn crc_of(batch: &[u8]) -> u32 {
    match decode_entries(Bytes::from(batch.to_vec())).next() {
        Some(Ok(LogEntry::Batch(b))) => b.crc,
        other => panic!("{other:?}"),
    }
}

/// `n` records of producer `pid`'s transaction, from `base`.
pub(super) fn txn_batch(pid: i64, base: i64, n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None);
    for _ in 0..n {
        assert!(b.try_append(1, None, Some(&b"t"[..]), &[], usize::MAX));
    }
    let fields = ProducerFields {
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: 0,
        transactional: true,
    };
    let mut out = BytesMut::from(&b.build(fields).unwrap()[..]);
    crate::protocol::records::set_base_offset(&mut out, base).unwrap();
    out.to_vec()
}
