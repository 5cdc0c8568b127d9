#!/usr/bin/env bash
# Fetch sessions (KIP-227): one onceflow consumer reading every partition of a many-partition
# topic from the beginning, with sessions (the default) and without (-X
# fetch.sessions.enable=false), alternating which goes first each repetition. The topic is
# created and filled once (idempotent, acks=all, linger.ms=5, batch.size=16384, random payload),
# outside the measured runs, and deleted at the end.
#
#   benches/run-fetch-sessions.sh                       # 1000 partitions, 1,000,000 x 100 B, 3 reps
#   PARTITIONS=100 N=200000 REPS=1 benches/run-fetch-sessions.sh
#   MODE=tail N=200000 benches/run-fetch-sessions.sh    # the consumer tails a topic being written
#
# MODE=catchup (default) reads a pre-filled topic: few, large responses. MODE=tail creates an
# empty topic per run, starts the consumer at its beginning, then a producer writing N records
# with at most MAX_OUTSTANDING (default 1000) unacknowledged: many small responses, most
# partitions idle in each, which is what sessions are for.
#
# Prints one tab-separated line per run: sessions, rep, records/s, client CPU s per million
# records, Fetch requests full / incremental, request bytes, request bytes per second, per
# record and per request (onceflow-perf consume's `onceflow-fetch` line: the encoded request
# bodies the consumer sent, counted by Consumer::metrics).
#
# Environment: BOOTSTRAP (default 127.0.0.1:9192), PARTITIONS (1000), N (1000000), SIZE (100),
# REPS (3), PERF (target/release/onceflow-perf; built unless SKIP_BUILD=1).
set -euo pipefail
cd "$(dirname "$0")/.."
BOOTSTRAP=${BOOTSTRAP:-127.0.0.1:9192}
PARTITIONS=${PARTITIONS:-1000}
N=${N:-1000000}
SIZE=${SIZE:-100}
REPS=${REPS:-3}
MODE=${MODE:-catchup}
MAX_OUTSTANDING=${MAX_OUTSTANDING:-1000}
PERF=${PERF:-target/release/onceflow-perf}
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release --manifest-path benches/perf/Cargo.toml >&2
fi
fill() {
  "$PERF" produce --bootstrap "$BOOTSTRAP" --topic "$1" --num-records "$N" --record-size "$SIZE" \
    -X acks=all -X linger.ms=5 -X batch.size=16384 -X enable.idempotence=true \
    --max-outstanding "$2" --report-interval-ms 600000 >&2
}
topic="fetch-sessions-$$-$(date +%s)"
if [ "$MODE" = catchup ]; then
  "$PERF" create-topic --bootstrap "$BOOTSTRAP" --topic "$topic" --partitions "$PARTITIONS" >&2
  trap '"$PERF" delete-topic --bootstrap "$BOOTSTRAP" --topic "$topic" >&2 || true' EXIT
  echo "filling $topic: $PARTITIONS partitions, $N x $SIZE B" >&2
  fill "$topic" 1000000
fi
printf 'mode\tsessions\trep\trecords_per_sec\tcpu_sec_per_million\tfull\tincremental\trequest_bytes\trequest_bytes_per_sec\trequest_bytes_per_record\tbytes_per_request\n'
for rep in $(seq 1 "$REPS"); do
  order="true false"
  [ $((rep % 2)) = 0 ] && order="false true"
  for s in $order; do
    if [ "$MODE" = tail ]; then
      t="$topic-$rep-$s"
      "$PERF" create-topic --bootstrap "$BOOTSTRAP" --topic "$t" --partitions "$PARTITIONS" >&2
      out_file=$(mktemp)
      "$PERF" consume --bootstrap "$BOOTSTRAP" --topic "$t" --num-records "$N" \
        -X fetch.sessions.enable="$s" >"$out_file" &
      consumer=$!
      sleep 3 # the consumer resolves its positions on the empty topic
      fill "$t" "$MAX_OUTSTANDING"
      wait "$consumer"
      out=$(cat "$out_file")
      rm -f "$out_file"
      "$PERF" delete-topic --bootstrap "$BOOTSTRAP" --topic "$t" >&2
    else
      out=$("$PERF" consume --bootstrap "$BOOTSTRAP" --topic "$topic" --num-records "$N" \
        -X fetch.sessions.enable="$s")
    fi
    field() { grep -oE "(^| )$1=[^ ]+" <<<"$out" | head -1 | cut -d= -f2; }
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$MODE" "$s" "$rep" "$(field records_per_sec)" \
      "$(field cpu_sec_per_million_records)" "$(field requests_full)" "$(field requests_incremental)" \
      "$(field request_bytes)" "$(field request_bytes_per_sec)" "$(field request_bytes_per_record)" \
      "$(field bytes_per_request)"
  done
done
