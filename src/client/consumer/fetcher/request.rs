//! The Fetch request: what it asks for each partition ([`Want`]), the version and the fetch
//! session (KIP-227) it goes under, building and sending it, closing sessions, and the
//! response's answers matched to the partitions asked for.

use super::integrity::REFETCHES_OF_CORRUPT_DATA;
use crate::client::config::ConsumerConfig;
use crate::client::connection::Connection;
use crate::client::consumer::metrics::Counters;
use crate::client::consumer::session::{FetchSession, Outcome, PartitionFetch, Plan, FINAL_EPOCH};
use crate::client::consumer::{PartitionState, Shared, Skip};
use crate::client::error::Result;
use crate::client::metadata::TopicPartition;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tracing::debug;
use uuid::Uuid;

/// The newest Fetch version the crate speaks.
const MAX_FETCH_VERSION: i16 = 18;

/// Fetch v13 addresses topics by id (KIP-516); v12 is the newest by name.
const TOPIC_ID_VERSION: i16 = 13;

/// First Fetch version with current_leader_epoch (KIP-320).
const CURRENT_LEADER_EPOCH_VERSION: i16 = 9;

/// First Fetch version with last_fetched_epoch and diverging_epoch.
const LAST_FETCHED_EPOCH_VERSION: i16 = 12;

/// One partition of a Fetch request.
#[derive(Debug, Clone)]
pub(super) struct Want {
    pub(super) tp: TopicPartition,
    pub(super) fetch_offset: i64,
    /// The partition's fetch epoch when the request was built.
    pub(super) epoch: u64,
    /// The leader epoch from metadata (-1 when unknown).
    pub(super) leader_epoch: i32,
    /// Leader epoch of the last batch fetched before `fetch_offset` (-1 when unknown).
    pub(super) last_fetched_epoch: i32,
    /// The topic's id from metadata (all zero when the broker gave none).
    pub(super) topic_id: [u8; 16],
    /// `fetch_offset` is where the whole entries of the last answer ended
    /// (`PartitionState::answer_end`).
    pub(super) after_answer: bool,
    /// The answer's aborted-transaction list is checked against its batches
    /// (`aborted_list_borne_out`); off once answers at this offset failed checks
    /// [`REFETCHES_OF_CORRUPT_DATA`] times in a row: the same answer again is the log.
    pub(super) check_aborted_list: bool,
    /// With `after_answer`: the aborted transactions still open where the last answer ended
    /// (`PartitionState::open_aborted`), which this answer must list again.
    pub(super) open_aborted: Vec<(i64, i64)>,
    /// A walk back under way (`PartitionState::resync`): entries of this answer already
    /// handed out.
    pub(super) skip: Option<Skip>,
}

impl Want {
    /// What partition `tp` asks for in this round's request, from its state `st` and what
    /// metadata names: the leader's epoch and the topic's id.
    pub(super) fn new(
        tp: &TopicPartition,
        st: &PartitionState,
        leader_epoch: i32,
        topic_id: [u8; 16],
    ) -> Want {
        let after_answer = st.answer_end == Some(st.fetch_offset);
        Want {
            tp: tp.clone(),
            fetch_offset: st.fetch_offset,
            epoch: st.epoch,
            leader_epoch,
            last_fetched_epoch: st.last_fetched_epoch,
            topic_id,
            after_answer,
            open_aborted: if after_answer {
                st.open_aborted.clone()
            } else {
                Vec::new()
            },
            check_aborted_list: !matches!(st.corrupt_at,
                Some((at, n)) if at == st.fetch_offset && n >= REFETCHES_OF_CORRUPT_DATA),
            skip: st
                .resync
                .filter(|r| r.epoch == st.epoch && r.at == st.fetch_offset)
                .map(|r| r.skip),
        }
    }

    /// What a request carries for the partition, as a fetch session compares it.
    fn fetch(&self, cfg: &ConsumerConfig) -> PartitionFetch {
        PartitionFetch {
            topic_id: self.topic_id,
            fetch_offset: self.fetch_offset,
            log_start_offset: -1,
            current_leader_epoch: self.leader_epoch,
            last_fetched_epoch: self.last_fetched_epoch,
            max_bytes: cfg.max_partition_fetch_bytes,
        }
    }
}

