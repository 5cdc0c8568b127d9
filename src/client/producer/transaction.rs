//! The producer's transaction methods: init, begin, send offsets, prepare, commit, abort.
//!
//! A transaction's life (see docs/design/transaction.md), in phases of [`TxnPhase`]
//! (`transactions::phase`): `init_transactions` (InitProducerId with the transactional id:
//! fences older instances and aborts whatever they left open) → Ready → `begin_transaction`
//! (local; fixes the protocol version for this transaction) → InTransaction: records are sent;
//! under the classic protocol each new partition first joins with AddPartitionsToTxn, under
//! KIP-890 (transaction.version 2) the produce itself adds it → `commit_transaction` /
//! `abort_transaction`: flush, then EndTxn. Under transaction.version 2 EndTxn returns the
//! epoch for the next transaction. The requests themselves are in `transactions::requests`;
//! EndTxn and what the coordinator reports are in `transactions::resume` and
//! `transactions::describe`.
//!
//! Errors are classified by [`crate::client::classify`] with [`Op::TxnCoordinator`] /
//! [`Op::TxnProduce`]: retriable ones are retried within transaction.timeout.ms, abortable ones
//! doom the transaction (AbortableError: commit refuses, abort works), fatal ones (fencing)
//! doom the producer (FatalError).

use super::identity::Identity;
use super::{GroupMetadata, Inner, Producer};
use crate::client::error::{Error, ErrorClass, Op, Result};
use crate::client::metadata::TopicPartition;
use crate::client::transactions::phase::{TxnEvent, TxnPhase};
use crate::client::transactions::{
    add_offsets_to_txn, add_partitions_to_txn, describe, end_txn, init_transactional_id, judge,
    txn_offset_commit, EndOutcome, Judgement, PreparedTransaction, TxnEnd, TxnState,
};
use crate::protocol::ErrorCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, info_span, warn, Instrument};

fn no_transactional_id() -> Error {
    Error::Usage(
        "transactions need transactional.id; set it in the ProducerConfig to use them".into(),
    )
}

/// What a call inside an open transaction needs of it.
struct OpenView {
    id: String,
    identity: Identity,
    tv2: bool,
    started: bool,
}

/// What ending a transaction needs to know, read once everything it sent has settled.
struct Ending {
    id: String,
    identity: Identity,
    tv2: bool,
    /// Something may have reached the broker: the coordinator must end the transaction.
    started: bool,
    began: Instant,
    /// The broker stopped accepting our epoch: re-initialize instead of EndTxn.
    reinit: bool,
    /// A record or request of the transaction failed.
    failed: bool,
}

impl Producer {
    fn txn_id(&self) -> Result<String> {
        self.inner
            .lock()
            .txn
            .as_ref()
            .map(|t| t.transactional_id.clone())
            .ok_or_else(no_transactional_id)
    }

    /// Moves the transaction phase (see `transactions::phase`), or says what to call instead.
    fn step(&self, event: TxnEvent) -> Result<()> {
        self.inner
            .lock()
            .txn
            .as_mut()
            .ok_or_else(no_transactional_id)?
            .step(event)
    }

    /// Checks that a transaction is open and not doomed, for `what`, and returns what the call
    /// needs of it.
    fn open_transaction(&self, what: &'static str) -> Result<OpenView> {
        let mut acc = self.inner.lock();
        let identity = acc.identity;
        let t = acc.txn.as_mut().ok_or_else(no_transactional_id)?;
        t.step(TxnEvent::Use(what))?;
        let (Some(open), Some(identity)) = (t.phase.open(), identity) else {
            return Err(Error::Internal(format!(
                "{what}: phase {} without an open transaction or a producer id",
                t.phase.name()
            )));
        };
        Ok(OpenView {
            id: t.transactional_id.clone(),
            identity,
            tv2: open.tv2,
            started: open.started,
        })
    }

    /// Records an error in the transaction phase according to its class: abortable errors
    /// doom the transaction, fatal ones the producer. `reinit`: the broker no longer accepts
    /// our epoch for the transaction, the abort must re-initialize.
    fn note_error<T>(&self, result: Result<T>, reinit: bool) -> Result<T> {
        if let Err(e) = &result {
            if let Some(t) = self.inner.lock().txn.as_mut() {
                t.fail(e.clone(), Op::TxnCoordinator, reinit);
            }
        }
        result
    }

