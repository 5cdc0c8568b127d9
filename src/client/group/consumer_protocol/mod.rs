//! A group member under the KIP-848 consumer group protocol (`group.protocol=consumer`, Kafka
//! 4.0+): one request, ConsumerGroupHeartbeat, replaces JoinGroup, SyncGroup and Heartbeat.
//!
//! A member's life: the first [`GroupConsumer::poll`] after `subscribe` joins — the heartbeat
//! task sends member epoch 0 with every field (subscription, rebalance timeout, assignor,
//! static instance id, the partitions owned: none) and the coordinator answers with a member
//! epoch and, usually at once, a target assignment (by topic id). The coordinator computes
//! every assignment itself and hands a member only partitions no other member still owns, so
//! members never wait for each other. From then on the task heartbeats at the interval the
//! coordinator gives, sending only what changed.
//!
//! Reconciliation runs inside `poll`, in the application's task (the callbacks are the
//! application's): when an answer brings a target other than what the member owns, `poll`
//! revokes first (commits with auto commit, `on_revoked`, stops fetching), then assigns (the
//! new partitions' committed offsets are fetched with RequireStable, `on_assigned` once
//! known), and the next heartbeat — sent at once — names the partitions the member owns now.
//! Only then does the coordinator give the revoked partitions to their next owner, bumping
//! the epochs.
//!
//! Why revocation comes first, walked through: member A owns p0; B joins; the coordinator's
//! target gives p0 to B, but B's answer carries nothing yet (p0 is not released), and A's next
//! answer carries a target without p0 in A's current epoch. A's poll commits p0's position with
//! that epoch (the coordinator accepts it: A is still p0's owner), calls `on_revoked`, stops
//! fetching p0 and acknowledges. Only that acknowledgement lets the coordinator bump A's epoch
//! and give p0 to B, whose committed-offset fetch then sees what A committed.
//!
//! Fencing: FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID (the session expired; the member fell
//! behind) makes the partitions lost: the next poll reports them with `on_lost` and joins again
//! with epoch 0 and the same member id. A transaction's TxnOffsetCommit carries the member epoch
//! (as the generation id) and member id, so the coordinator fences a member whose epoch is
//! stale (KIP-447 with KIP-848). A static member (group.instance.id) leaves with epoch -2,
//! which keeps its partitions for it until the session expires; a dynamic one with -1.

mod phase;
mod reconcile;

pub(crate) use phase::Phase;

use super::{fenced_error, GroupConsumer, Shared};
use crate::client::coordinator::CoordinatorKind;
use crate::client::error::{Error, Result};
use crate::client::metadata::TopicPartition;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use phase::{next, Event};
use reconcile::{plan, reaction, resolve, Reaction, Target, TopicId};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, info_span, warn, Instrument};

/// The member epoch a dynamic member leaves with.
const LEAVE_EPOCH: i32 = -1;
/// The member epoch a static member leaves with: the coordinator keeps its assignment for
/// the session timeout, for the next process with the same group.instance.id.
const STATIC_LEAVE_EPOCH: i32 = -2;

/// A KIP-848 member's state, beside the member id and epoch (kept in the member's
/// `member_id` and `generation`, which [`super::GroupMetadata`] reads).
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) phase: Phase,
    /// The coordinator's last assignment (normalized: comparable).
    target: Target,
    /// Bumped whenever `target` changes.
    target_seq: u64,
    /// The owned partitions, by topic id, as the last reconciliation left them.
    owned_ids: Target,
    /// The target sequence a reconciliation applied that no heartbeat has acknowledged yet.
    ack_seq: Option<u64>,
    /// The next heartbeat sends every field (joining, or the last one may not have arrived).
    full: bool,
    /// The subscription changed: the next heartbeat names it.
    subscription_changed: bool,
    /// Bumped at every join: an answer to a request of an earlier membership is ignored.
    incarnation: u64,
    /// The heartbeat interval the coordinator asks for.
    interval: Option<Duration>,
    /// The subscribed topics, as the heartbeats name them …
    subscription: Vec<String>,
    /// … or the pattern the coordinator resolves.
    pattern: Option<String>,
    /// A pattern was replaced by names: the next heartbeat clears it (an empty pattern).
    clear_pattern: bool,
}

