//! `onceflow-perf serde`: the schema-registry serdes (onceflow::schema) on one thread, no Kafka.
//!
//! ```text
//! onceflow-perf serde --registry URL --format avro|protobuf [--count N] [--warmup W] [--topic T]
//!                     [--phases encode,decode,decode_plain_json,encode_json]
//! ```
//!
//! Builds N records of a fixed Ride-like schema (the same values as the Java peer's `bench`,
//! protocol-tests/java-avro/src/main/java/onceflow/avro/SerdeBench.java), then times, one phase
//! at a time on a current-thread runtime (the serde runs on one thread, as the Java serde does):
//!
//! - `encode`: the serializer over the prebuilt values (`AvroSerializer::serialize` of an
//!   `apache_avro` value, `ProtobufSerializer::serialize` of a `DynamicMessage`);
//! - `decode`: the deserializer over the encoded records (each result dropped after reading its
//!   id);
//! - `decode_plain_json`: deserialize, then `to_plain_json` (what the engine's source does);
//! - `encode_json`: `serialize_json` from prebuilt plain `serde_json::Value`s (the engine's sink).
//!
//! The registry is asked once per schema: the serializer registers (subject `T-value`, T default
//! `serde-bench-onceflow-FORMAT`), the deserializer fetches the writer schema by id; both cache.
//! An untimed pass over the first W records (default 200,000, as the Java peer's warm-up) of
//! encode and decode runs first, so the registry calls and the allocator's first growth are out
//! of the timed phases.
//!
//! `--phases` runs only those named (all four by default; encode always runs, untimed when not
//! named, since the decode phases read what it wrote), e.g. to profile one of them with perf.
//!
//! The warm-up's two passes print too, as `warmup_encode` and `warmup_decode` (registry calls
//! included).
//!
//! One JSON line per phase on stdout:
//! `{"impl":"onceflow","format":..,"phase":..,"records":N,"secs":..,"records_per_sec":..,
//! "cpu_ns_per_record":..,"thread_cpu_ns_per_record":..,"bytes_per_record":..,"check":..}`
//! where CPU is getrusage user+sys over the phase: RUSAGE_SELF (the whole process) for
//! `cpu_ns_per_record`, RUSAGE_THREAD for `thread_cpu_ns_per_record`. `bytes_per_record` is the
//! framed record's size; `check` is an FNV-1a of the payloads after the framing (encode phases;
//! equal to Java's when both wrote the same bytes) or the sum of the decoded ids (decode phases).

use crate::{run_err, Args, Failure, Res};
use onceflow::schema::apache_avro::types::Value as Avro;
use onceflow::schema::prost_reflect::{DynamicMessage, Value as Pb};
use onceflow::schema::{
    AvroDeserializer, AvroSerializer, Part, ProtobufDeserializer, ProtobufSerializer,
    RegistryConfig, SchemaRegistry,
};
use serde_json::{json, Value as Json};
use std::hint::black_box;
use std::time::Instant;

/// The Avro schema (the Java peer's SerdeBench.AVRO_SCHEMA is the same text).
pub const AVRO_SCHEMA: &str = r#"{"type":"record","name":"Ride","namespace":"bench","fields":[{"name":"id","type":"long"},{"name":"zone","type":["null","string"],"default":null},{"name":"fare","type":"double"},{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["STANDARD","SHARED","PREMIUM"]}},{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"note","type":"string"},{"name":"point","type":{"type":"array","items":"double"}}]}"#;

/// The Protobuf schema (the Java peer's SerdeBench.PROTO_SCHEMA is the same text).
pub const PROTO_SCHEMA: &str = "syntax = \"proto3\";
package bench;

enum Kind {
  STANDARD = 0;
  SHARED = 1;
  PREMIUM = 2;
}

message Ride {
  int64 id = 1;
  string zone = 2;
  double fare = 3;
  Kind kind = 4;
  int64 at = 5;
  string note = 6;
  repeated double point = 7;
}
";

const ZONES: [&str; 5] = ["JFK", "LGA", "Midtown", "Harlem", "SoHo"];
const KINDS: [&str; 3] = ["STANDARD", "SHARED", "PREMIUM"];

/// Record i's values (the Java peer computes the same ones).
struct Ride {
    id: i64,
    zone: Option<&'static str>,
    fare: f64,
    kind: u32,
    at: i64,
    note: String,
    point: [f64; 2],
}

