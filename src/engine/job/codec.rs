//! Record values in the formats of a job's Kafka ends: the source's values become the JSON the
//! pipeline reads ([`ValueDecoder`]), the pipeline's JSON becomes the sink's values
//! ([`ValueEncoder`]).
//!
//! Avro and Protobuf records become plain JSON (a union's value without its branch, decimals
//! and timestamps as numbers; Protobuf fields by their declared names, 64-bit integers as
//! numbers), so filters, projections, `key_by` and windows address their fields as they
//! address a JSON document's.
//!
//! Decoding runs in the source subtask's synchronous chain: a writer schema is fetched
//! beforehand, when a record carries an id the decoder has not seen
//! ([`ValueDecoder::learn`], awaited by the runtime before the record goes through the
//! chain). After that the serdes answer from their caches without waiting, so the chain polls
//! them once ([`FutureExt::now_or_never`]). A record the decoder cannot read (not in the wire
//! format, a schema id the registry does not know, a payload that does not fit its schema) is
//! a bad record for `errors.tolerance`; a registry that cannot be reached stops the job.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use bytes::Bytes;
use futures::FutureExt;
use serde_json::Value;

use std::sync::Arc;

use crate::engine::formats::{csv_line, csv_value, CsvColumn};
use crate::engine::job::spec::{RecordFormat, SinkSpec, SourceSpec};
use crate::engine::runtime::RuntimeError;
use crate::schema::{
    wire, AvroDeserializer, AvroSerializer, JsonSchemaDeserializer, JsonSchemaSerializer, Part,
    ProtobufDeserializer, ProtobufSerializer, RegistryConfig, SchemaError, SchemaRegistry,
};

/// The text of an output's string field `value`: what `format = "raw"` writes.
fn raw_value(topic: &str, text: &str) -> Result<Bytes, RuntimeError> {
    let failed = |reason: String| RuntimeError::Encode {
        what: format!("writing an output record to '{topic}' as raw text"),
        reason,
    };
    let value: Value =
        serde_json::from_str(text).map_err(|e| failed(format!("the output is not JSON ({e})")))?;
    match value.get("value") {
        Some(Value::String(s)) => Ok(Bytes::from(s.clone())),
        Some(other) => Err(failed(format!(
            "its field \"value\" is {other}, not a string: format = \"raw\" writes that field's text"
        ))),
        None => Err(failed(
            "it has no field \"value\": format = \"raw\" writes that string field's text (project one into it)".into(),
        )),
    }
}

/// The registry of a job's `[registry]` settings.
///
/// # Errors
/// [`RuntimeError::Schema`] for settings the registry client refuses.
pub(crate) fn registry(properties: &[(String, String)]) -> Result<SchemaRegistry, RuntimeError> {
    let schema = |source| RuntimeError::Schema {
        what: "the job's [registry]".into(),
        source,
    };
    let config = RegistryConfig::from_properties(properties.iter().cloned()).map_err(schema)?;
    SchemaRegistry::new(config).map_err(schema)
}

/// Why a record could not be decoded when its writer schema was not fetched first (a bug: the
/// runtime awaits the fetch before the chain).
pub(crate) const NOT_FETCHED: &str =
    "internal error: the record's writer schema was not fetched before it was decoded";

/// Which writer schemas a decoder holds, and the ids it cannot read, for the decoders that
/// fetch before the synchronous chain decodes (this module's docs).
#[derive(Debug, Default)]
pub(crate) struct WriterSchemas {
    /// Schema ids whose writer schema the serde holds.
    known: HashSet<u32>,
    /// Schema ids the registry does not know, or whose schema does not compile: why.
    failed: HashMap<u32, String>,
}

impl WriterSchemas {
    /// The schema id of `raw` when its writer schema is still to be fetched.
    pub(crate) fn unknown(&self, raw: &[u8]) -> Option<u32> {
        let (id, _) = wire::unframe(raw).ok()?;
        (!self.known.contains(&id) && !self.failed.contains_key(&id)).then_some(id)
    }

