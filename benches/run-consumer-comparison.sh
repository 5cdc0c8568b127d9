#!/usr/bin/env bash
# Consumer throughput: onceflow (benches/perf, onceflow-perf consume) against the official Java
# client (Kafka's ConsumerPerformance via benches/java-peer/consumer-perf.sh), franz-go v1.22.3
# (benches/franz-go-peer, franz-go-peer consume) and librdkafka (Debian's librdkafka-dev, 2.0.2 on
# Debian 12; benches/librdkafka-peer, rdkafka-perf consume), read_uncommitted and read_committed,
# on the same pre-filled topic, same broker, same session. The peers are built by this script
# unless SKIP_BUILD=1 (franz needs Go; rdkafka a C compiler, make and librdkafka-dev; the script
# stops with a one-line message saying what to install).
#
#   benches/run-consumer-comparison.sh              # full run (3 reps, ~8-10 min on 2 cores)
#   REPS=5 benches/run-consumer-comparison.sh
#   SMOKE=1 benches/run-consumer-comparison.sh      # CI: tiny N, 1 rep, < 1 min (checks that
#                                                   # everything runs; the numbers mean nothing)
#
# For every case (partitions, record size, N) the script creates one topic and fills it ONCE,
# outside any measured run, with N unkeyed records written TRANSACTIONALLY by onceflow-perf
# produce (transactions committed every TXN_MS ms, acks=all, linger.ms=5, batch.size=16384,
# no compression, random payload), so the log holds commit markers (control batches) that a
# read_committed consumer must skip. The fill must succeed completely (every record
# acknowledged, every transaction committed, N data records in the broker's log) or the script
# stops. Then, per repetition, the variants read all N records from the beginning of every
# partition of that same topic; the order rotates by one each repetition:
#
#   onceflow:ru   onceflow-perf consume -X isolation.level=read_uncommitted   (assign, no group)
#   onceflow:rc   onceflow-perf consume -X isolation.level=read_committed
#   franz:ru      franz-go-peer consume --isolation read_uncommitted   (a direct consumer, no
#                 group: AddConsumeTopics with ConsumeStartOffset/ConsumeResetOffset AtStart,
#                 FetchIsolationLevel)
#   franz:rc      the same with read_committed
#   rdkafka:ru    rdkafka-perf consume --isolation read_uncommitted   (rd_kafka_assign of every
#                 partition at RD_KAFKA_OFFSET_BEGINNING, no subscribe, so no group join; a
#                 unique group.id only because librdkafka's consumer wants one; no commits)
#   rdkafka:rc    the same with isolation.level=read_committed (librdkafka's default)
#   java:ru       ConsumerPerformance --consumer.config FILE (isolation.level=read_uncommitted),
#                 a fresh --group per run (ConsumerPerformance always subscribes with a group)
#   java:rc       the same with isolation.level=read_committed
#
# All count data records only (control batches are not records) and key+value bytes. Consumer
# settings are each client's defaults: Java and onceflow fetch.max.bytes 50 MiB,
# max.partition.fetch.bytes 1 MiB, fetch.min.bytes 1, fetch.max.wait.ms 500, max.poll.records
# 500 (ConsumerPerformance also sets receive.buffer.bytes=2 MiB, its --socket-buffer-size
# default); franz-go FetchMaxBytes 50 MiB, FetchMaxPartitionBytes 1 MiB, FetchMinBytes 1,
# FetchMaxWait 5 s (waits only when a partition has no data); librdkafka fetch.max.bytes 50 MiB,
# max.partition.fetch.bytes 1 MiB, fetch.min.bytes 1, fetch.wait.max.ms 500, and its
# pre-fetch queue (queued.min.messages 100000, queued.max.messages.kbytes 64 MiB).
#
# Environment:
#   REPS        repetitions (default 3; SMOKE: 1)
#   CASES       "PARTITIONS:SIZE:N ..." (default "1:100:2000000 1:1024:500000 4:100:2000000";
#               SMOKE: "1:100:20000 4:1024:5000")
#   VARIANTS    (default "onceflow:ru onceflow:rc franz:ru franz:rc rdkafka:ru rdkafka:rc java:ru
#               java:rc")
#   TXN_MS      transaction duration of the fill (default 100)
#   BOOTSTRAP   (default 127.0.0.1:9092; with TLS_CA: 127.0.0.1:$((KAFKA_PORT + 2)), the secured
#               broker's SSL listener)
#   TLS_CA      a PEM CA file: TLS mode. Every client (the fill and the topic admin included)
#               connects to BOOTSTRAP (then an SSL listener) with security.protocol=SSL, trusting
#               only that CA, the broker's host name verified against its certificate, no
#               client certificate:
#                 onceflow    -X security.protocol=SSL -X ssl.ca.location=$TLS_CA (on consume,
#                             the fill's produce, create-topic and delete-topic)
#                 Java        --consumer.config with security.protocol=SSL,
#                             ssl.truststore.type=PEM, ssl.truststore.location=$TLS_CA
#                 franz-go    --tls-ca $TLS_CA (DialTLSConfig: RootCAs from the file, TLS 1.2+,
#                             ServerName from the broker's host)
#                 librdkafka  --tls-ca $TLS_CA (security.protocol=ssl, ssl.ca.location,
#                             ssl.endpoint.identification.algorithm=https)
#               The broker must be the secured one of protocol-tests/kafka-broker.sh, started
#               first with the same KAFKA_SECURITY, KAFKA_PORT and KAFKA_DIR passed to this
#               script (its own `kafka-broker.sh start` then finds it running), e.g.
#                 export KAFKA_SECURITY=1 KAFKA_PORT=19750 KAFKA_DIR=/tmp/kbench-tls
#                 protocol-tests/kafka-broker.sh start
#                 TLS_CA=$KAFKA_DIR/certs/ca.pem benches/run-consumer-comparison.sh
#               (BOOTSTRAP and LOG_DIR then default to that broker's SSL listener and data).
#               Unset: plaintext, as before.
#   KAFKA_SECURITY KAFKA_PORT KAFKA_DIR   passed to protocol-tests/kafka-broker.sh start
#   LOG_DIR     the broker's log.dirs, to check the fill (default target/kafka-9092/data; with
#               TLS_CA: $KAFKA_DIR/data)
#   OUT_DIR     per-run logs, results.tsv, meta.txt (default target/consumer-comparison/<time>)
#   SETTLE_SECS pause between runs (default 2; SMOKE: 0)
#   SKIP_BUILD=1  use the existing target/release/onceflow-perf,
#               target/franz-go-peer/franz-go-peer and target/librdkafka-peer/rdkafka-perf
#   TIME_BIN    GNU time, for the peak RSS (default /usr/bin/time; apt-get install time)
#   CALIBRATE=0   skip the 1000-record start-up cost run of each client
#   KEEP_TOPICS=1 do not delete the filled topics at the end
#
# Output: per-run lines as it goes, then Markdown tables: median (min-max) of records/s, MB/s
# (2^20 bytes of keys+values per second), client CPU seconds per million records (user+sys
# of the whole client process, start-up included, bash `times` around it for every client,
# benches/java-peer/common.sh run_measured; for onceflow, franz-go and librdkafka that includes
# GNU time's own ~1 ms) and peak RSS in MiB; same-rep ratios read_committed/read_uncommitted per
# client and onceflow over each peer per isolation level. Rates: onceflow from assign (the
# topic's partition lookup, after the client is created and connected) to the poll that reaches
# N records; franz-go and librdkafka mirror that (client created and connected first, then the
# clock starts at AddConsumeTopics / the topic's metadata + rd_kafka_assign, and stops at the
# poll that reaches N); Java over the whole run including its group join ("nMsg.sec"), and also
# fetch-only (ConsumerPerformance's fetch.nMsg.sec, join excluded) in its own column.
#
# Peak RSS: GNU time's %M (`$TIME_BIN -f %M CMD`, wait4's ru_maxrss: the largest resident set
# high-water mark among CMD and its waited-for descendants), the same for all four: the native
# clients run under it directly; for Java it wraps benches/java-peer/consumer-perf.sh, whose
# largest process is the JVM (-Xmx512M). (Not a Python wrapper: ru_maxrss counts the memory of the
# process that exec'd the client, ~9 MiB for a Python interpreter; GNU time's is ~1 MiB.)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
tool=run-consumer-comparison
# shellcheck source=java-peer/common.sh
. "$repo/benches/java-peer/common.sh"

