#!/usr/bin/env bash
# Producer throughput: onceflow (benches/perf, onceflow-perf produce) against the official Java
# client (Kafka's ProducerPerformance via benches/java-peer/producer-perf.sh), same broker, same
# session, same settings, runs alternating between the two clients.
#
#   benches/run-producer-comparison.sh              # full run (5 reps; ~15-20 min on 2 cores)
#   REPS=3 benches/run-producer-comparison.sh
#   SMOKE=1 benches/run-producer-comparison.sh      # CI: tiny N, 1 rep, < 1 min (checks that
#                                                   # everything runs; its numbers mean nothing:
#                                                   # 20,000 records is mostly JVM warm-up)
#   IDEMPOTENCE=true benches/run-producer-comparison.sh
#
# Settings (both clients): acks=all, linger.ms=5, batch.size=16384, compression.type=none,
# enable.idempotence=$IDEMPOTENCE (default false: onceflow does not implement idempotence yet, so
# the Java client's default of true is overridden to match), 1 partition, a fresh topic per run
# (created before and deleted after each run, outside the measured process), unthrottled.
#
# Environment:
#   REPS           repetitions per client and record size (default 5; SMOKE: 1)
#   N_100          records per run at 100 B (default 1000000; SMOKE: 20000)
#   N_1K           records per run at 1 KiB (default 300000; SMOKE: 20000)
#   SIZES          record sizes in bytes (default "100 1024")
#   IDEMPOTENCE    true|false (default false)
#   PAYLOAD        random (default): every record gets a freshly generated random value, which
#                  is what ProducerPerformance --record-size does on its sending thread (and
#                  onceflow-perf --payload random mirrors); fixed: one value for all records
#                  (ProducerPerformance --payload-file with a single line; onceflow-perf
#                  --payload fixed), so the figures are closer to the client's own cost
#   ACKS LINGER_MS BATCH_SIZE COMPRESSION PARTITIONS   (defaults all, 5, 16384, none, 1)
#   BOOTSTRAP      (default 127.0.0.1:9092)
#   LOG_DIR        the broker's log.dirs, to count the batches each client formed
#                  (default target/kafka-9092/data; skipped if absent)
#   OUT_DIR        where per-run logs and results.tsv go (default target/perf-comparison/<time>)
#   SETTLE_SECS    pause between runs (default 2; SMOKE: 0)
#   SKIP_BUILD=1   use the existing benches/perf/target/release/onceflow-perf
#   CALIBRATE=0    skip the 1000-record start-up cost run of each client
#
# Output: per-run lines as it goes, then a Markdown table with the median and min-max of
# records/s, MB/s (2^20 bytes of record values per second) and client CPU seconds per million
# records (user+sys of the client process, start-up included, measured the same way for both:
# bash `times` around the process), and the onceflow/Java ratios. results.tsv keeps every run.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# run_measured (CPU time of a child process via bash `times`), shared with the Java peer.
tool=run-producer-comparison
# shellcheck source=java-peer/common.sh
. "$repo/benches/java-peer/common.sh"

SMOKE=${SMOKE:-0}
if [ "$SMOKE" = 1 ]; then
  REPS=${REPS:-1}; N_100=${N_100:-20000}; N_1K=${N_1K:-20000}; SETTLE_SECS=${SETTLE_SECS:-0}
  CALIBRATE=${CALIBRATE:-0}
fi
REPS=${REPS:-5}
N_100=${N_100:-1000000}
N_1K=${N_1K:-300000}
SIZES=${SIZES:-100 1024}
IDEMPOTENCE=${IDEMPOTENCE:-false}
PAYLOAD=${PAYLOAD:-random}
ACKS=${ACKS:-all}
LINGER_MS=${LINGER_MS:-5}
BATCH_SIZE=${BATCH_SIZE:-16384}
COMPRESSION=${COMPRESSION:-none}
PARTITIONS=${PARTITIONS:-1}
BOOTSTRAP=${BOOTSTRAP:-127.0.0.1:9092}
LOG_DIR=${LOG_DIR:-$repo/target/kafka-9092/data}
SETTLE_SECS=${SETTLE_SECS:-2}
CALIBRATE=${CALIBRATE:-1}
OUT_DIR=${OUT_DIR:-$repo/target/perf-comparison/$(date +%Y%m%d-%H%M%S)}
case $IDEMPOTENCE in true|false) ;; *) die "IDEMPOTENCE must be true or false" ;; esac
case $PAYLOAD in random|fixed) ;; *) die "PAYLOAD must be random or fixed" ;; esac

