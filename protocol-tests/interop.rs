//! Byte-for-byte interop with the official Java client (kafka-clients 4.1.1), through
//! protocol-tests/java/interop.sh: what one client writes, the other reads back exactly — keys,
//! values (binary, empty, null), headers (order, duplicate keys, null and empty values, empty and
//! non-ASCII keys), timestamps and offsets, on several partitions, with every codec — and a keyed
//! record lands on the same partition whichever client wrote it.

use crate::support::java::{java_consume_exactly, java_offsets, java_produce, Rec};
use crate::support::*;
use onceflow::client::partition_for_key;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tempfile::TempDir;

// ------------------------------------------------------------------------------------------------
// Comparing records

/// A short description of bytes for failure messages (values can be tens of KiB).
fn show(b: &Option<Vec<u8>>) -> String {
    match b {
        None => "null".into(),
        Some(b) => {
            let mut s = format!("{} bytes [", b.len());
            for x in b.iter().take(24) {
                let _ = write!(s, "{x:02x}");
            }
            if b.len() > 24 {
                s.push_str("..");
            }
            s.push(']');
            s
        }
    }
}

/// Field by field, so a mismatch names the record and the field instead of dumping megabytes.
fn assert_same_records(what: &str, got: &[Rec], want: &[Rec]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g == w {
            continue;
        }
        let mut diff = String::new();
        if (g.partition, g.offset) != (w.partition, w.offset) {
            let _ = write!(
                diff,
                " partition/offset got {:?}/{:?} want {:?}/{:?};",
                g.partition, g.offset, w.partition, w.offset
            );
        }
        if g.timestamp != w.timestamp {
            let _ = write!(
                diff,
                " timestamp got {:?} want {:?};",
                g.timestamp, w.timestamp
            );
        }
        if g.key != w.key {
            let _ = write!(diff, " key got {} want {};", show(&g.key), show(&w.key));
        }
        if g.value != w.value {
            let _ = write!(
                diff,
                " value got {} want {};",
                show(&g.value),
                show(&w.value)
            );
        }
        if g.headers != w.headers {
            let h = |hs: &[(Vec<u8>, Option<Vec<u8>>)]| {
                hs.iter()
                    .map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), show(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = write!(
                diff,
                " headers got [{}] want [{}];",
                h(&g.headers),
                h(&w.headers)
            );
        }
        panic!("{what}: record #{i} differs:{diff}");
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} records read, {} expected; first unmatched: {:?}",
        got.len(),
        want.len(),
        got.get(want.len())
            .or(want.get(got.len()))
            .map(|r| (r.partition, r.offset))
    );
}

// ------------------------------------------------------------------------------------------------
// Test data

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Deterministic pseudo-random bytes (xorshift), covering every byte value.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Record `i` of a varied set on `partitions` partitions. Key, value, headers and timestamp cycle
/// through coprime periods, so the combinations vary: null / empty / text / non-UTF-8 / non-ASCII
/// keys and values, large values, duplicate and null-valued headers, timestamps far in the past,
/// at 0, out of order inside a batch, and left to the producer's clock (`None`).
fn varied(i: usize, partitions: i32, base_ts: i64) -> Rec {
    let n = i as u64;
    let key = match i % 7 {
        0 => None,
        1 => Some(Vec::new()),
        2 => Some(format!("key-{i}").into_bytes()),
        3 => Some(vec![0xff, 0xfe, 0x00, i as u8, 0x80, 0xc3, 0x28]), // not UTF-8
        4 => Some(format!("ключ-{i}-✓").into_bytes()),
        5 => Some(noise(n, 1 + i % 300)),
        _ => Some(vec![0u8; i % 5]),
    };
    let value = match i % 11 {
        0 => None,
        1 => Some(Vec::new()),
        2 => Some((0..=255u8).map(|b| b.wrapping_add(i as u8)).collect()),
        3 => Some(noise(n + 1000, 20_000 + i)), // incompressible, larger than a default batch
        4 => Some(format!("value {i} ").repeat(1 + i % 40).into_bytes()),
        5 => Some(vec![b'z'; 5000 + i]), // very compressible
        6 => Some("été ☃ 日本語 🦀".as_bytes().to_vec()),
        7 => Some(vec![0x00]),
        _ => Some(noise(n + 2000, i % 64)),
    };
    let headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = match i % 8 {
        0 => vec![],
        1 => vec![(b"h".to_vec(), Some(format!("v{i}").into_bytes()))],
        2 => vec![
            (b"dup".to_vec(), Some(b"first".to_vec())),
            (b"dup".to_vec(), None),
            (b"dup".to_vec(), Some(Vec::new())),
            (b"dup".to_vec(), Some(b"last".to_vec())),
        ],
        3 => vec![(Vec::new(), Some(noise(n + 3000, 17)))],
        4 => vec![(
            "unicode-ключ-✓".as_bytes().to_vec(),
            Some("été".as_bytes().to_vec()),
        )],
        5 => vec![(b"null".to_vec(), None), (b"null".to_vec(), None)],
        6 => (0..12)
            .map(|h| {
                (
                    format!("h{h}").into_bytes(),
                    Some(noise(n * 16 + h, h as usize)),
                )
            })
            .collect(),
        _ => vec![
            (b"trace".to_vec(), Some(format!("t-{i}").into_bytes())),
            (b"other".to_vec(), Some(vec![0xff, 0x00, 0xfe])),
            (b"trace".to_vec(), Some(b"again".to_vec())),
        ],
    };
    let timestamp = match i % 10 {
        _ if i == 1 => Some(0),
        3 => Some(base_ts - 30 * 86_400_000), // a month ago (the topic keeps it: retention -1)
        5 => Some(base_ts - 50_000),          // before its neighbours: negative delta
        9 if i % 20 == 9 => None,             // the producer's clock
        _ => Some(base_ts + i as i64 * 3),
    };
    Rec {
        partition: Some((i % partitions as usize) as i32),
        offset: None,
        timestamp,
        key,
        value,
        headers,
    }
}

