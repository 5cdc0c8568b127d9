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
#                  auto.create.topics.enable=false to test a broker that refuses); they come
#                  after every line the script writes, and the broker keeps the last value of a
#                  key, so they override anything (connections.max.reauth.ms=..., say). A value
#                  cannot contain ';' (so no JAAS config through here).
#   KAFKA_SECURITY 1, all, ssl, sasl_ssl or sasl_plaintext (all the same): the secured mode below;
#                  unset or empty: a PLAINTEXT-only broker as above. Single node only.
#
# Secured mode (KAFKA_SECURITY set, KAFKA_NODES=1): one broker with every listener, ports
# KAFKA_PORT..KAFKA_PORT+4 (all must be free):
#   KAFKA_PORT    PLAINTEXT on 127.0.0.1, as without KAFKA_SECURITY: principal User:ANONYMOUS,
#                 a super user (the tests' setup and admin, and the inter-broker listener)
#   KAFKA_PORT+1  CONTROLLER, PLAINTEXT on 127.0.0.1 (User:ANONYMOUS too)
#   KAFKA_PORT+2  SSL, ssl.client.auth=requested: server-only TLS and mutual TLS. With a client
#                 certificate the principal is its CN (CN=onceflow-client -> User:onceflow-client,
#                 by ssl.principal.mapping.rules); without one it is User:ANONYMOUS, a super user
#   KAFKA_PORT+3  SASL_SSL, mechanisms PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
#   KAFKA_PORT+4  SASL_PLAINTEXT, the same mechanisms
# The secured listeners bind 0.0.0.0 (a client may come through 127.0.0.2, where the broker's
# certificate does not match: the hostname-verification tests) and advertise 127.0.0.1.
#   Certificates (PEM, RSA 2048, 10 years), made with openssl once per state directory, in
#   $KAFKA_DIR/certs/: ca.pem/ca.key (the CA); broker.pem (broker then CA certificate, SAN
#   DNS:localhost and IP:127.0.0.1 only, serverAuth) and broker.key (PKCS#8, unencrypted);
#   broker-keystore.pem (broker.key then broker.pem: the broker's ssl.keystore.location);
#   client.pem/client.key (CN=onceflow-client, clientAuth, PKCS#8); other-ca.pem/other-ca.key
#   (an unrelated CA, for "wrong CA" tests).
#   Users: alice/alice-secret, bob/bob-secret, admin/admin-secret, for PLAIN (the listeners' JAAS
#   config) and SCRAM-SHA-256/512 (added when the storage is formatted). OAUTHBEARER takes Kafka's
#   unsecured JWS (OAuthBearerUnsecuredValidatorCallbackHandler): header {"alg":"none"}, an empty
#   signature (the token ends with '.'), claims "sub" (a string: the principal) and "exp" (a
#   number, seconds since the epoch, in the future) required; "iat" optional (if present, not in
#   the future and before exp); no scope required. E.g. for sub alice, exp 4102444800 (2100):
#   eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSIsImV4cCI6NDEwMjQ0NDgwMH0.
#   Authorization: StandardAuthorizer, super.users User:ANONYMOUS and User:admin, no ACL means
#   denied. Once per state directory, after the first start: User:alice and User:onceflow-client
#   may do anything on every topic, group and transactional id (literal '*'), and
#   IdempotentWrite and Describe on the cluster; User:bob may do nothing.
#   `start` prints the PLAINTEXT address as always and writes $KAFKA_DIR/security.env, lines
#   NAME=value (shell-quoted if needed): PLAINTEXT_BOOTSTRAP, SSL_BOOTSTRAP, SASL_SSL_BOOTSTRAP,
#   SASL_PLAINTEXT_BOOTSTRAP, CA_PEM, CLIENT_PEM, CLIENT_KEY, OTHER_CA_PEM (absolute paths).
#   Authentication failures and authorization denials are logged to $KAFKA_DIR/logs/security.log.
#   `stop`, `kill`, `restart` and `wipe` work as without KAFKA_SECURITY; a state directory
#   formatted in the other mode is wiped at `start`.
#   protocol-tests/secured-broker-check.sh checks all of this with Kafka's own Java tools.
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
KAFKA_SECURITY=${KAFKA_SECURITY:-}
case "$KAFKA_SECURITY" in
  '') ;;
  1|all|ssl|sasl_ssl|sasl_plaintext)
    # One broker carries every secured listener; a cluster would need a port scheme of its own.
    [ "$KAFKA_NODES" = 1 ] || { echo "kafka-broker: error: KAFKA_SECURITY needs a single-node broker (KAFKA_NODES=1), not KAFKA_NODES=$KAFKA_NODES" >&2; exit 2; } ;;
  *) echo "kafka-broker: error: KAFKA_SECURITY must be 1, all, ssl, sasl_ssl or sasl_plaintext (or unset), not $KAFKA_SECURITY" >&2; exit 2 ;;
