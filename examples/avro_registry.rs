//! Avro records through a schema registry: values written with `AvroSerializer` (the schema
//! registered under `<topic>-value`, each value framed with its id) and read back with
//! `AvroDeserializer` (the writer's schema fetched by id), as serde types and as JSON.
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start          # a local Kafka at 127.0.0.1:9092
//! protocol-tests/schema-registry.sh start       # Apicurio Registry at 127.0.0.1:8081
//! cargo run --example avro_registry             # ONCEFLOW_BROKER / ONCEFLOW_SCHEMA_REGISTRY for others
//! ```
//!
//! Writes three rides to a new topic, reads them back and checks they are the rides written
//! (exit 1 otherwise). docs/guide/client.md "Using the library" shows the core of it.

use onceflow::client::TopicPartition;
use onceflow::client::{
    Consumer, ConsumerConfig, Offset, Producer, ProducerConfig, ProducerRecord,
};
use onceflow::schema::{AvroDeserializer, AvroSerializer, Part, RegistryConfig, SchemaRegistry};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The broker: ONCEFLOW_BROKER, or the one `protocol-tests/kafka-broker.sh start` runs.
fn broker() -> String {
    std::env::var("ONCEFLOW_BROKER").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// The registry: ONCEFLOW_SCHEMA_REGISTRY, or the one `protocol-tests/schema-registry.sh
/// start` runs (Apicurio Registry's Confluent-compatible API).
fn registry_url() -> String {
    std::env::var("ONCEFLOW_SCHEMA_REGISTRY")
        .unwrap_or_else(|_| "http://127.0.0.1:8081/apis/ccompat/v7".into())
}

/// A name no earlier run used.
fn unique(prefix: &str) -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{prefix}-{}-{}", std::process::id(), ms % 1_000_000_000)
}

const RIDE_SCHEMA: &str = r#"{"type":"record","name":"Ride","namespace":"nyc","fields":[
    {"name":"ride_id","type":"long"},
    {"name":"zone","type":["null","string"],"default":null},
    {"name":"fare","type":"double"}]}"#;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Ride {
    ride_id: i64,
    zone: Option<String>,
    fare: f64,
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (broker, topic) = (broker(), unique("example-avro"));
    let rides = vec![
        Ride {
            ride_id: 1,
            zone: Some("JFK".into()),
            fare: 52.5,
        },
        Ride {
            ride_id: 2,
            zone: None,
            fare: 7.25,
        },
        Ride {
            ride_id: 3,
            zone: Some("LGA".into()),
            fare: 31.0,
        },
    ];

    let url = registry_url();
    let config = RegistryConfig::from_properties([("schema.registry.url", url.as_str())])?;
    let registry = SchemaRegistry::new(config)?;
    // Registers RIDE_SCHEMA under "<topic>-value" once, then frames each value with its id.
    let avro = AvroSerializer::new(registry.clone(), RIDE_SCHEMA, Part::Value)?;
    let producer = Producer::new(ProducerConfig::from_properties([(
        "bootstrap.servers",
        broker.as_str(),
    )])?)
    .await?;
    for ride in &rides {
        let value = avro.serialize_ser(&topic, ride).await?;
        producer
            .send(ProducerRecord::new(topic.as_str(), value))
            .await?;
    }
    producer.flush().await?;

    let mut consumer = Consumer::new(ConsumerConfig::from_properties([(
        "bootstrap.servers",
        broker.as_str(),
    )])?)
    .await?;
    let tp = TopicPartition::new(topic.as_str(), 0);
    consumer.assign([tp.clone()]).await?;
    consumer.seek(&tp, Offset::Beginning)?;
    // The writer's schema comes from the registry by the id in each record (cached).
    let reader = AvroDeserializer::new(registry);
    let mut read = Vec::new();
    while read.len() < rides.len() {
        for record in consumer.poll(Duration::from_millis(500)).await? {
            let value = record.value.unwrap_or_default();
            let avro = reader.deserialize(&value).await?;
            // {"ride_id":1,"zone":{"string":"JFK"},"fare":52.5}: fields in the schema's order
            println!("{}", avro.to_json_string()?);
            read.push(avro.into_serde::<Ride>()?);
        }
    }

    if read != rides {
        return Err(format!("read {read:?}, expected {rides:?}").into());
    }
    println!(
        "avro_registry: {} rides written and read back through the registry",
        read.len()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An example that hangs is a failed example.
    tokio::time::timeout(Duration::from_secs(60), run()).await?
}
