//! Consumer groups: the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, with the
//! `range` and `cooperative-sticky` assignors) and, with `group.protocol=consumer`, the KIP-848
//! protocol (`consumer_protocol`: ConsumerGroupHeartbeat, the coordinator assigns); static
//! membership, rebalance callbacks and offset commits under both. What follows is the classic
//! member; the consumer-protocol member's life is in `consumer_protocol`'s module docs.
//!
//! A member's life: [`GroupConsumer::subscribe`] → the first [`GroupConsumer::poll`] joins
//! (JoinGroup until the coordinator has everyone; the leader computes the assignment; SyncGroup
//! hands it out). From SyncGroup on a background task heartbeats every heartbeat.interval.ms,
//! also while the new partitions' committed offsets are fetched (with RequireStable, which can
//! wait as long as an open transaction holds them); each new partition is handed to the
//! [`Consumer`] underneath and to `on_assigned` once its starting offset is known. When the
//! coordinator says REBALANCE_IN_PROGRESS the next poll rejoins. Under `range` (eager) every
//! partition is revoked first; under `cooperative-sticky` only those moving to another member,
//! in a second rebalance. If the application does not poll within max.poll.interval.ms the task
//! gives the membership up (a dynamic member sends LeaveGroup, a static one just stops
//! heartbeating) and the next poll reports the partitions *lost* — another member may already
//! own them. A member fenced by another with the same group.instance.id stops for good: every
//! later poll returns [`Error::Fenced`].
//!
//! Rebalance callbacks run inside `poll`, in the application's task, like the Java client's:
//! `on_revoked` finishes before the partitions are given up, so a transactional application
//! can abort or commit there.

pub mod assignor;
mod codec;
mod consumer_protocol;
pub mod describe;
pub mod listing;
mod member_phase;
mod metadata;
pub(crate) mod offsets;

pub use describe::{GroupDescription, GroupMember, GroupState};
pub use listing::{
    ConsumerGroupDescription, GroupListing, GroupType, MemberDescription, PartitionLag,
};
pub use metadata::GroupMetadata;

use super::cluster::Stale;
use super::consumer::{Consumer, ConsumerRecord, Offset};
use super::coordinator::CoordinatorKind;
use super::error::{Error, Result};
use super::metadata::{MetadataSnapshot, TopicPartition};
use super::{Cluster, ConsumerConfig};
use crate::protocol::ErrorCode;
use assignor::{Assignment, MemberSubscription};
use futures::future::BoxFuture;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;
use member_phase::{next, MemberEvent, MemberPhase};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, info, info_span, warn, Instrument};

/// Hooks called inside `poll` around a rebalance.
///
/// # Examples
/// ```no_run
/// use futures::future::BoxFuture;
/// use onceflow::client::group::{GroupConsumer, RebalanceListener};
/// use onceflow::client::TopicPartition;
/// struct Log;
/// impl RebalanceListener for Log {
///     fn on_assigned<'a>(&'a self, tps: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
///         Box::pin(async move { println!("assigned {tps:?}") })
///     }
///     fn on_revoked<'a>(&'a self, tps: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
///         Box::pin(async move { println!("giving up {tps:?}: commit here") })
///     }
///     fn on_lost<'a>(&'a self, tps: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
///         Box::pin(async move { println!("lost {tps:?}: do not commit for them") })
///     }
/// }
/// # fn demo(consumer: &mut GroupConsumer) {
/// consumer.set_listener(std::sync::Arc::new(Log));
/// # }
/// ```
pub trait RebalanceListener: Send + Sync {
    /// Partitions newly assigned to this member, after their positions are set.
    fn on_assigned<'a>(&'a self, partitions: &'a [TopicPartition]) -> BoxFuture<'a, ()>;
    /// Partitions about to be given up, while this member still owns them: commit (or abort a
    /// transaction) here.
    fn on_revoked<'a>(&'a self, partitions: &'a [TopicPartition]) -> BoxFuture<'a, ()>;
    /// Partitions this member lost without a chance to give them up (session expired, fenced):
    /// another member may own them already, so do not commit for them.
    fn on_lost<'a>(&'a self, partitions: &'a [TopicPartition]) -> BoxFuture<'a, ()>;
}

/// The assignment strategies, in preference order, as JoinGroup announces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Eager range assignment.
    Range,
    /// Incremental cooperative rebalancing with sticky assignment.
    CooperativeSticky,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Range => "range",
            Strategy::CooperativeSticky => "cooperative-sticky",
        }
    }
}

#[derive(Debug, Default)]
struct MemberState {
    member_id: String,
    generation: i32,
    protocol: Option<String>,
    assigned: Vec<TopicPartition>,
    /// Joining, stable, rejoin needed, lost, failed: see [`member_phase`].
    phase: MemberPhase,
    last_poll: Option<Instant>,
    /// This member can go on no more (fenced by another member with its group.instance.id,
    /// not authorized): every poll returns this. Set exactly when `phase` is `Failed`.
    fatal: Option<Error>,
    /// The KIP-848 member's phase, target and acknowledgements (group.protocol=consumer; the
    /// classic member's `phase` then stays `Unjoined`). Its member epoch is `generation`.
    cg: consumer_protocol::State,
}

impl MemberState {
    /// Moves the phase on `event`; a transition that cannot happen leaves it as it is (and is
    /// logged): only the events every phase accepts are applied this way.
    fn on(&mut self, event: MemberEvent) {
        match next(self.phase, event) {
            Ok(p) => self.phase = p,
            Err(e) => {
                warn!(error = %e, phase = ?self.phase, ?event, "group member transition refused")
            }
        }
    }

    /// The member can go on no more: every poll returns `e`.
    fn fail(&mut self, e: Error) {
        self.fatal = Some(e);
        self.on(MemberEvent::Fatal);
        self.cg.fail();
    }
}

/// The group APIs whose error codes decide what the member does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupApi {
    JoinGroup,
    SyncGroup,
    Heartbeat,
}

/// What the member does about the error code of a JoinGroup, SyncGroup or Heartbeat answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reaction {
    /// No error.
    Proceed,
    /// MEMBER_ID_REQUIRED (KIP-394): join again with the member id the answer carries.
    JoinWithGivenMemberId,
    /// The group is rebalancing: (re)join, keeping member id, generation and partitions.
    Rejoin,
    /// The generation is gone, the member id may still be valid: forget the generation; the
    /// partitions are lost; rejoin.
    ResetGenerationAndRejoin,
    /// The coordinator does not know the member (its session expired): forget member id and
    /// generation; the partitions are lost; rejoin.
    ResetMemberAndRejoin,
    /// The coordinator moved or is not up: look it up again, retry after a backoff.
    FindCoordinatorAndRetry,
    /// Transient: retry after a backoff (a heartbeat: at the next interval).
    RetryAfterBackoff,
    /// Another member with the same group.instance.id took over: fatal for this member.
    Fenced,
    /// Retrying cannot help.
    Fatal,
}

/// The one place that decides what a group error code means, as the Java client's
/// AbstractCoordinator handles it. A heartbeat that fails for a reason not listed is sent
/// again at the next interval (as Java does): if the failures go on, the session expires and
/// the coordinator answers UNKNOWN_MEMBER_ID. A JoinGroup or SyncGroup that fails for a reason
/// not listed is fatal.
pub(crate) fn reaction(api: GroupApi, code: ErrorCode) -> Reaction {
    use GroupApi::*;
    match (api, code) {
        (_, ErrorCode(0)) => Reaction::Proceed,
        (JoinGroup, ErrorCode::MEMBER_ID_REQUIRED) => Reaction::JoinWithGivenMemberId,
        (_, ErrorCode::REBALANCE_IN_PROGRESS) => Reaction::Rejoin,
        (_, ErrorCode::ILLEGAL_GENERATION) => Reaction::ResetGenerationAndRejoin,
        (_, ErrorCode::UNKNOWN_MEMBER_ID) => Reaction::ResetMemberAndRejoin,
        (_, ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE) => {
            Reaction::FindCoordinatorAndRetry
        }
        (_, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS) => Reaction::RetryAfterBackoff,
        (_, ErrorCode::FENCED_INSTANCE_ID) => Reaction::Fenced,
        (_, ErrorCode::GROUP_AUTHORIZATION_FAILED) => Reaction::Fatal,
        (Heartbeat, _) => Reaction::RetryAfterBackoff,
        _ => Reaction::Fatal,
    }
}

