//! Typed jobs: a Rust builder in the vocabulary of Flink's DataStream API, run by the same
//! parallel, checkpointed, exactly-once runtime as job files (docs/design/typed-jobs.md).
//!
//! ```no_run
//! use std::time::Duration;
//! use onceflow::engine::dataflow::{
//!     AggregateFunction, Json, JobBuilder, KafkaSink, TumblingEventTimeWindows, Window,
//! };
//! use serde::Deserialize;
//!
//! /// A ride event, as JSON in the topic.
//! #[derive(Deserialize)]
//! struct Ride {
//!     driver_id: u64,
//!     is_start: bool,
//!     event_time: i64,
//! }
//!
//! struct CountRides;
//! impl AggregateFunction<Ride, u64, u64> for CountRides {
//!     fn create_accumulator(&self) -> u64 { 0 }
//!     fn add(&self, _ride: &Ride, acc: &mut u64) { *acc += 1 }
//!     fn merge(&self, a: u64, b: u64) -> u64 { a + b }
//!     fn get_result(&self, acc: &u64) -> u64 { *acc }
//! }
//!
//! # fn main() -> Result<(), onceflow::engine::dataflow::BuildError> {
//! let job = JobBuilder::new("rides-per-driver")
//!     .brokers("localhost:9092")
//!     .transactional_id_prefix("rides-per-driver")
//!     .source(["rides"], Json::<Ride>::new())
//!     .event_time(|r: &Ride| r.event_time, Duration::from_secs(60))
//!     .filter(|r| !r.is_start)
//!     .key_by(|r| r.driver_id)
//!     .window(TumblingEventTimeWindows::of(Duration::from_secs(3600)))
//!     .aggregate_with(CountRides, |driver: &u64, window: Window, rides: u64| {
//!         format!("{driver} {} {rides}", window.start)
//!     })
//!     .sink(KafkaSink::with_serializer("rides-per-driver", |s: &String| {
//!         s.clone().into_bytes()
//!     }))
//!     .build()?;
//! // tokio: job.run(job.options(), stop).await
//! # let _ = job;
//! # Ok(())
//! # }
//! ```
//!
//! - [`JobBuilder`]: name, source brokers, sink and settings, checked by [`JobGraph::build`]
//!   with the job file's own rules.
//! - [`SourceStream`] / [`Stream`]: filter, map, flat_map before the key exchange (chained
//!   in each source subtask); [`SourceStream::event_time`] is the bounded out-of-orderness
//!   watermark strategy.
//! - [`KeyedStream`]: one key exchange per job; [`KeyedProcessFunction`] with keyed state
//!   ([`ValueStateDescriptor`], [`MapStateDescriptor`], [`ListStateDescriptor`]) and
//!   event-time timers, or event-time windows ([`TumblingEventTimeWindows`],
//!   [`SlidingEventTimeWindows`], [`EventTimeSessionWindows`]) with allowed lateness, a late side output and an
//!   [`AggregateFunction`].
//! - [`ResultStream`]: filter, map, flat_map after the keyed stage, then the sink; no second
//!   key_by (it has none).
//! - [`Dataflow::run`]: runs the job until `stop`.

mod builder;
mod chain;
mod process;
mod registered;
mod sink;
mod source;
mod state;
mod stream;
mod topology;
mod ttl;
mod window;

pub use builder::JobBuilder;
pub use process::{Collector, Context, KeyedProcessFunction, TimeDomain};
pub use registered::{Avro, Protobuf};
pub use sink::{FileSink, KafkaSink, Sink};
pub use source::{Deserializer, Json, Prefetch, SourceRecord};
pub use state::{
    ListStateDescriptor, ListStateHandle, MapStateDescriptor, MapStateHandle, StateAccessError,
    ValueStateDescriptor, ValueStateHandle, MAX_STATE_ID,
};
pub use stream::{JobGraph, KeyedStream, ResultStream, SourceStream, Stream};
pub use ttl::{StateTtl, TtlTime, TtlUpdate};
pub use window::{
    AggregateFunction, EventTimeSessionWindows, SlidingEventTimeWindows, TumblingEventTimeWindows,
    WindowAssigner, WindowedStream,
};

pub use crate::engine::job::{DeliveryGuarantee, ErrorTolerance, StartPosition};
/// Where a run restores from (also `engine::runtime::RestoreFrom`).
pub use crate::engine::state::RestoreFrom;
/// A window, `[start, end)` in epoch milliseconds (what a window function is given).
pub use crate::engine::time::Window;

