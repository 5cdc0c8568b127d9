//! Event-time windows on a keyed stream: assigners, allowed lateness, the late side output,
//! [`AggregateFunction`], and the keyed stage that runs them. The window rules are the job
//! file's ([`crate::engine::job::window`]: assignment, admission, lateness), and so is the
//! state's shape: accumulators in a map state per key, `FIRE` and `CLEANUP` timers, the
//! subtask's watermark stored so a restart does not re-open fired windows.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::chain::{count_in, count_out, Downstream};
use super::sink::KafkaSink;
use super::state::{decode, encode};
use super::stream::{KeyedStream, ResultStream};
use crate::engine::job::window::{route, start_key, Admission, Window, WindowKind};
use crate::engine::metrics::{Metrics, OperatorCounter};
use crate::engine::runtime::pipeline::timers_may_be_due;
use crate::engine::runtime::stored_watermark::StoredWatermark;
use crate::engine::runtime::topology::{downcast, Element, KeyedStage, Output};
use crate::engine::runtime::RuntimeError;
use crate::engine::state::{MapState, OperatorState, TimerState, ValueState};

/// Per key: window start (u64 BE, sign flipped) → accumulator (JSON).
const ACCUMULATORS: MapState = MapState::new(0);
/// (window end, key): fire the window.
const FIRE: TimerState = TimerState::new(1);
/// (window end + allowed lateness, key): drop the window's accumulator.
const CLEANUP: TimerState = TimerState::new(2);
/// The keyed subtask's watermark.
const WATERMARK: ValueState = ValueState::new(3);

/// Incremental aggregation of a window's elements (Flink's `AggregateFunction<IN, ACC, OUT>`):
/// the accumulator is checkpointed (serde JSON), the result computed when the window fires.
pub trait AggregateFunction<T, Acc, R>: Send + Sync + 'static {
    /// A new window's accumulator.
    fn create_accumulator(&self) -> Acc;
    /// Adds `value` to `acc`.
    fn add(&self, value: &T, acc: &mut Acc);
    /// The window's result from its accumulator.
    fn get_result(&self, acc: &Acc) -> R;
}

mod sealed {
    pub trait Sealed {}
}

/// Which windows an element belongs to: [`TumblingEventTimeWindows`] or
/// [`SlidingEventTimeWindows`].
pub trait WindowAssigner: sealed::Sealed {
    /// The windows' kind, or what is wrong with the sizes.
    #[doc(hidden)]
    fn window_kind(&self) -> Result<WindowKind, String>;
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Back-to-back event-time windows of one size, aligned to the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TumblingEventTimeWindows {
    size: Duration,
}

impl TumblingEventTimeWindows {
    /// Windows of `size` (at least 1 ms).
    pub fn of(size: Duration) -> TumblingEventTimeWindows {
        TumblingEventTimeWindows { size }
    }
}

impl sealed::Sealed for TumblingEventTimeWindows {}

impl WindowAssigner for TumblingEventTimeWindows {
    fn window_kind(&self) -> Result<WindowKind, String> {
        match millis(self.size) {
            0 => Err("TumblingEventTimeWindows::of: the size must be at least 1 ms".into()),
            size => Ok(WindowKind::Tumbling { size }),
        }
    }
}

/// Overlapping event-time windows of `size`, one starting every `slide`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingEventTimeWindows {
    size: Duration,
    slide: Duration,
}

impl SlidingEventTimeWindows {
    /// Windows of `size`, one every `slide` (0 < slide ≤ size, in whole ms).
    pub fn of(size: Duration, slide: Duration) -> SlidingEventTimeWindows {
        SlidingEventTimeWindows { size, slide }
    }
}

impl sealed::Sealed for SlidingEventTimeWindows {}

impl WindowAssigner for SlidingEventTimeWindows {
    fn window_kind(&self) -> Result<WindowKind, String> {
        let (size, slide) = (millis(self.size), millis(self.slide));
        if slide <= 0 || slide > size {
            return Err(format!(
                "SlidingEventTimeWindows::of: the slide ({slide} ms) must be at least 1 ms and \
                 at most the size ({size} ms)"
            ));
        }
        Ok(WindowKind::Sliding { size, slide })
    }
}

/// A keyed stream cut into event-time windows; finish it with [`Self::aggregate`] or
/// [`Self::aggregate_with`].
pub struct WindowedStream<K, T> {
    pub(crate) keyed: KeyedStream<K, T>,
    pub(crate) kind: Result<WindowKind, String>,
    pub(crate) lateness: i64,
    pub(crate) late: Option<KafkaSink<T>>,
}

