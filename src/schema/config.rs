//! The schema registry's settings, read from the Java serializers' property names.

use super::error::{Result, SchemaError};
use super::subject::{Part, SubjectNameStrategy};
use crate::client::config::{Secret, SecurityConfig};
use std::time::Duration;

/// How to reach the schema registry and how the serdes use it.
///
/// # Examples
/// ```
/// use onceflow::schema::RegistryConfig;
/// let c = RegistryConfig::from_properties([
///     ("schema.registry.url", "http://127.0.0.1:8081"),
///     ("basic.auth.user.info", "alice:secret"),
///     ("auto.register.schemas", "false"),
/// ])?;
/// assert_eq!(c.urls, ["http://127.0.0.1:8081"]);
/// assert!(!c.auto_register);
/// # Ok::<(), onceflow::schema::SchemaError>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RegistryConfig {
    /// `schema.registry.url`: one or more base URLs (comma-separated), `http://` or
    /// `https://`, tried in order when one cannot be reached. A URL may carry `user:password@`
    /// with `basic.auth.credentials.source=URL`.
    pub urls: Vec<String>,
    /// `basic.auth.user.info` (`user:password`), sent as HTTP basic authentication.
    pub user_info: Option<Secret>,
    /// `schema.registry.ssl.*`: the trust store, the client's key and certificate, hostname
    /// verification, as the brokers' `ssl.*` settings (PEM files).
    pub tls: SecurityConfig,
    /// `default.api.timeout.ms` (60000): how long a registry call is retried while the
    /// registry is unreachable or answers 5xx/429.
    pub api_timeout: Duration,
    /// `schema.registry.request.timeout.ms` (30000): one HTTP request, connect included.
    pub request_timeout: Duration,
    /// `retry.backoff.ms` (100) and `retry.backoff.max.ms` (1000).
    pub backoff: (Duration, Duration),
    /// `auto.register.schemas` (true): a serializer registers its schema under the subject;
    /// false: it looks the schema up and fails if it is not registered.
    pub auto_register: bool,
    /// `use.latest.version` (false): a serializer writes with the subject's latest schema
    /// (with `auto.register.schemas=false`), whatever schema it was given.
    pub use_latest_version: bool,
    /// `json.fail.invalid.schema` (false): a JSON Schema deserializer validates every value
    /// against its schema (a serializer always does).
    pub json_fail_invalid_schema: bool,
    /// `key.subject.name.strategy` (topic).
    pub key_strategy: SubjectNameStrategy,
    /// `value.subject.name.strategy` (topic).
    pub value_strategy: SubjectNameStrategy,
    /// `basic.auth.credentials.source` was URL: credentials come from the URL.
    credentials_from_url: bool,
}

impl Default for RegistryConfig {
    fn default() -> RegistryConfig {
        RegistryConfig {
            urls: Vec::new(),
            user_info: None,
            tls: SecurityConfig::new(),
            api_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            backoff: (Duration::from_millis(100), Duration::from_secs(1)),
            auto_register: true,
            use_latest_version: false,
            json_fail_invalid_schema: false,
            key_strategy: SubjectNameStrategy::Topic,
            value_strategy: SubjectNameStrategy::Topic,
            credentials_from_url: false,
        }
    }
}

