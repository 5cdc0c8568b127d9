//! Records in the schema registry's wire format (feature `schema`): the registry client and
//! the Avro, Protobuf and JSON Schema serdes.
//!
//! - [`SchemaRegistry`] ([`registry`](self)): the Confluent-compatible REST API, cached,
//!   retried by the client's retry executor, over HTTP or HTTPS (rustls, pure Rust), with
//!   basic authentication; settings in [`RegistryConfig`] under the Java serializers'
//!   property names.
//! - [`AvroSerializer`] / [`AvroDeserializer`]: values framed with their schema id; the
//!   writer's schema fetched by id, a reader schema for evolution, JSON in the Avro JSON
//!   encoding for tools.
//! - [`ProtobufSerializer`] / [`ProtobufDeserializer`]: messages of a `.proto` schema
//!   (compiled at run time, imports registered as references), framed with their schema id
//!   and message indexes; JSON in the proto3 mapping.
//! - [`JsonSchemaSerializer`] / [`JsonSchemaDeserializer`]: JSON values validated against a
//!   JSON Schema (always when written, on request when read).
//! - [`wire`]: the framing itself (magic byte, schema id, Protobuf message indexes).
//! - [`SubjectNameStrategy`]: which subject a schema lives under.
//!
//! Layering: this module uses the client's TLS connector and retry executor; the engine and
//! the binary use this module.

mod avro;
mod cache;
mod config;
mod error;
mod http;
mod json_schema;
mod protobuf;
mod registry;
mod subject;
pub mod wire;

pub(crate) use avro::container::{Container, ContainerWriter};
pub use avro::{apache_avro, AvroDeserializer, AvroRecord, AvroSerializer};
pub use config::RegistryConfig;
pub use error::{Result, SchemaError};
pub use json_schema::{JsonSchemaDeserializer, JsonSchemaRecord, JsonSchemaSerializer};
pub use protobuf::{prost_reflect, ProtobufDeserializer, ProtobufRecord, ProtobufSerializer};
pub use registry::{RegisteredSchema, Schema, SchemaReference, SchemaRegistry, SchemaType};
pub use subject::{Part, SubjectNameStrategy};
