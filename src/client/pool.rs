//! The producer per checkpoint: a pool of transactional producers over the ids
//! `<prefix>-<slot>`, sharing one [`Cluster`]. It sits above the producer: each slot is a
//! [`Producer`], and committables are resumed with [`resume_transaction`].
//!
//! A transactional id has one open transaction at a time, and InitProducerId on it aborts that
//! transaction. A checkpointing sink must keep checkpoint N's transaction *prepared* (flushed,
//! its committable saved, not committed) until N is durable, while the records after the
//! barrier already flow into N+1's transaction. So N+1 needs another transactional id, and the
//! producer of N must stay untouched until N is committed. The pool hands out slots:
//!
//! ```text
//!   Free ──begin()──▶ Open ──prepare()──▶ Prepared ──commit()/abort()/resume()──▶ Ended
//!    ▲                 │                                                            │
//!    └──── abort(), failed prepare, dropped (aborted before reuse) ◀┘               │
//!    └──────────────────────────────── release() ◀──────────────────────────────────┘
//! ```
//!
//! Each stage is its own type ([`OpenTransaction`], [`PreparedSlot`], [`EndedSlot`]), so a
//! record can never be sent into a prepared transaction, and a slot is never reused before the
//! caller releases it. `begin()` takes the lowest free slot (Flink's POOLING rule), so a
//! steady pipeline cycles through the same few ids and a restart has a bounded set to clean up.
//! See docs/design/producer-pool.md.

use crate::client::cluster::Cluster;
use crate::client::config::{ConfigError, ProducerConfig};
use crate::client::error::{Error, Result};
use crate::client::metadata::TopicPartition;
use crate::client::producer::{DeliveryFuture, GroupMetadata, Producer, ProducerRecord};
use crate::client::transactions::{
    describe, resume_transaction, PreparedTransaction, ResumeOutcome, TxnEnd,
};
use std::sync::{Arc, Mutex, MutexGuard};
use tracing::{info, warn};

/// Where a slot of a [`TransactionalPool`] is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// No transaction; `begin()` may take it.
    Free,
    /// A transaction is open: records and offsets may be sent ([`OpenTransaction`]).
    Open,
    /// The transaction is flushed and its committable handed out, not yet ended
    /// ([`PreparedSlot`]). Nothing may touch the transactional id: InitProducerId would abort it.
    Prepared,
    /// Committed or aborted, but the caller has not released it yet ([`EndedSlot`]): a durable
    /// checkpoint may still list its committable as unresolved, and reusing the id would make
    /// resuming that committable report `Superseded`.
    Ended,
}

/// What happens to a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotEvent {
    /// `begin()` took it.
    Begin,
    /// `prepare()` succeeded.
    Prepare,
    /// The open transaction was aborted, failed to prepare, or its handle was dropped.
    Discard,
    /// The prepared transaction was committed or aborted.
    End,
    /// The caller released the ended slot.
    Release,
}

/// The state after `event`, or an error naming the misuse. The handle types make every
/// refused pair unreachable from the public API; the check keeps a bug from silently
/// reusing an id that holds a prepared transaction.
pub(crate) fn next(state: SlotState, event: SlotEvent) -> Result<SlotState> {
    use SlotEvent as E;
    use SlotState as S;
    match (state, event) {
        (S::Free, E::Begin) => Ok(S::Open),
        (S::Open, E::Prepare) => Ok(S::Prepared),
        (S::Open, E::Discard) => Ok(S::Free),
        (S::Prepared, E::End) => Ok(S::Ended),
        (S::Ended, E::Release) => Ok(S::Free),
        (state, event) => Err(misuse(format!(
            "transactional pool slot: {event:?} is not allowed in state {state:?}"
        ))),
    }
}

/// A slot transition the handle types should have made impossible: a bug in the pool.
fn misuse(msg: String) -> Error {
    Error::Internal(msg)
}

/// The slot `begin()` takes: the lowest free one (Flink's POOLING rule), so ids are reused in
/// a stable order and the highest ids stay idle unless the pipeline needs them.
fn lowest_free(states: impl IntoIterator<Item = SlotState>) -> Option<usize> {
    states.into_iter().position(|s| s == SlotState::Free)
}

/// How many slots are in each state, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Free slots.
    pub free: usize,
    /// Slots with an open transaction.
    pub open: usize,
    /// Slots with a prepared transaction.
    pub prepared: usize,
    /// Slots ended (committed or aborted) and not yet released.
    pub ended: usize,
}

impl PoolCounts {
    fn of(states: impl IntoIterator<Item = SlotState>) -> PoolCounts {
        let mut c = PoolCounts::default();
        for s in states {
            match s {
                SlotState::Free => c.free += 1,
                SlotState::Open => c.open += 1,
                SlotState::Prepared => c.prepared += 1,
                SlotState::Ended => c.ended += 1,
            }
        }
        c
    }
}

/// Why a slot's producer must be replaced before its next transaction, and what the
/// coordinator must show for the id if nobody else has touched it since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reset {
    /// The coordinator should show this producer id and epoch: only this pool used the id.
    Expect { producer_id: i64, epoch: i16 },
    /// What the coordinator shows cannot be told apart from another producer's takeover.
    Unknown(&'static str),
}

