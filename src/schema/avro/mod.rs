//! Avro in the schema registry's wire format: a serializer that registers (or looks up) its
//! schema under the record's subject and frames each value with the schema id, and a
//! deserializer that fetches the writer's schema by id and, given a reader schema, resolves
//! each value to it (fields added with defaults, fields removed, promoted types: the Avro
//! specification's rules).
//!
//! Values are `apache_avro` values (re-exported as [`apache_avro`]), serde types, or JSON in
//! the Avro JSON encoding (see [`AvroRecord::to_json`]). A schema that refers to others (the
//! registry's `references`) is parsed with them, fetched by subject and version.

pub(crate) mod container;
mod json;

pub use apache_avro;

use super::cache::{lock, Writers};
use super::error::{Result, SchemaError};
use super::registry::{Schema, SchemaRegistry, SchemaType};
use super::subject::Part;
use super::wire;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::ResolvedSchema;
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An Avro schema parsed with the schemas it refers to.
#[derive(Debug)]
struct Parsed {
    schema: apache_avro::Schema,
    refs: Vec<apache_avro::Schema>,
    /// No referenced schema and no named type used by its name (`Schema::Ref`) anywhere in
    /// `schema`: then nothing ever looks a name up (apache_avro's reader, writer and resolution,
    /// and `json`, consult the names only to follow a `Schema::Ref`), and [`Self::resolved`]
    /// need not collect them for every record.
    standalone: bool,
}

impl Parsed {
    /// Parses `text` with `refs` (the referenced schemas' texts, dependencies first).
    fn parse(text: &str, refs: &[String], origin: &str) -> Result<Parsed> {
        let invalid = |e: apache_avro::Error| SchemaError::InvalidSchema {
            kind: "Avro",
            origin: Some(origin.to_owned()),
            message: e.to_string(),
        };
        if refs.is_empty() {
            let schema = apache_avro::Schema::parse_str(text).map_err(invalid)?;
            // A schema whose names do not resolve keeps failing record by record, as it did.
            let standalone = !refers_by_name(&schema) && ResolvedSchema::try_from(&schema).is_ok();
            return Ok(Parsed {
                standalone,
                schema,
                refs: Vec::new(),
            });
        }
        let (schema, refs) =
            apache_avro::Schema::parse_str_with_list(text, refs).map_err(invalid)?;
        Ok(Parsed {
            schema,
            refs,
            standalone: false,
        })
    }

    /// The named types of the schema and of those it refers to, for following `Schema::Ref`s.
    /// Collecting them (a map of full names, allocated) costs about a third of a record's
    /// decoding; a standalone schema has no `Schema::Ref` to follow, so it gets an empty map, which
    /// allocates nothing.
    fn resolved(&self) -> apache_avro::AvroResult<ResolvedSchema<'_>> {
        if self.standalone {
            return ResolvedSchema::new_with_schemata(Vec::new());
        }
        let mut all = vec![&self.schema];
        all.extend(self.refs.iter());
        ResolvedSchema::try_from(all)
    }

    /// The full name of a named schema (for the record subject name strategies).
    fn full_name(&self) -> Option<String> {
        self.schema.name().map(|n| n.fullname(None))
    }
}

/// Whether a named type is used by its name somewhere in `schema` (a `Schema::Ref`: a type
/// defined earlier in the schema, a recursive record, or one from a referenced schema).
fn refers_by_name(schema: &apache_avro::Schema) -> bool {
    use apache_avro::Schema as S;
    match schema {
        S::Ref { .. } => true,
        S::Array(a) => refers_by_name(&a.items),
        S::Map(m) => refers_by_name(&m.types),
        S::Union(u) => u.variants().iter().any(refers_by_name),
        S::Record(r) => r.fields.iter().any(|f| refers_by_name(&f.schema)),
        // No schema inside (listed in full, so that a new variant is looked at here).
        S::Null
        | S::Boolean
        | S::Int
        | S::Long
        | S::Float
        | S::Double
        | S::Bytes
        | S::String
        | S::Enum(_)
        | S::Fixed(_)
        | S::Decimal(_)
        | S::BigDecimal
        | S::Uuid(_)
        | S::Date
        | S::TimeMillis
        | S::TimeMicros
        | S::TimestampMillis
        | S::TimestampMicros
        | S::TimestampNanos
        | S::LocalTimestampMillis
        | S::LocalTimestampMicros
        | S::LocalTimestampNanos
        | S::Duration(_) => false,
    }
}

