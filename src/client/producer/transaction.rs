//! Transactions: init, begin, send offsets, commit, abort, and resuming a prepared
//! transaction from another process.
//!
//! A transaction's states (see DESIGN.md, "A transaction's life"):
//! `init_transactions` (InitProducerId with the transactional id: fences older instances and
//! aborts whatever they left open) → ready → `begin_transaction` (local; fixes the protocol
//! version for this transaction) → in transaction: records are sent; under the classic protocol
//! each new partition first joins with AddPartitionsToTxn, under KIP-890 (transaction.version 2)
//! the produce itself adds it → `commit_transaction` / `abort_transaction`: flush, then EndTxn.
//! Under transaction.version 2 EndTxn returns the epoch for the next transaction.
//!
//! Errors are classified by [`crate::client::classify`] with [`Op::TxnCoordinator`] /
//! [`Op::TxnProduce`]: retriable ones are retried within transaction.timeout.ms, abortable ones
//! doom the transaction (commit refuses; abort works), fatal ones (fencing) doom the producer.

use super::accumulator::Identity;
use super::txn_phase::TxnEvent;
use super::{Inner, Producer};
use crate::client::cluster::Cluster;
use crate::client::coordinator::coordinator_call_on;
use crate::client::coordinator::CoordinatorKind;
use crate::client::error::{Error, ErrorClass, Op, Result};
use crate::client::metadata::TopicPartition;
use crate::client::txn::{
    describe, end_txn, judge, EndOutcome, Judgement, PreparedTransaction, TxnEnd, TxnState,
    TV2_END_TXN_VERSION,
};
use crate::protocol::ErrorCode;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupId,
    InitProducerIdRequest, ProduceRequest, ProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, info_span, warn, Instrument};

/// AddPartitionsToTxn v4+ is for brokers verifying on a client's behalf; clients use ≤ v3.
const MAX_CLIENT_ADD_PARTITIONS_VERSION: i16 = 3;
/// Under the classic protocol TxnOffsetCommit must stay ≤ v4 (v5 implies KIP-890's implicit
/// AddOffsetsToTxn).
const MAX_CLASSIC_TXN_OFFSET_COMMIT_VERSION: i16 = 4;

/// A consumer group's identity as TxnOffsetCommit needs it (KIP-447): with the generation and
/// member id, the group coordinator fences a zombie from an older generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The group.
    pub group_id: String,
    /// Generation id, -1 for a group without members (manual assignment).
    pub generation_id: i32,
    /// Member id, empty without membership.
    pub member_id: String,
    /// group.instance.id for static members.
    pub group_instance_id: Option<String>,
}

impl GroupMetadata {
    /// Metadata for a group used without membership (offsets only), as the Java client's
    /// `new ConsumerGroupMetadata(groupId)`.
    pub fn new(group_id: impl Into<String>) -> Self {
        GroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_owned()))
}

impl Producer {
    fn txn_id(&self) -> Result<String> {
        self.inner
            .lock()
            .txn
            .as_ref()
            .map(|t| t.transactional_id.clone())
            .ok_or_else(|| {
                Error::InvalidState("transactions need transactional.id to be set".into())
            })
    }

    fn check_fatal(&self) -> Result<()> {
        match self
            .inner
            .fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn identity(&self) -> Result<Identity> {
        self.inner.lock().identity.ok_or_else(|| {
            Error::InvalidState("call init_transactions() before using the transaction".into())
        })
    }

    /// Registers the transactional id with its coordinator and gets the producer id and epoch.
    /// Fences any older producer with the same transactional id and aborts what it left open.
    ///
    /// # Errors
    /// A fatal error naming both settings when transaction.timeout.ms exceeds the broker's
    /// transaction.max.timeout.ms; fatal authorization errors; [`Error::Timeout`].
    ///
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
        self.check_fatal()?;
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
        if let Some(t) = acc.txn.as_mut() {
            t.step(TxnEvent::InitDone)?;
            t.added.clear();
            t.started = false;
            t.error = None;
        }
        Ok(())
    }

    /// Moves the transaction phase (see `txn_phase`), or says what to call instead.
    fn step(&self, event: TxnEvent) -> Result<()> {
        self.inner
            .lock()
            .txn
            .as_mut()
            .ok_or_else(|| {
                Error::InvalidState("transactions need transactional.id to be set".into())
            })?
            .step(event)
    }

