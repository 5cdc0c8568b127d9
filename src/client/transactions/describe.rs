//! DescribeTransactions: what the coordinator knows about a transactional id. The one
//! implementation behind [`crate::client::Admin::describe_transaction`], the producer's
//! prepare and EndTxn checks, and [`super::resume_transaction`].

use super::state::TxnState;
use crate::client::cluster::Cluster;
use crate::client::coordinator::{coordinator_call_on, CoordinatorKind};
use crate::client::error::{Error, Result};
use crate::client::metadata::TopicPartition;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::{DescribeTransactionsRequest, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use std::time::Duration;

/// What the coordinator knows about one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    /// The transactional id.
    pub transactional_id: String,
    /// State, e.g. [`TxnState::Ongoing`].
    pub state: TxnState,
    /// Current producer id.
    pub producer_id: i64,
    /// Current producer epoch.
    pub producer_epoch: i16,
    /// The transaction timeout the producer registered (transaction.timeout.ms).
    pub timeout: Duration,
    /// When the current transaction started (ms since the epoch), if one is open or was
    /// recorded by the coordinator.
    pub start_time_ms: Option<i64>,
    /// Partitions in the current transaction.
    pub partitions: Vec<TopicPartition>,
    /// The coordinator's node id (-1 when not known).
    pub coordinator: i32,
}

impl TransactionDescription {
    /// How long the transaction has been running, measured with this machine's clock against
    /// the coordinator's start time; `None` without a start time.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(admin: onceflow::client::Admin) -> onceflow::client::Result<()> {
    /// use std::time::Duration;
    /// if let Some(t) = admin.describe_transaction("rides-cleaner-0").await? {
    ///     if t.is_open() && t.age() > Some(Duration::from_secs(600)) {
    ///         println!("{} has been open for {:?}", t.transactional_id, t.age());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn age(&self) -> Option<Duration> {
        let start = self.start_time_ms.filter(|s| *s >= 0)?;
        let age = crate::client::clock::now_ms().saturating_sub(start);
        Some(Duration::from_millis(u64::try_from(age).unwrap_or(0)))
    }

    /// Whether a transaction is open (records or markers not final yet).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(admin: onceflow::client::Admin) -> onceflow::client::Result<()> {
    /// let open = admin.describe_transaction("rides-cleaner-0").await?.is_some_and(|t| t.is_open());
    /// println!("read_committed readers of its partitions wait: {open}");
    /// # Ok(()) }
    /// ```
    pub fn is_open(&self) -> bool {
        self.state.is_open()
    }
}

/// Describes `id` at its coordinator, retrying coordinator moves and retriable errors within
/// default.api.timeout.ms. `Ok(None)` when the coordinator does not know the id (never used, or
/// expired after transactional.id.expiration.ms).
pub(crate) async fn describe(
    cluster: &Cluster,
    id: &str,
) -> Result<Option<TransactionDescription>> {
    let req = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![TransactionalId(StrBytes::from_string(id.to_owned()))]);
    let found = coordinator_call_on(
        cluster,
        CoordinatorKind::Transaction,
        id,
        "DescribeTransactions",
        cluster.config().api_timeout,
        |conn| {
            let req = req.clone();
            async move {
                let r = conn.request(&req).await?;
                let Some(s) = r.transaction_states.into_iter().next() else {
                    return Err(Error::Io {
                        broker: conn.addr().to_owned(),
                        message: format!(
                            "DescribeTransactions for '{id}' came back without a result"
                        ),
                    });
                };
                if s.error_code == ErrorCode::TRANSACTIONAL_ID_NOT_FOUND.0 {
                    return Ok((0, None));
                }
                let mut partitions: Vec<TopicPartition> = s
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(|p| TopicPartition::new(t.topic.0.to_string(), *p))
                    })
                    .collect();
                partitions.sort();
                Ok((
                    s.error_code,
                    Some(TransactionDescription {
                        transactional_id: s.transactional_id.0.to_string(),
                        state: TxnState::parse(s.transaction_state.as_str()),
                        producer_id: s.producer_id.0,
                        producer_epoch: s.producer_epoch,
                        timeout: Duration::from_millis(
                            u64::try_from(s.transaction_timeout_ms).unwrap_or(0),
                        ),
                        start_time_ms: (s.transaction_start_time_ms >= 0)
                            .then_some(s.transaction_start_time_ms),
                        partitions,
                        coordinator: -1,
                    }),
                ))
            }
        },
    )
    .await?;
    Ok(found.map(|mut d| {
        d.coordinator = cluster
            .cached_coordinator(CoordinatorKind::Transaction, id)
            .unwrap_or(-1);
        d
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::clock::now_ms;

    fn description(state: TxnState, start: Option<i64>) -> TransactionDescription {
        TransactionDescription {
            transactional_id: "t".into(),
            state,
            producer_id: 1,
            producer_epoch: 0,
            timeout: Duration::from_secs(60),
            start_time_ms: start,
            partitions: Vec::new(),
            coordinator: 1,
        }
    }

    #[test]
    fn age_is_measured_from_the_start_time() {
        let d = description(TxnState::Ongoing, Some(now_ms() - 5_000));
        let age = d.age().unwrap();
        assert!(
            age >= Duration::from_secs(5) && age < Duration::from_secs(60),
            "{age:?}"
        );
        assert_eq!(description(TxnState::Empty, None).age(), None);
        // A coordinator clock ahead of ours gives age zero, not a panic.
        let ahead = description(TxnState::Ongoing, Some(now_ms() + 60_000));
        assert_eq!(ahead.age(), Some(Duration::ZERO));
    }
}
