//! The producer: `send` a record, get a future for its partition and offset.
//!
//! - [`partitioner`]: the Java client's default partitioner (murmur2, sticky for keyless).
//! - `accumulator`: per-partition open and ready batches, bounded by buffer.memory.
//! - `identity`: the producer id and epoch every batch and transaction request carries.
//! - `sender`: one task that closes batches on linger/size, groups ready batches by leader and
//!   sends one Produce request per broker, keeping at most max.in.flight batches per partition.
//! - `transaction`: the transaction methods (init, begin, send offsets, prepare, commit,
//!   abort); the phase enum they move and the coordinator requests they send are in
//!   [`crate::client::transactions`].
//!
//! See docs/design/batch.md for the path a record takes.

mod accumulator;
mod delivery;
mod flush;
mod identity;
mod metrics;
pub mod partitioner;
mod producer_id;
mod sender;
mod transaction;
mod verdict;

pub(crate) use delivery::{run_or_defer, Callback};
pub use delivery::{DeliveryFuture, RecordMetadata};
pub use metrics::ProducerMetrics;
// GroupMetadata belongs to the group module; re-exported here, where it used to be.
pub use crate::client::group::GroupMetadata;
pub(crate) use identity::{check_assigned, Identity};

use super::clock::now_ms;
use super::cluster::Cluster;
use super::config::ProducerConfig;
use super::error::{Error, Result};
use super::metadata::TopicPartition;
use crate::protocol::records::{BatchBuilder, Header};
use accumulator::{Accumulator, Delivery, NewRecord, Reply};
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{oneshot, Notify, Semaphore};

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    /// Topic.
    pub topic: String,
    /// Partition; `None` lets the partitioner choose.
    pub partition: Option<i32>,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers, in order; keys may repeat.
    pub headers: Vec<Header>,
    /// Create time in ms since the epoch; `None` means now.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record with a value.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ProducerRecord;
    /// let r = ProducerRecord::new("rides", "hello").with_key("k1").with_header("h", Some("v"));
    /// assert_eq!(r.headers.len(), 1);
    /// ```
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            value: Some(value.into()),
            ..Default::default()
        }
    }

    /// Sets the key. Records with the same key go to the same partition (unless the record
    /// names one, or partitioner.ignore.keys is set).
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ProducerRecord;
    /// let r = ProducerRecord::new("rides", "picked up").with_key("driver-42");
    /// assert_eq!(r.key.as_deref(), Some(&b"driver-42"[..]));
    /// ```
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the partition, bypassing the partitioner. `send` fails with
    /// [`Error::UnknownPartition`] if the topic does not have it.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ProducerRecord;
    /// let r = ProducerRecord::new("rides", "hello").with_partition(3);
    /// assert_eq!(r.partition, Some(3));
    /// ```
    pub fn with_partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Adds a header. Headers keep their order; a key may repeat, and a value may be absent.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ProducerRecord;
    /// let r = ProducerRecord::new("rides", "hello")
    ///     .with_header("trace-id", Some("4bf92f3577b34da6"))
    ///     .with_header("replayed", None::<&str>);
    /// assert_eq!(r.headers[0].key, "trace-id");
    /// assert!(r.headers[1].value.is_none());
    /// ```
    pub fn with_header(mut self, key: impl Into<Bytes>, value: Option<impl Into<Bytes>>) -> Self {
        self.headers.push(Header {
            key: key.into(),
            value: value.map(Into::into),
        });
        self
    }

    /// Sets the timestamp (ms since the epoch); without it the record gets the time it is
    /// sent. A topic with message.timestamp.type=LogAppendTime replaces it with the broker's.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ProducerRecord;
    /// let r = ProducerRecord::new("rides", "hello").with_timestamp(1_700_000_000_000);
    /// assert_eq!(r.timestamp, Some(1_700_000_000_000));
    /// ```
    pub fn with_timestamp(mut self, ts: i64) -> Self {
        self.timestamp = Some(ts);
        self
    }
}

