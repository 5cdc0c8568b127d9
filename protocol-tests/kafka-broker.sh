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
# With KAFKA_NODES=3: a 3-node cluster, each node broker+controller (a 3-voter KRaft quorum),
# node N (1..3) on KAFKA_PORT + 2(N-1), its controller on the port after; replication factor 3
# and min.insync.replicas=2 for the internal topics and as the topics' defaults. `start` prints
# the three addresses comma-separated; `stop`, `wipe` act on every node, and per node:
#   protocol-tests/kafka-broker.sh kill N        # kill -9 node N
#   protocol-tests/kafka-broker.sh stop-node N   # controlled shutdown of node N (SIGTERM)
#   protocol-tests/kafka-broker.sh start-node N  # node N again, on its data
#
# Environment:
#   KAFKA_VERSION  broker version from Maven Central (default 4.1.1)
#   KAFKA_PORT     client port (default 9092); the controller uses KAFKA_PORT+1
#   KAFKA_TV       1 or 2: transaction.version the cluster is formatted with (default 2)
#   KAFKA_DIR      state directory (default <repo>/target/kafka-$KAFKA_PORT; node N of a cluster
#                  in its node-N/)
#   KAFKA_NODES    1 (default) or 3
#   KAFKA_EXTRA_PROPS  extra server.properties lines, separated by ';' (the broker runs with
#                  Kafka's defaults otherwise, auto.create.topics.enable=true included; add
#                  auto.create.topics.enable=false to test a broker that refuses)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
KAFKA_VERSION=${KAFKA_VERSION:-4.1.1}
KAFKA_PORT=${KAFKA_PORT:-9092}
KAFKA_TV=${KAFKA_TV:-2}
KAFKA_NODES=${KAFKA_NODES:-1}
KAFKA_DIR=${KAFKA_DIR:-$repo/target/kafka-$KAFKA_PORT}
LIB_DIR=$repo/target/kafka-lib/$KAFKA_VERSION
LOG4J_VERSION=2.24.3
case "$KAFKA_NODES" in 1|3) ;; *) echo "kafka-broker: error: KAFKA_NODES must be 1 or 3, not $KAFKA_NODES" >&2; exit 2 ;; esac

# The node the functions below act on (node 1 of a single-node broker lives in KAFKA_DIR).
use_node() { # N
  NODE=$1
  NODE_PORT=$((KAFKA_PORT + 2 * (NODE - 1)))
  CONTROLLER_PORT=$((NODE_PORT + 1))
  if [ "$KAFKA_NODES" = 1 ]; then NODE_DIR=$KAFKA_DIR; else NODE_DIR=$KAFKA_DIR/node-$NODE; fi
  PID_FILE=$NODE_DIR/broker.pid
}
use_node 1

log() { if [ "$KAFKA_NODES" = 1 ]; then printf 'kafka-broker: %s\n' "$*" >&2; else printf 'kafka-broker node %s: %s\n' "$NODE" "$*" >&2; fi; }
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
  mkdir -p "$NODE_DIR/data" "$NODE_DIR/logs"
  local voters="$NODE@127.0.0.1:$CONTROLLER_PORT" rf=1 isr=1 parts=1
  if [ "$KAFKA_NODES" = 3 ]; then
    voters="1@127.0.0.1:$((KAFKA_PORT + 1)),2@127.0.0.1:$((KAFKA_PORT + 3)),3@127.0.0.1:$((KAFKA_PORT + 5))"
    rf=3 isr=2 parts=3
  fi
  cat >"$NODE_DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=$NODE
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$NODE_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$NODE_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$NODE_DIR/data
num.partitions=1
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=$parts
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=$parts
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
transaction.max.timeout.ms=900000
PROPS
  if [ "$KAFKA_NODES" = 3 ]; then
    # A killed node is fenced (its partitions get new leaders) after broker.session.timeout.ms
    # without a heartbeat: 4 s instead of 9 s keeps the failover tests short.
    cat >>"$NODE_DIR/server.properties" <<PROPS
default.replication.factor=3
min.insync.replicas=2
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4000
PROPS
  fi
  if [ -n "${KAFKA_EXTRA_PROPS:-}" ]; then
    tr ';' '\n' <<<"$KAFKA_EXTRA_PROPS" >>"$NODE_DIR/server.properties"
  fi
  cat >"$NODE_DIR/log4j2.properties" <<L4J
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $NODE_DIR/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = info
L4J
}

java_cp() { echo "$LIB_DIR/jars/*"; }

# The cluster id: one per broker or cluster (every node of a cluster is formatted with it).
cluster_id() {
  local f=$KAFKA_DIR/cluster.id
  if [ ! -s "$f" ]; then
    mkdir -p "$KAFKA_DIR"
    java -cp "$(java_cp)" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1 >"$f"
  fi
  [ -s "$f" ] || die "StorageTool random-uuid printed nothing"
  cat "$f"
}

