#!/usr/bin/env bash
# Schema-registry serdes: onceflow's (onceflow::schema, AvroSerializer/AvroDeserializer and
# ProtobufSerializer/ProtobufDeserializer) against the Java serializers (Apicurio Registry's
# AvroKafkaSerializer/AvroKafkaDeserializer and ProtobufKafkaSerializer with the Java peer's
# indexed Protobuf deserializer), same schema, same record values, same registry, no Kafka:
#   onceflow  onceflow-perf serde (benches/perf/src/serde_bench.rs)
#   java      protocol-tests/java-avro/avro-interop.sh bench (SerdeBench.java), Apicurio serdes
#             3.1.7, Avro 1.12.2, protobuf-java 4.33.4
# Both run their serde on one thread (onceflow on a current-thread tokio runtime), encode N
# records (the values built before the clock starts), then decode them all, and print one JSON
# line per phase: records/s and CPU ns per record (onceflow: getrusage user+sys of the process
# and of the thread over the phase; Java: OperatingSystemMXBean.getProcessCpuTime, which counts
# the JIT compiler's and the GC's threads too, and ThreadMXBean for the serde's thread). Each
# first makes an untimed-for-the-table pass over the first WARMUP records (JVM warm-up; the
# registry calls: the serializer registers, the deserializer fetches the schema by id, both
# cache), printed as warmup_encode / warmup_decode. onceflow also times the plain-JSON paths the
# engine uses: decode_plain_json (deserialize, then to_plain_json) and encode_json
# (serialize_json from a serde_json::Value).
#
#   benches/run-serde-comparison.sh                  # 3 reps, 1,000,000 records, both formats
#   REPS=5 FORMATS=avro benches/run-serde-comparison.sh
#   SMOKE=1 benches/run-serde-comparison.sh          # 20,000 records, 1 rep: checks it runs
#
# The schema (a Ride: long id, optional string zone, double fare, enum kind, timestamp-millis at,
# a string note of 31 characters, an array of 2 doubles; the Protobuf message the same with
# int64, string, double, enum, int64, string, repeated double) is in serde_bench.rs and
# SerdeBench.java, the same text in both; record i's values are computed the same way in both,
# and each encode phase prints an FNV-1a of the payloads after the framing ("check"): the table
# says whether both wrote the same bytes.
#
# Environment:
#   REPS           repetitions (default 3; SMOKE: 1). Each rep runs both formats, each format
#                  both implementations, alternating: onceflow first on odd reps, Java on even.
#   COUNT          records per run (default 1000000; SMOKE: 20000)
#   WARMUP         records of the untimed first pass (default 200000; SMOKE: 2000)
#   FORMATS        "avro protobuf" (default)
#   REGISTRY_URL   a running registry's Confluent-compatible base URL: used as it is. Unset:
#                  protocol-tests/schema-registry.sh start with REGISTRY_PORT (default 19790)
#                  and REGISTRY_DIR (default target/schema-registry-$REGISTRY_PORT), stopped at
#                  the end if this script started it
#   JAVA_OPTS      the JVM's options (default "-Xms2g -Xmx2g": the default collector, G1; the
#                  1M values and their encodings stay in memory)
#   SKIP_BUILD=1   use PERF_BIN as it is (default: cargo build --release -p onceflow-perf, into
#                  $CARGO_TARGET_DIR or target/); the Java peer is built by avro-interop.sh when
#                  its sources are newer than its jar
#   PERF_BIN       the onceflow-perf to run (default $CARGO_TARGET_DIR/release/onceflow-perf)
#   OUT_DIR        where results.jsonl and the runs' stderr go (default
#                  target/serde-comparison/<time>)
#
# Output: each run's JSON lines as they come, then Markdown tables: per format and phase the
# median and (min-max) of records/s and CPU ns per record (process; thread), the same-rep ratios
# onceflow/Java, and onceflow's plain-JSON phases. Needs python3 (the summary) and curl.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
log() { printf 'run-serde-comparison: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

SMOKE=${SMOKE:-0}
if [ "$SMOKE" = 1 ]; then REPS=${REPS:-1}; COUNT=${COUNT:-20000}; WARMUP=${WARMUP:-2000}; fi
REPS=${REPS:-3}
COUNT=${COUNT:-1000000}
WARMUP=${WARMUP:-200000}
FORMATS=${FORMATS:-avro protobuf}
JAVA_OPTS=${JAVA_OPTS:--Xms2g -Xmx2g}
OUT_DIR=${OUT_DIR:-$repo/target/serde-comparison/$(date +%Y%m%d-%H%M%S)}
target_dir=${CARGO_TARGET_DIR:-$repo/target}
PERF_BIN=${PERF_BIN:-$target_dir/release/onceflow-perf}
for f in $FORMATS; do case $f in avro|protobuf) ;; *) die "FORMATS: $f: expected avro or protobuf" ;; esac; done
command -v python3 >/dev/null || die "python3 not found (it prints the summary)"
command -v curl >/dev/null || die "curl not found"
mkdir -p "$OUT_DIR"
results=$OUT_DIR/results.jsonl
: >"$results"

