//! The v0/v1 message-set reader: byte fixtures built here by the spec (the layout in
//! `legacy.rs`), fixtures written by the Java client's own builder (fixtures/legacy), and
//! hostile input.

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::Value;

use super::{
    decode_batches, decode_entries, BatchBuilder, Compression, CrcCheck, LogEntry, ProducerFields,
    Record, RecordError,
};
use crate::protocol::compression::{compress, CompressionError};

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), bit by bit: an implementation
/// independent of the one the decoder uses.
fn crc32_ieee(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn the_test_crc_is_crc32_ieee() {
    // The standard check value of CRC-32/ISO-HDLC.
    assert_eq!(crc32_ieee(b"123456789"), 0xCBF4_3926);
}

/// One v0/v1 message, laid out field by field as the protocol guide describes it:
/// offset i64 | message_size i32 | crc u32 | magic i8 | attributes i8 | [timestamp i64, v1]
/// | key (i32 length, -1 = null) | value (i32 length, -1 = null).
fn message(
    offset: i64,
    magic: u8,
    attributes: u8,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Vec<u8> {
    // Everything the CRC covers: magic through the end of the value.
    let mut body = vec![magic, attributes];
    if magic == 1 {
        body.extend_from_slice(&timestamp.to_be_bytes());
    }
    for field in [key, value] {
        match field {
            None => body.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(b) => {
                body.extend_from_slice(&(b.len() as i32).to_be_bytes());
                body.extend_from_slice(b);
            }
        }
    }
    let mut out = offset.to_be_bytes().to_vec();
    out.extend_from_slice(&((4 + body.len()) as i32).to_be_bytes());
    out.extend_from_slice(&crc32_ieee(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// A compressed wrapper: `codec` in the attributes, the compressed inner set as the value.
fn wrapper(
    offset: i64,
    magic: u8,
    codec: Compression,
    log_append_time: bool,
    timestamp: i64,
    inner: &[u8],
) -> Vec<u8> {
    let attributes = codec.id() as u8 | if log_append_time { 0x08 } else { 0 };
    let compressed = compress(codec, inner).unwrap();
    message(
        offset,
        magic,
        attributes,
        timestamp,
        None,
        Some(&compressed),
    )
}

fn entries(buf: Vec<u8>) -> Vec<Result<LogEntry, RecordError>> {
    decode_entries(Bytes::from(buf)).collect()
}

/// Every record of every entry; panics on any error.
fn all_records(buf: Vec<u8>) -> Vec<Record> {
    let mut out = Vec::new();
    for e in entries(buf) {
        let e = e.expect("valid entry");
        out.extend(e.record_iter().unwrap().map(|r| r.unwrap()));
    }
    out
}

fn legacy(e: &Result<LogEntry, RecordError>) -> &super::LegacyMessage {
    match e {
        Ok(LogEntry::Legacy(m)) => m,
        other => panic!("expected a legacy message, got {other:?}"),
    }
}

/// (offset, timestamp, key, value) of a record.
type Summary<'a> = (i64, i64, Option<&'a [u8]>, Option<&'a [u8]>);

fn summary(records: &[Record]) -> Vec<Summary<'_>> {
    records
        .iter()
        .map(|r| (r.offset, r.timestamp, r.key.as_deref(), r.value.as_deref()))
        .collect()
}

#[test]
fn plain_v0_messages_have_their_offsets_and_no_timestamp() {
    let mut buf = message(5, 0, 0, 0, Some(b"k"), Some(b"hello"));
    buf.extend(message(6, 0, 0, 0, None, Some(b"")));
    buf.extend(message(7, 0, 0, 0, Some(b""), None));
    let es = entries(buf.clone());
    assert_eq!(es.len(), 3);
    let m = legacy(&es[0]);
    assert_eq!((m.offset, m.magic, m.next_offset()), (5, 0, 6));
    assert_eq!(m.size_in_bytes(), 12 + 14 + 1 + 5);
    assert!(!m.is_wrapper());
    let got = all_records(buf);
    assert_eq!(
        summary(&got),
        [
            (5, -1, Some(&b"k"[..]), Some(&b"hello"[..])),
            (6, -1, None, Some(&b""[..])),
            (7, -1, Some(&b""[..]), None),
        ]
    );
    assert!(got.iter().all(|r| r.headers.is_empty()));
}

#[test]
fn plain_v1_messages_carry_their_timestamps() {
    let mut buf = message(0, 1, 0, 1_600_000_000_000, Some(b"a"), Some(b"1"));
    // LogAppendTime on a plain message: the broker already wrote the append time into it.
    buf.extend(message(1, 1, 0x08, 1_700_000_000_000, None, Some(b"2")));
    let got = all_records(buf);
    assert_eq!(
        summary(&got),
        [
            (0, 1_600_000_000_000, Some(&b"a"[..]), Some(&b"1"[..])),
            (1, 1_700_000_000_000, None, Some(&b"2"[..])),
        ]
    );
}

/// The case the task names: a gzip wrapper of magic 1 whose inner offsets are relative
/// (0, 1, 2 as the producer wrote them) and whose own offset is the last absolute one (12), so
/// the records are at 10, 11, 12.
#[test]
fn gzip_wrapped_v1_turns_relative_inner_offsets_into_absolute_ones() {
    let mut inner = message(0, 1, 0, 1_000, Some(b"k0"), Some(b"v0"));
    inner.extend(message(1, 1, 0, 2_000, None, Some(b"v1")));
    inner.extend(message(2, 1, 0, 3_000, Some(b"k2"), None));
    let buf = wrapper(12, 1, Compression::Gzip, false, 3_000, &inner);
    let es = entries(buf.clone());
    assert_eq!(es.len(), 1);
    let m = legacy(&es[0]);
    assert!(m.is_wrapper());
    assert_eq!(m.compression().unwrap(), Compression::Gzip);
    assert_eq!(m.next_offset(), 13);
    assert_eq!(
        summary(&all_records(buf)),
        [
            (10, 1_000, Some(&b"k0"[..]), Some(&b"v0"[..])),
            (11, 2_000, None, Some(&b"v1"[..])),
            (12, 3_000, Some(&b"k2"[..]), None),
        ]
    );
}

#[test]
fn a_log_append_time_wrapper_gives_its_timestamp_to_every_inner_message() {
    let mut inner = message(0, 1, 0, 1_000, None, Some(b"a"));
    inner.extend(message(1, 1, 0, 2_000, None, Some(b"b")));
    let buf = wrapper(41, 1, Compression::Gzip, true, 9_999, &inner);
    let got = all_records(buf);
    assert_eq!(
        got.iter()
            .map(|r| (r.offset, r.timestamp))
            .collect::<Vec<_>>(),
        [(40, 9_999), (41, 9_999)]
    );
}

#[test]
fn gzip_wrapped_v0_keeps_the_absolute_inner_offsets() {
    let mut inner = message(20, 0, 0, 0, Some(b"x"), Some(b"1"));
    inner.extend(message(21, 0, 0, 0, Some(b"y"), Some(b"2")));
    let buf = wrapper(21, 0, Compression::Gzip, false, 0, &inner);
    assert_eq!(
        summary(&all_records(buf)),
        [
            (20, -1, Some(&b"x"[..]), Some(&b"1"[..])),
            (21, -1, Some(&b"y"[..]), Some(&b"2"[..])),
        ]
    );
}

#[test]
fn every_legacy_codec_round_trips_through_a_wrapper() {
    for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4] {
        for magic in [0u8, 1] {
            let mut inner = Vec::new();
            for i in 0..5i64 {
                let o = if magic == 1 { i } else { 100 + i };
                inner.extend(message(o, magic, 0, 7, None, Some(&[b'v'; 300])));
            }
            let buf = wrapper(104, magic, codec, false, 7, &inner);
            let offsets: Vec<i64> = all_records(buf).iter().map(|r| r.offset).collect();
            assert_eq!(offsets, (100..105).collect::<Vec<_>>(), "{codec} v{magic}");
        }
    }
}

#[test]
fn a_v1_wrapper_at_offset_zero_means_base_zero() {
    // Some librdkafka versions wrote 0 as the wrapper offset; Java then takes base 0.
    let mut inner = message(0, 1, 0, 1, None, Some(b"a"));
    inner.extend(message(1, 1, 0, 1, None, Some(b"b")));
    let buf = wrapper(0, 1, Compression::Gzip, false, 1, &inner);
    let offsets: Vec<i64> = all_records(buf).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1]);
}

/// Decodes one entry and returns the error its records give.
fn record_error(buf: Vec<u8>) -> RecordError {
    let es = entries(buf);
    assert_eq!(es.len(), 1, "{es:?}");
    let e = es[0].as_ref().expect("the entry frames and passes its CRC");
    match e.record_iter() {
        Err(err) => err,
        Ok(it) => it
            .filter_map(Result::err)
            .next()
            .expect("an error from the records"),
    }
}

#[test]
fn corrupt_wrappers_are_errors_naming_the_wrapper_offset() {
    let good_inner = message(0, 1, 0, 1, None, Some(b"a"));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "wrapper offset below the last inner offset",
            {
                let mut inner = good_inner.clone();
                inner.extend(message(5, 1, 0, 1, None, Some(b"b")));
                wrapper(3, 1, Compression::Gzip, false, 1, &inner)
            },
            "message at offset 3: wrapper offset is below its last inner offset (and not zero)",
        ),
        (
            "a compressed inner message",
            {
                let nested = wrapper(0, 1, Compression::Gzip, false, 1, &good_inner);
                wrapper(3, 1, Compression::Gzip, false, 1, &nested)
            },
            "message at offset 3: an inner message is compressed",
        ),
        (
            "no inner messages",
            wrapper(3, 1, Compression::Gzip, false, 1, &[]),
            "message at offset 3: compressed wrapper holds no messages",
        ),
        (
            "a truncated inner set",
            {
                let mut inner = good_inner.clone();
                inner.extend(&message(1, 1, 0, 1, None, Some(b"bb"))[..20]);
                wrapper(3, 1, Compression::Gzip, false, 1, &inner)
            },
            "message at offset 3: the inner message set ends in a truncated message",
        ),
        (
            "an inner CRC mismatch",
            {
                let mut inner = good_inner.clone();
                let last = inner.len() - 1;
                inner[last] ^= 1;
                wrapper(3, 1, Compression::Gzip, false, 1, &inner)
            },
            "message at offset 3: an inner message fails its CRC check",
        ),
        (
            "an inner magic 2",
            {
                let mut inner = good_inner.clone();
                inner[16] = 2;
                wrapper(3, 1, Compression::Gzip, false, 1, &inner)
            },
            "message at offset 3: an inner message has a magic other than 0 or 1",
        ),
        (
            "a null wrapper value",
            message(3, 1, 1, 1, None, None),
            "message at offset 3: compressed wrapper has a null value",
        ),
        (
            "zstd, which magic 1 never had",
            message(3, 1, 4, 1, None, Some(b"whatever")),
            "batch at offset 3: unknown compression codec 4",
        ),
        (
            "bytes that are not gzip",
            message(3, 1, 1, 1, None, Some(b"not gzip at all")),
            "batch at offset 3: corrupt gzip data",
        ),
    ];
    for (what, buf, want) in cases {
        let msg = record_error(buf).to_string();
        assert!(msg.starts_with(want), "{what}: {msg}");
    }
}

