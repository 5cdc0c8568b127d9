//! Avro records through a real schema registry (Apicurio Registry's Confluent-compatible API,
//! protocol-tests/schema-registry.sh) and the real broker: the library's serde and the
//! `onceflow` binary's `-s value=avro` / `--value-schema`. Every test uses its own subject
//! (its topic's), so they share the registry.

use crate::support::cli::{onceflow_async, stderr, stdout};
use crate::support::registry::registry_url;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::ProducerRecord;
use onceflow::schema::{
    wire, AvroDeserializer, AvroSerializer, Part, RegistryConfig, Schema, SchemaError,
    SchemaRegistry, SchemaType,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const RIDE_V1: &str = r#"{"type":"record","name":"Ride","namespace":"nyc","fields":[
    {"name":"id","type":"long"},
    {"name":"zone","type":["null","string"],"default":null},
    {"name":"fare","type":"double"}]}"#;

/// V1 with a field added (with a default) and one removed: a BACKWARD and FORWARD evolution.
const RIDE_V2: &str = r#"{"type":"record","name":"Ride","namespace":"nyc","fields":[
    {"name":"id","type":"long"},
    {"name":"fare","type":"double"},
    {"name":"tip","type":"double","default":0.0}]}"#;

/// A client of the test registry with these extra properties.
pub(crate) async fn registry(props: &[(&str, &str)]) -> SchemaRegistry {
    client(registry_url().await, props)
}

/// Writes `values` to `topic` (one partition) and reads their bytes back.
pub(crate) async fn through_the_broker(topic: &TestTopic, values: Vec<Vec<u8>>) -> Vec<Bytes> {
    let p = producer(&[]).await;
    let n = values.len();
    for v in values {
        p.send(ProducerRecord::new(topic.name.clone(), Bytes::from(v)))
            .await
            .unwrap();
    }
    p.flush().await.unwrap();
    p.close().await.unwrap();
    consume_all(&broker(), topic, n, &[])
        .await
        .into_iter()
        .map(|r| r.value.unwrap())
        .collect()
}

#[tokio::test]
async fn avro_values_round_trip_through_the_registry_and_the_broker_framed_with_the_registered_id()
{
    let topic = TestTopic::create("avro-round-trip", 1).await;
    let registry = registry(&[]).await;
    let writer = AvroSerializer::new(registry.clone(), RIDE_V1, Part::Value).unwrap();
    let rides = [
        json!({"id": 1, "zone": {"string": "JFK"}, "fare": 52.5}),
        json!({"id": 2, "zone": null, "fare": 7.25}),
    ];
    let mut framed = Vec::new();
    for r in &rides {
        framed.push(writer.serialize_json(&topic.name, r).await.unwrap());
    }
    let read = through_the_broker(&topic, framed).await;
    let subject = format!("{}-value", topic.name);
    let registered = registry
        .lookup(&subject, &Schema::new(SchemaType::Avro, RIDE_V1))
        .await
        .unwrap();
    let reader = AvroDeserializer::new(registry);
    for (bytes, want) in read.iter().zip(&rides) {
        let (id, _) = wire::unframe(bytes).unwrap();
        assert_eq!(
            id, registered.id,
            "the wire format carries the registered id"
        );
        let got = reader.deserialize(bytes).await.unwrap();
        assert_eq!(got.schema_id, registered.id);
        assert_eq!(&got.to_json().unwrap(), want);
    }
}

