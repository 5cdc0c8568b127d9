//! JSON Schema in the schema registry's wire format (magic byte, schema id, the JSON text):
//! a serializer that validates each value against its schema before writing it (a value that
//! does not fit is an error naming its path, never written), and a deserializer that checks
//! the record's schema id is a JSON Schema the registry knows and, when asked
//! ([`JsonSchemaDeserializer::validating`]), validates the value too.
//!
//! Schemas are compiled once per schema (cached by id). References to other documents
//! (`$ref` to a URL or another registry subject) are not resolved: such a schema is refused
//! when it is compiled, naming the reference.

use super::cache::lock;
use super::error::{Result, SchemaError};
use super::registry::{Schema, SchemaRegistry, SchemaType};
use super::subject::Part;
use super::wire;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A compiled JSON Schema.
struct Compiled(jsonschema::Validator);

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Compiled")
    }
}

impl Compiled {
    fn new(text: &str, origin: &str) -> Result<Compiled> {
        let invalid = |message: String| SchemaError::InvalidSchema {
            kind: "JSON",
            origin: Some(origin.to_owned()),
            message,
        };
        let doc: Value =
            serde_json::from_str(text).map_err(|e| invalid(format!("not JSON: {e}")))?;
        jsonschema::validator_for(&doc)
            .map(Compiled)
            .map_err(|e| invalid(e.to_string()))
    }

    /// The first way `value` does not fit, as `path: what` (the path `$` for the root).
    fn check(&self, value: &Value) -> std::result::Result<(), String> {
        match self.0.iter_errors(value).next() {
            None => Ok(()),
            Some(e) => {
                let path = e.instance_path().to_string();
                let path = if path.is_empty() {
                    "$".to_owned()
                } else {
                    path
                };
                Err(format!("{path}: {e}"))
            }
        }
    }

    /// The schema's `title`, the name the record subject name strategies use.
    fn title(text: &str) -> Option<String> {
        serde_json::from_str::<Value>(text)
            .ok()?
            .get("title")?
            .as_str()
            .map(str::to_owned)
    }
}

/// A record read by [`JsonSchemaDeserializer`].
#[derive(Debug, Clone, PartialEq)]
pub struct JsonSchemaRecord {
    /// The schema id the record was written with.
    pub schema_id: u32,
    /// The value.
    pub value: Value,
    /// The value's text as it was written (its key order kept).
    pub text: String,
}

/// Reads JSON Schema records in the wire format.
///
/// # Examples
/// ```no_run
/// use onceflow::schema::{JsonSchemaDeserializer, RegistryConfig, SchemaRegistry};
/// # async fn f(record_value: &[u8]) -> Result<(), onceflow::schema::SchemaError> {
/// let registry = SchemaRegistry::new(RegistryConfig::from_properties([
///     ("schema.registry.url", "http://127.0.0.1:8081"),
/// ])?)?;
/// let json = JsonSchemaDeserializer::new(registry).validating(true);
/// let record = json.deserialize(record_value).await?;
/// println!("{}", record.value);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct JsonSchemaDeserializer {
    registry: SchemaRegistry,
    validate: bool,
    compiled: Mutex<HashMap<u32, Option<Arc<Compiled>>>>,
}

impl JsonSchemaDeserializer {
    /// A deserializer that checks each record's schema id, and validates the value when the
    /// registry's settings say `json.fail.invalid.schema=true` (the Java deserializer's
    /// property; false by default).
    pub fn new(registry: SchemaRegistry) -> JsonSchemaDeserializer {
        let validate = registry.config().json_fail_invalid_schema;
        JsonSchemaDeserializer {
            registry,
            validate,
            compiled: Mutex::new(HashMap::new()),
        }
    }

    /// Validates every value against its schema too.
    pub fn validating(mut self, validate: bool) -> JsonSchemaDeserializer {
        self.validate = validate;
        self
    }

