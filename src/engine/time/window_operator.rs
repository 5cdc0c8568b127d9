//! The keyed event-time window operator, one for every front end: a job file's window
//! aggregate and a typed job's `window(..).aggregate(..)` both run it, each giving it its
//! aggregate ([`WindowFunction`]) and turning what it fires into records.
//!
//! Its state, in the keyed subtask's [`OperatorState`] (so it moves with its key groups on a
//! rescale):
//! - per key, window start → accumulator (`ACCUMULATORS`);
//! - a fire timer per key at each window's end (`FIRE`), and a cleanup timer at end + allowed
//!   lateness (`CLEANUP`) that drops the accumulator;
//! - the subtask's watermark per key group ([`StoredWatermark`], written before each snapshot),
//!   so a restart, at any parallelism, does not re-open windows that fired.
//!
//! The rules are [`super::rules`]: a record goes to the windows it belongs to unless it is late
//! for them; a late update (a window that fired but is kept for the allowed lateness) fires
//! the window again at once. Timers are looked for only when the watermark crosses a window
//! end or cleanup ([`timers_may_be_due`]), and a watermark that makes many windows due fires
//! them a chunk at a time ([`FIRE_CHUNK`] results, by key group; per key in time order), so a
//! watermark closing an hour for a million keys never holds every result in memory at once.
//!
//! Session windows keep, per key, its open sessions and their accumulators in one value
//! (`SESSIONS`, [`super::session::Sessions`]); a record's session merges with the ones it touches ([`super::session`]), their
//! accumulators merged ([`WindowFunction::merge`]) and their timers moved to the merged end.
//! Their ends fall anywhere, so in place of the residue rule a [`TimerBuckets`] in memory
//! (loaded from the stored timers at restore) says when a scan may find one due.

use super::rules::{admit, route, start_key, Admission, Window, WindowKind};
use super::session::{decode_sessions, encode_sessions, merge_session, Sessions, TimerBuckets};
use super::stored_watermark::StoredWatermark;
use crate::engine::runtime::RuntimeError;
use crate::engine::state::{MapState, OperatorState, TimerState, ValueState};

/// Per record key: window start (u64 BE, sign flipped) → accumulator.
const ACCUMULATORS: MapState = MapState::new(0);
/// (window end, record key): fire the window.
const FIRE: TimerState = TimerState::new(1);
/// (window end + allowed lateness, record key): drop the window's state.
const CLEANUP: TimerState = TimerState::new(2);
/// The subtask's watermark, in every key group of its range.
const WATERMARK: ValueState = ValueState::new(3);
/// Per record key, its open session windows and their accumulators.
const SESSIONS: ValueState = ValueState::new(4);

/// Results a firing hands out at most per call before the rest waits for
/// [`WindowOperator::fire_more`] (a firing of more is split, by key group).
pub(crate) const FIRE_CHUNK: usize = 1024;

/// What a window computes: an accumulator per key and window, kept in the state as bytes.
pub(crate) trait WindowFunction {
    /// What a record brings to the window.
    type Input;
    /// The running aggregate of one key's window.
    type Acc;
    /// A fresh accumulator.
    fn create(&self) -> Self::Acc;
    /// Adds one input.
    fn add(&self, acc: &mut Self::Acc, input: &Self::Input);
    /// Merges `other` into `acc` (two sessions became one).
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc);
    /// The accumulator as stored.
    ///
    /// # Errors
    /// It cannot be encoded (a message for the operator's error).
    fn encode(&self, acc: &Self::Acc) -> Result<Vec<u8>, String>;
    /// A stored accumulator.
    ///
    /// # Errors
    /// The bytes are not one (a message for the operator's error).
    fn decode(&self, bytes: &[u8]) -> Result<Self::Acc, String>;
}

/// A window the operator fired: the key's canonical bytes, the window and its accumulator.
pub(crate) struct Fired<A> {
    pub key: Vec<u8>,
    pub window: Window,
    pub acc: A,
}

/// The window operator of one keyed subtask (module docs).
pub(crate) struct WindowOperator<F> {
    function: F,
    kind: WindowKind,
    /// Allowed lateness, ms.
    lateness: i64,
    /// For error messages.
    name: String,
    state: OperatorState,
    /// The subtask's watermark: the smallest of its inputs' (never back).
    watermark: Option<i64>,
    /// The key groups' restored watermarks above it, and what the checkpoints keep.
    stored: StoredWatermark,
    /// The watermark up to which timers were last looked for (a look visits every key group
    /// of the range).
    scanned_to: Option<i64>,
    /// A firing under way: the watermark of the scan before (its timers are fired already:
    /// `None` after a restore), its watermark and the key groups not fired yet.
    firing: Option<(Option<i64>, i64, std::vec::IntoIter<u16>)>,
    /// Session windows: where timers may be (module docs); `None` for the others.
    buckets: Option<TimerBuckets>,
}

