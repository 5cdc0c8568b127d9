//! Protobuf in the schema registry's wire format: a serializer that registers (or looks up)
//! its `.proto` schema, with the files it imports as references, and frames each message with
//! the schema id and the message's indexes in its file; a deserializer that fetches the
//! writer's schema by id, compiles it with its references, and decodes the message the
//! indexes name.
//!
//! Messages are described at run time (`prost_reflect` dynamic messages, re-exported as
//! [`prost_reflect`]) from `.proto` text compiled in pure Rust; prost types go in and come
//! out through [`ProtobufSerializer::serialize_prost`] and [`ProtobufRecord::into_prost`].
//! JSON is the proto3 JSON mapping (lowerCamelCase names, 64-bit integers as strings, enums
//! by name, every field printed, defaults too, as the Java tools print it).
//!
//! Evolution is Protobuf's own: a reader schema decodes what was written with an older or
//! newer writer by field number (added fields read as their defaults, removed fields are kept
//! as unknown fields).

pub use prost_reflect;

use super::cache::{lock, Writers};
use super::error::{Result, SchemaError};
use super::registry::{Schema, SchemaReference, SchemaRegistry, SchemaType};
use super::subject::Part;
use super::wire;
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FileDescriptor, MessageDescriptor, ReflectMessage as _,
};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The name the schema itself is compiled under (the registry keeps no file name for it; the
/// angle brackets keep it apart from any import's name).
const MAIN_FILE: &str = "<schema>.proto";

/// Whether an import is one of Protobuf's well-known types, which every registry and every
/// compiler knows without a reference.
fn well_known(name: &str) -> bool {
    name.starts_with("google/protobuf/")
}

/// `.proto` sources by name, for the compiler.
struct Sources(HashMap<String, String>);

impl FileResolver for Sources {
    fn open_file(&self, name: &str) -> std::result::Result<File, protox::Error> {
        match self.0.get(name) {
            Some(text) => File::from_source(name, text),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// A `.proto` schema compiled with the files it imports.
#[derive(Debug)]
struct Parsed {
    file: FileDescriptor,
}

impl Parsed {
    /// Compiles `text` with `imports` (name, text); Protobuf's well-known types need none.
    fn parse(text: &str, imports: &[(String, String)], origin: &str) -> Result<Parsed> {
        let mut sources: HashMap<String, String> = imports.iter().cloned().collect();
        sources.insert(MAIN_FILE.to_owned(), text.to_owned());
        let mut chain = ChainFileResolver::new();
        chain.add(Sources(sources));
        chain.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(chain);
        compiler.include_imports(true);
        let invalid = |message: String| SchemaError::InvalidSchema {
            kind: "Protobuf",
            origin: Some(origin.to_owned()),
            message: one_line(&message),
        };
        compiler
            .open_file(MAIN_FILE)
            .map_err(|e| invalid(e.to_string()))?;
        let pool: DescriptorPool = compiler.descriptor_pool();
        let file = pool
            .get_file_by_name(MAIN_FILE)
            .ok_or_else(|| invalid("the compiled schema is missing".into()))?;
        Ok(Parsed { file })
    }

    /// The message `name` names (its full name, or its name within the file's package), or
    /// the file's first message.
    fn message(&self, name: Option<&str>, origin: &str) -> Result<MessageDescriptor> {
        let invalid = |message: String| SchemaError::InvalidSchema {
            kind: "Protobuf",
            origin: Some(origin.to_owned()),
            message,
        };
        let Some(name) = name else {
            return self
                .file
                .messages()
                .next()
                .ok_or_else(|| invalid("the file declares no message".into()));
        };
        let pool = self.file.parent_pool();
        let package = self.file.package_name();
        pool.get_message_by_name(name)
            .or_else(|| {
                (!package.is_empty())
                    .then(|| pool.get_message_by_name(&format!("{package}.{name}")))
                    .flatten()
            })
            .filter(|m| m.parent_file() == self.file)
            .ok_or_else(|| {
                let declared: Vec<String> = self
                    .file
                    .messages()
                    .map(|m| m.full_name().to_owned())
                    .collect();
                invalid(format!(
                    "no message '{name}' in the file (it declares {})",
                    declared.join(", ")
                ))
            })
    }

    /// The message the indexes of a record name: the top-level message at the first index,
    /// then nested messages at the next ones.
    fn message_at(&self, indexes: &[i32]) -> Option<MessageDescriptor> {
        let (first, rest) = indexes.split_first()?;
        let mut m = self.file.messages().nth(usize::try_from(*first).ok()?)?;
        for i in rest {
            let child = m.child_messages().nth(usize::try_from(*i).ok()?)?;
            m = child;
        }
        Some(m)
    }
}

/// A message's indexes in its file (the inverse of [`Parsed::message_at`]).
fn indexes_of(message: &MessageDescriptor) -> Vec<i32> {
    let position = |siblings: Vec<MessageDescriptor>, m: &MessageDescriptor| {
        siblings
            .iter()
            .position(|s| s.full_name() == m.full_name())
            .map_or(0, |i| i32::try_from(i).unwrap_or(i32::MAX))
    };
    let mut path = Vec::new();
    let mut m = message.clone();
    while let Some(parent) = m.parent_message() {
        path.push(position(parent.child_messages().collect(), &m));
        m = parent;
    }
    path.push(position(m.parent_file().messages().collect(), &m));
    path.reverse();
    path
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How messages print as JSON: the proto3 JSON mapping with every field, as Java's
/// `JsonFormat` prints it with default values included.
fn json_options() -> prost_reflect::SerializeOptions {
    prost_reflect::SerializeOptions::new().skip_default_fields(false)
}

/// A record read by [`ProtobufDeserializer`].
#[derive(Debug, Clone)]
pub struct ProtobufRecord {
    /// The schema id the record was written with.
    pub schema_id: u32,
    /// The message indexes the record carried (which message of the schema's file).
    pub indexes: Vec<i32>,
    /// The message, described by the reader schema when the deserializer has one.
    pub message: DynamicMessage,
}

impl ProtobufRecord {
    /// The message in the proto3 JSON mapping.
    ///
    /// # Errors
    /// [`SchemaError::Decode`] for a value JSON cannot hold (a non-finite double in a field
    /// the mapping cannot name).
    pub fn to_json(&self) -> Result<serde_json::Value> {
        self.message
            .serialize_with_options(serde_json::value::Serializer, &json_options())
            .map_err(|e| self.decode_error(e.to_string()))
    }

    /// The message as plain JSON for a pipeline: field names as the `.proto` declares them,
    /// 64-bit integers as numbers, every field (defaults too); well-known types as the
    /// proto3 mapping gives them (a `Timestamp` as an RFC 3339 string).
    /// [`ProtobufSerializer::serialize_json`] takes it back.
    ///
    /// # Errors
    /// As [`Self::to_json`].
    pub fn to_plain_json(&self) -> Result<serde_json::Value> {
        let options = json_options()
            .stringify_64_bit_integers(false)
            .use_proto_field_name(true);
        self.message
            .serialize_with_options(serde_json::value::Serializer, &options)
            .map_err(|e| self.decode_error(e.to_string()))
    }

    /// [`Self::to_json`] as one line of text, fields in their declaration order.
    ///
    /// # Errors
    /// As [`Self::to_json`].
    pub fn to_json_string(&self) -> Result<String> {
        let mut out = serde_json::Serializer::new(Vec::new());
        self.message
            .serialize_with_options(&mut out, &json_options())
            .map_err(|e| self.decode_error(e.to_string()))?;
        String::from_utf8(out.into_inner()).map_err(|e| self.decode_error(e.to_string()))
    }

    /// The message as a prost type.
    ///
    /// # Errors
    /// [`SchemaError::Decode`] when the message does not decode as `T`.
    pub fn into_prost<T: prost::Message + Default>(self) -> Result<T> {
        self.message
            .transcode_to::<T>()
            .map_err(|e| self.decode_error(e.to_string()))
    }

    fn decode_error(&self, message: String) -> SchemaError {
        SchemaError::Decode {
            id: self.schema_id,
            message,
        }
    }
}

/// Compiles a registered schema with its references (fetched from the registry).
async fn parse_registered(
    registry: &SchemaRegistry,
    schema: &Schema,
    origin: &str,
) -> Result<Parsed> {
    if schema.schema_type != SchemaType::Protobuf {
        return Err(SchemaError::InvalidSchema {
            kind: "Protobuf",
            origin: Some(origin.to_owned()),
            message: format!(
                "the registry holds a {} schema there, not Protobuf",
                schema.schema_type.name()
            ),
        });
    }
    let imports = registry.referenced(schema, origin).await?;
    Parsed::parse(&schema.text, &imports, origin)
}

/// Reads Protobuf records in the wire format.
///
/// # Examples
/// ```no_run
/// use onceflow::schema::{ProtobufDeserializer, RegistryConfig, SchemaRegistry};
/// # async fn f(record_value: &[u8]) -> Result<(), onceflow::schema::SchemaError> {
/// let registry = SchemaRegistry::new(RegistryConfig::from_properties([
///     ("schema.registry.url", "http://127.0.0.1:8081"),
/// ])?)?;
/// let protobuf = ProtobufDeserializer::new(registry);
/// let record = protobuf.deserialize(record_value).await?;
/// println!("{}", record.to_json_string()?);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ProtobufDeserializer {
    registry: SchemaRegistry,
    reader: Option<MessageDescriptor>,
    writers: Writers<Parsed>,
}

impl ProtobufDeserializer {
    /// A deserializer that gives each message as its writer's schema describes it.
    pub fn new(registry: SchemaRegistry) -> ProtobufDeserializer {
        ProtobufDeserializer {
            registry,
            reader: None,
            writers: Writers::new(),
        }
    }

    /// Decodes every record as `message` (its full name, or `None` for the first message)
    /// of `schema` (a `.proto` file whose imports are Protobuf's well-known types), whatever
    /// schema it was written with.
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`] when `schema` does not compile or has no such message.
    pub fn with_reader_schema(
        mut self,
        schema: &str,
        message: Option<&str>,
    ) -> Result<ProtobufDeserializer> {
        let origin = "the reader schema";
        let parsed = Parsed::parse(schema, &[], origin)?;
        self.reader = Some(parsed.message(message, origin)?);
        Ok(self)
    }

    /// Reads one record value (or key).
    ///
    /// # Errors
    /// [`SchemaError::Framing`] for a record not in the wire format (message indexes
    /// included); [`SchemaError::UnknownId`] for a schema id the registry does not know;
    /// [`SchemaError::Decode`] for indexes that name no message of the schema, or a payload
    /// that does not decode as the message; the registry's errors.
    pub async fn deserialize(&self, record: &[u8]) -> Result<ProtobufRecord> {
        let (id, indexes, payload) = wire::unframe_protobuf(record)?;
        let writer = self.writer(id).await?;
        let described = match &self.reader {
            Some(reader) => reader.clone(),
            None => writer.message_at(&indexes).ok_or_else(|| SchemaError::Decode {
                id,
                message: format!(
                    "the message indexes {indexes:?} name no message of the schema: the record does not match its schema id"
                ),
            })?,
        };
        let message =
            DynamicMessage::decode(described, payload).map_err(|e| SchemaError::Decode {
                id,
                message: one_line(&e.to_string()),
            })?;
        Ok(ProtobufRecord {
            schema_id: id,
            indexes,
            message,
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

/// Writes Protobuf records in the wire format, for one message of one `.proto` schema.
///
/// The schema id comes from the registry per topic, by the subject name strategy of the
/// part (the record strategies use the message's full name): registered with
/// `auto.register.schemas` (the default; each imported file first, under its own name as the
/// subject, as the Java serializers do; Protobuf's well-known types are not registered),
/// looked up otherwise, or with `use.latest.version` the subject's latest schema, whose
/// message of the same full name frames the record.
///
/// # Examples
/// ```no_run
/// use onceflow::schema::{Part, ProtobufSerializer, RegistryConfig, SchemaRegistry};
/// # async fn f() -> Result<(), onceflow::schema::SchemaError> {
/// let registry = SchemaRegistry::new(RegistryConfig::from_properties([
///     ("schema.registry.url", "http://127.0.0.1:8081"),
/// ])?)?;
/// let schema = r#"syntax = "proto3"; package nyc; message Ride { int64 id = 1; }"#;
/// let protobuf = ProtobufSerializer::new(registry, schema, Part::Value)?;
/// let bytes = protobuf.serialize_json("rides", &serde_json::json!({"id": "7"})).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ProtobufSerializer {
    registry: SchemaRegistry,
    part: Part,
    parsed: Arc<Parsed>,
    message: MessageDescriptor,
    text: String,
    imports: Vec<(String, String)>,
    ids: Mutex<HashMap<String, (u32, Vec<i32>)>>,
}

impl ProtobufSerializer {
    /// A serializer of the first message of `schema` (a `.proto` file whose imports, if any,
    /// are Protobuf's well-known types) for the record `part`.
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`] when `schema` does not compile or declares no message.
    pub fn new(registry: SchemaRegistry, schema: &str, part: Part) -> Result<ProtobufSerializer> {
        ProtobufSerializer::with_imports(registry, schema, Vec::new(), part)
    }

    /// A serializer of the first message of `schema`, which imports `imports` (each file's
    /// name as the `import` statement gives it, and its text).
    ///
    /// # Errors
    /// As [`Self::new`]; an import neither given nor well known.
    pub fn with_imports(
        registry: SchemaRegistry,
        schema: &str,
        imports: Vec<(String, String)>,
        part: Part,
    ) -> Result<ProtobufSerializer> {
        let origin = "the schema to write with";
        let parsed = Parsed::parse(schema, &imports, origin)?;
        let message = parsed.message(None, origin)?;
        Ok(ProtobufSerializer {
            registry,
            part,
            parsed: Arc::new(parsed),
            message,
            text: schema.to_owned(),
            imports,
            ids: Mutex::new(HashMap::new()),
        })
    }

    /// A serializer of the first message of the `.proto` file at `path`, whose imports are
    /// read from the directory it is in (as `protoc -I DIR` would; well-known types need no
    /// file).
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`] naming the file when it or an import cannot be read or
    /// does not compile.
    pub fn from_file(
        registry: SchemaRegistry,
        path: &std::path::Path,
        part: Part,
    ) -> Result<ProtobufSerializer> {
        let origin = path.display().to_string();
        let invalid = |message: String| SchemaError::InvalidSchema {
            kind: "Protobuf",
            origin: Some(origin.clone()),
            message: one_line(&message),
        };
        let text = std::fs::read_to_string(path).map_err(|e| invalid(e.to_string()))?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let mut chain = ChainFileResolver::new();
        chain.add(Sources(HashMap::from([(
            MAIN_FILE.to_owned(),
            text.clone(),
        )])));
        chain.add(GoogleFileResolver::new());
        chain.add(protox::file::IncludeFileResolver::new(dir.to_path_buf()));
        let files = protox::file::IncludeFileResolver::new(dir.to_path_buf());
        let mut compiler = protox::Compiler::with_file_resolver(chain);
        compiler.include_imports(true);
        compiler
            .open_file(MAIN_FILE)
            .map_err(|e| invalid(e.to_string()))?;
        let mut imports = Vec::new();
        for file in compiler.files() {
            let name = file.name();
            if name == MAIN_FILE || well_known(name) {
                continue;
            }
            let opened = files.open_file(name).map_err(|e| invalid(e.to_string()))?;
            let source = opened
                .source()
                .ok_or_else(|| invalid(format!("{name}: no source text")))?;
            imports.push((name.to_owned(), source.to_owned()));
        }
        ProtobufSerializer::with_imports(registry, &text, imports, part)
    }

    /// Writes the message `name` (its full name, or its name in the file's package) instead of
    /// the file's first.
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`] when the file declares no such message.
    pub fn for_message(mut self, name: &str) -> Result<ProtobufSerializer> {
        self.message = self
            .parsed
            .message(Some(name), "the schema to write with")?;
        Ok(self)
    }

    /// The message written (its descriptor, for building [`DynamicMessage`]s).
    pub fn message(&self) -> &MessageDescriptor {
        &self.message
    }

    /// The subject records of `topic` are registered under.
    ///
    /// # Errors
    /// [`SchemaError::Config`] for an invalid subject name strategy setting.
    pub fn subject(&self, topic: &str) -> Result<String> {
        self.registry
            .config()
            .subject(topic, self.part, Some(self.message.full_name()))
    }

    /// Writes `message` (of the serializer's message type) for `topic`.
    ///
    /// # Errors
    /// [`SchemaError::Encode`] for a message of another type; the registry's errors (an
    /// unregistered schema without `auto.register.schemas`, an incompatible one).
    pub async fn serialize(&self, topic: &str, message: &DynamicMessage) -> Result<Vec<u8>> {
        if message.descriptor().full_name() != self.message.full_name() {
            return Err(self.encode_error(
                topic,
                format!(
                    "a {} message given to a serializer of {}",
                    message.descriptor().full_name(),
                    self.message.full_name()
                ),
            ));
        }
        self.framed(topic, &message.encode_to_vec()).await
    }

    /// Writes JSON in the proto3 JSON mapping.
    ///
    /// # Errors
    /// [`SchemaError::Encode`] naming what does not fit the message; as [`Self::serialize`].
    pub async fn serialize_json(&self, topic: &str, value: &serde_json::Value) -> Result<Vec<u8>> {
        let message = DynamicMessage::deserialize(self.message.clone(), value)
            .map_err(|e| self.encode_error(topic, e.to_string()))?;
        self.framed(topic, &message.encode_to_vec()).await
    }

    /// Writes one JSON text in the proto3 JSON mapping.
    ///
    /// # Errors
    /// As [`Self::serialize_json`]; text that is not one JSON value.
    pub async fn serialize_str(&self, topic: &str, text: &str) -> Result<Vec<u8>> {
        let mut de = serde_json::Deserializer::from_str(text);
        let message = DynamicMessage::deserialize(self.message.clone(), &mut de)
            .and_then(|m| de.end().map(|()| m))
            .map_err(|e| self.encode_error(topic, e.to_string()))?;
        self.framed(topic, &message.encode_to_vec()).await
    }

    /// Writes a prost message, which must be the serializer's message type (its bytes are
    /// written as they are).
    ///
    /// # Errors
    /// As [`Self::serialize`].
    pub async fn serialize_prost<T: prost::Message>(
        &self,
        topic: &str,
        value: &T,
    ) -> Result<Vec<u8>> {
        self.framed(topic, &value.encode_to_vec()).await
    }

    fn encode_error(&self, topic: &str, message: String) -> SchemaError {
        SchemaError::Encode {
            subject: self.subject(topic).unwrap_or_else(|_| topic.to_owned()),
            message,
        }
    }

    async fn framed(&self, topic: &str, payload: &[u8]) -> Result<Vec<u8>> {
        let (id, indexes) = self.id_for(topic).await?;
        Ok(wire::frame_protobuf(id, &indexes, payload))
    }

    /// The schema id and the message indexes for `topic`, cached per topic.
    async fn id_for(&self, topic: &str) -> Result<(u32, Vec<i32>)> {
        if let Some(found) = lock(&self.ids).get(topic) {
            return Ok(found.clone());
        }
        let subject = self.subject(topic)?;
        let c = self.registry.config();
        let found = if c.use_latest_version {
            let latest = self.registry.latest(&subject).await?;
            let origin = format!("subject '{subject}' version {}", latest.version);
            let parsed = parse_registered(&self.registry, &latest.schema, &origin).await?;
            let message = parsed.message(Some(self.message.full_name()), &origin)?;
            (latest.id, indexes_of(&message))
        } else {
            let schema = self.registered(c.auto_register).await?;
            let id = if c.auto_register {
                self.registry.register(&subject, &schema).await?
            } else {
                self.registry.lookup(&subject, &schema).await?.id
            };
            (id, indexes_of(&self.message))
        };
        lock(&self.ids).insert(topic.to_owned(), found.clone());
        Ok(found)
    }

    /// The schema as registered: its text with a reference per import that is not a
    /// well-known type (each import registered first under its own name when `register`).
    async fn registered(&self, register: bool) -> Result<Schema> {
        let texts: HashMap<&str, &str> = self
            .imports
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        // Each file's references, dependencies before the files that import them.
        let mut versions: HashMap<String, i32> = HashMap::new();
        let pool = self.parsed.file.parent_pool();
        for file in pool.files() {
            let name = file.name();
            if name == MAIN_FILE || well_known(name) {
                continue;
            }
            let Some(text) = texts.get(name) else {
                continue;
            };
            let schema = Schema {
                schema_type: SchemaType::Protobuf,
                text: (*text).to_owned(),
                references: references(&file, &versions),
            };
            if register {
                self.registry.register(name, &schema).await?;
            }
            let found = self.registry.lookup(name, &schema).await?;
            versions.insert(name.to_owned(), found.version);
        }
        Ok(Schema {
            schema_type: SchemaType::Protobuf,
            text: self.text.clone(),
            references: references(&self.parsed.file, &versions),
        })
    }
}

/// A file's references: one per import that is not a well-known type, at the version
/// registered under the import's name.
fn references(file: &FileDescriptor, versions: &HashMap<String, i32>) -> Vec<SchemaReference> {
    file.dependencies()
        .filter(|d| !well_known(d.name()))
        .map(|d| SchemaReference {
            name: d.name().to_owned(),
            subject: d.name().to_owned(),
            version: versions.get(d.name()).copied().unwrap_or(1),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RIDES: &str = r#"
        syntax = "proto3";
        package nyc;
        import "google/protobuf/timestamp.proto";
        message Ride {
          int64 id = 1;
          string zone = 2;
          google.protobuf.Timestamp at = 3;
          message Stop { string name = 1; message Place { double lat = 1; } }
          map<string, string> extra = 4;
          message Leg { int32 n = 1; }
        }
        message Fare { double amount = 1; }
    "#;

    fn parsed() -> Parsed {
        Parsed::parse(RIDES, &[], "test").unwrap()
    }

    #[test]
    fn message_indexes_name_messages_and_back() {
        let p = parsed();
        // (indexes, the message they name); map entries are nested messages too, in
        // declaration order, as the descriptor lists them.
        #[rustfmt::skip]
        let cases: &[(&[i32], Option<&str>)] = &[
            (&[0],       Some("nyc.Ride")),
            (&[1],       Some("nyc.Fare")),
            (&[0, 0],    Some("nyc.Ride.Stop")),
            (&[0, 0, 0], Some("nyc.Ride.Stop.Place")),
            (&[0, 1],    Some("nyc.Ride.ExtraEntry")),
            (&[0, 2],    Some("nyc.Ride.Leg")),
            (&[2],       None),
            (&[0, 3],    None),
            (&[-1],      None),
            (&[],        None),
        ];
        for (indexes, want) in cases {
            let got = p.message_at(indexes);
            assert_eq!(got.as_ref().map(|m| m.full_name()), *want, "{indexes:?}");
            if let Some(m) = got {
                assert_eq!(indexes_of(&m), *indexes);
            }
        }
    }

    #[test]
    fn messages_are_found_by_full_or_package_relative_name() {
        let p = parsed();
        #[rustfmt::skip]
        let cases: &[(Option<&str>, std::result::Result<&str, &str>)] = &[
            (None,                  Ok("nyc.Ride")),
            (Some("nyc.Fare"),      Ok("nyc.Fare")),
            (Some("Fare"),          Ok("nyc.Fare")),
            (Some("Ride.Leg"),      Ok("nyc.Ride.Leg")),
            (Some("Trip"),          Err("no message 'Trip' in the file (it declares nyc.Ride, nyc.Fare)")),
            (Some("google.protobuf.Timestamp"), Err("no message 'google.protobuf.Timestamp'")),
        ];
        for (name, want) in cases {
            match (p.message(*name, "test"), want) {
                (Ok(m), Ok(w)) => assert_eq!(m.full_name(), *w),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{e}"),
                (got, want) => panic!("{name:?}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_schema_that_does_not_compile_is_named_on_one_line() {
        #[rustfmt::skip]
        let cases: &[(&str, &str)] = &[
            ("syntax = \"proto3\"; message A { Missing m = 1; }", "Missing"),
            ("syntax = \"proto3\"; import \"other.proto\"; message A {}", "other.proto"),
            ("message {", "Protobuf"),
            ("syntax = \"proto3\";", "declares no message"),
        ];
        for (text, want) in cases {
            let e = Parsed::parse(text, &[], "f.proto")
                .and_then(|p| p.message(None, "f.proto"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(want) && e.contains("f.proto") && !e.contains('\n'),
                "{e}"
            );
        }
        // An import given by the caller compiles.
        let imports = vec![(
            "other.proto".to_owned(),
            "syntax = \"proto3\"; package o; message B {}".to_owned(),
        )];
        let p = Parsed::parse(
            "syntax = \"proto3\"; import \"other.proto\"; message A { o.B b = 1; }",
            &imports,
            "f",
        )
        .unwrap();
        assert_eq!(references(&p.file, &HashMap::new())[0].name, "other.proto");
    }

    #[test]
    fn json_prints_every_field_in_the_proto3_mapping_and_reads_back() {
        let p = parsed();
        let ride = p.message(None, "t").unwrap();
        let json = serde_json::json!({"id": "7", "zone": "JFK", "at": "2024-01-01T00:00:00Z", "extra": {"a": "b"}});
        let m = DynamicMessage::deserialize(ride.clone(), &json).unwrap();
        let r = ProtobufRecord {
            schema_id: 1,
            indexes: vec![0],
            message: m,
        };
        assert_eq!(r.to_json().unwrap(), json);
        let empty = ProtobufRecord {
            schema_id: 1,
            indexes: vec![0],
            message: DynamicMessage::new(ride),
        };
        assert_eq!(
            empty.to_json_string().unwrap(),
            r#"{"id":"0","zone":"","extra":{}}"#
        );
    }
}
