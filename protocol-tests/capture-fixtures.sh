#!/usr/bin/env bash
# Regenerates fixtures/: record batches written by the official Java client (kafka-clients 4.1.1)
# to a real Apache Kafka 4.1.1 broker, copied byte for byte from the broker's log segment files.
#
#   protocol-tests/kafka-broker.sh start      # if not already running
#   protocol-tests/capture-fixtures.sh        # rewrites fixtures/*.input.jsonl, *.log, *.expected*.jsonl
#   protocol-tests/capture-fixtures.sh NAME.. # only those fixtures (e.g. transactional-zstd); the
#                                             # other files in fixtures/ are left untouched
#
# For each fixture <name> it
#   1. writes fixtures/<name>.input.jsonl (deterministic content, fixed timestamps),
#   2. deletes and recreates the single-partition topic fixture-<name>,
#   3. produces the input with protocol-tests/java/interop.sh (fixed batch boundaries: a long
#      linger.ms plus an explicit flush every N records, or one batch per transaction),
#   4. waits until no transaction is open (last stable offset == high watermark),
#   5. reads the topic back with the Java consumer (read_uncommitted; the transactional ones also
#      read_committed, into <name>.expected-committed.jsonl) into fixtures/<name>.expected.jsonl,
#      and checks it equals the input (read_committed: the input minus the aborted records),
#   6. copies <log.dirs>/fixture-<name>-0/00000000000000000000.log to fixtures/<name>.log.
# Topics get retention.ms=-1 and segment.ms=Long.MAX so the old fixed timestamps neither expire
# the data nor roll segments.
# The fixture-* topics are left on the broker (small) so tests may also fetch them live.
#
# Environment: KAFKA_PORT (default 9092), KAFKA_DIR (default <repo>/target/kafka-$KAFKA_PORT),
# as for kafka-broker.sh. Needs python3 (input generation and checks), java, mvn.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
KAFKA_PORT=${KAFKA_PORT:-9092}
KAFKA_DIR=${KAFKA_DIR:-$repo/target/kafka-$KAFKA_PORT}
BOOTSTRAP=127.0.0.1:$KAFKA_PORT
DATA=$KAFKA_DIR/data
OUT=$repo/fixtures
INTEROP=$here/java/interop.sh

