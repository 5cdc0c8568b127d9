//! Event-time windows, the watermark and lateness, as pure functions.
//!
//! The exact rules (each pinned by a table test below):
//! - **Windows** are half-open, `[start, end)` in epoch milliseconds. Tumbling windows of size
//!   S start at multiples of S; sliding windows of size S and slide D start at multiples of D,
//!   and an event at t belongs to every one with `start <= t < start + S` (S / D of them when D
//!   divides S). Negative times floor correctly (t = -1 is in `[-S, 0)`).
//! - **Watermark** W = (largest event time seen) − (bounded out-of-orderness B); none before the
//!   first event. It never goes back. It promises that every event still to come that respects
//!   the bound has time ≥ W. An event t with `t >= max_seen - B` is never late.
//! - A window **fires** when W ≥ end (all its on-time events are in).
//! - With allowed lateness L, a window's state is **kept until** W ≥ end + L. An event for a
//!   window that has fired but is still kept (end ≤ W < end + L) is added and the window fires
//!   again with the updated result (a late update). An event for a window past end + L is
//!   **late** for that window.
//! - A **record is late** (dropped from the aggregate, counted, and written to the late side
//!   topic if there is one) when it is late for every window it belongs to.
//! - A record is routed against the watermark *before* it is observed (it cannot make itself
//!   late anyway: it raises W to at most t − B ≤ t < end).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One window, `[start, end)` in epoch milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Window {
    /// First millisecond inside.
    pub start: i64,
    /// First millisecond after.
    pub end: i64,
}

impl Window {
    /// Whether the window fires at watermark `w`: W ≥ end.
    pub fn fires(&self, watermark: Option<i64>) -> bool {
        watermark.is_some_and(|w| w >= self.end)
    }

    /// Whether the window's state can go at watermark `w`: W ≥ end + allowed lateness.
    pub fn expired(&self, watermark: Option<i64>, allowed_lateness: i64) -> bool {
        watermark
            .is_some_and(|w| i128::from(w) >= i128::from(self.end) + i128::from(allowed_lateness))
    }
}

/// Tumbling, sliding or session windows, sizes in milliseconds (all > 0, slide ≤ size:
/// checked when the job is loaded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WindowKind {
    /// Back-to-back windows of `size`.
    Tumbling {
        /// Window length.
        size: i64,
    },
    /// Overlapping windows of `size`, one starting every `slide`.
    Sliding {
        /// Window length.
        size: i64,
        /// Distance between window starts.
        slide: i64,
    },
    /// Per key, the records no more than `gap` apart, merged into one window
    /// `[first, last + gap)` (`super::session`).
    Session {
        /// The inactivity gap that ends a session.
        gap: i64,
    },
}

/// A window start as a state map key that sorts like the number (sign bit flipped, big
/// endian): a window operator's accumulators per key, by start.
pub fn start_key(start: i64) -> [u8; 8] {
    ((start as u64) ^ (1 << 63)).to_be_bytes()
}

impl WindowKind {
    /// (size, slide): a tumbling window slides by its size; a session's own window (before
    /// it merges) is the gap long and one starts at every record.
    pub fn size_and_slide(&self) -> (i64, i64) {
        match *self {
            WindowKind::Tumbling { size } => (size, size),
            WindowKind::Sliding { size, slide } => (size, slide),
            WindowKind::Session { gap } => (gap, 1),
        }
    }

    /// The windows an event at `t` belongs to, by ascending start. Windows whose bounds would
    /// not fit an i64 are left out; a non-positive size or slide gives none. For sessions, the
    /// record's own session `[t, t + gap)`, before it merges with the key's others.
    pub fn assign(&self, t: i64) -> Vec<Window> {
        if let WindowKind::Session { gap } = *self {
            return match t.checked_add(gap) {
                Some(end) if gap > 0 => vec![Window { start: t, end }],
                _ => Vec::new(),
            };
        }
        let (size, slide) = self.size_and_slide();
        if size <= 0 || slide <= 0 {
            return Vec::new();
        }
        let (t, size, slide) = (i128::from(t), i128::from(size), i128::from(slide));
        let last = t - t.rem_euclid(slide);
        let mut out = Vec::new();
        let mut start = last;
        while start + size > t {
            if let (Ok(s), Ok(e)) = (i64::try_from(start), i64::try_from(start + size)) {
                out.push(Window { start: s, end: e });
            }
            start -= slide;
        }
        out.reverse();
        out
    }
}

