#!/usr/bin/env bash
# Builds the franz-go peer into <repo>/target/franz-go-peer/franz-go-peer (git-ignored, or $OUT)
# and prints that path. Needs Go (go.mod says which; github.com/twmb/franz-go and its
# dependencies come from the Go module proxy, checked against go.sum). Writes a .build-info next
# to the binary (Go version, franz-go version, time). `build.sh --check` only checks that Go is
# there (one line on stderr and status 1 if not).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${OUT:-$repo/target/franz-go-peer/franz-go-peer}
command -v go >/dev/null || { echo "franz-go-peer: error: go not found: install Go 1.26 or newer (https://go.dev/dl/) for the franz-go peer" >&2; exit 1; }
if [ "${1:-}" = --check ]; then exit 0; fi
mkdir -p "$(dirname "$out")"
cd "$here"
go build -trimpath -o "$out" .
{ echo "go: $(go env GOVERSION)"
  echo "franz-go: $(go list -m -f '{{.Version}}' github.com/twmb/franz-go)"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; } >"$out.build-info"
echo "$out"
