//! The broker pool and the metadata cache.
//!
//! One [`Cluster`] is shared by a producer, consumer or admin client. It owns one connection per
//! broker (opened lazily, replaced when poisoned, reconnected with exponential backoff and
//! jitter) and the current [`MetadataSnapshot`]. Refreshes are single-flight: when a hundred
//! requests fail with NOT_LEADER_OR_FOLLOWER at once, one Metadata request goes out and the
//! others wait for its result.

use super::config::{ClientConfig, TopicLookup};
use super::connection::Connection;
use super::error::{Error, Op, Result};
use super::metadata::{
    BrokerAddr, CoordinatorKind, MetadataSnapshot, PartitionMetadata, TopicMetadata, TopicPartition,
};
use super::retry::{self, backoff, Attempt, Policy, Step};
use super::security::Secured;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tracing::{debug, info_span, warn, Instrument};

/// What goes stale when a retried call fails with RefreshAndRetry.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stale<'a> {
    /// The metadata (leaders, topics): refresh it.
    Metadata,
    /// The coordinator of this key: forget it, so the next attempt looks it up again.
    Coordinator(CoordinatorKind, &'a str),
}

/// Node ids used for bootstrap connections, before the real ids are known.
const BOOTSTRAP_NODE_BASE: i32 = -1000;

#[derive(Default)]
struct BrokerSlot {
    conn: Option<Arc<Connection>>,
    failures: u32,
    next_attempt: Option<Instant>,
}

/// A broker connection's state, read without waiting (`Cluster::node_state`).
#[derive(Debug, Clone)]
pub enum NodeState {
    /// Connected: requests can go out now.
    Ready(Arc<Connection>),
    /// A connect (or the backoff before it) is under way.
    Connecting,
    /// The last connect failed; no new one before this instant.
    BackingOff(Instant),
    /// No connection and nothing under way.
    Disconnected,
}

/// The broker pool and metadata cache.
pub struct Cluster {
    config: ClientConfig,
    /// TLS and SASL for every connection, the TLS files read once.
    secured: Secured,
    slots: Mutex<HashMap<i32, Arc<tokio::sync::Mutex<BrokerSlot>>>>,
    metadata: RwLock<Arc<MetadataSnapshot>>,
    /// Bumped on every change of `metadata` (a refresh, or one topic looked up): lets a hot
    /// path keep its own copy of what it needs (the producer's partition counts) and check it
    /// with one atomic load instead of the lock, the `Arc` and a lookup per record.
    metadata_version: AtomicU64,
    /// Topics whose metadata the cache keeps; refreshes ask for these.
    interest: Mutex<BTreeSet<String>>,
    refresh: tokio::sync::Mutex<()>,
    last_refresh: Mutex<Option<Instant>>,
    coordinators: Mutex<HashMap<(CoordinatorKind, String), i32>>,
    /// The newest finalized features any broker reported: (epoch, transaction.version level).
    features: Mutex<Option<(i64, i16)>>,
}

