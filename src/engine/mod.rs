//! The engine: checkpointed jobs from Kafka to Kafka, exactly once (docs/design/checkpoint.md
//! and docs/design/recovery.md). It uses only the client's public API.
//!
//! - [`checkpoint`]: the checkpoint coordinator — when to inject a barrier, when a checkpoint
//!   is complete, what to commit, what to restore — as a pure state machine fed events.
//! - [`state`]: operator state on fjall: key groups, keyed value/map/list state, and the one
//!   atomic, fsynced batch per checkpoint; retention and restore.
//! - [`job`]: job files (TOML) and their built-in operators (JSON filters, projection, keyed
//!   window aggregates), checked with errors naming the line and the field.
//! - [`dataflow`]: typed jobs, a Rust builder in Flink's DataStream vocabulary, run by the
//!   same runtime.
//! - [`sink`]: the exactly-once Kafka sink: a transaction per checkpoint from a pool of
//!   transactional ids, committed once the checkpoint is durable; the recovery order.
//! - [`runtime`]: `onceflow run`: one task drives source → operators → sink with the
//!   coordinator's checkpoints, exactly once.
//! - [`taxi`]: the NYC taxi rides workload: a deterministic generator and the verifier.
//! - [`metrics`]: the job's metrics (checkpoints, transactions, records, lag), their
//!   Prometheus text format and the `/metrics` listener.

pub mod checkpoint;
pub mod dataflow;
pub mod job;
pub mod metrics;
pub mod runtime;
pub mod sink;
pub mod source;
pub mod state;
pub mod taxi;
pub mod time;
