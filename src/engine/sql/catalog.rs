//! `CREATE TABLE`: a Kafka topic as a table, its columns and its `WITH` options (Flink's Kafka
//! connector's names where Flink has one).

use std::collections::BTreeMap;

use sqlparser::ast::{
    ColumnDef, CreateTable, CreateTableOptions, DataType, Expr, ObjectName, Spanned, SqlOption,
    Value,
};
use sqlparser::tokenizer::Span;

use super::error::{fail, SqlError};
use crate::engine::job::expr::SqlType;

/// The options a table takes, and what each is for.
pub(super) const OPTIONS: &[(&str, &str)] = &[
    ("connector", "'kafka' (the only connector)"),
    ("topic", "the topic"),
    (
        "format",
        "'json' (default), 'avro', 'protobuf', 'json-schema', 'csv' or 'raw'",
    ),
    (
        "properties.bootstrap.servers",
        "the brokers, host:port[,host:port]",
    ),
    (
        "properties.group.id",
        "a source's consumer group (default: the job's name)",
    ),
    (
        "scan.startup.mode",
        "a source's start without a checkpoint: 'earliest-offset' or 'latest-offset'",
    ),
    (
        "event_time",
        "a source's event-time column (epoch ms or RFC 3339)",
    ),
    (
        "watermark",
        "a source's bounded out-of-orderness, e.g. '60s'",
    ),
    (
        "sink.delivery-guarantee",
        "a sink's 'exactly-once' (default), 'at-least-once' or 'none'",
    ),
    (
        "sink.transactional-id-prefix",
        "an exactly-once sink's transactional id prefix",
    ),
];

/// An option's value and where it is written.
#[derive(Debug, Clone)]
pub(super) struct Opt {
    pub value: String,
    pub span: Span,
}

/// A declared column (its type is checked to be one JSON carries; values are not converted:
/// a record's field is what it is, and a CAST says otherwise).
#[derive(Debug, Clone)]
pub(super) struct Column {
    pub name: String,
}

/// A `CREATE TABLE` (module docs).
#[derive(Debug, Clone)]
pub(super) struct Table {
    pub name: String,
    pub span: Span,
    pub columns: Vec<Column>,
    pub options: BTreeMap<String, Opt>,
}

/// The one-part name of a table or option.
pub(super) fn simple_name(name: &ObjectName) -> Result<String, SqlError> {
    match name.0.as_slice() {
        [part] => match part.as_ident() {
            Some(ident) => Ok(ident.value.clone()),
            None => fail(name.span(), "a name is needed here"),
        },
        _ => {
            // An option key like properties.bootstrap.servers written without quotes.
            let parts: Option<Vec<String>> = name
                .0
                .iter()
                .map(|p| p.as_ident().map(|i| i.value.clone()))
                .collect();
            match parts {
                Some(parts) => Ok(parts.join(".")),
                None => fail(name.span(), "a name is needed here"),
            }
        }
    }
}

fn column_type(c: &ColumnDef) -> Result<SqlType, SqlError> {
    Ok(match &c.data_type {
        DataType::BigInt(_)
        | DataType::Int(_)
        | DataType::Integer(_)
        | DataType::SmallInt(_)
        | DataType::TinyInt(_)
        | DataType::Int64 => SqlType::Integer,
        DataType::Double(_)
        | DataType::Float(_)
        | DataType::Float64
        | DataType::Real
        | DataType::Decimal(_) => SqlType::Double,
        DataType::Varchar(_)
        | DataType::Char(_)
        | DataType::Text
        | DataType::String(_) => SqlType::String,
        DataType::Boolean | DataType::Bool => SqlType::Boolean,
        other => {
            return fail(
                c.name.span,
                format!(
                    "column {}: type {other} is not supported: use BIGINT, INT, DOUBLE, STRING, VARCHAR or BOOLEAN (times are BIGINT epoch milliseconds)",
                    c.name.value
                ),
            )
        }
    })
}

