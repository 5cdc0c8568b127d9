//! The requests a transactional producer sends to its coordinators, one small function each:
//! the request built from what the producer knows, the answer turned into an error code (pure,
//! unit-tested), and the call through the coordinator retry helper.
//!
//! - InitProducerId with the transactional id (fencing older instances; or, with the current
//!   id and epoch, bumping the epoch, KIP-360);
//! - AddPartitionsToTxn (classic protocol: a partition joins before anything is produced to it);
//! - AddOffsetsToTxn (classic protocol: the group joins before its offsets are sent);
//! - TxnOffsetCommit (to the group coordinator, KIP-447).
//!
//! EndTxn is in `resume/end.rs`: the producer's commit and `resume_transaction` share it.

use crate::client::cluster::Cluster;
use crate::client::coordinator::{coordinator_call_on, CoordinatorKind};
use crate::client::error::{Error, Result};
use crate::client::group::GroupMetadata;
use crate::client::metadata::TopicPartition;
use crate::client::producer::{check_assigned, Identity};
use crate::protocol::ErrorCode;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, GroupId,
    InitProducerIdRequest, ProducerId, TopicName, TransactionalId, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;
use std::time::Duration;
use tracing::{info, info_span, Instrument};

/// AddPartitionsToTxn v4+ is for brokers verifying on a client's behalf; clients use ≤ v3.
const MAX_CLIENT_ADD_PARTITIONS_VERSION: i16 = 3;
/// Under the classic protocol TxnOffsetCommit must stay ≤ v4 (v5 implies KIP-890's implicit
/// AddOffsetsToTxn).
const MAX_CLASSIC_TXN_OFFSET_COMMIT_VERSION: i16 = 4;
/// TxnOffsetCommit v5: KIP-890's, with the implicit AddOffsetsToTxn.
const TV2_TXN_OFFSET_COMMIT_VERSION: i16 = 5;

fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_owned()))
}

/// Whether transactions may use KIP-890 (transaction.version 2) with this cluster: the
/// finalized feature says so, as the broker with the newest features reported it (a broker that
/// has just restarted reports an old level until it catches up; taking its word switched a
/// producer to the classic protocol for one transaction mid-run and the next KIP-890 commit
/// was refused — the rolling-restart cluster test). Decided per transaction; every request of
/// a KIP-890 transaction then goes at a KIP-890 version (`Connection::tv2_version_for`).
impl Cluster {
    pub(crate) fn transaction_version_2(&self) -> bool {
        self.transaction_version_level() >= 2
    }
}

/// InitProducerId for a transactional id. With `current`, bumps that producer's epoch
/// (KIP-360) instead of fencing.
///
/// # Errors
/// INVALID_TRANSACTION_TIMEOUT becomes a configuration error naming both settings and values.
pub(crate) async fn init_transactional_id(
    cluster: &Cluster,
    id: &str,
    timeout: Duration,
    current: Option<Identity>,
) -> Result<Identity> {
    let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(txn_id(id)))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(current.map_or(-1, |c| c.producer_id)))
        .with_producer_epoch(current.map_or(-1, |c| c.epoch));
    let budget = timeout.max(cluster.config().api_timeout);
    let result = coordinator_call_on(
        cluster,
        CoordinatorKind::Transaction,
        id,
        "InitProducerId",
        budget,
        |conn| {
            let req = req.clone();
            async move {
                let r = conn.request(&req).await?;
                let id = Identity {
                    producer_id: r.producer_id.0,
                    epoch: r.producer_epoch,
                };
                if r.error_code == 0 {
                    check_assigned(conn.addr(), id)?;
                }
                Ok((r.error_code, id))
            }
        },
    )
    .instrument(info_span!("init_producer_id", transactional_id = id))
    .await;
    match result {
        Err(e) if e.code() == Some(ErrorCode::INVALID_TRANSACTION_TIMEOUT) => {
            Err(invalid_timeout(cluster, timeout).await)
        }
        Ok(id_) => {
            info!(
                transactional_id = id,
                producer_id = id_.producer_id,
                epoch = id_.epoch,
                "transactional producer id assigned"
            );
            Ok(id_)
        }
        Err(e) => Err(e),
    }
}

/// The error for transaction.timeout.ms above the broker's transaction.max.timeout.ms, with
/// both values: Flink users hit exactly this with a 1 h default.
async fn invalid_timeout(cluster: &Cluster, timeout: Duration) -> Error {
    let max = broker_transaction_max_timeout(cluster).await;
    Error::Config(crate::client::ConfigError::Conflict(format!(
        "transaction.timeout.ms={} exceeds the broker's transaction.max.timeout.ms={}; lower transaction.timeout.ms or raise transaction.max.timeout.ms on the brokers",
        timeout.as_millis(),
        max.map_or("(unknown)".to_owned(), |m| m.to_string())
    )))
}