pub(crate) struct Inner {
    pub config: ProducerConfig,
    pub cluster: Arc<Cluster>,
    pub acc: Mutex<Accumulator>,
    /// Wakes the sender: a batch is ready, a response came back, flush or close was asked.
    pub wake: Notify,
    /// Wakes an ending transaction waiting for an AddPartitionsToTxn to finish.
    pub adds_done: Notify,
    pub memory: Semaphore,
    /// Records appended but not yet resolved.
    /// What `flush` waits for: the records sent before it was called.
    pub flushes: Arc<flush::FlushTracker>,
    pub flushing: AtomicUsize,
    pub closed: AtomicBool,
    pub counters: metrics::Counters,
}

impl Inner {
    pub fn lock(&self) -> AccGuard<'_> {
        Self::lock_of(&self.acc)
    }

    fn lock_of(acc: &Mutex<Accumulator>) -> AccGuard<'_> {
        let guard = acc.lock().unwrap_or_else(|p| p.into_inner());
        delivery::lock_taken();
        AccGuard(Some(guard))
    }

    fn check_can_send(&self) -> Result<()> {
        self.lock().check_can_send()
    }

    /// Gives buffer.memory back (records' completion is tracked by their flush tickets).
    pub fn release(&self, memory: u32) {
        if memory > 0 {
            self.memory.add_permits(memory as usize);
        }
    }
}

/// How much free buffer.memory a `send` blocked on a full buffer waits for before it wakes: an
/// eighth of the buffer (never less than its record needs, never more than the buffer).
///
/// Why not just its record: a saturated producer's buffer frees a batch at a time, so waiting for
/// one record's room woke the sending thread once per freed batch to append one batch's worth
/// and block again (a context switch each way; at 1 KiB records these were a fifth of the
/// producer's switches, docs/benchmarks.md, "onceflow against franz-go, librdkafka and the Java client"). Waiting for an eighth lets it append many batches per
/// wake, while the buffer stays at least seven eighths full, so the sender never starves.
/// The extra is given back at once: only the record's cost stays taken.
fn memory_to_wait_for(permits: u32, buffer_memory: usize) -> u32 {
    // (A saturated producer refills an eighth of a 32 MiB buffer in about 10 ms at 400 MB/s;
    // see EIGHTH_PATIENCE for a buffer that does not refill.)
    let buffer = u32::try_from(buffer_memory.min(Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
    (buffer / 8).max(permits).min(buffer.max(permits))
}

/// How long a blocked send waits for an eighth of buffer.memory before it settles for its own
/// record's room (then up to max.block.ms in all): many refills of a saturated producer's eighth,
/// and short enough that a buffer mostly held by batches that cannot be sent yet still carries
/// sends through its free rest.
const EIGHTH_PATIENCE: std::time::Duration = std::time::Duration::from_millis(50);

/// The accumulator, locked. Releasing it runs the callbacks deferred while it was held.
pub(crate) struct AccGuard<'a>(Option<std::sync::MutexGuard<'a, Accumulator>>);

impl std::ops::Deref for AccGuard<'_> {
    type Target = Accumulator;
    fn deref(&self) -> &Accumulator {
        match &self.0 {
            Some(g) => g,
            None => unreachable!("taken only by drop"),
        }
    }
}

impl std::ops::DerefMut for AccGuard<'_> {
    fn deref_mut(&mut self) -> &mut Accumulator {
        match &mut self.0 {
            Some(g) => g,
            None => unreachable!("taken only by drop"),
        }
    }
}

impl Drop for AccGuard<'_> {
    fn drop(&mut self) {
        drop(self.0.take());
        delivery::lock_released();
    }
}

/// What one try of appending under the lock came to.
enum Appending {
    Done(Result<()>),
    /// The topic's partition count is not cached for the metadata version: look it up.
    CountUnknown(ProducerRecord, Reply),
    /// The record names a partition the cached metadata does not have (the permits are still
    /// held): metadata is refreshed and the append tried again until max.block.ms, as the Java
    /// producer waits for it. One damaged Metadata answer (a partition dropped from the list)
    /// made `send` fail at once.
    PartitionUnknown(ProducerRecord, Reply, Error),
}

