//! Every compression codec survives a round trip through the broker, byte for byte.

use crate::support::*;
use bytes::Bytes;
use onceflow::client::ProducerRecord;

async fn round_trip(codec: &str) {
    let topic = TestTopic::create(&format!("codec-{codec}"), 2).await;
    let p = producer(&[("compression.type", codec), ("linger.ms", "20")]).await;
    let mut sent = Vec::new();
    for i in 0..500u32 {
        let mut r = ProducerRecord::new(
            topic.name.clone(),
            Bytes::from(format!("value {i} {}", "x".repeat((i % 50) as usize))),
        )
        .with_partition((i % 2) as i32)
        .with_timestamp(1_700_000_000_000 + i as i64)
        .with_header("trace", Some(format!("t{i}")))
        .with_header("trace", Some("second value, same key"));
        if i % 3 == 0 {
            r = r.with_key(Bytes::from(format!("key-{i}")));
        }
        if i % 7 == 0 {
            r.value = None; // a tombstone
            r = r.with_header("nullable", None::<Bytes>);
        }
        sent.push(r.clone());
        p.send(r).await.unwrap();
    }
    p.flush().await.unwrap();
    let got = consume_all(&broker(), &topic, sent.len(), &[]).await;
    if got.len() != sent.len() {
        let mut offsets: Vec<(i32, i64)> = got.iter().map(|r| (r.partition, r.offset)).collect();
        offsets.sort();
        let before = offsets.len();
        offsets.dedup();
        panic!(
            "codec {codec}: {} records read for {} sent; {} repeated offsets (consumer) ",
            got.len(),
            sent.len(),
            before - offsets.len()
        );
    }
    for part in 0..2 {
        let s: Vec<_> = sent.iter().filter(|r| r.partition == Some(part)).collect();
        let g: Vec<_> = got.iter().filter(|r| r.partition == part).collect();
        assert_eq!(s.len(), g.len());
        for (s, g) in s.iter().zip(g) {
            assert_eq!(s.key, g.key, "codec {codec}: key");
            assert_eq!(s.value, g.value, "codec {codec}: value");
            assert_eq!(s.headers, g.headers, "codec {codec}: headers");
            assert_eq!(s.timestamp, Some(g.timestamp), "codec {codec}: timestamp");
        }
    }
}

#[tokio::test]
async fn uncompressed_batches_round_trip() {
    round_trip("none").await;
}

#[tokio::test]
async fn gzip_batches_round_trip() {
    round_trip("gzip").await;
}

#[tokio::test]
async fn snappy_batches_round_trip() {
    round_trip("snappy").await;
}

#[tokio::test]
async fn lz4_batches_round_trip() {
    round_trip("lz4").await;
}

#[tokio::test]
async fn zstd_batches_round_trip() {
    round_trip("zstd").await;
}
