//! A job file's join as the runtime runs it: [`JoinPrefix`] in each source subtask tells a
//! record's side by its topic, keys and times it; [`JoinStage`] in the keyed subtask that owns
//! the key runs the interval join operator (`crate::engine::time::interval_join`) and the
//! filters and projections after it on the joined records.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::batch::Carried;
use super::codec::{Decoded, ValueDecoder};
use super::element::JsonElement;
use super::join::{IntervalJoin, Refused};
use super::project::Key;
use super::Operator;
use crate::engine::metrics::{Metrics, OperatorCounter};
use crate::engine::runtime::topology::{
    downcast, Element, Emitted, InputRecord, KeyedStage, Output, Prepare, SourceChain,
};
use crate::engine::runtime::RuntimeError;
use crate::engine::state::OperatorState;
use crate::engine::time::interval_join::{self, Added, Joined};

/// The uid (keyspace `op-join`) of the job's join.
pub(crate) const JOIN_UID: &str = "join";
/// Its kind in the state layout.
pub(crate) const JOIN_KIND: &str = "interval-join";

/// The source side of a join: one per source subtask.
pub(crate) struct JoinPrefix {
    join: IntervalJoin,
    decoder: ValueDecoder,
    /// The join's counter (the pipeline's first operator), when observed.
    counter: Option<Arc<OperatorCounter>>,
}

impl JoinPrefix {
    /// The prefix of `join`, reading values with `decoder`, counting the records that reach the
    /// join into `counters[0]` when given.
    pub(crate) fn new(
        join: IntervalJoin,
        decoder: ValueDecoder,
        counters: &[Arc<OperatorCounter>],
    ) -> JoinPrefix {
        JoinPrefix {
            join,
            decoder,
            counter: counters.first().cloned(),
        }
    }

    /// What the join makes of a record of `topic`: an element for the keyed stage, nothing
    /// (filtered), or why it is bad; and its event time for the watermark, when it has one.
    fn run(
        &self,
        topic: &str,
        key: Option<&Bytes>,
        raw: &Bytes,
    ) -> (Result<Option<Emitted>, String>, Option<i64>) {
        let Some(side) = self.join.side_of(topic) else {
            let why = format!("a record of topic {topic:?}, which is neither side of the join");
            return (Err(why), None);
        };
        let value = match self.decoder.decode(raw) {
            Decoded::Value(v) => v,
            Decoded::Bad(reason) => return (Err(reason), None),
        };
        let spec = self.join.side(side);
        let time = spec.event_time(&value);
        if let Some(c) = &self.counter {
            c.record_in();
        }
        match spec.admit(&value) {
            Ok((k, t)) => {
                let input = self
                    .join
                    .late_topic
                    .as_ref()
                    .map(|_| (key.map(|k| k.to_vec()), raw.clone()));
                let element = JsonElement {
                    value,
                    input,
                    side: Some(side),
                };
                let keyed = Emitted::Keyed {
                    key: k.into_bytes(),
                    time: t,
                    element: Box::new(element),
                };
                (Ok(Some(keyed)), time)
            }
            Err(Refused::Filtered) => (Ok(None), time),
            Err(Refused::Bad(why)) => (Err(why), time),
        }
    }
}

impl SourceChain for JoinPrefix {
    fn process(&mut self, record: &InputRecord<'_>, out: &mut Vec<Emitted>) -> Option<i64> {
        let Some(raw) = record.value else {
            out.push(Emitted::Bad {
                reason: "a tombstone (the record has no value)".into(),
            });
            return None;
        };
        let (emitted, time) = self.run(record.topic, record.key, raw);
        match emitted {
            Ok(Some(e)) => out.push(e),
            Ok(None) => {}
            Err(reason) => out.push(Emitted::Bad { reason }),
        }
        time
    }

