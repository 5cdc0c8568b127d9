//! ListOffsets: partitions' earliest, latest (high watermark, or LSO under read_committed) or
//! by-timestamp offsets, asked of each partition's leader. Used by the consumer (seeks, resets,
//! watermarks) and by [`crate::client::Admin::list_offsets`].

use super::cluster::{Cluster, Stale};
use super::config::IsolationLevel;
use super::error::{Error, Op, Result};
use super::metadata::{Offset, TopicPartition};
use super::retry::Step;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

type Progress = (HashMap<TopicPartition, i64>, Vec<TopicPartition>);

fn lock(p: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// One ListOffsets request for `tps` (all led by the same broker), one topic entry per topic in
/// first-seen order.
fn request(tps: &[TopicPartition], ts: i64, isolation: IsolationLevel) -> ListOffsetsRequest {
    let mut topics: Vec<ListOffsetsTopic> = Vec::new();
    for tp in tps {
        let p = ListOffsetsPartition::default()
            .with_partition_index(tp.partition)
            .with_current_leader_epoch(-1)
            .with_timestamp(ts);
        match topics.iter_mut().find(|t| t.name.0.as_str() == tp.topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
                    .with_partitions(vec![p]),
            ),
        }
    }
    ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation.wire())
        .with_topics(topics)
}

/// Takes a leader's answer: each partition's offset goes into `out`, each partition with an
/// error back into `todo` (to ask again). Returns the last error seen, if any.
fn merge(
    resp: &ListOffsetsResponse,
    out: &mut HashMap<TopicPartition, i64>,
    todo: &mut Vec<TopicPartition>,
) -> Option<Error> {
    let mut last_err = None;
    for t in &resp.topics {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
            if p.error_code == 0 {
                // No record at/after the timestamp: -1; the end is then right.
                out.insert(tp, p.offset);
            } else {
                let e = Error::broker(format!("list offsets of {tp}"), ErrorCode(p.error_code));
                last_err = Some(e);
                todo.push(tp);
            }
        }
    }
    last_err
}

/// The partitions a timestamp lookup found no record at or after (offset -1).
fn past_every_record(out: &HashMap<TopicPartition, i64>) -> Vec<TopicPartition> {
    out.iter()
        .filter(|(_, o)| **o < 0)
        .map(|(tp, _)| tp.clone())
        .collect()
}

