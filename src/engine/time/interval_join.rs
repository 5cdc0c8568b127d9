//! The keyed interval join: a record of one input meets the other input's records of the same
//! key whose event times lie within bounds of its own, for every front end (a job file's
//! `join`, SQL's `a.t BETWEEN b.t - … AND b.t + …`). It works on bytes; the front end says
//! what a record is and what a joined pair becomes.
//!
//! The rules (pure functions below, pinned by a table test):
//! - A left record at `l` and a right record at `r` **match** when `lower ≤ r − l ≤ upper`.
//! - A record is **late** when its time is before the watermark less the allowed lateness
//!   (`t < W − L`): it joins nothing and is not kept (the caller counts it and writes it to its
//!   late output). Every other record joins each kept record of the other side it matches, at
//!   once, and is kept for the records still to come.
//! - A record is **kept until** no record of the other side that is not late can match it: a
//!   left record at `l` until `W > l + upper + L`, a right one at `r` until `W > r − lower + L`.
//!   So a record that is not late finds every match the other side has sent: a partner it
//!   matches is kept at least until `W > t + L`, and the record would be late by then. The
//!   result therefore does not depend on how the inputs interleave or when the watermark
//!   moves, only on which records are late: what the batch reference computes when none is.
//!
//! State, in the keyed subtask's [`OperatorState`]: per key, (side, time) → the records of that
//! side at that time (`BUFFER`); a cleanup timer per key at each expiry (`CLEANUP`); the
//! subtask's watermark per key group ([`StoredWatermark`]). Expiries fall anywhere, so (as for
//! session windows) [`TimerBuckets`] in memory say which key groups to scan when the watermark
//! moves.

use super::session::TimerBuckets;
use super::start_key;
use super::stored_watermark::StoredWatermark;
use crate::engine::runtime::RuntimeError;
use crate::engine::state::{decode_list, encode_list, MapState, OperatorState, TimerState, ValueState};

/// Per key: side (u8) | time (u64 BE, sign flipped) → the records of that side at that time.
const BUFFER: MapState = MapState::new(0);
/// (expiry, key): drop the key's records that expire at or before the watermark.
const CLEANUP: TimerState = TimerState::new(1);
/// The subtask's watermark, in every key group of its range.
const WATERMARK: ValueState = ValueState::new(2);

/// Which input of the join a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Side {
    /// The first input (`join.left`).
    Left,
    /// The second input (`join.right`).
    Right,
}

impl Side {
    fn tag(self) -> u8 {
        match self {
            Side::Left => 0,
            Side::Right => 1,
        }
    }

    fn of_tag(tag: u8) -> Option<Side> {
        match tag {
            0 => Some(Side::Left),
            1 => Some(Side::Right),
            _ => None,
        }
    }

    /// The other input.
    pub(crate) fn other(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }
}

/// How far apart matching records may be: `lower ≤ right − left ≤ upper` (ms; lower ≤ upper,
/// checked when the job is loaded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// The least right time − left time.
    pub lower: i64,
    /// The most right time − left time.
    pub upper: i64,
}

impl Bounds {
    /// Whether a left record at `left` and a right one at `right` match.
    pub(crate) fn matches(self, left: i64, right: i64) -> bool {
        let d = i128::from(right) - i128::from(left);
        i128::from(self.lower) <= d && d <= i128::from(self.upper)
    }

    /// The times of the other side's records a `side` record at `t` matches, inclusive.
    pub(crate) fn partners(self, side: Side, t: i64) -> (i64, i64) {
        match side {
            Side::Left => (t.saturating_add(self.lower), t.saturating_add(self.upper)),
            Side::Right => (t.saturating_sub(self.upper), t.saturating_sub(self.lower)),
        }
    }

    /// The watermark at which a `side` record at `t` is dropped: the first at which every
    /// record of the other side that could match it is late.
    pub(crate) fn expiry(self, side: Side, t: i64, lateness: i64) -> i64 {
        let (_, last_partner) = self.partners(side, t);
        last_partner.saturating_add(lateness).saturating_add(1)
    }
}

