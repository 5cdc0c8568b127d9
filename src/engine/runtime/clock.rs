//! The wall clock, in the milliseconds checkpoints and markers are stamped with.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::engine::checkpoint::Millis;

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