SMOKE=${SMOKE:-0}
if [ "$SMOKE" = 1 ]; then
  REPS=${REPS:-1}; CASES=${CASES:-1:100:20000 4:1024:5000}; SETTLE_SECS=${SETTLE_SECS:-0}
  CALIBRATE=${CALIBRATE:-0}
fi
REPS=${REPS:-3}
CASES=${CASES:-1:100:2000000 1:1024:500000 4:100:2000000}
VARIANTS=${VARIANTS:-onceflow:ru onceflow:rc franz:ru franz:rc rdkafka:ru rdkafka:rc java:ru java:rc}
TIME_BIN=${TIME_BIN:-/usr/bin/time}
TXN_MS=${TXN_MS:-100}
TLS_CA=${TLS_CA:-}
# BOOTSTRAP, LOG_DIR and each client's TLS arguments (broker_setup, java-peer/common.sh).
broker_setup
SETTLE_SECS=${SETTLE_SECS:-2}
CALIBRATE=${CALIBRATE:-1}
OUT_DIR=${OUT_DIR:-$repo/target/consumer-comparison/$(date +%Y%m%d-%H%M%S)}
read -r -a variants <<<"$VARIANTS"
for v in "${variants[@]}"; do
  case $v in onceflow:r[uc]|franz:r[uc]|rdkafka:r[uc]|java:r[uc]) ;; *) die "VARIANTS: $v: expected CLIENT:ru or CLIENT:rc, CLIENT onceflow, franz, rdkafka or java" ;; esac
