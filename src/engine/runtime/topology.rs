//! The seam between the runtime and what a job computes: the runtime moves records, barriers
//! and watermarks between subtasks and owns checkpoints, positions and sinks; a [`Topology`]
//! says what happens to a record on the way. Two implement it: the job file's built-in
//! operators (`job::topology::JsonTopology`) and the typed Rust builder
//! ([`crate::engine::dataflow`]).
//!
//! A job is:
//! - a [`SourceChain`], run chained in each source subtask: one input record in, any number
//!   of outputs for the sink ([`Emitted::Out`]) or keyed elements for the exchange
//!   ([`Emitted::Keyed`]), plus the record's event time, which drives the source's watermark;
//! - with a key exchange, a [`KeyedStage`], run in the keyed subtask that owns the element's
//!   key group, on that subtask's slice of one operator's state ([`KeyedLayout`]): elements
//!   and watermarks in, outputs for the sink out; its state is snapshotted at each aligned
//!   barrier;
//! - with several key exchanges (a job file's window after a window: [`Topology::stages`]),
//!   a keyed stage per exchange; the outputs of stage k that go to the sink's own topic
//!   (`Output::topic` is `None`) pass through a link ([`Topology::link`]), a source chain
//!   that makes them stage k + 1's keyed elements; stage k's watermark, once a firing is
//!   written, is stage k + 1's input watermark. Other outputs (late records for a late
//!   topic, dead letters) pass on as they are to the last stage's sink.
//!
//! Elements cross the exchange in process, type-erased ([`Element`]): the stage that made
//! them and the stage that takes them come from the same topology, so the downcast cannot
//! miss unless the topology has a bug (reported as `RuntimeError::Internal`).

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use bytes::Bytes;

use super::RuntimeError;
use crate::engine::job::Job;
use crate::engine::metrics::Metrics;
use crate::engine::state::{FrozenDelta, Layout, OperatorLayout, OperatorState, StateError};

/// A record on its way to the sink: its topic (`None`: the sink's), Kafka key and value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Output {
    pub topic: Option<String>,
    pub key: Option<Vec<u8>>,
    pub value: Bytes,
    /// Record headers (a dead-letter record's reasons; empty otherwise).
    pub headers: Vec<crate::client::Header>,
}

impl Output {
    /// The Kafka record of this output: to its own topic (a late topic) or the sink's.
    pub(crate) fn into_record(self, sink_topic: &str) -> crate::client::ProducerRecord {
        let topic = self.topic.unwrap_or_else(|| sink_topic.to_owned());
        let mut r = crate::client::ProducerRecord::new(topic, self.value);
        r.key = self.key.map(Into::into);
        r.headers = self.headers;
        r
    }
}

/// A keyed element on its way from a source subtask to a keyed subtask.
pub(crate) type Element = Box<dyn Any + Send>;

/// An input record as the source's read_committed consumer returned it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InputRecord<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp (ms since the epoch; create or log-append time).
    pub timestamp: i64,
    pub key: Option<&'a Bytes>,
    /// `None`: a tombstone.
    pub value: Option<&'a Bytes>,
}

/// What a source chain made of an input record.
pub(crate) enum Emitted {
    /// The record cannot be processed (not in the source's format, a tombstone, a field the
    /// job needs missing): the job's `errors.tolerance` decides (`runtime::bad_record`).
    Bad {
        /// Why, in one line: what is wrong with the record.
        reason: String,
    },
    /// To the sink (a job without a key exchange).
    Out(Output),
    /// To the key exchange: the key's canonical bytes (they pick the key group), the event
    /// time, and the element for the keyed stage.
    Keyed {
        key: Vec<u8>,
        time: i64,
        element: Element,
    },
}

