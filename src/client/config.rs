//! Typed configuration, also settable by Kafka property names.
//!
//! Java and librdkafka users carry their settings over: every field has its Kafka property name
//! (`linger.ms`, `enable.idempotence`, ...), and a few librdkafka spellings are accepted as
//! aliases. An unknown property or a bad value is an error that names it; silently ignoring a
//! misspelt `isolation.level` is how exactly-once pipelines end up reading aborted data.

mod builder;
pub(crate) mod validate;
pub use builder::{FromProperties, PropertiesBuilder};
pub use validate::ConfigError;
use validate::{invalid, non_empty, parse_bool, parse_i32, parse_ms, parse_usize};

use crate::protocol::records::Compression;
use std::time::Duration;

pub use super::security::{SaslMechanism, Secret, SecurityConfig, SecurityProtocol, TokenSource};

/// Where a consumer starts when it has no valid position.
///
/// # Examples
/// ```
/// use onceflow::client::{AutoOffsetReset, ConsumerConfig};
/// let c = ConsumerConfig::from_properties([("auto.offset.reset", "earliest")])?;
/// assert_eq!(c.auto_offset_reset, AutoOffsetReset::Earliest);
/// # Ok::<(), onceflow::client::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOffsetReset {
    /// The first offset still in the log.
    Earliest,
    /// The end of the log.
    Latest,
    /// Fail with OFFSET_OUT_OF_RANGE.
    None,
}

/// `group.protocol`: how a group member gets its partitions.
///
/// # Examples
/// ```
/// use onceflow::client::{ConsumerConfig, GroupProtocol};
/// let c = ConsumerConfig::from_properties([("group.id", "cleaners"), ("group.protocol", "consumer")])?;
/// assert_eq!(c.group_protocol, GroupProtocol::Consumer);
/// # Ok::<(), onceflow::client::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup; a member (the leader) computes the assignment; every rebalance
    /// stops the group (eager) or takes two rounds (cooperative). The default, as in Java.
    #[default]
    Classic,
    /// KIP-848 (Kafka 4.0+): ConsumerGroupHeartbeat; the coordinator computes the assignment
    /// and hands it out incrementally; a member never waits for the others. Session and
    /// heartbeat intervals are the broker's (`group.consumer.*`), so `session.timeout.ms` and
    /// `heartbeat.interval.ms` do not apply.
    Consumer,
}

/// Which records a consumer sees.
///
/// # Examples
/// ```
/// use onceflow::client::{ConsumerConfig, IsolationLevel};
/// // Exactly-once readers: only committed transactions' records.
/// let c = ConsumerConfig { isolation_level: IsolationLevel::ReadCommitted, ..ConsumerConfig::default() };
/// # let _ = c;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// Everything up to the high watermark, aborted transactions included.
    #[default]
    ReadUncommitted,
    /// Only up to the last stable offset, aborted transactions filtered out.
    ReadCommitted,
}

