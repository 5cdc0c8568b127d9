//! The timers of a keyed process function: event-time timers (fired by the watermark) and
//! processing-time timers (fired by the wall clock), each a [`TimerService`] on its own
//! checkpointed [`TimerState`].
//!
//! Timers live twice: in the checkpointed [`TimerState`] (so they survive a restart) and in
//! an in-memory queue ordered by (time, key) (Flink's heap timer service), loaded from the
//! state when the subtask starts; so each watermark costs a look at the queue's head, not a
//! scan of every key group.

use std::collections::BTreeSet;

use crate::engine::runtime::RuntimeError;
use crate::engine::state::{OperatorState, TimerState};

/// A keyed subtask's timers of one time domain (module docs).
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
        state: &mut OperatorState,
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

    /// The earliest timer's time.
    pub(crate) fn next(&self) -> Option<i64> {
        self.queue.first().map(|(t, _)| *t)
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