/// The bounded out-of-orderness watermark of one stream. Serializable: it lives in the
/// checkpoint so a restart does not re-open fired windows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watermark {
    out_of_orderness: i64,
    max_event_time: Option<i64>,
}

impl Watermark {
    /// A watermark trailing the largest event time by `out_of_orderness` ms.
    pub fn new(out_of_orderness: i64) -> Self {
        Self {
            out_of_orderness,
            max_event_time: None,
        }
    }

    /// Takes an event time in; returns whether the watermark advanced.
    pub fn observe(&mut self, event_time: i64) -> bool {
        if self.max_event_time.is_some_and(|m| m >= event_time) {
            return false;
        }
        self.max_event_time = Some(event_time);
        true
    }

    /// W = largest event time − out-of-orderness; `None` before the first event.
    pub fn current(&self) -> Option<i64> {
        self.max_event_time
            .map(|m| m.saturating_sub(self.out_of_orderness))
    }
}

/// The watermark of a task fed by several inputs (its partitions, or upstream tasks after a
/// key_by): the smallest watermark of its active inputs, so that no input's on-time events
/// become late because another input runs ahead.
///
/// - An input that has not reported a watermark yet holds the combined one back (`None`).
/// - An input marked idle (the runtime decides when, from time) is left out until it reports
///   again; with every input idle the combined watermark is the smallest watermark any input
///   reported (never lower than it was): an input that never reported holds nothing back
///   once idle, whichever input went idle last.
/// - The combined watermark never goes back: an idle input that wakes up behind it does not
///   lower it (its records may then be late, as in Flink).
/// - **A stopped stream resumes as a whole.** When every input was idle and one reports
///   again, the others are counted again too, at their last watermarks: a pause of the whole
///   input (the producers stopped, or the broker was away) ends for every partition at about
///   the same time, but their records arrive one after another. Without this the first
///   partition back, alone active, moves the watermark past the hour the others are still
///   delivering, and their records come late (the broker-kill chaos test: 124 of 400 hourly
///   counts short). Each of them is left out again only by an idleness established at least
///   `hold` after the resumption ([`InputWatermarks::set_idle`]'s `since`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputWatermarks {
    inputs: BTreeMap<u32, InputState>,
    combined: Option<i64>,
    hold: Duration,
    /// When an input reported after every input had been idle.
    resumed: Option<Instant>,
    /// False only in an inverse test (`ONCEFLOW_TEST_SKIP=resumption`).
    resume_all: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InputState {
    watermark: Option<i64>,
    idle: bool,
}

impl InputWatermarks {
    /// Inputs with no watermark yet; after a resumption of the whole stream, an input is left
    /// out again only by an idleness established `hold` after it (the idleness timeout).
    pub fn new(inputs: impl IntoIterator<Item = u32>, hold: Duration) -> Self {
        let mut out = Self {
            inputs: BTreeMap::new(),
            combined: None,
            hold,
            resumed: None,
            resume_all: true,
        };
        for input in inputs {
            out.add_input(input);
        }
        out
    }

    /// A new input (a partition added to the topic); it holds the watermark back until it
    /// reports or is marked idle. Adding a known input changes nothing.
    pub fn add_input(&mut self, input: u32) {
        self.inputs.entry(input).or_insert(InputState {
            watermark: None,
            idle: false,
        });
    }

    /// `input`'s watermark is now `watermark` (an input's own watermark never goes back
    /// either); the input is active again, and if every input was idle, so are the others
    /// (the stream resumed at `now`). Returns the combined watermark.
    pub fn advance(&mut self, input: u32, watermark: i64, now: Instant) -> Option<i64> {
        let stopped = self.inputs.len() > 1 && self.all_idle();
        let state = self.inputs.entry(input).or_insert(InputState {
            watermark: None,
            idle: false,
        });
        state.watermark = Some(state.watermark.map_or(watermark, |w| w.max(watermark)));
        state.idle = false;
        if stopped && self.resume_all {
            for s in self.inputs.values_mut() {
                s.idle = false;
            }
            self.resumed = Some(now);
        }
        self.recompute()
    }