    /// Starts a transaction (no request is sent).
    ///
    /// # Errors
    /// [`Error::InvalidState`] when a transaction is open or init_transactions was not called.
    pub fn begin_transaction(&self) -> Result<()> {
        self.check_fatal()?;
        let tv2 = self.inner.cluster.transaction_version_2();
        let mut acc = self.inner.lock();
        let t = acc.txn.as_mut().ok_or_else(|| {
            Error::InvalidState("transactions need transactional.id to be set".into())
        })?;
        t.step(TxnEvent::Begin)?;
        t.tv2 = tv2;
        t.added.clear();
        t.started = false;
        t.error = None;
        t.began = Some(Instant::now());
        info!(transactional_id = %t.transactional_id, tv2, "transaction begun");
        Ok(())
    }

    /// Adds consumed offsets to the transaction: they are committed for the group if and only
    /// if the transaction commits (KIP-447).
    ///
    /// # Errors
    /// Abortable errors (e.g. ILLEGAL_GENERATION after a rebalance) doom the transaction; fatal
    /// ones (fencing) the producer.
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, i64)],
        group: &GroupMetadata,
    ) -> Result<()> {
        self.check_fatal()?;
        let id = self.txn_id()?;
        let identity = self.identity()?;
        let tv2 = {
            let mut acc = self.inner.lock();
            let t = acc.txn.as_mut().ok_or_else(|| {
                Error::InvalidState("transactions need transactional.id to be set".into())
            })?;
            t.step(TxnEvent::Use("send_offsets_to_transaction()"))?;
            if let Some(e) = &t.error {
                return Err(e.clone());
            }
            t.tv2
        };
        let result = async {
            if !tv2 {
                let req = AddOffsetsToTxnRequest::default()
                    .with_transactional_id(txn_id(&id))
                    .with_producer_id(ProducerId(identity.producer_id))
                    .with_producer_epoch(identity.epoch)
                    .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())));
                coordinator_call(&self.inner, &id, "AddOffsetsToTxn", |conn| {
                    let req = req.clone();
                    async move {
                        let r = conn.request(&req).await?;
                        Ok((r.error_code, ()))
                    }
                })
                .await?;
            }
            if let Some(t) = self.inner.lock().txn.as_mut() {
                t.started = true;
            }
            txn_offset_commit(&self.inner, &id, identity, tv2, offsets, group).await
        }
        .instrument(info_span!("send_offsets_to_transaction", group = %group.group_id))
        .await;
        self.note_error(result)
    }

    /// Records an error in the transaction state according to its class.
    fn note_error<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            match e.class_in(Op::TxnCoordinator) {
                ErrorClass::Fatal => {
                    *self.inner.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone())
                }
                _ => {
                    if let Some(t) = self.inner.lock().txn.as_mut() {
                        t.error.get_or_insert(e.clone());
                    }
                }
            }
        }
        result
    }

    /// Flushes the transaction's records and returns its committable, without committing:
    /// the first phase of a two-phase commit. Save the result durably, then commit with
    /// [`Producer::commit_transaction`] or, from any process, [`resume_transaction`].
    ///
    /// # Errors
    /// The transaction's abortable error if any record failed.
    pub async fn prepare_commit(&self) -> Result<PreparedTransaction> {
        self.check_fatal()?;
        self.step(TxnEvent::Use("prepare_commit()"))?;
        self.flush().await?;
        self.check_fatal()?;
        let identity = self.identity()?;
        let (id, tv2, started) = {
            let mut acc = self.inner.lock();
            let t = acc.txn.as_mut().ok_or_else(|| {
                Error::InvalidState("transactions need transactional.id to be set".into())
            })?;
            t.step(TxnEvent::Use("prepare_commit()"))?;
            if let Some(e) = &t.error {
                return Err(e.clone());
            }
            (t.transactional_id.clone(), t.tv2, t.started)
        };
        let transaction_version = if tv2 { 2 } else { 1 };
        if !started {
            // Nothing reached the broker: there is nothing to commit, and the coordinator has
            // no transaction to tell apart from the next one (which will have the same
            // producer id and epoch). The committable says so, and resuming it does nothing.
            return Ok(PreparedTransaction {
                transactional_id: id,
                producer_id: identity.producer_id,
                producer_epoch: identity.epoch,
                transaction_version,
                transaction_start_ms: -1,
                empty: true,
            });
        }
        // The coordinator's start time identifies this transaction among later ones.
        let d = describe(&self.inner.cluster, &id).await?;
        let Some(d) = d.filter(|d| {
            d.state == TxnState::Ongoing
                && d.producer_id == identity.producer_id
                && d.producer_epoch == identity.epoch
        }) else {
            // Everything was acknowledged, yet the coordinator shows no open transaction of
            // ours: it was aborted (transaction.timeout.ms) or fenced. A committable for it
            // could never be committed.
            let e = Error::Fenced(format!(
                "transaction '{id}' can no longer be committed: the coordinator shows no open transaction of producer id {} epoch {}; it timed out (transaction.timeout.ms) or was fenced",
                identity.producer_id, identity.epoch
            ));
            return self.note_error(Err(e));
        };
        Ok(PreparedTransaction {
            transactional_id: id,
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
    /// The transaction's abortable error (the caller must then abort), or a fatal error
    /// (fenced, or aborted by the coordinator after transaction.timeout.ms).
    pub async fn commit_transaction(&self) -> Result<()> {
        self.end_transaction(TxnEnd::Commit).await
    }

    /// Drops what is not sent yet, waits for what is in flight, and aborts the transaction.
    ///
    /// # Errors
    /// Fatal errors only (fencing); abortable ones are what abort is for.
    pub async fn abort_transaction(&self) -> Result<()> {
        self.end_transaction(TxnEnd::Abort).await
    }

    async fn end_transaction(&self, end: TxnEnd) -> Result<()> {
        let commit = end.is_commit();
        self.check_fatal()?;
        self.step(TxnEvent::EndStart { commit })?;
        let result = self.end_transaction_steps(end).await;
        // Ended: ready for the next begin_transaction(). Not ended: the transaction is still
        // open (a refused commit is aborted next; a failed abort can be tried again).
        let step = self.step(if result.is_ok() {
            TxnEvent::EndDone
        } else {
            TxnEvent::EndFailed
        });
        result.and(step)
    }

    async fn end_transaction_steps(&self, end: TxnEnd) -> Result<()> {
        let commit = end.is_commit();
        let id = self.txn_id()?;
        let inner = &self.inner;
        if !commit {
            let err = Error::InvalidState("the transaction was aborted".into());
            let (mem, _, batches) = inner.lock().fail_unsent(&err);
            inner.release(mem);
            super::metrics::Counters::add(&inner.counters.batches_failed, batches as u64);
        }
        self.flush().await?;
        // An AddPartitionsToTxn still in flight would land after EndTxn and open a new
        // transaction on the coordinator that nobody ends (classic protocol: the hanging
        // transaction KIP-890 fixes); it then times out and fences this producer. Wait for it.
        while self.inner.lock().txn.as_ref().is_some_and(|t| t.adding) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.check_fatal()?;
        let identity = self.identity()?;
        let (tv2, started, began, reinit) = {
            let acc = inner.lock();
            let t = acc.txn.as_ref().ok_or_else(|| {
                Error::InvalidState("transactions need transactional.id to be set".into())
            })?;
            if commit {
                if let Some(e) = &t.error {
                    return Err(match e {
                        // Already says what happened and what to do.
                        Error::TransactionAbortable(_) => e.clone(),
                        _ => Error::TransactionAbortable(format!(
                            "cannot commit: the transaction failed ({e}); call abort_transaction() and redo the work"
                        )),
                    });
                }
            }
            (t.tv2, t.started, t.began, t.reinit)
        };
        // After INVALID_PRODUCER_EPOCH / UNKNOWN_PRODUCER_ID the coordinator would refuse
        // EndTxn at our epoch; the re-initialization below ends the transaction instead.
        let end_with_end_txn = commit || !reinit;
        if started && end_with_end_txn {
            let prepared = PreparedTransaction {
                transactional_id: id.as_str(),
                producer_id: identity.producer_id,
                producer_epoch: identity.epoch,
                transaction_version: if tv2 { 2 } else { 1 },
                // This producer has begun nothing since: the coordinator's latest is ours.
                transaction_start_ms: -1,
                empty: false,
            };
            let outcome = end_txn(
                &inner.cluster,
                &prepared,
                end,
                inner.config.transaction_timeout,
            )
            .await;
            match outcome {
                Ok(EndOutcome::Done(next)) => {
                    if let Some(next) = next {
                        // KIP-890: the next transaction uses the bumped epoch from sequence 0.
                        inner.lock().reset_sequences(next);
                    }
                }
                Ok(EndOutcome::Not { reason, aborted }) => {
                    let timed_out =
                        began.is_some_and(|b| b.elapsed() >= inner.config.transaction_timeout);
                    if aborted && commit {
                        // KIP-588: the coordinator aborted it (and bumped the epoch); the
                        // abort re-initializes, and the producer goes on.
                        let e = coordinator_aborted(&id, &reason, timed_out, inner);
                        return self.note_error(Err(e));
                    }
                    let e = Error::Fenced(if timed_out {
                        format!(
                            "transaction '{id}' was aborted by the coordinator: it ran longer than transaction.timeout.ms={} ms ({reason}); call init_transactions() and redo the work",
                            inner.config.transaction_timeout.as_millis()
                        )
                    } else {
                        format!(
                            "transaction '{id}' could not be {}: {reason}",
                            if commit { "committed" } else { "aborted" }
                        )
                    });
                    *inner.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                    return Err(e);
                }
                Err(e) => {
                    let e = explain_end_failure(inner, &prepared, e, began).await;
                    return self.note_error(Err(e));
                }
            }
        }
        let had_error = {
            let mut acc = inner.lock();
            let t = acc.txn.as_mut().map(|t| {
                t.added.clear();
                t.started = false;
                t.error.take()
            });
            matches!(t, Some(Some(_)))
        };
        // Batches dropped unsent by the abort had sequences: take them back (the epoch stays
        // under the classic protocol; under KIP-890 EndTxn already started a new epoch at 0).
        // (When nothing reached the broker there was no EndTxn, under KIP-890 either.)
        if !commit && (!tv2 || !started) {
            inner.lock().rewind_sequences();
        }
        // Classic protocol: a failed batch may have left a sequence gap; KIP-360 lets a
        // transactional producer bump its epoch with InitProducerId(current id, epoch). The
        // same call ends a transaction the broker no longer accepts our epoch for (KIP-588):
        // the coordinator accepts it when it bumped the epoch itself (timeout abort), and
        // answers PRODUCER_FENCED when another producer did.
        if !commit && (reinit || (had_error && !tv2)) {
            let next = match init_transactional_id(
                &inner.cluster,
                &id,
                inner.config.transaction_timeout,
                Some(identity),
            )
            .await
            {
                Ok(next) => next,
                Err(e) => {
                    let e = match e.code() {
                        Some(ErrorCode::PRODUCER_FENCED | ErrorCode::INVALID_PRODUCER_EPOCH)
                            if reinit =>
                        {
                            Error::Fenced(format!(
                                "transaction '{id}' was aborted by the coordinator and this producer cannot take its id over again ({e}): another producer fenced it, or the cluster runs transaction.version 1, whose coordinator does not resume a producer after a timeout; create a new producer and call init_transactions()"
                            ))
                        }
                        _ => e,
                    };
                    if e.class_in(Op::TxnCoordinator) == ErrorClass::Fatal {
                        *inner.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                    }
                    return Err(e);
                }
            };
            let mut acc = inner.lock();
            acc.reset_sequences(next);
            if let Some(t) = acc.txn.as_mut() {
                t.reinit = false;
            }
        }
        info!(transactional_id = %id, commit, "transaction ended");
        Ok(())
    }
}

/// The abortable error for a transaction the coordinator aborted (after
/// transaction.timeout.ms, when `timed_out`): the abort re-initializes the producer id.
fn coordinator_aborted(id: &str, reason: &str, timed_out: bool, inner: &Inner) -> Error {
    if let Some(t) = inner.lock().txn.as_mut() {
        t.reinit = true;
    }
    Error::TransactionAbortable(if timed_out {
        format!(
            "transaction '{id}' was aborted by the coordinator: it ran longer than transaction.timeout.ms={} ms ({reason}); call abort_transaction() and redo the work, or raise transaction.timeout.ms",
            inner.config.transaction_timeout.as_millis()
        )
    } else {
        format!(
            "transaction '{id}' was aborted by the coordinator ({reason}); call abort_transaction() and redo the work"
        )
    })
}

/// Turns an EndTxn refusal into what happened: the coordinator aborted the transaction (after
/// transaction.timeout.ms, or for another reason): abortable, the abort re-initializes; or
/// another producer fenced this one: fatal.
async fn explain_end_failure(
    inner: &Inner,
    p: &PreparedTransaction<&str>,
    e: Error,
    began: Option<Instant>,
) -> Error {
    if e.code().is_none() {
        return e;
    }
    let Ok(Some(d)) = describe(&inner.cluster, p.transactional_id).await else {
        return e;
    };
    let timed_out = began.is_some_and(|b| b.elapsed() >= inner.config.transaction_timeout);
    match judge(p, &d) {
        Judgement::Aborted { reason, .. } => coordinator_aborted(
            p.transactional_id,
            &format!("{reason}; {e}"),
            timed_out,
            inner,
        ),
        Judgement::Gone(reason) => Error::Fenced(format!(
            "transaction '{}' was fenced: {reason} ({e})",
            p.transactional_id
        )),
        _ => e,
    }
}

/// Whether transactions may use KIP-890 (transaction.version 2) with this cluster: the finalized
/// feature says so and the versions needed are there. Decided per transaction.
impl Cluster {
    pub(crate) fn transaction_version_2(&self) -> bool {
        self.any_live_connection().is_some_and(|c| {
            c.versions().finalized_feature("transaction.version") >= 2
                && c.versions()
                    .version_for::<ProduceRequest>(None)
                    .unwrap_or(0)
                    >= 12
                && c.versions().version_for::<EndTxnRequest>(None).unwrap_or(0)
                    >= TV2_END_TXN_VERSION
        })
    }
}

/// Calls the transaction coordinator of `id`, retrying retriable errors and coordinator moves
/// within transaction.timeout.ms. `call` returns (error code, value).
async fn coordinator_call<T, F, Fut>(inner: &Inner, id: &str, what: &str, call: F) -> Result<T>
where
    F: Fn(Arc<crate::client::connection::Connection>) -> Fut,
    Fut: std::future::Future<Output = Result<(i16, T)>>,
{
    coordinator_call_on(
        &inner.cluster,
        CoordinatorKind::Transaction,
        id,
        what,
        inner.config.transaction_timeout,
        call,
    )
    .await
}

/// InitProducerId for a transactional id. With `current`, bumps that producer's epoch
/// (KIP-360) instead of fencing.
pub(crate) async fn init_transactional_id(
    cluster: &Cluster,
    id: &str,
    timeout: Duration,
    current: Option<Identity>,
) -> Result<Identity> {
    let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(txn_id(id)))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(current.map_or(-1, |c| c.producer_id)))
        .with_producer_epoch(current.map_or(-1, |c| c.epoch));
    let budget = timeout.max(cluster.config().api_timeout);
    let result = coordinator_call_on(
        cluster,
        CoordinatorKind::Transaction,
        id,
        "InitProducerId",
        budget,
        |conn| {
            let req = req.clone();
            async move {
                let r = conn.request(&req).await?;
                Ok((
                    r.error_code,
                    Identity {
                        producer_id: r.producer_id.0,
                        epoch: r.producer_epoch,
                    },
                ))
            }
        },
    )
    .instrument(info_span!("init_producer_id", transactional_id = id))
    .await;
    match result {
        Err(e) if e.code() == Some(ErrorCode::INVALID_TRANSACTION_TIMEOUT) => {
            let max = broker_transaction_max_timeout(cluster).await;
            Err(Error::Config(crate::client::ConfigError::Conflict(format!(
                "transaction.timeout.ms={} exceeds the broker's transaction.max.timeout.ms={}; lower transaction.timeout.ms or raise transaction.max.timeout.ms on the brokers",
                timeout.as_millis(),
                max.map_or("(unknown)".to_owned(), |m| m.to_string())
            ))))
        }
        Ok(id_) => {
            info!(
                transactional_id = id,
                producer_id = id_.producer_id,
                epoch = id_.epoch,
                "transactional producer id assigned"
            );
            Ok(id_)
        }
        Err(e) => Err(e),
    }
}

