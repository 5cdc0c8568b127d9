//! Consumer groups, classic protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, with the
//! `range` and `cooperative-sticky` assignors, static membership, rebalance callbacks and
//! offset commits.
//!
//! A member's life: [`GroupConsumer::subscribe`] → the first [`GroupConsumer::poll`] joins
//! (JoinGroup until the coordinator has everyone; the leader computes the assignment; SyncGroup
//! hands it out), assigns the partitions to the [`Consumer`] underneath, starts each at the
//! group's committed offset (fetched with RequireStable) and calls `on_assigned`. A background
//! task heartbeats every heartbeat.interval.ms; when the coordinator says REBALANCE_IN_PROGRESS
//! the next poll rejoins. Under `range` (eager) every partition is revoked first; under
//! `cooperative-sticky` only those moving to another member, in a second rebalance. If the
//! application does not poll within max.poll.interval.ms the task leaves the group and the next
//! poll reports the partitions *lost* — another member may already own them.
//!
//! Rebalance callbacks run inside `poll`, in the application's task, like the Java client's:
//! `on_revoked` finishes before the partitions are given up, so a transactional application
//! can abort or commit there.

pub mod assignor;
pub(crate) mod offsets;

use super::consumer::{Consumer, ConsumerRecord, Offset};
use super::coordinator::CoordinatorKind;
use super::error::{Error, Result};
use super::metadata::TopicPartition;
use super::producer::GroupMetadata;
use super::{Cluster, ConsumerConfig};
use crate::protocol::ErrorCode;
use assignor::{Assignment, MemberSubscription};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::future::BoxFuture;
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as WireAssignedTp;
use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as WireOwnedTp;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, info, info_span, warn, Instrument};

/// Hooks called inside `poll` around a rebalance.
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
    /// A rebalance is needed (heartbeat said so, or a cooperative revocation happened).
    rejoin: bool,
    /// The membership is gone (session expired, fenced, poll too late): partitions are lost.
    lost: bool,
    /// JoinGroup/SyncGroup succeeded; the heartbeat task runs only then.
    stable: bool,
    last_poll: Option<Instant>,
}