/// An asynchronous Kafka producer.
///
/// Cloning is cheap; clones share one set of buffers and one sender task.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
    _guard: Arc<CloseOnDrop>,
}

struct CloseOnDrop(Arc<Inner>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        // The sender task sends what is buffered, then exits.
        self.0.closed.store(true, Ordering::Release);
        self.0.wake.notify_one();
    }
}

impl Producer {
    /// Connects to the cluster and starts the sender task.
    ///
    /// # Errors
    /// [`Error::Config`] for contradicting settings, [`Error::NoBrokerReachable`] when no
    /// bootstrap broker answers.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{Producer, ProducerConfig, ProducerRecord};
    /// let producer = Producer::new(ProducerConfig::from_properties([("bootstrap.servers", "127.0.0.1:9092")])?).await?;
    /// let meta = producer.send(ProducerRecord::new("rides", "hello")).await?.await?;
    /// println!("written at {}-{}@{}", meta.topic, meta.partition, meta.offset);
    /// # Ok(()) }
    /// ```
    pub async fn new(config: ProducerConfig) -> Result<Producer> {
        config.validate()?;
        let cluster = Cluster::connect(config.client.clone()).await?;
        Self::with_cluster(config, cluster).await
    }

    /// Starts a producer on an existing broker pool. With idempotence on (the default) this
    /// first obtains a producer id.
    ///
    /// # Errors
    /// [`Error::Config`] for contradicting settings; InitProducerId failures.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{Cluster, Consumer, ConsumerConfig, Producer, ProducerConfig};
    /// let config = ProducerConfig::from_properties([("bootstrap.servers", "127.0.0.1:9092")])?;
    /// // One set of connections and one metadata cache for a producer and a consumer.
    /// let cluster = Cluster::connect(config.client.clone()).await?;
    /// let producer = Producer::with_cluster(config, cluster.clone()).await?;
    /// let consumer = Consumer::with_cluster(ConsumerConfig::default(), cluster);
    /// # Ok(()) }
    /// ```
    pub async fn with_cluster(config: ProducerConfig, cluster: Arc<Cluster>) -> Result<Producer> {
        config.validate()?;
        let identity = if config.transactional_id.is_some() {
            None // init_transactions() obtains it from the transaction coordinator
        } else if config.enable_idempotence {
            Some(producer_id::init_producer_id(&cluster, None, config.max_block).await?)
        } else {
            None
        };
        let memory = config.buffer_memory.min(Semaphore::MAX_PERMITS);
        let transactional_id = config.transactional_id.clone();
        let flushes = flush::FlushTracker::new();
        let inner = Arc::new(Inner {
            config,
            cluster,
            acc: Mutex::new(Accumulator {
                identity,
                txn: transactional_id.map(accumulator::TxnSend::new),
                flushes: flushes.clone(),
                ..Default::default()
            }),
            wake: Notify::new(),
            adds_done: Notify::new(),
            memory: Semaphore::new(memory),
            flushes,
            flushing: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            counters: metrics::Counters::default(),
        });
        tokio::spawn(sender::run(inner.clone()));
        Ok(Producer {
            _guard: Arc::new(CloseOnDrop(inner.clone())),
            inner,
        })
    }

    /// The producer id and epoch in use (idempotence on), for logs and tests.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(producer: &onceflow::client::Producer) {
    /// if let Some((id, epoch)) = producer.producer_id_and_epoch() {
    ///     println!("writing as producer id {id}, epoch {epoch}");
    /// }
    /// # }
    /// ```
    pub fn producer_id_and_epoch(&self) -> Option<(i64, i16)> {
        self.inner.lock().identity.map(|i| (i.producer_id, i.epoch))
    }