/// Whether a timer may have become due as the watermark went from `scanned` to `w`. Window
/// ends are ≡ size (mod slide) and cleanups ≡ size + lateness (mod slide), so a timer in
/// (scanned, w] means `w` crossed one of those residues. Pure, so the scan (which visits
/// every key group) runs once per window boundary, not once per record.
pub(crate) fn timers_may_be_due(
    scanned: Option<i64>,
    w: i64,
    size: i64,
    slide: i64,
    lateness: i64,
) -> bool {
    let Some(s) = scanned else {
        return true;
    };
    let phase = |x: i64, offset: i64| x.saturating_sub(offset).div_euclid(slide.max(1));
    [size, size.saturating_add(lateness)]
        .iter()
        .any(|&off| phase(w, off) != phase(s, off))
}

impl<F: WindowFunction> WindowOperator<F> {
    /// The operator on `state` (the subtask's key groups), its watermark restored.
    ///
    /// # Errors
    /// The store failed.
    pub(crate) fn restore(
        function: F,
        kind: WindowKind,
        lateness: i64,
        name: impl Into<String>,
        mut state: OperatorState,
    ) -> Result<WindowOperator<F>, RuntimeError> {
        let (watermark, stored) = StoredWatermark::restore(&state, WATERMARK)?;
        let buckets = match kind {
            WindowKind::Session { gap } => {
                let mut buckets = TimerBuckets::for_gap(gap);
                for kg in state.key_groups() {
                    for timers in [FIRE, CLEANUP] {
                        for (time, _) in timers.due_in_group(&mut state, kg, i64::MAX)? {
                            buckets.register(kg, time);
                        }
                    }
                }
                Some(buckets)
            }
            _ => None,
        };
        Ok(WindowOperator {
            function,
            kind,
            lateness,
            name: name.into(),
            state,
            watermark,
            stored,
            // None: the first advance after a restore looks at the restored timers.
            scanned_to: None,
            firing: None,
            buckets,
        })
    }

    fn internal(&self, what: &str, e: String) -> RuntimeError {
        RuntimeError::Internal(format!("{}: {what}: {e}", self.name))
    }

    /// Adds `input` of key `key` at event time `t` to its windows; a late update fires its
    /// window again into `fired`. Returns whether the record is late (for every window it
    /// belongs to: the caller counts it and sends it to its late output).
    ///
    /// # Errors
    /// The store failed, or an accumulator does not encode or decode.
    pub(crate) fn add(
        &mut self,
        key: &[u8],
        t: i64,
        input: &F::Input,
        fired: &mut Vec<Fired<F::Acc>>,
    ) -> Result<bool, RuntimeError> {
        let judged_by = self.stored.for_key(&self.state, key, self.watermark);
        if let WindowKind::Session { gap } = self.kind {
            return self.add_to_session(key, t, gap, judged_by, input, fired);
        }
        let routed = route(self.kind, t, judged_by, self.lateness);
        for &(window, admission) in &routed.windows {
            if admission == Admission::Late {
                continue;
            }
            let mut acc = self.accumulator(key, window)?;
            self.function.add(&mut acc, input);
            let bytes = self.encode_acc(&acc)?;
            ACCUMULATORS.insert(&mut self.state, key, &start_key(window.start), &bytes);
            if self.fire_now_or_later(key, window, acc, admission, fired) {
                CLEANUP.register(
                    &mut self.state,
                    key,
                    window.end.saturating_add(self.lateness),
                );
            }
        }
        Ok(routed.is_late())
    }