/// The broker's transaction.max.timeout.ms, for the error message (best effort).
async fn broker_transaction_max_timeout(cluster: &Cluster) -> Option<String> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    let node = *cluster.metadata().brokers.keys().next()?;
    let conn = cluster.broker(node).await.ok()?;
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_string(node.to_string()))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str(
                "transaction.max.timeout.ms",
            )]))]);
    let resp = conn.request(&req).await.ok()?;
    resp.results
        .iter()
        .flat_map(|r| r.configs.iter())
        .find(|c| c.name.as_str() == "transaction.max.timeout.ms")
        .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
}

/// AddPartitionsToTxn (≤ v3) for `tps`, topics in name order.
fn add_partitions_request(
    id: &str,
    identity: Identity,
    tps: &[TopicPartition],
) -> AddPartitionsToTxnRequest {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in tps {
        topics
            .entry(tp.topic.as_str())
            .or_default()
            .push(tp.partition);
    }
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(id))
        .with_v3_and_below_producer_id(ProducerId(identity.producer_id))
        .with_v3_and_below_producer_epoch(identity.epoch)
        .with_v3_and_below_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partitions(ps)
                })
                .collect(),
        )
}

/// The code an AddPartitionsToTxn answer stands for: the first partition error.
/// OPERATION_NOT_ATTEMPTED only says another partition failed.
fn add_partitions_error(r: &AddPartitionsToTxnResponse) -> i16 {
    r.results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| t.results_by_partition.iter())
        .map(|p| p.partition_error_code)
        .find(|c| *c != 0 && *c != ErrorCode::OPERATION_NOT_ATTEMPTED.0)
        .unwrap_or(0)
}

/// Classic protocol: adds `tps` to the open transaction.
pub(crate) async fn add_partitions_to_txn(
    cluster: &Cluster,
    id: &str,
    identity: Identity,
    tps: &[TopicPartition],
    timeout: Duration,
) -> Result<()> {
    let req = add_partitions_request(id, identity, tps);
    coordinator_call_on(
        cluster,
        CoordinatorKind::Transaction,
        id,
        "AddPartitionsToTxn",
        timeout,
        |conn| {
            let req = req.clone();
            async move {
                let v = conn.version_for::<AddPartitionsToTxnRequest>(Some(
                    MAX_CLIENT_ADD_PARTITIONS_VERSION,
                ))?;
                let r = conn.request_at(&req, v).await?;
                Ok((add_partitions_error(&r), ()))
            }
        },
    )
    .instrument(info_span!("add_partitions_to_txn", partitions = tps.len()))
    .await
}

/// Classic protocol: adds the group's offsets topic to the open transaction, before
/// TxnOffsetCommit.
pub(crate) async fn add_offsets_to_txn(
    cluster: &Cluster,
    id: &str,
    identity: Identity,
    group_id: &str,
    timeout: Duration,
) -> Result<()> {
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(txn_id(id))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_group_id(GroupId(StrBytes::from_string(group_id.to_owned())));
    coordinator_call_on(
        cluster,
        CoordinatorKind::Transaction,
        id,
        "AddOffsetsToTxn",
        timeout,
        |conn| {
            let req = req.clone();
            async move {
                let r = conn.request(&req).await?;
                Ok((r.error_code, ()))
            }
        },
    )
    .await
}

/// TxnOffsetCommit for `offsets` of `group`, topics in name order.
fn txn_offset_commit_request(
    id: &str,
    identity: Identity,
    offsets: &[(TopicPartition, i64)],
    group: &GroupMetadata,
) -> TxnOffsetCommitRequest {
    let mut topics: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, offset) in offsets {
        topics.entry(tp.topic.as_str()).or_default().push(
            TxnOffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::from_static_str(""))),
        );
    }
    TxnOffsetCommitRequest::default()
        .with_transactional_id(txn_id(id))
        .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_generation_id(group.generation_id)
        .with_member_id(StrBytes::from_string(group.member_id.clone()))
        .with_group_instance_id(group.group_instance_id.clone().map(StrBytes::from_string))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partitions(ps)
                })
                .collect(),
        )
}

/// The code a TxnOffsetCommit answer stands for: the first partition error.
fn txn_offset_commit_error(r: &TxnOffsetCommitResponse) -> i16 {
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.error_code)
        .find(|c| *c != 0)
        .unwrap_or(0)
}

