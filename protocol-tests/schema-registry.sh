#!/usr/bin/env bash
# Starts or stops a real Apicurio Registry (3.3.3 by default) on 127.0.0.1, with in-memory storage
# and no authentication, serving the Confluent Schema Registry API (ccompat) under
#   http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7
#
# The registry comes from Maven Central with mvn, no Docker: the Quarkus fast-jar distribution
# that the apicurio-registry-app module attaches to its release, io.apicurio:apicurio-registry-app:
# VERSION:tar.gz:all (quarkus-run.jar, lib/, app/, quarkus/: ~159 MB), unpacked under
# target/schema-registry-$REGISTRY_PORT/: Apicurio's release build of the app (quarkus-maven-plugin,
# Quarkus 3.33.3.1) run as is, with java -jar quarkus-run.jar.
# Why not the plain app jar: apicurio-registry-app.jar is the module's unaugmented jar (a Quarkus
# application needs its build step), and rebuilding it here with quarkus-maven-plugin is not
# possible: its dependency apicurio-registry-schema-util-provider 3.3.3 (as 3.3.2, 3.2.1) is not
# served by the Maven proxy here, nor is the parent POM of 3.3.2 (nor of 3.0.9, by the proxy's
# list).
#
#   protocol-tests/schema-registry.sh start     # prints the base URL once the ccompat API answers
#   protocol-tests/schema-registry.sh stop      # SIGTERM, kill -9 after 30 s
#   protocol-tests/schema-registry.sh restart   # stop then start: an empty registry again
#   protocol-tests/schema-registry.sh kill      # kill -9
#   protocol-tests/schema-registry.sh classpath # only resolve (alias: fetch); prints the
#                                               # directory holding quarkus-run.jar
#   protocol-tests/schema-registry.sh java      # prints the Java 21+ it would run with
#   protocol-tests/schema-registry-check.sh     # registers and reads schemas, fails if any is off
#
# Environment:
#   REGISTRY_VERSION  apicurio-registry-app version from Maven Central (default 3.3.3; built for
#                     Java 21, with Quarkus 3.33.3.1)
#   REGISTRY_PORT     HTTP port on 127.0.0.1 (default 8081). The Quarkus management interface
#                     (/health, /metrics) is on a random free port of 127.0.0.1, written in the
#                     log's "Management interface listening on" line.
#   REGISTRY_DIR      state directory (default <repo>/target/schema-registry-$REGISTRY_PORT):
#                     registry.pid, logs/registry.log (the JVM's output, one access-log line per
#                     request), tmp/. The distribution is unpacked once per checkout, in
#                     <repo>/target/schema-registry-dist/$REGISTRY_VERSION/.
#   REGISTRY_JAVA     the java to run it with: it needs Java 21 or newer (Java 17 fails with
#                     UnsupportedClassVersionError). Default: the first of $JAVA_HOME/bin/java,
#                     java on PATH, /usr/lib/jvm/*/bin/java (newest first) that is 21+.
#   REGISTRY_JAVA_OPTS JVM options (default -Xms64m -Xmx512m -XX:+UseSerialGC)
#   REGISTRY_LEGACY_IDS true or false (default false): apicurio.ccompat.legacy-id-mode.enabled,
#                     see "Ids" below
#   REGISTRY_EXTRA_PROPS extra configuration, key=value pairs separated by ';', passed as system
#                     properties after the script's own (so they override them), e.g.
#                     'apicurio.ccompat.max-subjects=5000'
#   REGISTRY_START_TIMEOUT seconds `start` waits for the API to answer (default 180)
#
# Configuration the script sets (all others are the application's defaults, in application.
# properties inside app/apicurio-registry-app-*.jar):
#   storage: apicurio.storage.kind=sql, apicurio.storage.sql.kind=h2 and the datasource URL
#     jdbc:h2:mem:...: in-memory H2 (these are Apicurio 3's defaults, set explicitly). Nothing
#     survives a stop: every start is an empty registry.
#   auth: none (Apicurio's defaults, set explicitly): OIDC tenant off
#     (quarkus.oidc.tenant-enabled=false), no basic client credentials, no role- or owner-based
#     authorization. The log says "Authentication chain: [none]".
#   ccompat: on by default in Apicurio 3, nothing to enable; /apis/ccompat/v7 is served (v6 is
#     not, in 3.x: 404). Apicurio's own API is under /apis/registry/v3 (GET .../system/info).
#     Its default compatibility level is NONE (GET /config); tests that need rules PUT /config or
#     /config/{subject} (the check script sets BACKWARD on its subject). Beware: on a registry
#     where no level was ever PUT, POST /compatibility/... still answers is_compatible false for
#     an incompatible change (while registering it succeeds); after PUT /config NONE it answers
#     true, as Confluent does. Set the level before relying on that endpoint.
#   deletions: apicurio.rest.deletion.{group,artifact,artifact-version}.enabled=true, so that
#     DELETE /subjects/{s}?permanent=true works as on Confluent (off by default in Apicurio).
#   tmp: java.io.tmpdir, apicurio.storage.snapshot.location and apicurio.import.work-dir in
#     $REGISTRY_DIR/tmp (the defaults are /tmp).
#
# Ids: the Confluent wire format carries a 4-byte schema id that GET /schemas/ids/{id} resolves.
# Apicurio keeps two: the contentId (one per distinct content, shared by every subject and version
# that registered the same schema) and the globalId (one per artifact version).
# apicurio.ccompat.legacy-id-mode.enabled=false, the default chosen here, makes the ccompat API
# speak contentIds everywhere: POST /subjects/{s}/versions returns {"id": contentId}, and
# /schemas/ids/{id}, the lookup's "id", GET /subjects/{s}/versions/{v}'s "id" take or give the same
# number. That is Confluent's own semantics (a schema id is registry-wide and the same schema under
# two subjects gets the same id).
# With REGISTRY_LEGACY_IDS=true the API speaks globalIds instead (the older behaviour): still
# registry-wide and self-consistent, but the same schema under two subjects gets two ids.
# Either way the id that POST returns is the one to put in the wire format and to ask
# /schemas/ids/{id} for. Ids are not always consecutive (gaps were seen after refused
# registrations). With legacy-id mode, GET /schemas/ids/{unknown} answers 404 with error_code
# 40401 ("Subject 'gid-N' not found.") instead of Confluent's 40403: one more reason for the
# default; schema-registry-check.sh fails that one check in legacy mode.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
REGISTRY_VERSION=${REGISTRY_VERSION:-3.3.3}
REGISTRY_PORT=${REGISTRY_PORT:-8081}
REGISTRY_DIR=${REGISTRY_DIR:-$repo/target/schema-registry-$REGISTRY_PORT}
REGISTRY_JAVA_OPTS=${REGISTRY_JAVA_OPTS:--Xms64m -Xmx512m -XX:+UseSerialGC}
REGISTRY_LEGACY_IDS=${REGISTRY_LEGACY_IDS:-false}
REGISTRY_START_TIMEOUT=${REGISTRY_START_TIMEOUT:-180}
case "$REGISTRY_DIR" in /*) ;; *) REGISTRY_DIR=$PWD/$REGISTRY_DIR ;; esac
case "$REGISTRY_LEGACY_IDS" in true|false) ;; *) echo "schema-registry: error: REGISTRY_LEGACY_IDS must be true or false, not $REGISTRY_LEGACY_IDS" >&2; exit 2 ;; esac
# The unpacked distribution, shared by every registry of the checkout (175 MB each otherwise).
DIST_ROOT=$repo/target/schema-registry-dist
DIST_DIR=$DIST_ROOT/$REGISTRY_VERSION
PID_FILE=$REGISTRY_DIR/registry.pid
LOG_FILE=$REGISTRY_DIR/logs/registry.log
BASE_URL=http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7
# Pinned: the super POM's 2.8 has no copy -Dartifact.
DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1

log() { printf 'schema-registry: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

resolve() {
  if [ -f "$DIST_DIR/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install maven)"
  command -v curl >/dev/null || die "curl not found: install it (apt-get install curl)"
  mkdir -p "$DIST_ROOT"
  # Two registries starting at once (the two transaction versions' test runs) resolve once.
  exec 9>"$DIST_ROOT/.lock"
  flock 9
  if [ -f "$DIST_DIR/.complete" ]; then exec 9>&-; return 0; fi
  local download=$DIST_ROOT/download-$REGISTRY_VERSION
  rm -rf "$DIST_DIR" "$download"
  mkdir -p "$DIST_DIR" "$download"
  local artifact=io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all
  log "resolving $artifact from Maven Central (first run only, ~159 MB)"
  # No project needed: copy runs on Maven's standalone POM, from the download directory so that
  # no pom.xml around is picked up.
  (cd "$download" && mvn -B "$DEPENDENCY_PLUGIN:copy" -Dartifact="$artifact" \
      -DoutputDirectory="$download" -Dmdep.overWriteReleases=true) \
      >"$DIST_ROOT/mvn.log" 2>&1 \
    || { tail -30 "$DIST_ROOT/mvn.log" >&2; die "mvn could not resolve $artifact (see $DIST_ROOT/mvn.log)"; }
  tar -xzf "$download/apicurio-registry-app-$REGISTRY_VERSION-all.tar.gz" -C "$DIST_DIR" \
    || die "could not unpack the distribution"
  rm -rf "$download"
  [ -f "$DIST_DIR/quarkus-run.jar" ] || die "no quarkus-run.jar in the distribution ($DIST_DIR)"
  touch "$DIST_DIR/.complete"
  exec 9>&-
}

java_major() { # JAVA: prints its major version (17, 21, 25...)
  "$1" -XshowSettings:properties -version 2>&1 \
    | sed -n 's/^ *java\.specification\.version = \(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -1
}

find_java() {
  local candidates=() j major
  if [ -n "${REGISTRY_JAVA:-}" ]; then
    major=$(java_major "$REGISTRY_JAVA" || true)
    if [ -z "$major" ] || [ "$major" -lt 21 ]; then
      die "REGISTRY_JAVA=$REGISTRY_JAVA is not a Java 21+ (version: ${major:-unknown})"
    fi
    echo "$REGISTRY_JAVA"; return 0
  fi
  if [ -n "${JAVA_HOME:-}" ]; then candidates+=("$JAVA_HOME/bin/java"); fi
  if command -v java >/dev/null; then candidates+=("$(command -v java)"); fi
  while IFS= read -r j; do candidates+=("$j"); done < <(printf '%s\n' /usr/lib/jvm/*/bin/java | sort -rV)
  for j in "${candidates[@]}"; do
    [ -x "$j" ] || continue
    major=$(java_major "$j" || true)
    if [ -n "$major" ] && [ "$major" -ge 21 ]; then echo "$j"; return 0; fi
  done
  die "no Java 21+ found (Apicurio Registry $REGISTRY_VERSION is built for Java 21; Java 17 cannot load it): install one, or set REGISTRY_JAVA to its java"
}