    /// Registers the transactional id with its coordinator and gets the producer id and epoch.
    /// Fences any older producer with the same transactional id and aborts what it left open.
    ///
    /// # Errors
    /// A fatal error naming both settings when transaction.timeout.ms exceeds the broker's
    /// transaction.max.timeout.ms; fatal authorization errors; [`Error::Timeout`];
    /// [`Error::Usage`] while a transaction is open.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{Producer, ProducerConfig, ProducerRecord};
    /// let p = Producer::new(ProducerConfig::from_properties([("transactional.id", "rides-cleaner-0")])?).await?;
    /// p.init_transactions().await?;
    /// p.begin_transaction()?;
    /// p.send(ProducerRecord::new("clean-rides", "ride")).await?;
    /// p.commit_transaction().await?;
    /// # Ok(()) }
    /// ```
    pub async fn init_transactions(&self) -> Result<()> {
        let id = self.txn_id()?;
        self.step(TxnEvent::InitStart)?;
        let inner = &self.inner;
        let timeout = inner.config.transaction_timeout;
        let identity = match init_transactional_id(&inner.cluster, &id, timeout, None).await {
            Ok(identity) => identity,
            Err(e) => {
                self.step(TxnEvent::InitFailed)?;
                return Err(e);
            }
        };
        let mut acc = inner.lock();
        acc.reset_sequences(identity);
        acc.txn
            .as_mut()
            .ok_or_else(no_transactional_id)?
            .step(TxnEvent::InitDone)
    }

    /// Starts a transaction (no request is sent).
    ///
    /// # Errors
    /// [`Error::Usage`] when a transaction is open or init_transactions was not called; the
    /// producer's fatal error once it has one.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(producer: onceflow::client::Producer) -> onceflow::client::Result<()> {
    /// use onceflow::client::ProducerRecord;
    /// // After init_transactions(), once; then one transaction after the other.
    /// producer.begin_transaction()?;
    /// producer.send(ProducerRecord::new("clean-rides", "ride 1")).await?;
    /// producer.send(ProducerRecord::new("clean-rides", "ride 2")).await?;
    /// producer.commit_transaction().await?; // both visible to read_committed, or neither
    /// # Ok(()) }
    /// ```
    pub fn begin_transaction(&self) -> Result<()> {
        let tv2 = self.inner.cluster.transaction_version_2();
        let mut acc = self.inner.lock();
        let t = acc.txn.as_mut().ok_or_else(no_transactional_id)?;
        t.step(TxnEvent::Begin {
            tv2,
            now: Instant::now(),
        })?;
        info!(transactional_id = %t.transactional_id, tv2, "transaction begun");
        Ok(())
    }