/// A record read by [`AvroDeserializer`].
#[derive(Debug, Clone)]
pub struct AvroRecord {
    /// The schema id the record was written with.
    pub schema_id: u32,
    /// The value, in the reader schema when the deserializer has one.
    pub value: Value,
    schema: Arc<Parsed>,
}

impl AvroRecord {
    /// The value in the Avro JSON encoding (unions as `{"branch": value}`, bytes as
    /// strings of U+0000..U+00FF), as the Java tools and kcat print it.
    ///
    /// # Errors
    /// [`SchemaError::Decode`] for a value JSON cannot hold (a big-decimal).
    pub fn to_json(&self) -> Result<serde_json::Value> {
        let resolved = self
            .schema
            .resolved()
            .map_err(|e| self.decode_error(e.to_string()))?;
        json::to_json(&self.value, &self.schema.schema, resolved.get_names())
            .map_err(|m| self.decode_error(m))
    }

    /// The value as plain JSON, as a JSON consumer expects it: a union's value without its
    /// branch, decimals as numbers, timestamps as numbers in their unit since the epoch,
    /// dates as days, UUIDs as strings (the engine's pipelines read Avro records so).
    /// [`AvroSerializer::serialize_json`] takes it back.
    ///
    /// # Errors
    /// As [`Self::to_json`].
    pub fn to_plain_json(&self) -> Result<serde_json::Value> {
        let resolved = self
            .schema
            .resolved()
            .map_err(|e| self.decode_error(e.to_string()))?;
        json::to_plain_json(&self.value, &self.schema.schema, resolved.get_names())
            .map_err(|m| self.decode_error(m))
    }

    /// [`Self::to_json`] as one line of text, record fields in the schema's order (as the Java
    /// tools print it; a `serde_json::Value` sorts object keys).
    ///
    /// # Errors
    /// As [`Self::to_json`].
    pub fn to_json_string(&self) -> Result<String> {
        let resolved = self
            .schema
            .resolved()
            .map_err(|e| self.decode_error(e.to_string()))?;
        json::to_json_text(&self.value, &self.schema.schema, resolved.get_names())
            .map_err(|m| self.decode_error(m))
    }

    /// The value as a serde type.
    ///
    /// # Errors
    /// [`SchemaError::Decode`] when the value does not fit `T`.
    pub fn into_serde<T: DeserializeOwned>(self) -> Result<T> {
        apache_avro::from_value(&self.value).map_err(|e| self.decode_error(e.to_string()))
    }

    fn decode_error(&self, message: String) -> SchemaError {
        SchemaError::Decode {
            id: self.schema_id,
            message,
        }
    }
}

/// Parses a registered schema with its references (fetched from the registry, depth first).
async fn parse_registered(
    registry: &SchemaRegistry,
    schema: &Schema,
    origin: &str,
) -> Result<Parsed> {
    if schema.schema_type != SchemaType::Avro {
        return Err(SchemaError::InvalidSchema {
            kind: "Avro",
            origin: Some(origin.to_owned()),
            message: format!(
                "the registry holds a {} schema there, not Avro",
                schema.schema_type.name()
            ),
        });
    }
    let texts: Vec<String> = registry
        .referenced(schema, origin)
        .await?
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    Parsed::parse(&schema.text, &texts, origin)
}

/// Reads Avro records in the wire format.
///
/// # Examples
/// ```no_run
/// use onceflow::schema::{AvroDeserializer, RegistryConfig, SchemaRegistry};
/// # async fn f(record_value: &[u8]) -> Result<(), onceflow::schema::SchemaError> {
/// let registry = SchemaRegistry::new(RegistryConfig::from_properties([
///     ("schema.registry.url", "http://127.0.0.1:8081"),
/// ])?)?;
/// let avro = AvroDeserializer::new(registry);
/// let record = avro.deserialize(record_value).await?;
/// println!("{}", record.to_json()?);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AvroDeserializer {
    registry: SchemaRegistry,
    reader: Option<Arc<Parsed>>,
    writers: Writers<Parsed>,
}

impl AvroDeserializer {
    /// A deserializer that gives values in the schema they were written with.
    pub fn new(registry: SchemaRegistry) -> AvroDeserializer {
        AvroDeserializer {
            registry,
            reader: None,
            writers: Writers::new(),
        }
    }