/// The Fetch version for `list` among those the broker offers (`offered`, the newest both
/// sides speak): by topic id from v13 when every topic has an id, else v12 at most.
fn fetch_version(offered: i16, list: &[Want]) -> i16 {
    if offered >= TOPIC_ID_VERSION && list.iter().any(|w| w.topic_id == [0; 16]) {
        TOPIC_ID_VERSION - 1
    } else {
        offered
    }
}

/// A response and what its request was.
pub(super) struct Sent {
    pub(super) resp: FetchResponse,
    /// The session's plan; `None` with sessions off.
    pub(super) plan: Option<Plan>,
    /// Whether topics were addressed by id.
    pub(super) by_id: bool,
    /// The broker that answered (its address), named in the errors its codes become.
    pub(super) broker: String,
}

/// Connects to `leader`, plans the request with the leader's session and sends the Fetch for
/// `list`.
pub(super) async fn send_fetch(
    shared: &Shared,
    sessions: &Sessions,
    leader: i32,
    list: &[Want],
) -> Result<Sent> {
    let cfg = &shared.config;
    let conn = shared.cluster.broker(leader).await?;
    let version = fetch_version(
        conn.version_for::<FetchRequest>(Some(MAX_FETCH_VERSION))?,
        list,
    );
    let by_id = version >= TOPIC_ID_VERSION;
    let plan = if cfg.fetch_sessions_enable {
        let mut all = lock(sessions);
        let ls = all.entry(leader).or_default();
        let here = Arc::downgrade(&conn);
        if !Weak::ptr_eq(&ls.conn, &here) {
            // A new connection: whatever session the old one had is out of step.
            ls.session.restart();
            ls.conn = here;
        }
        let wanted: Vec<(TopicPartition, PartitionFetch)> =
            list.iter().map(|w| (w.tp.clone(), w.fetch(cfg))).collect();
        Some(ls.session.plan(&wanted, by_id))
    } else {
        None
    };
    let req = build_request(cfg, version, list, plan.as_ref());
    let counters = &shared.counters;
    match &plan {
        Some(p) if !p.is_full() => Counters::add(&counters.fetch_requests_incremental, 1),
        _ => Counters::add(&counters.fetch_requests_full, 1),
    }
    if let Ok(n) = req.compute_size(version) {
        Counters::add(&counters.fetch_request_bytes, n as u64);
    }
    // The broker holds a Fetch up to max_wait when there is no data: that is not the network
    // being slow, and must not time out (and replace) the connection.
    let resp = conn
        .start_request(&req, version)?
        .with_timeout(conn.request_timeout() + cfg.fetch_max_wait)
        .response()
        .await?;
    Ok(Sent {
        resp,
        plan,
        by_id,
        broker: conn.addr().to_owned(),
    })
}

