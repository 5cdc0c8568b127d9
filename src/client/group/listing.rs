//! Groups as an operator sees them — what `kafka-consumer-groups.sh --list` and `--describe`
//! show: [`Admin::list_groups`] and [`Admin::describe_consumer_group`].
//!
//! - ListGroups goes to every broker (each lists the groups it coordinates); the answers are
//!   merged. From v5 (Kafka 3.8+) each group carries its type: `classic` (JoinGroup/SyncGroup)
//!   or `consumer` (KIP-848's ConsumerGroupHeartbeat); older brokers only have classic groups.
//! - Describing a group asks its coordinator ConsumerGroupDescribe first; a coordinator that
//!   answers GROUP_ID_NOT_FOUND (the group is not a consumer-protocol group, or does not exist)
//!   or does not support the API is asked DescribeGroups, whose answer for a group it does not
//!   know is the state `Dead` with no members (Kafka 4: GROUP_ID_NOT_FOUND, also for a group of
//!   another type, which the coordinator's ListGroups then tells apart). A classic member's
//!   partitions are decoded from its assignment (the consumer protocol's encoding); a
//!   consumer-protocol member's come named in the answer.
//! - The committed offsets are OffsetFetch for every partition of the group (not waiting for
//!   open transactions); the log end offsets are ListOffsets latest at read_uncommitted, i.e.
//!   the high watermark. Lag is the log end offset minus the committed offset.

use super::codec::decode_assignment;
use super::describe::GroupState;
use super::offsets::with_coordinator;
use crate::client::admin::{retrying, Admin};
use crate::client::cluster::Cluster;
use crate::client::config::IsolationLevel;
use crate::client::connection::Connection;
use crate::client::consumer::Offset;
use crate::client::error::{Error, Result};
use crate::client::metadata::TopicPartition;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup as CgDescribed;
use kafka_protocol::messages::describe_groups_response::DescribedGroup as ClassicDescribed;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, DescribeGroupsRequest, GroupId, ListGroupsRequest,
    MetadataRequest, OffsetFetchRequest,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Instant;
use tracing::{info_span, Instrument};

/// The rebalance protocol a group runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum GroupType {
    /// The classic protocol: JoinGroup/SyncGroup/Heartbeat (consumers with
    /// `group.protocol=classic`, Connect workers, onceflow's [`GroupConsumer`](super::GroupConsumer)).
    Classic,
    /// KIP-848's consumer protocol (`group.protocol=consumer`): ConsumerGroupHeartbeat, the
    /// coordinator assigns.
    Consumer,
    /// Another type a newer broker reports (e.g. `share`, `streams`), as named.
    Other(String),
}

impl GroupType {
    /// The type a ListGroups answer names; an empty name (ListGroups before v5, whose brokers
    /// only have classic groups) is [`GroupType::Classic`].
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::group::GroupType;
    /// assert_eq!(GroupType::parse("consumer"), GroupType::Consumer);
    /// assert_eq!(GroupType::parse(""), GroupType::Classic);
    /// assert_eq!(GroupType::parse("share"), GroupType::Other("share".into()));
    /// ```
    pub fn parse(name: &str) -> GroupType {
        match name.to_ascii_lowercase().as_str() {
            "" | "classic" => GroupType::Classic,
            "consumer" => GroupType::Consumer,
            _ => GroupType::Other(name.to_owned()),
        }
    }

    /// The name as brokers spell it.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::group::GroupType;
    /// assert_eq!(GroupType::Classic.as_str(), "classic");
    /// ```
    pub fn as_str(&self) -> &str {
        match self {
            GroupType::Classic => "classic",
            GroupType::Consumer => "consumer",
            GroupType::Other(s) => s,
        }
    }
}

impl fmt::Display for GroupType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One group of [`Admin::list_groups`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupListing {
    /// The group id.
    pub group: String,
    /// Its rebalance protocol.
    pub group_type: GroupType,
    /// The protocol type its members announced: "consumer" for consumers (of either group
    /// type), "connect" for Connect workers; empty for a classic group that only holds
    /// offsets.
    pub protocol_type: String,
    /// Its state.
    pub state: GroupState,
    /// The node id of its coordinator (the broker that listed it).
    pub coordinator: i32,
}

/// One member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberDescription {
    /// The id the coordinator gave it.
    pub member_id: String,
    /// Its group.instance.id (static membership), if any.
    pub instance_id: Option<String>,
    /// Its client.id.
    pub client_id: String,
    /// The host it connects from, as the coordinator saw it (e.g. `/127.0.0.1`).
    pub client_host: String,
    /// The partitions assigned to it, sorted (empty while a classic group rebalances, or for a
    /// classic member whose protocol type is not "consumer").
    pub assignment: Vec<TopicPartition>,
}

