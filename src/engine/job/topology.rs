//! The operator chain, split where the parallel runtime splits it: the stateless prefix
//! (filters, projections, key_by) runs chained in each source subtask ([`Prefix`]); the window
//! aggregate and what follows it run in the keyed subtask that owns the record's key group
//! ([`WindowStage`]), its accumulators and timers in that subtask's [`OperatorState`] and its
//! watermark driven by the watermarks the sources send ([`WindowStage::advance_to`]).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::aggregate::{Accumulator, WindowAggregate};
use super::batch::{counted, Carried, Dropped};
use super::codec::{Decoded, SourceFormat, ValueDecoder, ValueEncoder};
pub(crate) use super::element::Input;
use super::element::{emit_result, JsonElement};
use super::join::IntervalJoin;
use super::join_stage::{JoinPrefix, JoinStage, JOIN_KIND, JOIN_UID};
use super::project::Key;
use super::Operator;
use crate::engine::job::spec::Job;
use crate::engine::metrics::{Metrics, OperatorCounter};
use crate::engine::runtime::topology::{
    downcast, Element, Emitted, InputRecord, KeyedLayout, KeyedStage, Output, Prepare, SourceChain,
    Topology,
};
use crate::engine::runtime::RuntimeError;
use crate::engine::state::OperatorState;
use crate::engine::time::window_operator::{Fired, WindowFunction, WindowOperator};

/// The uid (keyspace `op-window`) of a job's first window operator; window k + 1 of a job
/// with several is `window-<k + 1>` ([`window_uid`]).
pub(crate) const WINDOW_UID: &str = "window";

/// The uid of the job's window `k` (0-based): the first keeps the name a job with one window
/// has always had, so its checkpoints stay restorable.
pub(crate) fn window_uid(k: usize) -> String {
    match k {
        0 => WINDOW_UID.to_owned(),
        k => format!("{WINDOW_UID}-{}", k + 1),
    }
}
/// Its kind in the state layout.
pub(crate) const WINDOW_KIND: &str = "window-aggregate";

/// What the stateless prefix made of an input record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Prefixed {
    /// A job without a window: the record goes to the sink.
    Out(Output),
    /// For the window: its key (routes it to a keyed subtask), event time and value, and the
    /// input record as it came when the window has a late topic.
    Keyed {
        key: Key,
        time: i64,
        value: Value,
        input: Option<Input>,
    },
    /// A filter left it out.
    Filtered,
    /// The job cannot process it (not JSON, the key or the event time missing): the reason,
    /// for the job's `errors.tolerance`.
    Bad(String),
}

/// The stateless operators before the window (all of them without one), run in a source
/// subtask.
pub(crate) struct Prefix {
    before: Vec<Operator>,
    window: Option<WindowAggregate>,
    /// How many operators the job has (the counters cover them all).
    operators: usize,
    /// Per operator of the job file (by index), records in and out; empty: not observed.
    counters: Vec<Arc<OperatorCounter>>,
    /// How input values become JSON.
    decoder: ValueDecoder,
}

/// The counters of the operators `from..from + n`, or none when unobserved.
fn counters_of(
    counters: &[Arc<OperatorCounter>],
    from: usize,
    n: usize,
) -> &[Arc<OperatorCounter>] {
    counters.get(from..from + n).unwrap_or_default()
}

impl Prefix {
    /// The prefix of `operators` (up to the window, if any).
    pub(crate) fn new(operators: &[Operator]) -> Prefix {
        let split = operators
            .iter()
            .position(|op| matches!(op, Operator::WindowAggregate(_)));
        let window = split.and_then(|i| match operators.get(i) {
            Some(Operator::WindowAggregate(w)) => Some(w.clone()),
            _ => None,
        });
        Prefix {
            before: operators[..split.unwrap_or(operators.len())].to_vec(),
            window,
            operators: operators.len(),
            counters: Vec::new(),
            decoder: ValueDecoder::json(),
        }
    }

    /// The prefix, reading input values with `decoder`.
    pub(crate) fn decoding(mut self, decoder: ValueDecoder) -> Prefix {
        self.decoder = decoder;
        self
    }

    /// The prefix, counting each operator's records in and out into `counters` (one per
    /// operator of the job file, in order, shared by every subtask; another count leaves it
    /// unobserved). The window's records in are counted here, as they leave for it.
    pub(crate) fn observed(mut self, counters: Vec<Arc<OperatorCounter>>) -> Prefix {
        if counters.len() == self.operators {
            self.counters = counters;
        }
        self
    }

    /// The window the records go to, if the job has one.
    pub(crate) fn window(&self) -> Option<&WindowAggregate> {
        self.window.as_ref()
    }

    /// Runs one input record through the prefix.
    #[cfg(test)]
    pub(crate) fn prefixed(&mut self, key: Option<Vec<u8>>, raw: &Bytes) -> Prefixed {
        self.run(key, raw).0
    }

