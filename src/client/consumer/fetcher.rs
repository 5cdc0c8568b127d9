//! The fetcher task: resolves start positions, keeps one Fetch in flight per leader, decodes
//! record batches (and old v0/v1 message sets) and hands the records to the consumer.

use super::isolation::AbortedTransactions;
use super::metrics::Counters;
use super::order::next_order;
use super::session::{FetchSession, Outcome, PartitionFetch, Plan, FINAL_EPOCH};
use super::truncation::{on_diverging_epoch, Divergence};
use super::{
    list_offsets, AnswerTrace, Chunk, ConsumerRecord, Fetched, LastAnswer, Offset, PartitionState,
    Resolution, Resync, Shared, Skip,
};
use crate::client::config::{AutoOffsetReset, ConsumerConfig};
use crate::client::connection::Connection;
use crate::client::error::{classify, Error, ErrorClass, Op, Result};
use crate::client::metadata::{MetadataSnapshot, TopicPartition};
use crate::protocol::records::{decode_entries, CrcCheck, EntryIter, LogEntry, RecordError};
use crate::protocol::ErrorCode;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;
use tokio::sync::mpsc;
use tracing::{debug, debug_span, info, warn, Instrument};
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
struct Want {
    tp: TopicPartition,
    fetch_offset: i64,
    /// The partition's fetch epoch when the request was built.
    epoch: u64,
    /// The leader epoch from metadata (-1 when unknown).
    leader_epoch: i32,
    /// Leader epoch of the last batch fetched before `fetch_offset` (-1 when unknown).
    last_fetched_epoch: i32,
    /// The topic's id from metadata (all zero when the broker gave none).
    topic_id: [u8; 16],
    /// `fetch_offset` is where the whole entries of the last answer ended
    /// (`PartitionState::answer_end`).
    after_answer: bool,
    /// The answer's aborted-transaction list is checked against its batches
    /// (`aborted_list_borne_out`); off once answers at this offset failed checks
    /// [`REFETCHES_OF_CORRUPT_DATA`] times in a row: the same answer again is the log.
    check_aborted_list: bool,
    /// With `after_answer`: the aborted transactions still open where the last answer ended
    /// (`PartitionState::open_aborted`), which this answer must list again.
    open_aborted: Vec<(i64, i64)>,
    /// A walk back under way (`PartitionState::resync`): entries of this answer already
    /// handed out.
    skip: Option<Skip>,
}

impl Want {
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

/// A leader's fetch session and the connection it lives on: a session does not outlive its
/// connection (a request lost with it leaves the epochs out of step).
#[derive(Debug, Default)]
pub(crate) struct LeaderSession {
    session: FetchSession,
    conn: Weak<Connection>,
}

/// The fetch sessions by leader; one request per leader at a time uses its entry.
pub(crate) type Sessions = Arc<Mutex<HashMap<i32, LeaderSession>>>;

pub(crate) async fn run(shared: Arc<Shared>, tx: mpsc::Sender<Fetched>) {
    let mut fetcher = Fetcher::new(shared, tx);
    loop {
        resolve_positions(&fetcher.shared, &fetcher.tx).await;
        fetcher.shared.cluster.refresh_if_stale();
        fetcher.collect_served();
        let meta = fetcher.shared.cluster.metadata();
        let round = fetcher.plan_round(&meta, Instant::now());
        if round.missing_leader {
            let _ = fetcher
                .shared
                .cluster
                .refresh_if_older(meta.generation)
                .await;
        }
        for chunk in round.recreated {
            if fetcher.tx.send(Fetched::Chunk(chunk)).await.is_err() {
                return;
            }
        }
        for (leader, id, list) in round.requests {
            fetcher.spawn_fetch(leader, id, list);
        }
        if fetcher.tx.is_closed() {
            return;
        }
        fetcher
            .wait_for_work(round.next_wake, round.missing_leader)
            .await;
    }
}

/// The fetcher task's own state, kept across rounds.
struct Fetcher {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Fetched>,
    /// Leaders with a Fetch in flight: one request at a time per leader.
    busy: Arc<std::sync::Mutex<HashSet<i32>>>,
    /// Each finished request reports the partitions it brought records for.
    done_tx: mpsc::UnboundedSender<Vec<TopicPartition>>,
    done_rx: mpsc::UnboundedReceiver<Vec<TopicPartition>>,
    /// The order partitions are put in requests ([`next_order`]).
    order: Vec<TopicPartition>,
    /// Partitions responses brought records for since the order was last updated.
    served: Vec<TopicPartition>,
    /// The id of the last request built.
    request_ids: u64,
    /// The fetch session with each leader (KIP-227).
    sessions: Sessions,
}

/// What one round sends, and when it must look again.
#[derive(Default)]
struct Round {
    /// One Fetch per leader: the leader, the request id, the partitions in fetch order.
    requests: Vec<(i32, u64, Vec<Want>)>,
    /// A partition has no known leader: refresh metadata, look again after a backoff.
    missing_leader: bool,
    /// When a partition backing off (or a failed ListOffsets) may be tried again.
    next_wake: Option<Instant>,
    /// Partitions whose topic was recreated under auto.offset.reset=none: the chunks that tell
    /// the application.
    recreated: Vec<Chunk>,
}

/// Whether a partition may go into this round's requests, by its own state (its leader
/// decides next).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readiness {
    /// In a request already, halted at corrupt data or a truncation, waiting for ListOffsets,
    /// or without a position yet.
    NotNow,
    /// Backing off after an error until then.
    After(Instant),
    /// May be fetched; a backoff that has passed is over.
    Ready,
}

fn readiness(st: &PartitionState, now: Instant) -> Readiness {
    if st.in_flight.is_some() || st.halted || st.pending.is_some() || st.position.is_none() {
        return Readiness::NotNow;
    }
    match st.backoff_until {
        Some(at) if at > now => Readiness::After(at),
        _ => Readiness::Ready,
    }
}

impl Fetcher {
    fn new(shared: Arc<Shared>, tx: mpsc::Sender<Fetched>) -> Fetcher {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Fetcher {
            shared: shared.clone(),
            tx,
            busy: Arc::default(),
            done_tx,
            done_rx,
            order: Vec::new(),
            served: Vec::new(),
            request_ids: 0,
            sessions: shared.sessions.clone(),
        }
    }

    /// Takes the reports of requests finished since the last round.
    fn collect_served(&mut self) {
        while let Ok(s) = self.done_rx.try_recv() {
            self.served.extend(s);
        }
    }

    /// Under the partitions lock: updates the fetch order, picks every partition that may be
    /// fetched now whose leader is known and not busy, groups them per leader and marks them
    /// in flight under a new request id each.
    fn plan_round(&mut self, meta: &MetadataSnapshot, now: Instant) -> Round {
        let mut round = Round::default();
        let mut by_leader: HashMap<i32, Vec<Want>> = HashMap::new();
        let mut parts = self.shared.lock();
        self.order = next_order(&self.order, parts.keys(), &self.served);
        self.served.clear();
        if parts.values().any(|st| st.pending.is_some()) {
            // A ListOffsets failed: try again after a backoff.
            round.next_wake = Some(now + self.shared.config.client.retry_backoff);
        }
        let busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        for tp in &self.order {
            let Some(st) = parts.get_mut(tp) else {
                continue;
            };
            match readiness(st, now) {
                Readiness::NotNow => continue,
                Readiness::After(at) => {
                    round.next_wake = Some(round.next_wake.map_or(at, |w| w.min(at)));
                    continue;
                }
                Readiness::Ready => st.backoff_until = None,
            }
            let Some(leader) = meta.leader(tp) else {
                round.missing_leader = true;
                st.fetch_failed = true;
                continue;
            };
            let topic_id = meta.topics.get(&tp.topic).map_or([0; 16], |t| t.id);
            let held = id_to_compare(st.topic_id, st.topic_id_borne_out);
            match on_topic_id(held, topic_id, st.id_change, meta.generation) {
                TopicId::Same => st.id_change = None,
                TopicId::Adopt => {
                    if st.topic_id != Some(topic_id) {
                        st.topic_id = Some(topic_id);
                        st.topic_id_borne_out = false;
                    }
                    st.id_change = None;
                }
                TopicId::Suspect => {
                    if st.id_change.map(|(id, _)| id) != Some(topic_id) {
                        st.id_change = Some((topic_id, meta.generation));
                    }
                    // Metadata refreshed, the partition looked at again after a backoff.
                    round.missing_leader = true;
                    continue;
                }
                TopicId::Recreated { old } => {
                    st.id_change = None;
                    if let Some(chunk) = recreated(&self.shared, tp, st, old, topic_id) {
                        round.recreated.push(chunk);
                    }
                    // The reset's ListOffsets is for the next round, at once.
                    round.next_wake = Some(now);
                    continue;
                }
            }
            if busy.contains(&leader) {
                continue;
            }
            let after_answer = st.answer_end == Some(st.fetch_offset);
            by_leader.entry(leader).or_default().push(Want {
                tp: tp.clone(),
                fetch_offset: st.fetch_offset,
                epoch: st.epoch,
                leader_epoch: meta.partition(tp).map_or(-1, |p| p.leader_epoch),
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
            });
        }
        for (leader, list) in by_leader {
            self.request_ids += 1;
            for w in &list {
                if let Some(st) = parts.get_mut(&w.tp) {
                    st.in_flight = Some(self.request_ids);
                }
            }
            round.requests.push((leader, self.request_ids, list));
        }
        round
    }

    /// Sends a request in its own task; the leader is busy until it is done.
    fn spawn_fetch(&self, leader: i32, id: u64, list: Vec<Want>) {
        self.busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(leader);
        let shared = self.shared.clone();
        let tx = self.tx.clone();
        let busy = self.busy.clone();
        let done = self.done_tx.clone();
        let sessions = self.sessions.clone();
        tokio::spawn(async move {
            let served = fetch_from(&shared, &sessions, leader, id, list, &tx).await;
            busy.lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&leader);
            let _ = done.send(served);
        });
    }

    /// Waits for something that can change the next round: the consumer (assign, seek,
    /// poll), a finished request, a backoff running out, or the missing-leader retry.
    async fn wait_for_work(&mut self, next_wake: Option<Instant>, missing_leader: bool) {
        let sleep = async {
            match next_wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.shared.wake.notified() => {}
            Some(s) = self.done_rx.recv() => self.served.extend(s),
            _ = sleep => {}
            _ = tokio::time::sleep(self.shared.config.client.retry_backoff), if missing_leader => {}
        }
    }
}

