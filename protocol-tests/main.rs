//! Tests against a real Apache Kafka broker.
//!
//! Start one with `protocol-tests/kafka-broker.sh start` (the README's test command does). The
//! address comes from ONCEFLOW_BROKER (default 127.0.0.1:9092). There is no skipping: without a
//! broker these tests fail, because a protocol test that silently passes proves nothing.
//!
//! Tests that kill the broker start their own on another port so they do not disturb the rest.

mod support;

mod auto_create;
mod cli;
mod cluster;
mod codecs;
mod connection_faults;
mod consumer_fetch_order;
mod consumer_positions;
mod consumer_truncation;
mod demo;
mod engine_changelog;
mod engine_chaos;
mod engine_cluster_chaos;
mod engine_dataflow;
mod engine_errors;
mod engine_features;
mod engine_files;
mod engine_formats;
mod engine_handover;
mod engine_idleness;
mod engine_lines;
mod engine_members;
mod engine_metrics;
mod engine_parallel;
mod engine_repartition;
mod engine_restore;
mod engine_run;
mod engine_sink;
mod engine_stages;
mod engine_start;
mod engine_start_latest;
mod engine_stop;
mod examples;
mod faults;
mod fetch_sessions;
mod flush;
mod group_faults;
mod groups;
mod groups_cli;
mod groups_consumer;
mod hostile;
mod idempotence;
mod interop;
mod limits;
mod ordering;
mod pipeline;
mod read_committed;
mod schema_interop;
mod schema_protobuf;
mod schema_registry;
mod security;
mod send_callback;
mod taxi_cli;
mod topic_ids;
mod transactions;
mod txn_cli;
mod txn_pool;
mod txn_stress;
mod watchdog;
