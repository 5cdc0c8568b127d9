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
//! - [`source`]: the checkpointed file source (a file, or a directory of files, of events one a
//!   line), the [`LineFormat`](source::LineFormat) that makes a line a record, and the
//!   registry of named formats a job file chooses from ([`LineFormats`](source::LineFormats)).
//! - [`sink`]: the exactly-once Kafka sink: a transaction per checkpoint from a pool of
//!   transactional ids, committed once the checkpoint is durable; the recovery order. The
//!   file sink: part files made final when their checkpoint is durable.
//! - [`runtime`]: `onceflow run`: one task drives source → operators → sink with the
//!   coordinator's checkpoints, exactly once.
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
pub mod time;
