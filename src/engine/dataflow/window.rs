//! Event-time windows on a keyed stream: assigners, allowed lateness, the late side output,
//! [`AggregateFunction`], and the keyed stage that runs them. The window rules are the job
//! file's ([`crate::engine::time`]: assignment, admission, lateness), and so is the
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
use crate::engine::metrics::{Metrics, OperatorCounter};
use crate::engine::runtime::topology::{downcast, Element, KeyedStage, Output};
use crate::engine::runtime::RuntimeError;
use crate::engine::state::OperatorState;
use crate::engine::time::window_operator::{Fired, WindowFunction, WindowOperator};
use crate::engine::time::{Window, WindowKind};

/// Incremental aggregation of a window's elements (Flink's `AggregateFunction<IN, ACC, OUT>`):
/// the accumulator is checkpointed (serde JSON), the result computed when the window fires.
pub trait AggregateFunction<T, Acc, R>: Send + Sync + 'static {
    /// A new window's accumulator.
    fn create_accumulator(&self) -> Acc;
    /// Adds `value` to `acc`.
    fn add(&self, value: &T, acc: &mut Acc);
    /// One accumulator of the elements of both: session windows merge when an element
    /// bridges them (the other windows never call it).
    fn merge(&self, a: Acc, b: Acc) -> Acc;
    /// The window's result from its accumulator.
    fn get_result(&self, acc: &Acc) -> R;
}

mod sealed {
    pub trait Sealed {}
}

/// Which windows an element belongs to: [`TumblingEventTimeWindows`],
/// [`SlidingEventTimeWindows`] or [`EventTimeSessionWindows`].
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

/// Per key, sessions of elements at most `gap` apart in event time: an element opens the
/// window `[t, t + gap)`, and windows of one key that overlap or touch merge into one (their
/// accumulators merged by [`AggregateFunction::merge`]), `[first, last + gap)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTimeSessionWindows {
    gap: Duration,
}

impl EventTimeSessionWindows {
    /// Sessions that end after `gap` (at least 1 ms) without an element.
    pub fn with_gap(gap: Duration) -> EventTimeSessionWindows {
        EventTimeSessionWindows { gap }
    }
}

impl sealed::Sealed for EventTimeSessionWindows {}

impl WindowAssigner for EventTimeSessionWindows {
    fn window_kind(&self) -> Result<WindowKind, String> {
        match millis(self.gap) {
            0 => Err("EventTimeSessionWindows::with_gap: the gap must be at least 1 ms".into()),
            gap => Ok(WindowKind::Session { gap }),
        }
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
            WindowStage::restore(funcs.clone(), spec.clone(), env)
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

/// A typed aggregate as the window operator computes it (accumulators as serde JSON).
struct TypedAggregate<A, F, T, Acc, R> {
    funcs: Arc<(A, F)>,
    _types: PhantomData<fn(T, Acc) -> R>,
}

impl<A, F, T, Acc, R> WindowFunction for TypedAggregate<A, F, T, Acc, R>
where
    A: AggregateFunction<T, Acc, R>,
    Acc: Serialize + DeserializeOwned,
{
    type Input = T;
    type Acc = Acc;
    fn create(&self) -> Acc {
        self.funcs.0.create_accumulator()
    }
    fn add(&self, acc: &mut Acc, input: &T) {
        self.funcs.0.add(input, acc);
    }
    fn merge(&self, acc: &mut Acc, other: Acc) {
        let a = std::mem::replace(acc, self.funcs.0.create_accumulator());
        *acc = self.funcs.0.merge(a, other);
    }
    fn encode(&self, acc: &Acc) -> Result<Vec<u8>, String> {
        encode("accumulator", acc).map_err(|e| e.to_string())
    }
    fn decode(&self, bytes: &[u8]) -> Result<Acc, String> {
        decode("accumulator", bytes).map_err(|e| e.to_string())
    }
}

/// The keyed stage of a window aggregate and the operators after it.
pub(crate) struct WindowStage<K, T, Acc, R, O, A, F> {
    window: WindowOperator<TypedAggregate<A, F, T, Acc, R>>,
    funcs: Arc<(A, F)>,
    late: Option<KafkaSink<T>>,
    next: Downstream<O>,
    counters: Vec<Arc<OperatorCounter>>,
    index: usize,
    name: String,
    metrics: Arc<Metrics>,
    _types: PhantomData<fn(K) -> O>,
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
    fn restore(
        funcs: Arc<(A, F)>,
        spec: WindowSpec<T>,
        env: StageEnv<O>,
    ) -> Result<Self, RuntimeError> {
        let aggregate = TypedAggregate {
            funcs: funcs.clone(),
            _types: PhantomData,
        };
        let window = WindowOperator::restore(
            aggregate,
            spec.kind,
            spec.lateness,
            env.name.clone(),
            env.state,
        )?;
        tracing::info!(
            operator = %env.name,
            watermark = ?window.watermark(),
            "window stage started"
        );
        Ok(WindowStage {
            window,
            funcs,
            late: spec.late,
            next: env.next,
            counters: env.counters,
            index: env.index,
            name: env.name,
            metrics: env.metrics,
            _types: PhantomData,
        })
    }

    /// The fired windows' results through the operators after the window.
    fn fire(&self, fired: Vec<Fired<Acc>>, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        let (agg, f) = &*self.funcs;
        for w in fired {
            let key: K = decode("key", &w.key)
                .map_err(|e| RuntimeError::Internal(format!("{}: {e}", self.name)))?;
            count_out(&self.counters, self.index, 1);
            (self.next)(
                f(&key, w.window, agg.get_result(&w.acc)),
                &self.counters,
                out,
            )?;
        }
        Ok(())
    }

    fn late(&self, value: &T, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        self.metrics.late_record();
        let Some(sink) = &self.late else {
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
        let (_, value): (K, T) = downcast(element, &self.name)?;
        count_in(&self.counters, self.index);
        let mut fired = Vec::new();
        if self.window.add(key, time, &value, &mut fired)? {
            self.late(&value, out)?;
        }
        self.fire(fired, out)
    }

    fn advance_to(&mut self, w: i64, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        let mut fired = Vec::new();
        self.window.advance_to(w, &mut fired)?;
        self.fire(fired, out)
    }

    fn firing(&self) -> bool {
        self.window.firing()
    }

    fn fire_more(&mut self, out: &mut Vec<Output>) -> Result<bool, RuntimeError> {
        let mut fired = Vec::new();
        self.window.fire_more(&mut fired)?;
        self.fire(fired, out)?;
        Ok(self.window.firing())
    }

    fn state_mut(&mut self) -> &mut OperatorState {
        self.window.state_mut()
    }

    fn before_snapshot(&mut self) {
        self.window.before_snapshot();
    }

    fn watermark(&self) -> Option<i64> {
        self.window.watermark()
    }
}