/// The operators chained in a source subtask, one instance per subtask.
pub(crate) trait SourceChain: Send {
    /// Runs one input record, pushing what it makes into `out`; returns the record's event
    /// time when the job has a watermark strategy and the record has one, also when the
    /// record is filtered out (a source's watermark sees its records before any operator).
    fn process(&mut self, record: &InputRecord<'_>, out: &mut Vec<Emitted>) -> Option<i64>;

    /// What must be awaited before `record` goes through [`SourceChain::process`] (a writer
    /// schema fetched from the registry), if anything; the runtime awaits it first.
    fn prepare(&mut self, record: &InputRecord<'_>) -> Option<Prepare<'_>> {
        let _ = record;
        None
    }
}

/// The work [`SourceChain::prepare`] asks the runtime to await.
pub(crate) type Prepare<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), RuntimeError>> + Send + 'a>>;

/// The operators after the key exchange, one instance per keyed subtask, with their state.
pub(crate) trait KeyedStage: Send {
    /// One keyed element at event time `time`; pushes what goes to the sink into `out`.
    ///
    /// # Errors
    /// The state store failed, or the element is not of the stage's type (a bug).
    fn process(
        &mut self,
        key: &[u8],
        time: i64,
        element: Element,
        out: &mut Vec<Output>,
    ) -> Result<(), RuntimeError>;

    /// The inputs' watermark is now `watermark` (never back): fires what it makes due.
    ///
    /// # Errors
    /// The state store failed.
    fn advance_to(&mut self, watermark: i64, out: &mut Vec<Output>) -> Result<(), RuntimeError>;

    /// Whether [`KeyedStage::advance_to`] left output to fire: then the subtask writes what
    /// it got to the sink and calls [`KeyedStage::fire_more`] until this is false, so a
    /// watermark that fires many results goes out in bounded chunks.
    fn firing(&self) -> bool {
        false
    }

    /// The next chunk of a firing under way; returns [`KeyedStage::firing`] after it.
    ///
    /// # Errors
    /// The state store failed.
    fn fire_more(&mut self, out: &mut Vec<Output>) -> Result<bool, RuntimeError> {
        let _ = out;
        Ok(false)
    }

    /// When the stage's earliest processing-time timer is due (ms since the epoch), if it
    /// has one: the keyed subtask calls [`KeyedStage::on_processing_time`] once the wall clock
    /// reaches it.
    fn next_processing_timer(&self) -> Option<i64> {
        None
    }

    /// The wall clock is `now` (ms since the epoch): fires the processing-time timers due.
    ///
    /// # Errors
    /// The state store failed, or a user function did.
    fn on_processing_time(&mut self, now: i64, out: &mut Vec<Output>) -> Result<(), RuntimeError> {
        let _ = (now, out);
        Ok(())
    }

    /// The stage's state, for snapshots.
    fn state_mut(&mut self) -> &mut OperatorState;

    /// Writes what the stage keeps in memory but a checkpoint must hold (its watermark per key
    /// group); [`KeyedStage::snapshot`] calls it.
    fn before_snapshot(&mut self) {}

    /// Freezes the stage's state changes as checkpoint `n` (what every snapshot goes through).
    ///
    /// # Errors
    /// A checkpoint is in flight already.
    fn snapshot(&mut self, n: u64) -> Result<FrozenDelta, StateError> {
        self.before_snapshot();
        self.state_mut().snapshot(n)
    }

    /// The stage's watermark, for logs.
    fn watermark(&self) -> Option<i64>;
}

/// The keyed stage's operator in the state layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyedLayout {
    /// Stable id; names the keyspace `op-<uid>`.
    pub uid: String,
    /// What the stage is: its state format depends on it, and a checkpoint of another kind
    /// is refused.
    pub kind: String,
}

/// What a job computes (module docs).
pub(crate) trait Topology: Send + Sync + Debug {
    /// The keyed stage's layout, when the job has a key exchange (the first one's, when it
    /// has several).
    fn keyed(&self) -> Option<KeyedLayout>;

