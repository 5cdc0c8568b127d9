//! Joining the group under the classic protocol: JoinGroup until the coordinator has every
//! member, the leader's assignment, SyncGroup handing it out, and the checks of what the
//! member is handed; all of it again, after a backoff, while the answers say so.

use super::assignor::{self, Assignment, MemberSubscription};
use super::codec;
use super::{fenced_error, reaction, GroupApi, Reaction, Shared, Strategy};
use crate::client::cluster::Stale;
use crate::client::coordinator::CoordinatorKind;
use crate::client::error::{Error, Result};
use crate::client::metadata::{MetadataSnapshot, TopicPartition};
use crate::protocol::ErrorCode;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{GroupId, JoinGroupRequest, JoinGroupResponse, SyncGroupRequest};
use kafka_protocol::protocol::StrBytes;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// What a JoinGroup + SyncGroup round ended in.
pub(super) enum Joined {
    /// A member of the new generation with this assignment.
    Assigned(Rebalanced),
    /// The coordinator removed the member or its generation (UNKNOWN_MEMBER_ID,
    /// ILLEGAL_GENERATION): whatever it owned is lost; it must join again.
    Lost,
}

/// The result of a successful rebalance.
pub(super) struct Rebalanced {
    pub(super) generation: i32,
    pub(super) protocol: String,
    pub(super) assignment: Vec<TopicPartition>,
}

/// One join attempt's outcome, in the retry executor's terms: `Done`; `Now` sends JoinGroup
/// again at once (MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS); `Again` after a backoff, looking
/// the coordinator up again if `refresh`.
type Step = crate::client::retry::Step<Joined>;

/// JoinGroup answers only when every member has joined, which may take the whole rebalance
/// timeout (max.poll.interval.ms): allow that plus this, as the Java client does.
const JOIN_GROUP_LAPSE: Duration = Duration::from_secs(5);

/// Joins the group (JoinGroup + SyncGroup), again after a backoff while the answers say so,
/// until the member is in a generation with an assignment, is lost, or cannot go on.
pub(super) async fn join_and_sync(
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
        .policy(crate::client::Op::General, cfg.client.api_timeout)
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

/// The JoinGroup request: the member id and generation the member has, and its subscription
/// (with the partitions it owns) under every strategy it announces, most preferred first.
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
    let (me, generation, protocol) = enter_generation(shared, &resp);
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
    let sync = sync_request(shared, generation, me, &protocol, assignments);
    // SyncGroup waits only for the leader's assignment: request.timeout.ms, as Java.
    let resp = conn.request(&sync).await?;
    if let Some(step) = step_for(shared, GroupApi::SyncGroup, ErrorCode(resp.error_code))
        .map_err(|e| e.at_broker("coordinator", conn.addr()))?
    {
        return Ok(step);
    }
    let assignment = codec::decode_assignment(resp.assignment.clone())?;
    if let Some(step) = assignment_refused(shared, &assignment, topics).await {
        return Ok(step);
    }
    Ok(Step::Done(Joined::Assigned(Rebalanced {
        generation,
        protocol,
        assignment,
    })))
}

/// Takes the generation a JoinGroup answer opens: the member's id, the generation and the
/// protocol the group chose (range when the answer names none), which it returns.
fn enter_generation(shared: &Shared, resp: &JoinGroupResponse) -> (String, i32, String) {
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
    let mut st = shared.lock();
    st.member_id = me.clone();
    st.generation = generation;
    st.protocol = Some(protocol.clone());
    (me, generation, protocol)
}

/// The SyncGroup request of member `me` in `generation`, with the leader's `assignments`
/// (none from a follower).
fn sync_request(
    shared: &Shared,
    generation: i32,
    me: String,
    protocol: &str,
    assignments: Vec<SyncGroupRequestAssignment>,
) -> SyncGroupRequest {
    SyncGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())))
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
        .with_protocol_name(Some(StrBytes::from_string(protocol.to_owned())))
        .with_assignments(assignments)
}

/// The step that joins again when the assignment SyncGroup handed out cannot be taken: a topic
/// outside the subscription, or a partition its topic does not have (after a metadata refresh
/// to be sure).
async fn assignment_refused(
    shared: &Shared,
    assignment: &[TopicPartition],
    topics: &[String],
) -> Option<Step> {
    if let Some(t) = outside_subscription(assignment, topics) {
        // As the Java member does when an assignment does not match its subscription: join
        // again. Here it also catches a damaged SyncGroup answer: a flipped bit in a topic
        // name left the member owning a topic that does not exist, in a stable group, for
        // ever (the group member under random flips).
        warn!(topic = %t, "assigned a topic outside the subscription; joining again");
        return Some(Step::Again {
            why: format!(
                "the assignment names topic '{t}', which the member does not subscribe to"
            ),
            refresh: false,
        });
    }
    if beyond_the_topic(assignment, &shared.cluster.metadata()).is_some() {
        // Partitions may have been added since this member's metadata: asked again first.
        let _ = shared.cluster.refresh_metadata().await;
        if let Some(tp) = beyond_the_topic(assignment, &shared.cluster.metadata()) {
            // A damaged SyncGroup answer (a flipped bit made partition 1 into 2049): the
            // member would own a partition that does not exist, and poll would fail on it for
            // ever. Joined again.
            warn!(%tp, "assigned a partition the topic does not have; joining again");
            return Some(Step::Again {
                why: format!("the assignment names {tp}, which the topic does not have"),
                refresh: false,
            });
        }
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
