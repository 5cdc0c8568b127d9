#!/usr/bin/env bash
# Runs one Flink peer job until killed. The process that runs this script becomes the JVM (exec),
# so its PID is the job's: CPU and RSS from /proc/PID, SIGKILL for the recovery test.
#
# Environment (all required):
#   BOOTSTRAP    Kafka bootstrap servers
#   JOB          cleansing | per-driver-hourly (DataStream API) | driver-shifts | rides-and-fares (SQL)
#   INPUT        input topic (ride events)
#   OUTPUT       output topic
#   INTERVAL_MS  checkpoint interval, ms
#   GUARANTEE    exactly-once | at-least-once (the KafkaSink's delivery guarantee)
#   STATE_DIR    this run's directory: checkpoints under STATE_DIR/checkpoints; a run started on a
#                directory that holds a completed checkpoint resumes from the newest one
#   NAME         unique per run: transactional id prefix, consumer group id and client id prefix
#   FARES        the fares topic (JOB=rides-and-fares only)
# Optional:
#   FLINK_PEER_HEAP  the JVM's maximum heap (-Xmx), default 1g
#   FLINK_PEER_OPTS  more JVM options
# Prints "peer: started" on stderr once the sources have their partitions and are about to read.
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

for v in BOOTSTRAP JOB INPUT OUTPUT INTERVAL_MS GUARANTEE STATE_DIR NAME; do
  [ -n "${!v:-}" ] || { echo "run.sh: $v is not set" >&2; exit 2; }
done
export BOOTSTRAP JOB INPUT OUTPUT INTERVAL_MS GUARANTEE STATE_DIR NAME
if [ "$JOB" = rides-and-fares ]; then
  [ -n "${FARES:-}" ] || { echo "run.sh: FARES is not set (JOB=rides-and-fares)" >&2; exit 2; }
  export FARES
fi

jar=$("$dir/build.sh")
mkdir -p "$STATE_DIR"
# Flink's scratch files (extracted RPC jar, blobs, spill files) live in STATE_DIR/tmp, not /tmp;
# a killed run's are removed here (the checkpoints are elsewhere, in STATE_DIR/checkpoints).
rm -rf "$STATE_DIR/tmp"
mkdir -p "$STATE_DIR/tmp"
heap=${FLINK_PEER_HEAP:-1g}

# The module openings Flink asks for on Java 17 (its serializers and closure cleaner reflect into
# java.base), as its own distribution passes them to every JVM.
opens=()
for p in java.lang java.lang.reflect java.io java.net java.nio java.text java.time java.util \
         java.util.concurrent java.util.concurrent.atomic java.util.concurrent.locks sun.nio.ch; do
  opens+=("--add-opens=java.base/$p=ALL-UNNAMED")
done
exports=(--add-exports=java.base/sun.net.util=ALL-UNNAMED
         --add-exports=java.management/sun.management=ALL-UNNAMED
         --add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED
         --add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED)

# shellcheck disable=SC2086
exec java -Xmx"$heap" -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError \
  "${opens[@]}" "${exports[@]}" \
  -Djava.io.tmpdir="$STATE_DIR/tmp" \
  ${FLINK_PEER_OPTS:-} \
  -cp "$jar" onceflow.peer.FlinkPeer