impl IsolationLevel {
    /// The wire value in Fetch and ListOffsets.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::IsolationLevel;
    /// assert_eq!(IsolationLevel::ReadCommitted.wire(), 1);
    /// ```
    pub fn wire(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// Acknowledgement level of produce requests.
///
/// # Examples
/// ```
/// use onceflow::client::{Acks, ProducerConfig};
/// let c = ProducerConfig::from_properties([("acks", "all")])?;
/// assert_eq!(c.acks, Acks::All); // the default, and what idempotence needs
/// # Ok::<(), onceflow::client::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// No response (fire and forget).
    None,
    /// The leader wrote it.
    Leader,
    /// All in-sync replicas wrote it.
    All,
}

impl Acks {
    /// The wire value.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::Acks;
    /// assert_eq!(Acks::All.wire(), -1);
    /// assert_eq!(Acks::Leader.wire(), 1);
    /// ```
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Settings shared by every client role.
///
/// # Examples
/// ```
/// use onceflow::client::{ClientConfig, ProducerConfig};
/// use std::time::Duration;
/// let client = ClientConfig {
///     bootstrap_servers: vec!["kafka-1:9092".into(), "kafka-2:9092".into()],
///     client_id: "rides-cleaner".into(),
///     request_timeout: Duration::from_secs(10),
///     ..ClientConfig::default()
/// };
/// let producer = ProducerConfig { client, ..ProducerConfig::default() };
/// ```
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `bootstrap.servers`: host:port list.
    pub bootstrap_servers: Vec<String>,
    /// `client.id`.
    pub client_id: String,
    /// `request.timeout.ms`.
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms`.
    pub connect_timeout: Duration,
    /// `reconnect.backoff.ms`.
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms`.
    pub reconnect_backoff_max: Duration,
    /// `retry.backoff.ms`.
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms`.
    pub retry_backoff_max: Duration,
    /// `metadata.max.age.ms`.
    pub metadata_max_age: Duration,
    /// `default.api.timeout.ms`: the bound for calls made on the user's behalf (metadata,
    /// list offsets, admin).
    pub api_timeout: Duration,
    /// `security.protocol`, `ssl.*`, `sasl.*`: TLS and SASL. Its `Debug` never shows a secret.
    pub security: SecurityConfig,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            bootstrap_servers: vec!["127.0.0.1:9092".into()],
            client_id: "onceflow".into(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            metadata_max_age: Duration::from_secs(300),
            api_timeout: Duration::from_secs(60),
            security: SecurityConfig::new(),
        }
    }
}

/// Producer settings.
///
/// # Examples
/// ```
/// use onceflow::client::ProducerConfig;
/// use std::time::Duration;
/// let config = ProducerConfig {
///     linger: Duration::from_millis(20),
///     transactional_id: Some("rides-cleaner-0".into()),
///     ..ProducerConfig::default()
/// };
/// config.validate()?;
/// # Ok::<(), onceflow::client::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Shared settings.
    pub client: ClientConfig,
    /// `acks`.
    pub acks: Acks,
    /// `linger.ms`.
    pub linger: Duration,
    /// `batch.size` in bytes.
    pub batch_size: usize,
    /// `buffer.memory` in bytes: `send` waits when this much is buffered.
    pub buffer_memory: usize,
    /// `max.block.ms`: how long `send` may wait for buffer space or metadata.
    pub max_block: Duration,
    /// `compression.type`.
    pub compression: Compression,
    /// `delivery.timeout.ms`.
    pub delivery_timeout: Duration,
    /// `retries`.
    pub retries: u32,
    /// `max.in.flight.requests.per.connection`, applied per partition.
    pub max_in_flight: usize,
    /// `max.request.size` in bytes: the largest record (and request) the producer sends.
    pub max_request_size: usize,
    /// `enable.idempotence` (default true, as in the Java client since 3.0). When it was not set
    /// explicitly and acks, retries or max.in.flight contradict it, it is turned off, as the
    /// Java client does; set explicitly, a contradiction is an error.
    pub enable_idempotence: bool,
    /// Whether `enable.idempotence` was set explicitly.
    pub idempotence_explicit: bool,
    /// `transactional.id`.
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`.
    pub transaction_timeout: Duration,
    /// `partitioner.ignore.keys`.
    pub partitioner_ignore_keys: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            client: ClientConfig::default(),
            acks: Acks::All,
            linger: Duration::from_millis(5),
            batch_size: 16 * 1024,
            buffer_memory: 32 * 1024 * 1024,
            max_block: Duration::from_secs(60),
            compression: Compression::None,
            delivery_timeout: Duration::from_secs(120),
            retries: i32::MAX as u32,
            max_in_flight: 5,
            max_request_size: 1024 * 1024,
            enable_idempotence: true,
            idempotence_explicit: false,
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
            partitioner_ignore_keys: false,
        }
    }
}

/// Consumer settings.
///
/// # Examples
/// ```
/// use onceflow::client::{AutoOffsetReset, ConsumerConfig, IsolationLevel};
/// let config = ConsumerConfig {
///     group_id: Some("cleaners".into()),
///     isolation_level: IsolationLevel::ReadCommitted,
///     auto_offset_reset: AutoOffsetReset::Earliest,
///     enable_auto_commit: false,
///     ..ConsumerConfig::default()
/// };
/// ```
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Shared settings.
    pub client: ClientConfig,
    /// `group.id`.
    pub group_id: Option<String>,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// `group.protocol`: `classic` (default) or `consumer` (KIP-848).
    pub group_protocol: GroupProtocol,
    /// `group.remote.assignor`: the coordinator's assignor for a `consumer`-protocol member
    /// (`uniform` or `range` on Apache Kafka; none: the broker's default, uniform).
    pub group_remote_assignor: Option<String>,
    /// `isolation.level`.
    pub isolation_level: IsolationLevel,
    /// `auto.offset.reset`.
    pub auto_offset_reset: AutoOffsetReset,
    /// `fetch.min.bytes`.
    pub fetch_min_bytes: i32,
    /// `fetch.max.bytes`.
    pub fetch_max_bytes: i32,
    /// `fetch.max.wait.ms`.
    pub fetch_max_wait: Duration,
    /// `max.partition.fetch.bytes`.
    pub max_partition_fetch_bytes: i32,
    /// `max.poll.records`.
    pub max_poll_records: usize,
    /// `enable.auto.commit`.
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms`.
    pub auto_commit_interval: Duration,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms`.
    pub max_poll_interval: Duration,
    /// `check.crcs` (default true): verify the checksum of every batch (and v0/v1 message)
    /// fetched, as the Java consumer does. False skips it, as in Java; with the hardware crc32c
    /// the check costs little, and a corrupt batch then reaches the application unnoticed.
    pub check_crcs: bool,
    /// `allow.auto.create.topics` (default true, as in the Java consumer; librdkafka spells it
    /// the same but defaults to false): whether assigning or subscribing to a topic that does
    /// not exist asks the broker to create it. The broker's `auto.create.topics.enable` decides.
    pub allow_auto_create_topics: bool,
    /// `fetch.sessions.enable` (default true; the Java consumer has no such switch and always
    /// asks for sessions): use incremental fetch sessions (KIP-227), so that a request names
    /// only the partitions whose fetch state changed. False sends every partition in every
    /// request (session id 0, epoch -1), as before sessions existed.
    pub fetch_sessions_enable: bool,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            client: ClientConfig::default(),
            group_id: None,
            group_instance_id: None,
            group_protocol: GroupProtocol::Classic,
            group_remote_assignor: None,
            isolation_level: IsolationLevel::ReadUncommitted,
            auto_offset_reset: AutoOffsetReset::Latest,
            fetch_min_bytes: 1,
            fetch_max_bytes: 50 * 1024 * 1024,
            fetch_max_wait: Duration::from_millis(500),
            max_partition_fetch_bytes: 1024 * 1024,
            max_poll_records: 500,
            enable_auto_commit: true,
            auto_commit_interval: Duration::from_secs(5),
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(3),
            max_poll_interval: Duration::from_secs(300),
            check_crcs: true,
            allow_auto_create_topics: true,
            fetch_sessions_enable: true,
        }
    }
}

