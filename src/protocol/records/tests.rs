//! Codec tests: round trips, framing tolerance, corruption and hostile input.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::builder::{finish_crc, put_header_fields, HeaderFields};
use super::layout::*;
use super::varint::{put_varint, put_varlong};
use super::*;

/// A record as the test wants it, before encoding.
#[derive(Debug, Clone)]
struct Input {
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<Header>,
}

fn build(codec: Compression, inputs: &[Input], producer: ProducerFields) -> Bytes {
    let mut b = BatchBuilder::new(codec);
    for r in inputs {
        assert!(b.try_append(
            r.timestamp,
            r.key.as_deref(),
            r.value.as_deref(),
            &r.headers,
            usize::MAX
        ));
    }
    b.build(producer).unwrap()
}

fn simple_inputs(n: usize, value_len: usize) -> Vec<Input> {
    (0..n)
        .map(|i| Input {
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(format!("key-{i}").into_bytes()),
            value: Some(vec![b'v'; value_len]),
            headers: vec![Header::new("h", Some(Bytes::from(format!("{i}"))))],
        })
        .collect()
}

fn decode_one(buf: Bytes) -> RecordBatch {
    let mut it = decode_batches(buf);
    let batch = it.next().expect("one batch").expect("valid batch");
    assert!(it.next().is_none());
    batch
}

/// A v2 batch around an arbitrary records payload, with a correct CRC.
fn raw_batch(base_offset: i64, attributes: i16, count: i32, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; BATCH_HEADER_LEN];
    out.extend_from_slice(payload);
    put_header_fields(
        &mut out,
        HeaderFields {
            base_offset,
            partition_leader_epoch: 0,
            attributes,
            last_offset_delta: count.saturating_sub(1),
            base_timestamp: 1000,
            max_timestamp: 2000,
            producer: ProducerFields::NONE,
            records_count: count,
        },
    );
    finish_crc(&mut out);
    out
}

/// Patches `bytes` at `at` and fixes the CRC, to reach past the CRC check with hostile fields.
fn patch(batch: &mut [u8], at: usize, bytes: &[u8]) {
    batch[at..at + bytes.len()].copy_from_slice(bytes);
    finish_crc(batch);
}

fn opt_bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        Just(None),
        Just(Some(Vec::new())),
        proptest::collection::vec(any::<u8>(), 1..48).prop_map(Some),
        // Occasionally large enough for multi-byte lengths and real compression work.
        (200usize..3000, any::<u8>()).prop_map(|(n, b)| Some(vec![b; n])),
    ]
}

fn header_strategy() -> impl Strategy<Value = Header> {
    let key = prop_oneof![
        Just(b"dup".to_vec()),
        Just(Vec::new()),
        proptest::collection::vec(any::<u8>(), 1..12),
    ];
    (key, opt_bytes()).prop_map(|(k, v)| Header {
        key: Bytes::from(k),
        value: v.map(Bytes::from),
    })
}

fn input_strategy() -> impl Strategy<Value = Input> {
    (
        prop_oneof![any::<i64>(), 1_600_000_000_000i64..1_800_000_000_000],
        opt_bytes(),
        opt_bytes(),
        proptest::collection::vec(header_strategy(), 0..5),
    )
        .prop_map(|(timestamp, key, value, headers)| Input {
            timestamp,
            key,
            value,
            headers,
        })
}

fn producer_strategy() -> impl Strategy<Value = ProducerFields> {
    prop_oneof![
        Just(ProducerFields::NONE),
        (any::<i64>(), any::<i16>(), any::<i32>(), any::<bool>()).prop_map(
            |(id, epoch, seq, t)| {
                ProducerFields {
                    producer_id: id,
                    producer_epoch: epoch,
                    base_sequence: seq,
                    transactional: t,
                }
            }
        ),
    ]
}