/// Whether a record at `t` is late at watermark `w` with allowed lateness `lateness`.
pub(crate) fn is_late(t: i64, w: Option<i64>, lateness: i64) -> bool {
    w.is_some_and(|w| i128::from(t) < i128::from(w) - i128::from(lateness))
}

/// A pair the join made: the key, the left record and the right record (as stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Joined {
    pub key: Vec<u8>,
    pub left: Vec<u8>,
    pub right: Vec<u8>,
}

/// What became of a record given to [`IntervalJoin::add`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// It joined what it matched (maybe nothing) and is kept.
    Kept,
    /// It joined what it matched, but no record still to come can match it: not kept.
    Joined,
    /// It is late: it joined nothing.
    Late,
}

/// The interval join of one keyed subtask (module docs).
pub(crate) struct IntervalJoin {
    bounds: Bounds,
    /// Allowed lateness, ms.
    lateness: i64,
    state: OperatorState,
    /// The subtask's watermark: the smallest of its inputs' (never back).
    watermark: Option<i64>,
    stored: StoredWatermark,
    /// The watermark up to which cleanup timers were last looked for.
    scanned_to: Option<i64>,
    /// Which key groups hold a cleanup timer in which time bucket.
    buckets: TimerBuckets,
}

impl IntervalJoin {
    /// The join on `state` (the subtask's key groups), its watermark and timer buckets
    /// restored.
    ///
    /// # Errors
    /// The store failed.
    pub(crate) fn restore(
        bounds: Bounds,
        lateness: i64,
        mut state: OperatorState,
    ) -> Result<IntervalJoin, RuntimeError> {
        let (watermark, stored) = StoredWatermark::restore(&state, WATERMARK)?;
        let span = bounds.upper.saturating_sub(bounds.lower).saturating_add(lateness);
        let mut buckets = TimerBuckets::new((span / 8).max(1000));
        for kg in state.key_groups() {
            for (time, _) in CLEANUP.due_in_group(&mut state, kg, i64::MAX)? {
                buckets.register(kg, time);
            }
        }
        Ok(IntervalJoin {
            bounds,
            lateness,
            state,
            watermark,
            stored,
            scanned_to: None,
            buckets,
        })
    }

    /// A record of `side` with key `key` at event time `t`: pushes its pairs with the kept
    /// records of the other side into `joined` (in the other side's time order, then arrival
    /// order) and keeps it unless it is late or can meet nothing more.
    ///
    /// # Errors
    /// The store failed.
    pub(crate) fn add(
        &mut self,
        side: Side,
        key: &[u8],
        t: i64,
        record: &[u8],
        joined: &mut Vec<Joined>,
    ) -> Result<Added, RuntimeError> {
        let judged_by = self.stored.for_key(&self.state, key, self.watermark);
        if is_late(t, judged_by, self.lateness) {
            return Ok(Added::Late);
        }
        let (from, to) = self.bounds.partners(side, t);
        let other = side.other();
        let map_key = buffer_key(side, t);
        // The key's records kept at this side and time (one read of the key's buffer finds
        // both them and the partners).
        let mut records = Vec::new();
        for (kept_at, stored) in BUFFER.entries(&self.state, key)? {
            let Some((s, time)) = decode_buffer_key(&kept_at) else {
                return Err(self.corrupt("a buffer key of another form"));
            };
            if kept_at == map_key {
                records = decode_list(&stored).ok_or_else(|| self.corrupt("a truncated list"))?;
            }
            if s != other || time < from || time > to {
                continue;
            }
            let records = decode_list(&stored).ok_or_else(|| self.corrupt("a truncated list"))?;
            for partner in records {
                let (left, right) = match side {
                    Side::Left => (record.to_vec(), partner),
                    Side::Right => (partner, record.to_vec()),
                };
                joined.push(Joined {
                    key: key.to_vec(),
                    left,
                    right,
                });
            }
        }
        let expiry = self.bounds.expiry(side, t, self.lateness);
        if judged_by.is_some_and(|w| expiry <= w) {
            return Ok(Added::Joined);
        }
        records.push(record.to_vec());
        BUFFER.insert(&mut self.state, key, &map_key, &encode_list(&records));
        CLEANUP.register(&mut self.state, key, expiry);
        self.buckets.register(self.state.key_group(key), expiry);
        Ok(Added::Kept)
    }