    /// Every keyed stage's layout, in order (empty: no key exchange).
    fn stages(&self) -> Vec<KeyedLayout> {
        self.keyed().into_iter().collect()
    }

    /// Keyed stage `k`'s instance on `state` (restricted to the subtask's key groups).
    ///
    /// # Errors
    /// As [`Topology::keyed_stage`], or the topology has no stage `k`.
    fn keyed_stage_at(
        &self,
        k: usize,
        state: OperatorState,
        metrics: &Arc<Metrics>,
    ) -> Result<Box<dyn KeyedStage>, RuntimeError> {
        match k {
            0 => self.keyed_stage(state, metrics),
            _ => Err(RuntimeError::Internal(format!(
                "the topology has no keyed stage {k}"
            ))),
        }
    }

    /// The chain from keyed stage `k`'s outputs to stage `k + 1`'s elements (each output's
    /// value is the chain's input record's value), when there is a stage `k + 1`.
    fn link(&self, k: usize, metrics: &Arc<Metrics>) -> Option<Box<dyn SourceChain>> {
        let _ = (k, metrics);
        None
    }

    /// The sources' bounded out-of-orderness (ms), when the job uses event time.
    fn out_of_orderness(&self) -> Option<i64>;

    /// A source subtask's chain; it counts its operators' records into `metrics`.
    fn source_chain(&self, metrics: &Arc<Metrics>) -> Box<dyn SourceChain>;

    /// A keyed subtask's stage on `state` (restricted to the subtask's key groups).
    ///
    /// # Errors
    /// The restored state cannot be read, or the topology has no keyed stage.
    fn keyed_stage(
        &self,
        state: OperatorState,
        metrics: &Arc<Metrics>,
    ) -> Result<Box<dyn KeyedStage>, RuntimeError>;

    /// How the sink writes the outputs for its own topic, when not as they are (JSON).
    fn sink_encoder(&self) -> Option<Arc<crate::engine::job::codec::ValueEncoder>> {
        None
    }

    /// The element's bytes, for a key exchange through a repartition topic (a job run by
    /// several processes, `engine::cluster`); `None` when the topology's elements cannot
    /// leave the process.
    fn encode_element(&self, element: &Element) -> Option<Vec<u8>> {
        let _ = element;
        None
    }

    /// The element [`Topology::encode_element`] wrote.
    ///
    /// # Errors
    /// The bytes are not an element of this topology (another job wrote the repartition
    /// topic), or the topology cannot decode elements.
    fn decode_element(&self, bytes: &[u8]) -> Result<Element, RuntimeError> {
        let _ = bytes;
        Err(RuntimeError::Unsupported(
            "this job's elements cannot cross processes: run it with mode = \"local\"".into(),
        ))
    }
}

/// The element a keyed stage expects, or an internal error naming the stage.
///
/// # Errors
/// The element is of another type: a bug in the topology that made it.
pub(crate) fn downcast<T: 'static>(element: Element, stage: &str) -> Result<T, RuntimeError> {
    element.downcast::<T>().map(|b| *b).map_err(|_| {
        RuntimeError::Internal(format!(
            "{stage}: an element of another type crossed the key exchange"
        ))
    })
}

/// Transactional ids per sink task: the open, the prepared and the just-committed one.
pub(crate) const POOL_SIZE: usize = 3;

/// What a checkpoint of this job depends on, as the state store checks it.
pub(crate) fn state_layout(job: &Job, topology: &dyn Topology) -> Layout {
    let operators = topology
        .stages()
        .into_iter()
        .map(|k| OperatorLayout::new(k.uid, k.kind))
        .collect();
    Layout {
        key_groups: u16::try_from(job.settings.key_groups).unwrap_or(u16::MAX),
        operators,
        sink_prefix: job.sink.transactional_id_prefix.clone(),
        sink_ids: u32::try_from(POOL_SIZE).unwrap_or(u32::MAX) * job.settings.parallelism,
    }
}
