//! The consumer: assign partitions, seek, and read records as batches or as a stream.
//!
//! Positions live in the consumer; a background `fetcher` task keeps one Fetch request in
//! flight per leader broker and hands decoded records over a bounded channel, so the next fetch
//! overlaps with the application processing the previous one while a slow application still
//! bounds memory. Every assignment of a partition, seek and reset gives it a new *epoch*, drawn
//! from one counter per consumer so an epoch is never reused; fetched data carries the epoch it
//! was fetched under, and data from any other epoch is dropped, so a seek or a reassignment is
//! never undone by a response that was already on its way.

mod fetcher;
pub mod isolation;
mod metrics;
mod order;
mod session;
mod truncation;

pub use metrics::ConsumerMetrics;

use super::cluster::Cluster;
use super::config::{AutoOffsetReset, ConsumerConfig, IsolationLevel};
use super::error::{Error, Result};
pub use super::metadata::Offset;
use super::metadata::TopicPartition;
use crate::protocol::records::Header;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};

/// One record read from Kafka.
///
/// # Examples
/// ```no_run
/// # async fn demo(consumer: &mut onceflow::client::Consumer) -> onceflow::client::Result<()> {
/// for r in consumer.poll(std::time::Duration::from_secs(1)).await? {
///     let key = r.key.as_deref().map(String::from_utf8_lossy);
///     let value = r.value.as_deref().map(String::from_utf8_lossy);
///     println!("{}-{}@{} ({} ms): {key:?} = {value:?}", r.topic, r.partition, r.offset, r.timestamp);
///     for h in &r.headers {
///         println!("  header {:?} = {:?}", h.key, h.value);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp in ms since the epoch.
    pub timestamp: i64,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers in order, repeated keys kept.
    pub headers: Vec<Header>,
}

#[derive(Debug, Clone)]
pub(crate) struct PartitionState {
    /// Next offset to hand to the application; `None` until reset or seek resolves.
    pub position: Option<i64>,
    /// Next offset to fetch (ahead of `position` while data is buffered).
    pub fetch_offset: i64,
    /// Requested start, resolved by the fetcher with ListOffsets.
    pub pending: Option<Offset>,
    /// Fetch epoch, from [`Shared::next_epoch`]: new on every assignment of the partition, seek
    /// and reset, never reused. Data fetched under another epoch is dropped.
    pub epoch: u64,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// The id of the fetch request this partition is in, if one is in flight. Only that
    /// request clears it: a request of an earlier assignment must not, or a second request
    /// for the partition could be sent while one is still in flight.
    pub in_flight: Option<u64>,
    /// When the partition may be fetched again after an error.
    pub backoff_until: Option<Instant>,
    /// Its last fetch failed (leader away, connection lost) or it has no leader: the end
    /// offsets above are not known to be current until a fetch of it succeeds again.
    pub fetch_failed: bool,
    /// Fetching stopped at data that cannot be decoded (or at a log truncation); the chunk
    /// carrying the error is buffered and raised by every poll until a seek (which clears
    /// this) moves the position.
    pub halted: bool,
    /// Leader epoch of the last batch fetched before `fetch_offset` (-1: unknown, e.g. after a
    /// seek), sent as the Fetch's last_fetched_epoch so the leader can tell us when its log
    /// diverges from what we fetched (KIP-320).
    pub last_fetched_epoch: i32,
    /// The id of the topic the position belongs to (KIP-516), taken from metadata when the
    /// partition is first fetched after an assignment, seek or reset. Metadata naming another
    /// id means the topic was deleted and recreated: the position is not carried over.
    pub topic_id: Option<[u8; 16]>,
    /// A Fetch answer came for the partition under `topic_id` (see
    /// `fetcher::topic_id::id_to_compare`).
    pub topic_id_borne_out: bool,
    /// Data that failed its check (CRC, framing) at this offset, this many fetches in a row:
    /// fetched again before the partition halts (see
    /// `fetcher::integrity::after_corrupt_data`).
    pub corrupt_at: Option<(i64, u32)>,
    /// Where the whole entries of the last Fetch answer with data ended: while `fetch_offset`
    /// is still there (not a seek, a reset, a committed offset, or a record inside a batch
    /// after an error), the next answer's first batch cannot start before it
    /// (`fetcher::integrity::first_entry_in_place`).
    pub answer_end: Option<i64>,
    /// The aborted transactions still open where that answer ended, as (producer id, first
    /// offset): the next answer from `answer_end` must list them again
    /// (`fetcher::integrity::aborted_list_repeats`).
    pub open_aborted: Vec<(i64, i64)>,
    /// The last Fetch answer with data that set `answer_end`: where it was fetched from and
    /// what its entries were, for a walk back to its last batch
    /// (`fetcher::integrity::after_out_of_place`).
    pub last_answer: Option<LastAnswer>,
    /// A walk back under way: the next answer from its offset repeats entries already handed
    /// out (`fetcher::decode::decode_into`).
    pub resync: Option<Resync>,
    /// Where the check of a position from ListOffsets stands (see
    /// `fetcher::integrity::earliest_borne_out` and `fetcher::apply::on_error`); `None`:
    /// nothing to check.
    pub resolution: Option<Resolution>,
    /// Another topic id metadata named, and the metadata generation that named it first: a
    /// recreated topic is believed only when a later metadata names it too
    /// (`fetcher::topic_id::on_topic_id`).
    pub id_change: Option<([u8; 16], u64)>,
}

