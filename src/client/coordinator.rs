//! Finding group and transaction coordinators (FindCoordinator), with a cache.
//!
//! A coordinator moves when its partition of `__consumer_offsets` / `__transaction_state`
//! moves; callers that get NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE call
//! `Cluster::forget_coordinator` and look it up again.

use super::cluster::{Cluster, Stale};
use super::connection::Connection;
use super::error::{Error, Op, Result};
use super::retry::Step;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info_span, Instrument};

pub use super::metadata::CoordinatorKind;

impl Cluster {
    /// A connection to the coordinator of `key`, looked up (and cached) with FindCoordinator,
    /// retrying COORDINATOR_NOT_AVAILABLE and friends until default.api.timeout.ms.
    ///
    /// # Errors
    /// Fatal FindCoordinator errors (e.g. authorization), or [`Error::Timeout`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(cluster: std::sync::Arc<onceflow::client::Cluster>) -> onceflow::client::Result<()> {
    /// use onceflow::client::coordinator::CoordinatorKind;
    /// let conn = cluster.coordinator(CoordinatorKind::Transaction, "rides-cleaner-0").await?;
    /// println!("rides-cleaner-0 is coordinated by {}", conn.addr());
    /// # Ok(()) }
    /// ```
    #[doc(hidden)] // internals: the protocol tests call it
    pub async fn coordinator(&self, kind: CoordinatorKind, key: &str) -> Result<Arc<Connection>> {
        let cached = self.cached_coordinator(kind, key);
        if let Some(node) = cached {
            if let Ok(c) = self.broker(node).await {
                return Ok(c);
            }
            self.forget_coordinator(kind, key);
        }
        let what = format!("finding the {kind:?} coordinator for '{key}'");
        let policy = self.policy(Op::General, self.config().api_timeout);
        self.retrying(&what, policy, Stale::Coordinator(kind, key), |_| async {
            let node = self.find_coordinator(kind, key).await?;
            self.cache_coordinator(kind, key, node);
            let generation = self.metadata().generation;
            match self.broker(node).await {
                Ok(c) => Ok(Step::Done(c)),
                // Not reachable: a connection error, so the coordinator is forgotten and looked
                // up again — and the metadata refreshed first, since the node's address comes
                // from there and may be stale or damaged (a bit flipped in a Metadata answer
                // turned "127.0.0.1" into "127.0.0.!": every lookup found the same node at the
                // same bad address until the join timed out, again and again). The producer's
                // sender does the same for a leader it cannot reach.
                Err(e) => {
                    let _ = self.refresh_if_older(generation).await;
                    Err(e)
                }
            }
        })
        .await
    }

    async fn find_coordinator(&self, kind: CoordinatorKind, key: &str) -> Result<i32> {
        let conn = self.any_broker().await?;
        let version = conn.version_for::<FindCoordinatorRequest>(None)?;
        let mut req = FindCoordinatorRequest::default().with_key_type(kind.wire());
        // v4+ batches keys (KIP-699); older versions take one key.
        if version >= 4 {
            req = req.with_coordinator_keys(vec![StrBytes::from_string(key.to_owned())]);
        } else {
            req = req.with_key(StrBytes::from_string(key.to_owned()));
        }
        let resp = conn
            .request_at(&req, version)
            .instrument(info_span!("find_coordinator", ?kind, key))
            .await?;
        let (code, node) = if version >= 4 {
            match resp.coordinators.first() {
                Some(c) => (c.error_code, c.node_id.0),
                None => (ErrorCode::COORDINATOR_NOT_AVAILABLE.0, -1),
            }
        } else {
            (resp.error_code, resp.node_id.0)
        };
        ErrorCode::check(code).map_err(|code| {
            Error::broker(format!("find {kind:?} coordinator for '{key}'"), code)
                .at_broker("broker", conn.addr())
        })?;
        if !self.metadata().brokers.contains_key(&node) {
            self.refresh_metadata().await?;
        }
        Ok(node)
    }
}

/// Calls the coordinator of `key`, retrying retriable errors and coordinator moves (looking
/// the coordinator up again) within `budget`, classified as transaction-coordinator errors.
/// `call` returns (error code, value).
pub(crate) async fn coordinator_call_on<T, F, Fut>(
    cluster: &Cluster,
    kind: CoordinatorKind,
    id: &str,
    what: &str,
    budget: Duration,
    call: F,
) -> Result<T>
where
    F: Fn(Arc<Connection>) -> Fut,
    Fut: std::future::Future<Output = Result<(i16, T)>>,
{
    let policy = cluster
        .policy(Op::TxnCoordinator, budget)
        .last_error_at_deadline();
    let what = format!("{what} for '{id}'");
    cluster
        .retrying(&what, policy, Stale::Coordinator(kind, id), |_| async {
            let conn = cluster.coordinator(kind, id).await?;
            let at = conn.addr().to_owned();
            let (code, v) = call(conn).await?;
            ErrorCode::check(code)
                .map_err(|code| Error::broker(format!("{what} (coordinator {at})"), code))?;
            Ok(Step::Done(v))
        })
        .await
}