impl Ride {
    fn nth(i: u64) -> Ride {
        let i = i as i64;
        Ride {
            id: i,
            zone: (i % 7 != 0).then(|| ZONES[(i % 5) as usize]),
            fare: 5.0 + (i % 1000) as f64 * 0.25,
            kind: (i % 3) as u32,
            at: 1_700_000_000_000 + i * 1000,
            // 31 characters.
            note: format!("note-{i:010}-abcdefghijklmno"),
            point: [
                40.0 + (i % 100) as f64 * 0.5,
                -74.0 + (i % 50) as f64 * 0.25,
            ],
        }
    }

    fn avro(self) -> Avro {
        let zone = match self.zone {
            None => Avro::Union(0, Box::new(Avro::Null)),
            Some(z) => Avro::Union(1, Box::new(Avro::String(z.to_owned()))),
        };
        Avro::Record(vec![
            ("id".to_owned(), Avro::Long(self.id)),
            ("zone".to_owned(), zone),
            ("fare".to_owned(), Avro::Double(self.fare)),
            (
                "kind".to_owned(),
                Avro::Enum(self.kind, KINDS[self.kind as usize].to_owned()),
            ),
            ("at".to_owned(), Avro::TimestampMillis(self.at)),
            ("note".to_owned(), Avro::String(self.note)),
            (
                "point".to_owned(),
                Avro::Array(self.point.iter().map(|d| Avro::Double(*d)).collect()),
            ),
        ])
    }

    fn protobuf(self, m: &DynamicMessage) -> DynamicMessage {
        let mut m = m.clone();
        m.set_field_by_number(1, Pb::I64(self.id));
        if let Some(z) = self.zone {
            m.set_field_by_number(2, Pb::String(z.to_owned()));
        }
        m.set_field_by_number(3, Pb::F64(self.fare));
        m.set_field_by_number(4, Pb::EnumNumber(self.kind as i32));
        m.set_field_by_number(5, Pb::I64(self.at));
        m.set_field_by_number(6, Pb::String(self.note));
        m.set_field_by_number(
            7,
            Pb::List(self.point.iter().map(|d| Pb::F64(*d)).collect()),
        );
        m
    }