impl RegistryConfig {
    /// Reads the settings; `schema.registry.url` is required.
    ///
    /// # Errors
    /// [`SchemaError::Config`] naming an unknown property, a bad value, or the missing URL.
    pub fn from_properties<K: AsRef<str>, V: AsRef<str>>(
        props: impl IntoIterator<Item = (K, V)>,
    ) -> Result<RegistryConfig> {
        let mut c = RegistryConfig::default();
        for (k, v) in props {
            if !c.set(k.as_ref(), v.as_ref())? {
                return Err(SchemaError::Config(format!(
                    "unknown schema registry property '{}'",
                    k.as_ref()
                )));
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// Applies one property; `Ok(false)` when `name` is not a registry property (so a caller
    /// can hand it to the Kafka client instead). `default.api.timeout.ms`, `retry.backoff.ms`
    /// and `retry.backoff.max.ms` are the Kafka client's too: a caller gives them to both.
    ///
    /// Long: one match arm per property, read as a table.
    ///
    /// # Errors
    /// [`SchemaError::Config`] naming the property and what it accepts.
    pub fn set(&mut self, name: &str, value: &str) -> Result<bool> {
        let v = value.trim();
        let ms = |v: &str| -> Result<Duration> {
            v.parse::<u64>()
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis)
                .ok_or_else(|| {
                    SchemaError::Config(format!(
                        "{name}={value} is not a positive number of milliseconds"
                    ))
                })
        };
        let flag = |v: &str| -> Result<bool> {
            match v.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(SchemaError::Config(format!(
                    "{name}={value} must be true or false"
                ))),
            }
        };
        match name {
            "schema.registry.url" => {
                self.urls = v
                    .split(',')
                    .map(|u| u.trim().trim_end_matches('/').to_owned())
                    .filter(|u| !u.is_empty())
                    .collect();
            }
            "basic.auth.user.info" | "schema.registry.basic.auth.user.info" => {
                if !v.contains(':') {
                    return Err(SchemaError::Config(format!(
                        "{name} must be user:password"
                    )));
                }
                self.user_info = Some(Secret::new(v));
            }
            "basic.auth.credentials.source" => match v.to_ascii_uppercase().as_str() {
                "USER_INFO" => self.credentials_from_url = false,
                "URL" => self.credentials_from_url = true,
                _ => {
                    return Err(SchemaError::Config(format!(
                        "{name}={value} is not supported: use USER_INFO (with basic.auth.user.info) or URL (user:password@ in schema.registry.url)"
                    )))
                }
            },
            "default.api.timeout.ms" => self.api_timeout = ms(v)?,
            "schema.registry.request.timeout.ms" => self.request_timeout = ms(v)?,
            "retry.backoff.ms" => self.backoff.0 = ms(v)?,
            "retry.backoff.max.ms" => self.backoff.1 = ms(v)?,
            "auto.register.schemas" => self.auto_register = flag(v)?,
            "use.latest.version" => self.use_latest_version = flag(v)?,
            "json.fail.invalid.schema" => self.json_fail_invalid_schema = flag(v)?,
            "key.subject.name.strategy" => {
                self.key_strategy = SubjectNameStrategy::parse(name, v)?
            }
            "value.subject.name.strategy" => {
                self.value_strategy = SubjectNameStrategy::parse(name, v)?
            }
            _ => {
                let Some(ssl) = name.strip_prefix("schema.registry.") else {
                    return Ok(false);
                };
                if !ssl.starts_with("ssl.") {
                    return Ok(false);
                }
                return match self.tls.set(ssl, value) {
                    Ok(true) => Ok(true),
                    Ok(false) => Ok(false),
                    Err(e) => Err(SchemaError::Config(format!("schema.registry.{e}"))),
                };
            }
        }
        Ok(true)
    }

    /// The subject a schema named `record_name` is registered under for the `part` of the
    /// records of `topic`, by the part's subject name strategy.
    ///
    /// # Errors
    /// [`SchemaError::Config`] when a record strategy meets a schema without a name.
    pub fn subject(&self, topic: &str, part: Part, record_name: Option<&str>) -> Result<String> {
        let strategy = match part {
            Part::Key => self.key_strategy,
            Part::Value => self.value_strategy,
        };
        strategy.subject(topic, part, record_name)
    }

    /// Whether `name` is the registry's own property (not the Kafka client's): the
    /// `schema.registry.*` and `basic.auth.*` settings and the serdes' settings. A tool that
    /// reads one property list for both clients splits it with this; `default.api.timeout.ms`,
    /// `retry.backoff.ms` and `retry.backoff.max.ms` are both clients'.
    ///
    /// # Examples
    /// ```
    /// use onceflow::schema::RegistryConfig;
    /// assert!(RegistryConfig::owns("basic.auth.user.info"));
    /// assert!(RegistryConfig::owns("auto.register.schemas"));
    /// assert!(!RegistryConfig::owns("linger.ms"));
    /// ```
    pub fn owns(name: &str) -> bool {
        name.starts_with("schema.registry.")
            || name.starts_with("basic.auth.")
            || matches!(
                name,
                "auto.register.schemas"
                    | "use.latest.version"
                    | "json.fail.invalid.schema"
                    | "key.subject.name.strategy"
                    | "value.subject.name.strategy"
            )
    }

    /// Checks the settings fit together.
    ///
    /// # Errors
    /// [`SchemaError::Config`]: no URL, a URL that is not http(s), credentials in two places.
    pub fn validate(&self) -> Result<()> {
        if self.urls.is_empty() {
            return Err(SchemaError::Config(
                "schema.registry.url is not set: give the schema registry's URL, e.g. http://127.0.0.1:8081 (-r on the command line)".into(),
            ));
        }
        for u in &self.urls {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(SchemaError::Config(format!(
                    "schema.registry.url {u} must start with http:// or https://"
                )));
            }
            let in_url = authority(u).contains('@');
            if in_url && !self.credentials_from_url {
                return Err(SchemaError::Config(format!(
                    "schema.registry.url {} carries credentials: set basic.auth.credentials.source=URL to use them, or move them to basic.auth.user.info",
                    redact(u)
                )));
            }
        }
        if self.credentials_from_url && self.user_info.is_some() {
            return Err(SchemaError::Config(
                "basic.auth.credentials.source=URL and basic.auth.user.info are both set: keep one"
                    .into(),
            ));
        }
        if self.backoff.0 > self.backoff.1 {
            return Err(SchemaError::Config(format!(
                "retry.backoff.ms ({} ms) is larger than retry.backoff.max.ms ({} ms)",
                self.backoff.0.as_millis(),
                self.backoff.1.as_millis()
            )));
        }
        Ok(())
    }
}

