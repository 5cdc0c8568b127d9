//! Shared helpers: the broker address, unique topics, clients; and, in their own modules,
//! private brokers (`broker`), the `onceflow` binary (`cli`), consumer-group members (`group`),
//! the Java peer (`java`), the fault proxy (`proxy`), the turns both protocol runs take
//! (`turns`) and the watchdog that fails a test past its deadline with what it waited in
//! (`watchdog`).

pub mod broker;
pub mod cli;
pub mod cluster;
pub mod group;
pub mod hostile;
pub mod java;
pub mod proxy;
pub mod registry;
pub mod secured;
pub mod turns;
pub mod watchdog;

use onceflow::client::admin::NewTopic;
use onceflow::client::transactions::TxnState;
use onceflow::client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, ConsumerRecord, Offset, Producer,
    ProducerConfig, TopicPartition,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Logs to stderr when ONCEFLOW_LOG is set (e.g. ONCEFLOW_LOG=onceflow=debug), and puts the
/// calling test under the watchdog (`watchdog`): every test comes through here early, through
/// `broker()` if not directly.
pub fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        use tracing_subscriber::Layer;
        // The log, as before, only when asked for; the watchdog's span recorder always. Each
        // layer has its own filter, so the log shows nothing more than ONCEFLOW_LOG says.
        let log = tracing_subscriber::EnvFilter::try_from_env("ONCEFLOW_LOG")
            .ok()
            .map(|filter| {
                tracing_subscriber::fmt::layer()
                    .with_test_writer()
                    .with_filter(filter)
            });
        let _ = tracing_subscriber::registry()
            .with(log)
            .with(watchdog::enabled().then(watchdog::layer))
            .try_init();
    });
    watchdog::watch();
}