/// The error of a member whose group.instance.id another member took over.
pub(crate) fn fenced_error(group: &str, instance_id: Option<&str>) -> Error {
    Error::Fenced(format!(
        "consumer group '{group}': another member with the same group.instance.id '{}' took over (FENCED_INSTANCE_ID); this member stops. Give every running instance its own group.instance.id",
        instance_id.unwrap_or_default()
    ))
}

struct Shared {
    cluster: Arc<Cluster>,
    config: ConsumerConfig,
    group_id: String,
    state: Mutex<MemberState>,
    /// group.protocol=consumer: `poll` wakes the heartbeat task (join, acknowledge) …
    wake: tokio::sync::Notify,
    /// … and waits for its answers (the first answer to a join).
    answered: tokio::sync::Notify,
}

impl Shared {
    fn consumer_protocol(&self) -> bool {
        self.config.group_protocol == super::GroupProtocol::Consumer
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reads a member's current [`GroupMetadata`]; from [`GroupConsumer::metadata_handle`].
#[derive(Clone)]
pub struct GroupMetadataHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for GroupMetadataHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("GroupMetadataHandle")
            .field(&self.get())
            .finish()
    }
}

impl GroupMetadataHandle {
    /// The group id, the member's generation and member id now, and its group.instance.id.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(consumer: &onceflow::client::group::GroupConsumer) {
    /// let handle = consumer.metadata_handle(); // cheap to clone, moves into a listener
    /// let meta = handle.get();
    /// println!("{} generation {} as {}", meta.group_id, meta.generation_id, meta.member_id);
    /// # }
    /// ```
    pub fn get(&self) -> GroupMetadata {
        let st = self.shared.lock();
        GroupMetadata {
            group_id: self.shared.group_id.clone(),
            generation_id: st.generation,
            member_id: st.member_id.clone(),
            group_instance_id: self.shared.config.group_instance_id.clone(),
        }
    }
}

/// A consumer that is a member of a consumer group.
pub struct GroupConsumer {
    consumer: Consumer,
    shared: Arc<Shared>,
    topics: Vec<String>,
    /// A subscription by pattern (group.protocol=consumer: the coordinator resolves it).
    pattern: Option<String>,
    strategies: Vec<Strategy>,
    listener: Option<Arc<dyn RebalanceListener>>,
    heartbeat: tokio::task::JoinHandle<()>,
    last_auto_commit: Instant,
    /// Partitions the group assigned whose starting offsets are not known yet (the committed
    /// offsets were not available: an open transaction holds them). The consumer underneath
    /// gets them, and `on_assigned` is called, once they are.
    pending: Vec<TopicPartition>,
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

impl GroupConsumer {
    /// Connects; nothing is joined until the first poll after [`Self::subscribe`].
    ///
    /// # Errors
    /// [`Error::Config`] when group.id is missing, or a connection error.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{ConsumerConfig, group::GroupConsumer};
    /// let config = ConsumerConfig::from_properties([("group.id", "cleaners"), ("auto.offset.reset", "earliest")])?;
    /// let mut c = GroupConsumer::new(config).await?;
    /// c.subscribe(&["rides"]);
    /// loop {
    ///     for r in c.poll(std::time::Duration::from_secs(1)).await? {
    ///         println!("{}-{}@{}", r.topic, r.partition, r.offset);
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn new(config: ConsumerConfig) -> Result<GroupConsumer> {
        let cluster = Cluster::connect(config.client.clone()).await?;
        Self::with_cluster(config, cluster)
    }

    /// A group member on an existing broker pool.
    ///
    /// # Errors
    /// [`Error::Config`] when group.id is missing.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{group::GroupConsumer, Cluster, ConsumerConfig, Producer, ProducerConfig};
    /// let config = ConsumerConfig::from_properties([("group.id", "cleaners")])?;
    /// // The member and a transactional producer on one set of connections.
    /// let cluster = Cluster::connect(config.client.clone()).await?;
    /// let member = GroupConsumer::with_cluster(config, cluster.clone())?;
    /// let producer = Producer::with_cluster(ProducerConfig::default(), cluster).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_cluster(config: ConsumerConfig, cluster: Arc<Cluster>) -> Result<GroupConsumer> {
        let group_id = config
            .group_id
            .clone()
            .ok_or(super::ConfigError::Missing("group.id"))?;
        let shared = Arc::new(Shared {
            cluster: cluster.clone(),
            config: config.clone(),
            group_id,
            state: Mutex::new(MemberState {
                generation: -1,
                ..Default::default()
            }),
            wake: tokio::sync::Notify::new(),
            answered: tokio::sync::Notify::new(),
        });
        let heartbeat = if shared.consumer_protocol() {
            tokio::spawn(consumer_protocol::heartbeat_loop(shared.clone()))
        } else {
            tokio::spawn(heartbeat_loop(shared.clone()))
        };
        Ok(GroupConsumer {
            consumer: Consumer::with_cluster(config, cluster),
            shared,
            topics: Vec::new(),
            pattern: None,
            strategies: vec![Strategy::Range, Strategy::CooperativeSticky],
            listener: None,
            heartbeat,
            last_auto_commit: Instant::now(),
            pending: Vec::new(),
        })
    }

    /// Subscribes to topics; takes effect at the next poll (a rebalance).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::group::GroupConsumer) -> onceflow::client::Result<()> {
    /// consumer.subscribe(&["rides", "payments"]);
    /// // Joins the group (or rebalances it), then reads the partitions assigned.
    /// let records = consumer.poll(std::time::Duration::from_secs(1)).await?;
    /// # Ok(()) }
    /// ```
    pub fn subscribe(&mut self, topics: &[&str]) {
        self.topics = topics.iter().map(|t| t.to_string()).collect();
        self.pattern = None;
        if self.shared.consumer_protocol() {
            // The next heartbeat names the new subscription; the coordinator reassigns.
            let mut st = self.shared.lock();
            st.cg.subscribe(self.topics.clone(), None);
            drop(st);
            self.shared.wake.notify_one();
        } else {
            self.shared.lock().on(MemberEvent::RejoinRequested);
        }
    }

