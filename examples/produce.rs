//! Producing with delivery futures: `send` queues a record and returns a future that resolves
//! to where the broker wrote it (partition, offset), or to the error that failed it for good.
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start        # a local Kafka at 127.0.0.1:9092
//! cargo run --example produce                  # ONCEFLOW_BROKER=host:port for another broker
//! ```
//!
//! Writes 10 keyed records to a new topic `example-produce-…` (created on first use by the
//! broker's auto.create.topics.enable), prints where each landed and exits; non-zero on failure.
//! docs/guide/client.md "Using the library" shows the core of it.

use onceflow::client::{Producer, ProducerConfig, ProducerRecord};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The broker: ONCEFLOW_BROKER, or the one `protocol-tests/kafka-broker.sh start` runs.
fn broker() -> String {
    std::env::var("ONCEFLOW_BROKER").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// A name no earlier run used, so a run never reads an older run's records.
fn unique(prefix: &str) -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{prefix}-{}-{}", std::process::id(), ms % 1_000_000_000)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let broker = broker();
    let topic = unique("example-produce");
    let producer = Producer::new(ProducerConfig::from_properties([
        ("bootstrap.servers", broker.as_str()),
        ("linger.ms", "5"),
    ])?)
    .await?;
    // send() returns once the record is queued; its future resolves when the broker has it.
    // Queue first, await later: the records share batches and requests.
    let mut deliveries = Vec::new();
    for i in 0..10 {
        let record = ProducerRecord::new(topic.as_str(), format!("ride {i}"))
            .with_key(format!("driver-{}", i % 3))
            .with_header("source", Some("example"));
        deliveries.push(producer.send(record).await?);
    }
    for delivery in deliveries {
        let meta = delivery.await?; // Err: the record failed for good (after retries)
        println!(
            "written to {}-{} at offset {}",
            meta.topic, meta.partition, meta.offset
        );
    }
    producer.flush().await?; // nothing is left buffered (here: nothing was)
    println!("produce: 10 records written to {topic}");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An example that hangs is a failed example.
    tokio::time::timeout(Duration::from_secs(60), run()).await?
}
