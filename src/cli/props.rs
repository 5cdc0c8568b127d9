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
    /// A Java properties file of client properties (key=value lines, # comments), applied
    /// before -X: the place for sasl.jaas.config and other secrets, which then stay out of the
    /// shell's history and the process list.
    #[arg(short = 'F', long = "config-file", value_name = "FILE")]
    pub config_file: Option<std::path::PathBuf>,
}

/// Whether a property is about reaching the cluster (security), so that it goes to every
/// client a command makes, also those the other -X properties are not meant for.
fn reaches_the_cluster(name: &str) -> bool {
    name == "security.protocol" || name.starts_with("ssl.") || name.starts_with("sasl.")
}

/// The key=value lines of a Java properties file (blank lines and # or ! comments skipped).
fn read_properties(path: &std::path::Path) -> Result<Vec<String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::Conflict(format!("cannot read --config-file {}: {e}", path.display()))
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        if !line.contains('=') {
            return Err(ConfigError::Conflict(format!(
                "--config-file {} line {}: expected key=value",
                path.display(),
                i + 1
            )));
        }
        out.push(line.to_owned());
    }
    Ok(out)
}

impl Conn {
    /// The same brokers without the -X properties (for a client the properties are not meant
    /// for).
    ///
    /// The security properties (`security.protocol`, `ssl.*`, `sasl.*`) stay: every client
    /// needs them to reach a secured cluster.
    ///
    /// # Errors
    /// The config file cannot be read.
    pub fn brokers_only(&self) -> Result<Conn, Error> {
        let mut props = Vec::new();
        for p in self.file_props()?.iter().chain(&self.props) {
            if reaches_the_cluster(split_property(p)?.0.as_str()) {
                props.push(p.clone());
            }
        }
        Ok(Conn {
            broker: self.broker.clone(),
            props,
            config_file: None,
        })
    }

    fn file_props(&self) -> Result<Vec<String>, ConfigError> {
        match &self.config_file {
            Some(path) => read_properties(path),
            None => Ok(Vec::new()),
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
        let file = self.file_props()?;
        for p in from_flags.iter().chain(&file).chain(&self.props) {
            out.push(split_property(p)?);
        }
        Ok(out)
    }

    /// The same without the schema registry's properties (which `consume` and `produce` give
    /// to the registry client, cli/schema.rs); the config file's properties are carried over
    /// as -X.
    pub fn without_registry_properties(&self) -> Result<Conn, ConfigError> {
        let mut props = Vec::new();
        for p in self.file_props()?.iter().chain(&self.props) {
            if !onceflow::schema::RegistryConfig::owns(&split_property(p)?.0) {
                props.push(p.clone());
            }
        }
        Ok(Conn {
            broker: self.broker.clone(),
            props,
            config_file: None,
        })
    }

    /// Every -F and -X property, in the order applied (for the schema registry's client,
    /// which picks its own).
    pub fn all_properties(&self) -> Result<Vec<(String, String)>, ConfigError> {
        let file = self.file_props()?;
        file.iter()
            .chain(&self.props)
            .map(|p| split_property(p))
            .collect()
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
impl Conn {
    /// Broker `h:1` with these -X properties (for the command modules' tests).
    pub(crate) fn for_tests(props: &[&str]) -> Conn {
        Conn {
            broker: "h:1".into(),
            props: props.iter().map(|s| s.to_string()).collect(),
            config_file: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(props: &[&str]) -> Conn {
        Conn::for_tests(props)
    }

    #[test]
    fn security_properties_reach_every_client_and_a_config_file_comes_before_x() {
        let dir = std::env::temp_dir().join(format!("onceflow-props-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("client.properties");
        std::fs::write(
            &file,
            "# secured\nsecurity.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=alice\nsasl.password=pw\nlinger.ms=7\n",
        )
        .unwrap();
        let mut c = conn(&["linger.ms=9"]);
        c.config_file = Some(file.clone());
        let p = c.producer(&[]).unwrap();
        assert_eq!(p.linger.as_millis(), 9, "-X wins over the file");
        assert_eq!(p.client.security.username.as_deref(), Some("alice"));
        // The admin client takes no linger.ms, but the security settings go with it.
        let admin = c.brokers_only().unwrap().client().unwrap();
        assert_eq!(admin.security.username.as_deref(), Some("alice"));
        std::fs::write(&file, "security.protocol\n").unwrap();
        let e = c.producer(&[]).unwrap_err().to_string();
        assert!(e.contains("line 1: expected key=value"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
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
        assert!(conn(&["linger.ms=5"])
            .brokers_only()
            .unwrap()
            .client()
            .is_ok());
        let e = conn(&["lingr.ms=5"]).producer(&[]).unwrap_err().to_string();
        assert!(e.contains("'lingr.ms'"), "{e}");
    }
}
