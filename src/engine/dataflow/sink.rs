//! [`KafkaSink`]: how a typed stream's elements become Kafka records.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

use crate::engine::runtime::topology::Output;

type ValueFn<T> = Arc<dyn Fn(&T) -> Result<Vec<u8>, String> + Send + Sync>;
type KeyFn<T> = Arc<dyn Fn(&T) -> Vec<u8> + Send + Sync>;

/// A Kafka topic and how an element becomes a record of it (value, and a key when
/// [`KafkaSink::key`] gives one). As the job's sink, its topic is the job's `sink.topic` and
/// its delivery guarantee the job's; as a late side output, its records go in the same
/// transaction as the main output.
pub struct KafkaSink<T> {
    pub(crate) topic: String,
    value: ValueFn<T>,
    key: Option<KeyFn<T>>,
}

impl<T> Clone for KafkaSink<T> {
    fn clone(&self) -> Self {
        KafkaSink {
            topic: self.topic.clone(),
            value: self.value.clone(),
            key: self.key.clone(),
        }
    }
}

impl<T> std::fmt::Debug for KafkaSink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("topic", &self.topic)
            .field("keyed", &self.key.is_some())
            .finish()
    }
}

impl<T: Serialize> KafkaSink<T> {
    /// Values are the element's JSON (serde); no key unless [`Self::key`] gives one.
    pub fn json(topic: impl Into<String>) -> KafkaSink<T> {
        KafkaSink {
            topic: topic.into(),
            value: Arc::new(|t: &T| serde_json::to_vec(t).map_err(|e| e.to_string())),
            key: None,
        }
    }
}

impl<T> KafkaSink<T> {
    /// Values are `serialize(element)`; no key unless [`Self::key`] gives one.
    pub fn with_serializer(
        topic: impl Into<String>,
        serialize: impl Fn(&T) -> Vec<u8> + Send + Sync + 'static,
    ) -> KafkaSink<T> {
        KafkaSink {
            topic: topic.into(),
            value: Arc::new(move |t: &T| Ok(serialize(t))),
            key: None,
        }
    }

    /// Each record's Kafka key is `key(element)` (it picks the partition).
    pub fn key(mut self, key: impl Fn(&T) -> Vec<u8> + Send + Sync + 'static) -> KafkaSink<T> {
        self.key = Some(Arc::new(key));
        self
    }

    /// The record of `t`, to `topic` (`None`: the job's sink topic).
    ///
    /// # Errors
    /// The serializer failed (a JSON value with a non-string map key, say).
    pub(crate) fn output(&self, t: &T, topic: Option<String>) -> Result<Output, String> {
        let value = (self.value)(t).map_err(|e| format!("serializing for {}: {e}", self.topic))?;
        Ok(Output {
            topic,
            key: self.key.as_ref().map(|k| k(t)),
            value: Bytes::from(value),
        })
    }
}
