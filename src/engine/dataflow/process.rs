//! [`KeyedProcessFunction`]: a user function on a keyed stream with keyed state, event-time
//! and processing-time timers (Flink's), and the keyed stage that runs it.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::chain::{count_in, count_out, Downstream};
use super::state::{
    Access, ListStateDescriptor, ListStateHandle, MapStateDescriptor, MapStateHandle,
    ValueStateDescriptor, ValueStateHandle,
};
use super::ttl::{TtlCleanup, TtlClock, CLEANUP_STEP};
use super::FunctionError;
use crate::engine::metrics::OperatorCounter;
use crate::engine::runtime::topology::{downcast, Element, KeyedStage, Output};
use crate::engine::runtime::RuntimeError;
use crate::engine::state::{OperatorState, TimerState, ValueState};
use crate::engine::time::StoredWatermark;
use crate::engine::time::TimerService;

/// The stage's event-time timers (ids above [`super::MAX_STATE_ID`] are the operator's own).
const TIMERS: TimerState = TimerState::new(255);
/// The keyed subtask's watermark.
const WATERMARK: ValueState = ValueState::new(254);
/// The stage's processing-time timers.
const PROCESSING_TIMERS: TimerState = TimerState::new(253);

/// Which clock a timer follows (Flink's `TimeDomain`): what [`Context::time_domain`] says in
/// [`KeyedProcessFunction::on_timer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeDomain {
    /// Event time: the timer fired because the watermark reached it.
    EventTime,
    /// Processing time: the timer fired because the wall clock reached it.
    ProcessingTime,
}

/// A function over a keyed stream's elements, with keyed state and event-time timers (Flink's
/// `KeyedProcessFunction<K, I, O>`). Each keyed subtask runs its own clone; what must survive
/// a restart belongs in keyed state, not in the function's fields.
pub trait KeyedProcessFunction<K, I, O>: Clone + Send + 'static {
    /// One element of `key`; what it emits goes into `out`.
    ///
    /// # Errors
    /// Any error stops the job, naming the operator (a [`StateAccessError`](super::StateAccessError)
    /// converts with `?`).
    fn process_element(
        &mut self,
        key: &K,
        value: I,
        ctx: &mut Context<'_>,
        out: &mut Collector<O>,
    ) -> Result<(), FunctionError>;

    /// `key`'s timer at `timestamp` fired: an event-time timer once the watermark reached it,
    /// a processing-time timer once the wall clock did (`ctx.time_domain()` says which);
    /// `ctx.timestamp()` is the timer's time. Does nothing by default.
    ///
    /// # Errors
    /// As [`Self::process_element`].
    fn on_timer(
        &mut self,
        key: &K,
        timestamp: i64,
        ctx: &mut Context<'_>,
        out: &mut Collector<O>,
    ) -> Result<(), FunctionError> {
        let _ = (key, timestamp, ctx, out);
        Ok(())
    }
}

/// Where a function's outputs go.
#[derive(Debug)]
pub struct Collector<O> {
    items: Vec<O>,
}

impl<O> Collector<O> {
    pub(crate) fn new() -> Collector<O> {
        Collector { items: Vec::new() }
    }

    /// Emits `item`.
    pub fn collect(&mut self, item: O) {
        self.items.push(item);
    }
}

/// What a function sees besides the element: its timestamp, the watermark, the current key's
/// state and timers.
pub struct Context<'a> {
    timestamp: i64,
    watermark: Option<i64>,
    key: &'a [u8],
    state: &'a mut OperatorState,
    timers: &'a mut TimerService,
    processing: &'a mut TimerService,
    domain: TimeDomain,
    /// The wall clock when the element or timer came (a processing-time timer's time).
    now_ms: i64,
    ttl: &'a mut TtlCleanup,
}

