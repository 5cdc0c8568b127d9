//! Committed offsets of a group: OffsetFetch (with RequireStable) and OffsetCommit.

use crate::client::cluster::{Cluster, Stale};
use crate::client::coordinator::CoordinatorKind;
use crate::client::error::{Error, Op, Result};
use crate::client::metadata::{by_topic, TopicPartition};
use crate::client::retry::Step;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;
use std::time::Instant;

/// Who commits: the member's identity, so the coordinator can fence a zombie from an older
/// generation. Generation -1 and an empty member id commit for a group without members.
#[derive(Debug, Clone, Default)]
pub(crate) struct Committer {
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    /// A KIP-848 member: `generation` is its member epoch, and OffsetCommit must be v9+ (the
    /// coordinator refuses older versions from a consumer-protocol member).
    pub consumer_protocol: bool,
}

/// Calls the group coordinator through the retry executor until `deadline` (then the last
/// error); a coordinator move makes the next attempt look it up again.
pub(crate) async fn with_coordinator<T, F, Fut>(
    cluster: &Cluster,
    group: &str,
    deadline: Instant,
    call: F,
) -> Result<T>
where
    F: Fn(std::sync::Arc<crate::client::connection::Connection>) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let policy = cluster
        .policy(Op::General, cluster.config().api_timeout)
        .until(deadline)
        .last_error_at_deadline();
    let stale = Stale::Coordinator(CoordinatorKind::Group, group);
    let what = format!("calling the coordinator of group '{group}'");
    let call = &call;
    cluster
        .retrying(&what, policy, stale, move |_| async move {
            let conn = cluster.coordinator(CoordinatorKind::Group, group).await?;
            let at = conn.addr().to_owned();
            let v = call(conn)
                .await
                .map_err(|e| e.at_broker("coordinator", &at))?;
            Ok(Step::Done(v))
        })
        .await
}

/// A group's committed offsets (absent: none), retried within default.api.timeout.ms. See
/// [`fetch_committed_until`].
pub(crate) async fn fetch_committed(
    cluster: &Cluster,
    group: &str,
    tps: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, i64>> {
    let deadline = Instant::now() + cluster.config().api_timeout;
    fetch_committed_until(cluster, group, tps, deadline).await
}

/// A group's committed offsets (absent: none). RequireStable makes the coordinator answer
/// UNSTABLE_OFFSET_COMMIT while a transaction holding offsets for the partition is open, which
/// is retried until `deadline`: a new owner never starts from offsets that may still be
/// aborted. The transaction may stay open up to its transaction.timeout.ms, so a member calls
/// this with its poll's deadline and tries again at the next poll.
pub(crate) async fn fetch_committed_until(
    cluster: &Cluster,
    group: &str,
    tps: &[TopicPartition],
    deadline: Instant,
) -> Result<BTreeMap<TopicPartition, i64>> {
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_require_stable(true)
        .with_topics(Some(
            by_topic(tps)
                .into_iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partition_indexes(ps)
                })
                .collect(),
        ));
    with_coordinator(cluster, group, deadline, |conn| {
        let req = req.clone();
        async move {
            // v8+ batches groups; v7 is the newest with one group, and has RequireStable.
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

/// Commits offsets for the group (OffsetCommit ≤ v8 for a classic member, v9 for a KIP-848
/// member).
///
/// # Errors
/// ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / REBALANCE_IN_PROGRESS mean the group moved on:
/// the caller must rejoin (the Java client's CommitFailedException). FENCED_INSTANCE_ID is
/// [`Error::Fenced`]: another member owns this group.instance.id now.
pub(crate) async fn commit(
    cluster: &Cluster,
    group: &str,
    who: &Committer,
    offsets: &[(TopicPartition, i64)],
) -> Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, o) in offsets {
        topics.entry(tp.topic.as_str()).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(*o)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::from_static_str(""))),
        );
    }
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_generation_id_or_member_epoch(who.generation)
        .with_member_id(StrBytes::from_string(who.member_id.clone()))
        .with_group_instance_id(who.instance_id.clone().map(StrBytes::from_string))
        .with_retention_time_ms(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let deadline = Instant::now() + cluster.config().api_timeout;
    with_coordinator(cluster, group, deadline, |conn| {
        let req = req.clone();
        let who = who.clone();
        async move {
            let v = conn.version_for::<OffsetCommitRequest>(Some(if who.consumer_protocol {
                9
            } else {
                8
            }))?;
            let resp = conn.request_at(&req, v).await?;
            for t in &resp.topics {
                for p in &t.partitions {
                    match ErrorCode(p.error_code) {
                        ErrorCode(0) => {}
                        // Another member took over this member's group.instance.id.
                        ErrorCode::FENCED_INSTANCE_ID => {
                            return Err(super::fenced_error(group, who.instance_id.as_deref()))
                        }
                        // The group moved on: retrying cannot help, the member must rejoin.
                        // (KIP-848: the member epoch moved on, or the member was dropped.)
                        c @ (ErrorCode::REBALANCE_IN_PROGRESS
                        | ErrorCode::ILLEGAL_GENERATION
                        | ErrorCode::UNKNOWN_MEMBER_ID
                        | ErrorCode::STALE_MEMBER_EPOCH
                        | ErrorCode::FENCED_MEMBER_EPOCH) => {
                            return Err(Error::CommitFailed(format!(
                                "offset commit for group '{group}' refused ({c}): the group rebalanced; the partitions may now belong to another member"
                            )))
                        }
                        c => {
                            return Err(Error::broker(
                                format!("offset commit for group '{group}'"),
                                c,
                            ))
                        }
                    }
                }
            }
            Ok(())
        }
    })
    .await
}
