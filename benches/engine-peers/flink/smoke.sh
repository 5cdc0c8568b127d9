#!/usr/bin/env bash
# Checks the Flink peer end to end against a running broker, the way the benchmark driver uses it:
# generates rides (and, for rides-and-fares, their fares) into fresh flink-smoke-* topics, starts
# run.sh, waits for "peer: started",
# optionally SIGKILLs the JVM once some output is committed and starts run.sh again on the same
# STATE_DIR, polls `onceflow taxi verify` until it says OK, stops the job, verifies once more,
# and deletes its topics.
#
#   smoke.sh JOB GUARANTEE RIDES [KILLS]
#   JOB: cleansing | per-driver-hourly | driver-shifts | rides-and-fares
#   KILLS: how many times to SIGKILL the JVM and start run.sh again (default 0): the first kill
#   once some output is committed, each further one a random 0.5-4 s after the restart; with
#   KILL_AT=checkpoint every kill comes instead right after a new checkpoint's _metadata appears,
#   i.e. mostly before the sink has committed that checkpoint's transaction
#   env: BIN (onceflow binary; default REPO/target/release/onceflow), BOOTSTRAP (127.0.0.1:9092),
#        INTERVAL_MS (1000), TIMEOUT_S (600: how long the output may take), KEEP=1 keeps the topics,
#        KILL_AT (above), PARTITIONS (of the input topics; 1)
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$dir/../../.." && pwd)
job=${1:?JOB: cleansing | per-driver-hourly | driver-shifts | rides-and-fares}; guarantee=${2:?GUARANTEE}; rides=${3:?RIDES}; kills=${4:-0}
BIN=${BIN:-$repo/target/release/onceflow}
export BOOTSTRAP=${BOOTSTRAP:-127.0.0.1:9092} INTERVAL_MS=${INTERVAL_MS:-1000}
timeout_s=${TIMEOUT_S:-600}
tag=flink-smoke-$$-$(date +%s)
export JOB=$job GUARANTEE=$guarantee INPUT=$tag-in OUTPUT=$tag-out NAME=$tag
fares=()
if [ "$job" = rides-and-fares ]; then
  export FARES=$tag-fares
  fares=(--fares "$FARES")
fi
partitions=${PARTITIONS:-1}
export STATE_DIR=${STATE_DIR:-$dir/target/smoke/$tag}
log=$STATE_DIR.log
mkdir -p "$(dirname "$STATE_DIR")"
pid=

say() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  if [ "${KEEP:-}" != 1 ]; then
    "$BIN" topics delete -b "$BOOTSTRAP" -t "$INPUT" >/dev/null 2>&1 || true
    "$BIN" topics delete -b "$BOOTSTRAP" -t "$OUTPUT" >/dev/null 2>&1 || true
    [ "$job" != rides-and-fares ] || "$BIN" topics delete -b "$BOOTSTRAP" -t "$FARES" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

"$dir/build.sh" >/dev/null
"$BIN" topics create -b "$BOOTSTRAP" -t "$OUTPUT" --partitions 1 >&2
"$BIN" taxi generate -b "$BOOTSTRAP" -t "$INPUT" "${fares[@]}" --count "$rides" --rate 1 --partitions "$partitions" >&2

starts=0
start() {
  local t0=$SECONDS
  starts=$((starts + 1))
  echo "==== run.sh start $starts" >>"$log"
  "$dir/run.sh" >>"$log" 2>&1 &
  pid=$!
  until [ "$(grep -c '^peer: started$' "$log" 2>/dev/null)" -ge "$starts" ]; do
    kill -0 "$pid" 2>/dev/null || { say "run.sh exited before 'peer: started' (see $log)"; tail -20 "$log" >&2; exit 1; }
    sleep 0.2
  done
  say "peer: started after $((SECONDS - t0)) s (pid $pid)"
}

metadata() { compgen -G "$STATE_DIR/checkpoints/*/chk-*/_metadata" | sort || true; }
wait_new_checkpoint() {
  local before now
  before=$(metadata)
  while :; do
    now=$(metadata)
    [ -z "$(comm -13 <(echo "$before") <(echo "$now"))" ] || return 0
    kill -0 "$pid" 2>/dev/null || { say "the job exited (see $log)"; exit 1; }
  done
}

verify() { "$BIN" taxi verify -b "$BOOTSTRAP" --job "$job" --input "$INPUT" "${fares[@]}" --output "$OUTPUT" 2>&1; }

start
t_start=$SECONDS
for ((k = 1; k <= kills; k++)); do
  if [ "${KILL_AT:-}" = checkpoint ]; then
    wait_new_checkpoint
    say "SIGKILL $pid right after a new checkpoint (kill $k)"
  elif [ "$k" = 1 ]; then
    # Some output committed (read_committed), then SIGKILL mid-run.
    "$BIN" consume -b "$BOOTSTRAP" -t "$OUTPUT" -c 1 -X isolation.level=read_committed >/dev/null
    say "first committed output after $((SECONDS - t_start)) s; SIGKILL $pid"
  else
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.5 + 3.5 * r / 32767 }')"
    say "SIGKILL $pid (kill $k)"
  fi
  kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
  say "after kill $k: $(verify || true)"
  start
done
until out=$(verify); do
  kill -0 "$pid" 2>/dev/null || { say "the job exited (see $log)"; tail -20 "$log" >&2; exit 1; }
  (( SECONDS - t_start < timeout_s )) || { say "no OK after $timeout_s s: $out"; exit 1; }
  sleep 2
done
say "OK after $((SECONDS - t_start)) s: $out"
kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=
out=$(verify) || { say "after stopping: $out"; exit 1; }
say "after stopping: $out"
echo "$out"
