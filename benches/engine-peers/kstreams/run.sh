#!/usr/bin/env bash
# Runs one Kafka Streams peer job until killed (the contract of benches/engine-peers/*/run.sh).
# Environment: BOOTSTRAP, JOB (cleansing | per-driver-hourly | driver-shifts | rides-and-fares),
# INPUT (the rides), OUTPUT, INTERVAL_MS (commit.interval.ms), GUARANTEE (exactly-once |
# at-least-once), STATE_DIR (state.dir; reused by a restart after a kill), NAME (application.id,
# unique per run); for rides-and-fares also FARES (the fares topic). Prints `peer: started` to
# stderr once the application is RUNNING. The process this script was started as becomes the
# JVM (exec). Optional: KSTREAMS_JAVA_OPTS (replaces the JVM options below), KSTREAMS_PROPS
# ("key=value ..." extra Streams/client properties, for experiments only), JOIN_GRACE_MS
# (rides-and-fares: the join windows' grace, default 60000; inputs of more than one partition
# need it to cover their event-time span, see README.md).
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
jar=$dir/target/onceflow-kstreams-peer.jar
[ -f "$jar" ] || jar=$("$dir/build.sh")
for v in BOOTSTRAP JOB INPUT OUTPUT INTERVAL_MS GUARANTEE STATE_DIR NAME; do
  [ -n "${!v:-}" ] || { echo "kstreams run: set $v" >&2; exit 2; }
done
if [ "$JOB" = rides-and-fares ] && [ -z "${FARES:-}" ]; then
  echo "kstreams run: set FARES (the fares topic) for rides-and-fares" >&2; exit 2
fi
mkdir -p "$STATE_DIR"
# The JVM options of Kafka's own scripts (kafka-run-class.sh), with a 1 GiB heap.
opts=${KSTREAMS_JAVA_OPTS:--Xmx1g -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true}
# shellcheck disable=SC2086
exec java $opts -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dorg.slf4j.simpleLogger.logFile=System.err \
  -jar "$jar"
