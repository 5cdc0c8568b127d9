#!/usr/bin/env bash
# Producer throughput: onceflow (benches/perf, onceflow-perf produce) against three peers, same
# broker, same session, same settings, runs alternating between the clients:
#   java     the official Java client: Kafka's ProducerPerformance via
#            benches/java-peer/producer-perf.sh (kafka-tools 4.1.1)
#   franz    franz-go v1.22.3 (pure Go): benches/franz-go-peer (franz-go-peer produce)
#   rdkafka  librdkafka (C; Debian's librdkafka-dev, 2.0.2 on Debian 12):
#            benches/librdkafka-peer (rdkafka-perf produce)
# onceflow-perf, franz-go-peer and rdkafka-perf are built by this script (from the checkout) unless
# SKIP_BUILD=1; a franz variant needs Go (go.mod's version), an rdkafka variant a C compiler, make
# and librdkafka-dev (the script stops with a one-line message saying what to install).
#
#   benches/run-producer-comparison.sh              # full run (5 reps; ~15-20 min on 2 cores)
#   REPS=3 benches/run-producer-comparison.sh
#   SMOKE=1 benches/run-producer-comparison.sh      # CI: tiny N, 1 rep, < 1 min (checks that
#                                                   # everything runs; its numbers mean nothing:
#                                                   # 20,000 records is mostly JVM warm-up)
#   IDEMPOTENCE=true benches/run-producer-comparison.sh
#   VARIANTS="onceflow:idem onceflow:noidem java:idem" benches/run-producer-comparison.sh
#   VARIANTS="onceflow:idem onceflow:txn100 onceflow:txn1000 java:idem java:txn100 java:txn1000" \
#     benches/run-producer-comparison.sh
#   VARIANTS="onceflow:idem franz:idem rdkafka:idem java:idem onceflow:txn100 franz:txn100 \
#     rdkafka:txn100 java:txn100" benches/run-producer-comparison.sh
#
# Settings (every client): acks=all, linger.ms=5, batch.size=16384, compression.type=none,
# enable.idempotence=$IDEMPOTENCE (default false: onceflow does not implement idempotence yet, so
# the Java client's default of true is overridden to match), 1 partition, a fresh topic per run
# (created before and deleted after each run, outside the measured process), unthrottled. Each
# peer gets every one of them explicitly:
#   franz-go: RequiredAcks, ProducerLinger, ProducerBatchMaxBytes (= batch.size; franz-go's cap
#     of a batch's encoded size; raised to fit one record when a record is larger, since franz-go
#     would fail it where Java puts it in a batch of its own), ProducerBatchCompression
#     (franz-go's default is snappy), DisableIdempotentWrite when false (then
#     MaxProduceRequestsInflightPerBroker(5), Java's max.in.flight; franz-go's default without
#     idempotence is 1); buffer: MaxBufferedBytes
#     32 MiB (Java's buffer.memory; key+value bytes) and MaxBufferedRecords 1,000,000 (default
#     50,000), so the byte bound is the one reached, as in Java and onceflow.
#   librdkafka: acks, linger.ms, batch.size, compression.type, enable.idempotence,
#     max.in.flight.requests.per.connection=5 (its default is 1,000,000);
#     queue.buffering.max.kbytes=32768 (32 MiB, as buffer.memory; default 1 GiB) and
#     queue.buffering.max.messages=1,000,000 (default 100,000). It produces with rd_kafka_produce
#     (RD_KAFKA_MSG_F_COPY), rd_kafka_poll(0) after each record, poll(1) and retry on a full queue.
#   Java and onceflow: as the properties above (their buffer.memory default is 32 MiB).
# Transactions (txnD): the send loop checks the time before each record and commits when D ms
# have passed, and once at the end, in every client (ProducerPerformance's
# --transaction-duration-ms); franz-go commits with Flush + EndTransaction(TryCommit), librdkafka
# with rd_kafka_commit_transaction, after init_transactions / the producer id load before the
# clock starts. librdkafka 2.0.2 uses the classic transaction protocol even on a TV2 cluster;
# franz-go and Java 4.1 use KIP-890 there. Rates: onceflow, franz-go and librdkafka time from the
# first send to the last acknowledgement (client creation, connection and producer id before
# it); Java's are ProducerPerformance's own.
#
# Environment:
#   REPS           repetitions per client and record size (default 5; SMOKE: 1)
#   N_100          records per run at 100 B (default 1000000; SMOKE: 20000)
#   N_1K           records per run at 1 KiB (default 300000; SMOKE: 20000)
#   SIZES          record sizes in bytes (default "100 1024")
#   IDEMPOTENCE    true|false (default false): enable.idempotence for the plain variants
#                  `onceflow`, `franz`, `rdkafka` and `java`
#   VARIANTS       what to compare (default "onceflow franz rdkafka java"). Each entry is CLIENT
#                  or CLIENT:MODE, CLIENT onceflow, franz, rdkafka or java, MODE one of
#                    idem      enable.idempotence=true
#                    noidem    enable.idempotence=false
#                    txnD      transactions committed every D ms (enable.idempotence=true, a
#                              transactional.id unique to the run): onceflow-perf
#                              -X transactional.id=ID --transaction-duration-ms D, Java
#                              ProducerPerformance --transactional-id ID --transaction-duration-ms D,
#                              franz-go-peer / rdkafka-perf --transactional-id ID
#                              --transaction-duration-ms D
#                  Every variant runs once per rep and record size; the order rotates by one
#                  each rep, so every variant takes every position.
#   RATIOS         same-rep ratios to report, "A/B ..." over VARIANTS entries (default: onceflow
#                  over java, over franz and over rdkafka of the same mode; every txnD over idem
#                  of the same client; onceflow:idem over onceflow:noidem)
#   PAYLOAD        random (default): every record gets a freshly generated random value, which
#                  is what ProducerPerformance --record-size does on its sending thread (and
#                  onceflow-perf, franz-go-peer and rdkafka-perf --payload random mirror: a
#                  SplitMix64 letter per byte into one reusable buffer, then the record gets a
#                  copy); fixed: one value for all records (ProducerPerformance --payload-file
#                  with a single line; --payload fixed for the others), so the figures are
#                  closer to the client's own cost
#   ACKS LINGER_MS BATCH_SIZE COMPRESSION PARTITIONS   (defaults all, 5, 16384, none, 1)
#   BOOTSTRAP      (default 127.0.0.1:9092; with TLS_CA: 127.0.0.1:$((KAFKA_PORT + 2)), the
#                  secured broker's SSL listener)
#   TLS_CA         a PEM CA file: TLS mode. Every client connects to BOOTSTRAP (then an SSL
#                  listener) with security.protocol=SSL, trusting only that CA, the broker's
#                  host name verified against its certificate, no client certificate:
#                    onceflow  -X security.protocol=SSL -X ssl.ca.location=$TLS_CA (on produce,
#                              create-topic and delete-topic)
#                    Java      --producer-props security.protocol=SSL ssl.truststore.type=PEM
#                              ssl.truststore.location=$TLS_CA
#                    franz-go  --tls-ca $TLS_CA (DialTLSConfig: RootCAs from the file, TLS 1.2+,
#                              ServerName from the broker's host)
#                    librdkafka  --tls-ca $TLS_CA (security.protocol=ssl, ssl.ca.location,
#                              ssl.endpoint.identification.algorithm=https)
#                  The broker must be the secured one of protocol-tests/kafka-broker.sh, started
#                  first with the same KAFKA_SECURITY, KAFKA_PORT and KAFKA_DIR passed to this
#                  script (its own `kafka-broker.sh start` then finds it running), e.g.
#                    export KAFKA_SECURITY=1 KAFKA_PORT=19750 KAFKA_DIR=/tmp/kbench-tls
#                    protocol-tests/kafka-broker.sh start
#                    TLS_CA=$KAFKA_DIR/certs/ca.pem benches/run-producer-comparison.sh
#                  (BOOTSTRAP and LOG_DIR then default to that broker's SSL listener and data).
#                  Unset: plaintext, as before.
#   KAFKA_SECURITY KAFKA_PORT KAFKA_DIR   passed to protocol-tests/kafka-broker.sh start (see there)
#   LOG_DIR        the broker's log.dirs, to count the batches each client formed
#                  (default target/kafka-9092/data; with TLS_CA: $KAFKA_DIR/data; skipped if
#                  absent)
#   OUT_DIR        where per-run logs and results.tsv go (default target/perf-comparison/<time>)
#   SETTLE_SECS    pause between runs (default 2; SMOKE: 0)
#   SKIP_BUILD=1   use the existing target/release/onceflow-perf,
#                  target/franz-go-peer/franz-go-peer and target/librdkafka-peer/rdkafka-perf
#   TIME_BIN       GNU time, for the peak RSS (default /usr/bin/time; apt-get install time)
#   CALIBRATE=0    skip the 1000-record start-up cost run of each client
#
# Output: per-run lines as it goes, then a Markdown table with the median and min-max of
# records/s, MB/s (2^20 bytes of record values per second), client CPU seconds per million
# records (user+sys of the client process, start-up included, measured the same way for every
# client: bash `times` around the process, benches/java-peer/common.sh run_measured; for onceflow,
# franz-go and librdkafka that includes GNU time's own ~1 ms) and the client's peak RSS in MiB,
# and the same-rep ratios. results.tsv keeps every run.
#
# Peak RSS: GNU time's %M (`$TIME_BIN -f %M CMD`, wait4's ru_maxrss: the largest resident set
# high-water mark among CMD and its waited-for descendants), the same for all four: onceflow-perf,
# franz-go-peer and rdkafka-perf run under it directly; for Java it wraps
# benches/java-peer/producer-perf.sh, whose largest process is the JVM (-Xmx512M). Not a Python
# wrapper: ru_maxrss counts the memory of the process that exec'd the client (a child forked from
# a Python interpreter starts at ~9 MiB), GNU time's own is ~1 MiB.
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
TLS_CA=${TLS_CA:-}
# BOOTSTRAP, LOG_DIR and each client's TLS arguments (broker_setup, java-peer/common.sh).
broker_setup
SETTLE_SECS=${SETTLE_SECS:-2}
CALIBRATE=${CALIBRATE:-1}
OUT_DIR=${OUT_DIR:-$repo/target/perf-comparison/$(date +%Y%m%d-%H%M%S)}
TIME_BIN=${TIME_BIN:-/usr/bin/time}
case $IDEMPOTENCE in true|false) ;; *) die "IDEMPOTENCE must be true or false" ;; esac
VARIANTS=${VARIANTS:-onceflow franz rdkafka java}
read -r -a variants <<<"$VARIANTS"
for v in "${variants[@]}"; do
  case ${v%%:*} in onceflow|franz|rdkafka|java) ;; *) die "VARIANTS: $v: client must be onceflow, franz, rdkafka or java" ;; esac
  case $v in *:*) case ${v#*:} in idem|noidem|txn[0-9]*) ;; *) die "VARIANTS: $v: mode must be idem, noidem or txnD" ;; esac ;; esac
done
if [ -z "${RATIOS:-}" ]; then
  RATIOS=""
  has() { local x; for x in "${variants[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }
  for v in "${variants[@]}"; do
    c=${v%%:*}; m=""; case $v in *:*) m=:${v#*:} ;; esac
    # onceflow over each peer, same mode.
    if [ "$c" = onceflow ]; then
      for peer in java franz rdkafka; do if has "$peer$m"; then RATIOS+=" $v/$peer$m"; fi; done
    fi
  done
  for v in "${variants[@]}"; do
    c=${v%%:*}
    case $v in *:txn*) if has "$c:idem"; then RATIOS+=" $v/$c:idem"; fi ;; esac
  done
  if has onceflow:idem && has onceflow:noidem; then RATIOS+=" onceflow:idem/onceflow:noidem"; fi
fi
case $PAYLOAD in random|fixed) ;; *) die "PAYLOAD must be random or fixed" ;; esac

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
  # Which onceflow source the binary holds (other people edit src/ while benchmarks run).
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