    /// Adds consumed offsets to the transaction: they are committed for the group if and only
    /// if the transaction commits (KIP-447).
    ///
    /// # Errors
    /// Abortable errors (e.g. ILLEGAL_GENERATION after a rebalance) doom the transaction; fatal
    /// ones (fencing) the producer.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(
    /// #     producer: onceflow::client::Producer,
    /// #     mut consumer: onceflow::client::group::GroupConsumer,
    /// # ) -> onceflow::client::Result<()> {
    /// use onceflow::client::ProducerRecord;
    /// // Consume, transform, produce: the output and the input's offsets commit together.
    /// let records = consumer.poll(std::time::Duration::from_secs(1)).await?;
    /// producer.begin_transaction()?;
    /// for r in &records {
    ///     let cleaned = r.value.clone().unwrap_or_default();
    ///     producer.send(ProducerRecord::new("clean-rides", cleaned)).await?;
    /// }
    /// producer.send_offsets_to_transaction(&consumer.positions(), &consumer.group_metadata()).await?;
    /// producer.commit_transaction().await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, i64)],
        group: &GroupMetadata,
    ) -> Result<()> {
        let txn = self.open_transaction("send_offsets_to_transaction()")?;
        let inner = &self.inner;
        let timeout = inner.config.transaction_timeout;
        let result = async {
            if !txn.tv2 {
                add_offsets_to_txn(
                    &inner.cluster,
                    &txn.id,
                    txn.identity,
                    &group.group_id,
                    timeout,
                )
                .await?;
            }
            if let Some(open) = inner.lock().txn.as_mut().and_then(|t| t.phase.open_mut()) {
                open.started = true;
            }
            txn_offset_commit(
                &inner.cluster,
                &txn.id,
                txn.identity,
                txn.tv2,
                offsets,
                group,
                timeout,
            )
            .await
        }
        .instrument(info_span!("send_offsets_to_transaction", group = %group.group_id))
        .await;
        self.note_error(result.map_err(|e| fenced(&txn.id, e)), false)
    }

    /// Flushes the transaction's records and returns its committable, without committing:
    /// the first phase of a two-phase commit. Save the result durably, then commit with
    /// [`Producer::commit_transaction`] or, from any process,
    /// [`resume_transaction`](crate::client::transactions::resume_transaction).
    ///
    /// # Errors
    /// The transaction's abortable error if any record failed.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(producer: onceflow::client::Producer) -> onceflow::client::Result<()> {
    /// use onceflow::client::ProducerRecord;
    /// producer.begin_transaction()?;
    /// producer.send(ProducerRecord::new("clean-rides", "ride 1")).await?;
    /// let prepared = producer.prepare_commit().await?;
    /// // Save the committable durably (here as JSON) before committing: if this process
    /// // dies now, another one finishes the transaction with `resume_transaction`.
    /// let saved = serde_json::to_string(&prepared).expect("serializable");
    /// std::fs::write("checkpoint-17.json", saved).expect("saved");
    /// producer.commit_transaction().await?;
    /// # Ok(()) }
    /// ```
    pub async fn prepare_commit(&self) -> Result<PreparedTransaction> {
        self.step(TxnEvent::Use("prepare_commit()"))?;
        self.flush().await?;
        let txn = self.open_transaction("prepare_commit()")?;
        let identity = txn.identity;
        let transaction_version = if txn.tv2 { 2 } else { 1 };
        if !txn.started {
            // Nothing reached the broker: there is nothing to commit, and the coordinator has
            // no transaction to tell apart from the next one (which will have the same
            // producer id and epoch). The committable says so, and resuming it does nothing.
            return Ok(PreparedTransaction {
                transactional_id: txn.id,
                producer_id: identity.producer_id,
                producer_epoch: identity.epoch,
                transaction_version,
                transaction_start_ms: -1,
                empty: true,
            });
        }
        // The coordinator's start time identifies this transaction among later ones.
        let d = describe(&self.inner.cluster, &txn.id).await?;
        let Some(d) = d.filter(|d| {
            d.state == TxnState::Ongoing
                && d.producer_id == identity.producer_id
                && d.producer_epoch == identity.epoch
        }) else {
            // Everything was acknowledged, yet the coordinator shows no open transaction of
            // ours: it was aborted (transaction.timeout.ms) or fenced. A committable for it
            // could never be committed.
            let e = Error::Fenced(format!(
                "transaction '{}' can no longer be committed: the coordinator shows no open transaction of producer id {} epoch {}; it timed out (transaction.timeout.ms) or was fenced",
                txn.id, identity.producer_id, identity.epoch
            ));
            return self.note_error(Err(e), false);
        };
        Ok(PreparedTransaction {
            transactional_id: txn.id,
            producer_id: identity.producer_id,
            producer_epoch: identity.epoch,
            transaction_version,
            transaction_start_ms: d.start_time_ms.unwrap_or(-1),
            empty: false,
        })
    }

    /// Flushes and commits the transaction.
    ///
    /// # Errors
    /// [`Error::TransactionAbortable`] when a record or request of the transaction failed
    /// (the caller must then abort), or a fatal error (fenced, or aborted by the coordinator
    /// after transaction.timeout.ms at transaction.version 1).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(producer: onceflow::client::Producer) -> onceflow::client::Result<()> {
    /// use onceflow::client::ErrorClass;
    /// match producer.commit_transaction().await {
    ///     Ok(()) => {}
    ///     // A record or request failed: abort, then redo the work in a new transaction.
    ///     Err(e) if e.class() == ErrorClass::Abortable => producer.abort_transaction().await?,
    ///     // Fenced or otherwise fatal: this producer is done.
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn commit_transaction(&self) -> Result<()> {
        self.end_transaction(TxnEnd::Commit).await
    }

    /// Drops what is not sent yet, waits for what is in flight, and aborts the transaction.
    ///
    /// # Errors
    /// Fatal errors only (fencing); abortable ones are what abort is for.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(
    /// #     producer: onceflow::client::Producer,
    /// #     mut consumer: onceflow::client::group::GroupConsumer,
    /// # ) -> onceflow::client::Result<()> {
    /// use onceflow::client::ProducerRecord;
    /// producer.begin_transaction()?;
    /// if let Err(e) = producer.send(ProducerRecord::new("clean-rides", "ride")).await {
    ///     eprintln!("aborting: {e}");
    ///     producer.abort_transaction().await?; // none of its records becomes visible
    ///     consumer.rewind_to_committed().await?; // read the input again
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn abort_transaction(&self) -> Result<()> {
        self.end_transaction(TxnEnd::Abort).await
    }

    async fn end_transaction(&self, end: TxnEnd) -> Result<()> {
        self.step(TxnEvent::EndStart(end))?;
        let result = self.end_transaction_steps(end).await;
        // Ended: ready for the next begin_transaction(). Not ended: the transaction is still
        // open (a refused commit is aborted next; a failed abort can be tried again).
        let step = self.step(match &result {
            Ok(()) => TxnEvent::EndDone,
            Err(e) => TxnEvent::EndFailed(e.clone()),
        });
        result.and(step)
    }

    /// The end of a transaction, step by step.
    async fn end_transaction_steps(&self, end: TxnEnd) -> Result<()> {
        if end == TxnEnd::Abort {
            self.drop_unsent();
        }
        self.settle_in_flight().await?;
        let mut ending = self.ending()?;
        // After INVALID_PRODUCER_EPOCH / UNKNOWN_PRODUCER_ID the coordinator would refuse
        // EndTxn at our epoch; the re-initialization below ends the transaction instead.
        if ending.started && (end.is_commit() || !ending.reinit) {
            if let Ended::ByCoordinator = self.end_on_coordinator(&ending, end).await? {
                ending.reinit = true;
            }
        }
        if end == TxnEnd::Abort {
            self.after_abort(&ending).await?;
        }
        info!(transactional_id = %ending.id, commit = end.is_commit(), "transaction ended");
        Ok(())
    }

    /// Abort, first step: fails the batches that never went out. A batch sent at least once
    /// stays to be resent until it settles (see `Accumulator::fail_unsent`).
    fn drop_unsent(&self) {
        let inner = &self.inner;
        let err = Error::TransactionAbortable(
            "the transaction was aborted (abort_transaction()) before this record was sent; it was not written".into(),
        );
        let (mem, _, batches) = inner.lock().fail_unsent(&err, true);
        inner.release(mem);
        super::metrics::Counters::add(&inner.counters.batches_failed, batches as u64);
    }

    /// Waits until every record of the transaction has settled, and every AddPartitionsToTxn.
    async fn settle_in_flight(&self) -> Result<()> {
        self.flush().await?;
        // An AddPartitionsToTxn still in flight would land after EndTxn and open a new
        // transaction on the coordinator that nobody ends (classic protocol: the hanging
        // transaction KIP-890 fixes); it then times out and fences this producer. Wait for it.
        loop {
            // Registered before the check, so a finish between the check and the wait wakes it.
            let done = self.inner.adds_done.notified();
            if !self.inner.lock().txn.as_ref().is_some_and(|t| t.adding) {
                return Ok(());
            }
            done.await;
        }
    }

    /// Everything has settled: a commit goes on only if nothing failed meanwhile (the phase
    /// refuses it otherwise); reads what the rest of the end needs.
    fn ending(&self) -> Result<Ending> {
        let mut acc = self.inner.lock();
        let identity = acc.identity;
        let t = acc.txn.as_mut().ok_or_else(no_transactional_id)?;
        t.step(TxnEvent::Flushed)?;
        let (open, reinit, failed) = match &t.phase {
            TxnPhase::Committing(open) => (open, false, false),
            TxnPhase::Aborting { txn, error, reinit } => (txn, *reinit, error.is_some()),
            p => {
                return Err(Error::Internal(format!(
                    "ending a transaction in phase {}",
                    p.name()
                )))
            }
        };
        let identity = identity.ok_or_else(|| {
            Error::Internal("a transaction is ending without a producer id".into())
        })?;
        Ok(Ending {
            id: t.transactional_id.clone(),
            identity,
            tv2: open.tv2,
            started: open.started,
            began: open.began,
            reinit,
            failed,
        })
    }

    /// EndTxn, on the path `resume_transaction` uses too, so an answer that is lost is
    /// resolved the same way. A refusal is explained: timed out, aborted, or fenced. An abort
    /// refused because the coordinator aborted the transaction itself (and bumped the epoch)
    /// got what it asked for: [`Ended::ByCoordinator`], and the abort re-initializes.
    async fn end_on_coordinator(&self, ending: &Ending, end: TxnEnd) -> Result<Ended> {
        let inner = &self.inner;
        let id = ending.id.as_str();
        let prepared = PreparedTransaction {
            transactional_id: id,
            producer_id: ending.identity.producer_id,
            producer_epoch: ending.identity.epoch,
            transaction_version: if ending.tv2 { 2 } else { 1 },
            // This producer has begun nothing since: the coordinator's latest is ours.
            transaction_start_ms: -1,
            empty: false,
        };
        let timeout = inner.config.transaction_timeout;
        let outcome = end_txn(&inner.cluster, &prepared, end, timeout).await;
        let timed_out = ending.began.elapsed() >= timeout;
        match outcome {
            Ok(EndOutcome::Done(next)) => {
                let mut acc = inner.lock();
                if let Some(next) = next {
                    // KIP-890: the next transaction uses the bumped epoch from sequence 0.
                    acc.reset_sequences(next);
                }
                match acc.txn.as_mut() {
                    Some(t) if end == TxnEnd::Abort => t.step(TxnEvent::EndTxnDone),
                    _ => Ok(()),
                }
                .map(|()| Ended::Here)
            }
            Ok(EndOutcome::Not { reason, aborted }) if aborted && end.is_commit() => {
                // KIP-588: the coordinator aborted it (and bumped the epoch); the abort
                // re-initializes, and the producer goes on.
                let e = coordinator_aborted(id, &reason, timed_out, timeout);
                self.note_error(Err(e), true)
            }
            Ok(EndOutcome::Not { reason, .. }) => {
                let e = Error::Fenced(if timed_out {
                    format!(
                        "transaction '{id}' was aborted by the coordinator: it ran longer than transaction.timeout.ms={} ms ({reason}); call init_transactions() and redo the work",
                        timeout.as_millis()
                    )
                } else {
                    format!(
                        "transaction '{id}' could not be {}: {reason}",
                        if end.is_commit() {
                            "committed"
                        } else {
                            "aborted"
                        }
                    )
                });
                self.note_error(Err(e), false)
            }
            Err(e) => match explain_end_failure(inner, &prepared, e, ending.began).await {
                (Error::TransactionAbortable(reason), true) if end == TxnEnd::Abort => {
                    info!(transactional_id = %id, %reason, "the coordinator aborted the transaction already; re-initializing");
                    Ok(Ended::ByCoordinator)
                }
                (e, reinit) => self.note_error(Err(e), reinit),
            },
        }
    }

    /// Abort, last steps: take back the sequences of batches dropped unsent, and re-initialize
    /// the producer id when the broker stopped accepting our epoch (or, under the classic
    /// protocol, when a failed batch may have left a sequence gap).
    async fn after_abort(&self, ending: &Ending) -> Result<()> {
        let inner = &self.inner;
        // Batches dropped unsent by the abort had sequences: take them back (the epoch stays
        // under the classic protocol; under KIP-890 EndTxn already started a new epoch at 0).
        // (When nothing reached the broker there was no EndTxn, under KIP-890 either.)
        if !ending.tv2 || !ending.started {
            inner.lock().rewind_sequences();
        }
        // Classic protocol: a failed batch may have left a sequence gap; KIP-360 lets a
        // transactional producer bump its epoch with InitProducerId(current id, epoch). The
        // same call ends a transaction the broker no longer accepts our epoch for (KIP-588):
        // the coordinator accepts it when it bumped the epoch itself (timeout abort), and
        // answers PRODUCER_FENCED when another producer did.
        if !(ending.reinit || (ending.failed && !ending.tv2)) {
            return Ok(());
        }
        let timeout = inner.config.transaction_timeout;
        match init_transactional_id(&inner.cluster, &ending.id, timeout, Some(ending.identity))
            .await
        {
            Ok(next) => {
                inner.lock().reset_sequences(next);
                Ok(())
            }
            Err(e) => {
                let e = reinit_refused(&ending.id, e, ending.reinit);
                if e.class_in(Op::TxnCoordinator) == ErrorClass::Fatal {
                    if let Some(t) = inner.lock().txn.as_mut() {
                        t.fail(e.clone(), Op::TxnCoordinator, false);
                    }
                }
                Err(e)
            }
        }
    }
}

