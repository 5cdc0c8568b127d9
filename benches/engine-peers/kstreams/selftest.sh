#!/usr/bin/env bash
# Self-test of an engine peer (benches/engine-peers/E, default this one) against a real broker:
#   selftest.sh JOB GUARANTEE INPUT_TOPIC [kill]
#   FARES=FARES_TOPIC selftest.sh rides-and-fares GUARANTEE INPUT_TOPIC [kill]
# Runs the peer on INPUT_TOPIC (the rides, produced with `onceflow taxi generate`, any number
# of partitions; for rides-and-fares with `--fares FARES_TOPIC`) into a fresh output topic
# `ks-test-*`; with `kill`, SIGKILLs the JVM once some output is committed and restarts it with
# the same environment and STATE_DIR. Waits (at most WAIT_S seconds) until the output holds as
# many records (read_committed) as `taxi verify` requires and `taxi verify` says OK, stops the
# peer, prints `taxi verify`'s final verdict (its exit status is the script's), deletes the
# output topic and the application's internal topics. Env: BIN, BOOTSTRAP, INTERVAL_MS (1000),
# FARES, WAIT_S (600), PEER_DIR (this directory), KEEP_TOPICS=1; the peer inherits the rest
# (e.g. JOIN_GRACE_MS, KSTREAMS_PROPS).
set -euo pipefail
job=$1 guarantee=$2 input=$3 mode=${4:-}
BIN=${BIN:-/work/main/target/release/onceflow}
export BOOTSTRAP=${BOOTSTRAP:-127.0.0.1:9192}
peer=${PEER_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
id=ks-test-$(date +%s)-$$
export JOB=$job GUARANTEE=$guarantee INPUT=$input OUTPUT=$id-out INTERVAL_MS=${INTERVAL_MS:-1000} NAME=$id
verify=(--job "$job" --input "$input")
if [ "$job" = rides-and-fares ]; then
  [ -n "${FARES:-}" ] || { echo "selftest: rides-and-fares needs FARES=<fares topic>" >&2; exit 2; }
  export FARES
  verify+=(--fares "$FARES")
fi
deadline=$(( $(date +%s) + ${WAIT_S:-600} ))
export STATE_DIR=${TMPDIR:-/tmp}/$id-state
log=${TMPDIR:-/tmp}/$id.log
# LogAppendTime: the peers write event-time (2025) or input timestamps; retention must not see them.
"$BIN" topics create -b "$BOOTSTRAP" -t "$OUTPUT" --partitions 1 --config message.timestamp.type=LogAppendTime >/dev/null
empty=$id-empty
"$BIN" topics create -b "$BOOTSTRAP" -t "$empty" --partitions 1 >/dev/null
expected=$("$BIN" taxi verify -b "$BOOTSTRAP" "${verify[@]}" --output "$empty" | sed -n 's/.* \([0-9]*\) expected.*/\1/p' || true)
"$BIN" topics delete -b "$BOOTSTRAP" -t "$empty" >/dev/null
[ -n "$expected" ] || { echo "selftest: no expected count" >&2; exit 1; }
echo "selftest: $id $job $guarantee on $input: $expected records expected; log $log"
: >>"$log"
start_peer() {
  "$peer/run.sh" >>"$log" 2>&1 &
  pid=$!
  until grep -q 'peer: started' <(tail -n +"${1:-1}" "$log"); do
    kill -0 "$pid" 2>/dev/null || { echo "selftest: peer exited before 'peer: started'" >&2; exit 1; }
    sleep 0.1
  done
}
start_peer
if [ "$mode" = kill ]; then
  "$BIN" consume -b "$BOOTSTRAP" -t "$OUTPUT" -c 1 -o beginning -X isolation.level=read_committed >/dev/null 2>&1
  if [ "$job" = cleansing ] || [ "$job" = rides-and-fares ]; then
    "$BIN" consume -b "$BOOTSTRAP" -t "$OUTPUT" -c 1000 -o beginning -X isolation.level=read_committed >/dev/null 2>&1
  fi
  kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
  t0=$(date +%s%N)
  lines=$(($(wc -l <"$log") + 1))
  committed=$("$BIN" consume -b "$BOOTSTRAP" -t "$OUTPUT" -o beginning -e -X isolation.level=read_committed 2>/dev/null | wc -l)
  echo "selftest: SIGKILLed the peer (pid $pid) with $committed output records committed; restarting on $STATE_DIR"
  start_peer "$lines"
  echo "selftest: restarted peer is RUNNING after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
fi
# Every required record read, then `taxi verify` OK (records of windows it does not require
# yet may come in between), or the deadline.
left=$(( deadline - $(date +%s) ))
if [ "$left" -gt 0 ] && timeout "$left" "$BIN" consume -b "$BOOTSTRAP" -t "$OUTPUT" -c "$expected" -o beginning \
    -X isolation.level=read_committed >/dev/null 2>&1; then
  until "$BIN" taxi verify -b "$BOOTSTRAP" "${verify[@]}" --output "$OUTPUT" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || break
    sleep 5
  done
else
  echo "selftest: fewer than $expected records after ${WAIT_S:-600} s" >&2
fi
kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
rc=0
"$BIN" taxi verify -b "$BOOTSTRAP" "${verify[@]}" --output "$OUTPUT" || rc=$?
[ "${KEEP_TOPICS:-0}" = 1 ] && exit $rc
for t in $("$BIN" topics list -b "$BOOTSTRAP" | awk '{print $1}' | grep "^$id"); do
  "$BIN" topics delete -b "$BOOTSTRAP" -t "$t" >/dev/null
done
rm -rf "$STATE_DIR"
exit $rc
