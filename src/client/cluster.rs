//! The broker pool and the metadata cache.
//!
//! One [`Cluster`] is shared by a producer, consumer or admin client. It owns one connection per
//! broker (opened lazily, replaced when poisoned, reconnected with exponential backoff and
//! jitter) and the current [`MetadataSnapshot`]. Refreshes are single-flight: when a hundred
//! requests fail with NOT_LEADER_OR_FOLLOWER at once, one Metadata request goes out and the
//! others wait for its result.

use super::config::ClientConfig;
use super::connection::Connection;
use super::error::{Error, Result};
use super::metadata::{
    BrokerAddr, MetadataSnapshot, PartitionMetadata, TopicMetadata, TopicPartition,
};
use crate::protocol::ErrorCode;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rand::Rng;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tracing::{debug, info_span, warn, Instrument};

/// Node ids used for bootstrap connections, before the real ids are known.
const BOOTSTRAP_NODE_BASE: i32 = -1000;

#[derive(Default)]
struct BrokerSlot {
    conn: Option<Arc<Connection>>,
    failures: u32,
    next_attempt: Option<Instant>,
}

/// The broker pool and metadata cache.
pub struct Cluster {
    config: ClientConfig,
    slots: Mutex<HashMap<i32, Arc<tokio::sync::Mutex<BrokerSlot>>>>,
    metadata: RwLock<Arc<MetadataSnapshot>>,
    /// Topics whose metadata the cache keeps; refreshes ask for these.
    interest: Mutex<BTreeSet<String>>,
    refresh: tokio::sync::Mutex<()>,
    last_refresh: Mutex<Option<Instant>>,
    coordinators: Mutex<HashMap<(super::coordinator::CoordinatorKind, String), i32>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("bootstrap", &self.config.bootstrap_servers)
            .finish()
    }
}

impl Cluster {
    /// Creates the pool and fetches initial metadata from a bootstrap broker.
    ///
    /// # Errors
    /// [`Error::NoBrokerReachable`] when no bootstrap address answers within
    /// `default.api.timeout.ms`.
    pub async fn connect(config: ClientConfig) -> Result<Arc<Cluster>> {
        let cluster = Arc::new(Cluster {
            config,
            slots: Mutex::new(HashMap::new()),
            metadata: RwLock::new(Arc::new(MetadataSnapshot::default())),
            interest: Mutex::new(BTreeSet::new()),
            refresh: tokio::sync::Mutex::new(()),
            last_refresh: Mutex::new(None),
            coordinators: Mutex::new(HashMap::new()),
        });
        cluster.refresh_metadata().await?;
        Ok(cluster)
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The current snapshot.
    pub fn metadata(&self) -> Arc<MetadataSnapshot> {
        self.metadata
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn slot(&self, node_id: i32) -> Arc<tokio::sync::Mutex<BrokerSlot>> {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(node_id)
            .or_default()
            .clone()
    }

    fn addr_of(&self, node_id: i32) -> Option<String> {
        if node_id <= BOOTSTRAP_NODE_BASE {
            let i = (BOOTSTRAP_NODE_BASE - node_id) as usize;
            return self.config.bootstrap_servers.get(i).cloned();
        }
        self.metadata()
            .brokers
            .get(&node_id)
            .map(|b| b.addr.clone())
    }

    /// A live connection to a broker, connecting if needed.
    ///
    /// Repeated failures back off exponentially (reconnect.backoff.ms doubling up to
    /// reconnect.backoff.max.ms, with ±20 % jitter so that many clients do not reconnect in step).
    ///
    /// # Errors
    /// [`Error::Io`] / [`Error::Timeout`] when the connect fails; the next call will retry after
    /// the backoff.
    pub async fn broker(&self, node_id: i32) -> Result<Arc<Connection>> {
        let slot = self.slot(node_id);
        let mut slot = slot.lock().await;
        if let Some(c) = &slot.conn {
            if !c.is_poisoned() {
                return Ok(c.clone());
            }
            slot.conn = None;
        }
        if let Some(at) = slot.next_attempt {
            tokio::time::sleep_until(at.into()).await;
        }
        let addr = self.addr_of(node_id).ok_or_else(|| Error::Io {
            broker: format!("node {node_id}"),
            message: "broker is not in the cluster metadata".into(),
        })?;
        match Connection::connect(
            &addr,
            &self.config.client_id,
            self.config.connect_timeout,
            self.config.request_timeout,
        )
        .await
        {
            Ok(c) => {
                let c = Arc::new(c);
                slot.conn = Some(c.clone());
                slot.failures = 0;
                slot.next_attempt = None;
                Ok(c)
            }
            Err(e) => {
                slot.failures = slot.failures.saturating_add(1);
                let backoff = backoff(
                    self.config.reconnect_backoff,
                    self.config.reconnect_backoff_max,
                    slot.failures,
                );
                slot.next_attempt = Some(Instant::now() + backoff);
                debug!(node_id, %addr, error = %e, ?backoff, "connect failed");
                Err(e)
            }
        }
    }

    /// A connection to any broker: known brokers first, then the bootstrap addresses.
    ///
    /// # Errors
    /// [`Error::NoBrokerReachable`] when none answers.
    pub async fn any_broker(&self) -> Result<Arc<Connection>> {
        let mut ids: Vec<i32> = self.metadata().brokers.keys().copied().collect();
        ids.sort_unstable();
        // Prefer brokers we already hold a live connection to.
        {
            let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            for id in &ids {
                if let Some(s) = slots.get(id) {
                    if let Ok(s) = s.try_lock() {
                        if let Some(c) = s.conn.as_ref().filter(|c| !c.is_poisoned()) {
                            return Ok(c.clone());
                        }
                    }
                }
            }
        }
        ids.extend(
            (0..self.config.bootstrap_servers.len()).map(|i| BOOTSTRAP_NODE_BASE - i as i32),
        );
        let mut last = String::from("no addresses");
        for id in ids {
            match self.broker(id).await {
                Ok(c) => return Ok(c),
                Err(e) => last = e.to_string(),
            }
        }
        Err(Error::NoBrokerReachable {
            addrs: self.config.bootstrap_servers.join(","),
            last,
        })
    }

    /// Any connection that is up, without connecting.
    pub fn any_live_connection(&self) -> Option<Arc<Connection>> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.values().find_map(|s| {
            s.try_lock()
                .ok()
                .and_then(|s| s.conn.clone())
                .filter(|c| !c.is_poisoned())
        })
    }

    /// Adds topics to the set the cache tracks.
    pub fn add_interest<'a>(&self, topics: impl IntoIterator<Item = &'a str>) {
        let mut i = self.interest.lock().unwrap_or_else(|p| p.into_inner());
        for t in topics {
            if !i.contains(t) {
                i.insert(t.to_owned());
            }
        }
    }