/// The finalized features to keep when a broker reports `reported` = (epoch, transaction.version
/// level) and `seen` was kept so far: the higher epoch wins; an equal or older one (a broker
/// not caught up yet) changes nothing.
fn newest_features(seen: Option<(i64, i16)>, reported: (i64, i16)) -> Option<(i64, i16)> {
    match seen {
        Some(s) if s.0 >= reported.0 => Some(s),
        _ => Some(reported),
    }
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
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{Admin, ClientConfig, Cluster, Producer, ProducerConfig};
    /// let config = ClientConfig::default(); // bootstrap.servers 127.0.0.1:9092
    /// let cluster = Cluster::connect(config.clone()).await?;
    /// // Everything built on it shares its connections and metadata cache.
    /// let producer = Producer::with_cluster(ProducerConfig { client: config, ..Default::default() }, cluster.clone()).await?;
    /// let admin = Admin::with_cluster(cluster);
    /// # Ok(()) }
    /// ```
    pub async fn connect(config: ClientConfig) -> Result<Arc<Cluster>> {
        let secured = Secured::new(&config.security)?;
        let cluster = Arc::new(Cluster {
            config,
            secured,
            slots: Mutex::new(HashMap::new()),
            metadata: RwLock::new(Arc::new(MetadataSnapshot::default())),
            metadata_version: AtomicU64::new(0),
            interest: Mutex::new(BTreeSet::new()),
            refresh: tokio::sync::Mutex::new(()),
            last_refresh: Mutex::new(None),
            coordinators: Mutex::new(HashMap::new()),
            features: Mutex::new(None),
        });
        cluster.refresh_metadata().await?;
        Ok(cluster)
    }

    /// The configuration.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(cluster: &onceflow::client::Cluster) {
    /// println!("{} bootstrapped from {:?}", cluster.config().client_id, cluster.config().bootstrap_servers);
    /// # }
    /// ```
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The current snapshot.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(cluster: &onceflow::client::Cluster) {
    /// let snapshot = cluster.metadata();
    /// for (id, broker) in &snapshot.brokers {
    ///     println!("node {id} at {}{}", broker.addr, if *id == snapshot.controller { " (controller)" } else { "" });
    /// }
    /// # }
    /// ```
    #[doc(hidden)] // internals: the protocol tests call it
    pub fn metadata(&self) -> Arc<MetadataSnapshot> {
        self.metadata
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Changes whenever the snapshot [`Self::metadata`] returns changes. Read it *before*
    /// reading the snapshot: a copy taken under an older version is then never mistaken for a
    /// current one.
    pub(crate) fn metadata_version(&self) -> u64 {
        self.metadata_version.load(Ordering::Acquire)
    }

    /// Replaces the snapshot and bumps the version.
    fn publish(&self, snap: Arc<MetadataSnapshot>) {
        *self.metadata.write().unwrap_or_else(|p| p.into_inner()) = snap;
        self.metadata_version.fetch_add(1, Ordering::AcqRel);
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
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(cluster: std::sync::Arc<onceflow::client::Cluster>) -> onceflow::client::Result<()> {
    /// use kafka_protocol::messages::ListGroupsRequest;
    /// // A request this client has no call for, to the broker that answers it.
    /// let conn = cluster.broker(1).await?;
    /// let answer = conn.request(&ListGroupsRequest::default()).await?;
    /// println!("node 1 ({}) coordinates {} groups", conn.addr(), answer.groups.len());
    /// # Ok(()) }
    /// ```
    #[doc(hidden)] // internals: the protocol tests call it
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
        // An unknown address counts as a failed attempt too, so that callers retrying in a
        // loop (the sender's background connects) are paced by the backoff.
        let addr = self.addr_of(node_id);
        let connected = match &addr {
            // A connection whose ApiVersions answer lacks an API every broker has was damaged
            // on the way or reached a broker far too old: replaced and negotiated again at
            // once; only a second such answer is the caller's error (fatal: retrying the
            // request cannot help, so it reaches the application instead of looping).
            Some(addr) => match self.connect_to(addr).await {
                Err(Error::UnsupportedVersion { api, .. }) => {
                    debug!(
                        node_id,
                        addr, api, "ApiVersions answer lacks a core API; negotiating again"
                    );
                    self.connect_to(addr).await
                }
                other => other,
            },
            None => Err(Error::Io {
                broker: format!("node {node_id}"),
                message: "broker is not in the cluster metadata".into(),
            }),
        };
        match connected {
            Ok(c) => {
                self.note_features(c.versions());
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
                debug!(node_id, ?addr, error = %e, ?backoff, "connect failed");
                Err(e)
            }
        }
    }

    /// One connect to `addr`, refused when the negotiated versions lack an API every broker
    /// offers ([`ApiVersions::missing_core`](crate::protocol::versions::ApiVersions::missing_core)).
    async fn connect_to(&self, addr: &str) -> Result<Connection> {
        let c = Connection::connect_secured(
            addr,
            &self.config.client_id,
            self.config.connect_timeout,
            self.config.request_timeout,
            &self.secured,
        )
        .await?;
        match c.versions().missing_core() {
            None => Ok(c),
            Some(api) => {
                c.retire_stale(format!(
                    "its ApiVersions answer offers no version of {api:?}"
                ));
                Err(Error::UnsupportedVersion {
                    broker: addr.to_owned(),
                    api: format!("{api:?}"),
                })
            }
        }
    }

    /// Where the connection to a broker stands, without waiting or connecting: the producer's
    /// sender checks this each round and skips brokers that are not ready, so that one broker
    /// slow to connect does not hold up the others (as the Java client's Sender does).
    pub(crate) fn node_state(&self, node_id: i32) -> NodeState {
        let slot = self.slot(node_id);
        let Ok(slot) = slot.try_lock() else {
            // Someone holds the slot: a connect (or its backoff) is under way.
            return NodeState::Connecting;
        };
        match (&slot.conn, slot.next_attempt) {
            (Some(c), _) if !c.is_poisoned() => NodeState::Ready(c.clone()),
            (_, Some(at)) if at > Instant::now() => NodeState::BackingOff(at),
            _ => NodeState::Disconnected,
        }
    }

    /// A connection to any broker: known brokers first, then the bootstrap addresses.
    ///
    /// # Errors
    /// [`Error::NoBrokerReachable`] when none answers.
    pub(crate) async fn any_broker(&self) -> Result<Arc<Connection>> {
        // Prefer any live connection (a bootstrap one too): connecting to a broker that does
        // not answer would hold the caller up to the connect and request timeouts.
        if let Some(c) = self.any_live_connection() {
            return Ok(c);
        }
        let mut ids: Vec<i32> = self.metadata().brokers.keys().copied().collect();
        ids.sort_unstable();
        ids.extend(
            (0..self.config.bootstrap_servers.len()).map(|i| BOOTSTRAP_NODE_BASE - i as i32),
        );
        let mut last = String::from("no addresses");
        for id in ids {
            match self.broker(id).await {
                Ok(c) => return Ok(c),
                // A refused password or certificate is refused by every broker alike: say
                // so, rather than "no broker reachable".
                Err(e @ (Error::Authentication { .. } | Error::Tls { .. })) => return Err(e),
                Err(e) => last = e.to_string(),
            }
        }
        Err(Error::NoBrokerReachable {
            addrs: self.config.bootstrap_servers.join(","),
            last,
        })
    }

    /// Keeps the finalized features with the highest epoch seen (never an older broker's
    /// view: a broker just restarted reports none, or an older epoch, until it catches up).
    fn note_features(&self, v: &crate::protocol::ApiVersions) {
        let mut f = self.features.lock().unwrap_or_else(|p| p.into_inner());
        let reported = (
            v.finalized_epoch(),
            v.finalized_feature("transaction.version"),
        );
        *f = newest_features(*f, reported);
    }

    /// The cluster's finalized transaction.version level as the newest features any broker
    /// reported say (0 before any connection).
    pub(crate) fn transaction_version_level(&self) -> i16 {
        self.features
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map_or(0, |(_, level)| level)
    }

    /// Any connection that is up, without connecting.
    pub(crate) fn any_live_connection(&self) -> Option<Arc<Connection>> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.values().find_map(|s| {
            s.try_lock()
                .ok()
                .and_then(|s| s.conn.clone())
                .filter(|c| !c.is_poisoned())
        })
    }

    /// Adds topics to the set the cache tracks.
    pub(crate) fn add_interest<'a>(&self, topics: impl IntoIterator<Item = &'a str>) {
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
    pub(crate) async fn refresh_metadata(&self) -> Result<Arc<MetadataSnapshot>> {
        let seen = self.metadata().generation;
        let _guard = self.refresh.lock().await;
        let current = self.metadata();
        if current.generation != seen {
            return Ok(current); // someone refreshed while we waited
        }
        // A failed refresh is its own retry: nothing to refresh before the next attempt.
        let policy = self
            .policy(Op::General, self.config.api_timeout)
            .last_error_at_deadline();
        retry::run(
            "metadata refresh",
            policy,
            || async {},
            |_| async { self.refresh_once().await.map(Step::Done) },
        )
        .await
    }

    /// Refreshes unless the snapshot is newer than `generation` already.
    ///
    /// # Errors
    /// As [`Self::refresh_metadata`].
    pub(crate) async fn refresh_if_older(&self, generation: u64) -> Result<Arc<MetadataSnapshot>> {
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
        // Never ask for creation here: a background refresh must not re-create a topic someone
        // deleted. Creation is asked for only by a lookup on the user's behalf (`topic_with`).
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
        snap.brokers = brokers_of(&resp);
        let old = self.metadata();
        for t in &resp.topics {
            let Some(name) = name_of(t) else {
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
            if !partitions_listed_once(t) {
                // Damaged on the way: the old view stands until the next refresh.
                warn!(topic = %name, "a Metadata answer lists the topic's partitions with gaps or twice; keeping the previous view");
                if let Some(prev) = old.topics.get(&name) {
                    snap.topics.insert(name, prev.clone());
                }
                continue;
            }
            snap.topics.insert(name.clone(), topic_metadata(name, t));
        }
        if snap.brokers.is_empty() {
            warn!("metadata response listed no brokers");
            snap.brokers = old.brokers.clone();
        }
        let snap = Arc::new(snap);
        self.publish(snap.clone());
        *self.last_refresh.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        Ok(snap)
    }

    /// A topic's partition count, looking it up as `lookup` says when the cache does not have
    /// it. The producer's per-record path: it clones nothing when the topic is cached.
    ///
    /// # Errors
    /// As [`Self::topic_with`].
    pub(crate) async fn partition_count_with(&self, topic: &str, lookup: TopicLookup) -> Result<usize> {
        if let Some(n) = self.metadata().partition_count(topic) {
            return Ok(n);
        }
        Ok(self.topic_with(topic, lookup).await?.partitions.len())
    }

    /// Metadata for a topic, without asking the broker to create it (admin semantics).
    ///
    /// # Errors
    /// [`Error::UnknownTopic`] when the broker does not know it.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(cluster: std::sync::Arc<onceflow::client::Cluster>) -> onceflow::client::Result<()> {
    /// let t = cluster.topic("rides").await?;
    /// for (p, meta) in t.partitions.iter().enumerate() {
    ///     println!("{}-{p}: leader {}", t.name, meta.leader);
    /// }
    /// # Ok(()) }
    /// ```
    #[doc(hidden)] // internals: the protocol tests call it
    pub async fn topic(&self, topic: &str) -> Result<TopicMetadata> {
        self.topic_with(topic, TopicLookup::admin(&self.config))
            .await
    }

    /// Metadata for a topic, from the cache or else from a Metadata request for this topic
    /// alone, repeated as `lookup` says (the pure `lookup_step` decides).
    ///
    /// The request asks the broker to create the topic only when `lookup.auto_create` (the
    /// producer; the consumer per `allow.auto.create.topics`); the broker's
    /// `auto.create.topics.enable` decides. Kafka 4.1 answers the request that starts the
    /// creation with UNKNOWN_TOPIC_OR_PARTITION and has the topic a moment later; a broker with
    /// auto-creation off gives the same answer for ever, and so does one that has not yet learnt
    /// of a topic created a moment ago. Nothing tells these apart early, so a lookup that asked
    /// for creation keeps asking until its deadline (max.block.ms for the producer, as in
    /// Java), and only then says the broker does not create topics.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::TopicNotCreated`] (asked for creation, still unknown),
    /// [`Error::Timeout`] (still being created at the deadline), or the broker's refusal
    /// (e.g. INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED).
    pub(crate) async fn topic_with(&self, topic: &str, lookup: TopicLookup) -> Result<TopicMetadata> {
        if let Some(t) = self.metadata().topics.get(topic) {
            return Ok(t.clone());
        }
        // Interest first: a refresh that starts from now on keeps the topic in the cache.
        let was_tracked = !self.add_interest_new(topic);
        // lookup_once asks the broker itself; nothing else to refresh between attempts.
        let policy = self
            .policy(Op::General, lookup.deadline)
            .last_error_at_deadline();
        let found = retry::run(
            "topic lookup",
            policy,
            || async {},
            |attempt: Attempt| async move {
                let answer = self.lookup_once(topic, lookup.auto_create).await;
                let step = lookup_step(answer.as_ref().map(|l| l.answer), lookup, attempt.last);
                debug!(topic, answer = ?answer.as_ref().map(|l| l.answer), ?step, "topic lookup");
                Err(match step {
                    LookupStep::Found => {
                        if let Ok(Looked {
                            found: Some(found), ..
                        }) = answer
                        {
                            return Ok(Step::Done(found));
                        }
                        Error::Internal(format!("metadata for topic '{topic}' went missing"))
                    }
                    LookupStep::Retry => {
                        return Ok(Step::Again {
                            why: format!("topic '{topic}' is not ready"),
                            refresh: false,
                        })
                    }
                    LookupStep::NotFound => Error::UnknownTopic(topic.to_owned()),
                    LookupStep::NotCreated => Error::TopicNotCreated {
                        topic: topic.to_owned(),
                        waited: format!(
                            " (still unknown after {} ms, {})",
                            lookup.deadline.as_millis(),
                            lookup.deadline_name
                        ),
                    },
                    LookupStep::Refused(code) => {
                        let e = Error::broker(format!("metadata for topic '{topic}'"), code);
                        match &answer {
                            Ok(l) => e.at_broker("broker", &l.broker),
                            Err(_) => e,
                        }
                    }
                    // The last attempt (`attempt.last`): what it got is final.
                    LookupStep::TimedOut => match answer {
                        Err(e) => e,
                        Ok(Looked { answer, broker, .. }) => Error::Timeout {
                            what: format!(
                            "waiting for topic '{topic}' to be ready (last answer: {answer:?} from broker {broker}; {})",
                            lookup.deadline_name
                        ),
                            after: lookup.deadline,
                        },
                    },
                })
            },
        )
        .await;
        if found.is_err() && !was_tracked {
            self.interest
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(topic);
        }
        found
    }

    /// Adds one topic to the tracked set; whether it was new.
    fn add_interest_new(&self, topic: &str) -> bool {
        let mut i = self.interest.lock().unwrap_or_else(|p| p.into_inner());
        if i.contains(topic) {
            return false;
        }
        i.insert(topic.to_owned())
    }

    /// One Metadata request for `topic` alone. A found topic goes into the cache (without a new
    /// generation: this is not a refresh of everything, and refresh_if_older callers must still
    /// get their refresh).
    ///
    /// A refresh that started before our interest was added may overwrite the snapshot without
    /// this topic; the next lookup then finds it again at once. Harmless, and cheaper than
    /// holding the refresh lock across this request.
    async fn lookup_once(&self, topic: &str, auto_create: bool) -> Result<Looked> {
        let conn = self.any_broker().await?;
        let looked = |answer, found| Looked {
            answer,
            found,
            broker: conn.addr().to_owned(),
        };
        let req = MetadataRequest::default()
            .with_allow_auto_topic_creation(auto_create)
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_string(topic.to_owned())),
            ))]));
        let resp = conn
            .request(&req)
            .instrument(info_span!("metadata", broker = %conn.addr(), topic, auto_create))
            .await?;
        let Some(t) = resp
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        else {
            return Ok(looked(TopicAnswer::Unknown, None));
        };
        let answer = TopicAnswer::from_code(ErrorCode(t.error_code));
        if answer != TopicAnswer::Found {
            return Ok(looked(answer, None));
        }
        if !partitions_listed_once(t) {
            // Damaged on the way: asked again, as while the broker creates a topic.
            warn!(
                topic,
                "a Metadata answer lists the topic's partitions with gaps or twice; asking again"
            );
            return Ok(looked(
                TopicAnswer::Pending(ErrorCode::LEADER_NOT_AVAILABLE),
                None,
            ));
        }
        let found = topic_metadata(topic.to_owned(), t);
        let mut snap = (*self.metadata()).clone();
        snap.topics.insert(topic.to_owned(), found.clone());
        let brokers = brokers_of(&resp);
        if !brokers.is_empty() {
            snap.brokers = brokers;
        }
        self.publish(Arc::new(snap));
        Ok(looked(TopicAnswer::Found, Some(found)))
    }

    /// The leader of a partition, refreshing metadata when it is unknown, until
    /// `default.api.timeout.ms`.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`] or [`Error::Timeout`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(cluster: std::sync::Arc<onceflow::client::Cluster>) -> onceflow::client::Result<()> {
    /// use onceflow::client::TopicPartition;
    /// let node = cluster.leader(&TopicPartition::new("rides", 0)).await?;
    /// let conn = cluster.broker(node).await?;
    /// # Ok(()) }
    /// ```
    #[doc(hidden)] // internals: the protocol tests call it
    pub async fn leader(&self, tp: &TopicPartition) -> Result<i32> {
        // The topic's own lookup has its own deadline and errors; the wait here is for a
        // leader of a partition the topic has.
        self.topic(&tp.topic).await?;
        let what = format!("finding the leader of {tp}");
        let policy = self.policy(Op::General, self.config.api_timeout);
        self.retrying(&what, policy, Stale::Metadata, |_| async {
            let m = self.metadata();
            let count = match m.topics.get(&tp.topic) {
                Some(t) => t.partitions.len(),
                None => return Err(Error::UnknownTopic(tp.topic.clone())),
            };
            if tp.partition < 0 || tp.partition as usize >= count {
                return Err(Error::UnknownPartition {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    count,
                });
            }
            Ok(match m.leader(tp) {
                Some(l) => Step::Done(l),
                None => Step::Again {
                    why: "no leader is known".into(),
                    refresh: true,
                },
            })
        })
        .await
    }

    /// The retry policy for `op` over `budget`, with this client's retry.backoff.ms and
    /// retry.backoff.max.ms.
    pub(crate) fn policy(&self, op: Op, budget: Duration) -> Policy {
        Policy::new(
            self.config.retry_backoff,
            self.config.retry_backoff_max,
            budget,
            op,
        )
    }

    /// [`retry::run`] with this cluster's stale-view handling: before retrying a
    /// RefreshAndRetry error (or a `Step::Again` asking for it), refresh metadata or forget the
    /// coordinator, per `stale`.
    ///
    /// # Errors
    /// As [`retry::run`].
    pub(crate) async fn retrying<T, C, CF>(
        &self,
        what: &str,
        policy: Policy,
        stale: Stale<'_>,
        call: C,
    ) -> Result<T>
    where
        C: FnMut(Attempt) -> CF,
        CF: std::future::Future<Output = Result<Step<T>>>,
    {
        let on_stale = move || async move {
            match stale {
                Stale::Metadata => {
                    let g = self.metadata().generation;
                    // A failed refresh shows on the next attempt.
                    let _ = self.refresh_if_older(g).await;
                }
                Stale::Coordinator(kind, key) => self.forget_coordinator(kind, key),
            }
        };
        retry::run(what, policy, on_stale, call).await
    }

    pub(crate) fn cached_coordinator(&self, kind: CoordinatorKind, key: &str) -> Option<i32> {
        self.coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(kind, key.to_owned()))
            .copied()
    }

    pub(crate) fn cache_coordinator(&self, kind: CoordinatorKind, key: &str, node: i32) {
        self.coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((kind, key.to_owned()), node);
    }

    /// Drops a cached coordinator (after NOT_COORDINATOR or a connection failure).
    pub(crate) fn forget_coordinator(&self, kind: CoordinatorKind, key: &str) {
        self.coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(kind, key.to_owned()));
    }

    /// Starts a background refresh when the cache is older than metadata.max.age.ms, so new
    /// partitions and moved leaders are learnt without an error first. Never waits.
    pub(crate) fn refresh_if_stale(self: &Arc<Self>) {
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
    pub(crate) fn metadata_is_stale(&self) -> bool {
        match *self.last_refresh.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(at) => at.elapsed() > self.config.metadata_max_age,
            None => true,
        }
    }
}

