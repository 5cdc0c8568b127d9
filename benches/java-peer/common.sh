# Shared by producer-perf.sh and consumer-perf.sh, and by benches/run-producer-comparison.sh
# and benches/run-consumer-comparison.sh (sourced, not run).
set -euo pipefail

peer_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$peer_dir/../.." && pwd)
KAFKA_VERSION=${KAFKA_VERSION:-4.1.1}

die() { printf '%s: error: %s\n' "$tool" "$*" >&2; exit 1; }

# The broker's classpath (kafka_2.13 + kafka-tools, resolved from Maven Central by the broker
# script on first use) contains ProducerPerformance / ConsumerPerformance / TopicCommand.
jars_dir() {
  local d=$repo/target/kafka-lib/$KAFKA_VERSION/jars
  if [ ! -f "$repo/target/kafka-lib/$KAFKA_VERSION/.complete" ]; then
    KAFKA_VERSION=$KAFKA_VERSION "$repo/protocol-tests/kafka-broker.sh" classpath >/dev/null
  fi
  [ -d "$d" ] || die "no Kafka classpath at $d"
  echo "$d"
}

# JVM options as in Kafka's kafka-*-perf-test.sh (KAFKA_HEAP_OPTS=-Xmx512M + kafka-run-class.sh's
# performance options); JAVA_PEER_OPTS replaces them.
java_opts() {
  echo "${JAVA_PEER_OPTS:--Xmx512M -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true}"
}

# The value following option $1 in the remaining arguments, if any.
arg_value() {
  local want=$1; shift
  while [ $# -gt 0 ]; do
    if [ "$1" = "$want" ] && [ $# -ge 2 ]; then echo "$2"; return 0; fi
    case $1 in "$want"=*) echo "${1#*=}"; return 0 ;; esac
    shift
  done
  return 1
}

# JAVA_PEER_CREATE_PARTITIONS=P: create the --topic (if missing) with P partitions first, since
# the test broker has auto.create.topics.enable=false.
maybe_create_topic() {
  local bootstrap=$1 topic=$2
  [ -n "${JAVA_PEER_CREATE_PARTITIONS:-}" ] || return 0
  [ -n "$topic" ] || die "JAVA_PEER_CREATE_PARTITIONS needs --topic"
  java -cp "$(jars_dir)/*" -Dlog4j2.configurationFile="$peer_dir/log4j2.properties" \
      org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --create --if-not-exists \
      --topic "$topic" --partitions "$JAVA_PEER_CREATE_PARTITIONS" --replication-factor 1 >&2
}

# run_measured OUTFILE CMD...: runs CMD with its stdout+stderr shown and saved to OUTFILE, and
# sets CPU_SECONDS to the user+sys CPU time of CMD's process (bash `times` in a subshell whose
# only child is CMD, so no /usr/bin/time is needed) and RC to its exit status.
run_measured() {
  local out=$1; shift
  local tf; tf=$(mktemp)
  set +e
  { ( "$@"; rc=$?; times >&3; exit $rc ) 2>&1 | tee "$out"; } 3>"$tf"
  RC=${PIPESTATUS[0]}
  set -e
  # `times` prints the shell's own user/sys, then its children's: "0m12.345s 0m1.234s".
  CPU_SECONDS=$(sed -n 2p "$tf" | awk '
    function secs(t,   m, s) { m = t; sub(/m.*/, "", m); s = t; sub(/^[0-9]+m/, "", s); sub(/s$/, "", s); return m * 60 + s }
    { printf "%.3f", secs($1) + secs($2) }')
  rm -f "$tf"
}

# TLS mode of the comparison scripts (TLS_CA set): checks the CA file and that the secured broker
# of protocol-tests/kafka-broker.sh is asked for (KAFKA_SECURITY: without it, the script's own
# `kafka-broker.sh start` would take the secured broker's state directory for the other mode's and
# wipe it), and defaults BOOTSTRAP to its SSL listener (KAFKA_PORT + 2) and LOG_DIR to its data.
# Where the clients connect and the broker's log directory, with TLS_CA or without: sets
# BOOTSTRAP and LOG_DIR (unless given) and, through tls_args, the clients' TLS arguments.
broker_setup() {
  if [ -z "${TLS_CA:-}" ]; then
    BOOTSTRAP=${BOOTSTRAP:-127.0.0.1:9092}
    LOG_DIR=${LOG_DIR:-$repo/target/kafka-9092/data}
    tls_args
    return 0
  fi
  [ -r "$TLS_CA" ] || die "TLS_CA=$TLS_CA: no such readable file"
  TLS_CA=$(cd "$(dirname "$TLS_CA")" && pwd)/$(basename "$TLS_CA")
  [ -n "${KAFKA_SECURITY:-}" ] || die "TLS_CA needs the secured broker: pass KAFKA_SECURITY=1 and the KAFKA_PORT and KAFKA_DIR it was started with (protocol-tests/kafka-broker.sh)"
  local port=${KAFKA_PORT:-9092}
  BOOTSTRAP=${BOOTSTRAP:-127.0.0.1:$((port + 2))}
  LOG_DIR=${LOG_DIR:-${KAFKA_DIR:-$repo/target/kafka-$port}/data}
  case $BOOTSTRAP in
    *:$((port + 2))) ;;
    *) echo "$tool: warning: BOOTSTRAP=$BOOTSTRAP is not the secured broker's SSL listener (port $((port + 2)) for KAFKA_PORT=$port)" >&2 ;;
  esac
  tls_args
}

# The arguments that make each client connect as TLS_CA says (empty arrays without it):
# onceflow_tls for every onceflow-perf command that talks to BOOTSTRAP, java_tls for the Java
# tools' --producer-props / --consumer.config, peer_tls for franz-go-peer and rdkafka-perf.
tls_args() {
  onceflow_tls=() java_tls=() peer_tls=()
  [ -n "${TLS_CA:-}" ] || return 0
  onceflow_tls=(-X security.protocol=SSL -X ssl.ca.location="$TLS_CA")
  java_tls=(security.protocol=SSL ssl.truststore.type=PEM ssl.truststore.location="$TLS_CA")
  peer_tls=(--tls-ca "$TLS_CA")
}