    /// Subscribes to every topic whose name matches `pattern`, a regular expression in the
    /// broker's syntax (RE2/J, matched against the whole name), now and as topics come and go:
    /// the coordinator resolves it (KIP-848). Takes effect at the next poll.
    ///
    /// # Errors
    /// [`Error::Usage`] under group.protocol=classic (whose members would resolve the pattern
    /// themselves, which this client does not do) or for an empty pattern.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{ConsumerConfig, group::GroupConsumer};
    /// let config = ConsumerConfig::from_properties([
    ///     ("group.id", "cleaners"),
    ///     ("group.protocol", "consumer"),
    /// ])?;
    /// let mut c = GroupConsumer::new(config).await?;
    /// c.subscribe_pattern("rides-.*")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe_pattern(&mut self, pattern: &str) -> Result<()> {
        if !self.shared.consumer_protocol() {
            return Err(Error::Usage(format!(
                "subscribe_pattern('{pattern}') needs group.protocol=consumer (the coordinator resolves the pattern); with group.protocol=classic subscribe to topic names"
            )));
        }
        if pattern.is_empty() {
            return Err(Error::Usage(
                "subscribe_pattern: the pattern is empty; give a regular expression such as 'rides-.*'".into(),
            ));
        }
        self.topics.clear();
        self.pattern = Some(pattern.to_owned());
        let mut st = self.shared.lock();
        st.cg.subscribe(Vec::new(), self.pattern.clone());
        drop(st);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// The assignment strategies to announce, most preferred first (default: range, then
    /// cooperative-sticky, as the Java client). The group uses the first one every member
    /// supports. Classic protocol only: under group.protocol=consumer the coordinator assigns
    /// (group.remote.assignor).
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(consumer: &mut onceflow::client::group::GroupConsumer) {
    /// use onceflow::client::group::Strategy;
    /// // Incremental rebalances only: members keep reading the partitions that do not move.
    /// consumer.set_strategies(&[Strategy::CooperativeSticky]);
    /// consumer.subscribe(&["rides"]);
    /// # }
    /// ```
    pub fn set_strategies(&mut self, strategies: &[Strategy]) {
        if !strategies.is_empty() {
            self.strategies = strategies.to_vec();
        }
    }

    /// Sets the rebalance callbacks.
    ///
    /// # Examples
    /// ```no_run
    /// # use futures::future::BoxFuture;
    /// # use onceflow::client::{group::RebalanceListener, TopicPartition};
    /// # struct Log;
    /// # impl RebalanceListener for Log {
    /// #     fn on_assigned<'a>(&'a self, _: &'a [TopicPartition]) -> BoxFuture<'a, ()> { Box::pin(async {}) }
    /// #     fn on_revoked<'a>(&'a self, _: &'a [TopicPartition]) -> BoxFuture<'a, ()> { Box::pin(async {}) }
    /// #     fn on_lost<'a>(&'a self, _: &'a [TopicPartition]) -> BoxFuture<'a, ()> { Box::pin(async {}) }
    /// # }
    /// # fn demo(consumer: &mut onceflow::client::group::GroupConsumer) {
    /// // `Log` implements RebalanceListener (see its example).
    /// consumer.set_listener(std::sync::Arc::new(Log));
    /// # }
    /// ```
    pub fn set_listener(&mut self, listener: Arc<dyn RebalanceListener>) {
        self.listener = Some(listener);
    }

    /// The partitions this member owns now.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::group::GroupConsumer) -> onceflow::client::Result<()> {
    /// consumer.poll(std::time::Duration::from_secs(1)).await?;
    /// println!("this member owns {:?}", consumer.assignment());
    /// # Ok(()) }
    /// ```
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.shared.lock().assigned.clone()
    }

    /// The group's metadata for [`crate::client::Producer::send_offsets_to_transaction`]: with
    /// the generation and member id the coordinator fences a zombie (KIP-447).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(
    /// #     mut consumer: onceflow::client::group::GroupConsumer,
    /// #     producer: onceflow::client::Producer,
    /// # ) -> onceflow::client::Result<()> {
    /// producer.begin_transaction()?;
    /// // ... send what the records polled gave ...
    /// producer.send_offsets_to_transaction(&consumer.positions(), &consumer.group_metadata()).await?;
    /// producer.commit_transaction().await?;
    /// # Ok(()) }
    /// ```
    pub fn group_metadata(&self) -> GroupMetadata {
        self.metadata_handle().get()
    }

    /// A handle reading [`Self::group_metadata`] as it is when asked: what a rebalance
    /// callback needs to commit a transaction (it has no access to the consumer), with the
    /// generation the member is in at that moment.
    ///
    /// # Examples
    /// ```no_run
    /// use futures::future::BoxFuture;
    /// use onceflow::client::group::{GroupMetadataHandle, RebalanceListener};
    /// use onceflow::client::TopicPartition;
    /// struct OnRevoke(GroupMetadataHandle);
    /// impl RebalanceListener for OnRevoke {
    ///     fn on_revoked<'a>(&'a self, tps: &'a [TopicPartition]) -> BoxFuture<'a, ()> {
    ///         // The generation the partitions are given up in, for send_offsets_to_transaction.
    ///         Box::pin(async move { println!("generation {}: {tps:?}", self.0.get().generation_id) })
    ///     }
    /// #   fn on_assigned<'a>(&'a self, _: &'a [TopicPartition]) -> BoxFuture<'a, ()> { Box::pin(async {}) }
    /// #   fn on_lost<'a>(&'a self, _: &'a [TopicPartition]) -> BoxFuture<'a, ()> { Box::pin(async {}) }
    /// }
    /// # fn demo(consumer: &mut onceflow::client::group::GroupConsumer) {
    /// let handle = consumer.metadata_handle();
    /// consumer.set_listener(std::sync::Arc::new(OnRevoke(handle)));
    /// # }
    /// ```
    pub fn metadata_handle(&self) -> GroupMetadataHandle {
        GroupMetadataHandle {
            shared: self.shared.clone(),
        }
    }

    /// The consumer underneath (positions, watermarks).
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(member: &onceflow::client::group::GroupConsumer) {
    /// let consumer = member.consumer();
    /// for tp in member.assignment() {
    ///     if let (Some(position), Some(end)) = (consumer.position(&tp), consumer.end_offset(&tp)) {
    ///         println!("{tp}: lag {}", end - position);
    ///     }
    /// }
    /// # }
    /// ```
    pub fn consumer(&self) -> &Consumer {
        &self.consumer
    }

    /// Moves an owned partition's position (e.g. back to the committed offset after a
    /// transaction aborted).
    ///
    /// # Errors
    /// [`Error::Usage`] when the partition is not owned.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::group::GroupConsumer) -> onceflow::client::Result<()> {
    /// use onceflow::client::{Offset, TopicPartition};
    /// let tp = TopicPartition::new("rides", 0);
    /// if consumer.assignment().contains(&tp) {
    ///     consumer.seek(&tp, Offset::Beginning)?; // read the partition again from its start
    /// }
    /// # Ok(()) }
    /// ```
    pub fn seek(&mut self, tp: &TopicPartition, offset: Offset) -> Result<()> {
        self.consumer.seek(tp, offset)
    }

    /// Rewinds every owned partition to the group's committed offset (or auto.offset.reset
    /// where there is none): after an aborted transaction, the records it consumed are read
    /// again.
    ///
    /// # Errors
    /// OffsetFetch failures.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(
    /// #     mut consumer: onceflow::client::group::GroupConsumer,
    /// #     producer: onceflow::client::Producer,
    /// # ) -> onceflow::client::Result<()> {
    /// if let Err(e) = producer.commit_transaction().await {
    ///     eprintln!("transaction failed: {e}");
    ///     producer.abort_transaction().await?;
    ///     consumer.rewind_to_committed().await?; // its input is read again
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn rewind_to_committed(&mut self) -> Result<()> {
        let owned = self.started();
        let committed =
            offsets::fetch_committed(&self.shared.cluster, &self.shared.group_id, &owned).await?;
        let reset = match self.shared.config.auto_offset_reset {
            super::AutoOffsetReset::Latest => Offset::End,
            _ => Offset::Beginning,
        };
        for tp in &owned {
            let to = committed.get(tp).map_or(reset, |o| Offset::At(*o));
            self.consumer.seek(tp, to)?;
        }
        Ok(())
    }

    /// The next offsets to commit: the position of every owned partition.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(consumer: &onceflow::client::group::GroupConsumer) {
    /// for (tp, next) in consumer.positions() {
    ///     println!("{tp}: next offset {next}");
    /// }
    /// # }
    /// ```
    pub fn positions(&self) -> Vec<(TopicPartition, i64)> {
        self.assignment()
            .into_iter()
            .filter_map(|tp| self.consumer.position(&tp).map(|p| (tp, p)))
            .collect()
    }

    /// Polls for records, joining or rebalancing first when needed, and auto-committing when
    /// enable.auto.commit is on. Newly assigned partitions whose committed offsets an open
    /// transaction still holds return nothing until it ends; the member stays in the group
    /// meanwhile.
    ///
    /// # Errors
    /// Fatal group errors ([`Error::Fenced`] when another member took over this member's
    /// group.instance.id; GROUP_AUTHORIZATION_FAILED) — every later poll returns the same — and
    /// fetch errors.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::group::GroupConsumer) -> onceflow::client::Result<()> {
    /// consumer.subscribe(&["rides"]);
    /// loop {
    ///     // Poll again within max.poll.interval.ms, or the member is taken out of the group.
    ///     let records = consumer.poll(std::time::Duration::from_millis(500)).await?;
    ///     for r in &records {
    ///         println!("{}-{}@{}", r.topic, r.partition, r.offset);
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = Instant::now() + timeout;
        self.shared.lock().last_poll = Some(Instant::now());
        self.stop_if_fatal().await?;
        let rebalanced = if self.shared.consumer_protocol() {
            self.reconcile(deadline).await
        } else {
            self.maybe_rebalance().await
        };
        if let Err(e) = rebalanced {
            self.stop_if_fatal().await?;
            return Err(e);
        }
        self.start_pending(deadline).await?;
        if self.shared.config.enable_auto_commit
            && self.last_auto_commit.elapsed() >= self.shared.config.auto_commit_interval
        {
            self.last_auto_commit = Instant::now();
            if let Err(e) = self.commit_positions().await {
                warn!(error = %e, "auto commit failed");
            }
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        self.consumer.poll(wait).await
    }

    /// Commits the positions of all owned partitions.
    ///
    /// # Errors
    /// [`Error::CommitFailed`] when the group rebalanced meanwhile (the next poll rejoins).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::group::GroupConsumer) -> onceflow::client::Result<()> {
    /// use onceflow::client::Error;
    /// // With enable.auto.commit=false: commit once the records polled are processed.
    /// let records = consumer.poll(std::time::Duration::from_secs(1)).await?;
    /// // ... process them ...
    /// match consumer.commit_positions().await {
    ///     Ok(()) => {}
    ///     // Rebalanced: their new owner reads them again.
    ///     Err(Error::CommitFailed(why)) => eprintln!("not committed: {why}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn commit_positions(&mut self) -> Result<()> {
        let offsets = self.positions();
        self.commit(&offsets).await
    }