/// Resolves pending seeks and resets (auto.offset.reset) with ListOffsets.
async fn resolve_positions(shared: &Shared, tx: &mpsc::Sender<Fetched>) {
    let pending: Vec<(TopicPartition, Offset, u64)> = shared
        .lock()
        .iter()
        .filter_map(|(tp, st)| st.pending.map(|o| (tp.clone(), o, st.epoch)))
        .collect();
    if pending.is_empty() {
        return;
    }
    let mut groups: HashMap<Offset, Vec<(TopicPartition, u64)>> = HashMap::new();
    for (tp, o, e) in pending {
        groups.entry(o).or_default().push((tp, e));
    }
    for (at, list) in groups {
        let tps: Vec<TopicPartition> = list.iter().map(|(tp, _)| tp.clone()).collect();
        match list_offsets(shared, &tps, at).await {
            Ok(offsets) => {
                let mut parts = shared.lock();
                for (tp, epoch) in list {
                    if let (Some(st), Some(o)) = (parts.get_mut(&tp), offsets.get(&tp)) {
                        if st.epoch == epoch && st.pending.is_some() {
                            debug!(%tp, offset = o, ?at, "position resolved");
                            st.resolution = match st.resolution {
                                // Asked again after a contradiction: this answer stands.
                                Some(Resolution::AskedAgain) => None,
                                _ => Some(Resolution::Unconfirmed { at, offset: *o }),
                            };
                            st.pending = None;
                            st.position = Some(*o);
                            st.fetch_offset = *o;
                            st.last_fetched_epoch = -1;
                            // Resolved in the topic as metadata names it now.
                            st.topic_id = None;
                        }
                    }
                }
            }
            Err(e) => {
                let _ = tx.send(Fetched::Error(e)).await;
            }
        }
    }
}

/// The partition's state if it is still in request `id` (not reassigned since), with the
/// request's claim on it released.
fn release(st: Option<&mut PartitionState>, id: u64) -> Option<&mut PartitionState> {
    let st = st?;
    if st.in_flight != Some(id) {
        return None;
    }
    st.in_flight = None;
    Some(st)
}

/// Sends one Fetch to `leader` and hands the results over; returns the partitions it brought
/// records for, in response order (they move to the end of the fetch order).
async fn fetch_from(
    shared: &Arc<Shared>,
    sessions: &Sessions,
    leader: i32,
    id: u64,
    list: Vec<Want>,
    tx: &mpsc::Sender<Fetched>,
) -> Vec<TopicPartition> {
    let span = debug_span!("fetch", leader, partitions = list.len());
    let sent = match send_fetch(shared, sessions, leader, &list)
        .instrument(span)
        .await
    {
        Ok(r) => r,
        Err(e) => {
            debug!(leader, error = %e, "fetch failed");
            // What retrying cannot fix (no common Fetch version even after negotiating again
            // on a new connection, failed authentication) reaches the application's poll,
            // every round it happens, instead of a silent retry loop.
            if e.class() == ErrorClass::Fatal {
                let _ = tx.send(Fetched::Error(e.clone())).await;
            }
            if let Some(ls) = lock(sessions).get_mut(&leader) {
                if ls.session.id().is_some() || ls.session.is_incremental() {
                    Counters::add(&shared.counters.fetch_session_restarts, 1);
                }
                ls.session.restart();
            }
            back_off(shared, id, &list, e.class() == ErrorClass::RefreshAndRetry).await;
            return Vec::new();
        }
    };
    let Sent {
        resp,
        plan,
        by_id,
        broker,
    } = sent;
    let (answers, stranger) = answers(&list, &resp, by_id);
    let outcome = match (plan, lock(sessions).get_mut(&leader)) {
        (Some(plan), Some(ls)) => {
            let code = ErrorCode(resp.error_code);
            ls.session
                .on_response(&plan, code, resp.session_id, stranger)
        }
        // Sessions off: a top-level error fails the whole request.
        _ if resp.error_code != 0 => Outcome::Failed(ErrorCode(resp.error_code)),
        _ => Outcome::Answered,
    };
    match outcome {
        Outcome::Answered => {}
        Outcome::Restart(code) => {
            debug!(
                leader,
                ?code,
                "fetch session dropped; the next request is full"
            );
            Counters::add(&shared.counters.fetch_session_restarts, 1);
            let mut parts = shared.lock();
            for w in &list {
                release(parts.get_mut(&w.tp), id);
            }
            return Vec::new();
        }
        Outcome::Failed(code) => {
            debug!(leader, ?code, "fetch failed at the top level");
            // Whatever of ours the broker choked on (a session's state, a last_fetched_epoch
            // taken from damaged data) is not sent again: the next request is a full one
            // without the KIP-320 check.
            if let Some(ls) = lock(sessions).get_mut(&leader) {
                ls.session.restart();
            }
            forget_last_fetched_epochs(shared, &list);
            let refresh = classify(code, Op::General) == ErrorClass::RefreshAndRetry;
            back_off(shared, id, &list, refresh).await;
            return Vec::new();
        }
    }
    let mut served = Vec::new();
    let mut refresh = false;
    for &(i, p) in &answers {
        match apply_partition(shared, id, &list[i], p, &broker, tx).await {
            Applied::Records => served.push(list[i].tp.clone()),
            Applied::Nothing => {}
            Applied::Refresh => refresh = true,
            Applied::ConsumerGone => return served,
        }
    }
    // Partitions the response left out are fetched again next round: a full response left
    // them out for lack of room (fetch.max.bytes), an incremental one because they have
    // nothing new (KIP-227), and then their end offsets are as the last answer said.
    {
        let mut answered = vec![false; list.len()];
        for &(i, _) in &answers {
            answered[i] = true;
        }
        let mut parts = shared.lock();
        for (w, _) in list.iter().zip(answered).filter(|(_, a)| !a) {
            release(parts.get_mut(&w.tp), id);
        }
    }
    if refresh {
        let g = shared.cluster.metadata().generation;
        let _ = shared.cluster.refresh_if_older(g).await;
    }
    served
}

/// Closes every fetch session the broker holds for us: a request at the final epoch (-1) with
/// the session's id and no partitions, which the broker answers at once, dropping the session
/// rather than keeping its cache slot until it idles out. Best effort, on connections already
/// open: the consumer is going away.
pub(crate) async fn close_sessions(shared: Arc<Shared>) {
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

fn lock(sessions: &Sessions) -> std::sync::MutexGuard<'_, HashMap<i32, LeaderSession>> {
    sessions.lock().unwrap_or_else(|p| p.into_inner())
}

/// A response and what its request was.
struct Sent {
    resp: FetchResponse,
    /// The session's plan; `None` with sessions off.
    plan: Option<Plan>,
    /// Whether topics were addressed by id.
    by_id: bool,
    /// The broker that answered (its address), named in the errors its codes become.
    broker: String,
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

/// Connects to `leader`, plans the request with the leader's session and sends the Fetch for
/// `list`.
async fn send_fetch(
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
fn answers<'a>(
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

/// What metadata's topic id says about the id a partition's position belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopicId {
    /// The same topic (or no ids to compare).
    Same,
    /// The position has no id yet (new assignment, seek, reset): it belongs to this one.
    Adopt,
    /// Metadata names another id, but no later metadata has said so yet: refreshed first.
    Suspect,
    /// The name now belongs to another topic: the old one was deleted and recreated.
    Recreated { old: [u8; 16] },
}

/// What metadata of `generation`, naming the topic's id `now`, says about the id the
/// position belongs to (`held`), given the other id seen before (`seen`: which, and in what
/// generation). Pure.
///
/// A change takes two metadata answers: one flipped bit in a Metadata answer's topic id made
/// a read_committed consumer think its topic recreated, and auto.offset.reset=latest moved it
/// past every record (the consumer under random flips: nothing read in 120 s).
fn on_topic_id(
    held: Option<[u8; 16]>,
    now: [u8; 16],
    seen: Option<([u8; 16], u64)>,
    generation: u64,
) -> TopicId {
    const NONE: [u8; 16] = [0; 16];
    match held {
        // Metadata without ids (an old broker, a topic being created): nothing to compare.
        _ if now == NONE => TopicId::Same,
        None | Some(NONE) => TopicId::Adopt,
        Some(old) if old == now => TopicId::Same,
        Some(old) => match seen {
            Some((id, g)) if id == now && generation > g => TopicId::Recreated { old },
            _ => TopicId::Suspect,
        },
    }
}

/// The topic id a partition's position is compared against: the one it holds once a Fetch
/// answer bore it out, else none (whatever metadata names now is adopted). Pure.
///
/// A flipped bit in the very Metadata answer an assignment took its id from made that damaged
/// id the one held; the next answers, naming the real one, looked like a recreated topic, and
/// auto.offset.reset=latest moved the position past every record (the read_committed consumer
/// under random flips: nothing read). A Fetch by id (v13+) is answered only for a real id.
fn id_to_compare(held: Option<[u8; 16]>, borne_out: bool) -> Option<[u8; 16]> {
    held.filter(|_| borne_out)
}

/// The partition's topic was deleted and recreated: its position meant the old topic. Under
/// auto.offset.reset earliest/latest the position is reset (as the Java consumer ends up
/// doing through OFFSET_OUT_OF_RANGE, but also when the new topic has already grown past the
/// old position); under none the partition halts and the returned chunk tells the application.
fn recreated(
    shared: &Shared,
    tp: &TopicPartition,
    st: &mut PartitionState,
    old: [u8; 16],
    new: [u8; 16],
) -> Option<Chunk> {
    Counters::add(&shared.counters.topics_recreated, 1);
    let (old_id, new_id) = (Uuid::from_bytes(old), Uuid::from_bytes(new));
    let position = st.position.unwrap_or(st.fetch_offset);
    // Whatever happens, data fetched from the old topic is not to be handed out.
    st.epoch = shared.next_epoch();
    st.last_fetched_epoch = -1;
    st.topic_id = Some(new);
    st.topic_id_borne_out = false;
    let reset = match shared.config.auto_offset_reset {
        AutoOffsetReset::Earliest => Some(Offset::Beginning),
        AutoOffsetReset::Latest => Some(Offset::End),
        AutoOffsetReset::None => None,
    };
    if let Some(r) = reset {
        warn!(topic = %tp.topic, partition = tp.partition, %old_id, %new_id, position, reset = ?r, "topic deleted and recreated under a new id; resetting the position per auto.offset.reset");
        st.pending = Some(r);
        st.position = None;
        return None;
    }
    warn!(topic = %tp.topic, partition = tp.partition, %old_id, %new_id, position, "topic deleted and recreated under a new id and auto.offset.reset=none; the partition waits for a seek");
    st.halted = true;
    Some(Chunk {
        tp: tp.clone(),
        epoch: st.epoch,
        records: VecDeque::new(),
        next_offset: position,
        high_watermark: -1,
        last_stable_offset: -1,
        error: Some(Error::TopicRecreated {
            topic: tp.topic.clone(),
            partition: tp.partition,
            position,
            old_id,
            new_id,
        }),
        last_epoch: None,
        open_aborted: Vec::new(),
        trace: AnswerTrace::default(),
    })
}

/// What one partition's answer came to, for the request as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    /// Records went to the consumer: the partition moves to the end of the fetch order.
    Records,
    /// Nothing more to do.
    Nothing,
    /// Retried after a backoff; metadata must be refreshed first.
    Refresh,
    /// The consumer is gone: stop.
    ConsumerGone,
}

