//! `[source] format` of a file source: the engine's `csv` (its columns, header, delimiter)
//! and `json`, with the event time's and the key's fields, or a registered format's name.

use std::ops::Range;

use toml::Spanned;

use crate::engine::formats::{check_delimiter, ColumnType, CsvColumn, LineFormats};
use crate::engine::job::JobError;

use super::locator::Locator;
use super::model::{LineFormatSpec, RecordFormat};
use super::raw::{RawColumn, RawSource};

/// The file source's line format, every setting checked (the format is built once here, so
/// a mistake is named with its line before the job runs).
pub(super) fn check_line_format(
    loc: &Locator<'_>,
    span: &Range<usize>,
    raw: &RawSource,
    format: &Spanned<String>,
) -> Result<LineFormatSpec, JobError> {
    let name = format.get_ref().trim();
    let csv_only = [
        (raw.columns.as_ref().map(Spanned::span), "source.columns"),
        (raw.header.as_ref().map(Spanned::span), "source.header"),
        (
            raw.delimiter.as_ref().map(Spanned::span),
            "source.delimiter",
        ),
    ];
    let spec = match name {
        "csv" => csv_spec(loc, span, raw)?,
        "json" | "avro" => {
            refuse(loc, &csv_only, "only format = \"csv\" has it: remove it")?;
            let (time, key) = (required_time(loc, span, raw, name)?, key(loc, raw)?);
            if name == "json" {
                LineFormatSpec::JsonLines { time, key }
            } else {
                LineFormatSpec::Avro { time, key }
            }
        }
        "" => {
            return Err(loc.at(
                &format.span(),
                Some("source.format"),
                "the format is empty: name the format of the files (\"csv\", \"json\", \"avro\", or one the program running the job registers)",
            ))
        }
        _ => {
            let registered = format!(
                "format = \"{name}\" is one the program running the job registers, and it reads its lines its own way: remove it (or use format = \"csv\", \"json\" or \"avro\")"
            );
            refuse(loc, &csv_only, &registered)?;
            refuse(
                loc,
                &[
                    (raw.time.as_ref().map(Spanned::span), "source.time"),
                    (raw.key.as_ref().map(Spanned::span), "source.key"),
                ],
                &registered,
            )?;
            LineFormatSpec::Registered(name.to_owned())
        }
    };
    if !matches!(spec, LineFormatSpec::Registered(_)) {
        // Cross-field rules (the time and key among the columns, a usable delimiter): the
        // format is built once now.
        spec.line_format(&LineFormats::new()).map_err(|m| {
            let at = raw
                .columns
                .as_ref()
                .map_or_else(|| span.clone(), Spanned::span);
            loc.at(&at, Some("source.format"), m)
        })?;
    }
    Ok(spec)
}

/// `format = "csv"`: its columns (or a header's names), delimiter, time and key.
fn csv_spec(
    loc: &Locator<'_>,
    span: &Range<usize>,
    raw: &RawSource,
) -> Result<LineFormatSpec, JobError> {
    let columns = match &raw.columns {
        Some(columns) => Some(check_columns(loc, columns)?),
        None => None,
    };
    let header = raw.header.as_ref().is_some_and(|h| *h.get_ref());
    if columns.is_none() && !header {
        return Err(loc.at(
            span,
            Some("source.columns"),
            "format = \"csv\" reads declared columns or the names of a header line: add columns = [{ name = \"id\", type = \"long\" }, ...] or header = true",
        ));
    }
    let delimiter = delimiter(loc, raw)?;
    Ok(LineFormatSpec::Csv {
        columns,
        header,
        delimiter,
        time: required_time(loc, span, raw, "csv")?,
        key: key(loc, raw)?,
    })
}

/// `source.delimiter`: one character that can separate CSV fields (`,` when not given).
fn delimiter(loc: &Locator<'_>, raw: &RawSource) -> Result<char, JobError> {
    let Some(d) = &raw.delimiter else {
        return Ok(',');
    };
    let mut chars = d.get_ref().chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => {
            check_delimiter(c).map_err(|m| loc.at(&d.span(), Some("source.delimiter"), m))?;
            Ok(c)
        }
        _ => Err(loc.at(
            &d.span(),
            Some("source.delimiter"),
            format!(
                "{:?} is not one character: give one, e.g. \",\", \";\", \"\\t\" or \"|\"",
                d.get_ref()
            ),
        )),
    }
}