/// One partition of a described group: committed offset, log end and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionLag {
    /// The partition.
    pub partition: TopicPartition,
    /// The group's committed offset (the next offset to read); `None` when none is committed.
    pub committed: Option<i64>,
    /// The partition's log end offset (high watermark); `None` when it could not be read
    /// (e.g. the topic was deleted).
    pub log_end: Option<i64>,
    /// `log_end - committed`; `None` when either is unknown. See `lag`.
    pub lag: Option<i64>,
    /// The member id of the member it is assigned to, if any.
    pub owner: Option<String>,
}

/// A group as [`Admin::describe_consumer_group`] describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerGroupDescription {
    /// The group id.
    pub group: String,
    /// Its rebalance protocol.
    pub group_type: GroupType,
    /// Its state (a consumer-protocol group's `Assigning`/`Reconciling` are
    /// [`GroupState::Other`]).
    pub state: GroupState,
    /// The members' protocol type ("consumer" for consumers; always "consumer" for a
    /// consumer-protocol group).
    pub protocol_type: String,
    /// The assignor: a classic group's chosen protocol (e.g. "range"), a consumer-protocol
    /// group's server-side assignor (e.g. "uniform"); empty when none yet.
    pub assignor: String,
    /// The node id of the coordinator that answered (-1 if metadata does not list it).
    pub coordinator: i32,
    /// The members.
    pub members: Vec<MemberDescription>,
    /// Every partition that has a committed offset or an owner, sorted.
    pub partitions: Vec<PartitionLag>,
}

/// A partition's lag: `log_end - committed` when both are known, else `None` (shown as `-`).
/// A committed offset past the log end (the log was truncated or deleted and recreated) gives
/// a negative lag, reported as it is.
pub(crate) fn lag(committed: Option<i64>, log_end: Option<i64>) -> Option<i64> {
    match (committed, log_end) {
        (Some(c), Some(e)) if c >= 0 && e >= 0 => Some(e - c),
        _ => None,
    }
}

/// The rows of a group's partition table: every partition with a committed offset or an
/// owner among `members`, sorted, with its log end offset (from `log_end`) and lag.
pub(crate) fn partition_rows(
    committed: &BTreeMap<TopicPartition, i64>,
    log_end: &BTreeMap<TopicPartition, i64>,
    members: &[MemberDescription],
) -> Vec<PartitionLag> {
    let mut owners: BTreeMap<&TopicPartition, &str> = BTreeMap::new();
    for m in members {
        for tp in &m.assignment {
            owners.insert(tp, &m.member_id);
        }
    }
    let all: BTreeSet<&TopicPartition> = committed.keys().chain(owners.keys().copied()).collect();
    all.into_iter()
        .map(|tp| {
            let c = committed.get(tp).copied();
            let e = log_end.get(tp).copied();
            PartitionLag {
                partition: tp.clone(),
                committed: c,
                log_end: e,
                lag: lag(c, e),
                owner: owners.get(tp).map(|m| (*m).to_owned()),
            }
        })
        .collect()
}

