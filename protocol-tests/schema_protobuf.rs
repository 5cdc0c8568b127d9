//! Protobuf records through a real schema registry (Apicurio Registry's Confluent-compatible
//! API, protocol-tests/schema-registry.sh) and the real broker: the library's serde and the
//! `onceflow` binary's `-s value=protobuf` / `--value-schema FILE.proto`. Every test uses its
//! own subject (its topic's), so they share the registry.

use crate::schema_registry::{
    consumed_values, onceflow, produce_with_schema, registry, through_the_broker,
};
use crate::support::cli::stderr;
use crate::support::registry::registry_url;
use crate::support::*;
use onceflow::schema::prost_reflect::ReflectMessage;
use onceflow::schema::{wire, Part, ProtobufDeserializer, ProtobufSerializer, SchemaError};
use serde_json::json;

/// Two top-level messages, a nested one, a map and a well-known import (which the registry
/// and the compiler know without a reference).
const RIDE_V1: &str = r#"syntax = "proto3";
package nyc;
import "google/protobuf/timestamp.proto";
message Ride {
  int64 id = 1;
  string zone = 2;
  double fare = 3;
  google.protobuf.Timestamp at = 4;
  map<string, string> extra = 5;
  message Leg { int32 n = 1; string to = 2; }
  repeated Leg legs = 6;
}
message Fare { double amount = 1; string currency = 2; }
"#;

/// V1 with `zone` removed (its number reserved) and `tip` added.
const RIDE_V2: &str = r#"syntax = "proto3";
package nyc;
message Ride {
  int64 id = 1;
  reserved 2;
  double fare = 3;
  double tip = 7;
}
"#;

#[tokio::test]
async fn protobuf_messages_round_trip_framed_with_the_registered_id_and_their_message_indexes() {
    let topic = TestTopic::create("protobuf-round-trip", 1).await;
    let registry = registry(&[]).await;
    let rides = ProtobufSerializer::new(registry.clone(), RIDE_V1, Part::Value).unwrap();
    let fares = ProtobufSerializer::new(registry.clone(), RIDE_V1, Part::Value)
        .unwrap()
        .for_message("Fare")
        .unwrap();
    let ride = json!({"id": "1", "zone": "JFK", "fare": 52.5, "at": "2024-01-01T00:00:00Z",
                      "extra": {"a": "b"}, "legs": [{"n": 1, "to": "Queens"}]});
    let fare = json!({"amount": 3.5, "currency": "USD"});
    let written = vec![
        rides.serialize_json(&topic.name, &ride).await.unwrap(),
        fares.serialize_json(&topic.name, &fare).await.unwrap(),
    ];
    // One schema, one id: the messages differ by their indexes ([0] as the single byte 0).
    let (id, indexes, _) = wire::unframe_protobuf(&written[0]).unwrap();
    assert_eq!(indexes, [0]);
    assert_eq!(written[0][5], 0);
    let (id2, indexes2, _) = wire::unframe_protobuf(&written[1]).unwrap();
    assert_eq!((id2, indexes2), (id, vec![1]));
    let subject = format!("{}-value", topic.name);
    assert_eq!(registry.latest(&subject).await.unwrap().id, id);

    let read = through_the_broker(&topic, written).await;
    let reader = ProtobufDeserializer::new(registry);
    let mut got = Vec::new();
    for bytes in &read {
        let r = reader.deserialize(bytes).await.unwrap();
        assert_eq!(r.schema_id, id);
        got.push((
            r.message.descriptor().full_name().to_owned(),
            r.to_json().unwrap(),
        ));
    }
    assert_eq!(got[0], ("nyc.Ride".to_owned(), ride));
    assert_eq!(got[1], ("nyc.Fare".to_owned(), fare));
}

#[tokio::test]
async fn a_reader_schema_reads_what_an_older_and_a_newer_writer_wrote() {
    let registry = registry(&[]).await;
    let topic = unique_topic("protobuf-evolution");
    let v1 = ProtobufSerializer::new(registry.clone(), RIDE_V1, Part::Value).unwrap();
    let old = v1
        .serialize_json(&topic, &json!({"id": "1", "zone": "JFK", "fare": 10.0}))
        .await
        .unwrap();
    // A new topic for the new writer: the registry's default compatibility would refuse
    // nothing here, but the subjects stay apart.
    let v2 = ProtobufSerializer::new(registry.clone(), RIDE_V2, Part::Value).unwrap();
    let new = v2
        .serialize_json(
            &format!("{topic}-2"),
            &json!({"id": "2", "fare": 20.0, "tip": 3.0}),
        )
        .await
        .unwrap();
    // The new reader: the removed field is skipped, the added one reads as its default.
    let reader = ProtobufDeserializer::new(registry.clone())
        .with_reader_schema(RIDE_V2, None)
        .unwrap();
    let r = reader.deserialize(&old).await.unwrap();
    assert_eq!(
        r.to_json().unwrap(),
        json!({"id": "1", "fare": 10.0, "tip": 0.0})
    );
    // The old reader: the added field is kept as an unknown field, the removed one is empty.
    let reader = ProtobufDeserializer::new(registry)
        .with_reader_schema(RIDE_V1, Some("nyc.Ride"))
        .unwrap();
    let r = reader.deserialize(&new).await.unwrap();
    assert_eq!(r.to_json().unwrap()["zone"], "");
    assert_eq!(r.to_json().unwrap()["fare"], 20.0);
    assert_eq!(r.message.unknown_fields().count(), 1);
}

