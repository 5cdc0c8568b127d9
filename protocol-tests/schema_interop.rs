//! Avro and Protobuf in the registry's wire format between onceflow and independent
//! implementations, through the real registry (protocol-tests/schema-registry.sh) and broker:
//! the Java serializers (Apicurio's Kafka Avro and Protobuf serdes, protocol-tests/java-avro/)
//! and Apache Avro for Python (protocol-tests/python-avro/). Values compare as parsed JSON in
//! the Avro JSON encoding or the proto3 JSON mapping (the implementations print numbers and
//! escapes differently); Avro bytes compare as bytes. Protobuf bytes do not: Java's serializer
//! registers the schema as its Wire library regenerates it (another text, another id) and
//! writes the indexes `[0]` as two bytes where onceflow writes the one-byte short form; both
//! read either.

use crate::support::registry::registry_url;
use crate::support::*;
use base64::Engine;
use bytes::Bytes;
use onceflow::client::ProducerRecord;
use onceflow::schema::{
    wire, AvroDeserializer, AvroSerializer, Part, ProtobufDeserializer, ProtobufSerializer,
    RegistryConfig, SchemaRegistry,
};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Compact, in the key order the Java `Schema.toString()` writes: the three implementations
/// register the same text, so the registry gives them the same id.
const RIDE: &str = r#"{"type":"record","name":"Ride","namespace":"nyc","fields":[{"name":"id","type":"long"},{"name":"zone","type":["null","string"],"default":null},{"name":"fare","type":"double"},{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["YELLOW","GREEN"]}},{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"tag","type":"bytes"},{"name":"tips","type":{"type":"array","items":"double"}},{"name":"extra","type":{"type":"map","values":"string"}}]}"#;

fn rides() -> Vec<Value> {
    vec![
        json!({"id": 1, "zone": {"string": "JFK"}, "fare": 52.5, "kind": "YELLOW", "at": 1_700_000_000_000i64,
               "tag": "\u{0}\u{ff}", "tips": [1.5, 2.0], "extra": {"a": "b"}}),
        json!({"id": 2, "zone": null, "fare": 7.25, "kind": "GREEN", "at": 1, "tag": "", "tips": [], "extra": {}}),
        json!({"id": -3, "zone": {"string": "ünïcødé ✓"}, "fare": -0.5, "kind": "GREEN", "at": -1,
               "tag": "\u{7f}\u{80}\n", "tips": [1e16, 1e-5], "extra": {"k": ""}}),
    ]
}

/// Runs a peer script with `stdin`; its stdout, or the test fails with its stderr.
fn peer(script: &str, args: &[&str], stdin: &str) -> String {
    let mut child = Command::new("bash")
        .arg(repo().join(script))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{script}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn peer_async(script: &'static str, args: Vec<String>, stdin: String) -> String {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        peer(script, &args, &stdin)
    })
    .await
    .unwrap()
}

const JAVA: &str = "protocol-tests/java-avro/avro-interop.sh";
const PYTHON: &str = "protocol-tests/python-avro/run.sh";

fn lines(values: &[Value]) -> String {
    values.iter().map(|v| format!("{v}\n")).collect()
}

/// `{"schema_id": N, "value": V}` lines.
fn peer_records(out: &str) -> Vec<(u32, Value)> {
    out.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            (v["schema_id"].as_u64().unwrap() as u32, v["value"].clone())
        })
        .collect()
}

async fn registry() -> SchemaRegistry {
    SchemaRegistry::new(
        RegistryConfig::from_properties([("schema.registry.url", registry_url().await)]).unwrap(),
    )
    .unwrap()
}