    /// Gives every value in `schema` (Avro JSON), resolved from the writer's schema by the
    /// specification's rules.
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`] when `schema` does not parse.
    pub fn with_reader_schema(mut self, schema: &str) -> Result<AvroDeserializer> {
        self.reader = Some(Arc::new(Parsed::parse(schema, &[], "the reader schema")?));
        Ok(self)
    }

    /// Reads one record value (or key).
    ///
    /// # Errors
    /// [`SchemaError::Framing`] for a record not in the wire format;
    /// [`SchemaError::UnknownId`] for a schema id the registry does not know;
    /// [`SchemaError::Decode`] for a payload that does not decode with its schema (or does
    /// not resolve to the reader schema); the registry's errors.
    pub async fn deserialize(&self, record: &[u8]) -> Result<AvroRecord> {
        let (id, payload) = wire::unframe(record)?;
        let writer = self.writer(id).await?;
        let decode = |e: apache_avro::Error| SchemaError::Decode {
            id,
            message: e.to_string(),
        };
        let resolved = writer.resolved().map_err(decode)?;
        let builder =
            GenericDatumReader::builder(&writer.schema).resolved_writer_schemata(resolved);
        let mut input = payload;
        let value = match &self.reader {
            Some(r) => builder
                .reader_schema(&r.schema)
                .resolved_reader_schemata(r.resolved().map_err(decode)?)
                .build()
                .and_then(|d| d.read_value(&mut input))
                .map_err(decode)?,
            None => builder
                .build()
                .and_then(|d| d.read_value(&mut input))
                .map_err(decode)?,
        };
        if !input.is_empty() {
            return Err(SchemaError::Decode {
                id,
                message: format!("{} bytes left over after the value: the payload is not what its schema id says", input.len()),
            });
        }
        Ok(AvroRecord {
            schema_id: id,
            value,
            schema: self.reader.clone().unwrap_or(writer),
        })
    }

    async fn writer(&self, id: u32) -> Result<Arc<Parsed>> {
        self.writers
            .get(id, || async {
                let schema = self.registry.schema_by_id(id).await?;
                parse_registered(&self.registry, &schema, &format!("schema id {id}")).await
            })
            .await
    }
}

/// Writes Avro records in the wire format, for one schema.
///
/// The schema id comes from the registry per topic, by the subject name strategy of the
/// part (key or value): registered with `auto.register.schemas` (the default), looked up
/// otherwise, or with `use.latest.version` the subject's latest schema is written with
/// (values are resolved to it).
///
/// # Examples
/// ```no_run
/// use onceflow::schema::{AvroSerializer, Part, RegistryConfig, SchemaRegistry};
/// # async fn f() -> Result<(), onceflow::schema::SchemaError> {
/// let registry = SchemaRegistry::new(RegistryConfig::from_properties([
///     ("schema.registry.url", "http://127.0.0.1:8081"),
/// ])?)?;
/// let schema = r#"{"type":"record","name":"Ride","fields":[{"name":"id","type":"long"}]}"#;
/// let avro = AvroSerializer::new(registry, schema, Part::Value)?;
/// let bytes = avro.serialize_json("rides", &serde_json::json!({"id": 7})).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AvroSerializer {
    registry: SchemaRegistry,
    part: Part,
    schema: Arc<Parsed>,
    registered: Schema,
    ids: Mutex<HashMap<String, (u32, Arc<Parsed>)>>,
}

