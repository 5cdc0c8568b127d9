//! The seeds' pitfall, prevented: transaction.timeout.ms must outlast a checkpoint's whole
//! life (the interval, the checkpoint's own time and a restart that commits the restored
//! transactions), or the coordinator aborts a transaction whose checkpoint is already durable
//! and its records are lost; and it must not exceed the brokers' transaction.max.timeout.ms,
//! or InitProducerId is refused. Checked at start, against the real brokers.

use super::SinkError;
use crate::client::Admin;
use std::time::Duration;
use tracing::warn;

/// The broker setting that caps transaction.timeout.ms.
pub const BROKER_MAX_SETTING: &str = "transaction.max.timeout.ms";

/// Kafka's default for [`BROKER_MAX_SETTING`] (15 minutes), assumed when a broker does not
/// report it.
pub const BROKER_MAX_DEFAULT: Duration = Duration::from_secs(15 * 60);

/// The durations whose sum transaction.timeout.ms must cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutBudget {
    /// The sink's transaction.timeout.ms.
    pub transaction_timeout: Duration,
    /// checkpoint.interval.ms: a transaction is open at least this long before its barrier.
    pub checkpoint_interval: Duration,
    /// checkpoint.timeout.ms: the longest a checkpoint may take from barrier to durable.
    pub checkpoint_timeout: Duration,
    /// The time a crash and restart may take before the restored transactions are committed.
    pub restart_allowance: Duration,
}

impl TimeoutBudget {
    /// interval + checkpoint timeout + restart allowance: the least transaction.timeout.ms.
    pub fn required(&self) -> Duration {
        self.checkpoint_interval
            .saturating_add(self.checkpoint_timeout)
            .saturating_add(self.restart_allowance)
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Checks `budget` against the brokers' maximum `broker_max` (pure). The error is one line
/// naming the setting to change and the value to give it.
///
/// # Errors
/// [`SinkError::TimeoutBudget`] when transaction.timeout.ms is above `broker_max` or below
/// [`TimeoutBudget::required`].
pub fn check_budget(budget: &TimeoutBudget, broker_max: Duration) -> Result<(), SinkError> {
    let t = budget.transaction_timeout;
    let need = budget.required();
    let parts = format!(
        "checkpoint.interval.ms ({}) + checkpoint.timeout.ms ({}) + restart allowance ({}) = {} ms",
        ms(budget.checkpoint_interval),
        ms(budget.checkpoint_timeout),
        ms(budget.restart_allowance),
        ms(need)
    );
    let message = if need > broker_max {
        format!(
            "the exactly-once sink needs transaction.timeout.ms >= {parts}, above the brokers' {BROKER_MAX_SETTING}={}: shorten checkpoint.interval.ms or checkpoint.timeout.ms so that their sum with the restart allowance is at most {} ms (or raise {BROKER_MAX_SETTING} on every broker to at least {})",
            ms(broker_max),
            ms(broker_max),
            ms(need)
        )
    } else if t > broker_max {
        format!(
            "transaction.timeout.ms={} is above the brokers' {BROKER_MAX_SETTING}={}: set transaction.timeout.ms to at most {} (and at least {parts})",
            ms(t),
            ms(broker_max),
            ms(broker_max)
        )
    } else if t < need {
        format!(
            "transaction.timeout.ms={} is below {parts}, so a transaction could be aborted after its checkpoint is durable (data loss): set transaction.timeout.ms to at least {} (at most {BROKER_MAX_SETTING}={})",
            ms(t),
            ms(need),
            ms(broker_max)
        )
    } else {
        return Ok(());
    };
    Err(SinkError::TimeoutBudget(message))
}

/// Reads the brokers' transaction.max.timeout.ms (DescribeConfigs, resource type 4 = broker,
/// every broker in the metadata; the smallest counts) and checks `budget` against it
/// ([`check_budget`]). Returns the brokers' maximum.
///
/// # Errors
/// [`SinkError::TimeoutBudget`] as [`check_budget`]; [`SinkError::Client`] when the brokers
/// cannot be asked.
pub async fn check_timeout_budget(
    admin: &Admin,
    budget: &TimeoutBudget,
) -> Result<Duration, SinkError> {
    let broker_max = brokers_max_timeout(admin).await?;
    check_budget(budget, broker_max)?;
    Ok(broker_max)
}

/// The smallest transaction.max.timeout.ms any broker reports.
async fn brokers_max_timeout(admin: &Admin) -> Result<Duration, SinkError> {
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
    for node in nodes {
        let entries = admin
            .describe_configs(4, &node.to_string())
            .await
            .map_err(|e| SinkError::client(what, e))?;
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
    Ok(min.unwrap_or(BROKER_MAX_DEFAULT))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(t: u64, interval: u64, ckpt: u64, restart: u64) -> TimeoutBudget {
        TimeoutBudget {
            transaction_timeout: Duration::from_secs(t),
            checkpoint_interval: Duration::from_secs(interval),
            checkpoint_timeout: Duration::from_secs(ckpt),
            restart_allowance: Duration::from_secs(restart),
        }
    }

    #[test]
    fn the_budget_verdict_names_the_setting_and_the_value() {
        // (budget, broker max s) -> None (fine) or the words the one-line error must contain
        let table: [(TimeoutBudget, u64, Option<&[&str]>); 6] = [
            (budget(300, 60, 120, 60), 900, None),
            (budget(240, 60, 120, 60), 900, None), // exactly the sum
            (budget(900, 60, 120, 60), 900, None), // exactly the maximum
            (
                budget(1000, 60, 120, 60),
                900,
                Some(&[
                    "transaction.timeout.ms=1000000",
                    "transaction.max.timeout.ms=900000",
                    "at most 900000",
                ]),
            ),
            (
                budget(60, 60, 120, 60),
                900,
                Some(&[
                    "transaction.timeout.ms=60000",
                    "at least 240000",
                    "data loss",
                ]),
            ),
            (
                budget(300, 600, 600, 60),
                900,
                Some(&[
                    "shorten checkpoint.interval.ms",
                    "1260000 ms",
                    "at most 900000 ms",
                ]),
            ),
        ];
        for (b, max, want) in table {
            let got = check_budget(&b, Duration::from_secs(max));
            match want {
                None => assert!(got.is_ok(), "{b:?}: {got:?}"),
                Some(words) => {
                    let msg = got.expect_err("refused").to_string();
                    assert!(!msg.contains('\n'), "one line: {msg}");
                    for w in words {
                        assert!(msg.contains(w), "{b:?}: '{w}' missing in: {msg}");
                    }
                }
            }
        }
    }
}
