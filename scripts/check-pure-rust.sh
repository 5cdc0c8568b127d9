#!/usr/bin/env bash
# Fails if anything in the normal or build dependency tree of the package compiles C or links a
# system library. Benchmark peers live outside the package and are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(cargo tree -e normal,build --prefix none --edges normal,build | sed 's/ (\*)$//' | sort -u)
# `-sys` crates usually wrap a C library; the ones below are pure Rust despite the name, checked
# by what they build, not by their name: no build script, no C sources, no `links`.
#   linux-raw-sys: Linux syscall numbers and structs as Rust (via rustix, via tempfile, via fjall).
pure_sys='^(linux-raw-sys)$'
bad=$(printf '%s\n' "$tree" | awk '{print $1}' | grep -vE "$pure_sys" | grep -E '^(cc|cmake|bindgen|pkg-config|vcpkg|ring|aws-lc-rs|openssl|.*-sys)$' || true)
if [ -n "$bad" ]; then
  echo "check-pure-rust: crates that build C or link system libraries are in the tree:" >&2
  printf '  %s\n' $bad >&2
  exit 1
fi
echo "check-pure-rust: $(printf '%s\n' "$tree" | wc -l) crates, none builds C"
