//! The decoder against record batches the official Java client (kafka-clients 4.1.1) wrote to a
//! real Apache Kafka 4.1.1 broker: every `fixtures/<name>.log` (a log segment copied byte for
//! byte) must decode to exactly what the Java consumer read back, `fixtures/<name>.expected.jsonl`
//! — offsets, timestamps, keys, values, headers in order with duplicates — and the batch headers
//! must carry the producer id / epoch / sequence / transactional / control fields the Java
//! producer and the transaction coordinator wrote. See fixtures/README.md.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use bytes::Bytes;
use serde_json::Value;

use super::{
    decode_batches, Compression, ControlRecord, Record, RecordBatch, RecordError, TimestampType,
    BATCH_HEADER_LEN, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};

/// Every fixture this module knows; `every_fixture_log_is_covered` fails when one is added to
/// fixtures/ without a test here.
const FIXTURES: [&str; 10] = [
    "plain",
    "gzip",
    "snappy",
    "lz4",
    "zstd",
    "headers",
    "nulls",
    "idempotent",
    "transactional",
    "transactional-zstd",
];

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn read_fixture(file: &str) -> Vec<u8> {
    let path = fixtures_dir().join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

// ------------------------------------------------------------------------------------------------
// JSON lines

/// A record in the interop JSON-lines shape, bytes decoded. Header keys stay bytes so a decoder
/// that mangles them (e.g. lossy UTF-8) shows up.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    partition: Option<i32>,
    offset: Option<i64>,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Line {
    /// A decoded record as the Java consumer would print it (the fixtures are partition 0).
    fn from_record(r: &Record) -> Line {
        Line {
            partition: Some(0),
            offset: Some(r.offset),
            timestamp: r.timestamp,
            key: r.key.as_ref().map(|b| b.to_vec()),
            value: r.value.as_ref().map(|b| b.to_vec()),
            headers: r
                .headers
                .iter()
                .map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec())))
                .collect(),
        }
    }
}

fn nullable_b64(v: &Value, what: &str) -> Option<Vec<u8>> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s)
                .unwrap_or_else(|e| panic!("{e} in {s:?}")),
        ),
        other => panic!("{what} must be base64 or null, got {other}"),
    }
}

fn parse_line(text: &str, with_offset: bool) -> Line {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("bad JSON {text:?}: {e}"));
    let obj = v.as_object().expect("each line is a JSON object");
    let mut want: BTreeSet<&str> = ["partition", "timestamp", "key", "value", "headers"].into();
    if with_offset {
        want.insert("offset");
    }
    let have: BTreeSet<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(have, want, "fields of {text}");
    let headers = obj["headers"]
        .as_array()
        .expect("headers is an array")
        .iter()
        .map(|h| {
            let key = h["key"].as_str().expect("header key is a string");
            (
                key.as_bytes().to_vec(),
                nullable_b64(&h["value"], "header value"),
            )
        })
        .collect();
    Line {
        partition: obj["partition"].as_i64().map(|p| p as i32),
        offset: obj
            .get("offset")
            .map(|o| o.as_i64().expect("offset is an integer")),
        timestamp: obj["timestamp"].as_i64().expect("timestamp is an integer"),
        key: nullable_b64(&obj["key"], "key"),
        value: nullable_b64(&obj["value"], "value"),
        headers,
    }
}

fn read_jsonl(file: &str, with_offset: bool) -> Vec<Line> {
    let text = String::from_utf8(read_fixture(file)).expect("UTF-8 JSON lines");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| parse_line(l, with_offset))
        .collect()
}

fn expected(name: &str) -> Vec<Line> {
    read_jsonl(&format!("{name}.expected.jsonl"), true)
}

// ------------------------------------------------------------------------------------------------
// Decoding

/// One batch of a fixture and its records (for a control batch, the marker record).
struct Decoded {
    batch: RecordBatch,
    records: Vec<Record>,
}

