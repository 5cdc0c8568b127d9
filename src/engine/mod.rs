//! The engine: checkpointed jobs from Kafka to Kafka, exactly once (docs/design/checkpoint.md
//! and docs/design/recovery.md). It uses only the client's public API.
//!
//! - `checkpoint`: the checkpoint coordinator — when to inject a barrier, when a checkpoint
//!   is complete, what to commit, what to restore — as a pure state machine fed events.
//! - `state`: operator state on fjall: key groups, keyed value/map/list state, and the one
//!   atomic, fsynced batch per checkpoint; retention and restore.
//! - [`job`]: job files (TOML) and their built-in operators (JSON filters, projection, keyed
//!   window aggregates), checked with errors naming the line and the field.
//! - [`dataflow`]: typed jobs, a Rust builder in Flink's DataStream vocabulary, run by the
//!   same runtime.
//! - [`formats`]: how the file source makes a line a record ([`LineFormat`](formats::LineFormat))
//!   and the registry of named formats a job file chooses from
//!   ([`LineFormats`](formats::LineFormats)).
//! - `file_source`: the checkpointed file source (a file, or a directory of files, of events
//!   one a line), its read position in every checkpoint.
//! - `sink`: the exactly-once Kafka sink: a transaction per checkpoint from a pool of
//!   transactional ids, committed once the checkpoint is durable; the recovery order. The
//!   file sink: part files made final when their checkpoint is durable.
//! - [`runtime`]: `onceflow run`: one task drives source → operators → sink with the
//!   coordinator's checkpoints, exactly once.
//! - [`metrics`]: the job's metrics (checkpoints, transactions, records, lag), their
//!   Prometheus text format and the `/metrics` listener.

mod clock;
pub mod dataflow;
pub mod formats;
pub mod job;
pub mod metrics;
pub mod runtime;
pub mod sql;
internal_modules! {
    mod checkpoint;
    mod file_source;
    mod settings;
    mod sink;
    mod state;
    mod time;
}
