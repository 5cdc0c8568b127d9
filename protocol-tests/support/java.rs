//! The Java peer: protocol-tests/java/interop.sh (kafka-clients 4.1.1) run as a producer,
//! consumer or admin against the test broker, and the JSON-lines record shape it reads and writes.

use super::{broker, repo};
use bytes::Bytes;
use onceflow::client::{ConsumerRecord, ProducerRecord};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use tempfile::TempDir;
use tracing::Instrument;

/// One record as the interop tool reads (produce) and writes (consume) it. Header keys are kept
/// as bytes so that a client mangling them cannot hide behind string conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub timestamp: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Rec {
    pub fn to_json(&self) -> String {
        let b64 = |b: &Option<Vec<u8>>| {
            b.as_deref()
                .map(|b| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b))
        };
        let headers: Vec<Value> = self
            .headers
            .iter()
            .map(|(k, v)| {
                let k = String::from_utf8(k.clone()).expect("header keys are UTF-8 strings");
                json!({ "key": k, "value": b64(v) })
            })
            .collect();
        json!({
            "partition": self.partition,
            "timestamp": self.timestamp,
            "key": b64(&self.key),
            "value": b64(&self.value),
            "headers": headers,
        })
        .to_string()
    }

    /// A line the Java consumer wrote: exactly the fields partition, offset, timestamp, key,
    /// value, headers.
    pub fn from_java(line: &str) -> Rec {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let o = v.as_object().expect("a JSON object per line");
        let mut fields: Vec<&str> = o.keys().map(String::as_str).collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            [
                "headers",
                "key",
                "offset",
                "partition",
                "timestamp",
                "value"
            ]
        );
        let bytes = |v: &Value| match v {
            Value::Null => None,
            Value::String(s) => {
                Some(base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s).unwrap())
            }
            other => panic!("expected base64 or null, got {other} in {line}"),
        };
        Rec {
            partition: Some(o["partition"].as_i64().expect("partition") as i32),
            offset: Some(o["offset"].as_i64().expect("offset")),
            timestamp: Some(o["timestamp"].as_i64().expect("timestamp")),
            key: bytes(&o["key"]),
            value: bytes(&o["value"]),
            headers: o["headers"]
                .as_array()
                .expect("headers array")
                .iter()
                .map(|h| {
                    let k = h["key"].as_str().expect("header key string");
                    (k.as_bytes().to_vec(), bytes(&h["value"]))
                })
                .collect(),
        }
    }

    pub fn from_onceflow(r: &ConsumerRecord) -> Rec {
        Rec {
            partition: Some(r.partition),
            offset: Some(r.offset),
            timestamp: Some(r.timestamp),
            key: r.key.as_ref().map(|b| b.to_vec()),
            value: r.value.as_ref().map(|b| b.to_vec()),
            headers: r
                .headers
                .iter()
                .map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec())))
                .collect(),
        }
    }

    pub fn to_producer_record(&self, topic: &str) -> ProducerRecord {
        ProducerRecord {
            topic: topic.to_owned(),
            partition: self.partition,
            key: self.key.clone().map(Bytes::from),
            value: self.value.clone().map(Bytes::from),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| onceflow::protocol::records::Header {
                    key: Bytes::from(k.clone()),
                    value: v.clone().map(Bytes::from),
                })
                .collect(),
            timestamp: self.timestamp,
        }
    }
}

/// Runs protocol-tests/java/interop.sh with `--bootstrap` set; returns stdout, panics with the
/// tool's stderr on failure.
pub async fn java(subcommand: &str, topic: &str, args: &[&str]) -> String {
    java_on(&broker(), subcommand, topic, args).await
}

/// [`java`] against `bootstrap` (e.g. the 3-node cluster).
pub async fn java_on(bootstrap: &str, subcommand: &str, topic: &str, args: &[&str]) -> String {
    let mut argv: Vec<String> = vec![
        repo()
            .join("protocol-tests/java/interop.sh")
            .display()
            .to_string(),
        subcommand.into(),
        "--bootstrap".into(),
        bootstrap.into(),
        "--topic".into(),
        topic.into(),
    ];
    argv.extend(args.iter().map(|s| s.to_string()));
    let shown = argv[1..].join(" ");
    let out = tokio::task::spawn_blocking(move || Command::new("bash").args(&argv).output())
        .instrument(super::watchdog::waiting(format!("interop.sh {shown}")))
        .await
        .unwrap()
        .expect("run interop.sh");
    assert!(
        out.status.success(),
        "interop.sh {shown} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 stdout")
}

pub fn write_jsonl(dir: &TempDir, name: &str, recs: &[Rec]) -> PathBuf {
    let path = dir.path().join(name);
    let mut text = String::new();
    for r in recs {
        text.push_str(&r.to_json());
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

pub fn read_jsonl(path: &Path) -> Vec<Rec> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(Rec::from_java)
        .collect()
}

/// Java produces `recs` (in file order) with `extra` options.
pub async fn java_produce(dir: &TempDir, topic: &str, recs: &[Rec], extra: &[&str]) {
    let input = write_jsonl(dir, &format!("{topic}.in.jsonl"), recs);
    let mut args = vec!["--input", input.to_str().unwrap(), "--acks", "all"];
    args.extend_from_slice(extra);
    java("produce", topic, &args).await;
}

/// Java reads exactly `n` records from the beginning of every partition, ordered by partition,
/// then offset.
pub async fn java_consume_exactly(dir: &TempDir, topic: &str, n: usize) -> Vec<Rec> {
    java_consume_at(dir, topic, n, "read_uncommitted").await
}

/// As [`java_consume_exactly`], at an isolation level.
pub async fn java_consume_at(dir: &TempDir, topic: &str, n: usize, isolation: &str) -> Vec<Rec> {
    java_consume_on(&broker(), dir, topic, n, isolation).await
}

/// As [`java_consume_at`], from `bootstrap`.
pub async fn java_consume_on(
    bootstrap: &str,
    dir: &TempDir,
    topic: &str,
    n: usize,
    isolation: &str,
) -> Vec<Rec> {
    let output = dir.path().join(format!("{topic}-{isolation}.out.jsonl"));
    let n = n.to_string();
    let args = [
        "--output",
        output.to_str().unwrap(),
        "--expect",
        &n,
        "--exact",
        "true",
        "--settle-ms",
        "1500",
        "--isolation",
        isolation,
        "--timeout-ms",
        "120000",
    ];
    java_on(bootstrap, "consume", topic, &args).await;
    read_jsonl(&output)
}

/// What the Java consumer reads at an isolation level, exactly `n` records, values sorted.
pub async fn java_values(topic: &str, n: usize, isolation: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let mut v: Vec<String> = java_consume_at(&dir, topic, n, isolation)
        .await
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap()).unwrap())
        .collect();
    v.sort();
    v
}

/// `{partition: (earliest, latest, last_stable)}` as the Java AdminClient lists them.
pub async fn java_offsets(topic: &str) -> BTreeMap<i32, (i64, i64, i64)> {
    java("offsets", topic, &["--wait-stable-ms", "30000"])
        .await
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let f = |k: &str| v[k].as_i64().unwrap_or_else(|| panic!("{k} in {l}"));
            (
                f("partition") as i32,
                (f("earliest"), f("latest"), f("last_stable")),
            )
        })
        .collect()
}

// ------------------------------------------------------------------------------------------------
// onceflow -> Java