fn check_round_trip(
    codec: Compression,
    inputs: &[Input],
    producer: ProducerFields,
) -> Result<(), TestCaseError> {
    let mut builder = BatchBuilder::new(codec);
    for r in inputs {
        prop_assert!(builder.try_append(
            r.timestamp,
            r.key.as_deref(),
            r.value.as_deref(),
            &r.headers,
            usize::MAX
        ));
    }
    prop_assert_eq!(builder.len(), inputs.len());
    let encoded = builder.build(producer).unwrap();
    prop_assert_eq!(&builder.clone().finish(producer).unwrap(), &encoded);
    if codec == Compression::None {
        prop_assert_eq!(builder.size_estimate(), encoded.len());
    }
    let batch = decode_one(encoded.clone());
    prop_assert_eq!(batch.compression().unwrap(), codec);
    prop_assert_eq!(batch.size_in_bytes(), encoded.len());
    prop_assert_eq!(batch.base_offset, 0);
    prop_assert_eq!(batch.records_count as usize, inputs.len());
    prop_assert_eq!(batch.last_offset_delta as usize, inputs.len() - 1);
    prop_assert_eq!(batch.next_offset(), inputs.len() as i64);
    prop_assert_eq!(batch.producer_id, producer.producer_id);
    prop_assert_eq!(batch.producer_epoch, producer.producer_epoch);
    prop_assert_eq!(batch.base_sequence, producer.base_sequence);
    prop_assert_eq!(batch.is_transactional(), producer.transactional);
    prop_assert!(!batch.is_control());
    prop_assert_eq!(batch.timestamp_type(), TimestampType::CreateTime);
    prop_assert_eq!(batch.base_timestamp, inputs[0].timestamp);
    prop_assert_eq!(
        batch.max_timestamp,
        inputs.iter().map(|r| r.timestamp).max().unwrap()
    );
    prop_assert_eq!(batch.control_record().unwrap(), None);
    let records = batch.records().unwrap();
    prop_assert_eq!(records.len(), inputs.len());
    for (i, (got, want)) in records.iter().zip(inputs).enumerate() {
        prop_assert_eq!(got.offset, i as i64);
        prop_assert_eq!(got.timestamp, want.timestamp);
        prop_assert_eq!(got.key.as_deref(), want.key.as_deref());
        prop_assert_eq!(got.value.as_deref(), want.value.as_deref());
        prop_assert_eq!(&got.headers, &want.headers);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_arbitrary_batches(
        codec in proptest::sample::select(Compression::ALL.to_vec()),
        inputs in proptest::collection::vec(input_strategy(), 1..12),
        producer in producer_strategy(),
    ) {
        check_round_trip(codec, &inputs, producer)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        for batch in decode_batches(Bytes::from(bytes)).flatten() {
            let _ = batch.records();
            let _ = batch.control_record();
        }
    }

    #[test]
    fn corrupted_valid_batches_never_panic(
        codec in proptest::sample::select(Compression::ALL.to_vec()),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        fix_crc in any::<bool>(),
    ) {
        let mut buf = build(codec, &simple_inputs(5, 50), ProducerFields::NONE).to_vec();
        for (at, byte) in flips {
            let i = at.index(buf.len());
            buf[i] = byte;
        }
        if fix_crc && buf.len() >= BATCH_HEADER_LEN {
            finish_crc(&mut buf);
        }
        for batch in decode_batches(Bytes::from(buf)) {
            match batch {
                Ok(batch) => {
                    let _ = batch.records();
                    let _ = batch.control_record();
                }
                Err(e) => prop_assert!(!e.to_string().contains('\n')),
            }
        }
    }
}

#[test]
fn round_trip_every_codec_with_edge_cases() {
    let dup = |v: &'static str| Header::new("dup", Some(v));
    let inputs = vec![
        Input {
            timestamp: 5,
            key: None,
            value: None,
            headers: vec![],
        },
        Input {
            timestamp: 3, // earlier than the base: negative delta
            key: Some(vec![]),
            value: Some(vec![]),
            headers: vec![dup("1"), Header::new("x", None::<Bytes>), dup("2")],
        },
        Input {
            timestamp: i64::MAX,
            key: Some(vec![0xFF; 300]),
            value: Some(vec![7; 70_000]),
            headers: vec![Header::new("", Some(""))],
        },
    ];
    for codec in Compression::ALL {
        for producer in [
            ProducerFields::NONE,
            ProducerFields {
                producer_id: 42,
                producer_epoch: 3,
                base_sequence: i32::MAX,
                transactional: true,
            },
        ] {
            check_round_trip(codec, &inputs, producer).unwrap();
        }
    }
}

#[test]
fn uncompressed_decode_is_zero_copy() {
    let buf = build(
        Compression::None,
        &simple_inputs(3, 100),
        ProducerFields::NONE,
    );
    let range = buf.as_ptr_range();
    let records = decode_one(buf.clone()).records().unwrap();
    for r in &records {
        let v = r.value.as_ref().unwrap();
        assert!(range.contains(&v.as_ptr()), "value was copied");
        assert!(range.contains(&r.headers[0].value.as_ref().unwrap().as_ptr()));
    }
}

#[test]
fn header_layout_is_61_bytes_with_kafka_defaults() {
    let buf = build(
        Compression::Lz4,
        &simple_inputs(2, 10),
        ProducerFields::NONE,
    );
    assert_eq!(
        i32::from_be_bytes(buf[8..12].try_into().unwrap()) as usize,
        buf.len() - 12
    );
    assert_eq!(
        &buf[12..16],
        &(-1i32).to_be_bytes(),
        "partition leader epoch"
    );
    assert_eq!(buf[16], 2, "magic");
    assert_eq!(&buf[21..23], &3i16.to_be_bytes(), "attributes: lz4");
    assert_eq!(&buf[23..27], &1i32.to_be_bytes(), "last offset delta");
    assert_eq!(&buf[43..51], &(-1i64).to_be_bytes());
    assert_eq!(&buf[51..53], &(-1i16).to_be_bytes());
    assert_eq!(&buf[53..57], &(-1i32).to_be_bytes());
    assert_eq!(&buf[57..61], &2i32.to_be_bytes());
    assert_eq!(
        u32::from_be_bytes(buf[17..21].try_into().unwrap()),
        crc32c::crc32c(&buf[21..])
    );
}

#[test]
fn truncated_last_batch_ends_iteration_silently() {
    let mut stream = Vec::new();
    let mut ends = Vec::new();
    for (i, codec) in [Compression::None, Compression::Gzip, Compression::Zstd]
        .into_iter()
        .enumerate()
    {
        let mut b = build(codec, &simple_inputs(4, 30), ProducerFields::NONE).to_vec();
        set_base_offset(&mut b, i as i64 * 4).unwrap();
        stream.extend_from_slice(&b);
        ends.push(stream.len());
    }
    let full = Bytes::from(stream);
    for cut in 0..=full.len() {
        let mut it = decode_batches(full.slice(..cut));
        let mut n = 0;
        for item in it.by_ref() {
            let batch = item.unwrap_or_else(|e| panic!("cut {cut}: {e}"));
            assert_eq!(batch.base_offset, n as i64 * 4);
            assert_eq!(batch.records().unwrap().len(), 4);
            n += 1;
        }
        let complete = ends.iter().filter(|&&e| e <= cut).count();
        assert_eq!(n, complete, "cut {cut}");
        let consumed = if complete == 0 { 0 } else { ends[complete - 1] };
        assert_eq!(it.remaining().len(), cut - consumed);
    }
}

#[test]
fn crc_mismatch_is_reported_with_offset_and_iteration_continues() {
    let mut stream = Vec::new();
    for base in [0i64, 10, 20] {
        let mut b = build(
            Compression::None,
            &simple_inputs(3, 20),
            ProducerFields::NONE,
        )
        .to_vec();
        set_base_offset(&mut b, base).unwrap();
        if base == 10 {
            let last = b.len() - 1;
            b[last] ^= 0x01;
        }
        stream.extend_from_slice(&b);
    }
    let items: Vec<_> = decode_batches(Bytes::from(stream)).collect();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0].as_ref().unwrap().base_offset, 0);
    let err = items[1].as_ref().unwrap_err();
    assert!(
        matches!(err, RecordError::CrcMismatch { offset: 10, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.starts_with("batch at offset 10: CRC mismatch"), "{msg}");
    assert_eq!(items[2].as_ref().unwrap().base_offset, 20);
}

#[test]
fn old_message_formats_are_errors_not_panics() {
    for magic in [0i8, 1] {
        // offset, size, crc, magic, attributes, [timestamp], key -1, value "abc"
        let mut body = vec![0, 0, 0, 0, magic as u8, 0];
        if magic == 1 {
            body.extend_from_slice(&0i64.to_be_bytes());
        }
        body.extend_from_slice(&(-1i32).to_be_bytes());
        body.extend_from_slice(&3i32.to_be_bytes());
        body.extend_from_slice(b"abc");
        let mut stream = 7i64.to_be_bytes().to_vec();
        stream.extend_from_slice(&(body.len() as i32).to_be_bytes());
        stream.extend_from_slice(&body);
        let next = build(
            Compression::None,
            &simple_inputs(1, 1),
            ProducerFields::NONE,
        );
        stream.extend_from_slice(&next);
        let items: Vec<_> = decode_batches(Bytes::from(stream)).collect();
        assert_eq!(items.len(), 2);
        let msg = items[0].as_ref().unwrap_err().to_string();
        assert_eq!(
            msg,
            format!("batch at offset 7: message format v{magic} is not supported")
        );
        assert!(items[1].is_ok());
    }
}

#[test]
fn impossible_batch_lengths() {
    // Negative: the stream cannot be framed any further.
    let mut stream = 3i64.to_be_bytes().to_vec();
    stream.extend_from_slice(&(-5i32).to_be_bytes());
    stream.extend_from_slice(&[0; 64]);
    let items: Vec<_> = decode_batches(Bytes::from(stream)).collect();
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].as_ref().unwrap_err().to_string(),
        "batch at offset 3: invalid batch length -5"
    );

    // Too short to reach the magic byte, and a v2 batch shorter than its header.
    for (len, magic) in [(4i32, 2u8), (30, 2)] {
        let mut stream = 9i64.to_be_bytes().to_vec();
        stream.extend_from_slice(&len.to_be_bytes());
        let mut body = vec![0u8; len as usize];
        if len > 4 {
            body[4] = magic;
        }
        stream.extend_from_slice(&body);
        let items: Vec<_> = decode_batches(Bytes::from(stream)).collect();
        assert!(
            matches!(
                items[..],
                [Err(RecordError::BatchTooShort { offset: 9, .. })]
            ),
            "{items:?}"
        );
    }

    // A huge positive length is indistinguishable from truncation.
    let mut stream = 0i64.to_be_bytes().to_vec();
    stream.extend_from_slice(&i32::MAX.to_be_bytes());
    stream.extend_from_slice(&[2; 100]);
    assert_eq!(decode_batches(Bytes::from(stream)).count(), 0);
}