/// Who ended a transaction whose EndTxn was sent.
enum Ended {
    /// The coordinator, at this EndTxn.
    Here,
    /// The coordinator, earlier and by itself (an abort after transaction.timeout.ms): the
    /// epoch it was sent with is over.
    ByCoordinator,
}

/// A coordinator's answer that this producer's epoch is over (PRODUCER_FENCED, or
/// INVALID_PRODUCER_EPOCH from a coordinator call) as [`Error::Fenced`], the error every other
/// fencing path returns and applications match on: another producer took the transactional id
/// over, or (transaction.version 1) the coordinator aborted the open transaction after
/// transaction.timeout.ms and bumped the epoch. Other errors are returned as they are.
fn fenced(id: &str, e: Error) -> Error {
    match e.code() {
        Some(ErrorCode::PRODUCER_FENCED | ErrorCode::INVALID_PRODUCER_EPOCH) => Error::Fenced(format!(
            "transactional id '{id}' was fenced ({e}): another producer with this transactional.id took over, or the coordinator aborted the open transaction after transaction.timeout.ms; create a new producer and call init_transactions()"
        )),
        _ => e,
    }
}

/// What an abort's InitProducerId(current id, epoch) refused means. PRODUCER_FENCED or
/// INVALID_PRODUCER_EPOCH says this producer's epoch is over, whatever the abort re-initialized
/// for (`reinit`: the coordinator had aborted the transaction; otherwise a failed request may
/// have left a sequence gap under the classic protocol), so it is [`Error::Fenced`], which
/// applications stop on. Take the second case at transaction.version 1: AddOffsetsToTxn fails
/// with NOT_COORDINATOR while the coordinator's node is down; the transaction outlives
/// transaction.timeout.ms before the new coordinator loads it; that coordinator aborts it and
/// bumps the epoch; the abort's InitProducerId, sent with the old epoch, is refused. Other
/// errors are returned as they are.
fn reinit_refused(id: &str, e: Error, reinit: bool) -> Error {
    match e.code() {
        Some(ErrorCode::PRODUCER_FENCED | ErrorCode::INVALID_PRODUCER_EPOCH) => {
            Error::Fenced(if reinit {
                format!(
                    "transaction '{id}' was aborted by the coordinator and this producer cannot take its id over again ({e}): another producer fenced it, or the cluster runs transaction.version 1, whose coordinator does not resume a producer after a timeout; create a new producer and call init_transactions()"
                )
            } else {
                format!(
                    "transaction '{id}' failed and this producer cannot start a new epoch ({e}): another producer with this transactional.id took over, or the coordinator aborted the transaction after transaction.timeout.ms; create a new producer and call init_transactions()"
                )
            })
        }
        _ => e,
    }
}