/// The broker's transaction.max.timeout.ms, for the error message (best effort).
async fn broker_transaction_max_timeout(cluster: &Cluster) -> Option<String> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    let node = *cluster.metadata().brokers.keys().next()?;
    let conn = cluster.broker(node).await.ok()?;
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_string(node.to_string()))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str(
                "transaction.max.timeout.ms",
            )]))]);
    let resp = conn.request(&req).await.ok()?;
    resp.results
        .iter()
        .flat_map(|r| r.configs.iter())
        .find(|c| c.name.as_str() == "transaction.max.timeout.ms")
        .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
}

/// Classic protocol: adds partitions to the transaction; called by the sender.
pub(crate) async fn add_partitions(inner: Arc<Inner>, tps: Vec<TopicPartition>) {
    let (id, identity) = {
        let acc = inner.lock();
        match (acc.txn.as_ref(), acc.identity) {
            (Some(t), Some(i)) => (t.transactional_id.clone(), i),
            _ => return,
        }
    };
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in &tps {
        topics
            .entry(tp.topic.as_str())
            .or_default()
            .push(tp.partition);
    }
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(&id))
        .with_v3_and_below_producer_id(ProducerId(identity.producer_id))
        .with_v3_and_below_producer_epoch(identity.epoch)
        .with_v3_and_below_topics(
            topics
                .iter()
                .map(|(t, ps)| {
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_string((*t).to_owned())))
                        .with_partitions(ps.clone())
                })
                .collect(),
        );
    let result = coordinator_call(&inner, &id, "AddPartitionsToTxn", |conn| {
        let req = req.clone();
        async move {
            let v = conn.version_for::<AddPartitionsToTxnRequest>(Some(
                MAX_CLIENT_ADD_PARTITIONS_VERSION,
            ))?;
            let r = conn.request_at(&req, v).await?;
            // The first partition error stands for the request; OPERATION_NOT_ATTEMPTED
            // only says another partition failed.
            let code = r
                .results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| t.results_by_partition.iter())
                .map(|p| p.partition_error_code)
                .find(|c| *c != 0 && *c != ErrorCode::OPERATION_NOT_ATTEMPTED.0)
                .unwrap_or(0);
            Ok((code, ()))
        }
    })
    .instrument(info_span!("add_partitions_to_txn", partitions = tps.len()))
    .await;
    {
        let mut acc = inner.lock();
        if let Some(t) = acc.txn.as_mut() {
            t.adding = false;
            match result {
                Ok(()) => {
                    t.started = true;
                    t.added.extend(tps);
                }
                Err(e) => {
                    warn!(error = %e, "AddPartitionsToTxn failed");
                    if e.class_in(Op::TxnCoordinator) == ErrorClass::Fatal {
                        *inner.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                    }
                    t.error.get_or_insert(e);
                }
            }
        }
    }
    inner.wake.notify_one();
}