    /// Commits offsets (the next offset to read, as the Java client) for the group.
    ///
    /// # Errors
    /// [`Error::CommitFailed`] when the group rebalanced meanwhile; [`Error::Fenced`] when
    /// another member took over this member's group.instance.id.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::group::GroupConsumer) -> onceflow::client::Result<()> {
    /// use onceflow::client::TopicPartition;
    /// use std::collections::BTreeMap;
    /// let records = consumer.poll(std::time::Duration::from_secs(1)).await?;
    /// // Commit past the last record of each partition processed.
    /// let mut next = BTreeMap::new();
    /// for r in &records {
    ///     next.insert(TopicPartition::new(r.topic.clone(), r.partition), r.offset + 1);
    /// }
    /// consumer.commit(&next.into_iter().collect::<Vec<_>>()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn commit(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        let who = {
            let st = self.shared.lock();
            if let Some(e) = &st.fatal {
                return Err(e.clone());
            }
            offsets::Committer {
                generation: st.generation,
                member_id: st.member_id.clone(),
                instance_id: self.shared.config.group_instance_id.clone(),
                consumer_protocol: self.shared.consumer_protocol(),
            }
        };
        let r = offsets::commit(&self.shared.cluster, &self.shared.group_id, &who, offsets).await;
        match &r {
            // Under the consumer protocol the heartbeat learns what changed by itself.
            Err(Error::CommitFailed(_)) if !who.consumer_protocol => {
                self.shared.lock().on(MemberEvent::RejoinRequested)
            }
            Err(e @ Error::Fenced(_)) => self.shared.lock().fail(e.clone()),
            _ => {}
        }
        r
    }

    /// Leaves the group: commits (with auto commit), calls `on_revoked`, sends LeaveGroup
    /// (static members do not: their partitions wait for them for session.timeout.ms).
    ///
    /// # Errors
    /// Connection errors while leaving.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(consumer: onceflow::client::group::GroupConsumer) -> onceflow::client::Result<()> {
    /// // On shutdown: leave at once, so the group hands the partitions to the other members
    /// // now rather than after session.timeout.ms.
    /// consumer.close().await?;
    /// # Ok(()) }
    /// ```
    pub async fn close(mut self) -> Result<()> {
        if self.shared.lock().fatal.is_some() {
            // Fenced: the membership belongs to another member now; report the partitions
            // lost (if no poll did yet) and leave nothing behind.
            self.heartbeat.abort();
            let _ = self.stop_if_fatal().await;
            return Ok(());
        }
        if self.shared.consumer_protocol() {
            self.close_member().await;
            return Ok(());
        }
        let started = self.started();
        if self.shared.config.enable_auto_commit {
            if let Err(e) = self.commit_positions().await {
                warn!(error = %e, "committing on close failed");
            }
        }
        if let Some(l) = &self.listener {
            l.on_revoked(&started).await;
        }
        self.heartbeat.abort();
        if self.shared.config.group_instance_id.is_none() {
            leave_group(&self.shared).await;
        }
        Ok(())
    }

    /// Owned partitions that were handed to the application (not still waiting for their
    /// committed offsets).
    fn started(&self) -> Vec<TopicPartition> {
        self.assignment()
            .into_iter()
            .filter(|tp| !self.pending.contains(tp))
            .collect()
    }

    /// A fatal error (see [`MemberState::fatal`]): the partitions are lost — another member
    /// owns them now — so the consumer stops fetching them and `on_lost` is called, once; the
    /// error is returned every time.
    async fn stop_if_fatal(&mut self) -> Result<()> {
        let (fatal, gone) = {
            let mut st = self.shared.lock();
            let Some(fatal) = st.fatal.clone() else {
                return Ok(());
            };
            (fatal, std::mem::take(&mut st.assigned))
        };
        if !gone.is_empty() {
            let started: Vec<TopicPartition> = gone
                .into_iter()
                .filter(|tp| !self.pending.contains(tp))
                .collect();
            self.pending.clear();
            self.consumer.assign(Vec::new()).await?;
            warn!(error = %fatal, partitions = started.len(), "partitions lost");
            if !started.is_empty() {
                if let Some(l) = &self.listener {
                    l.on_lost(&started).await;
                }
            }
        }
        Err(fatal)
    }

    async fn maybe_rebalance(&mut self) -> Result<()> {
        loop {
            let (phase, fatal) = {
                let st = self.shared.lock();
                (st.phase, st.fatal.clone())
            };
            if self.topics.is_empty() {
                return Ok(());
            }
            if let Some(e) = fatal {
                // Failed during the last round (a commit answered FENCED_INSTANCE_ID): the
                // caller reports the loss and the error.
                return Err(e);
            }
            if !phase.needs_join() {
                return Ok(());
            }
            if phase == MemberPhase::Lost {
                let gone = {
                    let mut st = self.shared.lock();
                    st.on(MemberEvent::LossReported);
                    std::mem::take(&mut st.assigned)
                };
                let started: Vec<TopicPartition> = gone
                    .into_iter()
                    .filter(|tp| !self.pending.contains(tp))
                    .collect();
                self.pending.clear();
                self.consumer.assign(Vec::new()).await?;
                if !started.is_empty() {
                    warn!(partitions = started.len(), "partitions lost");
                    if let Some(l) = &self.listener {
                        l.on_lost(&started).await;
                    }
                }
            }
            let span = info_span!("rebalance", group = %self.shared.group_id);
            self.rebalance().instrument(span).await?;
        }
    }

    async fn rebalance(&mut self) -> Result<()> {
        // No heartbeats while joining: one sent with the old generation would come back
        // ILLEGAL_GENERATION and make the new assignment look lost.
        {
            let mut st = self.shared.lock();
            st.phase = next(st.phase, MemberEvent::JoinStarted)?;
        }
        let cooperative = self.shared.lock().protocol.as_deref() == Some("cooperative-sticky");
        // Eager protocol: give everything up before joining, committing with the generation
        // the partitions were owned in (still the group's until the join completes).
        if !cooperative && !self.assignment().is_empty() {
            self.revoke_all().await?;
        }
        let owned = self.assignment();
        let joined =
            match join_and_sync(&self.shared, &self.topics, &self.strategies, &owned).await? {
                Joined::Assigned(j) => j,
                Joined::Lost => {
                    // The coordinator removed us (or our generation): what we owned is lost;
                    // the caller reports it and joins again.
                    self.shared.lock().on(MemberEvent::MembershipGone);
                    return Ok(());
                }
            };
        let new: BTreeSet<TopicPartition> = joined.assignment.into_iter().collect();
        let old: BTreeSet<TopicPartition> = owned.iter().cloned().collect();
        let revoked: Vec<TopicPartition> = old.difference(&new).cloned().collect();
        let added: Vec<TopicPartition> = new.difference(&old).cloned().collect();
        let new_list: Vec<TopicPartition> = new.iter().cloned().collect();
        let cooperative = joined.protocol == "cooperative-sticky";
        // The member is in the group from here on (the generation and member id were stored
        // at JoinGroup): heartbeat from now, not only once the new partitions' offsets are
        // known — an open transaction can hold those longer than session.timeout.ms.
        {
            let mut st = self.shared.lock();
            st.assigned = new_list.clone();
            let rejoin = cooperative && !revoked.is_empty();
            st.phase = next(st.phase, MemberEvent::Joined { rejoin })?;
        }
        if !revoked.is_empty() {
            // Cooperative: give these up now; another rebalance hands them to their new owner,
            // which starts at what is committed here (with the new generation, which the
            // coordinator accepts).
            self.give_up(&revoked).await;
        }
        self.pending.retain(|tp| new.contains(tp));
        self.pending.extend(added);
        let running: Vec<TopicPartition> = new_list
            .iter()
            .filter(|tp| !self.pending.contains(tp))
            .cloned()
            .collect();
        self.consumer.assign(running).await?;
        info!(
            generation = joined.generation,
            protocol = %joined.protocol,
            partitions = new_list.len(),
            "joined group"
        );
        Ok(())
    }

    /// Gives up `revoked` while still owning them (both protocols): commits their positions
    /// (with auto commit) and calls `on_revoked` for those handed to the application.
    async fn give_up(&mut self, revoked: &[TopicPartition]) {
        let started: Vec<TopicPartition> = revoked
            .iter()
            .filter(|tp| !self.pending.contains(tp))
            .cloned()
            .collect();
        if self.shared.config.enable_auto_commit {
            let offsets: Vec<_> = started
                .iter()
                .filter_map(|tp| self.consumer.position(tp).map(|p| (tp.clone(), p)))
                .collect();
            if let Err(e) = self.commit(&offsets).await {
                warn!(error = %e, "committing the revoked partitions failed; their next owner starts at the offsets committed before");
            }
        }
        if !started.is_empty() {
            if let Some(l) = &self.listener {
                l.on_revoked(&started).await;
            }
        }
    }

    /// Eager protocol, before joining: commits (with auto commit), calls `on_revoked` and gives
    /// up every owned partition.
    async fn revoke_all(&mut self) -> Result<()> {
        let started = self.started();
        if self.shared.config.enable_auto_commit {
            if let Err(e) = self.commit_positions().await {
                warn!(error = %e, "committing before the rebalance failed");
            }
        }
        if !started.is_empty() {
            if let Some(l) = &self.listener {
                l.on_revoked(&started).await;
            }
        }
        self.shared.lock().assigned.clear();
        self.pending.clear();
        self.consumer.assign(Vec::new()).await
    }

    /// Starts the partitions waiting for their committed offsets, trying until `deadline` (the
    /// poll's): while an open transaction holds them the coordinator answers
    /// UNSTABLE_OFFSET_COMMIT, and the next poll tries again.
    async fn start_pending(&mut self, deadline: Instant) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let committed = match offsets::fetch_committed_until(
            &self.shared.cluster,
            &self.shared.group_id,
            &self.pending,
            deadline,
        )
        .await
        {
            Ok(c) => c,
            Err(e)
                if matches!(
                    e.class(),
                    super::ErrorClass::Retriable | super::ErrorClass::RefreshAndRetry
                ) =>
            {
                debug!(error = %e, partitions = self.pending.len(), "committed offsets not available yet; trying again at the next poll");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let started = std::mem::take(&mut self.pending);
        self.consumer.assign(self.assignment()).await?;
        for tp in &started {
            if let Some(o) = committed.get(tp) {
                self.consumer.seek(tp, Offset::At(*o))?;
            }
        }
        if let Some(l) = &self.listener {
            l.on_assigned(&started).await;
        }
        Ok(())
    }
}