    /// Why `raw` cannot be read, when its schema id is one that failed.
    pub(crate) fn failure(&self, raw: &[u8]) -> Option<String> {
        if self.failed.is_empty() {
            return None;
        }
        let (id, _) = wire::unframe(raw).ok()?;
        self.failed.get(&id).cloned()
    }

    /// Takes what fetching id `id`'s writer schema (by reading a record of it) gave:
    /// remembered as known, or as failed when the registry does not know it or it does not
    /// compile.
    ///
    /// # Errors
    /// [`RuntimeError::Schema`] when the registry cannot answer (unreachable past
    /// `default.api.timeout.ms`, refused credentials): the job stops.
    pub(crate) fn settle(
        &mut self,
        id: u32,
        fetched: Result<(), SchemaError>,
    ) -> Result<(), RuntimeError> {
        match fetched {
            // The record's own payload may be at fault and the schema fine: seen as the
            // record is decoded.
            Ok(()) | Err(SchemaError::Decode { .. } | SchemaError::Framing(_)) => {
                self.known.insert(id);
                Ok(())
            }
            Err(e) if e.is_record_fault() => {
                self.failed.insert(id, e.to_string());
                Ok(())
            }
            Err(source) => Err(RuntimeError::Schema {
                what: format!("fetching the writer schema of id {id}"),
                source,
            }),
        }
    }
}

/// A value as the decoder read it.
#[derive(Debug, PartialEq)]
pub(crate) enum Decoded {
    /// The value as JSON.
    Value(Value),
    /// Why the record cannot be read (for `errors.tolerance`).
    Bad(String),
}

/// A source's record format with the registry it reads through (checked when the job
/// starts; each source subtask makes its own [`ValueDecoder`] of it).
#[derive(Clone)]
pub(crate) enum SourceFormat {
    Json,
    Avro(SchemaRegistry),
    Protobuf(SchemaRegistry),
    JsonSchema(SchemaRegistry),
    /// Each value one CSV line of these columns, fields separated by the character.
    Csv(Arc<(Vec<CsvColumn>, char)>),
    /// Each value's text as the field `value`.
    Raw,
}

impl SourceFormat {
    /// The source format of a job: `format` through `registry`.
    ///
    /// # Errors
    /// [`RuntimeError::Unsupported`] when the format needs a registry and none is given.
    pub(crate) fn new(
        source: &SourceSpec,
        registry: Option<&SchemaRegistry>,
    ) -> Result<SourceFormat, RuntimeError> {
        let format = source.value_format;
        let registry = || {
            registry.cloned().ok_or_else(|| {
                RuntimeError::Unsupported(format!(
                    "source.format = \"{}\" needs the job's [registry]",
                    format.name()
                ))
            })
        };
        Ok(match format {
            RecordFormat::Avro => SourceFormat::Avro(registry()?),
            RecordFormat::Protobuf => SourceFormat::Protobuf(registry()?),
            RecordFormat::JsonSchema => SourceFormat::JsonSchema(registry()?),
            RecordFormat::Csv => match &source.value_columns {
                Some(columns) => SourceFormat::Csv(Arc::new(columns.clone())),
                None => {
                    return Err(RuntimeError::Unsupported(
                        "source.format = \"csv\" needs source.columns".into(),
                    ))
                }
            },
            RecordFormat::Raw => SourceFormat::Raw,
            _ => SourceFormat::Json,
        })
    }
}

enum Reader {
    Json,
    Avro(AvroDeserializer),
    Protobuf(ProtobufDeserializer),
    JsonSchema(JsonSchemaDeserializer),
    Csv(Arc<(Vec<CsvColumn>, char)>),
    Raw,
}

/// Reads a source's record values as JSON, one per source subtask.
pub(crate) struct ValueDecoder {
    reader: Reader,
    schemas: WriterSchemas,
}

impl ValueDecoder {
    /// A decoder of JSON documents.
    pub(crate) fn json() -> ValueDecoder {
        ValueDecoder::with(Reader::Json)
    }