/// The Fetch request for `list`, partitions in its order. Without a session `plan` every
/// partition goes (session id 0, epoch -1); with one, the partitions it picks and the ones
/// it forgets. From v13 topics go by id (the name is not encoded).
fn build_request(
    cfg: &ConsumerConfig,
    version: i16,
    list: &[Want],
    plan: Option<&Plan>,
) -> FetchRequest {
    let all: Vec<usize>;
    let (session_id, epoch, send, forget) = match plan {
        Some(p) => (p.session_id, p.epoch, &p.send, &p.forget[..]),
        None => {
            all = (0..list.len()).collect();
            (0, FINAL_EPOCH, &all, &[][..])
        }
    };
    let mut topics: Vec<FetchTopic> = Vec::new();
    for w in send.iter().filter_map(|&i| list.get(i)) {
        let mut p = FetchPartition::default()
            .with_partition(w.tp.partition)
            .with_fetch_offset(w.fetch_offset)
            .with_log_start_offset(-1)
            .with_partition_max_bytes(cfg.max_partition_fetch_bytes);
        // The leader fences a request of a stale epoch (FENCED_LEADER_EPOCH) or one it does
        // not know yet (UNKNOWN_LEADER_EPOCH): both refresh metadata and retry.
        if version >= CURRENT_LEADER_EPOCH_VERSION {
            p = p.with_current_leader_epoch(w.leader_epoch);
        }
        if version >= LAST_FETCHED_EPOCH_VERSION {
            p = p.with_last_fetched_epoch(w.last_fetched_epoch);
        }
        // Topics may repeat when the order interleaves them; the broker serves the partitions
        // in request order either way.
        match topics.last_mut() {
            Some(t) if *t.topic.0 == *w.tp.topic && *t.topic_id.as_bytes() == w.topic_id => {
                t.partitions.push(p)
            }
            _ => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(w.tp.topic.clone())))
                    .with_topic_id(Uuid::from_bytes(w.topic_id))
                    .with_partitions(vec![p]),
            ),
        }
    }
    let mut forgotten: Vec<ForgottenTopic> = Vec::new();
    for (tp, topic_id) in forget {
        match forgotten.last_mut() {
            Some(t) if *t.topic.0 == *tp.topic && *t.topic_id.as_bytes() == *topic_id => {
                t.partitions.push(tp.partition)
            }
            _ => forgotten.push(
                ForgottenTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(tp.topic.clone())))
                    .with_topic_id(Uuid::from_bytes(*topic_id))
                    .with_partitions(vec![tp.partition]),
            ),
        }
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(cfg.fetch_max_wait.as_millis().min(i32::MAX as u128) as i32)
        .with_min_bytes(cfg.fetch_min_bytes)
        .with_max_bytes(cfg.fetch_max_bytes)
        .with_isolation_level(cfg.isolation_level.wire())
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(topics)
        .with_forgotten_topics_data(forgotten)
}