impl AvroSerializer {
    /// A serializer of values in `schema` (Avro JSON) for the record `part`.
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`] when `schema` does not parse.
    pub fn new(registry: SchemaRegistry, schema: &str, part: Part) -> Result<AvroSerializer> {
        Ok(AvroSerializer {
            registry,
            part,
            schema: Arc::new(Parsed::parse(schema, &[], "the schema to write with")?),
            registered: Schema::new(SchemaType::Avro, schema),
            ids: Mutex::new(HashMap::new()),
        })
    }

    /// The subject records of `topic` are registered under.
    ///
    /// # Errors
    /// [`SchemaError::Config`] when a record strategy meets an unnamed schema.
    pub fn subject(&self, topic: &str) -> Result<String> {
        let name = self.schema.full_name();
        self.registry
            .config()
            .subject(topic, self.part, name.as_deref())
    }

    /// Writes `value` (in the serializer's schema) for `topic`.
    ///
    /// # Errors
    /// [`SchemaError::Encode`] for a value that does not fit the schema; the registry's
    /// errors (an unregistered schema without `auto.register.schemas`, an incompatible one).
    pub async fn serialize(&self, topic: &str, value: Value) -> Result<Vec<u8>> {
        let (id, writer) = self.id_for(topic).await?;
        let encode = |message: String| SchemaError::Encode {
            subject: self.subject(topic).unwrap_or_else(|_| topic.to_owned()),
            message,
        };
        let value = if Arc::ptr_eq(&writer, &self.schema) {
            value
        } else {
            value
                .resolve(&writer.schema)
                .map_err(|e| encode(e.to_string()))?
        };
        let resolved = writer.resolved().map_err(|e| encode(e.to_string()))?;
        let payload = GenericDatumWriter::builder(&writer.schema)
            .resolved_schemata(resolved)
            .build()
            .and_then(|w| w.write_value_to_vec(value))
            .map_err(|e| encode(e.to_string()))?;
        Ok(wire::frame(id, &payload))
    }

    /// Writes JSON in the Avro JSON encoding (bare union values are taken where they fit one
    /// branch).
    ///
    /// # Errors
    /// [`SchemaError::Encode`] naming the path of what does not fit; as [`Self::serialize`].
    pub async fn serialize_json(&self, topic: &str, value: &serde_json::Value) -> Result<Vec<u8>> {
        let encode = |message: String| SchemaError::Encode {
            subject: self.subject(topic).unwrap_or_else(|_| topic.to_owned()),
            message,
        };
        let resolved = self.schema.resolved().map_err(|e| encode(e.to_string()))?;
        let v =
            json::from_json(value, &self.schema.schema, resolved.get_names()).map_err(encode)?;
        self.serialize(topic, v).await
    }

    /// Writes a serde value.
    ///
    /// # Errors
    /// As [`Self::serialize`].
    pub async fn serialize_ser<T: Serialize>(&self, topic: &str, value: &T) -> Result<Vec<u8>> {
        let encode = |message: String| SchemaError::Encode {
            subject: self.subject(topic).unwrap_or_else(|_| topic.to_owned()),
            message,
        };
        let v = apache_avro::to_value(value)
            .and_then(|v| v.resolve(&self.schema.schema))
            .map_err(|e| encode(e.to_string()))?;
        self.serialize(topic, v).await
    }

    /// The schema id (and the schema written with) for `topic`, cached per topic.
    async fn id_for(&self, topic: &str) -> Result<(u32, Arc<Parsed>)> {
        if let Some(found) = lock(&self.ids).get(topic) {
            return Ok(found.clone());
        }
        let subject = self.subject(topic)?;
        let c = self.registry.config();
        let found = if c.use_latest_version {
            let latest = self.registry.latest(&subject).await?;
            let origin = format!("subject '{subject}' version {}", latest.version);
            (
                latest.id,
                Arc::new(parse_registered(&self.registry, &latest.schema, &origin).await?),
            )
        } else if c.auto_register {
            (
                self.registry.register(&subject, &self.registered).await?,
                self.schema.clone(),
            )
        } else {
            (
                self.registry.lookup(&subject, &self.registered).await?.id,
                self.schema.clone(),
            )
        };
        lock(&self.ids).insert(topic.to_owned(), found.clone());
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_schema_without_named_uses_is_standalone() {
        let record = |fields: &str| {
            format!(r#"{{"type":"record","name":"R","namespace":"n","fields":[{fields}]}}"#)
        };
        let kind = r#"{"name":"k","type":{"type":"enum","name":"K","symbols":["A"]}}"#;
        // (schema, standalone)
        let cases = [
            (record(r#"{"name":"a","type":"long"}"#), true),
            (
                record(&format!(
                    "{kind},{{\"name\":\"z\",\"type\":[\"null\",\"string\"]}}"
                )),
                true,
            ),
            (
                record(&format!("{kind},{{\"name\":\"k2\",\"type\":\"K\"}}")),
                false,
            ),
            (record(r#"{"name":"next","type":["null","R"]}"#), false),
            (
                record(
                    r#"{"name":"m","type":{"type":"map","values":{"type":"array","items":"n.R"}}}"#,
                ),
                false,
            ),
        ];
        for (text, want) in cases {
            let parsed = Parsed::parse(&text, &[], "test").unwrap();
            assert_eq!(parsed.standalone, want, "{text}");
            // Either way the names resolve.
            assert!(parsed.resolved().is_ok(), "{text}");
        }
    }
}
