//! The two-phase commit: one process writes a transaction and *prepares* it (flushes it and
//! gets its committable) without committing, saves the committable and exits; another process
//! commits it from the saved committable, without InitProducerId (which would abort it). A
//! resume that runs twice, or after the commit already happened, writes nothing twice.
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start        # a local Kafka at 127.0.0.1:9092
//! cargo run --example two_phase_commit -- prepare /tmp/txn.json [TOPIC]
//! cargo run --example two_phase_commit -- resume /tmp/txn.json
//! ```
//!
//! `prepare FILE [TOPIC]` writes 3 records to TOPIC (default: a new `example-2pc-…` topic) in a
//! transaction, writes its committable to FILE as JSON and exits with the transaction open
//! (read_committed readers of TOPIC wait at it: the broker aborts it after
//! transaction.timeout.ms, 60 s here, if nobody commits it). `resume FILE` commits it and prints
//! `committed` (or `already committed`); exit 1 if it could not be committed.
//! ONCEFLOW_BROKER=host:port for another broker. docs/guide/client.md "Using the library" shows the core of it.

use onceflow::client::transactions::{
    resume_transaction, PreparedTransaction, ResumeOutcome, TxnEnd,
};
use onceflow::client::{ClientConfig, Cluster, Producer, ProducerConfig, ProducerRecord};
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

/// Phase one, in this process.
async fn prepare(file: &str, topic: &str) -> Result<(), Box<dyn std::error::Error>> {
    let broker = broker();
    let transactional_id = unique("example-2pc");
    let producer = Producer::new(ProducerConfig::from_properties([
        ("bootstrap.servers", broker.as_str()),
        ("transactional.id", transactional_id.as_str()),
        ("transaction.timeout.ms", "60000"), // how long the prepared transaction may wait
    ])?)
    .await?;
    producer.init_transactions().await?;
    producer.begin_transaction()?;
    for i in 0..3 {
        producer
            .send(ProducerRecord::new(topic, format!("prepared {i}")))
            .await?;
    }
    // Phase one: flush, and get what another process needs to finish the transaction.
    let prepared: PreparedTransaction = producer.prepare_commit().await?;
    // Save it durably before telling anyone it is prepared; then this process may exit.
    std::fs::write(file, serde_json::to_string(&prepared)?)?;
    println!("prepared {} in {file} ({topic})", prepared.transactional_id);
    Ok(())
}

/// Phase two, in any process.
async fn resume(file: &str) -> Result<(), Box<dyn std::error::Error>> {
    let prepared: PreparedTransaction = serde_json::from_str(&std::fs::read_to_string(file)?)?;
    let mut client = ClientConfig::default();
    client.set("bootstrap.servers", &broker())?;
    let cluster = Cluster::connect(client).await?;
    match resume_transaction(&cluster, &prepared, TxnEnd::Commit).await? {
        ResumeOutcome::Completed => println!("committed"),
        ResumeOutcome::AlreadyCommitted => println!("already committed (nothing written twice)"),
        other => return Err(format!("not committed: {other:?}").into()),
    }
    Ok(())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["prepare", file] => prepare(file, &unique("example-2pc")).await,
        ["prepare", file, topic] => prepare(file, topic).await,
        ["resume", file] => resume(file).await,
        _ => Err("usage: two_phase_commit prepare FILE [TOPIC] | resume FILE".into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An example that hangs is a failed example.
    tokio::time::timeout(Duration::from_secs(60), run()).await?
}