/// The answers a response holds for the partitions of `list`, in response order: the index of
/// the partition in `list` and its data; and whether it named a partition not in `list` (a
/// session out of step with the broker). Topics match by id when the request went by id
/// (`by_id`), else by name. A partition not asked for is ignored; one answered twice counts
/// once, the first time.
pub(super) fn answers<'a>(
    list: &[Want],
    resp: &'a FetchResponse,
    by_id: bool,
) -> (Vec<(usize, &'a PartitionData)>, bool) {
    let mut seen = vec![false; list.len()];
    let mut out = Vec::new();
    let mut stranger = false;
    for t in &resp.responses {
        let topic_matches = |w: &Want| match by_id {
            true => w.topic_id == *t.topic_id.as_bytes(),
            false => w.tp.topic == *t.topic.0,
        };
        for p in &t.partitions {
            let asked = list
                .iter()
                .position(|w| w.tp.partition == p.partition_index && topic_matches(w));
            match asked {
                Some(i) if !seen[i] => {
                    seen[i] = true;
                    out.push((i, p));
                }
                Some(_) => {}
                None => stranger = true,
            }
        }
    }
    (out, stranger)
}

/// A leader's fetch session and the connection it lives on: a session does not outlive its
/// connection (a request lost with it leaves the epochs out of step).
#[derive(Debug, Default)]
pub(crate) struct LeaderSession {
    session: FetchSession,
    conn: Weak<Connection>,
}

/// The fetch sessions by leader; one request per leader at a time uses its entry.
pub(crate) type Sessions = Arc<Mutex<HashMap<i32, LeaderSession>>>;

fn lock(sessions: &Sessions) -> std::sync::MutexGuard<'_, HashMap<i32, LeaderSession>> {
    sessions.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts the leader's fetch session again: the next request is a full one. Whether there was
/// a session under way (an id, or incremental requests).
pub(super) fn restart_session(sessions: &Sessions, leader: i32) -> bool {
    let mut all = lock(sessions);
    let Some(ls) = all.get_mut(&leader) else {
        return false;
    };
    let under_way = ls.session.id().is_some() || ls.session.is_incremental();
    ls.session.restart();
    under_way
}

/// What a response comes to as a whole: under a fetch session, what the session makes of it
/// (its error code, its session id, and whether it named a partition not asked for,
/// `stranger`); without one, a top-level error fails the whole request.
pub(super) fn response_outcome(
    sessions: &Sessions,
    leader: i32,
    plan: Option<Plan>,
    resp: &FetchResponse,
    stranger: bool,
) -> Outcome {
    match (plan, lock(sessions).get_mut(&leader)) {
        (Some(plan), Some(ls)) => {
            let code = ErrorCode(resp.error_code);
            ls.session
                .on_response(&plan, code, resp.session_id, stranger)
        }
        // Sessions off: a top-level error fails the whole request.
        _ if resp.error_code != 0 => Outcome::Failed(ErrorCode(resp.error_code)),
        _ => Outcome::Answered,
    }
}

/// Closes every fetch session the broker holds for us: a request at the final epoch (-1) with
/// the session's id and no partitions, which the broker answers at once, dropping the session
/// rather than keeping its cache slot until it idles out. Best effort, on connections already
/// open: the consumer is going away.
pub(in crate::client::consumer) async fn close_sessions(shared: Arc<Shared>) {
    let open: Vec<(i32, i32, Arc<Connection>)> = lock(&shared.sessions)
        .drain()
        .filter_map(|(leader, ls)| Some((leader, ls.session.id()?, ls.conn.upgrade()?)))
        .filter(|(_, _, conn)| !conn.is_poisoned())
        .collect();
    for (leader, id, conn) in open {
        let Ok(version) = conn.version_for::<FetchRequest>(Some(MAX_FETCH_VERSION)) else {
            continue;
        };
        let req = close_request(&shared.config, id);
        match conn.request_at(&req, version).await {
            Ok(_) => debug!(leader, session = id, "fetch session closed"),
            Err(e) => debug!(leader, session = id, error = %e, "closing the fetch session failed"),
        }
    }
}

/// The request that closes session `id`: final epoch, nothing to fetch, no wait.
fn close_request(cfg: &ConsumerConfig, id: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(cfg.fetch_max_bytes)
        .with_isolation_level(cfg.isolation_level.wire())
        .with_session_id(id)
        .with_session_epoch(FINAL_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A topic of a request: its name and, per partition, (partition, fetch offset, max bytes,
    /// current leader epoch, last fetched epoch).
    type TopicLayout = (String, Vec<(i32, i64, i32, i32, i32)>);

    /// (what, the response, the answers as (index in the list, high watermark)).
    type AnswersCase = (&'static str, FetchResponse, Vec<(usize, i64)>);

    fn want(topic: &str, partition: i32, fetch_offset: i64) -> Want {
        Want {
            tp: TopicPartition::new(topic, partition),
            fetch_offset,
            epoch: 1,
            leader_epoch: 7,
            last_fetched_epoch: 6,
            topic_id: id_of(topic),
            after_answer: false,
            check_aborted_list: true,
            open_aborted: Vec::new(),
            skip: None,
        }
    }

    /// A topic id for each test topic name: its first byte, repeated.
    fn id_of(topic: &str) -> [u8; 16] {
        [topic.as_bytes()[0]; 16]
    }

    /// The request carries the configuration, the partitions in order (a topic repeats when
    /// the order interleaves it) and the leader epochs only from the versions that have them.
    #[test]
    fn the_request_follows_the_list_and_the_version() {
        let cfg = ConsumerConfig::from_properties([
            ("fetch.max.wait.ms", "250"),
            ("fetch.min.bytes", "10"),
            ("fetch.max.bytes", "1000"),
            ("max.partition.fetch.bytes", "100"),
            ("isolation.level", "read_committed"),
        ])
        .unwrap();
        let list = [
            want("a", 0, 10),
            want("a", 1, 11),
            want("b", 0, 12),
            want("a", 2, 13),
        ];
        // (version, current_leader_epoch sent, last_fetched_epoch sent)
        let versions = [
            (4, -1, -1),
            (8, -1, -1),
            (9, 7, -1),
            (12, 7, 6),
            (13, 7, 6),
            (17, 7, 6),
            (18, 7, 6),
        ];
        for (version, current, last) in versions {
            let req = build_request(&cfg, version, &list, None);
            // On the wire: names up to v12, ids from v13.
            let mut buf = bytes::BytesMut::new();
            req.encode(&mut buf, version).unwrap();
            let wire = <FetchRequest as kafka_protocol::protocol::Decodable>::decode(
                &mut buf.freeze(),
                version,
            )
            .unwrap();
            let topics: Vec<(String, [u8; 16])> = wire
                .topics
                .iter()
                .map(|t| (t.topic.0.to_string(), *t.topic_id.as_bytes()))
                .collect();
            let expect_topic = |n: &str| match version >= TOPIC_ID_VERSION {
                true => (String::new(), id_of(n)),
                false => (n.to_owned(), [0; 16]),
            };
            assert_eq!(
                topics,
                vec![expect_topic("a"), expect_topic("b"), expect_topic("a")],
                "v{version}"
            );
            assert_eq!(
                (
                    req.replica_id.0,
                    req.max_wait_ms,
                    req.min_bytes,
                    req.max_bytes,
                    req.isolation_level,
                    req.session_id,
                    req.session_epoch
                ),
                (-1, 250, 10, 1000, 1, 0, -1),
                "v{version}"
            );
            let layout: Vec<TopicLayout> = req
                .topics
                .iter()
                .map(|t| {
                    let ps = t.partitions.iter().map(|p| {
                        (
                            p.partition,
                            p.fetch_offset,
                            p.partition_max_bytes,
                            p.current_leader_epoch,
                            p.last_fetched_epoch,
                        )
                    });
                    (t.topic.0.to_string(), ps.collect())
                })
                .collect();
            assert_eq!(
                layout,
                vec![
                    (
                        "a".to_owned(),
                        vec![(0, 10, 100, current, last), (1, 11, 100, current, last)]
                    ),
                    ("b".to_owned(), vec![(0, 12, 100, current, last)]),
                    ("a".to_owned(), vec![(2, 13, 100, current, last)]),
                ],
                "v{version}"
            );
        }
    }

    /// A response's answers, matched to the request's partitions.
    #[test]
    fn answers_match_the_request_ignore_strangers_and_count_a_partition_once() {
        use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
        let topic = |name: &str, parts: &[(i32, i64)]| {
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_string(name.to_owned())))
                .with_partitions(
                    parts
                        .iter()
                        .map(|(i, hw)| {
                            PartitionData::default()
                                .with_partition_index(*i)
                                .with_high_watermark(*hw)
                        })
                        .collect(),
                )
        };
        let list = [want("a", 0, 0), want("b", 1, 0), want("c", 2, 0)];
        let cases: Vec<AnswersCase> = vec![
            ("empty", FetchResponse::default(), vec![]),
            (
                "in response order, not request order",
                FetchResponse::default()
                    .with_responses(vec![topic("b", &[(1, 20)]), topic("a", &[(0, 10)])]),
                vec![(1, 20), (0, 10)],
            ),
            (
                "a partition not asked for, and a topic not asked for",
                FetchResponse::default()
                    .with_responses(vec![topic("a", &[(9, 90), (0, 10)]), topic("x", &[(0, 1)])]),
                vec![(0, 10)],
            ),
            (
                "answered twice: the first answer counts",
                FetchResponse::default()
                    .with_responses(vec![topic("c", &[(2, 30)]), topic("c", &[(2, 31)])]),
                vec![(2, 30)],
            ),
        ];
        for (what, resp, want) in cases {
            let got: Vec<(usize, i64)> = answers(&list, &resp, false)
                .0
                .into_iter()
                .map(|(i, p)| (i, p.high_watermark))
                .collect();
            assert_eq!(got, want, "{what}");
        }
    }

    /// Under a session: an incremental request carries its session id and epoch, only the
    /// partitions picked, and the forgotten ones grouped by topic, with their ids.
    #[test]
    fn a_session_request_carries_the_plan() {
        let cfg = ConsumerConfig::default();
        let list = [want("a", 0, 10), want("a", 1, 11), want("b", 0, 12)];
        let plan = Plan {
            session_id: 42,
            epoch: 5,
            send: vec![1, 2],
            forget: vec![
                (TopicPartition::new("c", 0), id_of("c")),
                (TopicPartition::new("c", 3), id_of("c")),
                (TopicPartition::new("d", 1), id_of("d")),
            ],
        };
        let req = build_request(&cfg, 13, &list, Some(&plan));
        assert_eq!((req.session_id, req.session_epoch), (42, 5));
        type SentTopic = ([u8; 16], Vec<(i32, i64)>);
        let sent: Vec<SentTopic> = req
            .topics
            .iter()
            .map(|t| {
                let ps = t.partitions.iter().map(|p| (p.partition, p.fetch_offset));
                (*t.topic_id.as_bytes(), ps.collect())
            })
            .collect();
        assert_eq!(
            sent,
            vec![(id_of("a"), vec![(1, 11)]), (id_of("b"), vec![(0, 12)])]
        );
        let forgotten: Vec<(String, [u8; 16], Vec<i32>)> = req
            .forgotten_topics_data
            .iter()
            .map(|t| {
                (
                    t.topic.0.to_string(),
                    *t.topic_id.as_bytes(),
                    t.partitions.clone(),
                )
            })
            .collect();
        assert_eq!(
            forgotten,
            vec![
                ("c".to_owned(), id_of("c"), vec![0, 3]),
                ("d".to_owned(), id_of("d"), vec![1]),
            ]
        );
        // Sessions off: everything, session id 0, epoch -1.
        let req = build_request(&cfg, 13, &list, None);
        assert_eq!(
            (req.session_id, req.session_epoch, req.topics.len()),
            (0, -1, 2)
        );
    }

    /// The request that closes a session: its id, the final epoch, nothing fetched, no wait.
    #[test]
    fn the_close_request_names_the_session_at_the_final_epoch() {
        let req = close_request(&ConsumerConfig::default(), 42);
        assert_eq!(
            (
                req.session_id,
                req.session_epoch,
                req.topics.len(),
                req.forgotten_topics_data.len(),
                req.max_wait_ms,
                req.min_bytes
            ),
            (42, -1, 0, 0, 0, 0)
        );
    }

    /// By id (v13+) the response's topic ids are mapped back to the request's partitions, and
    /// a partition the request did not want is reported (a session out of step).
    #[test]
    fn answers_by_id_map_ids_back_and_notice_strangers() {
        use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
        let topic = |id: [u8; 16], parts: &[i32]| {
            FetchableTopicResponse::default()
                .with_topic_id(Uuid::from_bytes(id))
                .with_partitions(
                    parts
                        .iter()
                        .map(|i| PartitionData::default().with_partition_index(*i))
                        .collect(),
                )
        };
        let list = [want("a", 0, 0), want("b", 1, 0)];
        // (what, response topics, answers as indexes into the list, stranger)
        type Case = (&'static str, Vec<FetchableTopicResponse>, Vec<usize>, bool);
        let cases: Vec<Case> = vec![
            (
                "nothing: an incremental answer with no news",
                vec![],
                vec![],
                false,
            ),
            (
                "by id, in response order",
                vec![topic(id_of("b"), &[1]), topic(id_of("a"), &[0])],
                vec![1, 0],
                false,
            ),
            (
                "an id the request did not name",
                vec![topic(id_of("a"), &[0]), topic(id_of("x"), &[0])],
                vec![0],
                true,
            ),
            (
                "a partition the request did not name",
                vec![topic(id_of("b"), &[0, 1])],
                vec![1],
                true,
            ),
        ];
        for (what, topics, want_idx, want_stranger) in cases {
            let resp = FetchResponse::default().with_responses(topics);
            let (got, stranger) = answers(&list, &resp, true);
            let got: Vec<usize> = got.into_iter().map(|(i, _)| i).collect();
            assert_eq!((got, stranger), (want_idx, want_stranger), "{what}");
        }
    }

    /// Topics by id only when every topic of the request has one.
    #[test]
    fn the_version_falls_back_to_names_when_a_topic_has_no_id() {
        let mut nameless = want("n", 0, 0);
        nameless.topic_id = [0; 16];
        let cases = [
            ("old broker", 11, vec![want("a", 0, 0)], 11),
            ("v12 broker", 12, vec![want("a", 0, 0)], 12),
            (
                "ids everywhere",
                18,
                vec![want("a", 0, 0), want("b", 0, 0)],
                18,
            ),
            (
                "one topic without id",
                18,
                vec![want("a", 0, 0), nameless],
                12,
            ),
        ];
        for (what, offered, list, want_v) in cases {
            assert_eq!(fetch_version(offered, &list), want_v, "{what}");
        }
    }
}
