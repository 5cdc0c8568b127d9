//! Admin calls for transactions: list them across the cluster, describe one, show the
//! producers whose open transactions hold a partition's last stable offset (LSO) back, and end
//! a stale transaction by fencing its transactional id.
//!
//! A transaction left open by a dead producer keeps every read_committed consumer of its
//! partitions at the LSO until the coordinator aborts it (transaction.timeout.ms). These calls
//! find such a transaction ([`Admin::list_transactions`], [`Admin::describe_transaction`],
//! [`Admin::describe_producers`]) and end it now ([`Admin::fence_transactional_id`]).
//!
//! - ListTransactions goes to every broker (each answers for the transactional ids it
//!   coordinates); the answers are merged.
//! - DescribeTransactions goes to the transaction coordinator of the id.
//! - DescribeProducers goes to the leader of each partition.
//! - Fencing is InitProducerId for the transactional id, as a new producer instance would send
//!   it: the coordinator aborts the open transaction and bumps the epoch, so the old instance
//!   can neither commit nor write again.

use super::describe::{describe, TransactionDescription};
use super::state::TxnState;
use crate::client::admin::{retrying, Admin};
use crate::client::config::ProducerConfig;
use crate::client::error::{Error, Result};
use crate::client::metadata::{by_topic, TopicPartition};
use crate::client::producer::Producer;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    DescribeProducersRequest, ListTransactionsRequest, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;
use std::time::Duration;

/// The transaction states a coordinator reports (the names ListTransactions filters on).
pub const TRANSACTION_STATES: [TxnState; 8] = TxnState::KNOWN;

/// Filters for [`Admin::list_transactions`]; the default lists every transactional id.
///
/// # Examples
/// ```
/// use onceflow::client::transactions::ListTransactionsFilter;
/// // The transactions of producer 4000 still waiting to be committed or aborted.
/// let filter = ListTransactionsFilter {
///     states: vec!["Ongoing".into(), "PrepareCommit".into(), "PrepareAbort".into()],
///     producer_ids: vec![4000],
///     ..Default::default()
/// };
/// assert!(filter.open_longer_than.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListTransactionsFilter {
    /// Only these states (names as in [`TRANSACTION_STATES`]); empty: all.
    pub states: Vec<String>,
    /// Only these producer ids; empty: all.
    pub producer_ids: Vec<i64>,
    /// Only transactions that have been open longer than this. Sent as ListTransactions v1's
    /// duration filter where the broker supports it (Kafka 3.8+); otherwise each listed id is
    /// described and filtered by its start time. Either way only transactions with a start
    /// time (open ones) match.
    pub open_longer_than: Option<Duration>,
}

/// One line of [`Admin::list_transactions`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TransactionListing {
    /// The transactional id.
    pub transactional_id: String,
    /// Its current producer id.
    pub producer_id: i64,
    /// Its state, e.g. [`TxnState::Ongoing`].
    pub state: TxnState,
    /// The coordinator (node id) that reported it.
    pub coordinator: i32,
}

/// A producer with state on a partition, as its leader reports it ([`Admin::describe_producers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveProducer {
    /// The partition.
    pub partition: TopicPartition,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i32,
    /// Last sequence number written (-1 for none).
    pub last_sequence: i32,
    /// Timestamp of its last write (ms since the epoch, -1 if unknown).
    pub last_timestamp_ms: i64,
    /// Coordinator epoch of its last transaction marker (-1 for none).
    pub coordinator_epoch: i32,
    /// First offset of its open transaction on this partition: the LSO cannot pass it until
    /// the transaction ends. `None` when no transaction is open.
    pub current_txn_start_offset: Option<i64>,
}

/// What [`Admin::fence_transactional_id`] found and left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceOutcome {
    /// The transactional id before fencing (`None`: the coordinator did not know it).
    pub before: Option<TransactionDescription>,
    /// The producer id InitProducerId returned.
    pub producer_id: i64,
    /// The epoch InitProducerId returned: every older instance is fenced.
    pub producer_epoch: i16,
    /// The transactional id afterwards.
    pub after: Option<TransactionDescription>,
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

