//! The schema registry on the command line: `-r URL`, the registry's `-X` properties,
//! `consume -s [key=|value=]avro|protobuf|json-schema` and
//! `produce --key-schema/--value-schema FILE.avsc|FILE.proto[#Message]|FILE.json`.

use super::error::{CliError, Result};
use super::props::Conn;
use onceflow::schema::{
    AvroDeserializer, AvroSerializer, JsonSchemaDeserializer, JsonSchemaSerializer, Part,
    ProtobufDeserializer, ProtobufSerializer, RegistryConfig, SchemaError, SchemaRegistry,
};
use serde_json::value::RawValue;
use serde_json::Value as Json;

/// Properties both the Kafka client and the registry client take.
fn shared(name: &str) -> bool {
    matches!(
        name,
        "default.api.timeout.ms" | "retry.backoff.ms" | "retry.backoff.max.ms"
    )
}

/// The `-r` flag.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RegistryArgs {
    /// Schema registry URL (schema.registry.url), e.g. http://127.0.0.1:8081; registry
    /// settings go in -X or -F with the Java serializers' names (basic.auth.user.info,
    /// schema.registry.ssl.truststore.location, auto.register.schemas, ...).
    #[arg(short = 'r', long = "schema-registry", value_name = "URL")]
    pub url: Option<String>,
}

impl RegistryArgs {
    /// The registry client, when `needed` (a flag asked for a schema format); an error when
    /// registry settings are given but nothing uses them, or one is needed but no URL given.
    pub fn registry(&self, conn: &Conn, needed: Option<&str>) -> Result<Option<SchemaRegistry>> {
        let mut props: Vec<(String, String)> = Vec::new();
        for (k, v) in conn.all_properties()? {
            if RegistryConfig::owns(&k) || (shared(&k) && needed.is_some()) {
                props.push((k, v));
            }
        }
        if let Some(url) = &self.url {
            props.push(("schema.registry.url".into(), url.clone()));
        }
        let Some(flag) = needed else {
            if let Some((k, _)) = props.iter().find(|(k, _)| RegistryConfig::owns(k)) {
                let k = if k == "schema.registry.url" && self.url.is_some() {
                    "-r"
                } else {
                    k
                };
                return Err(CliError::Usage(format!(
                    "{k} is a schema registry setting, but nothing here reads or writes through the registry: add -s value=avro (consume) or --value-schema FILE (produce), or drop it"
                )));
            }
            return Ok(None);
        };
        if !props.iter().any(|(k, _)| k == "schema.registry.url") {
            return Err(CliError::Usage(format!(
                "{flag} needs the schema registry: give its URL with -r, e.g. -r http://127.0.0.1:8081"
            )));
        }
        Ok(Some(SchemaRegistry::new(RegistryConfig::from_properties(
            props,
        )?)?))
    }
}

/// A format a record part is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serde {
    /// Avro in the registry's wire format.
    Avro,
    /// Protobuf in the registry's wire format.
    Protobuf,
    /// JSON Schema in the registry's wire format.
    JsonSchema,
}

/// What `-s` says for keys and values.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Serdes {
    pub key: Option<Serde>,
    pub value: Option<Serde>,
}

impl Serdes {
    /// Reads `-s` flags: `key=FORMAT`, `value=FORMAT`, or `FORMAT` for both (kcat's syntax);
    /// FORMAT is `avro`, `protobuf` or `json-schema`.
    pub fn parse(flags: &[String]) -> Result<Serdes> {
        let mut s = Serdes::default();
        for f in flags {
            let (part, name) = match f.split_once('=') {
                Some((p, n)) => (Some(p), n),
                None => (None, f.as_str()),
            };
            let serde = match name {
                "avro" => Serde::Avro,
                "json-schema" | "json_schema" => Serde::JsonSchema,
                "protobuf" => Serde::Protobuf,
                _ => {
                    return Err(CliError::Usage(format!(
                        "-s {f}: unknown format '{name}': use avro, protobuf or json-schema (as -s value=avro, -s key=avro or -s avro for both)"
                    )))
                }
            };
            match part {
                Some("key") => s.key = Some(serde),
                Some("value") => s.value = Some(serde),
                None => {
                    s.key = Some(serde);
                    s.value = Some(serde);
                }
                Some(other) => {
                    return Err(CliError::Usage(format!(
                        "-s {f}: '{other}' is neither key nor value"
                    )))
                }
            }
        }
        Ok(s)
    }

    /// The first flag that needs the registry, for messages.
    pub fn needs_registry(&self) -> Option<&'static str> {
        (self.key.is_some() || self.value.is_some()).then_some("-s")
    }
}

/// One part's decoder.
enum Decoder {
    Avro(AvroDeserializer),
    Protobuf(ProtobufDeserializer),
    JsonSchema(JsonSchemaDeserializer),
}