fn option_value(key: &str, value: &Expr) -> Result<Opt, SqlError> {
    let span = sqlparser::ast::Spanned::span(value);
    let text = match value {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            Value::Boolean(b) => b.to_string(),
            _ => {
                return fail(
                    span,
                    format!("option '{key}': give its value as a string, e.g. '{key}' = '...'"),
                )
            }
        },
        Expr::Identifier(i) => i.value.clone(),
        _ => {
            return fail(
                span,
                format!("option '{key}': give its value as a string, e.g. '{key}' = '...'"),
            )
        }
    };
    Ok(Opt { value: text, span })
}

impl Table {
    /// The table a `CREATE TABLE` declares.
    ///
    /// # Errors
    /// A form of CREATE TABLE that is not a topic (AS SELECT, LIKE, constraints), a column type
    /// without a JSON counterpart, an unknown or repeated option.
    pub(super) fn of(ct: &CreateTable) -> Result<Table, SqlError> {
        let span = ct.name.span();
        let name = simple_name(&ct.name)?;
        if ct.query.is_some() || ct.like.is_some() || !ct.constraints.is_empty() {
            return fail(
                span,
                format!("table {name}: CREATE TABLE declares a topic: columns and WITH (...) only (no AS SELECT, LIKE or constraints)"),
            );
        }
        let columns = ct
            .columns
            .iter()
            .map(|c| {
                column_type(c)?;
                Ok(Column {
                    name: c.name.value.clone(),
                })
            })
            .collect::<Result<Vec<_>, SqlError>>()?;
        let mut options = BTreeMap::new();
        let with: &[SqlOption] = match &ct.table_options {
            CreateTableOptions::With(opts) => opts,
            CreateTableOptions::None => &[],
            _ => return fail(span, format!("table {name}: give its options as WITH ('connector' = 'kafka', 'topic' = '...')")),
        };
        for opt in with {
            let SqlOption::KeyValue { key, value } = opt else {
                return fail(
                    span,
                    format!("table {name}: options are 'key' = 'value' pairs"),
                );
            };
            let k = simple_name(key)?;
            if !OPTIONS.iter().any(|(known, _)| *known == k) {
                let known: Vec<&str> = OPTIONS.iter().map(|(n, _)| *n).collect();
                return fail(
                    key.span(),
                    format!(
                        "table {name}: unknown option '{k}': the options are {}",
                        known.join(", ")
                    ),
                );
            }
            let v = option_value(&k, value)?;
            if options.insert(k.clone(), v).is_some() {
                return fail(
                    key.span(),
                    format!("table {name}: option '{k}' is given twice"),
                );
            }
        }
        let table = Table {
            name,
            span,
            columns,
            options,
        };
        match table.options.get("connector") {
            Some(c) if c.value == "kafka" => Ok(table),
            Some(c) => fail(
                c.span,
                format!(
                    "table {}: connector '{}' is not supported: 'kafka' is",
                    table.name, c.value
                ),
            ),
            None => fail(
                span,
                format!(
                    "table {}: add WITH ('connector' = 'kafka', 'topic' = '...')",
                    table.name
                ),
            ),
        }
    }

    /// The option's value, if given.
    pub(super) fn option(&self, key: &str) -> Option<&Opt> {
        self.options.get(key)
    }

    /// The option's value, or an error saying to add it.
    pub(super) fn required(&self, key: &str, why: &str) -> Result<&Opt, SqlError> {
        self.options.get(key).map_or_else(
            || {
                fail(
                    self.span,
                    format!(
                        "table {}: add '{key}' to its WITH options ({why})",
                        self.name
                    ),
                )
            },
            Ok,
        )
    }

    /// The declared column, if any.
    pub(super) fn column(&self, name: &str) -> Option<&Column> {
        self.columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// The options that only one role (source or sink) takes, given to a table in the other.
    pub(super) fn refuse_options(&self, keys: &[&str], role: &str) -> Result<(), SqlError> {
        for k in keys {
            if let Some(o) = self.options.get(*k) {
                return fail(
                    o.span,
                    format!("table {}: '{k}' is not an option of {role}", self.name),
                );
            }
        }
        Ok(())
    }
}
