//! The connection options every subcommand takes (`-b`, `-X`), and the client configs built
//! from them.

use onceflow::client::config::split_property;
use onceflow::client::{ClientConfig, ConfigError, ConsumerConfig, Error, ProducerConfig};

/// The CLI's default bound on calls made for the user; overridable with
/// `-X default.api.timeout.ms=...`.
const CLI_API_TIMEOUT_MS: &str = "15000";

/// Where the brokers are and the client properties: shared by every subcommand
/// (`#[command(flatten)]`).
#[derive(clap::Args, Debug, Clone)]
pub struct Conn {
    /// Bootstrap broker(s), host:port[,host:port...].
    #[arg(short = 'b', long = "brokers", default_value = "127.0.0.1:9092")]
    pub broker: String,
    /// A client property, key=value, with the Java client's names (e.g. -X linger.ms=10,
    /// -X isolation.level=read_committed, -X default.api.timeout.ms=30000). Repeatable.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    pub props: Vec<String>,
}

impl Conn {
    /// The same brokers without the -X properties (for a client the properties are not meant
    /// for).
    pub fn brokers_only(&self) -> Conn {
        Conn {
            broker: self.broker.clone(),
            props: Vec::new(),
        }
    }

    /// Every property in the order applied (a later one wins): bootstrap.servers, the CLI's
    /// default.api.timeout.ms, the settings the command derives from its own flags, then -X.
    fn pairs(&self, from_flags: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
        let mut out = vec![
            ("bootstrap.servers".to_owned(), self.broker.clone()),
            (
                "default.api.timeout.ms".to_owned(),
                CLI_API_TIMEOUT_MS.to_owned(),
            ),
        ];
        for p in from_flags.iter().chain(&self.props) {
            out.push(split_property(p)?);
        }
        Ok(out)
    }

    /// A producer config; `from_flags` are key=value settings the command derives from its
    /// flags.
    pub fn producer(&self, from_flags: &[String]) -> Result<ProducerConfig, Error> {
        Ok(ProducerConfig::from_properties(self.pairs(from_flags)?)?)
    }

    /// A consumer config; `from_flags` as for [`Conn::producer`].
    pub fn consumer(&self, from_flags: &[String]) -> Result<ConsumerConfig, Error> {
        Ok(ConsumerConfig::from_properties(self.pairs(from_flags)?)?)
    }

    /// The shared client config (admin commands).
    pub fn client(&self) -> Result<ClientConfig, Error> {
        let mut c = ClientConfig::default();
        for (k, v) in self.pairs(&[])? {
            if !c.set(&k, &v)? {
                return Err(ConfigError::Unknown {
                    name: k,
                    role: "admin client",
                }
                .into());
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(props: &[&str]) -> Conn {
        Conn {
            broker: "h:1".into(),
            props: props.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_command_line_overrides_the_defaults_and_the_flags() {
        let c = conn(&[]).consumer(&[]).unwrap();
        assert_eq!(c.client.api_timeout.as_millis(), 15_000);
        assert_eq!(c.client.bootstrap_servers, vec!["h:1".to_owned()]);
        let c = conn(&["default.api.timeout.ms=2000", "group.id=x"])
            .consumer(&["group.id=g".into()])
            .unwrap();
        assert_eq!(c.client.api_timeout.as_millis(), 2000);
        assert_eq!(c.group_id.as_deref(), Some("x"));
    }

    #[test]
    fn a_property_the_admin_client_does_not_know_is_named() {
        let e = conn(&["linger.ms=5"]).client().unwrap_err().to_string();
        assert!(e.contains("linger.ms"), "{e}");
        assert!(conn(&["linger.ms=5"]).brokers_only().client().is_ok());
        let e = conn(&["lingr.ms=5"]).producer(&[]).unwrap_err().to_string();
        assert!(e.contains("'lingr.ms'"), "{e}");
    }
}