# Common settings; enable.idempotence (and transactions) come from each variant (idem_of).
props=(acks="$ACKS" linger.ms="$LINGER_MS" batch.size="$BATCH_SIZE" compression.type="$COMPRESSION")
xprops=()
for p in "${props[@]}"; do xprops+=(-X "$p"); done
# idem_of VARIANT: its enable.idempotence; txn_of VARIANT: its transaction duration in ms, or "".
idem_of() { case $1 in *:noidem) echo false ;; *:idem|*:txn*) echo true ;; *) echo "$IDEMPOTENCE" ;; esac; }
txn_of() { case $1 in *:txn*) echo "${1##*:txn}" ;; *) echo "" ;; esac; }
run_id=$(date +%s)-$$

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
  if uses java; then echo "java: $(java -version 2>&1 | head -1)"; fi
  echo "kafka: $KAFKA_VERSION (broker and Java client)"
  if uses franz; then echo "franz-go peer: $(tr '\n' ' ' <"$franz.build-info" 2>/dev/null || echo "build info: none")"; fi
  if uses rdkafka; then echo "librdkafka peer: $(tr '\n' ' ' <"$rdkafka.build-info" 2>/dev/null || echo "build info: none")"; fi
  echo "settings: ${props[*]} payload=$PAYLOAD partitions=$PARTITIONS reps=$REPS n_100=$N_100 n_1k=$N_1K"
  echo "variants: $VARIANTS (idempotence for plain variants: $IDEMPOTENCE)"
  echo "ratios: $RATIOS"
  echo "bootstrap: $BOOTSTRAP"
  echo "tls: ${TLS_CA:-off}"
} >"$OUT_DIR/meta.txt"
sed 's/^/# /' "$OUT_DIR/meta.txt" >&2
printf 'variant\tsize\trep\trecords\trecords_per_sec\tmb_per_sec\tcpu_seconds\tcpu_self_reported\tbatches\tavg_records_per_batch\tavg_batch_bytes\tloadavg\ttxn_markers\tcommits\tcommit_ms_avg\tcommit_ms_max\tfailed_records\tpeak_rss_mib\n' >"$results"

