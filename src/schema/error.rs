//! The schema layer's one error type. Every message is one line naming the registry URL, the
//! subject or the schema id involved, and what to change.

use crate::client::error::Op;
use crate::client::retry::Retried;
use crate::client::ErrorClass;
use crate::protocol::ErrorCode;
use std::time::Duration;

/// Result alias for the schema layer.
pub type Result<T, E = SchemaError> = std::result::Result<T, E>;

/// What can go wrong reading or writing records in the schema registry's wire format.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A setting is missing or wrong.
    #[error("{0}")]
    Config(String),
    /// The registry could not be reached (connection refused, TLS failure, reset). Retried
    /// until `default.api.timeout.ms`.
    #[error("schema registry {url}: {message}")]
    Unreachable {
        /// The registry URL tried.
        url: String,
        /// What failed.
        message: String,
    },
    /// The TLS handshake with the registry failed (an untrusted or mismatched certificate, a
    /// listener that does not speak TLS). Not retried: the same handshake fails again.
    #[error("schema registry {url}: {message}; check schema.registry.ssl.truststore.location (PEM of the CA that signed the registry's certificate)")]
    Tls {
        /// The registry URL.
        url: String,
        /// What the handshake said.
        message: String,
    },
    /// The registry answered with an error.
    #[error("schema registry {url}: {what}: HTTP {status}{}: {message}", code.map(|c| format!(" (error_code {c})")).unwrap_or_default())]
    Registry {
        /// The registry URL.
        url: String,
        /// What was asked, naming the subject or the id.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The registry's `error_code`, if it sent one (40401 subject not found, 40403 schema
        /// not found, 409 incompatible, 42201 invalid schema, ...).
        code: Option<i64>,
        /// The registry's message, or the start of its body.
        message: String,
    },
    /// The registry rejected the credentials (HTTP 401 or 403). Not retried.
    #[error("schema registry {url}: {what}: HTTP {status}: {message}; check basic.auth.user.info (user:password)")]
    Unauthorized {
        /// The registry URL.
        url: String,
        /// What was asked.
        what: String,
        /// 401 or 403.
        status: u16,
        /// The registry's message.
        message: String,
    },
    /// A record's schema id is not known to the registry.
    #[error("schema id {id} is not known to the schema registry at {url}: the record was written against another registry, or its schema was deleted")]
    UnknownId {
        /// The id from the record.
        id: u32,
        /// The registry URL.
        url: String,
    },
    /// Nothing is registered under the subject (or not that version).
    #[error("subject '{subject}' has no {what} in the schema registry at {url}: register a schema for it, or turn auto.register.schemas on")]
    UnknownSubject {
        /// The subject.
        subject: String,
        /// "schema", "version N" or "matching schema".
        what: String,
        /// The registry URL.
        url: String,
    },
    /// The registry's answer was not what its API promises.
    #[error("schema registry {url}: {what}: unexpected answer: {message}")]
    BadAnswer {
        /// The registry URL.
        url: String,
        /// What was asked.
        what: String,
        /// What was wrong with the answer.
        message: String,
    },
    /// Retried until the budget ran out.
    #[error("{what}: no answer within {after:?}; raise default.api.timeout.ms or check the schema registry")]
    Timeout {
        /// What was tried, with its last error.
        what: String,
        /// The budget.
        after: Duration,
    },
    /// A schema could not be parsed.
    #[error("invalid {kind} schema{}: {message}", origin.as_ref().map(|o| format!(" ({o})")).unwrap_or_default())]
    InvalidSchema {
        /// "Avro", "Protobuf", "JSON".
        kind: &'static str,
        /// Where it came from: a file, a subject, an id.
        origin: Option<String>,
        /// The parser's message.
        message: String,
    },
    /// A record is not in the wire format (too short, a magic byte other than 0).
    #[error("{0}")]
    Framing(String),
    /// A payload does not decode with its schema (corrupt, truncated, or written with
    /// another schema than its id says).
    #[error("cannot decode a record written with schema id {id}: {message}")]
    Decode {
        /// The schema id.
        id: u32,
        /// What did not fit.
        message: String,
    },
    /// A value does not fit the schema it is written with.
    #[error("cannot encode the value with the schema of subject '{subject}': {message}")]
    Encode {
        /// The subject.
        subject: String,
        /// What did not fit.
        message: String,
    },
}

impl SchemaError {
    /// Whether the record itself is at fault: its framing, its payload, a schema id the
    /// registry does not know or a schema that does not compile, a value that does not fit.
    /// Another record may be fine; the registry's own failures say nothing of the record.
    pub fn is_record_fault(&self) -> bool {
        matches!(
            self,
            SchemaError::Framing(_)
                | SchemaError::Decode { .. }
                | SchemaError::Encode { .. }
                | SchemaError::UnknownId { .. }
                | SchemaError::InvalidSchema { .. }
        )
    }

    /// Whether retrying the same request can help: the registry was unreachable, overloaded
    /// (HTTP 429) or failed on its side (5xx).
    pub fn is_retriable(&self) -> bool {
        match self {
            SchemaError::Unreachable { .. } => true,
            SchemaError::Registry { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}

impl Retried for SchemaError {
    fn class_in(&self, _op: Op) -> ErrorClass {
        if self.is_retriable() {
            ErrorClass::Retriable
        } else {
            ErrorClass::Fatal
        }
    }
    fn code(&self) -> Option<ErrorCode> {
        None
    }
    fn timeout(what: String, after: Duration) -> SchemaError {
        SchemaError::Timeout { what, after }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unreachable_overloaded_or_failing_registry_is_retried() {
        let answer = |status| SchemaError::Registry {
            url: "http://r".into(),
            what: "GET /schemas/ids/1".into(),
            status,
            code: None,
            message: String::new(),
        };
        let unreachable = SchemaError::Unreachable {
            url: "http://r".into(),
            message: "connection refused".into(),
        };
        let cases = [
            (unreachable, true),
            (answer(500), true),
            (answer(503), true),
            (answer(429), true),
            (answer(404), false),
            (answer(409), false),
            (answer(422), false),
            (
                SchemaError::UnknownId {
                    id: 7,
                    url: "http://r".into(),
                },
                false,
            ),
            (SchemaError::Config("x".into()), false),
        ];
        for (e, want) in cases {
            assert_eq!(e.is_retriable(), want, "{e}");
        }
    }

    #[test]
    fn the_record_is_at_fault_for_its_bytes_and_its_schema_id_not_for_the_registry() {
        let url = || "http://r".to_owned();
        #[rustfmt::skip]
        let cases = [
            (SchemaError::Framing("short".into()),                                 true),
            (SchemaError::Decode { id: 1, message: "eof".into() },                 true),
            (SchemaError::Encode { subject: "s".into(), message: "x".into() },     true),
            (SchemaError::UnknownId { id: 7, url: url() },                         true),
            (SchemaError::InvalidSchema { kind: "Avro", origin: None, message: "x".into() }, true),
            (SchemaError::Unreachable { url: url(), message: "refused".into() },  false),
            (SchemaError::Timeout { what: "x".into(), after: Duration::from_secs(1) }, false),
            (SchemaError::Unauthorized { url: url(), what: "x".into(), status: 401, message: String::new() }, false),
            (SchemaError::Config("x".into()),                                      false),
        ];
        for (e, want) in cases {
            assert_eq!(e.is_record_fault(), want, "{e}");
        }
    }
}