# The registry.
export REGISTRY_PORT=${REGISTRY_PORT:-19790}
export REGISTRY_DIR=${REGISTRY_DIR:-$repo/target/schema-registry-$REGISTRY_PORT}
started_registry=0
if [ -z "${REGISTRY_URL:-}" ]; then
  REGISTRY_URL=http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7
  if ! curl -sf -o /dev/null --max-time 5 "$REGISTRY_URL/subjects"; then
    log "starting the registry on port $REGISTRY_PORT"
    REGISTRY_URL=$(protocol-tests/schema-registry.sh start | tail -1)
    started_registry=1
  fi
fi
stop_registry() {
  if [ "$started_registry" = 1 ]; then protocol-tests/schema-registry.sh stop || true; fi
}
trap stop_registry EXIT

# The two benches.
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  log "building onceflow-perf (release)"
  cargo build --release -p onceflow-perf >"$OUT_DIR/cargo-build.log" 2>&1 \
    || { tail -30 "$OUT_DIR/cargo-build.log" >&2; die "cargo build failed (see $OUT_DIR/cargo-build.log)"; }
fi
[ -x "$PERF_BIN" ] || die "no onceflow-perf at $PERF_BIN"
protocol-tests/java-avro/avro-interop.sh build >/dev/null

run() { # IMPL FORMAT REP
  local impl=$1 format=$2 rep=$3 err=$OUT_DIR/$1-$2-rep$3.err out
  if [ "$impl" = onceflow ]; then
    out=$("$PERF_BIN" serde --registry "$REGISTRY_URL" --format "$format" --count "$COUNT" \
      --warmup "$WARMUP" 2>"$err") || { cat "$err" >&2; die "onceflow-perf serde --format $format failed"; }
  else
    out=$(AVRO_INTEROP_JAVA_OPTS=$JAVA_OPTS protocol-tests/java-avro/avro-interop.sh bench \
      --registry "$REGISTRY_URL" --format "$format" --count "$COUNT" --warmup "$WARMUP" 2>"$err") \
      || { cat "$err" >&2; die "avro-interop.sh bench --format $format failed"; }
  fi
  printf '%s\n' "$out" >&2
  printf '%s\n' "$out" | sed "s/^{/{\"rep\":$rep,/" >>"$results"
}

log "REPS=$REPS COUNT=$COUNT WARMUP=$WARMUP FORMATS='$FORMATS' registry $REGISTRY_URL; results in $results"
for rep in $(seq 1 "$REPS"); do
  for format in $FORMATS; do
    if [ $((rep % 2)) = 1 ]; then order="onceflow java"; else order="java onceflow"; fi
    for impl in $order; do
      log "rep $rep/$REPS: $impl $format"
      run "$impl" "$format" "$rep"
    done
  done
