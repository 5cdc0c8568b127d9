//! The fetcher task: resolves start positions, keeps one Fetch in flight per leader, decodes
//! record batches and hands the records to the consumer.

use super::isolation::AbortedTransactions;
use super::{list_offsets, Chunk, ConsumerRecord, Fetched, Offset, Shared};
use crate::client::config::AutoOffsetReset;
use crate::client::error::{Error, ErrorClass};
use crate::client::metadata::TopicPartition;
use crate::protocol::records::decode_batches;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tracing::{debug, debug_span, Instrument};

/// Fetch v13 addresses topics by id; v12 is the newest by name.
const MAX_FETCH_VERSION: i16 = 12;

pub(crate) async fn run(shared: Arc<Shared>, tx: mpsc::Sender<Fetched>) {
    let busy: Arc<std::sync::Mutex<HashSet<i32>>> = Arc::default();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<()>();
    loop {
        resolve_positions(&shared, &tx).await;
        shared.cluster.refresh_if_stale();
        let now = Instant::now();
        let meta = shared.cluster.metadata();
        let mut by_leader: HashMap<i32, Vec<(TopicPartition, i64, u64, i32)>> = HashMap::new();
        let mut missing_leader = false;
        let mut next_wake: Option<Instant> = None;
        {
            let mut parts = shared.lock();
            if parts.values().any(|st| st.pending.is_some()) {
                // A ListOffsets failed: try again after a backoff.
                next_wake = Some(now + shared.config.client.retry_backoff);
            }
            let busy = busy.lock().unwrap_or_else(|p| p.into_inner());
            for (tp, st) in parts.iter_mut() {
                if st.in_fetch || st.pending.is_some() || st.position.is_none() {
                    continue;
                }
                if let Some(at) = st.backoff_until {
                    if at > now {
                        next_wake = Some(next_wake.map_or(at, |w: Instant| w.min(at)));
                        continue;
                    }
                    st.backoff_until = None;
                }
                let Some(leader) = meta.leader(tp) else {
                    missing_leader = true;
                    continue;
                };
                if busy.contains(&leader) {
                    continue;
                }
                let epoch = meta.partition(tp).map_or(-1, |p| p.leader_epoch);
                by_leader.entry(leader).or_default().push((
                    tp.clone(),
                    st.fetch_offset,
                    st.epoch,
                    epoch,
                ));
            }
            for list in by_leader.values() {
                for (tp, ..) in list {
                    if let Some(st) = parts.get_mut(tp) {
                        st.in_fetch = true;
                    }
                }
            }
        }
        if missing_leader {
            let g = meta.generation;
            let _ = shared.cluster.refresh_if_older(g).await;
        }
        for (leader, list) in by_leader {
            busy.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(leader);
            let shared = shared.clone();
            let tx = tx.clone();
            let busy = busy.clone();
            let done = done_tx.clone();
            tokio::spawn(async move {
                fetch_from(&shared, leader, list, &tx).await;
                busy.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&leader);
                let _ = done.send(());
            });
        }
        if tx.is_closed() {
            return;
        }
        let sleep = async {
            match next_wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = done_rx.recv() => {}
            _ = sleep => {}
            _ = tokio::time::sleep(shared.config.client.retry_backoff), if missing_leader => {}
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
                            st.pending = None;
                            st.position = Some(*o);
                            st.fetch_offset = *o;
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

async fn fetch_from(
    shared: &Arc<Shared>,
    leader: i32,
    list: Vec<(TopicPartition, i64, u64, i32)>,
    tx: &mpsc::Sender<Fetched>,
) {
    let cfg = &shared.config;
    let span = debug_span!("fetch", leader, partitions = list.len());
    let result = async {
        let conn = shared.cluster.broker(leader).await?;
        let version = conn.version_for::<FetchRequest>(Some(MAX_FETCH_VERSION))?;
        let mut topics: Vec<FetchTopic> = Vec::new();
        for (tp, offset, _, leader_epoch) in &list {
            let p = FetchPartition::default()
                .with_partition(tp.partition)
                .with_fetch_offset(*offset)
                .with_current_leader_epoch(*leader_epoch)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(cfg.max_partition_fetch_bytes);
            match topics.iter_mut().find(|t| t.topic.0.as_str() == tp.topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(tp.topic.clone())))
                        .with_partitions(vec![p]),
                ),
            }
        }
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(cfg.fetch_max_wait.as_millis().min(i32::MAX as u128) as i32)
            .with_min_bytes(cfg.fetch_min_bytes)
            .with_max_bytes(cfg.fetch_max_bytes)
            .with_isolation_level(cfg.isolation_level.wire())
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(topics);
        // The broker holds a Fetch up to max_wait when there is no data: that is not the
        // network being slow, and must not time out (and replace) the connection.
        conn.start_request(&req, version)?
            .with_timeout(conn.request_timeout() + cfg.fetch_max_wait)
            .response()
            .await
    }
    .instrument(span)
    .await;
    let resp: FetchResponse = match result {
        Ok(r) => r,
        Err(e) => {
            debug!(leader, error = %e, "fetch failed");
            back_off(shared, &list, e.class() == ErrorClass::RefreshAndRetry).await;
            return;
        }
    };
    let mut seen: HashSet<TopicPartition> = HashSet::new();
    let mut refresh = false;
    for t in &resp.responses {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.topic.0.to_string(), p.partition_index);
            let Some((_, fetch_offset, epoch, _)) = list.iter().find(|(x, ..)| *x == tp) else {
                continue;
            };
            seen.insert(tp.clone());
            if p.error_code != 0 {
                let code = ErrorCode(p.error_code);
                if code == ErrorCode::OFFSET_OUT_OF_RANGE {
                    let reset = match cfg.auto_offset_reset {
                        AutoOffsetReset::Earliest => Some(Offset::Beginning),
                        AutoOffsetReset::Latest => Some(Offset::End),
                        AutoOffsetReset::None => None,
                    };
                    let fail = {
                        let mut parts = shared.lock();
                        match parts.get_mut(&tp).filter(|st| st.epoch == *epoch) {
                            Some(st) => {
                                st.in_fetch = false;
                                match reset {
                                    Some(r) => {
                                        debug!(%tp, fetch_offset, ?r, "offset out of range; resetting");
                                        st.epoch += 1;
                                        st.pending = Some(r);
                                        st.position = None;
                                        false
                                    }
                                    None => {
                                        st.backoff_until =
                                            Some(Instant::now() + cfg.client.retry_backoff_max);
                                        true
                                    }
                                }
                            }
                            None => {
                                if let Some(st) = parts.get_mut(&tp) {
                                    st.in_fetch = false;
                                }
                                false
                            }
                        }
                    };
                    if fail {
                        let e = Error::broker(
                            format!("fetch {tp} at offset {fetch_offset} (auto.offset.reset=none)"),
                            code,
                        );
                        let _ = tx.send(Fetched::Error(e)).await;
                    }
                    continue;
                }
                let err = Error::broker(format!("fetch {tp}"), code);
                match err.class() {
                    ErrorClass::Retriable | ErrorClass::RefreshAndRetry => {
                        refresh |= err.class() == ErrorClass::RefreshAndRetry;
                        set_backoff(shared, &tp);
                    }
                    _ => {
                        set_backoff(shared, &tp);
                        let _ = tx.send(Fetched::Error(err)).await;
                    }
                }
                continue;
            }
            let chunk = decode_partition(&tp, *fetch_offset, *epoch, p);
            match chunk {
                Ok(chunk) => {
                    {
                        let mut parts = shared.lock();
                        if let Some(st) = parts.get_mut(&tp) {
                            st.in_fetch = false;
                            if st.epoch == *epoch {
                                st.fetch_offset = chunk.next_offset;
                                st.log_start_offset = p.log_start_offset;
                            }
                        }
                    }
                    if tx.send(Fetched::Chunk(chunk)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    set_backoff(shared, &tp);
                    let _ = tx.send(Fetched::Error(e)).await;
                }
            }
        }
    }
    // Partitions the response left out are fetched again next round.
    let left: Vec<_> = list
        .iter()
        .filter(|(tp, ..)| !seen.contains(tp))
        .cloned()
        .collect();
    if !left.is_empty() {
        let mut parts = shared.lock();
        for (tp, ..) in left {
            if let Some(st) = parts.get_mut(&tp) {
                st.in_fetch = false;
            }
        }
    }
    if refresh {
        let g = shared.cluster.metadata().generation;
        let _ = shared.cluster.refresh_if_older(g).await;
    }
}