impl State {
    /// Moves the phase on `event`; a transition that cannot happen leaves it as it is (logged).
    pub(crate) fn on(&mut self, event: Event) {
        match next(self.phase, event) {
            Ok(p) => self.phase = p,
            Err(e) => {
                warn!(error = %e, phase = ?self.phase, ?event, "group member transition refused")
            }
        }
    }

    /// The member fails for good.
    pub(crate) fn fail(&mut self) {
        self.on(Event::Fatal);
    }

    /// A new subscription, for the next heartbeat.
    pub(crate) fn subscribe(&mut self, topics: Vec<String>, pattern: Option<String>) {
        self.subscription = topics;
        self.clear_pattern |= self.pattern.is_some() && pattern.is_none();
        self.pattern = pattern;
        self.subscription_changed = true;
    }

    /// Starts a membership: epoch 0, every field in the next heartbeat.
    fn start_joining(&mut self) {
        self.incarnation += 1;
        self.full = true;
        self.ack_seq = None;
        self.owned_ids.clear();
        self.target.clear();
    }
}

/// What a heartbeat request carried, to apply its answer.
#[derive(Debug, Clone)]
struct Sent {
    incarnation: u64,
    full: bool,
    /// The reconciliation whose owned partitions it acknowledged.
    ack_seq: Option<u64>,
    /// The coordinator it went to (empty when none was found): an error it answers names it.
    coordinator: String,
}

fn topic_partitions(owned: &Target) -> Vec<TopicPartitions> {
    owned
        .iter()
        .map(|(id, ps)| {
            TopicPartitions::default()
                .with_topic_id(uuid::Uuid::from_bytes(*id))
                .with_partitions(ps.clone())
        })
        .collect()
}

/// The next heartbeat, from the member's state; `None` when the member does not heartbeat.
fn heartbeat_request(
    shared: &Shared,
    version: i16,
) -> Option<(ConsumerGroupHeartbeatRequest, Sent)> {
    let cfg = &shared.config;
    let mut st = shared.lock();
    let phase = st.cg.phase;
    if !phase.heartbeats() {
        return None;
    }
    // KIP-1082 (v1+): the member chooses its id, once, and keeps it across rejoins.
    if st.member_id.is_empty() && version >= 1 {
        st.member_id = uuid::Uuid::new_v4().simple().to_string();
    }
    let joining = phase == Phase::Joining;
    let full = st.cg.full || joining;
    let epoch = if joining { 0 } else { st.generation };
    let mut req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())))
        .with_member_id(StrBytes::from_string(st.member_id.clone()))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(-1);
    let ack_seq = st.cg.ack_seq;
    if full {
        req = req
            .with_instance_id(cfg.group_instance_id.clone().map(StrBytes::from_string))
            .with_rebalance_timeout_ms(
                i32::try_from(cfg.max_poll_interval.as_millis()).unwrap_or(i32::MAX),
            )
            .with_server_assignor(cfg.group_remote_assignor.clone().map(StrBytes::from_string))
            .with_topic_partitions(Some(topic_partitions(&st.cg.owned_ids)));
    } else if ack_seq.is_some() {
        req = req.with_topic_partitions(Some(topic_partitions(&st.cg.owned_ids)));
    }
    if full || st.cg.subscription_changed {
        st.cg.subscription_changed = false;
        // Names (none under a pattern), and the pattern if there is one — or an empty one that
        // clears the pattern a name subscription replaced, as the Java client does.
        req = req.with_subscribed_topic_names(Some(
            st.cg
                .subscription
                .iter()
                .map(|t| TopicName(StrBytes::from_string(t.clone())))
                .collect(),
        ));
        if let Some(p) = st.cg.pattern.clone() {
            req = req.with_subscribed_topic_regex(Some(StrBytes::from_string(p)));
        } else if std::mem::take(&mut st.cg.clear_pattern) {
            req = req.with_subscribed_topic_regex(Some(StrBytes::from_static_str("")));
        }
    }
    let sent = Sent {
        incarnation: st.cg.incarnation,
        full,
        ack_seq: if full || ack_seq.is_some() {
            ack_seq
        } else {
            None
        },
        coordinator: String::new(),
    };
    Some((req, sent))
}