/// Decodes a whole `.log` file as one fetch payload, checking the framing invariants every
/// fixture must satisfy: every batch valid (CRC included) and fully consumed, contiguous offsets,
/// record offsets `base_offset + i`, and the file covered to its last byte.
fn decode_fixture(name: &str) -> Vec<Decoded> {
    let raw = read_fixture(&format!("{name}.log"));
    let len = raw.len();
    let mut it = decode_batches(Bytes::from(raw));
    let mut out: Vec<Decoded> = Vec::new();
    let mut next_offset = 0i64;
    let mut bytes = 0usize;
    for item in it.by_ref() {
        let batch =
            item.unwrap_or_else(|e| panic!("{name}.log: batch after offset {next_offset}: {e}"));
        let records = batch
            .records()
            .unwrap_or_else(|e| panic!("{name}.log: records of batch {}: {e}", batch.base_offset));
        let at = batch.base_offset;
        assert_eq!(at, next_offset, "{name}.log: batches are contiguous");
        assert_eq!(
            records.len(),
            batch.records_count as usize,
            "{name}.log@{at}: record count"
        );
        assert_eq!(
            batch.last_offset_delta as usize + 1,
            records.len(),
            "{name}.log@{at}: last offset delta"
        );
        for (i, r) in records.iter().enumerate() {
            assert_eq!(
                r.offset,
                at + i as i64,
                "{name}.log@{at}: record {i} offset"
            );
        }
        assert_eq!(
            batch.partition_leader_epoch, 0,
            "{name}.log@{at}: leader epoch"
        );
        assert_eq!(
            batch.timestamp_type(),
            TimestampType::CreateTime,
            "{name}.log@{at}"
        );
        if !batch.is_control() {
            assert_eq!(
                batch.base_timestamp, records[0].timestamp,
                "{name}.log@{at}: base timestamp"
            );
            let max = records.iter().map(|r| r.timestamp).max().unwrap();
            assert_eq!(batch.max_timestamp, max, "{name}.log@{at}: max timestamp");
        }
        next_offset = batch.next_offset();
        bytes += batch.size_in_bytes();
        out.push(Decoded { batch, records });
    }
    assert!(
        it.remaining().is_empty(),
        "{name}.log: {} bytes left undecoded",
        it.remaining().len()
    );
    assert_eq!(
        bytes, len,
        "{name}.log: batch sizes add up to the file size"
    );
    out
}

fn data_records(decoded: &[Decoded]) -> Vec<Line> {
    decoded
        .iter()
        .filter(|d| !d.batch.is_control())
        .flat_map(|d| d.records.iter().map(Line::from_record))
        .collect()
}

/// Asserts line by line (for a readable failure), then as a whole.
fn assert_same_records(name: &str, got: &[Line], want: &[Line]) {
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w, "{name}: record at offset {:?}", w.offset);
    }
    assert_eq!(got.len(), want.len(), "{name}: number of records");
}

/// The data batches of a plain (non-idempotent, non-transactional) producer: `sizes` records each,
/// compressed with `codec`.
fn assert_plain_batches(name: &str, decoded: &[Decoded], codec: Compression, sizes: &[usize]) {
    let got: Vec<usize> = decoded.iter().map(|d| d.records.len()).collect();
    assert_eq!(got, sizes, "{name}: records per batch");
    for d in decoded {
        let b = &d.batch;
        assert_eq!(
            b.compression(),
            Ok(codec),
            "{name}@{}: codec",
            b.base_offset
        );
        assert!(
            !b.is_transactional() && !b.is_control(),
            "{name}@{}",
            b.base_offset
        );
        assert!(!b.has_producer_id());
        assert_eq!(
            (b.producer_id, b.producer_epoch, b.base_sequence),
            (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE),
            "{name}@{}: producer fields",
            b.base_offset
        );
    }
}

/// Decodes `name` and compares its data records with what the Java consumer read.
fn decode_and_compare(name: &str) -> Vec<Decoded> {
    let decoded = decode_fixture(name);
    assert_same_records(name, &data_records(&decoded), &expected(name));
    decoded
}

// ------------------------------------------------------------------------------------------------
// Tests

#[test]
fn every_fixture_log_is_covered() {
    let mut logs: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures/")
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|f| f.strip_suffix(".log").map(str::to_owned))
        .collect();
    logs.sort();
    let mut known: Vec<String> = FIXTURES.iter().map(|s| s.to_string()).collect();
    known.sort();
    assert_eq!(
        logs, known,
        "fixtures/*.log and the fixtures this module tests"
    );
}