fn varied_set(n: usize, partitions: i32) -> Vec<Rec> {
    let base = now_ms() - 600_000;
    (0..n).map(|i| varied(i, partitions, base)).collect()
}

/// A topic that keeps old timestamps for the whole test (no 7-day retention).
async fn topic(prefix: &str, partitions: i32) -> TestTopic {
    TestTopic::create_with(&broker(), prefix, partitions, &[("retention.ms", "-1")]).await
}

/// onceflow produces `recs`; the Java consumer must read exactly them, at the partitions and
/// offsets onceflow's acknowledgements reported, with the timestamps onceflow set (or reported,
/// for records left to the producer's clock).
async fn onceflow_to_java(prefix: &str, codec: &str, recs: &[Rec], partitions: i32) {
    let topic = topic(prefix, partitions).await;
    let dir = TempDir::new().unwrap();
    let p = producer(&[("compression.type", codec), ("linger.ms", "10")]).await;
    let mut pending = Vec::with_capacity(recs.len());
    for r in recs {
        pending.push(p.send(r.to_producer_record(&topic.name)).await.unwrap());
    }
    p.flush().await.unwrap();
    let mut want = Vec::with_capacity(recs.len());
    for (r, f) in recs.iter().zip(pending) {
        let meta = tokio::time::timeout(Duration::from_secs(60), f)
            .await
            .expect("acknowledged in time")
            .expect("acknowledged");
        assert_eq!(
            Some(meta.partition),
            r.partition,
            "acknowledged at the chosen partition"
        );
        if let Some(ts) = r.timestamp {
            assert_eq!(meta.timestamp, ts, "acknowledged timestamp");
        }
        want.push(Rec {
            offset: Some(meta.offset),
            timestamp: Some(meta.timestamp),
            ..r.clone()
        });
    }
    // The Java consumer's order: by partition, then offset; offsets dense from 0.
    want.sort_by_key(|r| (r.partition, r.offset));
    for p in 0..partitions {
        let offsets: Vec<i64> = want
            .iter()
            .filter(|r| r.partition == Some(p))
            .map(|r| r.offset.unwrap())
            .collect();
        assert_eq!(
            offsets,
            (0..offsets.len() as i64).collect::<Vec<_>>(),
            "acked offsets of partition {p}"
        );
        assert!(!offsets.is_empty(), "partition {p} got records");
    }
    let got = java_consume_exactly(&dir, &topic.name, recs.len()).await;
    assert_same_records(
        &format!("Java reading onceflow's {codec} batches"),
        &got,
        &want,
    );
}

#[tokio::test]
async fn java_consumer_reads_exactly_what_onceflow_produced() {
    let recs = varied_set(330, 3);
    onceflow_to_java("interop-of2java", "none", &recs, 3).await;
}

#[tokio::test]
async fn java_consumer_reads_onceflow_batches_compressed_with_every_codec() {
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let recs = varied_set(120, 2);
        onceflow_to_java(&format!("interop-of2java-{codec}"), codec, &recs, 2).await;
    }
}

// ------------------------------------------------------------------------------------------------
// Java -> onceflow