#[test]
fn malformed_messages_are_errors_and_the_next_entry_is_still_read() {
    let next = message(9, 0, 0, 0, None, Some(b"next"));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "CRC mismatch",
            {
                let mut m = message(4, 1, 0, 1, Some(b"k"), Some(b"v"));
                let last = m.len() - 1;
                m[last] ^= 0x40;
                m
            },
            "batch at offset 4: CRC mismatch",
        ),
        (
            "v1 shorter than its minimum",
            {
                // A v0-sized body claiming magic 1: 14 bytes, 8 short of the timestamp.
                let mut m = message(4, 0, 0, 0, None, None);
                m[16] = 1;
                let crc = crc32_ieee(&m[16..]);
                m[12..16].copy_from_slice(&crc.to_be_bytes());
                m
            },
            "batch at offset 4: batch length 14 is shorter than the 22-byte minimum",
        ),
        (
            "key longer than the message",
            {
                let mut m = message(4, 0, 0, 0, Some(b"k"), Some(b"v"));
                m[18..22].copy_from_slice(&100i32.to_be_bytes());
                let crc = crc32_ieee(&m[16..]);
                m[12..16].copy_from_slice(&crc.to_be_bytes());
                m
            },
            "message at offset 4: key runs past the end of the message",
        ),
        (
            "negative value length",
            {
                let mut m = message(4, 0, 0, 0, None, Some(b"v"));
                m[22..26].copy_from_slice(&(-7i32).to_be_bytes());
                let crc = crc32_ieee(&m[16..]);
                m[12..16].copy_from_slice(&crc.to_be_bytes());
                m
            },
            "message at offset 4: negative value length",
        ),
        (
            "bytes after the value",
            {
                let mut m = message(4, 0, 0, 0, None, Some(b"v"));
                m.push(0);
                let size = (m.len() - 12) as i32;
                m[8..12].copy_from_slice(&size.to_be_bytes());
                let crc = crc32_ieee(&m[16..]);
                m[12..16].copy_from_slice(&crc.to_be_bytes());
                m
            },
            "message at offset 4: message has bytes left over after its value",
        ),
    ];
    for (what, mut buf, want) in cases {
        buf.extend_from_slice(&next);
        let es = entries(buf);
        assert_eq!(es.len(), 2, "{what}: {es:?}");
        let msg = es[0].as_ref().unwrap_err().to_string();
        assert!(msg.starts_with(want), "{what}: {msg}");
        assert_eq!(legacy(&es[1]).offset, 9, "{what}");
    }
}

