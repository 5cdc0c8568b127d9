//! SQL jobs: `onceflow run job.sql`. A file of statements — `CREATE TABLE` for each topic
//! (columns, and `WITH` options in the names of Flink's Kafka connector), `SET` for the job's
//! settings (the job file's `[settings]` keys; `'pipeline.name'` names the job), and one
//! `INSERT INTO sink SELECT …` (or `EXPLAIN INSERT …` to print the plan) — planned onto the
//! operators a job file runs, so a SQL job has the same runtime, checkpoints and exactly-once
//! sink as any other.
//!
//! ```sql
//! CREATE TABLE rides (ride_id BIGINT, driver_id BIGINT, is_start BOOLEAN, passengers INT,
//!   event_time BIGINT) WITH ('connector' = 'kafka', 'topic' = 'rides',
//!   'properties.bootstrap.servers' = 'localhost:9092', 'event_time' = 'event_time',
//!   'watermark' = '60s');
//! CREATE TABLE shifts WITH ('connector' = 'kafka', 'topic' = 'driver-shifts',
//!   'sink.transactional-id-prefix' = 'driver-shifts');
//! INSERT INTO shifts
//! SELECT driver_id, SESSION_START(event_time, INTERVAL '30' MINUTE) AS window_start,
//!        COUNT(*) AS rides, SUM(passengers) AS passengers
//! FROM rides WHERE NOT is_start
//! GROUP BY driver_id, SESSION(event_time, INTERVAL '30' MINUTE);
//! ```
//!
//! The same statements may stand in a TOML job file as its only key, `sql = '''…'''`
//! (`embedded`).
//!
//! - `catalog`: the tables and their options; `ends`: the source, sink and settings they make
//!   (through the job file's own checks); `plan`, `group`, `join`: the query; `scalar`: its
//!   expressions. Every mistake is one line `file:LINE:COLUMN: what is wrong and what to
//!   change`.

mod catalog;
mod embedded;
mod ends;
mod error;
mod group;
mod join;
mod plan;
mod scalar;
mod scope;
#[cfg(test)]
mod tests;
mod top_n;

use std::collections::BTreeMap;
use std::path::Path;

use sqlparser::ast::{Expr as Sql, Set, Spanned, Statement, Value};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Span;

use crate::engine::job::{Job, JobError};
use catalog::{simple_name, Table};
use error::{fail, SqlError};

/// A planned SQL job.
#[derive(Debug, Clone)]
pub struct SqlJob {
    /// The job, as a job file would describe it.
    pub job: Job,
    /// The file's statement was `EXPLAIN INSERT …`: print [`Job::explain`], do not run.
    pub explain: bool,
}

impl SqlJob {
    /// Reads and plans a SQL job file.
    ///
    /// # Errors
    /// [`JobError::Read`] when the file cannot be read; otherwise as [`SqlJob::parse`].
    pub fn load(path: &Path) -> Result<SqlJob, JobError> {
        let (file, text, stem) = read(path)?;
        SqlJob::parse(&file, &text, &stem)
    }

    /// A SQL job, if `path` holds one: a `.sql` file, or a TOML job file whose only key is
    /// `sql = '''…'''`; `None` for any other job file ([`Job::load`] reads those). The job
    /// is named by its `SET 'pipeline.name'`, else by the file's stem.
    ///
    /// # Errors
    /// As [`SqlJob::load`]; for a TOML job file, also a key beside `sql` (settings go in SET
    /// statements). A mistake in embedded SQL is named at its line and column in the job file.
    pub fn load_if_sql(path: &Path) -> Result<Option<SqlJob>, JobError> {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("sql"))
        {
            return SqlJob::load(path).map(Some);
        }
        let (file, text, stem) = read(path)?;
        embedded::parse(&file, &text, &stem)
    }

    /// Parses and plans SQL text; `file` names it in messages, `default_name` names the job
    /// unless a `SET 'pipeline.name'` does.
    ///
    /// # Errors
    /// [`JobError::Sql`] naming the line and column of the first mistake.
    ///
    /// ```
    /// use onceflow::engine::sql::SqlJob;
    /// let text = "CREATE TABLE a (x BIGINT) WITH ('connector' = 'kafka', 'topic' = 'a', \
    ///             'properties.bootstrap.servers' = 'localhost:9092');
    ///             CREATE TABLE b WITH ('connector' = 'kafka', 'topic' = 'b', \
    ///             'sink.delivery-guarantee' = 'at-least-once');
    ///             INSERT INTO b SELECT x * 2 AS y FROM a WHERE x > 1;";
    /// let job = SqlJob::parse("a.sql", text, "doubled")?.job;
    /// assert_eq!((job.name.as_str(), job.source.topics[0].as_str()), ("doubled", "a"));
    /// let e = SqlJob::parse("a.sql", "INSERT INTO b SELECT 1 FROM a;", "x").unwrap_err();
    /// assert_eq!(e.to_string(), "a.sql:1:13: no table b: declare the sink with CREATE TABLE b WITH ('connector' = 'kafka', 'topic' = '...')");
    /// # Ok::<(), onceflow::engine::job::JobError>(())
    /// ```
    pub fn parse(file: &str, text: &str, default_name: &str) -> Result<SqlJob, JobError> {
        plan_text(file, text, default_name).map_err(|e| JobError::Sql {
            file: file.to_owned(),
            line: e.line,
            column: e.column,
            message: e.message,
        })
    }
}