perf=$repo/benches/perf/target/release/onceflow-perf
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  echo "building onceflow-perf (release)..." >&2
  cargo build --release --quiet --manifest-path "$repo/benches/perf/Cargo.toml"
  # Which onceflow source the binary holds (other people edit src/ while benchmarks run).
  { echo "onceflow commit at build: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "uncommitted changes under src/ or Cargo.toml at build: $(git -C "$repo" status --porcelain -- src Cargo.toml 2>/dev/null | wc -l) file(s)"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; } >"$perf.build-info"
fi
[ -x "$perf" ] || die "no $perf (build it: cargo build --release --manifest-path benches/perf/Cargo.toml)"
"$repo/protocol-tests/kafka-broker.sh" start >/dev/null
jars_dir >/dev/null # resolve the Java classpath now, not inside the first measured run

props=(acks="$ACKS" linger.ms="$LINGER_MS" batch.size="$BATCH_SIZE" compression.type="$COMPRESSION"
       enable.idempotence="$IDEMPOTENCE")
xprops=()
for p in "${props[@]}"; do xprops+=(-X "$p"); done

mkdir -p "$OUT_DIR"
results=$OUT_DIR/results.tsv
# What was measured: the onceflow commit (and whether src/ had uncommitted changes when
# onceflow-perf was built), the machine, the toolchains.
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "onceflow commit now: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "uncommitted changes under src/ or Cargo.toml now: $(git -C "$repo" status --porcelain -- src Cargo.toml 2>/dev/null | wc -l) file(s)"
  if [ -f "$perf.build-info" ]; then cat "$perf.build-info"; else echo "build info: none (built outside this script)"; fi
  echo "onceflow-perf binary mtime: $(date -u -r "$perf" +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) online CPU(s) shared with the broker"
  echo "kernel: $(uname -r)"
  echo "rustc: $(rustc --version 2>/dev/null || echo unknown)"
  echo "java: $(java -version 2>&1 | head -1)"
  echo "kafka: $KAFKA_VERSION (broker and Java client)"
  echo "settings: ${props[*]} payload=$PAYLOAD partitions=$PARTITIONS reps=$REPS n_100=$N_100 n_1k=$N_1K"
} >"$OUT_DIR/meta.txt"
sed 's/^/# /' "$OUT_DIR/meta.txt" >&2
printf 'client\tsize\trep\trecords\trecords_per_sec\tmb_per_sec\tcpu_seconds\tcpu_self_reported\tbatches\tavg_records_per_batch\tavg_batch_bytes\tloadavg\n' >"$results"

n_for() { if [ "$1" -le 512 ]; then echo "$N_100"; else echo "$N_1K"; fi; }