    /// A decoder of `format`.
    pub(crate) fn new(format: &SourceFormat) -> ValueDecoder {
        ValueDecoder::with(match format {
            SourceFormat::Json => Reader::Json,
            SourceFormat::Avro(r) => Reader::Avro(AvroDeserializer::new(r.clone())),
            SourceFormat::Protobuf(r) => Reader::Protobuf(ProtobufDeserializer::new(r.clone())),
            SourceFormat::JsonSchema(r) => {
                Reader::JsonSchema(JsonSchemaDeserializer::new(r.clone()))
            }
            SourceFormat::Csv(columns) => Reader::Csv(columns.clone()),
            SourceFormat::Raw => Reader::Raw,
        })
    }

    fn with(reader: Reader) -> ValueDecoder {
        ValueDecoder {
            reader,
            schemas: WriterSchemas::default(),
        }
    }

    /// Whether values are JSON documents (read as they are).
    pub(crate) fn is_json(&self) -> bool {
        matches!(self.reader, Reader::Json)
    }

    /// The schema id `raw` needs fetched before [`Self::decode`] can read it, if any.
    pub(crate) fn unknown_id(&self, raw: &[u8]) -> Option<u32> {
        match self.reader {
            Reader::Avro(_) | Reader::Protobuf(_) | Reader::JsonSchema(_) => {
                self.schemas.unknown(raw)
            }
            Reader::Json | Reader::Csv(_) | Reader::Raw => None,
        }
    }

    /// Fetches the writer schema of `raw` (its id from [`Self::unknown_id`]).
    ///
    /// # Errors
    /// As [`WriterSchemas::settle`].
    pub(crate) async fn learn(&mut self, id: u32, raw: Bytes) -> Result<(), RuntimeError> {
        let fetched = match &self.reader {
            Reader::Json | Reader::Csv(_) | Reader::Raw => Ok(()),
            Reader::Avro(d) => d.deserialize(&raw).await.map(drop),
            Reader::Protobuf(d) => d.deserialize(&raw).await.map(drop),
            Reader::JsonSchema(d) => d.deserialize(&raw).await.map(drop),
        };
        self.schemas.settle(id, fetched)
    }

    /// Reads one record value.
    pub(crate) fn decode(&self, raw: &[u8]) -> Decoded {
        match &self.reader {
            Reader::Json => {
                return match serde_json::from_slice(raw) {
                    Ok(v) => Decoded::Value(v),
                    Err(e) => Decoded::Bad(format!("the value is not JSON ({e})")),
                }
            }
            Reader::Csv(columns) => {
                let (columns, delimiter) = columns.as_ref();
                return match std::str::from_utf8(raw) {
                    Ok(line) => {
                        match csv_value(columns, *delimiter, line.trim_end_matches(['\r', '\n'])) {
                            Ok(v) => Decoded::Value(v),
                            Err(e) => Decoded::Bad(format!(
                                "the value is not a CSV line of source.columns: {e}"
                            )),
                        }
                    }
                    Err(e) => Decoded::Bad(format!("the value is not UTF-8 text ({e})")),
                };
            }
            Reader::Raw => {
                return match std::str::from_utf8(raw) {
                    Ok(text) => Decoded::Value(serde_json::json!({ "value": text })),
                    Err(e) => Decoded::Bad(format!("the value is not UTF-8 text ({e})")),
                };
            }
            _ => {}
        }
        if let Some(why) = self.schemas.failure(raw) {
            return Decoded::Bad(why);
        }
        let polled = match &self.reader {
            Reader::Json | Reader::Csv(_) | Reader::Raw => None,
            Reader::Avro(d) => d
                .deserialize(raw)
                .now_or_never()
                .map(|r| r.and_then(|r| r.to_plain_json())),
            Reader::Protobuf(d) => d
                .deserialize(raw)
                .now_or_never()
                .map(|r| r.and_then(|r| r.to_plain_json())),
            Reader::JsonSchema(d) => d
                .deserialize(raw)
                .now_or_never()
                .map(|r| r.map(|r| r.value)),
        };
        match polled {
            Some(Ok(v)) => Decoded::Value(v),
            Some(Err(e)) => Decoded::Bad(e.to_string()),
            None => Decoded::Bad(NOT_FETCHED.into()),
        }
    }
}

