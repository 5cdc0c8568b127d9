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
//! in a second rebalance. If the application does not poll within max.poll.interval.ms the
//! membership is given up, by the task or by the late poll if that comes first (a dynamic
//! member sends LeaveGroup, a static one just stops heartbeating), and that poll reports the
//! partitions *lost*: another member may already own them. A member fenced by another with the
//! same group.instance.id stops for good: every later poll returns [`Error::Fenced`].
//!
//! Rebalance callbacks run inside `poll`, in the application's task, like the Java client's:
//! `on_revoked` finishes before the partitions are given up, so a transactional application
//! can abort or commit there.
//!
//! The folder:
//! - `mod.rs` (here): [`GroupConsumer`] and its API (poll, commit, close), the state the member
//!   shares with its heartbeat task (`Shared`, `MemberState`), and what a group error code
//!   means (`reaction`).
//! - the classic member's life: `rebalance.rs` (what `poll` does when the member must join:
//!   revoke, join, take the new assignment over), `join.rs` (JoinGroup and SyncGroup, the
//!   leader's assignment, the checks of what is assigned), `heartbeat.rs` (the heartbeat task),
//!   `leave.rs` (LeaveGroup, and the membership given up when poll stalls), `member_phase.rs`
//!   (its phases and their transitions), `assignor.rs` (range and cooperative-sticky, run by
//!   the leader) and `codec.rs` (the subscription and assignment bytes inside JoinGroup and
//!   SyncGroup).
//! - `consumer_protocol/`: the KIP-848 member's life.
//! - under both protocols: `offsets.rs` (OffsetFetch, OffsetCommit) and `metadata.rs`
//!   ([`GroupMetadata`] for transactions).
//! - for operators: `describe.rs` (DescribeGroups) and `listing.rs` (listing and describing
//!   groups as `kafka-consumer-groups.sh` does).

pub mod assignor;
mod codec;
mod consumer_protocol;
pub mod describe;
mod heartbeat;
mod join;
mod leave;
pub mod listing;
mod member_phase;
mod metadata;
pub(crate) mod offsets;
mod rebalance;

pub use describe::{GroupDescription, GroupMember, GroupState};
pub use listing::{
    ConsumerGroupDescription, GroupListing, GroupType, MemberDescription, PartitionLag,
};
pub use metadata::GroupMetadata;

