//! A typed job as the runtime runs it: [`TypedTopology`] implements the runtime's
//! `Topology` seam with the closures the streams composed.

use std::sync::Arc;

use super::chain::Counters;
use crate::engine::metrics::{Metrics, OperatorCounter};
use crate::engine::runtime::topology::{
    Emitted, InputRecord, KeyedLayout, KeyedStage, Prepare, SourceChain, Topology,
};
use crate::engine::runtime::RuntimeError;
use crate::engine::state::OperatorState;

/// The chain of a source subtask, its element type erased: an input record in, what goes to
/// the sink or the exchange out; returns the record's event time.
pub(crate) type ErasedSource =
    Arc<dyn Fn(&InputRecord<'_>, &Counters, &mut Vec<Emitted>) -> Option<i64> + Send + Sync>;

/// The source deserializer's [`Deserializer::prepare`](super::Deserializer::prepare), its
/// element type erased.
pub(crate) type ErasedPrefetch =
    Arc<dyn Fn(&InputRecord<'_>) -> Option<super::source::Prefetch> + Send + Sync>;

/// Makes a keyed subtask's stage on its state, with the job's counters and the stage's uid.
pub(crate) type StageFactory = Arc<
    dyn Fn(
            OperatorState,
            &Arc<Metrics>,
            Vec<Arc<OperatorCounter>>,
            &str,
        ) -> Result<Box<dyn KeyedStage>, RuntimeError>
        + Send
        + Sync,
>;

/// The keyed stage of a typed job.
pub(crate) struct Keyed {
    pub(crate) uid: String,
    /// The stage's kind in the state layout: `process`, or the window's sizes and lateness,
    /// so a checkpoint of another kind of stage is refused.
    pub(crate) kind: String,
    pub(crate) stage: StageFactory,
}

/// A typed job's operators (module docs).
pub(crate) struct TypedTopology {
    pub(crate) source: ErasedSource,
    pub(crate) prefetch: ErasedPrefetch,
    pub(crate) keyed: Option<Keyed>,
    /// Each operator's kind, by index: the metrics' counters.
    pub(crate) kinds: Vec<&'static str>,
    pub(crate) out_of_orderness: Option<i64>,
}

impl std::fmt::Debug for TypedTopology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedTopology")
            .field("operators", &self.kinds)
            .field("keyed", &self.keyed.as_ref().map(|k| (&k.uid, &k.kind)))
            .field("out_of_orderness", &self.out_of_orderness)
            .finish()
    }
}

/// A source subtask's instance of the chain.
struct TypedChain {
    source: ErasedSource,
    prefetch: ErasedPrefetch,
    counters: Vec<Arc<OperatorCounter>>,
}

impl SourceChain for TypedChain {
    fn process(&mut self, record: &InputRecord<'_>, out: &mut Vec<Emitted>) -> Option<i64> {
        (self.source)(record, &self.counters, out)
    }

    fn prepare(&mut self, record: &InputRecord<'_>) -> Option<Prepare<'_>> {
        (self.prefetch)(record).map(|p| -> Prepare<'_> { p })
    }
}

impl Topology for TypedTopology {
    fn keyed(&self) -> Option<KeyedLayout> {
        self.keyed.as_ref().map(|k| KeyedLayout {
            uid: k.uid.clone(),
            kind: k.kind.clone(),
        })
    }

    fn out_of_orderness(&self) -> Option<i64> {
        self.out_of_orderness
    }

    fn source_chain(&self, metrics: &Arc<Metrics>) -> Box<dyn SourceChain> {
        Box::new(TypedChain {
            source: self.source.clone(),
            prefetch: self.prefetch.clone(),
            counters: metrics.operators_of_kinds(&self.kinds),
        })
    }

    fn keyed_stage(
        &self,
        state: OperatorState,
        metrics: &Arc<Metrics>,
    ) -> Result<Box<dyn KeyedStage>, RuntimeError> {
        let Some(k) = &self.keyed else {
            return Err(RuntimeError::Internal(
                "a keyed stage was asked of a typed job without a key_by".into(),
            ));
        };
        (k.stage)(
            state,
            metrics,
            metrics.operators_of_kinds(&self.kinds),
            &k.uid,
        )
    }
}