enum Writer {
    Avro(AvroSerializer),
    Protobuf(ProtobufSerializer),
    JsonSchema(JsonSchemaSerializer),
    /// A CSV line of these fields.
    Csv(Vec<String>),
    /// The string field `value`, as it is.
    Raw,
}

/// Writes the pipeline's JSON outputs in the sink's format (for the sink's topic; late and
/// dead-letter records keep their input's bytes).
pub(crate) struct ValueEncoder {
    writer: Writer,
}

impl ValueEncoder {
    /// The encoder of `format` with the schema file `schema` (`FILE.proto#Message` names a
    /// Protobuf message), or `None` for JSON, which the sink writes as it is.
    ///
    /// # Errors
    /// [`RuntimeError::Schema`] naming the file when it cannot be read or does not parse.
    pub(crate) fn new(
        sink: &SinkSpec,
        registry: Option<&SchemaRegistry>,
    ) -> Result<Option<ValueEncoder>, RuntimeError> {
        let (format, schema) = (sink.value_format, sink.value_schema.as_deref());
        match format {
            RecordFormat::Csv => {
                return Ok(Some(ValueEncoder {
                    writer: Writer::Csv(sink.value_columns.clone()),
                }))
            }
            RecordFormat::Raw => {
                return Ok(Some(ValueEncoder {
                    writer: Writer::Raw,
                }))
            }
            _ if !format.needs_registry() => return Ok(None),
            _ => {}
        }
        let (Some(schema), Some(registry)) = (schema, registry) else {
            return Err(RuntimeError::Unsupported(format!(
                "sink.format = \"{}\" needs sink.schema and the job's [registry]",
                format.name()
            )));
        };
        let bad = |source| RuntimeError::Schema {
            what: format!("sink.schema {schema}"),
            source,
        };
        let (file, message) = match schema.rsplit_once('#') {
            Some((f, m)) if format == RecordFormat::Protobuf => (f, Some(m)),
            _ => (schema, None),
        };
        let read = || {
            std::fs::read_to_string(file).map_err(|e| {
                RuntimeError::Unsupported(format!("sink.schema: cannot read {file}: {e}"))
            })
        };
        let registry = registry.clone();
        let writer = match format {
            RecordFormat::Avro => {
                Writer::Avro(AvroSerializer::new(registry, &read()?, Part::Value).map_err(bad)?)
            }
            RecordFormat::Protobuf => {
                let s = ProtobufSerializer::from_file(registry, Path::new(file), Part::Value)
                    .map_err(bad)?;
                Writer::Protobuf(match message {
                    Some(m) => s.for_message(m).map_err(bad)?,
                    None => s,
                })
            }
            _ => Writer::JsonSchema(
                JsonSchemaSerializer::new(registry, &read()?, Part::Value).map_err(bad)?,
            ),
        };
        Ok(Some(ValueEncoder { writer }))
    }

