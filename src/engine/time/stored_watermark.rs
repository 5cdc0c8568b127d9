//! A keyed subtask's watermark as its checkpoints keep it: under every key group of its range,
//! so that a restore at another parallelism gives each key group the watermark its windows
//! fired at, whichever subtask owned it.
//!
//! Why per key group: a subtask fires (and purges) its windows at its own watermark. After a
//! rescale, a new subtask's range takes key groups of several old ones, which stood at
//! different watermarks. It must start at the smallest of them (a record that was on time for
//! one old subtask must not become late), but a record of a key group whose old subtask stood
//! higher must still be late for it: that subtask purged the window already, and admitting the
//! record would fire a second, partial result for it. So the restore keeps, per key group, the
//! watermark it stood at (its *floor*), and a record is judged by the larger of the subtask's
//! watermark and its key group's floor, until the subtask's own watermark passes the floor.
//! A key group with no stored watermark has no floor (its subtask never had one).

use std::collections::BTreeMap;

use crate::engine::runtime::RuntimeError;
use crate::engine::state::{key_group, OperatorState, ValueState};

/// The key the watermark is stored under, in each key group.
const WATERMARK_KEY: &[u8] = b"watermark";

/// A keyed subtask's watermark floors and what it last stored (module docs).
#[derive(Debug)]
pub(crate) struct StoredWatermark {
    at: ValueState,
    /// Key group → the watermark it stood at, where that is above the subtask's.
    floors: BTreeMap<u16, i64>,
    /// The subtask's watermark when it was last written to its key groups.
    written: Option<i64>,
}

/// The subtask's watermark and the floors above it, from each key group's stored watermark
/// (`None`: none stored). Pure: the table test pins it.
fn restored(stored: &[(u16, Option<i64>)]) -> (Option<i64>, BTreeMap<u16, i64>) {
    // The smallest over the range, if every key group has one; one without a watermark (its
    // subtask never had one) leaves the subtask without one too.
    let watermark = stored
        .iter()
        .map(|(_, w)| *w)
        .try_fold(i64::MAX, |acc, w| w.map(|w| acc.min(w)))
        .filter(|_| !stored.is_empty());
    let floors = stored
        .iter()
        .filter_map(|(kg, w)| w.map(|w| (*kg, w)))
        .filter(|(_, w)| watermark.is_none_or(|m| *w > m))
        .collect();
    (watermark, floors)
}

impl StoredWatermark {
    /// Reads the stored watermark of every key group of `state`'s range from `at`; returns
    /// the subtask's watermark (the smallest) with the floors.
    ///
    /// # Errors
    /// The store failed, or a stored watermark is not a number.
    pub(crate) fn restore(
        state: &OperatorState,
        at: ValueState,
    ) -> Result<(Option<i64>, StoredWatermark), RuntimeError> {
        let mut stored = Vec::new();
        for kg in state.key_groups() {
            let w = match at.get_in_group(state, kg, WATERMARK_KEY)? {
                None => None,
                Some(bytes) => Some(serde_json::from_slice::<i64>(&bytes).map_err(|e| {
                    RuntimeError::Internal(format!("stored watermark of key group {kg}: {e}"))
                })?),
            };
            stored.push((kg, w));
        }
        let (watermark, floors) = restored(&stored);
        Ok((
            watermark,
            StoredWatermark {
                at,
                floors,
                written: watermark,
            },
        ))
    }

    /// The watermark a record of `key` is judged by: the subtask's `watermark`, or its key
    /// group's floor when that is higher.
    pub(crate) fn for_key(
        &self,
        state: &OperatorState,
        key: &[u8],
        watermark: Option<i64>,
    ) -> Option<i64> {
        if self.floors.is_empty() {
            return watermark;
        }
        let kg = key_group(key, state.key_groups);
        match (self.floors.get(&kg), watermark) {
            (Some(f), Some(w)) => Some((*f).max(w)),
            (Some(f), None) => Some(*f),
            (None, w) => w,
        }
    }

    /// The subtask's watermark moved to `w`: the floors it reached are gone.
    pub(crate) fn advanced(&mut self, w: i64) {
        self.floors.retain(|_, f| *f > w);
    }

    /// Before a snapshot: writes each key group's watermark (the subtask's, or its floor) when
    /// the subtask's changed since the last write, so the checkpoint holds it.
    pub(crate) fn store(&mut self, state: &mut OperatorState, watermark: Option<i64>) {
        let Some(w) = watermark else { return };
        if self.written == Some(w) {
            return;
        }
        for kg in state.key_groups() {
            let at = self.floors.get(&kg).map_or(w, |f| (*f).max(w));
            self.at
                .set_in_group(state, kg, WATERMARK_KEY, at.to_string().as_bytes());
        }
        self.written = Some(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_starts_at_the_smallest_and_keeps_the_higher_key_groups_as_floors() {
        let floors = |f: &[(u16, i64)]| f.iter().copied().collect::<BTreeMap<u16, i64>>();
        // (stored per key group) → (subtask watermark, floors)
        for (stored, want) in [
            (vec![], (None, floors(&[]))),
            (vec![(0, None), (1, None)], (None, floors(&[]))),
            (vec![(0, Some(5)), (1, Some(5))], (Some(5), floors(&[]))),
            // A scale-down: two old subtasks at 5 and 9.
            (
                vec![(0, Some(5)), (1, Some(5)), (2, Some(9)), (3, Some(9))],
                (Some(5), floors(&[(2, 9), (3, 9)])),
            ),
            // A key group whose old subtask never had a watermark: none for the subtask, the
            // others keep theirs as floors.
            (
                vec![(0, Some(5)), (1, None), (2, Some(9))],
                (None, floors(&[(0, 5), (2, 9)])),
            ),
        ] {
            assert_eq!(restored(&stored), want, "{stored:?}");
        }
    }
}