async fn txn_offset_commit(
    inner: &Inner,
    id: &str,
    identity: Identity,
    tv2: bool,
    offsets: &[(TopicPartition, i64)],
    group: &GroupMetadata,
) -> Result<()> {
    let mut topics: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, offset) in offsets {
        topics.entry(tp.topic.as_str()).or_default().push(
            TxnOffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::from_static_str(""))),
        );
    }
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(txn_id(id))
        .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_generation_id(group.generation_id)
        .with_member_id(StrBytes::from_string(group.member_id.clone()))
        .with_group_instance_id(group.group_instance_id.clone().map(StrBytes::from_string))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let cap = if tv2 {
        None
    } else {
        Some(MAX_CLASSIC_TXN_OFFSET_COMMIT_VERSION)
    };
    coordinator_call_on(
        &inner.cluster,
        CoordinatorKind::Group,
        &group.group_id,
        "TxnOffsetCommit",
        inner.config.transaction_timeout,
        |conn| {
            let req = req.clone();
            async move {
                let v = conn.version_for::<TxnOffsetCommitRequest>(cap)?;
                let r = conn.request_at(&req, v).await?;
                let code = r
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .map(|p| p.error_code)
                    .find(|c| *c != 0)
                    .unwrap_or(0);
                Ok((code, ()))
            }
        },
    )
    .await
}
