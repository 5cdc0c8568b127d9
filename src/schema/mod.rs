//! Records in the schema registry's wire format (feature `schema`): the registry client and
//! the Avro serde.
//!
//! - [`SchemaRegistry`] ([`registry`](self)): the Confluent-compatible REST API, cached,
//!   retried by the client's retry executor, over HTTP or HTTPS (rustls, pure Rust), with
//!   basic authentication; settings in [`RegistryConfig`] under the Java serializers'
//!   property names.
//! - [`AvroSerializer`] / [`AvroDeserializer`]: values framed with their schema id; the
//!   writer's schema fetched by id, a reader schema for evolution, JSON in the Avro JSON
//!   encoding for tools.
//! - [`JsonSchemaSerializer`] / [`JsonSchemaDeserializer`]: JSON values validated against a
//!   JSON Schema (always when written, on request when read).
//! - [`wire`]: the framing itself (magic byte, schema id, Protobuf message indexes).
//! - [`SubjectNameStrategy`]: which subject a schema lives under.
//!
//! Layering: this module uses the client's TLS connector and retry executor; the engine and
//! the binary use this module.

mod avro;
mod config;
mod error;
mod http;
mod json_schema;
mod registry;
mod subject;
pub mod wire;

pub use avro::{apache_avro, AvroDeserializer, AvroRecord, AvroSerializer};
pub use config::RegistryConfig;
pub use error::{Result, SchemaError};
pub use json_schema::{JsonSchemaDeserializer, JsonSchemaRecord, JsonSchemaSerializer};
pub use registry::{RegisteredSchema, Schema, SchemaReference, SchemaRegistry, SchemaType};
pub use subject::{Part, SubjectNameStrategy};