impl PartitionState {
    fn new(epoch: u64, pending: Option<Offset>) -> PartitionState {
        PartitionState {
            position: None,
            fetch_offset: -1,
            pending,
            epoch,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            in_flight: None,
            backoff_until: None,
            fetch_failed: false,
            halted: false,
            last_fetched_epoch: -1,
            topic_id: None,
            topic_id_borne_out: false,
            corrupt_at: None,
            resolution: None,
            answer_end: None,
            open_aborted: Vec::new(),
            last_answer: None,
            resync: None,
            id_change: None,
        }
    }
}

/// The last Fetch answer with data, as a walk back needs it (set with
/// `PartitionState::answer_end`, where its whole entries ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastAnswer {
    /// The offset it was fetched from.
    pub from: i64,
    /// How it was read.
    pub trace: AnswerTrace,
}

/// A walk back to the batch an answer handed out last (see
/// `fetcher::integrity::after_out_of_place`): that answer is fetched again from where it was,
/// its first `entries` entries are skipped as already handed out, and the last of them must be
/// the batch with `crc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resync {
    /// The fetch epoch and fetch offset it belongs to: a seek or reset ends it.
    pub epoch: u64,
    pub at: i64,
    /// Entries (from `at`) still to skip, and the CRC of the last.
    pub skip: Skip,
}

/// Entries already handed out, to skip; the last must be the batch with this CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Skip {
    pub entries: u32,
    pub crc: u32,
}

/// How an answer's entries were read, for a walk back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AnswerTrace {
    /// Entries read whole, those before the fetch offset included (fetched again from the same
    /// offset, an answer starts with the same entries).
    pub entries: u32,
    /// The CRC of the last of them, when it is a v2 batch.
    pub last_crc: Option<u32>,
    /// What is left of a walk back this answer did not finish.
    pub skip_left: Option<Skip>,
    /// The walk's last skipped entry was not the batch handed out (the log changed under it):
    /// that entry was handed out after all.
    pub skip_mismatch: bool,
}

/// A position taken from a ListOffsets answer (auto.offset.reset, a seek to the beginning,
/// the end or a time), until a Fetch answer bears it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// ListOffsets gave `offset` for `at`; no Fetch answer has borne it out yet.
    Unconfirmed { at: Offset, offset: i64 },
    /// A Fetch answer contradicted the first answer (a log start below it, or
    /// OFFSET_OUT_OF_RANGE): `at` is being asked again, and that answer stands.
    AskedAgain,
}

/// Data for one partition from one fetch.
pub(crate) struct Chunk {
    pub tp: TopicPartition,
    pub epoch: u64,
    pub records: VecDeque<ConsumerRecord>,
    /// Position after this chunk (past markers and skipped batches too).
    pub next_offset: i64,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    /// Decoding stopped at `next_offset` on this (the records before it are in `records`).
    pub error: Option<Error>,
    /// Leader epoch of the last v2 batch read up to `next_offset`, if any.
    pub last_epoch: Option<i32>,
    /// The listed aborted transactions still open at `next_offset` (read_committed).
    pub open_aborted: Vec<(i64, i64)>,
    /// How the answer's entries were read (for a walk back).
    pub trace: AnswerTrace,
}