    /// Leaves `input` out until it reports again, unless its idleness, established at `since`
    /// (when it was last seen with nothing to deliver), is older than `hold` after the last
    /// resumption: then it stays counted. Returns the combined watermark.
    pub fn set_idle(&mut self, input: u32, since: Instant) -> Option<i64> {
        let held = self
            .resumed
            .is_some_and(|r| since < r.checked_add(self.hold).unwrap_or(r));
        if let (false, Some(state)) = (held, self.inputs.get_mut(&input)) {
            state.idle = true;
        }
        self.recompute()
    }

    /// Switches the resumption of the whole stream off: the protection an inverse test removes
    /// (then a resuming input wakes only itself).
    pub(crate) fn without_resumption(mut self) -> Self {
        self.resume_all = false;
        self
    }

    /// Whether `input` is left out (idle). An unknown input is not.
    pub fn is_idle(&self, input: u32) -> bool {
        self.inputs.get(&input).is_some_and(|s| s.idle)
    }

    /// Whether every input is idle (none: false).
    pub fn all_idle(&self) -> bool {
        !self.inputs.is_empty() && self.inputs.values().all(|s| s.idle)
    }

    /// The combined watermark.
    pub fn current(&self) -> Option<i64> {
        self.combined
    }

    fn recompute(&mut self) -> Option<i64> {
        let mut active = self.inputs.values().filter(|s| !s.idle).peekable();
        let min = if active.peek().is_some() {
            // min over active inputs; any active input without a watermark holds it back.
            active
                .map(|s| s.watermark)
                .try_fold(i64::MAX, |acc, w| w.map(|w| acc.min(w)))
        } else {
            // Every input idle: the smallest watermark of those that have one. An input that
            // never reported cannot hold it back once idle, whatever order the inputs went
            // idle in. Without this, a restart whose one source had nothing left to read
            // fired no window when that source happened to say so last: the others, idle
            // first, were already left out, so no watermark was ever counted (CI: a keyed
            // subtask of engine_parallel's restart wrote nothing). Not the largest, as
            // Flink's flush on all-idle: an input behind the others may still deliver
            // records up to its own watermark, which the largest would make late.
            self.inputs.values().filter_map(|s| s.watermark).min()
        };
        if let Some(min) = min {
            self.combined = Some(self.combined.map_or(min, |c| c.max(min)));
        }
        self.combined
    }
}

/// What a record does to one of its windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The window has not fired: add the record.
    OnTime,
    /// The window fired but is kept (end ≤ W < end + L): add the record and fire it again.
    LateUpdate,
    /// The window is gone (W ≥ end + L): the record does not count in it.
    Late,
}

/// The fate of one window for a record, at watermark `w` with allowed lateness `l` ms.
pub fn admit(window: Window, watermark: Option<i64>, allowed_lateness: i64) -> Admission {
    if !window.fires(watermark) {
        Admission::OnTime
    } else if !window.expired(watermark, allowed_lateness) {
        Admission::LateUpdate
    } else {
        Admission::Late
    }
}

/// Where a record goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Each window it belongs to and what it does there.
    pub windows: Vec<(Window, Admission)>,
}

impl Route {
    /// Late for every window it belongs to: count it and send it to the late topic.
    pub fn is_late(&self) -> bool {
        !self.windows.is_empty() && self.windows.iter().all(|(_, a)| *a == Admission::Late)
    }
}

