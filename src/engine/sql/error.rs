//! A SQL job's mistakes: one line naming the line and column and what to change.

use sqlparser::tokenizer::Span;

/// What is wrong, and where in the SQL text (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SqlError {
    pub line: u64,
    pub column: u64,
    pub message: String,
}

/// An error at the start of `span` (line 1, column 1 when the parser gave none).
pub(crate) fn at(span: Span, message: impl Into<String>) -> SqlError {
    SqlError {
        line: span.start.line.max(1),
        column: span.start.column.max(1),
        message: message.into(),
    }
}

/// `Err` of [`at`].
pub(crate) fn fail<T>(span: Span, message: impl Into<String>) -> Result<T, SqlError> {
    Err(at(span, message))
}