/// Merges the brokers' ListGroups answers: one entry per group, sorted by id. A group listed
/// twice (its coordinator moved between the two answers) keeps the entry that is not `Dead`,
/// else the later one. Crate-private: its inputs are `#[non_exhaustive]` answers only
/// `Admin::list_groups` builds.
pub(crate) fn merge_listings(answers: Vec<Vec<GroupListing>>) -> Vec<GroupListing> {
    let mut merged: BTreeMap<String, GroupListing> = BTreeMap::new();
    for g in answers.into_iter().flatten() {
        match merged.get(&g.group) {
            Some(old) if old.state != GroupState::Dead && g.state == GroupState::Dead => {}
            _ => {
                merged.insert(g.group.clone(), g);
            }
        }
    }
    merged.into_values().collect()
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// The node id behind a connection (-1 if metadata does not list it).
fn node_of(cluster: &Cluster, conn: &Connection) -> i32 {
    cluster
        .metadata()
        .brokers
        .values()
        .find(|b| b.addr == conn.addr())
        .map_or(-1, |b| b.node_id)
}

/// What the coordinator said of the group's members, before offsets are added.
struct Described {
    group_type: GroupType,
    state: GroupState,
    protocol_type: String,
    assignor: String,
    coordinator: i32,
    members: Vec<MemberDescription>,
    /// Topic ids the answer did not name (a consumer-protocol assignment of a topic the
    /// coordinator could not name), with the partitions of each member to fill in.
    unnamed: Vec<(usize, uuid::Uuid, Vec<i32>)>,
}

/// A consumer-protocol group from its ConsumerGroupDescribe entry (error code 0).
fn from_consumer_describe(g: CgDescribed, coordinator: i32) -> Described {
    let mut unnamed = Vec::new();
    let members = g
        .members
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let mut assignment = Vec::new();
            for t in m.assignment.topic_partitions {
                if t.topic_name.0.is_empty() {
                    unnamed.push((i, t.topic_id, t.partitions));
                } else {
                    let name = t.topic_name.0.to_string();
                    assignment.extend(
                        t.partitions
                            .iter()
                            .map(|p| TopicPartition::new(name.clone(), *p)),
                    );
                }
            }
            assignment.sort();
            MemberDescription {
                member_id: m.member_id.to_string(),
                instance_id: m.instance_id.map(|s| s.to_string()),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                assignment,
            }
        })
        .collect();
    Described {
        group_type: GroupType::Consumer,
        state: GroupState::parse(g.group_state.as_str()),
        protocol_type: "consumer".to_owned(),
        assignor: g.assignor_name.to_string(),
        coordinator,
        members,
        unnamed,
    }
}

/// Asks the group's coordinator who is in `group`; `None` when it does not know the group.
async fn describe_members(cluster: &Cluster, group: &str) -> Result<Option<Described>> {
    let deadline = Instant::now() + cluster.config().api_timeout;
    let id = GroupId(str_bytes(group));
    let cg_req = ConsumerGroupDescribeRequest::default().with_group_ids(vec![id.clone()]);
    let classic_req = DescribeGroupsRequest::default().with_groups(vec![id]);
    with_coordinator(cluster, group, deadline, |conn| {
        let (cg_req, classic_req) = (cg_req.clone(), classic_req.clone());
        async move {
            let coordinator = node_of(cluster, &conn);
            if conn
                .version_for::<ConsumerGroupDescribeRequest>(None)
                .is_ok()
            {
                if let Some(d) = consumer_group_describe(&conn, cg_req, group, coordinator).await? {
                    return Ok(Some(d));
                }
            }
            describe_groups(&conn, classic_req, group, coordinator).await
        }
    })
    .await
}

/// ConsumerGroupDescribe for `group`: the group, if it is a consumer-protocol group; `None`
/// when the classic way must be asked.
async fn consumer_group_describe(
    conn: &Connection,
    req: ConsumerGroupDescribeRequest,
    group: &str,
    coordinator: i32,
) -> Result<Option<Described>> {
    let resp = conn.request(&req).await?;
    let g = resp
        .groups
        .into_iter()
        .find(|g| g.group_id.0.as_str() == group)
        .ok_or_else(|| {
            Error::Protocol(format!(
                "ConsumerGroupDescribe for '{group}' answered without that group"
            ))
        })?;
    match ErrorCode(g.error_code) {
        ErrorCode(0) => Ok(Some(from_consumer_describe(g, coordinator))),
        // Not a consumer-protocol group (or no group), or a coordinator that lists
        // the API without running the consumer protocol: ask the classic way.
        ErrorCode::GROUP_ID_NOT_FOUND | ErrorCode::UNSUPPORTED_VERSION => Ok(None),
        c => Err(Error::broker(format!("describing group '{group}'"), c)),
    }
}