    /// Refreshes metadata for the tracked topics, retrying across brokers until
    /// `default.api.timeout.ms`. Concurrent callers share one refresh.
    ///
    /// # Errors
    /// [`Error::NoBrokerReachable`] or [`Error::Timeout`].
    pub async fn refresh_metadata(&self) -> Result<Arc<MetadataSnapshot>> {
        let seen = self.metadata().generation;
        let _guard = self.refresh.lock().await;
        let current = self.metadata();
        if current.generation != seen {
            return Ok(current); // someone refreshed while we waited
        }
        let deadline = Instant::now() + self.config.api_timeout;
        let mut attempt = 0u32;
        loop {
            match self.refresh_once().await {
                Ok(snap) => return Ok(snap),
                Err(e) if Instant::now() < deadline => {
                    attempt += 1;
                    let wait = backoff(
                        self.config.retry_backoff,
                        self.config.retry_backoff_max,
                        attempt,
                    );
                    debug!(error = %e, ?wait, "metadata refresh failed; retrying");
                    tokio::time::sleep(
                        wait.min(deadline.saturating_duration_since(Instant::now())),
                    )
                    .await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Refreshes unless the snapshot is newer than `generation` already.
    ///
    /// # Errors
    /// As [`Self::refresh_metadata`].
    pub async fn refresh_if_older(&self, generation: u64) -> Result<Arc<MetadataSnapshot>> {
        let m = self.metadata();
        if m.generation > generation {
            return Ok(m);
        }
        self.refresh_metadata().await
    }

    async fn refresh_once(&self) -> Result<Arc<MetadataSnapshot>> {
        let conn = self.any_broker().await?;
        let topics: Vec<String> = self
            .interest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        let req = MetadataRequest::default()
            .with_allow_auto_topic_creation(false)
            .with_topics(Some(
                topics
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                    })
                    .collect(),
            ));
        let resp = conn
            .request(&req)
            .instrument(info_span!("metadata", broker = %conn.addr(), topics = topics.len()))
            .await?;
        let mut snap = MetadataSnapshot {
            controller: resp.controller_id.0,
            generation: self.metadata().generation + 1,
            ..Default::default()
        };
        for b in &resp.brokers {
            snap.brokers.insert(
                b.node_id.0,
                BrokerAddr {
                    node_id: b.node_id.0,
                    addr: format!("{}:{}", b.host.as_str(), b.port),
                },
            );
        }
        let old = self.metadata();
        for t in &resp.topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                continue;
            };
            if t.error_code != 0 {
                // Unknown topics are simply absent; a transient error keeps the old view.
                if t.error_code != ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0 {
                    if let Some(prev) = old.topics.get(&name) {
                        snap.topics.insert(name, prev.clone());
                    }
                }
                continue;
            }
            let count = t
                .partitions
                .iter()
                .map(|p| p.partition_index.max(0) as usize + 1)
                .max()
                .unwrap_or(0);
            let mut partitions = vec![
                PartitionMetadata {
                    leader: -1,
                    leader_epoch: -1,
                    error_code: ErrorCode::LEADER_NOT_AVAILABLE.0,
                };
                count.min(t.partitions.len().max(1) * 2)
            ];
            partitions.truncate(count);
            for p in &t.partitions {
                if let Some(slot) = partitions.get_mut(p.partition_index.max(0) as usize) {
                    *slot = PartitionMetadata {
                        leader: p.leader_id.0,
                        leader_epoch: p.leader_epoch,
                        error_code: p.error_code,
                    };
                }
            }
            snap.topics.insert(
                name.clone(),
                TopicMetadata {
                    name,
                    id: *t.topic_id.as_bytes(),
                    partitions,
                    internal: t.is_internal,
                },
            );
        }
        if snap.brokers.is_empty() {
            warn!("metadata response listed no brokers");
            snap.brokers = old.brokers.clone();
        }
        let snap = Arc::new(snap);
        *self.metadata.write().unwrap_or_else(|p| p.into_inner()) = snap.clone();
        *self.last_refresh.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        Ok(snap)
    }

