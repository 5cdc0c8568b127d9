//! Admin calls: create a topic with configs, add partitions, list topics, describe a topic's
//! configs, delete the topic.
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start        # a local Kafka at 127.0.0.1:9092
//! cargo run --example admin                    # ONCEFLOW_BROKER=host:port for another broker
//! ```
//!
//! Works on a new topic `example-admin-…` and deletes it at the end; exit 1 if the broker does
//! not show what was asked. docs/guide/client.md "Using the library" shows the core of it.

use onceflow::client::admin::NewTopic;
use onceflow::client::{Admin, ClientConfig};
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
    let topic = unique("example-admin");
    let mut client = ClientConfig::default();
    client.set("bootstrap.servers", &broker())?;
    let admin = Admin::new(client).await?;
    let new_topic = NewTopic::new(topic.as_str(), 2).with_config("retention.ms", "3600000");
    admin.create_topics(&[new_topic]).await?; // returns once the topic's metadata is visible
    admin.create_partitions(&topic, 3).await?; // 2 → 3 partitions
    let topics = admin.list_topics().await?; // name → partition count
    println!("{topic}: {:?} partitions", topics.get(&topic));
    let configs = admin.describe_topic_configs(&topic).await?;
    for entry in configs.iter().filter(|e| !e.is_default) {
        println!("{topic}: {} = {:?}", entry.name, entry.value);
    }
    admin.delete_topics(&[topic.as_str()]).await?;

    let retention = configs.iter().find(|e| e.name == "retention.ms");
    if retention.and_then(|e| e.value.as_deref()) != Some("3600000") {
        return Err(format!("retention.ms of {topic} is {retention:?}, expected 3600000").into());
    }
    if topics.get(&topic) != Some(&3) {
        return Err(format!(
            "{topic} has {:?} partitions, expected 3",
            topics.get(&topic)
        )
        .into());
    }
    println!("admin: created, extended, described and deleted {topic}");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An example that hangs is a failed example.
    tokio::time::timeout(Duration::from_secs(60), run()).await?
}
