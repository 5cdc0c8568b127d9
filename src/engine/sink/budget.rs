//! The seeds' pitfall, prevented: transaction.timeout.ms must outlast a checkpoint's whole
//! life (the interval, the checkpoint's own time and a restart that commits the restored
//! transactions), or the coordinator aborts a transaction whose checkpoint is already durable
//! and its records are lost; and it must not exceed the brokers' transaction.max.timeout.ms,
//! or InitProducerId is refused. Checked at start, against the real brokers.

use super::SinkError;
use crate::client::Admin;
use crate::engine::checkpoint::{check_budget, Settings};
use std::time::Duration;
use tracing::warn;

/// The broker setting that caps transaction.timeout.ms.
pub const BROKER_MAX_SETTING: &str = "transaction.max.timeout.ms";

/// Kafka's default for [`BROKER_MAX_SETTING`] (15 minutes), assumed when a broker does not
/// report it.
pub const BROKER_MAX_DEFAULT: Duration = Duration::from_secs(15 * 60);

/// Reads the brokers' transaction.max.timeout.ms (DescribeConfigs, resource type 4 = broker,
/// every broker in the metadata; the smallest counts) and checks the checkpoint settings
/// against it with the one budget rule, [`check_budget`]. Returns the brokers' maximum.
///
/// # Errors
/// [`SinkError::TimeoutBudget`] naming the setting to change and its value;
/// [`SinkError::Client`] when the brokers cannot be asked.
pub async fn check_timeout_budget(
    admin: &Admin,
    settings: &Settings,
) -> Result<Duration, SinkError> {
    let broker_max = brokers_max_timeout(admin).await?;
    let max_ms = u64::try_from(broker_max.as_millis()).unwrap_or(u64::MAX);
    check_budget(settings, max_ms).map_err(|e| SinkError::TimeoutBudget(e.to_string()))?;
    Ok(broker_max)
}

/// The smallest transaction.max.timeout.ms any broker reports (brokers that do not answer are
/// left out, with a warning, while one does).
pub async fn brokers_max_timeout(admin: &Admin) -> Result<Duration, SinkError> {
    let what = "reading the brokers' transaction.max.timeout.ms";
    let cluster = admin.cluster();
    if cluster.metadata().brokers.is_empty() {
        cluster
            .refresh_metadata()
            .await
            .map_err(|e| SinkError::client(what, e))?;
    }
    let mut nodes: Vec<i32> = cluster.metadata().brokers.keys().copied().collect();
    nodes.sort_unstable();
    let mut min: Option<Duration> = None;
    let mut last_error = None;
    for node in nodes {
        // A broker that does not answer (down, or not fenced yet after a crash) hosts no
        // coordinator the job can use now; the others' values decide, if any answers.
        let entries = match admin.describe_configs(4, &node.to_string()).await {
            Ok(entries) => entries,
            Err(e) if e.code().is_none() => {
                warn!(node, error = %e, "broker did not answer for {BROKER_MAX_SETTING}; left out");
                last_error = Some(e);
                continue;
            }
            Err(e) => return Err(SinkError::client(what, e)),
        };
        let value = entries
            .iter()
            .find(|c| c.name == BROKER_MAX_SETTING)
            .and_then(|c| c.value.as_deref());
        let max = match value.map(str::parse::<u64>) {
            Some(Ok(v)) => Duration::from_millis(v),
            other => {
                warn!(node, value = ?other, "broker does not report {BROKER_MAX_SETTING}; assuming Kafka's default");
                BROKER_MAX_DEFAULT
            }
        };
        min = Some(min.map_or(max, |m| m.min(max)));
    }
    match (min, last_error) {
        (Some(min), _) => Ok(min),
        (None, Some(e)) => Err(SinkError::client(what, e)),
        (None, None) => Ok(BROKER_MAX_DEFAULT),
    }
}