    /// Reads one record value (or key).
    ///
    /// # Errors
    /// [`SchemaError::Framing`] for a record not in the wire format;
    /// [`SchemaError::UnknownId`] for a schema id the registry does not know;
    /// [`SchemaError::InvalidSchema`] when the id is not a JSON Schema;
    /// [`SchemaError::Decode`] for a payload that is not JSON, or (validating) does not fit.
    pub async fn deserialize(&self, record: &[u8]) -> Result<JsonSchemaRecord> {
        let (id, payload) = wire::unframe(record)?;
        let compiled = self.schema(id).await?;
        let decode = |message: String| SchemaError::Decode { id, message };
        let value: Value =
            serde_json::from_slice(payload).map_err(|e| decode(format!("not JSON: {e}")))?;
        if let Some(c) = compiled {
            c.check(&value)
                .map_err(|m| decode(format!("the value does not fit its schema: {m}")))?;
        }
        Ok(JsonSchemaRecord {
            schema_id: id,
            value,
            // It parsed as JSON, so it is UTF-8.
            text: String::from_utf8_lossy(payload).into_owned(),
        })
    }

    /// The compiled schema of `id` when validating (`None` otherwise, the id still checked).
    async fn schema(&self, id: u32) -> Result<Option<Arc<Compiled>>> {
        if let Some(c) = lock(&self.compiled).get(&id) {
            return Ok(c.clone());
        }
        let schema = self.registry.schema_by_id(id).await?;
        let origin = format!("schema id {id}");
        if schema.schema_type != SchemaType::Json {
            return Err(SchemaError::InvalidSchema {
                kind: "JSON",
                origin: Some(origin),
                message: format!(
                    "the registry holds a {} schema there, not a JSON Schema",
                    schema.schema_type.name()
                ),
            });
        }
        let compiled = match self.validate {
            true => Some(Arc::new(Compiled::new(&schema.text, &origin)?)),
            false => None,
        };
        lock(&self.compiled).insert(id, compiled.clone());
        Ok(compiled)
    }
}

/// Writes JSON values in the wire format, each validated against one JSON Schema first.
///
/// # Examples
/// ```no_run
/// use onceflow::schema::{JsonSchemaSerializer, Part, RegistryConfig, SchemaRegistry};
/// # async fn f() -> Result<(), onceflow::schema::SchemaError> {
/// let registry = SchemaRegistry::new(RegistryConfig::from_properties([
///     ("schema.registry.url", "http://127.0.0.1:8081"),
/// ])?)?;
/// let schema = r#"{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}"#;
/// let json = JsonSchemaSerializer::new(registry, schema, Part::Value)?;
/// let bytes = json.serialize("rides", &serde_json::json!({"id": 7})).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct JsonSchemaSerializer {
    registry: SchemaRegistry,
    part: Part,
    compiled: Compiled,
    registered: Schema,
    ids: Mutex<HashMap<String, u32>>,
}