#[tokio::test]
async fn a_reader_schema_reads_what_an_older_and_a_newer_writer_wrote() {
    let topic = TestTopic::create("avro-evolution", 1).await;
    let registry = registry(&[]).await;
    let v1 = AvroSerializer::new(registry.clone(), RIDE_V1, Part::Value).unwrap();
    let old = v1
        .serialize_json(&topic.name, &json!({"id": 1, "zone": "JFK", "fare": 10.0}))
        .await
        .unwrap();
    // V2 under the same subject (the registry's default rule here accepts it).
    let v2 = AvroSerializer::new(registry.clone(), RIDE_V2, Part::Value).unwrap();
    let new = v2
        .serialize_json(&topic.name, &json!({"id": 2, "fare": 20.0, "tip": 3.5}))
        .await
        .unwrap();
    let read = through_the_broker(&topic, vec![old, new]).await;
    assert_ne!(
        wire::unframe(&read[0]).unwrap().0,
        wire::unframe(&read[1]).unwrap().0
    );
    // A V2 reader: the old record gets the added field's default, its removed field is gone.
    let as_v2 = AvroDeserializer::new(registry.clone())
        .with_reader_schema(RIDE_V2)
        .unwrap();
    assert_eq!(
        as_v2
            .deserialize(&read[0])
            .await
            .unwrap()
            .to_json()
            .unwrap(),
        json!({"id": 1, "fare": 10.0, "tip": 0.0})
    );
    // A V1 reader: the new record's zone takes its default, tip is skipped.
    let as_v1 = AvroDeserializer::new(registry)
        .with_reader_schema(RIDE_V1)
        .unwrap();
    assert_eq!(
        as_v1
            .deserialize(&read[1])
            .await
            .unwrap()
            .to_json()
            .unwrap(),
        json!({"id": 2, "zone": null, "fare": 20.0})
    );
}

#[tokio::test]
async fn a_schema_id_the_registry_does_not_know_and_a_corrupt_payload_are_named() {
    let registry = registry(&[]).await;
    let reader = AvroDeserializer::new(registry.clone());
    let unknown = wire::frame(2_000_000_000, &[2, 4]);
    match reader.deserialize(&unknown).await {
        Err(SchemaError::UnknownId { id, url }) => {
            assert_eq!(id, 2_000_000_000);
            assert_eq!(url, registry_url().await);
        }
        other => panic!("expected UnknownId, got {other:?}"),
    }
    // A known id with a payload that is not a Ride (a truncated long, then nothing).
    let writer = AvroSerializer::new(registry, RIDE_V1, Part::Value).unwrap();
    let topic = unique_topic("avro-corrupt");
    let good = writer
        .serialize_json(&topic, &json!({"id": 1, "fare": 1.0}))
        .await
        .unwrap();
    let (id, _) = wire::unframe(&good).unwrap();
    let corrupt = wire::frame(id, &[0x80]);
    let e = reader.deserialize(&corrupt).await.unwrap_err();
    assert!(
        matches!(e, SchemaError::Decode { id: i, .. } if i == id),
        "{e}"
    );
    assert!(e.to_string().contains(&format!("schema id {id}")), "{e}");
    // Bytes left over: the payload is not what its id says.
    let mut long = good.clone();
    long.push(0);
    let e = reader.deserialize(&long).await.unwrap_err().to_string();
    assert!(e.contains("left over"), "{e}");
    // Not framed at all.
    let e = reader
        .deserialize(b"{\"id\":1}")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("magic byte 0"), "{e}");
}

#[tokio::test]
async fn without_auto_register_a_schema_must_be_registered_and_use_latest_version_writes_with_the_newest(
) {
    let topic = unique_topic("avro-no-register");
    let subject = format!("{topic}-value");
    let strict = registry(&[("auto.register.schemas", "false")]).await;
    let writer = AvroSerializer::new(strict.clone(), RIDE_V1, Part::Value).unwrap();
    let e = writer
        .serialize_json(&topic, &json!({"id": 1, "fare": 1.0}))
        .await
        .unwrap_err();
    assert!(matches!(e, SchemaError::UnknownSubject { .. }), "{e}");
    assert!(e.to_string().contains(&subject), "{e}");
    // Registered (by someone else): found, and written with its id.
    let id = strict
        .register(&subject, &Schema::new(SchemaType::Avro, RIDE_V1))
        .await
        .unwrap();
    let fresh = AvroSerializer::new(strict.clone(), RIDE_V1, Part::Value).unwrap();
    let bytes = fresh
        .serialize_json(&topic, &json!({"id": 1, "fare": 1.0}))
        .await
        .unwrap();
    assert_eq!(wire::unframe(&bytes).unwrap().0, id);
    // A newer version registered: use.latest.version writes V1 values with V2's id and schema.
    let v2 = strict
        .register(&subject, &Schema::new(SchemaType::Avro, RIDE_V2))
        .await
        .unwrap();
    let latest = registry(&[
        ("auto.register.schemas", "false"),
        ("use.latest.version", "true"),
    ])
    .await;
    let writer = AvroSerializer::new(latest.clone(), RIDE_V1, Part::Value).unwrap();
    let bytes = writer
        .serialize_json(&topic, &json!({"id": 5, "zone": "JFK", "fare": 9.0}))
        .await
        .unwrap();
    assert_eq!(wire::unframe(&bytes).unwrap().0, v2);
    let got = AvroDeserializer::new(latest)
        .deserialize(&bytes)
        .await
        .unwrap();
    assert_eq!(
        got.to_json().unwrap(),
        json!({"id": 5, "fare": 9.0, "tip": 0.0})
    );
}