running_pid() {
  [ -f "$PID_FILE" ] || return 1
  local pid; pid=$(cat "$PID_FILE")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# The readiness test: the ccompat API lists subjects.
answers() { curl -sf -o /dev/null --max-time 5 "$BASE_URL/subjects"; }

launch() { # JAVA
  local java=$1
  mkdir -p "$REGISTRY_DIR/logs" "$REGISTRY_DIR/tmp"
  local props=(
    -Dquarkus.http.host=127.0.0.1
    -Dquarkus.http.port="$REGISTRY_PORT"
    -Dquarkus.management.host=127.0.0.1
    -Dquarkus.management.port=0
    -Djava.io.tmpdir="$REGISTRY_DIR/tmp"
    -Dapicurio.storage.kind=sql
    -Dapicurio.storage.sql.kind=h2
    -Dapicurio.datasource.url="jdbc:h2:mem:registry-$REGISTRY_PORT"
    -Dapicurio.storage.snapshot.location="$REGISTRY_DIR/tmp"
    -Dapicurio.import.work-dir="$REGISTRY_DIR/tmp"
    -Dquarkus.oidc.tenant-enabled=false
    -Dapicurio.authn.basic-client-credentials.enabled=false
    -Dapicurio.auth.role-based-authorization=false
    -Dapicurio.auth.owner-only-authorization=false
    -Dapicurio.ccompat.legacy-id-mode.enabled="$REGISTRY_LEGACY_IDS"
    -Dapicurio.rest.deletion.group.enabled=true
    -Dapicurio.rest.deletion.artifact.enabled=true
    -Dapicurio.rest.deletion.artifact-version.enabled=true
  )
  local kv
  if [ -n "${REGISTRY_EXTRA_PROPS:-}" ]; then
    while IFS= read -r kv; do [ -n "$kv" ] && props+=("-D$kv"); done < <(tr ';' '\n' <<<"$REGISTRY_EXTRA_PROPS")
  fi
  # shellcheck disable=SC2086 # REGISTRY_JAVA_OPTS is a list of options
  (cd "$REGISTRY_DIR" && exec "$java" $REGISTRY_JAVA_OPTS "${props[@]}" -jar "$DIST_DIR/quarkus-run.jar") \
    >"$LOG_FILE" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$PID_FILE"
  echo "$pid"
}

wait_ready() { # PID
  local pid=$1 deadline=$((SECONDS + REGISTRY_START_TIMEOUT))
  until answers; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -40 "$LOG_FILE" >&2
      rm -f "$PID_FILE"
      die "the registry exited during startup (see $LOG_FILE)"
    fi
    if [ $SECONDS -ge $deadline ]; then
      tail -40 "$LOG_FILE" >&2
      die "the registry did not answer on $BASE_URL within ${REGISTRY_START_TIMEOUT}s (pid $pid still running; see $LOG_FILE)"
    fi
    sleep 0.25
  done
}

start() {
  resolve
  local pid
  if pid=$(running_pid); then
    wait_ready "$pid"
    log "already running (pid $pid)"
    echo "$BASE_URL"
    return 0
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$REGISTRY_PORT") 2>/dev/null; then
    if answers; then
      log "something else already serves the ccompat API on 127.0.0.1:$REGISTRY_PORT (another checkout's registry?); using it"
      echo "$BASE_URL"
      return 0
    fi
    die "something else listens on 127.0.0.1:$REGISTRY_PORT and does not serve $BASE_URL: pick another REGISTRY_PORT"
  fi
  local java
  java=$(find_java) || exit 1
  pid=$(launch "$java") || die "could not launch"
  wait_ready "$pid"
  log "started (pid $pid, Apicurio Registry $REGISTRY_VERSION, legacy-id-mode=$REGISTRY_LEGACY_IDS)"
  echo "$BASE_URL"
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
  classpath|fetch) resolve; echo "$DIST_DIR" ;;
  java) find_java ;;
  *) echo "usage: $0 start|stop|restart|kill|classpath|fetch|java" >&2; exit 2 ;;
esac
