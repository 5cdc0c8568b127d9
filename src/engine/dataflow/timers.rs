//! Event-time timers of a keyed process function, and a keyed subtask's stored watermark.
//!
//! Timers live twice: in the checkpointed [`TimerState`] (so they survive a restart) and in
//! an in-memory queue ordered by (time, key) (Flink's heap timer service), loaded from the
//! state when the subtask starts; so each watermark costs a look at the queue's head, not a
//! scan of every key group.

use std::collections::BTreeSet;

use crate::engine::runtime::RuntimeError;
use crate::engine::state::{OperatorState, TimerState, ValueState};

/// Where a watermark is stored: under this key in the first key group of the subtask's range
/// (with a rescale, a subtask takes the smallest of those in its new range: no record that was
/// on time becomes late).
const WATERMARK_KEY: &[u8] = b"watermark";

/// The subtask's watermark stored in `at`, the smallest over its key groups.
///
/// # Errors
/// The store failed, or the stored watermark is not a number.
pub(crate) fn restore_watermark(
    state: &OperatorState,
    at: ValueState,
) -> Result<Option<i64>, RuntimeError> {
    let mut watermark: Option<i64> = None;
    for kg in state.key_groups() {
        if let Some(bytes) = at.get_in_group(state, kg, WATERMARK_KEY)? {
            let w: i64 = serde_json::from_slice(&bytes)
                .map_err(|e| RuntimeError::Internal(format!("stored watermark: {e}")))?;
            watermark = Some(watermark.map_or(w, |m| m.min(w)));
        }
    }
    Ok(watermark)
}

/// Stores the subtask's watermark `w` in `at` (see [`restore_watermark`]).
pub(crate) fn store_watermark(state: &mut OperatorState, at: ValueState, w: i64) {
    let groups = state.key_groups();
    if !groups.is_empty() {
        let bytes = w.to_string().into_bytes();
        at.set_in_group(state, groups.start, WATERMARK_KEY, &bytes);
    }
}

/// A keyed subtask's event-time timers (module docs).
#[derive(Debug, Default)]
pub(crate) struct TimerService {
    queue: BTreeSet<(i64, Vec<u8>)>,
    stored: Option<TimerState>,
}

impl TimerService {
    /// The timers of `state`'s key groups, kept in `timers`.
    ///
    /// # Errors
    /// The store failed.
    pub(crate) fn restore(
        state: &OperatorState,
        timers: TimerState,
    ) -> Result<TimerService, RuntimeError> {
        let queue = timers.due(state, i64::MAX)?.into_iter().collect();
        Ok(TimerService {
            queue,
            stored: Some(timers),
        })
    }

    /// A timer for `key` at `time`; registering it twice keeps one.
    pub(crate) fn register(&mut self, state: &mut OperatorState, key: &[u8], time: i64) {
        if let Some(t) = self.stored {
            t.register(state, key, time);
        }
        self.queue.insert((time, key.to_vec()));
    }

    /// Deletes `key`'s timer at `time`, if there is one.
    pub(crate) fn delete(&mut self, state: &mut OperatorState, key: &[u8], time: i64) {
        if self.queue.remove(&(time, key.to_vec())) {
            if let Some(t) = self.stored {
                t.delete(state, key, time);
            }
        }
    }

    /// How many timers are registered.
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// The earliest timer at or before `watermark`, removed (in time order, then key).
    pub(crate) fn pop_due(
        &mut self,
        state: &mut OperatorState,
        watermark: i64,
    ) -> Option<(i64, Vec<u8>)> {
        let first = self.queue.first()?;
        if first.0 > watermark {
            return None;
        }
        let (time, key) = self.queue.pop_first()?;
        if let Some(t) = self.stored {
            t.delete(state, &key, time);
        }
        Some((time, key))
    }
}
