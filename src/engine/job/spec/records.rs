//! The record formats of the Kafka ends (`[source] format`, `[sink] format` and `schema`) and
//! the `[registry]` the formats of the schema registry read and write through.

use std::ops::Range;

use toml::Spanned;

use crate::engine::job::JobError;
use crate::schema::RegistryConfig;

use super::locator::Locator;
use super::model::*;

/// `format` of a Kafka source (JSON by default).
pub(super) fn check_source_format(
    loc: &Locator<'_>,
    format: Option<&Spanned<String>>,
) -> Result<RecordFormat, JobError> {
    match format {
        None => Ok(RecordFormat::Json),
        Some(f) => RecordFormat::parse(f.get_ref())
            .map_err(|m| loc.at(&f.span(), Some("source.format"), m)),
    }
}

/// `format` and `schema` of a Kafka sink: a format of the registry needs the schema it
/// writes with; JSON takes none.
pub(super) fn check_sink_format(
    loc: &Locator<'_>,
    span: &Range<usize>,
    format: Option<Spanned<String>>,
    schema: Option<Spanned<String>>,
) -> Result<(RecordFormat, Option<String>), JobError> {
    let value_format = match &format {
        None => RecordFormat::Json,
        Some(f) => RecordFormat::parse(f.get_ref())
            .map_err(|m| loc.at(&f.span(), Some("sink.format"), m))?,
    };
    match (value_format, schema) {
        (f, None) if !f.needs_registry() => Ok((value_format, None)),
        (f, Some(s)) if !f.needs_registry() => Err(loc.at(
            &s.span(),
            Some("sink.schema"),
            format!("format = \"{}\" writes without a schema: set format = \"avro\", \"protobuf\" or \"json-schema\", or remove schema", f.name()),
        )),
        (f, None) => Err(loc.at(
            span,
            Some("sink.schema"),
            format!(
                "format = \"{}\" writes with a schema: add schema = \"{}\" (a file)",
                f.name(),
                match f {
                    RecordFormat::Avro => "ride.avsc",
                    RecordFormat::Protobuf => "ride.proto",
                    _ => "ride.schema.json",
                }
            ),
        )),
        (f, Some(s)) => {
            let path = s.get_ref().trim();
            let (file, _) = path.split_once('#').unwrap_or((path, ""));
            let wanted = match f {
                RecordFormat::Avro => ".avsc",
                RecordFormat::Protobuf => ".proto",
                _ => ".json",
            };
            if !file.ends_with(wanted) {
                return Err(loc.at(
                    &s.span(),
                    Some("sink.schema"),
                    format!(
                        "format = \"{}\" writes with a schema file ending in {wanted}{}, not {path:?}",
                        f.name(),
                        if f == RecordFormat::Protobuf {
                            " (FILE.proto#Message for another than its first message)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            if path.contains('#') && f != RecordFormat::Protobuf {
                return Err(loc.at(
                    &s.span(),
                    Some("sink.schema"),
                    "only a Protobuf schema names a message after '#'",
                ));
            }
            Ok((f, Some(path.to_owned())))
        }
    }
}

/// `[registry]`: the registry's settings, flattened to the Java serializers' property names
/// (`url` is `schema.registry.url`); required by a format of the registry, refused when no
/// end reads or writes through it (a setting is never accepted and left unused).
pub(super) fn check_registry(
    loc: &Locator<'_>,
    raw: Option<Spanned<toml::Table>>,
    source: &SourceSpec,
    sink: &SinkSpec,
) -> Result<Vec<(String, String)>, JobError> {
    let needed = [
        ("source.format", source.value_format),
        ("sink.format", sink.value_format),
    ]
    .into_iter()
    .find(|(_, f)| f.needs_registry());
    let Some(raw) = raw else {
        return match needed {
            Some((field, f)) => Err(loc.at_field(
                field,
                &[],
                format!(
                    "format = \"{}\" reads and writes through the schema registry: add [registry] with url = \"http://127.0.0.1:8081\"",
                    f.name()
                ),
            )),
            None => Ok(Vec::new()),
        };
    };
    let span = raw.span();
    if needed.is_none() {
        return Err(loc.at(
            &span,
            Some("registry"),
            "no end of this job reads or writes through the schema registry: set format = \"avro\", \"protobuf\" or \"json-schema\" on [source] or [sink], or remove [registry]",
        ));
    }
    let mut properties = Vec::new();
    flatten("", raw.get_ref(), &mut properties).map_err(|m| loc.at(&span, Some("registry"), m))?;
    for (name, _) in &mut properties {
        if name == "url" {
            "schema.registry.url".clone_into(name);
        }
        if !RegistryConfig::owns(name) {
            return Err(loc.at(
                &span,
                Some(&format!("registry.{name}")),
                format!(
                    "{name} is not a schema registry setting: use url, basic.auth.user.info, schema.registry.ssl.truststore.location, auto.register.schemas, use.latest.version, value.subject.name.strategy, ..."
                ),
            ));
        }
    }
    if !properties.iter().any(|(k, _)| k == "schema.registry.url") {
        return Err(loc.at(
            &span,
            Some("registry.url"),
            "the registry's URL is missing: add url = \"http://127.0.0.1:8081\"",
        ));
    }
    RegistryConfig::from_properties(properties.clone())
        .map_err(|e| loc.at(&span, Some("registry"), e.to_string()))?;
    Ok(properties)
}

/// A TOML table's leaves as dotted names and their text.
fn flatten(
    prefix: &str,
    table: &toml::Table,
    out: &mut Vec<(String, String)>,
) -> Result<(), String> {
    for (k, v) in table {
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&name, t, out)?,
            toml::Value::String(s) => out.push((name, s.clone())),
            toml::Value::Integer(i) => out.push((name, i.to_string())),
            toml::Value::Boolean(b) => out.push((name, b.to_string())),
            other => {
                return Err(format!(
                    "{name}: a {} is not a setting's value: give a string, a number or true/false",
                    other.type_str()
                ))
            }
        }
    }
    Ok(())
}