    /// The inputs' watermark is now `w` (never back): drops the records it expires.
    ///
    /// # Errors
    /// The store failed.
    pub(crate) fn advance_to(&mut self, w: i64) -> Result<(), RuntimeError> {
        if self.watermark.is_some_and(|c| c >= w) {
            return Ok(());
        }
        self.watermark = Some(w);
        self.stored.advanced(w);
        let groups = self.buckets.due(self.scanned_to, w, self.state.key_groups());
        self.buckets.scanned(w);
        let from = self.scanned_to.replace(w);
        for kg in groups {
            for (at, key) in CLEANUP.due_in_group_after(&mut self.state, kg, from, w)? {
                CLEANUP.delete(&mut self.state, &key, at);
                self.expire(&key, w)?;
            }
        }
        Ok(())
    }

    /// Drops `key`'s records whose expiry is at or before `w`.
    fn expire(&mut self, key: &[u8], w: i64) -> Result<(), RuntimeError> {
        for (map_key, _) in BUFFER.entries(&self.state, key)? {
            let Some((side, t)) = decode_buffer_key(&map_key) else {
                return Err(self.corrupt("a buffer key of another form"));
            };
            if self.bounds.expiry(side, t, self.lateness) <= w {
                BUFFER.remove(&mut self.state, key, &map_key);
            }
        }
        Ok(())
    }