#[test]
fn hostile_counts_and_lengths_do_not_allocate() {
    // Each of these would need tens of GiB if a count on the wire sized an allocation; the test
    // process would abort on the failed allocation.
    let valid = build(
        Compression::None,
        &simple_inputs(3, 10),
        ProducerFields::NONE,
    );

    let mut b = valid.to_vec();
    patch(&mut b, RECORDS_COUNT, &i32::MAX.to_be_bytes());
    let err = decode_one(Bytes::from(b)).records().unwrap_err();
    assert!(
        matches!(
            err,
            RecordError::RecordCountMismatch {
                declared: i32::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "batch at offset 0: header declares {} records but the payload ends after 3",
            i32::MAX
        )
    );

    let mut b = valid.to_vec();
    patch(&mut b, RECORDS_COUNT, &(-1i32).to_be_bytes());
    assert!(decode_one(Bytes::from(b)).records().is_err());

    // Same, behind compression.
    let mut b = build(
        Compression::Snappy,
        &simple_inputs(3, 10),
        ProducerFields::NONE,
    )
    .to_vec();
    patch(&mut b, RECORDS_COUNT, &i32::MAX.to_be_bytes());
    assert!(decode_one(Bytes::from(b)).records().is_err());

    // Record whose header count is i32::MAX with no headers following.
    let mut rec = Vec::new();
    rec.push(0); // attributes
    put_varlong(&mut rec, 0);
    put_varint(&mut rec, 0);
    put_varint(&mut rec, -1);
    put_varint(&mut rec, -1);
    put_varint(&mut rec, i32::MAX);
    let mut payload = Vec::new();
    put_varint(&mut payload, rec.len() as i32);
    payload.extend_from_slice(&rec);
    let b = raw_batch(40, 0, 1, &payload);
    let err = decode_one(Bytes::from(b)).records().unwrap_err();
    assert_eq!(
        err.to_string(),
        "batch at offset 40: record 0: bad header key length"
    );

    // Record length, key length and value length far beyond the payload.
    for field in 0..3 {
        let mut payload = Vec::new();
        let mut rec = vec![0u8];
        put_varlong(&mut rec, 0);
        put_varint(&mut rec, 0);
        put_varint(&mut rec, if field == 1 { i32::MAX } else { 1 });
        rec.push(b'k');
        put_varint(&mut rec, if field == 2 { i32::MAX - 1 } else { -1 });
        put_varint(&mut rec, 0);
        put_varint(
            &mut payload,
            if field == 0 {
                i32::MAX
            } else {
                rec.len() as i32
            },
        );
        payload.extend_from_slice(&rec);
        let b = raw_batch(0, 0, 1, &payload);
        let err = decode_one(Bytes::from(b)).records().unwrap_err();
        assert!(
            matches!(err, RecordError::MalformedRecord { .. }),
            "{err:?}"
        );
    }

    // Negative lengths other than -1.
    let mut rec = vec![0u8];
    put_varlong(&mut rec, 0);
    put_varint(&mut rec, 0);
    put_varint(&mut rec, -2);
    let mut payload = Vec::new();
    put_varint(&mut payload, rec.len() as i32);
    payload.extend_from_slice(&rec);
    let err = decode_one(Bytes::from(raw_batch(0, 0, 1, &payload)))
        .records()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "batch at offset 0: record 0: bad key length"
    );
}

