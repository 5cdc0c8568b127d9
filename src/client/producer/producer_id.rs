//! Obtaining and bumping the producer id and epoch (InitProducerId).
//!
//! An idempotent producer gets a producer id and epoch once at start. When a sequence gap may
//! exist (KIP-360: a batch failed or expired after its sequence was assigned, or the broker lost
//! the producer's state) it asks for the next epoch of the same producer id by sending its
//! current id and epoch; the broker may answer with a new producer id when the epoch is
//! exhausted. Either way every partition starts again at sequence 0.

use super::identity::{check_assigned, Identity};
use crate::client::cluster::{Cluster, Stale};
use crate::client::error::{Error, Op, Result};
use crate::client::retry::Step;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::{InitProducerIdRequest, ProducerId};
use std::time::Duration;
use tracing::{info, info_span, Instrument};

/// Asks any broker for a producer id (non-transactional), or for the next epoch of `current`.
///
/// # Errors
/// Fatal broker errors (e.g. CLUSTER_AUTHORIZATION_FAILED), or [`Error::Timeout`] when no
/// broker grants one within `timeout`.
pub(crate) async fn init_producer_id(
    cluster: &Cluster,
    current: Option<Identity>,
    timeout: Duration,
) -> Result<Identity> {
    let span = info_span!(
        "init_producer_id",
        current_id = current.map(|c| c.producer_id),
        current_epoch = current.map(|c| c.epoch)
    );
    let policy = cluster.policy(Op::General, timeout);
    let id = cluster
        .retrying(
            "obtaining a producer id",
            policy,
            Stale::Metadata,
            |_| async {
                let conn = cluster.any_broker().await?;
                let mut req = InitProducerIdRequest::default()
                    .with_transactional_id(None)
                    .with_transaction_timeout_ms(i32::MAX)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
                // Bumping an existing producer's epoch needs v3+ (KIP-360); older brokers only
                // hand out a fresh id.
                let v3 = conn
                    .versions()
                    .version_for::<InitProducerIdRequest>(None)
                    .unwrap_or(0)
                    >= 3;
                if let (Some(c), true) = (current, v3) {
                    req = req
                        .with_producer_id(ProducerId(c.producer_id))
                        .with_producer_epoch(c.epoch);
                }
                let resp = conn.request(&req).await?;
                ErrorCode::check(resp.error_code).map_err(|code| {
                    Error::broker("InitProducerId", code).at_broker("broker", conn.addr())
                })?;
                let id = Identity {
                    producer_id: resp.producer_id.0,
                    epoch: resp.producer_epoch,
                };
                check_assigned(conn.addr(), id)?;
                Ok(Step::Done(id))
            },
        )
        .instrument(span)
        .await?;
    info!(
        producer_id = id.producer_id,
        epoch = id.epoch,
        "producer id assigned"
    );
    Ok(id)
}