#[test]
fn a_truncated_last_message_ends_the_iteration_silently() {
    let mut buf = message(0, 1, 0, 1, None, Some(b"whole"));
    let cut = message(1, 1, 0, 1, None, Some(b"cut by the broker"));
    buf.extend_from_slice(&cut[..cut.len() - 3]);
    let es = entries(buf);
    assert_eq!(es.len(), 1);
    assert_eq!(legacy(&es[0]).offset, 0);
}

#[test]
fn decompression_of_a_wrapper_is_bounded() {
    let mut inner = Vec::new();
    for i in 0..100 {
        inner.extend(message(i, 1, 0, 1, None, Some(&[0u8; 1000])));
    }
    let buf = wrapper(99, 1, Compression::Gzip, false, 1, &inner);
    let es = entries(buf);
    let LogEntry::Legacy(m) = es[0].as_ref().unwrap() else {
        panic!("legacy")
    };
    assert!(m.value.as_ref().unwrap().len() < 2_000, "compresses well");
    let err = m.record_iter_with_limit(50_000).unwrap_err();
    assert!(
        matches!(
            err,
            RecordError::Decompress {
                offset: 99,
                source: CompressionError::TooLarge { limit: 50_000, .. }
            }
        ),
        "{err:?}"
    );
    assert_eq!(m.record_iter_with_limit(200_000).unwrap().count(), 100);
}

