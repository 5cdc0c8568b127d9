//! The wire layer: everything that turns Kafka requests and responses into bytes and back.
//!
//! This layer owns framing (size-prefixed frames with correlation ids), API version negotiation,
//! the broker error codes, the v2 record batch codec and compression. It knows nothing about
//! connections, partitions or retries; the [`crate::client`] layer builds those on top.
//!
//! Request and response messages come from the `kafka-protocol` crate (generated from Kafka's
//! own JSON schemas). Record batches do not: the crate's codec allocates per record, keeps only
//! the last of duplicate header keys and trusts wire counts, so [`records`] is our own.

pub mod compression;
pub mod error_code;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod produce_frame;
pub mod records;
pub mod versions;

pub use error_code::ErrorCode;
pub use versions::ApiVersions;
