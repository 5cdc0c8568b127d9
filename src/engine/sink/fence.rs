//! Aborting the open transactions of transactional ids that no pool of this job will
//! initialize again, by fencing them (InitProducerId: the coordinator aborts the transaction
//! and bumps the epoch). Two callers pick the ids: a sink task's recovery (its ids beyond the
//! pool, `decide::is_lingering`) and the runtime after a rescale down (the ids of sink tasks
//! that no longer exist). ListTransactions asks every broker; the filter on the ids is the
//! caller's (KIP-1152's pattern filter is not in the client).

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::SinkError;
use crate::client::transactions::{ListTransactionsFilter, TxnState};
use crate::client::{Admin, Cluster};

/// Fences every Ongoing transaction whose id `whose` describes (`Some("lingering
/// transaction beyond the pool")`; `None` leaves it alone). Returns the fenced ids, in the
/// order listed.
///
/// # Errors
/// [`SinkError::Client`] naming the listing, or the id whose fencing failed.
pub(crate) async fn fence_ongoing(
    cluster: &Arc<Cluster>,
    transaction_timeout: Duration,
    whose: impl Fn(&str) -> Option<String>,
) -> Result<Vec<String>, SinkError> {
    let admin = Admin::with_cluster(cluster.clone());
    let filter = ListTransactionsFilter {
        states: vec![TxnState::Ongoing.as_str().to_owned()],
        ..Default::default()
    };
    let listed = admin
        .list_transactions(&filter)
        .await
        .map_err(|e| SinkError::client("listing open transactions", e))?;
    let mut fenced = Vec::new();
    for t in listed {
        let Some(what) = whose(&t.transactional_id) else {
            continue;
        };
        admin
            .fence_transactional_id(&t.transactional_id, transaction_timeout)
            .await
            .map_err(|e| {
                SinkError::client(format!("aborting {what} '{}'", t.transactional_id), e)
            })?;
        info!(transactional_id = %t.transactional_id, "{what} aborted");
        fenced.push(t.transactional_id);
    }
    Ok(fenced)
}