    /// [`WindowOperator::add`] for session windows: the record's session merges with the
    /// key's open ones it touches; the merged session is judged by the window rules. A
    /// session already past its cleanup (its cleanup timer not reached by a scan yet: a key
    /// group's watermark floor after a rescale) is left as it is, for that timer: never
    /// merged, never dropped here (dropping it without storing the list when the record then
    /// turns out late would leave it without a timer for ever).
    fn add_to_session(
        &mut self,
        key: &[u8],
        t: i64,
        gap: i64,
        judged_by: Option<i64>,
        input: &F::Input,
        fired: &mut Vec<Fired<F::Acc>>,
    ) -> Result<bool, RuntimeError> {
        let Some(end) = t.checked_add(gap) else {
            // No session fits the i64 range: the record cannot count anywhere.
            return Ok(true);
        };
        let (expired, open): (Sessions, Sessions) = self
            .sessions(key)?
            .into_iter()
            .partition(|(window, _)| window.expired(judged_by, self.lateness));
        let windows: Vec<Window> = open.iter().map(|(w, _)| *w).collect();
        let merge = merge_session(&windows, Window { start: t, end });
        let admission = admit(merge.merged, judged_by, self.lateness);
        if admission == Admission::Late {
            return Ok(true);
        }
        let mut acc = self.function.create();
        let mut kept = expired;
        for (window, bytes) in open {
            if merge.absorbed.contains(&window) {
                let other = self.decode_acc(&bytes)?;
                self.function.merge(&mut acc, other);
                self.delete_timers(key, window);
            } else {
                kept.push((window, bytes));
            }
        }
        self.function.add(&mut acc, input);
        let window = merge.merged;
        kept.push((window, self.encode_acc(&acc)?));
        kept.sort_by_key(|(w, _)| w.start);
        self.store_sessions(key, &kept);
        let cleanup = window.end.saturating_add(self.lateness);
        CLEANUP.register(&mut self.state, key, cleanup);
        let kg = self.state.key_group(key);
        let buckets = self.buckets.get_or_insert_with(|| TimerBuckets::for_gap(gap));
        buckets.register(kg, cleanup);
        if self.fire_now_or_later(key, window, acc, admission, fired) {
            if let Some(buckets) = &mut self.buckets {
                buckets.register(kg, window.end);
            }
        }
        Ok(false)
    }

    /// A late update fires `window` at once into `fired`; otherwise its fire timer is set at
    /// its end, and this returns true.
    fn fire_now_or_later(
        &mut self,
        key: &[u8],
        window: Window,
        acc: F::Acc,
        admission: Admission,
        fired: &mut Vec<Fired<F::Acc>>,
    ) -> bool {
        if admission == Admission::LateUpdate {
            fired.push(Fired {
                key: key.to_vec(),
                window,
                acc,
            });
            return false;
        }
        FIRE.register(&mut self.state, key, window.end);
        true
    }

    /// The key's stored sessions.
    fn sessions(&self, key: &[u8]) -> Result<Sessions, RuntimeError> {
        match SESSIONS.get(&self.state, key)? {
            None => Ok(Sessions::new()),
            Some(bytes) => decode_sessions(&bytes).ok_or_else(|| {
                self.internal("stored sessions", "not a list of sessions".into())
            }),
        }
    }

    /// Stores the key's sessions (none: the key's value goes).
    fn store_sessions(&mut self, key: &[u8], sessions: &Sessions) {
        if sessions.is_empty() {
            SESSIONS.clear(&mut self.state, key);
        } else {
            SESSIONS.set(&mut self.state, key, &encode_sessions(sessions));
        }
    }

    /// Deletes a session's timers (it merged into another, or is dropped).
    fn delete_timers(&mut self, key: &[u8], window: Window) {
        FIRE.delete(&mut self.state, key, window.end);
        CLEANUP.delete(
            &mut self.state,
            key,
            window.end.saturating_add(self.lateness),
        );
    }

    fn encode_acc(&self, acc: &F::Acc) -> Result<Vec<u8>, RuntimeError> {
        self.function
            .encode(acc)
            .map_err(|e| self.internal("accumulator", e))
    }

    fn decode_acc(&self, bytes: &[u8]) -> Result<F::Acc, RuntimeError> {
        self.function
            .decode(bytes)
            .map_err(|e| self.internal("stored accumulator", e))
    }

    fn accumulator(&self, key: &[u8], window: Window) -> Result<F::Acc, RuntimeError> {
        match ACCUMULATORS.get(&self.state, key, &start_key(window.start))? {
            Some(bytes) => self
                .function
                .decode(&bytes)
                .map_err(|e| self.internal("stored accumulator", e)),
            None => Ok(self.function.create()),
        }
    }