/// librdkafka spellings accepted for their Java equivalents.
fn canonical(name: &str) -> &str {
    match name {
        "metadata.broker.list" => "bootstrap.servers",
        "queue.buffering.max.ms" => "linger.ms",
        "compression.codec" => "compression.type",
        "message.timeout.ms" => "delivery.timeout.ms",
        "request.required.acks" => "acks",
        "max.in.flight" => "max.in.flight.requests.per.connection",
        "socket.timeout.ms" => "request.timeout.ms",
        other => other,
    }
}

impl ClientConfig {
    /// Applies one shared property. `Ok(false)` when the name is not a shared property.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a bad value.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ClientConfig;
    /// let mut c = ClientConfig::default();
    /// assert!(c.set("bootstrap.servers", "kafka-1:9092,kafka-2:9092")?);
    /// assert_eq!(c.bootstrap_servers, ["kafka-1:9092", "kafka-2:9092"]);
    /// assert!(!c.set("linger.ms", "5")?); // a producer property, not a shared one
    /// assert!(c.set("bootstrap.servers", "kafka-1").is_err()); // no port
    /// # Ok::<(), onceflow::client::ConfigError>(())
    /// ```
    pub fn set(&mut self, name: &str, value: &str) -> Result<bool, ConfigError> {
        match canonical(name) {
            "bootstrap.servers" => {
                let servers: Vec<String> = value
                    .split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect();
                if servers.is_empty() || servers.iter().any(|s| !looks_like_host_port(s)) {
                    return Err(invalid(name, value, "a comma-separated list of host:port"));
                }
                self.bootstrap_servers = servers;
            }
            "client.id" => self.client_id = value.trim().to_owned(),
            "request.timeout.ms" => self.request_timeout = parse_ms(name, value)?,
            "socket.connection.setup.timeout.ms" => self.connect_timeout = parse_ms(name, value)?,
            "reconnect.backoff.ms" => self.reconnect_backoff = parse_ms(name, value)?,
            "reconnect.backoff.max.ms" => self.reconnect_backoff_max = parse_ms(name, value)?,
            "retry.backoff.ms" => self.retry_backoff = parse_ms(name, value)?,
            "retry.backoff.max.ms" => self.retry_backoff_max = parse_ms(name, value)?,
            "metadata.max.age.ms" => self.metadata_max_age = parse_ms(name, value)?,
            "default.api.timeout.ms" => self.api_timeout = parse_ms(name, value)?,
            other => return self.security.set(other, value),
        }
        Ok(true)
    }
}