done
read -r -a cases <<<"$CASES"
for c in "${cases[@]}"; do
  [[ $c =~ ^[0-9]+:[0-9]+:[0-9]+$ ]] || die "CASES: $c: expected PARTITIONS:SIZE:N"
done

# The peers, only if a variant uses them: built here (from the checkout) after onceflow-perf,
# or used as they are with SKIP_BUILD=1. Their prerequisites are checked first, so a missing one
# stops the script at once (one line saying what to install), not after the cargo build.
uses() { local x; for x in "${variants[@]}"; do [ "${x%%:*}" = "$1" ] && return 0; done; return 1; }
franz=$repo/target/franz-go-peer/franz-go-peer
rdkafka=$repo/target/librdkafka-peer/rdkafka-perf
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  if uses franz; then "$repo/benches/franz-go-peer/build.sh" --check || exit 1; fi
  if uses rdkafka; then "$repo/benches/librdkafka-peer/build.sh" --check || exit 1; fi
fi
"$TIME_BIN" -q -f %M -o /dev/null true 2>/dev/null \
  || die "no GNU time at $TIME_BIN (for the peak RSS column): apt-get install time"

# PERF_BIN: an onceflow-perf built elsewhere (CI builds it beside the static binary, sharing
# its compiled dependencies), used as it is.
perf=${PERF_BIN:-$repo/target/release/onceflow-perf}
if [ "${SKIP_BUILD:-0}" != 1 ] && [ -z "${PERF_BIN:-}" ]; then
  echo "building onceflow-perf (release)..." >&2
  cargo build --release --quiet --manifest-path "$repo/benches/perf/Cargo.toml"
  { echo "onceflow commit at build: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "uncommitted changes under src/ or Cargo.toml at build: $(git -C "$repo" status --porcelain -- src Cargo.toml 2>/dev/null | wc -l) file(s)"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; } >"$perf.build-info"
fi
[ -x "$perf" ] || die "no $perf (build it: cargo build --release --manifest-path benches/perf/Cargo.toml)"
if uses franz; then
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "building franz-go-peer..." >&2
    OUT=$franz "$repo/benches/franz-go-peer/build.sh" >/dev/null || die "could not build the franz-go peer"
  fi
  [ -x "$franz" ] || die "no $franz (build it: benches/franz-go-peer/build.sh)"
fi
if uses rdkafka; then
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "building rdkafka-perf..." >&2
    OUT=$rdkafka "$repo/benches/librdkafka-peer/build.sh" >/dev/null || die "could not build the librdkafka peer"
  fi
  [ -x "$rdkafka" ] || die "no $rdkafka (build it: benches/librdkafka-peer/build.sh)"
fi
"$repo/protocol-tests/kafka-broker.sh" start >/dev/null
if uses java; then jars_dir >/dev/null; fi # resolve the Java classpath now, not inside the first measured run

run_id=$(date +%s)-$$
mkdir -p "$OUT_DIR"
results=$OUT_DIR/results.tsv
for iso in read_uncommitted read_committed; do
  { printf 'isolation.level=%s\n' "$iso"
    if [ ${#java_tls[@]} -gt 0 ]; then printf '%s\n' "${java_tls[@]}"; fi; } >"$OUT_DIR/java-$iso.properties"
done
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "onceflow commit now: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "uncommitted changes under src/ or Cargo.toml now: $(git -C "$repo" status --porcelain -- src Cargo.toml 2>/dev/null | wc -l) file(s)"
  if [ -f "$perf.build-info" ]; then cat "$perf.build-info"; else echo "build info: none (built outside this script)"; fi
  echo "onceflow-perf binary mtime: $(date -u -r "$perf" +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) online CPU(s) shared with the broker"
  echo "kernel: $(uname -r)"
  if uses java; then echo "java: $(java -version 2>&1 | head -1)"; fi
  echo "kafka: $KAFKA_VERSION (broker and Java client)"
  if uses franz; then echo "franz-go peer: $(tr '\n' ' ' <"$franz.build-info" 2>/dev/null || echo "build info: none")"; fi
  if uses rdkafka; then echo "librdkafka peer: $(tr '\n' ' ' <"$rdkafka.build-info" 2>/dev/null || echo "build info: none")"; fi
  echo "settings: reps=$REPS cases=[$CASES] variants=[$VARIANTS] fill: transactional, ${TXN_MS} ms transactions"
  echo "bootstrap: $BOOTSTRAP"
  echo "tls: ${TLS_CA:-off}"
} >"$OUT_DIR/meta.txt"
sed 's/^/# /' "$OUT_DIR/meta.txt" >&2
printf 'case\tvariant\trep\trecords\trecords_per_sec\tmb_per_sec\tcpu_seconds\tfetch_records_per_sec\tfetch_mb_per_sec\tjoin_ms\tloadavg\tpeak_rss_mib\n' >"$results"

# fill CASE TOPIC: creates TOPIC and writes N records of SIZE bytes in transactions.
fill() {
  local parts=$1 size=$2 n=$3 topic=$4
  local log=$OUT_DIR/fill-$parts-$size.log
  "$perf" create-topic --bootstrap "$BOOTSTRAP" "${onceflow_tls[@]}" --topic "$topic" --partitions "$parts" >>"$log" 2>&1 \
    || die "could not create topic $topic (see $log)"
  echo "filling $topic: $parts partition(s), $n x $size B, transactions of $TXN_MS ms..." >&2
  "$perf" produce --bootstrap "$BOOTSTRAP" --topic "$topic" --num-records "$n" --record-size "$size" \
    -X acks=all -X linger.ms=5 -X batch.size=16384 -X compression.type=none \
    -X enable.idempotence=true -X transactional.id="perf-cons-fill-$run_id-$parts-$size" "${onceflow_tls[@]}" \
    --transaction-duration-ms "$TXN_MS" --report-interval-ms 60000 >>"$log" 2>&1 \
    || die "the transactional fill of $topic failed (see $log)"
  if [ -d "$LOG_DIR" ]; then
    local stats
    stats=$("$perf" log-stats --log-dir "$LOG_DIR" --topic "$topic" 2>>"$log") || die "log-stats failed (see $log)"
    echo "$stats" >>"$log"
    local recs; recs=$(sed -E 's/.* records=([0-9]+) .*/\1/' <<<"$stats")
    [ "$recs" = "$n" ] || die "the fill of $topic left $recs data records in the log, not $n (see $log)"
    echo "  $(grep '^onceflow-detail transactions=' "$log" | tail -1 | cut -d' ' -f2); $stats" >&2
  fi
}

# run_one CASE TOPIC VARIANT N REP: one measured read of N records; appends a line to results.tsv.
run_one() {
  local case=$1 topic=$2 variant=$3 n=$4 rep=$5
  local client=${variant%%:*} iso=read_uncommitted
  case $variant in *:rc) iso=read_committed ;; esac
  local log=$OUT_DIR/${case//:/-}-${variant/:/-}-$rep.log
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local line fetch_rps="" fetch_mbps="" join_ms="" rss_file=$log.rss
  # Peak RSS: GNU time around the client process (see the header).
  local rss=("$TIME_BIN" -q -f peak_rss_kib=%M -o "$rss_file")
  case $client in
    onceflow|franz|rdkafka)
      local cmd prefix
      case $client in
        onceflow) prefix=onceflow; cmd=("$perf" consume -X isolation.level="$iso" "${onceflow_tls[@]}") ;;
        franz) prefix="franz-go"; cmd=("$franz" consume --isolation "$iso" "${peer_tls[@]}") ;;
        rdkafka) prefix=librdkafka; cmd=("$rdkafka" consume --isolation "$iso" "${peer_tls[@]}") ;;
      esac
      run_measured "$log.run" "${rss[@]}" "${cmd[@]}" --bootstrap "$BOOTSTRAP" --topic "$topic" \
        --num-records "$n" >/dev/null
      cat "$log.run" >>"$log"; rm -f "$log.run"
      [ "$RC" -eq 0 ] || die "$client consume failed with status $RC (see $log)"
      line=$(grep "^$prefix records=" "$log" | tail -1)
      line="${line% cpu_seconds=*} cpu_seconds=$CPU_SECONDS"
      ;;
    java)
      "${rss[@]}" benches/java-peer/consumer-perf.sh --bootstrap-server "$BOOTSTRAP" --topic "$topic" \
        --messages "$n" --group "perf-cons-$run_id-$variant-$rep-$RANDOM" \
        --consumer.config "$OUT_DIR/java-$iso.properties" >>"$log" 2>&1 \
        || die "Java ConsumerPerformance failed (see $log)"
      line=$(grep '^java-peer records=' "$log" | tail -1)
      local detail; detail=$(grep '^java-peer-detail ' "$log" | tail -1)
      fetch_rps=$(sed -E 's/.* fetch_records_per_sec=([0-9.]+).*/\1/' <<<"$detail")
      fetch_mbps=$(sed -E 's/.* fetch_mb_per_sec=([0-9.]+).*/\1/' <<<"$detail")
      join_ms=$(sed -E 's/.* rebalance_ms=([0-9.]+).*/\1/' <<<"$detail")
      ;;
  esac
  [ -n "$line" ] || die "no result line in $log"
  local records rps mbps cpu
  records=$(sed -E 's/.* records=([0-9]+) .*/\1/' <<<"$line")
  rps=$(sed -E 's/.* records_per_sec=([0-9.]+) .*/\1/' <<<"$line")
  mbps=$(sed -E 's/.* mb_per_sec=([0-9.]+) .*/\1/' <<<"$line")
  cpu=$(sed -E 's/.* cpu_seconds=([0-9.]+).*/\1/' <<<"$line")
  [ "$records" -ge "$n" ] || die "$variant read $records of $n records (see $log)"
  local rss_mib=""
  rss_mib=$(sed -nE 's/^peak_rss_kib=([0-9]+)$/\1/p' "$rss_file" 2>/dev/null | awk '{ printf "%.1f", $1 / 1024 }')
  rm -f "$rss_file"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$case" "$variant" "$rep" "$records" "$rps" "$mbps" \
    "$cpu" "$fetch_rps" "$fetch_mbps" "$join_ms" "$load" "$rss_mib" >>"$results"
  printf '%-12s case=%-16s rep=%s records=%s records/s=%s MB/s=%s cpu_s=%s rss_mib=%s%s load=%s\n' "$variant" "$case" "$rep" \
    "$records" "$rps" "$mbps" "$cpu" "${rss_mib:--}" "${fetch_rps:+ fetch_records/s=$fetch_rps join_ms=$join_ms}" "$load" >&2
  if [ "$SETTLE_SECS" != 0 ]; then sleep "$SETTLE_SECS"; fi
}