fn schema_file(dir: &Path) -> String {
    let path = dir.join("ride.avsc");
    std::fs::write(&path, RIDE).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn records_the_java_serializer_wrote_decode_in_onceflow_to_the_values_java_reads() {
    let url = registry_url().await.to_owned();
    let topic = TestTopic::create("avro-from-java", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let schema = schema_file(dir.path());
    let b = broker();
    let args = |cmd: &str| -> Vec<String> {
        [
            cmd,
            "--bootstrap",
            &b,
            "--registry",
            &url,
            "--topic",
            &topic.name,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut produce = args("produce");
    produce.extend(["--schema".into(), schema]);
    peer_async(JAVA, produce, lines(&rides())).await;
    let mut consume = args("consume");
    consume.extend(["--count".into(), rides().len().to_string()]);
    // A loaded machine: the Java client's metadata and poll waits, generously.
    consume.extend(["--timeout-ms", "120000"].map(String::from));
    let java = peer_records(&peer_async(JAVA, consume, String::new()).await);
    assert_eq!(
        java.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
        rides(),
        "Java's own round trip"
    );
    let reader = AvroDeserializer::new(registry().await);
    let raw = consume_all(&broker(), &topic, rides().len(), &[]).await;
    for (r, (id, want)) in raw.iter().zip(&java) {
        let got = reader.deserialize(r.value.as_ref().unwrap()).await.unwrap();
        assert_eq!(got.schema_id, *id);
        assert_eq!(&got.to_json().unwrap(), want);
    }
}

#[tokio::test]
async fn records_onceflow_wrote_decode_in_java_and_in_python_to_the_same_values() {
    let url = registry_url().await.to_owned();
    let topic = TestTopic::create("avro-to-java", 1).await;
    let writer = AvroSerializer::new(registry().await, RIDE, Part::Value).unwrap();
    let p = producer(&[]).await;
    let mut framed = Vec::new();
    for v in rides() {
        let bytes = writer.serialize_json(&topic.name, &v).await.unwrap();
        framed.push(base64::engine::general_purpose::STANDARD.encode(&bytes));
        p.send(ProducerRecord::new(topic.name.clone(), Bytes::from(bytes)))
            .await
            .unwrap();
    }
    p.flush().await.unwrap();
    let java = peer_records(
        &peer_async(
            JAVA,
            [
                "consume",
                "--bootstrap",
                &broker(),
                "--registry",
                &url,
                "--topic",
                &topic.name,
                "--count",
                "3",
                "--timeout-ms",
                "120000",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            String::new(),
        )
        .await,
    );
    assert_eq!(
        java.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
        rides()
    );
    let python = peer_records(
        &peer_async(
            PYTHON,
            vec!["decode".into(), "--registry".into(), url.clone()],
            framed.join("\n") + "\n",
        )
        .await,
    );
    assert_eq!(python, java, "Python and Java read the same ids and values");
}

#[tokio::test]
async fn onceflow_java_and_python_write_the_same_bytes_for_the_same_values() {
    let url = registry_url().await.to_owned();
    let dir = tempfile::tempdir().unwrap();
    let schema = schema_file(dir.path());
    let topic = unique_topic("avro-bytes");
    let subject = format!("{topic}-value");
    let writer = AvroSerializer::new(registry().await, RIDE, Part::Value).unwrap();
    let mut ours = Vec::new();
    for v in rides() {
        ours.push(
            base64::engine::general_purpose::STANDARD
                .encode(writer.serialize_json(&topic, &v).await.unwrap()),
        );
    }
    let encode = |cmd: &'static str| {
        let args: Vec<String> = [
            "encode",
            "--registry",
            &url,
            "--subject",
            &subject,
            "--schema",
            &schema,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        peer_async(cmd, args, lines(&rides()))
    };
    let java: Vec<String> = encode(JAVA).await.lines().map(str::to_owned).collect();
    let python: Vec<String> = encode(PYTHON).await.lines().map(str::to_owned).collect();
    assert_eq!(java, ours, "Java's bytes");
    assert_eq!(python, ours, "Python's bytes");
    let first = base64::engine::general_purpose::STANDARD
        .decode(&ours[0])
        .unwrap();
    assert_eq!(first[0], wire::MAGIC);
}

/// Protobuf: an enum, a well-known import, bytes, repeated and map fields, a message nested
/// after a map (the registered text Java's serializer writes moves it, and the indexes follow
/// the registered text), and a second top-level message.
const RIDE_PROTO: &str = r#"syntax = "proto3";
package nyc;
import "google/protobuf/timestamp.proto";
enum Kind { KIND_UNSPECIFIED = 0; YELLOW = 1; GREEN = 2; }
message Ride {
  int64 id = 1;
  string zone = 2;
  double fare = 3;
  Kind kind = 4;
  google.protobuf.Timestamp at = 5;
  bytes tag = 6;
  repeated double tips = 7;
  map<string, string> extra = 8;
  message Stop { string name = 1; sint32 seq = 2; }
  Stop stop = 9;
}
message Driver { string name = 1; repeated Ride rides = 2; }
"#;

/// Values in the proto3 JSON mapping as Java's `JsonFormat` prints them with every field:
/// (message, value).
fn proto_values() -> Vec<(&'static str, Value)> {
    vec![
        (
            "nyc.Ride",
            json!({"id": "9007199254740993", "zone": "JFK", "fare": 52.5, "kind": "YELLOW",
            "at": "2024-01-02T03:04:05.123Z", "tag": "AP8=", "tips": [1.5, -1.0e-5],
            "extra": {"a": "b"}, "stop": {"name": "Depot", "seq": -1}}),
        ),
        (
            "nyc.Ride",
            json!({"id": "-2", "zone": "", "fare": 0.0, "kind": "KIND_UNSPECIFIED",
            "tag": "", "tips": [], "extra": {}}),
        ),
        (
            "nyc.Driver",
            json!({"name": "Ann", "rides": [{"id": "7", "zone": "ünïcødé ✓", "fare": 0.0,
            "kind": "GREEN", "tag": "", "tips": [], "extra": {}}]}),
        ),
    ]
}

/// The JSON lines of the values of one message type.
fn proto_lines(message: &str) -> String {
    let values: Vec<Value> = proto_values()
        .into_iter()
        .filter(|(m, _)| *m == message)
        .map(|(_, v)| v)
        .collect();
    lines(&values)
}

/// The Java peer's Protobuf subcommand `cmd` with its connection arguments and `extra`.
fn proto_args(cmd: &str, url: &str, topic: &str, extra: &[&str]) -> Vec<String> {
    let b = broker();
    let mut args = vec![cmd, "--bootstrap", &b, "--registry", url, "--topic", topic];
    args.extend_from_slice(extra);
    args.iter().map(|s| s.to_string()).collect()
}

/// The Protobuf values of `topic` as the Java peer's deserializer reads them: (id, value).
async fn java_protobuf_records(url: &str, topic: &str) -> Vec<(u32, Value)> {
    let n = proto_values().len().to_string();
    let args = ["--count", &n, "--timeout-ms", "120000"];
    let consume = proto_args("protobuf-consume", url, topic, &args);
    peer_records(&peer_async(JAVA, consume, String::new()).await)
}

#[tokio::test]
async fn protobuf_records_the_java_serializer_wrote_decode_in_onceflow_to_the_values_java_reads() {
    let url = registry_url().await.to_owned();
    let topic = TestTopic::create("protobuf-from-java", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("ride.proto");
    std::fs::write(&schema, RIDE_PROTO).unwrap();
    let schema = schema.display().to_string();
    for message in ["nyc.Ride", "nyc.Driver"] {
        let args = proto_args(
            "protobuf-produce",
            &url,
            &topic.name,
            &["--schema", &schema, "--message", message],
        );
        peer_async(JAVA, args, proto_lines(message)).await;
    }
    let java = java_protobuf_records(&url, &topic.name).await;
    let want: Vec<Value> = proto_values().into_iter().map(|(_, v)| v).collect();
    assert_eq!(
        java.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
        want,
        "Java's own round trip"
    );
    // onceflow compiles the text Java's serializer registered and decodes the same values.
    let reader = ProtobufDeserializer::new(registry().await);
    let raw = consume_all(&broker(), &topic, want.len(), &[]).await;
    for (r, (id, want)) in raw.iter().zip(&java) {
        let got = reader.deserialize(r.value.as_ref().unwrap()).await.unwrap();
        assert_eq!(got.schema_id, *id);
        assert_eq!(&got.to_json().unwrap(), want);
    }
}

#[tokio::test]
async fn protobuf_records_onceflow_wrote_decode_in_java_to_the_same_values() {
    let url = registry_url().await.to_owned();
    let topic = TestTopic::create("protobuf-to-java", 1).await;
    let p = producer(&[]).await;
    for (message, value) in proto_values() {
        let writer = ProtobufSerializer::new(registry().await, RIDE_PROTO, Part::Value)
            .unwrap()
            .for_message(message)
            .unwrap();
        let bytes = writer.serialize_json(&topic.name, &value).await.unwrap();
        p.send(ProducerRecord::new(topic.name.clone(), Bytes::from(bytes)))
            .await
            .unwrap();
    }
    p.flush().await.unwrap();
    let java = java_protobuf_records(&url, &topic.name).await;
    let want: Vec<Value> = proto_values().into_iter().map(|(_, v)| v).collect();
    assert_eq!(
        java.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
        want
    );
}