#[test]
fn decode_batches_still_reads_v2_only() {
    let buf = message(7, 1, 0, 1, None, Some(b"x"));
    let items: Vec<_> = decode_batches(Bytes::from(buf)).collect();
    assert!(
        matches!(
            items[..],
            [Err(RecordError::UnsupportedMagic {
                offset: 7,
                magic: 1
            })]
        ),
        "{items:?}"
    );
}

#[test]
fn v0_v1_and_v2_entries_follow_each_other_in_one_buffer() {
    let mut buf = message(0, 0, 0, 0, None, Some(b"zero"));
    let mut inner = message(0, 1, 0, 5, None, Some(b"one"));
    inner.extend(message(1, 1, 0, 6, None, Some(b"two")));
    buf.extend(wrapper(2, 1, Compression::Gzip, false, 6, &inner));
    let mut b = BatchBuilder::new(Compression::None);
    assert!(b.try_append(7, None, Some(b"three"), &[], usize::MAX));
    let mut v2 = bytes::BytesMut::from(&b.build(ProducerFields::NONE).unwrap()[..]);
    super::set_base_offset(&mut v2, 3).unwrap();
    buf.extend_from_slice(&v2);
    let es = entries(buf.clone());
    assert!(matches!(es[2], Ok(LogEntry::Batch(_))), "{es:?}");
    let got = all_records(buf);
    assert_eq!(
        got.iter()
            .map(|r| (r.offset, r.value.as_deref().unwrap()))
            .collect::<Vec<_>>(),
        [
            (0, &b"zero"[..]),
            (1, &b"one"[..]),
            (2, &b"two"[..]),
            (3, &b"three"[..])
        ]
    );
    assert_eq!(
        es.iter()
            .map(|e| e.as_ref().unwrap().next_offset())
            .collect::<Vec<_>>(),
        [1, 3, 4]
    );
}