#[tokio::test]
async fn imports_are_registered_as_references_and_a_reader_compiles_them_from_the_registry() {
    let registry = registry(&[]).await;
    let topic = unique_topic("protobuf-imports");
    // The import's name carries the topic so that each run registers its own subject.
    let import = format!("{topic}/money.proto");
    let money = "syntax = \"proto3\";\npackage money;\nmessage Amount { int64 cents = 1; string currency = 2; }\n";
    let ride = format!(
        "syntax = \"proto3\";\npackage nyc;\nimport \"{import}\";\nmessage Ride {{ int64 id = 1; money.Amount fare = 2; }}\n"
    );
    let writer = ProtobufSerializer::with_imports(
        registry.clone(),
        &ride,
        vec![(import.clone(), money.to_owned())],
        Part::Value,
    )
    .unwrap();
    let value = json!({"id": "5", "fare": {"cents": "1250", "currency": "USD"}});
    let bytes = writer.serialize_json(&topic, &value).await.unwrap();
    // The import is its own subject, and the schema refers to it.
    let registered = registry.latest(&format!("{topic}-value")).await.unwrap();
    let reference = &registered.schema.references[0];
    assert_eq!(
        (reference.name.as_str(), reference.subject.as_str()),
        (import.as_str(), import.as_str())
    );
    assert_eq!(registry.latest(&import).await.unwrap().schema.text, money);
    // A reader that has never seen either compiles both from the registry.
    let r = ProtobufDeserializer::new(registry)
        .deserialize(&bytes)
        .await
        .unwrap();
    assert_eq!(r.to_json().unwrap(), value);
}

#[tokio::test]
async fn a_schema_id_the_registry_does_not_know_indexes_it_has_not_and_a_corrupt_payload_are_named()
{
    let registry = registry(&[]).await;
    let reader = ProtobufDeserializer::new(registry.clone());
    match reader
        .deserialize(&wire::frame_protobuf(2_000_000_000, &[0], &[8, 1]))
        .await
    {
        Err(SchemaError::UnknownId { id, url }) => {
            assert_eq!(id, 2_000_000_000);
            assert_eq!(url, registry_url().await);
        }
        other => panic!("expected UnknownId, got {other:?}"),
    }
    let writer = ProtobufSerializer::new(registry, RIDE_V1, Part::Value).unwrap();
    let good = writer
        .serialize_json(&unique_topic("protobuf-corrupt"), &json!({"id": "1"}))
        .await
        .unwrap();
    let (id, _, _) = wire::unframe_protobuf(&good).unwrap();
    // Indexes that name no message of the schema.
    let e = reader
        .deserialize(&wire::frame_protobuf(id, &[7], &[8, 1]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("[7] name no message") && e.contains(&format!("schema id {id}")),
        "{e}"
    );
    // A payload that is not a Ride: field 1 (int64) with a truncated varint.
    let e = reader
        .deserialize(&wire::frame_protobuf(id, &[0], &[8, 0x80]))
        .await
        .unwrap_err();
    assert!(
        matches!(e, SchemaError::Decode { id: i, .. } if i == id),
        "{e}"
    );
    // Truncated message indexes.
    let e = reader
        .deserialize(&wire::prefix(id))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("message indexes"), "{e}");
    // JSON that is not a Ride is refused before anything is written.
    let e = writer
        .serialize_json("t", &json!({"id": "1", "nope": 1}))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope"), "{e}");
}

#[tokio::test]
async fn the_cli_writes_json_lines_as_protobuf_with_imports_beside_the_file_and_prints_them_back() {
    let topic = TestTopic::create("protobuf-cli", 1).await;
    let input = "{\"amount\":3.5,\"currency\":\"USD\"}\n{\"amount\":1}\n";
    let out = produce_with_schema(&topic.name, "ride.proto#nyc.Fare", RIDE_V1, input).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = consumed_values(&topic.name, "value=protobuf").await;
    // Every field printed, defaults too, as Java's JsonFormat prints them.
    assert_eq!(
        lines,
        [
            json!({"amount": 3.5, "currency": "USD"}),
            json!({"amount": 1.0, "currency": ""}),
        ]
    );
    // A line that does not fit the message is named; nothing after it is written.
    let out = produce_with_schema(&topic.name, "ride.proto", RIDE_V1, "{\"id\":\"x\"}\n").await;
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("line 1: the value"), "{e}");
    // Imports are read from the schema file's directory and registered as references.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("money")).unwrap();
    let import = format!("money/{}.proto", topic.name);
    std::fs::write(
        dir.path().join(&import),
        "syntax = \"proto3\";\npackage money;\nmessage Amount { int64 cents = 1; }\n",
    )
    .unwrap();
    let paid = dir.path().join("paid.proto");
    std::fs::write(
        &paid,
        format!("syntax = \"proto3\";\nimport \"{import}\";\nmessage Paid {{ money.Amount fare = 1; }}\n"),
    )
    .unwrap();
    let paid_topic = unique_topic("protobuf-cli-import");
    let url = registry_url().await;
    let paid = paid.display().to_string();
    let out = onceflow(
        &[
            "produce",
            "-t",
            &paid_topic,
            "--value-schema",
            &paid,
            "-r",
            url,
        ],
        "{\"fare\":{\"cents\":\"250\"}}\n",
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let r = registry(&[]).await;
    let registered = r.latest(&format!("{paid_topic}-value")).await.unwrap();
    assert_eq!(registered.schema.references[0].subject, import);
    assert_eq!(
        consumed_values(&paid_topic, "value=protobuf").await,
        [json!({"fare": {"cents": "250"}})]
    );
    // A message the file does not declare.
    let out = produce_with_schema(&topic.name, "ride.proto#Trip", RIDE_V1, "{}\n").await;
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("no message 'Trip'"), "{e}");
}