#[tokio::test]
async fn an_unreachable_registry_is_retried_until_default_api_timeout_then_named() {
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let registry = SchemaRegistry::new(
        RegistryConfig::from_properties([
            ("schema.registry.url", url.as_str()),
            ("default.api.timeout.ms", "1500"),
        ])
        .unwrap(),
    )
    .unwrap();
    let start = Instant::now();
    let e = AvroDeserializer::new(registry)
        .deserialize(&wire::frame(1, &[2]))
        .await
        .unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, SchemaError::Timeout { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&url) && text.contains("schema id 1"),
        "{text}"
    );
    assert!(text.contains("default.api.timeout.ms"), "{text}");
    assert!(
        took >= Duration::from_millis(1400),
        "gave up after {took:?}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

/// Runs the binary against the test broker and the registry.
pub(crate) async fn onceflow(args: &[&str], stdin: &str) -> std::process::Output {
    let mut argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    argv.extend([
        "-b".into(),
        broker(),
        "-X".into(),
        "default.api.timeout.ms=60000".into(),
    ]);
    onceflow_async(argv, stdin).await
}

/// `onceflow produce -t TOPIC --value-schema FILE -r REGISTRY` with `input`, the schema `text`
/// written to a scratch file `name` (its extension says the schema's kind).
pub(crate) async fn produce_with_schema(
    topic: &str,
    name: &str,
    text: &str,
    input: &str,
) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    // A Protobuf message after '#' names no file.
    let file = name.split('#').next().unwrap_or(name);
    std::fs::write(dir.path().join(file), text).unwrap();
    let schema = dir.path().join(name).display().to_string();
    let url = registry_url().await;
    onceflow(
        &["produce", "-t", topic, "--value-schema", &schema, "-r", url],
        input,
    )
    .await
}

/// `onceflow consume -t TOPIC -e -s SERDE -r REGISTRY EXTRA...` to the end of the topic.
pub(crate) async fn consume_with(topic: &str, serde: &str, extra: &[&str]) -> std::process::Output {
    let url = registry_url().await;
    let mut args = vec!["consume", "-t", topic, "-e", "-s", serde, "-r", url];
    args.extend_from_slice(extra);
    onceflow(&args, "").await
}