    /// Plain JSON, as the engine's pipelines hold records (what to_plain_json gives back).
    fn plain_json(self) -> Json {
        json!({
            "id": self.id,
            "zone": self.zone,
            "fare": self.fare,
            "kind": KINDS[self.kind as usize],
            "at": self.at,
            "note": self.note,
            "point": self.point,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// CPU time

#[derive(Clone, Copy)]
struct Cpu {
    process_ns: u64,
    thread_ns: u64,
}

fn rusage_ns(who: libc::c_int) -> u64 {
    // SAFETY: getrusage writes one struct rusage into the zeroed one it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return 0;
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

fn cpu_now() -> Cpu {
    Cpu {
        process_ns: rusage_ns(libc::RUSAGE_SELF),
        thread_ns: rusage_ns(libc::RUSAGE_THREAD),
    }
}

/// Which phases to run and print (`--phases`).
struct Phases(Vec<String>);

impl Phases {
    fn wants(&self, name: &str) -> bool {
        self.0.iter().any(|p| p == name)
    }
}

/// A phase being timed.
struct Phase {
    name: &'static str,
    start: Instant,
    cpu: Cpu,
    print: bool,
}

impl Phase {
    /// Starts timing; `print`: whether [`Self::end`] prints the phase's line.
    fn start(name: &'static str, print: bool) -> Phase {
        Phase {
            name,
            print,
            cpu: cpu_now(),
            start: Instant::now(),
        }
    }

    fn end(self, format: &str, records: usize, bytes: u64, check: impl FnOnce() -> String) {
        if !self.print {
            return;
        }
        let check = check();
        let secs = self.start.elapsed().as_secs_f64();
        let cpu = cpu_now();
        let n = records.max(1) as f64;
        let line = json!({
            "impl": "onceflow",
            "format": format,
            "phase": self.name,
            "records": records,
            "secs": round(secs, 4),
            "records_per_sec": (records as f64 / secs).round(),
            "cpu_ns_per_record": round((cpu.process_ns - self.cpu.process_ns) as f64 / n, 1),
            "thread_cpu_ns_per_record": round((cpu.thread_ns - self.cpu.thread_ns) as f64 / n, 1),
            "bytes_per_record": round(bytes as f64 / n, 2),
            "check": check,
        });
        println!("{line}");
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}

/// FNV-1a 64 over every record's payload after `skip(record)` bytes of framing.
fn fnv(records: &[Vec<u8>], skip: impl Fn(&[u8]) -> usize) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for r in records {
        for b in &r[skip(r)..] {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// The length of the Confluent framing of a Protobuf record: magic, id, then the zig-zag varint
/// count and indexes (Java writes the count 1 and index 0, `02 00`; a count of 0 means [0]).
fn protobuf_framing(r: &[u8]) -> usize {
    let mut pos = 5;
    let varint = |pos: &mut usize| {
        let mut v: u64 = 0;
        let mut shift = 0;
        while let Some(b) = r.get(*pos) {
            *pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        (v >> 1) as i64 ^ -((v & 1) as i64)
    };
    let n = varint(&mut pos);
    for _ in 0..n {
        varint(&mut pos);
    }
    pos
}

fn total_len(records: &[Vec<u8>]) -> u64 {
    records.iter().map(|r| r.len() as u64).sum()
}

// ---------------------------------------------------------------------------------------------
// The command

pub fn serde(args: &Args) -> Res<()> {
    let registry = args.req("registry")?.to_owned();
    let format = args.req("format")?.to_owned();
    let count: usize = args.opt_num("count")?.unwrap_or(1_000_000);
    let warmup: usize = args.opt_num("warmup")?.unwrap_or(200_000).min(count);
    let topic = args
        .opt("topic")
        .map(str::to_owned)
        .unwrap_or_else(|| format!("serde-bench-onceflow-{format}"));
    let all = ["encode", "decode", "decode_plain_json", "encode_json"];
    let phases = Phases(match args.opt("phases") {
        None => all.iter().map(|p| (*p).to_owned()).collect(),
        Some(list) => list.split(',').map(|p| p.trim().to_owned()).collect(),
    });
    if let Some(p) = phases.0.iter().find(|p| !all.contains(&p.as_str())) {
        return Err(Failure::Usage(format!(
            "--phases: unknown phase '{p}' (expected some of {})",
            all.join(",")
        )));
    }
    args.check_unused()?;
    let registry = SchemaRegistry::new(
        RegistryConfig::from_properties([("schema.registry.url", registry.as_str())])
            .map_err(|e| Failure::Usage(e.to_string()))?,
    )
    .map_err(run_err)?;
    // One thread: the serde's work and the runtime's, as the Java peer's one thread.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(run_err)?;
    match format.as_str() {
        "avro" => rt.block_on(avro(registry, &topic, count, warmup, &phases)),
        "protobuf" => rt.block_on(protobuf(registry, &topic, count, warmup, &phases)),
        other => Err(Failure::Usage(format!(
            "--format {other}: expected avro or protobuf"
        ))),
    }
}

async fn avro(
    registry: SchemaRegistry,
    topic: &str,
    n: usize,
    warmup: usize,
    phases: &Phases,
) -> Res<()> {
    let ser = AvroSerializer::new(registry.clone(), AVRO_SCHEMA, Part::Value).map_err(run_err)?;
    let de = AvroDeserializer::new(registry);
    let id_of = |v: &Avro| match v {
        Avro::Record(fields) => match fields.first() {
            Some((_, Avro::Long(id))) => *id,
            _ => 0,
        },
        _ => 0,
    };

    // Warm-up: the registry calls (register, fetch by id), the allocator's first growth.
    // Warm-up: the registry calls (register, fetch by id), the allocator's first growth.
    let p = Phase::start("warmup_encode", true);
    let mut warm = Vec::with_capacity(warmup);
    for i in 0..warmup {
        let v = Ride::nth(i as u64).avro();
        warm.push(ser.serialize(topic, v).await.map_err(run_err)?);
    }
    p.end("avro", warmup, total_len(&warm), || fnv(&warm, |_| 5));
    let p = Phase::start("warmup_decode", true);
    for r in &warm {
        black_box(de.deserialize(r).await.map_err(run_err)?);
    }
    p.end("avro", warmup, total_len(&warm), String::new);
    drop(warm);

    let values: Vec<Avro> = (0..n as u64).map(|i| Ride::nth(i).avro()).collect();
    let mut out = Vec::with_capacity(n);
    let p = Phase::start("encode", phases.wants("encode"));
    for v in values {
        out.push(ser.serialize(topic, v).await.map_err(run_err)?);
    }
    let bytes = total_len(&out);
    p.end("avro", n, bytes, || fnv(&out, |_| 5));

    if phases.wants("decode") {
        let p = Phase::start("decode", true);
        let mut ids: i64 = 0;
        for r in &out {
            let rec = de.deserialize(r).await.map_err(run_err)?;
            ids = ids.wrapping_add(id_of(&rec.value));
        }
        p.end("avro", n, bytes, || ids.to_string());
    }

    if phases.wants("decode_plain_json") {
        let p = Phase::start("decode_plain_json", true);
        let mut ids: i64 = 0;
        for r in &out {
            let rec = de.deserialize(r).await.map_err(run_err)?;
            let j = rec.to_plain_json().map_err(run_err)?;
            ids = ids.wrapping_add(j["id"].as_i64().unwrap_or(0));
        }
        p.end("avro", n, bytes, || ids.to_string());
    }
    drop(out);

    if phases.wants("encode_json") {
        let values: Vec<Json> = (0..n as u64).map(|i| Ride::nth(i).plain_json()).collect();
        let mut out = Vec::with_capacity(n);
        let p = Phase::start("encode_json", true);
        for v in &values {
            out.push(ser.serialize_json(topic, v).await.map_err(run_err)?);
        }
        p.end("avro", n, total_len(&out), || fnv(&out, |_| 5));
    }
    Ok(())
}

async fn protobuf(
    registry: SchemaRegistry,
    topic: &str,
    n: usize,
    warmup: usize,
    phases: &Phases,
) -> Res<()> {
    let ser =
        ProtobufSerializer::new(registry.clone(), PROTO_SCHEMA, Part::Value).map_err(run_err)?;
    let de = ProtobufDeserializer::new(registry);
    let empty = DynamicMessage::new(ser.message().clone());
    let id_of = |m: &DynamicMessage| {
        m.get_field_by_number(1)
            .and_then(|v| v.as_i64())
            .unwrap_or(0)
    };

    let p = Phase::start("warmup_encode", true);
    let mut warm = Vec::with_capacity(warmup);
    for i in 0..warmup {
        let m = Ride::nth(i as u64).protobuf(&empty);
        warm.push(ser.serialize(topic, &m).await.map_err(run_err)?);
    }
    p.end("protobuf", warmup, total_len(&warm), || {
        fnv(&warm, protobuf_framing)
    });
    let p = Phase::start("warmup_decode", true);
    for r in &warm {
        black_box(de.deserialize(r).await.map_err(run_err)?);
    }
    p.end("protobuf", warmup, total_len(&warm), String::new);
    drop(warm);

    let values: Vec<DynamicMessage> = (0..n as u64)
        .map(|i| Ride::nth(i).protobuf(&empty))
        .collect();
    let mut out = Vec::with_capacity(n);
    let p = Phase::start("encode", phases.wants("encode"));
    for v in &values {
        out.push(ser.serialize(topic, v).await.map_err(run_err)?);
    }
    let bytes = total_len(&out);
    p.end("protobuf", n, bytes, || fnv(&out, protobuf_framing));
    drop(values);

    if phases.wants("decode") {
        let p = Phase::start("decode", true);
        let mut ids: i64 = 0;
        for r in &out {
            let rec = de.deserialize(r).await.map_err(run_err)?;
            ids = ids.wrapping_add(id_of(&rec.message));
        }
        p.end("protobuf", n, bytes, || ids.to_string());
    }

    if phases.wants("decode_plain_json") {
        let p = Phase::start("decode_plain_json", true);
        let mut ids: i64 = 0;
        for r in &out {
            let rec = de.deserialize(r).await.map_err(run_err)?;
            let j = rec.to_plain_json().map_err(run_err)?;
            ids = ids.wrapping_add(j["id"].as_i64().unwrap_or(0));
        }
        p.end("protobuf", n, bytes, || ids.to_string());
    }
    drop(out);

    if phases.wants("encode_json") {
        let values: Vec<Json> = (0..n as u64).map(|i| Ride::nth(i).plain_json()).collect();
        let mut out = Vec::with_capacity(n);
        let p = Phase::start("encode_json", true);
        for v in &values {
            out.push(ser.serialize_json(topic, v).await.map_err(run_err)?);
        }
        p.end("protobuf", n, total_len(&out), || {
            fnv(&out, protobuf_framing)
        });
    }
    Ok(())
}