fn set_backoff(shared: &Shared, tp: &TopicPartition) {
    let mut parts = shared.lock();
    if let Some(st) = parts.get_mut(tp) {
        st.in_fetch = false;
        st.backoff_until = Some(Instant::now() + shared.config.client.retry_backoff);
    }
}

async fn back_off(shared: &Shared, list: &[(TopicPartition, i64, u64, i32)], refresh: bool) {
    for (tp, ..) in list {
        set_backoff(shared, tp);
    }
    if refresh {
        let g = shared.cluster.metadata().generation;
        let _ = shared.cluster.refresh_if_older(g).await;
    }
}

/// Decodes one partition's records, skipping control batches and records before the fetch
/// offset (a compressed batch can start before it).
fn decode_partition(
    tp: &TopicPartition,
    fetch_offset: i64,
    epoch: u64,
    p: &kafka_protocol::messages::fetch_response::PartitionData,
) -> Result<Chunk, Error> {
    let mut records = VecDeque::new();
    let mut next_offset = fetch_offset;
    // Under read_committed the broker sends the aborted transactions; under read_uncommitted
    // it sends none, and only control batches are skipped.
    let mut aborted = AbortedTransactions::new(
        p.aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.producer_id.0, a.first_offset)),
    );
    if let Some(bytes) = p.records.clone() {
        for batch in decode_batches(bytes) {
            let batch = batch?;
            // Markers and aborted batches before the fetch offset still update the index.
            let keep = aborted.keep(&batch);
            if batch.next_offset() <= fetch_offset {
                continue;
            }
            if keep {
                // Straight from the batch into the chunk: no intermediate Vec per batch.
                for r in batch.record_iter()? {
                    let r = r?;
                    if r.offset < fetch_offset {
                        continue;
                    }
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
            next_offset = next_offset.max(batch.next_offset());
        }
    }
    Ok(Chunk {
        tp: tp.clone(),
        epoch,
        records,
        next_offset,
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
    })
}