/// The broker the tests use.
pub fn broker() -> String {
    init_logging();
    std::env::var("ONCEFLOW_BROKER").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A topic name no other test (or earlier run) uses.
pub fn unique_topic(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn client_config(broker: &str) -> ClientConfig {
    let mut c = ClientConfig::default();
    c.set("bootstrap.servers", broker).unwrap();
    c.api_timeout = Duration::from_secs(30);
    c
}

pub fn producer_config(broker: &str, props: &[(&str, &str)]) -> ProducerConfig {
    let mut p: Vec<(String, String)> = vec![("bootstrap.servers".into(), broker.into())];
    p.extend(props.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    ProducerConfig::from_properties(p).unwrap()
}

pub fn consumer_config(broker: &str, props: &[(&str, &str)]) -> ConsumerConfig {
    let mut p: Vec<(String, String)> = vec![("bootstrap.servers".into(), broker.into())];
    p.extend(props.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    ConsumerConfig::from_properties(p).unwrap()
}

/// A topic that is deleted when dropped.
pub struct TestTopic {
    pub name: String,
    pub partitions: i32,
    broker: String,
}

impl TestTopic {
    /// A topic something else creates (e.g. the CLI under test), deleted like ours on drop.
    pub fn adopt(name: &str) -> TestTopic {
        TestTopic {
            name: name.to_owned(),
            partitions: 0,
            broker: broker(),
        }
    }

    pub async fn create(prefix: &str, partitions: i32) -> TestTopic {
        Self::create_with(&broker(), prefix, partitions, &[]).await
    }

    pub async fn create_with(
        broker: &str,
        prefix: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> TestTopic {
        let name = unique_topic(prefix);
        let admin = Admin::new(client_config(broker))
            .await
            .expect("connect admin");
        let mut t = NewTopic::new(name.clone(), partitions);
        for (k, v) in configs {
            t = t.with_config(*k, *v);
        }
        admin.create_topics(&[t]).await.expect("create topic");
        TestTopic {
            name,
            partitions,
            broker: broker.to_owned(),
        }
    }

    pub fn tps(&self) -> Vec<TopicPartition> {
        (0..self.partitions)
            .map(|p| TopicPartition::new(self.name.clone(), p))
            .collect()
    }
}

impl Drop for TestTopic {
    fn drop(&mut self) {
        // Best effort, on a separate runtime: Drop cannot be async.
        let name = self.name.clone();
        let broker = self.broker.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut c = client_config(&broker);
                c.api_timeout = Duration::from_secs(5);
                if let Ok(a) = Admin::new(c).await {
                    let _ = a.delete_topics(&[name.as_str()]).await;
                }
            })
        })
        .join();
    }
}

pub async fn producer(props: &[(&str, &str)]) -> Producer {
    Producer::new(producer_config(&broker(), props))
        .await
        .expect("producer")
}

/// An idempotent producer on `broker` (acks=all).
pub async fn idempotent_producer(broker: &str) -> Producer {
    Producer::new(producer_config(
        broker,
        &[("enable.idempotence", "true"), ("acks", "all")],
    ))
    .await
    .expect("producer")
}

/// The transactional ids starting with `prefix` that `broker` lists in state Ongoing now
/// (what `onceflow txn list --state Ongoing` shows).
pub async fn ongoing_transactions(broker: &str, prefix: &str) -> Vec<String> {
    let admin = Admin::new(client_config(broker)).await.unwrap();
    let filter = onceflow::client::transactions::ListTransactionsFilter {
        states: vec![TxnState::Ongoing.as_str().to_owned()],
        ..Default::default()
    };
    admin
        .list_transactions(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.transactional_id)
        .filter(|id| id.starts_with(prefix))
        .collect()
}

/// A read_committed consumer on `broker` assigned `tps`, each at its beginning.
pub async fn committed_reader(broker: &str, tps: &[TopicPartition]) -> Consumer {
    let mut c = Consumer::new(consumer_config(
        broker,
        &[("isolation.level", "read_committed")],
    ))
    .await
    .expect("consumer");
    c.assign(tps.iter().cloned()).await.unwrap();
    for tp in tps {
        c.seek(tp, Offset::Beginning).unwrap();
    }
    c
}

/// Reads `expected` records from every partition of `topic` from the beginning.
pub async fn consume_all(
    broker: &str,
    topic: &TestTopic,
    expected: usize,
    props: &[(&str, &str)],
) -> Vec<ConsumerRecord> {
    let mut c = Consumer::new(consumer_config(broker, props))
        .await
        .expect("consumer");
    c.assign(topic.tps()).await.unwrap();
    for tp in topic.tps() {
        c.seek(&tp, Offset::Beginning).unwrap();
    }
    async {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while out.len() < expected {
            assert!(
                Instant::now() < deadline,
                "read {} of {expected} records from {} before the deadline",
                out.len(),
                topic.name
            );
            out.extend(c.poll(Duration::from_millis(200)).await.unwrap());
        }
        // Read to the end of every partition, so duplicates beyond `expected` are seen too.
        while !c.at_end() {
            assert!(
                Instant::now() < deadline,
                "did not reach the end of {}",
                topic.name
            );
            out.extend(c.poll(Duration::from_millis(200)).await.unwrap());
        }
        out
    }
    .instrument(watchdog::waiting(format_args!(
        "{expected} records from {}",
        topic.name
    )))
    .await
}

/// Waits (generously: the machine may be loaded) until the coordinator has aborted the open
/// transaction of `id` for running past transaction.timeout.ms and written the markers (at
/// transaction.version 1 a record sent before the markers land still joins the transaction).
pub async fn wait_until_the_coordinator_aborted(id: &str) {
    let admin = Admin::new(client_config(&broker())).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let wait = watchdog::waiting(format_args!(
        "the coordinator to abort the transaction of {id}"
    ));
    async move {
        loop {
            let d = admin.describe_transaction(id).await.unwrap();
            if d.as_ref()
                .is_some_and(|d| d.state == TxnState::CompleteAbort)
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the coordinator did not abort the timed-out transaction of '{id}': {d:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    .instrument(wait)
    .await
}