#[test]
fn trailing_bytes_and_record_slack_are_errors() {
    let mut b = build(
        Compression::None,
        &simple_inputs(2, 10),
        ProducerFields::NONE,
    )
    .to_vec();
    patch(&mut b, RECORDS_COUNT, &1i32.to_be_bytes());
    let err = decode_one(Bytes::from(b)).records().unwrap_err();
    assert!(
        err.to_string().contains("bytes follow the last one"),
        "{err}"
    );

    // A record whose length claims one byte more than its fields use.
    let mut rec = vec![0u8];
    put_varlong(&mut rec, 0);
    put_varint(&mut rec, 0);
    put_varint(&mut rec, -1);
    put_varint(&mut rec, -1);
    put_varint(&mut rec, 0);
    rec.push(0xAA);
    let mut payload = Vec::new();
    put_varint(&mut payload, rec.len() as i32);
    payload.extend_from_slice(&rec);
    let err = decode_one(Bytes::from(raw_batch(0, 0, 1, &payload)))
        .records()
        .unwrap_err();
    assert!(err.to_string().contains("left over"), "{err}");
}

#[test]
fn decompression_is_bounded() {
    let inputs = vec![Input {
        timestamp: 0,
        key: None,
        value: Some(vec![0; 2 << 20]),
        headers: vec![],
    }];
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let batch = decode_one(build(codec, &inputs, ProducerFields::NONE));
        assert!(
            batch.size_in_bytes() < 200_000,
            "{codec} barely compressed zeros"
        );
        let err = batch.records_with_limit(1 << 20).unwrap_err();
        assert!(
            matches!(
                err,
                RecordError::Decompress {
                    source: CompressionError::TooLarge { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!err.to_string().contains('\n'));
        assert_eq!(
            batch.records().unwrap()[0].value.as_ref().unwrap().len(),
            2 << 20
        );
    }
}

#[test]
fn corrupt_compressed_payload_is_an_error() {
    let mut b = build(
        Compression::Gzip,
        &simple_inputs(3, 100),
        ProducerFields::NONE,
    )
    .to_vec();
    let mid = BATCH_HEADER_LEN + (b.len() - BATCH_HEADER_LEN) / 2;
    b[mid] ^= 0xFF;
    finish_crc(&mut b);
    let err = decode_one(Bytes::from(b)).records().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("batch at offset 0: corrupt gzip data"),
        "{err}"
    );

    let mut b = build(
        Compression::None,
        &simple_inputs(1, 1),
        ProducerFields::NONE,
    )
    .to_vec();
    patch(&mut b, ATTRIBUTES, &7i16.to_be_bytes());
    let batch = decode_one(Bytes::from(b));
    assert_eq!(
        batch.compression().unwrap_err().to_string(),
        "batch at offset 0: unknown compression codec 7"
    );
    assert!(batch.records().is_err());
}

#[test]
fn rewrite_producer_fields_keeps_crc_valid() {
    let inputs = simple_inputs(5, 40);
    for codec in Compression::ALL {
        let first = ProducerFields {
            producer_id: 1000,
            producer_epoch: 1,
            base_sequence: 17,
            transactional: true,
        };
        let built = build(codec, &inputs, first);
        let mut buf = BytesMut::from(&built[..]);
        let bumped = ProducerFields {
            producer_id: 1001,
            producer_epoch: 0,
            base_sequence: 0,
            transactional: false,
        };
        rewrite_producer_fields(&mut buf, bumped).unwrap();
        let batch = decode_one(buf.freeze());
        assert_eq!(batch.producer_id, 1001);
        assert_eq!(batch.producer_epoch, 0);
        assert_eq!(batch.base_sequence, 0);
        assert!(!batch.is_transactional());
        assert_eq!(batch.compression().unwrap(), codec);
        let records = batch.records().unwrap();
        let original = decode_one(built).records().unwrap();
        assert_eq!(records, original);
    }
}

#[test]
fn rewrite_rejects_buffers_that_are_not_one_batch() {
    let built = build(
        Compression::None,
        &simple_inputs(1, 1),
        ProducerFields::NONE,
    );
    let mut short = BytesMut::from(&built[..60]);
    assert!(rewrite_producer_fields(&mut short, ProducerFields::NONE).is_err());
    let mut two = BytesMut::from(&built[..]);
    two.extend_from_slice(&built);
    let err = rewrite_producer_fields(&mut two, ProducerFields::NONE).unwrap_err();
    assert!(
        err.to_string().starts_with("not a single v2 batch"),
        "{err}"
    );
    let mut bad_magic = BytesMut::from(&built[..]);
    bad_magic[MAGIC] = 1;
    assert!(rewrite_producer_fields(&mut bad_magic, ProducerFields::NONE).is_err());
    let mut ok = built.to_vec();
    set_base_offset(&mut ok, 99).unwrap();
    assert_eq!(decode_one(Bytes::from(ok)).records().unwrap()[0].offset, 99);
}

#[test]
fn log_append_time_overrides_record_timestamps() {
    let mut b = build(
        Compression::None,
        &simple_inputs(3, 5),
        ProducerFields::NONE,
    )
    .to_vec();
    let attributes = TIMESTAMP_TYPE_FLAG;
    b[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    patch(&mut b, MAX_TIMESTAMP, &123_456i64.to_be_bytes());
    let batch = decode_one(Bytes::from(b));
    assert_eq!(batch.timestamp_type(), TimestampType::LogAppendTime);
    assert!(batch
        .records()
        .unwrap()
        .iter()
        .all(|r| r.timestamp == 123_456));
}

#[test]
fn control_records_round_trip() {
    for marker in [
        ControlRecord::Abort {
            coordinator_epoch: 5,
        },
        ControlRecord::Commit {
            coordinator_epoch: i32::MAX,
        },
        ControlRecord::Other { key_type: 3 },
    ] {
        let buf = encode_control_batch(77, 4, 1_700_000_000_000, 9, 2, marker);
        let batch = decode_one(buf);
        assert!(batch.is_control());
        assert!(batch.is_transactional());
        assert_eq!(batch.base_offset, 77);
        assert_eq!(batch.next_offset(), 78);
        assert_eq!(batch.partition_leader_epoch, 4);
        assert_eq!(batch.producer_id, 9);
        assert_eq!(batch.producer_epoch, 2);
        assert_eq!(batch.base_sequence, -1);
        assert_eq!(batch.control_record().unwrap(), Some(marker));
        let records = batch.records().unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].offset, 77);
        assert_eq!(
            &records[0].key.as_ref().unwrap()[..],
            &[0, 0, 0, marker.key_type() as u8]
        );
    }
}