/// DescribeGroups for `group`; `None` when the coordinator does not know the group.
async fn describe_groups(
    conn: &Connection,
    req: DescribeGroupsRequest,
    group: &str,
    coordinator: i32,
) -> Result<Option<Described>> {
    let resp = conn.request(&req).await?;
    let g = resp
        .groups
        .into_iter()
        .find(|g| g.group_id.0.as_str() == group)
        .ok_or_else(|| {
            Error::Protocol(format!(
                "DescribeGroups for '{group}' answered without that group"
            ))
        })?;
    if g.error_code == ErrorCode::GROUP_ID_NOT_FOUND.0 {
        // Kafka 4 answers so for a group it does not have, and for a group of neither
        // protocol (share, streams): its own listing tells which.
        let listed = conn.request(&ListGroupsRequest::default()).await?;
        return match listed.groups.iter().find(|l| l.group_id.0.as_str() == group) {
            None => Ok(None),
            Some(l) => Err(Error::Usage(format!(
                "group '{group}' is a {} group, neither classic nor consumer-protocol; only those can be described",
                GroupType::parse(l.group_type.as_str())
            ))),
        };
    }
    ErrorCode::check(g.error_code)
        .map_err(|c| Error::broker(format!("describing group '{group}'"), c))?;
    let state = GroupState::parse(g.group_state.as_str());
    if state == GroupState::Dead && g.members.is_empty() {
        return Ok(None);
    }
    Ok(Some(from_classic_describe(g, state, group, coordinator)))
}

/// A group as DescribeGroups describes it, in `state`.
fn from_classic_describe(
    g: ClassicDescribed,
    state: GroupState,
    group: &str,
    coordinator: i32,
) -> Described {
    let protocol_type = g.protocol_type.to_string();
    let members = g
        .members
        .into_iter()
        .map(|m| {
            let mut assignment = if protocol_type == "consumer" {
                // A member whose assignment is not the consumer protocol's encoding
                // is shown without partitions rather than failing the whole group.
                decode_assignment(m.member_assignment).unwrap_or_else(|e| {
                    tracing::debug!(group, error = %e, "undecodable member assignment");
                    Vec::new()
                })
            } else {
                Vec::new()
            };
            assignment.sort();
            MemberDescription {
                member_id: m.member_id.to_string(),
                instance_id: m.group_instance_id.map(|s| s.to_string()),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                assignment,
            }
        })
        .collect();
    Described {
        group_type: GroupType::Classic,
        state,
        protocol_type,
        assignor: g.protocol_data.to_string(),
        coordinator,
        members,
        unnamed: Vec::new(),
    }
}

/// Every committed offset of `group` (OffsetFetch for all partitions, not waiting for open
/// transactions: an operator's view, not a starting position).
async fn all_committed(cluster: &Cluster, group: &str) -> Result<BTreeMap<TopicPartition, i64>> {
    let deadline = Instant::now() + cluster.config().api_timeout;
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_require_stable(false)
        .with_topics(None);
    with_coordinator(cluster, group, deadline, |conn| {
        let req = req.clone();
        async move {
            // v8+ batches groups; v7 is the newest with one group.
            let v = conn.version_for::<OffsetFetchRequest>(Some(7))?;
            let resp = conn.request_at(&req, v).await?;
            let ctx = || format!("offset fetch for group '{group}'");
            ErrorCode::check(resp.error_code).map_err(|c| Error::broker(ctx(), c))?;
            let mut out = BTreeMap::new();
            for t in &resp.topics {
                for p in &t.partitions {
                    ErrorCode::check(p.error_code).map_err(|c| Error::broker(ctx(), c))?;
                    if p.committed_offset >= 0 {
                        out.insert(
                            TopicPartition::new(t.name.0.to_string(), p.partition_index),
                            p.committed_offset,
                        );
                    }
                }
            }
            Ok(out)
        }
    })
    .await
}

/// Topic names by topic id, from a Metadata request for every topic.
async fn topic_names_by_id(cluster: &Cluster) -> Result<HashMap<uuid::Uuid, String>> {
    retrying(cluster, "topic_names_by_id", || async {
        let conn = cluster.any_broker().await?;
        let resp = conn
            .request(&MetadataRequest::default().with_topics(None))
            .await?;
        Ok(resp
            .topics
            .iter()
            .filter_map(|t| Some((t.topic_id, t.name.as_ref()?.0.to_string())))
            .collect())
    })
    .await
}

