//! [`KafkaWriter`]: a sink task's writer, its two-phase commit per checkpoint, and its recovery.

use super::decide::{
    abort_cause, after_failure, commit_deadline_ms, is_lingering, resolution, AbortCause,
    AfterFailure, Resolution,
};
use super::fence::fence_ongoing;
use super::{Delivery, SinkCommit, SinkCommittable, SinkConfig, SinkError};
use crate::client::pool::{
    EndFailed, EndedSlot, OpenTransaction, PoolCounts, PreparedSlot, TransactionalPool,
};
use crate::client::transactions::{
    resume_transaction, ResumeOutcome, TxnEnd,
};
use crate::client::{Cluster, DeliveryFuture, Error, Op, Producer, ProducerRecord};
use crate::client::ErrorCode;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// The wall clock as the sink's decisions take it (signed, as the transactions' start times).
fn now_ms() -> i64 {
    i64::try_from(crate::engine::clock::now_ms()).unwrap_or(i64::MAX)
}

/// One transaction [`KafkaWriter::on_checkpoint_durable`] resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointCommit {
    /// The checkpoint.
    pub checkpoint: u64,
    /// Its transactional id.
    pub transactional_id: String,
    /// How it ended.
    pub outcome: SinkCommit,
}

/// One restored committable [`KafkaWriter::resume`] resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredCommittable {
    /// The checkpoint.
    pub checkpoint: u64,
    /// Its transactional id.
    pub transactional_id: String,
    /// What `resume_transaction` found and did.
    pub outcome: ResumeOutcome,
}

/// What a recovery ([`KafkaWriter::resume`], then [`Resumed::start`]) did, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Step 1: the restored committables, in checkpoint order.
    pub resumed: Vec<RecoveredCommittable>,
    /// Step 3: Ongoing transactions of this task's ids beyond the pool, aborted by fencing.
    pub lingering_aborted: Vec<String>,
}

/// Counters for metrics (wired later).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkMetrics {
    /// Records written.
    pub records: u64,
    /// Transactions committed by this sink (restored ones included).
    pub commits: u64,
    /// Commits that found the transaction committed already.
    pub already_committed: u64,
    /// Checkpoints with no records (nothing committed).
    pub empty_checkpoints: u64,
    /// `write` calls answered with back-pressure.
    pub backpressure: u64,
    /// Lingering transactions aborted at recovery.
    pub lingering_aborted: u64,
}

/// What [`KafkaWriter::write`] did with a record.
#[derive(Debug)]
#[must_use = "a record handed back by back-pressure must be written again after release()"]
pub enum Written {
    /// Sent (into the open transaction, or to the plain producer).
    Sent,
    /// Every transactional id of the task is busy: nothing was sent and the record is handed
    /// back. Stop taking input until [`KafkaWriter::release`] frees a slot, then write it again.
    Backpressure {
        /// The record, unsent.
        record: Box<ProducerRecord>,
        /// The pool's state, for the log.
        reason: String,
    },
}

struct Open {
    tx: OpenTransaction,
    began: Instant,
    began_ms: i64,
}

struct Prepared {
    slot: PreparedSlot,
    began: Instant,
    began_ms: i64,
}

struct ExactlyOnce {
    pool: TransactionalPool,
    open: Option<Open>,
    /// Checkpoint → its prepared transaction (at most one per checkpoint per task).
    prepared: BTreeMap<u64, Prepared>,
    /// Checkpoint → its ended slot, until the resolution is durable (`release`).
    ended: BTreeMap<u64, EndedSlot>,
}

enum Mode {
    ExactlyOnce(Box<ExactlyOnce>),
    AtLeastOnce {
        producer: Producer,
        pending: Vec<DeliveryFuture>,
    },
    None {
        producer: Producer,
    },
}

/// One sink task's Kafka writer. See the module docs for the life of a checkpoint through it.
///
/// Driven by one task (`&mut self`); a test drives it without a runtime.
pub struct KafkaWriter {
    config: SinkConfig,
    cluster: Arc<Cluster>,
    mode: Mode,
    last_barrier: Option<u64>,
    metrics: SinkMetrics,
}