esac
SSL_PORT=$((KAFKA_PORT + 2))
SASL_SSL_PORT=$((KAFKA_PORT + 3))
SASL_PLAINTEXT_PORT=$((KAFKA_PORT + 4))
secured() { [ -n "$KAFKA_SECURITY" ]; }
# security.env and server.properties name files under KAFKA_DIR: absolute paths, whatever the
# directory a test runs from.
if secured; then case "$KAFKA_DIR" in /*) ;; *) KAFKA_DIR=$PWD/$KAFKA_DIR ;; esac; fi

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

# The secured mode's certificates (see the header), made once per state directory. They are made
# in a scratch directory that is renamed into place at the end, so that an interrupted run leaves
# no half-made set to be reused. The extensions come from a config of our own, not from the
# system's openssl.cnf (whose defaults differ between distributions).
make_certs() {
  local dir=$KAFKA_DIR/certs f missing=0
  for f in ca.pem ca.key broker.pem broker.key broker-keystore.pem client.pem client.key other-ca.pem other-ca.key; do
    [ -s "$dir/$f" ] || missing=1
  done
  [ "$missing" = 0 ] && return 0
  command -v openssl >/dev/null || die "openssl not found: install it (apt-get install openssl)"
  local tmp=$KAFKA_DIR/certs.tmp
  rm -rf "$tmp"
  mkdir -p "$tmp"
  log "making certificates in $dir"
  cat >"$tmp/openssl.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[broker_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid,issuer
[client_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid,issuer
CNF
  # genpkey writes PKCS#8 ("BEGIN PRIVATE KEY"), unencrypted: what Kafka's PEM key store reads
  # without ssl.key.password. (set -e would be ignored in a subshell that is an if's or ||'s
  # condition, hence the status taken with set +e.)
  local rc
  set +e
  (
    set -e
    cd "$tmp"
    key() { openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1.key"; }
    ca() { # NAME CN
      key "$1"
      openssl req -x509 -new -config openssl.cnf -extensions ca_ext -key "$1.key" \
        -subj "/CN=$2" -days 3650 -sha256 -out "$1.pem"
    }
    leaf() { # NAME CN EXTENSIONS: signed by ca
      key "$1"
      openssl req -new -config openssl.cnf -key "$1.key" -subj "/CN=$2" -out "$1.csr"
      openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" \
        -days 3650 -sha256 -extfile openssl.cnf -extensions "$3" -out "$1.crt"
    }
    ca ca "onceflow test CA"
    ca other-ca "onceflow unrelated CA"
    leaf broker localhost broker_ext
    leaf client onceflow-client client_ext
    cat broker.crt ca.pem >broker.pem
    cat broker.key broker.pem >broker-keystore.pem
    mv client.crt client.pem
    rm -f ./*.csr broker.crt
  ) >"$KAFKA_DIR/certs.log" 2>&1
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then
    cat "$KAFKA_DIR/certs.log" >&2
    die "openssl could not make the certificates"
  fi
  rm -rf "$dir" "$KAFKA_DIR/certs.log"
  mv "$tmp" "$dir"
}

write_config() {
  mkdir -p "$NODE_DIR/data" "$NODE_DIR/logs"
  local voters="$NODE@127.0.0.1:$CONTROLLER_PORT" rf=1 isr=1 parts=1
  local listeners="PLAINTEXT://127.0.0.1:$NODE_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT"
  local advertised="PLAINTEXT://127.0.0.1:$NODE_PORT" protocols="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
  if secured; then
    listeners="$listeners,SSL://0.0.0.0:$SSL_PORT,SASL_SSL://0.0.0.0:$SASL_SSL_PORT,SASL_PLAINTEXT://0.0.0.0:$SASL_PLAINTEXT_PORT"
    advertised="$advertised,SSL://127.0.0.1:$SSL_PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT,SASL_PLAINTEXT://127.0.0.1:$SASL_PLAINTEXT_PORT"
    protocols="$protocols,SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"
  fi
  if [ "$KAFKA_NODES" = 3 ]; then
    voters="1@127.0.0.1:$((KAFKA_PORT + 1)),2@127.0.0.1:$((KAFKA_PORT + 3)),3@127.0.0.1:$((KAFKA_PORT + 5))"
    rf=3 isr=2 parts=3
  fi
  cat >"$NODE_DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=$NODE
controller.quorum.voters=$voters
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
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
# KIP-848 groups (group.protocol=consumer) take their session and heartbeat from the broker:
# the defaults (45 s, 5 s) would keep a killed member's partitions from the others for 45 s.
group.consumer.min.session.timeout.ms=6000
group.consumer.session.timeout.ms=10000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
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
  if secured; then write_security_config; fi
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
  if secured; then
    # Failed authentications (the Selector's "Failed authentication with ...", SSL handshakes
    # included) and the authorizer's denials are logged at INFO: into a file of their own, for
    # the tests that expect them (and whoever wonders why a client was refused).
    cat >>"$NODE_DIR/log4j2.properties" <<L4J
appender.security.type = File
appender.security.name = security
appender.security.fileName = $NODE_DIR/logs/security.log
appender.security.layout.type = PatternLayout
appender.security.layout.pattern = [%d] %p %m (%c)%n
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = info
logger.authorizer.additivity = false
logger.authorizer.appenderRef.security.ref = security
logger.selector.name = org.apache.kafka.common.network.Selector
logger.selector.level = info
logger.selector.additivity = false
logger.selector.appenderRef.security.ref = security
L4J
  fi
}

# The secured mode's server.properties lines (see the header). The broker's TLS key store and
# trust store are PEM files: ssl.keystore.location holds the key (PKCS#8, unencrypted, so no
# ssl.key.password) followed by the certificate chain.
write_security_config() {
  local certs=$KAFKA_DIR/certs listener mech
  cat >>"$NODE_DIR/server.properties" <<PROPS
ssl.keystore.type=PEM
ssl.keystore.location=$certs/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$certs/ca.pem
# Requested, not required: one listener for server-only TLS (principal User:ANONYMOUS) and
# mutual TLS (the principal is the certificate's CN, by the rule below).
listener.name.ssl.ssl.client.auth=requested
ssl.principal.mapping.rules=RULE:^CN=([^,]+)(,.*)?\$/\$1/,DEFAULT
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:admin
allow.everyone.if.no.acl.found=false
PROPS
  # Each SASL listener needs a JAAS entry per mechanism: PLAIN's holds its users; SCRAM's users
  # are in the metadata log (format_storage); OAUTHBEARER's validator is the unsecured-JWS one
  # (Kafka's default without a JWKS endpoint, named to make it plain).
  for listener in sasl_ssl sasl_plaintext; do
    cat >>"$NODE_DIR/server.properties" <<PROPS
listener.name.$listener.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";
PROPS
    for mech in scram-sha-256 scram-sha-512; do
      echo "listener.name.$listener.$mech.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;" >>"$NODE_DIR/server.properties"
    done
    cat >>"$NODE_DIR/server.properties" <<PROPS
listener.name.$listener.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.$listener.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler
PROPS
  done
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
  # SCRAM credentials live in the metadata log; the bootstrap records of the format are the way
  # to have them before the broker answers (no SCRAM user can be added over a SCRAM listener).
  local scram=() user mech
  if secured; then
    for user in alice bob admin; do
      for mech in SCRAM-SHA-256 SCRAM-SHA-512; do
        scram+=(--add-scram "$mech=[name=$user,password=$user-secret]")
      done
    done
  fi
  log "formatting $NODE_DIR/data at transaction.version=$KAFKA_TV"
  java -cp "$(java_cp)" kafka.tools.StorageTool format -t "$id" \
      -c "$NODE_DIR/server.properties" "${feature[@]}" ${scram[@]+"${scram[@]}"} \
      >"$NODE_DIR/logs/format.log" 2>&1 \
    || { cat "$NODE_DIR/logs/format.log" >&2; die "storage format failed"; }
  echo "$KAFKA_TV" >"$KAFKA_DIR/tv"
  if secured; then : >"$KAFKA_DIR/secured"; fi
}

# The secured listeners accept TCP connections (true without KAFKA_SECURITY).
secured_ports_open() {
  secured || return 0
  local port
  for port in "$SSL_PORT" "$SASL_SSL_PORT" "$SASL_PLAINTEXT_PORT"; do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || return 1
  done
}

# Ready means a TCP connect to the client port works and the server logged that it started
# (and, in the secured mode, the secured listeners accept connections too).
wait_ready() {
  local pid=$1 deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-120}))
  while [ $SECONDS -lt $deadline ]; do
    kill -0 "$pid" 2>/dev/null || { tail -40 "$NODE_DIR/logs/stdout.log" >&2; die "broker exited during start (logs in $NODE_DIR/logs)"; }
    if grep -q 'Kafka Server started' "$NODE_DIR/logs/server.log" 2>/dev/null \
       && (exec 3<>"/dev/tcp/127.0.0.1/$NODE_PORT") 2>/dev/null && secured_ports_open; then
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

# The secured mode's ACLs (see the header), through the PLAINTEXT listener (User:ANONYMOUS, a super
# user). They persist in the metadata log, so they are created once per state directory; the
# marker is written only when both AclCommand runs succeeded.
create_acls() {
  local marker=$KAFKA_DIR/acls.created
  [ -f "$marker" ] && return 0
  local who=(--allow-principal User:alice --allow-principal User:onceflow-client)
  log "creating ACLs for User:alice and User:onceflow-client"
  { java -cp "$(java_cp)" org.apache.kafka.tools.AclCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
        --add "${who[@]}" --operation All --topic '*' --group '*' --transactional-id '*' \
      && java -cp "$(java_cp)" org.apache.kafka.tools.AclCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
        --add "${who[@]}" --operation IdempotentWrite --operation Describe --cluster
  } >"$NODE_DIR/logs/acls.log" 2>&1 \
    || { tail -30 "$NODE_DIR/logs/acls.log" >&2; die "AclCommand failed (see $NODE_DIR/logs/acls.log)"; }
  : >"$marker"
}

# What a test needs to reach the secured listeners (see the header), written whole then renamed,
# so that a reader never sees half of it.
write_security_env() {
  local certs=$KAFKA_DIR/certs f=$KAFKA_DIR/security.env
  {
    printf '%s=%q\n' PLAINTEXT_BOOTSTRAP "127.0.0.1:$KAFKA_PORT" \
      SSL_BOOTSTRAP "127.0.0.1:$SSL_PORT" \
      SASL_SSL_BOOTSTRAP "127.0.0.1:$SASL_SSL_PORT" \
      SASL_PLAINTEXT_BOOTSTRAP "127.0.0.1:$SASL_PLAINTEXT_PORT" \
      CA_PEM "$certs/ca.pem" \
      CLIENT_PEM "$certs/client.pem" \
      CLIENT_KEY "$certs/client.key" \
      OTHER_CA_PEM "$certs/other-ca.pem"
  } >"$f.tmp"
  mv "$f.tmp" "$f"
}

# Launches the current node's JVM (formatted first if new); prints its pid.
launch() {
  if secured; then make_certs; fi
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
    if secured; then
      # Whether a broker we did not start is secured, and with which certificates, is unknown:
      # never used. But the port may be the broker's that `kill` just killed, whose JVM is still
      # exiting: its ports are free within seconds.
      local deadline=$((SECONDS + 30))
      while (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; do
        [ $SECONDS -lt $deadline ] || die "something else listens on 127.0.0.1:$KAFKA_PORT; the secured mode starts a broker of its own: pick another KAFKA_PORT"
        sleep 0.5
      done
    else
      log "something else already listens on 127.0.0.1:$KAFKA_PORT (another checkout's broker?); using it"
      addresses
      return 0
    fi
  fi
  # A state directory formatted at another transaction.version is wiped: tests ask for a level.
  if [ -f "$KAFKA_DIR/tv" ] && [ "$(cat "$KAFKA_DIR/tv")" != "$KAFKA_TV" ]; then
    stop_all
    rm -rf "$KAFKA_DIR"
  fi
  # So is one formatted in the other mode: the SCRAM users are added only at format time, and a
  # plain broker must not run with a secured one's ACLs and certificates (or the other way).
  local want=plain formatted=plain
  if secured; then want=secured; fi
  if [ -f "$KAFKA_DIR/secured" ]; then formatted=secured; fi
  if [ -f "$KAFKA_DIR/tv" ] && [ "$want" != "$formatted" ]; then
    log "$KAFKA_DIR was formatted in the other security mode: wiping it"
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
  if secured; then
    create_acls
    write_security_env
  fi
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