#[test]
fn control_record_decoding_matches_java_rules() {
    let control = CONTROL_FLAG | TRANSACTIONAL_FLAG;
    let batch_with = |key: Option<&[u8]>, value: Option<&[u8]>| {
        let mut b = BatchBuilder::new(Compression::None);
        assert!(b.try_append(0, key, value, &[], usize::MAX));
        let mut buf = b.build(ProducerFields::NONE).unwrap().to_vec();
        patch(&mut buf, ATTRIBUTES, &control.to_be_bytes());
        decode_one(Bytes::from(buf))
    };
    // A newer marker value version with extra fields is read as version 0.
    let r = batch_with(Some(&[0, 1, 0, 1]), Some(&[0, 1, 0, 0, 0, 9, 0xEE]));
    assert_eq!(
        r.control_record().unwrap(),
        Some(ControlRecord::Commit {
            coordinator_epoch: 9
        })
    );
    for (key, value, why) in [
        (None, None, "null key"),
        (Some(&[0u8, 0, 0][..]), None, "key shorter than 4 bytes"),
        (Some(&[0xFF, 0xFF, 0, 0][..]), None, "negative key version"),
        (Some(&[0, 0, 0, 0][..]), None, "null marker value"),
        (
            Some(&[0, 0, 0, 1][..]),
            Some(&[0u8, 0, 0][..]),
            "marker value shorter than 6 bytes",
        ),
    ] {
        let err = batch_with(key, value).control_record().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("batch at offset 0: malformed control record: {why}")
        );
    }
    // A control batch emptied by compaction carries no marker.
    let empty = raw_batch(5, control, 0, &[]);
    assert_eq!(
        decode_one(Bytes::from(empty)).control_record().unwrap(),
        None
    );
}