impl std::fmt::Debug for KafkaWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaWriter")
            .field("delivery", &self.config.delivery)
            .field("prefix", &self.config.pool_prefix())
            .field("last_barrier", &self.last_barrier)
            .field("metrics", &self.metrics)
            .finish()
    }
}

fn check_config(config: &SinkConfig) -> Result<(), SinkError> {
    if let Some(id) = &config.producer.transactional_id {
        return Err(SinkError::Config(format!(
            "transactional.id='{id}' must not be set: the sink gives its transactions the ids '<transactional id prefix>-<task>-<slot>'; set the prefix instead"
        )));
    }
    if config.delivery == Delivery::ExactlyOnce {
        if config.transactional_id_prefix.is_empty() {
            return Err(SinkError::Config(
                "exactly-once delivery needs a transactional id prefix, unique per job and cluster (two jobs with one prefix fence each other)".into(),
            ));
        }
        if config.pool_size == 0 {
            return Err(SinkError::Config(
                "the transactional id pool needs at least one slot (3 for one checkpoint in flight)".into(),
            ));
        }
    }
    Ok(())
}

/// A sink task halfway through its recovery: every restored committable is resolved (step 1
/// of [`KafkaWriter::resume`]), nothing of the pool has been touched yet. The only way on is
/// [`Resumed::start`], and the caller must make the resolutions durable BEFORE it: start's
/// InitProducerId bumps every pool id's epoch, after which resuming the same committable again
/// (a crash before the resolutions were durable) finds the coordinator moved on and reports a
/// lost transaction or a prefix clash although it committed.
#[derive(Debug)]
#[must_use = "a resumed sink must be started (after its resolutions are durable) to write"]
pub struct Resumed {
    config: SinkConfig,
    cluster: Arc<Cluster>,
    metrics: SinkMetrics,
    report: RecoveryReport,
}

impl Resumed {
    /// What step 1 resolved, in checkpoint order: persist these resolutions (fsynced) before
    /// calling [`Self::start`].
    pub fn resumed(&self) -> &[RecoveredCommittable] {
        &self.report.resumed
    }

    /// Steps 2 and 3 of the recovery, to call only once the resolutions of
    /// [`Self::resumed`] are durable:
    /// 2. the pool's init (exactly-once) runs InitProducerId on every id `<prefix>-<task>-<slot>`,
    ///    fencing the crashed incarnation and aborting what it left open (its records after
    ///    the last barrier, which would otherwise hold read_committed readers at the LSO).
    /// 3. ListTransactions: Ongoing transactions of this task's ids beyond the pool (an
    ///    earlier run with a larger pool) are aborted by fencing their ids.
    ///
    /// # Errors
    /// [`SinkError::Client`] when the pool, the producer or the listing cannot be set up.
    pub async fn start(self) -> Result<(KafkaWriter, RecoveryReport), SinkError> {
        let Resumed {
            config,
            cluster,
            mut metrics,
            mut report,
        } = self;
        // 2. Then the pool (or the plain producer).
        let mode = match config.delivery {
            Delivery::ExactlyOnce => {
                let pool = TransactionalPool::init(
                    cluster.clone(),
                    config.producer.clone(),
                    config.pool_prefix(),
                    config.pool_size,
                )
                .await
                .map_err(|e| SinkError::client("initializing the transactional id pool", e))?;
                Mode::ExactlyOnce(Box::new(ExactlyOnce {
                    pool,
                    open: None,
                    prepared: BTreeMap::new(),
                    ended: BTreeMap::new(),
                }))
            }
            delivery => {
                let mut producer_config = config.producer.clone();
                producer_config.enable_idempotence = true;
                let producer = Producer::with_cluster(producer_config, cluster.clone())
                    .await
                    .map_err(|e| SinkError::client("creating the sink's producer", e))?;
                if delivery == Delivery::AtLeastOnce {
                    Mode::AtLeastOnce {
                        producer,
                        pending: Vec::new(),
                    }
                } else {
                    Mode::None { producer }
                }
            }
        };

        // 3. Then the ids beyond the pool. (Without exactly-once now, every id of the task is
        // "beyond the pool": a job switched from exactly-once leaves none open.)
        if !config.transactional_id_prefix.is_empty() {
            let size = match config.delivery {
                Delivery::ExactlyOnce => config.pool_size,
                _ => 0,
            };
            report.lingering_aborted = abort_lingering(&cluster, &config, size).await?;
            metrics.lingering_aborted += report.lingering_aborted.len() as u64;
        }

        Ok((
            KafkaWriter {
                config,
                cluster,
                mode,
                last_barrier: None,
                metrics,
            },
            report,
        ))
    }
}