/// After ending `c` with `resume_transaction`, what the coordinator shows if this pool was the
/// last to use the id: an EndTxn we sent leaves the epoch under the classic protocol and bumps
/// it under KIP-890. Any other outcome means someone else ended the transaction (a timeout, a
/// fencing producer), and a takeover cannot be ruled out.
pub(crate) fn after_resume(c: &PreparedTransaction, outcome: &ResumeOutcome) -> Reset {
    let bump = i16::from(c.transaction_version >= 2);
    match outcome {
        ResumeOutcome::NothingToCommit => Reset::Expect {
            producer_id: c.producer_id,
            epoch: c.producer_epoch,
        },
        ResumeOutcome::Completed | ResumeOutcome::AlreadyCommitted => {
            match c.producer_epoch.checked_add(bump) {
                // At the last epoch a KIP-890 end moves the id to a new producer id.
                Some(epoch) if epoch < i16::MAX => Reset::Expect {
                    producer_id: c.producer_id,
                    epoch,
                },
                _ => Reset::Unknown("its producer id moved at the last epoch"),
            }
        }
        ResumeOutcome::NotCommitted { .. } | ResumeOutcome::Superseded { .. } => {
            Reset::Unknown("its transaction was ended by someone else")
        }
    }
}

/// Whether the coordinator's view of a slot's id (`shown`: producer id and epoch, `None` when
/// it does not know the id) allows this pool to take the id back with InitProducerId. A newer
/// incarnation's init bumps the epoch of every id, so a zombie never finds what it expects.
pub(crate) fn may_take_back(reset: &Reset, shown: Option<(i64, i16)>) -> Result<(), String> {
    match (reset, shown) {
        // Expired (transactional.id.expiration.ms) or never used: nobody holds it.
        (_, None) => Ok(()),
        (Reset::Expect { producer_id, epoch }, Some(shown)) if shown == (*producer_id, *epoch) => {
            Ok(())
        }
        (Reset::Expect { producer_id, epoch }, Some((id, e))) => Err(format!(
            "the coordinator shows producer id {id} epoch {e}, this pool last used producer id {producer_id} epoch {epoch}"
        )),
        (Reset::Unknown(why), Some((id, e))) => Err(format!(
            "{why}, and the coordinator shows producer id {id} epoch {e}"
        )),
    }
}

/// The reset a slot keeps when a handle leaves it with `new` while `current` is pending: the
/// pending one stands until a take-back clears it. A handle leaves a slot with a reset pending
/// only when `begin()` failed to take the id back (say DescribeTransactions timed out); it still
/// holds the old producer, whose identity would replace what the coordinator is expected to
/// show (the epoch a resume left) and make the next take-back refuse a slot nobody touched.
pub(crate) fn pending_reset(current: Option<Reset>, new: Option<Reset>) -> Option<Reset> {
    current.or(new)
}

struct Slot {
    state: SlotState,
    producer: Producer,
    /// The producer cannot be trusted for the next transaction (an open transaction was
    /// abandoned, an end failed, or the transaction was ended with `resume_transaction`, which
    /// the producer does not learn the next epoch from): the next `begin()` on this slot
    /// replaces it with a fresh producer and InitProducerId, which also aborts whatever the old
    /// one left open, but only if the coordinator shows what `Reset` expects (see
    /// `may_take_back`). Set only when no committable of the slot is unresolved.
    reset: Option<Reset>,
}

struct PoolInner {
    prefix: String,
    config: ProducerConfig,
    cluster: Arc<Cluster>,
    slots: Mutex<Vec<Slot>>,
}

impl PoolInner {
    fn lock(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn step(&self, slot: usize, event: SlotEvent) -> Result<()> {
        let mut slots = self.lock();
        let s = slots
            .get_mut(slot)
            .ok_or_else(|| misuse(format!("transactional pool has no slot {slot}")))?;
        s.state = next(s.state, event)?;
        Ok(())
    }

    /// Frees an open slot; with `reset`, its producer is replaced before the slot is reused.
    fn discard(&self, slot: usize, reset: Option<Reset>) {
        let mut slots = self.lock();
        if let Some(s) = slots.get_mut(slot) {
            match next(s.state, SlotEvent::Discard) {
                Ok(state) => {
                    s.state = state;
                    s.reset = pending_reset(s.reset.take(), reset);
                }
                Err(e) => warn!(error = %e, "transactional pool slot not discarded"),
            }
        }
    }

    fn end(&self, slot: usize, reset: Option<Reset>) -> Result<()> {
        let mut slots = self.lock();
        let s = slots
            .get_mut(slot)
            .ok_or_else(|| misuse(format!("transactional pool has no slot {slot}")))?;
        s.state = next(s.state, SlotEvent::End)?;
        s.reset = pending_reset(s.reset.take(), reset);
        Ok(())
    }

    fn transactional_id(&self, slot: usize) -> String {
        slot_id(&self.prefix, slot)
    }

    /// Replaces a slot's producer, after checking that no other producer has taken the id
    /// over since this pool last used it (see `may_take_back`).
    ///
    /// The check and the InitProducerId are two requests. A newer incarnation whose init falls
    /// between them is still fenced by ours; it is not silent: its next request fails as
    /// fenced, and its own take-back then finds our epoch and refuses, so both stop.
    async fn take_back(&self, slot: usize, reset: &Reset) -> Result<Producer> {
        let id = self.transactional_id(slot);
        let shown = describe(&self.cluster, &id)
            .await?
            .map(|d| (d.producer_id, d.producer_epoch));
        if let Err(why) = may_take_back(reset, shown) {
            return Err(Error::Fenced(format!(
                "transactional id '{id}' of pool '{}' may have been taken over by another producer ({why}): a newer incarnation of this job, another job with the same prefix, or the coordinator aborting a transaction that ran past transaction.timeout.ms; this pool does not take it back. Stop this pool and recover (resolve saved committables, then TransactionalPool::init); if another job uses the prefix, give each job its own",
                self.prefix
            )));
        }
        self.fresh_producer(slot).await
    }

    /// A new producer for `slot`'s id, initialized: InitProducerId fences every older producer
    /// of the id and aborts the transaction it left open.
    async fn fresh_producer(&self, slot: usize) -> Result<Producer> {
        let mut config = self.config.clone();
        config.transactional_id = Some(self.transactional_id(slot));
        let p = Producer::with_cluster(config, self.cluster.clone()).await?;
        p.init_transactions().await?;
        Ok(p)
    }
}

/// The transactional id of a slot.
fn slot_id(prefix: &str, slot: usize) -> String {
    format!("{prefix}-{slot}")
}

/// A fixed-size pool of transactional producers over the ids `<prefix>-0` …
/// `<prefix>-<size-1>`, for the producer-per-checkpoint pattern: checkpoint N's transaction
/// stays prepared in its slot while N+1's transaction runs in another.
///
/// Cheap to clone; clones share the slots.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> onceflow::client::Result<()> {
/// use onceflow::client::{Cluster, ClientConfig, ProducerConfig, ProducerRecord};
/// use onceflow::client::pool::TransactionalPool;
/// let cluster = Cluster::connect(ClientConfig::default()).await?;
/// // (After a crash: resume every saved committable with resume_transaction FIRST.)
/// let pool = TransactionalPool::init(cluster, ProducerConfig::default(), "rides-sink-0", 3).await?;
/// let n = pool.begin().await?;
/// n.send(ProducerRecord::new("clean-rides", "ride-1")).await?;
/// let n = n.prepare().await?;            // save n.committable() in checkpoint N
/// let n1 = pool.begin().await?;          // records after the barrier: another id
/// n1.send(ProducerRecord::new("clean-rides", "ride-2")).await?;
/// let n = n.commit().await?;             // checkpoint N is durable
/// n.release();                           // once no durable record lists it as unresolved
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TransactionalPool {
    inner: Arc<PoolInner>,
}

impl std::fmt::Debug for TransactionalPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionalPool")
            .field("prefix", &self.inner.prefix)
            .field("counts", &self.counts())
            .finish()
    }
}

