//! Idempotent and transactional producing. Idempotence is on by default: retries never
//! duplicate or reorder a partition's records. A `transactional.id` adds transactions: a
//! transaction's records become visible to read_committed consumers together when it commits,
//! and never when it aborts.
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start        # a local Kafka at 127.0.0.1:9092
//! cargo run --example idempotent_and_transactional    # ONCEFLOW_BROKER=host:port for another
//! ```
//!
//! Writes one idempotent record, a committed transaction of 3 records and an aborted one to a
//! new topic, then reads the topic read_committed and checks that exactly the 4 committed
//! records are there (exit 1 otherwise). docs/guide/client.md "Using the library" shows the core of it.

use onceflow::client::{Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord};
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

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let broker = broker();
    let topic = unique("example-txn");
    let transactional_id = unique("example-txn-producer");
    // Idempotent (the default): a producer id and per-partition sequence numbers.
    let idempotent = Producer::new(ProducerConfig::from_properties([(
        "bootstrap.servers",
        broker.as_str(),
    )])?)
    .await?;
    idempotent
        .send(ProducerRecord::new(topic.as_str(), "idempotent"))
        .await?
        .await?;

    // Transactional: one transactional id per producer instance, stable across restarts.
    let producer = Producer::new(ProducerConfig::from_properties([
        ("bootstrap.servers", broker.as_str()),
        ("transactional.id", transactional_id.as_str()),
    ])?)
    .await?;
    producer.init_transactions().await?; // fences an older instance, aborts what it left open
    producer.begin_transaction()?;
    for i in 0..3 {
        producer
            .send(ProducerRecord::new(
                topic.as_str(),
                format!("committed {i}"),
            ))
            .await?;
    }
    producer.commit_transaction().await?; // flushes, then commits: all three or none

    producer.begin_transaction()?;
    producer
        .send(ProducerRecord::new(topic.as_str(), "aborted"))
        .await?;
    producer.abort_transaction().await?; // read_committed consumers never see it

    // Check: read the topic read_committed up to its end (the last stable offset).
    let mut consumer = Consumer::new(ConsumerConfig::from_properties([
        ("bootstrap.servers", broker.as_str()),
        ("isolation.level", "read_committed"),
        ("auto.offset.reset", "earliest"),
    ])?)
    .await?;
    consumer.assign_topics(&[topic.as_str()]).await?;
    let mut values = Vec::new();
    while !consumer.at_end() {
        for r in consumer.poll(Duration::from_millis(500)).await? {
            values
                .push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
        }
    }
    let want = ["idempotent", "committed 0", "committed 1", "committed 2"];
    if values != want {
        return Err(format!("read_committed read {values:?}, expected {want:?}").into());
    }
    println!("idempotent_and_transactional: read_committed reads {values:?}");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An example that hangs is a failed example.
    tokio::time::timeout(Duration::from_secs(60), run()).await?
}