/// The values `onceflow consume -s SERDE --format value` prints for `topic`, parsed.
pub(crate) async fn consumed_values(topic: &str, serde: &str) -> Vec<Value> {
    let out = consume_with(topic, serde, &["--format", "value"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn the_cli_writes_json_lines_as_avro_and_prints_them_back_as_kcat_does() {
    let topic = TestTopic::create("avro-cli", 1).await;
    let input = "{\"id\":1,\"zone\":\"JFK\",\"fare\":52.5}\n{\"id\":2,\"fare\":7}\n";
    let out = produce_with_schema(&topic.name, "ride.avsc", RIDE_V1, input).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = consumed_values(&topic.name, "value=avro").await;
    assert_eq!(
        lines,
        [
            json!({"id": 1, "zone": {"string": "JFK"}, "fare": 52.5}),
            json!({"id": 2, "zone": null, "fare": 7.0}),
        ]
    );
    // The same records read by the library: the binary wrote the wire format.
    let reader = AvroDeserializer::new(registry(&[]).await);
    let raw = consume_all(&broker(), &topic, 2, &[]).await;
    let first = reader
        .deserialize(raw[0].value.as_ref().unwrap())
        .await
        .unwrap();
    assert_eq!(first.to_json().unwrap(), lines[0]);
}

#[tokio::test]
async fn the_cli_names_a_line_that_does_not_fit_and_a_record_it_cannot_decode() {
    let topic = TestTopic::create("avro-cli-bad", 1).await;
    // Line 2 lacks a field without a default: the line is named, nothing after it is sent.
    let input = "{\"id\":1,\"fare\":1}\n{\"id\":2}\n{\"id\":3,\"fare\":3}\n";
    let out = produce_with_schema(&topic.name, "ride.avsc", RIDE_V1, input).await;
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains("line 2: the value") && e.contains("'fare' is missing"),
        "{e}"
    );
    // A plain-text record after the Avro one: consume prints the first, then names the second.
    let p = producer(&[]).await;
    p.send(ProducerRecord::new(
        topic.name.clone(),
        Bytes::from_static(b"not avro"),
    ))
    .await
    .unwrap();
    p.close().await.unwrap();
    let out = consume_with(&topic.name, "value=avro", &[]).await;
    assert!(!out.status.success());
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
    let e = stderr(&out);
    assert!(
        e.contains(&format!("{}-0 offset 1: the value", topic.name)) && e.contains("magic byte 0"),
        "{e}"
    );
}

/// A registry client for `url` with these extra properties and a short budget.
fn client(url: &str, props: &[(&str, &str)]) -> SchemaRegistry {
    let mut all = vec![
        ("schema.registry.url", url),
        ("default.api.timeout.ms", "20000"),
    ];
    all.extend_from_slice(props);
    SchemaRegistry::new(RegistryConfig::from_properties(all.iter().copied()).unwrap()).unwrap()
}

#[tokio::test]
async fn a_registry_behind_basic_authentication_takes_the_right_credentials_and_refuses_others_at_once(
) {
    let proxy = crate::support::registry::proxied().await;
    let subject = format!("{}-value", unique_topic("avro-auth"));
    let schema = Schema::new(SchemaType::Avro, RIDE_V1);
    let good = client(
        &proxy.http_url,
        &[("basic.auth.user.info", &proxy.user_info)],
    );
    let id = good.register(&subject, &schema).await.unwrap();
    assert_eq!(*good.schema_by_id(id).await.unwrap(), schema);
    // Credentials in the URL, as basic.auth.credentials.source=URL reads them.
    let in_url = proxy
        .http_url
        .replacen("http://", &format!("http://{}@", proxy.user_info), 1);
    let from_url = client(&in_url, &[("basic.auth.credentials.source", "URL")]);
    assert_eq!(from_url.latest(&subject).await.unwrap().id, id);
    // Wrong or no credentials: refused at once (not retried until the budget), named.
    for props in [&[("basic.auth.user.info", "alice:wrong")][..], &[]] {
        let start = Instant::now();
        let e = client(&proxy.http_url, props)
            .latest(&subject)
            .await
            .unwrap_err();
        assert!(
            matches!(e, SchemaError::Unauthorized { status: 401, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("basic.auth.user.info"), "{e}");
        assert!(
            !e.to_string().contains("wrong"),
            "a secret in the message: {e}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "retried: {:?}",
            start.elapsed()
        );
    }
}

#[tokio::test]
async fn tls_to_the_registry_checks_the_certificate_against_the_truststore() {
    let proxy = crate::support::registry::proxied().await;
    let ca = proxy.ca.display().to_string();
    let auth = ("basic.auth.user.info", proxy.user_info.as_str());
    let trusted = client(
        &proxy.https_url,
        &[auth, ("schema.registry.ssl.truststore.location", &ca)],
    );
    let subject = format!("{}-value", unique_topic("avro-tls"));
    let id = trusted
        .register(&subject, &Schema::new(SchemaType::Avro, RIDE_V1))
        .await
        .unwrap();
    assert_eq!(trusted.latest(&subject).await.unwrap().id, id);
    // The system's CAs do not know the test CA: a TLS error naming the setting, at once.
    let start = Instant::now();
    let e = client(&proxy.https_url, &[auth])
        .latest(&subject)
        .await
        .unwrap_err();
    assert!(matches!(e, SchemaError::Tls { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("schema.registry.ssl.truststore.location"),
        "{e}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "retried: {:?}",
        start.elapsed()
    );
}

const RIDE_JSON_SCHEMA: &str = r#"{"title":"nyc.Ride","type":"object","properties":{"ride_id":{"type":"integer"},"zone":{"type":["string","null"]},"fare":{"type":"number","minimum":0}},"required":["ride_id","fare"],"additionalProperties":false}"#;

#[tokio::test]
async fn json_schema_values_are_validated_before_they_are_written_and_read_back_through_the_broker()
{
    use onceflow::schema::{JsonSchemaDeserializer, JsonSchemaSerializer};
    let topic = TestTopic::create("json-schema", 1).await;
    let registry = registry(&[]).await;
    let writer =
        JsonSchemaSerializer::new(registry.clone(), RIDE_JSON_SCHEMA, Part::Value).unwrap();
    // A value that does not fit is refused, naming its path; nothing is written for it.
    let e = writer
        .serialize(&topic.name, &json!({"ride_id": 1, "fare": -2}))
        .await
        .unwrap_err();
    assert!(matches!(e, SchemaError::Encode { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("/fare: -2 is less than the minimum of 0"),
        "{e}"
    );
    let rides = [
        json!({"ride_id": 1, "zone": "JFK", "fare": 52.5}),
        json!({"ride_id": 2, "fare": 0}),
    ];
    let mut framed = Vec::new();
    for r in &rides {
        framed.push(writer.serialize(&topic.name, r).await.unwrap());
    }
    let read = through_the_broker(&topic, framed).await;
    let registered = registry
        .latest(&format!("{}-value", topic.name))
        .await
        .unwrap();
    assert_eq!(registered.schema.schema_type, SchemaType::Json);
    let reader = JsonSchemaDeserializer::new(registry).validating(true);
    for (bytes, want) in read.iter().zip(&rides) {
        let got = reader.deserialize(bytes).await.unwrap();
        assert_eq!((got.schema_id, &got.value), (registered.id, want));
    }
}

#[tokio::test]
async fn a_json_schema_reader_validates_when_asked_and_refuses_an_id_of_another_type() {
    use onceflow::schema::{JsonSchemaDeserializer, JsonSchemaSerializer};
    let registry = registry(&[]).await;
    let topic = unique_topic("json-schema-read");
    let writer =
        JsonSchemaSerializer::new(registry.clone(), RIDE_JSON_SCHEMA, Part::Value).unwrap();
    let good = writer
        .serialize(&topic, &json!({"ride_id": 1, "fare": 1}))
        .await
        .unwrap();
    let (id, _) = wire::unframe(&good).unwrap();
    // Framed with the right id by another writer, but not fitting the schema.
    let misfit = wire::frame(id, br#"{"ride_id":"one","fare":1}"#);
    let lenient = JsonSchemaDeserializer::new(registry.clone());
    assert_eq!(
        lenient.deserialize(&misfit).await.unwrap().value["ride_id"],
        "one"
    );
    let strict = JsonSchemaDeserializer::new(
        crate::schema_registry::registry(&[("json.fail.invalid.schema", "true")]).await,
    );
    let e = strict.deserialize(&misfit).await.unwrap_err().to_string();
    assert!(
        e.contains(&format!("schema id {id}")) && e.contains("/ride_id"),
        "{e}"
    );
    // An Avro schema's id is not a JSON Schema (a subject holds one type: another topic's).
    let avro = AvroSerializer::new(registry, RIDE_V1, Part::Value).unwrap();
    let avro_topic = unique_topic("json-schema-read-avro");
    let avro_bytes = avro
        .serialize_json(&avro_topic, &json!({"id": 1, "fare": 1.0}))
        .await
        .unwrap();
    let e = lenient
        .deserialize(&avro_bytes)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a JSON Schema"), "{e}");
}

#[tokio::test]
async fn the_cli_writes_and_reads_json_schema_records() {
    let topic = TestTopic::create("json-schema-cli", 1).await;
    let out = produce_with_schema(
        &topic.name,
        "ride.json",
        RIDE_JSON_SCHEMA,
        "{\"ride_id\":1,\"fare\":2.5}\n{\"ride_id\":2,\"fare\":-1}\n",
    )
    .await;
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains("line 2: the value") && e.contains("/fare"),
        "{e}"
    );
    let out = consume_with(&topic.name, "value=json-schema", &["--format", "value"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    // As written: the key order kept.
    assert_eq!(stdout(&out).trim(), r#"{"ride_id":1,"fare":2.5}"#);
}
