//! Tracing: onceflow reports what it does (connections, retries, epoch bumps, rebalances,
//! transactions) through the `tracing` crate, so the application's subscriber decides what is
//! shown and where; here `tracing-subscriber` with a filter from ONCEFLOW_LOG. The clients'
//! counters (`Producer::metrics`, `Consumer::metrics`) are read directly.
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start        # a local Kafka at 127.0.0.1:9092
//! ONCEFLOW_LOG=onceflow=debug cargo run --example tracing_and_metrics   # default: onceflow=info
//! ```
//!
//! Writes and reads back 100 records on a new topic with the logs on stderr, then prints the
//! producer's and consumer's counters. Exit 1 on failure. ONCEFLOW_BROKER=host:port for
//! another broker. docs/guide/client.md "Using the library" shows the core of it.

use onceflow::client::{
    Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};

use std::io::IsTerminal;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tracing_subscriber::EnvFilter;

/// The broker: ONCEFLOW_BROKER, or the one `protocol-tests/kafka-broker.sh start` runs.
fn broker() -> String {
    std::env::var("ONCEFLOW_BROKER").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// A name no earlier run used.
fn unique(prefix: &str) -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{prefix}-{}-{}", std::process::id(), ms % 1_000_000_000)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Any tracing subscriber works; this one prints to stderr, filtered by ONCEFLOW_LOG
    // (e.g. ONCEFLOW_LOG=onceflow=debug, or onceflow::client::producer=trace).
    let filter = EnvFilter::try_from_env("ONCEFLOW_LOG")
        .unwrap_or_else(|_| EnvFilter::new("onceflow=info,tracing_and_metrics=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal()) // no colour codes in files and pipes
        .init();
    // An example that hangs is a failed example.
    tokio::time::timeout(Duration::from_secs(60), run()).await?
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let broker = broker();
    let topic = unique("example-tracing");
    tracing::info!(%topic, "example starts"); // the application's own events, same subscriber
    let producer = Producer::new(ProducerConfig::from_properties([(
        "bootstrap.servers",
        broker.as_str(),
    )])?)
    .await?;
    for i in 0..100 {
        producer
            .send(ProducerRecord::new(topic.as_str(), format!("ride {i}")))
            .await?;
    }
    producer.flush().await?;
    let mut consumer = Consumer::new(ConsumerConfig::from_properties([
        ("bootstrap.servers", broker.as_str()),
        ("auto.offset.reset", "earliest"),
    ])?)
    .await?;
    consumer
        .assign([TopicPartition::new(topic.as_str(), 0)])
        .await?;
    let mut read = 0;
    while read < 100 {
        read += consumer.poll(Duration::from_millis(500)).await?.len();
    }
    // Counters since each client was created: for dashboards and health checks.
    let p = producer.metrics();
    println!(
        "producer: {} batches acknowledged, {} retried, {} failed, {} epoch bumps",
        p.batches_acknowledged, p.batches_retried, p.batches_failed, p.epoch_bumps
    );
    let c = consumer.metrics();
    println!(
        "consumer: {} full and {} incremental fetch requests",
        c.fetch_requests_full, c.fetch_requests_incremental
    );
    if p.batches_acknowledged == 0 || c.fetch_requests_full == 0 {
        return Err("the counters did not count".into());
    }
    println!("tracing_and_metrics: 100 records written and read on {topic}");
    Ok(())
}
