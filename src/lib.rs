//! onceflow: a pure-Rust Apache Kafka client built around exactly-once delivery.
//!
//! Layers, each using only the one below it:
//! - [`protocol`]: framing, API version negotiation, the v2 record batch codec, compression and
//!   the broker error codes.
//! - [`client`]: connections, the broker pool and metadata cache, the producer, the consumer and
//!   admin calls.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod base64;
pub mod client;
pub mod protocol;