impl TransactionalPool {
    /// Creates the pool and runs init_transactions (InitProducerId) on every slot's id, which
    /// fences any older incarnation of the pool and aborts the transactions it left open.
    /// There is no pool that has not done this: every slot starts `Free` and ready.
    ///
    /// `config` is the producer configuration of every slot, without `transactional.id` (the
    /// pool sets `<prefix>-<slot>`). The prefix must be unique per job and cluster (an engine
    /// uses `<job prefix>-<sink task>`): two pools with the same prefix fence each other.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty prefix, a size of 0, `transactional.id` set, or settings
    /// a transactional producer refuses; InitProducerId failures (e.g. transaction.timeout.ms
    /// above the broker's maximum).
    ///
    /// **Recovery order.** Call this only AFTER every saved committable of these ids has been
    /// resolved with [`resume_transaction`]: InitProducerId *aborts* a prepared transaction, and
    /// with it the output of a checkpoint that is already durable.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(saved: Vec<onceflow::client::transactions::PreparedTransaction>) -> onceflow::client::Result<()> {
    /// use onceflow::client::{ClientConfig, Cluster, ProducerConfig};
    /// use onceflow::client::pool::TransactionalPool;
    /// use onceflow::client::transactions::{resume_transaction, TxnEnd};
    /// let cluster = Cluster::connect(ClientConfig::default()).await?;
    /// // Recovery: first finish the transactions the last durable checkpoint saved ...
    /// for committable in &saved {
    ///     resume_transaction(&cluster, committable, TxnEnd::Commit).await?;
    /// }
    /// // ... then fence the previous incarnation and abort whatever else it left open.
    /// let pool = TransactionalPool::init(cluster, ProducerConfig::default(), "rides-sink-0", 3).await?;
    /// # Ok(()) }
    /// ```
    pub async fn init(
        cluster: Arc<Cluster>,
        config: ProducerConfig,
        prefix: impl Into<String>,
        size: usize,
    ) -> Result<TransactionalPool> {
        let prefix = prefix.into();
        if prefix.is_empty() {
            return Err(conflict(
                "a transactional pool needs a non-empty prefix, unique per job and cluster".into(),
            ));
        }
        if size == 0 {
            return Err(conflict(format!(
                "transactional pool '{prefix}' needs at least one slot (3 for a checkpointing sink: the open, the prepared and the just-committed transaction)"
            )));
        }
        if let Some(id) = &config.transactional_id {
            return Err(conflict(format!(
                "transactional.id='{id}' must not be set for transactional pool '{prefix}': the pool gives each slot its own id '{prefix}-<slot>'"
            )));
        }
        let inner = PoolInner {
            prefix,
            config,
            cluster,
            slots: Mutex::new(Vec::new()),
        };
        let producers =
            futures::future::try_join_all((0..size).map(|i| inner.fresh_producer(i))).await?;
        *inner.lock() = producers
            .into_iter()
            .map(|producer| Slot {
                state: SlotState::Free,
                producer,
                reset: None,
            })
            .collect();
        info!(prefix = %inner.prefix, size, "transactional pool initialized");
        Ok(TransactionalPool {
            inner: Arc::new(inner),
        })
    }