#[test]
fn every_fixture_expectation_equals_its_input() {
    // The captured read-back is what was produced (minus offsets, and the partition the input
    // left to the partitioner), so comparing with `expected` also compares with the input.
    for name in FIXTURES {
        let input = read_jsonl(&format!("{name}.input.jsonl"), false);
        let mut exp = expected(name);
        if name == "transactional" {
            // Input holds all 15; expected (read_uncommitted) too.
            assert_eq!(exp.len(), 15);
        }
        if name == "transactional-zstd" {
            // 25 transactional records (10 of them aborted) and 2 plain ones, all read_uncommitted.
            assert_eq!(exp.len(), 27);
        }
        for (i, e) in exp.iter_mut().enumerate() {
            assert_eq!(e.partition, Some(0), "{name}: partition");
            e.offset = None;
            if input[i].partition.is_none() {
                e.partition = None;
            }
        }
        assert_eq!(exp, input, "{name}: expected vs input");
    }
}

#[test]
fn plain_fixture_decodes_to_what_the_java_consumer_read() {
    let decoded = decode_and_compare("plain");
    assert_plain_batches("plain", &decoded, Compression::None, &[10, 10, 10]);
    // Record 15's timestamp precedes its batch's base timestamp: a negative delta.
    let second = &decoded[1];
    let r15 = &second.records[5];
    assert_eq!(r15.offset, 15);
    assert!(
        r15.timestamp < second.batch.base_timestamp,
        "negative timestamp delta"
    );
    assert_eq!(r15.timestamp, 1_700_000_000_000 - 1000);
    // Record 25 is one day later than the batch start: a large positive delta.
    let r25 = &decoded[2].records[5];
    assert_eq!(r25.timestamp, 1_700_000_000_000 + 86_400_000);
    assert_eq!(decoded[2].batch.max_timestamp, r25.timestamp);
}

fn compressed_fixture(name: &str, codec: Compression) {
    let decoded = decode_and_compare(name);
    assert_plain_batches(name, &decoded, codec, &[10, 10]);
    // A header on every 4th record, saying which codec.
    for r in decoded.iter().flat_map(|d| &d.records) {
        if r.offset % 4 == 0 {
            assert_eq!(r.headers.len(), 1, "{name}@{}", r.offset);
            assert_eq!(&r.headers[0].key[..], b"codec");
            assert_eq!(r.headers[0].value.as_deref(), Some(name.as_bytes()));
        } else {
            assert!(r.headers.is_empty(), "{name}@{}", r.offset);
        }
    }
}

#[test]
fn gzip_fixture_decodes_to_what_the_java_consumer_read() {
    compressed_fixture("gzip", Compression::Gzip);
}

#[test]
fn snappy_fixture_with_xerial_framing_decodes_to_what_the_java_consumer_read() {
    compressed_fixture("snappy", Compression::Snappy);
}

#[test]
fn lz4_fixture_decodes_to_what_the_java_consumer_read() {
    compressed_fixture("lz4", Compression::Lz4);
}

#[test]
fn zstd_fixture_decodes_to_what_the_java_consumer_read() {
    compressed_fixture("zstd", Compression::Zstd);
}