log() { printf 'capture-fixtures: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v python3 >/dev/null || die "python3 not found"
[ -d "$DATA" ] || die "no broker data directory at $DATA (start it: protocol-tests/kafka-broker.sh start)"
(exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null || die "no broker on $BOOTSTRAP (protocol-tests/kafka-broker.sh start)"
"$INTEROP" build >/dev/null
mkdir -p "$OUT"

ALL=(plain gzip snappy lz4 zstd headers nulls idempotent transactional transactional-zstd)
if [ $# -gt 0 ]; then
  for n in "$@"; do
    [[ " ${ALL[*]} " == *" $n "* ]] || die "unknown fixture '$n' (known: ${ALL[*]})"
  done
  SELECTED=("$@")
else
  SELECTED=("${ALL[@]}")
fi
wanted() { [[ " ${SELECTED[*]} " == *" $1 "* ]]; }

# ------------------------------------------------------------------------------------------------
# Inputs. Timestamps are fixed and in the past (the broker rejects CreateTime more than
# log.message.timestamp.after.max.ms = 1 h in the future).
gen_inputs() {
  python3 - "$OUT" "${SELECTED[@]}" <<'PY'
import base64, json, sys
out = sys.argv[1]
selected = set(sys.argv[2:])
T0 = 1700000000000  # 2023-11-14T22:13:20Z

def b(x):
    if x is None:
        return None
    if isinstance(x, str):
        x = x.encode()
    return base64.b64encode(x).decode()

def rec(key, value, ts, headers=(), partition=0):
    return {"partition": partition, "key": b(key), "value": b(value), "timestamp": ts,
            "headers": [{"key": k, "value": b(v)} for k, v in headers]}

def write(name, recs):
    if name not in selected:
        return
    with open(f"{out}/{name}.input.jsonl", "w") as f:
        for r in recs:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")

# plain: 30 records, 3 batches of 10. Record 15 has a timestamp earlier than its batch's first
# record (negative timestamp delta); record 25's is far later (large delta).
plain = []
for i in range(30):
    ts = T0 + i * 10
    if i == 15: ts = T0 - 1000
    if i == 25: ts = T0 + 86_400_000
    plain.append(rec(f"key-{i:02d}", f"plain value {i:02d}: the quick brown fox", ts))
write("plain", plain)

# one topic per codec: 20 records, 2 batches of 10, compressible values, a header on every 4th.
for codec in ["gzip", "snappy", "lz4", "zstd"]:
    rs = []
    for i in range(20):
        hs = [("codec", codec)] if i % 4 == 0 else []
        rs.append(rec(f"{codec}-key-{i:02d}", f"{codec} record {i:02d} " * 3, T0 + 1000 + i, hs))
    write(codec, rs)

# headers: 12 records, 2 batches of 6.
hdr_sets = [
    [],
    [("single", "one")],
    [("dup", "first"), ("dup", "second"), ("dup", "third")],
    [("nullvalue", None)],
    [("empty", "")],
    [("dup", "a"), ("other", "x"), ("dup", None), ("dup", "b")],
    [("", "empty key")],
    [("unicode-\u043a\u043b\u044e\u0447-\u2713", "\u00e9t\u00e9 \u2603".encode())],
    [("binary", bytes(range(0, 256, 17)))],
    [("h%d" % j, "v%d" % j) for j in range(10)],
    [("null-a", None), ("null-a", None)],
    [("trace-id", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), ("dup", "again")],
]
write("headers", [rec(f"hk-{i:02d}", f"headers record {i:02d}", T0 + 2000 + i, hs)
                  for i, hs in enumerate(hdr_sets)])

# nulls: null vs empty keys and values (partition left to the producer: a null partition).
cases = [
    (None, "value without key"),
    ("key-without-value", None),
    (None, None),
    ("", "empty key"),
    ("empty value", ""),
    ("", ""),
    (None, ""),
    ("", None),
]
write("nulls", [rec(k, v, T0 + 3000 + i, partition=None) for i, (k, v) in enumerate(cases)])

# idempotent: 25 records, batches of 10, 10, 5 (base sequences 0, 10, 20).
write("idempotent", [rec(f"idem-{i:02d}", f"idempotent value {i:02d}", T0 + 4000 + i) for i in range(25)])

# transactional: 15 records, transactions of 5: commit, abort, commit.
write("transactional", [rec(f"txn-{i:02d}", f"transactional value {i:02d} ({['commit', 'abort', 'commit'][i // 5]})",
                            T0 + 5000 + i) for i in range(15)])

# transactional-zstd: zstd-compressed transactions of 5, commit and abort alternating, with 2
# plain (non-transactional) records between the 2nd and 3rd transaction. In log order:
#   txn 1 (commit) input 0-4, txn 2 (abort) 5-9, plain 10-11, txn 3 (commit) 12-16,
#   txn 4 (abort) 17-21, txn 5 (commit) 22-26.
# Produced by three calls (see TXN_ZSTD_PARTS below): input 0-9 transactionally, 10-11 plain,
# 12-26 transactionally again with the same transactional.id.
tz = []
for i in range(27):
    if i in (10, 11):
        tz.append(rec(f"tz-key-{i:02d}", f"txn-zstd plain record {i:02d} " * 3, T0 + 6000 + i,
                      [("producer", "plain")]))
        continue
    t = i // 5 if i < 10 else (i - 2) // 5          # transaction 0..4
    label = ["commit", "abort"][t % 2]
    hs = [("txn", f"{t + 1}")] if (i if i < 10 else i - 2) % 5 == 0 else []
    tz.append(rec(f"tz-key-{i:02d}", f"txn-zstd value {i:02d} ({label}) " * 3, T0 + 6000 + i, hs))
write("transactional-zstd", tz)
PY
}

# ------------------------------------------------------------------------------------------------
recreate_topic() {
  local topic=$1
  "$INTEROP" delete-topic --bootstrap "$BOOTSTRAP" --topic "$topic" --if-exists true 2>/dev/null || true
  # The fixed timestamps are years old: without these configs time-based retention (7 days by
  # default) would delete the data, and the broker would roll a new segment when a batch's
  # timestamp is more than segment.ms past the segment's first one (e.g. a transaction marker,
  # which carries the broker's current time).
  "$INTEROP" create-topic --bootstrap "$BOOTSTRAP" --topic "$topic" --partitions 1 \
      --config retention.ms=-1 --config segment.ms=9223372036854775807 2>/dev/null
}

# Checks that expected (consumer output) holds exactly the input records (skipping any given
# as "skip" indexes) in order, at increasing offsets on partition 0.
check_roundtrip() {
  python3 - "$@" <<'PY'
import json, sys
inp, exp = sys.argv[1], sys.argv[2]
skip = set(int(x) for x in sys.argv[3].split(",")) if len(sys.argv) > 3 and sys.argv[3] else set()
ins = [json.loads(l) for l in open(inp) if l.strip()]
ins = [r for i, r in enumerate(ins) if i not in skip]
outs = [json.loads(l) for l in open(exp) if l.strip()]
assert len(ins) == len(outs), f"{exp}: {len(outs)} records, input has {len(ins)}"
last = -1
for a, o in zip(ins, outs):
    assert o["partition"] == 0 and o["offset"] > last, o
    last = o["offset"]
    for f in ("key", "value", "timestamp", "headers"):
        assert a[f] == o[f], (f, a, o)
PY
}

# Normally the partition has one segment, 00000000000000000000.log; should it have rolled, the
# segments are concatenated in offset order (segment files are plain sequences of batches).
copy_segment() {
  local name=$1 dir=$DATA/fixture-$1-0
  [ -f "$dir/00000000000000000000.log" ] || die "segment $dir/00000000000000000000.log not found"
  local segs; segs=$(cd "$dir" && ls ./*.log | sort)
  [ "$(echo "$segs" | wc -l)" -eq 1 ] || log "$name: $(echo "$segs" | wc -l) segments, concatenating"
  (cd "$dir" && cat $segs) >"$OUT/$name.log"
}

# produce_to NAME INPUT [produce options]: one interop produce call into fixture-NAME.
produce_to() {
  local name=$1 input=$2; shift 2
  local topic=fixture-$name
  "$INTEROP" produce --bootstrap "$BOOTSTRAP" --topic "$topic" --input "$input" --acks all "$@" 2>/dev/null \
    || { "$INTEROP" produce --bootstrap "$BOOTSTRAP" --topic "$topic" --input "$input" "$@" >&2 || true; die "$name: produce failed"; }
}

capture() {
  local name=$1 expect=$2; shift 2
  log "$name: producing to fixture-$name"
  recreate_topic "fixture-$name"
  produce_to "$name" "$OUT/$name.input.jsonl" "$@"
  finish_capture "$name" "$expect"
}

# After producing: wait for all markers, read back (read_uncommitted), copy the segment.
finish_capture() {
  local name=$1 expect=$2
  local topic=fixture-$name
  "$INTEROP" offsets --bootstrap "$BOOTSTRAP" --topic "$topic" --wait-stable-ms 30000 >/dev/null
  "$INTEROP" consume --bootstrap "$BOOTSTRAP" --topic "$topic" --output "$OUT/$name.expected.jsonl" \
      --expect "$expect" --exact true --isolation read_uncommitted 2>/dev/null \
    || die "$name: consume did not read exactly $expect records"
  copy_segment "$name"
}

LINGER=(--linger-ms 600000)

gen_inputs
if wanted plain; then
  capture plain 30 --compression none --idempotent false "${LINGER[@]}" --flush-every 10
fi
for codec in gzip snappy lz4 zstd; do
  if wanted "$codec"; then
    capture "$codec" 20 --compression "$codec" --idempotent false "${LINGER[@]}" --flush-every 10
  fi
done
if wanted headers; then
  capture headers 12 --compression none --idempotent false "${LINGER[@]}" --flush-every 6
fi
if wanted nulls; then
  capture nulls 8 --compression none --idempotent false "${LINGER[@]}" --flush-every 4
fi
if wanted idempotent; then
  capture idempotent 25 --compression none --idempotent true "${LINGER[@]}" --flush-every 10
fi
if wanted transactional; then
  capture transactional 15 --compression none --transactional-id onceflow-fixture-txn \
      --txn-size 5 --abort-every 2 "${LINGER[@]}"
  "$INTEROP" consume --bootstrap "$BOOTSTRAP" --topic fixture-transactional \
      --output "$OUT/transactional.expected-committed.jsonl" --expect 10 --exact true \
      --isolation read_committed 2>/dev/null || die "transactional: read_committed did not read exactly 10 records"
fi
if wanted transactional-zstd; then
  # Three produce calls on one partition, so the plain records land between transactions:
  # input lines 1-10 as transactions of 5 (commit, abort), lines 11-12 with a plain
  # non-transactional producer (one batch), lines 13-27 as transactions of 5 (commit, abort,
  # commit; a new producer instance with the same transactional.id, so a bumped epoch).
  # Every data batch is zstd; markers are never compressed.
  name=transactional-zstd
  parts=$(mktemp -d)
  sed -n '1,10p' "$OUT/$name.input.jsonl" >"$parts/txn-a.jsonl"
  sed -n '11,12p' "$OUT/$name.input.jsonl" >"$parts/plain.jsonl"
  sed -n '13,27p' "$OUT/$name.input.jsonl" >"$parts/txn-b.jsonl"
  log "$name: producing to fixture-$name"
  recreate_topic "fixture-$name"
  produce_to "$name" "$parts/txn-a.jsonl" --compression zstd --transactional-id onceflow-fixture-txn-zstd \
      --txn-size 5 --abort-every 2 "${LINGER[@]}"
  produce_to "$name" "$parts/plain.jsonl" --compression zstd --idempotent false "${LINGER[@]}" --flush-every 2
  produce_to "$name" "$parts/txn-b.jsonl" --compression zstd --transactional-id onceflow-fixture-txn-zstd \
      --txn-size 5 --abort-every 2 "${LINGER[@]}"
  rm -r "$parts"
  finish_capture "$name" 27
  "$INTEROP" consume --bootstrap "$BOOTSTRAP" --topic "fixture-$name" \
      --output "$OUT/$name.expected-committed.jsonl" --expect 17 --exact true \
      --isolation read_committed 2>/dev/null || die "$name: read_committed did not read exactly 17 records"
fi

for name in "${SELECTED[@]}"; do
  check_roundtrip "$OUT/$name.input.jsonl" "$OUT/$name.expected.jsonl" || die "$name: read-back differs from input"
done
if wanted transactional; then
  check_roundtrip "$OUT/transactional.input.jsonl" "$OUT/transactional.expected-committed.jsonl" 5,6,7,8,9 \
    || die "transactional: read_committed read-back is not the committed records"
fi
if wanted transactional-zstd; then
  # Aborted: transactions 2 (input 5-9) and 4 (input 17-21).
  check_roundtrip "$OUT/transactional-zstd.input.jsonl" "$OUT/transactional-zstd.expected-committed.jsonl" \
      5,6,7,8,9,17,18,19,20,21 || die "transactional-zstd: read_committed read-back is not the committed records"
fi

# Summary of the captured segments: batches, records, codecs, control batches.
python3 - "$OUT" <<'PY'
import json, struct, sys, glob, os
out = sys.argv[1]
codecs = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
print(f"{'fixture':<20}{'bytes':>7}{'batches':>8}{'control':>8}{'records':>8}{'expected':>9}  codec  producer")
for path in sorted(glob.glob(f"{out}/*.log")):
    name = os.path.basename(path)[:-4]
    data = open(path, "rb").read()
    pos = batches = control = records = 0
    kinds = set(); pids = set()
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        magic = data[pos + 16]
        assert magic == 2, f"{name}: magic {magic} at {pos}"
        attrs, = struct.unpack_from(">h", data, pos + 21)
        pid, = struct.unpack_from(">q", data, pos + 43)
        count, = struct.unpack_from(">i", data, pos + 57)
        batches += 1
        if attrs & 0x20:
            control += 1
        else:
            records += count
            kinds.add(codecs[attrs & 7])
        if pid >= 0:
            pids.add("txn" if attrs & 0x10 else "idempotent")
        pos += 12 + length
    assert pos == len(data), f"{name}: trailing bytes"
    n = sum(1 for l in open(f"{out}/{name}.expected.jsonl") if l.strip())
    print(f"{name:<20}{len(data):>7}{batches:>8}{control:>8}{records:>8}{n:>9}  {','.join(sorted(kinds)):<6} {','.join(sorted(pids)) or '-'}")
PY
log "done: fixtures in $OUT"
