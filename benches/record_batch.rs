//! Encode and decode throughput of the v2 record batch codec, per compression codec.
//!
//! Each benchmark works on one batch of roughly 256 KiB of records (2,560 records of 100 B, or
//! 256 of 1 KiB); throughput is the uncompressed encoded batch size. Settings are modest so the
//! whole suite runs in about a minute; `-- --quick` is faster still.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use onceflow::protocol::records::{
    decode_batches, BatchBuilder, Compression, Header, ProducerFields,
};

const BATCH_BYTES: usize = 256 * 1024;

/// Semi-realistic JSON-ish values: repetitive structure with varying numbers, so codecs have
/// something to find but cannot collapse the data entirely.
fn make_value(len: usize, seed: &mut u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 64);
    while v.len() < len {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        v.extend_from_slice(
            format!(
                "{{\"id\":{},\"user\":\"u{}\",\"amount\":{}.{:02},\"ok\":true}}",
                *seed % 1_000_000,
                *seed % 5000,
                *seed % 10_000,
                *seed % 100
            )
            .as_bytes(),
        );
    }
    v.truncate(len);
    v
}

struct Input {
    keys: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
    headers: Vec<Header>,
}

fn make_input(record_size: usize) -> Input {
    let n = BATCH_BYTES / record_size;
    let mut seed = 0x9E37_79B9_7F4A_7C15;
    Input {
        keys: (0..n)
            .map(|i| format!("key-{:06}", i % 1000).into_bytes())
            .collect(),
        values: (0..n).map(|_| make_value(record_size, &mut seed)).collect(),
        headers: vec![Header::new("source", Some("bench"))],
    }
}

fn encode(input: &Input, codec: Compression) -> Bytes {
    let mut b = BatchBuilder::with_capacity(codec, BATCH_BYTES + BATCH_BYTES / 4);
    for (i, (k, v)) in input.keys.iter().zip(&input.values).enumerate() {
        let appended = b.try_append(
            1_700_000_000_000 + i as i64,
            Some(k),
            Some(v),
            &input.headers,
            usize::MAX,
        );
        assert!(appended);
    }
    let producer = ProducerFields {
        producer_id: 1,
        producer_epoch: 0,
        base_sequence: 0,
        transactional: false,
    };
    b.build(producer).expect("build")
}

fn decode(batch: &Bytes) -> usize {
    let mut n = 0;
    for b in decode_batches(batch.clone()) {
        let records = b.expect("batch").records().expect("records");
        n += records.len();
        black_box(records);
    }
    n
}

fn bench(c: &mut Criterion) {
    for record_size in [100usize, 1024] {
        let input = make_input(record_size);
        let uncompressed_len = encode(&input, Compression::None).len() as u64;
        let label = format!("{record_size}B");

        let mut group = c.benchmark_group(format!("encode/{label}"));
        group.throughput(Throughput::Bytes(uncompressed_len));
        for codec in Compression::ALL {
            group.bench_with_input(BenchmarkId::from_parameter(codec), &codec, |b, &codec| {
                b.iter(|| encode(black_box(&input), codec))
            });
        }
        group.finish();

        let mut group = c.benchmark_group(format!("decode/{label}"));
        group.throughput(Throughput::Bytes(uncompressed_len));
        for codec in Compression::ALL {
            let batch = encode(&input, codec);
            eprintln!(
                "{label} {codec}: {} records, {} -> {} bytes ({:.1}%)",
                input.values.len(),
                uncompressed_len,
                batch.len(),
                100.0 * batch.len() as f64 / uncompressed_len as f64
            );
            assert_eq!(decode(&batch), input.values.len());
            group.bench_with_input(BenchmarkId::from_parameter(codec), &batch, |b, batch| {
                b.iter(|| decode(black_box(batch)))
            });
        }
        group.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench
}
criterion_main!(benches);