/// Whether `s` has the shape host:port with a numeric port.
pub(crate) fn looks_like_host_port(s: &str) -> bool {
    match s.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}

impl ProducerConfig {
    /// How the producer looks a topic up, as the Java producer does: always asking the broker to
    /// create it (`auto.create.topics.enable` on the broker decides), and waiting up to
    /// `max.block.ms` for it to appear, so a topic created a moment ago (or being created) is
    /// not refused on the first UNKNOWN_TOPIC_OR_PARTITION.
    pub(crate) fn topic_lookup(&self) -> TopicLookup {
        TopicLookup {
            auto_create: true,
            deadline: self.max_block,
            deadline_name: "max.block.ms",
        }
    }

    /// Builds a config from Kafka property names, starting from the defaults.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first unknown property or bad value.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ProducerConfig;
    /// let c = ProducerConfig::from_properties([("linger.ms", "20"), ("acks", "1")]).unwrap();
    /// assert_eq!(c.linger.as_millis(), 20);
    /// assert!(ProducerConfig::from_properties([("lingr.ms", "20")]).is_err());
    /// ```
    pub fn from_properties<K: AsRef<str>, V: AsRef<str>>(
        props: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, ConfigError> {
        let mut c = ProducerConfig::default();
        for (k, v) in props {
            c.set(k.as_ref(), v.as_ref())?;
        }
        c.normalize();
        c.validate()?;
        Ok(c)
    }

    /// Turns the default idempotence off where the user's other settings contradict it and
    /// idempotence was not asked for explicitly (the Java client's rule).
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::{Acks, ProducerConfig};
    /// let mut c = ProducerConfig { acks: Acks::Leader, ..ProducerConfig::default() };
    /// c.normalize(); // acks=1 and idempotence only by default: idempotence goes
    /// assert!(!c.enable_idempotence);
    /// assert!(c.validate().is_ok());
    /// ```
    pub fn normalize(&mut self) {
        let contradicted = self.acks != Acks::All || self.retries == 0 || self.max_in_flight > 5;
        if self.enable_idempotence
            && !self.idempotence_explicit
            && self.transactional_id.is_none()
            && contradicted
        {
            self.enable_idempotence = false;
        }
    }

    /// Applies one property.
    ///
    /// # Errors
    /// [`ConfigError`] for an unknown name or a bad value.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ProducerConfig;
    /// let mut c = ProducerConfig::default();
    /// c.set("compression.type", "zstd")?;
    /// c.set("queue.buffering.max.ms", "10")?; // librdkafka's name for linger.ms
    /// assert_eq!(c.linger.as_millis(), 10);
    /// assert!(c.set("acks", "most").is_err());
    /// # Ok::<(), onceflow::client::ConfigError>(())
    /// ```
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        if self.client.set(name, value)? {
            return Ok(());
        }
        match canonical(name) {
            "acks" => {
                self.acks = match value.trim() {
                    "0" => Acks::None,
                    "1" => Acks::Leader,
                    "all" | "-1" => Acks::All,
                    _ => return Err(invalid(name, value, "0, 1, all or -1")),
                }
            }
            "linger.ms" => self.linger = parse_ms(name, value)?,
            "batch.size" => self.batch_size = parse_usize(name, value)?.max(1),
            "buffer.memory" => self.buffer_memory = parse_usize(name, value)?,
            "max.block.ms" => self.max_block = parse_ms(name, value)?,
            "compression.type" => {
                self.compression = match value.trim().to_ascii_lowercase().as_str() {
                    "none" => Compression::None,
                    "gzip" => Compression::Gzip,
                    "snappy" => Compression::Snappy,
                    "lz4" => Compression::Lz4,
                    "zstd" => Compression::Zstd,
                    _ => return Err(invalid(name, value, "none, gzip, snappy, lz4 or zstd")),
                }
            }
            "delivery.timeout.ms" => self.delivery_timeout = parse_ms(name, value)?,
            "retries" => {
                self.retries = value
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| invalid(name, value, "a non-negative integer"))?
            }
            "max.in.flight.requests.per.connection" => {
                self.max_in_flight = parse_usize(name, value)?;
                if self.max_in_flight == 0 {
                    return Err(invalid(name, value, "at least 1"));
                }
            }
            "max.request.size" => self.max_request_size = parse_usize(name, value)?,
            "enable.idempotence" => {
                self.enable_idempotence = parse_bool(name, value)?;
                self.idempotence_explicit = true;
            }
            "transactional.id" => self.transactional_id = Some(non_empty(name, value)?),
            "transaction.timeout.ms" => self.transaction_timeout = parse_ms(name, value)?,
            "partitioner.ignore.keys" => self.partitioner_ignore_keys = parse_bool(name, value)?,
            // Accepted for compatibility; onceflow's partitioner is always the Java default.
            "partitioner.class" | "key.serializer" | "value.serializer" => {}
            _ => {
                return Err(ConfigError::Unknown {
                    name: name.to_owned(),
                    role: "producer",
                })
            }
        }
        Ok(())
    }

    /// Checks settings that contradict each other.
    ///
    /// # Errors
    /// [`ConfigError::Conflict`] naming both settings.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::{Acks, ProducerConfig};
    /// let c = ProducerConfig {
    ///     acks: Acks::Leader,
    ///     transactional_id: Some("rides-cleaner-0".into()),
    ///     ..ProducerConfig::default()
    /// };
    /// let e = c.validate().unwrap_err();
    /// assert!(e.to_string().contains("acks=all"), "{e}");
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.enable_idempotence || self.transactional_id.is_some() {
            let why = if self.transactional_id.is_some() {
                "transactional.id is set"
            } else {
                "enable.idempotence=true"
            };
            if self.acks != Acks::All {
                return Err(ConfigError::Conflict(format!(
                    "{why} requires acks=all, but acks={}; set acks=all or enable.idempotence=false",
                    match self.acks {
                        Acks::None => "0",
                        Acks::Leader => "1",
                        Acks::All => "all",
                    }
                )));
            }
            if self.retries == 0 {
                return Err(ConfigError::Conflict(format!(
                    "{why} requires retries > 0, but retries=0; raise retries or set enable.idempotence=false"
                )));
            }
            if self.max_in_flight > 5 {
                return Err(ConfigError::Conflict(format!(
                    "{why} requires max.in.flight.requests.per.connection <= 5, but it is {}",
                    self.max_in_flight
                )));
            }
        }
        if self.delivery_timeout < self.linger + self.client.request_timeout {
            return Err(ConfigError::Conflict(format!(
                "delivery.timeout.ms ({} ms) must be at least linger.ms + request.timeout.ms ({} ms)",
                self.delivery_timeout.as_millis(),
                (self.linger + self.client.request_timeout).as_millis()
            )));
        }
        Ok(())
    }
}