# run_one CLIENT SIZE N REP: one measured run on a fresh topic; appends a line to results.tsv.
run_one() {
  local client=$1 size=$2 n=$3 rep=$4
  local topic=perf-cmp-$client-$size-$rep-$$-$RANDOM
  local log=$OUT_DIR/$client-$size-$rep.log
  "$perf" create-topic --bootstrap "$BOOTSTRAP" --topic "$topic" --partitions "$PARTITIONS" >>"$log" 2>&1 \
    || die "could not create topic $topic (see $log)"
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local line self_cpu=""
  case $client in
    onceflow)
      run_measured "$log.run" "$perf" produce --bootstrap "$BOOTSTRAP" --topic "$topic" \
        --num-records "$n" --record-size "$size" --payload "$PAYLOAD" "${xprops[@]}" >/dev/null
      cat "$log.run" >>"$log"; rm -f "$log.run"
      [ "$RC" -eq 0 ] || die "onceflow-perf produce failed with status $RC (see $log)"
      line=$(grep '^onceflow records=' "$log" | tail -1)
      self_cpu=$(sed -E 's/.* cpu_seconds=([0-9.]+).*/\1/' <<<"$line")
      # Same CPU measurement as the Java peer: `times` around the process.
      line="${line% cpu_seconds=*} cpu_seconds=$CPU_SECONDS"
      ;;
    java)
      local payload_args=(--record-size "$size")
      if [ "$PAYLOAD" = fixed ]; then
        # One line of $size letters, no trailing newline: every record gets exactly that value.
        local pf=$OUT_DIR/payload-$size.txt
        [ -f "$pf" ] || head -c "$size" /dev/zero | tr '\0' 'A' >"$pf"
        payload_args=(--payload-file "$pf")
      fi
      benches/java-peer/producer-perf.sh --topic "$topic" --num-records "$n" "${payload_args[@]}" \
        --throughput -1 --producer-props bootstrap.servers="$BOOTSTRAP" "${props[@]}" >>"$log" 2>&1 \
        || die "Java ProducerPerformance failed (see $log)"
      line=$(grep '^java-peer records=' "$log" | tail -1)
      ;;
  esac
  [ -n "$line" ] || die "no result line in $log"
  local batches="" avg_recs="" avg_bytes=""
  if [ -d "$LOG_DIR" ]; then
    local stats
    if stats=$("$perf" log-stats --log-dir "$LOG_DIR" --topic "$topic" 2>>"$log"); then
      echo "$stats" >>"$log"
      batches=$(sed -E 's/.* batches=([0-9]+).*/\1/' <<<"$stats")
      avg_recs=$(sed -E 's/.* avg_records_per_batch=([0-9.]+).*/\1/' <<<"$stats")
      avg_bytes=$(sed -E 's/.* avg_batch_bytes=([0-9.]+).*/\1/' <<<"$stats")
    fi
  fi
  "$perf" delete-topic --bootstrap "$BOOTSTRAP" --topic "$topic" >>"$log" 2>&1 \
    || echo "warning: could not delete topic $topic" >&2
  local records rps mbps cpu
  records=$(sed -E 's/.* records=([0-9]+) .*/\1/' <<<"$line")
  rps=$(sed -E 's/.* records_per_sec=([0-9.]+) .*/\1/' <<<"$line")
  mbps=$(sed -E 's/.* mb_per_sec=([0-9.]+) .*/\1/' <<<"$line")
  cpu=$(sed -E 's/.* cpu_seconds=([0-9.]+).*/\1/' <<<"$line")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$client" "$size" "$rep" "$records" "$rps" "$mbps" \
    "$cpu" "$self_cpu" "$batches" "$avg_recs" "$avg_bytes" "$load" >>"$results"
  printf '%-8s size=%-5s rep=%s records=%s records/s=%s MB/s=%s cpu_s=%s batches=%s avg_batch_bytes=%s load=%s\n' \
    "$client" "$size" "$rep" "$records" "$rps" "$mbps" "$cpu" "${batches:--}" "${avg_bytes:--}" "$load" >&2
  if [ "$SETTLE_SECS" != 0 ]; then sleep "$SETTLE_SECS"; fi
}

echo "settings: ${props[*]} payload=$PAYLOAD partitions=$PARTITIONS reps=$REPS sizes=[$SIZES] n_100=$N_100 n_1k=$N_1K" >&2
echo "logs and results.tsv: $OUT_DIR" >&2
started=$(date +%s)

if [ "$CALIBRATE" = 1 ]; then
  # Fixed cost (process start, connection, JVM start-up and JIT) with 1000 records: the CPU
  # figures below include it once per run.
  for c in onceflow java; do run_one "$c" 100 1000 calib; done