    /// [`Self::prefixed`], and the input's event time at the window's time field (for the
    /// source's watermark, also when the record is filtered out or bad).
    fn run(&mut self, key: Option<Vec<u8>>, raw: &Bytes) -> (Prefixed, Option<i64>) {
        let value = match self.decoder.decode(raw) {
            Decoded::Value(v) => v,
            Decoded::Bad(reason) => return (Prefixed::Bad(reason), None),
        };
        let time = self.window.as_ref().and_then(|w| w.event_time(&value));
        let input = self
            .window
            .as_ref()
            .and_then(|w| w.late_topic.as_ref())
            .map(|_| (key.clone(), raw.clone()));
        let before = counters_of(&self.counters, 0, self.before.len());
        let (carried, value, changed) =
            match counted(&self.before, before, Carried::Input(key), value) {
                Ok(c) => c,
                Err(Dropped::Filtered) => return (Prefixed::Filtered, time),
                Err(Dropped::NoKey) => return (Prefixed::Bad(self.no_key()), time),
                Err(Dropped::Bad(why)) => return (Prefixed::Bad(why), time),
            };
        let Some(window) = self.window.as_ref() else {
            // Unchanged JSON records go out as they came (bytes and all).
            let value = if changed || !self.decoder.is_json() {
                Bytes::from(value.to_string())
            } else {
                raw.clone()
            };
            let out = Prefixed::Out(Output {
                topic: None,
                key: carried.kafka_key(),
                value,
                headers: Vec::new(),
            });
            return (out, None);
        };
        if let Some(c) = self.counters.get(self.before.len()) {
            c.record_in();
        }
        let Carried::Keyed(key) = carried else {
            let why = "the record has no key for the window (no key_by before it)";
            return (Prefixed::Bad(why.into()), time);
        };
        let Some(time) = window.event_time(&value) else {
            let why = format!(
                "the window's time field {} is missing, or neither an integer (ms since the epoch) nor an RFC 3339 date-time",
                window.time
            );
            return (Prefixed::Bad(why), None);
        };
        let keyed = Prefixed::Keyed {
            key,
            time,
            value,
            input,
        };
        (keyed, Some(time))
    }

    /// Why a record has no key: the `key_by` field it lacks.
    fn no_key(&self) -> String {
        let field = self.before.iter().rev().find_map(|op| match op {
            Operator::KeyBy(k) => Some(k.field.to_string()),
            _ => None,
        });
        format!(
            "the key_by field {} is missing or null",
            field.unwrap_or_default()
        )
    }
}

/// A job file's window aggregate as the window operator computes it: JSON records into an
/// [`Accumulator`], stored as JSON.
struct JsonAggregate(WindowAggregate);

impl WindowFunction for JsonAggregate {
    type Input = Value;
    type Acc = Accumulator;
    fn create(&self) -> Accumulator {
        self.0.aggregate.accumulator()
    }
    fn add(&self, acc: &mut Accumulator, input: &Value) {
        self.0.aggregate.add(acc, input);
    }
    fn merge(&self, acc: &mut Accumulator, other: Accumulator) {
        self.0.aggregate.merge(acc, other);
    }
    fn encode(&self, acc: &Accumulator) -> Result<Vec<u8>, String> {
        serde_json::to_vec(acc).map_err(|e| e.to_string())
    }
    fn decode(&self, bytes: &[u8]) -> Result<Accumulator, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// The window aggregate and the operators after it, in one keyed subtask.
pub(crate) struct WindowStage {
    window: WindowOperator<JsonAggregate>,
    spec: WindowAggregate,
    after: Vec<Operator>,
    /// The window's index among the job's operators.
    at: usize,
    operators: usize,
    /// Late records (counted, not written).
    pub late: u64,
    /// Per operator of the job file, as [`Prefix::observed`]; empty: not observed.
    counters: Vec<Arc<OperatorCounter>>,
    /// Where late records are counted, when observed.
    metrics: Option<Arc<Metrics>>,
}

impl WindowStage {
    /// The stage of `operators` (which must have a window) on `state`, the subtask's handle
    /// restricted to its key groups; restores the subtask's watermark.
    pub(crate) fn new(
        operators: &[Operator],
        state: OperatorState,
    ) -> Result<WindowStage, RuntimeError> {
        let i = operators
            .iter()
            .position(|op| matches!(op, Operator::WindowAggregate(_)));
        let (Some(at), Some(Operator::WindowAggregate(spec))) =
            (i, i.and_then(|i| operators.get(i)))
        else {
            return Err(RuntimeError::Internal("window operator not found".into()));
        };
        let window = WindowOperator::restore(
            JsonAggregate(spec.clone()),
            spec.kind,
            spec.allowed_lateness,
            "the window",
            state,
        )?;
        Ok(WindowStage {
            window,
            spec: spec.clone(),
            after: operators[at + 1..].to_vec(),
            at,
            operators: operators.len(),
            late: 0,
            counters: Vec::new(),
            metrics: None,
        })
    }

