#!/usr/bin/env bash
# Checks a schema registry's Confluent-compatible REST API with curl and jq: registers Avro,
# Protobuf and JSON Schema schemas, reads them back by id, looks them up, checks compatibility,
# lists subjects, and checks the error answers (status and error_code). One line per check
# (PASS name / FAIL name: why), then "N passed, N failed"; exits 1 if any check failed.
#
#   protocol-tests/schema-registry-check.sh
#
# By default it starts a registry of its own with protocol-tests/schema-registry.sh (an empty
# Apicurio Registry, see there), runs the checks on it and stops it.
#
# Environment:
#   REGISTRY_URL   check this registry instead (its API base, e.g.
#                  http://127.0.0.1:8081/apis/ccompat/v7 or http://127.0.0.1:8081): nothing is
#                  started or stopped, and the subjects get a random suffix (a registry already in
#                  use may hold t-value)
#   REGISTRY_PORT  port of the registry it starts (default 18081); REGISTRY_DIR, REGISTRY_VERSION,
#                  REGISTRY_LEGACY_IDS and the rest as for schema-registry.sh
#   ANSWERS        a file to write every request and its exact answer to (markdown)
#   KEEP=1         leave the registry it started running
# The jq programs are in single quotes on purpose: their $names are jq's --arg variables.
# shellcheck disable=SC2016
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
registry=$here/schema-registry.sh
started=no
failed=0 passed=0
suffix=
CT='Content-Type: application/vnd.schemaregistry.v1+json'
work=$(mktemp -d "/tmp/schema-registry-check.XXXXXX")

log() { printf 'schema-registry-check: %s\n' "$*" >&2; }

for tool in curl jq; do
  command -v "$tool" >/dev/null || { log "$tool not found: install it (apt-get install $tool)"; exit 1; }
done

cleanup() {
  rm -rf "$work"
  if [ "$started" = yes ]; then
    if [ "${KEEP:-}" = 1 ]; then
      log "KEEP=1: registry left running at $BASE ($registry stop to stop it)"
    else
      bash "$registry" stop >/dev/null 2>&1 || true
    fi
  fi
}
trap cleanup EXIT

if [ -n "${REGISTRY_URL:-}" ]; then
  BASE=${REGISTRY_URL%/}
  suffix=-check-$$-$RANDOM
else
  export REGISTRY_PORT=${REGISTRY_PORT:-18081}
  BASE=$(bash "$registry" start) || { log "the registry did not start"; exit 1; }
  started=yes
fi
log "checking $BASE"

if [ -n "${ANSWERS:-}" ]; then
  {
    echo "# Schema registry answers"
    echo
    echo "Recorded by protocol-tests/schema-registry-check.sh on $(date -u '+%Y-%m-%d %H:%M:%SZ'), base URL \`$BASE\`."
    if [ "$started" = yes ]; then
      echo "Registry: Apicurio Registry ${REGISTRY_VERSION:-3.3.3} (protocol-tests/schema-registry.sh, in-memory H2, apicurio.ccompat.legacy-id-mode.enabled=${REGISTRY_LEGACY_IDS:-false})."
    fi
    echo "Requests with a body are sent with \`$CT\`."
    echo
  } >"$ANSWERS"
fi

