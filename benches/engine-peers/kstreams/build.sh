#!/usr/bin/env bash
# Builds the Kafka Streams peer's fat jar (mvn -q -B package) unless it is newer than every
# source; prints the jar's path on stdout. Maven's own output goes to stderr.
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
jar=$dir/target/onceflow-kstreams-peer.jar
if [ -f "$jar" ] && [ -z "$(find "$dir/pom.xml" "$dir/src" -newer "$jar" -print -quit)" ]; then
  echo "$jar"
  exit 0
fi
command -v mvn >/dev/null || { echo "kstreams build: needs Maven (mvn) and a JDK 17+" >&2; exit 1; }
log=$(mktemp)
if ! (cd "$dir" && mvn -q -B -Dstyle.color=never package -DskipTests) >"$log" 2>&1; then
  cat "$log" >&2; rm -f "$log"
  echo "kstreams build: mvn package failed" >&2; exit 1
fi
rm -f "$log"
[ -f "$jar" ] || { echo "kstreams build: no $jar after mvn package" >&2; exit 1; }
touch "$jar"
echo "$jar"
