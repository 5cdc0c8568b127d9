//! A consumer group with manual commits: members share the topic's partitions (the group
//! coordinator assigns them), each commits the offsets of what it processed, and a member that
//! starts later (or takes over a partition) continues from the committed offsets.
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start        # a local Kafka at 127.0.0.1:9092
//! cargo run --example group_commit             # ONCEFLOW_BROKER=host:port for another broker
//! ```
//!
//! Writes 10 records to a new 2-partition topic, reads them as the only member of a new group,
//! committing after each poll, leaves the group, then checks the group's committed offsets
//! cover all 10 records (exit 1 otherwise). docs/guide/client.md "Using the library" shows the core of it.

use onceflow::client::admin::NewTopic;
use onceflow::client::group::GroupConsumer;
use onceflow::client::{
    Admin, ClientConfig, ConsumerConfig, ConsumerRecord, Producer, ProducerConfig, ProducerRecord,
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

fn process(r: &ConsumerRecord) {
    println!("{}-{}@{}", r.topic, r.partition, r.offset);
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let broker = broker();
    let topic = unique("example-group");
    let group = unique("example-group");
    let mut client = ClientConfig::default();
    client.set("bootstrap.servers", &broker)?;
    let admin = Admin::new(client).await?;
    admin
        .create_topics(&[NewTopic::new(topic.as_str(), 2)])
        .await?;
    let producer = Producer::new(ProducerConfig::from_properties([(
        "bootstrap.servers",
        broker.as_str(),
    )])?)
    .await?;
    for i in 0..10 {
        producer
            .send(ProducerRecord::new(topic.as_str(), format!("ride {i}")))
            .await?;
    }
    producer.flush().await?;

    let mut consumer = GroupConsumer::new(ConsumerConfig::from_properties([
        ("bootstrap.servers", broker.as_str()),
        ("group.id", group.as_str()),
        ("enable.auto.commit", "false"),
        ("auto.offset.reset", "earliest"), // where the group has no committed offset yet
    ])?)
    .await?;
    consumer.subscribe(&[topic.as_str()]);
    let mut processed = 0;
    while processed < 10 {
        let records = consumer.poll(Duration::from_millis(500)).await?; // joins, rebalances
        records.iter().for_each(process);
        processed += records.len();
        consumer.commit_positions().await?; // the next offset of every owned partition
    }
    consumer.close().await?; // leaves the group: its partitions go to the other members

    let partitions = [0, 1].map(|p| TopicPartition::new(topic.as_str(), p));
    let committed: i64 = admin
        .committed_offsets(&group, &partitions)
        .await?
        .values()
        .sum();
    if committed != 10 {
        return Err(
            format!("the group committed offsets summing to {committed}, expected 10").into(),
        );
    }
    println!("group_commit: group {group} committed all 10 records of {topic}");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An example that hangs is a failed example.
    tokio::time::timeout(Duration::from_secs(60), run()).await?
}