/// Sends the offsets to the group coordinator as part of the transaction: ≤ v4 under the
/// classic protocol, v5 (which adds the group itself) under KIP-890.
pub(crate) async fn txn_offset_commit(
    cluster: &Cluster,
    id: &str,
    identity: Identity,
    tv2: bool,
    offsets: &[(TopicPartition, i64)],
    group: &GroupMetadata,
    timeout: Duration,
) -> Result<()> {
    let req = txn_offset_commit_request(id, identity, offsets, group);
    let cap = if tv2 {
        None
    } else {
        Some(MAX_CLASSIC_TXN_OFFSET_COMMIT_VERSION)
    };
    coordinator_call_on(
        cluster,
        CoordinatorKind::Group,
        &group.group_id,
        "TxnOffsetCommit",
        timeout,
        |conn| {
            let req = req.clone();
            async move {
                let v = if tv2 {
                    conn.tv2_version_for::<TxnOffsetCommitRequest>(TV2_TXN_OFFSET_COMMIT_VERSION)?
                } else {
                    conn.version_for::<TxnOffsetCommitRequest>(cap)?
                };
                let r = conn.request_at(&req, v).await?;
                Ok((txn_offset_commit_error(&r), ()))
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    use kafka_protocol::messages::txn_offset_commit_response::{
        TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
    };

    const ME: Identity = Identity {
        producer_id: 7,
        epoch: 3,
    };

    #[test]
    fn add_partitions_groups_partitions_by_topic() {
        let tps = [
            TopicPartition::new("b", 1),
            TopicPartition::new("a", 0),
            TopicPartition::new("b", 0),
        ];
        let r = add_partitions_request("tx", ME, &tps);
        assert_eq!(r.v3_and_below_transactional_id.0.as_str(), "tx");
        assert_eq!(r.v3_and_below_producer_id.0, 7);
        assert_eq!(r.v3_and_below_producer_epoch, 3);
        let topics: Vec<(String, Vec<i32>)> = r
            .v3_and_below_topics
            .iter()
            .map(|t| (t.name.0.to_string(), t.partitions.clone()))
            .collect();
        assert_eq!(
            topics,
            vec![("a".to_owned(), vec![0]), ("b".to_owned(), vec![1, 0])]
        );
    }

    fn add_answer(codes: &[i16]) -> AddPartitionsToTxnResponse {
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(vec![
            AddPartitionsToTxnTopicResult::default().with_results_by_partition(
                codes
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        AddPartitionsToTxnPartitionResult::default()
                            .with_partition_index(i as i32)
                            .with_partition_error_code(*c)
                    })
                    .collect(),
            ),
        ])
    }

    #[test]
    fn an_add_partitions_answer_stands_for_its_first_real_error() {
        let not_attempted = ErrorCode::OPERATION_NOT_ATTEMPTED.0;
        let fenced = ErrorCode::PRODUCER_FENCED.0;
        let cases: &[(&[i16], i16)] = &[
            (&[], 0),
            (&[0, 0], 0),
            (&[not_attempted, fenced, not_attempted], fenced),
            (&[not_attempted], 0),
            (
                &[ErrorCode::CONCURRENT_TRANSACTIONS.0, fenced],
                ErrorCode::CONCURRENT_TRANSACTIONS.0,
            ),
        ];
        for (codes, want) in cases {
            assert_eq!(add_partitions_error(&add_answer(codes)), *want, "{codes:?}");
        }
    }

    #[test]
    fn txn_offset_commit_carries_the_group_identity() {
        let group = GroupMetadata {
            group_id: "g".into(),
            generation_id: 4,
            member_id: "m-1".into(),
            group_instance_id: Some("i-1".into()),
        };
        let offsets = [
            (TopicPartition::new("t", 1), 10),
            (TopicPartition::new("t", 0), 20),
        ];
        let r = txn_offset_commit_request("tx", ME, &offsets, &group);
        assert_eq!(r.group_id.0.as_str(), "g");
        assert_eq!(r.generation_id, 4);
        assert_eq!(r.member_id.as_str(), "m-1");
        assert_eq!(
            r.group_instance_id.as_ref().map(|s| s.as_str()),
            Some("i-1")
        );
        assert_eq!((r.producer_id.0, r.producer_epoch), (7, 3));
        let parts: Vec<(i32, i64)> = r.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.committed_offset))
            .collect();
        assert_eq!(parts, vec![(1, 10), (0, 20)]);
    }

    #[test]
    fn a_txn_offset_commit_answer_stands_for_its_first_error() {
        let answer = |codes: &[i16]| {
            TxnOffsetCommitResponse::default().with_topics(vec![
                TxnOffsetCommitResponseTopic::default().with_partitions(
                    codes
                        .iter()
                        .map(|c| TxnOffsetCommitResponsePartition::default().with_error_code(*c))
                        .collect(),
                ),
            ])
        };
        let illegal = ErrorCode::ILLEGAL_GENERATION.0;
        assert_eq!(txn_offset_commit_error(&answer(&[0, 0])), 0);
        assert_eq!(txn_offset_commit_error(&answer(&[0, illegal])), illegal);
    }
}
