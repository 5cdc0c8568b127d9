#!/usr/bin/env bash
# Builds the librdkafka peer into <repo>/target/librdkafka-peer/rdkafka-perf (git-ignored, or
# $OUT) with the Makefile and prints that path. Needs a C compiler, make and Debian's
# librdkafka-dev. Writes a .build-info next to the binary (librdkafka-dev version, compiler,
# time). `build.sh --check` only checks the prerequisites (one line on stderr and status 1 if
# one is missing).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${OUT:-$repo/target/librdkafka-peer/rdkafka-perf}
missing=()
command -v "${CC:-cc}" >/dev/null || missing+=(build-essential)
command -v make >/dev/null || missing+=(make)
if ! dpkg -s librdkafka-dev >/dev/null 2>&1 && [ ! -f /usr/include/librdkafka/rdkafka.h ]; then missing+=(librdkafka-dev); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "librdkafka-peer: error: missing for the librdkafka peer: install them with apt-get install -y ${missing[*]}" >&2
  exit 1
fi
if [ "${1:-}" = --check ]; then exit 0; fi
make -s -C "$here" OUT="$out" >&2
{ echo "librdkafka-dev: $(dpkg-query -W -f '${Version}' librdkafka-dev 2>/dev/null || echo unknown)"
  echo "cc: $("${CC:-cc}" --version 2>/dev/null | head -1)"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; } >"$out.build-info"
echo "$out"
