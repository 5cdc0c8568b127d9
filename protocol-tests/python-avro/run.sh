#!/usr/bin/env bash
# Runs the Python Avro interop peer (avro_peer.py: Apache Avro for Python, pinned in
# requirements.txt, plus the standard library), creating its virtualenv first if needed.
#
#   protocol-tests/python-avro/run.sh decode --registry URL                          < base64 lines
#   protocol-tests/python-avro/run.sh encode --registry URL --subject S --schema F.avsc < JSON lines
#   protocol-tests/python-avro/run.sh setup     # only create/refresh the virtualenv
#
# The virtualenv is <repo>/target/python-avro-venv (PYTHON_AVRO_VENV overrides it), made with
# python3 -m venv and pip install -r requirements.txt, again whenever requirements.txt is newer
# than it. Creation is serialized with flock, so tests may call this concurrently.
# Diagnostics go to stderr; stdout carries only data.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${PYTHON_AVRO_VENV:-$repo/target/python-avro-venv}
stamp=$venv/.requirements-installed

needs_setup() {
  [ -x "$venv/bin/python" ] && [ -f "$stamp" ] || return 0
  [ "$here/requirements.txt" -nt "$stamp" ]
}

setup() {
  command -v python3 >/dev/null || { echo "python-avro/run.sh: python3 not found" >&2; exit 1; }
  mkdir -p "$(dirname "$venv")"
  local log=$(dirname "$venv")/python-avro-venv.log
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check \
      -r "$here/requirements.txt"; } >"$log" 2>&1; then
    tail -30 "$log" >&2
    echo "python-avro/run.sh: could not set up $venv (python3-venv installed? full log: $log)" >&2
    exit 1
  fi
  touch "$stamp"
}

ensure_setup() {
  needs_setup || return 0
  mkdir -p "$(dirname "$venv")"
  if command -v flock >/dev/null; then
    exec 9>"$(dirname "$venv")/.python-avro-venv.lock"
    flock 9
    if needs_setup; then setup; fi
    flock -u 9
    exec 9>&-
  else
    setup
  fi
}

ensure_setup
if [ "${1:-}" = setup ]; then echo "$venv"; exit 0; fi
exec "$venv/bin/python" "$here/avro_peer.py" "$@"