format_storage() {
  [ -f "$NODE_DIR/data/meta.properties" ] && return 0
  local id
  id=$(cluster_id)
  # Kafka 3.x knows no transaction.version level but 0, the classic protocol (KAFKA_TV=1's).
  local feature=(--feature "transaction.version=$KAFKA_TV")
  case "$KAFKA_VERSION" in
    3.*)
      [ "$KAFKA_TV" = 1 ] || die "transaction.version $KAFKA_TV needs Kafka 4.0 or later (KAFKA_VERSION=$KAFKA_VERSION): use KAFKA_TV=1"
      feature=() ;;
  esac
  log "formatting $NODE_DIR/data at transaction.version=$KAFKA_TV"
  java -cp "$(java_cp)" kafka.tools.StorageTool format -t "$id" \
      -c "$NODE_DIR/server.properties" "${feature[@]}" \
      >"$NODE_DIR/logs/format.log" 2>&1 \
    || { cat "$NODE_DIR/logs/format.log" >&2; die "storage format failed"; }
  echo "$KAFKA_TV" >"$KAFKA_DIR/tv"
}

# Ready means a TCP connect to the client port works and the server logged that it started.
wait_ready() {
  local pid=$1 deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-120}))
  while [ $SECONDS -lt $deadline ]; do
    kill -0 "$pid" 2>/dev/null || { tail -40 "$NODE_DIR/logs/stdout.log" >&2; die "broker exited during start (logs in $NODE_DIR/logs)"; }
    if grep -q 'Kafka Server started' "$NODE_DIR/logs/server.log" 2>/dev/null \
       && (exec 3<>"/dev/tcp/127.0.0.1/$NODE_PORT") 2>/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  die "broker did not become ready within ${KAFKA_START_TIMEOUT:-120}s (logs in $NODE_DIR/logs)"
}

addresses() {
  local out="127.0.0.1:$KAFKA_PORT"
  [ "$KAFKA_NODES" = 3 ] && out="$out,127.0.0.1:$((KAFKA_PORT + 2)),127.0.0.1:$((KAFKA_PORT + 4))"
  echo "$out"
}

# Launches the current node's JVM (formatted first if new); prints its pid.
launch() {
  write_config
  format_storage
  : >"$NODE_DIR/logs/server.log"
  nohup java -Xms512m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$NODE_DIR/log4j2.properties" \
      -cp "$(java_cp)" kafka.Kafka "$NODE_DIR/server.properties" \
      >"$NODE_DIR/logs/stdout.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$PID_FILE"
  echo "$pid"
}

start() {
  resolve_classpath
  if [ "$KAFKA_NODES" = 1 ] && ! running_pid >/dev/null \
     && (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; then
    log "something else already listens on 127.0.0.1:$KAFKA_PORT (another checkout's broker?); using it"
    addresses
    return 0
  fi
  # A state directory formatted at another transaction.version is wiped: tests ask for a level.
  if [ -f "$KAFKA_DIR/tv" ] && [ "$(cat "$KAFKA_DIR/tv")" != "$KAFKA_TV" ]; then
    stop_all
    rm -rf "$KAFKA_DIR"
  fi
  # Every node launched before any is waited for: a quorum of controllers is needed to start.
  local pids=() n pid
  for n in $(seq 1 "$KAFKA_NODES"); do
    use_node "$n"
    if pid=$(running_pid); then
      log "already running (pid $pid)"
    else
      pid=$(launch) || die "could not launch"
      pids+=("$n:$pid")
    fi
  done
  for spec in "${pids[@]}"; do
    use_node "${spec%%:*}"
    wait_ready "${spec#*:}"
    log "started (pid ${spec#*:}, transaction.version=$KAFKA_TV)"
  done
  addresses
}

node_arg() { # N: validated node number of a cluster
  [ "$KAFKA_NODES" = 3 ] || die "$1 needs KAFKA_NODES=3"
  case "${2:-}" in 1|2|3) use_node "$2" ;; *) die "$1 needs a node number 1, 2 or 3" ;; esac
}

start_node() {
  resolve_classpath
  local pid
  if pid=$(running_pid); then
    log "already running (pid $pid)"
  else
    pid=$(launch) || die "could not launch"
    wait_ready "$pid"
    log "started (pid $pid)"
  fi
  echo "127.0.0.1:$NODE_PORT"
}

stop_node() {
  local pid
  if pid=$(running_pid); then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped (pid $pid)"
  fi
  rm -f "$PID_FILE"
}

# Every node at once (one by one, the last nodes' controlled shutdowns would wait for a
# quorum that is gone); kill -9 what is left after 30 s.
stop_all() {
  local n pid pids=()
  for n in $(seq 1 "$KAFKA_NODES"); do
    use_node "$n"
    if pid=$(running_pid); then kill "$pid" 2>/dev/null || true; pids+=("$n:$pid"); fi
  done
  for spec in "${pids[@]}"; do
    use_node "${spec%%:*}"
    pid=${spec#*:}
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
    log "stopped (pid $pid)"
  done
}

kill9() {
  local pid
  if pid=$(running_pid); then kill -9 "$pid"; log "killed -9 (pid $pid)"; fi
  rm -f "$PID_FILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop_all ;;
  restart) stop_all; start ;;
  kill)
    if [ "$KAFKA_NODES" = 3 ]; then node_arg kill "${2:-}"; fi
    kill9 ;;
  start-node) node_arg start-node "${2:-}"; start_node ;;
  stop-node) node_arg stop-node "${2:-}"; stop_node ;;
  wipe) stop_all; rm -rf "$KAFKA_DIR" ;;
  classpath) resolve_classpath; echo "$LIB_DIR/jars" ;;
  *) echo "usage: $0 start|stop|restart|kill [N]|start-node N|stop-node N|wipe|classpath" >&2; exit 2 ;;
esac