impl Admin {
    /// Lists transactional ids with their producer id and state, asking every broker in the
    /// metadata (each coordinates part of the ids) and merging the answers, sorted by id.
    ///
    /// # Errors
    /// [`Error::Usage`] naming a state filter the brokers do not know; broker errors
    /// (e.g. CLUSTER_AUTHORIZATION_FAILED) and [`Error::Timeout`] after retries within
    /// default.api.timeout.ms. One broker failing fails the call: a partial list could hide
    /// the very transaction being looked for.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use onceflow::client::{Admin, ClientConfig};
    /// use onceflow::client::transactions::ListTransactionsFilter;
    /// let admin = Admin::new(ClientConfig::default()).await?;
    /// let filter = ListTransactionsFilter {
    ///     states: vec!["Ongoing".into()],
    ///     open_longer_than: Some(std::time::Duration::from_secs(600)),
    ///     ..Default::default()
    /// };
    /// for t in admin.list_transactions(&filter).await? {
    ///     println!("{} has been open for more than 10 minutes", t.transactional_id);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_transactions(
        &self,
        filter: &ListTransactionsFilter,
    ) -> Result<Vec<TransactionListing>> {
        let cluster = self.cluster();
        if cluster.metadata().brokers.is_empty() {
            cluster.refresh_metadata().await?;
        }
        let mut nodes: Vec<i32> = cluster.metadata().brokers.keys().copied().collect();
        nodes.sort_unstable();
        let mut merged: BTreeMap<String, TransactionListing> = BTreeMap::new();
        for node in nodes {
            for t in self.list_transactions_on(node, filter).await? {
                merged.insert(t.transactional_id.clone(), t);
            }
        }
        Ok(merged.into_values().collect())
    }

    async fn list_transactions_on(
        &self,
        node: i32,
        filter: &ListTransactionsFilter,
    ) -> Result<Vec<TransactionListing>> {
        let cluster = self.cluster();
        let base = ListTransactionsRequest::default()
            .with_state_filters(filter.states.iter().map(|s| str_bytes(s)).collect())
            .with_producer_id_filters(filter.producer_ids.iter().map(|p| ProducerId(*p)).collect());
        let (listed, filtered_by_broker) = retrying(cluster, "list_transactions", || async {
            let conn = cluster.broker(node).await?;
            let v = conn.version_for::<ListTransactionsRequest>(None)?;
            let mut req = base.clone();
            let by_broker = match filter.open_longer_than {
                Some(d) if v >= 1 => {
                    req.duration_filter = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                    true
                }
                _ => false,
            };
            let r = conn.request_at(&req, v).await?;
            ErrorCode::check(r.error_code).map_err(|c| {
                Error::broker(format!("list transactions on broker {}", conn.addr()), c)
            })?;
            if !r.unknown_state_filters.is_empty() {
                let unknown: Vec<&str> =
                    r.unknown_state_filters.iter().map(|s| s.as_str()).collect();
                return Err(Error::Usage(format!(
                    "unknown transaction state(s) {}; known states: {}",
                    unknown.join(", "),
                    TRANSACTION_STATES
                        .iter()
                        .map(TxnState::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            let listed: Vec<TransactionListing> = r
                .transaction_states
                .iter()
                .map(|s| TransactionListing {
                    transactional_id: s.transactional_id.0.to_string(),
                    producer_id: s.producer_id.0,
                    state: TxnState::parse(s.transaction_state.as_str()),
                    coordinator: node,
                })
                .collect();
            Ok((listed, by_broker))
        })
        .await?;
        let Some(min_age) = filter.open_longer_than else {
            return Ok(listed);
        };
        // Only open transactions have a meaningful age: the broker's duration filter also
        // matches ended transactions by the start time of their last transaction.
        let open = listed.into_iter().filter(|t| t.state.is_open());
        if filtered_by_broker {
            return Ok(open.collect());
        }
        let mut out = Vec::new();
        for t in open {
            let Some(d) = self.describe_transaction(&t.transactional_id).await? else {
                continue; // expired meanwhile
            };
            if d.is_open() && d.age().is_some_and(|age| age > min_age) {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// Describes a transactional id at its coordinator: state, producer id and epoch,
    /// timeout, start time, partitions. `Ok(None)` when the coordinator does not know the id
    /// (never used, or expired after transactional.id.expiration.ms).
    ///
    /// # Errors
    /// Broker errors (e.g. TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and [`Error::Timeout`] after
    /// retries within default.api.timeout.ms.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(admin: onceflow::client::Admin) -> onceflow::client::Result<()> {
    /// match admin.describe_transaction("rides-cleaner-0").await? {
    ///     Some(t) if t.is_open() => {
    ///         println!("{} open for {:?} on {:?}", t.transactional_id, t.age(), t.partitions)
    ///     }
    ///     Some(t) => println!("{}: {:?}", t.transactional_id, t.state),
    ///     None => println!("unknown transactional id"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn describe_transaction(
        &self,
        transactional_id: &str,
    ) -> Result<Option<TransactionDescription>> {
        describe(self.cluster(), transactional_id).await
    }

    /// The producers with state on each partition, from the partitions' leaders; those with
    /// [`ActiveProducer::current_txn_start_offset`] set have an open transaction there, and the
    /// smallest such offset is where the partition's LSO stops.
    ///
    /// # Errors
    /// [`Error::UnknownTopic`] / [`Error::UnknownPartition`]; partition errors and
    /// [`Error::Timeout`] after retries within default.api.timeout.ms.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(admin: onceflow::client::Admin) -> onceflow::client::Result<()> {
    /// use onceflow::client::TopicPartition;
    /// // Who holds read_committed consumers of rides-0 back?
    /// for p in admin.describe_producers(&[TopicPartition::new("rides", 0)]).await? {
    ///     if let Some(first) = p.current_txn_start_offset {
    ///         println!("producer {} epoch {}: open transaction from offset {first}", p.producer_id, p.producer_epoch);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn describe_producers(&self, tps: &[TopicPartition]) -> Result<Vec<ActiveProducer>> {
        let cluster = self.cluster();
        let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        for tp in tps {
            by_leader
                .entry(cluster.leader(tp).await?)
                .or_default()
                .push(tp.clone());
        }
        let mut out = Vec::new();
        for tps in by_leader.into_values() {
            out.extend(self.describe_producers_at_leader(&tps).await?);
        }
        out.sort_by(|a, b| (&a.partition, a.producer_id).cmp(&(&b.partition, b.producer_id)));
        Ok(out)
    }

    async fn describe_producers_at_leader(
        &self,
        tps: &[TopicPartition],
    ) -> Result<Vec<ActiveProducer>> {
        let cluster = self.cluster();
        let topics = by_topic(tps);
        let req = DescribeProducersRequest::default().with_topics(
            topics
                .iter()
                .map(|(t, ps)| {
                    TopicRequest::default()
                        .with_name(TopicName(str_bytes(t)))
                        .with_partition_indexes(ps.clone())
                })
                .collect(),
        );
        retrying(cluster, "describe_producers", || async {
            // Leadership may have moved since the caller grouped the partitions: a stale
            // leader answers NOT_LEADER_OR_FOLLOWER, which refreshes metadata and retries.
            let first = tps
                .first()
                .ok_or_else(|| Error::Usage("describe_producers needs a partition".into()))?;
            let conn = cluster.broker(cluster.leader(first).await?).await?;
            let r = conn.request(&req).await?;
            let mut out = Vec::new();
            for t in &r.topics {
                for p in &t.partitions {
                    let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
                    ErrorCode::check(p.error_code).map_err(|c| {
                        let detail = p
                            .error_message
                            .as_ref()
                            .map(|m| format!(" ({})", m.as_str()))
                            .unwrap_or_default();
                        Error::broker(format!("describe producers of {tp}{detail}"), c)
                            .at_broker("leader", conn.addr())
                    })?;
                    out.extend(p.active_producers.iter().map(|s| ActiveProducer {
                        partition: tp.clone(),
                        producer_id: s.producer_id.0,
                        producer_epoch: s.producer_epoch,
                        last_sequence: s.last_sequence,
                        last_timestamp_ms: s.last_timestamp,
                        coordinator_epoch: s.coordinator_epoch,
                        current_txn_start_offset:
                            (s.current_txn_start_offset >= 0).then_some(s.current_txn_start_offset),
                    }));
                }
            }
            Ok(out)
        })
        .await
    }

    /// Fences a transactional id: sends InitProducerId for it, as a new producer instance
    /// would. The coordinator aborts the transaction left open (its markers are written before
    /// the call returns) and bumps the epoch, so the previous instance — a dead job, or a
    /// zombie — can neither commit nor write again. read_committed consumers stalled at the
    /// transaction's first offset then move on, without its records.
    ///
    /// A *live* producer using the id is fenced too and fails with PRODUCER_FENCED: use this
    /// on transactional ids whose owner is gone. `transaction_timeout` is registered with the
    /// id (pass the one [`Admin::describe_transaction`] reported to keep it).
    ///
    /// # Errors
    /// Fatal coordinator errors (authorization, an invalid transaction timeout) and
    /// [`Error::Timeout`]; retriable ones (CONCURRENT_TRANSACTIONS while the abort markers are
    /// written) are retried within max(transaction_timeout, default.api.timeout.ms).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(admin: onceflow::client::Admin) -> onceflow::client::Result<()> {
    /// // The job that owned "rides-cleaner-0" is gone; its open transaction stalls the topic.
    /// if let Some(t) = admin.describe_transaction("rides-cleaner-0").await? {
    ///     let fenced = admin.fence_transactional_id(&t.transactional_id, t.timeout).await?;
    ///     println!("aborted; epoch now {}, state {:?}", fenced.producer_epoch, fenced.after.map(|a| a.state));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fence_transactional_id(
        &self,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<FenceOutcome> {
        let before = self.describe_transaction(transactional_id).await?;
        let config = ProducerConfig {
            client: self.cluster().config().clone(),
            transactional_id: Some(transactional_id.to_owned()),
            transaction_timeout,
            ..ProducerConfig::default()
        };
        // The producer's own init_transactions() is the InitProducerId path (coordinator
        // lookup, CONCURRENT_TRANSACTIONS retries, timeout errors naming both settings); it
        // sends nothing else, and dropping it ends its sender task.
        let producer = Producer::with_cluster(config, self.cluster().clone()).await?;
        producer.init_transactions().await?;
        let (producer_id, producer_epoch) = producer.producer_id_and_epoch().ok_or_else(|| {
            Error::Internal(format!(
                "InitProducerId for '{transactional_id}' returned no producer id"
            ))
        })?;
        drop(producer);
        let after = self.describe_transaction(transactional_id).await?;
        Ok(FenceOutcome {
            before,
            producer_id,
            producer_epoch,
            after,
        })
    }
}