    /// The stage, counting the window's results and the records of the operators after it
    /// (as [`Prefix::observed`]; `counters` are those of the operators the stage was made of).
    pub(crate) fn observed(
        mut self,
        metrics: &Arc<Metrics>,
        counters: Vec<Arc<OperatorCounter>>,
    ) -> WindowStage {
        if counters.len() == self.operators {
            self.counters = counters;
        }
        self.metrics = Some(metrics.clone());
        self
    }

    /// Adds one keyed record at event time `t`; returns what goes to the sink: late updates,
    /// and the input record to `window.late_topic` when it is late (`input`: as it came).
    pub(crate) fn add(
        &mut self,
        key: &Key,
        t: i64,
        value: &Value,
        input: Option<Input>,
    ) -> Result<Vec<Output>, RuntimeError> {
        let mut fired = Vec::new();
        let late = self.window.add(key.as_bytes(), t, value, &mut fired)?;
        let mut out = Vec::new();
        if late {
            self.late += 1;
            let late_topic = self.spec.late_topic.as_ref();
            out.extend(super::element::late(
                self.metrics.as_deref(),
                late_topic,
                input,
            ));
        }
        out.extend(self.finish(fired));
        Ok(out)
    }

    /// The inputs' watermark is now `w`: fires the windows it closes.
    pub(crate) fn advance_to(&mut self, w: i64) -> Result<Vec<Output>, RuntimeError> {
        let mut fired = Vec::new();
        self.window.advance_to(w, &mut fired)?;
        Ok(self.finish(fired))
    }

    /// The next chunk of a firing under way (empty: none).
    fn fire_more(&mut self) -> Result<Vec<Output>, RuntimeError> {
        let mut fired = Vec::new();
        self.window.fire_more(&mut fired)?;
        Ok(self.finish(fired))
    }

    /// The result records of the fired windows (a key that is not a JSON value is skipped),
    /// through the operators after the window.
    fn finish(&self, fired: Vec<Fired<Accumulator>>) -> Vec<Output> {
        let results: Vec<(Key, Value)> = fired
            .into_iter()
            .filter_map(|f| {
                let key = Key::from_bytes(f.key);
                let key_value = key.to_value()?;
                let results = self.spec.result_records(&key_value, f.window, &f.acc);
                Some(results.into_iter().map(move |r| (key.clone(), r)))
            })
            .flatten()
            .collect();
        if results.is_empty() {
            return Vec::new();
        }
        if let Some(c) = self.counters.get(self.at) {
            c.records_out(results.len() as u64);
        }
        let after = counters_of(&self.counters, self.at + 1, self.after.len());
        let mut out = Vec::new();
        for (key, result) in results {
            // A filter after the window leaves results out; a key_by after it re-keys the
            // result records, which carry the fields the aggregate writes.
            let metrics = self.metrics.as_deref();
            emit_result(
                &self.after,
                after,
                metrics,
                Carried::Keyed(key),
                result,
                &mut out,
            );
        }
        out
    }
}

/// The job file's operators as the runtime runs them: the stateless prefix in each source
/// subtask, the window aggregate (and what follows it) as the keyed stage.
#[derive(Clone)]
pub(crate) struct JsonTopology {
    pipeline: Vec<Operator>,
    window: Option<WindowAggregate>,
    /// The index in the pipeline of each window (one keyed stage per window).
    windows: Vec<usize>,
    /// The join, when the pipeline starts with one (then it has no window).
    join: Option<IntervalJoin>,
    /// The source's record format, and the registry it reads through.
    source: SourceFormat,
    /// The sink's encoder, unless it writes JSON.
    encoder: Option<Arc<ValueEncoder>>,
}

impl std::fmt::Debug for JsonTopology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonTopology")
            .field("pipeline", &self.pipeline)
            .field("source_json", &matches!(self.source, SourceFormat::Json))
            .field("encodes", &self.encoder.is_some())
            .finish_non_exhaustive()
    }
}

impl JsonTopology {
    /// The operators of `pipeline`, between JSON ends.
    pub(crate) fn new(pipeline: &[Operator]) -> JsonTopology {
        JsonTopology {
            pipeline: pipeline.to_vec(),
            window: Prefix::new(pipeline).window().cloned(),
            windows: pipeline
                .iter()
                .enumerate()
                .filter(|(_, op)| matches!(op, Operator::WindowAggregate(_)))
                .map(|(i, _)| i)
                .collect(),
            join: match pipeline.first() {
                Some(Operator::Join(j)) => Some((**j).clone()),
                _ => None,
            },
            source: SourceFormat::Json,
            encoder: None,
        }
    }

    /// The job file's operators between its ends' record formats.
    ///
    /// # Errors
    /// The `[registry]` settings or the sink's schema file are refused.
    pub(crate) fn for_job(job: &Job) -> Result<JsonTopology, RuntimeError> {
        let registry = if job.registry.is_empty() {
            None
        } else {
            Some(super::codec::registry(&job.registry)?)
        };
        let encoder = ValueEncoder::new(&job.sink, registry.as_ref())?;
        Ok(JsonTopology {
            source: SourceFormat::new(&job.source, registry.as_ref())?,
            encoder: encoder.map(Arc::new),
            ..JsonTopology::new(&job.pipeline)
        })
    }
}