/// What a JoinGroup + SyncGroup round ended in.
enum Joined {
    /// A member of the new generation with this assignment.
    Assigned(Rebalanced),
    /// The coordinator removed the member or its generation (UNKNOWN_MEMBER_ID,
    /// ILLEGAL_GENERATION): whatever it owned is lost; it must join again.
    Lost,
}

/// The result of a successful rebalance.
struct Rebalanced {
    generation: i32,
    protocol: String,
    assignment: Vec<TopicPartition>,
}

/// One JoinGroup (+ SyncGroup) attempt.
/// One join attempt's outcome, in the retry executor's terms: `Done`; `Now` sends JoinGroup
/// again at once (MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS); `Again` after a backoff, looking
/// the coordinator up again if `refresh`.
type Step = crate::client::retry::Step<Joined>;

/// JoinGroup answers only when every member has joined, which may take the whole rebalance
/// timeout (max.poll.interval.ms): allow that plus this, as the Java client does.
const JOIN_GROUP_LAPSE: Duration = Duration::from_secs(5);

/// What a JoinGroup or SyncGroup error code makes of this attempt.
fn step_for(shared: &Shared, api: GroupApi, code: ErrorCode) -> Result<Option<Step>> {
    let group = &shared.group_id;
    match reaction(api, code) {
        Reaction::Proceed => Ok(None),
        // Handled by the caller, which has the answer's member id.
        Reaction::JoinWithGivenMemberId => Ok(Some(Step::Now)),
        Reaction::Rejoin => Ok(Some(Step::Now)),
        Reaction::ResetGenerationAndRejoin => {
            info!(code = %code, api = ?api, "generation reset; joining again");
            let mut st = shared.lock();
            st.generation = -1;
            Ok(Some(Step::Done(Joined::Lost)))
        }
        Reaction::ResetMemberAndRejoin => {
            info!(code = %code, api = ?api, "member id reset; joining again");
            let mut st = shared.lock();
            st.generation = -1;
            st.member_id.clear();
            Ok(Some(Step::Done(Joined::Lost)))
        }
        Reaction::FindCoordinatorAndRetry => Ok(Some(Step::Again {
            why: format!("{api:?} answered {code}"),
            refresh: true,
        })),
        Reaction::RetryAfterBackoff => Ok(Some(Step::Again {
            why: format!("{api:?} answered {code}"),
            refresh: false,
        })),
        Reaction::Fenced => {
            let e = fenced_error(group, shared.config.group_instance_id.as_deref());
            shared.lock().fail(e.clone());
            Err(e)
        }
        Reaction::Fatal => Err(Error::broker(format!("{api:?} for group '{group}'"), code)),
    }
}

/// The leader's assignment: which partitions each member gets, from the members'
/// subscriptions (with the partitions each owns now), the protocol the group chose and the
/// partition count of every subscribed topic. A topic missing from `partition_counts` (its
/// metadata could not be fetched) is assigned to no one. Pure: the caller fetches metadata
/// first.
fn leader_assignment(
    members: &[MemberSubscription],
    protocol: &str,
    partition_counts: &BTreeMap<String, usize>,
) -> Assignment {
    if protocol == Strategy::CooperativeSticky.name() {
        assignor::cooperative_sticky(members, partition_counts)
    } else {
        assignor::range(members, partition_counts)
    }
}

