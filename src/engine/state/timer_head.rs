//! The head of one key group's timers, kept in memory by the state handle that scanned them,
//! so that an operator asking on every watermark which timers are due reads the store only
//! when the head runs out (the way Flink caches the head of each key group's timer queue in
//! front of RocksDB).
//!
//! A scan of the store for the timers in (`after`, `up_to`] ends by reading the next live
//! timers after `up_to` into a head. From then on, until a question reaches past what the
//! head holds, the head answers: registrations and deletions through the handle keep it
//! exact, and any other write under the group's timer prefix drops it.

use std::collections::BTreeSet;

/// One key group's earliest live timers after `after` (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TimerHead {
    /// Timers at or before this are not described (`None`: none are left out).
    after: Option<i64>,
    /// Every live timer after `after` and before `bound`, as (time, key); some at `bound`
    /// itself may be here too (not every one: they are never answered from here).
    timers: BTreeSet<(i64, Vec<u8>)>,
    /// Timers at or after this are not all known (`None`: every one is in `timers`).
    bound: Option<i64>,
}

impl TimerHead {
    /// What a scan that looked at every timer up to `up_to` learnt: the live timers after it,
    /// in order, `complete` when they are all there are (else the last one's time bounds what
    /// the head knows).
    pub(crate) fn after_scan(up_to: i64, next: Vec<(i64, Vec<u8>)>, complete: bool) -> TimerHead {
        let bound = if complete {
            None
        } else {
            next.last().map(|(t, _)| *t)
        };
        TimerHead {
            after: Some(up_to),
            timers: next.into_iter().collect(),
            bound,
        }
    }

    /// The timers in (`after`, `up_to`], in order, when the head knows them all; `None` when
    /// the store must be read.
    pub(crate) fn answer(&self, after: Option<i64>, up_to: i64) -> Option<Vec<(i64, Vec<u8>)>> {
        let covers = match (self.after, after) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(mine), Some(asked)) => mine <= asked,
        };
        if !covers || self.bound.is_some_and(|b| b <= up_to) {
            return None;
        }
        let due = self
            .timers
            .iter()
            .take_while(|(t, _)| *t <= up_to)
            .filter(|(t, _)| after.is_none_or(|a| *t > a))
            .cloned()
            .collect();
        Some(due)
    }

    /// A timer registered at `time` for `key`.
    pub(crate) fn registered(&mut self, time: i64, key: &[u8]) {
        let described = self.after.is_none_or(|a| time > a) && self.bound.is_none_or(|b| time < b);
        if described {
            self.timers.insert((time, key.to_vec()));
        }
    }

    /// The timer at `time` for `key` deleted.
    pub(crate) fn deleted(&mut self, time: i64, key: &[u8]) {
        self.timers.remove(&(time, key.to_vec()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timers(times: &[i64]) -> Vec<(i64, Vec<u8>)> {
        times.iter().map(|t| (*t, b"k".to_vec())).collect()
    }

    fn times(answer: Option<Vec<(i64, Vec<u8>)>>) -> Option<Vec<i64>> {
        answer.map(|a| a.into_iter().map(|(t, _)| t).collect())
    }

    #[test]
    fn a_head_answers_only_what_it_knows_all_of() {
        let partial = TimerHead::after_scan(100, timers(&[150, 200, 300]), false);
        let complete = TimerHead::after_scan(100, timers(&[150, 200, 300]), true);
        /// (name, head, after, up to, answer)
        type Case<'a> = (&'a str, &'a TimerHead, Option<i64>, i64, Option<&'a [i64]>);
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("nothing due yet", &partial, Some(100), 149, Some(&[])),
            ("the first ones due", &partial, Some(100), 250, Some(&[150, 200])),
            ("a later question skips what it is past", &partial, Some(160), 250, Some(&[200])),
            ("up to the bound: timers at it may be missing", &partial, Some(100), 300, None),
            ("past the bound", &partial, Some(100), 1_000, None),
            ("before the scan: not described", &partial, Some(50), 120, None),
            ("from the start: not described", &partial, None, 120, None),
            ("a complete head answers to any time", &complete, Some(100), i64::MAX, Some(&[150, 200, 300])),
        ];
        for (name, head, after, up_to, want) in cases {
            assert_eq!(times(head.answer(after, up_to)), want.map(<[i64]>::to_vec), "{name}");
        }
    }

    #[test]
    fn registrations_and_deletions_keep_a_head_exact() {
        let mut head = TimerHead::after_scan(100, timers(&[150, 300]), false);
        head.registered(120, b"a"); // inside: kept
        head.registered(90, b"b"); // before the scan: not described, not kept
        head.registered(400, b"c"); // past the bound: the store has it
        head.deleted(150, b"k");
        assert_eq!(times(head.answer(Some(100), 299)), Some(vec![120]));
        head.registered(120, b"a"); // twice: one timer, as in the store
        head.deleted(120, b"a");
        assert_eq!(times(head.answer(Some(100), 299)), Some(vec![]));
        let mut all = TimerHead::after_scan(100, Vec::new(), true);
        all.registered(5_000, b"d"); // a complete head takes every later timer
        assert_eq!(times(all.answer(Some(100), 5_000)), Some(vec![5_000]));
    }
}