impl Topology for JsonTopology {
    fn keyed(&self) -> Option<KeyedLayout> {
        if let Some(join) = &self.join {
            let kind = match join.window {
                Some(_) => super::window_join::WINDOW_JOIN_KIND,
                None => JOIN_KIND,
            };
            return Some(KeyedLayout {
                uid: JOIN_UID.into(),
                kind: kind.into(),
            });
        }
        self.window.as_ref().map(|_| KeyedLayout {
            uid: WINDOW_UID.into(),
            kind: WINDOW_KIND.into(),
        })
    }

    fn stages(&self) -> Vec<KeyedLayout> {
        if self.join.is_some() {
            return self.keyed().into_iter().collect();
        }
        (0..self.windows.len())
            .map(|k| KeyedLayout {
                uid: window_uid(k),
                kind: WINDOW_KIND.into(),
            })
            .collect()
    }

    fn keyed_stage_at(
        &self,
        k: usize,
        state: OperatorState,
        metrics: &Arc<Metrics>,
    ) -> Result<Box<dyn KeyedStage>, RuntimeError> {
        if k == 0 {
            return self.keyed_stage(state, metrics);
        }
        let ops = self.stage_operators(k).ok_or_else(|| no_stage(k))?;
        let counters = self.counters(metrics, ops.clone());
        let stage = WindowStage::new(&self.pipeline[ops], state)?.observed(metrics, counters);
        Ok(Box::new(stage))
    }

    fn link(&self, k: usize, metrics: &Arc<Metrics>) -> Option<Box<dyn SourceChain>> {
        // From the operator after window k up to window k + 1: a prefix as the sources run.
        let from = self.windows.get(k)? + 1;
        let to = self.windows.get(k + 1)? + 1;
        let counters = self.counters(metrics, from..to);
        Some(Box::new(
            Prefix::new(&self.pipeline[from..to]).observed(counters),
        ))
    }

    fn out_of_orderness(&self) -> Option<i64> {
        if let Some(j) = &self.join {
            return Some(j.out_of_orderness);
        }
        self.window.as_ref().map(|w| w.out_of_orderness)
    }

    fn source_chain(&self, metrics: &Arc<Metrics>) -> Box<dyn SourceChain> {
        if let Some(j) = &self.join {
            let counters = metrics.operators(&self.pipeline);
            let decoder = ValueDecoder::new(&self.source);
            return Box::new(JoinPrefix::new(j.clone(), decoder, &counters));
        }
        let prefix = Prefix::new(&self.pipeline).observed(metrics.operators(&self.pipeline));
        Box::new(prefix.decoding(ValueDecoder::new(&self.source)))
    }

    fn sink_encoder(&self) -> Option<Arc<ValueEncoder>> {
        self.encoder.clone()
    }

    fn keyed_stage(
        &self,
        state: OperatorState,
        metrics: &Arc<Metrics>,
    ) -> Result<Box<dyn KeyedStage>, RuntimeError> {
        if let Some(join) = &self.join {
            if join.window.is_some() {
                let stage = super::window_join::WindowJoinStage::new(&self.pipeline, state)?
                    .observed(metrics, &self.pipeline);
                return Ok(Box::new(stage));
            }
            let stage = JoinStage::new(&self.pipeline, state)?.observed(metrics, &self.pipeline);
            return Ok(Box::new(stage));
        }
        let ops = self.stage_operators(0).ok_or_else(|| no_stage(0))?;
        let counters = self.counters(metrics, ops.clone());
        let stage = WindowStage::new(&self.pipeline[ops], state)?.observed(metrics, counters);
        Ok(Box::new(stage))
    }

    fn encode_element(&self, element: &Element) -> Option<Vec<u8>> {
        let e = element.downcast_ref::<JsonElement>()?;
        Some(e.encode())
    }

    fn decode_element(&self, bytes: &[u8]) -> Result<Element, RuntimeError> {
        let e = JsonElement::decode(bytes).ok_or_else(|| {
            RuntimeError::Unsupported(
                "a repartition record that is not a keyed JSON element: is another job writing this job's repartition topic? Give each job its own source.group.id".into(),
            )
        })?;
        Ok(Box::new(e))
    }
}

impl JsonTopology {
    /// The operators keyed stage `k` runs: window k and, for the last window, what follows
    /// it (else the link to the next stage runs that).
    fn stage_operators(&self, k: usize) -> Option<std::ops::Range<usize>> {
        let at = *self.windows.get(k)?;
        let start = match k {
            0 => 0,
            k => self.windows.get(k - 1)? + 1,
        };
        let end = match self.windows.get(k + 1) {
            Some(_) => at + 1,
            None => self.pipeline.len(),
        };
        Some(start..end)
    }