pub(crate) enum Fetched {
    Chunk(Chunk),
    Error(Error),
}

pub(crate) struct Shared {
    pub config: ConsumerConfig,
    pub cluster: Arc<Cluster>,
    pub parts: Mutex<BTreeMap<TopicPartition, PartitionState>>,
    pub wake: Notify,
    /// The last fetch epoch handed out.
    epochs: AtomicU64,
    /// Counters read by [`Consumer::metrics`].
    pub counters: metrics::Counters,
    /// The fetch session with each leader (KIP-227), kept by the fetcher task.
    pub sessions: fetcher::Sessions,
}

impl Shared {
    /// A fetch epoch never used before by this consumer. Epochs restarting at 0 on every
    /// assignment let data fetched for an earlier assignment pass the check after `assign`,
    /// `assign`, `seek` brought the partition back to the same number.
    pub fn next_epoch(&self) -> u64 {
        self.epochs.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<TopicPartition, PartitionState>> {
        self.parts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A Kafka consumer with manual partition assignment.
pub struct Consumer {
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Fetched>,
    /// Chunks received and not yet fully handed out, in arrival order.
    buffered: VecDeque<Chunk>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.task.abort();
        // Fetch sessions (KIP-227) are closed on the way out, if a runtime is still there to
        // send the requests; otherwise they idle out of the broker's cache.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(fetcher::close_sessions(self.shared.clone()));
        }
    }
}

impl Consumer {
    /// Connects and starts the fetcher.
    ///
    /// # Errors
    /// [`Error::NoBrokerReachable`] when no bootstrap broker answers.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{Consumer, ConsumerConfig, Offset, TopicPartition};
    /// let mut c = Consumer::new(ConsumerConfig::from_properties([("bootstrap.servers", "127.0.0.1:9092")])?).await?;
    /// c.assign([TopicPartition::new("rides", 0)]).await?;
    /// c.seek(&TopicPartition::new("rides", 0), Offset::Beginning)?;
    /// for r in c.poll(std::time::Duration::from_secs(1)).await? {
    ///     println!("{}@{}", r.partition, r.offset);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn new(config: ConsumerConfig) -> Result<Consumer> {
        let cluster = Cluster::connect(config.client.clone()).await?;
        Ok(Self::with_cluster(config, cluster))
    }

    /// A consumer on an existing broker pool.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{Admin, Cluster, Consumer, ConsumerConfig};
    /// let config = ConsumerConfig::from_properties([("bootstrap.servers", "127.0.0.1:9092")])?;
    /// // One set of connections for the consumer and an admin client.
    /// let cluster = Cluster::connect(config.client.clone()).await?;
    /// let admin = Admin::with_cluster(cluster.clone());
    /// let consumer = Consumer::with_cluster(config, cluster);
    /// # Ok(()) }
    /// ```
    pub fn with_cluster(config: ConsumerConfig, cluster: Arc<Cluster>) -> Consumer {
        let shared = Arc::new(Shared {
            config,
            cluster,
            parts: Mutex::new(BTreeMap::new()),
            wake: Notify::new(),
            epochs: AtomicU64::new(0),
            counters: metrics::Counters::default(),
            sessions: Default::default(),
        });
        let (tx, rx) = mpsc::channel(64);
        let task = tokio::spawn(fetcher::run(shared.clone(), tx));
        Consumer {
            shared,
            rx,
            buffered: VecDeque::new(),
            task,
        }
    }

