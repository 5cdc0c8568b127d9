//! `-b` and `-X key=value` handling shared by the subcommands.

use onceflow::client::config::split_property;
use onceflow::client::{ConsumerConfig, Error, ProducerConfig};

/// The CLI's default bound on calls made for the user; overridable with
/// `-X default.api.timeout.ms=...`.
const CLI_API_TIMEOUT_MS: &str = "15000";

fn pairs(broker: &str, props: &[String]) -> Result<Vec<(String, String)>, Error> {
    let mut out = vec![
        ("bootstrap.servers".to_owned(), broker.to_owned()),
        (
            "default.api.timeout.ms".to_owned(),
            CLI_API_TIMEOUT_MS.to_owned(),
        ),
    ];
    for p in props {
        out.push(split_property(p)?);
    }
    Ok(out)
}

/// Producer config from -b and -X.
pub fn producer(broker: &str, props: &[String]) -> Result<ProducerConfig, Error> {
    Ok(ProducerConfig::from_properties(pairs(broker, props)?)?)
}

/// Consumer config from -b and -X.
pub fn consumer(broker: &str, props: &[String]) -> Result<ConsumerConfig, Error> {
    Ok(ConsumerConfig::from_properties(pairs(broker, props)?)?)
}

/// Shared client config from -b and -X (admin commands).
pub fn client(broker: &str, props: &[String]) -> Result<onceflow::client::ClientConfig, Error> {
    let mut c = onceflow::client::ClientConfig::default();
    for (k, v) in pairs(broker, props)? {
        if !c.set(&k, &v)? {
            return Err(onceflow::client::ConfigError::Unknown {
                name: k,
                role: "admin client",
            }
            .into());
        }
    }
    Ok(c)
}