fn name_of(t: &MetadataResponseTopic) -> Option<String> {
    t.name.as_ref().map(|n| n.0.to_string())
}

fn brokers_of(resp: &MetadataResponse) -> HashMap<i32, BrokerAddr> {
    resp.brokers
        .iter()
        .map(|b| {
            (
                b.node_id.0,
                BrokerAddr {
                    node_id: b.node_id.0,
                    addr: format!("{}:{}", b.host.as_str(), b.port),
                },
            )
        })
        .collect()
}

/// Whether a topic's entry lists each of its partitions 0..n exactly once, as every broker
/// does (a partition without a leader is listed with an error code). Pure.
///
/// One flipped bit in a partition index (1 → 3) made a topic of 2 partitions look like one of
/// 4: a group leader assigned partitions that do not exist, and the member's every poll failed
/// on them (the group member under random flips).
fn partitions_listed_once(t: &MetadataResponseTopic) -> bool {
    let mut listed: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
    listed.sort_unstable();
    listed
        .iter()
        .enumerate()
        .all(|(i, p)| i32::try_from(i).is_ok_and(|i| i == *p))
}

/// A topic's entry of a Metadata response (its error code is 0).
fn topic_metadata(name: String, t: &MetadataResponseTopic) -> TopicMetadata {
    let count = t
        .partitions
        .iter()
        .map(|p| p.partition_index.max(0) as usize + 1)
        .max()
        .unwrap_or(0);
    // A hostile partition index must not make us allocate: at most twice the entries listed.
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
    TopicMetadata {
        name,
        id: *t.topic_id.as_bytes(),
        partitions,
        internal: t.is_internal,
    }
}