impl ConsumerConfig {
    /// How the consumer looks a topic up (`assign`, a group leader's assignment): with
    /// `allow.auto.create.topics` it asks the broker to create the topic and waits for it up to
    /// `default.api.timeout.ms`; without, a topic that does not exist is an error at once.
    pub(crate) fn topic_lookup(&self) -> TopicLookup {
        TopicLookup {
            auto_create: self.allow_auto_create_topics,
            deadline: self.client.api_timeout,
            deadline_name: "default.api.timeout.ms",
        }
    }

    /// How a group leader looks up the subscribed topics it assigns: as [`Self::topic_lookup`],
    /// but waiting at most request.timeout.ms / 2, because the other members wait for the
    /// assignment in SyncGroup, bounded by their request.timeout.ms. A topic the broker creates
    /// appears within that; one it does not create gets no partitions in this rebalance.
    pub(crate) fn leader_topic_lookup(&self) -> TopicLookup {
        TopicLookup {
            deadline: self.client.api_timeout.min(self.client.request_timeout / 2),
            deadline_name: "request.timeout.ms / 2",
            ..self.topic_lookup()
        }
    }

    /// Builds a config from Kafka property names, starting from the defaults.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first unknown property or bad value.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::{ConsumerConfig, IsolationLevel};
    /// let c = ConsumerConfig::from_properties([("isolation.level", "read_committed")]).unwrap();
    /// assert_eq!(c.isolation_level, IsolationLevel::ReadCommitted);
    /// assert!(ConsumerConfig::from_properties([("isolation.level", "committed")]).is_err());
    /// ```
    pub fn from_properties<K: AsRef<str>, V: AsRef<str>>(
        props: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, ConfigError> {
        let mut c = ConsumerConfig::default();
        for (k, v) in props {
            c.set(k.as_ref(), v.as_ref())?;
        }
        Ok(c)
    }

    /// Applies one property.
    ///
    /// # Errors
    /// [`ConfigError`] for an unknown name or a bad value.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::{AutoOffsetReset, ConsumerConfig};
    /// let mut c = ConsumerConfig::default();
    /// c.set("group.id", "cleaners")?;
    /// c.set("auto.offset.reset", "smallest")?; // librdkafka's spelling of earliest
    /// assert_eq!(c.auto_offset_reset, AutoOffsetReset::Earliest);
    /// assert!(c.set("group.idd", "cleaners").is_err());
    /// # Ok::<(), onceflow::client::ConfigError>(())
    /// ```
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        if self.client.set(name, value)? {
            return Ok(());
        }
        match canonical(name) {
            "group.id" => self.group_id = Some(non_empty(name, value)?),
            "group.instance.id" => self.group_instance_id = Some(non_empty(name, value)?),
            "group.protocol" => {
                self.group_protocol = match value.trim().to_ascii_lowercase().as_str() {
                    "classic" => GroupProtocol::Classic,
                    "consumer" => GroupProtocol::Consumer,
                    _ => return Err(invalid(name, value, "classic or consumer")),
                }
            }
            "group.remote.assignor" => self.group_remote_assignor = Some(non_empty(name, value)?),
            "isolation.level" => {
                self.isolation_level = match value.trim() {
                    "read_committed" => IsolationLevel::ReadCommitted,
                    "read_uncommitted" => IsolationLevel::ReadUncommitted,
                    _ => return Err(invalid(name, value, "read_committed or read_uncommitted")),
                }
            }
            "auto.offset.reset" => {
                self.auto_offset_reset = match value.trim() {
                    "earliest" | "smallest" | "beginning" => AutoOffsetReset::Earliest,
                    "latest" | "largest" | "end" => AutoOffsetReset::Latest,
                    "none" | "error" => AutoOffsetReset::None,
                    _ => return Err(invalid(name, value, "earliest, latest or none")),
                }
            }
            "fetch.min.bytes" => self.fetch_min_bytes = parse_i32(name, value)?,
            "fetch.max.bytes" => self.fetch_max_bytes = parse_i32(name, value)?,
            "fetch.max.wait.ms" | "fetch.wait.max.ms" => {
                self.fetch_max_wait = parse_ms(name, value)?
            }
            "max.partition.fetch.bytes" => {
                self.max_partition_fetch_bytes = parse_i32(name, value)?.max(1)
            }
            "max.poll.records" => self.max_poll_records = parse_usize(name, value)?.max(1),
            "enable.auto.commit" => self.enable_auto_commit = parse_bool(name, value)?,
            "auto.commit.interval.ms" => self.auto_commit_interval = parse_ms(name, value)?,
            "session.timeout.ms" => self.session_timeout = parse_ms(name, value)?,
            "heartbeat.interval.ms" => self.heartbeat_interval = parse_ms(name, value)?,
            "max.poll.interval.ms" => self.max_poll_interval = parse_ms(name, value)?,
            "check.crcs" => self.check_crcs = parse_bool(name, value)?,
            "fetch.sessions.enable" => self.fetch_sessions_enable = parse_bool(name, value)?,
            "allow.auto.create.topics" => self.allow_auto_create_topics = parse_bool(name, value)?,
            "key.deserializer" | "value.deserializer" => {}
            _ => {
                return Err(ConfigError::Unknown {
                    name: name.to_owned(),
                    role: "consumer",
                })
            }
        }
        Ok(())
    }
}

