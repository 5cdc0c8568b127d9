//! Reaching the brokers when a run starts.
//!
//! A job started while no broker answers (one restarting, a job started before its cluster)
//! has not failed yet: like Flink's restart strategy, the start tries again with a growing
//! pause, saying what it waits for, for `restart.allowance.ms` (or `default.api.timeout.ms`,
//! which a start has always been given, when that is longer); then the last error fails the
//! start, naming both. Each try is bounded by a few seconds, so the wait is reported while it
//! lasts. Errors retrying cannot fix (authentication, TLS settings) fail at once, and a stop
//! ends the wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::RuntimeError;
use crate::client::{ClientConfig, Cluster, ErrorClass};

/// The first pause between two tries; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(500);
/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(5);
/// The longest one try may take (the client's `default.api.timeout.ms` when shorter).
const TRY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to the brokers, waiting up to `allowance` (at least the client's
/// `default.api.timeout.ms`) for one to answer; `None` when `stop` turned true meanwhile.
///
/// # Errors
/// [`RuntimeError::Client`] with the last error, once the wait is over or at once for an
/// error retrying cannot fix; the message names `restart.allowance.ms`.
pub(crate) async fn connect(
    client: &ClientConfig,
    allowance: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Arc<Cluster>>, RuntimeError> {
    let budget = allowance.max(client.api_timeout);
    let started = Instant::now();
    let mut attempt = 0u32;
    loop {
        // A try bounded by a few seconds; once a broker answered, the cluster the run uses is
        // connected with the client's own settings.
        let mut probe = client.clone();
        probe.api_timeout = client.api_timeout.min(TRY_TIMEOUT);
        let answered = match Cluster::connect(probe).await {
            Ok(_) => Cluster::connect(client.clone()).await,
            Err(e) => Err(e),
        };
        let e = match answered {
            Ok(cluster) => {
                if attempt > 0 {
                    tracing::info!(tries = attempt + 1, "a broker answered");
                }
                return Ok(Some(cluster));
            }
            Err(e) => e,
        };
        let waited = started.elapsed();
        let retriable = matches!(
            e.class(),
            ErrorClass::Retriable | ErrorClass::RefreshAndRetry
        );
        let Some(pause) = retry_pause(attempt, waited, budget).filter(|_| retriable) else {
            return Err(RuntimeError::client(
                format!(
                    "connecting to the brokers (tried for {} ms: restart.allowance.ms = {} ms, default.api.timeout.ms = {} ms)",
                    waited.as_millis(),
                    allowance.as_millis(),
                    client.api_timeout.as_millis()
                ),
                e,
            ));
        };
        tracing::warn!(
            error = %e,
            waited_ms = waited.as_millis() as u64,
            allowance_ms = allowance.as_millis() as u64,
            "no broker answers yet; trying again until restart.allowance.ms has passed"
        );
        attempt = attempt.saturating_add(1);
        // A closed stop channel (its sender dropped) is no stop: the wait goes on.
        let stopped = async { stop.wait_for(|s| *s).await.is_ok() };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            true = stopped => return Ok(None),
        }
    }
}

/// The pause after failed try `attempt` (0-based): 0.5 s doubling up to 5 s, never past what
/// is left of `budget` after `waited`; `None` once nothing is left.
fn retry_pause(attempt: u32, waited: Duration, budget: Duration) -> Option<Duration> {
    let left = budget.checked_sub(waited).filter(|l| !l.is_zero())?;
    let doubled = FIRST_PAUSE.saturating_mul(1u32 << attempt.min(8));
    Some(doubled.min(MAX_PAUSE).min(left))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_to_five_seconds_and_never_outlasts_the_wait() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let cases = [
            // (attempt, waited, budget, pause)
            (0, s(0), s(60), Some(ms(500))),
            (1, s(1), s(60), Some(ms(1000))),
            (3, s(5), s(60), Some(ms(4000))),
            (4, s(9), s(60), Some(s(5))),
            (40, s(30), s(60), Some(s(5))),
            (4, ms(59_000), s(60), Some(s(1))),
            (0, s(60), s(60), None),
            (0, s(61), s(60), None),
            (0, s(0), s(0), None),
        ];
        for (attempt, waited, allowance, want) in cases {
            assert_eq!(
                retry_pause(attempt, waited, allowance),
                want,
                "attempt {attempt}, waited {waited:?}, budget {allowance:?}"
            );
        }
    }
}