#[test]
fn headers_fixture_keeps_order_duplicates_null_and_empty_values() {
    let decoded = decode_and_compare("headers");
    assert_plain_batches("headers", &decoded, Compression::None, &[6, 6]);
    let records: Vec<&Record> = decoded.iter().flat_map(|d| &d.records).collect();
    let hs = |i: usize| -> Vec<(&[u8], Option<&[u8]>)> {
        records[i]
            .headers
            .iter()
            .map(|h| (&h.key[..], h.value.as_deref()))
            .collect()
    };
    // Spelled out as well, so a wrong fixture file cannot make a wrong decoder pass.
    assert!(hs(0).is_empty());
    assert_eq!(
        hs(2),
        [
            (&b"dup"[..], Some(&b"first"[..])),
            (b"dup", Some(b"second")),
            (b"dup", Some(b"third"))
        ]
    );
    assert_eq!(hs(3), [(&b"nullvalue"[..], None)]);
    assert_eq!(hs(4), [(&b"empty"[..], Some(&b""[..]))]);
    assert_eq!(
        hs(5),
        [
            (&b"dup"[..], Some(&b"a"[..])),
            (b"other", Some(b"x")),
            (b"dup", None),
            (b"dup", Some(b"b"))
        ]
    );
    assert_eq!(hs(6), [(&b""[..], Some(&b"empty key"[..]))]);
    assert_eq!(
        hs(7),
        [("unicode-ключ-✓".as_bytes(), Some("été ☃".as_bytes()))]
    );
    let binary: Vec<u8> = (0..16u8).map(|i| i * 0x11).collect();
    assert_eq!(hs(8), [(&b"binary"[..], Some(&binary[..]))]);
    assert_eq!(hs(9).len(), 10);
    for (i, (k, v)) in hs(9).into_iter().enumerate() {
        assert_eq!(k, format!("h{i}").as_bytes());
        assert_eq!(v, Some(format!("v{i}").as_bytes()));
    }
    assert_eq!(hs(10), [(&b"null-a"[..], None), (b"null-a", None)]);
}

/// A record's key and value; `None` is null.
type KeyAndValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

#[test]
fn nulls_fixture_keeps_null_and_empty_keys_and_values_apart() {
    let decoded = decode_and_compare("nulls");
    assert_plain_batches("nulls", &decoded, Compression::None, &[4, 4]);
    let kv: Vec<KeyAndValue> = decoded
        .iter()
        .flat_map(|d| &d.records)
        .map(|r| (r.key.as_deref(), r.value.as_deref()))
        .collect();
    let e: &[u8] = b"";
    assert_eq!(
        kv,
        [
            (None, Some(&b"value without key"[..])),
            (Some(&b"key-without-value"[..]), None),
            (None, None),
            (Some(e), Some(&b"empty key"[..])),
            (Some(&b"empty value"[..]), Some(e)),
            (Some(e), Some(e)),
            (None, Some(e)),
            (Some(e), None),
        ]
    );
}

#[test]
fn idempotent_fixture_carries_producer_id_epoch_and_base_sequences() {
    let decoded = decode_and_compare("idempotent");
    let pid = decoded[0].batch.producer_id;
    assert!(pid >= 0, "a broker-assigned producer id, got {pid}");
    let fields: Vec<_> = decoded
        .iter()
        .map(|d| {
            let b = &d.batch;
            (
                b.records_count,
                b.producer_id,
                b.producer_epoch,
                b.base_sequence,
                b.is_transactional(),
                b.is_control(),
                b.compression(),
            )
        })
        .collect();
    let plain = |n, seq| (n, pid, 0, seq, false, false, Ok(Compression::None));
    assert_eq!(fields, [plain(10, 0), plain(10, 10), plain(5, 20)]);
}

