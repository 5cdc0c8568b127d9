//! The watchdog: a protocol test that runs past its deadline ends the test process with a report
//! of what it was waiting in, instead of hanging CI until the job's time limit.
//!
//! - Which tests: libtest runs every test on a thread named after it. Every test reaches
//!   [`watch`] early (through `init_logging`, which `broker()` and the other helpers call); the
//!   first call on a test's thread registers the test (name, start, deadline), and a
//!   thread-local guard unregisters it when that thread ends, that is when the test is over,
//!   passed or failed. No test body has to change.
//! - What it waits in: the library opens a `tracing` span around every request and state change
//!   (`connect`, `metadata`, `produce`, `fetch`, `rebalance`, ...), and the support helpers one
//!   around every wait ([`waiting`]). A pending call sits inside live spans, so a tracing layer
//!   keeps the live spans (name, fields, parent, age, when last entered) and the report prints
//!   them as a tree. A span belongs to the test on whose thread, or in whose tokio runtime (each
//!   `#[tokio::test]` builds its own), or under whose span it was created.
//! - When: a thread looks twice a second. The deadline is 600 s (the slowest tests take about
//!   90 s on a loaded machine), `ONCEFLOW_TEST_DEADLINE_SECS` changes it for the process (0
//!   turns the watchdog off, e.g. under a debugger), [`deadline`] for one test. Waiting for a
//!   turn on a shared resource ([`turn`]) does not count.
//! - Then: it writes the report to stderr, kills the processes the test process started (a
//!   child holding the output pipe would keep CI waiting), and exits with [`EXIT_CODE`]. Other
//!   tests running at that moment die with it; the run has failed anyway.
//! - Times: with ONCEFLOW_TEST_TIMES=FILE, each test's time (run, and waited for turns) is
//!   appended to FILE when its thread ends; scripts/test lists the slowest of each run.
//!
//! Cost: spans are built only for the watchdog unless ONCEFLOW_LOG is set (events stay off), one
//! short lock per span opened and closed, an atomic store per enter and exit.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Level, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The exit code of a test process the watchdog ended (GNU timeout's).
pub const EXIT_CODE: i32 = 124;

const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);
const ENV: &str = "ONCEFLOW_TEST_DEADLINE_SECS";
/// Where each finished test's time goes ([`record_time`]).
const TIMES_ENV: &str = "ONCEFLOW_TEST_TIMES";
/// At most this many spans per section of a report: the tree matters, not a flood.
const MAX_SPANS: usize = 150;

/// A span that waits for `what`, for support helpers and tests to wrap a wait in
/// (`fut.instrument(waiting("..."))`, or `.entered()` around a blocking call), so that the
/// report says what the test waited for even where the library has no span open.
pub fn waiting(what: impl fmt::Display) -> tracing::Span {
    tracing::info_span!("waiting_for", what = %what)
}

/// Sets the calling test's deadline, counted from its start, in place of the default; call it
/// from the test's own thread (the test body, not a spawned task). Zero turns it off.
pub fn deadline(limit: Duration) {
    // Registers the test, with the span recorder installed, as for any other helper.
    super::init_logging();
    let set = CURRENT
        .try_with(|c| {
            c.borrow().as_ref().map(|r| {
                r.0.limit_ms
                    .store(limit.as_millis() as u64, Ordering::Relaxed);
                r.0.own_limit.store(true, Ordering::Relaxed);
            })
        })
        .ok()
        .flatten();
    assert!(
        set.is_some(),
        "watchdog::deadline is for the test's own thread (the test body, not a spawned task)"
    );
}

/// Awaits `turn` (a lock the test shares with other tests, e.g. the 3-node cluster's) with the
/// test's clock stopped: tests queued behind others must not run out of time while they wait, and
/// a holder that hangs is reported itself, its own clock running. Call it on the test's thread.
pub async fn turn<T>(turn: impl std::future::Future<Output = T>) -> T {
    let paused = CURRENT
        .try_with(|c| c.borrow().as_ref().map(|r| Paused::new(r.0.clone())))
        .ok()
        .flatten();
    let out = turn.await;
    drop(paused);
    out
}