struct Shared {
    cluster: Arc<Cluster>,
    config: ConsumerConfig,
    group_id: String,
    state: Mutex<MemberState>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A consumer that is a member of a consumer group.
pub struct GroupConsumer {
    consumer: Consumer,
    shared: Arc<Shared>,
    topics: Vec<String>,
    strategies: Vec<Strategy>,
    listener: Option<Arc<dyn RebalanceListener>>,
    heartbeat: tokio::task::JoinHandle<()>,
    last_auto_commit: Instant,
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
        });
        let heartbeat = tokio::spawn(heartbeat_loop(shared.clone()));
        Ok(GroupConsumer {
            consumer: Consumer::with_cluster(config, cluster),
            shared,
            topics: Vec::new(),
            strategies: vec![Strategy::Range, Strategy::CooperativeSticky],
            listener: None,
            heartbeat,
            last_auto_commit: Instant::now(),
        })
    }

    /// Subscribes to topics; takes effect at the next poll (a rebalance).
    pub fn subscribe(&mut self, topics: &[&str]) {
        self.topics = topics.iter().map(|t| t.to_string()).collect();
        self.shared.lock().rejoin = true;
    }

    /// The assignment strategies to announce, most preferred first (default: range, then
    /// cooperative-sticky, as the Java client). The group uses the first one every member
    /// supports.
    pub fn set_strategies(&mut self, strategies: &[Strategy]) {
        if !strategies.is_empty() {
            self.strategies = strategies.to_vec();
        }
    }

    /// Sets the rebalance callbacks.
    pub fn set_listener(&mut self, listener: Arc<dyn RebalanceListener>) {
        self.listener = Some(listener);
    }

    /// The partitions this member owns now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.shared.lock().assigned.clone()
    }

    /// The group's metadata for [`crate::client::Producer::send_offsets_to_transaction`]: with
    /// the generation and member id the coordinator fences a zombie (KIP-447).
    pub fn group_metadata(&self) -> GroupMetadata {
        let st = self.shared.lock();
        GroupMetadata {
            group_id: self.shared.group_id.clone(),
            generation_id: st.generation,
            member_id: st.member_id.clone(),
            group_instance_id: self.shared.config.group_instance_id.clone(),
        }
    }

    /// The consumer underneath (positions, watermarks).
    pub fn consumer(&self) -> &Consumer {
        &self.consumer
    }

    /// Moves an owned partition's position (e.g. back to the committed offset after a
    /// transaction aborted).
    ///
    /// # Errors
    /// [`Error::InvalidState`] when the partition is not owned.
    pub fn seek(&mut self, tp: &TopicPartition, offset: Offset) -> Result<()> {
        self.consumer.seek(tp, offset)
    }

    /// Rewinds every owned partition to the group's committed offset (or auto.offset.reset
    /// where there is none): after an aborted transaction, the records it consumed are read
    /// again.
    ///
    /// # Errors
    /// OffsetFetch failures.
    pub async fn rewind_to_committed(&mut self) -> Result<()> {
        let owned = self.assignment();
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
    pub fn positions(&self) -> Vec<(TopicPartition, i64)> {
        self.assignment()
            .into_iter()
            .filter_map(|tp| self.consumer.position(&tp).map(|p| (tp, p)))
            .collect()
    }

    /// Polls for records, joining or rebalancing first when needed, and auto-committing when
    /// enable.auto.commit is on.
    ///
    /// # Errors
    /// Fatal group errors (e.g. FENCED_INSTANCE_ID, GROUP_AUTHORIZATION_FAILED) and fetch
    /// errors.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        self.shared.lock().last_poll = Some(Instant::now());
        self.maybe_rebalance().await?;
        if self.shared.config.enable_auto_commit
            && self.last_auto_commit.elapsed() >= self.shared.config.auto_commit_interval
        {
            self.last_auto_commit = Instant::now();
            if let Err(e) = self.commit_positions().await {
                warn!(error = %e, "auto commit failed");
            }
        }
        let records = self.consumer.poll(timeout).await?;
        // A rebalance may have started while we waited: hand out only owned partitions.
        Ok(records)
    }

    /// Commits the positions of all owned partitions.
    ///
    /// # Errors
    /// [`Error::CommitFailed`] when the group rebalanced meanwhile (the next poll rejoins).
    pub async fn commit_positions(&mut self) -> Result<()> {
        let offsets = self.positions();
        self.commit(&offsets).await
    }

    /// Commits offsets (the next offset to read, as the Java client) for the group.
    ///
    /// # Errors
    /// [`Error::CommitFailed`] when the group rebalanced meanwhile.
    pub async fn commit(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        let who = {
            let st = self.shared.lock();
            offsets::Committer {
                generation: st.generation,
                member_id: st.member_id.clone(),
                instance_id: self.shared.config.group_instance_id.clone(),
            }
        };
        let r = offsets::commit(&self.shared.cluster, &self.shared.group_id, &who, offsets).await;
        if matches!(r, Err(Error::CommitFailed(_))) {
            self.shared.lock().rejoin = true;
        }
        r
    }

    /// Leaves the group: commits (with auto commit), calls `on_revoked`, sends LeaveGroup
    /// (static members do not: their partitions wait for them for session.timeout.ms).
    ///
    /// # Errors
    /// Connection errors while leaving.
    pub async fn close(mut self) -> Result<()> {
        let assigned = self.assignment();
        if self.shared.config.enable_auto_commit {
            let _ = self.commit_positions().await;
        }
        if let Some(l) = &self.listener {
            l.on_revoked(&assigned).await;
        }
        self.heartbeat.abort();
        if self.shared.config.group_instance_id.is_none() {
            leave_group(&self.shared).await;
        }
        Ok(())
    }

    async fn maybe_rebalance(&mut self) -> Result<()> {
        loop {
            let (rejoin, lost) = {
                let st = self.shared.lock();
                (st.rejoin || !st.stable, st.lost)
            };
            if self.topics.is_empty() || !(rejoin || lost) {
                return Ok(());
            }
            if lost {
                let gone = {
                    let mut st = self.shared.lock();
                    st.lost = false;
                    std::mem::take(&mut st.assigned)
                };
                if !gone.is_empty() {
                    warn!(partitions = gone.len(), "partitions lost");
                    self.consumer.assign(Vec::new()).await?;
                    if let Some(l) = &self.listener {
                        l.on_lost(&gone).await;
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
        self.shared.lock().stable = false;
        let owned = self.assignment();
        let cooperative = self.shared.lock().protocol.as_deref() == Some("cooperative-sticky");
        // Eager protocol: give everything up before joining.
        if !cooperative && !owned.is_empty() {
            if self.shared.config.enable_auto_commit {
                let _ = self.commit_positions().await;
            }
            if let Some(l) = &self.listener {
                l.on_revoked(&owned).await;
            }
            self.shared.lock().assigned.clear();
            self.consumer.assign(Vec::new()).await?;
        }
        let owned_now = self.assignment();
        let (generation, protocol, assignment) =
            join_and_sync(&self.shared, &self.topics, &self.strategies, &owned_now).await?;
        let new: BTreeSet<TopicPartition> = assignment.into_iter().collect();
        let old: BTreeSet<TopicPartition> = owned_now.iter().cloned().collect();
        let revoked: Vec<TopicPartition> = old.difference(&new).cloned().collect();
        let added: Vec<TopicPartition> = new.difference(&old).cloned().collect();
        if !revoked.is_empty() {
            // Cooperative: give these up now; another rebalance hands them to their new owner.
            if self.shared.config.enable_auto_commit {
                let offsets: Vec<_> = revoked
                    .iter()
                    .filter_map(|tp| self.consumer.position(tp).map(|p| (tp.clone(), p)))
                    .collect();
                let _ = self.commit(&offsets).await;
            }
            if let Some(l) = &self.listener {
                l.on_revoked(&revoked).await;
            }
        }
        let new_list: Vec<TopicPartition> = new.iter().cloned().collect();
        self.consumer.assign(new_list.clone()).await?;
        if !added.is_empty() {
            let committed =
                offsets::fetch_committed(&self.shared.cluster, &self.shared.group_id, &added)
                    .await?;
            for tp in &added {
                if let Some(o) = committed.get(tp) {
                    self.consumer.seek(tp, Offset::At(*o))?;
                }
            }
        }
        {
            let mut st = self.shared.lock();
            st.generation = generation;
            st.protocol = Some(protocol.clone());
            st.assigned = new_list.clone();
            st.stable = true;
            st.rejoin = !revoked.is_empty() && protocol == "cooperative-sticky";
        }
        info!(generation, protocol = %protocol, partitions = new_list.len(), "joined group");
        if !added.is_empty() {
            if let Some(l) = &self.listener {
                l.on_assigned(&added).await;
            }
        }
        Ok(())
    }
}

fn encode_versioned<T: Encodable>(msg: &T, version: i16) -> Result<Bytes> {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    msg.encode(&mut buf, version)
        .map_err(|e| Error::InvalidState(format!("encoding group metadata: {e}")))?;
    Ok(buf.freeze())
}

fn decode_versioned<T: Decodable>(mut bytes: Bytes, what: &str) -> Result<T> {
    if bytes.len() < 2 {
        return Err(Error::InvalidState(format!("{what}: too short")));
    }
    // Newer versions only add fields; decode at the highest version we know.
    let version = bytes.get_i16().clamp(0, 3);
    T::decode(&mut bytes, version).map_err(|e| Error::InvalidState(format!("{what}: {e}")))
}

fn subscription_bytes(
    topics: &[String],
    owned: &[TopicPartition],
    generation: i32,
) -> Result<Bytes> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in owned {
        by_topic
            .entry(tp.topic.as_str())
            .or_default()
            .push(tp.partition);
    }
    let sub = ConsumerProtocolSubscription::default()
        .with_topics(
            topics
                .iter()
                .map(|t| StrBytes::from_string(t.clone()))
                .collect(),
        )
        .with_owned_partitions(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    WireOwnedTp::default()
                        .with_topic(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partitions(ps)
                })
                .collect(),
        )
        .with_generation_id(generation);
    encode_versioned(&sub, 2)
}

async fn join_and_sync(
    shared: &Arc<Shared>,
    topics: &[String],
    strategies: &[Strategy],
    owned: &[TopicPartition],
) -> Result<(i32, String, Vec<TopicPartition>)> {
    let cfg = &shared.config;
    let group = &shared.group_id;
    let deadline = Instant::now() + cfg.max_poll_interval.max(cfg.client.api_timeout);
    let mut attempt = 0;
    loop {
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!("joining group '{group}'"),
                after: cfg.max_poll_interval,
            });
        }
        let (member_id, generation) = {
            let st = shared.lock();
            (st.member_id.clone(), st.generation)
        };
        let metadata = subscription_bytes(topics, owned, generation)?;
        let join = JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.clone())))
            .with_session_timeout_ms(cfg.session_timeout.as_millis() as i32)
            .with_rebalance_timeout_ms(cfg.max_poll_interval.as_millis() as i32)
            .with_member_id(StrBytes::from_string(member_id.clone()))
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
            );
        let step = async {
            let conn = shared
                .cluster
                .coordinator(CoordinatorKind::Group, group)
                .await?;
            // JoinGroup waits for the whole group: allow the rebalance timeout, not the
            // request timeout (which would also poison the connection).
            let resp = conn
                .request_with_timeout(&join, cfg.max_poll_interval + Duration::from_secs(5))
                .await?;
            let code = ErrorCode(resp.error_code);
            if code == ErrorCode::MEMBER_ID_REQUIRED {
                // KIP-394: join again with the id the coordinator chose.
                shared.lock().member_id = resp.member_id.to_string();
                return Ok(None);
            }
            if code == ErrorCode::UNKNOWN_MEMBER_ID {
                shared.lock().member_id.clear();
                return Ok(None);
            }
            ErrorCode::check(resp.error_code)
                .map_err(|c| Error::broker(format!("JoinGroup for '{group}'"), c))?;
            let me = resp.member_id.to_string();
            let generation = resp.generation_id;
            let protocol = resp
                .protocol_name
                .as_ref()
                .map(|p| p.to_string())
                .unwrap_or_else(|| "range".into());
            shared.lock().member_id = me.clone();
            let mut assignments = Vec::new();
            if resp.leader.as_str() == me {
                let mut subs = Vec::new();
                for m in &resp.members {
                    let s: ConsumerProtocolSubscription =
                        decode_versioned(m.metadata.clone(), "member subscription")?;
                    subs.push(MemberSubscription {
                        member_id: m.member_id.to_string(),
                        instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
                        topics: s.topics.iter().map(|t| t.to_string()).collect(),
                        owned: s
                            .owned_partitions
                            .iter()
                            .flat_map(|t| {
                                t.partitions
                                    .iter()
                                    .map(move |p| TopicPartition::new(t.topic.0.to_string(), *p))
                            })
                            .collect(),
                        generation: s.generation_id,
                    });
                }
                let all_topics: BTreeSet<String> =
                    subs.iter().flat_map(|s| s.topics.iter().cloned()).collect();
                let mut counts = BTreeMap::new();
                for t in all_topics {
                    let lookup = shared.config.leader_topic_lookup();
                    if let Ok(n) = shared.cluster.partition_count_with(&t, lookup).await {
                        counts.insert(t, n);
                    }
                }
                let plan: Assignment = if protocol == "cooperative-sticky" {
                    assignor::cooperative_sticky(&subs, &counts)
                } else {
                    assignor::range(&subs, &counts)
                };
                debug!(
                    members = subs.len(),
                    ?plan,
                    "leader computed the assignment"
                );
                for (member, tps) in plan {
                    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for tp in tps {
                        by_topic.entry(tp.topic).or_default().push(tp.partition);
                    }
                    let a = ConsumerProtocolAssignment::default().with_assigned_partitions(
                        by_topic
                            .into_iter()
                            .map(|(t, ps)| {
                                WireAssignedTp::default()
                                    .with_topic(TopicName(StrBytes::from_string(t)))
                                    .with_partitions(ps)
                            })
                            .collect(),
                    );
                    assignments.push(
                        SyncGroupRequestAssignment::default()
                            .with_member_id(StrBytes::from_string(member))
                            .with_assignment(encode_versioned(&a, 1)?),
                    );
                }
            }
            let sync = SyncGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.clone())))
                .with_generation_id(generation)
                .with_member_id(StrBytes::from_string(me.clone()))
                .with_group_instance_id(cfg.group_instance_id.clone().map(StrBytes::from_string))
                .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
                .with_protocol_name(Some(StrBytes::from_string(protocol.clone())))
                .with_assignments(assignments);
            let resp = tokio::time::timeout(
                cfg.max_poll_interval + Duration::from_secs(5),
                conn.request(&sync),
            )
            .await
            .map_err(|_| Error::Timeout {
                what: format!("SyncGroup for '{group}'"),
                after: cfg.max_poll_interval,
            })??;
            if resp.error_code == ErrorCode::REBALANCE_IN_PROGRESS.0 {
                return Ok(None);
            }
            ErrorCode::check(resp.error_code)
                .map_err(|c| Error::broker(format!("SyncGroup for '{group}'"), c))?;
            let assigned: Vec<TopicPartition> = if resp.assignment.is_empty() {
                Vec::new()
            } else {
                let a: ConsumerProtocolAssignment =
                    decode_versioned(resp.assignment.clone(), "assignment")?;
                a.assigned_partitions
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(move |p| TopicPartition::new(t.topic.0.to_string(), *p))
                    })
                    .collect()
            };
            Ok::<_, Error>(Some((generation, protocol, assigned)))
        }
        .await;
        match step {
            Ok(Some(done)) => return Ok(done),
            Ok(None) => continue,
            Err(e) => {
                let class = e.class();
                if matches!(
                    class,
                    super::ErrorClass::Retriable | super::ErrorClass::RefreshAndRetry
                ) {
                    if class == super::ErrorClass::RefreshAndRetry {
                        shared
                            .cluster
                            .forget_coordinator(CoordinatorKind::Group, group);
                    }
                    attempt += 1;
                    tokio::time::sleep(super::cluster::backoff(
                        cfg.client.retry_backoff,
                        cfg.client.retry_backoff_max,
                        attempt,
                    ))
                    .await;
                    continue;
                }
                return Err(e);
            }
        }
    }
}

