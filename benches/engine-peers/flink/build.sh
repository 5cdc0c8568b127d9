#!/usr/bin/env bash
# Builds the Flink peer's shaded jar (mvn -q -B package) unless it is newer than every source
# (pom.xml, src/), and prints the jar's path on stdout. Maven's own output goes to stderr.
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
jar=$dir/target/onceflow-flink-peer.jar

stale() {
  [ -f "$jar" ] || return 0
  [ -n "$(find "$dir/pom.xml" "$dir/src" -newer "$jar" -print -quit)" ]
}

if stale; then
  command -v mvn >/dev/null || { echo "build.sh: mvn (Maven) is not installed" >&2; exit 1; }
  # Maven 3.8's -q still prints bare colour resets: strip escape sequences from what it says.
  (cd "$dir" && mvn -q -B -Dstyle.color=never package -DskipTests 2>&1) | sed 's/\x1b\[[0-9;]*m//g' >&2
  [ -f "$jar" ] || { echo "build.sh: mvn package made no $jar" >&2; exit 1; }
  touch "$jar"
fi
echo "$jar"