/// The Java producer writes a varied set with `codec`; onceflow must read exactly the input, at
/// dense offsets from 0 per partition (what the Java AdminClient lists as the end offsets).
async fn java_to_onceflow(codec: &str) {
    let partitions = 3;
    let topic = topic(&format!("interop-java2of-{codec}"), partitions).await;
    let dir = TempDir::new().unwrap();
    let recs = varied_set(300, partitions);
    let before = now_ms();
    // Batches of up to 40 records per partition: --linger-ms with --flush-every.
    java_produce(
        &dir,
        &topic.name,
        &recs,
        &[
            "--compression",
            codec,
            "--linger-ms",
            "1000",
            "--flush-every",
            "40",
        ],
    )
    .await;
    let after = now_ms();
    let read = consume_all(&broker(), &topic, recs.len(), &[]).await;

    // The expected view: per partition in input order, offsets from 0.
    let mut want: Vec<Rec> = Vec::new();
    for p in 0..partitions {
        let part = recs.iter().filter(|r| r.partition == Some(p));
        want.extend(part.enumerate().map(|(o, r)| Rec {
            offset: Some(o as i64),
            ..r.clone()
        }));
    }
    // onceflow's order per partition is its read order (no sorting, so reordering shows).
    let mut got: Vec<Rec> = Vec::new();
    for p in 0..partitions {
        got.extend(
            read.iter()
                .filter(|r| r.partition == p)
                .map(Rec::from_onceflow),
        );
    }
    assert_eq!(got.len(), read.len(), "records from unknown partitions");
    // Records the input left to the producer's clock got one from the produce run.
    for (g, w) in got.iter().zip(want.iter_mut()) {
        if w.timestamp.is_none() {
            let ts = g.timestamp.unwrap();
            assert!(
                (before - 5_000..=after + 5_000).contains(&ts),
                "producer-clock timestamp {ts} outside the produce run [{before}, {after}]"
            );
            w.timestamp = Some(ts);
        }
    }
    assert_same_records(
        &format!("onceflow reading Java's {codec} batches"),
        &got,
        &want,
    );

    let offsets = java_offsets(&topic.name).await;
    for p in 0..partitions {
        let n = want.iter().filter(|r| r.partition == Some(p)).count() as i64;
        assert_eq!(
            offsets.get(&p),
            Some(&(0, n, n)),
            "Java's offsets of partition {p}"
        );
    }
}

#[tokio::test]
async fn onceflow_reads_exactly_what_the_java_producer_wrote_uncompressed() {
    java_to_onceflow("none").await;
}

#[tokio::test]
async fn onceflow_reads_exactly_what_the_java_producer_wrote_with_gzip() {
    java_to_onceflow("gzip").await;
}

#[tokio::test]
async fn onceflow_reads_exactly_what_the_java_producer_wrote_with_snappy() {
    java_to_onceflow("snappy").await;
}

#[tokio::test]
async fn onceflow_reads_exactly_what_the_java_producer_wrote_with_lz4() {
    java_to_onceflow("lz4").await;
}

#[tokio::test]
async fn onceflow_reads_exactly_what_the_java_producer_wrote_with_zstd() {
    java_to_onceflow("zstd").await;
}

// ------------------------------------------------------------------------------------------------
// Keyed partitioning

/// Keys of many shapes: text, non-UTF-8, non-ASCII, empty, every length 0..=40 (murmur2's tail
/// handling), long.
fn keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    keys.push(Vec::new());
    for i in 0..120 {
        keys.push(format!("user-{i}").into_bytes());
    }
    for len in 1..=40 {
        keys.push(noise(len as u64 + 77, len));
    }
    for i in 0..30 {
        keys.push(vec![0xff, 0xfe, i, 0x80]);
        keys.push(format!("ключ-{i}-✓").into_bytes());
    }
    keys.push(noise(4242, 1000));
    keys
}

/// The Java producer, given a key and no partition, picks the partition onceflow's partitioner
/// computes; onceflow's producer picks the same for the same key.
#[tokio::test]
async fn java_producer_puts_each_key_on_the_partition_onceflow_picks() {
    let partitions = 7;
    let keys = keys();
    let recs: Vec<Rec> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| Rec {
            partition: None,
            offset: None,
            timestamp: None,
            key: Some(k.clone()),
            value: Some(i.to_string().into_bytes()),
            headers: vec![],
        })
        .collect();
    let by_java = topic("interop-keys-java", partitions).await;
    let by_onceflow = topic("interop-keys-onceflow", partitions).await;
    let dir = TempDir::new().unwrap();
    java_produce(&dir, &by_java.name, &recs, &[]).await;
    let p = producer(&[("linger.ms", "5")]).await;
    let mut acks = Vec::new();
    for r in &recs {
        acks.push(
            p.send(r.to_producer_record(&by_onceflow.name))
                .await
                .unwrap(),
        );
    }
    p.flush().await.unwrap();
    for f in acks {
        f.await.unwrap();
    }

    let mut seen = vec![0usize; partitions as usize];
    for (topic, who) in [(&by_java, "Java"), (&by_onceflow, "onceflow")] {
        let read = consume_all(&broker(), topic, recs.len(), &[]).await;
        assert_eq!(
            read.len(),
            recs.len(),
            "{who}: every keyed record read once"
        );
        let mut found = vec![false; recs.len()];
        for r in &read {
            let i: usize = std::str::from_utf8(r.value.as_deref().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                !std::mem::replace(&mut found[i], true),
                "{who}: record {i} read twice"
            );
            let key = r.key.as_deref().expect("key kept");
            assert_eq!(key, &keys[i][..], "{who}: key of record {i}");
            assert_eq!(
                r.partition,
                partition_for_key(key, partitions as usize),
                "{who} put key #{i} {} on partition {}",
                show(&Some(key.to_vec())),
                r.partition
            );
            seen[r.partition as usize] += 1;
        }
    }
    assert!(
        seen.iter().all(|&n| n > 0),
        "keys spread over every partition: {seen:?}"
    );
}
