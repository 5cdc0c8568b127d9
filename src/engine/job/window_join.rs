//! A window join (`join.window`): the records of both sides with the same key in the same
//! window make pairs, written when the window closes (Flink's window join). The window
//! operator (`crate::engine::time::window_operator`) keeps, per key and window, each side's
//! records in arrival order; at the watermark its firing writes every left × right pair, left
//! records in arrival order, each with the right ones in arrival order; then the window's state
//! is gone. A record for a window that has closed is late: it joins nothing, is counted, and
//! goes to `join.late_topic` if set. A window with records on one side only writes nothing
//! (an inner join).
//!
//! A window's records are kept as one value, rewritten at each record: a key with many records
//! in one window costs their square; joins over few records per key and window (an event and
//! its few partners) are what it is for.

use std::sync::Arc;

use serde_json::Value;

use super::batch::Carried;
use super::element::JsonElement;
use super::join::{IntervalJoin, Sides};
use super::project::Key;
use super::Operator;
use crate::engine::metrics::{Metrics, OperatorCounter};
use crate::engine::runtime::topology::{downcast, Element, KeyedStage, Output};
use crate::engine::runtime::RuntimeError;
use crate::engine::state::OperatorState;
use crate::engine::time::interval_join::Side;
use crate::engine::time::window_operator::{Fired, WindowFunction, WindowOperator};

/// Its kind in the state layout (the interval join's state is another).
pub(crate) const WINDOW_JOIN_KIND: &str = "window-join";

/// The window function: a record of a side into the window's [`Sides`].
struct Collect;

impl WindowFunction for Collect {
    type Input = (Side, Value);
    type Acc = Sides;
    fn create(&self) -> Sides {
        Sides::default()
    }
    fn add(&self, acc: &mut Sides, (side, value): &(Side, Value)) {
        acc.push(*side, value.clone());
    }
    fn merge(&self, acc: &mut Sides, other: Sides) {
        acc.extend(other);
    }
    fn encode(&self, acc: &Sides) -> Result<Vec<u8>, String> {
        serde_json::to_vec(acc).map_err(|e| e.to_string())
    }
    fn decode(&self, bytes: &[u8]) -> Result<Sides, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// The window join and the operators after it, in one keyed subtask.
pub(crate) struct WindowJoinStage {
    window: WindowOperator<Collect>,
    spec: IntervalJoin,
    after: Vec<Operator>,
    /// Per operator of the job file (the join first), when observed.
    counters: Vec<Arc<OperatorCounter>>,
    metrics: Option<Arc<Metrics>>,
}

impl WindowJoinStage {
    /// The stage of `pipeline` (whose first operator is a window join) on `state`, the
    /// subtask's handle restricted to its key groups; restores its watermark.
    ///
    /// # Errors
    /// The pipeline has no window join first (a bug), or the store failed.
    pub(crate) fn new(
        pipeline: &[Operator],
        state: OperatorState,
    ) -> Result<WindowJoinStage, RuntimeError> {
        let Some(Operator::Join(spec)) = pipeline.first() else {
            return Err(RuntimeError::Internal("join operator not found".into()));
        };
        let Some(kind) = spec.window else {
            return Err(RuntimeError::Internal("the join has no window".into()));
        };
        let window = WindowOperator::restore(Collect, kind, 0, "the window join", state)?;
        Ok(WindowJoinStage {
            window,
            spec: (**spec).clone(),
            after: pipeline[1..].to_vec(),
            counters: Vec::new(),
            metrics: None,
        })
    }

    /// The stage, counting the joined records and those of the operators after it.
    pub(crate) fn observed(mut self, metrics: &Arc<Metrics>, pipeline: &[Operator]) -> Self {
        let counters = metrics.operators(pipeline);
        if counters.len() == pipeline.len() {
            self.counters = counters;
        }
        self.metrics = Some(metrics.clone());
        self
    }

    /// The pairs of the fired windows, through the operators after the join.
    fn finish(&self, fired: Vec<Fired<Sides>>, out: &mut Vec<Output>) {
        let after = self.counters.get(1..).unwrap_or_default();
        for f in fired {
            let mut n = 0;
            for (l, r) in f.acc.pairs() {
                n += 1;
                let record = self.spec.result_record(l.clone(), r.clone());
                let key = Carried::Keyed(Key::from_bytes(f.key.clone()));
                let metrics = self.metrics.as_deref();
                super::element::emit_result(&self.after, after, metrics, key, record, out);
            }
            if let Some(c) = self.counters.first() {
                c.records_out(n);
            }
        }
    }
}

impl KeyedStage for WindowJoinStage {
    fn process(
        &mut self,
        key: &[u8],
        time: i64,
        element: Element,
        out: &mut Vec<Output>,
    ) -> Result<(), RuntimeError> {
        let e: JsonElement = downcast(element, "the window join")?;
        let side = e.side.ok_or_else(|| {
            RuntimeError::Internal("the window join: an element without a side".into())
        })?;
        let mut fired = Vec::new();
        let late = self.window.add(key, time, &(side, e.value), &mut fired)?;
        if late {
            let late_topic = self.spec.late_topic.as_ref();
            out.extend(super::element::late(
                self.metrics.as_deref(),
                late_topic,
                e.input,
            ));
        }
        self.finish(fired, out);
        Ok(())
    }

    fn advance_to(&mut self, watermark: i64, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        let mut fired = Vec::new();
        self.window.advance_to(watermark, &mut fired)?;
        self.finish(fired, out);
        Ok(())
    }

    fn firing(&self) -> bool {
        self.window.firing()
    }

    fn fire_more(&mut self, out: &mut Vec<Output>) -> Result<bool, RuntimeError> {
        let mut fired = Vec::new();
        self.window.fire_more(&mut fired)?;
        self.finish(fired, out);
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
