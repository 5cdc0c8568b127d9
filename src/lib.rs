//! onceflow: a pure-Rust Apache Kafka client built around exactly-once delivery.
//!
//! # Map of the crate
//!
//! Layers, each using only the one below it (docs/design/ follows a connection, a batch, a
//! fetch, a transaction and a group member through them):
//! - [`protocol`]: bytes, no I/O. Framing, API version negotiation, the record batch codec (v2
//!   batches, and reading old v0/v1 message sets), compression, the broker error codes.
//! - [`client`]: everything that talks to brokers. [`client::connection`] (one pipelined,
//!   cancel-safe connection), [`client::cluster`] (the broker pool and metadata cache),
//!   [`client::producer`], [`client::consumer`] (manual assignment and the fetcher),
//!   [`client::group`] (consumer groups), [`client::admin`]; [`client::error`] decides what every
//!   broker error means ([`client::classify`]). Its own module list says more.
//! - `engine` (feature `engine`, on by default): checkpointed jobs on top of [`client`] alone,
//!   Kafka to Kafka (or a file at one end): the checkpoint coordinator, state on fjall, job
//!   files and typed jobs, the file source and its registry of line formats, the exactly-once
//!   sinks.
//! - The `onceflow` binary (`src/cli/`, not part of the library): produce, consume, topics,
//!   groups and transaction commands built on [`client`] alone; `run` (a job file, on the
//!   engine); the taxi rides workload's commands and the demo (`src/cli/taxi/`, over the
//!   `onceflow-taxi` crate of `crates/onceflow-taxi`, which the library does not use).
//!
//! # Where exactly-once lives
//!
//! - Idempotent produce (sequence numbers, epoch bumps, no duplicates on retry):
//!   [`client::producer`], its accumulator, sender and the pure per-response verdict.
//! - Transactions: the producer's transaction methods in [`client::producer`]; their phase
//!   enum and coordinator requests, the two-phase commit (the committable an engine
//!   checkpoints, resuming it from any process, DescribeTransactions, EndTxn), and listing,
//!   describing and fencing other producers' transactions in [`client::transactions`]; a
//!   producer per checkpoint in [`client::pool`].
//! - Reading only committed data: [`client::consumer::isolation`] (read_committed).
//! - Committing consumed offsets inside a transaction (KIP-447): the group's metadata from
//!   [`client::group`], handed to `Producer::send_offsets_to_transaction`.
//!
//! # Features
//!
//! - None (`default-features = false`): the Kafka client alone ([`protocol`] and [`client`]),
//!   for a service that only produces and consumes (no fjall, TOML or clap in the dependency
//!   tree).
//! - `engine`: adds the `engine` module.
//! - `cli` (default): adds the `onceflow` binary (and the engine; the binary alone uses the
//!   `onceflow-taxi` crate).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
#[cfg(feature = "engine")]
pub mod engine;
pub mod protocol;