impl Decoder {
    /// The record part as plain JSON (unions unwrapped, 64-bit integers as numbers), as a
    /// pipeline reads it.
    async fn to_plain_json(&self, bytes: &[u8]) -> std::result::Result<Vec<u8>, SchemaError> {
        let value = match self {
            Decoder::Avro(d) => d.deserialize(bytes).await?.to_plain_json()?,
            Decoder::Protobuf(d) => d.deserialize(bytes).await?.to_plain_json()?,
            Decoder::JsonSchema(d) => return Ok(d.deserialize(bytes).await?.text.into_bytes()),
        };
        Ok(value.to_string().into_bytes())
    }

    /// The record part as one line of JSON.
    async fn to_json(&self, bytes: &[u8]) -> std::result::Result<String, SchemaError> {
        match self {
            Decoder::Avro(d) => d.deserialize(bytes).await?.to_json_string(),
            Decoder::Protobuf(d) => d.deserialize(bytes).await?.to_json_string(),
            Decoder::JsonSchema(d) => Ok(d.deserialize(bytes).await?.text),
        }
    }
}

/// Decodes record keys and values as `-s` says.
pub struct Decoders {
    key: Option<Decoder>,
    value: Option<Decoder>,
}

impl Decoders {
    pub fn new(serdes: &Serdes, registry: Option<&SchemaRegistry>) -> Decoders {
        let make = |s: Option<Serde>| match (s, registry) {
            (Some(Serde::Avro), Some(r)) => Some(Decoder::Avro(AvroDeserializer::new(r.clone()))),
            (Some(Serde::Protobuf), Some(r)) => {
                Some(Decoder::Protobuf(ProtobufDeserializer::new(r.clone())))
            }
            (Some(Serde::JsonSchema), Some(r)) => {
                Some(Decoder::JsonSchema(JsonSchemaDeserializer::new(r.clone())))
            }
            _ => None,
        };
        Decoders {
            key: make(serdes.key),
            value: make(serdes.value),
        }
    }

    /// The record's value as plain JSON when `-s` decodes values (else as it is), or the
    /// error naming the record.
    pub async fn plain_value(
        &self,
        r: &onceflow::client::ConsumerRecord,
    ) -> Result<Option<bytes::Bytes>> {
        match (&self.value, &r.value) {
            (Some(d), Some(b)) => d
                .to_plain_json(b)
                .await
                .map(|v| Some(v.into()))
                .map_err(|e| {
                    CliError::Input(format!(
                        "{}-{} offset {}: the value: {e}",
                        r.topic, r.partition, r.offset
                    ))
                }),
            _ => Ok(r.value.clone()),
        }
    }

    /// Whether values are decoded (not printed as their raw text).
    pub fn decodes_values(&self) -> bool {
        self.value.is_some()
    }

    /// The key and the value as JSON text (decoded where `-s` says, record fields in schema
    /// order; else `raw`'s rendering), or the error naming the record.
    pub async fn decode(
        &self,
        r: &onceflow::client::ConsumerRecord,
        raw: impl Fn(&Option<bytes::Bytes>) -> Json,
    ) -> Result<(Box<RawValue>, Box<RawValue>)> {
        let key = decode_part(r, self.key.as_ref(), &r.key, "key", &raw).await?;
        let value = decode_part(r, self.value.as_ref(), &r.value, "value", &raw).await?;
        Ok((key, value))
    }
}

async fn decode_part(
    r: &onceflow::client::ConsumerRecord,
    d: Option<&Decoder>,
    bytes: &Option<bytes::Bytes>,
    part: &str,
    raw: impl Fn(&Option<bytes::Bytes>) -> Json,
) -> Result<Box<RawValue>> {
    let failed = |e: String| {
        CliError::Failed(format!(
            "{}-{} offset {}: the {part}: {e}",
            r.topic, r.partition, r.offset
        ))
    };
    let text = match (d, bytes) {
        (Some(d), Some(b)) => d.to_json(b).await.map_err(|e| failed(e.to_string()))?,
        _ => raw(bytes).to_string(),
    };
    RawValue::from_string(text).map_err(|e| failed(e.to_string()))
}

/// A record part's encoder, from `--key-schema` / `--value-schema`.
pub enum Encoder {
    /// An Avro schema (`.avsc`).
    Avro(AvroSerializer),
    /// A Protobuf schema (`.proto`).
    Protobuf(ProtobufSerializer),
    /// A JSON Schema (`.json`).
    JsonSchema(JsonSchemaSerializer),
}

impl Encoder {
    /// A JSON line's value in the wire format for `topic`.
    pub async fn encode(
        &self,
        topic: &str,
        line: &str,
    ) -> std::result::Result<Vec<u8>, SchemaError> {
        match self {
            Encoder::Avro(s) => {
                let json: Json = serde_json::from_str(line).map_err(|e| SchemaError::Encode {
                    subject: s.subject(topic).unwrap_or_else(|_| topic.to_owned()),
                    message: format!("not JSON: {e}"),
                })?;
                s.serialize_json(topic, &json).await
            }
            Encoder::Protobuf(s) => s.serialize_str(topic, line).await,
            Encoder::JsonSchema(s) => s.serialize_str(topic, line).await,
        }
    }
}