n_for() { if [ "$1" -le 512 ]; then echo "$N_100"; else echo "$N_1K"; fi; }

# run_one VARIANT SIZE N REP: one measured run on a fresh topic; appends a line to results.tsv.
run_one() {
  local variant=$1 size=$2 n=$3 rep=$4
  local client=${variant%%:*} vname=${variant/:/-}
  local idem txn; idem=$(idem_of "$variant"); txn=$(txn_of "$variant")
  # A transactional.id unique to this run (no fencing of, or by, an earlier run).
  local txn_id=perf-cmp-$run_id-$vname-$size-$rep
  local topic=perf-cmp-$vname-$size-$rep-$$-$RANDOM
  local log=$OUT_DIR/$vname-$size-$rep.log
  "$perf" create-topic --bootstrap "$BOOTSTRAP" "${onceflow_tls[@]}" --topic "$topic" --partitions "$PARTITIONS" >>"$log" 2>&1 \
    || die "could not create topic $topic (see $log)"
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local line self_cpu="" rss_file=$log.rss
  # Peak RSS: GNU time around the client process (see the header).
  local rss=("$TIME_BIN" -q -f peak_rss_kib=%M -o "$rss_file")
  case $client in
    onceflow|franz|rdkafka)
      local cmd txn_args=() prefix
      case $client in
        onceflow)
          prefix=onceflow
          if [ -n "$txn" ]; then txn_args=(-X transactional.id="$txn_id" --transaction-duration-ms "$txn"); fi
          cmd=("$perf" produce "${xprops[@]}" -X enable.idempotence="$idem" "${onceflow_tls[@]}")
          ;;
        franz|rdkafka)
          if [ "$client" = franz ]; then prefix="franz-go"; cmd=("$franz"); else prefix=librdkafka; cmd=("$rdkafka"); fi
          if [ -n "$txn" ]; then txn_args=(--transactional-id "$txn_id" --transaction-duration-ms "$txn"); fi
          cmd+=(produce --acks "$ACKS" --linger-ms "$LINGER_MS" --batch-size "$BATCH_SIZE"
            --compression "$COMPRESSION" --idempotence "$idem" "${peer_tls[@]}")
          ;;
      esac
      run_measured "$log.run" "${rss[@]}" "${cmd[@]}" --bootstrap "$BOOTSTRAP" --topic "$topic" \
        --num-records "$n" --record-size "$size" --payload "$PAYLOAD" "${txn_args[@]}" >/dev/null
      cat "$log.run" >>"$log"; rm -f "$log.run"
      line=$(grep "^$prefix records=" "$log" | tail -1 || true)
      # A run in which some records failed still prints its result line: keep it (results.tsv
      # has the failed count) and go on, so one failed batch does not lose the whole session.
      [ "$RC" -eq 0 ] || [ -n "$line" ] || die "$client produce failed with status $RC (see $log)"
      [ "$RC" -eq 0 ] || echo "warning: $variant size=$size rep=$rep: $client produce exited with status $RC: $(grep -m1 'failed' "$log" || true) (see $log)" >&2
      if [ "$client" = onceflow ]; then self_cpu=$(sed -E 's/.* cpu_seconds=([0-9.]+).*/\1/' <<<"$line"); fi
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
      local txn_args=()
      if [ -n "$txn" ]; then txn_args=(--transactional-id "$txn_id" --transaction-duration-ms "$txn"); fi
      "${rss[@]}" benches/java-peer/producer-perf.sh --topic "$topic" --num-records "$n" "${payload_args[@]}" \
        --throughput -1 "${txn_args[@]}" --producer-props bootstrap.servers="$BOOTSTRAP" "${props[@]}" \
        enable.idempotence="$idem" "${java_tls[@]}" >>"$log" 2>&1 \
        || die "Java ProducerPerformance failed (see $log)"
      line=$(grep '^java-peer records=' "$log" | tail -1)
      ;;
  esac
  [ -n "$line" ] || die "no result line in $log"
  local rss_mib=""
  rss_mib=$(sed -nE 's/^peak_rss_kib=([0-9]+)$/\1/p' "$rss_file" 2>/dev/null | awk '{ printf "%.1f", $1 / 1024 }')
  rm -f "$rss_file"
  local batches="" avg_recs="" avg_bytes="" markers=""
  if [ -d "$LOG_DIR" ]; then
    local stats
    if stats=$("$perf" log-stats --log-dir "$LOG_DIR" --topic "$topic" 2>>"$log"); then
      echo "$stats" >>"$log"
      batches=$(sed -E 's/.* batches=([0-9]+).*/\1/' <<<"$stats")
      avg_recs=$(sed -E 's/.* avg_records_per_batch=([0-9.]+).*/\1/' <<<"$stats")
      avg_bytes=$(sed -E 's/.* avg_batch_bytes=([0-9.]+).*/\1/' <<<"$stats")
      markers=$(sed -nE 's/.* control_batches=([0-9]+).*/\1/p' <<<"$stats")
    fi
  fi
  "$perf" delete-topic --bootstrap "$BOOTSTRAP" "${onceflow_tls[@]}" --topic "$topic" >>"$log" 2>&1 \
    || echo "warning: could not delete topic $topic" >&2
  # The client's own count of commits and the time its send loop spent committing (onceflow's
  # commit_transaction, franz-go's Flush + EndTransaction, librdkafka's commit_transaction;
  # ProducerPerformance reports none).
  local commits="" cavg="" cmax="" detail
  detail=$(grep -E '^(onceflow|franz-go|librdkafka)-detail transactions=' "$log" | tail -1 || true)
  if [ -n "$detail" ]; then
    commits=$(sed -E 's/.* transactions=([0-9]+).*/\1/' <<<"$detail")
    cavg=$(sed -E 's/.* commit_ms_avg=([0-9.]+).*/\1/' <<<"$detail")
    cmax=$(sed -E 's/.* commit_ms_max=([0-9.]+).*/\1/' <<<"$detail")
  fi
  local records rps mbps cpu
  records=$(sed -E 's/.* records=([0-9]+) .*/\1/' <<<"$line")
  rps=$(sed -E 's/.* records_per_sec=([0-9.]+) .*/\1/' <<<"$line")
  mbps=$(sed -E 's/.* mb_per_sec=([0-9.]+) .*/\1/' <<<"$line")
  cpu=$(sed -E 's/.* cpu_seconds=([0-9.]+).*/\1/' <<<"$line")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$variant" "$size" "$rep" "$records" "$rps" "$mbps" \
    "$cpu" "$self_cpu" "$batches" "$avg_recs" "$avg_bytes" "$load" "$markers" "$commits" "$cavg" "$cmax" \
    "$(( n - records ))" "$rss_mib" >>"$results"
  printf '%-16s size=%-5s rep=%s records=%s records/s=%s MB/s=%s cpu_s=%s rss_mib=%s batches=%s avg_batch_bytes=%s load=%s%s\n' \
    "$variant" "$size" "$rep" "$records" "$rps" "$mbps" "$cpu" "${rss_mib:--}" "${batches:--}" "${avg_bytes:--}" "$load" \
    "${txn:+ txn_markers=${markers:--} commit_ms_avg=${cavg:--} commit_ms_max=${cmax:--}}" >&2
  if [ "$SETTLE_SECS" != 0 ]; then sleep "$SETTLE_SECS"; fi
}

