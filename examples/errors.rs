//! Errors: every `onceflow::client::Error` has a class saying what to do about it —
//! retry (`Retriable`, `RefreshAndRetry`: the client has already retried these within its
//! timeouts; the application may try again later), abort the transaction and go on
//! (`Abortable`), or stop (`Fatal`: a bad setting, a fenced producer, a missing permission).
//!
//! ```sh
//! protocol-tests/kafka-broker.sh start        # a local Kafka at 127.0.0.1:9092
//! cargo run --example errors                   # ONCEFLOW_BROKER=host:port for another broker
//! ```
//!
//! Provokes one error of each kind against the broker and checks its class: an unreachable
//! broker, a transaction whose record the broker refuses (aborted, then the producer goes on
//! with the next transaction), a fenced producer, a misspelled setting. Exit 1 when a class is
//! not the expected one. docs/guide/client.md "Using the library" shows the core of it.

use onceflow::client::admin::NewTopic;
use onceflow::client::{
    Admin, ClientConfig, Error, ErrorClass, Producer, ProducerConfig, ProducerRecord,
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

/// What an application does about an error.
fn what_to_do(e: &Error) -> &'static str {
    match e.class() {
        // The client retried within its timeouts already (delivery.timeout.ms,
        // default.api.timeout.ms); trying again later may work.
        ErrorClass::Retriable | ErrorClass::RefreshAndRetry => "retry later",
        // The transaction cannot commit; abort_transaction() and the producer goes on.
        ErrorClass::Abortable => "abort the transaction",
        // Retrying cannot help: fix the setting or permission, or stop this instance.
        _ => "stop",
    }
}

fn expect(what: &str, e: &Error, class: ErrorClass) -> Result<(), Box<dyn std::error::Error>> {
    println!("{what}: {:?}, {}: {e}", e.class(), what_to_do(e));
    if e.class() != class {
        return Err(format!("{what}: expected {class:?}, got {:?} ({e})", e.class()).into());
    }
    Ok(())
}

/// Commits the open transaction; `Ok(false)` when it had to be aborted (redo its work), `Err`
/// when the producer cannot go on (fenced, misconfigured, not authorized).
async fn commit_or_abort(producer: &Producer) -> Result<bool, Error> {
    match producer.commit_transaction().await {
        Ok(()) => Ok(true),
        Err(e) if e.class() == ErrorClass::Abortable => {
            println!("commit refused ({:?}): {e}", e.class());
            producer.abort_transaction().await?; // fails only with a fatal error
            Ok(false)
        }
        Err(e) => Err(e), // fatal
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let broker = broker();
    // Nothing listens on port 1: connecting is retried for default.api.timeout.ms, then fails;
    // the class says it is worth retrying later.
    let unreachable = ProducerConfig::from_properties([
        ("bootstrap.servers", "127.0.0.1:1"),
        ("default.api.timeout.ms", "1000"),
    ])?;
    match Producer::new(unreachable).await {
        Err(e) => expect("unreachable broker", &e, ErrorClass::RefreshAndRetry)?,
        Ok(_) => return Err("a producer connected to 127.0.0.1:1".into()),
    }

    // A topic that takes records of at most 1 KiB; the producer allows larger requests, so
    // the broker refuses the record, and with it the transaction.
    let topic = unique("example-errors");
    let mut client = ClientConfig::default();
    client.set("bootstrap.servers", &broker)?;
    let small = NewTopic::new(topic.as_str(), 1).with_config("max.message.bytes", "1024");
    Admin::new(client).await?.create_topics(&[small]).await?;
    let transactional_id = unique("example-errors");
    let config = ProducerConfig::from_properties([
        ("bootstrap.servers", broker.as_str()),
        ("transactional.id", transactional_id.as_str()),
    ])?;
    let producer = Producer::new(config.clone()).await?;
    producer.init_transactions().await?;

    producer.begin_transaction()?;
    producer
        .send(ProducerRecord::new(topic.as_str(), vec![0u8; 10_000]))
        .await?;
    match commit_or_abort(&producer).await {
        Ok(false) => println!("aborted; the producer goes on"),
        Ok(true) => return Err("the broker took a 10 kB record into a 1 KiB topic".into()),
        Err(e) => return Err(e.into()),
    }
    producer.begin_transaction()?;
    producer
        .send(ProducerRecord::new(topic.as_str(), "small"))
        .await?;
    if !commit_or_abort(&producer).await? {
        return Err("the next transaction did not commit".into());
    }
    println!("the next transaction committed");

    // A second producer with the same transactional id fences the first: fatal for the first
    // (at transaction.version 2 the commit is refused as abortable first — the epoch may have
    // been bumped by the coordinator's timeout — and the abort finds out it was fenced).
    let successor = Producer::new(config).await?;
    successor.init_transactions().await?;
    producer.begin_transaction()?;
    producer
        .send(ProducerRecord::new(topic.as_str(), "zombie"))
        .await?;
    match commit_or_abort(&producer).await {
        Err(e) => expect("fenced by a newer instance", &e, ErrorClass::Fatal)?,
        Ok(committed) => {
            return Err(format!("a fenced producer ended its transaction ({committed})").into())
        }
    }

    // A misspelled setting: a configuration error, fatal.
    match ProducerConfig::from_properties([("lingr.ms", "5")]) {
        Err(e) => expect("misspelled setting", &Error::from(e), ErrorClass::Fatal)?,
        Ok(_) => return Err("lingr.ms was accepted".into()),
    }
    println!("errors: every error had the expected class");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // An example that hangs is a failed example.
    tokio::time::timeout(Duration::from_secs(60), run()).await?
}