/// A Kafka source's `columns` and `delimiter`: required with `format = "csv"` (each value one
/// line of them), refused with another format.
pub(super) fn check_value_columns(
    loc: &Locator<'_>,
    span: &Range<usize>,
    raw: &RawSource,
    format: RecordFormat,
) -> Result<Option<(Vec<CsvColumn>, char)>, JobError> {
    if format != RecordFormat::Csv {
        refuse(
            loc,
            &[
                (raw.columns.as_ref().map(Spanned::span), "source.columns"),
                (
                    raw.delimiter.as_ref().map(Spanned::span),
                    "source.delimiter",
                ),
            ],
            "only format = \"csv\" has it: remove it",
        )?;
        return Ok(None);
    }
    let Some(columns) = &raw.columns else {
        return Err(loc.at(
            span,
            Some("source.columns"),
            "format = \"csv\" reads each value as a line of declared columns: add columns = [{ name = \"id\", type = \"long\" }, ...]",
        ));
    };
    Ok(Some((check_columns(loc, columns)?, delimiter(loc, raw)?)))
}

/// `source.time`: the field of the event time, which a file source needs to order and pace
/// its records.
fn required_time(
    loc: &Locator<'_>,
    span: &Range<usize>,
    raw: &RawSource,
    format: &str,
) -> Result<String, JobError> {
    match &raw.time {
        Some(t) if !t.get_ref().trim().is_empty() => Ok(t.get_ref().clone()),
        Some(t) => Err(loc.at(&t.span(), Some("source.time"), "the time field is empty: name the field of each record's event time")),
        None => Err(loc.at(
            span,
            Some("source.time"),
            format!(
                "format = \"{format}\" needs time = \"<field>\": the {} of each record's event time (epoch milliseconds, or a time)",
                if format == "csv" { "column" } else { "field" }
            ),
        )),
    }
}

/// `source.key`: the field of the records' Kafka key, if any.
fn key(loc: &Locator<'_>, raw: &RawSource) -> Result<Option<String>, JobError> {
    match &raw.key {
        None => Ok(None),
        Some(k) if k.get_ref().trim().is_empty() => Err(loc.at(
            &k.span(),
            Some("source.key"),
            "the key field is empty: name the field of each record's Kafka key, or remove key",
        )),
        Some(k) => Ok(Some(k.get_ref().clone())),
    }
}

fn refuse(
    loc: &Locator<'_>,
    given: &[(Option<Range<usize>>, &str)],
    message: &str,
) -> Result<(), JobError> {
    for (at, field) in given {
        if let Some(at) = at {
            return Err(loc.at(at, Some(field), message));
        }
    }
    Ok(())
}

/// `source.columns`: each a name, a type (with a timestamp's format or a boolean's texts), a
/// default for an empty field, or skipped.
fn check_columns(
    loc: &Locator<'_>,
    columns: &Spanned<Vec<Spanned<RawColumn>>>,
) -> Result<Vec<CsvColumn>, JobError> {
    if columns.get_ref().is_empty() {
        return Err(loc.at(
            &columns.span(),
            Some("source.columns"),
            "no columns are listed: list each column of the files, in order",
        ));
    }
    columns
        .get_ref()
        .iter()
        .map(|c| {
            check_column(c.get_ref()).map_err(|m| loc.at(&c.span(), Some("source.columns"), m))
        })
        .collect()
}

fn check_column(raw: &RawColumn) -> Result<CsvColumn, String> {
    let name = raw.name.trim();
    if name.is_empty() {
        return Err("a column's name is empty: name it (the record's field)".into());
    }
    if raw.skip {
        if raw.kind.is_some()
            || raw.format.is_some()
            || raw.default.is_some()
            || raw.true_text.is_some()
            || raw.false_text.is_some()
        {
            return Err(format!(
                "column {name:?} is skipped and has settings: a skipped column takes only its name (remove the others, or skip)"
            ));
        }
        return Ok(CsvColumn::skipped(name));
    }
    let texts = match (&raw.true_text, &raw.false_text) {
        (Some(t), Some(f)) => Some((t.clone(), f.clone())),
        (None, None) => None,
        _ => {
            return Err(format!(
                "column {name:?} gives one of true and false: give both texts (e.g. true = \"START\", false = \"END\")"
            ))
        }
    };
    let kind = ColumnType::named(
        raw.kind.as_deref().unwrap_or("string"),
        raw.format.as_deref(),
        texts,
    )
    .map_err(|m| format!("column {name:?}: {m}"))?;
    let column = CsvColumn::new(name, kind);
    match &raw.default {
        None => Ok(column),
        Some(value) => {
            column.with_default(json_of(value).map_err(|m| format!("column {name:?}: {m}"))?)
        }
    }
}

/// A TOML scalar as JSON.
fn json_of(value: &toml::Value) -> Result<serde_json::Value, String> {
    Ok(match value {
        toml::Value::String(s) => s.clone().into(),
        toml::Value::Integer(i) => (*i).into(),
        toml::Value::Boolean(b) => (*b).into(),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| format!("the default {f} is not a finite number"))?,
        other => {
            return Err(format!(
                "a default is a string, a number or true/false, not a {}",
                other.type_str()
            ))
        }
    })
}