    /// The producer's counters since it was created (batches acknowledged, retried, failed;
    /// epoch bumps).
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(p: &onceflow::client::Producer) {
    /// let m = p.metrics();
    /// println!("{} batches retried", m.batches_retried);
    /// # }
    /// ```
    pub fn metrics(&self) -> ProducerMetrics {
        self.inner.counters.snapshot()
    }

    /// The broker pool this producer uses: share it with a consumer or [`super::Admin`]
    /// instead of connecting again.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(producer: &onceflow::client::Producer) {
    /// use onceflow::client::Admin;
    /// let admin = Admin::with_cluster(producer.cluster().clone());
    /// # }
    /// ```
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.inner.cluster
    }

    /// Queues a record. Waits only while buffer.memory is full (at most max.block.ms).
    /// The returned future resolves when the broker acknowledged the record.
    ///
    /// Takes `&self`: share one producer between tasks (`Arc<Producer>`); records of one
    /// partition keep the order their `send` calls returned in.
    ///
    /// Cancellation: dropping the future `send` returns *before* it resolves (while it waits
    /// for buffer.memory) leaves the record unsent. Once `send` has returned, the record is
    /// queued: dropping the [`DeliveryFuture`] does not take it back, it is written (or fails)
    /// like any other and only its outcome is lost. `flush` and `close` still wait for it.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`] (a partition the topic still does
    /// not have after metadata refreshes for max.block.ms), [`Error::RecordTooLarge`],
    /// [`Error::Timeout`] when buffer space does not free up within max.block.ms,
    /// [`Error::Closed`]; with transactions [`Error::Usage`] outside a transaction, and the
    /// transaction's (or the producer's) error once it has failed.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(producer: onceflow::client::Producer) -> onceflow::client::Result<()> {
    /// use onceflow::client::ProducerRecord;
    /// let record = ProducerRecord::new("rides", r#"{"km": 12}"#).with_key("driver-42");
    /// // The first `await` queues the record, the second waits for the broker's acknowledgement.
    /// let delivery = producer.send(record).await?;
    /// let meta = delivery.await?;
    /// assert_eq!(meta.topic, "rides");
    /// # Ok(()) }
    /// ```
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (tx, rx) = oneshot::channel();
        self.append(record, Reply::future(tx)).await?;
        Ok(DeliveryFuture::new(rx))
    }

    /// Queues a record like [`Self::send`], and calls `callback` with its outcome instead of
    /// returning a future: for throughput, when the application does not wait for records one
    /// by one. It saves the future's channel, and the callback runs where the acknowledgement
    /// is handled, so no task is woken per record.
    ///
    /// The callback is called exactly once if this returns `Ok`, and never if it returns an
    /// error. It runs on the producer's sender task (or, for a record failed by `abort`, on
    /// the caller's): keep it short and never block in it (no `block_on`, no blocking I/O);
    /// hand anything slow to a channel. It may call the producer's methods.
    ///
    /// # Errors
    /// As [`Self::send`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(producer: onceflow::client::Producer) -> onceflow::client::Result<()> {
    /// use onceflow::client::ProducerRecord;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// let acked = Arc::new(AtomicU64::new(0));
    /// for i in 0..1000 {
    ///     let acked = acked.clone();
    ///     producer
    ///         .send_with_callback(ProducerRecord::new("rides", format!("ride {i}")), move |r| {
    ///             if r.is_ok() {
    ///                 acked.fetch_add(1, Ordering::Relaxed);
    ///             }
    ///         })
    ///         .await?;
    /// }
    /// producer.flush().await?;
    /// assert_eq!(acked.load(Ordering::Relaxed), 1000);
    /// # Ok(()) }
    /// ```
    pub async fn send_with_callback<F>(&self, record: ProducerRecord, callback: F) -> Result<()>
    where
        F: FnOnce(Result<RecordMetadata>) + Send + 'static,
    {
        self.append(record, Reply::callback(Box::new(callback)))
            .await
    }

    /// `send`'s work. The fast path (memory free at once, the topic's partition count cached)
    /// awaits nothing and takes the accumulator lock once; only a miss pays for the general
    /// path, boxed so that every send's future stays small (moving a large future per record
    /// showed in profiles as memcpy).
    async fn append(&self, record: ProducerRecord, reply: Reply) -> Result<()> {
        match self.append_now(record, reply)? {
            None => Ok(()),
            Some((record, reply)) => Box::pin(self.append_waiting(record, reply)).await,
        }
    }

    /// Checks that a record may be sent, and its buffered size.
    ///
    /// Whether the producer may send now (a transactional producer only inside a transaction:
    /// before init_transactions() the record would wait forever for a partition that is never
    /// added; between commit and begin_transaction() it would be written outside any
    /// transaction; a failed idempotent producer not at all) is checked under the lock the
    /// append takes, and also before the general path waits for metadata or memory.
    fn admit(&self, record: &ProducerRecord) -> Result<u32> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("producer"));
        }
        let size = check_record_size(&inner.config, record)?;
        // buffer.memory counts what a buffered record costs: its bytes in the batch, and its
        // delivery (who to tell), so that the producer's memory stays within buffer.memory and
        // a fixed overhead whatever the record size (docs/benchmarks.md, "Producer memory").
        // (Never more than the whole buffer: a record of exactly buffer.memory must still fit.)
        let cost = size
            .saturating_add(std::mem::size_of::<Delivery>())
            .min(inner.config.buffer_memory.min(Semaphore::MAX_PERMITS));
        Ok(u32::try_from(cost).unwrap_or(u32::MAX))
    }

    /// The fast path: appends without waiting, or hands the record back (having taken
    /// nothing) when it would have to wait for memory or for the topic's metadata.
    fn append_now(
        &self,
        record: ProducerRecord,
        reply: Reply,
    ) -> Result<Option<(ProducerRecord, Reply)>> {
        let inner = &self.inner;
        let permits = self.admit(&record)?;
        if inner
            .memory
            .try_acquire_many(permits)
            .map(|p| p.forget())
            .is_err()
        {
            return Ok(Some((record, reply)));
        }
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let version = inner.cluster.metadata_version();
        match self.append_locked((record, reply), version, timestamp, permits) {
            Appending::Done(r) => r.map(|()| None),
            Appending::CountUnknown(record, reply)
            | Appending::PartitionUnknown(record, reply, _) => {
                inner.release(permits);
                Ok(Some((record, reply)))
            }
        }
    }

    /// The general path: looks the topic up first (so that an unknown topic says so rather
    /// than waiting max.block.ms for memory), waits for memory, then appends.
    async fn append_waiting(&self, record: ProducerRecord, reply: Reply) -> Result<()> {
        let inner = &self.inner;
        let permits = self.admit(&record)?;
        // Fail before waiting, not after (see `admit`).
        inner.check_can_send()?;
        if inner
            .memory
            .try_acquire_many(permits)
            .map(|p| p.forget())
            .is_err()
        {
            self.partition_count(&record.topic).await?;
            self.reserve_memory(permits).await?;
        }
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let deadline = Instant::now() + inner.config.max_block;
        let mut pending = (record, reply);
        loop {
            let version = inner.cluster.metadata_version();
            match self.append_locked(pending, version, timestamp, permits) {
                Appending::Done(r) => return r,
                Appending::PartitionUnknown(record, reply, e) => {
                    if Instant::now() >= deadline {
                        inner.release(permits);
                        return Err(e);
                    }
                    let g = inner.cluster.metadata().generation;
                    let _ = inner.cluster.refresh_if_older(g).await;
                    tokio::time::sleep(inner.config.client.retry_backoff).await;
                    pending = (record, reply);
                }
                Appending::CountUnknown(record, reply) => {
                    // The lock is released across the lookup; the count is kept with the
                    // version read before it, so a change meanwhile makes it miss again.
                    let n = match self.partition_count(&record.topic).await {
                        Ok(n) => n,
                        Err(e) => {
                            inner.release(permits);
                            return Err(e);
                        }
                    };
                    inner.lock().topic_slot(&record.topic).partition_count = Some((version, n));
                    pending = (record, reply);
                }
            }
        }
    }

    /// Appends under one lock of the accumulator, if the topic's partition count is cached for
    /// metadata `version`; otherwise hands the record back. Gives `permits` back on failure.
    fn append_locked(
        &self,
        (record, reply): (ProducerRecord, Reply),
        version: u64,
        timestamp: i64,
        permits: u32,
    ) -> Appending {
        let inner = &self.inner;
        let cfg = &inner.config;
        let mut acc = inner.lock();
        // Again under the lock the append takes: commit or abort may have begun since.
        let chosen = acc.check_can_send().map(|()| {
            // One lookup of the topic gives its partition count and its sticky partition.
            let slot = acc.topics.get_mut(&record.topic)?;
            let count = slot.count_at(version)?;
            Some((choose_partition(slot, cfg, &record, count), count))
        });
        let (partition, count) = match chosen {
            Ok(Some((Ok(p), count))) => (p, count),
            Ok(None) => return Appending::CountUnknown(record, reply),
            Ok(Some((Err(e @ Error::UnknownPartition { .. }), _))) => {
                return Appending::PartitionUnknown(record, reply, e)
            }
            Ok(Some((Err(e), _))) | Err(e) => {
                drop(acc);
                inner.release(permits);
                return Appending::Done(Err(e));
            }
        };
        let sticky =
            record.partition.is_none() && (record.key.is_none() || cfg.partitioner_ignore_keys);
        let ProducerRecord {
            topic,
            key,
            value,
            headers,
            ..
        } = record;
        // The record's topic name becomes the partition's key: no copy per record.
        let tp = TopicPartition::new(topic, partition);
        let appended = acc.append(
            &tp,
            cfg.compression,
            cfg.batch_size,
            NewRecord {
                timestamp,
                key: key.as_deref(),
                value: value.as_deref(),
                headers: &headers,
            },
            Delivery {
                tx: reply,
                timestamp,
            },
            permits,
        );
        // Keyless records move to another partition once their batch closes (KIP-480).
        if appended.batch_closed && sticky {
            acc.topic_slot(&tp.topic).sticky =
                Some(partitioner::next_sticky(Some(partition), count));
        }
        drop(acc);
        if appended.release > 0 {
            inner.release(appended.release);
        }
        if appended.batch_closed || appended.new_batch {
            inner.wake.notify_one();
        }
        Appending::Done(Ok(()))
    }

    /// How many partitions `topic` has, looked up as [`Self::send`] looks it up (the Java
    /// client's `partitionsFor`): the broker may create a missing topic
    /// (`allow.auto.create.topics`), and the lookup waits at most max.block.ms for it.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`] when the topic does not exist (and is not created),
    /// [`Error::Timeout`] naming max.block.ms, or the connection's error.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(producer: &onceflow::client::Producer) -> onceflow::client::Result<()> {
    /// // Fail fast on a missing topic before reading any input.
    /// let partitions = producer.partition_count("rides").await?;
    /// # Ok(()) }
    /// ```
    pub async fn partition_count(&self, topic: &str) -> Result<usize> {
        let inner = &self.inner;
        inner
            .cluster
            .partition_count_with(topic, inner.config.topic_lookup())
            .await
    }

    /// Takes `permits` of buffer.memory, waiting at most max.block.ms for them.
    ///
    /// A send that has to wait first waits (briefly) for an eighth of the buffer to be free
    /// ([`memory_to_wait_for`]), then for its own record's room only: the brief bound keeps a
    /// buffer that is mostly held by batches that cannot go (a leader down, until
    /// delivery.timeout.ms fails them) from stopping sends that the free rest could carry.
    async fn reserve_memory(&self, permits: u32) -> Result<()> {
        let inner = &self.inner;
        if let Ok(permit) = inner.memory.try_acquire_many(permits) {
            permit.forget();
            return Ok(());
        }
        let closed = |_| Error::Closed("producer");
        let deadline = tokio::time::Instant::now() + inner.config.max_block;
        let wait_for = memory_to_wait_for(permits, inner.config.buffer_memory);
        if wait_for > permits {
            let patience = EIGHTH_PATIENCE.min(inner.config.max_block);
            if let Ok(taken) =
                tokio::time::timeout(patience, inner.memory.acquire_many(wait_for)).await
            {
                taken.map_err(closed)?.forget();
                inner.release(wait_for - permits);
                return Ok(());
            }
        }
        tokio::time::timeout_at(deadline, inner.memory.acquire_many(permits))
            .await
            .map_err(|_| Error::Timeout {
                what: "waiting for buffer.memory to free up".into(),
                after: inner.config.max_block,
            })?
            .map_err(closed)?
            .forget();
        Ok(())
    }

    /// Sends everything buffered now, without waiting for linger.ms, and waits until every
    /// record sent before this call has completed (successfully or not).
    ///
    /// # Errors
    /// [`Error::Closed`] only if the sender task is gone.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(producer: onceflow::client::Producer) -> onceflow::client::Result<()> {
    /// use onceflow::client::ProducerRecord;
    /// for ride in ["ride 1", "ride 2", "ride 3"] {
    ///     producer.send(ProducerRecord::new("rides", ride)).await?;
    /// }
    /// // Every record above is now acknowledged or failed (each outcome is in its future).
    /// producer.flush().await?;
    /// # Ok(()) }
    /// ```
    pub async fn flush(&self) -> Result<()> {
        let inner = &self.inner;
        // Only the records sent before this call: other clones may keep sending while we wait
        // (see `flush::FlushTracker`).
        let epoch = inner.flushes.close_epoch();
        // Undone on every exit, cancellation included: while it is raised the sender closes
        // open batches at once instead of waiting for linger.ms.
        struct Flushing<'a>(&'a Inner);
        impl Drop for Flushing<'_> {
            fn drop(&mut self) {
                self.0.flushing.fetch_sub(1, Ordering::AcqRel);
                self.0.wake.notify_one();
            }
        }
        inner.flushing.fetch_add(1, Ordering::AcqRel);
        let _flushing = Flushing(inner);
        inner.wake.notify_one();
        inner.flushes.wait(epoch).await;
        Ok(())
    }

    /// Flushes, then stops the sender task.
    ///
    /// # Errors
    /// As [`Self::flush`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(producer: onceflow::client::Producer) -> onceflow::client::Result<()> {
    /// use onceflow::client::ProducerRecord;
    /// producer.send(ProducerRecord::new("rides", "last ride")).await?;
    /// // Waits for "last ride", then stops the sender: clones of this producer are closed too.
    /// producer.close().await?;
    /// # Ok(()) }
    /// ```
    pub async fn close(self) -> Result<()> {
        self.flush().await?;
        self.stop();
        Ok(())
    }

    /// Closes like [`Self::close`], waiting at most `timeout` for the records sent so far (the
    /// Java producer's `close(Duration)`). What is still queued then fails with
    /// [`Error::Closed`]; a request already on the wire settles on its own (within
    /// request.timeout.ms), its records told as usual.
    ///
    /// # Errors
    /// As [`Self::flush`], or [`Error::Timeout`] when the records did not settle within
    /// `timeout` (the queued ones have been failed).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(producer: onceflow::client::Producer) -> onceflow::client::Result<()> {
    /// // On shutdown: give the records ten seconds, no more.
    /// producer.close_timeout(std::time::Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn close_timeout(self, timeout: std::time::Duration) -> Result<()> {
        let flushed = tokio::time::timeout(timeout, self.flush()).await;
        if flushed.is_err() {
            let err = Error::Closed("the producer (close_timeout)");
            let (mem, records, batches) = self.inner.lock().fail_unsent(&err, false);
            self.inner.release(mem);
            metrics::Counters::add(&self.inner.counters.batches_failed, batches as u64);
            tracing::warn!(records, ?timeout, "producer closed with records unsent");
        }
        self.stop();
        match flushed {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                what: "close_timeout: the records sent before close".into(),
                after: timeout,
            }),
        }
    }

    /// Tells the sender task to stop once nothing is left in flight.
    fn stop(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake.notify_one();
    }
}

