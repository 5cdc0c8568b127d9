#!/usr/bin/env bash
# Engine benchmarks: `onceflow run` (release binary) on the shipped taxi jobs against a real
# broker. The measuring is done by engine_bench.py (next to this script; Python 3.8+, no
# packages); this wrapper builds the binary and checks the broker answers.
#
#   benches/engine/run-engine-bench.sh                          # everything, 3 reps (~25 min on a loaded 2-core machine)
#   BOOTSTRAP=127.0.0.1:9192 SECTIONS="throughput" REPS=5 benches/engine/run-engine-bench.sh
#   SMOKE=1 benches/engine/run-engine-bench.sh                  # CI: tiny inputs, 1 rep, < 1 min
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
# JOBS ("cleansing per-driver-hourly"), INTERVALS ("100 1000" [100]), GUARANTEES
# ("exactly-once at-least-once"), PARTITIONS of every topic (1), TP_RIDES (250000 [5000]), LAT_RATE (5000
# [4000]), LAT_SECS (20 [2]), EVENT_RATE (1 ride per second of event time), REC_RIDES
# (300000 [60000]), MEM_RIDES (300000 [20000]), MEM_DRIVERS (200000 [20000]), MEM_EVENT_RATE
# (75 [5]), MEM_BUDGETS ("8388608:8388608 default" [2097152:2097152]), RUN_TIMEOUT_SECS,
# OUT_DIR (target/engine-bench/<time>: meta.txt, results.tsv (JSON lines), logs/, jobs/),
# BIN (target/release/onceflow), SKIP_BUILD=1, KEEP_TOPICS=1.
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
