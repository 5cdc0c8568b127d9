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

use std::collections::{BTreeMap, BTreeSet};

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

/// A key's open sessions as stored: one value per key (a point read per record, where a map
/// per key would be a range scan over every version the store still holds of it), each
/// session's start and end (i64 BE) and its accumulator (u32 BE length, then the bytes).
pub(crate) type Sessions = Vec<(Window, Vec<u8>)>;

/// [`Sessions`] as stored.
pub(crate) fn encode_sessions(sessions: &Sessions) -> Vec<u8> {
    let mut out = Vec::new();
    for (w, acc) in sessions {
        out.extend_from_slice(&w.start.to_be_bytes());
        out.extend_from_slice(&w.end.to_be_bytes());
        out.extend_from_slice(&u32::try_from(acc.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(acc);
    }
    out
}

/// The stored [`Sessions`]; `None` when the bytes are not a list of them.
pub(crate) fn decode_sessions(mut bytes: &[u8]) -> Option<Sessions> {
    fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
        let (head, rest) = bytes.split_first_chunk::<N>()?;
        *bytes = rest;
        Some(*head)
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let start = i64::from_be_bytes(take::<8>(&mut bytes)?);
        let end = i64::from_be_bytes(take::<8>(&mut bytes)?);
        let len = u32::from_be_bytes(take::<4>(&mut bytes)?) as usize;
        let acc = bytes.get(..len)?.to_vec();
        bytes = &bytes[len..];
        out.push((Window { start, end }, acc));
    }
    Some(out)
}

/// Where timers may be registered: per time bucket, the key groups that registered one there,
/// kept in memory so that the window operator scans the stored timers only of the key groups
/// with a timer in a bucket the watermark reached. Session ends fall at any millisecond, so
/// the residue rule of tumbling and sliding windows does not apply, and a scan of every key
/// group on every advance would cost a range scan per key group per record.
///
/// Exact, not a sampling: a timer is always registered above the watermark (an on-time
/// session ends after it; a late update's cleanup is after it), so every timer in (scanned,
/// w] lies in a bucket that overlaps that interval, and [`TimerBuckets::due`] names its key
/// group. A mark stays after its timer is deleted by a merge (one scan too many, never one
/// too few), and goes once a scan has passed all of its bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TimerBuckets {
    width: i64,
    buckets: BTreeMap<i64, BTreeSet<u16>>,
}

impl TimerBuckets {
    /// Buckets of `width` ms (at least 1).
    pub(crate) fn new(width: i64) -> TimerBuckets {
        TimerBuckets {
            width: width.max(1),
            buckets: BTreeMap::new(),
        }
    }

    /// The bucket width for sessions of `gap` ms: an eighth of it, so that a key's timers
    /// (its end and its cleanup) fall in a handful of buckets.
    pub(crate) fn for_gap(gap: i64) -> TimerBuckets {
        TimerBuckets::new(gap / 8)
    }

    /// A timer of key group `kg` at `time`.
    pub(crate) fn register(&mut self, kg: u16, time: i64) {
        self.buckets
            .entry(time.div_euclid(self.width))
            .or_default()
            .insert(kg);
    }

    /// The key groups whose timers may be due as the watermark goes from `scanned` to `w`
    /// (`scanned` `None`: never scanned, so every one of `all`), in order.
    pub(crate) fn due(
        &self,
        scanned: Option<i64>,
        w: i64,
        all: std::ops::Range<u16>,
    ) -> Vec<u16> {
        let Some(s) = scanned else {
            return all.collect();
        };
        if w <= s {
            return Vec::new();
        }
        // Buckets overlapping (s, w]: from the bucket of s + 1 to the bucket of w.
        let (from, to) = ((s + 1).div_euclid(self.width), w.div_euclid(self.width));
        let groups: BTreeSet<u16> = self
            .buckets
            .range(from..=to)
            .flat_map(|(_, kgs)| kgs.iter().copied())
            .collect();
        groups.into_iter().collect()
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
    fn stored_sessions_round_trip_and_garbage_is_refused() {
        let sessions = vec![(w(-5, 10), b"{\"n\":1}".to_vec()), (w(40, 70), Vec::new())];
        let bytes = encode_sessions(&sessions);
        assert_eq!(decode_sessions(&bytes), Some(sessions));
        assert_eq!(decode_sessions(&[]), Some(Vec::new()));
        assert_eq!(decode_sessions(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode_sessions(&[0; 19]), None);
    }

    #[test]
    fn timer_buckets_name_the_key_groups_a_scan_may_find_a_due_timer_in() {
        let all = 0..4;
        let mut b = TimerBuckets::new(10);
        assert_eq!(b.due(None, 0, all.clone()), [0, 1, 2, 3], "never scanned: all");
        assert!(b.due(Some(0), 100, all.clone()).is_empty(), "no timer anywhere");
        b.register(1, 25); // bucket 2: 20..=29
        b.register(3, 47); // bucket 4
        b.register(1, 41);
        // (scanned, w, key groups)
        let cases: [(Option<i64>, i64, &[u16]); 8] = [
            (Some(0), 19, &[]),
            (Some(0), 20, &[1]), // bucket 2 overlaps (0, 20]
            (Some(19), 21, &[1]),
            (Some(29), 39, &[]), // bucket 2 lies at or before the last scan
            (Some(30), 40, &[1, 3]),
            (Some(40), 40, &[]), // no advance
            (Some(49), 60, &[]),
            (Some(0), 60, &[1, 3]),
        ];
        for (scanned, w, want) in cases {
            assert_eq!(b.due(scanned, w, all.clone()), want, "{scanned:?} → {w}");
        }
        b.scanned(29);
        assert_eq!(b.len(), 1, "bucket 2 is wholly at or before 29");
        b.scanned(41);
        assert_eq!(b.len(), 1, "bucket 4 is not wholly passed at 41");
        b.scanned(49);
        assert_eq!(b.len(), 0);
        let mut n = TimerBuckets::new(10);
        n.register(2, -5);
        assert_eq!(n.due(Some(-20), -10, all.clone()), [2], "bucket -1 overlaps (-20, -10]");
        assert!(n.due(Some(-1), 5, all).is_empty());
    }
}