#[test]
fn builder_respects_max_bytes_and_reports_exact_sizes() {
    let mut b = BatchBuilder::new(Compression::None);
    assert!(b.is_empty());
    assert_eq!(b.size_estimate(), BATCH_HEADER_LEN);
    let headers = [Header::new("a", Some("b")), Header::new("a", None::<Bytes>)];
    let one = BatchBuilder::encoded_record_size(0, Some(b"k"), Some(&[1; 100]), &headers);
    // The first record is accepted even when it alone exceeds the limit.
    assert!(b.try_append(10, Some(b"k"), Some(&[1; 100]), &headers, 0));
    assert_eq!(b.size_estimate(), BATCH_HEADER_LEN + one);
    let limit = b.size_estimate() + one;
    assert!(b.try_append(10, Some(b"k"), Some(&[1; 100]), &headers, limit));
    assert!(!b.try_append(10, Some(b"k"), Some(&[1; 100]), &headers, limit));
    assert_eq!(b.len(), 2);
    assert_eq!(b.build(ProducerFields::NONE).unwrap().len(), limit);
    assert!(matches!(
        BatchBuilder::new(Compression::Gzip).build(ProducerFields::NONE),
        Err(RecordError::EmptyBatch)
    ));
    assert!(matches!(
        BatchBuilder::new(Compression::None).finish(ProducerFields::NONE),
        Err(RecordError::EmptyBatch)
    ));
}

