//! [`KafkaSink`] and [`FileSink`]: how a typed stream's elements become Kafka records or
//! lines of part files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use toml::Value;

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
            headers: Vec::new(),
        })
    }
}

/// Where a typed job's output goes: a [`KafkaSink`] or a [`FileSink`] (each converts into
/// it, so `sink(KafkaSink::json("out"))` and `sink(FileSink::json("out/"))` both read well).
pub struct Sink<T>(Target<T>);

enum Target<T> {
    Kafka(KafkaSink<T>),
    File(FileSink<T>),
}

impl<T> From<KafkaSink<T>> for Sink<T> {
    fn from(k: KafkaSink<T>) -> Self {
        Sink(Target::Kafka(k))
    }
}

impl<T> From<FileSink<T>> for Sink<T> {
    fn from(f: FileSink<T>) -> Self {
        Sink(Target::File(f))
    }
}

impl<T> Sink<T> {
    /// The record of `t` (to `topic`, a late side output's; `None`: the job's sink).
    ///
    /// # Errors
    /// The serializer failed.
    pub(crate) fn output(&self, t: &T, topic: Option<String>) -> Result<Output, String> {
        match &self.0 {
            Target::Kafka(k) => k.output(t, topic),
            Target::File(f) => f.output(t, topic),
        }
    }

    /// The job file's `[sink]` fields this sink sets.
    pub(crate) fn fields(&self) -> Vec<(&'static str, Value)> {
        match &self.0 {
            Target::Kafka(k) => vec![("sink.topic", Value::String(k.topic.clone()))],
            Target::File(f) => f.fields(),
        }
    }
}

/// Part files in a directory (the job file's `[sink] type = "file"`): one element per line,
/// made final when the checkpoint that covers them is durable (docs/guide/engine.md, "Files at
/// either end"). Its delivery guarantee is the job's.
///
/// ```
/// use onceflow::engine::dataflow::FileSink;
/// # #[derive(serde::Serialize)] struct Ride { ride_id: u64 }
/// let sink: FileSink<Ride> = FileSink::json("out/rides")
///     .rolling(64 << 20, std::time::Duration::from_secs(60))
///     .part_prefix("rides");
/// ```
pub struct FileSink<T> {
    path: PathBuf,
    value: ValueFn<T>,
    columns: Option<Vec<String>>,
    roll: Option<(u64, Duration)>,
    prefix: Option<String>,
}

impl<T> std::fmt::Debug for FileSink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("path", &self.path)
            .field("columns", &self.columns)
            .finish()
    }
}

impl<T: Serialize> FileSink<T> {
    /// JSON lines: each element's JSON (serde) on a line.
    pub fn json(path: impl AsRef<Path>) -> FileSink<T> {
        FileSink {
            path: path.as_ref().to_path_buf(),
            value: Arc::new(|t: &T| serde_json::to_vec(t).map_err(|e| e.to_string())),
            columns: None,
            roll: None,
            prefix: None,
        }
    }

    /// CSV with a header: these fields of each element's JSON object, in order.
    pub fn csv(path: impl AsRef<Path>, columns: &[&str]) -> FileSink<T> {
        FileSink {
            columns: Some(columns.iter().map(|c| (*c).to_owned()).collect()),
            ..FileSink::json(path)
        }
    }
}

impl<T> FileSink<T> {
    /// `rolling.size.bytes` and `rolling.interval.ms`: a part file closes at this size or age
    /// (and at every checkpoint). Defaults 128 MiB and 60 s.
    pub fn rolling(mut self, size_bytes: u64, interval: Duration) -> FileSink<T> {
        self.roll = Some((size_bytes, interval));
        self
    }

    /// `part.prefix`: part file names start with it (default `part`).
    pub fn part_prefix(mut self, prefix: impl Into<String>) -> FileSink<T> {
        self.prefix = Some(prefix.into());
        self
    }
}

impl<T> FileSink<T> {
    fn output(&self, t: &T, topic: Option<String>) -> Result<Output, String> {
        let value =
            (self.value)(t).map_err(|e| format!("serializing for {}: {e}", self.path.display()))?;
        Ok(Output {
            topic,
            key: None,
            value: Bytes::from(value),
            headers: Vec::new(),
        })
    }

    fn fields(&self) -> Vec<(&'static str, Value)> {
        let mut f = vec![
            ("sink.type", Value::String("file".into())),
            (
                "sink.path",
                Value::String(self.path.to_string_lossy().into_owned()),
            ),
        ];
        if let Some(columns) = &self.columns {
            f.push(("sink.format", Value::String("csv".into())));
            let columns = columns.iter().cloned().map(Value::String).collect();
            f.push(("sink.columns", Value::Array(columns)));
        }
        if let Some((size, interval)) = self.roll {
            let int = |n: u128| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
            f.push(("sink.rolling.size.bytes", int(u128::from(size))));
            f.push(("sink.rolling.interval.ms", int(interval.as_millis())));
        }
        if let Some(p) = &self.prefix {
            f.push(("sink.part.prefix", Value::String(p.clone())));
        }
        f
    }
}