    /// Replaces the assignment. New partitions start at auto.offset.reset unless sought.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`] / [`Error::UnknownPartition`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::Consumer) -> onceflow::client::Result<()> {
    /// use onceflow::client::TopicPartition;
    /// consumer.assign([TopicPartition::new("rides", 0), TopicPartition::new("rides", 1)]).await?;
    /// assert_eq!(consumer.assignment().len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn assign(&mut self, tps: impl IntoIterator<Item = TopicPartition>) -> Result<()> {
        let tps: Vec<TopicPartition> = tps.into_iter().collect();
        for tp in &tps {
            let lookup = self.shared.config.topic_lookup();
            let t = self.shared.cluster.topic_with(&tp.topic, lookup).await?;
            if tp.partition < 0 || tp.partition as usize >= t.partitions.len() {
                return Err(Error::UnknownPartition {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    count: t.partitions.len(),
                });
            }
        }
        let reset = match self.shared.config.auto_offset_reset {
            AutoOffsetReset::Earliest => Some(Offset::Beginning),
            AutoOffsetReset::Latest => Some(Offset::End),
            AutoOffsetReset::None => None,
        };
        {
            let mut parts = self.shared.lock();
            parts.retain(|tp, _| tps.contains(tp));
            for tp in &tps {
                parts
                    .entry(tp.clone())
                    .or_insert_with(|| PartitionState::new(self.shared.next_epoch(), reset));
            }
        }
        self.buffered.retain(|c| tps.contains(&c.tp));
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Assigns every partition of the given topics.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::Consumer) -> onceflow::client::Result<()> {
    /// let assigned = consumer.assign_topics(&["rides", "payments"]).await?;
    /// println!("reading {} partitions", assigned.len());
    /// # Ok(()) }
    /// ```
    pub async fn assign_topics(&mut self, topics: &[&str]) -> Result<Vec<TopicPartition>> {
        let mut tps = Vec::new();
        for t in topics {
            tps.extend(self.partitions_for(t).await?);
        }
        self.assign(tps.clone()).await?;
        Ok(tps)
    }

    /// Every partition of a topic, looked up as this consumer looks topics up: the broker is
    /// asked to create a missing topic only under allow.auto.create.topics (its
    /// auto.create.topics.enable decides).
    ///
    /// # Errors
    /// [`Error::UnknownTopic`] (and the other errors of
    /// `Cluster::topic_with`).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::Consumer) -> onceflow::client::Result<()> {
    /// // This instance reads the even partitions, another one the odd ones.
    /// let all = consumer.partitions_for("rides").await?;
    /// consumer.assign(all.into_iter().filter(|tp| tp.partition % 2 == 0)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn partitions_for(&self, topic: &str) -> Result<Vec<TopicPartition>> {
        let lookup = self.shared.config.topic_lookup();
        let meta = self.shared.cluster.topic_with(topic, lookup).await?;
        Ok((0..meta.partitions.len() as i32)
            .map(|p| TopicPartition::new(topic, p))
            .collect())
    }

    /// The current assignment.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(consumer: &onceflow::client::Consumer) {
    /// for tp in consumer.assignment() {
    ///     println!("{tp} at {:?}", consumer.position(&tp));
    /// }
    /// # }
    /// ```
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.shared.lock().keys().cloned().collect()
    }

    /// Moves a partition's position. Takes effect for the next records returned.
    ///
    /// # Errors
    /// [`Error::Usage`] when the partition is not assigned.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::Consumer) -> onceflow::client::Result<()> {
    /// use onceflow::client::{Offset, TopicPartition};
    /// let tp = TopicPartition::new("rides", 0);
    /// consumer.assign([tp.clone()]).await?;
    /// // Continue after the last offset this application processed (kept in its own store).
    /// let last_processed: i64 = 41;
    /// consumer.seek(&tp, Offset::At(last_processed + 1))?;
    /// # Ok(()) }
    /// ```
    pub fn seek(&mut self, tp: &TopicPartition, offset: Offset) -> Result<()> {
        {
            let mut parts = self.shared.lock();
            let st = parts
                .get_mut(tp)
                .ok_or_else(|| Error::Usage(format!("cannot seek {tp}: not assigned")))?;
            st.epoch = self.shared.next_epoch();
            st.halted = false;
            st.corrupt_at = None;
            st.resolution = None;
            st.id_change = None;
            st.resync = None;
            st.last_fetched_epoch = -1;
            // The application chose a position in the topic as it is now.
            st.topic_id = None;
            match offset {
                Offset::At(o) if o >= 0 => {
                    st.position = Some(o);
                    st.fetch_offset = o;
                    st.pending = None;
                }
                other => {
                    st.position = None;
                    st.pending = Some(other);
                }
            }
        }
        self.buffered.retain(|c| &c.tp != tp);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// The consumer's counters since it was created (Fetch requests full and incremental, their
    /// bytes, session restarts).
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(consumer: &onceflow::client::Consumer) {
    /// let m = consumer.metrics();
    /// println!(
    ///     "{} full and {} incremental fetches, {} session restarts",
    ///     m.fetch_requests_full, m.fetch_requests_incremental, m.fetch_session_restarts
    /// );
    /// # }
    /// ```
    pub fn metrics(&self) -> ConsumerMetrics {
        self.shared.counters.snapshot()
    }

    /// The next offset to be returned for a partition, once known.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::Consumer) -> onceflow::client::Result<()> {
    /// use onceflow::client::TopicPartition;
    /// let tp = TopicPartition::new("rides", 0);
    /// let records = consumer.poll(std::time::Duration::from_secs(1)).await?;
    /// // Past the last record returned (or further, past transaction markers).
    /// println!("next: {:?}", consumer.position(&tp));
    /// # Ok(()) }
    /// ```
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.shared.lock().get(tp).and_then(|s| s.position)
    }

    /// The end of a partition as the last fetch reported it: the last stable offset (LSO)
    /// under read_committed, the high watermark otherwise. `None` until the partition has been
    /// fetched once, or when it is not assigned. The lag of a position is this minus it.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(consumer: &onceflow::client::Consumer) {
    /// for tp in consumer.assignment() {
    ///     if let (Some(position), Some(end)) = (consumer.position(&tp), consumer.end_offset(&tp)) {
    ///         println!("{tp}: lag {}", end - position);
    ///     }
    /// }
    /// # }
    /// ```
    pub fn end_offset(&self, tp: &TopicPartition) -> Option<i64> {
        let committed = self.shared.config.isolation_level == IsolationLevel::ReadCommitted;
        let parts = self.shared.lock();
        let st = parts.get(tp)?;
        let end = match committed {
            true => st.last_stable_offset,
            false => st.high_watermark,
        };
        (end >= 0).then_some(end)
    }

    /// Whether every assigned partition's position has reached the end the broker last reported
    /// (the high watermark, or the LSO under read_committed). False until each partition has
    /// been fetched at least once.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::Consumer) -> onceflow::client::Result<()> {
    /// // Read what the topic holds now, then stop.
    /// consumer.assign_topics(&["rides"]).await?;
    /// let mut count = 0;
    /// while !consumer.at_end() {
    ///     count += consumer.poll(std::time::Duration::from_secs(1)).await?.len();
    /// }
    /// println!("{count} records");
    /// # Ok(()) }
    /// ```
    pub fn at_end(&self) -> bool {
        let committed = self.shared.config.isolation_level == IsolationLevel::ReadCommitted;
        self.buffered.is_empty()
            && self.shared.lock().values().all(|s| {
                let end = if committed {
                    s.last_stable_offset
                } else {
                    s.high_watermark
                };
                matches!(s.position, Some(p) if end >= 0 && p >= end)
            })
    }

    /// Whether `tp`'s position has reached the end the broker last reported (the high
    /// watermark, or the LSO under read_committed) with none of its records buffered: the
    /// partition is idle for now. False until it has been fetched at least once, and while its
    /// fetches fail or it has no leader (the end it last reported may be long past: records
    /// keep coming to its next leader). A stream processor uses it to keep an idle partition
    /// from holding its watermark back; a partition whose leader died is not idle (the 3-node
    /// chaos test: treated as idle, its records of the open hour came late, 76 of 400 hourly
    /// counts short).
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(consumer: &onceflow::client::Consumer) {
    /// // Partitions that hold the event-time watermark back: the ones with records to come.
    /// let active: Vec<_> = consumer.assignment().into_iter().filter(|tp| !consumer.caught_up(tp)).collect();
    /// # }
    /// ```
    pub fn caught_up(&self, tp: &TopicPartition) -> bool {
        let committed = self.shared.config.isolation_level == IsolationLevel::ReadCommitted;
        if self.buffered.iter().any(|c| &c.tp == tp) {
            return false;
        }
        self.shared.lock().get(tp).is_some_and(|s| {
            let end = if committed {
                s.last_stable_offset
            } else {
                s.high_watermark
            };
            !s.fetch_failed && matches!(s.position, Some(p) if end >= 0 && p >= end)
        })
    }

    /// Waits up to `timeout` for records; returns at most max.poll.records of them (an empty
    /// vector when none arrived in time).
    ///
    /// # Errors
    /// Fatal fetch errors, e.g. OFFSET_OUT_OF_RANGE with auto.offset.reset=none, and
    /// [`Error::CorruptData`] once the records before corrupt data have been returned (raised
    /// again by every poll until the application seeks past it, as the Java client does) —
    /// only after the data failed its check three fetches in a row: data damaged on its way
    /// is fetched again silently.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::Consumer) -> onceflow::client::Result<()> {
    /// use onceflow::client::{Error, Offset, TopicPartition};
    /// loop {
    ///     match consumer.poll(std::time::Duration::from_secs(1)).await {
    ///         Ok(records) => records.iter().for_each(|r| println!("{}", r.offset)),
    ///         // Skip the record that cannot be read (the ones before it were returned).
    ///         Err(Error::CorruptData { topic, partition, offset, .. }) => {
    ///             consumer.seek(&TopicPartition::new(topic, partition), Offset::At(offset + 1))?
    ///         }
    ///         Err(e) => return Err(e),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let max = self.shared.config.max_poll_records;
        loop {
            let out = self.take(max)?;
            if !out.is_empty() {
                return Ok(out);
            }
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Err(_) => return Ok(out),
                Ok(None) => return Err(Error::Closed("consumer")),
                Ok(Some(f)) => {
                    self.apply(f)?;
                    // Take whatever else already arrived without waiting.
                    while let Ok(f) = self.rx.try_recv() {
                        self.apply(f)?;
                    }
                    if self.at_end() {
                        return Ok(Vec::new());
                    }
                }
            }
        }
    }

    /// The next record, waiting as long as it takes.
    ///
    /// # Errors
    /// As [`Self::poll`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(mut consumer: onceflow::client::Consumer) -> onceflow::client::Result<()> {
    /// loop {
    ///     let r = consumer.recv().await?;
    ///     println!("{}-{}@{}", r.topic, r.partition, r.offset);
    /// }
    /// # }
    /// ```
    pub async fn recv(&mut self) -> Result<ConsumerRecord> {
        loop {
            if let Some(r) = self.take(1)?.pop() {
                return Ok(r);
            }
            match self.rx.recv().await {
                None => return Err(Error::Closed("consumer")),
                Some(f) => self.apply(f)?,
            }
        }
    }

    /// The consumer as an async stream of records: [`Self::recv`] in a loop, for `StreamExt`
    /// combinators (`take`, `filter`, `try_collect`, ...). The stream never ends by itself;
    /// the consumer is dropped (its fetcher stopped) with the stream.
    ///
    /// # Errors
    /// Each item is what [`Self::recv`] returns: an error item for a fetch error, which the
    /// next item may repeat (e.g. [`Error::CorruptData`] until the application seeks — which it
    /// cannot do on a consumed consumer, so such a stream is done).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use futures::{StreamExt, TryStreamExt};
    /// use onceflow::client::{Consumer, ConsumerConfig, ConsumerRecord};
    /// let mut consumer = Consumer::new(ConsumerConfig::from_properties([
    ///     ("isolation.level", "read_committed"),
    ///     ("auto.offset.reset", "earliest"),
    /// ])?)
    /// .await?;
    /// consumer.assign_topics(&["rides"]).await?;
    /// let first: Vec<ConsumerRecord> = consumer.into_stream().take(10).try_collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<ConsumerRecord>> {
        futures::stream::unfold(self, |mut c| async move {
            let r = c.recv().await;
            Some((r, c))
        })
    }

    fn take(&mut self, max: usize) -> Result<Vec<ConsumerRecord>> {
        let mut parts = self.shared.lock();
        take_records(&mut self.buffered, &mut parts, max)
    }

    fn apply(&mut self, f: Fetched) -> Result<()> {
        let chunk = match f {
            Fetched::Error(e) => return Err(e),
            Fetched::Chunk(c) => c,
        };
        let mut parts = self.shared.lock();
        accept_chunk(&mut self.buffered, &mut parts, chunk);
        Ok(())
    }

    /// Earliest and latest offsets of partitions (latest is the LSO under read_committed).
    ///
    /// # Errors
    /// Broker errors after retries within default.api.timeout.ms.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(consumer: onceflow::client::Consumer) -> onceflow::client::Result<()> {
    /// use onceflow::client::TopicPartition;
    /// let tp = TopicPartition::new("rides", 0);
    /// let marks = consumer.watermarks(&[tp.clone()]).await?;
    /// let (start, end) = marks[&tp];
    /// println!("offsets {start}..{end} are in the log");
    /// # Ok(()) }
    /// ```
    pub async fn watermarks(
        &self,
        tps: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, (i64, i64)>> {
        let start = list_offsets(&self.shared, tps, Offset::Beginning).await?;
        let end = list_offsets(&self.shared, tps, Offset::End).await?;
        Ok(start
            .into_iter()
            .map(|(tp, s)| {
                let e = end.get(&tp).copied().unwrap_or(s);
                (tp, (s, e))
            })
            .collect())
    }
}

