//! The producer: `send` a record, get a future for its partition and offset.
//!
//! - [`partitioner`]: the Java client's default partitioner (murmur2, sticky for keyless).
//! - `accumulator`: per-partition open and ready batches, bounded by buffer.memory.
//! - `sender`: one task that closes batches on linger/size, groups ready batches by leader and
//!   sends one Produce request per broker, keeping at most max.in.flight batches per partition.
//! - `transaction`: the transaction methods (init, begin, send offsets, prepare, commit,
//!   abort); `txn_phase`: the transaction state enum and its checked transitions;
//!   `txn_requests`: the coordinator requests they send.
//!
//! See DESIGN.md, "A batch's life", for the path a record takes.

mod accumulator;
mod flush;
mod metrics;
pub mod partitioner;
mod producer_id;
mod sender;
mod transaction;
mod txn_phase;
mod txn_requests;
mod verdict;

pub use metrics::ProducerMetrics;
// GroupMetadata belongs to the group module; re-exported here, where it used to be.
pub use crate::client::group::GroupMetadata;
// The two-phase-commit API lives in `client::txn`; re-exported here where it used to be.
pub use crate::client::txn::{resume_transaction, PreparedTransaction, ResumeOutcome, TxnEnd};
pub(crate) use accumulator::Identity;

use super::cluster::Cluster;
use super::config::ProducerConfig;
use super::error::{Error, Result};
use super::metadata::TopicPartition;
use crate::protocol::records::{BatchBuilder, Header};
use accumulator::{Accumulator, Delivery, NewRecord};
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};
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

    /// Sets the key.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the partition.
    pub fn with_partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, key: impl Into<Bytes>, value: Option<impl Into<Bytes>>) -> Self {
        self.headers.push(Header {
            key: key.into(),
            value: value.map(Into::into),
        });
        self
    }

    /// Sets the timestamp.
    pub fn with_timestamp(mut self, ts: i64) -> Self {
        self.timestamp = Some(ts);
        self
    }
}

/// Where a record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset, or -1 with acks=0.
    pub offset: i64,
    /// The record's timestamp (the broker's, for LogAppendTime topics).
    pub timestamp: i64,
}

/// Resolves when the record is acknowledged (or has failed for good).
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed("producer"))))
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
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Accumulator> {
        self.acc.lock().unwrap_or_else(|p| p.into_inner())
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
        let inner = Arc::new(Inner {
            config,
            cluster,
            acc: Mutex::new(Accumulator {
                identity,
                txn: transactional_id.map(accumulator::TxnSend::new),
                ..Default::default()
            }),
            wake: Notify::new(),
            adds_done: Notify::new(),
            memory: Semaphore::new(memory),
            flushes: flush::FlushTracker::new(),
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
    pub fn producer_id_and_epoch(&self) -> Option<(i64, i16)> {
        self.inner.lock().identity.map(|i| (i.producer_id, i.epoch))
    }

    /// The producer's counters since it was created (batches acknowledged, retried, failed;
    /// epoch bumps).
    ///
    /// ```no_run
    /// # fn demo(p: &onceflow::client::Producer) {
    /// let m = p.metrics();
    /// println!("{} batches retried", m.batches_retried);
    /// # }
    /// ```
    pub fn metrics(&self) -> ProducerMetrics {
        self.inner.counters.snapshot()
    }

    /// The broker pool this producer uses.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.inner.cluster
    }

    /// Queues a record. Waits only while buffer.memory is full (at most max.block.ms).
    /// The returned future resolves when the broker acknowledged the record.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`], [`Error::RecordTooLarge`],
    /// [`Error::Timeout`] when buffer space does not free up within max.block.ms,
    /// [`Error::Closed`]; with transactions [`Error::Usage`] outside a transaction, and the
    /// transaction's (or the producer's) error once it has failed.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("producer"));
        }
        // A transactional producer sends only inside a transaction: before init_transactions()
        // the record would wait forever for a partition that is never added; between commit
        // and begin_transaction() it would be written outside any transaction. A failed
        // producer (fenced, an epoch bump refused) sends nothing.
        inner.check_can_send()?;
        let cfg = &inner.config;
        let size = check_record_size(cfg, &record)?;
        inner.cluster.refresh_if_stale();
        let count = inner
            .cluster
            .partition_count_with(&record.topic, cfg.topic_lookup())
            .await?;
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let permits = u32::try_from(size).unwrap_or(u32::MAX);
        self.reserve_memory(permits).await?;

        let (tx, rx) = oneshot::channel();
        let appended = {
            let mut acc = inner.lock();
            // Again under the lock the append takes: commit or abort may have begun since.
            let partition = match acc
                .check_can_send()
                .and_then(|()| choose_partition(&mut acc, cfg, &record, count))
            {
                Ok(p) => p,
                Err(e) => {
                    drop(acc);
                    inner.release(permits);
                    return Err(e);
                }
            };
            let tp = TopicPartition::new(record.topic.clone(), partition);
            let appended = acc.append(
                &tp,
                cfg.compression,
                cfg.batch_size,
                NewRecord {
                    timestamp,
                    key: record.key.as_deref(),
                    value: record.value.as_deref(),
                    headers: &record.headers,
                },
                Delivery {
                    tx,
                    timestamp,
                    _flush: inner.flushes.ticket(),
                },
                permits,
            );
            // Keyless records move to another partition once their batch closes (KIP-480).
            if appended.batch_closed
                && record.partition.is_none()
                && (record.key.is_none() || cfg.partitioner_ignore_keys)
            {
                let next = partitioner::next_sticky(Some(partition), count);
                acc.sticky.insert(record.topic.clone(), next);
            }
            appended
        };
        if appended.release > 0 {
            inner.release(appended.release);
        }
        if appended.batch_closed || appended.new_batch {
            inner.wake.notify_one();
        }
        Ok(DeliveryFuture { rx })
    }

    /// Takes `permits` of buffer.memory, waiting at most max.block.ms for them.
    async fn reserve_memory(&self, permits: u32) -> Result<()> {
        let inner = &self.inner;
        // Fast path without a timer; only a full buffer pays for max.block.ms.
        match inner.memory.try_acquire_many(permits) {
            Ok(permit) => permit.forget(),
            Err(_) => {
                tokio::time::timeout(inner.config.max_block, inner.memory.acquire_many(permits))
                    .await
                    .map_err(|_| Error::Timeout {
                        what: "waiting for buffer.memory to free up".into(),
                        after: inner.config.max_block,
                    })?
                    .map_err(|_| Error::Closed("producer"))?
                    .forget();
            }
        }
        Ok(())
    }

    /// Sends everything buffered now, without waiting for linger.ms, and waits until every
    /// record sent before this call has completed (successfully or not).
    ///
    /// # Errors
    /// [`Error::Closed`] only if the sender task is gone.
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
    pub async fn close(self) -> Result<()> {
        self.flush().await?;
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake.notify_one();
        Ok(())
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
    acc: &mut Accumulator,
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
    Ok(match acc.sticky.get(&record.topic) {
        Some(p) => *p,
        None => {
            let p = partitioner::next_sticky(None, count);
            acc.sticky.insert(record.topic.clone(), p);
            p
        }
    })
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