/// A job file's name in messages, its text, and its stem (the job's default name).
fn read(path: &Path) -> Result<(String, String, String), JobError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| JobError::Read {
        file: file.clone(),
        source,
    })?;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    Ok((file, text, stem.unwrap_or_else(|| "sql-job".into())))
}

/// A job name from a file name: the characters a job name allows.
fn job_name(stem: &str) -> String {
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "sql-job".into()
    } else {
        name
    }
}

fn set_of(set: &Set) -> Result<ends::Set, SqlError> {
    let Set::SingleAssignment {
        variable, values, ..
    } = set
    else {
        return fail(Span::empty(), "SET 'key' = 'value' sets one setting");
    };
    let span = variable.span();
    let key = simple_name(variable)?;
    let value = match values.as_slice() {
        [Sql::Value(v)] => match &v.value {
            Value::SingleQuotedString(s) | Value::Number(s, _) => s.clone(),
            Value::Boolean(b) => b.to_string(),
            _ => return fail(span, format!("SET '{key}': give the value as a string")),
        },
        [Sql::Identifier(i)] => i.value.clone(),
        _ => return fail(span, format!("SET '{key}' = 'value': one value")),
    };
    Ok(ends::Set { key, value, span })
}

fn plan_text(file: &str, text: &str, default_name: &str) -> Result<SqlJob, SqlError> {
    let statements = Parser::new(&GenericDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| parse_error(&e))?;
    let mut tables: BTreeMap<String, Table> = BTreeMap::new();
    let mut sets = Vec::new();
    let mut name = (job_name(default_name), Span::empty());
    let mut insert = None;
    for s in &statements {
        match s {
            Statement::CreateTable(ct) => {
                let t = Table::of(ct)?;
                if tables.contains_key(&t.name) {
                    return fail(t.span, format!("table {} is declared twice", t.name));
                }
                tables.insert(t.name.clone(), t);
            }
            Statement::Set(set) => {
                let set = set_of(set)?;
                if set.key == "pipeline.name" {
                    name = (set.value, set.span);
                } else {
                    sets.push(set);
                }
            }
            Statement::Insert(i) if insert.is_none() => insert = Some((i, false)),
            Statement::Explain { statement, .. } if insert.is_none() => match statement.as_ref() {
                Statement::Insert(i) => insert = Some((i, true)),
                other => {
                    return fail(
                        other.span(),
                        "EXPLAIN takes the job's INSERT INTO ... SELECT ...",
                    )
                }
            },
            Statement::Insert(_) | Statement::Explain { .. } => {
                return fail(
                    s.span(),
                    "a SQL job has one INSERT INTO (one sink); run another file for another",
                )
            }
            other => return fail(
                other.span(),
                "a SQL job holds CREATE TABLE, SET and one INSERT INTO ... SELECT ... statements",
            ),
        }
    }
    let Some((insert, explain)) = insert else {
        return fail(
            Span::empty(),
            "no INSERT INTO ... SELECT ...: the job writes nothing",
        );
    };
    let planned = plan::plan_insert(insert, &tables)?;
    let sources: Vec<&Table> = planned
        .sources
        .iter()
        .filter_map(|n| tables.get(n))
        .collect();
    let sink = &tables[&planned.sink];
    let mut job = ends::job_of(file, (&name.0, name.1), &sources, sink, &sets)?;
    job.pipeline = planned.pipeline;
    Ok(SqlJob { job, explain })
}

/// The parser's error, placed: it ends its message with "at Line: L, Column: C".
fn parse_error(e: &sqlparser::parser::ParserError) -> SqlError {
    let text = e.to_string();
    let text = text.strip_prefix("sql parser error: ").unwrap_or(&text);
    let (message, line, column) = match text.rsplit_once(" at Line: ") {
        Some((m, pos)) => {
            let mut parts = pos.split(", Column: ");
            let line = parts
                .next()
                .and_then(|l| l.trim().parse().ok())
                .unwrap_or(1);
            let column = parts
                .next()
                .and_then(|c| c.trim().parse().ok())
                .unwrap_or(1);
            (m.to_owned(), line, column)
        }
        None => (text.to_owned(), 1, 1),
    };
    SqlError {
        line,
        column,
        message: format!("{message} (a SQL job holds CREATE TABLE, SET and INSERT INTO ... SELECT ... statements)"),
    }
}