#[test]
fn interop_with_kafka_protocol_crate() {
    use indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records as kp;

    let inputs = vec![
        Input {
            timestamp: 1_700_000_000_123,
            key: Some(b"alpha".to_vec()),
            value: Some(b"one".repeat(50)),
            headers: vec![
                Header::new("trace", Some("abc")),
                Header::new("empty", None::<Bytes>),
            ],
        },
        Input {
            timestamp: 1_700_000_000_100,
            key: None,
            value: None,
            headers: vec![],
        },
        Input {
            timestamp: 1_700_000_000_200,
            key: Some(vec![]),
            value: Some(vec![9; 5000]),
            headers: vec![],
        },
    ];
    let producer = ProducerFields {
        producer_id: 77,
        producer_epoch: 3,
        base_sequence: 100,
        transactional: true,
    };
    let codecs = [
        (Compression::None, kp::Compression::None),
        (Compression::Gzip, kp::Compression::Gzip),
        (Compression::Snappy, kp::Compression::Snappy),
    ];
    for (ours, theirs) in codecs {
        // Ours -> kafka-protocol.
        let built = build(ours, &inputs, producer);
        let mut buf = built.clone();
        let set = kp::RecordBatchDecoder::decode(&mut buf).unwrap();
        assert_eq!(set.records.len(), inputs.len());
        for (i, (got, want)) in set.records.iter().zip(&inputs).enumerate() {
            assert_eq!(got.offset, i as i64);
            assert_eq!(got.sequence, 100 + i as i32);
            assert_eq!(got.producer_id, 77);
            assert_eq!(got.producer_epoch, 3);
            assert!(got.transactional);
            assert_eq!(got.timestamp, want.timestamp);
            assert_eq!(got.key.as_deref(), want.key.as_deref());
            assert_eq!(got.value.as_deref(), want.value.as_deref());
            let headers: Vec<Header> = got
                .headers
                .iter()
                .map(|(k, v)| Header {
                    key: k.clone().into_bytes(),
                    value: v.clone(),
                })
                .collect();
            assert_eq!(headers, want.headers);
        }

        // kafka-protocol -> ours (its snappy is the xerial framing the Java client writes).
        let theirs_records: Vec<kp::Record> = inputs
            .iter()
            .enumerate()
            .map(|(i, r)| kp::Record {
                transactional: true,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 6,
                producer_id: 77,
                producer_epoch: 3,
                timestamp_type: kp::TimestampType::Creation,
                offset: 500 + i as i64,
                sequence: 100 + i as i32,
                timestamp: r.timestamp,
                key: r.key.clone().map(Bytes::from),
                value: r.value.clone().map(Bytes::from),
                headers: r
                    .headers
                    .iter()
                    .map(|h| (StrBytes::from_utf8(h.key.clone()).unwrap(), h.value.clone()))
                    .collect::<IndexMap<_, _>>(),
            })
            .collect();
        let mut out = BytesMut::new();
        kp::RecordBatchEncoder::encode(
            &mut out,
            &theirs_records,
            &kp::RecordEncodeOptions {
                version: 2,
                compression: theirs,
            },
        )
        .unwrap();
        if ours == Compression::Snappy {
            assert_eq!(out[BATCH_HEADER_LEN], 0x82, "expected xerial framing");
        }
        let batch = decode_one(out.freeze());
        assert_eq!(batch.base_offset, 500);
        assert_eq!(batch.partition_leader_epoch, 6);
        assert_eq!(batch.base_sequence, 100);
        assert!(batch.is_transactional());
        assert_eq!(batch.compression().unwrap(), ours);
        let records = batch.records().unwrap();
        for (i, (got, want)) in records.iter().zip(&inputs).enumerate() {
            assert_eq!(got.offset, 500 + i as i64);
            assert_eq!(got.timestamp, want.timestamp);
            assert_eq!(got.key.as_deref(), want.key.as_deref());
            assert_eq!(got.value.as_deref(), want.value.as_deref());
            assert_eq!(got.headers, want.headers);
        }
    }
}