echo "cases: $CASES; variants: $VARIANTS; reps: $REPS" >&2
echo "bootstrap: $BOOTSTRAP; tls: ${TLS_CA:-off}" >&2
echo "logs and results.tsv: $OUT_DIR" >&2
started=$(date +%s)
topics=()
cleanup() {
  [ "${KEEP_TOPICS:-0}" = 1 ] && return 0
  local t
  for t in "${topics[@]}"; do "$perf" delete-topic --bootstrap "$BOOTSTRAP" "${onceflow_tls[@]}" --topic "$t" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

for c in "${cases[@]}"; do
  IFS=: read -r parts size n <<<"$c"
  topic=perf-cons-p$parts-$size-$run_id
  topics+=("$topic")
  fill "$parts" "$size" "$n" "$topic"
  if [ "$CALIBRATE" = 1 ] && [ "$c" = "${cases[0]}" ]; then
    # Fixed cost (process start, metadata, JVM start-up and JIT; Java's group join) of reading
    # 1000 records, per client: the CPU figures below include it once per run.
    for cl in onceflow franz rdkafka java; do
      if uses "$cl"; then run_one "$c" "$topic" "$cl:ru" 1000 calib; fi
    done
  fi
  for rep in $(seq 1 "$REPS"); do
    k=${#variants[@]}
    for i in $(seq 0 $((k - 1))); do
      run_one "$c" "$topic" "${variants[$(( (i + rep - 1) % k ))]}" "$n" "$rep"
    done
  done
done

echo >&2
echo "elapsed: $(( $(date +%s) - started )) s" >&2
echo
echo "Consumer comparison on transactionally filled topics (${TXN_MS} ms transactions), $REPS rep(s); median (min-max)"
echo "TLS: ${TLS_CA:-off}"
echo
awk -F'\t' -v variants="$VARIANTS" '
  function sort(a, n,   i, j, t) { for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t } }
  function median(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  function stat(key, col, fmt,   a, n, i) {
    n = cnt[key]; if (n == 0 || val[key, col, 1] == "") return "-"
    for (i = 1; i <= n; i++) a[i] = val[key, col, i]
    sort(a, n)
    return sprintf(fmt " (" fmt "-" fmt ")", median(a, n), a[1], a[n])
  }
  function client(v) { sub(/^java/, "Java", v); sub(/^franz/, "franz-go", v); sub(/^rdkafka/, "librdkafka", v); return v }
  function label(v) { v = client(v); sub(/:ru$/, " read_uncommitted", v); sub(/:rc$/, " read_committed", v); return v }
  function casename(c,   p) { split(c, p, ":"); return p[1] " part., " p[2] " B, " p[3] }
  # same-rep ratio A/B of column col (rps: records/s; cpum: CPU per record; frps: Java fetch-only)
  function ratio(c, A, B, colA, colB,   r, n, x) {
    n = 0; delete x
    for (r = 1; r <= maxrep; r++)
      if ((c, A, r, colA) in v2 && (c, B, r, colB) in v2 && v2[c, B, r, colB] > 0) { ++n; x[n] = v2[c, A, r, colA] / v2[c, B, r, colB] }
    if (n == 0) return "-"
    sort(x, n)
    return sprintf("%.2f (%.2f-%.2f)", median(x, n), x[1], x[n])
  }
  BEGIN {
    nv = split(variants, vs, " ")
    # Clients present, in a fixed order.
    ncl = 0; split("onceflow franz rdkafka java", order, " ")
    for (j = 1; j <= 4; j++) for (k = 1; k <= nv; k++) if (index(vs[k], order[j] ":") == 1) { cls[++ncl] = order[j]; break }
  }
  NR == 1 { next }
  $3 == "calib" { calib[$2] = $7; next }
  {
    key = $1 SUBSEP $2; i = ++cnt[key]
    if (!($1 in seen)) { seen[$1] = 1; cs[++nc] = $1 }
    if ($3 > maxrep) maxrep = $3
    val[key, "rps", i] = $5; val[key, "mbps", i] = $6; val[key, "cpum", i] = $7 * 1e6 / $4
    val[key, "frps", i] = $8; val[key, "rss", i] = $12
    v2[$1, $2, $3, "rps"] = $5; v2[$1, $2, $3, "cpum"] = $7 * 1e6 / $4
    if ($8 != "") v2[$1, $2, $3, "frps"] = $8
  }
  END {
    print "| case (partitions, record size, N) | client, isolation | records/s | MB/s | client CPU s per 1M records | peak RSS MiB | Java fetch-only records/s (group join excluded) |"
    print "|---|---|---|---|---|---|---|"
    for (k = 1; k <= nc; k++)
      for (j = 1; j <= nv; j++) {
        key = cs[k] SUBSEP vs[j]; if (!cnt[key]) continue
        printf "| %s | %s | %s | %s | %s | %s | %s |\n", casename(cs[k]), label(vs[j]), stat(key, "rps", "%.0f"), stat(key, "mbps", "%.1f"), stat(key, "cpum", "%.2f"), stat(key, "rss", "%.0f"), stat(key, "frps", "%.0f")
      }
    print ""
    print "Same-rep ratios, median (min-max):"
    print ""
    print "| case | ratio | records/s | CPU per record |"
    print "|---|---|---|---|"
    for (k = 1; k <= nc; k++) {
      c = cs[k]
      for (j = 1; j <= ncl; j++) {
        cl = cls[j]
        printf "| %s | %s read_committed / read_uncommitted | **%s** | %s |\n", casename(c), client(cl), ratio(c, cl ":rc", cl ":ru", "rps", "rps"), ratio(c, cl ":rc", cl ":ru", "cpum", "cpum")
      }
      for (j = 1; j <= ncl; j++) {
        cl = cls[j]
        if (cl == "onceflow") continue
        for (mi = 1; mi <= 2; mi++) {
          m = mi == 1 ? "ru" : "rc"
          printf "| %s | onceflow / %s, %s | **%s**%s | %s |\n", casename(c), client(cl), (m == "ru" ? "read_uncommitted" : "read_committed"), ratio(c, "onceflow:" m, cl ":" m, "rps", "rps"), (cl == "java" ? " (vs Java fetch-only: " ratio(c, "onceflow:" m, "java:" m, "rps", "frps") ")" : ""), ratio(c, "onceflow:" m, cl ":" m, "cpum", "cpum")
        }
      }
    }
    if (length(calib) > 0) {
      print ""
      printf "Fixed start-up CPU (a 1000-record read):"
      for (c in calib) printf " %s %s s;", label(c), calib[c]
      print " included once in every run above."
    }
  }' "$results"
echo
echo "(every run: $results)"
if [ "$SMOKE" = 1 ]; then echo "(SMOKE=1: a functional check only; these numbers are not a measurement)"; fi
