#!/usr/bin/env bash
# Starts or stops a real single-node Apache Kafka broker (KRaft, broker+controller) on 127.0.0.1.
#
# The classpath is assembled from Maven Central with mvn, so no release tarball and no Docker are
# needed. Everything lives under target/kafka/ in the repository.
#
#   protocol-tests/kafka-broker.sh start   # prints the bootstrap address once the broker answers
#   protocol-tests/kafka-broker.sh stop
#   protocol-tests/kafka-broker.sh restart # stop then start on the same data (no reformat)
#   protocol-tests/kafka-broker.sh kill    # kill -9, for fault tests
#   protocol-tests/kafka-broker.sh classpath  # only resolve the jars
#
# Environment:
#   KAFKA_VERSION  broker version from Maven Central (default 4.1.1)
#   KAFKA_PORT     client port (default 9092); the controller uses KAFKA_PORT+1
#   KAFKA_TV       1 or 2: transaction.version the cluster is formatted with (default 2)
#   KAFKA_DIR      state directory (default <repo>/target/kafka-$KAFKA_PORT)
#   KAFKA_EXTRA_PROPS  extra server.properties lines, separated by ';' (the broker runs with
#                  Kafka's defaults otherwise, auto.create.topics.enable=true included; add
#                  auto.create.topics.enable=false to test a broker that refuses)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
KAFKA_VERSION=${KAFKA_VERSION:-4.1.1}
KAFKA_PORT=${KAFKA_PORT:-9092}
KAFKA_TV=${KAFKA_TV:-2}
CONTROLLER_PORT=$((KAFKA_PORT + 1))
KAFKA_DIR=${KAFKA_DIR:-$repo/target/kafka-$KAFKA_PORT}
LIB_DIR=$repo/target/kafka-lib/$KAFKA_VERSION
PID_FILE=$KAFKA_DIR/broker.pid
LOG4J_VERSION=2.24.3

log() { printf 'kafka-broker: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

resolve_classpath() {
  if [ -f "$LIB_DIR/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install maven)"
  command -v java >/dev/null || die "java not found: install a JDK 17+ (apt-get install openjdk-17-jdk-headless)"
  mkdir -p "$LIB_DIR"
  local pom=$LIB_DIR/pom.xml
  cat >"$pom" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>onceflow</groupId><artifactId>kafka-broker-classpath</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
POM
  log "resolving Apache Kafka $KAFKA_VERSION from Maven Central (first run only)"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$LIB_DIR/jars" >"$LIB_DIR/mvn.log" 2>&1 \
    || { tail -30 "$LIB_DIR/mvn.log" >&2; die "mvn could not resolve kafka_2.13:$KAFKA_VERSION (see $LIB_DIR/mvn.log)"; }
  # Two SLF4J bindings (slf4j-reload4j from kafka-tools, log4j-slf4j-impl) make the broker log
  # through whichever loads first; keep only log4j2's.
  rm -f "$LIB_DIR"/jars/slf4j-reload4j-*.jar "$LIB_DIR"/jars/reload4j-*.jar
  touch "$LIB_DIR/.complete"
}

running_pid() {
  [ -f "$PID_FILE" ] || return 1
  local pid; pid=$(cat "$PID_FILE")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

write_config() {
  mkdir -p "$KAFKA_DIR/data" "$KAFKA_DIR/logs"
  cat >"$KAFKA_DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
transaction.max.timeout.ms=900000
PROPS
  if [ -n "${KAFKA_EXTRA_PROPS:-}" ]; then
    tr ';' '\n' <<<"$KAFKA_EXTRA_PROPS" >>"$KAFKA_DIR/server.properties"
  fi
  cat >"$KAFKA_DIR/log4j2.properties" <<L4J
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $KAFKA_DIR/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = info
L4J
}

java_cp() { echo "$LIB_DIR/jars/*"; }

format_storage() {
  [ -f "$KAFKA_DIR/data/meta.properties" ] && return 0
  local id
  id=$(java -cp "$(java_cp)" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
  [ -n "$id" ] || die "StorageTool random-uuid printed nothing"
  log "formatting $KAFKA_DIR/data at transaction.version=$KAFKA_TV"
  java -cp "$(java_cp)" kafka.tools.StorageTool format -t "$id" \
      -c "$KAFKA_DIR/server.properties" --feature "transaction.version=$KAFKA_TV" \
      >"$KAFKA_DIR/logs/format.log" 2>&1 \
    || { cat "$KAFKA_DIR/logs/format.log" >&2; die "storage format failed"; }
  echo "$KAFKA_TV" >"$KAFKA_DIR/tv"
}

# Ready means a TCP connect to the client port works and the server logged that it started.
wait_ready() {
  local pid=$1 deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-120}))
  while [ $SECONDS -lt $deadline ]; do
    kill -0 "$pid" 2>/dev/null || { tail -40 "$KAFKA_DIR/logs/stdout.log" >&2; die "broker exited during start (logs in $KAFKA_DIR/logs)"; }
    if grep -q 'Kafka Server started' "$KAFKA_DIR/logs/server.log" 2>/dev/null \
       && (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  die "broker did not become ready within ${KAFKA_START_TIMEOUT:-120}s (logs in $KAFKA_DIR/logs)"
}

start() {
  resolve_classpath
  if pid=$(running_pid); then
    log "already running (pid $pid)"
    echo "127.0.0.1:$KAFKA_PORT"
    return 0
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; then
    log "something else already listens on 127.0.0.1:$KAFKA_PORT (another checkout's broker?); using it"
    echo "127.0.0.1:$KAFKA_PORT"
    return 0
  fi
  # A state directory formatted at another transaction.version is wiped: tests ask for a level.
  if [ -f "$KAFKA_DIR/tv" ] && [ "$(cat "$KAFKA_DIR/tv")" != "$KAFKA_TV" ]; then
    rm -rf "$KAFKA_DIR"
  fi
  write_config
  format_storage
  : >"$KAFKA_DIR/logs/server.log"
  nohup java -Xms512m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" \
      -cp "$(java_cp)" kafka.Kafka "$KAFKA_DIR/server.properties" \
      >"$KAFKA_DIR/logs/stdout.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$PID_FILE"
  wait_ready "$pid"
  log "started (pid $pid, transaction.version=$KAFKA_TV)"
  echo "127.0.0.1:$KAFKA_PORT"
}

stop() {
  local pid
  if pid=$(running_pid); then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped (pid $pid)"
  fi
  rm -f "$PID_FILE"
}

kill9() {
  local pid
  if pid=$(running_pid); then kill -9 "$pid"; log "killed -9 (pid $pid)"; fi
  rm -f "$PID_FILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  kill) kill9 ;;
  wipe) stop; rm -rf "$KAFKA_DIR" ;;
  classpath) resolve_classpath; echo "$LIB_DIR/jars" ;;
  *) echo "usage: $0 start|stop|restart|kill|wipe|classpath" >&2; exit 2 ;;
esac