/// Applies one partition's answer: its error, a diverging epoch, or its records.
async fn apply_partition(
    shared: &Shared,
    id: u64,
    w: &Want,
    p: &PartitionData,
    broker: &str,
    tx: &mpsc::Sender<Fetched>,
) -> Applied {
    if p.error_code != 0 {
        return on_error(shared, id, w, ErrorCode(p.error_code), broker, tx).await;
    }
    let diverging = &p.diverging_epoch;
    if diverging.epoch >= 0 || diverging.end_offset >= 0 {
        if let Some(chunk) = diverged(shared, id, w, p) {
            if tx.send(Fetched::Chunk(chunk)).await.is_err() {
                return Applied::ConsumerGone;
            }
        }
        return Applied::Nothing;
    }
    let mut chunk = decode_partition(w, p, crc_check(&shared.config));
    advance(shared, id, w, p.log_start_offset, &mut chunk);
    let records = !chunk.records.is_empty();
    if tx.send(Fetched::Chunk(chunk)).await.is_err() {
        return Applied::ConsumerGone;
    }
    if records {
        Applied::Records
    } else {
        Applied::Nothing
    }
}

/// How many times data that fails its check at one offset is fetched again before the
/// partition halts on it.
const REFETCHES_OF_CORRUPT_DATA: u32 = 2;

/// What to do about data that failed its check (CRC, framing) at `offset`, given the
/// partition's record of such failures (`corrupt_at`: offset, failures in a row there).
/// Returns the new record and whether the partition halts. Pure.
///
/// A batch damaged on its way (a flipped bit the TCP checksum missed, a faulty middlebox) is
/// whole in the broker's log: fetched again, it decodes. The Java consumer raises at once and
/// leaves the application to seek past the batch, which skips records that were fine in the
/// log. Only data that fails again, at the same offset, is taken for corrupt in the log.
fn after_corrupt_data(corrupt_at: Option<(i64, u32)>, offset: i64) -> (Option<(i64, u32)>, bool) {
    let failures = match corrupt_at {
        Some((at, n)) if at == offset => n + 1,
        _ => 1,
    };
    (
        Some((offset, failures)),
        failures > REFETCHES_OF_CORRUPT_DATA,
    )
}

/// Moves the partition past a decoded chunk, if the request is still current: the next fetch
/// starts after it. A chunk that ends at corrupt data is fetched again from there (the error
/// dropped, the records before it kept) until `after_corrupt_data` halts the partition.
fn advance(shared: &Shared, id: u64, w: &Want, log_start_offset: i64, chunk: &mut Chunk) {
    let mut parts = shared.lock();
    let Some(st) = release(parts.get_mut(&w.tp), id).filter(|st| st.epoch == w.epoch) else {
        return;
    };
    if let Some(Resolution::Unconfirmed {
        at: Offset::Beginning,
        offset: resolved,
    }) = st.resolution
    {
        if !earliest_borne_out(resolved, log_start_offset) {
            // The chunk goes out under the old epoch and is dropped: reading starts again
            // from the beginning asked anew.
            warn!(tp = %w.tp, resolved, log_start_offset, "the log start ListOffsets gave is past the one the Fetch answer names; asking again");
            st.epoch = shared.next_epoch();
            st.pending = Some(Offset::Beginning);
            st.position = None;
            st.resolution = Some(Resolution::AskedAgain);
            return;
        }
    }
    // Any answer with the partition's data (or none, at its end) bears the position out, and
    // the topic id it was fetched under.
    st.resolution = None;
    st.topic_id_borne_out = st.topic_id.is_some();
    st.fetch_offset = chunk.next_offset;
    // A walk back goes on from where this answer left it (or is over).
    st.resync = chunk.trace.skip_left.map(|skip| Resync {
        epoch: st.epoch,
        at: chunk.next_offset,
        skip,
    });
    if chunk.trace.skip_mismatch {
        warn!(tp = %w.tp, "walking back: the entry where the batch handed out last should be is another (the log changed?); reading on from it");
    }
    st.log_start_offset = log_start_offset;
    // A batch's partition leader epoch is not covered by its CRC: one flipped bit there, kept
    // and sent back as last_fetched_epoch, made every later Fetch of the partition fail at the
    // broker. An epoch above the leader's (as metadata has it) cannot be real: not kept.
    if let Some(e) = chunk
        .last_epoch
        .filter(|e| w.leader_epoch < 0 || *e <= w.leader_epoch)
    {
        st.last_fetched_epoch = e;
    }
    match &chunk.error {
        Some(
            e @ Error::CorruptData {
                offset,
                source: RecordError::StartsBeforeTheLastAnswerEnded { offset: base, .. },
                ..
            },
        ) => {
            // Nothing of this answer was read; `answer_end` stays, so the check is made again.
            let (record, again) = after_corrupt_data(st.corrupt_at, *offset);
            st.corrupt_at = record;
            if again {
                // The same answer, fetch after fetch: that is the log, and the answer before
                // was the damaged one — its last batch went out under offsets not its own.
                // `last_answer` is the answer whose end the position is (an answer is checked
                // so only while its fetch offset is `answer_end`, set with `last_answer`).
                let (from, resync) = after_out_of_place(st.last_answer, *base, st.epoch);
                if resync.is_some() {
                    warn!(tp = %w.tp, error = %e, from, "the last answer's batch was out of place; walking back to where it really ends");
                } else {
                    warn!(tp = %w.tp, error = %e, "the last answer's batch was out of place; reading from this one's start");
                }
                st.fetch_offset = from;
                st.resync = resync;
                st.answer_end = None;
                st.corrupt_at = None;
            } else {
                warn!(tp = %w.tp, error = %e, "data out of place; fetching it again (damaged on the way?)");
            }
            chunk.error = None;
        }
        Some(e @ Error::CorruptData { offset, source, .. }) => {
            // Refetched from where decoding stopped: still after whole entries when it stopped
            // at an entry's start (a batch out of place in the same answer: the next answer's
            // first batch must not start before it either).
            if !stopped_at_an_entry(source) {
                st.answer_end = None;
            } else if chunk.next_offset > w.fetch_offset {
                st.answer_end = Some(chunk.next_offset);
                st.open_aborted = std::mem::take(&mut chunk.open_aborted);
                st.last_answer = Some(LastAnswer {
                    from: w.fetch_offset,
                    trace: chunk.trace,
                });
            }
            let (record, halt) = after_corrupt_data(st.corrupt_at, *offset);
            st.corrupt_at = record;
            if halt {
                warn!(tp = %w.tp, error = %e, "fetching stopped at data that failed its check again");
                st.halted = true;
            } else {
                warn!(tp = %w.tp, error = %e, "data failed its check; fetching it again (damaged on the way?)");
                chunk.error = None;
            }
        }
        Some(e) => {
            debug!(tp = %w.tp, error = %e, "fetching stopped");
            st.answer_end = None;
            st.halted = true;
        }
        None => {
            if st.corrupt_at.is_some_and(|(at, _)| chunk.next_offset > at) {
                st.corrupt_at = None;
            }
            if chunk.next_offset > w.fetch_offset {
                st.answer_end = Some(chunk.next_offset);
                st.open_aborted = std::mem::take(&mut chunk.open_aborted);
                st.last_answer = Some(LastAnswer {
                    from: w.fetch_offset,
                    trace: chunk.trace,
                });
            }
        }
    }
}

/// Whether decoding stopped where an entry starts, nothing of it handed out: framing, CRC,
/// offset and control-record checks, and decompression, all fail before an entry's first
/// record. A malformed record stops inside its batch. Pure.
fn stopped_at_an_entry(e: &RecordError) -> bool {
    matches!(
        e,
        RecordError::InvalidBatchLength { .. }
            | RecordError::BatchTooShort { .. }
            | RecordError::UnsupportedMagic { .. }
            | RecordError::CrcMismatch { .. }
            | RecordError::UnknownCompression { .. }
            | RecordError::Decompress { .. }
            | RecordError::OffsetsOutOfPlace { .. }
            | RecordError::StartsBeforeTheLastAnswerEnded { .. }
            | RecordError::AbortedListContradicted { .. }
            | RecordError::AbortedTransactionLeftOut { .. }
            | RecordError::MalformedControlRecord { .. }
    )
}

/// What a partition's error code in a Fetch response makes the fetcher do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnError {
    /// OFFSET_OUT_OF_RANGE with a reset policy: the position is resolved again from there.
    Reset(Offset),
    /// OFFSET_OUT_OF_RANGE under auto.offset.reset=none: the application is told, and the
    /// partition waits retry.backoff.max.ms.
    OutOfRange,
    /// Fetched again after retry.backoff.ms; with `refresh`, after a metadata refresh (the
    /// leader moved, or its epoch is not ours).
    Retry { refresh: bool },
    /// The application is told; fetched again after retry.backoff.ms.
    Fail,
}

/// The one decision about a partition's error code, with [`classify`] for all but
/// OFFSET_OUT_OF_RANGE.
fn on_partition_error(code: ErrorCode, reset: AutoOffsetReset) -> OnError {
    if code == ErrorCode::OFFSET_OUT_OF_RANGE {
        return match reset {
            AutoOffsetReset::Earliest => OnError::Reset(Offset::Beginning),
            AutoOffsetReset::Latest => OnError::Reset(Offset::End),
            AutoOffsetReset::None => OnError::OutOfRange,
        };
    }
    match classify(code, Op::General) {
        ErrorClass::Retriable => OnError::Retry { refresh: false },
        ErrorClass::RefreshAndRetry => OnError::Retry { refresh: true },
        _ => OnError::Fail,
    }
}

/// Applies [`on_partition_error`]'s decision to the partition and tells the application when
/// it must know.
async fn on_error(
    shared: &Shared,
    id: u64,
    w: &Want,
    code: ErrorCode,
    broker: &str,
    tx: &mpsc::Sender<Fetched>,
) -> Applied {
    let tp = &w.tp;
    match on_partition_error(code, shared.config.auto_offset_reset) {
        action @ (OnError::Reset(_) | OnError::OutOfRange) => {
            match within_the_log(shared, tp, w.fetch_offset).await {
                Ok(false) => {}
                outcome => {
                    // Not confirmed (the offset is within the log: an answer damaged on its
                    // way, or the log check failed): moving the position by
                    // auto.offset.reset would skip or re-read records. Fetched again.
                    warn!(%tp, fetch_offset = w.fetch_offset, ?outcome, "OFFSET_OUT_OF_RANGE not confirmed by ListOffsets; fetching again");
                    set_backoff(shared, id, tp);
                    if let Err(e) = outcome {
                        if e.class() == ErrorClass::Fatal {
                            let _ = tx.send(Fetched::Error(e)).await;
                        }
                    }
                    return Applied::Nothing;
                }
            }
            let tell = {
                let mut parts = shared.lock();
                match release(parts.get_mut(tp), id).filter(|st| st.epoch == w.epoch) {
                    // A position ListOffsets gave, never borne out: that answer was damaged
                    // on its way (0 → 4194304, one bit) or the log moved since. Its own
                    // question is asked again, once, rather than auto.offset.reset's: a seek
                    // to the beginning under auto.offset.reset=latest skipped the partition.
                    Some(st) => match (st.resolution, action) {
                        (Some(Resolution::Unconfirmed { at, offset }), _) => {
                            warn!(%tp, offset, ?at, "a position ListOffsets gave is out of range; asking again");
                            st.epoch = shared.next_epoch();
                            st.pending = Some(at);
                            st.position = None;
                            st.resolution = Some(Resolution::AskedAgain);
                            false
                        }
                        (_, OnError::Reset(r)) => {
                            debug!(%tp, fetch_offset = w.fetch_offset, ?r, "offset out of range; resetting");
                            st.epoch = shared.next_epoch();
                            st.pending = Some(r);
                            st.position = None;
                            false
                        }
                        _ => {
                            st.backoff_until =
                                Some(Instant::now() + shared.config.client.retry_backoff_max);
                            true
                        }
                    },
                    None => false,
                }
            };
            if tell {
                let e = Error::broker(
                    format!(
                        "fetch {tp} at offset {} from broker {broker} (auto.offset.reset=none)",
                        w.fetch_offset
                    ),
                    code,
                );
                let _ = tx.send(Fetched::Error(e)).await;
            }
            Applied::Nothing
        }
        OnError::Retry { refresh } => {
            // last_fetched_epoch kept: after a leader moved, the next fetch's divergence check
            // (KIP-320) is what detects a truncated log.
            set_backoff(shared, id, tp);
            if refresh {
                Applied::Refresh
            } else {
                Applied::Nothing
            }
        }
        OnError::Fail => {
            forget_last_fetched_epochs(shared, std::slice::from_ref(w));
            set_backoff(shared, id, tp);
            let _ = tx
                .send(Fetched::Error(Error::broker(
                    format!("fetch {tp} from broker {broker}"),
                    code,
                )))
                .await;
            Applied::Nothing
        }
    }
}

