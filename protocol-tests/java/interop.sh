#!/usr/bin/env bash
# Runs the Java interop peer (official Apache Kafka client 4.1.1), building it first if needed.
#
#   protocol-tests/java/interop.sh <subcommand> --bootstrap HOST:PORT --topic T [options]
#   protocol-tests/java/interop.sh --help
#   protocol-tests/java/interop.sh build      # only (re)build target/interop.jar
#
# The jar is rebuilt when pom.xml or any source file is newer than it. Builds are serialized with
# flock, so tests may call this concurrently. Diagnostics go to stderr; stdout carries only data.
# INTEROP_JAVA_OPTS overrides the JVM options (default: small heap, fast start).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
jar=$here/target/interop.jar

# The stamp is written once a build has finished (jar and lib/ both complete), and removed
# before one starts: a caller that checks while another builds sees no stamp and waits for the
# lock, instead of running a jar whose lib/ is still being copied (NoClassDefFoundError).
stamp=$here/target/.built

needs_build() {
  [ -f "$stamp" ] && [ -f "$jar" ] && [ -d "$here/target/lib" ] || return 0
  [ -n "$(find "$here/pom.xml" "$here/src" -newer "$stamp" -print -quit)" ]
}

build() {
  command -v mvn >/dev/null || { echo "interop.sh: mvn not found (apt-get install maven)" >&2; exit 1; }
  mkdir -p "$here/target"
  local log=$here/target/build.log
  rm -f "$stamp"
  if ! mvn -q -B -f "$here/pom.xml" package >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "interop.sh: build failed (full log: $log)" >&2
    exit 1
  fi
  touch "$jar" "$stamp"
}

ensure_built() {
  needs_build || return 0
  mkdir -p "$here/target"
  if command -v flock >/dev/null; then
    exec 9>"$here/target/.build.lock"
    flock 9
    if needs_build; then build; fi
    flock -u 9
    exec 9>&-
  else
    build
  fi
}

ensure_built
if [ "${1:-}" = build ]; then echo "$jar"; exit 0; fi
# shellcheck disable=SC2086
exec java ${INTEROP_JAVA_OPTS:--Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1} -jar "$jar" "$@"