impl KafkaWriter {
    /// Step 1 of a sink task's recovery: every restored committable (of the checkpoint being
    /// restored: unresolved ones of every task, or this task's) is resumed with
    /// `resume_transaction(commit)`, in checkpoint order, retried until its deadline.
    /// Completed, AlreadyCommitted and NothingToCommit are fine; NotCommitted is data loss,
    /// Superseded a prefix clash. It must come before the pool's init ([`Resumed::start`]),
    /// whose InitProducerId would *abort* a prepared transaction of a durable checkpoint; and
    /// the caller makes the resolutions durable between the two (see [`Resumed`]).
    ///
    /// With a fresh start `restored` is empty.
    ///
    /// # Errors
    /// [`SinkError::DataLoss`], [`SinkError::PrefixClash`],
    /// [`SinkError::CommitDeadline`], [`SinkError::Config`], [`SinkError::Client`].
    pub async fn resume(
        config: SinkConfig,
        cluster: Arc<Cluster>,
        restored: &[SinkCommittable],
    ) -> Result<Resumed, SinkError> {
        check_config(&config)?;
        let mut metrics = SinkMetrics::default();
        let mut report = RecoveryReport::default();

        // 1. Commit first.
        let mut restored: Vec<&SinkCommittable> = restored.iter().collect();
        restored.sort_by_key(|c| c.checkpoint);
        for c in restored {
            let outcome = resume_restored(&cluster, &config, c).await?;
            let id = c.transaction.transactional_id.clone();
            // Known start only: an unknown one cannot tell a fencing from a timeout.
            let start = Some(c.transaction.transaction_start_ms).filter(|s| *s >= 0);
            let label = format!("restored checkpoint {}", c.checkpoint);
            settle(
                &config,
                c.checkpoint,
                &label,
                &id,
                start,
                &outcome,
                &mut metrics,
            )?;
            info!(checkpoint = c.checkpoint, transactional_id = %id, ?outcome, "restored committable resolved");
            report.resumed.push(RecoveredCommittable {
                checkpoint: c.checkpoint,
                transactional_id: id,
                outcome,
            });
        }

        Ok(Resumed {
            config,
            cluster,
            metrics,
            report,
        })
    }

    /// [`Self::resume`] then [`Resumed::start`] in one call, with NO durable step between:
    /// only for callers that keep no resolutions (a fresh start with nothing restored, tests).
    /// A caller with durable state must call the two itself and persist the resolutions in
    /// between, or a crash after the pool's init makes the next restart fail on a committable
    /// that did commit.
    ///
    /// # Errors
    /// Those of [`Self::resume`] and [`Resumed::start`].
    pub async fn recover(
        config: SinkConfig,
        cluster: Arc<Cluster>,
        restored: &[SinkCommittable],
    ) -> Result<(KafkaWriter, RecoveryReport), SinkError> {
        Self::resume(config, cluster, restored).await?.start().await
    }