fi
for rep in $(seq 1 "$REPS"); do
  for size in $SIZES; do
    n=$(n_for "$size")
    # Alternate which client goes first, so drift (page cache, broker JIT, log cleanup,
    # other load) does not favour one of them.
    if [ $((rep % 2)) -eq 1 ]; then order="onceflow java"; else order="java onceflow"; fi
    for c in $order; do run_one "$c" "$size" "$n" "$rep"; done
  done
done

echo >&2
echo "elapsed: $(( $(date +%s) - started )) s" >&2
echo
echo "Producer comparison, ${props[*]}, payload=$PAYLOAD, partitions=$PARTITIONS, $REPS rep(s); median (min-max)"
echo
awk -F'\t' -v reps="$REPS" '
  function sort(a, n,   i, j, t) { for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t } }
  function median(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  function stat(key, col, fmt,   a, n, i) {
    n = cnt[key]; if (n == 0) return "-"
    for (i = 1; i <= n; i++) a[i] = val[key, col, i]
    sort(a, n)
    med[key, col] = median(a, n)
    return sprintf(fmt " (" fmt "-" fmt ")", median(a, n), a[1], a[n])
  }
  NR == 1 { next }
  $3 == "calib" { calib[$1] = $7; next }
  {
    key = $1 SUBSEP $2; i = ++cnt[key]
    if (!($2 in seen)) { seen[$2] = 1; sizes[++ns] = $2 }
    val[key, "rps", i] = $5; val[key, "mbps", i] = $6
    val[key, "cpum", i] = $7 * 1e6 / $4
    val[key, "batch", i] = $11; val[key, "rpb", i] = $10
    rps_of[$1, $2, $3] = $5
  }
  END {
    print "| record size | client | records/s | MB/s | client CPU s per 1M records | avg batch bytes | records/batch |"
    print "|---|---|---|---|---|---|---|"
    for (s = 1; s <= ns; s++) {
      size = sizes[s]
      for (c = 1; c <= 2; c++) {
        client = c == 1 ? "onceflow" : "java"
        key = client SUBSEP size
        r = stat(key, "rps", "%.0f"); m = stat(key, "mbps", "%.1f"); u = stat(key, "cpum", "%.2f")
        b = cnt[key] && val[key, "batch", 1] != "" ? stat(key, "batch", "%.0f") : "-"
        p = cnt[key] && val[key, "rpb", 1] != "" ? stat(key, "rpb", "%.1f") : "-"
        printf "| %s B | %s | %s | %s | %s | %s | %s |\n", size, client, r, m, u, b, p
      }
    }
    print ""
    print "| record size | onceflow/Java records/s, ratio of medians | same-rep ratios, median (min-max) | onceflow/Java CPU per record |"
    print "|---|---|---|---|"
    for (s = 1; s <= ns; s++) {
      size = sizes[s]; o = "onceflow" SUBSEP size; j = "java" SUBSEP size
      if (!(med[j, "rps"] > 0 && med[j, "cpum"] > 0)) continue
      # Runs of the same rep ran back to back, so their ratio cancels slow drift in load.
      n = 0; delete pr
      for (r = 1; r <= reps; r++)
        if (("onceflow", size, r) in rps_of && ("java", size, r) in rps_of && rps_of["java", size, r] > 0)
          pr[++n] = rps_of["onceflow", size, r] / rps_of["java", size, r]
      paired = "-"
      if (n > 0) { sort(pr, n); paired = sprintf("%.2f (%.2f-%.2f)", median(pr, n), pr[1], pr[n]) }
      printf "| %s B | %.2f | %s | %.2f |\n", size, med[o, "rps"] / med[j, "rps"], paired, med[o, "cpum"] / med[j, "cpum"]
    }
    if (("onceflow" in calib) || ("java" in calib)) {
      print ""
      printf "Fixed start-up CPU (a 1000-record run): onceflow %s s, Java %s s; included once in every run above.\n", calib["onceflow"], calib["java"]
    }
  }' "$results"
echo
echo "(every run: $results)"
if [ "$SMOKE" = 1 ]; then echo "(SMOKE=1: a functional check only; these numbers are not a measurement)"; fi