/// Splits a `key=value` string as given to `-X`.
///
/// # Errors
/// [`ConfigError::Invalid`] when there is no `=`.
///
/// # Examples
/// ```
/// use onceflow::client::config::split_property;
/// assert_eq!(split_property("linger.ms=20")?, ("linger.ms".to_string(), "20".to_string()));
/// assert_eq!(split_property("sasl.jaas.config=a=b")?.1, "a=b"); // split at the first '='
/// assert!(split_property("linger.ms").is_err());
/// # Ok::<(), onceflow::client::ConfigError>(())
/// ```
pub fn split_property(kv: &str) -> Result<(String, String), ConfigError> {
    match kv.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(invalid(kv, kv, "key=value")),
    }
}

/// How a client role looks a topic up when the cache does not have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TopicLookup {
    /// Ask the broker to create the topic (Metadata allow_auto_topic_creation; the broker's
    /// auto.create.topics.enable decides), and keep asking while it does not know the topic.
    /// Without it an unknown topic is an error at once.
    pub auto_create: bool,
    /// How long to keep asking.
    pub deadline: Duration,
    /// The setting `deadline` comes from, for error messages.
    pub deadline_name: &'static str,
}

impl TopicLookup {
    /// The admin client's lookup: never creates, never waits for an unknown topic.
    pub fn admin(config: &ClientConfig) -> TopicLookup {
        TopicLookup {
            auto_create: false,
            deadline: config.api_timeout,
            deadline_name: "default.api.timeout.ms",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_shapes() {
        assert!(looks_like_host_port("kafka-1.example.com:9092"));
        assert!(!looks_like_host_port("kafka-1.example.com"));
        assert!(!looks_like_host_port("kafka-1:0"));
    }

    #[test]
    fn each_role_looks_a_topic_up_with_its_own_settings() {
        let lookup = ProducerConfig::from_properties([("max.block.ms", "5000")])
            .unwrap()
            .topic_lookup();
        assert!(lookup.auto_create);
        assert_eq!(lookup.deadline, Duration::from_secs(5));
        let c = ConsumerConfig::from_properties([("allow.auto.create.topics", "false")]).unwrap();
        assert!(!c.topic_lookup().auto_create);
        // request.timeout.ms 30 s, default.api.timeout.ms 60 s: the leader waits 15 s.
        let c = ConsumerConfig::default();
        assert_eq!(c.leader_topic_lookup().deadline, Duration::from_secs(15));
        assert!(!TopicLookup::admin(&ClientConfig::default()).auto_create);
    }

    #[test]
    fn unknown_property_is_named() {
        let e = ProducerConfig::from_properties([("linger.msx", "1")]).unwrap_err();
        assert!(e.to_string().contains("'linger.msx'"), "{e}");
        let e = ConsumerConfig::from_properties([("fetch.min.bytes", "-3")]).unwrap_err();
        assert!(e.to_string().contains("fetch.min.bytes"), "{e}");
    }

    #[test]
    fn group_protocol_is_classic_or_consumer() {
        let c = ConsumerConfig::from_properties([("group.protocol", "CONSUMER")]).unwrap();
        assert_eq!(c.group_protocol, GroupProtocol::Consumer);
        assert_eq!(
            ConsumerConfig::default().group_protocol,
            GroupProtocol::Classic
        );
        let e = ConsumerConfig::from_properties([("group.protocol", "next")]).unwrap_err();
        assert!(e.to_string().contains("classic or consumer"), "{e}");
        let e = ConsumerConfig::from_properties([("group.remote.assignor", "")]).unwrap_err();
        assert!(e.to_string().contains("group.remote.assignor"), "{e}");
    }

    #[test]
    fn idempotence_needs_acks_all() {
        let e = ProducerConfig::from_properties([("enable.idempotence", "true"), ("acks", "1")])
            .unwrap_err();
        assert!(e.to_string().contains("acks=all"), "{e}");
        assert!(ProducerConfig::from_properties([("enable.idempotence", "true")]).is_ok());
    }

    #[test]
    fn librdkafka_aliases_map_to_java_names() {
        let c = ProducerConfig::from_properties([
            ("metadata.broker.list", "a:1,b:2"),
            ("queue.buffering.max.ms", "7"),
        ])
        .unwrap();
        assert_eq!(c.client.bootstrap_servers, vec!["a:1", "b:2"]);
        assert_eq!(c.linger, Duration::from_millis(7));
    }

    #[test]
    fn consumer_auto_create_follows_allow_auto_create_topics() {
        let c = ConsumerConfig::default();
        assert!(c.topic_lookup().auto_create, "default true, as in Java");
        let c = ConsumerConfig::from_properties([("allow.auto.create.topics", "false")]).unwrap();
        assert!(!c.topic_lookup().auto_create);
        let p = ProducerConfig::from_properties([("max.block.ms", "1234")]).unwrap();
        assert!(p.topic_lookup().auto_create);
        assert_eq!(p.topic_lookup().deadline, Duration::from_millis(1234));
    }

    #[test]
    fn bootstrap_servers_must_be_host_port() {
        assert!(ProducerConfig::from_properties([("bootstrap.servers", "localhost")]).is_err());
        assert!(ProducerConfig::from_properties([("bootstrap.servers", "h:0")]).is_err());
    }
}