/// `--key-schema` / `--value-schema`: an Avro schema (`.avsc`), a Protobuf schema
/// (`.proto`, its first message or the one named after `#`, imports read beside it) or a
/// JSON Schema (`.json`).
pub fn serializer(registry: &SchemaRegistry, flag_value: &str, part: Part) -> Result<Encoder> {
    let flag = match part {
        Part::Key => "--key-schema",
        _ => "--value-schema",
    };
    let (file, message) = match flag_value.rsplit_once('#') {
        Some((f, m)) if f.ends_with(".proto") => (f, Some(m)),
        _ => (flag_value, None),
    };
    let path = std::path::Path::new(file);
    let bad = |e: SchemaError| CliError::Usage(format!("{flag} {flag_value}: {e}"));
    let read = || {
        std::fs::read_to_string(path)
            .map_err(|e| CliError::Usage(format!("cannot read {flag} {file}: {e}")))
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("avsc") => Ok(Encoder::Avro(
            AvroSerializer::new(registry.clone(), &read()?, part).map_err(bad)?,
        )),
        Some("json") => Ok(Encoder::JsonSchema(
            JsonSchemaSerializer::new(registry.clone(), &read()?, part).map_err(bad)?,
        )),
        Some("proto") => {
            let s = ProtobufSerializer::from_file(registry.clone(), path, part).map_err(bad)?;
            let s = match message {
                Some(m) => s.for_message(m).map_err(bad)?,
                None => s,
            };
            Ok(Encoder::Protobuf(s))
        }
        _ => Err(CliError::Usage(format!(
            "{flag} {flag_value}: name an Avro schema file ending in .avsc, a Protobuf schema ending in .proto (FILE.proto#Message for another than its first message) or a JSON Schema ending in .json"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_flags_table() {
        let s = |flags: &[&str]| {
            Serdes::parse(&flags.iter().map(|f| f.to_string()).collect::<Vec<_>>())
        };
        let avro = Some(Serde::Avro);
        type Case<'a> = (
            &'a [&'a str],
            std::result::Result<(Option<Serde>, Option<Serde>), &'a str>,
        );
        #[rustfmt::skip]
        let cases: &[Case] = &[
            (&[],                      Ok((None, None))),
            (&["value=avro"],          Ok((None, avro))),
            (&["key=avro"],            Ok((avro, None))),
            (&["avro"],                Ok((avro, avro))),
            (&["key=avro", "value=avro"], Ok((avro, avro))),
            (&["value=json-schema"],   Ok((None, Some(Serde::JsonSchema)))),
            (&["value=protobuf"],      Ok((None, Some(Serde::Protobuf)))),
            (&["value=thrift"],        Err("unknown format 'thrift'")),
            (&["header=avro"],         Err("'header' is neither key nor value")),
        ];
        for (flags, want) in cases {
            match (s(flags), want) {
                (Ok(got), Ok((k, v))) => assert_eq!((got.key, got.value), (*k, *v), "{flags:?}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{e}"),
                (got, want) => panic!("{flags:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    fn conn(props: &[&str]) -> Conn {
        Conn::for_tests(props)
    }

    #[test]
    fn registry_settings_go_to_the_registry_and_unused_ones_are_named() {
        let r = RegistryArgs {
            url: Some("http://r:8081".into()),
        };
        let registry = r
            .registry(
                &conn(&["basic.auth.user.info=a:b", "default.api.timeout.ms=3000"]),
                Some("-s"),
            )
            .unwrap()
            .unwrap();
        assert_eq!(registry.config().urls, ["http://r:8081"]);
        assert_eq!(registry.config().api_timeout.as_millis(), 3000);
        // The Kafka client does not see the registry's settings; a command without the
        // registry names them as unknown.
        let c = conn(&["basic.auth.user.info=a:b", "linger.ms=3"]);
        assert!(c
            .without_registry_properties()
            .unwrap()
            .producer(&[])
            .is_ok());
        let e = c.producer(&[]).unwrap_err().to_string();
        assert!(e.contains("basic.auth.user.info"), "{e}");
        // (-r, -X, the flag that needs the registry, the error)
        type Case<'a> = (Option<&'a str>, &'a [&'a str], Option<&'a str>, &'a str);
        #[rustfmt::skip]
        let cases: &[Case] = &[
            (Some("http://r"), &[],                           None,       "-r is a schema registry setting, but nothing here"),
            (None,             &["basic.auth.user.info=a:b"], None,       "basic.auth.user.info is a schema registry setting"),
            (None,             &[],                           Some("-s"), "-s needs the schema registry: give its URL with -r"),
            (Some("r:8081"),   &[],                           Some("-s"), "must start with http"),
        ];
        for (url, props, needed, want) in cases {
            let r = RegistryArgs {
                url: url.map(str::to_owned),
            };
            let e = r.registry(&conn(props), *needed).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        assert!(RegistryArgs::default()
            .registry(&conn(&[]), None)
            .unwrap()
            .is_none());
    }
}
