//! The timeout budget: is `transaction.timeout.ms` long enough for the
//! checkpoint settings, and short enough for the broker?
//!
//! A sink's transaction opens right after one barrier and is committed after a later
//! checkpoint is durable. With F tolerated failures in a row, the failed checkpoints' committables
//! are carried into the next one, so a transaction may live through F + 1 checkpoint cycles,
//! each at most interval + timeout + min pause; then the job may crash and need the restart
//! allowance before recovery resumes it; and commits stop at the margin before the deadline.
//! If the broker aborts it before that (transaction.timeout.ms), a durable checkpoint's output
//! is lost. And a transaction.timeout.ms above the broker's transaction.max.timeout.ms makes
//! InitProducerId fail.

use super::{Millis, Settings};

/// Why the settings do not fit; each message says what to change and to what value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// A setting is out of range.
    #[error("{setting} = {value} is invalid: it must be at least 1")]
    Invalid {
        /// The setting's name.
        setting: &'static str,
        /// Its value.
        value: u64,
    },
    /// transaction.timeout.ms is too short for the checkpoint settings.
    #[error("transaction.timeout.ms = {transaction_timeout_ms} ms is shorter than a transaction may have to live, {required_ms} ms ((checkpoint.tolerable.failures + 1) · (checkpoint.interval.ms + checkpoint.timeout.ms + checkpoint.min.pause.ms) + restart.allowance.ms + checkpoint.commit.margin.ms): set transaction.timeout.ms to {required_ms}")]
    TooShort {
        /// The setting.
        transaction_timeout_ms: Millis,
        /// What the checkpoint settings need.
        required_ms: Millis,
    },
    /// transaction.timeout.ms exceeds what the broker accepts.
    #[error("transaction.timeout.ms = {transaction_timeout_ms} ms exceeds the broker's transaction.max.timeout.ms = {broker_max_ms} ms: set transaction.timeout.ms to {broker_max_ms}")]
    AboveBrokerMax {
        /// The setting.
        transaction_timeout_ms: Millis,
        /// The broker's limit.
        broker_max_ms: Millis,
    },
    /// No transaction.timeout.ms the broker accepts is long enough; a shorter interval fits.
    #[error("the checkpoint settings need transaction.timeout.ms ≥ {required_ms} ms, above the broker's transaction.max.timeout.ms = {broker_max_ms} ms: set checkpoint.interval.ms to {interval_fit_ms} (or raise the broker's transaction.max.timeout.ms to {required_ms})")]
    IntervalTooLong {
        /// What the checkpoint settings need.
        required_ms: Millis,
        /// The broker's limit.
        broker_max_ms: Millis,
        /// The longest checkpoint.interval.ms that fits.
        interval_fit_ms: Millis,
    },
    /// No transaction.timeout.ms the broker accepts is long enough, whatever the interval.
    #[error("the checkpoint settings need transaction.timeout.ms ≥ {required_ms} ms, above the broker's transaction.max.timeout.ms = {broker_max_ms} ms, even at a 1 ms interval: raise the broker's transaction.max.timeout.ms to {required_ms}, or lower checkpoint.timeout.ms, restart.allowance.ms or checkpoint.tolerable.failures")]
    BrokerMaxTooShort {
        /// What the checkpoint settings need.
        required_ms: Millis,
        /// The broker's limit.
        broker_max_ms: Millis,
    },
}

/// The longest a sink's transaction may have to live with these settings (see the module
/// docs): (F + 1) · (interval + checkpoint timeout + min pause) + restart allowance + margin.
pub fn required_transaction_timeout(s: &Settings) -> Millis {
    let cycles = u64::from(s.max_consecutive_failures).saturating_add(1);
    cycles
        .saturating_mul(cycle(s, s.interval_ms))
        .saturating_add(s.restart_allowance_ms)
        .saturating_add(s.commit_margin_ms)
}

fn cycle(s: &Settings, interval_ms: Millis) -> Millis {
    interval_ms
        .saturating_add(s.checkpoint_timeout_ms)
        .saturating_add(s.min_pause_ms)
}

/// Checks `transaction.timeout.ms` against the checkpoint settings and the broker's
/// `transaction.max.timeout.ms` (from DescribeConfigs) at start.
///
/// # Errors
/// The first problem found, as one line naming the setting to change and its new value.
pub fn check_budget(s: &Settings, broker_max_ms: Millis) -> Result<(), BudgetError> {
    for (setting, value) in [
        ("checkpoint.interval.ms", s.interval_ms),
        ("checkpoint.timeout.ms", s.checkpoint_timeout_ms),
        ("checkpoint.retained", s.retention),
        ("transaction.timeout.ms", s.transaction_timeout_ms),
    ] {
        if value == 0 {
            return Err(BudgetError::Invalid { setting, value });
        }
    }
    let required_ms = required_transaction_timeout(s);
    if required_ms > broker_max_ms {
        // The longest interval with (F + 1) · cycle + restart + margin ≤ broker max.
        let cycles = u64::from(s.max_consecutive_failures).saturating_add(1);
        let fit = broker_max_ms
            .checked_sub(s.restart_allowance_ms)
            .and_then(|m| m.checked_sub(s.commit_margin_ms))
            .map(|m| m / cycles)
            .and_then(|c| c.checked_sub(cycle(s, 0)))
            .filter(|&i| i >= 1);
        return Err(match fit {
            Some(interval_fit_ms) => BudgetError::IntervalTooLong {
                required_ms,
                broker_max_ms,
                interval_fit_ms,
            },
            None => BudgetError::BrokerMaxTooShort {
                required_ms,
                broker_max_ms,
            },
        });
    }
    if s.transaction_timeout_ms > broker_max_ms {
        return Err(BudgetError::AboveBrokerMax {
            transaction_timeout_ms: s.transaction_timeout_ms,
            broker_max_ms,
        });
    }
    if s.transaction_timeout_ms < required_ms {
        return Err(BudgetError::TooShort {
            transaction_timeout_ms: s.transaction_timeout_ms,
            required_ms,
        });
    }
    Ok(())
}