/// The leader's SyncGroup assignments: decodes the members' subscriptions, fetches the
/// partition counts of the topics they subscribe to, and runs [`leader_assignment`].
async fn leader_sync_assignments(
    shared: &Shared,
    members: &[JoinGroupResponseMember],
    protocol: &str,
    (me, my_topics): (&str, &[String]),
) -> Result<Vec<SyncGroupRequestAssignment>> {
    let mut subs = Vec::new();
    for m in members {
        subs.push(codec::decode_subscription(
            m.member_id.to_string(),
            m.group_instance_id.as_ref().map(|i| i.to_string()),
            m.metadata.clone(),
        )?);
    }
    // The leader's own subscription is the one it knows, not the copy the coordinator echoed:
    // a copy damaged on its way (a topic name with a flipped bit still decodes) made the
    // leader assign nothing and the group stay stable with no partitions.
    if let Some(mine) = subs.iter_mut().find(|s| s.member_id == me) {
        if mine.topics != my_topics {
            warn!(echoed = ?mine.topics, ours = ?my_topics, "the coordinator's copy of this member's subscription differs from it; using ours");
            mine.topics = my_topics.to_vec();
        }
    }
    let all_topics: BTreeSet<String> = subs.iter().flat_map(|s| s.topics.iter().cloned()).collect();
    let mut counts = BTreeMap::new();
    for t in all_topics {
        let lookup = shared.config.leader_topic_lookup();
        if let Ok(n) = shared.cluster.partition_count_with(&t, lookup).await {
            counts.insert(t, n);
        }
    }
    let plan = leader_assignment(&subs, protocol, &counts);
    debug!(
        members = subs.len(),
        ?plan,
        "leader computed the assignment"
    );
    let mut assignments = Vec::new();
    for (member, tps) in plan {
        assignments.push(
            SyncGroupRequestAssignment::default()
                .with_member_id(StrBytes::from_string(member))
                .with_assignment(codec::encode_assignment(&tps)?),
        );
    }
    Ok(assignments)
}

fn join_request(
    shared: &Shared,
    topics: &[String],
    strategies: &[Strategy],
    owned: &[TopicPartition],
) -> Result<JoinGroupRequest> {
    let cfg = &shared.config;
    let (member_id, generation) = {
        let st = shared.lock();
        (st.member_id.clone(), st.generation)
    };
    let metadata = codec::encode_subscription(topics, owned, generation)?;
    Ok(JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())))
        .with_session_timeout_ms(cfg.session_timeout.as_millis() as i32)
        .with_rebalance_timeout_ms(cfg.max_poll_interval.as_millis() as i32)
        .with_member_id(StrBytes::from_string(member_id))
        .with_group_instance_id(cfg.group_instance_id.clone().map(StrBytes::from_string))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(
            strategies
                .iter()
                .map(|s| {
                    JoinGroupRequestProtocol::default()
                        .with_name(StrBytes::from_static_str(s.name()))
                        .with_metadata(metadata.clone())
                })
                .collect(),
        ))
}

/// One JoinGroup and, when it admits the member, SyncGroup (the leader computing the
/// assignment in between).
async fn join_and_sync_once(
    shared: &Shared,
    join: &JoinGroupRequest,
    join_timeout: Duration,
    topics: &[String],
) -> Result<Step> {
    let group = &shared.group_id;
    let conn = shared
        .cluster
        .coordinator(CoordinatorKind::Group, group)
        .await?;
    // JoinGroup waits for the whole group: not request.timeout.ms but the rebalance
    // timeout. A shorter limit would cut it off while the coordinator still holds it
    // (and a timed-out request poisons the connection).
    let v = conn.version_for::<JoinGroupRequest>(None)?;
    let resp = conn
        .start_request(join, v)?
        .with_timeout(join_timeout)
        .response()
        .await?;
    let code = ErrorCode(resp.error_code);
    if code == ErrorCode::MEMBER_ID_REQUIRED {
        // KIP-394: join again with the id the coordinator chose.
        shared.lock().member_id = resp.member_id.to_string();
    }
    if let Some(step) = step_for(shared, GroupApi::JoinGroup, code)
        .map_err(|e| e.at_broker("coordinator", conn.addr()))?
    {
        return Ok(step);
    }
    let me = resp.member_id.to_string();
    let generation = resp.generation_id;
    let protocol = resp
        .protocol_name
        .as_ref()
        .map(|p| p.to_string())
        .unwrap_or_else(|| "range".into());
    // The member is in the new generation from the JoinGroup answer on, as in the
    // Java client: what it commits after SyncGroup (a cooperative member commits the
    // partitions it gives up) carries this generation, which the coordinator accepts.
    {
        let mut st = shared.lock();
        st.member_id = me.clone();
        st.generation = generation;
        st.protocol = Some(protocol.clone());
    }
    let listed: Vec<&str> = resp.members.iter().map(|m| m.member_id.as_str()).collect();
    let assignments = match role(resp.leader.as_str(), &me, &listed) {
        Role::Leader => {
            leader_sync_assignments(shared, &resp.members, &protocol, (&me, topics)).await?
        }
        Role::Follower => Vec::new(),
        Role::Unclear => {
            return Ok(Step::Again {
                why: "a JoinGroup answer contradicts itself: a leader without the member list, \
                      or a member list without this member"
                    .into(),
                refresh: false,
            })
        }
    };
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.clone())))
        .with_generation_id(generation)
        .with_member_id(StrBytes::from_string(me))
        .with_group_instance_id(
            shared
                .config
                .group_instance_id
                .clone()
                .map(StrBytes::from_string),
        )
        .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
        .with_protocol_name(Some(StrBytes::from_string(protocol.clone())))
        .with_assignments(assignments);
    // SyncGroup waits only for the leader's assignment: request.timeout.ms, as Java.
    let resp = conn.request(&sync).await?;
    if let Some(step) = step_for(shared, GroupApi::SyncGroup, ErrorCode(resp.error_code))
        .map_err(|e| e.at_broker("coordinator", conn.addr()))?
    {
        return Ok(step);
    }
    let assignment = codec::decode_assignment(resp.assignment.clone())?;
    if let Some(t) = outside_subscription(&assignment, topics) {
        // As the Java member does when an assignment does not match its subscription: join
        // again. Here it also catches a damaged SyncGroup answer: a flipped bit in a topic
        // name left the member owning a topic that does not exist, in a stable group, for
        // ever (the group member under random flips).
        warn!(topic = %t, "assigned a topic outside the subscription; joining again");
        return Ok(Step::Again {
            why: format!(
                "the assignment names topic '{t}', which the member does not subscribe to"
            ),
            refresh: false,
        });
    }
    if beyond_the_topic(&assignment, &shared.cluster.metadata()).is_some() {
        // Partitions may have been added since this member's metadata: asked again first.
        let _ = shared.cluster.refresh_metadata().await;
        if let Some(tp) = beyond_the_topic(&assignment, &shared.cluster.metadata()) {
            // A damaged SyncGroup answer (a flipped bit made partition 1 into 2049): the
            // member would own a partition that does not exist, and poll would fail on it for
            // ever. Joined again.
            warn!(%tp, "assigned a partition the topic does not have; joining again");
            return Ok(Step::Again {
                why: format!("the assignment names {tp}, which the topic does not have"),
                refresh: false,
            });
        }
    }
    Ok(Step::Done(Joined::Assigned(Rebalanced {
        generation,
        protocol,
        assignment,
    })))
}

/// What a member is in the generation a JoinGroup answer opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// It computes the assignment.
    Leader,
    /// It waits for the leader's.
    Follower,
    /// The answer contradicts itself: joined again.
    Unclear,
}

/// The member's role from a JoinGroup answer: its leader id, the member's own id, and the
/// member ids it lists. Pure.
///
/// The coordinator lists the members to the leader only, so a list decides: a member that gets
/// one leads, whatever the leader field says. Trusting the leader id alone, one flipped bit in
/// it made the only member a follower: nobody assigned anything, and the group stayed stable
/// with no partition read (the group member under random flips). A list must name the leader
/// itself: one flipped bit in its own id there made it assign its partitions to a member that
/// does not exist, and again nothing was read.
fn role(leader: &str, me: &str, members: &[&str]) -> Role {
    match (members.is_empty(), leader == me) {
        (false, _) if members.contains(&me) => Role::Leader,
        (false, _) => Role::Unclear,
        (true, false) => Role::Follower,
        (true, true) => Role::Unclear,
    }
}

/// The first assigned partition its topic does not have, as `metadata` counts them (a topic
/// it does not know is not judged). Pure.
fn beyond_the_topic<'a>(
    assignment: &'a [TopicPartition],
    metadata: &MetadataSnapshot,
) -> Option<&'a TopicPartition> {
    assignment.iter().find(|tp| {
        metadata
            .topics
            .get(&tp.topic)
            .is_some_and(|t| tp.partition < 0 || tp.partition as usize >= t.partitions.len())
    })
}