    /// Writes a record: into the open transaction (exactly-once; one is begun in the lowest
    /// free slot when none is open), or to the idempotent producer.
    ///
    /// # Errors
    /// [`SinkError::PrefixClash`] when the pool finds another producer on its id;
    /// [`SinkError::Client`] when the record cannot be sent (the checkpoint then cannot
    /// complete: its barrier's prepare fails too).
    pub async fn write(&mut self, record: ProducerRecord) -> Result<Written, SinkError> {
        let prefix = self.config.pool_prefix();
        let written = match &mut self.mode {
            Mode::ExactlyOnce(eo) => {
                let open = match eo.open.take() {
                    Some(open) => open,
                    None => match eo.pool.begin().await {
                        Ok(tx) => Open {
                            tx,
                            began: Instant::now(),
                            began_ms: now_ms(),
                        },
                        Err(Error::PoolExhausted { .. }) => {
                            self.metrics.backpressure += 1;
                            let c = eo.pool.counts();
                            return Ok(Written::Backpressure {
                                record: Box::new(record),
                                reason: format!(
                                    "all {} transactional ids of '{prefix}' are busy ({} open, {} prepared, {} ended and not released)",
                                    eo.pool.transactional_ids().len(),
                                    c.open,
                                    c.prepared,
                                    c.ended,
                                ),
                            });
                        }
                        Err(Error::Fenced(detail)) => {
                            return Err(SinkError::PrefixClash { prefix, detail })
                        }
                        Err(e) => return Err(SinkError::client("beginning a transaction", e)),
                    },
                };
                // The delivery future is not needed: prepare() fails if any record failed.
                let sent = open.tx.send(record).await;
                let since_ms = open.began_ms;
                eo.open = Some(open);
                if let Err(e) = sent {
                    return Err(self.fenced_or(
                        since_ms,
                        e,
                        "sending a record in the open transaction",
                    ));
                }
                Written::Sent
            }
            Mode::AtLeastOnce { producer, pending } => {
                let f = producer
                    .send(record)
                    .await
                    .map_err(|e| SinkError::client("sending a record", e))?;
                pending.push(f);
                Written::Sent
            }
            Mode::None { producer } => {
                // Fire and forget: nothing waits for delivery.
                drop(
                    producer
                        .send(record)
                        .await
                        .map_err(|e| SinkError::client("sending a record", e))?,
                );
                Written::Sent
            }
        };
        self.metrics.records += 1;
        Ok(written)
    }

    /// An error of the open transaction: a fencing found before the transaction could have
    /// timed out is another producer on our id (see `decide::abort_cause`); anything else is
    /// the client's error.
    fn fenced_or(&self, since_ms: i64, e: Error, what: &str) -> SinkError {
        let fenced = matches!(e, Error::Fenced(_))
            || matches!(e.code(), Some(c) if c == ErrorCode::PRODUCER_FENCED || c == ErrorCode::INVALID_PRODUCER_EPOCH);
        if fenced
            && abort_cause(
                since_ms,
                now_ms(),
                self.config.producer.transaction_timeout,
                self.config.commit_margin,
            ) == AbortCause::Fenced
        {
            return SinkError::PrefixClash {
                prefix: self.config.pool_prefix(),
                detail: format!("{what}: {e}"),
            };
        }
        SinkError::client(what.to_owned(), e)
    }

    /// Barrier N reached the sink: flush and prepare the open transaction and hand back its
    /// committable, to be saved in checkpoint N. A checkpoint with no records gives `None` and
    /// commits nothing. At-least-once flushes and waits for every record's acknowledgement;
    /// none does nothing.
    ///
    /// # Errors
    /// [`SinkError::Misuse`] for a barrier not after the previous one; [`SinkError::Client`]
    /// when a record failed or the transaction cannot be prepared (decline checkpoint N: the
    /// transaction is aborted before its slot is reused); [`SinkError::PrefixClash`].
    pub async fn on_barrier(&mut self, n: u64) -> Result<Option<SinkCommittable>, SinkError> {
        if let Some(last) = self.last_barrier {
            if n <= last {
                return Err(SinkError::Misuse(format!(
                    "barrier {n} after barrier {last}: checkpoint ids must increase"
                )));
            }
        }
        self.last_barrier = Some(n);
        match &mut self.mode {
            Mode::ExactlyOnce(eo) => {
                let Some(open) = eo.open.take() else {
                    self.metrics.empty_checkpoints += 1;
                    return Ok(None);
                };
                let (began, began_ms) = (open.began, open.began_ms);
                let slot = match open.tx.prepare().await {
                    Ok(slot) => slot,
                    Err(e) => {
                        let what = format!("preparing checkpoint {n}'s transaction");
                        return Err(self.fenced_or(began_ms, e, &what));
                    }
                };
                if slot.committable().empty {
                    // Nothing reached the broker (every send failed before it): nothing to
                    // commit, and no checkpoint lists it, so the slot is free again at once.
                    self.metrics.empty_checkpoints += 1;
                    slot.commit()
                        .await
                        .map_err(|e| SinkError::client("ending an empty transaction", e.into()))?
                        .release();
                    return Ok(None);
                }
                let committable = SinkCommittable {
                    checkpoint: n,
                    transaction: slot.committable().clone(),
                };
                eo.prepared.insert(
                    n,
                    Prepared {
                        slot,
                        began,
                        began_ms,
                    },
                );
                Ok(Some(committable))
            }
            Mode::AtLeastOnce { producer, pending } => {
                producer
                    .flush()
                    .await
                    .map_err(|e| SinkError::client("flushing at a barrier", e))?;
                for f in pending.drain(..) {
                    f.await.map_err(|e| {
                        SinkError::client(
                            format!("a record of checkpoint {n} was not delivered"),
                            e,
                        )
                    })?;
                }
                Ok(None)
            }
            Mode::None { .. } => Ok(None),
        }
    }