/// Whether `offset` is within the partition's log, [log start, high watermark], as ListOffsets
/// says (read_uncommitted: the high watermark, not the LSO). Asked before acting on
/// OFFSET_OUT_OF_RANGE, which resets the position: one flipped bit turns a fetch's error code 0
/// into 1, and the Java consumer would reset at once (earliest: read everything again; latest:
/// skip to the end). The answer is rare enough that the two requests cost nothing.
async fn within_the_log(shared: &Shared, tp: &TopicPartition, offset: i64) -> Result<bool> {
    let tps = [tp.clone()];
    let ask = |at| {
        crate::client::list_offsets::list_offsets(
            &shared.cluster,
            crate::client::config::IsolationLevel::ReadUncommitted,
            &tps,
            at,
        )
    };
    let start = ask(Offset::Beginning).await?;
    let end = ask(Offset::End).await?;
    let missing = || Error::Internal(format!("ListOffsets left out {tp}"));
    let start = *start.get(tp).ok_or_else(missing)?;
    let end = *end.get(tp).ok_or_else(missing)?;
    Ok(start <= offset && offset <= end)
}

/// Applies a diverging epoch (KIP-320) to the partition, if the request is still current;
/// returns the chunk that reports a truncation to the application, if it must be told.
fn diverged(
    shared: &Shared,
    id: u64,
    w: &Want,
    p: &kafka_protocol::messages::fetch_response::PartitionData,
) -> Option<Chunk> {
    let d = &p.diverging_epoch;
    let mut parts = shared.lock();
    let st = release(parts.get_mut(&w.tp), id).filter(|st| st.epoch == w.epoch)?;
    if !divergence_asked_for(w.last_fetched_epoch, d.epoch, d.end_offset) {
        // Damaged on the way: fetched again as it was.
        warn!(tp = %w.tp, last_fetched_epoch = w.last_fetched_epoch, epoch = d.epoch, end_offset = d.end_offset, "a diverging epoch this fetch cannot have been answered; fetching again");
        st.backoff_until = Some(Instant::now() + shared.config.client.retry_backoff);
        return None;
    }
    let position = st.position.unwrap_or(w.fetch_offset);
    let action = on_diverging_epoch(
        position,
        d.epoch,
        d.end_offset,
        shared.config.auto_offset_reset,
    );
    // Whatever happens, data fetched before this answer is not to be handed out.
    st.epoch = shared.next_epoch();
    st.last_fetched_epoch = -1;
    match action {
        Divergence::Refetch { offset, last_epoch } => {
            if offset < position {
                warn!(tp = %w.tp, position, offset, epoch = d.epoch, "log truncation detected; moving to the first offset known to diverge");
            } else {
                info!(tp = %w.tp, position, fetch_offset = w.fetch_offset, epoch = d.epoch, end_offset = d.end_offset, "leader log diverges after the position; fetching again");
            }
            st.position = Some(offset);
            st.fetch_offset = offset;
            st.last_fetched_epoch = last_epoch;
            None
        }
        Divergence::Reset(r) => {
            warn!(tp = %w.tp, position, ?r, "log truncation at an unknown offset; resetting");
            st.pending = Some(r);
            st.position = None;
            None
        }
        Divergence::Fail { divergent_offset } => {
            warn!(tp = %w.tp, position, ?divergent_offset, "log truncation detected and auto.offset.reset=none");
            st.halted = true;
            Some(Chunk {
                tp: w.tp.clone(),
                epoch: st.epoch,
                records: VecDeque::new(),
                next_offset: position,
                high_watermark: p.high_watermark,
                last_stable_offset: p.last_stable_offset,
                error: Some(Error::LogTruncation {
                    topic: w.tp.topic.clone(),
                    partition: w.tp.partition,
                    position,
                    divergent_offset,
                }),
                last_epoch: None,
                open_aborted: Vec::new(),
                trace: AnswerTrace::default(),
            })
        }
    }
}

fn set_backoff(shared: &Shared, id: u64, tp: &TopicPartition) {
    let mut parts = shared.lock();
    if let Some(st) = release(parts.get_mut(tp), id) {
        st.backoff_until = Some(Instant::now() + shared.config.client.retry_backoff);
        st.fetch_failed = true;
    }
}

/// The partitions' last fetched epochs are forgotten (the next fetch of each skips the
/// KIP-320 divergence check once), if they are still what the request sent.
fn forget_last_fetched_epochs(shared: &Shared, list: &[Want]) {
    let mut parts = shared.lock();
    for w in list {
        if let Some(st) = parts.get_mut(&w.tp).filter(|st| st.epoch == w.epoch) {
            if st.last_fetched_epoch == w.last_fetched_epoch {
                st.last_fetched_epoch = -1;
            }
        }
    }
}

async fn back_off(shared: &Shared, id: u64, list: &[Want], refresh: bool) {
    for w in list {
        set_backoff(shared, id, &w.tp);
    }
    if refresh {
        let g = shared.cluster.metadata().generation;
        let _ = shared.cluster.refresh_if_older(g).await;
    }
}

/// `check.crcs` as the codec takes it.
fn crc_check(cfg: &ConsumerConfig) -> CrcCheck {
    if cfg.check_crcs {
        CrcCheck::Verify
    } else {
        CrcCheck::Skip
    }
}

/// Decodes one partition's records, skipping control batches and records before the fetch
/// offset (a compressed batch can start before it). Decoding stops at the first entry that
/// cannot be read: the chunk keeps the records before it, ends where they end, and carries the
/// error, as the Java client returns the records before corrupt data and raises on the next
/// poll.
fn decode_partition(
    w: &Want,
    p: &kafka_protocol::messages::fetch_response::PartitionData,
    crc: CrcCheck,
) -> Chunk {
    let (tp, fetch_offset, epoch) = (&w.tp, w.fetch_offset, w.epoch);
    let mut records = VecDeque::new();
    let mut next_offset = fetch_offset;
    // Under read_committed the broker sends the aborted transactions; under read_uncommitted
    // it sends none, and only control batches are skipped.
    let listed: Vec<(i64, i64)> = p
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    let mut aborted = AbortedTransactions::new(listed.iter().copied());
    let mut error = None;
    let mut last_epoch = None;
    let mut trace = AnswerTrace {
        skip_left: w.skip,
        ..AnswerTrace::default()
    };
    if let Some(bytes) = p.records.clone() {
        let decoded = if w.check_aborted_list && (!listed.is_empty() || !w.open_aborted.is_empty())
        {
            let heads = batch_heads(&bytes);
            aborted_list_borne_out(&heads, &listed).and_then(|()| {
                if heads.is_empty() {
                    // No data, no list: nothing to compare.
                    Ok(())
                } else {
                    aborted_list_repeats(&w.open_aborted, &listed, w.fetch_offset)
                }
            })
        } else {
            Ok(())
        };
        let decoded = decoded.and_then(|()| {
            decode_into(
                tp,
                decode_entries(bytes).crc_check(crc),
                fetch_offset,
                w.after_answer,
                p.high_watermark,
                &mut aborted,
                &mut records,
                &mut next_offset,
                &mut last_epoch,
                &mut trace,
            )
        });
        if let Err(source) = decoded {
            error = Some(Error::CorruptData {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: next_offset,
                source,
            });
        }
    }
    Chunk {
        tp: tp.clone(),
        epoch,
        records,
        next_offset,
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        error,
        last_epoch,
        open_aborted: aborted.open_before(next_offset),
        trace,
    }
}

/// The decoding loop of [`decode_partition`]: appends records and advances `next_offset` past
/// every entry read (and every record handed out, so an error inside a batch stops right
/// after the last good record), noting the leader epoch of the last v2 batch read and, in
/// `trace`, what a walk back needs (entries read, the last one's CRC, what is left to skip).
#[allow(clippy::too_many_arguments)]
fn decode_into(
    tp: &TopicPartition,
    entries: EntryIter,
    fetch_offset: i64,
    after_answer: bool,
    high_watermark: i64,
    aborted: &mut AbortedTransactions,
    records: &mut VecDeque<ConsumerRecord>,
    next_offset: &mut i64,
    last_epoch: &mut Option<i32>,
    trace: &mut AnswerTrace,
) -> Result<(), RecordError> {
    let mut previous_end = None;
    let mut first = true;
    // Where the chunk stood before the entry just read: (records, next offset, trace).
    let mut before_previous = (records.len(), *next_offset, *trace);
    for entry in entries {
        let entry = entry?;
        if std::mem::take(&mut first) {
            first_entry_in_place(&entry, fetch_offset, after_answer)?;
        }
        if let Err(e) = entry_in_place(&entry, previous_end, high_watermark) {
            if previous_end.is_some() {
                // Two entries that contradict each other: either may be the damaged one. The
                // entry before is taken back too (nothing of the chunk is out yet), and both
                // are fetched again: had its base offset been moved up, its records would have
                // gone out under offsets past their own, and the position with them.
                records.truncate(before_previous.0);
                *next_offset = before_previous.1;
                *trace = before_previous.2;
            }
            return Err(e);
        }
        before_previous = (records.len(), *next_offset, *trace);
        previous_end = Some(entry.next_offset());
        // Markers and aborted batches before the fetch offset still update the index.
        let keep = match &entry {
            LogEntry::Batch(batch) => aborted.keep(batch)?,
            // v0/v1 messages predate transactions.
            LogEntry::Legacy(_) => true,
        };
        trace.entries = trace.entries.saturating_add(1);
        trace.last_crc = match &entry {
            LogEntry::Batch(b) => Some(b.crc),
            LogEntry::Legacy(_) => None,
        };
        if let Some(skip) = trace.skip_left.take() {
            let handed_out = match skip.entries {
                0 | 1 => {
                    // The walk's last entry: the batch handed out last, unless the log changed
                    // under the walk — then this entry is new, and goes out.
                    let same = trace.last_crc == Some(skip.crc);
                    trace.skip_mismatch = !same;
                    same
                }
                n => {
                    trace.skip_left = Some(Skip {
                        entries: n - 1,
                        ..skip
                    });
                    true
                }
            };
            if handed_out {
                *next_offset = (*next_offset).max(entry.next_offset());
                note_epoch(&entry, last_epoch);
                continue;
            }
        }
        if entry.next_offset() <= fetch_offset {
            continue;
        }
        if keep {
            // Straight from the entry into the chunk: no intermediate Vec per batch.
            for r in entry.record_iter()? {
                let r = r?;
                if r.offset < fetch_offset {
                    continue;
                }
                *next_offset = (*next_offset).max(r.offset.wrapping_add(1));
                records.push_back(ConsumerRecord {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset: r.offset,
                    timestamp: r.timestamp,
                    key: r.key,
                    value: r.value,
                    headers: r.headers,
                });
            }
        }
        *next_offset = (*next_offset).max(entry.next_offset());
        note_epoch(&entry, last_epoch);
    }
    Ok(())
}