/// The first assigned topic the member does not subscribe to, if any. Pure.
fn outside_subscription<'a>(
    assignment: &'a [TopicPartition],
    topics: &[String],
) -> Option<&'a str> {
    assignment
        .iter()
        .map(|tp| tp.topic.as_str())
        .find(|t| !topics.iter().any(|s| s == t))
}

/// Joins the group (JoinGroup + SyncGroup), again after a backoff while the answers say so,
/// until the member is in a generation with an assignment, is lost, or cannot go on.
async fn join_and_sync(
    shared: &Arc<Shared>,
    topics: &[String],
    strategies: &[Strategy],
    owned: &[TopicPartition],
) -> Result<Joined> {
    let cfg = &shared.config;
    let group = &shared.group_id;
    let deadline = Instant::now() + cfg.max_poll_interval.max(cfg.client.api_timeout);
    let join_timeout = cfg
        .client
        .request_timeout
        .max(cfg.max_poll_interval + JOIN_GROUP_LAPSE);
    // No answer (connection lost, timed out, coordinator unknown) is retried like the answers
    // that say "again"; a coordinator that moved is looked up again first.
    let policy = shared
        .cluster
        .policy(super::Op::General, cfg.client.api_timeout)
        .until(deadline);
    let stale = Stale::Coordinator(CoordinatorKind::Group, group);
    let what = format!("joining group '{group}'");
    shared
        .cluster
        .retrying(&what, policy, stale, |_| async {
            let join = join_request(shared, topics, strategies, owned)?;
            join_and_sync_once(shared, &join, join_timeout, topics).await
        })
        .await
}

/// Heartbeats while the membership is stable; notices rebalances, expiry, fencing, and a poll
/// loop that stalled past max.poll.interval.ms.
async fn heartbeat_loop(shared: Arc<Shared>) {
    let cfg = shared.config.clone();
    loop {
        tokio::time::sleep(cfg.heartbeat_interval).await;
        let (phase, generation, member_id, last_poll) = {
            let st = shared.lock();
            (st.phase, st.generation, st.member_id.clone(), st.last_poll)
        };
        if !phase.heartbeats() {
            continue;
        }
        if last_poll.is_some_and(|t| t.elapsed() > cfg.max_poll_interval) {
            give_up_membership(&shared).await;
            continue;
        }
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member_id.clone()))
            .with_group_instance_id(cfg.group_instance_id.clone().map(StrBytes::from_string));
        let result = async {
            let conn = shared
                .cluster
                .coordinator(CoordinatorKind::Group, &shared.group_id)
                .await?;
            let at = conn.addr().to_owned();
            conn.request(&req).await.map(|r| (r, at))
        }
        .await;
        let (code, coordinator) = match result {
            Ok((r, at)) => (ErrorCode(r.error_code), at),
            Err(e) => {
                debug!(error = %e, "heartbeat failed");
                shared
                    .cluster
                    .forget_coordinator(CoordinatorKind::Group, &shared.group_id);
                continue;
            }
        };
        let mut st = shared.lock();
        if !st.phase.heartbeats() || st.generation != generation || st.member_id != member_id {
            continue; // a rebalance happened meanwhile: this answer is about the old generation
        }
        match reaction(GroupApi::Heartbeat, code) {
            Reaction::Proceed => {}
            Reaction::Rejoin => st.on(MemberEvent::RejoinRequested),
            Reaction::ResetGenerationAndRejoin => {
                st.on(MemberEvent::MembershipGone);
                st.generation = -1;
            }
            Reaction::ResetMemberAndRejoin => {
                st.on(MemberEvent::MembershipGone);
                st.generation = -1;
                st.member_id.clear();
            }
            Reaction::FindCoordinatorAndRetry => {
                drop(st);
                shared
                    .cluster
                    .forget_coordinator(CoordinatorKind::Group, &shared.group_id);
            }
            Reaction::RetryAfterBackoff | Reaction::JoinWithGivenMemberId => {
                debug!(code = %code, "heartbeat error; sending the next one at the interval");
            }
            Reaction::Fenced => {
                let e = fenced_error(&shared.group_id, cfg.group_instance_id.as_deref());
                warn!(error = %e, "fenced");
                st.fail(e);
            }
            Reaction::Fatal => {
                let e = Error::broker(format!("heartbeat for group '{}'", shared.group_id), code)
                    .at_broker("coordinator", &coordinator);
                warn!(error = %e, "the member cannot go on");
                st.fail(e);
            }
        }
    }
}

/// The application did not poll within max.poll.interval.ms: the member leaves the group, and
/// the next poll reports its partitions lost.
async fn give_up_membership(shared: &Shared) {
    let cfg = &shared.config;
    warn!(
        "poll was not called within max.poll.interval.ms={} ms; giving up the membership",
        cfg.max_poll_interval.as_millis()
    );
    // A static member never sends LeaveGroup (as the Java client): its partitions wait
    // for it until session.timeout.ms, and it stops heartbeating so that they do not
    // wait longer.
    if cfg.group_instance_id.is_none() {
        leave_group(shared).await;
    }
    let mut st = shared.lock();
    st.on(MemberEvent::MembershipGone);
    st.member_id.clear();
    st.generation = -1;
}