/// The test's clock stopped while this lives.
struct Paused(Arc<Test>);

impl Paused {
    fn new(test: Arc<Test>) -> Paused {
        test.paused_since.store(since_epoch(), Ordering::Relaxed);
        Paused(test)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let since = self.0.paused_since.swap(0, Ordering::Relaxed);
        if since != 0 {
            let paused = since_epoch().saturating_sub(since);
            self.0.paused_ns.fetch_add(paused, Ordering::Relaxed);
        }
    }
}

/// The layer that keeps the live spans: the library's and the tests' (targets `onceflow` and
/// `protocol`) at debug level and above. It enables no events, so without ONCEFLOW_LOG no
/// event is built.
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    Recorder.with_filter(
        filter_fn(|m| {
            m.is_span()
                && *m.level() <= Level::DEBUG
                && (m.target().starts_with("onceflow") || m.target().starts_with("protocol"))
        })
        .with_max_level_hint(LevelFilter::DEBUG),
    )
}

/// Whether the watchdog runs: not with ONCEFLOW_TEST_DEADLINE_SECS=0 (then not even its span
/// recorder, which also makes that setting the baseline to measure its cost against).
pub fn enabled() -> bool {
    !default_limit().is_zero()
}

/// Registers the calling test on its first call from the test's thread, and starts the watchdog
/// thread on the first call of the process. Cheap after that: `init_logging` calls it every time.
pub fn watch() {
    static START: std::sync::Once = std::sync::Once::new();
    START.call_once(|| {
        if !enabled() {
            return;
        }
        let _ = epoch();
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(|| loop {
                std::thread::sleep(Duration::from_millis(500));
                check();
            })
            .expect("start the watchdog thread");
    });
    let _ = CURRENT.try_with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            let thread = std::thread::current();
            // Only libtest's threads: tests live in modules, so their names hold "::"; tokio's
            // workers and helper threads do not count as tests.
            let Some(name) = thread.name().filter(|n| n.contains("::")) else {
                return;
            };
            let mut st = state();
            st.next_test += 1;
            let test = Arc::new(Test {
                id: st.next_test,
                name: name.to_owned(),
                start: Instant::now(),
                limit_ms: AtomicU64::new(default_limit().as_millis() as u64),
                own_limit: AtomicBool::new(false),
                paused_ns: AtomicU64::new(0),
                paused_since: AtomicU64::new(0),
                runtimes: Mutex::new(Vec::new()),
            });
            st.tests.push(test.clone());
            *c = Some(Registration(test));
        }
        // Spans of the test's spawned tasks are created on tokio's worker threads: the test's
        // runtime ties them to it.
        if let (Some(r), Ok(h)) = (c.as_ref(), tokio::runtime::Handle::try_current()) {
            r.0.note_runtime(h.id());
        }
    });
}

/// A registered test.
struct Test {
    id: u64,
    name: String,
    start: Instant,
    /// The deadline, in milliseconds from `start`; 0 = none.
    limit_ms: AtomicU64,
    /// Whether [`deadline`] set it (for the report).
    own_limit: AtomicBool,
    /// Time spent waiting for a turn ([`turn`]), which does not count, in nanoseconds: the
    /// total of past waits, and when the current one began (since [`epoch`]; 0 = none).
    paused_ns: AtomicU64,
    paused_since: AtomicU64,
    /// The tokio runtimes seen on the test's thread (normally its one `#[tokio::test]` runtime).
    runtimes: Mutex<Vec<tokio::runtime::Id>>,
}