    /// Begins a transaction in the lowest free slot.
    ///
    /// Never waits for a slot and never grows the pool: a slot is freed only by the caller
    /// ([`EndedSlot::release`]), typically the same task that calls `begin()`, so waiting here
    /// could wait for itself. The caller back-pressures its input instead and calls again after
    /// a release.
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when every slot is busy. When the lowest free slot's producer
    /// must be replaced first (see [`OpenTransaction`], [`PreparedSlot::resume`]):
    /// [`Error::Fenced`] if another producer may have taken its id over (this pool then stops
    /// using it: recover with a new pool), or DescribeTransactions / InitProducerId failures;
    /// the slot stays free and the next call tries again.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(pool: onceflow::client::pool::TransactionalPool) -> onceflow::client::Result<()> {
    /// use onceflow::client::{Error, ProducerRecord};
    /// match pool.begin().await {
    ///     Ok(txn) => {
    ///         txn.send(ProducerRecord::new("clean-rides", "ride")).await?;
    ///     }
    ///     // Every slot is busy: stop reading input until an ended slot is released.
    ///     Err(Error::PoolExhausted { prepared, .. }) => println!("{prepared} checkpoints pending"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn begin(&self) -> Result<OpenTransaction> {
        let (slot, producer, reset) = {
            let mut slots = self.inner.lock();
            let Some(i) = lowest_free(slots.iter().map(|s| s.state)) else {
                let c = PoolCounts::of(slots.iter().map(|s| s.state));
                return Err(Error::PoolExhausted {
                    prefix: self.inner.prefix.clone(),
                    size: slots.len(),
                    open: c.open,
                    prepared: c.prepared,
                    ended: c.ended,
                });
            };
            let s = &mut slots[i];
            s.state = next(s.state, SlotEvent::Begin)?;
            (i, s.producer.clone(), s.reset.clone())
        };
        // From here the handle owns the slot: any failure (or cancellation) below drops it,
        // which frees the slot and keeps `reset`.
        let mut open = OpenTransaction {
            transactional_id: self.inner.transactional_id(slot),
            inner: self.inner.clone(),
            slot,
            producer,
            done: false,
        };
        if let Some(reset) = reset {
            let fresh = self.inner.take_back(slot, &reset).await?;
            let mut slots = self.inner.lock();
            slots[slot].producer = fresh.clone();
            slots[slot].reset = None;
            drop(slots);
            open.producer = fresh;
        }
        open.producer.begin_transaction()?;
        Ok(open)
    }

    /// How many slots are free, open, prepared and ended, for metrics.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(pool: &onceflow::client::pool::TransactionalPool) {
    /// let c = pool.counts();
    /// println!("{} free, {} open, {} prepared, {} ended", c.free, c.open, c.prepared, c.ended);
    /// # }
    /// ```
    pub fn counts(&self) -> PoolCounts {
        PoolCounts::of(self.inner.lock().iter().map(|s| s.state))
    }

    /// The state of every slot, by slot number.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(pool: &onceflow::client::pool::TransactionalPool) {
    /// use onceflow::client::pool::SlotState;
    /// let prepared: Vec<usize> = (0..).zip(pool.states()).filter(|(_, s)| *s == SlotState::Prepared).map(|(i, _)| i).collect();
    /// println!("slots holding a prepared transaction: {prepared:?}");
    /// # }
    /// ```
    pub fn states(&self) -> Vec<SlotState> {
        self.inner.lock().iter().map(|s| s.state).collect()
    }

    /// The pool's transactional ids, by slot number (for cleanup: every id a crashed
    /// incarnation may have left a transaction open under).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(pool: onceflow::client::pool::TransactionalPool) -> onceflow::client::Result<()> {
    /// use onceflow::client::Admin;
    /// let admin = Admin::with_cluster(pool.cluster().clone());
    /// for id in pool.transactional_ids() {
    ///     if let Some(t) = admin.describe_transaction(&id).await? {
    ///         println!("{id}: {}", t.state);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn transactional_ids(&self) -> Vec<String> {
        (0..self.inner.lock().len())
            .map(|i| self.inner.transactional_id(i))
            .collect()
    }

    /// The prefix the ids are built from.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(pool: &onceflow::client::pool::TransactionalPool) {
    /// assert_eq!(pool.transactional_ids()[0], format!("{}-0", pool.prefix()));
    /// # }
    /// ```
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The broker pool the slots share.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(pool: &onceflow::client::pool::TransactionalPool) {
    /// use onceflow::client::Admin;
    /// let admin = Admin::with_cluster(pool.cluster().clone());
    /// # }
    /// ```
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.inner.cluster
    }
}

fn conflict(msg: String) -> Error {
    Error::Config(ConfigError::Conflict(msg))
}

/// A slot with an open transaction: send records and offsets, then [`prepare`](Self::prepare)
/// (or [`abort`](Self::abort)).
///
/// Dropping it without either frees the slot; its transaction is aborted (by InitProducerId on
/// a fresh producer) before the slot is used again. Until then it stays open at the
/// coordinator (at most transaction.timeout.ms) and holds back read_committed readers of its
/// partitions: call [`abort`](Self::abort) when you can.
#[must_use = "an open transaction must be prepared or aborted"]
pub struct OpenTransaction {
    inner: Arc<PoolInner>,
    slot: usize,
    transactional_id: String,
    producer: Producer,
    /// The slot has left Open through this handle; Drop does nothing.
    done: bool,
}

impl std::fmt::Debug for OpenTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenTransaction")
            .field("transactional_id", &self.transactional_id)
            .finish()
    }
}