/// Applies a heartbeat's outcome; returns how long until the next one.
fn apply_answer(
    shared: &Shared,
    sent: Sent,
    result: Result<ConsumerGroupHeartbeatResponse>,
) -> Duration {
    let cfg = &shared.config;
    let backoff = cfg.client.retry_backoff;
    let mut st = shared.lock();
    let interval = st.cg.interval.unwrap_or(cfg.heartbeat_interval);
    if st.cg.incarnation != sent.incarnation || !st.cg.phase.heartbeats() {
        return interval; // about a membership that is over
    }
    let resp = match result {
        Ok(r) => r,
        Err(e) => {
            debug!(error = %e, "consumer group heartbeat failed");
            st.cg.full = true;
            if sent.full {
                st.cg.subscription_changed = true;
            }
            drop(st);
            shared
                .cluster
                .forget_coordinator(CoordinatorKind::Group, &shared.group_id);
            return backoff;
        }
    };
    let code = ErrorCode(resp.error_code);
    let message = resp
        .error_message
        .as_ref()
        .map(|m| m.to_string())
        .unwrap_or_default();
    match reaction(code) {
        Reaction::Proceed => apply_assignment(&mut st, &sent, resp, interval),
        Reaction::Rejoin => {
            info!(code = %code, message, "the coordinator dropped this membership; the partitions are lost, joining again");
            st.cg.on(Event::MembershipGone);
            interval
        }
        Reaction::FindCoordinatorAndRetry => {
            st.cg.full = true;
            drop(st);
            shared
                .cluster
                .forget_coordinator(CoordinatorKind::Group, &shared.group_id);
            backoff
        }
        Reaction::RetryAfterBackoff => {
            debug!(code = %code, "heartbeat error; sending again");
            st.cg.full = true;
            backoff
        }
        Reaction::Fenced | Reaction::Unsupported | Reaction::Fatal => {
            let e =
                member_error(shared, code, &message).at_broker("coordinator", &sent.coordinator);
            warn!(error = %e, "the member cannot go on");
            st.fail(e);
            interval
        }
    }
}

/// An answer without error: the member id, epoch and interval it gives, and the target
/// assignment, which moves the phase (reconciliation happens in `poll`). Returns when to send
/// the next heartbeat.
fn apply_assignment(
    st: &mut super::MemberState,
    sent: &Sent,
    resp: ConsumerGroupHeartbeatResponse,
    interval: Duration,
) -> Duration {
    if let Some(id) = resp.member_id.as_ref().filter(|id| !id.is_empty()) {
        st.member_id = id.to_string();
    }
    st.generation = resp.member_epoch;
    if resp.heartbeat_interval_ms > 0 {
        st.cg.interval = Some(Duration::from_millis(resp.heartbeat_interval_ms as u64));
    }
    if sent.full {
        st.cg.full = false;
    }
    let acknowledged = sent.ack_seq.is_some() && sent.ack_seq == st.cg.ack_seq;
    if acknowledged {
        st.cg.ack_seq = None;
    }
    let mut new_target = false;
    if let Some(a) = resp.assignment {
        let target = reconcile::normalize(
            a.topic_partitions
                .into_iter()
                .map(|t| (*t.topic_id.as_bytes(), t.partitions))
                .collect(),
        );
        if target != st.cg.target || st.cg.phase == Phase::Joining {
            st.cg.target = target;
            st.cg.target_seq += 1;
        }
        // A target equal to what is owned needs no reconciliation, only (when the
        // coordinator sent it after a rejoin) no acknowledgement either.
        new_target = st.cg.target != st.cg.owned_ids;
    }
    let before = st.cg.phase;
    st.cg.on(Event::Answer {
        new_target,
        acknowledged,
    });
    if before != st.cg.phase {
        info!(epoch = resp.member_epoch, from = ?before, to = ?st.cg.phase, "group member phase");
    }
    st.cg.interval.unwrap_or(interval)
}