impl Test {
    fn note_runtime(&self, id: tokio::runtime::Id) {
        let mut r = self.runtimes.lock().unwrap_or_else(|e| e.into_inner());
        if !r.contains(&id) {
            r.push(id);
        }
    }
    /// How long the test has run, not counting its waits for a turn.
    fn ran(&self) -> Duration {
        let mut paused = self.paused_ns.load(Ordering::Relaxed);
        let since = self.paused_since.load(Ordering::Relaxed);
        if since != 0 {
            paused += since_epoch().saturating_sub(since);
        }
        self.start
            .elapsed()
            .saturating_sub(Duration::from_nanos(paused))
    }
    fn paused(&self) -> Duration {
        self.start.elapsed().saturating_sub(self.ran())
    }
    fn limit(&self) -> Duration {
        Duration::from_millis(self.limit_ms.load(Ordering::Relaxed))
    }
    fn has_runtime(&self, id: tokio::runtime::Id) -> bool {
        self.runtimes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&id)
    }
}

/// Unregisters the test when its thread ends.
struct Registration(Arc<Test>);

impl Drop for Registration {
    fn drop(&mut self) {
        state().tests.retain(|t| t.id != self.0.id);
        record_time(&self.0);
    }
}

/// With ONCEFLOW_TEST_TIMES=FILE, appends a line per finished test to FILE: the seconds it ran
/// (its waits for a turn left out), the seconds it waited for turns, and its name, separated by
/// tabs (scripts/test lists the slowest from it). One `write` per line on a file opened for
/// appending, so the lines of tests finishing at once do not interleave.
fn record_time(test: &Test) {
    let Some(path) = std::env::var_os(TIMES_ENV) else {
        return;
    };
    let line = format!(
        "{:.1}\t{:.1}\t{}\n",
        test.ran().as_secs_f64(),
        test.paused().as_secs_f64(),
        test.name
    );
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!(
            "watchdog: cannot append to {TIMES_ENV}={}: {e}",
            path.display()
        );
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Registration>> = const { RefCell::new(None) };
}

fn current_test() -> Option<u64> {
    CURRENT
        .try_with(|c| c.borrow().as_ref().map(|r| r.0.id))
        .ok()
        .flatten()
}

/// A live span.
struct Live {
    seq: u64,
    parent: Option<u64>,
    test: Option<u64>,
    name: &'static str,
    target: &'static str,
    fields: Mutex<String>,
    created: Instant,
    thread: String,
    /// Entered now (an instrumented future being polled, a guard held).
    entered: AtomicU32,
    /// When last exited, in nanoseconds since [`epoch`]; 0 = never entered.
    last_exit: AtomicU64,
}

struct State {
    tests: Vec<Arc<Test>>,
    /// By creation order, so oldest first.
    spans: BTreeMap<u64, Arc<Live>>,
    next_span: u64,
    next_test: u64,
}

static STATE: Mutex<State> = Mutex::new(State {
    tests: Vec::new(),
    spans: BTreeMap::new(),
    next_span: 0,
    next_test: 0,
});

fn state() -> MutexGuard<'static, State> {
    // A panic elsewhere must not blind the watchdog.
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since [`epoch`], at least 1 (0 means "none" in the atomics that hold them).
fn since_epoch() -> u64 {
    (epoch().elapsed().as_nanos() as u64).max(1)
}

fn default_limit() -> Duration {
    static LIMIT: OnceLock<Duration> = OnceLock::new();
    *LIMIT.get_or_init(|| match std::env::var(ENV) {
        Ok(v) => Duration::from_secs(
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{ENV}={v:?}: expected whole seconds")),
        ),
        Err(_) => DEFAULT_DEADLINE,
    })
}

struct Recorder;