use std::path::PathBuf;
use std::sync::Arc;

use crate::client::{ClientConfig, ConsumerConfig, ProducerConfig};
use crate::engine::formats::LineFormats;
use crate::engine::job::Job;
use crate::engine::metrics::Metrics;
use crate::engine::runtime::{self, RunConfig, RunSummary, RuntimeError};

/// What a user function returns when it fails: any error; the job stops with
/// [`RuntimeError::Function`] naming the operator.
pub type FunctionError = Box<dyn std::error::Error + Send + Sync>;

/// A typed job that cannot be built: one line naming what is wrong and what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A setting the job file would refuse, named as in a job file and by its setter.
    #[error("job {job}: {field} ({setter}): {message}")]
    Setting {
        /// The job's name.
        job: String,
        /// The job file's dotted field (`sink.transactional.id.prefix`).
        field: String,
        /// The builder method that sets it.
        setter: &'static str,
        /// What is wrong and what to change.
        message: String,
    },
    /// The dataflow itself does not make sense (a window without event time, a bad uid ...).
    #[error("job {job}: {message}")]
    Dataflow {
        /// The job's name.
        job: String,
        /// What is wrong and what to change.
        message: String,
    },
}

/// A built typed job: the checked job settings and its operators, ready to [`run`](Self::run).
#[derive(Debug, Clone)]
pub struct Dataflow {
    job: Job,
    topology: Arc<topology::TypedTopology>,
    /// A file source's line format.
    formats: LineFormats,
}

/// How to run a [`Dataflow`]: the clients' settings, where to restore from, the state directory.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The broker connection used for metadata and admin calls.
    pub client: ClientConfig,
    /// The sink's producer settings (the sink names its transactional ids itself).
    pub producer: ProducerConfig,
    /// The source's consumer settings (read_committed is forced).
    pub consumer: ConsumerConfig,
    /// Which checkpoint to start from (default: the latest, fresh when there is none).
    pub restore: RestoreFrom,
    /// The state directory; `None`: the job's (`JobBuilder::state_dir`, default `state/<name>`).
    pub state_dir: Option<PathBuf>,
}

impl Dataflow {
    /// The checked job settings (source, sink, settings; its `pipeline` is empty: the
    /// operators are this dataflow's).
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// Options with every client pointed at the job's brokers, the latest checkpoint and the
    /// job's state directory.
    pub fn options(&self) -> RunOptions {
        let client = ClientConfig {
            bootstrap_servers: self.job.source.brokers.clone(),
            ..ClientConfig::default()
        };
        RunOptions {
            producer: ProducerConfig {
                client: client.clone(),
                ..ProducerConfig::default()
            },
            consumer: ConsumerConfig {
                client: client.clone(),
                ..ConsumerConfig::default()
            },
            client,
            restore: RestoreFrom::Latest,
            state_dir: None,
        }
    }

    /// Runs the job until `stop` turns true (then stops gracefully: a final checkpoint,
    /// committed, nothing left open) or a fatal error; [`Self::run_with_metrics`] without a
    /// reader of the metrics.
    ///
    /// # Errors
    /// As [`crate::engine::runtime::run_with_metrics`], and [`RuntimeError::Function`] when a
    /// user function fails.
    pub async fn run(
        self,
        options: RunOptions,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<RunSummary, RuntimeError> {
        self.run_with_metrics(options, stop, Arc::new(Metrics::new()))
            .await
    }

    /// [`Self::run`], updating `metrics` as it goes; each operator's records in and out are
    /// counted under its kind (`source`, `filter`, `map`, `flat_map`, `key_by`, `process`,
    /// `window_aggregate`, in the order the job was built).
    ///
    /// # Errors
    /// As [`Self::run`].
    pub async fn run_with_metrics(
        self,
        options: RunOptions,
        stop: tokio::sync::watch::Receiver<bool>,
        metrics: Arc<Metrics>,
    ) -> Result<RunSummary, RuntimeError> {
        let state_dir = options
            .state_dir
            .unwrap_or_else(|| self.job.settings.state_dir.clone());
        let config = RunConfig {
            job: self.job,
            client: options.client,
            producer: options.producer,
            consumer: options.consumer,
            restore: options.restore,
            state_dir,
            formats: self.formats,
        };
        runtime::run_topology(config, self.topology, stop, metrics).await
    }
}

#[cfg(test)]
mod tests;
