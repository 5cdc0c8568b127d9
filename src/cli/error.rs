//! The command line's error: what the user did wrong, or what failed underneath. Each prints
//! as one line (after `onceflow: error: `) naming what is wrong and what to change; every
//! variant exits with status 1 (clap's own argument errors exit with 2).

use onceflow::client::{ConfigError, Error as ClientError};

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The flags ask for something that cannot be done; the message names the flag and what to
    /// give instead.
    #[error("{0}")]
    Usage(String),
    /// Input the command was pointed at (a --prepared JSON or file) cannot be used.
    #[error("{0}")]
    Input(String),
    /// The command ran but could not do what was asked; the message says what happened and
    /// what state it left behind.
    #[error("{0}")]
    Failed(String),
    /// The client failed: broker unreachable, unknown topic, a broker's refusal, a bad -X.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The schema registry or a schema failed: unreachable, an unknown id, a value that does
    /// not fit its schema.
    #[error(transparent)]
    Schema(#[from] onceflow::schema::SchemaError),
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> Self {
        CliError::Client(e.into())
    }
}

pub type Result<T> = std::result::Result<T, CliError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_prints_its_message_alone() {
        let usage = CliError::Usage("-K needs a non-empty separator".into());
        assert_eq!(usage.to_string(), "-K needs a non-empty separator");
        let config: CliError = onceflow::client::config::split_property("x")
            .unwrap_err()
            .into();
        assert!(matches!(config, CliError::Client(_)));
        assert!(config.to_string().contains("key=value"), "{config}");
    }
}