impl<S> Layer<S> for Recorder
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<Arc<Live>>().map(|l| (l.seq, l.test)));
        let mut fields = String::new();
        attrs.record(&mut Fields(&mut fields));
        let thread = std::thread::current();
        let thread_name = match thread.name() {
            Some(n) => n.to_owned(),
            None => format!("{:?}", thread.id()),
        };
        let runtime = tokio::runtime::Handle::try_current().ok().map(|h| h.id());
        let live = {
            let mut st = state();
            let test = parent
                .and_then(|(_, t)| t)
                .or_else(current_test)
                .or_else(|| {
                    let rt = runtime?;
                    st.tests.iter().find(|t| t.has_runtime(rt)).map(|t| t.id)
                });
            st.next_span += 1;
            let live = Arc::new(Live {
                seq: st.next_span,
                parent: parent.map(|(p, _)| p),
                test,
                name: attrs.metadata().name(),
                target: attrs.metadata().target(),
                fields: Mutex::new(fields),
                created: Instant::now(),
                thread: thread_name,
                entered: AtomicU32::new(0),
                last_exit: AtomicU64::new(0),
            });
            st.spans.insert(live.seq, live.clone());
            live
        };
        span.extensions_mut().insert(live);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(live) = span.extensions().get::<Arc<Live>>() {
                let mut f = live.fields.lock().unwrap_or_else(|e| e.into_inner());
                values.record(&mut Fields(&mut f));
            }
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(live) = span.extensions().get::<Arc<Live>>() {
                live.entered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(live) = span.extensions().get::<Arc<Live>>() {
                let _ = live
                    .entered
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
                live.last_exit.store(since_epoch(), Ordering::Relaxed);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            if let Some(live) = span.extensions().get::<Arc<Live>>() {
                state().spans.remove(&live.seq);
            }
        }
    }
}

/// Span fields as `name=value`, separated by spaces.
struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        let _ = write!(self.0, "{}={value:?}", field.name());
    }
}

/// One look: reports and ends the process when a test is past its deadline.
fn check() {
    let now = Instant::now();
    let (overdue, others, spans) = {
        let st = state();
        let (overdue, others): (Vec<_>, Vec<_>) = st.tests.iter().cloned().partition(|t| {
            let limit = t.limit();
            !limit.is_zero() && t.ran() > limit
        });
        if overdue.is_empty() {
            return;
        }
        (
            overdue,
            others,
            st.spans.values().cloned().collect::<Vec<_>>(),
        )
    };
    let children = descendants();
    let report = render(&overdue, &others, &spans, &children, now);
    let mut err = std::io::stderr().lock();
    // Straight to the process's stderr: eprint! may be captured by libtest for some test.
    let _ = err.write_all(report.as_bytes());
    let _ = err.flush();
    if !children.is_empty() {
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .args(children.iter().map(|(pid, _)| pid.to_string()))
            .status();
    }
    std::process::exit(EXIT_CODE);
}

fn render(
    overdue: &[Arc<Test>],
    others: &[Arc<Test>],
    spans: &[Arc<Live>],
    children: &[(u32, String)],
    now: Instant,
) -> String {
    let mut out = String::new();
    for t in overdue {
        let source = if t.own_limit.load(Ordering::Relaxed) {
            "set by support::watchdog::deadline"
        } else if std::env::var_os(ENV).is_some() {
            ENV
        } else {
            "the default; ONCEFLOW_TEST_DEADLINE_SECS changes it"
        };
        let paused = t.paused();
        let paused = if paused.is_zero() {
            String::new()
        } else {
            format!(
                " (and waited {:.1}s for its turn, not counted)",
                paused.as_secs_f64()
            )
        };
        let _ = writeln!(
            out,
            "\n==== watchdog: test {} has run {:.1}s{paused}, past its deadline of {}s \
             ({source}) ====",
            t.name,
            t.ran().as_secs_f64(),
            t.limit().as_secs_f64(),
        );
        let mine: Vec<_> = spans.iter().filter(|s| s.test == Some(t.id)).collect();
        let _ = writeln!(
            out,
            "What it waits in: its live spans, oldest first, children under their parent \
             (age; idle = since last entered; @thread):"
        );
        tree(&mut out, &mine, now);
    }
    let first_start = overdue.iter().map(|t| t.start).min().unwrap_or(now);
    let loose: Vec<_> = spans
        .iter()
        .filter(|s| s.test.is_none() && s.created >= first_start)
        .collect();
    if !loose.is_empty() {
        let _ = writeln!(
            out,
            "Live spans opened since then outside any test's thread, runtime or spans (they may \
             be its):"
        );
        tree(&mut out, &loose, now);
    }
    if !others.is_empty() {
        let _ = writeln!(out, "Other tests still running (they end with it):");
        for t in others {
            let _ = writeln!(out, "  {} ({:.1}s)", t.name, t.ran().as_secs_f64());
        }
    }
    if !children.is_empty() {
        let _ = writeln!(out, "Processes this test process started (killed now):");
        for (pid, cmd) in children {
            let _ = writeln!(out, "  {pid} {cmd}");
        }
    }
    let _ = writeln!(
        out,
        "The test process exits with {EXIT_CODE} so the run fails now instead of hanging. To see \
         more, run the test alone with ONCEFLOW_LOG=onceflow=debug.\n===="
    );
    out
}