impl OpenTransaction {
    /// The slot number.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(txn: onceflow::client::pool::OpenTransaction) -> onceflow::client::Result<()> {
    /// println!("checkpoint 7 writes in slot {} ({})", txn.slot(), txn.transactional_id());
    /// # Ok(()) }
    /// ```
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The slot's transactional id, `<prefix>-<slot>`.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(pool: onceflow::client::pool::TransactionalPool) -> onceflow::client::Result<()> {
    /// let txn = pool.begin().await?;
    /// assert_eq!(txn.transactional_id(), format!("{}-{}", pool.prefix(), txn.slot()));
    /// # Ok(()) }
    /// ```
    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// Sends a record in this transaction; see [`Producer::send`].
    ///
    /// # Errors
    /// As [`Producer::send`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(pool: onceflow::client::pool::TransactionalPool) -> onceflow::client::Result<()> {
    /// use onceflow::client::ProducerRecord;
    /// let txn = pool.begin().await?;
    /// txn.send(ProducerRecord::new("clean-rides", "ride 1").with_key("driver-42")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        self.producer.send(record).await
    }

    /// Adds consumed offsets to this transaction; see [`Producer::send_offsets_to_transaction`].
    ///
    /// # Errors
    /// As [`Producer::send_offsets_to_transaction`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(
    /// #     txn: onceflow::client::pool::OpenTransaction,
    /// #     consumer: onceflow::client::group::GroupConsumer,
    /// # ) -> onceflow::client::Result<()> {
    /// // The input's offsets commit if and only if this checkpoint's transaction does.
    /// txn.send_offsets_to_transaction(&consumer.positions(), &consumer.group_metadata()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, i64)],
        group: &GroupMetadata,
    ) -> Result<()> {
        self.producer
            .send_offsets_to_transaction(offsets, group)
            .await
    }

    /// Waits until every record sent so far is acknowledged or failed.
    ///
    /// # Errors
    /// As [`Producer::flush`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(txn: onceflow::client::pool::OpenTransaction) -> onceflow::client::Result<()> {
    /// txn.flush().await?; // every record sent is acknowledged; the transaction stays open
    /// # Ok(()) }
    /// ```
    pub async fn flush(&self) -> Result<()> {
        self.producer.flush().await
    }

    /// Flushes and prepares the transaction ([`Producer::prepare_commit`]): the slot stays busy
    /// and its committable is handed out. Save the committable durably before committing.
    ///
    /// # Errors
    /// The transaction's error when a record failed or the coordinator no longer has the
    /// transaction open. The transaction cannot commit then; the slot is freed and the
    /// transaction aborted before the slot is reused.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(txn: onceflow::client::pool::OpenTransaction) -> onceflow::client::Result<()> {
    /// let prepared = txn.prepare().await?;
    /// // Checkpoint N holds the committable, durably, before anything commits.
    /// let saved = serde_json::to_vec(prepared.committable()).expect("serializable");
    /// std::fs::write("checkpoint-n.json", saved).expect("saved");
    /// prepared.commit().await?.release();
    /// # Ok(()) }
    /// ```
    pub async fn prepare(mut self) -> Result<PreparedSlot> {
        let committable = self.producer.prepare_commit().await?;
        self.inner.step(self.slot, SlotEvent::Prepare)?;
        self.done = true;
        Ok(PreparedSlot {
            inner: self.inner.clone(),
            slot: self.slot,
            producer: self.producer.clone(),
            committable,
            producer_unsure: false,
            done: false,
        })
    }

    /// Aborts the transaction and frees the slot.
    ///
    /// # Errors
    /// As [`Producer::abort_transaction`]. The slot is freed either way; after an error the
    /// transaction is aborted by InitProducerId before the slot is reused.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(pool: onceflow::client::pool::TransactionalPool) -> onceflow::client::Result<()> {
    /// use onceflow::client::ProducerRecord;
    /// let txn = pool.begin().await?;
    /// if let Err(e) = txn.send(ProducerRecord::new("clean-rides", "ride")).await {
    ///     eprintln!("checkpoint abandoned: {e}");
    ///     txn.abort().await?; // the slot is free again
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn abort(mut self) -> Result<()> {
        self.producer.abort_transaction().await?;
        self.done = true;
        self.inner.discard(self.slot, None);
        Ok(())
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if !self.done {
            // Nobody holds a committable for this transaction: aborting it is safe. The next
            // begin() on this slot does so with InitProducerId on a fresh producer.
            info!(transactional_id = %self.transactional_id, "open transaction dropped; it is aborted before the slot is reused");
            let reset = match self.producer.producer_id_and_epoch() {
                Some((producer_id, epoch)) => Reset::Expect { producer_id, epoch },
                None => Reset::Unknown("its producer has no producer id"),
            };
            self.inner.discard(self.slot, Some(reset));
        }
    }
}

/// A slot whose transaction is prepared: only its committable and ending it are available, no
/// sending.
///
/// Dropping it without ending it keeps the slot busy for the pool's life: its committable may be
/// saved in a checkpoint, and reusing the id would abort or supersede it. Resolve that
/// committable with [`resume_transaction`]; a new pool's [`TransactionalPool::init`] (after that
/// resolution) starts with every slot free.
#[must_use = "a prepared transaction must be committed or aborted"]
pub struct PreparedSlot {
    inner: Arc<PoolInner>,
    slot: usize,
    producer: Producer,
    committable: PreparedTransaction,
    /// An end through the producer failed: its state is unknown, so the transaction is ended
    /// with `resume_transaction` (which decides from DescribeTransactions) and the producer is
    /// replaced before the slot is reused.
    producer_unsure: bool,
    done: bool,
}

impl std::fmt::Debug for PreparedSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedSlot")
            .field("committable", &self.committable)
            .finish()
    }
}

/// Ending a prepared slot failed; the slot is handed back to try again ([`PreparedSlot::commit`]
/// again goes through [`resume_transaction`], which is safe to repeat), or to end it with
/// [`PreparedSlot::resume`].
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.error)]
pub struct EndFailed(Box<Failed>);

#[derive(Debug)]
struct Failed {
    error: Error,
    slot: PreparedSlot,
}

impl EndFailed {
    fn new(error: Error, slot: PreparedSlot) -> EndFailed {
        EndFailed(Box::new(Failed { error, slot }))
    }

