//! The shared 3-node cluster (`KAFKA_NODES=3 protocol-tests/kafka-broker.sh`): three KRaft
//! nodes, each broker and controller, replication factor 3 and min.insync.replicas=2 by
//! default. One per transaction version (ports 19700–19705 at TV2, 19710–19715 at TV1),
//! started by the first test that needs it and left running for the next (scripts/test stops
//! it at the end; a developer's stays up and is reused). Its tests kill and stop nodes, so
//! they take it one at a time ([`cluster`]) and every node runs again when a test lets go of
//! it, passed or failed.

use super::broker::broker_script;
use super::{repo, watchdog};
use tokio::sync::{Mutex, MutexGuard};
use tracing::Instrument;

/// One test at a time on the cluster.
static LOCK: Mutex<()> = Mutex::const_new(());

/// The first client port of the cluster of this run's transaction version.
pub fn cluster_port() -> u16 {
    match std::env::var("ONCEFLOW_EXPECT_TV").as_deref() {
        Ok("1") => 19710,
        _ => 19700,
    }
}

/// The environment for kafka-broker.sh that names the cluster.
fn env() -> Vec<(String, String)> {
    let port = cluster_port();
    let tv = std::env::var("ONCEFLOW_EXPECT_TV").unwrap_or_else(|_| "2".into());
    vec![
        ("KAFKA_NODES".into(), "3".into()),
        ("KAFKA_PORT".into(), port.to_string()),
        ("KAFKA_TV".into(), tv),
        (
            "KAFKA_DIR".into(),
            repo()
                .join(format!("target/kafka-cluster-{port}"))
                .display()
                .to_string(),
        ),
    ]
}

fn script(action: &str, node: Option<u8>) -> String {
    let env = env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let action = match node {
        Some(n) => format!("{action} {n}"),
        None => action.to_owned(),
    };
    broker_script(&action, &env)
}

/// The cluster, held by this test alone until dropped.
pub struct Cluster {
    _turn: MutexGuard<'static, ()>,
    /// The three client addresses, comma-separated.
    pub bootstrap: String,
}

/// Waits for the cluster's turn, then starts whatever node of it is not running (all three
/// the first time) and waits until each answers.
pub async fn cluster() -> Cluster {
    super::init_logging();
    // Queued behind the other cluster tests, with the watchdog's clock stopped.
    let turn = watchdog::turn(LOCK.lock())
        .instrument(watchdog::waiting("the 3-node cluster's turn"))
        .await;
    let bootstrap = tokio::task::spawn_blocking(|| script("start", None))
        .await
        .expect("kafka-broker.sh start");
    Cluster {
        _turn: turn,
        bootstrap,
    }
}

impl Cluster {
    /// kill -9 node `n`.
    pub async fn kill(&self, n: u8) {
        tokio::task::spawn_blocking(move || script("kill", Some(n)))
            .await
            .unwrap();
    }

    /// Controlled shutdown of node `n` (SIGTERM; its leaderships move first).
    pub async fn stop_node(&self, n: u8) {
        tokio::task::spawn_blocking(move || script("stop-node", Some(n)))
            .await
            .unwrap();
    }

    /// Node `n` again, on its data; returns once it answers.
    pub async fn start_node(&self, n: u8) {
        tokio::task::spawn_blocking(move || script("start-node", Some(n)))
            .await
            .unwrap();
    }
}

impl Drop for Cluster {
    /// Every node running again for the next test (a failed test may have left one down).
    fn drop(&mut self) {
        let _ = std::thread::spawn(|| script("start", None)).join();
    }
}

/// The node id (1..=3) that leads `partition` of `topic` now, as metadata says.
pub async fn leader_of(bootstrap: &str, topic: &str, partition: i32) -> u8 {
    let admin = onceflow::client::Admin::new(super::client_config(bootstrap))
        .await
        .unwrap();
    let tp = onceflow::client::TopicPartition::new(topic, partition);
    let id = admin.cluster().leader(&tp).await.unwrap();
    u8::try_from(id).unwrap_or_else(|_| panic!("leader node id {id}"))
}
