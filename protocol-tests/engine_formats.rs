//! Job files over the schema registry's formats, end to end with the real registry
//! (protocol-tests/schema-registry.sh) and broker: job (b) over Avro, the shipped
//! jobs/rides-per-driver-hourly-avro.toml, reading Avro rides and writing its windows in Avro,
//! exactly once across a SIGKILL and in cluster mode; the cleansing job between Protobuf and
//! JSON Schema, both ways; records the source cannot read (a schema id the registry does not
//! know, a payload that does not fit its schema) counted as errors.tolerance says; typed jobs
//! reading Avro as serde types and Protobuf as prost messages.
//! Transactional: runs at TV2 and TV1.

use crate::engine_errors::{committed, wait_for};
use crate::engine_features::{end, scratch, BASE, HOUR, MINUTE};
use crate::engine_metrics::{free_addr, scrape_until};
use crate::engine_run::{job_file, log_of, start_job, stop};
use crate::support::registry::registry_url;
use crate::support::*;
use bytes::Bytes;
use onceflow::client::{ConsumerRecord, ProducerRecord};
use onceflow::schema::{
    wire, AvroDeserializer, AvroSerializer, JsonSchemaDeserializer, JsonSchemaSerializer, Part,
    ProtobufDeserializer, ProtobufSerializer, RegistryConfig, SchemaRegistry,
};
use onceflow_taxi::Ride;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The rides in Avro: the event time a timestamp-millis, an optional zone (a union).
const RIDE_AVSC: &str = r#"{"type":"record","name":"Ride","namespace":"nyc.avro","fields":[
    {"name":"ride_id","type":"long"},
    {"name":"driver_id","type":"long"},
    {"name":"is_start","type":"boolean"},
    {"name":"zone","type":["null","string"],"default":null},
    {"name":"start_lon","type":"double"},
    {"name":"start_lat","type":"double"},
    {"name":"end_lon","type":"double"},
    {"name":"end_lat","type":"double"},
    {"name":"passengers","type":"int"},
    {"name":"event_time","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;

/// The rides in Protobuf, as the cleansing job reads them.
const RIDE_PROTO: &str = r#"syntax = "proto3";
package nyc.proto;
message Ride {
  uint64 ride_id = 1;
  uint64 driver_id = 2;
  uint64 taxi_id = 3;
  bool is_start = 4;
  double start_lon = 5;
  double start_lat = 6;
  double end_lon = 7;
  double end_lat = 8;
  uint32 passengers = 9;
  int64 event_time = 10;
}
"#;

async fn registry() -> SchemaRegistry {
    SchemaRegistry::new(
        RegistryConfig::from_properties([("schema.registry.url", registry_url().await)]).unwrap(),
    )
    .unwrap()
}

/// A ride as the Avro schema has it (a zone on every third).
fn avro_ride(r: &Ride) -> Value {
    json!({"ride_id": r.ride_id, "driver_id": r.driver_id, "is_start": r.is_start,
           "zone": if r.ride_id.is_multiple_of(3) { json!("JFK") } else { Value::Null },
           "start_lon": r.start_lon, "start_lat": r.start_lat, "end_lon": r.end_lon,
           "end_lat": r.end_lat, "passengers": r.passengers, "event_time": r.event_time})
}

/// Produces `values` (already framed) to partition 0 of `topic`, keyed by `keys`.
async fn produce(topic: &str, values: Vec<(Bytes, Vec<u8>)>) {
    let p = producer(&[("enable.idempotence", "true")]).await;
    for (key, value) in values {
        let mut r = ProducerRecord::new(topic.to_owned(), Bytes::from(value)).with_key(key);
        r.partition = Some(0);
        p.send(r).await.unwrap().await.unwrap();
    }
}

/// Rides `from..to`: END events of drivers 0..5, a minute apart from BASE.
fn rides(from: u64, to: u64) -> Vec<Ride> {
    (from..to)
        .map(|i| end(i, i % 5, BASE + i as i64 * MINUTE, 1 + (i % 3) as u32))
        .collect()
}

async fn avro_rides(topic: &str, rides: &[Ride]) -> Vec<(Bytes, Vec<u8>)> {
    let writer = AvroSerializer::new(registry().await, RIDE_AVSC, Part::Value).unwrap();
    let mut out = Vec::new();
    for r in rides {
        out.push((
            Bytes::from(r.key()),
            writer.serialize_json(topic, &avro_ride(r)).await.unwrap(),
        ));
    }
    out
}

/// `shipped` on `input` → `output`, its ends in `formats` (lines for [source] and [sink]),
/// with the registry and `settings` lines added.
fn job(
    dir: &Path,
    shipped: &str,
    (input, output): (&str, &str),
    (source, sink): (&str, &str),
    settings: &str,
    registry: &str,
) -> PathBuf {
    let path = job_file(dir, shipped, input, output, &unique_topic("formats"));
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replacen("[source]\n", &format!("[source]\n{source}"), 1)
        .replacen("[sink]\n", &format!("[sink]\n{sink}"), 1)
        .replacen("[settings]\n", &format!("[settings]\n{settings}"), 1);
    let text = format!("{text}\n[registry]\nurl = \"{registry}\"\n");
    std::fs::write(&path, text).unwrap();
    path
}

/// Job (b)'s Avro output as (driver, window start) → (rides, passengers), each window once,
/// written with a schema whose text holds `schema_name` when given.
async fn avro_windows(
    records: &[ConsumerRecord],
    schema_name: Option<&str>,
) -> BTreeMap<(u64, i64), (u64, u64)> {
    let registry = registry().await;
    let reader = AvroDeserializer::new(registry.clone());
    let mut got = BTreeMap::new();
    for r in records {
        let bytes = r.value.as_ref().unwrap();
        if let Some(name) = schema_name {
            let (id, _) = wire::unframe(bytes).unwrap();
            let written_with = registry.schema_by_id(id).await.unwrap();
            assert!(written_with.text.contains(name), "{}", written_with.text);
        }
        let v = reader
            .deserialize(bytes)
            .await
            .unwrap()
            .to_plain_json()
            .unwrap();
        let k = (
            v["driver_id"].as_u64().unwrap(),
            v["window_start"].as_i64().unwrap(),
        );
        assert_eq!(v["window_end"].as_i64().unwrap(), k.1 + HOUR);
        let counts = (
            v["rides"].as_u64().unwrap(),
            v["passengers"].as_u64().unwrap(),
        );
        assert!(
            got.insert(k, counts).is_none(),
            "window {k:?} written twice"
        );
    }
    got
}

/// Job (b)'s expected windows of `rides`: (driver, window start) → (rides, passengers), the
/// windows the watermark closed (those ending at or before the last ride's time minus the
/// job's 60 s out-of-orderness).
fn expected_windows(rides: &[Ride]) -> BTreeMap<(u64, i64), (u64, u64)> {
    let last = rides.iter().map(|r| r.event_time).max().unwrap_or(0);
    let watermark = last - 60_000 - 1;
    let mut out: BTreeMap<(u64, i64), (u64, u64)> = BTreeMap::new();
    for r in rides.iter().filter(|r| !r.is_start) {
        let start = r.event_time - r.event_time.rem_euclid(HOUR);
        if start + HOUR - 1 <= watermark {
            let e = out.entry((r.driver_id, start)).or_default();
            e.0 += 1;
            e.1 += u64::from(r.passengers);
        }
    }
    out
}

#[tokio::test]
async fn the_hourly_job_reads_avro_rides_and_writes_avro_windows_exactly_once_across_a_sigkill() {
    let url = registry_url().await.to_owned();
    let input = TestTopic::create("formats-avro-in", 1).await;
    let output = TestTopic::create("formats-avro-out", 1).await;
    let dir = scratch("onceflow-formats-avro");
    // Three hours, then a kill once the first windows are committed, then three more.
    let first = rides(0, 180);
    produce(&input.name, avro_rides(&input.name, &first).await).await;
    // The shipped job, its registry and schema path pointed at the test's.
    let path = job_file(
        &dir,
        "rides-per-driver-hourly-avro.toml",
        &input.name,
        &output.name,
        &unique_topic("formats"),
    );
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("http://127.0.0.1:8081/apis/ccompat/v7", &url)
        .replace(
            "\"fixtures/schemas/",
            &format!("\"{}/", repo().join("fixtures/schemas").display()),
        );
    std::fs::write(&path, text).unwrap();
    let log = dir.join("run.log");
    let mut child = start_job(&path, &log, &["--fresh"]);
    wait_for(&output, 5, &mut child, &log).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let second = rides(180, 360);
    produce(&input.name, avro_rides(&input.name, &second).await).await;
    let all: Vec<Ride> = first.into_iter().chain(second).collect();
    let want = expected_windows(&all);
    let log2 = dir.join("run2.log");
    let mut child = start_job(&path, &log2, &[]);
    wait_for(&output, want.len(), &mut child, &log2).await;
    stop(child, &log2).await;
    // Every window once, in Avro with the registered schema, as job (b) computes it.
    let got = avro_windows(&committed(&output).await, Some("DriverHour")).await;
    assert_eq!(got, want);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A JSON Schema of the cleansing job's rides.
const RIDE_JSON_SCHEMA: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"Ride","type":"object",
  "required":["ride_id","driver_id","is_start","end_lon","event_time"],
  "properties":{"ride_id":{"type":"integer"},"driver_id":{"type":"integer"},"is_start":{"type":"boolean"},
    "start_lon":{"type":"number"},"start_lat":{"type":"number"},"end_lon":{"type":"number"},
    "end_lat":{"type":"number"},"passengers":{"type":"integer"},"event_time":{"type":"integer"}}}"#;

/// Rides `0..40` as JSON, every other one ending outside NYC; and the ids of those inside.
fn cleansing_rides() -> (Vec<(Bytes, Value)>, Vec<u64>) {
    let mut values = Vec::new();
    let mut inside = Vec::new();
    for (i, mut r) in rides(0, 40).into_iter().enumerate() {
        if i % 2 == 1 {
            r.end_lon = -74.1745;
        } else {
            inside.push(r.ride_id);
        }
        let v = json!({"ride_id": r.ride_id, "driver_id": r.driver_id, "taxi_id": r.taxi_id,
            "is_start": r.is_start, "start_lon": r.start_lon, "start_lat": r.start_lat,
            "end_lon": r.end_lon, "end_lat": r.end_lat, "passengers": r.passengers,
            "event_time": r.event_time});
        values.push((Bytes::from(r.key()), v));
    }
    (values, inside)
}

/// The cleansing job from `input` (values already framed) in `source_format` to a new topic
/// in `sink_format` with the schema `schema` written to `schema_file`: its output records,
/// read_committed, once the `n` expected ones are there.
async fn cleansing(
    label: &str,
    input: &TestTopic,
    source_format: &str,
    (sink_format, schema_file, schema): (&str, &str, &str),
    n: usize,
) -> Vec<ConsumerRecord> {
    let url = registry_url().await.to_owned();
    let output = TestTopic::create(&format!("{label}-out"), 1).await;
    let dir = scratch(&format!("onceflow-{label}"));
    let schema_path = dir.join(schema_file);
    std::fs::write(&schema_path, schema).unwrap();
    let sink = format!(
        "format = \"{sink_format}\"\nschema = \"{}\"\n",
        schema_path.display()
    );
    let path = job(
        &dir,
        "rides-cleansing.toml",
        (&input.name, &output.name),
        (&format!("format = \"{source_format}\"\n"), &sink),
        "",
        &url,
    );
    let log = dir.join("run.log");
    let mut child = start_job(&path, &log, &["--fresh"]);
    wait_for(&output, n, &mut child, &log).await;
    stop(child, &log).await;
    let out = committed(&output).await;
    let _ = std::fs::remove_dir_all(&dir);
    out
}

#[tokio::test]
async fn the_cleansing_job_reads_protobuf_rides_and_writes_json_schema_records() {
    let input = TestTopic::create("formats-protobuf-in", 1).await;
    let writer = ProtobufSerializer::new(registry().await, RIDE_PROTO, Part::Value).unwrap();
    let (rides, inside) = cleansing_rides();
    let mut values = Vec::new();
    for (key, v) in rides {
        values.push((key, writer.serialize_json(&input.name, &v).await.unwrap()));
    }
    produce(&input.name, values).await;
    let sink = ("json-schema", "ride.schema.json", RIDE_JSON_SCHEMA);
    let out = cleansing("formats-protobuf", &input, "protobuf", sink, inside.len()).await;
    // The filter read the decoded messages' coordinates; the output is JSON Schema records
    // of the declared names, 64-bit integers as numbers.
    let reader = JsonSchemaDeserializer::new(registry().await);
    let mut got = Vec::new();
    for r in &out {
        got.push(
            reader
                .deserialize(r.value.as_ref().unwrap())
                .await
                .unwrap()
                .value,
        );
    }
    let ids: Vec<u64> = got.iter().map(|v| v["ride_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, inside);
    assert_eq!(got[0]["event_time"], json!(BASE));
}

#[tokio::test]
async fn the_cleansing_job_reads_json_schema_rides_and_writes_protobuf_records() {
    let input = TestTopic::create("formats-json-schema-in", 1).await;
    let writer =
        JsonSchemaSerializer::new(registry().await, RIDE_JSON_SCHEMA, Part::Value).unwrap();
    let (rides, inside) = cleansing_rides();
    let mut values = Vec::new();
    for (key, v) in rides {
        values.push((key, writer.serialize(&input.name, &v).await.unwrap()));
    }
    produce(&input.name, values).await;
    let sink = ("protobuf", "ride.proto", RIDE_PROTO);
    let out = cleansing(
        "formats-json-schema",
        &input,
        "json-schema",
        sink,
        inside.len(),
    )
    .await;
    let reader = ProtobufDeserializer::new(registry().await);
    let mut got = Vec::new();
    for r in &out {
        let record = reader.deserialize(r.value.as_ref().unwrap()).await.unwrap();
        assert_eq!(record.indexes, [0]);
        got.push(record.to_plain_json().unwrap());
    }
    let ids: Vec<u64> = got.iter().map(|v| v["ride_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, inside);
    assert_eq!(got[0]["event_time"], json!(BASE));
}

#[tokio::test]
async fn avro_records_the_source_cannot_read_are_skipped_and_counted_and_the_rest_arrive_once() {
    let url = registry_url().await.to_owned();
    let input = TestTopic::create("formats-bad-in", 1).await;
    let output = TestTopic::create("formats-bad-out", 1).await;
    let dir = scratch("onceflow-formats-bad");
    let mut values = avro_rides(&input.name, &rides(0, 20)).await;
    let (id, _) = wire::unframe(&values[0].1).unwrap();
    // A schema id the registry does not know, a payload that is not a Ride, JSON.
    values.insert(
        5,
        (Bytes::from_static(b"1"), wire::frame(2_000_000_000, &[2])),
    );
    values.insert(10, (Bytes::from_static(b"1"), wire::frame(id, &[0x80])));
    values.insert(15, (Bytes::from_static(b"1"), b"{\"ride_id\": 1}".to_vec()));
    produce(&input.name, values).await;
    let path = job(
        &dir,
        "rides-cleansing.toml",
        (&input.name, &output.name),
        ("format = \"avro\"\n", ""),
        "errors.tolerance = \"skip\"\n",
        &url,
    );
    let log = dir.join("run.log");
    let addr = free_addr().to_string();
    let mut child = start_job(&path, &log, &["--fresh", "--metrics-addr", &addr]);
    let (_, s) = scrape_until(addr.parse().unwrap(), &mut child, &log, |s| {
        s.get("onceflow_skipped_records_total").copied() == Some(3.0)
            && s.get("onceflow_sink_records_total").copied() == Some(20.0)
    })
    .await;
    assert_eq!(s["onceflow_source_records_total"], 23.0);
    let out = wait_for(&output, 20, &mut child, &log).await;
    stop(child, &log).await;
    let ids: Vec<u64> = out
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_slice(r.value.as_ref().unwrap()).unwrap();
            v["ride_id"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(ids, (0..20).collect::<Vec<_>>());
    let text = log_of(&log);
    for (offset, why) in [
        (5, "schema id 2000000000"),
        (10, &format!("schema id {id}") as &str),
        (15, "magic byte 0"),
    ] {
        assert!(
            text.contains(&format!("{}-0 offset {offset}", input.name)) && text.contains(why),
            "offset {offset} ({why}) not logged:\n{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn job_b_over_avro_in_cluster_mode_writes_every_window_once() {
    let url = registry_url().await.to_owned();
    let input = TestTopic::create("formats-cluster-in", 1).await;
    let output = TestTopic::create("formats-cluster-out", 1).await;
    let dir = scratch("onceflow-formats-cluster");
    let all = rides(0, 300);
    produce(&input.name, avro_rides(&input.name, &all).await).await;
    let schema = repo().join("fixtures/schemas/driver-hour.avsc");
    let path = crate::engine_members::cluster_job_with(
        &dir,
        "rides-per-driver-hourly-avro.toml",
        &input.name,
        &output.name,
        &unique_topic("formats-cluster"),
        &[
            ("url = ", format!("url = \"{url}\"")),
            ("schema = ", format!("schema = \"{}\"", schema.display())),
        ],
    );
    let want = expected_windows(&all);
    let log = dir.join("run.log");
    let mut child = start_job(&path, &log, &[]);
    wait_for(&output, want.len(), &mut child, &log).await;
    stop(child, &log).await;
    // Through the repartition topic and the member's own transactions, in Avro.
    let got = avro_windows(&committed(&output).await, None).await;
    assert_eq!(got, want);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A typed job's Avro ride (serde).
#[derive(Debug, serde::Deserialize, serde::Serialize)]
struct AvroRide {
    ride_id: i64,
    driver_id: i64,
    is_start: bool,
    zone: Option<String>,
    start_lon: f64,
    start_lat: f64,
    end_lon: f64,
    end_lat: f64,
    passengers: i32,
    event_time: i64,
}

/// A typed job's Protobuf ride: the fields it reads of `RIDE_PROTO`'s, by number.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoRide {
    #[prost(uint64, tag = "1")]
    ride_id: u64,
    #[prost(double, tag = "7")]
    end_lon: f64,
    #[prost(int64, tag = "10")]
    event_time: i64,
}

/// Waits for `n` committed records of `output`, stops the typed job, and gives the
/// `ride_id`s of the JSON records.
async fn typed_output(
    mut job: crate::engine_dataflow::Running,
    output: &TestTopic,
    n: usize,
    skipped: u64,
) -> Vec<u64> {
    job.wait_for("the outputs and the skipped records", |s| {
        s.records_out == n as u64 && s.skipped_records == skipped
    })
    .await;
    job.stop().await;
    committed(output)
        .await
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_slice(r.value.as_ref().unwrap()).unwrap();
            v["ride_id"].as_u64().unwrap()
        })
        .collect()
}

#[tokio::test]
async fn typed_jobs_read_avro_as_serde_types_and_protobuf_as_prost_messages() {
    use onceflow::engine::dataflow::{Avro, ErrorTolerance, JobBuilder, KafkaSink, Protobuf};
    use onceflow::engine::state::RestoreFrom;
    let avro_in = TestTopic::create("typed-avro-in", 1).await;
    let proto_in = TestTopic::create("typed-protobuf-in", 1).await;
    let output = TestTopic::create("typed-formats-out", 1).await;
    let dir = scratch("onceflow-typed-formats");
    // Avro rides, one of them not in the wire format.
    let mut values = avro_rides(&avro_in.name, &rides(0, 30)).await;
    values.insert(7, (Bytes::from_static(b"1"), b"not avro".to_vec()));
    produce(&avro_in.name, values).await;
    let flow = JobBuilder::new("typed-avro")
        .brokers(broker())
        .transactional_id_prefix(unique_topic("typed-avro"))
        .state_dir(dir.join("avro"))
        .errors_tolerance(ErrorTolerance::Skip)
        .source(
            [avro_in.name.as_str()],
            Avro::<AvroRide>::new(registry().await),
        )
        .filter(|r: &AvroRide| r.zone.is_some())
        .sink(KafkaSink::json(output.name.clone()))
        .build()
        .unwrap();
    let job = crate::engine_dataflow::start(flow, RestoreFrom::Fresh);
    let with_zone: Vec<u64> = (0..30).filter(|i| i % 3 == 0).collect();
    let got = typed_output(job, &output, with_zone.len(), 1).await;
    assert_eq!(got, with_zone, "the rides whose optional zone is set");
    // Protobuf rides decoded as the prost type (the fields it declares, by number).
    let writer = ProtobufSerializer::new(registry().await, RIDE_PROTO, Part::Value).unwrap();
    let (rides, inside) = cleansing_rides();
    let mut values = Vec::new();
    for (key, v) in rides {
        values.push((
            key,
            writer.serialize_json(&proto_in.name, &v).await.unwrap(),
        ));
    }
    produce(&proto_in.name, values).await;
    let output2 = TestTopic::create("typed-formats-out2", 1).await;
    let flow = JobBuilder::new("typed-protobuf")
        .brokers(broker())
        .transactional_id_prefix(unique_topic("typed-protobuf"))
        .state_dir(dir.join("protobuf"))
        .source(
            [proto_in.name.as_str()],
            Protobuf::<ProtoRide>::new(registry().await),
        )
        .filter(|r: &ProtoRide| r.end_lon > -74.05 && r.event_time >= BASE)
        .map(|r: ProtoRide| json!({"ride_id": r.ride_id}))
        .sink(KafkaSink::json(output2.name.clone()))
        .build()
        .unwrap();
    let job = crate::engine_dataflow::start(flow, RestoreFrom::Fresh);
    let got = typed_output(job, &output2, inside.len(), 0).await;
    assert_eq!(got, inside, "the rides inside NYC");
    let _ = std::fs::remove_dir_all(&dir);
}