/// Routes an event at `t` against the watermark before it is observed (module docs).
pub fn route(kind: WindowKind, t: i64, watermark: Option<i64>, allowed_lateness: i64) -> Route {
    Route {
        windows: kind
            .assign(t)
            .into_iter()
            .map(|w| (w, admit(w, watermark, allowed_lateness)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: i64, end: i64) -> Window {
        Window { start, end }
    }

    #[test]
    fn assignment_table() {
        let hour = 3_600_000;
        let tumble = WindowKind::Tumbling { size: 10 };
        let slide = WindowKind::Sliding { size: 10, slide: 5 };
        let uneven = WindowKind::Sliding { size: 10, slide: 4 };
        let cases: Vec<(WindowKind, i64, Vec<Window>)> = vec![
            (tumble, 0, vec![w(0, 10)]),
            (tumble, 9, vec![w(0, 10)]),
            (tumble, 10, vec![w(10, 20)]),
            (tumble, -1, vec![w(-10, 0)]),
            (tumble, -10, vec![w(-10, 0)]),
            (tumble, -11, vec![w(-20, -10)]),
            (slide, 0, vec![w(-5, 5), w(0, 10)]),
            (slide, 4, vec![w(-5, 5), w(0, 10)]),
            (slide, 5, vec![w(0, 10), w(5, 15)]),
            (slide, 12, vec![w(5, 15), w(10, 20)]),
            (uneven, 9, vec![w(0, 10), w(4, 14), w(8, 18)]),
            (uneven, 10, vec![w(4, 14), w(8, 18)]),
            (
                WindowKind::Sliding {
                    size: 10,
                    slide: 10,
                },
                3,
                vec![w(0, 10)],
            ),
            (
                WindowKind::Tumbling { size: hour },
                1_700_000_123_456,
                vec![w(1_699_999_200_000, 1_700_002_800_000)],
            ),
            // Bounds that do not fit an i64 are left out instead of overflowing.
            (tumble, i64::MAX, vec![]),
            // i64::MIN is 2 past a multiple of 10, so its window would start before i64::MIN.
            (tumble, i64::MIN, vec![]),
            (tumble, i64::MIN + 8, vec![w(i64::MIN + 8, i64::MIN + 18)]),
            (WindowKind::Tumbling { size: 0 }, 5, vec![]),
        ];
        for (kind, t, want) in cases {
            assert_eq!(kind.assign(t), want, "{kind:?} at {t}");
        }
    }

    #[test]
    fn watermark_table() {
        // (event times observed in order, out-of-orderness, expected watermark after each)
        let cases: Vec<(i64, Vec<i64>, Vec<Option<i64>>)> = vec![
            (0, vec![5, 3, 9], vec![Some(5), Some(5), Some(9)]),
            (
                60,
                vec![100, 40, 170, 150],
                vec![Some(40), Some(40), Some(110), Some(110)],
            ),
            (10, vec![i64::MIN], vec![Some(i64::MIN)]),
        ];
        for (ooo, times, want) in cases {
            let mut wm = Watermark::new(ooo);
            assert_eq!(wm.current(), None);
            let got: Vec<Option<i64>> = times
                .iter()
                .map(|t| {
                    wm.observe(*t);
                    wm.current()
                })
                .collect();
            assert_eq!(got, want, "ooo {ooo} times {times:?}");
        }
        let mut wm = Watermark::new(0);
        assert!(wm.observe(5));
        assert!(!wm.observe(5));
        assert!(!wm.observe(4));
        assert!(wm.observe(6));
    }

    #[test]
    fn firing_and_expiry_table() {
        // (window, watermark, allowed lateness, fires, expired, admission)
        use Admission::*;
        let win = w(0, 10);
        let cases = vec![
            (None, 0, false, false, OnTime),
            (Some(-100), 0, false, false, OnTime),
            (Some(9), 0, false, false, OnTime),
            (Some(10), 0, true, true, Late),
            (Some(10), 5, true, false, LateUpdate),
            (Some(14), 5, true, false, LateUpdate),
            (Some(15), 5, true, true, Late),
            (Some(i64::MAX), i64::MAX, true, false, LateUpdate),
        ];
        for (wm, l, fires, expired, admission) in cases {
            assert_eq!(win.fires(wm), fires, "fires at {wm:?}");
            assert_eq!(win.expired(wm, l), expired, "expired at {wm:?} L {l}");
            assert_eq!(admit(win, wm, l), admission, "admit at {wm:?} L {l}");
        }
    }

    /// Out-of-orderness B = 60 s, hourly tumbling windows, no allowed lateness: an event out
    /// of order by exactly B is on time; by B + 1 ms after its window fired, it is late.
    #[test]
    fn lateness_boundary_with_bounded_out_of_orderness() {
        let hour = 3_600_000;
        let b = 60_000;
        let kind = WindowKind::Tumbling { size: hour };
        let mut wm = Watermark::new(b);
        wm.observe(hour - 1 + b); // W = hour - 1: the first hour has not fired
        let r = route(kind, hour - 1, wm.current(), 0);
        assert_eq!(r.windows, vec![(w(0, hour), Admission::OnTime)]);
        assert!(!r.is_late());
        wm.observe(hour + b); // W = hour: the first hour fires
        assert!(w(0, hour).fires(wm.current()));
        let r = route(kind, hour - 1, wm.current(), 0);
        assert_eq!(r.windows, vec![(w(0, hour), Admission::Late)]);
        assert!(r.is_late());
        // With 1 s of allowed lateness the same record is a late update.
        let r = route(kind, hour - 1, wm.current(), 1_000);
        assert_eq!(r.windows, vec![(w(0, hour), Admission::LateUpdate)]);
        assert!(!r.is_late());
    }

    /// One table on purpose: the resumption cases only read right beside the plain minimum
    /// and idleness cases they change.
    #[test]
    fn input_watermarks_table() {
        enum Step {
            Advance(u32, i64),
            /// Idle since the clock's time.
            Idle(u32),
            Add(u32),
            /// The clock moves to this many ms (the combined watermark is the step's value).
            At(u64),
        }
        use Step::*;
        // (inputs, steps, combined watermark after each step); the hold is 1000 ms.
        type Case = (&'static str, Vec<u32>, Vec<Step>, Vec<Option<i64>>);
        let cases: Vec<Case> = vec![
            (
                "the slowest input decides; an input without a watermark holds it back",
                vec![0, 1],
                vec![
                    Advance(0, 100),
                    Advance(1, 50),
                    Advance(1, 200),
                    Advance(0, 150),
                ],
                vec![None, Some(50), Some(100), Some(150)],
            ),
            (
                "an input's watermark never goes back",
                vec![0],
                vec![Advance(0, 100), Advance(0, 90)],
                vec![Some(100), Some(100)],
            ),
            (
                "idle inputs are left out; all idle keeps the last value; waking up behind \
                 the combined watermark does not lower it",
                vec![0, 1],
                vec![
                    Advance(0, 100),
                    Idle(1),
                    Advance(0, 300),
                    Idle(0),
                    Advance(1, 50),
                ],
                vec![None, Some(100), Some(300), Some(300), Some(300)],
            ),
            (
                "an input idle while another is active stays left out when that one moves on",
                vec![0, 1],
                vec![Idle(1), Advance(0, 10), Advance(1, 20), Advance(0, 30)],
                vec![None, Some(10), Some(10), Some(20)],
            ),
            (
                "an input that never reported holds the watermark back while active, not once \
                 idle: when every input is idle, the smallest watermark of those that have one \
                 counts (the restart whose one source had nothing left to read, idle last: no \
                 window fired)",
                vec![0, 1, 2],
                vec![Advance(0, 300), Advance(2, 100), Idle(0), Idle(2), Idle(1)],
                vec![None, None, None, None, Some(100)],
            ),
            (
                "a new partition holds the watermark where it is until it reports",
                vec![0],
                vec![Advance(0, 100), Add(1), Advance(0, 200), Advance(1, 150)],
                vec![Some(100), Some(100), Some(100), Some(150)],
            ),
            (
                "a stopped stream resumes as a whole: the first input back does not move the \
                 watermark past the others' last ones; their idleness counts again only once \
                 established a hold after the resumption",
                vec![0, 1, 2],
                vec![
                    Advance(0, 100),
                    Advance(1, 110),
                    Advance(2, 120),
                    Idle(0),
                    Idle(1),
                    Idle(2), // every input idle: stays at 120
                    At(5_000),
                    Advance(0, 900), // resumed: 1 and 2 count again, at 110 and 120
                    Idle(1),         // idle since before the hold ended: still counted
                    At(5_999),
                    Idle(1),
                    At(6_000),
                    Idle(1), // idle a hold after the resumption: left out, 2 holds it at 120
                    Advance(2, 500),
                    Idle(2),
                ],
                vec![
                    None,
                    None,
                    Some(100),
                    Some(110),
                    Some(120),
                    Some(120),
                    Some(120),
                    Some(120),
                    Some(120),
                    Some(120),
                    Some(120),
                    Some(120),
                    Some(120),
                    Some(500),
                    Some(900),
                ],
            ),
            (
                "whichever input comes back first wakes the others",
                vec![0, 1],
                vec![
                    Advance(0, 10),
                    Advance(1, 10),
                    Idle(1),
                    Idle(0),
                    Advance(1, 90),
                ],
                vec![None, Some(10), Some(10), Some(10), Some(10)],
            ),
            (
                "a single input has nothing to wake",
                vec![0],
                vec![Advance(0, 10), Idle(0), At(1), Advance(0, 90), Idle(0)],
                vec![Some(10), Some(10), Some(10), Some(90), Some(90)],
            ),
        ];
        let base = Instant::now();
        for (name, inputs, steps, want) in cases {
            let mut wm = InputWatermarks::new(inputs, Duration::from_millis(1000));
            let mut now = base;
            let got: Vec<Option<i64>> = steps
                .iter()
                .map(|s| match *s {
                    Advance(input, w) => wm.advance(input, w, now),
                    Idle(input) => wm.set_idle(input, now),
                    Add(input) => {
                        wm.add_input(input);
                        wm.current()
                    }
                    At(ms) => {
                        now = base + Duration::from_millis(ms);
                        wm.current()
                    }
                })
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    /// The inverse: without the resumption, the first input back alone moves the watermark
    /// (the others' records still on their way become late).
    #[test]
    fn without_the_resumption_the_first_input_back_moves_the_watermark_alone() {
        let now = Instant::now();
        let mut wm = InputWatermarks::new([0, 1], Duration::from_millis(1000)).without_resumption();
        wm.advance(0, 100, now);
        wm.advance(1, 100, now);
        wm.set_idle(0, now);
        wm.set_idle(1, now);
        assert_eq!(wm.advance(0, 900, now), Some(900));
        let mut wm = InputWatermarks::new([0, 1], Duration::from_millis(1000));
        wm.advance(0, 100, now);
        wm.advance(1, 100, now);
        wm.set_idle(0, now);
        wm.set_idle(1, now);
        assert_eq!(wm.advance(0, 900, now), Some(100));
    }

    #[test]
    fn a_sliding_record_is_late_only_when_late_for_every_window() {
        let kind = WindowKind::Sliding { size: 10, slide: 5 };
        // t = 7 is in [0,10) and [5,15). At W = 12 the first fired, the second did not.
        let r = route(kind, 7, Some(12), 0);
        assert_eq!(
            r.windows,
            vec![(w(0, 10), Admission::Late), (w(5, 15), Admission::OnTime)]
        );
        assert!(!r.is_late());
        let r = route(kind, 7, Some(15), 0);
        assert!(r.is_late());
    }

    proptest::proptest! {
        #[test]
        fn assigned_windows_hold_the_event_and_start_on_the_slide(
            t in -1_000_000_000_000_000_i64..1_000_000_000_000_000,
            size in 1_i64..10_000_000,
            parts in 1_i64..50,
        ) {
            let slide = (size / parts).max(1);
            let windows = WindowKind::Sliding { size, slide }.assign(t);
            let expected = t.div_euclid(slide) - (t - size).div_euclid(slide);
            proptest::prop_assert_eq!(i64::try_from(windows.len()).unwrap(), expected);
            for (i, win) in windows.iter().enumerate() {
                proptest::prop_assert!(win.start <= t && t < win.end);
                proptest::prop_assert_eq!(win.end - win.start, size);
                proptest::prop_assert_eq!(win.start.rem_euclid(slide), 0);
                if i > 0 {
                    proptest::prop_assert_eq!(win.start - windows[i - 1].start, slide);
                }
            }
            let tumbling = WindowKind::Tumbling { size }.assign(t);
            proptest::prop_assert_eq!(tumbling.len(), 1);
            proptest::prop_assert!(tumbling[0].start <= t && t < tumbling[0].end);
        }

        /// Events out of order by at most B are never late with out-of-orderness B, and every
        /// window an event lands in has not fired yet.
        #[test]
        fn disorder_within_the_bound_is_never_late(
            times in proptest::collection::vec(0_i64..100_000, 1..200),
            size in 1_i64..5_000,
        ) {
            let mut max: Option<i64> = None;
            let mut disorder = 0;
            for t in &times {
                disorder = disorder.max(max.map_or(0, |m| m - t));
                max = Some(max.map_or(*t, |m| m.max(*t)));
            }
            let kind = WindowKind::Tumbling { size };
            let mut wm = Watermark::new(disorder);
            for t in times {
                let r = route(kind, t, wm.current(), 0);
                proptest::prop_assert!(
                    r.windows.iter().all(|(_, a)| *a == Admission::OnTime),
                    "t {} at watermark {:?}: {:?}", t, wm.current(), r
                );
                wm.observe(t);
            }
        }
    }
}