/// Heartbeats while the membership is stable; notices rebalances, expiry, and a poll loop that
/// stalled past max.poll.interval.ms.
async fn heartbeat_loop(shared: Arc<Shared>) {
    let cfg = shared.config.clone();
    loop {
        tokio::time::sleep(cfg.heartbeat_interval).await;
        let (stable, generation, member_id, last_poll) = {
            let st = shared.lock();
            (st.stable, st.generation, st.member_id.clone(), st.last_poll)
        };
        if !stable {
            continue;
        }
        if last_poll.is_some_and(|t| t.elapsed() > cfg.max_poll_interval) {
            warn!(
                "poll was not called within max.poll.interval.ms={} ms; leaving the group",
                cfg.max_poll_interval.as_millis()
            );
            leave_group(&shared).await;
            let mut st = shared.lock();
            st.stable = false;
            st.lost = true;
            st.member_id.clear();
            continue;
        }
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member_id))
            .with_group_instance_id(cfg.group_instance_id.clone().map(StrBytes::from_string));
        let result = async {
            let conn = shared
                .cluster
                .coordinator(CoordinatorKind::Group, &shared.group_id)
                .await?;
            conn.request(&req).await
        }
        .await;
        let code = match result {
            Ok(r) => ErrorCode(r.error_code),
            Err(e) => {
                debug!(error = %e, "heartbeat failed");
                shared
                    .cluster
                    .forget_coordinator(CoordinatorKind::Group, &shared.group_id);
                continue;
            }
        };
        let mut st = shared.lock();
        if !st.stable || st.generation != generation {
            continue; // a rebalance happened meanwhile: this answer is about the old generation
        }
        match code {
            ErrorCode(0) => {}
            ErrorCode::REBALANCE_IN_PROGRESS => st.rejoin = true,
            ErrorCode::ILLEGAL_GENERATION | ErrorCode::UNKNOWN_MEMBER_ID => {
                st.lost = true;
                st.stable = false;
                if code == ErrorCode::UNKNOWN_MEMBER_ID {
                    st.member_id.clear();
                }
            }
            ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE => shared
                .cluster
                .forget_coordinator(CoordinatorKind::Group, &shared.group_id),
            other => debug!(code = %other, "heartbeat error"),
        }
    }
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