/// What one Metadata answer said about a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopicAnswer {
    /// The topic and its partitions.
    Found,
    /// UNKNOWN_TOPIC_OR_PARTITION: not there (auto-creation off or not asked for), or created a
    /// moment ago and this broker has not learnt of it yet.
    Unknown,
    /// A retriable code, e.g. LEADER_NOT_AVAILABLE while the broker creates the topic.
    Pending(ErrorCode),
    /// A code retrying cannot help (INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED, ...).
    Refused(ErrorCode),
}

impl TopicAnswer {
    fn from_code(code: ErrorCode) -> TopicAnswer {
        match code {
            ErrorCode(0) => TopicAnswer::Found,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION => TopicAnswer::Unknown,
            c if matches!(
                super::error::classify(c, super::error::Op::General),
                super::error::ErrorClass::Retriable | super::error::ErrorClass::RefreshAndRetry
            ) =>
            {
                TopicAnswer::Pending(c)
            }
            c => TopicAnswer::Refused(c),
        }
    }
}

/// What a topic lookup does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LookupStep {
    Found,
    Retry,
    /// Unknown and creation was not asked for.
    NotFound,
    /// Unknown although creation was asked for: the broker does not auto-create.
    NotCreated,
    Refused(ErrorCode),
    /// Still pending (or no broker answered) at the deadline.
    TimedOut,
}