echo "settings: ${props[*]} payload=$PAYLOAD partitions=$PARTITIONS reps=$REPS sizes=[$SIZES] n_100=$N_100 n_1k=$N_1K" >&2
echo "bootstrap: $BOOTSTRAP; tls: ${TLS_CA:-off}" >&2
echo "variants: $VARIANTS; ratios:$RATIOS" >&2
echo "logs and results.tsv: $OUT_DIR" >&2
started=$(date +%s)

if [ "$CALIBRATE" = 1 ]; then
  # Fixed cost (process start, connection, JVM start-up and JIT) with 1000 records: the CPU
  # figures below include it once per run.
  seen_clients=""
  for v in "${variants[@]}"; do
    case " $seen_clients " in *" ${v%%:*} "*) continue ;; esac
    seen_clients+=" ${v%%:*}"; run_one "${v%%:*}" 100 1000 calib
  done
fi
for rep in $(seq 1 "$REPS"); do
  for size in $SIZES; do
    n=$(n_for "$size")
    # Rotate which variant goes first, so drift (page cache, broker JIT, log cleanup,
    # other load) does not favour one of them (with two variants: alternate).
    k=${#variants[@]}
    for i in $(seq 0 $((k - 1))); do
      run_one "${variants[$(( (i + rep - 1) % k ))]}" "$size" "$n" "$rep"
    done
  done
done

echo >&2
echo "elapsed: $(( $(date +%s) - started )) s" >&2
echo
echo "Producer comparison, ${props[*]}, payload=$PAYLOAD, partitions=$PARTITIONS, $REPS rep(s); median (min-max)"
echo "TLS: ${TLS_CA:-off}"
echo "Variants: $VARIANTS (plain variants: enable.idempotence=$IDEMPOTENCE; :idem true; :noidem false; :txnD transactions of D ms)"
echo
awk -F'\t' -v reps="$REPS" -v variants="$VARIANTS" -v ratios="$RATIOS" '
  function sort(a, n,   i, j, t) { for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t } }
  function median(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  function stat(key, col, fmt,   a, n, i) {
    n = cnt[key]; if (n == 0) return "-"
    for (i = 1; i <= n; i++) a[i] = val[key, col, i]
    sort(a, n)
    med[key, col] = median(a, n)
    return sprintf(fmt " (" fmt "-" fmt ")", median(a, n), a[1], a[n])
  }
  function label(v) {
    if (v == "java" || v ~ /^java:/) return "Java" substr(v, 5)
    if (v == "franz" || v ~ /^franz:/) return "franz-go" substr(v, 6)
    if (v == "rdkafka" || v ~ /^rdkafka:/) return "librdkafka" substr(v, 8)
    return v
  }
  BEGIN { nv = split(variants, vs, " "); nr = split(ratios, rs, " "); txn = variants ~ /:txn/ }
  NR == 1 { next }
  $3 == "calib" { calib[$1] = $7; next }
  {
    key = $1 SUBSEP $2; i = ++cnt[key]
    if (!($2 in seen)) { seen[$2] = 1; sizes[++ns] = $2 }
    val[key, "rps", i] = $5; val[key, "mbps", i] = $6
    val[key, "cpum", i] = $7 * 1e6 / $4
    val[key, "batch", i] = $11; val[key, "rpb", i] = $10
    val[key, "mark", i] = $13; val[key, "cavg", i] = $15; val[key, "rss", i] = $18
    rps_of[$1, $2, $3] = $5; cpu_of[$1, $2, $3] = $7 * 1e6 / $4
    if ($17 > 0) { failed[$1] += $17; failed_runs[$1]++ }
  }
  END {
    printf "| record size | variant | records/s | MB/s | client CPU s per 1M records | peak RSS MiB | avg batch bytes | records/batch |"
    if (txn) printf " transactions (markers in the log) | commit ms, avg (send loop; not Java) |"
    print ""
    printf "|---|---|---|---|---|---|---|---|"
    if (txn) printf "---|---|"
    print ""
    for (s = 1; s <= ns; s++) {
      size = sizes[s]
      for (c = 1; c <= nv; c++) {
        key = vs[c] SUBSEP size
        if (!cnt[key]) continue
        r = stat(key, "rps", "%.0f"); m = stat(key, "mbps", "%.1f"); u = stat(key, "cpum", "%.2f")
        b = val[key, "batch", 1] != "" ? stat(key, "batch", "%.0f") : "-"
        p = val[key, "rpb", 1] != "" ? stat(key, "rpb", "%.1f") : "-"
        x = val[key, "rss", 1] != "" ? stat(key, "rss", "%.0f") : "-"
        printf "| %s B | %s | %s | %s | %s | %s | %s | %s |", size, label(vs[c]), r, m, u, x, b, p
        if (txn) printf " %s | %s |", val[key, "mark", 1] != "" && vs[c] ~ /:txn/ ? stat(key, "mark", "%.0f") : "-", val[key, "cavg", 1] != "" ? stat(key, "cavg", "%.1f") : "-"
        print ""
      }
    }
    if (nr == 0) exit
    print ""
    print "| record size | ratio | records/s, ratio of medians | same-rep ratios, median (min-max) | CPU per record, same-rep ratio median |"
    print "|---|---|---|---|---|"
    for (s = 1; s <= ns; s++) {
      size = sizes[s]
      for (q = 1; q <= nr; q++) {
        split(rs[q], ab, "/"); A = ab[1]; B = ab[2]
        if (!(med[B, size, "rps"] > 0 && med[B, size, "cpum"] > 0)) continue
        # Runs of the same rep ran back to back, so their ratio cancels slow drift in load.
        n = 0; delete pr; delete pc
        for (r = 1; r <= reps; r++)
          if ((A, size, r) in rps_of && (B, size, r) in rps_of && rps_of[B, size, r] > 0) {
            ++n; pr[n] = rps_of[A, size, r] / rps_of[B, size, r]; pc[n] = cpu_of[A, size, r] / cpu_of[B, size, r]
          }
        paired = "-"; cpr = sprintf("%.2f", med[A, size, "cpum"] / med[B, size, "cpum"])
        if (n > 0) { sort(pr, n); sort(pc, n); paired = sprintf("%.2f (%.2f-%.2f)", median(pr, n), pr[1], pr[n]); cpr = sprintf("%.2f", median(pc, n)) }
        printf "| %s B | %s / %s | %.2f | **%s** | %s |\n", size, label(A), label(B), med[A, size, "rps"] / med[B, size, "rps"], paired, cpr
      }
    }
    for (v in failed_runs) printf "\nWARNING: %s: %d run(s) with %d record(s) that failed (see results.tsv and the run logs).\n", label(v), failed_runs[v], failed[v]
    if (length(calib) > 0) {
      print ""
      printf "Fixed start-up CPU (a 1000-record run):"
      for (c in calib) printf " %s %s s;", label(c), calib[c]
      print " included once in every run above."
    }
  }' "$results"
echo
echo "(every run: $results)"
if [ "$SMOKE" = 1 ]; then echo "(SMOKE=1: a functional check only; these numbers are not a measurement)"; fi