/// Resolves `Beginning`/`End`/`Timestamp` to offsets with ListOffsets at each leader, retrying
/// within the cluster's default.api.timeout.ms. `End` is the high watermark under
/// read_uncommitted and the last stable offset under read_committed. A timestamp past every
/// record resolves to the end, as in the Java consumer. `At(o)` is `o` for every partition.
pub(crate) async fn list_offsets(
    cluster: &Cluster,
    isolation: IsolationLevel,
    tps: &[TopicPartition],
    at: Offset,
) -> Result<HashMap<TopicPartition, i64>> {
    let ts = match at {
        Offset::Beginning => -2,
        Offset::End => -1,
        Offset::Timestamp(t) => t,
        Offset::At(o) => return Ok(tps.iter().map(|tp| (tp.clone(), o)).collect()),
    };
    // What is known so far, and what is still to ask: an attempt asks only for the partitions
    // whose answer was an error (a leader that moved answers for its partitions only).
    let progress = Mutex::new((HashMap::new(), tps.to_vec()));
    let policy = cluster
        .policy(Op::General, cluster.config().api_timeout)
        .last_error_at_deadline();
    cluster
        .retrying("listing offsets", policy, Stale::Metadata, |_| async {
            let todo = lock(&progress).1.clone();
            let mut by_leader: HashMap<i32, Vec<TopicPartition>> = HashMap::new();
            for tp in todo {
                by_leader
                    .entry(cluster.leader(&tp).await?)
                    .or_default()
                    .push(tp);
            }
            let mut again = Vec::new();
            let mut last_err = None;
            for (leader, tps) in by_leader {
                let answer = async {
                    let conn = cluster.broker(leader).await?;
                    let resp = conn.request(&request(&tps, ts, isolation)).await?;
                    Ok::<_, Error>((resp, conn.addr().to_owned()))
                }
                .await;
                match answer {
                    Ok((resp, at)) => {
                        if let Some(e) = merge(&resp, &mut lock(&progress).0, &mut again) {
                            last_err = Some(e.at_broker("leader", &at));
                        }
                    }
                    Err(e) => {
                        last_err = Some(e);
                        again.extend(tps);
                    }
                }
            }
            lock(&progress).1 = again;
            match last_err {
                None => Ok(Step::Done(())),
                Some(e) => Err(e),
            }
        })
        .await?;
    let mut out = progress.into_inner().unwrap_or_else(|p| p.into_inner()).0;
    // A timestamp past every record resolves to -1: use the end instead, as the Java client does.
    if matches!(at, Offset::Timestamp(_)) {
        let missing = past_every_record(&out);
        if !missing.is_empty() {
            let ends = Box::pin(list_offsets(cluster, isolation, &missing, Offset::End)).await?;
            out.extend(ends);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::list_offsets_response::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    #[test]
    fn a_request_groups_partitions_by_topic_and_carries_isolation_and_timestamp() {
        let req = request(
            &[tp("a", 0), tp("b", 3), tp("a", 2)],
            -1,
            IsolationLevel::ReadCommitted,
        );
        assert_eq!(req.replica_id, BrokerId(-1));
        assert_eq!(req.isolation_level, IsolationLevel::ReadCommitted.wire());
        // (topic, [(partition, timestamp, current leader epoch)])
        type Asked = (String, Vec<(i32, i64, i32)>);
        let got: Vec<Asked> = req
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.0.to_string(),
                    t.partitions
                        .iter()
                        .map(|p| (p.partition_index, p.timestamp, p.current_leader_epoch))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("a".to_owned(), vec![(0, -1, -1), (2, -1, -1)]),
                ("b".to_owned(), vec![(3, -1, -1)]),
            ]
        );
        let req = request(&[tp("a", 0)], -2, IsolationLevel::ReadUncommitted);
        assert_eq!(req.isolation_level, IsolationLevel::ReadUncommitted.wire());
        assert_eq!(req.topics[0].partitions[0].timestamp, -2);
    }

    fn answer(parts: &[(&str, i32, i16, i64)]) -> ListOffsetsResponse {
        let mut topics: Vec<ListOffsetsTopicResponse> = Vec::new();
        for (t, p, code, offset) in parts {
            let part = ListOffsetsPartitionResponse::default()
                .with_partition_index(*p)
                .with_error_code(*code)
                .with_offset(*offset);
            match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
                Some(x) => x.partitions.push(part),
                None => topics.push(
                    ListOffsetsTopicResponse::default()
                        .with_name(TopicName(StrBytes::from_string((*t).to_owned())))
                        .with_partitions(vec![part]),
                ),
            }
        }
        ListOffsetsResponse::default().with_topics(topics)
    }

    #[test]
    fn merging_keeps_answers_and_sends_failed_partitions_back_to_ask_again() {
        let mut out = HashMap::from([(tp("a", 9), 1)]);
        let mut todo = Vec::new();
        let err = merge(
            &answer(&[
                ("a", 0, 0, 10),
                ("a", 1, ErrorCode::NOT_LEADER_OR_FOLLOWER.0, -1),
                ("b", 0, 0, -1),
            ]),
            &mut out,
            &mut todo,
        );
        assert_eq!(
            out,
            HashMap::from([(tp("a", 9), 1), (tp("a", 0), 10), (tp("b", 0), -1)])
        );
        assert_eq!(todo, vec![tp("a", 1)]);
        let err = err.expect("the failed partition's error");
        assert_eq!(err.code(), Some(ErrorCode::NOT_LEADER_OR_FOLLOWER));
        assert!(err.to_string().contains("a-1"), "{err}");

        let mut todo = Vec::new();
        assert!(merge(&answer(&[("a", 1, 0, 5)]), &mut out, &mut todo).is_none());
        assert!(todo.is_empty());
        assert_eq!(out[&tp("a", 1)], 5);
    }

    #[test]
    fn partitions_with_no_record_at_the_timestamp_are_the_ones_at_minus_one() {
        let out = HashMap::from([(tp("a", 0), 4), (tp("a", 1), -1), (tp("b", 0), 0)]);
        assert_eq!(past_every_record(&out), vec![tp("a", 1)]);
        assert!(past_every_record(&HashMap::new()).is_empty());
    }
}