    /// What went wrong.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(prepared: onceflow::client::pool::PreparedSlot) -> onceflow::client::Result<()> {
    /// if let Err(failed) = prepared.commit().await {
    ///     eprintln!("commit failed: {}", failed.error());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn error(&self) -> &Error {
        &self.0.error
    }

    /// The slot, still prepared, to try again.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(prepared: onceflow::client::pool::PreparedSlot) -> onceflow::client::Result<()> {
    /// let ended = match prepared.commit().await {
    ///     Ok(ended) => ended,
    ///     // Once more: the second commit resolves through resume_transaction.
    ///     Err(failed) => failed.into_slot().commit().await?,
    /// };
    /// # Ok(()) }
    /// ```
    pub fn into_slot(self) -> PreparedSlot {
        self.0.slot
    }

    /// The error and the slot.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(prepared: onceflow::client::pool::PreparedSlot) -> onceflow::client::Result<()> {
    /// use onceflow::client::transactions::TxnEnd;
    /// if let Err(failed) = prepared.commit().await {
    ///     let (error, slot) = failed.into_parts();
    ///     eprintln!("commit failed ({error}); resolving from the coordinator's view");
    ///     let (outcome, ended) = slot.resume(TxnEnd::Commit).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn into_parts(self) -> (Error, PreparedSlot) {
        let f = *self.0;
        (f.error, f.slot)
    }
}

impl From<EndFailed> for Error {
    /// Keeps the error; the slot is dropped and stays busy (see [`PreparedSlot`]).
    fn from(e: EndFailed) -> Error {
        e.into_parts().0
    }
}

impl PreparedSlot {
    /// The committable to save in the checkpoint.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(prepared: onceflow::client::pool::PreparedSlot) -> onceflow::client::Result<()> {
    /// let c = prepared.committable();
    /// println!("{} producer {} epoch {}", c.transactional_id, c.producer_id, c.producer_epoch);
    /// let saved = serde_json::to_string(c).expect("serializable"); // into the checkpoint
    /// # Ok(()) }
    /// ```
    pub fn committable(&self) -> &PreparedTransaction {
        &self.committable
    }

    /// The slot number.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(prepared: onceflow::client::pool::PreparedSlot) -> onceflow::client::Result<()> {
    /// println!("slot {} stays busy until its transaction ends", prepared.slot());
    /// # Ok(()) }
    /// ```
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Commits the transaction with EndTxn through the slot's own producer, which learns the
    /// next epoch (KIP-890) and is ready for the slot's next transaction.
    ///
    /// # Errors
    /// [`EndFailed`] with the slot: retrying it resolves through [`resume_transaction`]; a
    /// transaction that can no longer be committed (timed out, fenced) fails with
    /// [`Error::Fenced`] naming the reason.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(prepared: onceflow::client::pool::PreparedSlot) -> onceflow::client::Result<()> {
    /// // Checkpoint N, which lists this committable, is durable now.
    /// let ended = prepared.commit().await?;
    /// ended.release(); // once no durable checkpoint lists it as unresolved
    /// # Ok(()) }
    /// ```
    pub async fn commit(self) -> Result<EndedSlot, EndFailed> {
        self.end(TxnEnd::Commit).await
    }

    /// Aborts the transaction through the slot's own producer.
    ///
    /// # Errors
    /// As [`Self::commit`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(prepared: onceflow::client::pool::PreparedSlot) -> onceflow::client::Result<()> {
    /// // Checkpoint N failed before it became durable: its output must not appear.
    /// prepared.abort().await?.release();
    /// # Ok(()) }
    /// ```
    pub async fn abort(self) -> Result<EndedSlot, EndFailed> {
        self.end(TxnEnd::Abort).await
    }

    async fn end(mut self, end: TxnEnd) -> Result<EndedSlot, EndFailed> {
        if self.producer_unsure {
            return match self.resume_outcome(end).await {
                Ok(outcome) => match (end, &outcome) {
                    (
                        TxnEnd::Commit,
                        ResumeOutcome::NotCommitted { reason }
                        | ResumeOutcome::Superseded { reason },
                    ) => {
                        let error = Error::Fenced(format!(
                            "transaction '{}' cannot be committed: {reason}; end the slot with PreparedSlot::resume(TxnEnd::Abort) and redo the checkpoint",
                            self.committable.transactional_id
                        ));
                        Err(EndFailed::new(error, self))
                    }
                    _ => {
                        let reset = after_resume(&self.committable, &outcome);
                        self.into_ended(Some(reset))
                    }
                },
                Err(error) => Err(EndFailed::new(error, self)),
            };
        }
        let result = match end {
            TxnEnd::Commit => self.producer.commit_transaction().await,
            TxnEnd::Abort => self.producer.abort_transaction().await,
        };
        match result {
            Ok(()) => self.into_ended(None),
            Err(error) => {
                warn!(transactional_id = %self.committable.transactional_id, error = %error, "ending a prepared transaction failed; retries go through resume_transaction");
                self.producer_unsure = true;
                Err(EndFailed::new(error, self))
            }
        }
    }

    /// Ends the transaction with [`resume_transaction`] (DescribeTransactions, then EndTxn with
    /// the saved producer id and epoch) instead of the producer: the path a recovery takes, so
    /// an engine can exercise it on every checkpoint. Whatever the outcome, the transaction is
    /// resolved and the slot ended; the slot's producer is replaced before its next transaction.
    ///
    /// # Errors
    /// [`EndFailed`] with the slot when the coordinator could not be asked.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(prepared: onceflow::client::pool::PreparedSlot) -> onceflow::client::Result<()> {
    /// use onceflow::client::transactions::{ResumeOutcome, TxnEnd};
    /// let (outcome, ended) = prepared.resume(TxnEnd::Commit).await?;
    /// match outcome {
    ///     ResumeOutcome::Completed | ResumeOutcome::AlreadyCommitted => ended.release(),
    ///     other => eprintln!("checkpoint {} not committed: {other:?}", ended.committable().transactional_id),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn resume(mut self, end: TxnEnd) -> Result<(ResumeOutcome, EndedSlot), EndFailed> {
        match self.resume_outcome(end).await {
            Ok(outcome) => {
                self.producer_unsure = true;
                let reset = after_resume(&self.committable, &outcome);
                let ended = self.into_ended(Some(reset))?;
                Ok((outcome, ended))
            }
            Err(error) => Err(EndFailed::new(error, self)),
        }
    }

    async fn resume_outcome(&self, end: TxnEnd) -> Result<ResumeOutcome> {
        resume_transaction(&self.inner.cluster, &self.committable, end).await
    }

    fn into_ended(mut self, reset: Option<Reset>) -> Result<EndedSlot, EndFailed> {
        if let Err(error) = self.inner.end(self.slot, reset) {
            return Err(EndFailed::new(error, self));
        }
        self.done = true;
        Ok(EndedSlot {
            inner: self.inner.clone(),
            slot: self.slot,
            committable: self.committable.clone(),
            released: false,
        })
    }
}