impl<K, T> WindowedStream<K, T>
where
    K: Serialize + DeserializeOwned + Clone + Send + 'static,
    T: Send + 'static,
{
    /// Keeps a fired window's accumulator `lateness` longer: an element for it that comes in
    /// that time is added and the window fires again with the updated result (default 0).
    pub fn allowed_lateness(mut self, lateness: Duration) -> WindowedStream<K, T> {
        self.lateness = millis(lateness);
        self
    }

    /// Writes late elements (late for every window they belong to) to `sink`'s topic, in the
    /// same transaction as the job's output (Flink's side output for late data). Late
    /// elements are counted either way (`onceflow_late_records_total`).
    pub fn late_output(mut self, sink: KafkaSink<T>) -> WindowedStream<K, T> {
        self.late = Some(sink);
        self
    }

    /// Each window's aggregate result, emitted when the watermark passes the window's end.
    pub fn aggregate<A, Acc, R>(self, agg: A) -> ResultStream<R>
    where
        A: AggregateFunction<T, Acc, R>,
        Acc: Serialize + DeserializeOwned + 'static,
        R: 'static,
    {
        self.aggregate_with(agg, |_: &K, _: Window, r: R| r)
    }

    /// [`Self::aggregate`], the result made into the output by `f` with the key and the
    /// window (Flink's `aggregate(agg, windowFunction)`).
    pub fn aggregate_with<A, Acc, R, O>(
        self,
        agg: A,
        f: impl Fn(&K, Window, R) -> O + Send + Sync + 'static,
    ) -> ResultStream<O>
    where
        A: AggregateFunction<T, Acc, R>,
        Acc: Serialize + DeserializeOwned + 'static,
        R: 'static,
        O: 'static,
    {
        let spec = WindowSpec {
            kind: self
                .kind
                .clone()
                .unwrap_or(WindowKind::Tumbling { size: 1 }),
            lateness: self.lateness,
            late: self.late,
        };
        let mut keyed = self.keyed;
        if let Err(e) = self.kind {
            keyed.plan.problem(e);
        }
        if spec
            .late
            .as_ref()
            .is_some_and(|s| s.topic.trim().is_empty())
        {
            keyed.plan.problem("late_output: the topic name is empty");
        }
        // The timers' meaning depends on the sizes and the lateness (a cleanup at end + L
        // finds its window by them), so they are part of the kind; the function's code is
        // not (it may change, as in Flink: its accumulator must still decode).
        let kind = format!(
            "window-aggregate:{:?}:lateness={}",
            spec.kind, spec.lateness
        );
        let funcs = Arc::new((agg, f));
        keyed.stage("window_aggregate", "window", kind, move |env| {
            let stage = WindowStage {
                funcs: funcs.clone(),
                spec: spec.clone(),
                state: env.state,
                watermark: None,
                stored: None,
                scanned_to: None,
                next: env.next,
                counters: env.counters,
                index: env.index,
                name: env.name,
                metrics: env.metrics,
                _types: PhantomData::<fn(K, T, Acc) -> R>,
            };
            stage.restored()
        })
    }
}

/// The window's settings, as the stage runs them.
pub(crate) struct WindowSpec<T> {
    pub(crate) kind: WindowKind,
    pub(crate) lateness: i64,
    pub(crate) late: Option<KafkaSink<T>>,
}

impl<T> Clone for WindowSpec<T> {
    fn clone(&self) -> Self {
        WindowSpec {
            kind: self.kind,
            lateness: self.lateness,
            late: self.late.clone(),
        }
    }
}

/// What a keyed stage is made with in a keyed subtask.
pub(crate) struct StageEnv<O> {
    pub(crate) state: OperatorState,
    pub(crate) next: Downstream<O>,
    pub(crate) counters: Vec<Arc<OperatorCounter>>,
    pub(crate) index: usize,
    /// `<uid> (<kind>)`, for errors.
    pub(crate) name: String,
    pub(crate) metrics: Arc<Metrics>,
}

/// The keyed stage of a window aggregate and the operators after it.
pub(crate) struct WindowStage<K, T, Acc, R, O, A, F> {
    funcs: Arc<(A, F)>,
    spec: WindowSpec<T>,
    state: OperatorState,
    watermark: Option<i64>,
    /// The key groups' restored watermarks and what checkpoints keep (set by `restored`).
    stored: Option<StoredWatermark>,
    /// The watermark up to which timers were last looked for (as the job file's window).
    scanned_to: Option<i64>,
    next: Downstream<O>,
    counters: Vec<Arc<OperatorCounter>>,
    index: usize,
    name: String,
    metrics: Arc<Metrics>,
    _types: PhantomData<fn(K, T, Acc) -> R>,
}