    /// Moves the watermark to `w` (never back); when it crosses a window boundary, starts a
    /// firing of the due windows and fires its first chunk into `fired`.
    ///
    /// # Errors
    /// The store failed, or an accumulator does not decode.
    pub(crate) fn advance_to(
        &mut self,
        w: i64,
        fired: &mut Vec<Fired<F::Acc>>,
    ) -> Result<(), RuntimeError> {
        if self.watermark.is_some_and(|c| c >= w) {
            return Ok(());
        }
        self.watermark = Some(w);
        self.stored.advanced(w);
        let groups: Vec<u16> = match &mut self.buckets {
            Some(buckets) => {
                let due = buckets.due(self.scanned_to, w, self.state.key_groups());
                buckets.scanned(w);
                due
            }
            None => {
                let (size, slide) = self.kind.size_and_slide();
                if !timers_may_be_due(self.scanned_to, w, size, slide, self.lateness) {
                    return Ok(());
                }
                self.state.key_groups().collect()
            }
        };
        // No timer in (scanned, w] outside `groups`: after them, every timer at or before w
        // has fired.
        let from = self.scanned_to.replace(w);
        if !groups.is_empty() {
            self.firing = Some((from, w, groups.into_iter()));
        }
        self.fire_more(fired)
    }

    /// Fires the due timers of the next key groups of the firing under way, until at least
    /// [`FIRE_CHUNK`] results are out or every key group is done.
    ///
    /// # Errors
    /// The store failed, or an accumulator does not decode.
    pub(crate) fn fire_more(&mut self, fired: &mut Vec<Fired<F::Acc>>) -> Result<(), RuntimeError> {
        let Some((from, w, mut groups)) = self.firing.take() else {
            return Ok(());
        };
        let start = fired.len();
        while fired.len() - start < FIRE_CHUNK {
            let Some(kg) = groups.next() else {
                break;
            };
            self.fire_group(kg, (from, w), fired)?;
        }
        if groups.len() > 0 {
            self.firing = Some((from, w, groups));
        }
        Ok(())
    }

    /// Whether a firing is under way ([`WindowOperator::fire_more`] has more).
    pub(crate) fn firing(&self) -> bool {
        self.firing.is_some()
    }

    /// Key group `kg`'s windows due in (`from`, `w`] (by end, then key), then its expired
    /// windows dropped. Every timer at or before `from` fired in an earlier scan, and none is
    /// registered at or below the watermark (an on-time window ends after it, a late update's
    /// cleanup is after it), so the scan starts after `from`.
    fn fire_group(
        &mut self,
        kg: u16,
        (from, w): (Option<i64>, i64),
        fired: &mut Vec<Fired<F::Acc>>,
    ) -> Result<(), RuntimeError> {
        if matches!(self.kind, WindowKind::Session { .. }) {
            return self.fire_sessions(kg, (from, w), fired);
        }
        let (size, _) = self.kind.size_and_slide();
        for (end, key) in FIRE.due_in_group_after(&mut self.state, kg, from, w)? {
            FIRE.delete(&mut self.state, &key, end);
            let window = Window {
                start: end - size,
                end,
            };
            let acc = self.accumulator(&key, window)?;
            fired.push(Fired { key, window, acc });
        }
        for (at, key) in CLEANUP.due_in_group_after(&mut self.state, kg, from, w)? {
            CLEANUP.delete(&mut self.state, &key, at);
            let start = at - self.lateness - size;
            ACCUMULATORS.remove(&mut self.state, &key, &start_key(start));
        }
        Ok(())
    }

    /// [`Self::fire_group`] for sessions: each timer finds its session by its end.
    fn fire_sessions(
        &mut self,
        kg: u16,
        (from, w): (Option<i64>, i64),
        fired: &mut Vec<Fired<F::Acc>>,
    ) -> Result<(), RuntimeError> {
        for (end, key) in FIRE.due_in_group_after(&mut self.state, kg, from, w)? {
            FIRE.delete(&mut self.state, &key, end);
            let ending = self.sessions(&key)?.into_iter().find(|(w, _)| w.end == end);
            if let Some((window, bytes)) = ending {
                let acc = self.decode_acc(&bytes)?;
                fired.push(Fired { key, window, acc });
            }
        }
        // A cleanup drops every session of its key past end + lateness (not only the one
        // whose end it was set for): a session is found by what it is, not by the lateness
        // its timer was computed with.
        for (at, key) in CLEANUP.due_in_group_after(&mut self.state, kg, from, w)? {
            CLEANUP.delete(&mut self.state, &key, at);
            let (expired, kept): (Sessions, Sessions) = self
                .sessions(&key)?
                .into_iter()
                .partition(|(window, _)| window.expired(Some(w), self.lateness));
            if !expired.is_empty() {
                for (window, _) in expired {
                    self.delete_timers(&key, window);
                }
                self.store_sessions(&key, &kept);
            }
        }
        Ok(())
    }