impl Context<'_> {
    /// The element's timestamp (its event time, or its Kafka timestamp without
    /// `event_time`); in `on_timer`, the timer's time.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The subtask's current watermark (`None` before the first).
    pub fn current_watermark(&self) -> Option<i64> {
        self.watermark
    }

    /// A timer for the current key at `time` (ms): `on_timer` runs once the watermark reaches
    /// it; registering the same time twice keeps one. Timers are checkpointed.
    pub fn register_event_time_timer(&mut self, time: i64) {
        self.timers.register(self.state, self.key, time);
    }

    /// Deletes the current key's timer at `time`, if any.
    pub fn delete_event_time_timer(&mut self, time: i64) {
        self.timers.delete(self.state, self.key, time);
    }

    /// The wall clock, ms since the epoch.
    pub fn current_processing_time(&self) -> i64 {
        wall_ms()
    }

    /// What a state handle reaches.
    fn access(&mut self) -> Access<'_> {
        Access {
            state: self.state,
            key: self.key,
            clock: TtlClock {
                now_ms: self.now_ms,
                event_time: self.timestamp,
                watermark: self.watermark,
            },
            cleanup: self.ttl,
        }
    }

    /// A processing-time timer for the current key at `time` (ms since the epoch):
    /// `on_timer` runs once the wall clock reaches it (a time already past fires at once).
    /// Checkpointed like event-time timers: after a restore, one whose time passed while
    /// the job was down fires as soon as the job runs. Which records the function has seen
    /// when it fires depends on the clock, so output that depends on it may differ between a
    /// run and its replay after a failure (each run's output is still written exactly once).
    pub fn register_processing_time_timer(&mut self, time: i64) {
        self.processing.register(self.state, self.key, time);
    }

    /// Deletes the current key's processing-time timer at `time`, if any.
    pub fn delete_processing_time_timer(&mut self, time: i64) {
        self.processing.delete(self.state, self.key, time);
    }

    /// In `on_timer`, the fired timer's clock; in `process_element`, event time.
    pub fn time_domain(&self) -> TimeDomain {
        self.domain
    }

    /// The current key's value state of `desc`.
    pub fn value_state<T>(&mut self, desc: &ValueStateDescriptor<T>) -> ValueStateHandle<'_, T> {
        ValueStateHandle {
            access: self.access(),
            desc: *desc,
        }
    }

    /// The current key's map state of `desc`.
    pub fn map_state<UK, UV>(
        &mut self,
        desc: &MapStateDescriptor<UK, UV>,
    ) -> MapStateHandle<'_, UK, UV> {
        MapStateHandle {
            access: self.access(),
            desc: *desc,
        }
    }

    /// The current key's list state of `desc`.
    pub fn list_state<T>(&mut self, desc: &ListStateDescriptor<T>) -> ListStateHandle<'_, T> {
        ListStateHandle {
            access: self.access(),
            desc: *desc,
        }
    }
}

/// The wall clock, ms since the epoch.
fn wall_ms() -> i64 {
    i64::try_from(crate::engine::clock::now_ms()).unwrap_or(i64::MAX)
}

/// The keyed stage running a [`KeyedProcessFunction`] and the operators after it.
pub(crate) struct ProcessStage<K, I, O, F> {
    pub(crate) f: F,
    pub(crate) state: OperatorState,
    pub(crate) timers: TimerService,
    pub(crate) processing: TimerService,
    pub(crate) watermark: Option<i64>,
    /// What checkpoints keep of the watermark (per key group).
    pub(crate) stored: StoredWatermark,
    pub(crate) next: Downstream<O>,
    pub(crate) counters: Vec<Arc<OperatorCounter>>,
    /// The operator's index among the job's operators.
    pub(crate) index: usize,
    /// `<uid> (process)`, for errors.
    pub(crate) name: String,
    /// The states with a TTL the function used, and their cleanup.
    pub(crate) ttl: TtlCleanup,
    pub(crate) _types: PhantomData<fn(K, I) -> O>,
}

