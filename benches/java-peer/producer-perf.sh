#!/usr/bin/env bash
# Java peer for producer benchmarks: Apache Kafka's own ProducerPerformance (kafka-tools 4.1.1,
# official Java client) from the broker classpath, with every argument passed through, plus the
# CPU time its JVM used. Ends with one machine-readable line:
#
#   java-peer records=N records_per_sec=X mb_per_sec=Y cpu_seconds=Z
#
# Example (1,000,000 records of 100 bytes, acks=all, unthrottled, topic created first):
#   JAVA_PEER_CREATE_PARTITIONS=1 benches/java-peer/producer-perf.sh --topic perf-$RANDOM \
#     --num-records 1000000 --record-size 100 --throughput -1 \
#     --producer-props bootstrap.servers=127.0.0.1:9092 acks=all
#
# Environment: JAVA_PEER_CREATE_PARTITIONS=P creates --topic first (auto-create is off on the
# test broker); JAVA_PEER_OPTS replaces the JVM options; KAFKA_VERSION (default 4.1.1).
# mb_per_sec is ProducerPerformance's MB/sec (2^20 bytes, record values only).
# Exits non-zero (after printing the line) when fewer than --num-records were acknowledged.
tool=producer-perf
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ $# -gt 0 ] || { java -cp "$(jars_dir)/*" org.apache.kafka.tools.ProducerPerformance --help; exit 2; }

if [ -n "${JAVA_PEER_CREATE_PARTITIONS:-}" ]; then
  bootstrap=""
  for a in "$@"; do case $a in bootstrap.servers=*) bootstrap=${a#bootstrap.servers=} ;; esac; done
  maybe_create_topic "${bootstrap:-127.0.0.1:9092}" "$(arg_value --topic "$@" || true)"
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
# shellcheck disable=SC2046
run_measured "$out" java $(java_opts) -Dlog4j2.configurationFile="$peer_dir/log4j2.properties" \
  -cp "$(jars_dir)/*" org.apache.kafka.tools.ProducerPerformance "$@"
[ "$RC" -eq 0 ] || die "ProducerPerformance exited with status $RC"

# Final summary: "1000000 records sent, 251382.6 records/sec (23.97 MB/sec), 87.1 ms avg latency, ..."
summary=$(grep -E '^[0-9]+ records sent, ' "$out" | tail -1 || true)
[ -n "$summary" ] || die "no summary line in ProducerPerformance output"
read -r records rps mbps < <(sed -E 's/^([0-9]+) records sent, ([0-9.]+) records\/sec \(([0-9.]+) MB\/sec\).*/\1 \2 \3/' <<<"$summary")
echo "java-peer records=$records records_per_sec=$rps mb_per_sec=$mbps cpu_seconds=$CPU_SECONDS"
want=$(arg_value --num-records "$@" || true)
if [ -n "$want" ] && [ "$records" -lt "$want" ]; then
  die "only $records of $want records were sent successfully"
fi