/// The abortable error for a transaction the coordinator aborted (after
/// transaction.timeout.ms, when `timed_out`): the abort re-initializes the producer id.
fn coordinator_aborted(id: &str, reason: &str, timed_out: bool, timeout: Duration) -> Error {
    Error::TransactionAbortable(if timed_out {
        format!(
            "transaction '{id}' was aborted by the coordinator: it ran longer than transaction.timeout.ms={} ms ({reason}); call abort_transaction() and redo the work, or raise transaction.timeout.ms",
            timeout.as_millis()
        )
    } else {
        format!(
            "transaction '{id}' was aborted by the coordinator ({reason}); call abort_transaction() and redo the work"
        )
    })
}

/// Turns an EndTxn refusal into what happened: the coordinator aborted the transaction (after
/// transaction.timeout.ms, or for another reason): abortable, and the abort re-initializes
/// (the `bool`); or another producer fenced this one: fatal.
async fn explain_end_failure(
    inner: &Inner,
    p: &PreparedTransaction<&str>,
    e: Error,
    began: Instant,
) -> (Error, bool) {
    if e.code().is_none() {
        return (e, false);
    }
    let Ok(Some(d)) = describe(&inner.cluster, p.transactional_id).await else {
        return (e, false);
    };
    let timeout = inner.config.transaction_timeout;
    let timed_out = began.elapsed() >= timeout;
    match judge(p, &d) {
        Judgement::Aborted { reason, .. } => (
            coordinator_aborted(
                p.transactional_id,
                &format!("{reason}; {e}"),
                timed_out,
                timeout,
            ),
            true,
        ),
        Judgement::Gone(reason) => (
            Error::Fenced(format!(
                "transaction '{}' was fenced: {reason} ({e})",
                p.transactional_id
            )),
            false,
        ),
        _ => (e, false),
    }
}