impl JsonSchemaSerializer {
    /// A serializer of values that fit `schema` (a JSON Schema document).
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`] when `schema` is not a JSON Schema.
    pub fn new(registry: SchemaRegistry, schema: &str, part: Part) -> Result<JsonSchemaSerializer> {
        Ok(JsonSchemaSerializer {
            registry,
            part,
            compiled: Compiled::new(schema, "the schema to write with")?,
            registered: Schema::new(SchemaType::Json, schema),
            ids: Mutex::new(HashMap::new()),
        })
    }

    /// The subject records of `topic` are registered under (the record strategies use the
    /// schema's `title`).
    ///
    /// # Errors
    /// [`SchemaError::Config`] when a record strategy meets a schema without a title.
    pub fn subject(&self, topic: &str) -> Result<String> {
        let title = Compiled::title(&self.registered.text);
        self.registry
            .config()
            .subject(topic, self.part, title.as_deref())
    }

    /// Validates `value` and writes it for `topic`.
    ///
    /// # Errors
    /// [`SchemaError::Encode`] naming the path of what does not fit; the registry's errors.
    pub async fn serialize(&self, topic: &str, value: &Value) -> Result<Vec<u8>> {
        let subject = self.subject(topic)?;
        self.compiled
            .check(value)
            .map_err(|message| SchemaError::Encode {
                subject: subject.clone(),
                message,
            })?;
        let id = self.id_for(topic, &subject).await?;
        let payload = serde_json::to_vec(value).map_err(|e| SchemaError::Encode {
            subject,
            message: e.to_string(),
        })?;
        Ok(wire::frame(id, &payload))
    }

    /// Validates the JSON document `text` and writes it for `topic` as it is (its key order
    /// and number forms kept; surrounding whitespace trimmed).
    ///
    /// # Errors
    /// [`SchemaError::Encode`] when `text` is not JSON or does not fit; the registry's errors.
    pub async fn serialize_str(&self, topic: &str, text: &str) -> Result<Vec<u8>> {
        let subject = self.subject(topic)?;
        let value: Value = serde_json::from_str(text).map_err(|e| SchemaError::Encode {
            subject: subject.clone(),
            message: format!("not JSON: {e}"),
        })?;
        self.compiled
            .check(&value)
            .map_err(|message| SchemaError::Encode {
                subject: subject.clone(),
                message,
            })?;
        let id = self.id_for(topic, &subject).await?;
        Ok(wire::frame(id, text.trim().as_bytes()))
    }

    async fn id_for(&self, topic: &str, subject: &str) -> Result<u32> {
        if let Some(id) = lock(&self.ids).get(topic) {
            return Ok(*id);
        }
        let c = self.registry.config();
        let id = if c.use_latest_version {
            let latest = self.registry.latest(subject).await?;
            if latest.schema.schema_type != SchemaType::Json {
                return Err(SchemaError::InvalidSchema {
                    kind: "JSON",
                    origin: Some(format!("subject '{subject}' version {}", latest.version)),
                    message: "the latest version is not a JSON Schema".into(),
                });
            }
            latest.id
        } else if c.auto_register {
            self.registry.register(subject, &self.registered).await?
        } else {
            self.registry.lookup(subject, &self.registered).await?.id
        };
        lock(&self.ids).insert(topic.to_owned(), id);
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RIDE: &str = r#"{"title":"nyc.Ride","type":"object","properties":{
        "ride_id":{"type":"integer"},"zone":{"type":["string","null"]},
        "fare":{"type":"number","minimum":0},"tips":{"type":"array","items":{"type":"number"}}},
        "required":["ride_id","fare"],"additionalProperties":false}"#;

    #[test]
    fn values_are_checked_against_the_schema_naming_the_path() {
        let c = Compiled::new(RIDE, "test").unwrap();
        #[rustfmt::skip]
        let cases = [
            (json!({"ride_id": 1, "fare": 2.5}),                      None),
            (json!({"ride_id": 1, "fare": 2.5, "zone": null}),        None),
            (json!({"ride_id": "1", "fare": 2.5}),                    Some("/ride_id: ")),
            (json!({"ride_id": 1}),                                   Some("$: \"fare\" is a required property")),
            (json!({"ride_id": 1, "fare": -1}),                       Some("/fare: -1 is less than the minimum of 0")),
            (json!({"ride_id": 1, "fare": 1, "tips": [1, "x"]}),      Some("/tips/1: ")),
            (json!({"ride_id": 1, "fare": 1, "extra": true}),         Some("$: Additional properties are not allowed")),
        ];
        for (value, want) in cases {
            match (c.check(&value), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.starts_with(w) || e.contains(w), "{value}: {e}"),
                (got, want) => panic!("{value}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(Compiled::title(RIDE).as_deref(), Some("nyc.Ride"));
    }

    #[test]
    fn a_document_that_is_not_a_json_schema_is_refused_naming_where_it_came_from() {
        for (text, want) in [
            ("{", "not JSON"),
            (r#"{"type": 12}"#, ""),
            (r#"{"$ref": "https://example.com/other.json"}"#, ""),
        ] {
            let e = Compiled::new(text, "subject 's' version 2")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("invalid JSON schema (subject 's' version 2): "),
                "{e}"
            );
            assert!(e.contains(want), "{e}");
        }
    }
}