    /// A topic's partition count, fetching its metadata if the cache does not have it. The
    /// producer's per-record path: it clones nothing when the topic is cached.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`] when the broker does not know it.
    pub async fn partition_count(&self, topic: &str) -> Result<usize> {
        if let Some(n) = self.metadata().partition_count(topic) {
            return Ok(n);
        }
        Ok(self.topic(topic).await?.partitions.len())
    }

    /// Metadata for a topic, fetching it if the cache does not have it.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`] when the broker does not know it.
    pub async fn topic(&self, topic: &str) -> Result<TopicMetadata> {
        if let Some(t) = self.metadata().topics.get(topic) {
            return Ok(t.clone());
        }
        self.add_interest([topic]);
        let snap = self.refresh_metadata().await?;
        match snap.topics.get(topic) {
            Some(t) => Ok(t.clone()),
            None => {
                // The refresh we joined may have started before our interest was added.
                let snap = self.refresh_if_older(snap.generation).await?;
                snap.topics
                    .get(topic)
                    .cloned()
                    .ok_or_else(|| Error::UnknownTopic(topic.to_owned()))
            }
        }
    }

    /// The leader of a partition, refreshing metadata when it is unknown, until
    /// `default.api.timeout.ms`.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`] or [`Error::Timeout`].
    pub async fn leader(&self, tp: &TopicPartition) -> Result<i32> {
        let deadline = Instant::now() + self.config.api_timeout;
        loop {
            let t = self.topic(&tp.topic).await?;
            let count = t.partitions.len();
            if tp.partition < 0 || tp.partition as usize >= count {
                return Err(Error::UnknownPartition {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    count,
                });
            }
            if let Some(l) = self.metadata().leader(tp) {
                return Ok(l);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("finding the leader of {tp}"),
                    after: self.config.api_timeout,
                });
            }
            tokio::time::sleep(self.config.retry_backoff).await;
            let g = self.metadata().generation;
            self.refresh_if_older(g).await?;
        }
    }

    pub(crate) fn cached_coordinator(
        &self,
        kind: super::coordinator::CoordinatorKind,
        key: &str,
    ) -> Option<i32> {
        self.coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(kind, key.to_owned()))
            .copied()
    }

    pub(crate) fn cache_coordinator(
        &self,
        kind: super::coordinator::CoordinatorKind,
        key: &str,
        node: i32,
    ) {
        self.coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((kind, key.to_owned()), node);
    }

    /// Drops a cached coordinator (after NOT_COORDINATOR or a connection failure).
    pub fn forget_coordinator(&self, kind: super::coordinator::CoordinatorKind, key: &str) {
        self.coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(kind, key.to_owned()));
    }

    /// Starts a background refresh when the cache is older than metadata.max.age.ms, so new
    /// partitions and moved leaders are learnt without an error first. Never waits.
    pub fn refresh_if_stale(self: &Arc<Self>) {
        if !self.metadata_is_stale() {
            return;
        }
        // Mark now so that one caller, not every caller, starts the refresh.
        *self.last_refresh.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let cluster = self.clone();
        let g = cluster.metadata().generation;
        tokio::spawn(async move {
            if let Err(e) = cluster.refresh_if_older(g).await {
                debug!(error = %e, "periodic metadata refresh failed");
            }
        });
    }

    /// Whether the cache is older than metadata.max.age.ms.
    pub fn metadata_is_stale(&self) -> bool {
        match *self.last_refresh.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(at) => at.elapsed() > self.config.metadata_max_age,
            None => true,
        }
    }
}

/// Exponential backoff with ±20 % jitter: `base * 2^(attempt-1)`, capped at `max`.
pub fn backoff(base: Duration, max: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let capped = exp.min(max).max(Duration::from_millis(1));
    let jitter = rand::rng().random_range(0.8..1.2);
    capped.mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let b = Duration::from_millis(100);
        let m = Duration::from_secs(1);
        assert!(backoff(b, m, 1) <= Duration::from_millis(120));
        assert!(backoff(b, m, 3) >= Duration::from_millis(320));
        assert!(backoff(b, m, 30) <= Duration::from_millis(1200));
    }
}