/// The `host:port` part of a URL (with `user:password@` if present).
pub(crate) fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// A URL without its credentials, for messages.
pub(crate) fn redact(url: &str) -> String {
    match authority(url).rsplit_once('@') {
        Some((_, host)) => url.replacen(authority(url), &format!("***@{host}"), 1),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(props: &[(&str, &str)]) -> Result<RegistryConfig> {
        RegistryConfig::from_properties(props.iter().copied())
    }

    #[test]
    fn settings_table() {
        let url = ("schema.registry.url", "http://r:8081/");
        #[rustfmt::skip]
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[url],                                                     ""),
            (&[],                                                        "schema.registry.url is not set"),
            (&[("schema.registry.url", "r:8081")],                       "must start with http"),
            (&[url, ("basic.auth.user.info", "alice")],                  "must be user:password"),
            (&[("schema.registry.url", "http://a:b@r:8081")],            "carries credentials"),
            (&[("schema.registry.url", "http://a:b@r:8081"), ("basic.auth.credentials.source", "URL")], ""),
            (&[url, ("basic.auth.credentials.source", "SASL_INHERIT")],  "is not supported"),
            (&[url, ("auto.register.schemas", "yes")],                   "must be true or false"),
            (&[url, ("default.api.timeout.ms", "0")],                    "positive number of milliseconds"),
            (&[url, ("value.subject.name.strategy", "x")],               "not a subject name strategy"),
            (&[url, ("schema.registry.ssl.truststore.location", "/ca.pem")], ""),
            (&[url, ("schema.registry.ssl.bogus", "1")],                 "unknown schema registry property 'schema.registry.ssl.bogus'"),
            (&[url, ("linger.ms", "5")],                                 "unknown schema registry property 'linger.ms'"),
            (&[url, ("retry.backoff.ms", "5000")],                       "larger than retry.backoff.max.ms"),
        ];
        for (props, want) in cases {
            match config(props) {
                Ok(c) => {
                    assert_eq!(*want, "", "{props:?}");
                    assert!(c.urls.iter().all(|u| !u.ends_with('/')));
                }
                Err(e) => {
                    assert!(!want.is_empty(), "{props:?}: {e}");
                    assert!(e.to_string().contains(want), "{props:?}: {e}");
                }
            }
        }
    }

    #[test]
    fn credentials_never_appear_in_messages() {
        let e = config(&[("schema.registry.url", "http://alice:pw@r:8081")])
            .unwrap_err()
            .to_string();
        assert!(!e.contains("pw"), "{e}");
        assert_eq!(redact("https://a:b@r:1/x"), "https://***@r:1/x");
        assert_eq!(redact("https://r:1"), "https://r:1");
    }
}