    /// Checkpoint N is durable: commits the prepared transaction of every checkpoint ≤ N, in
    /// order, through its slot. A failed commit is asked again with `resume_transaction` (which
    /// decides from the coordinator's view, never sending a blind second EndTxn), retried with
    /// backoff until the transaction's deadline (start + transaction.timeout.ms − margin),
    /// never given up after a number of tries.
    ///
    /// # Errors
    /// [`SinkError::DataLoss`] when the transaction was aborted before the commit;
    /// [`SinkError::PrefixClash`] when a later transaction of the id
    /// exists, or the abort came before a timeout could have fired; [`SinkError::CommitDeadline`];
    /// [`SinkError::Client`] for errors retrying cannot help. Transactions of later checkpoints
    /// stay prepared.
    pub async fn on_checkpoint_durable(
        &mut self,
        n: u64,
    ) -> Result<Vec<CheckpointCommit>, SinkError> {
        let Mode::ExactlyOnce(eo) = &mut self.mode else {
            return Ok(Vec::new());
        };
        let mut done = Vec::new();
        let due: Vec<u64> = eo.prepared.range(..=n).map(|(k, _)| *k).collect();
        for ckpt in due {
            let Some(p) = eo.prepared.remove(&ckpt) else {
                continue;
            };
            let id = p.slot.committable().transactional_id.clone();
            let (outcome, ended) =
                commit_prepared(&self.config, ckpt, p, &mut self.metrics).await?;
            eo.ended.insert(ckpt, ended);
            done.push(CheckpointCommit {
                checkpoint: ckpt,
                transactional_id: id,
                outcome,
            });
        }
        Ok(done)
    }

    /// A durable checkpoint record no longer lists the committables of checkpoints ≤ N as
    /// unresolved: their slots may be reused. (Reusing one earlier would make resuming its
    /// committable after a crash answer Superseded.)
    pub fn release(&mut self, n: u64) {
        if let Mode::ExactlyOnce(eo) = &mut self.mode {
            let keep = eo.ended.split_off(&(n.saturating_add(1)));
            for (_, slot) in std::mem::replace(&mut eo.ended, keep) {
                slot.release();
            }
        }
    }