impl<K, I, O, F> ProcessStage<K, I, O, F>
where
    K: Serialize + DeserializeOwned + Send + 'static,
    I: Send + 'static,
    O: 'static,
    F: KeyedProcessFunction<K, I, O>,
{
    /// The stage of `f` on `state`, its timers and watermark restored.
    ///
    /// # Errors
    /// The restored state cannot be read.
    pub(crate) fn new(
        f: F,
        mut state: OperatorState,
        next: Downstream<O>,
        counters: Vec<Arc<OperatorCounter>>,
        index: usize,
        name: String,
    ) -> Result<Self, RuntimeError> {
        let timers = TimerService::restore(&mut state, TIMERS)?;
        let processing = TimerService::restore(&mut state, PROCESSING_TIMERS)?;
        let (watermark, stored) = StoredWatermark::restore(&state, WATERMARK)?;
        tracing::info!(
            operator = %name,
            key_groups = ?state.key_groups(),
            timers = timers.len(),
            processing_timers = processing.len(),
            watermark = ?watermark,
            "keyed process function started"
        );
        Ok(ProcessStage {
            f,
            timers,
            processing,
            watermark,
            stored,
            state,
            next,
            counters,
            index,
            name,
            ttl: TtlCleanup::default(),
            _types: PhantomData,
        })
    }

    /// A cleanup step on every state with a TTL the function used (a watermark or the wall
    /// clock moved on: values may have expired though their keys get no elements).
    fn clean_ttl(&mut self, now_ms: i64) -> Result<(), RuntimeError> {
        let clock = TtlClock {
            now_ms,
            event_time: self.watermark.unwrap_or(i64::MIN),
            watermark: self.watermark,
        };
        self.ttl
            .step_all(&mut self.state, &clock, CLEANUP_STEP)
            .map_err(|e| RuntimeError::Function {
                operator: self.name.clone(),
                message: format!("state time-to-live cleanup: {e}"),
            })?;
        Ok(())
    }

    fn failed(&self, e: FunctionError) -> RuntimeError {
        RuntimeError::Function {
            operator: self.name.clone(),
            message: e.to_string(),
        }
    }

    fn emit(&self, items: Vec<O>, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        count_out(&self.counters, self.index, items.len() as u64);
        for item in items {
            (self.next)(item, &self.counters, out)?;
        }
        Ok(())
    }

    /// Fires every timer of `domain` at or before `w`, in time order (timers a firing
    /// registers at or before `w` fire too).
    fn fire_timers(
        &mut self,
        domain: TimeDomain,
        w: i64,
        out: &mut Vec<Output>,
    ) -> Result<(), RuntimeError> {
        loop {
            let due = match domain {
                TimeDomain::EventTime => self.timers.pop_due(&mut self.state, w),
                TimeDomain::ProcessingTime => self.processing.pop_due(&mut self.state, w),
            };
            let Some((time, key_bytes)) = due else {
                return Ok(());
            };
            let key: K = serde_json::from_slice(&key_bytes).map_err(|e| {
                RuntimeError::Internal(format!("{}: a timer's key does not decode: {e}", self.name))
            })?;
            let mut col = Collector::new();
            let mut ctx = Context {
                timestamp: time,
                watermark: self.watermark,
                key: &key_bytes,
                state: &mut self.state,
                timers: &mut self.timers,
                processing: &mut self.processing,
                domain,
                now_ms: match domain {
                    TimeDomain::ProcessingTime => time,
                    TimeDomain::EventTime => wall_ms(),
                },
                ttl: &mut self.ttl,
            };
            let result = self.f.on_timer(&key, time, &mut ctx, &mut col);
            result.map_err(|e| self.failed(e))?;
            self.emit(col.items, out)?;
        }
    }
}

impl<K, I, O, F> KeyedStage for ProcessStage<K, I, O, F>
where
    K: Serialize + DeserializeOwned + Send + 'static,
    I: Send + 'static,
    O: 'static,
    F: KeyedProcessFunction<K, I, O>,
{
    fn process(
        &mut self,
        key: &[u8],
        time: i64,
        element: Element,
        out: &mut Vec<Output>,
    ) -> Result<(), RuntimeError> {
        let (k, value): (K, I) = downcast(element, &self.name)?;
        count_in(&self.counters, self.index);
        let mut col = Collector::new();
        let mut ctx = Context {
            timestamp: time,
            watermark: self.watermark,
            key,
            state: &mut self.state,
            timers: &mut self.timers,
            processing: &mut self.processing,
            domain: TimeDomain::EventTime,
            now_ms: wall_ms(),
            ttl: &mut self.ttl,
        };
        let result = self.f.process_element(&k, value, &mut ctx, &mut col);
        result.map_err(|e| self.failed(e))?;
        self.emit(col.items, out)
    }

    fn advance_to(&mut self, watermark: i64, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        if self.watermark.is_some_and(|w| w >= watermark) {
            return Ok(());
        }
        self.watermark = Some(watermark);
        self.stored.advanced(watermark);
        self.fire_timers(TimeDomain::EventTime, watermark, out)?;
        self.clean_ttl(wall_ms())
    }

    fn next_processing_timer(&self) -> Option<i64> {
        self.processing.next()
    }

    fn on_processing_time(&mut self, now: i64, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        self.fire_timers(TimeDomain::ProcessingTime, now, out)?;
        self.clean_ttl(now)
    }

    fn state_mut(&mut self) -> &mut OperatorState {
        &mut self.state
    }

    fn before_snapshot(&mut self) {
        self.stored.store(&mut self.state, self.watermark);
    }

    fn watermark(&self) -> Option<i64> {
        self.watermark
    }
}
