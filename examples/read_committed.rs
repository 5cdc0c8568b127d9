//! read_committed consuming with manual assignment: first with `poll` until the end of the
//! partition, then the same records as an async `Stream`. Records of aborted transactions are
//! never returned, nor are the transaction markers; reading stops at the last stable offset
//! (LSO), before any transaction still open.
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start        # a local Kafka at 127.0.0.1:9092
//! cargo run --example read_committed           # ONCEFLOW_BROKER=host:port for another broker
//! ```
//!
//! Writes an aborted transaction, then a committed one of 3 records, to a new topic; reads it
//! both ways and checks each read returns exactly the 3 committed records (exit 1 otherwise).
//! docs/guide/client.md "Using the library" shows the core of it.

use futures::{StreamExt, TryStreamExt};
use onceflow::client::{
    Consumer, ConsumerConfig, ConsumerRecord, Offset, Producer, ProducerConfig, ProducerRecord,
    TopicPartition,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// An aborted transaction, then a committed one: a reader that returned aborted records would
/// return "aborted" first.
async fn write_transactions(broker: &str, topic: &str) -> Result<(), Box<dyn std::error::Error>> {
    let transactional_id = unique("example-read-committed");
    let producer = Producer::new(ProducerConfig::from_properties([
        ("bootstrap.servers", broker),
        ("transactional.id", transactional_id.as_str()),
    ])?)
    .await?;
    producer.init_transactions().await?;
    producer.begin_transaction()?;
    producer.send(ProducerRecord::new(topic, "aborted")).await?;
    producer.flush().await?; // written to the log, then aborted
    producer.abort_transaction().await?;
    producer.begin_transaction()?;
    for i in 0..3 {
        producer
            .send(ProducerRecord::new(topic, format!("committed {i}")))
            .await?;
    }
    producer.commit_transaction().await?;
    Ok(())
}

fn values(records: &[ConsumerRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let broker = broker();
    let topic = unique("example-read-committed");
    write_transactions(&broker, &topic).await?;

    let config = ConsumerConfig::from_properties([
        ("bootstrap.servers", broker.as_str()),
        ("isolation.level", "read_committed"),
        ("auto.offset.reset", "earliest"),
    ])?;
    // Manual assignment: no group; the application chooses partitions and positions.
    let mut consumer = Consumer::new(config.clone()).await?;
    let tp = TopicPartition::new(topic.as_str(), 0);
    consumer.assign([tp.clone()]).await?;
    consumer.seek(&tp, Offset::Beginning)?;
    let mut polled = Vec::new();
    while !consumer.at_end() {
        // at_end: every assigned partition has reached its LSO
        polled.extend(consumer.poll(Duration::from_millis(500)).await?);
    }

    // The same records as a futures::Stream of Result<ConsumerRecord>.
    let mut consumer = Consumer::new(config).await?;
    consumer.assign_topics(&[topic.as_str()]).await?;
    let streamed: Vec<ConsumerRecord> = consumer.into_stream().take(3).try_collect().await?;

    let want = ["committed 0", "committed 1", "committed 2"];
    for (how, records) in [("poll", &polled), ("stream", &streamed)] {
        if values(records) != want {
            return Err(format!("{how} read {:?}, expected {want:?}", values(records)).into());
        }
    }
    println!("read_committed: poll and stream both read {want:?} (the aborted record skipped)");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An example that hangs is a failed example.
    tokio::time::timeout(Duration::from_secs(60), run()).await?
}