/// `spans` (oldest first) as a tree: each under its parent when the parent is in the set.
fn tree(out: &mut String, spans: &[&Arc<Live>], now: Instant) {
    if spans.is_empty() {
        let _ = writeln!(
            out,
            "  (none: it waits outside any span, e.g. in a plain sleep, lock or channel)"
        );
        return;
    }
    let present: std::collections::BTreeSet<u64> = spans.iter().map(|s| s.seq).collect();
    let mut kids: BTreeMap<Option<u64>, Vec<&Arc<Live>>> = BTreeMap::new();
    for s in spans {
        let parent = s.parent.filter(|p| present.contains(p));
        kids.entry(parent).or_default().push(s);
    }
    let mut shown = 0;
    // Depth-first, by hand: parents are older than their children, so there are no cycles.
    let mut stack: Vec<(&Arc<Live>, usize)> = kids
        .get(&None)
        .map(|v| v.iter().rev().map(|s| (*s, 0)).collect())
        .unwrap_or_default();
    while let Some((s, depth)) = stack.pop() {
        if shown == MAX_SPANS {
            let _ = writeln!(out, "  ... and {} more", spans.len() - shown);
            return;
        }
        shown += 1;
        let fields = s.fields.lock().unwrap_or_else(|e| e.into_inner());
        let state = if s.entered.load(Ordering::Relaxed) > 0 {
            "entered now".to_owned()
        } else {
            match s.last_exit.load(Ordering::Relaxed) {
                0 => "never entered".to_owned(),
                t => {
                    let at = epoch() + Duration::from_nanos(t);
                    format!(
                        "idle {:.1}s",
                        now.saturating_duration_since(at).as_secs_f64()
                    )
                }
            }
        };
        let _ = writeln!(
            out,
            "  {:indent$}{}{{{}}} {}  age {:.1}s, {state}, @{}",
            "",
            s.name,
            fields,
            s.target,
            now.saturating_duration_since(s.created).as_secs_f64(),
            s.thread,
            indent = depth * 2,
        );
        if let Some(k) = kids.get(&Some(s.seq)) {
            stack.extend(k.iter().rev().map(|c| (*c, depth + 1)));
        }
    }
}

/// The processes this one started, and theirs (Linux: from /proc), with their command lines.
fn descendants() -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parent_of = BTreeMap::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.insert(pid, ppid);
        }
    }
    let mut found = vec![std::process::id()];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(
            parent_of
                .iter()
                .filter(|(_, pp)| **pp == p)
                .map(|(pid, _)| *pid),
        );
        i += 1;
    }
    found
        .into_iter()
        .skip(1)
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            let cmd: String = cmd.trim().chars().take(200).collect();
            (pid, cmd)
        })
        .collect()
}
