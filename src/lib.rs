//! onceflow: a pure-Rust Apache Kafka client built around exactly-once delivery.
//!
//! # What you use
//!
//! - [`client`]: the Kafka client. [`Producer`](client::Producer) (idempotent by default,
//!   transactional with a `transactional.id`), [`Consumer`](client::Consumer) (manual
//!   assignment, `read_committed`), [`GroupConsumer`](client::group::GroupConsumer) (consumer
//!   groups, classic and KIP-848), [`Admin`](client::Admin), the two-phase commit an engine
//!   builds on ([`client::transactions`], [`TransactionalPool`](client::TransactionalPool)),
//!   the settings read from Java-style properties ([`client::config`]), and one error type
//!   whose [`classify`](client::classify) says what an error means: retried, abortable or
//!   fatal.
//! - `engine` (feature `engine`, on by default): checkpointed jobs from Kafka to Kafka (or a
//!   file at one end), exactly once: job files and their runtime (`engine::runtime::run`),
//!   typed jobs (`engine::dataflow`), the registry of line formats a file source reads
//!   (`engine::file_source`), the job's metrics (`engine::metrics`).
//!
//! The `onceflow` binary (`src/cli/`) is built on this API alone: produce, consume, topics,
//! groups and transaction commands, `run` (a job file) and the taxi rides demo.
//!
//! # Where exactly-once lives
//!
//! - Idempotent produce (sequence numbers, epoch bumps, no duplicates on retry): every
//!   [`Producer`](client::Producer) unless `enable.idempotence=false`.
//! - Transactions: the producer's transaction methods (init, begin, send offsets, prepare,
//!   commit, abort); the committable a checkpoint stores and resuming it from any process, and
//!   listing, describing and fencing other producers' transactions in
//!   [`client::transactions`]; a producer per checkpoint in [`client::pool`].
//! - Reading only committed data: `isolation.level=read_committed` on a consumer.
//! - Committing consumed offsets inside a transaction (KIP-447): the group's metadata from
//!   [`client::group`], handed to `Producer::send_offsets_to_transaction`.
//!
//! # Features
//!
//! - None (`default-features = false`): the Kafka client alone, for a service that only
//!   produces and consumes (no fjall, TOML or clap in the dependency tree).
//! - `engine`: adds the `engine` module.
//! - `cli` (default): adds the `onceflow` binary (and the engine; the binary alone uses the
//!   `onceflow-taxi` crate).
//! - `unstable-internals`: makes the internals public: the protocol codec (framing, versions,
//!   record batches, compression), connections and the broker pool, the producer's accumulator
//!   and sender, the fetcher, the checkpoint coordinator, the state store, the sinks. For the
//!   protocol tests, the fuzz targets and the codec bench; not covered by semver.
//!
//! The layers inside (protocol → client → engine → binary, each using only the one below it)
//! are mapped in docs/design/README.md.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Declares modules that are the crate's internals: public (and in the API docs) only with the
/// `unstable-internals` feature, crate-private otherwise. The protocol tests, the fuzz targets
/// and the codec bench turn the feature on to reach the framing, the connection or the
/// checkpoint coordinator directly; a user's build sees only the API meant to be called, and no
/// semver promise covers the rest.
///
/// Without the feature, an internal item (or re-export) that only those tests use would read as
/// dead code, so dead-code and unused-import warnings are off there; CI's clippy runs with the
/// feature on as well, where an unused private import or item still fails the build.
macro_rules! internal_modules {
    ($($(#[$attr:meta])* mod $name:ident;)*) => {$(
        #[cfg(feature = "unstable-internals")]
        $(#[$attr])*
        pub mod $name;
        #[cfg(not(feature = "unstable-internals"))]
        $(#[$attr])*
        #[allow(dead_code, unused_imports)]
        pub(crate) mod $name;
    )*};
}

pub mod client;
#[cfg(feature = "engine")]
pub mod engine;
#[cfg(feature = "schema")]
pub mod schema;
internal_modules! {
    mod protocol;
}