    /// One output value (JSON text) in the sink's format for `topic`.
    ///
    /// # Errors
    /// [`RuntimeError::Schema`]: the value does not fit the schema (naming what), or the
    /// registry cannot register or look the schema up.
    pub(crate) async fn encode(&self, topic: &str, json: &[u8]) -> Result<Bytes, RuntimeError> {
        let failed = |source| RuntimeError::Schema {
            what: format!("writing an output record to '{topic}'"),
            source,
        };
        let text = std::str::from_utf8(json).map_err(|e| {
            RuntimeError::Internal(format!("an output value is not UTF-8 JSON: {e}"))
        })?;
        let bytes = match &self.writer {
            Writer::Csv(columns) => {
                let mut line = Vec::with_capacity(json.len());
                csv_line(columns, json, &mut line).map_err(|e| RuntimeError::Encode {
                    what: format!("writing an output record to '{topic}' as CSV"),
                    reason: e,
                })?;
                return Ok(Bytes::from(line));
            }
            Writer::Raw => return raw_value(topic, text),
            Writer::Avro(s) => {
                let value: Value = serde_json::from_str(text).map_err(|e| {
                    RuntimeError::Internal(format!("an output value is not JSON: {e}"))
                })?;
                s.serialize_json(topic, &value).await
            }
            Writer::Protobuf(s) => s.serialize_str(topic, text).await,
            Writer::JsonSchema(s) => s.serialize_str(topic, text).await,
        }
        .map_err(failed)?;
        Ok(Bytes::from(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::job::Job;
    use serde_json::json;

    const HEAD: &str = "name = \"x\"\n[source]\nbrokers = \"b:9092\"\ntopics = [\"in\"]\n";
    const SINK: &str = "[sink]\ntopic = \"out\"\ntransactional.id.prefix = \"x\"\n";

    fn decoder(source: &str) -> ValueDecoder {
        let job = Job::parse("j.toml", &format!("{HEAD}{source}{SINK}")).unwrap();
        ValueDecoder::new(&SourceFormat::new(&job.source, None).unwrap())
    }

    fn encoder(sink: &str) -> ValueEncoder {
        let job = Job::parse("j.toml", &format!("{HEAD}{SINK}{sink}")).unwrap();
        ValueEncoder::new(&job.sink, None).unwrap().unwrap()
    }

    #[test]
    fn csv_and_raw_values_become_json_records_or_bad_records_naming_why() {
        let csv = decoder(
            "format = \"csv\"\ndelimiter = \";\"\ncolumns = [{ name = \"id\", type = \"long\" }, { name = \"x\", skip = true }, { name = \"name\" }]\n",
        );
        let raw = decoder("format = \"raw\"\n");
        #[rustfmt::skip]
        let cases: Vec<(&ValueDecoder, &[u8], Decoded)> = vec![
            (&csv, b"7;q;\"a;b\"",     Decoded::Value(json!({"id": 7, "name": "a;b"}))),
            (&csv, b"7;q;ann\r\n",     Decoded::Value(json!({"id": 7, "name": "ann"}))),
            (&csv, b"x;q;ann",         Decoded::Bad("the value is not a CSV line of source.columns: column 1 (id): \"x\" is not a whole number".into())),
            (&csv, b"7;ann",           Decoded::Bad("the value is not a CSV line of source.columns: expected 3 columns (id, x, name), found 2".into())),
            (&csv, b"\xff;q;a",        Decoded::Bad("the value is not UTF-8 text (invalid utf-8 sequence of 1 bytes from index 0)".into())),
            (&raw, b"any text, \"quoted\"", Decoded::Value(json!({"value": "any text, \"quoted\""}))),
            (&raw, b"",                Decoded::Value(json!({"value": ""}))),
            (&raw, b"\xc3",            Decoded::Bad("the value is not UTF-8 text (incomplete utf-8 byte sequence from index 0)".into())),
        ];
        for (decoder, raw, want) in cases {
            assert_eq!(decoder.unknown_id(raw), None);
            assert_eq!(
                decoder.decode(raw),
                want,
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        // Bytes that look framed are not a schema id to fetch for these formats.
        assert_eq!(raw.unknown_id(&[0, 0, 0, 0, 7, 1]), None);
    }

    #[tokio::test]
    async fn csv_and_raw_outputs_are_written_from_their_fields_or_name_what_is_missing() {
        let csv = encoder("format = \"csv\"\ncolumns = [\"id\", \"name\", \"gone\"]\n");
        let raw = encoder("format = \"raw\"\n");
        let bytes = csv
            .encode("out", br#"{"id":7,"name":"a, \"b\"","extra":1}"#)
            .await
            .unwrap();
        assert_eq!(&bytes[..], b"7,\"a, \"\"b\"\"\",");
        let e = csv.encode("out", b"[1]").await.unwrap_err();
        assert!(matches!(e, RuntimeError::Encode { .. }), "{e:?}");
        assert_eq!(
            raw.encode("out", br#"{"value":"as is"}"#).await.unwrap(),
            "as is"
        );
        assert_eq!(
            raw.encode("out", br#"{"v":1}"#).await.unwrap_err().to_string(),
            "writing an output record to 'out' as raw text: it has no field \"value\": format = \"raw\" writes that string field's text (project one into it)"
        );
        assert_eq!(
            raw.encode("out", br#"{"value":1}"#).await.unwrap_err().to_string(),
            "writing an output record to 'out' as raw text: its field \"value\" is 1, not a string: format = \"raw\" writes that field's text"
        );
    }
}
