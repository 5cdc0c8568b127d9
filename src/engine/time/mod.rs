//! Event time, in one home for job files and typed jobs:
//!
//! - `rules`: windows, the watermark, lateness and admission as pure functions (each rule
//!   pinned by a table test). [`Window`] is what a typed job's window function is given.
//! - `stored_watermark`: a keyed subtask's watermark kept under each of its key groups, so a
//!   restart at any parallelism does not re-open windows that fired.
//! - `window_operator`: the one keyed window operator (accumulators per key and window, fire
//!   and cleanup timers, firing in bounded chunks), over the aggregate a front end gives it.
//! - `session`: session windows' merging and the buckets that say when their timers may be
//!   due (pure).
//! - `interval_join`: the keyed interval join of two inputs (match, keep and lateness rules,
//!   pure; the operator over the keyed state, its cleanup timers found through the same
//!   buckets).
//! - `timers`: the event-time timer service of keyed process functions (an in-memory queue
//!   over the checkpointed timers, for timers at arbitrary times).
//!
//! Two ways of finding due timers, on purpose. A window's timers fall only on window ends and
//! cleanups, so the window operator looks at the stored timers (one range scan per key group)
//! only when the watermark crosses one of those, and fires what it finds in bounded chunks:
//! its memory does not grow with the number of keys. A process function's timers fall at any
//! time, so a scan on every watermark advance would visit every key group each time; there
//! an in-memory queue of the timers answers "what is due" from its head. Session windows sit
//! between: their ends fall anywhere, but one per open session; the window operator keeps
//! only which key groups hold a timer in which time bucket (`session::TimerBuckets`), and
//! scans those key groups when the watermark reaches the bucket.

mod pattern;
pub(crate) mod rfc3339;
mod rules;
pub(crate) mod interval_join;
pub(crate) mod session;
pub(crate) mod stored_watermark;
pub(crate) mod timers;
pub(crate) mod window_operator;

pub use rules::{
    admit, route, start_key, Admission, InputWatermarks, Route, Watermark, Window, WindowKind,
};
pub use pattern::TimestampFormat;
pub(crate) use rfc3339::epoch_ms_of;
pub(crate) use stored_watermark::StoredWatermark;
pub(crate) use timers::TimerService;