    fn corrupt(&self, what: &str) -> RuntimeError {
        RuntimeError::Internal(format!("the join's state: {what}"))
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

fn buffer_key(side: Side, t: i64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = side.tag();
    k[1..].copy_from_slice(&start_key(t));
    k
}

fn decode_buffer_key(k: &[u8]) -> Option<(Side, i64)> {
    let (&tag, time) = k.split_first()?;
    let time: [u8; 8] = time.try_into().ok()?;
    Some((Side::of_tag(tag)?, (u64::from_be_bytes(time) ^ (1 << 63)) as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::state::{FrozenDelta, Layout, OperatorLayout, RestoreFrom, StateStore, StoreOptions};

    #[test]
    fn matching_partners_expiry_and_lateness_table() {
        let b = Bounds {
            lower: -10,
            upper: 5,
        };
        // (left, right, matches)
        for (l, r, want) in [
            (100, 100, true),
            (100, 90, true),
            (100, 89, false),
            (100, 105, true),
            (100, 106, false),
            (i64::MIN, i64::MAX, false),
        ] {
            assert_eq!(b.matches(l, r), want, "{l} {r}");
        }
        assert_eq!(b.partners(Side::Left, 100), (90, 105));
        assert_eq!(b.partners(Side::Right, 100), (95, 110));
        // A left record at 100 meets rights up to 105: with lateness 3 a right at 105 is late
        // once W > 108, so the left goes at 109.
        assert_eq!(b.expiry(Side::Left, 100, 3), 109);
        assert_eq!(b.expiry(Side::Right, 100, 3), 114);
        assert_eq!(b.expiry(Side::Left, i64::MAX, 0), i64::MAX);
        // (t, watermark, lateness, late)
        for (t, w, l, want) in [
            (10, None, 0, false),
            (10, Some(10), 0, false),
            (9, Some(10), 0, true),
            (9, Some(10), 1, false),
            (i64::MIN, Some(i64::MAX), i64::MAX, true),
        ] {
            assert_eq!(is_late(t, w, l), want, "{t} {w:?} {l}");
        }
    }

    fn store(dir: &std::path::Path, from: RestoreFrom) -> StateStore {
        let layout = Layout {
            key_groups: 4,
            operators: vec![OperatorLayout::new("join", "interval-join")],
            sink_prefix: None,
            sink_ids: 0,
        };
        StateStore::open(dir, layout, StoreOptions::default(), from).unwrap().0
    }

    fn pairs(j: &mut IntervalJoin, side: Side, key: &str, t: i64, v: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        j.add(side, key.as_bytes(), t, v.as_bytes(), &mut out).unwrap();
        out.into_iter()
            .map(|p| {
                (
                    String::from_utf8(p.left).unwrap(),
                    String::from_utf8(p.right).unwrap(),
                )
            })
            .collect()
    }

    fn kept(j: &IntervalJoin, key: &str) -> usize {
        BUFFER.entries(&j.state, key.as_bytes()).unwrap().len()
    }

    #[test]
    fn records_meet_their_partners_in_either_order_and_go_once_no_partner_can_come() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path(), RestoreFrom::Fresh);
        let bounds = Bounds {
            lower: -10,
            upper: 5,
        };
        let mut j = IntervalJoin::restore(bounds, 0, s.operator("join").unwrap()).unwrap();
        assert!(pairs(&mut j, Side::Left, "k", 100, "l100").is_empty());
        assert_eq!(pairs(&mut j, Side::Right, "k", 95, "r95"), [("l100".into(), "r95".into())]);
        assert!(pairs(&mut j, Side::Right, "other", 100, "x").is_empty(), "keys apart");
        assert!(pairs(&mut j, Side::Right, "k", 106, "r106").is_empty(), "too far");
        // A left at 101 meets the rights from 91 to 106, in time order.
        let want = [("l101a", "r95"), ("l101a", "r106")].map(|(l, r)| (l.into(), r.into()));
        assert_eq!(pairs(&mut j, Side::Left, "k", 101, "l101a"), want);
        // Two lefts at one time are both kept.
        assert_eq!(pairs(&mut j, Side::Left, "k", 101, "l101b").len(), 2);
        assert_eq!(pairs(&mut j, Side::Right, "k", 104, "r104").len(), 3);
        // W = 106: l100 (expiry 106) goes; l101 (107) stays.
        j.advance_to(106).unwrap();
        assert_eq!(pairs(&mut j, Side::Right, "k", 106, "r106b"), [
            ("l101a".to_string(), "r106b".to_string()),
            ("l101b".to_string(), "r106b".to_string()),
        ]);
        // Late: before the watermark.
        let mut out = Vec::new();
        let added = j.add(Side::Right, b"k", 105, b"late", &mut out).unwrap();
        assert_eq!((added, out.len()), (Added::Late, 0));
        j.advance_to(200).unwrap();
        assert_eq!(kept(&j, "k"), 0, "everything expired at 200");
        assert_eq!(kept(&j, "other"), 0);
    }

    #[test]
    fn a_restore_keeps_the_records_the_watermark_and_their_cleanup_timers() {
        let dir = tempfile::tempdir().unwrap();
        let bounds = Bounds { lower: 0, upper: 0 };
        {
            let mut s = store(dir.path(), RestoreFrom::Fresh);
            let mut j = IntervalJoin::restore(bounds, 0, s.operator("join").unwrap()).unwrap();
            pairs(&mut j, Side::Left, "k", 100, "l");
            j.advance_to(50).unwrap();
            j.before_snapshot();
            let delta = j.state_mut().snapshot(1).unwrap();
            s.persist(1, &FrozenDelta::merge([delta]), Vec::new(), Vec::new())
                .unwrap();
            j.state_mut().complete(1).unwrap();
        }
        let s = store(dir.path(), RestoreFrom::Latest);
        let mut j = IntervalJoin::restore(bounds, 0, s.operator("join").unwrap()).unwrap();
        assert_eq!(j.watermark(), Some(50));
        let mut out = Vec::new();
        assert_eq!(j.add(Side::Right, b"k", 40, b"r", &mut out).unwrap(), Added::Late);
        // The first advance after a restore looks at every key group; a later one finds the
        // restored timer through its bucket.
        j.advance_to(60).unwrap();
        assert_eq!(kept(&j, "k"), 1);
        j.advance_to(101).unwrap();
        assert_eq!(kept(&j, "k"), 0, "the restored cleanup timer fired");
    }
}