/// The leader epoch of a v2 batch read whole (sent back as last_fetched_epoch).
fn note_epoch(entry: &LogEntry, last_epoch: &mut Option<i32>) {
    if let LogEntry::Batch(b) = entry {
        if b.partition_leader_epoch >= 0 {
            *last_epoch = Some(b.partition_leader_epoch);
        }
    }
}

/// Whether a Fetch answer's log start offset bears out the position a ListOffsets answer gave
/// as the log start (`resolved`): it must not be below it, since a log start only moves up
/// (`< 0`: not known). Pure.
///
/// One flipped bit in the ListOffsets answer (0 → 16) started a group member at offset 16:
/// the first 16 records were skipped, silently (the group member under random flips). The
/// Fetch answer names the log start again for free; a contradiction is asked about once more,
/// and the second ListOffsets answer stands (a follower's log start may lag its leader's).
fn earliest_borne_out(resolved: i64, log_start_offset: i64) -> bool {
    log_start_offset < 0 || log_start_offset >= resolved
}

/// Whether the first entry of a Fetch answer can start where it does: when the fetch offset is
/// where the whole entries of the answer before ended (`after_answer`), a v2 batch cannot
/// start before it — the broker answers from the batch holding the fetch offset, and that
/// batch starts there (compaction keeps a batch's offsets; v0/v1 message sets are left
/// alone). Pure.
///
/// A base offset is outside the batch's CRC. A low bit flipped there (+4) kept the batch
/// inside the log, so [`entry_in_place`] could not tell; the position after it was 4 past the
/// real one, and the next answer's batch, starting 4 before it, had its first 4 records
/// dropped as already read (the read_committed consumer under random flips: 4 values never
/// delivered). Flipped the other way, in the later answer, the records before the position
/// came again. Either way the two answers contradict each other: see [`advance`] for which
/// one is believed.
fn first_entry_in_place(
    entry: &LogEntry,
    fetch_offset: i64,
    after_answer: bool,
) -> Result<(), RecordError> {
    match entry {
        LogEntry::Batch(b) if after_answer && b.base_offset < fetch_offset => {
            Err(RecordError::StartsBeforeTheLastAnswerEnded {
                offset: b.base_offset,
                position: fetch_offset,
            })
        }
        _ => Ok(()),
    }
}

/// Where reading goes on once an answer starting before the fetch offset (at `base`, see
/// [`first_entry_in_place`]) came fetch after fetch: that is the log, so the answer before
/// (`last`), whose whole entries ended at the fetch offset, was the damaged one — its last
/// batch's base offset (outside the CRC) was moved on the way, and its records went out under
/// offsets not their own. Where that batch really ends, reading goes on, and only its CRC
/// names it: the answer before is fetched again from where it was (`last.from`), its entries
/// skipped as handed out already, the last of them checked by its CRC (`decode_into`).
/// Without what that takes (no record of the answer before, or a v0/v1 last entry) reading
/// goes on from `base`, the start of the batch holding the position. Pure.
///
/// From `base` alone, a batch moved up across a batch boundary (one bit, +32, on batches of
/// 20) lost the batches between its real end and `base`. (One moved down starts before the
/// position itself and is fetched again at once, unless the position came from a seek.)
fn after_out_of_place(last: Option<LastAnswer>, base: i64, epoch: u64) -> (i64, Option<Resync>) {
    match last {
        Some(LastAnswer {
            from,
            trace:
                AnswerTrace {
                    entries,
                    last_crc: Some(crc),
                    ..
                },
        }) if entries > 0 => (
            from,
            Some(Resync {
                epoch,
                at: from,
                skip: Skip { entries, crc },
            }),
        ),
        _ => (base, None),
    }
}

/// Whether a Fetch answer's diverging epoch can answer a fetch that sent `last_fetched_epoch`:
/// the leader checks only what was sent (an epoch of ours, KIP-320), and names the largest
/// epoch of its own at or below it, with where it ends (one it cannot name is an
/// OFFSET_OUT_OF_RANGE, not a divergence). Pure.
///
/// A damaged answer named epoch 17462833 ending at offset 3834587484168126476; kept as the last
/// fetched epoch, it made every later fetch of the partition OFFSET_OUT_OF_RANGE, for ever (the
/// read_committed consumer under random flips: 220 values never read).
fn divergence_asked_for(last_fetched_epoch: i32, epoch: i32, end_offset: i64) -> bool {
    last_fetched_epoch >= 0 && (0..=last_fetched_epoch).contains(&epoch) && end_offset >= 0
}

/// The v2 batches of an answer as (base offset, producer id, transactional, next offset),
/// framed without their CRC (the decoding pass checks it), up to the first that cannot be.
fn batch_heads(bytes: &bytes::Bytes) -> Vec<(i64, i64, bool, i64)> {
    decode_entries(bytes.clone())
        .crc_check(CrcCheck::Skip)
        .map_while(|e| e.ok())
        .filter_map(|e| match e {
            LogEntry::Batch(b) => Some((
                b.base_offset,
                b.producer_id,
                b.is_transactional(),
                b.next_offset(),
            )),
            LogEntry::Legacy(_) => None,
        })
        .collect()
}

/// Whether an answer's aborted-transaction list agrees with its batches (`heads`, from
/// [`batch_heads`]): an aborted transaction listed from an offset inside the data must start
/// at a transactional batch of its producer there — Kafka lists a transaction from its first
/// batch. Pure.
///
/// The list is outside every CRC. One bit flipped in a listed producer id (or first offset)
/// and the aborted transaction's batches were handed out as committed (the read_committed
/// consumer under random flips: an aborted value delivered). Taken for damage, as a CRC
/// failure is: fetched again. A listed transaction starting before the answer's data cannot
/// be checked here.
fn aborted_list_borne_out(
    heads: &[(i64, i64, bool, i64)],
    listed: &[(i64, i64)],
) -> Result<(), RecordError> {
    let (Some(first), Some(last)) = (heads.first(), heads.last()) else {
        return Ok(());
    };
    let inside = |offset: i64| first.0 <= offset && offset < last.3;
    for &(producer_id, first_offset) in listed {
        let starts_there = heads
            .iter()
            .any(|h| h.0 == first_offset && h.1 == producer_id && h.2);
        if inside(first_offset) && !starts_there {
            return Err(RecordError::AbortedListContradicted {
                producer_id,
                first_offset,
            });
        }
    }
    Ok(())
}

/// Whether an answer fetched from where the whole entries of the answer before ended lists
/// again every aborted transaction that answer left open (`open`: listed, started, no abort
/// marker yet): the broker lists each aborted transaction whose marker is at or after the
/// fetch offset, and an open one's marker is past it. Call only for an answer with batches
/// (an answer without data lists nothing). Pure.
///
/// A transaction that began in an earlier answer cannot be checked against this answer's
/// batches ([`aborted_list_borne_out`]): one bit flipped in its listed producer id, and its
/// batches here were handed out as committed (the read_committed consumer under random flips
/// at transaction.version 1: an aborted value delivered). The answer before named it, and
/// that is enough to catch the damage either way round: whichever list was damaged, the two
/// disagree and the answer is fetched again, and one that keeps disagreeing is the log (the
/// check is then off, as for [`aborted_list_borne_out`]; a marker removed by compaction
/// between the two fetches looks the same).
fn aborted_list_repeats(
    open: &[(i64, i64)],
    listed: &[(i64, i64)],
    position: i64,
) -> Result<(), RecordError> {
    match open.iter().find(|o| !listed.contains(o)) {
        Some(&(producer_id, first_offset)) => Err(RecordError::AbortedTransactionLeftOut {
            producer_id,
            first_offset,
            position,
        }),
        None => Ok(()),
    }
}