use super::consumer::{Consumer, ConsumerRecord, Offset};
use super::error::{Error, Result};
use super::metadata::TopicPartition;
use super::{Cluster, ConsumerConfig};
use crate::protocol::ErrorCode;
use futures::future::BoxFuture;
use member_phase::{next, MemberEvent, MemberPhase};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, warn};

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

    /// A poll begins at `now`. If the last one began more than max.poll.interval.ms ago while
    /// the member was in a generation, this poll gives the membership up itself
    /// ([`Self::give_up_if_poll_late`]) and so reports the partitions lost, whatever the
    /// heartbeat task has seen or done by then. Left to the heartbeat task, the outcome would
    /// hang on its timing: another member joins; the heartbeat sees REBALANCE_IN_PROGRESS
    /// (RejoinNeeded); the poll interval runs out while the task's next tick is still ahead;
    /// the application polls. The phase says RejoinNeeded, so that poll would revoke the
    /// partitions (`on_revoked`, with auto commit a commit) and rejoin — but the coordinator,
    /// which has been waiting for the member to rejoin, may have removed it already and handed
    /// the partitions on: they are lost, not given up.
    ///
    /// Returns the member id to send LeaveGroup for, when this poll gave the membership up.
    fn poll_started(&mut self, now: Instant, max_poll_interval: Duration) -> Option<String> {
        let gone = self.give_up_if_poll_late(now, max_poll_interval);
        self.last_poll = Some(now);
        gone
    }

    /// Gives the membership up if the poll is late ([`member_phase::poll_too_late`]): Lost, and
    /// the member id and generation forgotten, in one step under the lock, before any LeaveGroup
    /// goes out. Returns the member id LeaveGroup names.
    ///
    /// Before LeaveGroup, because its arrival is what lets the coordinator hand the partitions
    /// on. Recorded only once the answer is back, the heartbeat task would lose this race: it
    /// sends LeaveGroup; the coordinator removes the member and completes the rebalance; the
    /// other member takes the partitions; the application polls before the answer is back and
    /// finds the member still in its generation. In one step, because the late poll decides
    /// this too: were check and record apart, both could give the membership up — the late
    /// poll reports the loss and joins again with a new member id, then the heartbeat task
    /// records its own give-up over it and marks the new round lost.
    fn give_up_if_poll_late(
        &mut self,
        now: Instant,
        max_poll_interval: Duration,
    ) -> Option<String> {
        let since = self.last_poll.map(|t| now.saturating_duration_since(t));
        if !member_phase::poll_too_late(self.phase, since, max_poll_interval) {
            return None;
        }
        self.on(MemberEvent::MembershipGone);
        self.generation = -1;
        Some(std::mem::take(&mut self.member_id))
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
            tokio::spawn(heartbeat::heartbeat_loop(shared.clone()))
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
        let late = self
            .shared
            .lock()
            .poll_started(Instant::now(), self.shared.config.max_poll_interval);
        if let Some(member_id) = late {
            leave::poll_was_late(&self.shared, member_id).await;
        }
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
            leave::leave_group(&self.shared).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use GroupApi::*;
    use Reaction::*;

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

    /// A member in generation 3 owning two partitions; its last poll began at `t0`.
    fn member_in_a_generation(t0: Instant) -> MemberState {
        MemberState {
            member_id: "m-1".into(),
            generation: 3,
            assigned: vec![TopicPartition::new("t", 0), TopicPartition::new("t", 1)],
            phase: MemberPhase::Stable,
            last_poll: Some(t0),
            ..Default::default()
        }
    }

    /// What the member went through since its last poll, how long after it the next poll
    /// begins, and the phase that poll acts on: a poll more than max.poll.interval.ms after the
    /// last one finds the membership gone (its partitions are reported lost, never revoked),
    /// whatever the heartbeat task saw or has done meanwhile.
    #[test]
    fn a_poll_after_max_poll_interval_finds_the_membership_gone() {
        use MemberEvent::*;
        use MemberPhase::*;
        const MAX: Duration = Duration::from_millis(2000);
        let ms = Duration::from_millis;
        // (events since the last poll, time since it began, the phase the next poll acts on)
        let table: &[(&[MemberEvent], Duration, MemberPhase)] = &[
            // Another member joined: the heartbeat saw REBALANCE_IN_PROGRESS. Then the poll
            // interval ran out, and the heartbeat task has not given the membership up yet (its
            // tick is still ahead, or its LeaveGroup is under way and the coordinator already
            // handed the partitions over): lost, not revoked.
            (&[RejoinRequested], ms(2500), Lost),
            // The same, the heartbeat task having given the membership up first.
            (&[RejoinRequested, MembershipGone], ms(2500), Lost),
            // No rebalance seen: lost all the same.
            (&[], ms(2500), Lost),
            (&[MembershipGone], ms(2500), Lost),
            // In time: a rebalance seen is an ordinary rejoin (eager: revoke first) ...
            (&[RejoinRequested], ms(1500), RejoinNeeded),
            // ... and nothing seen, an ordinary poll. "Within" includes the bound itself.
            (&[], ms(1500), Stable),
            (&[], MAX, Stable),
            // A membership already gone stays to be reported, in time or not.
            (&[MembershipGone], ms(1500), Lost),
            // Fenced: the poll returns the error, late or not.
            (&[Fatal], ms(2500), Failed),
        ];
        let t0 = Instant::now();
        for (events, since, want) in table {
            let mut st = member_in_a_generation(t0);
            for e in *events {
                st.on(*e);
            }
            let gone = st.poll_started(t0 + *since, MAX);
            assert_eq!(
                st.phase, *want,
                "{events:?}, then a poll {since:?} after the last"
            );
            // The poll gave the membership up itself: it leaves as the member it was.
            let gave_up = *want == Lost && !events.contains(&MembershipGone);
            assert_eq!(
                gone.as_deref(),
                gave_up.then_some("m-1"),
                "{events:?}, then a poll {since:?} after the last"
            );
            if gave_up {
                assert_eq!((st.member_id.as_str(), st.generation), ("", -1));
            }
        }
    }

    /// The heartbeat task and a late poll both watch max.poll.interval.ms: whichever notices
    /// first gives the membership up (and sends LeaveGroup), the other finds it gone and does
    /// nothing — also not to the membership the next round brings.
    #[test]
    fn the_heartbeat_task_and_a_late_poll_give_the_membership_up_once() {
        const MAX: Duration = Duration::from_millis(2000);
        let t0 = Instant::now();
        let late = t0 + Duration::from_millis(2500);

        // The heartbeat task first: the poll finds the loss to report, and leaves no one.
        let mut st = member_in_a_generation(t0);
        st.on(MemberEvent::RejoinRequested);
        assert_eq!(st.give_up_if_poll_late(late, MAX).as_deref(), Some("m-1"));
        assert_eq!(st.poll_started(late, MAX), None);
        assert_eq!(st.phase, MemberPhase::Lost);

        // The poll first: it reports the loss and joins again, with a new member id; the
        // heartbeat task's tick finds nothing to give up.
        let mut st = member_in_a_generation(t0);
        st.on(MemberEvent::RejoinRequested);
        assert_eq!(st.poll_started(late, MAX).as_deref(), Some("m-1"));
        st.on(MemberEvent::LossReported);
        st.phase = next(st.phase, MemberEvent::JoinStarted).unwrap();
        st.member_id = "m-2".into();
        assert_eq!(st.give_up_if_poll_late(late, MAX), None);
        assert_eq!(
            (st.phase, st.member_id.as_str()),
            (MemberPhase::Joining, "m-2")
        );
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
