#!/usr/bin/env bash
# Fails if anything in the normal or build dependency tree of the package compiles C or links a
# system library. Benchmark peers live outside the package and are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(cargo tree -e normal,build --prefix none --edges normal,build | sed 's/ (\*)$//' | sort -u)
bad=$(printf '%s\n' "$tree" | awk '{print $1}' | grep -E '^(cc|cmake|bindgen|pkg-config|vcpkg|ring|aws-lc-rs|openssl|.*-sys)$' || true)
if [ -n "$bad" ]; then
  echo "check-pure-rust: crates that build C or link system libraries are in the tree:" >&2
  printf '  %s\n' $bad >&2
  exit 1
fi
echo "check-pure-rust: $(printf '%s\n' "$tree" | wc -l) crates, none builds C"