done

python3 - "$results" <<'EOF'
import json, statistics, sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = defaultdict(list)          # (format, phase, impl) -> rows
for r in rows:
    by[(r["format"], r["phase"], r["impl"])].append(r)
formats = [f for f in ("avro", "protobuf") if any(k[0] == f for k in by)]

def med(xs):
    return statistics.median(xs)

def spread(xs, fmt):
    return f"{fmt(med(xs))} ({fmt(min(xs))}–{fmt(max(xs))})"

rate = lambda x: f"{x:,.0f}"
ns = lambda x: f"{x:,.0f}"
ratio = lambda x: f"{x:.2f}"

print()
print("| format | phase | serde | records/s | CPU ns per record (process) | CPU ns per record (thread) |")
print("|---|---|---|---|---|---|")
for f in formats:
    for phase in ("encode", "decode"):
        for impl in ("onceflow", "java"):
            rs = by.get((f, phase, impl))
            if not rs:
                continue
            print(f"| {f} | {phase} | {impl} | {spread([r['records_per_sec'] for r in rs], rate)} | "
                  f"{spread([r['cpu_ns_per_record'] for r in rs], ns)} | "
                  f"{spread([r['thread_cpu_ns_per_record'] for r in rs], ns)} |")

print()
print("Same-rep ratios, onceflow / Java (records/s: median (min–max) of the per-rep ratios; CPU: "
      "the same for CPU ns per record, process):")
print()
print("| format | phase | records/s | CPU per record |")
print("|---|---|---|---|")
for f in formats:
    for phase in ("encode", "decode"):
        o = {r["rep"]: r for r in by.get((f, phase, "onceflow"), [])}
        j = {r["rep"]: r for r in by.get((f, phase, "java"), [])}
        reps = sorted(set(o) & set(j))
        if not reps:
            continue
        rr = [o[k]["records_per_sec"] / j[k]["records_per_sec"] for k in reps]
        cr = [o[k]["cpu_ns_per_record"] / j[k]["cpu_ns_per_record"] for k in reps]
        print(f"| {f} | {phase} | {spread(rr, ratio)} | {spread(cr, ratio)} |")

json_phases = [(f, p) for f in formats for p in ("decode_plain_json", "encode_json")
               if by.get((f, p, "onceflow"))]
if json_phases:
    print()
    print("onceflow's plain-JSON paths (the engine's):")
    print()
    print("| format | phase | records/s | CPU ns per record (process) |")
    print("|---|---|---|---|")
    for f, p in json_phases:
        rs = by[(f, p, "onceflow")]
        print(f"| {f} | {p} | {spread([r['records_per_sec'] for r in rs], rate)} | "
              f"{spread([r['cpu_ns_per_record'] for r in rs], ns)} |")

print()
for f in formats:
    checks = {impl: {r["check"] for r in by.get((f, "encode", impl), [])} for impl in ("onceflow", "java")}
    sizes = {impl: sorted({r["bytes_per_record"] for r in by.get((f, "encode", impl), [])})
             for impl in ("onceflow", "java")}
    same = checks["onceflow"] and checks["onceflow"] == checks["java"]
    print(f"{f}: payload bytes {'identical' if same else 'DIFFERENT'} (FNV-1a after the framing: "
          f"onceflow {sorted(checks['onceflow'])}, Java {sorted(checks['java'])}); "
          f"framed bytes per record: onceflow {sizes['onceflow']}, Java {sizes['java']}")
    w = {impl: by.get((f, "warmup_encode", impl), []) for impl in ("onceflow", "java")}
    if w["java"]:
        print(f"{f}: warm-up pass ({w['java'][0]['records']:,} records), Java encode "
              f"{med([r['records_per_sec'] for r in w['java']]):,.0f} records/s, decode "
              f"{med([r['records_per_sec'] for r in by.get((f, 'warmup_decode', 'java'), [])]):,.0f}")
EOF
log "results: $results"