/// The error that ends the membership for an answer the member cannot go on after (fenced,
/// unsupported, or any other fatal code), naming the group and the coordinator's message.
fn member_error(shared: &Shared, code: ErrorCode, message: &str) -> Error {
    let cfg = &shared.config;
    let instance_id = cfg.group_instance_id.as_deref();
    match reaction(code) {
        Reaction::Fenced if code == ErrorCode::UNRELEASED_INSTANCE_ID => {
            unreleased_error(&shared.group_id, instance_id)
        }
        Reaction::Fenced => fenced_error(&shared.group_id, instance_id),
        Reaction::Unsupported => unsupported(
            &shared.group_id,
            &format!("the coordinator answered {code}"),
        ),
        _ => Error::broker(
            format!(
                "consumer group heartbeat for group '{}'{}",
                shared.group_id,
                if message.is_empty() {
                    String::new()
                } else {
                    format!(" ({message})")
                }
            ),
            code,
        ),
    }
}

/// UNRELEASED_INSTANCE_ID: a static member joined while another member still holds its
/// group.instance.id (KIP-848 refuses the newcomer, where the classic protocol fenced the old).
fn unreleased_error(group: &str, instance_id: Option<&str>) -> Error {
    Error::Fenced(format!(
        "consumer group '{group}': group.instance.id '{}' is still held by another member (UNRELEASED_INSTANCE_ID); this member stops. Give every running instance its own group.instance.id, or start this one after the other has left or its session expired",
        instance_id.unwrap_or_default()
    ))
}

fn unsupported(group: &str, why: &str) -> Error {
    Error::Config(crate::client::ConfigError::Conflict(format!(
        "consumer group '{group}': group.protocol=consumer needs a broker with KIP-848 consumer groups (Kafka 4.0 or later, group.coordinator.rebalance.protocols including 'consumer'): {why}; use group.protocol=classic"
    )))
}

/// One heartbeat to the group's coordinator.
async fn send(shared: &Shared) -> Option<(Sent, Result<ConsumerGroupHeartbeatResponse>)> {
    let conn = match shared
        .cluster
        .coordinator(CoordinatorKind::Group, &shared.group_id)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            let sent = heartbeat_request(shared, 1)?.1;
            return Some((sent, Err(e)));
        }
    };
    let version = match conn.version_for::<ConsumerGroupHeartbeatRequest>(None) {
        Ok(v) => v,
        Err(e) => {
            let err = unsupported(&shared.group_id, &e.to_string());
            warn!(error = %err, "the member cannot go on");
            shared.lock().fail(err);
            return None;
        }
    };
    let (req, mut sent) = heartbeat_request(shared, version)?;
    sent.coordinator = conn.addr().to_owned();
    Some((sent, conn.request_at(&req, version).await))
}

/// Heartbeats while the member is in (or joining) the group, at the coordinator's interval,
/// and at once when `poll` asks (joining, an acknowledgement); gives the membership up when the
/// application stops polling for max.poll.interval.ms.
pub(super) async fn heartbeat_loop(shared: Arc<Shared>) {
    let cfg = shared.config.clone();
    let mut due = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(due.into()) => {}
            _ = shared.wake.notified() => {}
        }
        let (phase, urgent, last_poll) = {
            let st = shared.lock();
            let p = st.cg.phase;
            (
                p,
                p == Phase::Joining
                    || st.cg.full
                    || st.cg.ack_seq.is_some()
                    || st.cg.subscription_changed,
                st.last_poll,
            )
        };
        let interval = shared.lock().cg.interval.unwrap_or(cfg.heartbeat_interval);
        if !phase.heartbeats() {
            due = Instant::now() + interval;
            continue;
        }
        if !urgent && Instant::now() < due {
            continue; // woken for nothing new
        }
        if phase.in_group() && last_poll.is_some_and(|t| t.elapsed() > cfg.max_poll_interval) {
            warn!(
                "poll was not called within max.poll.interval.ms={} ms; giving up the membership",
                cfg.max_poll_interval.as_millis()
            );
            leave(&shared).await;
            shared.lock().cg.on(Event::MembershipGone);
            shared.answered.notify_waiters();
            due = Instant::now() + interval;
            continue;
        }
        let started = Instant::now();
        let span = info_span!("consumer_group_heartbeat", group = %shared.group_id);
        let outcome = send(&shared).instrument(span).await;
        let wait = match outcome {
            Some((sent, result)) => apply_answer(&shared, sent, result),
            None => interval,
        };
        shared.answered.notify_waiters();
        due = started + wait;
    }
}

