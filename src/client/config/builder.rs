//! Configs built the way rust-rdkafka's `ClientConfig::new().set(…)` builds them: Kafka
//! property names chained on a builder, every name and value checked once, at `build`.
//!
//! The typed fields of [`ProducerConfig`] and [`ConsumerConfig`] stay the place for code that
//! knows its settings; the builder is for settings that arrive as properties (a file, flags, an
//! environment) or for readers who know the Java names.

use super::{ConfigError, ConsumerConfig, ProducerConfig};
use std::marker::PhantomData;

/// A config that can be built from Kafka property names.
pub trait FromProperties: Sized {
    /// The config with the defaults, each property applied in order.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first unknown property or bad value.
    fn from_property_list(props: &[(String, String)]) -> Result<Self, ConfigError>;
}

impl FromProperties for ProducerConfig {
    fn from_property_list(props: &[(String, String)]) -> Result<Self, ConfigError> {
        ProducerConfig::from_properties(props.iter().map(|(k, v)| (k, v)))
    }
}

impl FromProperties for ConsumerConfig {
    fn from_property_list(props: &[(String, String)]) -> Result<Self, ConfigError> {
        ConsumerConfig::from_properties(props.iter().map(|(k, v)| (k, v)))
    }
}

/// Collects properties for a `T` ([`ProducerConfig::builder`], [`ConsumerConfig::builder`]).
/// A later `set` of the same name wins, as in a Java properties file.
#[derive(Debug, Clone)]
pub struct PropertiesBuilder<T> {
    props: Vec<(String, String)>,
    _config: PhantomData<fn() -> T>,
}

impl<T: FromProperties> PropertiesBuilder<T> {
    pub(crate) fn new() -> Self {
        PropertiesBuilder {
            props: Vec::new(),
            _config: PhantomData,
        }
    }

    /// Sets the Kafka property `name` (the Java client's names, e.g. `linger.ms`; a few
    /// librdkafka spellings are accepted too) to `value`. Checked at [`Self::build`].
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ProducerConfig;
    /// // A later setting of the same name wins, as in a properties file.
    /// let c = ProducerConfig::builder().set("linger.ms", "5").set("linger.ms", "50").build()?;
    /// assert_eq!(c.linger.as_millis(), 50);
    /// # Ok::<(), onceflow::client::ConfigError>(())
    /// ```
    pub fn set(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.props.push((name.into(), value.into()));
        self
    }

    /// `bootstrap.servers`: `host:port`, comma-separated.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ConsumerConfig;
    /// let c = ConsumerConfig::builder().bootstrap_servers("kafka-1:9092,kafka-2:9092").build()?;
    /// assert_eq!(c.client.bootstrap_servers.len(), 2);
    /// # Ok::<(), onceflow::client::ConfigError>(())
    /// ```
    pub fn bootstrap_servers(self, servers: impl Into<String>) -> Self {
        self.set("bootstrap.servers", servers)
    }

    /// The config.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first unknown property or bad value, and what to change.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ConsumerConfig;
    /// let e = ConsumerConfig::builder().set("isolation.level", "committed").build().unwrap_err();
    /// assert!(e.to_string().contains("read_committed or read_uncommitted"), "{e}");
    /// ```
    pub fn build(self) -> Result<T, ConfigError> {
        T::from_property_list(&self.props)
    }
}

impl ProducerConfig {
    /// A builder of Kafka properties, checked at `build`.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::ProducerConfig;
    /// let config = ProducerConfig::builder()
    ///     .bootstrap_servers("127.0.0.1:9092")
    ///     .set("linger.ms", "20")
    ///     .set("transactional.id", "rides-cleanser-0")
    ///     .build()?;
    /// assert_eq!(config.linger.as_millis(), 20);
    /// assert!(ProducerConfig::builder().set("lingr.ms", "20").build().is_err());
    /// # Ok::<(), onceflow::client::ConfigError>(())
    /// ```
    pub fn builder() -> PropertiesBuilder<ProducerConfig> {
        PropertiesBuilder::new()
    }
}

impl ConsumerConfig {
    /// A builder of Kafka properties, checked at `build`.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::{ConsumerConfig, IsolationLevel};
    /// let config = ConsumerConfig::builder()
    ///     .bootstrap_servers("127.0.0.1:9092")
    ///     .set("group.id", "cleansers")
    ///     .set("isolation.level", "read_committed")
    ///     .build()?;
    /// assert_eq!(config.isolation_level, IsolationLevel::ReadCommitted);
    /// # Ok::<(), onceflow::client::ConfigError>(())
    /// ```
    pub fn builder() -> PropertiesBuilder<ConsumerConfig> {
        PropertiesBuilder::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_setting_wins_and_errors_name_the_property() {
        let c = ProducerConfig::builder()
            .set("linger.ms", "5")
            .set("linger.ms", "50")
            .build()
            .expect("valid");
        assert_eq!(c.linger.as_millis(), 50);
        let e = ConsumerConfig::builder()
            .set("isolation.level", "committed")
            .build()
            .expect_err("bad value");
        assert!(e.to_string().contains("isolation.level"), "{e}");
    }
}
