//! The fetcher task: resolves start positions, keeps one Fetch in flight per leader, decodes
//! record batches (and old v0/v1 message sets) and hands the records to the consumer.
//!
//! The folder:
//! - `mod.rs` (here): the task. A round resolves pending seeks and resets (ListOffsets), plans
//!   which partitions go to which leader (`Fetcher::plan_round`: a partition's `Readiness`,
//!   its leader, its topic id), spawns one Fetch per leader not already busy, and waits for
//!   what can change the next round; `fetch_from` sends one Fetch and applies its answers.
//! - `request.rs`: what a Fetch asks for each partition (`Want`), the version and the fetch
//!   session (KIP-227) it goes under, the request itself (and the one closing a session), and
//!   the response's answers matched to the partitions asked for.
//! - `topic_id.rs`: what metadata's topic id says about the topic a position belongs to, and
//!   a topic deleted and recreated under the same name.
//! - `apply.rs`: one partition's answer applied to its state: a decoded chunk moves the
//!   position on, an error code retries, resets or is reported, a diverging epoch (KIP-320)
//!   moves the position back; backoffs.
//! - `decode.rs`: an answer's record batches and legacy message sets decoded into records,
//!   without control batches and aborted transactions.
//! - `integrity.rs`: what a client can check of an answer beyond the CRCs (entries in place,
//!   the high watermark, the aborted-transaction list, a diverging epoch, the log start), and
//!   what follows a failed check: fetched again, walked back, or halted.
//! - `testing.rs`: record batches the unit tests build.
//!
//! Uses run one way: the task uses `request`, `topic_id` and `apply`; `apply` uses `decode`,
//! `integrity` and `request`; `decode` uses `integrity` and `request`; `request` uses
//! `integrity`; `topic_id` and `integrity` use none of them.

mod apply;
mod decode;
mod integrity;
mod request;
#[cfg(test)]
mod testing;
mod topic_id;

pub(super) use request::close_sessions;
pub(crate) use request::Sessions;

use super::metrics::Counters;
use super::order::next_order;
use super::session::Outcome;
use super::{list_offsets, Chunk, Fetched, Offset, PartitionState, Resolution, Shared};
use crate::client::error::{classify, Error, ErrorClass, Op};
use crate::client::metadata::{MetadataSnapshot, TopicPartition};
use crate::protocol::ErrorCode;
use apply::{apply_partition, back_off, forget_last_fetched_epochs, release, Applied};
use kafka_protocol::messages::fetch_response::PartitionData;
use request::{answers, response_outcome, restart_session, send_fetch, Sent, Want};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use topic_id::{id_to_compare, on_topic_id, recreated, TopicId};
use tracing::{debug, debug_span, Instrument};

/// The fetcher task, until the consumer is gone: one round after another.
pub(super) async fn run(shared: Arc<Shared>, tx: mpsc::Sender<Fetched>) {
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
    /// The consumer's state: its configuration, cluster and partitions.
    shared: Arc<Shared>,
    /// Where chunks and errors go to the consumer; closed when the consumer is gone.
    tx: mpsc::Sender<Fetched>,
    /// Leaders with a Fetch in flight: one request at a time per leader.
    busy: Arc<std::sync::Mutex<HashSet<i32>>>,
    /// Each finished request reports the partitions it brought records for.
    done_tx: mpsc::UnboundedSender<Vec<TopicPartition>>,
    /// Where those reports are collected, before each round and while waiting for work.
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

/// A partition's [`Readiness`] at `now`.
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
            if !topic_id_allows_fetch(&self.shared, tp, st, topic_id, meta, now, &mut round) {
                continue;
            }
            if busy.contains(&leader) {
                continue;
            }
            let leader_epoch = meta.partition(tp).map_or(-1, |p| p.leader_epoch);
            by_leader
                .entry(leader)
                .or_default()
                .push(Want::new(tp, st, leader_epoch, topic_id));
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

/// Whether the partition may be fetched under the topic id metadata names now (`topic_id`),
/// as [`on_topic_id`] decides. An id that differs for the first time waits for metadata to be
/// refreshed; a topic recreated resets the position (its ListOffsets in the next round, at
/// once) or halts the partition, with the chunk that tells the application in `round`.
fn topic_id_allows_fetch(
    shared: &Shared,
    tp: &TopicPartition,
    st: &mut PartitionState,
    topic_id: [u8; 16],
    meta: &MetadataSnapshot,
    now: Instant,
    round: &mut Round,
) -> bool {
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
            return false;
        }
        TopicId::Recreated { old } => {
            st.id_change = None;
            if let Some(chunk) = recreated(shared, tp, st, old, topic_id) {
                round.recreated.push(chunk);
            }
            // The reset's ListOffsets is for the next round, at once.
            round.next_wake = Some(now);
            return false;
        }
    }
    true
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
            on_request_failed(shared, sessions, leader, id, &list, e, tx).await;
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
    match response_outcome(sessions, leader, plan, &resp, stranger) {
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
            on_top_level_error(shared, sessions, leader, id, &list, code).await;
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
    release_unanswered(shared, id, &list, &answers);
    if refresh {
        let g = shared.cluster.metadata().generation;
        let _ = shared.cluster.refresh_if_older(g).await;
    }
    served
}

/// A Fetch that got no answer (no connection, no common version, timed out): the leader's
/// fetch session starts again and the partitions back off.
async fn on_request_failed(
    shared: &Shared,
    sessions: &Sessions,
    leader: i32,
    id: u64,
    list: &[Want],
    e: Error,
    tx: &mpsc::Sender<Fetched>,
) {
    debug!(leader, error = %e, "fetch failed");
    // What retrying cannot fix (no common Fetch version even after negotiating again
    // on a new connection, failed authentication) reaches the application's poll,
    // every round it happens, instead of a silent retry loop.
    if e.class() == ErrorClass::Fatal {
        let _ = tx.send(Fetched::Error(e.clone())).await;
    }
    if restart_session(sessions, leader) {
        Counters::add(&shared.counters.fetch_session_restarts, 1);
    }
    back_off(shared, id, list, e.class() == ErrorClass::RefreshAndRetry).await;
}

/// A response whose top-level error code fails the whole request: the partitions back off,
/// after a metadata refresh when the code calls for one.
async fn on_top_level_error(
    shared: &Shared,
    sessions: &Sessions,
    leader: i32,
    id: u64,
    list: &[Want],
    code: ErrorCode,
) {
    debug!(leader, ?code, "fetch failed at the top level");
    // Whatever of ours the broker choked on (a session's state, a last_fetched_epoch
    // taken from damaged data) is not sent again: the next request is a full one
    // without the KIP-320 check.
    restart_session(sessions, leader);
    forget_last_fetched_epochs(shared, list);
    let refresh = classify(code, Op::General) == ErrorClass::RefreshAndRetry;
    back_off(shared, id, list, refresh).await;
}

/// Releases the partitions of request `id` that its response left out (`answers`: the ones it
/// holds, by index in `list`): they are fetched again next round. A full response left them
/// out for lack of room (fetch.max.bytes), an incremental one because they have nothing new
/// (KIP-227), and then their end offsets are as the last answer said.
fn release_unanswered(
    shared: &Shared,
    id: u64,
    list: &[Want],
    answers: &[(usize, &PartitionData)],
) {
    let mut answered = vec![false; list.len()];
    for &(i, _) in answers {
        answered[i] = true;
    }
    let mut parts = shared.lock();
    for (w, _) in list.iter().zip(answered).filter(|(_, a)| !a) {
        release(parts.get_mut(&w.tp), id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