/// The transactional fixture's batch headers: three transactions of 5 records (commit, abort,
/// commit), each followed by its marker.
#[test]
fn transactional_fixture_has_commit_abort_commit_markers() {
    let decoded = decode_and_compare("transactional");
    assert_eq!(decoded.len(), 6, "3 data batches + 3 markers");
    let pid = decoded[0].batch.producer_id;
    assert!(pid >= 0, "a broker-assigned producer id, got {pid}");
    // transaction.version=2 bumps the epoch at every transaction end: data E, marker E+1, the
    // next transaction's data E+1, and so on.
    let e0 = decoded[0].batch.producer_epoch;
    assert!(e0 >= 0);
    let markers = [
        ControlRecord::Commit {
            coordinator_epoch: 0,
        },
        ControlRecord::Abort {
            coordinator_epoch: 0,
        },
        ControlRecord::Commit {
            coordinator_epoch: 0,
        },
    ];
    for (txn, pair) in decoded.chunks(2).enumerate() {
        let (data, marker) = (&pair[0], &pair[1]);
        let epoch = e0 + txn as i16;
        let (d, m) = (&data.batch, &marker.batch);
        assert_eq!(d.base_offset, 6 * txn as i64);
        assert_eq!(d.attributes, 0x10, "data: transactional bit only");
        assert!(d.is_transactional() && !d.is_control());
        assert_eq!(
            (d.producer_id, d.producer_epoch, d.base_sequence),
            (pid, epoch, 0)
        );
        assert_eq!(data.records.len(), 5);
        assert_eq!(d.control_record(), Ok(None), "a data batch has no marker");

        assert_eq!(m.base_offset, 6 * txn as i64 + 5);
        assert_eq!(m.attributes, 0x30, "marker: transactional + control");
        assert!(m.is_transactional() && m.is_control());
        assert_eq!(m.compression(), Ok(Compression::None));
        assert_eq!(
            (m.producer_id, m.producer_epoch, m.base_sequence),
            (pid, epoch + 1, NO_SEQUENCE)
        );
        assert_eq!(m.records_count, 1);
        assert_eq!(m.control_record(), Ok(Some(markers[txn])), "marker {txn}");
        let raw = &marker.records[0];
        let key_type = if txn == 1 { 0 } else { 1 };
        assert_eq!(
            raw.key.as_deref(),
            Some(&[0, 0, 0, key_type][..]),
            "marker key"
        );
        assert_eq!(raw.value.as_deref(), Some(&[0u8; 6][..]), "marker value");
        assert!(raw.headers.is_empty());
        // Stamped with the broker's clock at capture, long after the 2023 data.
        assert_eq!(m.base_timestamp, m.max_timestamp);
        assert_eq!(raw.timestamp, m.base_timestamp);
        assert!(m.base_timestamp > d.max_timestamp);
    }
}

/// Applies the markers of fixture `name` by hand, as a read_committed consumer must: a
/// producer's transactional records are held until its next marker, then kept on COMMIT and
/// dropped on ABORT; non-transactional records are kept at once; markers themselves are never
/// records. Returns the kept records in offset order and the offsets of the dropped ones.
fn filter_by_markers(name: &str) -> (Vec<Line>, Vec<i64>) {
    let decoded = decode_fixture(name);
    let mut open: HashMap<i64, Vec<Line>> = HashMap::new();
    let mut committed: Vec<Line> = Vec::new();
    let mut aborted: Vec<i64> = Vec::new();
    for d in &decoded {
        let b = &d.batch;
        if b.is_control() {
            let pending = open.remove(&b.producer_id).unwrap_or_default();
            match b.control_record().expect("valid marker") {
                Some(ControlRecord::Commit { .. }) => committed.extend(pending),
                Some(ControlRecord::Abort { .. }) => {
                    aborted.extend(pending.iter().map(|l| l.offset.unwrap()))
                }
                other => panic!("unexpected control record {other:?} at {}", b.base_offset),
            }
        } else if b.is_transactional() {
            open.entry(b.producer_id)
                .or_default()
                .extend(d.records.iter().map(Line::from_record));
        } else {
            committed.extend(d.records.iter().map(Line::from_record));
        }
    }
    assert!(
        open.values().all(Vec::is_empty),
        "{name}: no transaction left open"
    );
    committed.sort_by_key(|l| l.offset);
    (committed, aborted)
}

/// The transactional fixture filtered by its markers must give exactly what the Java consumer
/// read with isolation.level=read_committed.
#[test]
fn transactional_fixture_filtered_by_its_markers_gives_the_read_committed_view() {
    let (committed, aborted) = filter_by_markers("transactional");
    assert_eq!(
        aborted,
        (6..=10).collect::<Vec<i64>>(),
        "the second transaction is aborted"
    );
    let want = read_jsonl("transactional.expected-committed.jsonl", true);
    let offsets: Vec<i64> = want.iter().map(|l| l.offset.unwrap()).collect();
    assert_eq!(offsets, [0, 1, 2, 3, 4, 12, 13, 14, 15, 16]);
    assert_same_records("transactional (read_committed)", &committed, &want);
}

/// What a batch of the transactional-zstd fixture is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TzBatch {
    /// A transaction's data: 5 records, zstd, transactional.
    Txn,
    /// Records of the plain (non-transactional, non-idempotent) producer, zstd.
    Plain(usize),
    Commit,
    Abort,
}

