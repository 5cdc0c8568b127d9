//! The security settings of a cluster's connections checked once, and the TLS client built
//! from them.

use super::tls::TlsConnector;
use super::SecurityConfig;
use crate::client::config::ConfigError;

/// What every connection of a cluster needs to be secured: the settings, and the TLS client
/// built from them once.
#[derive(Debug, Clone, Default)]
pub(crate) struct Secured {
    pub(crate) config: SecurityConfig,
    pub(crate) tls: Option<TlsConnector>,
}

impl Secured {
    /// Checks the settings and reads the TLS files.
    ///
    /// # Errors
    /// [`Error::Config`](crate::client::Error::Config) naming the property to change.
    pub(crate) fn new(config: &SecurityConfig) -> crate::client::Result<Secured> {
        config.validate()?;
        let tls = match config.protocol.tls() {
            true => Some(
                TlsConnector::new(config)
                    .map_err(|m| crate::client::Error::Config(ConfigError::Conflict(m)))?,
            ),
            false => None,
        };
        Ok(Secured {
            config: config.clone(),
            tls,
        })
    }
}
