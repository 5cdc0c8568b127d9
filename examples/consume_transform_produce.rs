//! Consume-transform-produce, exactly once: read rides with a consumer group, clean them, and
//! write the result and the consumed offsets in one transaction (KIP-447).
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start        # a local Kafka at 127.0.0.1:9092
//! cargo run --example consume_transform_produce -- \
//!     --bootstrap 127.0.0.1:9092 --input rides --output clean-rides --group cleaners --instance 0
//! ```
//!
//! Run several instances with different `--instance` numbers; kill any of them (even with
//! kill -9) and start it again: the output topic, read with isolation.level=read_committed, holds
//! every input record exactly once. Each instance has its own transactional id
//! (`<group>-<instance>`); a restarted instance fences its predecessor, and the group metadata
//! sent with the offsets fences a zombie from an older generation. With `--group-protocol
//! consumer` the members use the KIP-848 protocol (Kafka 4.0+), whose member epoch fences the
//! same way. A fenced instance stops with exit status 3 (another instance took over its
//! transactional id or its membership): a supervisor starts it again.
//!
//! Records are only consumed between transactions (poll, then one transaction for what it
//! returned), so a rebalance — which runs inside poll — never happens while a transaction is
//! open. If the transaction fails, it is aborted and the consumer rewinds to the committed
//! offsets, so the same records are processed again.

use bytes::Bytes;
use futures::future::BoxFuture;
use onceflow::client::group::{GroupConsumer, RebalanceListener};
use onceflow::client::{
    ConsumerConfig, Error, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct Args {
    bootstrap: String,
    input: String,
    output: String,
    group: String,
    instance: String,
    /// Without transactions: write, then commit offsets (the inverse of exactly once: a crash
    /// between the two duplicates records). Used by the tests to show they can fail.
    at_least_once: bool,
    /// `--group-protocol classic|consumer` (default classic): the group protocol (KIP-848).
    group_protocol: String,
}

fn args() -> Result<Args, String> {
    let mut m: BTreeMap<String, String> = BTreeMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let key = k
            .strip_prefix("--")
            .ok_or(format!("unexpected argument '{k}'"))?;
        let v = it.next().ok_or(format!("--{key} needs a value"))?;
        m.insert(key.to_owned(), v);
    }
    let mut take = |k: &str| m.remove(k).ok_or(format!("--{k} is required"));
    Ok(Args {
        bootstrap: take("bootstrap").unwrap_or_else(|_| "127.0.0.1:9092".into()),
        input: take("input")?,
        output: take("output")?,
        group: take("group")?,
        instance: take("instance")?,
        at_least_once: take("mode").is_ok_and(|m| m == "at-least-once"),
        group_protocol: take("group-protocol").unwrap_or_else(|_| "classic".into()),
    })
}

/// Notes revocations, so a transaction that spans one would be aborted.
struct Revocations(AtomicBool);

impl RebalanceListener for Revocations {
    fn on_assigned<'a>(&'a self, _: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
    fn on_revoked<'a>(&'a self, _: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
        Box::pin(async { self.0.store(true, Ordering::SeqCst) })
    }
    fn on_lost<'a>(&'a self, _: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
        Box::pin(async { self.0.store(true, Ordering::SeqCst) })
    }
}

/// The transformation: a cleaned ride (here: trimmed and upper-cased).
fn transform(value: &[u8]) -> Bytes {
    Bytes::from(String::from_utf8_lossy(value).trim().to_uppercase())
}

async fn run(a: Args) -> Result<(), Error> {
    // The instance in the client id: a described group shows which instance owns what.
    let client_id = format!("{}-{}", a.group, a.instance);
    let consumer_config = ConsumerConfig::from_properties([
        ("bootstrap.servers", a.bootstrap.as_str()),
        ("client.id", client_id.as_str()),
        ("group.id", a.group.as_str()),
        ("group.protocol", a.group_protocol.as_str()),
        ("isolation.level", "read_committed"),
        ("enable.auto.commit", "false"),
        ("auto.offset.reset", "earliest"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
        ("max.poll.records", "200"),
    ])?;
    let transactional_id = format!("{}-{}", a.group, a.instance);
    let producer_config = ProducerConfig::from_properties([
        ("bootstrap.servers", a.bootstrap.as_str()),
        ("transactional.id", transactional_id.as_str()),
        ("transaction.timeout.ms", "10000"),
        ("linger.ms", "5"),
    ])?;
    let mut consumer = GroupConsumer::new(consumer_config).await?;
    let revoked = Arc::new(Revocations(AtomicBool::new(false)));
    consumer.set_listener(revoked.clone());
    consumer.subscribe(&[a.input.as_str()]);
    if a.at_least_once {
        return at_least_once(a, consumer).await;
    }
    let producer = Producer::new(producer_config).await?;
    producer.init_transactions().await?;
    loop {
        revoked.0.store(false, Ordering::SeqCst);
        let records = consumer.poll(Duration::from_millis(200)).await?;
        if records.is_empty() {
            continue;
        }
        let attempt = async {
            producer.begin_transaction()?;
            let mut next: BTreeMap<TopicPartition, i64> = BTreeMap::new();
            for r in &records {
                let mut out = ProducerRecord::new(
                    a.output.clone(),
                    transform(r.value.as_deref().unwrap_or_default()),
                );
                out.key = r.key.clone();
                producer.send(out).await?;
                next.insert(
                    TopicPartition::new(r.topic.clone(), r.partition),
                    r.offset + 1,
                );
            }
            if revoked.0.load(Ordering::SeqCst) {
                return Err(Error::TransactionAbortable(
                    "partitions were revoked mid-transaction".into(),
                ));
            }
            let offsets: Vec<(TopicPartition, i64)> = next.into_iter().collect();
            producer
                .send_offsets_to_transaction(&offsets, &consumer.group_metadata())
                .await?;
            producer.commit_transaction().await
        }
        .await;
        if let Err(e) = attempt {
            if matches!(e, Error::Fenced(_)) {
                return Err(e); // another instance took over: stop
            }
            eprintln!(
                "consume_transform_produce: transaction failed ({e}); aborting and rewinding"
            );
            producer.abort_transaction().await?;
            consumer.rewind_to_committed().await?;
        }
    }
}

/// The same pipeline without transactions: records are written, then offsets committed every
/// 20 batches. A crash in between re-processes records: duplicates in the output.
async fn at_least_once(a: Args, mut consumer: GroupConsumer) -> Result<(), Error> {
    let producer = Producer::new(ProducerConfig::from_properties([
        ("bootstrap.servers", a.bootstrap.as_str()),
        ("linger.ms", "5"),
    ])?)
    .await?;
    let mut batches = 0u64;
    loop {
        let records = consumer.poll(Duration::from_millis(200)).await?;
        for r in &records {
            let mut out = ProducerRecord::new(
                a.output.clone(),
                transform(r.value.as_deref().unwrap_or_default()),
            );
            out.key = r.key.clone();
            producer.send(out).await?;
        }
        producer.flush().await?;
        batches += 1;
        if batches.is_multiple_of(20) {
            let _ = consumer.commit_positions().await;
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // ONCEFLOW_LOG=onceflow=debug shows the client's requests, retries and coordinator moves.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ONCEFLOW_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("consume_transform_produce: {e}");
            return ExitCode::from(2);
        }
    };
    match run(a).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ Error::Fenced(_)) => {
            eprintln!("consume_transform_produce: fenced, stopping: {e}");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("consume_transform_produce: error: {e}");
            ExitCode::FAILURE
        }
    }
}