    fn prepare(&mut self, record: &InputRecord<'_>) -> Option<Prepare<'_>> {
        let raw = record.value?;
        let id = self.decoder.unknown_id(raw)?;
        let raw = raw.clone();
        Some(Box::pin(self.decoder.learn(id, raw)))
    }
}

/// The join and the operators after it, in one keyed subtask.
pub(crate) struct JoinStage {
    operator: interval_join::IntervalJoin,
    spec: IntervalJoin,
    after: Vec<Operator>,
    /// Per operator of the job file (the join first), when observed.
    counters: Vec<Arc<OperatorCounter>>,
    metrics: Option<Arc<Metrics>>,
}

impl JoinStage {
    /// The stage of `pipeline` (whose first operator is the join) on `state`, the subtask's
    /// handle restricted to its key groups; restores its watermark and timers.
    ///
    /// # Errors
    /// The pipeline has no join first (a bug), or the store failed.
    pub(crate) fn new(
        pipeline: &[Operator],
        state: OperatorState,
    ) -> Result<JoinStage, RuntimeError> {
        let Some(Operator::Join(spec)) = pipeline.first() else {
            return Err(RuntimeError::Internal("join operator not found".into()));
        };
        let operator =
            interval_join::IntervalJoin::restore(spec.bounds(), spec.allowed_lateness, state)?;
        Ok(JoinStage {
            operator,
            spec: (**spec).clone(),
            after: pipeline[1..].to_vec(),
            counters: Vec::new(),
            metrics: None,
        })
    }

    /// The stage, counting the joined records and those of the operators after it.
    pub(crate) fn observed(mut self, metrics: &Arc<Metrics>, pipeline: &[Operator]) -> JoinStage {
        let counters = metrics.operators(pipeline);
        if counters.len() == pipeline.len() {
            self.counters = counters;
        }
        self.metrics = Some(metrics.clone());
        self
    }

    /// One side's record: its pairs, through the operators after the join; the record itself to
    /// the late topic when it is late.
    fn add(&mut self, key: &[u8], time: i64, e: JsonElement) -> Result<Vec<Output>, RuntimeError> {
        let side = e
            .side
            .ok_or_else(|| RuntimeError::Internal("the join: an element without a side".into()))?;
        let bytes =
            serde_json::to_vec(&e.value).map_err(|e| RuntimeError::Internal(e.to_string()))?;
        let mut joined = Vec::new();
        let added = self.operator.add(side, key, time, &bytes, &mut joined)?;
        let mut out = Vec::new();
        if added == Added::Late {
            let late_topic = self.spec.late_topic.as_ref();
            out.extend(super::element::late(
                self.metrics.as_deref(),
                late_topic,
                e.input,
            ));
        }
        self.finish(joined, &mut out)?;
        Ok(out)
    }

    /// The joined records, through the operators after the join.
    fn finish(&self, joined: Vec<Joined>, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        if joined.is_empty() {
            return Ok(());
        }
        if let Some(c) = self.counters.first() {
            c.records_out(joined.len() as u64);
        }
        let after = self.counters.get(1..).unwrap_or_default();
        for pair in joined {
            let parse = |b: &[u8]| {
                serde_json::from_slice::<Value>(b)
                    .map_err(|e| RuntimeError::Internal(format!("the join's state: {e}")))
            };
            let record = self
                .spec
                .result_record(parse(&pair.left)?, parse(&pair.right)?);
            let key = Carried::Keyed(Key::from_bytes(pair.key));
            let metrics = self.metrics.as_deref();
            super::element::emit_result(&self.after, after, metrics, key, record, out);
        }
        Ok(())
    }
}

impl KeyedStage for JoinStage {
    fn process(
        &mut self,
        key: &[u8],
        time: i64,
        element: Element,
        out: &mut Vec<Output>,
    ) -> Result<(), RuntimeError> {
        let e: JsonElement = downcast(element, "the join")?;
        out.extend(self.add(key, time, e)?);
        Ok(())
    }

    fn advance_to(&mut self, watermark: i64, _out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        self.operator.advance_to(watermark)
    }

    fn state_mut(&mut self) -> &mut OperatorState {
        self.operator.state_mut()
    }

    fn before_snapshot(&mut self) {
        self.operator.before_snapshot();
    }

    fn watermark(&self) -> Option<i64> {
        self.operator.watermark()
    }
}