/// Hands out up to `max` buffered records and moves positions past them. A chunk fully handed
/// out moves its partition to the chunk's end, which may lie past its last record (transaction
/// markers, aborted batches). A chunk whose partition was unassigned, sought or reset since it
/// arrived is dropped unread. A chunk that ends in an error raises it once its records are out:
/// in the same call when nothing was taken yet, else on the next; the chunk stays at the front,
/// so the error is raised again until a seek or reassignment removes it.
fn take_records(
    buffered: &mut VecDeque<Chunk>,
    parts: &mut BTreeMap<TopicPartition, PartitionState>,
    max: usize,
) -> Result<Vec<ConsumerRecord>> {
    let mut out = Vec::new();
    while out.len() < max {
        let Some(chunk) = buffered.front_mut() else {
            break;
        };
        let Some(st) = parts
            .get_mut(&chunk.tp)
            .filter(|st| st.epoch == chunk.epoch)
        else {
            buffered.pop_front();
            continue;
        };
        let n = chunk.records.len().min(max - out.len());
        out.extend(chunk.records.drain(..n));
        if !chunk.records.is_empty() {
            if let Some(last) = out.last() {
                st.position = Some(last.offset + 1);
            }
            break;
        }
        st.position = Some(chunk.next_offset);
        if let Some(e) = &chunk.error {
            if out.is_empty() {
                return Err(e.clone());
            }
            break;
        }
        buffered.pop_front();
    }
    Ok(out)
}

