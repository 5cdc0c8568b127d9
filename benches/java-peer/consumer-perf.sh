#!/usr/bin/env bash
# Java peer for consumer benchmarks: Apache Kafka's own ConsumerPerformance (kafka-tools 4.1.1,
# official Java client) from the broker classpath, with every argument passed through, plus the
# CPU time its JVM used. Ends with one machine-readable line:
#
#   java-peer records=N records_per_sec=X mb_per_sec=Y cpu_seconds=Z
#
# Example (read 1,000,000 records from the start of a topic with a fresh group):
#   benches/java-peer/consumer-perf.sh --bootstrap-server 127.0.0.1:9092 --topic perf-123 \
#     --messages 1000000 --group java-peer-$RANDOM
#
# records_per_sec / mb_per_sec are ConsumerPerformance's nMsg.sec / MB.sec: over the whole run,
# group join included. The line before the final one ("java-peer-detail ...") also gives the
# join (rebalance) time and the fetch-only rates. Do not pass --show-detailed-stats (its output
# has no summary line to parse). Environment: as producer-perf.sh (JAVA_PEER_OPTS, KAFKA_VERSION;
# JAVA_PEER_CREATE_PARTITIONS creates --topic first).
# Exits non-zero (after printing the line) when fewer than --messages records were consumed.
tool=consumer-perf
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ $# -gt 0 ] || { java -cp "$(jars_dir)/*" org.apache.kafka.tools.ConsumerPerformance --help; exit 2; }
maybe_create_topic "$(arg_value --bootstrap-server "$@" || echo 127.0.0.1:9092)" "$(arg_value --topic "$@" || true)"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
# shellcheck disable=SC2046
run_measured "$out" java $(java_opts) -Dlog4j2.configurationFile="$peer_dir/log4j2.properties" \
  -cp "$(jars_dir)/*" org.apache.kafka.tools.ConsumerPerformance "$@"
[ "$RC" -eq 0 ] || die "ConsumerPerformance exited with status $RC"

# Summary: "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
# rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec" (10 fields, ", "-separated).
summary=$(awk -F', ' 'NF == 10 && $3 ~ /^[0-9.]+$/ && $5 ~ /^[0-9]+$/' "$out" | tail -1)
[ -n "$summary" ] || die "no summary line in ConsumerPerformance output"
IFS=, read -r _start _end mb mbps records rps rebalance_ms fetch_ms fetch_mbps fetch_rps <<<"${summary//, /,}"
echo "java-peer-detail mb=$mb rebalance_ms=$rebalance_ms fetch_ms=$fetch_ms fetch_mb_per_sec=$fetch_mbps fetch_records_per_sec=$fetch_rps"
echo "java-peer records=$records records_per_sec=$rps mb_per_sec=$mbps cpu_seconds=$CPU_SECONDS"
if [ -n "$(arg_value --messages "$@" || true)" ] && [ "$records" -lt "$(arg_value --messages "$@")" ]; then
  die "consumed $records of $(arg_value --messages "$@") requested records (timed out?)"
fi
