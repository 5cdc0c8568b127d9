//! The job's ends and settings from the SQL (the tables' WITH options and the SET statements):
//! written as a job file's `[source]`, `[sink]` and `[settings]` and checked by the job file's
//! own checks, so both front ends take the same options with the same rules. A mistake the
//! checks find is reported at the SQL that gave the value (each TOML line remembers it).

use sqlparser::tokenizer::Span;

use super::catalog::Table;
use super::error::{at, fail, SqlError};
use crate::engine::job::{Job, JobError};

/// A `SET 'key' = 'value'` statement.
pub(super) struct Set {
    pub key: String,
    pub value: String,
    pub span: Span,
}

/// TOML text, line by line, each line with the SQL it came from.
struct Lines {
    text: String,
    origins: Vec<Span>,
}

impl Lines {
    fn push(&mut self, line: &str, origin: Span) {
        self.text.push_str(line);
        self.text.push('\n');
        self.origins.push(origin);
    }

    fn string(&mut self, key: &str, value: &str, origin: Span) {
        let quoted = toml::Value::String(value.to_owned()).to_string();
        self.push(&format!("{key} = {quoted}"), origin);
    }
}

/// A SET value as TOML: an integer, a boolean, or a string.
fn typed(value: &str) -> String {
    if value.parse::<i64>().is_ok() || value == "true" || value == "false" {
        value.to_owned()
    } else {
        toml::Value::String(value.to_owned()).to_string()
    }
}

/// The options only a source or only a sink takes.
const SOURCE_ONLY: &[&str] = &[
    "properties.group.id",
    "scan.startup.mode",
    "event_time",
    "watermark",
];
const SINK_ONLY: &[&str] = &["sink.delivery-guarantee", "sink.transactional-id-prefix"];

/// The checked job of `name` reading `sources` and writing `sink` with `sets`, its pipeline
/// still empty (the planner's).
///
/// # Errors
/// A missing or refused option or setting, at the SQL that gave it.
pub(super) fn job_of(
    file: &str,
    name: (&str, Span),
    sources: &[&Table],
    sink: &Table,
    sets: &[Set],
) -> Result<Job, SqlError> {
    let mut l = Lines {
        text: String::new(),
        origins: Vec::new(),
    };
    l.string("name", name.0, name.1);
    let brokers = source_lines(&mut l, sources)?;
    sink_lines(&mut l, sink, &brokers)?;
    l.push("[settings]", name.1);
    for s in sets {
        let name_ok = s
            .key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !name_ok || s.key.is_empty() {
            return fail(s.span, format!("SET '{}': not a setting name", s.key));
        }
        l.push(&format!("{} = {}", s.key, typed(&s.value)), s.span);
    }
    Job::parse(file, &l.text).map_err(|e| placed(&e, &l, sink))
}

/// The tables a job reads share their cluster, format, start and group.
fn check_shared(sources: &[&Table], brokers: &str) -> Result<(), SqlError> {
    let first = sources[0];
    for s in &sources[1..] {
        match s.option("properties.bootstrap.servers") {
            Some(b) if b.value == brokers => {}
            _ => {
                return fail(
                    s.span,
                    format!(
                        "table {}: a job reads one cluster: give it 'properties.bootstrap.servers' = '{brokers}' as table {}",
                        s.name, first.name
                    ),
                )
            }
        }
        for key in ["format", "scan.startup.mode", "properties.group.id"] {
            if first.option(key).map(|o| &o.value) != s.option(key).map(|o| &o.value) {
                return fail(
                    s.span,
                    format!(
                        "table {}: the tables a job reads share '{key}': give it table {}'s",
                        s.name, first.name
                    ),
                );
            }
        }
    }
    Ok(())
}

/// `[source]` from the tables the query reads; returns their brokers.
fn source_lines(l: &mut Lines, sources: &[&Table]) -> Result<String, SqlError> {
    let first = sources[0];
    l.push("[source]", first.span);
    let brokers = first.required("properties.bootstrap.servers", "the brokers, host:port")?;
    check_shared(sources, &brokers.value)?;
    l.string("brokers", &brokers.value, brokers.span);
    let mut topics = Vec::new();
    for s in sources {
        s.refuse_options(SINK_ONLY, "a table the query reads")?;
        let topic = s.required("topic", "the topic it reads")?;
        topics.push(toml::Value::String(topic.value.clone()).to_string());
    }
    l.push(&format!("topics = [{}]", topics.join(", ")), first.span);
    if let Some(g) = first.option("properties.group.id") {
        l.string("group.id", &g.value, g.span);
    }
    if let Some(m) = first.option("scan.startup.mode") {
        let start = match m.value.as_str() {
            "earliest-offset" => "earliest",
            "latest-offset" => "latest",
            other => {
                return fail(
                    m.span,
                    format!(
                        "'scan.startup.mode' = '{other}': use 'earliest-offset' or 'latest-offset'"
                    ),
                )
            }
        };
        l.string("start", start, m.span);
    }
    if let Some(f) = first.option("format") {
        l.string("format", &f.value, f.span);
    }
    Ok(brokers.value.clone())
}

/// `[sink]` from the table INSERT INTO writes.
fn sink_lines(l: &mut Lines, sink: &Table, brokers: &str) -> Result<(), SqlError> {
    sink.refuse_options(SOURCE_ONLY, "the table INSERT INTO writes")?;
    l.push("[sink]", sink.span);
    let topic = sink.required("topic", "the topic it writes")?;
    l.string("topic", &topic.value, topic.span);
    if let Some(b) = sink.option("properties.bootstrap.servers") {
        if b.value != brokers {
            return fail(
                b.span,
                format!(
                    "table {}: a job writes the cluster it reads: '{brokers}'",
                    sink.name
                ),
            );
        }
    }
    for (option, key) in [
        ("format", "format"),
        ("sink.delivery-guarantee", "delivery.guarantee"),
        ("sink.transactional-id-prefix", "transactional.id.prefix"),
    ] {
        if let Some(o) = sink.option(option) {
            l.string(key, &o.value, o.span);
        }
    }
    Ok(())
}

/// A job-file error of the generated TOML, at the SQL its line came from, in SQL's words.
fn placed(e: &JobError, l: &Lines, sink: &Table) -> SqlError {
    let (line, field, message) = match e {
        JobError::Invalid {
            line,
            field,
            message,
            ..
        } => (*line, field.as_str(), message.as_str()),
        JobError::Syntax { line, message, .. } => (*line, "", message.as_str()),
        other => return at(sink.span, other.to_string()),
    };
    let origin = l
        .origins
        .get(line.saturating_sub(1))
        .copied()
        .unwrap_or(sink.span);
    let field = match field {
        "transactional.id.prefix" | "sink.transactional.id.prefix" => {
            "'sink.transactional-id-prefix'"
        }
        "delivery.guarantee" | "sink.delivery.guarantee" => "'sink.delivery-guarantee'",
        "brokers" | "source.brokers" => "'properties.bootstrap.servers'",
        "group.id" | "source.group.id" => "'properties.group.id'",
        other => other,
    };
    if field.is_empty() {
        at(origin, message)
    } else {
        at(origin, format!("{field}: {message}"))
    }
}
