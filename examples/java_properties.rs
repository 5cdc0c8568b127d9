//! Configuration from Java property maps: the producer and consumer take the Java client's
//! property names (`ProducerConfig::from_properties`, `ConsumerConfig::from_properties`), so
//! an existing `producer.properties` works as it is; librdkafka's names are accepted as
//! aliases. An unknown name or a bad value is an error that names it.
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start        # a local Kafka at 127.0.0.1:9092
//! cargo run --example java_properties [-- producer.properties]
//! ```
//!
//! Reads the properties from the file given (default: a small built-in one pointing at
//! ONCEFLOW_BROKER, or 127.0.0.1:9092), prints the typed settings, shows an alias and an
//! error, then writes a record with that producer and reads it back with a consumer configured
//! from a map. Exit 1 on failure. docs/guide/client.md "Using the library" shows the core of it.

use onceflow::client::{
    Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use std::collections::HashMap;
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
    let text = match std::env::args().nth(1) {
        Some(file) => std::fs::read_to_string(file)?,
        None => format!(
            "# producer.properties\nbootstrap.servers={broker}\nacks=all\nlinger.ms=10\n\
             compression.type=lz4\nkey.serializer=org.apache.kafka.common.serialization.StringSerializer\n"
        ),
    };
    // key=value lines; comments and blank lines skipped (enough for most files, not the
    // whole .properties syntax: no continuation lines or escapes).
    let properties: Vec<(&str, &str)> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with('!'))
        .filter_map(|line| line.split_once('='))
        .collect();
    let producer_config = ProducerConfig::from_properties(properties)?; // serializers ignored
    println!(
        "acks {:?}, linger {:?}",
        producer_config.acks, producer_config.linger
    );

    // librdkafka's spelling of linger.ms; a misspelled name is refused, with its name.
    let alias = ProducerConfig::from_properties([("queue.buffering.max.ms", "20")])?;
    assert_eq!(alias.linger, Duration::from_millis(20));
    let unknown = ProducerConfig::from_properties([("lingr.ms", "20")]).unwrap_err();
    println!("refused: {unknown}");

    // Any (name, value) pairs will do, e.g. a HashMap built from your own settings.
    let mut consumer_properties = HashMap::new();
    consumer_properties.insert("bootstrap.servers", broker.as_str());
    consumer_properties.insert("isolation.level", "read_committed");
    consumer_properties.insert("auto.offset.reset", "earliest");
    let consumer_config = ConsumerConfig::from_properties(&consumer_properties)?;

    let topic = unique("example-properties");
    let producer = Producer::new(producer_config).await?;
    producer
        .send(ProducerRecord::new(topic.as_str(), "configured"))
        .await?
        .await?;
    let mut consumer = Consumer::new(consumer_config).await?;
    consumer
        .assign([TopicPartition::new(topic.as_str(), 0)])
        .await?;
    let record = consumer.recv().await?;
    if record.value.as_deref() != Some(b"configured".as_slice()) {
        return Err(format!("read back {record:?}").into());
    }
    println!("java_properties: a record written and read back with the configured clients");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An example that hangs is a failed example.
    tokio::time::timeout(Duration::from_secs(60), run()).await?
}