// ------------------------------------------------------------------------------------------------
// fixtures/legacy: written by kafka-clients 4.1.1's MemoryRecordsBuilder, expected output read
// back by its MemoryRecords reader (see fixtures/legacy/README.md).

const JAVA_FIXTURES: [&str; 9] = [
    "v0-plain",
    "v1-plain",
    "v0-gzip",
    "v1-gzip",
    "v1-gzip-log-append-time",
    "v1-snappy",
    "v0-lz4",
    "v1-lz4",
    "mixed",
];

fn fixture(file: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/legacy/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn b64(v: &Value) -> Option<Vec<u8>> {
    v.as_str()
        .map(|s| base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s).unwrap())
}

#[test]
fn every_java_legacy_fixture_decodes_to_what_the_java_reader_read() {
    for name in JAVA_FIXTURES {
        let got = all_records(fixture(&format!("{name}.log")));
        let want: Vec<Value> = String::from_utf8(fixture(&format!("{name}.expected.jsonl")))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(got.len(), want.len(), "{name}: record count");
        for (r, w) in got.iter().zip(&want) {
            assert_eq!(Some(r.offset), w["offset"].as_i64(), "{name}: offset");
            assert_eq!(
                Some(r.timestamp),
                w["timestamp"].as_i64(),
                "{name}: timestamp"
            );
            assert_eq!(
                r.key.as_deref().map(<[u8]>::to_vec),
                b64(&w["key"]),
                "{name}@{}: key",
                r.offset
            );
            assert_eq!(
                r.value.as_deref().map(<[u8]>::to_vec),
                b64(&w["value"]),
                "{name}@{}: value",
                r.offset
            );
        }
    }
}

#[test]
fn every_legacy_fixture_file_is_covered() {
    let dir = format!("{}/fixtures/legacy", env!("CARGO_MANIFEST_DIR"));
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if let Some(stem) = name.strip_suffix(".log") {
            assert!(JAVA_FIXTURES.contains(&stem), "{name} has no test");
        }
    }
}