impl Admin {
    /// Lists every group in the cluster — its type (classic or consumer protocol), protocol
    /// type and state — asking every broker in the metadata (each lists the groups it
    /// coordinates) and merging the answers, sorted by group id.
    ///
    /// # Errors
    /// A broker's error (e.g. CLUSTER_AUTHORIZATION_FAILED) or [`Error::Timeout`] after retries
    /// within default.api.timeout.ms. One broker failing fails the call: a partial list could
    /// hide the group being looked for.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{Admin, ClientConfig};
    /// let admin = Admin::new(ClientConfig::default()).await?;
    /// for g in admin.list_groups().await? {
    ///     println!("{} {} {:?}", g.group, g.group_type, g.state);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let cluster = self.cluster();
        if cluster.metadata().brokers.is_empty() {
            cluster.refresh_metadata().await?;
        }
        let mut nodes: Vec<i32> = cluster.metadata().brokers.keys().copied().collect();
        nodes.sort_unstable();
        let mut answers = Vec::new();
        for node in nodes {
            answers.push(
                list_groups_on(cluster, node)
                    .instrument(info_span!("admin", op = "list_groups", node))
                    .await?,
            );
        }
        Ok(merge_listings(answers))
    }

    /// Describes a group as `kafka-consumer-groups.sh --describe` does: its type, state,
    /// assignor and coordinator, its members with their partitions, and for every partition
    /// with a committed offset or an owner: the committed offset, the log end offset (the high
    /// watermark: ListOffsets latest at read_uncommitted) and the lag between them. Works for
    /// classic groups (DescribeGroups) and KIP-848 consumer-protocol groups
    /// (ConsumerGroupDescribe). `Ok(None)` when the cluster has no such group.
    ///
    /// # Errors
    /// The group's error (e.g. GROUP_AUTHORIZATION_FAILED), [`Error::Usage`] for a group of
    /// another type (share, streams), or the coordinator's unavailability after retries
    /// within default.api.timeout.ms.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{Admin, ClientConfig};
    /// let admin = Admin::new(ClientConfig::default()).await?;
    /// if let Some(g) = admin.describe_consumer_group("cleaners").await? {
    ///     let total: i64 = g.partitions.iter().filter_map(|p| p.lag).sum();
    ///     println!("{} ({}): {} members, lag {total}", g.group, g.group_type, g.members.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn describe_consumer_group(
        &self,
        group: &str,
    ) -> Result<Option<ConsumerGroupDescription>> {
        let cluster: &Arc<Cluster> = self.cluster();
        let span = info_span!("admin", op = "describe_consumer_group", group);
        let Some(mut d) = describe_members(cluster, group)
            .instrument(span.clone())
            .await?
        else {
            return Ok(None);
        };
        if !d.unnamed.is_empty() {
            let names = topic_names_by_id(cluster).instrument(span.clone()).await?;
            for (i, id, parts) in std::mem::take(&mut d.unnamed) {
                let name = names.get(&id).cloned().unwrap_or_else(|| id.to_string());
                if let Some(m) = d.members.get_mut(i) {
                    m.assignment
                        .extend(parts.iter().map(|p| TopicPartition::new(name.clone(), *p)));
                    m.assignment.sort();
                }
            }
        }
        let committed = all_committed(cluster, group)
            .instrument(span.clone())
            .await?;
        let mut tps: BTreeSet<TopicPartition> = committed.keys().cloned().collect();
        for m in &d.members {
            tps.extend(m.assignment.iter().cloned());
        }
        let log_end = self.log_ends(tps).instrument(span).await?;
        let partitions = partition_rows(&committed, &log_end, &d.members);
        Ok(Some(ConsumerGroupDescription {
            group: group.to_owned(),
            group_type: d.group_type,
            state: d.state,
            protocol_type: d.protocol_type,
            assignor: d.assignor,
            coordinator: d.coordinator,
            members: d.members,
            partitions,
        }))
    }

    /// The high watermarks of `tps`; a topic that cannot be read (deleted since the group
    /// committed for it) is left out rather than failing the rest.
    async fn log_ends(
        &self,
        tps: BTreeSet<TopicPartition>,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let all: Vec<TopicPartition> = tps.into_iter().collect();
        if all.is_empty() {
            return Ok(BTreeMap::new());
        }
        match self
            .list_offsets(&all, Offset::End, IsolationLevel::ReadUncommitted)
            .await
        {
            Err(Error::UnknownTopic(_) | Error::UnknownPartition { .. }) => {}
            other => return other,
        }
        let mut by_topic: BTreeMap<&str, Vec<TopicPartition>> = BTreeMap::new();
        for tp in &all {
            by_topic
                .entry(tp.topic.as_str())
                .or_default()
                .push(tp.clone());
        }
        let mut out = BTreeMap::new();
        for tps in by_topic.values() {
            match self
                .list_offsets(tps, Offset::End, IsolationLevel::ReadUncommitted)
                .await
            {
                Ok(ends) => out.extend(ends),
                Err(Error::UnknownTopic(_) | Error::UnknownPartition { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// The groups broker `node` coordinates.
async fn list_groups_on(cluster: &Cluster, node: i32) -> Result<Vec<GroupListing>> {
    retrying(cluster, "list_groups", || async {
        let conn = cluster.broker(node).await?;
        let resp = conn.request(&ListGroupsRequest::default()).await?;
        ErrorCode::check(resp.error_code)
            .map_err(|c| Error::broker(format!("list groups on broker {}", conn.addr()), c))?;
        Ok(resp
            .groups
            .iter()
            .map(|g| GroupListing {
                group: g.group_id.0.to_string(),
                group_type: GroupType::parse(g.group_type.as_str()),
                protocol_type: g.protocol_type.to_string(),
                state: GroupState::parse(g.group_state.as_str()),
                coordinator: node,
            })
            .collect())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    fn member(id: &str, tps: &[(&str, i32)]) -> MemberDescription {
        MemberDescription {
            member_id: id.into(),
            instance_id: None,
            client_id: format!("client-{id}"),
            client_host: "/127.0.0.1".into(),
            assignment: tps.iter().map(|(t, p)| tp(t, *p)).collect(),
        }
    }

    #[test]
    fn lag_needs_both_offsets() {
        assert_eq!(lag(Some(90), Some(100)), Some(10));
        assert_eq!(lag(None, Some(100)), None); // nothing committed yet
    }

    #[test]
    fn an_empty_group_has_a_row_per_committed_partition_only() {
        let (p0, p1) = (tp("rides", 0), tp("rides", 1));
        let committed = BTreeMap::from([(p0.clone(), 90)]);
        let log_end = BTreeMap::from([(p0.clone(), 100), (p1, 7)]);
        let rows = partition_rows(&committed, &log_end, &[]);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (
                rows[0].partition.clone(),
                rows[0].lag,
                rows[0].owner.clone()
            ),
            (p0, Some(10), None)
        );
    }

    #[test]
    fn lag_is_the_log_end_minus_the_committed_offset_when_both_are_known() {
        let cases = [
            // (committed, log end, lag)
            (Some(10), Some(25), Some(15)),
            (Some(25), Some(25), Some(0)),
            (Some(0), Some(0), Some(0)),
            // Committed past the end (log truncated, topic recreated): shown as it is.
            (Some(30), Some(25), Some(-5)),
            // Nothing committed: the owner starts per auto.offset.reset; lag unknown.
            (None, Some(25), None),
            // Log end unknown (topic deleted).
            (Some(10), None, None),
            (None, None, None),
            // A negative offset is "none" on the wire.
            (Some(-1), Some(5), None),
        ];
        for (committed, end, want) in cases {
            assert_eq!(
                lag(committed, end),
                want,
                "committed {committed:?}, end {end:?}"
            );
        }
    }

    #[test]
    fn rows_cover_committed_and_owned_partitions_sorted() {
        let committed: BTreeMap<_, _> = [(tp("a", 1), 4), (tp("a", 0), 7), (tp("gone", 0), 3)]
            .into_iter()
            .collect();
        let ends: BTreeMap<_, _> = [(tp("a", 0), 10), (tp("a", 1), 4), (tp("b", 0), 9)]
            .into_iter()
            .collect();
        let members = [
            member("m1", &[("a", 0)]),
            member("m2", &[("b", 0), ("a", 1)]),
        ];
        let rows = partition_rows(&committed, &ends, &members);
        let got: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.partition.to_string(),
                    r.committed,
                    r.log_end,
                    r.lag,
                    r.owner.clone(),
                )
            })
            .collect();
        let want = vec![
            (
                "a-0".to_owned(),
                Some(7),
                Some(10),
                Some(3),
                Some("m1".to_owned()),
            ),
            ("a-1".into(), Some(4), Some(4), Some(0), Some("m2".into())),
            // Owned, nothing committed yet.
            ("b-0".into(), None, Some(9), None, Some("m2".into())),
            // Committed, topic deleted since: no log end, no owner.
            ("gone-0".into(), Some(3), None, None, None),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn no_members_and_no_offsets_is_no_rows() {
        assert!(partition_rows(&BTreeMap::new(), &BTreeMap::new(), &[]).is_empty());
    }

    #[test]
    fn group_types_by_name() {
        let cases = [
            ("classic", GroupType::Classic),
            ("", GroupType::Classic),
            ("Classic", GroupType::Classic),
            ("consumer", GroupType::Consumer),
            ("share", GroupType::Other("share".into())),
            ("streams", GroupType::Other("streams".into())),
        ];
        for (name, want) in cases {
            assert_eq!(GroupType::parse(name), want, "{name:?}");
        }
        assert_eq!(GroupType::Consumer.to_string(), "consumer");
    }

    #[test]
    fn listings_merge_one_per_group_sorted_preferring_the_live_entry() {
        let l = |g: &str, state: GroupState, node: i32| GroupListing {
            group: g.into(),
            group_type: GroupType::Classic,
            protocol_type: "consumer".into(),
            state,
            coordinator: node,
        };
        let merged = merge_listings(vec![
            vec![
                l("zeta", GroupState::Stable, 1),
                l("moved", GroupState::Stable, 1),
            ],
            vec![
                l("alpha", GroupState::Empty, 2),
                l("moved", GroupState::Dead, 2),
            ],
            vec![l("alpha", GroupState::Stable, 3)],
        ]);
        let got: Vec<_> = merged
            .iter()
            .map(|g| (g.group.as_str(), g.state.clone(), g.coordinator))
            .collect();
        assert_eq!(
            got,
            vec![
                ("alpha", GroupState::Stable, 3),
                ("moved", GroupState::Stable, 1),
                ("zeta", GroupState::Stable, 1),
            ]
        );
    }

    #[test]
    fn a_consumer_protocol_answer_names_members_partitions_and_defers_unnamed_ids() {
        use kafka_protocol::messages::consumer_group_describe_response::{
            Assignment, Member, TopicPartitions,
        };
        use kafka_protocol::messages::TopicName;
        let named = TopicPartitions::default()
            .with_topic_id(uuid::Uuid::from_u128(1))
            .with_topic_name(TopicName(str_bytes("rides")))
            .with_partitions(vec![2, 0]);
        let unnamed = TopicPartitions::default()
            .with_topic_id(uuid::Uuid::from_u128(7))
            .with_partitions(vec![1]);
        let g = CgDescribed::default()
            .with_group_id(GroupId(str_bytes("g")))
            .with_group_state(str_bytes("Stable"))
            .with_assignor_name(str_bytes("uniform"))
            .with_members(vec![Member::default()
                .with_member_id(str_bytes("m-1"))
                .with_instance_id(Some(str_bytes("i-1")))
                .with_client_id(str_bytes("c"))
                .with_client_host(str_bytes("/10.0.0.1"))
                .with_assignment(
                    Assignment::default().with_topic_partitions(vec![named, unnamed]),
                )]);
        let d = from_consumer_describe(g, 3);
        assert_eq!(d.group_type, GroupType::Consumer);
        assert_eq!(d.state, GroupState::Stable);
        assert_eq!(d.assignor, "uniform");
        assert_eq!(d.coordinator, 3);
        assert_eq!(d.members.len(), 1);
        let m = &d.members[0];
        assert_eq!(m.member_id, "m-1");
        assert_eq!(m.instance_id.as_deref(), Some("i-1"));
        assert_eq!(m.client_host, "/10.0.0.1");
        assert_eq!(m.assignment, vec![tp("rides", 0), tp("rides", 2)]);
        assert_eq!(d.unnamed, vec![(0, uuid::Uuid::from_u128(7), vec![1])]);
    }
}
