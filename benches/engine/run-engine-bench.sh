#!/usr/bin/env bash
# Engine benchmarks: `onceflow run` (release binary) on the shipped taxi jobs against a real
# broker, side by side with peer engines (Kafka Streams, Flink) running the same jobs. The
# measuring is done by engine_bench.py (next to this script; Python 3.8+, no packages); this
# wrapper builds the binary and checks the broker answers (the driver builds the peers).
#
#   benches/engine/run-engine-bench.sh                          # everything, 3 reps (~25 min on a loaded 2-core machine)
#   BOOTSTRAP=127.0.0.1:9192 SECTIONS="throughput" REPS=5 benches/engine/run-engine-bench.sh
#   SMOKE=1 benches/engine/run-engine-bench.sh                  # CI: tiny inputs, 1 rep, onceflow only, < 1 min
#   ENGINES="onceflow kstreams" SECTIONS="throughput recovery" REPS=1 benches/engine/run-engine-bench.sh
#
# Engines (ENGINES, default "onceflow kstreams flink" [onceflow]): "onceflow" runs `onceflow run
# JOB.toml`; any other E runs benches/engine-peers/E/run.sh (skipped with a message when it is
# missing), built once at the start by its build.sh (SKIP_PEER_BUILD=1 skips that). A peer gets
# BOOTSTRAP, JOB (cleansing | per-driver-hourly), INPUT, OUTPUT, INTERVAL_MS (its commit or
# checkpoint interval), GUARANTEE (exactly-once | at-least-once), STATE_DIR (fresh per run,
# kept across the recovery kill) and NAME (unique per run; its internal topics start with it
# and are deleted after the run); run.sh execs the engine's process (its PID is measured from
# /proc and SIGKILLed) and prints `peer: started` to stderr once it runs. Peers run at
# PEER_GUARANTEES (default "exactly-once"), onceflow at GUARANTEES; within each rep the engines
# alternate (ENGINES order on odd reps, reversed on even ones). Every section but memory runs
# every engine; the tables get an engine column and a onceflow / peer table (same rep, job and
# interval, exactly-once). Output topics are created with message.timestamp.type=LogAppendTime
# (the recovery section tells post-kill records by their timestamp; peers may write input or
# event-time timestamps).
#
# Sections (SECTIONS, default "throughput latency recovery memory"):
#   throughput  jobs (a) cleansing and (b) per-driver-hourly over TP_RIDES pre-produced rides
#               (2 events each), checkpoint intervals INTERVALS, exactly-once and at-least-once
#               alternating within each rep: time from the job's start to the last expected
#               output record visible to a read_committed reader; input events/s; the job's
#               CPU (user+sys, /proc) per 1M input events and peak RSS (VmHWM).
#   latency     rides produced at LAT_RATE events/s for LAT_SECS s while the job runs;
#               `onceflow taxi latency` prints p50/p99/max of (output visible read_committed −
#               the causing input's append time).
#   recovery    SIGKILL once some output is committed, restart on the same state: time from the
#               kill to the first record committed after it (read_committed tail from the end);
#               then the run completes and `taxi verify` must find every record exactly once.
#   memory      job (b) over MEM_RIDES rides by MEM_DRIVERS drivers (most keys hold an open
#               window) with each MEM_BUDGETS "CACHE:MEMTABLE" (state.cache.bytes and
#               state.memtable.bytes in the job file; "default" = fjall's 32 MiB / 64 MiB):
#               peak RSS against the state directory's size on disk.
# Every run ends with `onceflow taxi verify` (must be OK) on a fresh output topic and state dir.
#
# Environment (SMOKE defaults in brackets): BOOTSTRAP (127.0.0.1:9092), REPS (3 [1]),
# JOBS ("cleansing per-driver-hourly"; "per-driver-hourly-avro" is job (b) over Avro through
# the schema registry at REGISTRY (http://127.0.0.1:8081/apis/ccompat/v7), onceflow only), INTERVALS ("100 1000" [100]), GUARANTEES
# ("exactly-once at-least-once"), PARTITIONS of every topic (1), TP_RIDES (250000 [5000]), LAT_RATE (5000
# [4000]), LAT_SECS (20 [2]), EVENT_RATE (1 ride per second of event time), REC_RIDES
# (300000 [200000]), MEM_RIDES (300000 [20000]), MEM_DRIVERS (200000 [20000]), MEM_EVENT_RATE
# (75 [5]), MEM_BUDGETS ("8388608:8388608 default" [2097152:2097152]), RUN_TIMEOUT_SECS,
# OUT_DIR (target/engine-bench/<time>: meta.txt, results.tsv (JSON lines), logs/, jobs/),
# BIN (target/release/onceflow), SKIP_BUILD=1, KEEP_TOPICS=1, ENGINES, PEER_GUARANTEES,
# SKIP_PEER_BUILD=1.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
export BIN=${BIN:-$repo/target/release/onceflow}
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  echo "building onceflow (release)..." >&2
  cargo build --release --quiet --bin onceflow
fi
[ -x "$BIN" ] || { echo "run-engine-bench: no $BIN (cargo build --release)" >&2; exit 1; }
bootstrap=${BOOTSTRAP:-127.0.0.1:9092}
if ! "$BIN" topics list -b "$bootstrap" -X default.api.timeout.ms=10000 >/dev/null 2>&1; then
  echo "run-engine-bench: no broker answers at $bootstrap: start one (protocol-tests/kafka-broker.sh start) or set BOOTSTRAP" >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "run-engine-bench: needs python3 (3.8+; no packages)" >&2; exit 1; }
exec python3 "$repo/benches/engine/engine_bench.py"
