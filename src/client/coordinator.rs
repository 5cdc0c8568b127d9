//! Finding group and transaction coordinators (FindCoordinator), with a cache.
//!
//! A coordinator moves when its partition of `__consumer_offsets` / `__transaction_state`
//! moves; callers that get NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE call
//! [`Cluster::forget_coordinator`] and look it up again.

use super::cluster::{backoff, Cluster};
use super::connection::Connection;
use super::error::{Error, ErrorClass, Op, Result};
use crate::protocol::ErrorCode;
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info_span, Instrument};

/// What kind of coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordinatorKind {
    /// A consumer group's coordinator.
    Group,
    /// A transactional id's coordinator.
    Transaction,
}

impl CoordinatorKind {
    fn wire(self) -> i8 {
        match self {
            CoordinatorKind::Group => 0,
            CoordinatorKind::Transaction => 1,
        }
    }
}

impl Cluster {
    /// A connection to the coordinator of `key`, looked up (and cached) with FindCoordinator,
    /// retrying COORDINATOR_NOT_AVAILABLE and friends until default.api.timeout.ms.
    ///
    /// # Errors
    /// Fatal FindCoordinator errors (e.g. authorization), or [`Error::Timeout`].
    pub async fn coordinator(&self, kind: CoordinatorKind, key: &str) -> Result<Arc<Connection>> {
        let cached = self.cached_coordinator(kind, key);
        if let Some(node) = cached {
            if let Ok(c) = self.broker(node).await {
                return Ok(c);
            }
            self.forget_coordinator(kind, key);
        }
        let deadline = Instant::now() + self.config().api_timeout;
        let mut attempt = 0;
        loop {
            match self.find_coordinator(kind, key).await {
                Ok(node) => {
                    self.cache_coordinator(kind, key, node);
                    match self.broker(node).await {
                        Ok(c) => return Ok(c),
                        Err(e) if Instant::now() >= deadline => return Err(e),
                        Err(_) => self.forget_coordinator(kind, key),
                    }
                }
                Err(e) if e.class() == ErrorClass::Fatal => return Err(e),
                Err(e) if Instant::now() >= deadline => {
                    return Err(Error::Timeout {
                        what: format!(
                            "finding the {kind:?} coordinator for '{key}' (last error: {e})"
                        ),
                        after: self.config().api_timeout,
                    })
                }
                Err(e) => debug!(?kind, key, error = %e, "coordinator lookup failed; retrying"),
            }
            attempt += 1;
            let cfg = self.config();
            tokio::time::sleep(backoff(cfg.retry_backoff, cfg.retry_backoff_max, attempt)).await;
        }
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
    F: Fn(Arc<crate::client::connection::Connection>) -> Fut,
    Fut: std::future::Future<Output = Result<(i16, T)>>,
{
    let deadline = Instant::now() + budget;
    let mut attempt = 0u32;
    loop {
        let result = async {
            let conn = cluster.coordinator(kind, id).await?;
            let (code, v) = call(conn).await?;
            ErrorCode::check(code)
                .map_err(|code| Error::broker(format!("{what} for '{id}'"), code))?;
            Ok::<T, Error>(v)
        }
        .await;
        let e = match result {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let class = e.class_in(Op::TxnCoordinator);
        if !matches!(class, ErrorClass::Retriable | ErrorClass::RefreshAndRetry)
            || Instant::now() >= deadline
        {
            return Err(e);
        }
        if class == ErrorClass::RefreshAndRetry {
            cluster.forget_coordinator(kind, id);
        }
        attempt += 1;
        // CONCURRENT_TRANSACTIONS: the previous transaction's markers are being written, which
        // takes milliseconds: start short and grow.
        let wait = if e.code() == Some(ErrorCode::CONCURRENT_TRANSACTIONS) {
            backoff(Duration::from_millis(20), Duration::from_secs(1), attempt)
        } else {
            let cfg = cluster.config();
            backoff(cfg.retry_backoff, cfg.retry_backoff_max, attempt)
        };
        tokio::time::sleep(wait).await;
    }
}