/// One Metadata answer about a topic (`Cluster::lookup_once`), and the broker that gave it:
/// a refusal names it.
struct Looked {
    answer: TopicAnswer,
    found: Option<TopicMetadata>,
    broker: String,
}

/// The topic lookup's decision after one attempt. `answer` is `Err(())` when no broker answered.
pub(crate) fn lookup_step(
    answer: Result<TopicAnswer, &Error>,
    lookup: TopicLookup,
    past_deadline: bool,
) -> LookupStep {
    match answer {
        Ok(TopicAnswer::Found) => LookupStep::Found,
        Ok(TopicAnswer::Refused(code)) => LookupStep::Refused(code),
        Ok(TopicAnswer::Unknown) if lookup.auto_create && !past_deadline => LookupStep::Retry,
        Ok(TopicAnswer::Unknown) if lookup.auto_create => LookupStep::NotCreated,
        Ok(TopicAnswer::Unknown) => LookupStep::NotFound,
        Ok(TopicAnswer::Pending(_)) | Err(_) if !past_deadline => LookupStep::Retry,
        Ok(TopicAnswer::Pending(_)) | Err(_) => LookupStep::TimedOut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_lists_each_partition_once() {
        use kafka_protocol::messages::metadata_response::MetadataResponsePartition;
        let topic = |indices: &[i32]| {
            MetadataResponseTopic::default().with_partitions(
                indices
                    .iter()
                    .map(|i| MetadataResponsePartition::default().with_partition_index(*i))
                    .collect(),
            )
        };
        let cases: [(&[i32], bool); 7] = [
            (&[], true),
            (&[0], true),
            (&[1, 0, 2], true),
            // A flipped bit: 1 → 3.
            (&[0, 3], false),
            (&[0, 0], false),
            (&[-1, 0], false),
            (&[1], false),
        ];
        for (indices, want) in cases {
            assert_eq!(partitions_listed_once(&topic(indices)), want, "{indices:?}");
        }
    }

    #[test]
    fn topic_lookup_decisions() {
        use LookupStep as S;
        use TopicAnswer as A;
        let d = Duration::from_secs(1);
        let producer = TopicLookup {
            auto_create: true,
            deadline: d,
            deadline_name: "max.block.ms",
        };
        let consumer = TopicLookup {
            deadline_name: "default.api.timeout.ms",
            ..producer
        };
        let consumer_no_create = TopicLookup {
            auto_create: false,
            ..consumer
        };
        let admin = TopicLookup::admin(&ClientConfig::default());
        let lna = A::Pending(ErrorCode::LEADER_NOT_AVAILABLE);
        let invalid = A::Refused(ErrorCode::INVALID_TOPIC_EXCEPTION);
        let io = Error::Io {
            broker: "b".into(),
            message: "refused".into(),
        };
        // (answer, lookup, past the deadline, step)
        let cases: Vec<(Result<TopicAnswer, &Error>, TopicLookup, bool, LookupStep)> = vec![
            (Ok(A::Found), producer, false, S::Found),
            (Ok(A::Found), admin, true, S::Found),
            // Asked for creation: the first answer is UNKNOWN_TOPIC_OR_PARTITION even from a
            // broker that creates the topic, so keep asking until the deadline.
            (Ok(A::Unknown), producer, false, S::Retry),
            (Ok(A::Unknown), producer, true, S::NotCreated),
            (Ok(A::Unknown), consumer, false, S::Retry),
            (Ok(A::Unknown), consumer, true, S::NotCreated),
            // Not asked for creation: unknown is an error at once.
            (Ok(A::Unknown), consumer_no_create, false, S::NotFound),
            (Ok(A::Unknown), admin, false, S::NotFound),
            // Being created: everyone waits for it, up to their deadline.
            (Ok(lna), producer, false, S::Retry),
            (Ok(lna), consumer, false, S::Retry),
            (Ok(lna), consumer, true, S::TimedOut),
            (Ok(lna), admin, false, S::Retry),
            // No broker answered: retry until the deadline.
            (Err(&io), producer, false, S::Retry),
            (Err(&io), admin, true, S::TimedOut),
            // Retrying cannot fix a bad name or a denied topic.
            (
                Ok(invalid),
                producer,
                false,
                S::Refused(ErrorCode::INVALID_TOPIC_EXCEPTION),
            ),
        ];
        for (answer, lookup, past, want) in cases {
            assert_eq!(
                lookup_step(answer, lookup, past),
                want,
                "{answer:?} {lookup:?} past={past}"
            );
        }
        assert_eq!(
            TopicAnswer::from_code(ErrorCode::TOPIC_AUTHORIZATION_FAILED),
            A::Refused(ErrorCode::TOPIC_AUTHORIZATION_FAILED)
        );
        assert_eq!(
            TopicAnswer::from_code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            A::Unknown
        );
    }

    /// The features of the broker with the newest epoch are kept: a broker that has just
    /// restarted (no epoch, or an older one, and a lower transaction.version) never takes a
    /// cluster at transaction.version 2 back to 1.
    #[test]
    fn the_newest_finalized_features_win() {
        type Features = (i64, i16);
        let cases: [(&str, Option<Features>, Features, Option<Features>); 5] = [
            ("first report", None, (10, 2), Some((10, 2))),
            (
                "a restarted broker without features",
                Some((10, 2)),
                (-1, 0),
                Some((10, 2)),
            ),
            ("an older epoch", Some((10, 2)), (7, 1), Some((10, 2))),
            ("the same epoch", Some((10, 2)), (10, 2), Some((10, 2))),
            ("an upgrade", Some((10, 1)), (12, 2), Some((12, 2))),
        ];
        for (name, seen, reported, want) in cases {
            assert_eq!(newest_features(seen, reported), want, "{name}");
        }
    }
}