/// Classic protocol: adds partitions to the transaction; called by the sender, which sends
/// nothing to them until this has ended (one such request at a time: `TxnSend::adding`).
pub(crate) async fn add_partitions(inner: Arc<Inner>, tps: Vec<TopicPartition>) {
    let (id, identity) = {
        let mut acc = inner.lock();
        let identity = acc.identity;
        match (acc.txn.as_mut(), identity) {
            (Some(t), Some(i)) => (t.transactional_id.clone(), i),
            (Some(t), None) => {
                // No producer id (cannot happen once initialized): nothing to add to.
                t.adding = false;
                inner.adds_done.notify_waiters();
                return;
            }
            (None, _) => return,
        }
    };
    let timeout = inner.config.transaction_timeout;
    let result = add_partitions_to_txn(&inner.cluster, &id, identity, &tps, timeout).await;
    {
        let mut acc = inner.lock();
        if let Some(t) = acc.txn.as_mut() {
            t.adding = false;
            match result {
                Ok(()) => {
                    if let Some(open) = t.phase.open_mut() {
                        open.started = true;
                        open.added.extend(tps);
                    }
                }
                Err(e) => {
                    warn!(error = %e, "AddPartitionsToTxn failed");
                    t.fail(fenced(&id, e), Op::TxnCoordinator, false);
                }
            }
        }
    }
    inner.adds_done.notify_waiters();
    inner.wake.notify_one();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abort_whose_new_epoch_is_refused_is_fenced_whatever_it_reinitialized_for() {
        let init = |code| Error::broker("InitProducerId for 't'", code);
        let cases = [
            // (error, reinit: the coordinator had aborted, fenced?)
            (init(ErrorCode::PRODUCER_FENCED), true, true),
            (init(ErrorCode::PRODUCER_FENCED), false, true),
            (init(ErrorCode::INVALID_PRODUCER_EPOCH), true, true),
            (init(ErrorCode::INVALID_PRODUCER_EPOCH), false, true),
            (init(ErrorCode::COORDINATOR_NOT_AVAILABLE), false, false),
            (init(ErrorCode::CONCURRENT_TRANSACTIONS), true, false),
            (Error::Closed("producer"), true, false),
        ];
        for (e, reinit, want) in cases {
            let got = reinit_refused("t", e.clone(), reinit);
            assert_eq!(matches!(got, Error::Fenced(_)), want, "{e} reinit={reinit}");
            if want {
                let text = got.to_string();
                assert!(text.contains("'t'") && text.contains(&e.to_string()), "{text}");
                assert!(text.contains("init_transactions()"), "{text}");
            } else {
                assert_eq!(got.to_string(), e.to_string());
            }
        }
    }

    #[test]
    fn a_coordinator_ending_this_producers_epoch_is_fenced_and_other_errors_pass() {
        let cases = [
            (
                Error::broker("AddOffsetsToTxn for 't'", ErrorCode::PRODUCER_FENCED),
                true,
            ),
            (
                Error::broker("TxnOffsetCommit for 't'", ErrorCode::INVALID_PRODUCER_EPOCH),
                true,
            ),
            (
                Error::broker(
                    "AddOffsetsToTxn for 't'",
                    ErrorCode::CONCURRENT_TRANSACTIONS,
                ),
                false,
            ),
            (Error::Closed("producer"), false),
        ];
        for (e, want) in cases {
            let got = fenced("t", e.clone());
            assert_eq!(matches!(got, Error::Fenced(_)), want, "{e}");
            if want {
                let text = got.to_string();
                assert!(text.contains("transactional id 't'"), "{text}");
                assert!(text.contains(&e.to_string()), "{text}");
            }
        }
    }
}