impl Drop for PreparedSlot {
    fn drop(&mut self) {
        if !self.done {
            warn!(
                transactional_id = %self.committable.transactional_id,
                "prepared slot dropped without commit or abort: it stays busy for the pool's life; resolve its committable with resume_transaction"
            );
        }
    }
}

/// A slot whose transaction is committed or aborted, waiting for [`release`](Self::release).
///
/// Release it once no durable checkpoint lists its committable as unresolved: reusing the id
/// earlier makes resuming that committable after a crash report `Superseded`. Dropping it
/// without release keeps the slot busy for the pool's life.
#[must_use = "an ended slot stays busy until released"]
pub struct EndedSlot {
    inner: Arc<PoolInner>,
    slot: usize,
    committable: PreparedTransaction,
    released: bool,
}

impl std::fmt::Debug for EndedSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndedSlot")
            .field("committable", &self.committable)
            .finish()
    }
}

impl EndedSlot {
    /// The committable of the transaction this slot ended.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(ended: onceflow::client::pool::EndedSlot) -> onceflow::client::Result<()> {
    /// println!("ended {}", ended.committable().transactional_id);
    /// # Ok(()) }
    /// ```
    pub fn committable(&self) -> &PreparedTransaction {
        &self.committable
    }

    /// The slot number.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(ended: onceflow::client::pool::EndedSlot) -> onceflow::client::Result<()> {
    /// println!("slot {} ended, not released yet", ended.slot());
    /// # Ok(()) }
    /// ```
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Frees the slot for a later `begin()`.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(
    /// #     pool: onceflow::client::pool::TransactionalPool,
    /// #     prepared: onceflow::client::pool::PreparedSlot,
    /// # ) -> onceflow::client::Result<()> {
    /// let ended = prepared.commit().await?;
    /// // ... after the checkpoint that records the commit is durable:
    /// ended.release();
    /// let next = pool.begin().await?; // may take the slot just released
    /// # Ok(()) }
    /// ```
    pub fn release(mut self) {
        self.released = true;
        if let Err(e) = self.inner.step(self.slot, SlotEvent::Release) {
            warn!(error = %e, "transactional pool slot not released");
        }
    }
}

impl Drop for EndedSlot {
    fn drop(&mut self) {
        if !self.released {
            warn!(
                transactional_id = %self.committable.transactional_id,
                "ended slot dropped without release: it stays busy for the pool's life"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_transitions() {
        use SlotEvent as E;
        use SlotState as S;
        let states = [S::Free, S::Open, S::Prepared, S::Ended];
        let events = [E::Begin, E::Prepare, E::Discard, E::End, E::Release];
        // Every pair not listed is refused.
        let allowed: &[(S, E, S)] = &[
            (S::Free, E::Begin, S::Open),
            (S::Open, E::Prepare, S::Prepared),
            (S::Open, E::Discard, S::Free),
            (S::Prepared, E::End, S::Ended),
            (S::Ended, E::Release, S::Free),
        ];
        for from in states {
            for event in events {
                let want = allowed
                    .iter()
                    .find(|(f, e, _)| *f == from && *e == event)
                    .map(|(_, _, to)| *to);
                match (next(from, event), want) {
                    (Ok(got), Some(to)) => assert_eq!(got, to, "{from:?} + {event:?}"),
                    (Err(e), None) => {
                        assert_eq!(e.class(), crate::client::ErrorClass::Fatal, "{e}");
                        let msg = e.to_string();
                        assert!(msg.contains(&format!("{event:?}")), "{msg}");
                        assert!(msg.contains(&format!("{from:?}")), "{msg}");
                    }
                    (got, want) => {
                        panic!("{from:?} + {event:?}: got {got:?}, want {want:?}")
                    }
                }
            }
        }
    }

    /// A prepared slot is never reused and never freed without being ended first.
    #[test]
    fn a_prepared_slot_can_only_be_ended() {
        for event in [
            SlotEvent::Begin,
            SlotEvent::Prepare,
            SlotEvent::Discard,
            SlotEvent::Release,
        ] {
            assert!(next(SlotState::Prepared, event).is_err(), "{event:?}");
        }
    }

    #[test]
    fn begin_takes_the_lowest_free_slot() {
        use SlotState as S;
        let table: &[(&[S], Option<usize>)] = &[
            (&[], None),
            (&[S::Free, S::Free, S::Free], Some(0)),
            (&[S::Prepared, S::Free, S::Free], Some(1)),
            (&[S::Ended, S::Prepared, S::Free], Some(2)),
            (&[S::Open, S::Prepared, S::Ended], None),
            (&[S::Ended, S::Free, S::Open], Some(1)),
        ];
        for (states, want) in table {
            assert_eq!(lowest_free(states.iter().copied()), *want, "{states:?}");
        }
    }

    #[test]
    fn counts_per_state() {
        use SlotState as S;
        assert_eq!(
            PoolCounts::of([S::Free, S::Open, S::Prepared, S::Prepared, S::Ended]),
            PoolCounts {
                free: 1,
                open: 1,
                prepared: 2,
                ended: 1
            }
        );
    }

    #[test]
    fn the_exhaustion_error_says_what_is_busy_and_what_to_do() {
        let e = Error::PoolExhausted {
            prefix: "rides-sink-0".into(),
            size: 3,
            open: 1,
            prepared: 1,
            ended: 1,
        }
        .to_string();
        assert!(
            e.contains("all 3 transactional ids of pool 'rides-sink-0' are busy"),
            "{e}"
        );
        assert!(e.contains("1 open, 1 prepared, 1 ended"), "{e}");
        assert!(e.contains("release"), "{e}");
    }

    /// The engine drives slots from spawned tasks: every future of the pool must be Send.
    #[allow(dead_code)]
    fn futures_are_send(pool: TransactionalPool, open: OpenTransaction, prepared: PreparedSlot) {
        fn is_send<T: Send>(_: &T) {}
        is_send(&pool.begin());
        is_send(&open.prepare());
        is_send(&prepared.resume(TxnEnd::Commit));
    }

    fn committable(tv: i16, epoch: i16) -> PreparedTransaction {
        PreparedTransaction {
            transactional_id: "p-0".into(),
            producer_id: 7,
            producer_epoch: epoch,
            transaction_version: tv,
            transaction_start_ms: 1,
            empty: false,
        }
    }

    #[test]
    fn what_the_coordinator_shows_after_a_resume() {
        let expect = |epoch| Reset::Expect {
            producer_id: 7,
            epoch,
        };
        let not = ResumeOutcome::NotCommitted {
            reason: "aborted".into(),
        };
        let superseded = ResumeOutcome::Superseded {
            reason: "later".into(),
        };
        let table: &[(i16, i16, ResumeOutcome, Option<Reset>)] = &[
            // Our EndTxn: classic keeps the epoch, KIP-890 bumps it.
            (1, 5, ResumeOutcome::Completed, Some(expect(5))),
            (2, 5, ResumeOutcome::Completed, Some(expect(6))),
            (1, 5, ResumeOutcome::AlreadyCommitted, Some(expect(5))),
            (2, 5, ResumeOutcome::AlreadyCommitted, Some(expect(6))),
            // No EndTxn was sent.
            (1, 5, ResumeOutcome::NothingToCommit, Some(expect(5))),
            (2, 5, ResumeOutcome::NothingToCommit, Some(expect(5))),
            // The last epoch moves the id to a new producer id (KIP-890).
            (2, i16::MAX - 1, ResumeOutcome::Completed, None),
            (
                1,
                i16::MAX - 1,
                ResumeOutcome::Completed,
                Some(expect(i16::MAX - 1)),
            ),
            // Someone else ended it.
            (1, 5, not.clone(), None),
            (2, 5, not, None),
            (1, 5, superseded.clone(), None),
            (2, 5, superseded, None),
        ];
        for (tv, epoch, outcome, want) in table {
            let got = after_resume(&committable(*tv, *epoch), outcome);
            match want {
                Some(w) => assert_eq!(&got, w, "tv {tv} epoch {epoch} {outcome:?}"),
                None => assert!(
                    matches!(got, Reset::Unknown(_)),
                    "tv {tv} epoch {epoch} {outcome:?}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn a_slot_is_taken_back_only_when_nobody_else_touched_its_id() {
        let ours = Reset::Expect {
            producer_id: 7,
            epoch: 5,
        };
        let unknown = Reset::Unknown("an end failed");
        // (what the pool expects, what the coordinator shows, may it take the id back)
        type Row<'a> = (&'a Reset, Option<(i64, i16)>, bool);
        let table: &[Row] = &[
            (&ours, Some((7, 5)), true),
            // A newer incarnation's InitProducerId bumped the epoch.
            (&ours, Some((7, 6)), false),
            // Another producer id (a clash, or the id expired and was reused).
            (&ours, Some((8, 5)), false),
            (&ours, Some((7, 4)), false),
            // The coordinator forgot the id: nobody holds it.
            (&ours, None, true),
            (&unknown, None, true),
            (&unknown, Some((7, 5)), false),
        ];
        for (reset, shown, ok) in table {
            let got = may_take_back(reset, *shown);
            assert_eq!(got.is_ok(), *ok, "{reset:?} {shown:?}: {got:?}");
            if let Err(why) = got {
                assert!(why.contains("producer id"), "{why}");
            }
        }
    }

    /// A pending reset is cleared only by a successful take-back. When the take-back itself
    /// fails (say DescribeTransactions timed out), the dropped handle still holds the old
    /// producer: its identity must not replace what the coordinator is expected to show.
    #[test]
    fn a_pending_reset_stands_until_a_take_back_clears_it() {
        let after_resume = Reset::Expect {
            producer_id: 7,
            epoch: 6,
        };
        let old_producer = Reset::Expect {
            producer_id: 7,
            epoch: 5,
        };
        let unknown = Reset::Unknown("an end failed");
        let table: &[(Option<Reset>, Option<Reset>, Option<Reset>)] = &[
            (None, None, None),
            (None, Some(old_producer.clone()), Some(old_producer.clone())),
            (
                Some(after_resume.clone()),
                Some(old_producer.clone()),
                Some(after_resume.clone()),
            ),
            (
                Some(unknown.clone()),
                Some(old_producer.clone()),
                Some(unknown),
            ),
            (Some(after_resume.clone()), None, Some(after_resume)),
        ];
        for (current, new, want) in table {
            assert_eq!(
                &pending_reset(current.clone(), new.clone()),
                want,
                "{current:?} then {new:?}"
            );
        }
    }

    #[test]
    fn ids_are_prefix_dash_slot() {
        assert_eq!(slot_id("job-sink-2", 0), "job-sink-2-0");
        assert_eq!(slot_id("p", 11), "p-11");
    }
}