/// The record's size as buffered, if the limits allow it.
fn check_record_size(cfg: &ProducerConfig, record: &ProducerRecord) -> Result<usize> {
    let size = BatchBuilder::encoded_record_size(
        0,
        record.key.as_deref(),
        record.value.as_deref(),
        &record.headers,
    ) + crate::protocol::records::BATCH_HEADER_LEN;
    for (limit_name, limit) in [
        ("max.request.size", cfg.max_request_size),
        ("buffer.memory", cfg.buffer_memory),
    ] {
        if size > limit {
            return Err(Error::RecordTooLarge {
                size,
                limit_name,
                limit,
            });
        }
    }
    Ok(size)
}

/// The record's partition: the one it names (which must exist), the key's, or the topic's
/// sticky partition for keyless records.
fn choose_partition(
    slot: &mut accumulator::TopicSlot,
    cfg: &ProducerConfig,
    record: &ProducerRecord,
    count: usize,
) -> Result<i32> {
    if let Some(p) = record.partition {
        if p < 0 || p as usize >= count {
            return Err(Error::UnknownPartition {
                topic: record.topic.clone(),
                partition: p,
                count,
            });
        }
        return Ok(p);
    }
    if let Some(k) = record.key.as_deref() {
        if !cfg.partitioner_ignore_keys {
            return Ok(partitioner::partition_for_key(k, count));
        }
    }
    Ok(match slot.sticky {
        // A sticky partition of a topic since shrunk is not used (a count can shrink only if
        // the topic was deleted and created again).
        Some(p) if (p as usize) < count => p,
        _ => {
            let p = partitioner::next_sticky(None, count);
            slot.sticky = Some(p);
            p
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn outcome() -> Result<RecordMetadata> {
        Err(Error::Closed("producer"))
    }

    #[test]
    fn a_blocked_send_waits_for_an_eighth_of_the_buffer_or_its_record() {
        const MIB: usize = 1 << 20;
        // (record's permits, buffer.memory, what it waits for)
        let table: &[(u32, usize, u32)] = &[
            (1_100, 32 * MIB, 4 << 20),     // the usual case: an eighth
            (6 << 20, 32 * MIB, 6 << 20),   // a record bigger than an eighth: its own
            (32 << 20, 32 * MIB, 32 << 20), // a record of the whole buffer
            (100, 64, 100),                 // a tiny buffer: never less than the record
            (10, 800, 100),                 // an eighth of a small buffer
            (1, usize::MAX, u32::MAX / 8),  // clamped to what acquire_many takes
        ];
        for &(permits, buffer, want) in table {
            assert_eq!(
                memory_to_wait_for(permits, buffer),
                want,
                "permits {permits}, buffer.memory {buffer}"
            );
        }
    }

    #[test]
    fn a_callback_waits_until_every_accumulator_lock_of_the_thread_is_released() {
        let a = Mutex::new(Accumulator::default());
        let b = Mutex::new(Accumulator::default());
        let lock = Inner::lock_of;
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let outer = lock(&a);
        let inner_guard = lock(&b);
        run_or_defer(
            Box::new(move |_| {
                r.fetch_add(1, Ordering::SeqCst);
            }),
            outcome(),
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0, "ran under the locks");
        drop(inner_guard);
        assert_eq!(ran.load(Ordering::SeqCst), 0, "ran under the outer lock");
        drop(outer);
        assert_eq!(
            ran.load(Ordering::SeqCst),
            1,
            "did not run once the locks were gone"
        );
        // Without a lock held it runs at once.
        let r = ran.clone();
        run_or_defer(
            Box::new(move |_| {
                r.fetch_add(1, Ordering::SeqCst);
            }),
            outcome(),
        );
        assert_eq!(ran.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_deferred_callback_may_lock_the_accumulator_again() {
        let a = Arc::new(Mutex::new(Accumulator::default()));
        let ran = Arc::new(AtomicUsize::new(0));
        let (a2, r) = (a.clone(), ran.clone());
        let g = Inner::lock_of(&a);
        run_or_defer(
            Box::new(move |_| {
                // Locks what was just released; defers nothing further, so it runs once.
                let _g = Inner::lock_of(&a2);
                r.fetch_add(1, Ordering::SeqCst);
            }),
            outcome(),
        );
        drop(g);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }
}