    /// The counters of the pipeline's operators in `range`.
    fn counters(
        &self,
        metrics: &Arc<Metrics>,
        range: std::ops::Range<usize>,
    ) -> Vec<Arc<OperatorCounter>> {
        metrics
            .operators(&self.pipeline)
            .get(range)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }
}

fn no_stage(k: usize) -> RuntimeError {
    RuntimeError::Internal(format!("the job has no keyed stage {k}"))
}

impl SourceChain for Prefix {
    fn process(&mut self, record: &InputRecord<'_>, out: &mut Vec<Emitted>) -> Option<i64> {
        let Some(raw) = record.value else {
            out.push(Emitted::Bad {
                reason: "a tombstone (the record has no value)".into(),
            });
            return None;
        };
        let (prefixed, time) = self.run(record.key.map(|k| k.to_vec()), raw);
        match prefixed {
            Prefixed::Out(o) => out.push(Emitted::Out(o)),
            Prefixed::Keyed {
                key,
                time,
                value,
                input,
            } => out.push(Emitted::Keyed {
                key: key.into_bytes(),
                time,
                element: Box::new(JsonElement {
                    value,
                    input,
                    side: None,
                }),
            }),
            Prefixed::Filtered => {}
            Prefixed::Bad(reason) => out.push(Emitted::Bad { reason }),
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

impl KeyedStage for WindowStage {
    fn process(
        &mut self,
        key: &[u8],
        time: i64,
        element: Element,
        out: &mut Vec<Output>,
    ) -> Result<(), RuntimeError> {
        let e: JsonElement = downcast(element, "the window")?;
        let key = Key::from_bytes(key.to_vec());
        out.extend(self.add(&key, time, &e.value, e.input)?);
        Ok(())
    }

    fn advance_to(&mut self, watermark: i64, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        out.extend(WindowStage::advance_to(self, watermark)?);
        Ok(())
    }

    fn fire_more(&mut self, out: &mut Vec<Output>) -> Result<bool, RuntimeError> {
        out.extend(WindowStage::fire_more(self)?);
        Ok(self.window.firing())
    }

    fn firing(&self) -> bool {
        self.window.firing()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::metrics::Metrics;
    use crate::engine::time::interval_join::Side;
    use crate::engine::time::window_operator::FIRE_CHUNK;

    #[test]
    fn a_keyed_element_survives_the_repartition_topic_and_garbage_is_refused() {
        let t = JsonTopology::new(&[]);
        for (input, side) in [
            (None, None),
            (Some((None, Bytes::from_static(b"{\"a\":1}"))), None),
            (
                Some((Some(b"7".to_vec()), Bytes::from_static(b"raw"))),
                None,
            ),
            (None, Some(Side::Left)),
            (
                Some((Some(b"7".to_vec()), Bytes::from_static(b"raw"))),
                Some(Side::Right),
            ),
        ] {
            let e = JsonElement {
                value: serde_json::json!({"driver_id": 7, "x": [1.5, "y"]}),
                input: input.clone(),
                side,
            };
            let bytes = t.encode_element(&(Box::new(e) as Element)).unwrap();
            let back: JsonElement = downcast(t.decode_element(&bytes).unwrap(), "t").unwrap();
            assert_eq!(
                back.value,
                serde_json::json!({"driver_id": 7, "x": [1.5, "y"]})
            );
            assert_eq!((back.input, back.side), (input, side));
        }
        for garbage in [
            &b""[..],
            b"\x00",
            b"\x0c\x00\x00\x00\x02{}",
            b"\x10\x00\x00\x00\x02{}",
            b"\x08\x00\x00\x00\x01{",
            b"\x00\x00\x00\x00\x02{}x",
        ] {
            assert!(t.decode_element(garbage).is_err(), "{garbage:?}");
        }
        assert!(t.encode_element(&(Box::new(5u8) as Element)).is_none());
    }

    #[test]
    fn each_operator_counts_what_reached_it_and_what_it_let_through() {
        let text = "name = \"c\"\n[source]\nbrokers = \"b:9092\"\ntopics = [\"i\"]\n\
            [[pipeline]]\nfilter = { field = \"v\", op = \">\", value = 1 }\n\
            [[pipeline]]\nkey_by = \"k\"\n\
            [[pipeline]]\nproject.keep = [\"k\"]\n\
            [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n";
        let job = crate::engine::job::Job::parse("t.toml", text).expect("job");
        let metrics = Metrics::new();
        let mut p = Prefix::new(&job.pipeline).observed(metrics.operators(&job.pipeline));
        // (value, through): filtered out, dropped at key_by (no k), through.
        let cases = [
            (r#"{"v":0,"k":1}"#, false),
            (r#"{"v":5}"#, false),
            (r#"{"v":5,"k":2}"#, true),
        ];
        for (value, want) in cases {
            let out = p.prefixed(None, &Bytes::from(value));
            assert_eq!(matches!(out, Prefixed::Out(_)), want, "{value}");
        }
        let counts: Vec<(u64, u64)> = metrics
            .snapshot_at(0)
            .operators
            .iter()
            .map(|o| (o.records_in, o.records_out))
            .collect();
        assert_eq!(counts, [(3, 2), (2, 1), (1, 1)]);
    }

    /// What the prefix cannot process is reported with its reason (for errors.tolerance),
    /// never dropped unseen; what a filter leaves out is not.
    #[test]
    fn records_the_prefix_cannot_process_are_bad_with_a_reason() {
        let text = "name = \"c\"\n[source]\nbrokers = \"b:9092\"\ntopics = [\"i\"]\n\
            [[pipeline]]\nfilter = { field = \"v\", op = \">\", value = 1 }\n\
            [[pipeline]]\nkey_by = \"driver.id\"\n\
            [[pipeline]]\nwindow.tumbling = \"1s\"\nwindow.time = \"t\"\nwindow.out_of_orderness = \"1s\"\n\
            [[pipeline]]\naggregate.n = \"count\"\n\
            [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n";
        let job = crate::engine::job::Job::parse("t.toml", text).expect("job");
        let mut p = Prefix::new(&job.pipeline);
        #[rustfmt::skip]
        let cases: [(Option<&str>, Option<&str>); 7] = [
            (Some(r#"{"v":5,"driver":{"id":1},"t":7}"#), None),
            (Some(r#"{"v":5,"driver":{"id":1},"t":"2024-01-02T03:04:05.123Z"}"#), None),
            (Some(r#"{"v":0,"driver":{"id":1},"t":7}"#), None),
            (Some("not json"),                           Some("the value is not JSON (expected ident at line 1 column 2)")),
            (None,                                       Some("a tombstone (the record has no value)")),
            (Some(r#"{"v":5,"t":7}"#),                   Some("the key_by field driver.id is missing or null")),
            (Some(r#"{"v":5,"driver":{"id":1},"t":"x"}"#), Some("the window's time field t is missing, or neither an integer (ms since the epoch) nor an RFC 3339 date-time")),
        ];
        for (value, want) in cases {
            let bytes = value.map(|v| Bytes::from(v.to_owned()));
            let record = InputRecord {
                topic: "i",
                partition: 0,
                offset: 0,
                timestamp: 0,
                key: None,
                value: bytes.as_ref(),
            };
            let mut out = Vec::new();
            p.process(&record, &mut out);
            let bad: Vec<&str> = out
                .iter()
                .filter_map(|e| match e {
                    Emitted::Bad { reason } => Some(reason.as_str()),
                    _ => None,
                })
                .collect();
            match want {
                None => assert!(bad.is_empty(), "{value:?}: {bad:?}"),
                Some(w) => {
                    assert_eq!(bad.len(), 1, "{value:?}");
                    assert!(bad[0].starts_with(w), "{value:?}: {}", bad[0]);
                    assert_eq!(out.len(), 1, "nothing else for a bad record");
                }
            }
        }
    }

    #[test]
    fn the_window_counts_the_records_it_took_and_the_results_it_fired() {
        use crate::engine::state::{Layout, OperatorLayout, RestoreFrom, StateStore, StoreOptions};
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("jobs")
            .join("rides-per-driver-hourly.toml");
        let job = crate::engine::job::Job::load(&file).expect("the shipped job (b)");
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout {
            key_groups: 4,
            operators: vec![OperatorLayout::new(WINDOW_UID, WINDOW_KIND)],
            sink_prefix: None,
            sink_ids: 0,
        };
        let (store, _) = StateStore::open(
            dir.path(),
            layout,
            StoreOptions::default(),
            RestoreFrom::Fresh,
        )
        .expect("state");
        let state = store.operator(WINDOW_UID).expect("window state");
        let metrics = Arc::new(Metrics::new());
        // The source subtask's prefix and the keyed subtask's window, sharing the counters.
        let mut p = Prefix::new(&job.pipeline).observed(metrics.operators(&job.pipeline));
        let mut stage = WindowStage::new(&job.pipeline, state)
            .expect("stage")
            .observed(&metrics, metrics.operators(&job.pipeline));
        let hour = 3_600_000;
        // A start (filtered out), an end in hour 0, an end in hour 2 (the watermark it brings,
        // 2 h − 60 s, fires hour 0).
        let ride = |is_start: bool, t: i64| {
            let v = format!(
                r#"{{"is_start":{is_start},"driver_id":7,"passengers":2,"event_time":{t}}}"#
            );
            Bytes::from(v)
        };
        let mut outputs = 0;
        for (is_start, t) in [(true, 10), (false, 20), (false, 2 * hour)] {
            if let Prefixed::Keyed {
                key, time, value, ..
            } = p.prefixed(None, &ride(is_start, t))
            {
                outputs += stage.add(&key, time, &value, None).expect("process").len();
                outputs += stage.advance_to(time - 60_000).expect("advance").len();
            }
        }
        assert_eq!(outputs, 1);
        let snapshot = metrics.snapshot_at(0);
        let counts: Vec<(&str, u64, u64)> = snapshot
            .operators
            .iter()
            .map(|o| (o.kind.as_str(), o.records_in, o.records_out))
            .collect();
        assert_eq!(
            counts,
            [
                ("filter", 3, 2),
                ("key_by", 2, 2),
                ("window_aggregate", 2, 1)
            ]
        );
    }

    use crate::engine::job::Job;
    use crate::engine::state::{Layout, OperatorLayout, RestoreFrom, StateStore, StoreOptions};

    /// A counting hourly window with 1 s out-of-orderness, `late_topic` as given: the source
    /// subtask's prefix and one keyed subtask's stage over all key groups.
    fn stages(dir: &std::path::Path, late: &str) -> (StateStore, Prefix, WindowStage) {
        let job = window_job(late);
        let layout = Layout {
            key_groups: 4,
            operators: vec![OperatorLayout::new(WINDOW_UID, WINDOW_KIND)],
            sink_prefix: None,
            sink_ids: 0,
        };
        let (store, _) =
            StateStore::open(dir, layout, StoreOptions::default(), RestoreFrom::Fresh).unwrap();
        let state = store.operator(WINDOW_UID).unwrap();
        let stage = WindowStage::new(&job.pipeline, state).unwrap();
        (store, Prefix::new(&job.pipeline), stage)
    }

    /// The job of [`stages`].
    fn window_job(late: &str) -> Job {
        Job::parse(
            "l.toml",
            &format!(
                "name = \"l\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"in\"]\n\
                 [[pipeline]]\nkey_by = \"k\"\n\
                 [[pipeline]]\nwindow = {{ tumbling = \"1h\", time = \"t\", out_of_orderness = \"1s\" {late} }}\n\
                 [[pipeline]]\naggregate.n = \"count\"\n\
                 [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n"
            ),
        )
        .unwrap()
    }

    /// The stage of key groups `groups` on what `store` holds.
    fn stage_of(store: &StateStore, groups: std::ops::Range<u16>) -> WindowStage {
        let state = store.operator(WINDOW_UID).unwrap().for_key_groups(groups);
        WindowStage::new(&window_job("").pipeline, state).unwrap()
    }

    /// Checkpoint `n` of `stages` (their deltas as one).
    fn checkpoint(store: &mut StateStore, stages: &mut [&mut WindowStage], n: u64) {
        let mut deltas = Vec::new();
        for s in stages.iter_mut() {
            deltas.push(KeyedStage::snapshot(*s, n).unwrap());
        }
        let merged = crate::engine::state::FrozenDelta::merge(deltas);
        store.persist(n, &merged, Vec::new(), Vec::new()).unwrap();
        for s in stages.iter_mut() {
            s.state_mut().complete(n).unwrap();
        }
    }

    /// A key (as the prefix makes it) in key group range `groups` of 4.
    fn key_in(p: &mut Prefix, groups: std::ops::Range<u16>) -> String {
        (0..100)
            .map(|i| format!("k{i}"))
            .find(|k| {
                let raw = Bytes::from(format!("{{\"k\": \"{k}\", \"t\": 0}}"));
                let Prefixed::Keyed { key, .. } = p.prefixed(Some(k.as_bytes().to_vec()), &raw)
                else {
                    return false;
                };
                groups.contains(&crate::engine::state::key_group(key.as_bytes(), 4))
            })
            .unwrap()
    }

    /// One record through the prefix and the stage, the watermark left where it is.
    fn add(p: &mut Prefix, stage: &mut WindowStage, key: &str, t: i64) -> Vec<Output> {
        let raw = Bytes::from(format!("{{\"k\": \"{key}\", \"t\": {t}}}"));
        let Prefixed::Keyed {
            key, time, value, ..
        } = p.prefixed(Some(key.as_bytes().to_vec()), &raw)
        else {
            panic!("not keyed");
        };
        stage.add(&key, time, &value, None).unwrap()
    }

    /// A rescale from 2 subtasks to 1 and back: each key group keeps the watermark its windows
    /// fired at. Before, the restore took the smallest watermark stored in the range for every
    /// key group (and a subtask whose range held none started with none), so a record late for
    /// the subtask that had fired and purged its window was admitted after the restore and
    /// fired a second, partial result.
    #[test]
    fn after_a_rescale_each_key_group_keeps_the_watermark_its_windows_fired_at() {
        let h = 3_600_000;
        let dir = tempfile::tempdir().unwrap();
        let (mut store, mut p, _) = stages(dir.path(), "");
        let (lo_key, hi_key) = (key_in(&mut p, 0..2), key_in(&mut p, 2..4));
        let (mut lo, mut hi) = (stage_of(&store, 0..2), stage_of(&store, 2..4));
        // The high subtask fires and purges hour 0; the low one is still in it.
        assert!(feed(&mut p, &mut hi, &hi_key, 10).is_empty());
        assert_eq!(feed(&mut p, &mut hi, &hi_key, 2 * h).len(), 1);
        assert!(feed(&mut p, &mut lo, &lo_key, 10).is_empty());
        checkpoint(&mut store, &mut [&mut lo, &mut hi], 1);

        // One subtask for all four key groups: it starts at the low watermark...
        let mut all = stage_of(&store, 0..4);
        assert_eq!(KeyedStage::watermark(&all), Some(10 - 1_000));
        // ...but hour 0 of a high key group is closed: late, not a second result.
        assert!(add(&mut p, &mut all, &hi_key, 20).is_empty());
        assert_eq!(all.late, 1, "a record of a purged window was admitted");
        // Hour 0 of a low key group is open: on time.
        assert!(add(&mut p, &mut all, &lo_key, 30).is_empty());
        assert_eq!(all.late, 1);
        let fired = all.advance_to(2 * h - 1_000).unwrap();
        assert_eq!(fired.len(), 1, "only the low key's hour 0 fires: {fired:?}");
        checkpoint(&mut store, &mut [&mut all], 2);

        // Back to two: the high subtask's range holds the watermark too.
        let mut hi = stage_of(&store, 2..4);
        assert_eq!(KeyedStage::watermark(&hi), Some(2 * h - 1_000));
        assert!(add(&mut p, &mut hi, &hi_key, 40).is_empty());
        assert_eq!(hi.late, 1);
    }

    /// One record through the prefix and the stage, the watermark following it (1 s behind).
    fn feed(p: &mut Prefix, stage: &mut WindowStage, key: &str, t: i64) -> Vec<Output> {
        let raw = Bytes::from(format!("{{\"k\": \"{key}\", \"t\": {t}}}"));
        let Prefixed::Keyed {
            key,
            time,
            value,
            input,
        } = p.prefixed(Some(key.as_bytes().to_vec()), &raw)
        else {
            panic!("not keyed");
        };
        let mut out = stage.add(&key, time, &value, input).unwrap();
        out.extend(stage.advance_to(time - 1_000).unwrap());
        out
    }

    #[test]
    fn a_late_record_goes_to_the_late_topic_as_it_came_and_only_then() {
        let h = 3_600_000;
        for (late_topic, want_late) in [(", late_topic = \"side\"", true), ("", false)] {
            let dir = tempfile::tempdir().unwrap();
            let (_store, mut p, mut s) = stages(dir.path(), late_topic);
            assert!(feed(&mut p, &mut s, "a", 10).is_empty());
            // Watermark 2h - 1 s: the first hour fires (one result, to the sink's topic).
            let fired = feed(&mut p, &mut s, "a", 2 * h);
            assert_eq!(fired.len(), 1);
            assert_eq!(fired[0].topic, None);
            // Inside the out-of-orderness of the second hour: on time, no output.
            assert!(feed(&mut p, &mut s, "b", 2 * h - 500).is_empty());
            // The first hour has fired and allowed lateness is 0: late.
            let late = feed(&mut p, &mut s, "b", 20);
            assert_eq!(s.late, 1);
            let want: Vec<Output> = match want_late {
                true => vec![Output {
                    topic: Some("side".into()),
                    key: Some(b"b".to_vec()),
                    value: Bytes::from("{\"k\": \"b\", \"t\": 20}"),
                    headers: Vec::new(),
                }],
                false => Vec::new(),
            };
            assert_eq!(late, want, "late_topic {late_topic:?}");
        }
    }

    /// A watermark that closes a window for many keys fires it in chunks of about
    /// FIRE_CHUNK results (a key group at a time), not in one Vec of all of them; every key's
    /// window fires exactly once across the chunks.
    #[test]
    fn a_watermark_closing_many_windows_fires_them_in_bounded_chunks() {
        let h = 3_600_000;
        let keys = 3 * FIRE_CHUNK;
        let dir = tempfile::tempdir().unwrap();
        let (_store, mut p, mut s) = stages(dir.path(), "");
        for i in 0..keys {
            assert!(feed(&mut p, &mut s, &format!("k{i}"), 10).is_empty());
        }
        // The watermark passes the first hour: the first chunk only.
        let first = feed(&mut p, &mut s, "late-comer", 2 * h);
        assert!(
            !first.is_empty() && first.len() < keys,
            "first chunk {} of {keys}",
            first.len()
        );
        assert!(KeyedStage::firing(&s));
        let mut all = first;
        let mut chunks = 1;
        while KeyedStage::firing(&s) {
            let mut out = Vec::new();
            KeyedStage::fire_more(&mut s, &mut out).unwrap();
            assert!(out.len() < keys, "a chunk of {}", out.len());
            all.extend(out);
            chunks += 1;
        }
        assert!(chunks >= 2, "{chunks} chunks");
        let fired: std::collections::BTreeSet<String> = all
            .iter()
            .map(|o| {
                let v: Value = serde_json::from_slice(&o.value).unwrap();
                v["k"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(all.len(), keys, "each window fired once");
        assert_eq!(fired.len(), keys);
    }
}