/// transactional-zstd, in log order: (base offset, kind).
const TXN_ZSTD_LAYOUT: [(i64, TzBatch); 11] = [
    (0, TzBatch::Txn),
    (5, TzBatch::Commit),
    (6, TzBatch::Txn),
    (11, TzBatch::Abort),
    (12, TzBatch::Plain(2)),
    (14, TzBatch::Txn),
    (19, TzBatch::Commit),
    (20, TzBatch::Txn),
    (25, TzBatch::Abort),
    (26, TzBatch::Txn),
    (31, TzBatch::Commit),
];

/// Zstandard frame magic number (RFC 8878), little-endian on the wire.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Compressed transactions: five transactions of 5 zstd records (commit, abort, commit, abort,
/// commit, by two producer instances sharing one transactional.id) with a plain zstd batch of 2
/// records between the 2nd and 3rd. Every data batch is zstd with the transactional bit (plain:
/// without); every marker is an uncompressed control batch with the right COMMIT/ABORT record.
#[test]
fn transactional_zstd_fixture_has_compressed_transactions_with_commit_and_abort_markers() {
    let name = "transactional-zstd";
    let decoded = decode_and_compare(name);
    let raw = read_fixture(&format!("{name}.log"));
    let layout: Vec<(i64, TzBatch)> = decoded
        .iter()
        .map(|d| {
            let b = &d.batch;
            let kind = match b.control_record() {
                Ok(Some(ControlRecord::Commit { .. })) => TzBatch::Commit,
                Ok(Some(ControlRecord::Abort { .. })) => TzBatch::Abort,
                Ok(None) if b.is_transactional() => TzBatch::Txn,
                Ok(None) => TzBatch::Plain(d.records.len()),
                other => panic!("{name}@{}: {other:?}", b.base_offset),
            };
            (b.base_offset, kind)
        })
        .collect();
    assert_eq!(layout, TXN_ZSTD_LAYOUT);

    let pid = decoded[0].batch.producer_id;
    assert!(pid >= 0, "a broker-assigned producer id, got {pid}");
    let e0 = decoded[0].batch.producer_epoch;
    assert!(e0 >= 0);
    // Data epochs relative to the first: every transaction end bumps the epoch
    // (transaction.version=2), and so does the second producer's InitProducerId (2 -> 3).
    let mut data_epochs = Vec::new();
    let mut start = 0;
    for (d, (_, kind)) in decoded.iter().zip(TXN_ZSTD_LAYOUT) {
        let b = &d.batch;
        let at = b.base_offset;
        let records_section = &raw[start + BATCH_HEADER_LEN..start + b.size_in_bytes()];
        start += b.size_in_bytes();
        match kind {
            TzBatch::Txn | TzBatch::Plain(_) => {
                assert_eq!(b.compression(), Ok(Compression::Zstd), "{name}@{at}: codec");
                assert!(
                    records_section.starts_with(&ZSTD_MAGIC),
                    "{name}@{at}: the records section is a zstd frame"
                );
                assert!(!b.is_control(), "{name}@{at}");
                assert_eq!(b.control_record(), Ok(None), "{name}@{at}");
            }
            TzBatch::Commit | TzBatch::Abort => {
                assert_eq!(b.attributes, 0x30, "{name}@{at}: transactional + control");
                assert_eq!(b.compression(), Ok(Compression::None), "{name}@{at}");
                assert!(b.is_transactional() && b.is_control());
                assert_eq!(b.records_count, 1);
                let marker = &d.records[0];
                let key_type = u8::from(kind == TzBatch::Commit);
                assert_eq!(
                    marker.key.as_deref(),
                    Some(&[0, 0, 0, key_type][..]),
                    "{name}@{at}: marker key"
                );
                assert_eq!(marker.value.as_deref(), Some(&[0u8; 6][..]));
                assert!(marker.headers.is_empty());
                // Stamped with the broker's clock at capture, long after the 2023 data.
                assert_eq!(b.base_timestamp, b.max_timestamp);
                assert!(b.base_timestamp > 1_700_000_006_026, "{name}@{at}");
            }
        }
        match kind {
            TzBatch::Txn => {
                assert_eq!(b.attributes, 0x14, "{name}@{at}: zstd + transactional");
                assert!(b.is_transactional());
                assert_eq!(d.records.len(), 5, "{name}@{at}");
                assert_eq!((b.producer_id, b.base_sequence), (pid, 0), "{name}@{at}");
                data_epochs.push(b.producer_epoch - e0);
            }
            TzBatch::Plain(_) => {
                assert_eq!(b.attributes, 0x04, "{name}@{at}: zstd only");
                assert!(!b.is_transactional() && !b.has_producer_id());
                assert_eq!(
                    (b.producer_id, b.producer_epoch, b.base_sequence),
                    (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE),
                    "{name}@{at}: producer fields"
                );
                for r in &d.records {
                    assert_eq!(r.headers.len(), 1);
                    assert_eq!(&r.headers[0].key[..], b"producer");
                    assert_eq!(r.headers[0].value.as_deref(), Some(&b"plain"[..]));
                }
            }
            TzBatch::Commit | TzBatch::Abort => {
                // The marker of the transaction just before it: same producer, epoch + 1.
                let data = &decoded
                    .iter()
                    .rev()
                    .find(|p| p.batch.base_offset < at && p.batch.is_transactional())
                    .unwrap()
                    .batch;
                assert!(!data.is_control(), "{name}@{at}: follows its data");
                assert_eq!(
                    (b.producer_id, b.producer_epoch, b.base_sequence),
                    (pid, data.producer_epoch + 1, NO_SEQUENCE),
                    "{name}@{at}: marker producer fields"
                );
                assert!(b.base_timestamp > data.max_timestamp);
            }
        }
    }
    assert_eq!(data_epochs, [0, 1, 3, 4, 5]);
}

