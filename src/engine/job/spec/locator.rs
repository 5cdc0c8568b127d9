//! Errors with line and field: turns toml's spans into `file:line: field: message`.

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::engine::job::JobError;

/// Turns spans into `file:line: field: message`.
pub(super) struct Locator<'a> {
    file: &'a str,
    text: &'a str,
    tree: Option<Spanned<DeTable<'a>>>,
}

impl<'a> Locator<'a> {
    pub(super) fn new(file: &'a str, text: &'a str) -> Self {
        Self {
            file,
            text,
            tree: DeTable::parse(text).ok(),
        }
    }

    pub(super) fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    }

    /// The dotted path of the deepest key whose key or value holds `offset`.
    pub(super) fn field_at(&self, offset: usize) -> String {
        let Some(tree) = &self.tree else {
            return String::new();
        };
        let mut path = Vec::new();
        find_in_table(tree.get_ref(), offset, &mut path);
        if path.first().map(String::as_str) == Some("pipeline") {
            path.remove(0);
        }
        path.join(".")
    }

    /// An error at `span`, naming `field` (or the key found at the span when `None`).
    pub(super) fn at(
        &self,
        span: &Range<usize>,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> JobError {
        JobError::Invalid {
            file: self.file.to_owned(),
            line: self.line(span.start),
            field: field.map_or_else(|| self.field_at(span.start), str::to_owned),
            message: message.into(),
        }
    }

    /// The span of the value at the dotted `field` (`settings.checkpoint.interval.ms`), if
    /// the file gives it.
    pub(super) fn span_of(&self, field: &str) -> Option<Range<usize>> {
        let mut table = self.tree.as_ref()?.get_ref();
        let mut parts = field.split('.').peekable();
        while let Some(part) = parts.next() {
            let (_, value) = table.iter().find(|(k, _)| k.get_ref() == part)?;
            if parts.peek().is_none() {
                return Some(value.span());
            }
            let DeValue::Table(t) = value.get_ref() else {
                return None;
            };
            table = t;
        }
        None
    }

    /// An error naming `field`, at the line of its value; when the file does not give it
    /// (the rule broke on its default), at the first of `near` the file gives, else line 1.
    pub(super) fn at_field(
        &self,
        field: &str,
        near: &[&str],
        message: impl Into<String>,
    ) -> JobError {
        let span = std::iter::once(field)
            .chain(near.iter().copied())
            .find_map(|f| self.span_of(f))
            .unwrap_or(0..0);
        self.at(&span, Some(field), message)
    }

    /// A toml/serde error, reworded as "expected X, got Y" where it can be.
    pub(super) fn toml_error(&self, e: &toml::de::Error) -> JobError {
        let span = e.span().unwrap_or(0..0);
        if self.tree.is_none() {
            return JobError::Syntax {
                file: self.file.to_owned(),
                line: self.line(span.start),
                message: one_line(e.message()),
            };
        }
        let mut field = self.field_at(span.start);
        let msg = one_line(e.message());
        let msg = msg.as_str();
        let message = if let Some(rest) = msg
            .strip_prefix("invalid type: ")
            .or_else(|| msg.strip_prefix("invalid value: "))
        {
            match rest.split_once(", expected ") {
                Some((got, expected)) => {
                    // serde names integer types by their Rust names.
                    let expected = match expected {
                        "u32" | "u64" | "i64" => "a whole number",
                        // A `*.ms` key written without its `.ms`.
                        "struct RawMs" => "milliseconds written as <name>.ms = <whole number>",
                        other => other,
                    };
                    format!("expected {expected}, got {got}")
                }
                None => msg.to_owned(),
            }
        } else if let Some(name) = msg
            .strip_prefix("missing field `")
            .and_then(|r| r.strip_suffix('`'))
        {
            field = join(&field, name);
            "missing; this field is required".to_owned()
        } else if msg.starts_with("wanted exactly 1 element") {
            field = "pipeline".to_owned();
            "each [[pipeline]] entry holds exactly one operator: filter, project, key_by, \
             window or aggregate"
                .to_owned()
        } else {
            msg.to_owned()
        };
        JobError::Invalid {
            file: self.file.to_owned(),
            line: self.line(span.start),
            field,
            message,
        }
    }
}

/// Parser messages may span lines; a user's error is one.
pub(super) fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

pub(super) fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_owned()
    } else {
        format!("{a}.{b}")
    }
}

pub(super) fn holds(span: &Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || (span.is_empty() && span.start == offset)
}

pub(super) fn find_in_table(table: &DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    for (key, value) in table {
        path.push(key.get_ref().to_string());
        if find_in_value(value.get_ref(), offset, path)
            || holds(&key.span(), offset)
            || holds(&value.span(), offset)
        {
            return true;
        }
        path.pop();
    }
    false
}

pub(super) fn find_in_value(value: &DeValue<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    match value {
        DeValue::Table(t) => find_in_table(t, offset, path),
        DeValue::Array(items) => items
            .iter()
            .any(|item| find_in_value(item.get_ref(), offset, path) || holds(&item.span(), offset)),
        _ => false,
    }
}