impl<K, T, Acc, R, O, A, F> WindowStage<K, T, Acc, R, O, A, F>
where
    K: Serialize + DeserializeOwned + Send + 'static,
    T: Send + 'static,
    Acc: Serialize + DeserializeOwned + 'static,
    R: 'static,
    O: 'static,
    A: AggregateFunction<T, Acc, R>,
    F: Fn(&K, Window, R) -> O + Send + Sync + 'static,
{
    fn restored(mut self) -> Result<Self, RuntimeError> {
        let (watermark, stored) = StoredWatermark::restore(&self.state, WATERMARK)?;
        self.watermark = watermark;
        self.stored = Some(stored);
        tracing::info!(
            operator = %self.name,
            key_groups = ?self.state.key_groups(),
            watermark = ?self.watermark,
            "window stage started"
        );
        Ok(self)
    }

    fn internal(&self, what: impl std::fmt::Display) -> RuntimeError {
        RuntimeError::Internal(format!("{}: {what}", self.name))
    }

    fn accumulator(&self, key: &[u8], window: Window) -> Result<Acc, RuntimeError> {
        match ACCUMULATORS.get(&self.state, key, &start_key(window.start))? {
            Some(bytes) => decode("accumulator", &bytes).map_err(|e| self.internal(e)),
            None => Ok(self.funcs.0.create_accumulator()),
        }
    }

    /// The window's result through the window function, then the operators after it.
    fn fire(
        &self,
        key: &K,
        window: Window,
        acc: &Acc,
        out: &mut Vec<Output>,
    ) -> Result<(), RuntimeError> {
        let (agg, f) = &*self.funcs;
        count_out(&self.counters, self.index, 1);
        (self.next)(f(key, window, agg.get_result(acc)), &self.counters, out)
    }

    /// A late element: counted, and written to the late output when there is one.
    fn late(&self, value: &T, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        self.metrics.late_record();
        let Some(sink) = &self.spec.late else {
            return Ok(());
        };
        let record = sink
            .output(value, Some(sink.topic.clone()))
            .map_err(|message| RuntimeError::Function {
                operator: format!("{} late output", self.name),
                message,
            })?;
        out.push(record);
        Ok(())
    }

    fn add(
        &mut self,
        key_bytes: &[u8],
        key: &K,
        t: i64,
        value: &T,
        out: &mut Vec<Output>,
    ) -> Result<(), RuntimeError> {
        let lateness = self.spec.lateness;
        let judged_by = match &self.stored {
            Some(s) => s.for_key(&self.state, key_bytes, self.watermark),
            None => self.watermark,
        };
        let routed = route(self.spec.kind, t, judged_by, lateness);
        if routed.is_late() {
            self.late(value, out)?;
        }
        for (window, admission) in routed.windows {
            if admission == Admission::Late {
                continue;
            }
            let mut acc = self.accumulator(key_bytes, window)?;
            self.funcs.0.add(value, &mut acc);
            let bytes = encode("accumulator", &acc).map_err(|e| self.internal(e))?;
            ACCUMULATORS.insert(&mut self.state, key_bytes, &start_key(window.start), &bytes);
            if admission == Admission::LateUpdate {
                self.fire(key, window, &acc, out)?;
            } else {
                FIRE.register(&mut self.state, key_bytes, window.end);
                CLEANUP.register(
                    &mut self.state,
                    key_bytes,
                    window.end.saturating_add(lateness),
                );
            }
        }
        Ok(())
    }
}

impl<K, T, Acc, R, O, A, F> KeyedStage for WindowStage<K, T, Acc, R, O, A, F>
where
    K: Serialize + DeserializeOwned + Send + 'static,
    T: Send + 'static,
    Acc: Serialize + DeserializeOwned + 'static,
    R: 'static,
    O: 'static,
    A: AggregateFunction<T, Acc, R>,
    F: Fn(&K, Window, R) -> O + Send + Sync + 'static,
{
    fn process(
        &mut self,
        key: &[u8],
        time: i64,
        element: Element,
        out: &mut Vec<Output>,
    ) -> Result<(), RuntimeError> {
        let (k, value): (K, T) = downcast(element, &self.name)?;
        count_in(&self.counters, self.index);
        self.add(key, &k, time, &value, out)
    }

    /// Mirrors the job file's window: fires the due windows (by end, then key) and drops the
    /// expired ones, scanning the timers only when the watermark crosses a window boundary.
    fn advance_to(&mut self, w: i64, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        if self.watermark.is_some_and(|c| c >= w) {
            return Ok(());
        }
        self.watermark = Some(w);
        if let Some(s) = &mut self.stored {
            s.advanced(w);
        }
        let (size, slide) = self.spec.kind.size_and_slide();
        let lateness = self.spec.lateness;
        if !timers_may_be_due(self.scanned_to, w, size, slide, lateness) {
            return Ok(());
        }
        self.scanned_to = Some(w);
        for (end, k) in FIRE.due(&self.state, w)? {
            FIRE.delete(&mut self.state, &k, end);
            let window = Window {
                start: end - size,
                end,
            };
            let key: K = decode("key", &k).map_err(|e| self.internal(e))?;
            let acc = self.accumulator(&k, window)?;
            self.fire(&key, window, &acc, out)?;
        }
        for (at, k) in CLEANUP.due(&self.state, w)? {
            CLEANUP.delete(&mut self.state, &k, at);
            let start = at - lateness - size;
            ACCUMULATORS.remove(&mut self.state, &k, &start_key(start));
        }
        Ok(())
    }

    fn state_mut(&mut self) -> &mut OperatorState {
        &mut self.state
    }

    fn before_snapshot(&mut self) {
        if let Some(s) = &mut self.stored {
            s.store(&mut self.state, self.watermark);
        }
    }

    fn watermark(&self) -> Option<i64> {
        self.watermark
    }
}