/// Leaves the group: epoch -1 (dynamic) or -2 (static: the coordinator keeps the assignment
/// for the session timeout). Errors are logged only: the session expires anyway.
pub(super) async fn leave(shared: &Shared) {
    let (member_id, epoch) = {
        let st = shared.lock();
        (st.member_id.clone(), st.generation)
    };
    if member_id.is_empty() || epoch <= 0 {
        return;
    }
    let instance = shared.config.group_instance_id.clone();
    let leave_epoch = if instance.is_some() {
        STATIC_LEAVE_EPOCH
    } else {
        LEAVE_EPOCH
    };
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())))
        .with_member_id(StrBytes::from_string(member_id))
        .with_member_epoch(leave_epoch)
        .with_instance_id(instance.map(StrBytes::from_string))
        .with_rebalance_timeout_ms(-1);
    let result = async {
        let conn = shared
            .cluster
            .coordinator(CoordinatorKind::Group, &shared.group_id)
            .await?;
        conn.request(&req).await
    }
    .await;
    match result {
        Ok(r) if r.error_code == 0 => debug!(epoch = leave_epoch, "left the group"),
        Ok(r) => debug!(code = %ErrorCode(r.error_code), "leaving the group answered an error"),
        Err(e) => debug!(error = %e, "leaving the group failed"),
    }
}

/// The name of a topic id, from the metadata cache.
fn name_of(shared: &Shared, id: &TopicId) -> Option<String> {
    shared
        .cluster
        .metadata()
        .topics
        .values()
        .find(|t| &t.id == id)
        .map(|t| t.name.clone())
}

impl GroupConsumer {
    /// The consumer protocol's part of `poll`: join when not in the group (waiting for the
    /// first answer until `deadline`), report lost partitions, reconcile to a new target.
    pub(super) async fn reconcile(&mut self, deadline: Instant) -> Result<()> {
        if self.topics.is_empty() && self.pattern.is_none() {
            return Ok(());
        }
        let phase = {
            let mut st = self.shared.lock();
            if let Some(e) = &st.fatal {
                return Err(e.clone());
            }
            let p = st.cg.phase;
            if matches!(p, Phase::Unsubscribed | Phase::Left) {
                self.join(&mut st);
            }
            st.cg.phase
        };
        if phase == Phase::Joining && self.shared.lock().cg.incarnation == 1 {
            // The subscribed topics' metadata (names ↔ ids) before the first target comes.
            let lookup = self.shared.config.leader_topic_lookup();
            for t in &self.topics {
                let _ = self.shared.cluster.partition_count_with(t, lookup).await;
            }
        }
        if phase == Phase::Lost {
            self.report_lost().await?;
        }
        self.wait_while_joining(deadline).await;
        if self.shared.lock().cg.phase == Phase::Reconciling {
            let span = info_span!("reconcile", group = %self.shared.group_id);
            self.reconcile_target().instrument(span).await?;
        }
        Ok(())
    }

    fn join(&self, st: &mut super::MemberState) {
        st.cg.on(Event::Join);
        st.cg.start_joining();
        st.generation = 0;
        st.cg.subscribe(self.topics.clone(), self.pattern.clone());
        self.shared.wake.notify_one();
    }