/// The transactional-zstd fixture filtered by its markers must give exactly what the Java
/// consumer read with isolation.level=read_committed: transactions 2 and 4 dropped, the plain
/// records between them kept.
#[test]
fn transactional_zstd_fixture_filtered_by_its_markers_gives_the_read_committed_view() {
    let (committed, aborted) = filter_by_markers("transactional-zstd");
    assert_eq!(
        aborted,
        (6..=10).chain(20..=24).collect::<Vec<i64>>(),
        "the 2nd and 4th transactions are aborted"
    );
    let want = read_jsonl("transactional-zstd.expected-committed.jsonl", true);
    let offsets: Vec<i64> = want.iter().map(|l| l.offset.unwrap()).collect();
    let want_offsets: Vec<i64> = (0..5).chain(12..19).chain(26..31).collect();
    assert_eq!(offsets, want_offsets);
    assert_same_records("transactional-zstd (read_committed)", &committed, &want);
}

/// The fixtures decode because their Java-computed CRC-32C values match ours; a flipped byte in
/// any batch must be reported for that batch alone.
#[test]
fn a_flipped_byte_in_any_fixture_batch_is_a_crc_mismatch() {
    for name in FIXTURES {
        let decoded = decode_fixture(name);
        let raw = read_fixture(&format!("{name}.log"));
        let mut start = 0;
        for (i, d) in decoded.iter().enumerate() {
            let mut bad = raw.clone();
            // The last byte of the batch: inside the CRC-covered records section.
            bad[start + d.batch.size_in_bytes() - 1] ^= 0x01;
            let results: Vec<Result<RecordBatch, RecordError>> =
                decode_batches(Bytes::from(bad)).collect();
            assert_eq!(
                results.len(),
                decoded.len(),
                "{name}: the bad batch is skipped over"
            );
            for (j, r) in results.iter().enumerate() {
                if i == j {
                    assert!(
                        matches!(r, Err(RecordError::CrcMismatch { offset, .. }) if *offset == d.batch.base_offset),
                        "{name}: batch {i}: {r:?}"
                    );
                } else {
                    assert!(r.is_ok(), "{name}: batch {j} untouched: {r:?}");
                }
            }
            start += d.batch.size_in_bytes();
        }
    }
}
