//! The checks every property value goes through, and the error that names what is wrong.

use std::time::Duration;

/// A configuration problem, naming the property and what is accepted.
///
/// # Examples
/// ```
/// use onceflow::client::{ConfigError, ConsumerConfig};
/// match ConsumerConfig::from_properties([("isolation.levl", "read_committed")]) {
///     Err(ConfigError::Unknown { name, .. }) => assert_eq!(name, "isolation.levl"),
///     other => panic!("a misspelt property must not be ignored: {other:?}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The property is not one this client knows.
    #[error("unknown property '{name}' for a {role}; see the configuration table in docs/guide/configuration.md")]
    Unknown {
        /// The name given.
        name: String,
        /// producer / consumer / admin client.
        role: &'static str,
    },
    /// The value does not parse or is out of range.
    #[error("invalid value '{value}' for property '{name}': expected {expected}")]
    Invalid {
        /// The property.
        name: String,
        /// The value given.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// Two settings contradict each other.
    #[error("{0}")]
    Conflict(String),
    /// A required setting is missing.
    #[error("missing required property '{0}'")]
    Missing(&'static str),
}

pub(crate) fn invalid(name: &str, value: &str, expected: &'static str) -> ConfigError {
    ConfigError::Invalid {
        name: name.to_owned(),
        value: value.to_owned(),
        expected,
    }
}

pub(crate) fn parse_ms(name: &str, value: &str) -> Result<Duration, ConfigError> {
    value
        .trim()
        .parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| invalid(name, value, "a non-negative number of milliseconds"))
}

pub(crate) fn parse_usize(name: &str, value: &str) -> Result<usize, ConfigError> {
    value
        .trim()
        .parse::<usize>()
        .map_err(|_| invalid(name, value, "a non-negative integer"))
}

pub(crate) fn parse_i32(name: &str, value: &str) -> Result<i32, ConfigError> {
    value
        .trim()
        .parse::<i32>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| invalid(name, value, "a non-negative 32-bit integer"))
}

pub(crate) fn parse_bool(name: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(name, value, "true or false")),
    }
}

pub(crate) fn non_empty(name: &str, value: &str) -> Result<String, ConfigError> {
    let v = value.trim();
    if v.is_empty() {
        return Err(invalid(name, value, "a non-empty string"));
    }
    Ok(v.to_owned())
}