    /// The membership is gone: the partitions go to `on_lost` (another member may own them
    /// already: nothing is committed), then the member joins again.
    async fn report_lost(&mut self) -> Result<()> {
        let gone = {
            let mut st = self.shared.lock();
            st.cg.on(Event::LossReported);
            st.cg.start_joining();
            st.generation = 0;
            std::mem::take(&mut st.assigned)
        };
        self.shared.wake.notify_one();
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
        Ok(())
    }

    /// Waits (until `deadline`) for the coordinator's first answer to a join, so that the poll
    /// that joins can already reconcile.
    async fn wait_while_joining(&self, deadline: Instant) {
        loop {
            let answered = self.shared.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if self.shared.lock().cg.phase != Phase::Joining {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, answered).await.is_err() {
                return;
            }
        }
    }

    /// Revokes what the target no longer holds, then assigns what it adds; the next heartbeat
    /// (at once) acknowledges.
    async fn reconcile_target(&mut self) -> Result<()> {
        let (target, seq, generation) = {
            let st = self.shared.lock();
            (st.cg.target.clone(), st.cg.target_seq, st.generation)
        };
        let mut resolved = resolve(&target, |id| name_of(&self.shared, id));
        if !resolved.1.is_empty() {
            // Ids the cache does not know: a topic created (or re-created) since the last
            // refresh, or one a pattern matched that the cache never tracked.
            if let Err(e) = self.learn_topic_ids(&resolved.1).await {
                debug!(error = %e, "metadata for the assignment's topic ids failed");
            }
            resolved = resolve(&target, |id| name_of(&self.shared, id));
        }
        let (new, unknown) = resolved;
        if !unknown.is_empty() {
            debug!(
                topics = unknown.len(),
                "assigned topic ids not in the metadata yet; they wait for the next poll"
            );
        }
        let old: BTreeSet<TopicPartition> = self.assignment().into_iter().collect();
        let p = plan(&old, &new);
        if !p.revoke.is_empty() {
            self.give_up(&p.revoke).await;
        }
        let new_list: Vec<TopicPartition> = new.iter().cloned().collect();
        self.pending.retain(|tp| new.contains(tp));
        self.pending.extend(p.assign.iter().cloned());
        let running: Vec<TopicPartition> = new_list
            .iter()
            .filter(|tp| !self.pending.contains(tp))
            .cloned()
            .collect();
        self.consumer.assign(running).await?;
        {
            let mut st = self.shared.lock();
            st.assigned = new_list;
            st.cg.owned_ids = target
                .iter()
                .filter(|(id, _)| !unknown.contains(id))
                .cloned()
                .collect();
            if st.cg.phase == Phase::Reconciling {
                st.cg.ack_seq = Some(seq);
                // A newer target that came meanwhile, or ids still unknown: reconcile again at
                // the next poll (the heartbeat acknowledges this step meanwhile).
                let complete = st.cg.target_seq == seq && unknown.is_empty();
                st.cg.on(Event::Reconciled { complete });
            }
        }
        self.shared.wake.notify_one();
        info!(
            epoch = generation,
            revoked = p.revoke.len(),
            assigned = p.assign.len(),
            owned = new.len(),
            "reconciled the assignment"
        );
        Ok(())
    }

    /// Finds the names of topic ids (Metadata for every topic), adds them to the topics the
    /// cache tracks, and refreshes it.
    async fn learn_topic_ids(&self, ids: &[TopicId]) -> Result<()> {
        let cluster = &self.shared.cluster;
        let conn = cluster.any_broker().await?;
        let resp = conn
            .request(&kafka_protocol::messages::MetadataRequest::default().with_topics(None))
            .await?;
        let names: Vec<String> = resp
            .topics
            .iter()
            .filter(|t| ids.contains(t.topic_id.as_bytes()))
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect();
        cluster.add_interest(names.iter().map(String::as_str));
        cluster.refresh_metadata().await?;
        Ok(())
    }

    /// `close` under the consumer protocol: commit (with auto commit), `on_revoked`, leave.
    pub(super) async fn close_member(&mut self) {
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
        leave(&self.shared).await;
        self.shared.lock().cg.on(Event::Leave);
    }
}