/// Whether an entry's offsets can be where they are in a Fetch answer: ending at or before the
/// partition's high watermark (`< 0`: not known, not checked), and after the entry before it
/// (`previous_end`: where that one ended). Neither holds for an answer the broker wrote, so
/// one that fails is taken for damaged on the way, as a CRC failure is (fetched again, see
/// [`after_corrupt_data`]). Pure.
///
/// A batch's base offset is outside its CRC. One bit flipped high there moved the batch past
/// the end of the log: the consumer handed its records out under those offsets, its next
/// fetch was out of range, and auto.offset.reset=earliest read the partition again from the
/// start (the group member under random flips: duplicates). A flip in the low bits that keeps
/// the batch inside the log and after the one before it stays undetectable, for any client:
/// Kafka protects records, not their offsets.
fn entry_in_place(
    entry: &LogEntry,
    previous_end: Option<i64>,
    high_watermark: i64,
) -> Result<(), RecordError> {
    let offset = entry.header_offset();
    let end = entry.next_offset();
    let reason = if high_watermark >= 0 && end > high_watermark {
        format!("ends at {end}, past the partition's high watermark {high_watermark}")
    } else if let (Some(before), LogEntry::Batch(b)) = (previous_end, entry) {
        if b.base_offset < before {
            format!("starts before {before}, where the batch before it ended")
        } else {
            return Ok(());
        }
    } else if previous_end.is_some_and(|before| end <= before) {
        format!("ends at {end}, not after the entry before it")
    } else {
        return Ok(());
    };
    Err(RecordError::OffsetsOutOfPlace { offset, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_start_from_list_offsets_is_borne_out_by_the_fetch_answer() {
        // (resolved by ListOffsets, log start in the Fetch answer, borne out)
        let cases = [(0, 0, true), (0, -1, true), (16, 0, false), (10, 12, true)];
        for (resolved, log_start, want) in cases {
            assert_eq!(
                earliest_borne_out(resolved, log_start),
                want,
                "{resolved} / {log_start}"
            );
        }
    }

    /// (base offset, records, end of the entry before, high watermark, in place)
    #[test]
    fn entries_must_end_by_the_high_watermark_and_follow_each_other() {
        let cases: [(i64, usize, Option<i64>, i64, bool); 9] = [
            (0, 5, None, 5, true),
            (0, 5, None, 10, true),
            (0, 5, None, 4, false),
            // A base offset with a high bit flipped: far past the end of the log.
            ((1 << 40) + 3, 5, None, 100, false),
            (5, 5, Some(5), 10, true),
            // A gap after the batch before (a compacted log) is allowed.
            (7, 3, Some(5), 10, true),
            (4, 5, Some(5), 10, false),
            // High watermark unknown: only the order is checked.
            (100, 5, None, -1, true),
            (2, 5, Some(5), -1, false),
        ];
        for (base, n, before, hw, want) in cases {
            let bytes = v2_batch(base, n);
            let entry = decode_entries(bytes::Bytes::from(bytes))
                .next()
                .expect("one entry")
                .expect("decodes");
            let got = entry_in_place(&entry, before, hw);
            assert_eq!(
                got.is_ok(),
                want,
                "base {base}, {n} records, before {before:?}, hw {hw}: {got:?}"
            );
        }
    }

    #[test]
    fn data_that_fails_its_check_is_fetched_again_before_the_partition_halts() {
        // (failures recorded so far, offset failing now, new record, halt)
        let cases = [
            (None, 40, Some((40, 1)), false),
            (Some((40, 1)), 40, Some((40, 2)), false),
            (Some((40, 2)), 40, Some((40, 3)), true),
            // Another offset: the count starts again (the earlier spot decoded on refetch).
            (Some((40, 2)), 55, Some((55, 1)), false),
        ];
        for (before, offset, record, halt) in cases {
            assert_eq!(
                after_corrupt_data(before, offset),
                (record, halt),
                "{before:?} at {offset}"
            );
        }
    }
    use crate::protocol::records::{BatchBuilder, Compression, ProducerFields};
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::PartitionData;
    use std::collections::BTreeMap;

    fn tp() -> TopicPartition {
        TopicPartition::new("orders", 3)
    }

    /// A request for `tp()` at `fetch_offset`, in the partition's fetch epoch `epoch`.
    fn at(fetch_offset: i64, epoch: u64) -> Want {
        Want {
            tp: tp(),
            fetch_offset,
            epoch,
            leader_epoch: -1,
            last_fetched_epoch: -1,
            topic_id: [0; 16],
            after_answer: false,
            check_aborted_list: true,
            open_aborted: Vec::new(),
            skip: None,
        }
    }

    fn data(records: Vec<u8>) -> PartitionData {
        PartitionData::default()
            .with_high_watermark(1_000)
            .with_last_stable_offset(1_000)
            .with_records(Some(Bytes::from(records)))
    }

    fn v2_batch(base_offset: i64, n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(Compression::None);
        for i in 0..n {
            assert!(b.try_append(1, None, Some(format!("v{i}").as_bytes()), &[], usize::MAX));
        }
        let mut out = BytesMut::from(&b.build(ProducerFields::NONE).unwrap()[..]);
        crate::protocol::records::set_base_offset(&mut out, base_offset).unwrap();
        out.to_vec()
    }

    /// (base offset of the answer's first batch, fetch offset, fetch offset after the last
    /// answer's whole entries, accepted)
    #[test]
    fn after_whole_entries_the_next_answer_cannot_start_before_the_fetch_offset() {
        let cases = [
            (20, 20, true, true),   // starts where the last answer ended
            (25, 20, true, true),   // a gap: compaction removed a batch
            (16, 20, true, false),  // 4 before: one of the two answers was damaged
            (16, 20, false, true),  // a seek (or committed offset) inside a batch
            (-12, 20, true, false), // the sign bit
        ];
        for (base, fetch_offset, after_answer, ok) in cases {
            let entry = decode_entries(Bytes::from(v2_batch(base, 5)))
                .next()
                .unwrap()
                .unwrap();
            assert_eq!(
                first_entry_in_place(&entry, fetch_offset, after_answer).is_ok(),
                ok,
                "batch at {base}, fetched at {fetch_offset}, after an answer: {after_answer}"
            );
        }
        // v0/v1 message sets are not checked (a wrapper's inner offsets run before its own).
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy/mixed.log");
        let legacy = decode_entries(Bytes::from(std::fs::read(path).unwrap()))
            .next()
            .unwrap()
            .unwrap();
        assert!(first_entry_in_place(&legacy, 1_000, true).is_ok());
    }

    /// The contradiction fails the answer before anything of it is handed out, and decoding
    /// stays where it was: the answer is fetched again.
    #[test]
    fn an_answer_starting_before_the_last_one_ended_hands_nothing_out() {
        let w = Want {
            after_answer: true,
            ..at(7, 1)
        };
        let chunk = decode_partition(&w, &data(v2_batch(5, 5)), CrcCheck::Verify);
        assert!(chunk.records.is_empty());
        assert_eq!(chunk.next_offset, 7);
        match &chunk.error {
            Some(Error::CorruptData {
                offset: 7,
                source:
                    RecordError::StartsBeforeTheLastAnswerEnded {
                        offset: 5,
                        position: 7,
                    },
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(stopped_at_an_entry(
            &RecordError::StartsBeforeTheLastAnswerEnded {
                offset: 5,
                position: 7
            }
        ));
        // The same batch fetched at 7 after a seek: records 7, 8, 9.
        let chunk = decode_partition(&at(7, 1), &data(v2_batch(5, 5)), CrcCheck::Verify);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [7, 8, 9]);
    }

    /// Two batches of one answer that contradict each other (the first moved up, 0 → 8): the
    /// first is taken back too, and the answer fetched again from before it.
    #[test]
    fn a_batch_contradicting_the_one_before_takes_that_one_back_too() {
        let mut bytes = v2_batch(0, 5);
        bytes.extend(v2_batch(8, 5));
        bytes.extend(v2_batch(5, 5));
        let chunk = decode_partition(&at(0, 1), &data(bytes), CrcCheck::Verify);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [0, 1, 2, 3, 4], "the batch at 8 is not handed out");
        assert_eq!(chunk.next_offset, 5);
        assert!(matches!(
            chunk.error,
            Some(Error::CorruptData {
                offset: 5,
                source: RecordError::OffsetsOutOfPlace { offset: 5, .. },
                ..
            })
        ));
    }

    /// A batch of `n` records whose values (`{tag}{i}`) make its CRC its own.
    fn tagged_batch(base_offset: i64, n: usize, tag: &str) -> Vec<u8> {
        let mut b = BatchBuilder::new(Compression::None);
        for i in 0..n {
            assert!(b.try_append(
                1,
                None,
                Some(format!("{tag}{i}").as_bytes()),
                &[],
                usize::MAX
            ));
        }
        let mut out = BytesMut::from(&b.build(ProducerFields::NONE).unwrap()[..]);
        crate::protocol::records::set_base_offset(&mut out, base_offset).unwrap();
        out.to_vec()
    }

    fn crc_of(batch: &[u8]) -> u32 {
        match decode_entries(Bytes::from(batch.to_vec())).next() {
            Some(Ok(LogEntry::Batch(b))) => b.crc,
            other => panic!("{other:?}"),
        }
    }

    /// A walk back reads the answer before again and hands out only what follows its last
    /// batch: (fetch offset, entries to skip, the CRC the last must have: batch 0/1/2 or
    /// another, offsets handed out, where the chunk ends, left of the walk, mismatch).
    #[test]
    fn a_walk_back_skips_the_entries_handed_out_and_checks_the_last_by_its_crc() {
        let batches = [
            tagged_batch(0, 5, "a"),
            tagged_batch(5, 5, "b"),
            tagged_batch(10, 5, "c"),
        ];
        let crcs: Vec<u32> = batches.iter().map(|b| crc_of(b)).collect();
        let bytes: Vec<u8> = batches.concat();
        type Case = (i64, u32, Option<usize>, Vec<i64>, i64, Option<u32>, bool);
        let cases: [Case; 6] = [
            // The second batch was handed out last: the third goes out.
            (0, 2, Some(1), (10..15).collect(), 15, None, false),
            // The answer before was fetched from inside the first batch: the same entries.
            (3, 2, Some(1), (10..15).collect(), 15, None, false),
            // The first only.
            (0, 1, Some(0), (5..15).collect(), 15, None, false),
            // The answer before reached further than this one: the walk goes on.
            (0, 4, Some(1), vec![], 15, Some(1), false),
            // Nothing is handed out twice, even where every entry was.
            (0, 3, Some(2), vec![], 15, None, false),
            // The last skipped entry is another batch (the log changed): it goes out, with
            // everything after it — never lost.
            (0, 2, None, (5..15).collect(), 15, None, true),
        ];
        for (fetch_offset, entries, last, offsets, end, left, mismatch) in cases {
            let crc = last.map_or(crcs[1] ^ 1, |i| crcs[i]);
            let w = Want {
                skip: Some(Skip { entries, crc }),
                ..at(fetch_offset, 1)
            };
            let chunk = decode_partition(&w, &data(bytes.clone()), CrcCheck::Verify);
            let out: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
            let what = format!("from {fetch_offset}, skipping {entries}, last {last:?}");
            assert!(chunk.error.is_none(), "{what}: {:?}", chunk.error);
            assert_eq!(out, offsets, "{what}");
            assert_eq!(chunk.next_offset, end, "{what}");
            assert_eq!(chunk.trace.skip_left.map(|s| s.entries), left, "{what}");
            assert_eq!(chunk.trace.skip_mismatch, mismatch, "{what}");
        }
        // Without a walk the answer is traced for one: three entries, the last one's CRC.
        let chunk = decode_partition(&at(0, 1), &data(bytes), CrcCheck::Verify);
        assert_eq!(chunk.records.len(), 15);
        assert_eq!(
            (chunk.trace.entries, chunk.trace.last_crc),
            (3, Some(crcs[2]))
        );
    }

    /// (what, the answer before as (from, entries, last CRC), base of the batch holding the
    /// position, where reading goes on, a walk).
    #[test]
    fn a_batch_out_of_place_is_found_again_by_its_crc_not_by_the_next_answers_start() {
        let last = |from, entries, crc| {
            Some(LastAnswer {
                from,
                trace: AnswerTrace {
                    entries,
                    last_crc: crc,
                    ..AnswerTrace::default()
                },
            })
        };
        let walk = |at, entries| {
            Some(Resync {
                epoch: 9,
                at,
                skip: Skip { entries, crc: 77 },
            })
        };
        type Case = (&'static str, Option<LastAnswer>, i64, i64, Option<Resync>);
        let cases: [Case; 5] = [
            // One batch [20, 40) moved up 32: the position 72 lies in [60, 80).
            (
                "moved up across batches",
                last(20, 1, Some(77)),
                60,
                20,
                walk(20, 1),
            ),
            // [40, 60) moved down 32: the position 28 lies in [20, 40).
            ("moved down", last(40, 1, Some(77)), 20, 40, walk(40, 1)),
            (
                "an answer of three",
                last(0, 3, Some(77)),
                60,
                0,
                walk(0, 3),
            ),
            ("nothing known of the answer before", None, 60, 60, None),
            (
                "its last entry a v0/v1 message",
                last(20, 1, None),
                60,
                60,
                None,
            ),
        ];
        for (what, before, base, from, resync) in cases {
            assert_eq!(
                after_out_of_place(before, base, 9),
                (from, resync),
                "{what}"
            );
        }
    }

    /// (what, listed (producer, first offset), borne out) against batches of producer 7:
    /// transactional at 10 and 20, a plain one at 30, and producer 8's transactional at 40;
    /// the data ends at 50.
    #[test]
    fn an_aborted_transaction_listed_inside_the_data_starts_at_a_batch_of_its_producer() {
        let heads = [
            (10, 7, true, 20),
            (20, 7, true, 30),
            (30, 7, false, 40),
            (40, 8, true, 50),
        ];
        type Case = (&'static str, Vec<(i64, i64)>, bool);
        let cases: [Case; 8] = [
            ("nothing listed", vec![], true),
            ("at a batch of its producer", vec![(7, 20)], true),
            ("two, each at its own", vec![(7, 10), (8, 40)], true),
            ("began before the data", vec![(9, 3)], true),
            ("begins after the data", vec![(9, 50)], true),
            ("producer id flipped", vec![(6, 20)], false),
            ("first offset flipped", vec![(7, 24)], false),
            ("at a batch outside any transaction", vec![(7, 30)], false),
        ];
        for (what, listed, ok) in cases {
            assert_eq!(
                aborted_list_borne_out(&heads, &listed).is_ok(),
                ok,
                "{what}"
            );
        }
    }

    /// (last fetched epoch sent, diverging epoch and end offset answered, can be an answer)
    #[test]
    fn a_diverging_epoch_answers_only_the_epoch_sent() {
        let cases = [
            (5, 5, 100, true),
            (5, 3, 0, true),
            (5, 17_462_833, 3_834_587_484_168_126_476, false),
            (5, -1, i64::MAX, false), // the sign bit of "none" (-1) flipped
            (5, 3, -1, false),
            (-1, 3, 100, false), // nothing was sent to check
        ];
        for (sent, epoch, end, ok) in cases {
            assert_eq!(
                divergence_asked_for(sent, epoch, end),
                ok,
                "{sent} / {epoch} / {end}"
            );
        }
    }

    /// Before: `Record(UnsupportedMagic { offset: 0, magic: 0 })` and the partition never
    /// moved (seen).
    #[test]
    fn legacy_entries_are_read_by_the_fetcher() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/legacy/mixed.log");
        let bytes = std::fs::read(path).unwrap();
        let chunk = decode_partition(&at(0, 1), &data(bytes), CrcCheck::Verify);
        assert!(chunk.error.is_none(), "{:?}", chunk.error);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..8).collect::<Vec<_>>());
        assert_eq!(chunk.next_offset, 8);
        // From the middle of a v1 wrapper (offsets 2..=4): the records before are skipped.
        let bytes = std::fs::read(path).unwrap();
        let chunk = decode_partition(&at(3, 1), &data(bytes), CrcCheck::Verify);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (3..8).collect::<Vec<_>>());
    }

    /// Three batches, the middle one with a broken CRC.
    fn good_corrupt_good() -> Vec<u8> {
        let mut bytes = v2_batch(0, 5);
        let mut bad = v2_batch(5, 5);
        let last = bad.len() - 1;
        bad[last] ^= 0xFF;
        bytes.extend(bad);
        bytes.extend(v2_batch(10, 5));
        bytes
    }

    fn assert_corrupt_at_5(e: &Error) {
        match e {
            Error::CorruptData {
                topic,
                partition,
                offset,
                source,
            } => {
                assert_eq!((topic.as_str(), *partition, *offset), ("orders", 3, 5));
                assert!(
                    matches!(source, RecordError::CrcMismatch { offset: 5, .. }),
                    "{source:?}"
                );
            }
            other => panic!("not CorruptData: {other:?}"),
        }
        let msg = e.to_string();
        assert!(
            msg.starts_with("cannot read topic 'orders' partition 3 at offset 5: batch at offset 5: CRC mismatch"),
            "{msg}"
        );
    }

    /// Before: the whole response was an error, `Record(CrcMismatch { offset: 5, .. })`, the
    /// five good records were thrown away and fetched (and thrown away) again after the backoff
    /// (seen).
    #[test]
    fn good_records_before_a_corrupt_batch_are_kept() {
        let chunk = decode_partition(&at(0, 1), &data(good_corrupt_good()), CrcCheck::Verify);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..5).collect::<Vec<_>>());
        assert_eq!(
            chunk.next_offset, 5,
            "decoding stops where the corrupt batch starts"
        );
        assert_corrupt_at_5(
            chunk
                .error
                .as_ref()
                .expect("the error travels with the chunk"),
        );
    }

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

    /// Which partitions may go into a round, by their own state.
    #[test]
    fn readiness_of_a_partition() {
        let now = Instant::now();
        let later = now + std::time::Duration::from_secs(1);
        let earlier = now - std::time::Duration::from_millis(1);
        let fetching = || {
            let mut st = PartitionState::new(1, None);
            st.position = Some(0);
            st.fetch_offset = 0;
            st
        };
        let with = |f: &dyn Fn(&mut PartitionState)| {
            let mut st = fetching();
            f(&mut st);
            st
        };
        let cases: Vec<(&str, PartitionState, Readiness)> = vec![
            ("has a position", fetching(), Readiness::Ready),
            (
                "no position yet",
                with(&|st| st.position = None),
                Readiness::NotNow,
            ),
            (
                "waiting for ListOffsets",
                with(&|st| st.pending = Some(Offset::End)),
                Readiness::NotNow,
            ),
            (
                "in a request",
                with(&|st| st.in_flight = Some(3)),
                Readiness::NotNow,
            ),
            ("halted", with(&|st| st.halted = true), Readiness::NotNow),
            (
                "backing off",
                with(&|st| st.backoff_until = Some(later)),
                Readiness::After(later),
            ),
            (
                "backoff over",
                with(&|st| st.backoff_until = Some(earlier)),
                Readiness::Ready,
            ),
            (
                "halted beats backing off",
                with(&|st| {
                    st.halted = true;
                    st.backoff_until = Some(later);
                }),
                Readiness::NotNow,
            ),
        ];
        for (what, st, want) in cases {
            assert_eq!(readiness(&st, now), want, "{what}");
        }
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

    /// What the metadata's topic id means for the id a position belongs to.
    #[test]
    fn topic_id_decisions() {
        let (a, b, c, none) = ([1; 16], [2; 16], [3; 16], [0; 16]);
        // (what, held, metadata's id, seen before, metadata generation, decision)
        let cases = [
            ("no id yet: adopt", None, a, None, 5, TopicId::Adopt),
            (
                "an unknown id held: adopt",
                Some(none),
                a,
                None,
                5,
                TopicId::Adopt,
            ),
            ("the same id", Some(a), a, None, 5, TopicId::Same),
            (
                "metadata without ids",
                Some(a),
                none,
                None,
                5,
                TopicId::Same,
            ),
            ("nothing either side", None, none, None, 5, TopicId::Same),
            (
                "another id, first seen",
                Some(a),
                b,
                None,
                5,
                TopicId::Suspect,
            ),
            (
                "the same metadata again",
                Some(a),
                b,
                Some((b, 5)),
                5,
                TopicId::Suspect,
            ),
            (
                "a later metadata says so too: recreated",
                Some(a),
                b,
                Some((b, 5)),
                6,
                TopicId::Recreated { old: a },
            ),
            (
                "a third id: seen again from the start",
                Some(a),
                c,
                Some((b, 5)),
                6,
                TopicId::Suspect,
            ),
        ];
        for (what, held, now, seen, generation, want) in cases {
            assert_eq!(on_topic_id(held, now, seen, generation), want, "{what}");
        }
    }

    /// (held, borne out by a Fetch answer, compared against)
    #[test]
    fn only_an_id_a_fetch_answer_bore_out_is_compared() {
        let a = [1; 16];
        let cases = [
            (Some(a), true, Some(a)),
            (Some(a), false, None),
            (None, true, None),
            (None, false, None),
        ];
        for (held, borne_out, want) in cases {
            assert_eq!(id_to_compare(held, borne_out), want, "{held:?} {borne_out}");
        }
    }

    /// What a partition's error code makes the fetcher do.
    #[test]
    fn partition_error_decisions() {
        use AutoOffsetReset::{Earliest, Latest};
        let none = AutoOffsetReset::None;
        let cases = [
            (
                ErrorCode::OFFSET_OUT_OF_RANGE,
                Earliest,
                OnError::Reset(Offset::Beginning),
            ),
            (
                ErrorCode::OFFSET_OUT_OF_RANGE,
                Latest,
                OnError::Reset(Offset::End),
            ),
            (ErrorCode::OFFSET_OUT_OF_RANGE, none, OnError::OutOfRange),
            (
                ErrorCode::NOT_LEADER_OR_FOLLOWER,
                Latest,
                OnError::Retry { refresh: true },
            ),
            (
                ErrorCode::FENCED_LEADER_EPOCH,
                Latest,
                OnError::Retry { refresh: true },
            ),
            (
                ErrorCode::UNKNOWN_LEADER_EPOCH,
                Latest,
                OnError::Retry { refresh: true },
            ),
            (
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                Latest,
                OnError::Retry { refresh: true },
            ),
            (
                ErrorCode::KAFKA_STORAGE_ERROR,
                none,
                OnError::Retry { refresh: true },
            ),
            (
                ErrorCode::REQUEST_TIMED_OUT,
                Latest,
                OnError::Retry { refresh: false },
            ),
            (
                ErrorCode::CORRUPT_MESSAGE,
                Latest,
                OnError::Retry { refresh: false },
            ),
            (ErrorCode::TOPIC_AUTHORIZATION_FAILED, Latest, OnError::Fail),
            (ErrorCode::UNSUPPORTED_VERSION, Earliest, OnError::Fail),
        ];
        for (code, reset, want) in cases {
            assert_eq!(on_partition_error(code, reset), want, "{code:?} {reset:?}");
        }
    }

    /// check.crcs=false, as in the Java consumer: a batch whose stored CRC does not match its
    /// (intact) bytes is read like any other. check.crcs=true is the test above.
    #[test]
    fn with_check_crcs_false_a_batch_whose_crc_does_not_match_is_read() {
        let mut bytes = v2_batch(0, 5);
        let mut bad_crc = v2_batch(5, 5);
        bad_crc[17] ^= 0xFF; // the CRC field itself
        bytes.extend(bad_crc);
        bytes.extend(v2_batch(10, 5));
        let verified = decode_partition(&at(0, 1), &data(bytes.clone()), CrcCheck::Verify);
        assert_corrupt_at_5(verified.error.as_ref().expect("refused when verifying"));
        let chunk = decode_partition(&at(0, 1), &data(bytes), CrcCheck::Skip);
        assert!(chunk.error.is_none(), "{:?}", chunk.error);
        let offsets: Vec<i64> = chunk.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..15).collect::<Vec<_>>());
        assert_eq!(chunk.next_offset, 15);
    }

    /// The property reaches the decoder: default and "true" verify, "false" skips.
    #[test]
    fn check_crcs_property_chooses_the_crc_check() {
        let cases = [
            (None, CrcCheck::Verify),
            (Some("true"), CrcCheck::Verify),
            (Some("false"), CrcCheck::Skip),
        ];
        for (value, want) in cases {
            let props: Vec<(&str, &str)> = value.map(|v| ("check.crcs", v)).into_iter().collect();
            let cfg = ConsumerConfig::from_properties(props).unwrap();
            assert_eq!(crc_check(&cfg), want, "check.crcs={value:?}");
        }
    }

    fn assigned(epoch: u64, position: i64) -> BTreeMap<TopicPartition, PartitionState> {
        let mut st = PartitionState::new(epoch, None);
        st.position = Some(position);
        st.fetch_offset = position;
        BTreeMap::from([(tp(), st)])
    }

    /// What the application sees: the good records, then (on the next poll) the error naming
    /// topic, partition and offset, raised again on every poll until a seek; the position stays
    /// at the corrupt batch.
    #[test]
    fn the_application_gets_the_records_then_the_error_until_it_seeks() {
        let mut parts = assigned(1, 0);
        let mut buffered = VecDeque::new();
        let chunk = decode_partition(&at(0, 1), &data(good_corrupt_good()), CrcCheck::Verify);
        super::super::accept_chunk(&mut buffered, &mut parts, chunk);

        let first =
            super::super::take_records(&mut buffered, &mut parts, 500).expect("records first");
        assert_eq!(
            first.iter().map(|r| r.offset).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert_eq!(parts[&tp()].position, Some(5));
        for _ in 0..2 {
            let e = super::super::take_records(&mut buffered, &mut parts, 500).unwrap_err();
            assert_corrupt_at_5(&e);
            assert_eq!(parts[&tp()].position, Some(5));
        }
        // A seek gives the partition a new epoch: the chunk is stale and dropped.
        parts.get_mut(&tp()).unwrap().epoch = 2;
        assert!(super::super::take_records(&mut buffered, &mut parts, 500)
            .unwrap()
            .is_empty());
        assert!(buffered.is_empty());
    }

    /// With max.poll.records smaller than the good records, they come out over several polls
    /// and the error only after the last of them.
    #[test]
    fn the_error_waits_for_every_record_before_it() {
        let mut parts = assigned(1, 0);
        let mut buffered = VecDeque::new();
        let chunk = decode_partition(&at(0, 1), &data(good_corrupt_good()), CrcCheck::Verify);
        super::super::accept_chunk(&mut buffered, &mut parts, chunk);
        let mut got = Vec::new();
        loop {
            match super::super::take_records(&mut buffered, &mut parts, 2) {
                Ok(rs) => {
                    assert!(!rs.is_empty());
                    got.extend(rs.iter().map(|r| r.offset));
                }
                Err(e) => {
                    assert_corrupt_at_5(&e);
                    break;
                }
            }
        }
        assert_eq!(got, [0, 1, 2, 3, 4]);
    }

    /// A chunk fetched under an epoch the partition has left (the old assignment, before
    /// `assign([])`, `assign([tp])`, `seek`) is never handed out and never moves the position.
    #[test]
    fn chunks_of_another_epoch_are_dropped() {
        let mut parts = assigned(7, 0);
        let mut buffered = VecDeque::new();
        let old = decode_partition(&at(0, 6), &data(v2_batch(0, 5)), CrcCheck::Verify);
        super::super::accept_chunk(&mut buffered, &mut parts, old);
        assert!(buffered.is_empty());
        assert_eq!(parts[&tp()].position, Some(0));
        // Queued while current, then the partition was sought: dropped at take.
        let current = decode_partition(&at(0, 7), &data(v2_batch(0, 5)), CrcCheck::Verify);
        super::super::accept_chunk(&mut buffered, &mut parts, current);
        parts.get_mut(&tp()).unwrap().epoch = 8;
        assert!(super::super::take_records(&mut buffered, &mut parts, 500)
            .unwrap()
            .is_empty());
        assert_eq!(parts[&tp()].position, Some(0));
    }

    /// `n` records of producer `pid`'s transaction, from `base`.
    fn txn_batch(pid: i64, base: i64, n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(Compression::None);
        for _ in 0..n {
            assert!(b.try_append(1, None, Some(&b"t"[..]), &[], usize::MAX));
        }
        let fields = ProducerFields {
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
            transactional: true,
        };
        let mut out = BytesMut::from(&b.build(fields).unwrap()[..]);
        crate::protocol::records::set_base_offset(&mut out, base).unwrap();
        out.to_vec()
    }

    /// A Fetch answer's data with its aborted-transaction list.
    fn with_aborted(bytes: Vec<u8>, listed: &[(i64, i64)]) -> PartitionData {
        use kafka_protocol::messages::fetch_response::AbortedTransaction;
        use kafka_protocol::messages::ProducerId;
        data(bytes).with_aborted_transactions(Some(
            listed
                .iter()
                .map(|&(pid, first)| {
                    AbortedTransaction::default()
                        .with_producer_id(ProducerId(pid))
                        .with_first_offset(first)
                })
                .collect(),
        ))
    }

    /// An aborted transaction open where one answer ended must be listed by the next: a
    /// damaged producer id in the second list would expose the rest of the transaction.
    #[test]
    fn an_aborted_transaction_open_at_an_answer_end_must_be_listed_again() {
        use crate::protocol::records::encode_raw_control_batch;
        let pid = 77;
        // The first answer: plain 0, 1, then the aborted transaction's first batch, 2..=4.
        let mut first = v2_batch(0, 2);
        first.extend(txn_batch(pid, 2, 3));
        let chunk = decode_partition(
            &at(0, 1),
            &with_aborted(first, &[(pid, 2)]),
            CrcCheck::Verify,
        );
        assert_eq!(
            chunk.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(
            (chunk.next_offset, &chunk.open_aborted[..]),
            (5, &[(pid, 2)][..])
        );
        // The next answer: the transaction's second batch, 5..=6, and its abort marker at 7.
        let mut second = txn_batch(pid, 5, 2);
        second.extend_from_slice(&encode_raw_control_batch(
            7,
            0,
            1,
            pid,
            0,
            &[0, 0, 0, 0],
            Some(&[0, 0, 0, 0, 0, 0]),
        ));
        let mut w = at(5, 1);
        w.after_answer = true;
        w.open_aborted = chunk.open_aborted.clone();
        // Listed again: nothing handed out, the transaction ended.
        let ok = decode_partition(
            &w,
            &with_aborted(second.clone(), &[(pid, 2)]),
            CrcCheck::Verify,
        );
        assert!(ok.error.is_none(), "{:?}", ok.error);
        assert!(ok.records.is_empty());
        assert_eq!((ok.next_offset, ok.open_aborted.len()), (8, 0));
        // The producer id flipped in the second list: fetched again, nothing handed out.
        let bad = decode_partition(
            &w,
            &with_aborted(second.clone(), &[(pid ^ 1024, 2)]),
            CrcCheck::Verify,
        );
        assert!(bad.records.is_empty());
        assert!(
            matches!(
                bad.error,
                Some(Error::CorruptData {
                    offset: 5,
                    source: RecordError::AbortedTransactionLeftOut {
                        producer_id: 77,
                        first_offset: 2,
                        position: 5
                    },
                    ..
                })
            ),
            "{:?}",
            bad.error
        );
        // Without the first answer (a seek to 5) it cannot be told: the check needs it.
        let unchecked = decode_partition(
            &at(5, 1),
            &with_aborted(second, &[(pid ^ 1024, 2)]),
            CrcCheck::Verify,
        );
        assert_eq!(
            unchecked.records.len(),
            2,
            "the damage this check exists for"
        );
    }

    /// (what, open where the last answer ended, listed now, consistent)
    #[test]
    fn an_answer_lists_again_the_aborted_transactions_left_open() {
        type Case = (&'static str, Vec<(i64, i64)>, Vec<(i64, i64)>, bool);
        let cases: [Case; 6] = [
            ("nothing open", vec![], vec![(7, 40)], true),
            ("listed again", vec![(7, 10)], vec![(7, 10)], true),
            (
                "listed again among others",
                vec![(7, 10)],
                vec![(8, 30), (7, 10)],
                true,
            ),
            ("producer id flipped", vec![(7, 10)], vec![(6, 10)], false),
            ("first offset flipped", vec![(7, 10)], vec![(7, 11)], false),
            ("left out", vec![(7, 10), (8, 12)], vec![(8, 12)], false),
        ];
        for (what, open, listed, ok) in cases {
            assert_eq!(
                aborted_list_repeats(&open, &listed, 20).is_ok(),
                ok,
                "{what}"
            );
        }
    }

    /// read_committed through the fetcher: a malformed marker ending an aborted transaction
    /// stops the partition with the records before it delivered.
    #[test]
    fn a_malformed_marker_stops_read_committed_with_the_records_before_it() {
        use crate::protocol::records::encode_raw_control_batch;
        use kafka_protocol::messages::fetch_response::AbortedTransaction;
        use kafka_protocol::messages::ProducerId;
        let pid = 77;
        let txn = |base: i64, n: usize| txn_batch(pid, base, n);
        let mut bytes = v2_batch(0, 2); // plain records 0, 1
        bytes.extend(txn(2, 3)); // aborted 2..=4
        bytes.extend_from_slice(&encode_raw_control_batch(5, 0, 1, pid, 0, &[0, 0], None));
        bytes.extend(txn(6, 2));
        let p = data(bytes).with_aborted_transactions(Some(vec![AbortedTransaction::default()
            .with_producer_id(ProducerId(pid))
            .with_first_offset(2)]));
        let chunk = decode_partition(&at(0, 1), &p, CrcCheck::Verify);
        assert_eq!(
            chunk.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(chunk.next_offset, 5);
        let e = chunk.error.expect("an error");
        assert!(
            matches!(
                e,
                Error::CorruptData {
                    offset: 5,
                    source: RecordError::MalformedControlRecord { offset: 5, .. },
                    ..
                }
            ),
            "{e:?}"
        );
    }

    /// The leader epoch of the last batch read becomes the next fetch's last_fetched_epoch;
    /// batches without one (v0/v1, or -1) leave it as it was.
    #[test]
    fn the_last_batch_leader_epoch_is_noted() {
        let with_epoch = |mut b: Vec<u8>, e: i32| {
            // The partition leader epoch (bytes 12..16) is outside the CRC, as the broker
            // stamps it on append.
            b[12..16].copy_from_slice(&e.to_be_bytes());
            b
        };
        let mut bytes = with_epoch(v2_batch(0, 2), 3);
        bytes.extend(with_epoch(v2_batch(2, 2), 4));
        bytes.extend(v2_batch(4, 2)); // -1
        let chunk = decode_partition(&at(0, 1), &data(bytes), CrcCheck::Verify);
        assert_eq!((chunk.last_epoch, chunk.next_offset), (Some(4), 6));
        let legacy = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/legacy/v1-gzip.log"
        ))
        .unwrap();
        assert_eq!(
            decode_partition(&at(0, 1), &data(legacy), CrcCheck::Verify).last_epoch,
            None
        );
    }
}
