//! Session windows as pure rules: how a record's session merges with a key's open sessions,
//! and where the window operator must look for due timers when window ends fall anywhere.
//!
//! - A record at t opens the session `[t, t + gap)`. Two sessions of one key **merge** when
//!   they overlap or touch (`a.start <= b.end && b.start <= a.end`): records whose event times
//!   differ by at most the gap are in one session, as in Flink's and Kafka Streams' session
//!   windows. The merged session is the hull `[first record, last record + gap)`.
//! - A key's sessions are disjoint and do not touch (each merge keeps that), so a new record's
//!   session merges with the sessions it touches and no other.
//! - Firing, lateness and admission are the windows' rules ([`super::admit`]) applied to the
//!   merged session: it fires when the watermark reaches its end, is kept for the allowed
//!   lateness after, and a record whose merged session is past end + lateness is late.

use std::collections::BTreeSet;

use super::rules::Window;

/// A record's session and the sessions it absorbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionMerge {
    /// The session the record belongs to after the merge.
    pub merged: Window,
    /// The key's sessions merged into it (each to be removed), by start.
    pub absorbed: Vec<Window>,
}

/// Whether two sessions merge: they overlap or touch.
pub(crate) fn touches(a: Window, b: Window) -> bool {
    a.start <= b.end && b.start <= a.end
}

/// The session `proto` (a record's own `[t, t + gap)`) makes with the key's open `sessions`
/// (disjoint, not touching, any order).
pub(crate) fn merge_session(sessions: &[Window], proto: Window) -> SessionMerge {
    let mut absorbed: Vec<Window> = sessions
        .iter()
        .copied()
        .filter(|s| touches(*s, proto))
        .collect();
    absorbed.sort();
    let merged = absorbed.iter().fold(proto, |m, s| Window {
        start: m.start.min(s.start),
        end: m.end.max(s.end),
    });
    SessionMerge { merged, absorbed }
}

/// The times at which timers may be registered, coarsened to buckets, kept in memory so that
/// the window operator scans the stored timers (one range scan per key group) only when the
/// watermark reaches a bucket that holds one. Session ends fall at any millisecond, so the
/// residue rule of tumbling and sliding windows does not apply, and a scan on every advance
/// would visit every key group per record.
///
/// Exact, not a sampling: a timer is always registered above the watermark (an on-time
/// session ends after it; a late update's cleanup is after it), so every timer in (scanned,
/// w] lies in a bucket that overlaps that interval, and [`TimerBuckets::due`] says so. A
/// bucket stays marked after its timer is deleted by a merge (one scan too many, never one
/// too few), and is forgotten once a scan has passed all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TimerBuckets {
    width: i64,
    buckets: BTreeSet<i64>,
}

impl TimerBuckets {
    /// Buckets of `width` ms (at least 1).
    pub(crate) fn new(width: i64) -> TimerBuckets {
        TimerBuckets {
            width: width.max(1),
            buckets: BTreeSet::new(),
        }
    }

    /// The bucket width for sessions of `gap` ms: an eighth of it, so that a key's timers
    /// (its end and its cleanup) fall in a handful of buckets.
    pub(crate) fn for_gap(gap: i64) -> TimerBuckets {
        TimerBuckets::new(gap / 8)
    }

    /// A timer at `time`.
    pub(crate) fn register(&mut self, time: i64) {
        self.buckets.insert(time.div_euclid(self.width));
    }

    /// Whether a timer may be due as the watermark goes from `scanned` (`None`: never
    /// scanned, so yes) to `w`.
    pub(crate) fn due(&self, scanned: Option<i64>, w: i64) -> bool {
        let Some(s) = scanned else {
            return true;
        };
        if w <= s {
            return false;
        }
        // Buckets overlapping (s, w]: from the bucket of s + 1 to the bucket of w.
        let (from, to) = ((s + 1).div_euclid(self.width), w.div_euclid(self.width));
        self.buckets.range(from..=to).next().is_some()
    }

    /// A scan fired every timer at or before `w`: forgets the buckets wholly at or before it.
    pub(crate) fn scanned(&mut self, w: i64) {
        // Bucket b ends at (b + 1)·width − 1, which is ≤ w when b < (w + 1) / width.
        let keep_from = w.saturating_add(1).div_euclid(self.width);
        self.buckets = self.buckets.split_off(&keep_from);
    }

    /// How many buckets are marked.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: i64, end: i64) -> Window {
        Window { start, end }
    }

    #[test]
    fn a_records_session_merges_with_the_sessions_it_overlaps_or_touches() {
        /// (name, open sessions, proto, merged, absorbed)
        type Case = (&'static str, Vec<Window>, Window, Window, Vec<Window>);
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("the first record opens its own session",
             vec![], w(10, 40), w(10, 40), vec![]),
            ("a record inside a session leaves it as it is",
             vec![w(0, 50)], w(10, 40), w(0, 50), vec![w(0, 50)]),
            ("a record after the session within the gap extends it",
             vec![w(0, 30)], w(20, 50), w(0, 50), vec![w(0, 30)]),
            ("exactly the gap apart: the sessions touch and merge",
             vec![w(0, 30)], w(30, 60), w(0, 60), vec![w(0, 30)]),
            ("one ms more than the gap: a new session",
             vec![w(0, 30)], w(31, 61), w(31, 61), vec![]),
            ("an earlier record extends the session back",
             vec![w(50, 80)], w(25, 55), w(25, 80), vec![w(50, 80)]),
            ("a record between two sessions bridges them into one",
             vec![w(60, 90), w(0, 30)], w(30, 60), w(0, 90), vec![w(0, 30), w(60, 90)]),
            ("sessions it does not reach stay apart",
             vec![w(0, 30), w(100, 130)], w(40, 70), w(40, 70), vec![]),
            ("negative times merge like any other",
             vec![w(-50, -20)], w(-25, 5), w(-50, 5), vec![w(-50, -20)]),
        ];
        for (name, open, proto, merged, absorbed) in cases {
            let got = merge_session(&open, proto);
            assert_eq!(got, SessionMerge { merged, absorbed }, "{name}");
        }
    }

    #[test]
    fn timer_buckets_say_when_a_scan_may_find_a_due_timer() {
        let mut b = TimerBuckets::new(10);
        assert!(b.due(None, 0), "never scanned: scan");
        assert!(!b.due(Some(0), 100), "no timer anywhere");
        b.register(25); // bucket 2: 20..=29
        b.register(47); // bucket 4
        // (scanned, w, expected)
        let cases = [
            (Some(0), 19, false),
            (Some(0), 20, true), // bucket 2 overlaps (0, 20]
            (Some(19), 21, true),
            (Some(29), 39, false), // bucket 2 lies at or before the last scan
            (Some(30), 40, true),  // bucket 4
            (Some(40), 40, false), // no advance
            (Some(49), 60, false),
        ];
        for (scanned, w, want) in cases {
            assert_eq!(b.due(scanned, w), want, "{scanned:?} → {w}");
        }
        b.scanned(29);
        assert_eq!(b.len(), 1, "bucket 2 is wholly at or before 29");
        b.scanned(41);
        assert_eq!(b.len(), 1, "bucket 4 is not wholly passed at 41");
        b.scanned(49);
        assert_eq!(b.len(), 0);
        let mut n = TimerBuckets::new(10);
        n.register(-5);
        assert!(n.due(Some(-20), -10), "bucket -1 (-10..=-1) overlaps (-20, -10]");
        assert!(!n.due(Some(-1), 5));
    }
}