    /// The subtask's watermark.
    pub(crate) fn watermark(&self) -> Option<i64> {
        self.watermark
    }

    /// The operator's state, for snapshots.
    pub(crate) fn state_mut(&mut self) -> &mut OperatorState {
        &mut self.state
    }

    /// Writes the watermark under every key group of the range (before a snapshot).
    pub(crate) fn before_snapshot(&mut self) {
        self.stored.store(&mut self.state, self.watermark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::state::{Layout, OperatorLayout, RestoreFrom, StateStore, StoreOptions};

    /// Counts records.
    struct Count;

    impl WindowFunction for Count {
        type Input = ();
        type Acc = u64;
        fn create(&self) -> u64 {
            0
        }
        fn add(&self, acc: &mut u64, (): &()) {
            *acc += 1;
        }
        fn merge(&self, acc: &mut u64, other: u64) {
            *acc += other;
        }
        fn encode(&self, acc: &u64) -> Result<Vec<u8>, String> {
            Ok(acc.to_be_bytes().to_vec())
        }
        fn decode(&self, bytes: &[u8]) -> Result<u64, String> {
            Ok(u64::from_be_bytes(
                bytes.try_into().map_err(|_| "not 8 bytes".to_owned())?,
            ))
        }
    }

    fn operator(
        dir: &std::path::Path,
        kind: WindowKind,
        lateness: i64,
    ) -> (StateStore, WindowOperator<Count>) {
        let layout = Layout {
            key_groups: 4,
            operators: vec![OperatorLayout::new("w", "window")],
            sink_prefix: None,
            sink_ids: 0,
        };
        let (store, _) =
            StateStore::open(dir, layout, StoreOptions::default(), RestoreFrom::Fresh).unwrap();
        let state = store.operator("w").unwrap();
        let op = WindowOperator::restore(Count, kind, lateness, "w", state).unwrap();
        (store, op)
    }

    enum Step {
        /// A record of key "a" or "b" at event time t.
        Add(&'static str, i64),
        /// The watermark moves to w.
        Advance(i64),
    }
    use Step::{Add, Advance};

    /// A step, what it fires ((key, window start, count), in any order) and whether the
    /// record was late.
    type Row = (Step, Vec<(&'static str, i64, u64)>, bool);

    /// The firing and cleanup rules, step by step.
    #[test]
    fn firing_and_cleanup_table() {
        let tumbling = WindowKind::Tumbling { size: 10 };
        let sliding = WindowKind::Sliding { size: 10, slide: 5 };
        let session = WindowKind::Session { gap: 10 };
        #[rustfmt::skip]
        let cases: Vec<(&str, WindowKind, i64, Vec<Row>)> = vec![
            ("a window fires once its end is reached, not before", tumbling, 0, vec![
                (Add("a", 1), vec![], false),
                (Add("a", 9), vec![], false),
                (Advance(9), vec![], false),
                (Advance(10), vec![("a", 0, 2)], false),
                (Advance(30), vec![], false),
            ]),
            ("keys fire apart, each with its own count", tumbling, 0, vec![
                (Add("a", 1), vec![], false),
                (Add("b", 2), vec![], false),
                (Add("b", 12), vec![], false),
                (Advance(20), vec![("a", 0, 1), ("b", 0, 1), ("b", 10, 1)], false),
            ]),
            ("without lateness a record for a fired window is late and counts nowhere", tumbling, 0, vec![
                (Add("a", 1), vec![], false),
                (Advance(10), vec![("a", 0, 1)], false),
                (Add("a", 5), vec![], true),
                (Advance(100), vec![], false),
            ]),
            ("within the allowed lateness a record fires its window again, updated", tumbling, 5, vec![
                (Add("a", 1), vec![], false),
                (Advance(10), vec![("a", 0, 1)], false),
                (Add("a", 5), vec![("a", 0, 2)], false),
                (Advance(14), vec![], false),
                (Add("a", 6), vec![("a", 0, 3)], false),
            ]),
            ("past end + lateness the window's state is dropped: a record is late", tumbling, 5, vec![
                (Add("a", 1), vec![], false),
                (Advance(15), vec![("a", 0, 1)], false),
                (Add("a", 5), vec![], true),
            ]),
            ("a later window of the same key fires on its own", tumbling, 0, vec![
                (Add("a", 1), vec![], false),
                (Advance(10), vec![("a", 0, 1)], false),
                (Add("a", 11), vec![], false),
                (Advance(20), vec![("a", 10, 1)], false),
            ]),
            ("the watermark never goes back", tumbling, 0, vec![
                (Add("a", 1), vec![], false),
                (Advance(10), vec![("a", 0, 1)], false),
                (Advance(3), vec![], false),
                (Add("a", 4), vec![], true),
            ]),
            ("a sliding record counts in every window it is in, each fired at its end", sliding, 0, vec![
                (Add("a", 7), vec![], false),
                (Advance(10), vec![("a", 0, 1)], false),
                (Add("a", 8), vec![], false),
                (Advance(15), vec![("a", 5, 2)], false),
            ]),
            ("a session holds the records at most the gap apart and fires at last + gap", session, 0, vec![
                (Add("a", 1), vec![], false),
                (Add("a", 5), vec![], false),
                (Add("b", 3), vec![], false),
                (Advance(14), vec![("b", 3, 1)], false),
                (Advance(15), vec![("a", 1, 2)], false),
                (Add("a", 40), vec![], false),
                (Advance(50), vec![("a", 40, 1)], false),
            ]),
            ("a record between two sessions merges them into one result", session, 0, vec![
                (Add("a", 1), vec![], false),
                (Add("a", 18), vec![], false),
                (Add("a", 10), vec![], false),
                (Advance(27), vec![], false),
                (Advance(28), vec![("a", 1, 3)], false),
            ]),
            ("a merge moves the session's timers: the old end fires nothing", session, 0, vec![
                (Add("a", 1), vec![], false),
                (Add("a", 9), vec![], false),
                (Advance(11), vec![], false),
                (Advance(19), vec![("a", 1, 2)], false),
            ]),
            ("within the lateness a record for a fired session fires it again, merged", session, 5, vec![
                (Add("a", 1), vec![], false),
                (Advance(14), vec![("a", 1, 1)], false),
                (Add("a", 2), vec![("a", 1, 2)], false),
                (Advance(20), vec![], false),
                (Add("a", 3), vec![], true),
            ]),
        ];
        for (name, kind, lateness, steps) in cases {
            let dir = tempfile::tempdir().unwrap();
            let (_store, mut op) = operator(dir.path(), kind, lateness);
            for (i, (step, want, want_late)) in steps.into_iter().enumerate() {
                let mut fired = Vec::new();
                let late = match step {
                    Add(k, t) => op.add(k.as_bytes(), t, &(), &mut fired).unwrap(),
                    Advance(w) => {
                        op.advance_to(w, &mut fired).unwrap();
                        while op.firing() {
                            op.fire_more(&mut fired).unwrap();
                        }
                        false
                    }
                };
                let got: Vec<(String, i64, u64)> = fired
                    .into_iter()
                    .map(|f| (String::from_utf8(f.key).unwrap(), f.window.start, f.acc))
                    .collect();
                let want: Vec<(String, i64, u64)> = want
                    .into_iter()
                    .map(|(k, s, n)| (k.to_owned(), s, n))
                    .collect();
                let mut sorted = got.clone();
                sorted.sort();
                let mut want_sorted = want.clone();
                want_sorted.sort();
                assert_eq!(sorted, want_sorted, "{name}: step {i}");
                assert_eq!(late, want_late, "{name}: step {i}: late");
            }
        }
    }

    #[test]
    fn timers_are_scanned_only_when_the_watermark_crosses_a_window_end_or_cleanup() {
        let h = 3_600_000;
        // (scanned, w, size, slide, lateness, expected)
        let cases = [
            (None, 5, h, h, 0, true),              // first advance after a restore
            (Some(10), 20, h, h, 0, false),        // inside one hour
            (Some(h - 1), h, h, h, 0, true),       // reaches the end at h
            (Some(h), h + 5, h, h, 0, false),      // already scanned at h
            (Some(h + 1), h + 9, h, h, 10, false), // the cleanup at h + 10 is not reached yet
            (Some(4), 6, 10, 5, 0, true),          // sliding: ends at 5, 10, 15 …
            (Some(6), 9, 10, 5, 0, false),
        ];
        for (scanned, w, size, slide, lateness, want) in cases {
            let got = timers_may_be_due(scanned, w, size, slide, lateness);
            assert_eq!(
                got, want,
                "{scanned:?} → {w}, size {size}, slide {slide}, L {lateness}"
            );
        }
        assert!(timers_may_be_due(Some(h + 9), h + 10, h, h, 10));
    }
}