/// The Java client of the magic 0 era wrote a wrong LZ4 header checksum (KAFKA-3160) and the
/// builder still does for magic 0: the fixture must carry it, or the test above proves nothing
/// about the repair.
#[test]
fn the_java_v0_lz4_fixture_has_the_broken_header_checksum() {
    let buf = fixture("v0-lz4.log");
    let es = entries(buf);
    let m = legacy(&es[0]);
    let frame = m.value.as_ref().unwrap();
    assert_eq!(&frame[..4], &[0x04, 0x22, 0x4D, 0x18]);
    let flg = frame[4];
    assert_eq!(flg & 0x09, 0, "no content size, no dictionary id");
    let right = (twox_hash::XxHash32::oneshot(0, &frame[4..6]) >> 8) as u8;
    let broken = (twox_hash::XxHash32::oneshot(0, &frame[0..6]) >> 8) as u8;
    assert_ne!(right, broken);
    assert_eq!(frame[6], broken);
}

// ------------------------------------------------------------------------------------------------
// Hostile input

proptest! {
    /// Any bytes after a valid legacy header: decoding never panics, and records never exceed
    /// what the bytes can hold.
    #[test]
    fn arbitrary_legacy_bodies_never_panic(
        magic in 0u8..2,
        attributes in any::<u8>(),
        offset in any::<i64>(),
        rest in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut body = vec![magic, attributes];
        body.extend_from_slice(&rest);
        let mut buf = offset.to_be_bytes().to_vec();
        buf.extend_from_slice(&((4 + body.len()) as i32).to_be_bytes());
        buf.extend_from_slice(&crc32_ieee(&body).to_be_bytes());
        buf.extend_from_slice(&body);
        for e in decode_entries(Bytes::from(buf)).flatten() {
            let _ = e.next_offset();
            if let Ok(it) = e.record_iter() {
                prop_assert!(it.count() <= rest.len() + 1);
            }
        }
    }

    /// A wrapper around arbitrary (valid-CRC) inner bytes: errors, never panics.
    #[test]
    fn arbitrary_inner_sets_never_panic(
        magic in 0u8..2,
        codec in 1u8..4,
        inner in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let codec = Compression::from_id(i16::from(codec)).unwrap();
        let buf = wrapper(50, magic, codec, false, 1, &inner);
        for e in decode_entries(Bytes::from(buf)).flatten() {
            if let Ok(it) = e.record_iter() {
                for r in it {
                    let _ = r;
                }
            }
        }
    }
}

/// `check.crcs`: a plain message and a wrapper's inner message with a CRC that does not match
/// their (intact) bytes are refused when verifying and read when told to skip the check.
#[test]
fn crc_check_skip_reads_messages_whose_crc_does_not_match() {
    let flip_crc = |mut m: Vec<u8>| {
        m[12] ^= 0xFF; // the crc field of a v0/v1 message
        m
    };
    let plain = flip_crc(message(7, 1, 0, 100, Some(b"k"), Some(b"v")));
    let inner = flip_crc(message(0, 1, 0, 100, None, Some(b"inside")));
    let wrapped = wrapper(8, 1, Compression::Gzip, false, 100, &inner);
    let mut buf = plain.clone();
    buf.extend(&wrapped);

    let verified: Vec<_> = decode_entries(Bytes::from(buf.clone())).collect();
    assert!(
        matches!(verified[0], Err(RecordError::CrcMismatch { offset: 7, .. })),
        "{:?}",
        verified[0]
    );
    let inner_err = legacy(&verified[1]).record_iter().unwrap_err();
    assert_eq!(
        inner_err.to_string(),
        "message at offset 8: an inner message fails its CRC check"
    );

    let mut records = Vec::new();
    for e in decode_entries(Bytes::from(buf)).crc_check(CrcCheck::Skip) {
        let e = e.expect("read without its CRC checked");
        records.extend(e.record_iter().unwrap().map(|r| r.unwrap()));
    }
    assert_eq!(
        summary(&records),
        vec![
            (7, 100, Some(&b"k"[..]), Some(&b"v"[..])),
            (8, 100, None, Some(&b"inside"[..])),
        ]
    );
}