async fn leave_group(shared: &Shared) {
    let (member_id, instance) = {
        let st = shared.lock();
        (
            st.member_id.clone(),
            shared.config.group_instance_id.clone(),
        )
    };
    if member_id.is_empty() {
        return;
    }
    if let Ok(conn) = shared
        .cluster
        .coordinator(CoordinatorKind::Group, &shared.group_id)
        .await
    {
        let Ok(v) = conn.version_for::<LeaveGroupRequest>(None) else {
            return;
        };
        let mut req = LeaveGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())));
        // v3+ names the leaving members in a list (KIP-345); older versions take one member id.
        if v >= 3 {
            req = req.with_members(vec![MemberIdentity::default()
                .with_member_id(StrBytes::from_string(member_id))
                .with_group_instance_id(instance.map(StrBytes::from_string))]);
        } else {
            req = req.with_member_id(StrBytes::from_string(member_id));
        }
        if let Err(e) = conn.request_at(&req, v).await {
            debug!(error = %e, "LeaveGroup failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use GroupApi::*;
    use Reaction::*;

    /// (leader id, own id, members listed, role)
    #[test]
    fn the_member_list_decides_who_leads() {
        let cases: [(&str, &str, &[&str], Role); 5] = [
            ("m-1", "m-1", &["m-1", "m-2", "m-3"], Role::Leader),
            ("m-1", "m-2", &[], Role::Follower),
            // The leader id damaged on the way: the list still says this member leads.
            ("m-!", "m-1", &["m-1"], Role::Leader),
            // Named leader with nobody to assign to: the answer contradicts itself.
            ("m-1", "m-1", &[], Role::Unclear),
            // Its own id damaged in the list: it would assign to a member that does not exist.
            ("m-1", "m-1", &["m-!"], Role::Unclear),
        ];
        for (leader, me, members, want) in cases {
            assert_eq!(
                role(leader, me, members),
                want,
                "{leader} / {me} / {members:?}"
            );
        }
    }

    #[test]
    fn an_assigned_partition_its_topic_does_not_have_is_named() {
        let mut m = MetadataSnapshot::default();
        let p = crate::client::metadata::PartitionMetadata {
            leader: 1,
            leader_epoch: 0,
            error_code: 0,
        };
        m.topics.insert(
            "rides".into(),
            crate::client::metadata::TopicMetadata {
                name: "rides".into(),
                id: [0; 16],
                partitions: vec![p.clone(), p],
                internal: false,
            },
        );
        let tp = |t: &str, p| TopicPartition::new(t, p);
        assert_eq!(
            beyond_the_topic(&[tp("rides", 0), tp("rides", 1)], &m),
            None
        );
        assert_eq!(
            beyond_the_topic(&[tp("rides", 1), tp("rides", 2049)], &m),
            Some(&tp("rides", 2049))
        );
        assert_eq!(
            beyond_the_topic(&[tp("rides", -1)], &m),
            Some(&tp("rides", -1))
        );
        // A topic this member's metadata does not know is not judged here.
        assert_eq!(beyond_the_topic(&[tp("fares", 7)], &m), None);
    }

    #[test]
    fn an_assigned_topic_outside_the_subscription_is_named() {
        let topics = vec!["rides".to_owned(), "fares".to_owned()];
        let tp = |t: &str| TopicPartition::new(t, 0);
        assert_eq!(outside_subscription(&[], &topics), None);
        assert_eq!(
            outside_subscription(&[tp("rides"), tp("fares")], &topics),
            None
        );
        assert_eq!(
            outside_subscription(&[tp("rides"), tp("r?des")], &topics),
            Some("r?des")
        );
    }

    // Long only because it is one table: a row per (API, error code) worth pinning.
    #[test]
    fn reactions() {
        let table: &[(GroupApi, ErrorCode, Reaction)] = &[
            (JoinGroup, ErrorCode(0), Proceed),
            (SyncGroup, ErrorCode(0), Proceed),
            (Heartbeat, ErrorCode(0), Proceed),
            // KIP-394: the first JoinGroup of a new member gets its id this way.
            (
                JoinGroup,
                ErrorCode::MEMBER_ID_REQUIRED,
                JoinWithGivenMemberId,
            ),
            (SyncGroup, ErrorCode::MEMBER_ID_REQUIRED, Fatal),
            (JoinGroup, ErrorCode::REBALANCE_IN_PROGRESS, Rejoin),
            (SyncGroup, ErrorCode::REBALANCE_IN_PROGRESS, Rejoin),
            (Heartbeat, ErrorCode::REBALANCE_IN_PROGRESS, Rejoin),
            // The member id may still be valid: keep it, as the Java client does.
            (
                JoinGroup,
                ErrorCode::ILLEGAL_GENERATION,
                ResetGenerationAndRejoin,
            ),
            (
                SyncGroup,
                ErrorCode::ILLEGAL_GENERATION,
                ResetGenerationAndRejoin,
            ),
            (
                Heartbeat,
                ErrorCode::ILLEGAL_GENERATION,
                ResetGenerationAndRejoin,
            ),
            (
                JoinGroup,
                ErrorCode::UNKNOWN_MEMBER_ID,
                ResetMemberAndRejoin,
            ),
            (
                SyncGroup,
                ErrorCode::UNKNOWN_MEMBER_ID,
                ResetMemberAndRejoin,
            ),
            (
                Heartbeat,
                ErrorCode::UNKNOWN_MEMBER_ID,
                ResetMemberAndRejoin,
            ),
            (
                JoinGroup,
                ErrorCode::NOT_COORDINATOR,
                FindCoordinatorAndRetry,
            ),
            (
                SyncGroup,
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
                FindCoordinatorAndRetry,
            ),
            (
                Heartbeat,
                ErrorCode::NOT_COORDINATOR,
                FindCoordinatorAndRetry,
            ),
            (
                JoinGroup,
                ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
                RetryAfterBackoff,
            ),
            (
                SyncGroup,
                ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
                RetryAfterBackoff,
            ),
            (
                Heartbeat,
                ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
                RetryAfterBackoff,
            ),
            // Another member has this group.instance.id now: never rejoin (that would fence
            // the new owner in turn).
            (JoinGroup, ErrorCode::FENCED_INSTANCE_ID, Fenced),
            (SyncGroup, ErrorCode::FENCED_INSTANCE_ID, Fenced),
            (Heartbeat, ErrorCode::FENCED_INSTANCE_ID, Fenced),
            (JoinGroup, ErrorCode::GROUP_AUTHORIZATION_FAILED, Fatal),
            (SyncGroup, ErrorCode::GROUP_AUTHORIZATION_FAILED, Fatal),
            (Heartbeat, ErrorCode::GROUP_AUTHORIZATION_FAILED, Fatal),
            (JoinGroup, ErrorCode::INCONSISTENT_GROUP_PROTOCOL, Fatal),
            (JoinGroup, ErrorCode::INVALID_SESSION_TIMEOUT, Fatal),
            (JoinGroup, ErrorCode::GROUP_MAX_SIZE_REACHED, Fatal),
            (JoinGroup, ErrorCode::UNSUPPORTED_VERSION, Fatal),
            // Unlisted: fatal for a rebalance; a heartbeat is simply sent again.
            (JoinGroup, ErrorCode::UNKNOWN_SERVER_ERROR, Fatal),
            (SyncGroup, ErrorCode(9999), Fatal),
            (
                Heartbeat,
                ErrorCode::UNKNOWN_SERVER_ERROR,
                RetryAfterBackoff,
            ),
        ];
        for (api, code, want) in table {
            assert_eq!(reaction(*api, *code), *want, "{api:?} answered {code}");
        }
    }

    fn sub(id: &str, topics: &[&str], owned: &[(&str, i32)]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.into(),
            instance_id: None,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            owned: owned
                .iter()
                .map(|(t, p)| TopicPartition::new(*t, *p))
                .collect(),
            generation: if owned.is_empty() { -1 } else { 3 },
        }
    }

    #[test]
    fn the_leader_assigns_with_the_protocol_the_group_chose() {
        type Want = &'static [(&'static str, &'static [(&'static str, i32)])];
        let fresh = vec![sub("a", &["t"], &[]), sub("b", &["t"], &[])];
        // b owns t-0 and a owns t-1, t-2: range ignores that, cooperative-sticky keeps it.
        let owning = vec![
            sub("a", &["t"], &[("t", 1), ("t", 2)]),
            sub("b", &["t"], &[("t", 0)]),
        ];
        let two_topics = vec![sub("a", &["t", "u"], &[]), sub("b", &["t"], &[])];
        let t3 = BTreeMap::from([("t".to_string(), 3)]);
        let t3_u2 = BTreeMap::from([("t".to_string(), 3), ("u".to_string(), 2)]);
        // (protocol, members, partition counts, the assignment wanted)
        type Row<'a> = (
            &'a str,
            &'a [MemberSubscription],
            &'a BTreeMap<String, usize>,
            Want,
        );
        let table: &[Row] = &[
            (
                "range",
                &fresh,
                &t3,
                &[("a", &[("t", 0), ("t", 1)]), ("b", &[("t", 2)])],
            ),
            (
                "range",
                &owning,
                &t3,
                &[("a", &[("t", 0), ("t", 1)]), ("b", &[("t", 2)])],
            ),
            (
                "cooperative-sticky",
                &owning,
                &t3,
                &[("a", &[("t", 1), ("t", 2)]), ("b", &[("t", 0)])],
            ),
            // A protocol this member does not know: range, as before (the group only picks
            // one every member announced, so this does not happen with onceflow members).
            (
                "roundrobin",
                &owning,
                &t3,
                &[("a", &[("t", 0), ("t", 1)]), ("b", &[("t", 2)])],
            ),
            (
                "range",
                &two_topics,
                &t3_u2,
                &[
                    ("a", &[("t", 0), ("t", 1), ("u", 0), ("u", 1)]),
                    ("b", &[("t", 2)]),
                ],
            ),
            // u's partition count could not be fetched: nobody gets u.
            (
                "range",
                &two_topics,
                &t3,
                &[("a", &[("t", 0), ("t", 1)]), ("b", &[("t", 2)])],
            ),
        ];
        for (protocol, members, counts, want) in table {
            let want: Assignment = want
                .iter()
                .map(|(m, tps)| {
                    let tps = tps
                        .iter()
                        .map(|(t, p)| TopicPartition::new(*t, *p))
                        .collect();
                    (m.to_string(), tps)
                })
                .collect();
            let mut got = leader_assignment(members, protocol, counts);
            for tps in got.values_mut() {
                tps.sort();
            }
            assert_eq!(got, want, "{protocol} for {members:?} over {counts:?}");
        }
    }

    #[test]
    fn the_fenced_error_names_the_setting_and_the_instance() {
        let e = fenced_error("orders", Some("worker-3")).to_string();
        assert!(e.contains("'orders'"), "{e}");
        assert!(e.contains("group.instance.id 'worker-3'"), "{e}");
        assert!(e.contains("another member"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}