    /// How long the oldest transaction of this task that is not yet committed (open or
    /// prepared) has been running; zero when there is none. Alert long before it nears
    /// transaction.timeout.ms.
    pub fn oldest_open_transaction_age(&self) -> Duration {
        let Mode::ExactlyOnce(eo) = &self.mode else {
            return Duration::ZERO;
        };
        eo.open
            .iter()
            .map(|o| o.began)
            .chain(eo.prepared.values().map(|p| p.began))
            .min()
            .map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// When the oldest transaction of this task that is not yet committed (open or prepared)
    /// began, in wall-clock ms since the Unix epoch; `None` when there is none. A metric's age
    /// is computed from it at the scrape.
    pub fn oldest_open_transaction_start_ms(&self) -> Option<i64> {
        let Mode::ExactlyOnce(eo) = &self.mode else {
            return None;
        };
        eo.open
            .iter()
            .map(|o| o.began_ms)
            .chain(eo.prepared.values().map(|p| p.began_ms))
            .min()
    }

    /// The committables prepared and not yet committed, in checkpoint order.
    pub fn pending_committables(&self) -> Vec<SinkCommittable> {
        let Mode::ExactlyOnce(eo) = &self.mode else {
            return Vec::new();
        };
        eo.prepared
            .iter()
            .map(|(n, p)| SinkCommittable {
                checkpoint: *n,
                transaction: p.slot.committable().clone(),
            })
            .collect()
    }

    /// The pool's slot counts (exactly-once), for metrics.
    pub fn pool_counts(&self) -> Option<PoolCounts> {
        match &self.mode {
            Mode::ExactlyOnce(eo) => Some(eo.pool.counts()),
            _ => None,
        }
    }

    /// The counters.
    pub fn metrics(&self) -> SinkMetrics {
        self.metrics
    }

    /// The settings.
    pub fn config(&self) -> &SinkConfig {
        &self.config
    }

    /// The broker pool.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }
}

fn data_loss(config: &SinkConfig, checkpoint: u64, id: &str, reason: String) -> SinkError {
    SinkError::DataLoss {
        checkpoint,
        transactional_id: id.to_owned(),
        reason,
        transaction_timeout_ms: config.producer.transaction_timeout.as_millis(),
        interval_ms: config.checkpoint_interval.as_millis(),
        checkpoint_timeout_ms: config.checkpoint_timeout.as_millis(),
    }
}

/// Step 1 of a recovery for one committable: `resume_transaction(commit)`, retried until its
/// deadline.
async fn resume_restored(
    cluster: &Cluster,
    config: &SinkConfig,
    c: &SinkCommittable,
) -> Result<ResumeOutcome, SinkError> {
    let t = &c.transaction;
    let deadline = commit_deadline_ms(
        t.transaction_start_ms,
        now_ms(),
        config.producer.transaction_timeout,
        config.commit_margin,
    );
    let mut attempt = 0u32;
    loop {
        let e = match resume_transaction(cluster, t, TxnEnd::Commit).await {
            Ok(outcome) => return Ok(outcome),
            Err(e) => e,
        };
        attempt += 1;
        match after_failure(e.class_in(Op::TxnCoordinator), attempt, now_ms(), deadline) {
            AfterFailure::RetryAfter(wait) => {
                warn!(checkpoint = c.checkpoint, transactional_id = %t.transactional_id, error = %e, ?wait, "resuming a restored committable failed; retrying");
                tokio::time::sleep(wait).await;
            }
            AfterFailure::DeadlinePassed => {
                return Err(SinkError::CommitDeadline {
                    checkpoint: c.checkpoint,
                    transactional_id: t.transactional_id.clone(),
                    transaction_timeout_ms: config.producer.transaction_timeout.as_millis(),
                    last_error: Box::new(e),
                })
            }
            AfterFailure::Fatal => {
                return Err(SinkError::client(
                    format!(
                        "resuming restored checkpoint {}'s transaction '{}'",
                        c.checkpoint, t.transactional_id
                    ),
                    e,
                ))
            }
        }
    }
}

/// Commits one prepared transaction: through its producer first (one EndTxn, and the producer
/// learns its next epoch); when that fails, through `PreparedSlot::resume(Commit)`, which asks
/// the coordinator what happened and answers with an outcome, retried until the deadline.
async fn commit_prepared(
    config: &SinkConfig,
    ckpt: u64,
    p: Prepared,
    metrics: &mut SinkMetrics,
) -> Result<(SinkCommit, EndedSlot), SinkError> {
    let c = p.slot.committable().clone();
    let id = c.transactional_id.clone();
    let timeout = config.producer.transaction_timeout;
    let deadline = commit_deadline_ms(
        c.transaction_start_ms,
        p.began_ms,
        timeout,
        config.commit_margin,
    );
    let mut failed: EndFailed = match p.slot.commit().await {
        Ok(ended) => {
            metrics.commits += 1;
            return Ok((SinkCommit::Committed, ended));
        }
        Err(failed) => failed,
    };
    warn!(checkpoint = ckpt, transactional_id = %id, error = %failed.error(), "commit failed; asking the coordinator (resume_transaction)");
    let mut attempt = 0u32;
    loop {
        let (error, slot) = failed.into_parts();
        // A fencing or timeout error is answered by the resume's outcome; only the others
        // decide whether to wait before asking.
        if attempt > 0 {
            match after_failure(
                error.class_in(Op::TxnCoordinator),
                attempt,
                now_ms(),
                deadline,
            ) {
                AfterFailure::RetryAfter(wait) => {
                    warn!(checkpoint = ckpt, transactional_id = %id, error = %error, ?wait, "commit failed; retrying until the transaction's deadline");
                    tokio::time::sleep(wait).await;
                }
                AfterFailure::DeadlinePassed => {
                    return Err(SinkError::CommitDeadline {
                        checkpoint: ckpt,
                        transactional_id: id,
                        transaction_timeout_ms: timeout.as_millis(),
                        last_error: Box::new(error),
                    })
                }
                AfterFailure::Fatal => {
                    return Err(SinkError::client(
                        format!("committing checkpoint {ckpt}'s transaction '{id}'"),
                        error,
                    ))
                }
            }
        }
        attempt += 1;
        let (outcome, ended) = match slot.resume(TxnEnd::Commit).await {
            Ok(done) => done,
            Err(again) => {
                failed = again;
                continue;
            }
        };
        let start = if c.transaction_start_ms >= 0 {
            c.transaction_start_ms
        } else {
            p.began_ms
        };
        let label = format!("checkpoint {ckpt}");
        let outcome = settle(config, ckpt, &label, &id, Some(start), &outcome, metrics)?;
        return Ok((outcome, ended));
    }
}

/// What a resumed (or retried) commit's outcome means for the sink, the one rule for a
/// checkpoint's commit and a recovery's: committed (counted); lost — a prefix clash when the
/// coordinator aborted it before `transaction.timeout.ms` could expire from `start` (so another
/// producer did), else data loss; superseded — a prefix clash.
fn settle(
    config: &SinkConfig,
    ckpt: u64,
    label: &str,
    id: &str,
    start: Option<i64>,
    outcome: &ResumeOutcome,
    metrics: &mut SinkMetrics,
) -> Result<SinkCommit, SinkError> {
    match resolution(outcome) {
        Resolution::Committed => Ok(match outcome {
            ResumeOutcome::AlreadyCommitted => {
                metrics.already_committed += 1;
                SinkCommit::AlreadyCommitted
            }
            ResumeOutcome::Completed => {
                metrics.commits += 1;
                SinkCommit::Committed
            }
            _ => SinkCommit::Committed,
        }),
        Resolution::Lost(reason) => {
            let timeout = config.producer.transaction_timeout;
            if start.is_some_and(|s| {
                abort_cause(s, now_ms(), timeout, config.commit_margin) == AbortCause::Fenced
            }) {
                return Err(SinkError::PrefixClash {
                    prefix: config.pool_prefix(),
                    detail: format!(
                        "{label}'s transaction '{id}' was aborted before transaction.timeout.ms could expire, so by another producer (its records are lost): {reason}"
                    ),
                });
            }
            Err(data_loss(config, ckpt, id, reason))
        }
        Resolution::Clash(reason) => Err(SinkError::PrefixClash {
            prefix: config.pool_prefix(),
            detail: format!(
                "{label}'s transaction '{id}' was superseded by a later transaction of the id: {reason}"
            ),
        }),
    }
}

/// Step 3 of a recovery: Ongoing transactions of this task's ids beyond the pool, aborted by
/// fencing their ids.
async fn abort_lingering(
    cluster: &Arc<Cluster>,
    config: &SinkConfig,
    pool_size: usize,
) -> Result<Vec<String>, SinkError> {
    let prefix = config.pool_prefix();
    fence_ongoing(cluster, config.producer.transaction_timeout, |id| {
        is_lingering(id, &prefix, pool_size).then(|| "lingering transaction beyond the pool".into())
    })
    .await
}
