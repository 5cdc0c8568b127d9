//! The client: connections, the broker pool, the producer, the consumer and admin calls.
//!
//! - `connection`: one pipelined, cancel-safe connection, poisoned on failure.
//! - `cluster`: the broker pool and metadata cache shared by everything above it.
//! - `producer`: accumulator, per-broker sender, partitioner, the producer id and epoch, and
//!   the transaction methods (init, begin, send offsets, prepare, commit, abort).
//! - [`transactions`]: the transaction protocol below and beside the producer: the producer's
//!   transaction phases and coordinator requests; the committable and resuming it from any
//!   process (EndTxn, and the pure `judge` of what the coordinator reports); DescribeTransactions
//!   and the coordinator's states; the admin calls listing, describing and fencing transactions.
//! - [`pool`]: [`TransactionalPool`], above the producer: a producer per checkpoint over the
//!   transactional ids `<prefix>-<slot>`, so checkpoint N stays prepared while N+1 is written.
//! - `consumer`: assignment, positions, the fetcher.
//! - `list_offsets`: ListOffsets at each leader (earliest, end, by timestamp), for the consumer
//!   and [`Admin::list_offsets`].
//! - [`admin`]: topics and configs (its transaction calls are in [`transactions`]).
//! - `coordinator`: finding group and transaction coordinators, and calls to them.
//! - `retry`: the one retry executor every retried request goes through (what is retried,
//!   backoff, deadline, metadata refresh and coordinator re-discovery), deciding with
//!   [`classify`].
//! - [`group`]: consumer groups (classic protocol).
//! - `error`: the error type and [`classify`], the one place that decides whether a broker
//!   error is retried, needs a metadata refresh, aborts a transaction or is fatal.
//! - [`config`]: the client, producer and consumer settings, read from Java-style properties.
//! - `security`: TLS and SASL (`security.protocol`, `ssl.*`, `sasl.*`), pure Rust.
//! - `metadata`: topics, partitions and leaders as the cluster reports them.

pub mod admin;
mod clock;
pub mod config;
pub mod group;
mod list_offsets;
pub mod pool;
pub(crate) mod retry;
pub mod transactions;
internal_modules! {
    mod cluster;
    mod connection;
    mod consumer;
    mod coordinator;
    mod error;
    mod metadata;
    mod producer;
    mod security;
}

pub use pool::TransactionalPool;

pub use admin::Admin;
pub use cluster::Cluster;
pub use config::{
    Acks, AutoOffsetReset, ClientConfig, ConfigError, ConsumerConfig, GroupProtocol,
    IsolationLevel, ProducerConfig,
};
pub use consumer::{Consumer, ConsumerMetrics, ConsumerRecord, Offset};
// The protocol's types that the client's own API carries: error codes in errors, record
// headers, the compression codec of a producer's batches and the errors of decoding them.
pub use crate::protocol::compression::{Compression, CompressionError};
pub use crate::protocol::frame::FrameError;
pub use crate::protocol::records::{Header, RecordError};
pub use crate::protocol::ErrorCode;
pub use error::{classify, Error, ErrorClass, Op, Result};
pub use metadata::TopicPartition;
pub use producer::partitioner::partition_for_key;
pub use producer::{DeliveryFuture, Producer, ProducerMetrics, ProducerRecord, RecordMetadata};
pub use retry::{backoff, exponential_backoff};

/// What users expect to move between tasks and threads: a producer shared by many tasks
/// (`Arc<Producer>`, `send(&self)`), a consumer or group member owned by one task that may run
/// on any thread, errors sent across channels. A compile-time check: a change that makes one
/// of them `!Send` or `!Sync` fails the build.
#[cfg(test)]
mod thread_safety {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    #[test]
    fn public_handles_are_send_and_sync_where_users_share_them() {
        send_sync::<super::Producer>();
        send_sync::<super::Admin>();
        send_sync::<super::Cluster>();
        send_sync::<super::TransactionalPool>();
        send_sync::<super::Error>();
        send_sync::<super::ProducerConfig>();
        send_sync::<super::ConsumerConfig>();
        send::<super::Consumer>();
        send::<super::group::GroupConsumer>();
        send::<super::DeliveryFuture>();
    }
}