/// A file from fixtures/: batches the official Java client wrote (see fixtures/README.md).
fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The records a Java consumer read back from a fixture.
fn expected_records(name: &str) -> Vec<Record> {
    let text = String::from_utf8(fixture(name)).unwrap();
    let bytes = |v: &serde_json::Value| {
        v.as_str().map(|s| {
            Bytes::from(
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s).unwrap(),
            )
        })
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Record {
                offset: v["offset"].as_i64().unwrap(),
                timestamp: v["timestamp"].as_i64().unwrap(),
                key: bytes(&v["key"]),
                value: bytes(&v["value"]),
                headers: v["headers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| Header {
                        key: Bytes::from(h["key"].as_str().unwrap().to_owned()),
                        value: bytes(&h["value"]),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Log segments a real Kafka 4.1.1 broker wrote from the official Java client's batches decode
/// to exactly what the Java consumer read, for every codec.
#[test]
fn java_fixtures_decode_like_the_java_consumer() {
    let cases = [
        ("plain", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
        ("headers", Compression::None),
        ("nulls", Compression::None),
        ("idempotent", Compression::None),
        ("transactional", Compression::None),
    ];
    for (name, codec) in cases {
        let log = Bytes::from(fixture(&format!("{name}.log")));
        let mut got = Vec::new();
        let mut markers = Vec::new();
        let mut it = decode_batches(log.clone());
        for batch in &mut it {
            let batch = batch.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(batch.compression().unwrap(), codec, "{name}");
            if codec == Compression::Snappy {
                let start = find_batch(&log, batch.base_offset) + BATCH_HEADER_LEN;
                assert_eq!(&log[start..start + 8], b"\x82SNAPPY\x00", "xerial framing");
            }
            if batch.is_control() {
                markers.push((batch.base_offset, batch.control_record().unwrap()));
                continue;
            }
            let records = batch.records().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                records.last().unwrap().offset,
                batch.last_offset(),
                "{name}"
            );
            got.extend(records);
        }
        assert!(it.remaining().is_empty(), "{name}: trailing bytes");
        assert_eq!(
            got,
            expected_records(&format!("{name}.expected.jsonl")),
            "{name}"
        );
        let marker_types: Vec<_> = markers
            .iter()
            .map(|(o, m)| (*o, m.map(|m| m.key_type())))
            .collect();
        if name == "transactional" {
            let commit = Some(CONTROL_TYPE_COMMIT);
            let abort = Some(CONTROL_TYPE_ABORT);
            assert_eq!(marker_types, [(5, commit), (11, abort), (17, commit)]);
        } else {
            assert!(marker_types.is_empty(), "{name}");
        }
    }
}

/// For uncompressed batches our encoder reproduces the Java client's bytes exactly: everything
/// the CRC covers matches once the broker-assigned base offset and leader epoch are copied in.
#[test]
fn uncompressed_encoding_is_byte_identical_to_java() {
    for name in ["plain", "headers", "nulls", "idempotent", "transactional"] {
        let log = Bytes::from(fixture(&format!("{name}.log")));
        let mut compared = 0;
        for batch in decode_batches(log.clone()) {
            let batch = batch.unwrap();
            if batch.is_control() {
                continue;
            }
            let records = batch.records().unwrap();
            let mut b = BatchBuilder::new(Compression::None);
            for r in &records {
                assert!(b.try_append(
                    r.timestamp,
                    r.key.as_deref(),
                    r.value.as_deref(),
                    &r.headers,
                    usize::MAX
                ));
            }
            let ours = b
                .build(ProducerFields {
                    producer_id: batch.producer_id,
                    producer_epoch: batch.producer_epoch,
                    base_sequence: batch.base_sequence,
                    transactional: batch.is_transactional(),
                })
                .unwrap();
            let start = find_batch(&log, batch.base_offset);
            let theirs = &log[start..start + batch.size_in_bytes()];
            assert_eq!(ours.len(), theirs.len(), "{name} @{}", batch.base_offset);
            assert_eq!(&ours[16..], &theirs[16..], "{name} @{}", batch.base_offset);
            compared += 1;
        }
        assert!(compared > 0);
    }
}

/// Byte position of the batch with this base offset in a log segment.
fn find_batch(log: &[u8], base_offset: i64) -> usize {
    let mut pos = 0;
    loop {
        let off = i64::from_be_bytes(log[pos..pos + 8].try_into().unwrap());
        if off == base_offset {
            return pos;
        }
        let len = i32::from_be_bytes(log[pos + 8..pos + 12].try_into().unwrap()) as usize;
        pos += 12 + len;
    }
}

#[test]
fn record_iter_is_lazy_and_stops_after_an_error() {
    let inputs = simple_inputs(3, 10);
    for codec in Compression::ALL {
        let batch = decode_one(build(codec, &inputs, ProducerFields::NONE));
        let lazy: Vec<Record> = batch
            .record_iter()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(lazy, batch.records().unwrap());
    }

    let mut b = build(Compression::None, &inputs, ProducerFields::NONE).to_vec();
    patch(&mut b, RECORDS_COUNT, &i32::MAX.to_be_bytes());
    let batch = decode_one(Bytes::from(b));
    let mut it = batch.record_iter().unwrap();
    assert!(it.by_ref().take(3).all(|r| r.is_ok()));
    assert!(matches!(
        it.next(),
        Some(Err(RecordError::RecordCountMismatch { .. }))
    ));
    assert!(it.next().is_none());
}

/// `check.crcs`: a v2 batch whose stored CRC does not match its (intact) bytes is refused when
/// verifying and read, records and all, when told to skip the check. `decode_batches` always
/// verifies.
#[test]
fn crc_check_skip_reads_a_v2_batch_whose_crc_does_not_match() {
    let mut b = build(
        Compression::Lz4,
        &simple_inputs(3, 10),
        ProducerFields::NONE,
    )
    .to_vec();
    b[CRC] ^= 0xFF;
    let b = Bytes::from(b);
    let verified: Vec<_> = decode_entries(b.clone()).collect();
    assert!(
        matches!(
            verified[..],
            [Err(RecordError::CrcMismatch { offset: 0, .. })]
        ),
        "{verified:?}"
    );
    assert!(matches!(
        decode_batches(b.clone()).next(),
        Some(Err(RecordError::CrcMismatch { .. }))
    ));
    let skipped: Vec<_> = decode_entries(b).crc_check(CrcCheck::Skip).collect();
    let [Ok(entry)] = &skipped[..] else {
        panic!("one entry, read: {skipped:?}");
    };
    let values: Vec<Bytes> = entry
        .record_iter()
        .unwrap()
        .map(|r| r.unwrap().value.unwrap())
        .collect();
    assert_eq!(values, vec![Bytes::from(vec![b'v'; 10]); 3]);
}
