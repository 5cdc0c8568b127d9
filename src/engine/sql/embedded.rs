//! A SQL job inside a TOML job file: `sql = '''…'''`, the file's only key. Its statements are
//! planned as a `.sql` file's; a mistake is named at its line and column in the job file (the
//! SQL's own position moved by where the string starts: exact for a literal string, `'''`, and
//! for a basic one, `"""`, without backslash escapes).

use serde::Deserialize;
use toml::Spanned;

use super::SqlJob;
use crate::engine::job::JobError;

/// The key a job file gives its SQL in.
pub(crate) const SQL_KEY: &str = "sql";

#[derive(Deserialize)]
struct WithSql {
    sql: Spanned<String>,
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (u64, u64) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line as u64, column as u64)
}

/// The line of the first key of `text` other than `sql` (for the message refusing it).
fn other_key(text: &str) -> Option<(String, usize)> {
    let table: toml::Table = toml::from_str(text).ok()?;
    let key = table.keys().find(|k| *k != SQL_KEY)?.clone();
    let line = text
        .lines()
        .position(|l| {
            let l = l.trim_start().trim_start_matches('[');
            l.starts_with(key.as_str()) || l.starts_with(&format!("\"{key}\""))
        })
        .map_or(1, |i| i + 1);
    Some((key, line))
}

/// The SQL job a TOML job file holds, `None` when it holds no `sql` key (or is not TOML:
/// [`crate::engine::job::Job::parse`] says why).
pub(crate) fn parse(
    file: &str,
    text: &str,
    default_name: &str,
) -> Result<Option<SqlJob>, JobError> {
    let Ok(table) = toml::from_str::<toml::Table>(text) else {
        return Ok(None);
    };
    if !table.contains_key(SQL_KEY) {
        return Ok(None);
    }
    if let Some((key, line)) = other_key(text) {
        return Err(JobError::Invalid {
            file: file.to_owned(),
            line,
            field: key,
            message: "a job file with `sql` holds nothing else: give settings as SET statements in the SQL (SET 'checkpoint.interval.ms' = '1000';)".into(),
        });
    }
    let with: WithSql = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map_or(1, |s| line_column(text, s.start).0 as usize);
        JobError::Invalid {
            file: file.to_owned(),
            line,
            field: SQL_KEY.into(),
            message: format!(
                "{}: give the job's SQL as a string (sql = '''...''')",
                e.message()
            ),
        }
    })?;
    // Where the SQL starts: after the opening quotes, and after the newline that follows
    // triple quotes (TOML drops it).
    let span = with.sql.span();
    let opening = &text[span.start..];
    let mut start = span.start
        + if opening.starts_with("'''") || opening.starts_with("\"\"\"") {
            3
        } else {
            1
        };
    if span.end - span.start >= 6 {
        if text[start..].starts_with("\r\n") {
            start += 2;
        } else if text[start..].starts_with('\n') {
            start += 1;
        }
    }
    let (base_line, base_column) = line_column(text, start);
    SqlJob::parse(file, with.sql.get_ref(), default_name)
        .map(Some)
        .map_err(|e| match e {
            JobError::Sql {
                file,
                line,
                column,
                message,
            } => {
                let (line, column) = match line {
                    0 | 1 => (base_line, base_column + column.max(1) - 1),
                    l => (base_line + l - 1, column),
                };
                JobError::Sql {
                    file,
                    line,
                    column,
                    message,
                }
            }
            other => other,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shifts_sql() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs/driver-shifts.sql");
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn a_job_file_holding_sql_plans_the_job_its_sql_file_does() {
        let sql = shifts_sql();
        let from_sql = SqlJob::parse("shifts.sql", &sql, "x").unwrap();
        for quotes in ["'''", "\"\"\""] {
            let toml = format!("# The shifts job.\nsql = {quotes}\n{sql}{quotes}\n");
            let embedded = parse("shifts.toml", &toml, "x")
                .unwrap()
                .expect("a SQL job");
            assert_eq!(
                format!("{:?}", embedded.job),
                format!("{:?}", from_sql.job),
                "{quotes}"
            );
        }
        let plain = "name = \"a\"\n";
        assert!(parse("a.toml", plain, "a").unwrap().is_none());
        assert!(parse("a.toml", "not toml [", "a").unwrap().is_none());
    }

    #[test]
    fn a_mistake_in_the_sql_is_named_at_its_place_in_the_job_file() {
        // (job file, line:column of the mistake)
        let cases = [
            ("sql = '''\nSELEC 1;\n'''\n", "a.toml:2:1:"),
            ("# c\n\nsql = '''\nCREATE TABLE a (x BIGINT);\n  INSERT INTO b SELECT x FROM a;'''", "a.toml:4:14:"),
            (
                "sql = '''\nCREATE TABLE a (x BIGINT) WITH ('connector' = 'kafka', 'topic' = 'a');\n  INSERT INTO b SELECT x FROM a;'''",
                "a.toml:3:15:",
            ),
            ("sql = '''INSERT INTO b SELECT 1 FROM a;'''", "a.toml:1:22:"),
            ("sql = \"INSERT INTO b SELECT 1 FROM a;\"", "a.toml:1:20:"),
        ];
        for (toml, place) in cases {
            let e = parse("a.toml", toml, "a").unwrap_err().to_string();
            assert!(e.starts_with(place), "{toml:?}: {e}");
        }
    }

    #[test]
    fn a_key_beside_sql_is_refused_naming_it_and_where_settings_go() {
        let e = parse("a.toml", "name = \"x\"\nsql = '''SET 'a' = 'b';'''\n", "a")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("a.toml:1: name: a job file with `sql` holds nothing else"),
            "{e}"
        );
        let e = parse("a.toml", "sql = 3\n", "a").unwrap_err().to_string();
        assert!(e.starts_with("a.toml:1: sql: "), "{e}");
        assert!(e.contains("give the job's SQL as a string"), "{e}");
    }
}