# req TITLE METHOD PATH [BODY]: sets STATUS and BODY (and records the exchange).
req() {
  local title=$1 method=$2 path=$3 data=${4-}
  local args=(-s --max-time 30 -o "$work/body" -w '%{http_code}' -X "$method")
  if [ $# -ge 4 ]; then args+=(-H "$CT" --data-binary "$data"); fi
  STATUS=$(curl "${args[@]}" "$BASE$path") || STATUS="curl-failed($?)"
  BODY=$(cat "$work/body" 2>/dev/null || true)
  if [ -n "${ANSWERS:-}" ]; then
    {
      echo "### $title"
      echo
      echo "\`$method $path\`"
      if [ $# -ge 4 ]; then printf '\n```json\n%s\n```\n' "$data"; fi
      printf '\n→ HTTP %s\n\n```json\n%s\n```\n\n' "$STATUS" "$BODY"
    } >>"$ANSWERS"
  fi
}

pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
# expect NAME STATUS JQ [ARGS...]: the last answer had STATUS and its body satisfies JQ.
expect() {
  local name=$1 status=$2 filter=$3; shift 3
  if [ "$STATUS" != "$status" ]; then fail "$name" "HTTP $STATUS (want $status): $BODY"; return 1; fi
  if ! jq -e "$@" "$filter" >/dev/null 2>&1 <<<"$BODY"; then fail "$name" "answer $BODY does not satisfy $filter"; return 1; fi
  pass "$name"
}

# A request body {"schema": S} (plus "schemaType" when given).
body() { # SCHEMA [TYPE]
  if [ -n "${2:-}" ]; then jq -cn --arg s "$1" --arg t "$2" '{schemaType: $t, schema: $s}'
  else jq -cn --arg s "$1" '{schema: $s}'; fi
}

T=t-value$suffix P=p-value$suffix J=j-value$suffix U=u-value$suffix
AVRO1='{"type":"record","name":"T","namespace":"onceflow.test","fields":[{"name":"a","type":"string"}]}'
AVRO2='{"type":"record","name":"T","namespace":"onceflow.test","fields":[{"name":"a","type":"string"},{"name":"b","type":"int","default":0}]}'
AVRO_BAD='{"type":"record","name":"T","namespace":"onceflow.test","fields":[{"name":"a","type":"string"},{"name":"c","type":"int"}]}'
AVRO_OTHER='{"type":"record","name":"X","namespace":"onceflow.test","fields":[{"name":"z","type":"long"}]}'
PROTO='syntax = "proto3";
package onceflow.test;

message P {
  string a = 1;
  int64 n = 2;
}
'
JSONS='{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"type":"string"}},"required":["a"]}'

# 1. Avro registration
req "1. register an Avro schema" POST "/subjects/$T/versions" "$(body "$AVRO1")"
expect "register Avro: {\"id\":N}" 200 '.id | type == "number"' && ID_AVRO=$(jq .id <<<"$BODY") || ID_AVRO=-1
req "1b. register the same schema again" POST "/subjects/$T/versions" "$(body "$AVRO1")"
expect "register again: same id" 200 '.id == $id' --argjson id "$ID_AVRO"

# 2. read back by id
req "2. the Avro schema by id" GET "/schemas/ids/$ID_AVRO"
expect "GET /schemas/ids/N: the Avro schema" 200 '(.schema | fromjson) == ($s | fromjson) and ((.schemaType // "AVRO") == "AVRO")' --arg s "$AVRO1"

# 3. Protobuf and JSON Schema
req "3. register a Protobuf schema" POST "/subjects/$P/versions" "$(body "$PROTO" PROTOBUF)"
expect "register Protobuf" 200 '.id | type == "number"' && ID_PROTO=$(jq .id <<<"$BODY") || ID_PROTO=-1
req "3b. the Protobuf schema by id" GET "/schemas/ids/$ID_PROTO"
expect "GET /schemas/ids/N: Protobuf, schemaType PROTOBUF" 200 '.schemaType == "PROTOBUF" and (.schema | test("message P"))'
req "3c. register a JSON Schema" POST "/subjects/$J/versions" "$(body "$JSONS" JSON)"
expect "register JSON Schema" 200 '.id | type == "number"' && ID_JSON=$(jq .id <<<"$BODY") || ID_JSON=-1
req "3d. the JSON Schema by id" GET "/schemas/ids/$ID_JSON"
expect "GET /schemas/ids/N: JSON, schemaType JSON" 200 '.schemaType == "JSON" and ((.schema | fromjson).properties.a.type == "string")'
if [ "$ID_AVRO" != "$ID_PROTO" ] && [ "$ID_PROTO" != "$ID_JSON" ] && [ "$ID_AVRO" != "$ID_JSON" ]; then
  pass "three schemas, three ids ($ID_AVRO, $ID_PROTO, $ID_JSON)"
else
  fail "three schemas, three ids" "$ID_AVRO, $ID_PROTO, $ID_JSON"
fi

# 4. compatibility
req "4. compatibility of an incompatible schema before any config (compatibility level as found)" POST "/compatibility/subjects/$T/versions/latest" "$(body "$AVRO_BAD")"
req "4a. the global compatibility level" GET "/config"
req "4b. set the subject's compatibility to BACKWARD" PUT "/config/$T" '{"compatibility":"BACKWARD"}'
expect "PUT /config/{subject} BACKWARD" 200 '.compatibility == "BACKWARD"'
req "4c. the subject's compatibility level" GET "/config/$T"
expect "GET /config/{subject}: BACKWARD" 200 '.compatibilityLevel == "BACKWARD"'
req "4d. compatibility of an added field with a default" POST "/compatibility/subjects/$T/versions/latest" "$(body "$AVRO2")"
expect "compatible evolution: is_compatible true" 200 '.is_compatible == true'
req "4e. compatibility of an added field without a default" POST "/compatibility/subjects/$T/versions/latest" "$(body "$AVRO_BAD")"
expect "incompatible evolution: is_compatible false" 200 '.is_compatible == false'
req "4f. register the incompatible schema" POST "/subjects/$T/versions" "$(body "$AVRO_BAD")"
expect "register incompatible: 409, error_code 409" 409 '.error_code == 409'
req "4g. register the compatible evolution" POST "/subjects/$T/versions" "$(body "$AVRO2")"
expect "register the evolution: a new id" 200 '.id | type == "number" and . != $id' --argjson id "$ID_AVRO" && ID_AVRO2=$(jq .id <<<"$BODY") || ID_AVRO2=-1

# 5. lookup
req "5. look up the first Avro schema under its subject" POST "/subjects/$T" "$(body "$AVRO1")"
expect "lookup: id and version" 200 '.id == $id and .version == 1 and .subject == $s' --argjson id "$ID_AVRO" --arg s "$T"
req "5b. look up the evolution" POST "/subjects/$T" "$(body "$AVRO2")"
expect "lookup the evolution: version 2" 200 '.id == $id and .version == 2' --argjson id "$ID_AVRO2"
req "5c. the subject's versions" GET "/subjects/$T/versions"
expect "GET /subjects/{s}/versions: [1,2]" 200 '. == [1,2]'
req "5d. the subject's latest version" GET "/subjects/$T/versions/latest"
expect "GET /subjects/{s}/versions/latest: version 2" 200 '.version == 2 and .id == $id and .subject == $s' --argjson id "$ID_AVRO2" --arg s "$T"
req "5e. the subject's version 1" GET "/subjects/$T/versions/1"
expect "GET /subjects/{s}/versions/1" 200 '.version == 1 and .id == $id and ((.schema | fromjson) == ($a | fromjson))' --argjson id "$ID_AVRO" --arg a "$AVRO1"
req "5f. where the first Avro schema is used" GET "/schemas/ids/$ID_AVRO/versions"
expect "GET /schemas/ids/N/versions" 200 'any(.[]; .subject == $s and .version == 1)' --arg s "$T"

# Ids are Confluent's: the same schema under another subject gets the same id (not with
# apicurio.ccompat.legacy-id-mode.enabled=true, where ids are per version).
req "5g. the first Avro schema under another subject" POST "/subjects/$U/versions" "$(body "$AVRO1")"
if [ "${REGISTRY_LEGACY_IDS:-false}" = true ] && [ "$started" = yes ]; then
  expect "same schema, other subject: a new id (legacy-id mode)" 200 '.id != $id' --argjson id "$ID_AVRO"
else
  expect "same schema, other subject: same id (Confluent semantics)" 200 '.id == $id' --argjson id "$ID_AVRO"
fi

# 6. subjects
req "6. list the subjects" GET "/subjects"
expect "GET /subjects lists them" 200 'index($t) != null and index($p) != null and index($j) != null' --arg t "$T" --arg p "$P" --arg j "$J"

# Errors
req "E1. unknown schema id" GET "/schemas/ids/987654"
expect "unknown id: 404, error_code 40403" 404 '.error_code == 40403'
req "E2. unknown subject's versions" GET "/subjects/no-such-subject$suffix/versions"
expect "unknown subject: 404, error_code 40401" 404 '.error_code == 40401'
req "E3. unknown subject's latest version" GET "/subjects/no-such-subject$suffix/versions/latest"
expect "unknown subject, latest: 404, error_code 40401" 404 '.error_code == 40401'
req "E4. lookup under an unknown subject" POST "/subjects/no-such-subject$suffix" "$(body "$AVRO1")"
expect "lookup, unknown subject: 404, error_code 40401" 404 '.error_code == 40401'
req "E5. unknown version" GET "/subjects/$T/versions/99"
expect "unknown version: 404, error_code 40402" 404 '.error_code == 40402'
req "E6. lookup of a schema not registered under the subject" POST "/subjects/$T" "$(body "$AVRO_OTHER")"
expect "lookup, schema not there: 404, error_code 40403" 404 '.error_code == 40403'
req "E7. register an invalid Avro schema" POST "/subjects/bad-value$suffix/versions" "$(body '{"type":"recordz"}')"
expect "invalid schema: 422, error_code 42201" 422 '.error_code == 42201'

# Deletion (soft, then permanent)
req "D1. permanent delete before a soft one" DELETE "/subjects/$U?permanent=true"
expect "permanent delete first: 409, error_code 40405" 409 '.error_code == 40405'
req "D2. soft-delete a subject" DELETE "/subjects/$U"
expect "DELETE /subjects/{s}: [1]" 200 '. == [1]'
req "D3. the subjects, deleted ones included" GET "/subjects?deleted=true"
expect "GET /subjects?deleted=true still lists it" 200 'index($u) != null' --arg u "$U"
req "D4. permanently delete it" DELETE "/subjects/$U?permanent=true"
expect "DELETE /subjects/{s}?permanent=true: [1]" 200 '. == [1]'
req "D5. the subjects after it" GET "/subjects"
expect "GET /subjects no longer lists it" 200 'index($u) == null' --arg u "$U"

echo "$passed passed, $failed failed"
if [ -n "${ANSWERS:-}" ]; then log "answers written to $ANSWERS"; fi
[ "$failed" = 0 ]