/// Queues a chunk from the fetcher, unless it was fetched for an epoch the partition has left
/// (unassigned, reassigned, sought or reset meanwhile).
fn accept_chunk(
    buffered: &mut VecDeque<Chunk>,
    parts: &mut BTreeMap<TopicPartition, PartitionState>,
    chunk: Chunk,
) {
    let Some(st) = parts
        .get_mut(&chunk.tp)
        .filter(|st| st.epoch == chunk.epoch)
    else {
        return;
    };
    st.high_watermark = chunk.high_watermark;
    st.last_stable_offset = chunk.last_stable_offset;
    st.fetch_failed = false;
    let behind = buffered.iter().any(|c| c.tp == chunk.tp);
    if chunk.records.is_empty() && chunk.error.is_none() && !behind {
        // Nothing to hand out, nothing queued before it: move the position now.
        if st.position.is_some_and(|p| chunk.next_offset > p) {
            st.position = Some(chunk.next_offset);
        }
        return;
    }
    buffered.push_back(chunk);
}

/// Resolves `Beginning`/`End`/`Timestamp` to offsets at this consumer's isolation level (the
/// ListOffsets calls and their retries are in `client::list_offsets`).
pub(crate) async fn list_offsets(
    shared: &Shared,
    tps: &[TopicPartition],
    at: Offset,
) -> Result<HashMap<TopicPartition, i64>> {
    super::list_offsets::list_offsets(&shared.cluster, shared.config.isolation_level, tps, at).await
}
