#!/usr/bin/env python3
"""Python Avro interop peer for onceflow's schema-registry tests.

Works on framed bytes only (no Kafka): the Confluent wire format, magic byte 0, the schema id as a
4-byte big-endian int, then the Avro binary encoding of the value. Avro binary comes from Apache
Avro for Python (the `avro` package, pinned in requirements.txt); everything else is the standard
library (urllib talks to the registry's Confluent-compatible API).

  avro_peer.py decode --registry URL
      stdin: one base64 framed record per line. For each, fetches the writer schema by id
      (GET URL/schemas/ids/{id}, references resolved through GET URL/subjects/{s}/versions/{v}),
      decodes it, prints {"schema_id": N, "value": <value in the Avro JSON encoding>}.
  avro_peer.py encode --registry URL --subject S --schema FILE.avsc
      stdin: one value per line in the Avro JSON encoding. Registers the schema under S
      (POST URL/subjects/S/versions; the registry answers the existing id if S already has it),
      prints the base64 of the framed bytes per value.

URL is the Confluent-compatible base, e.g. http://127.0.0.1:8081/apis/ccompat/v7.

Avro JSON encoding (the spec's, as Java's JsonEncoder/JsonDecoder speak it): a union value is null
or {"<branch>": value}, where <branch> is the full name of a named type, else the type's name
("string", "long", "array", "map", ...); bytes and fixed are strings whose code points 0-255 are
the bytes; float/double NaN and infinities are the strings "NaN", "Infinity", "-Infinity". The
`avro` package has no JSON encoder or decoder (avro.io only has the binary ones), so the
conversion is written here, guided by the schema.

Logical types are dropped from the schema used for the datum reader/writer (the schema registered
or fetched is left as it is): the binary encoding is the same, and the Avro JSON encoding carries
the underlying type's value (timestamp-millis: the long), as Java's GenericData without
conversions does. With them, the `avro` package would turn timestamps into datetimes (and fail on
values outside years 1-9999) and warn when handed plain numbers.

Errors: a message on stderr and exit status 1 (2 for usage errors); stdout carries data only.
"""

import argparse
import base64
import io
import json
import math
import struct
import sys
import urllib.error
import urllib.parse
import urllib.request

import avro.errors
import avro.io
import avro.name
import avro.schema

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
NAMED_TYPES = ("record", "error", "enum", "fixed")
INT_RANGE = (-(1 << 31), (1 << 31) - 1)
LONG_RANGE = (-(1 << 63), (1 << 63) - 1)


class PeerError(Exception):
    pass


# --------------------------------------------------------------------------------------------------
# registry (Confluent-compatible REST API)


class Registry:
    def __init__(self, url):
        self.url = url.rstrip("/")
        self.by_id = {}

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", CONTENT_TYPE + ", application/json")
        if data is not None:
            req.add_header("Content-Type", CONTENT_TYPE)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")
            raise PeerError(f"{method} {self.url + path}: HTTP {e.code}: {detail}") from None
        except urllib.error.URLError as e:
            raise PeerError(f"{method} {self.url + path}: {e.reason}") from None

    def register(self, subject, schema_text):
        path = "/subjects/" + urllib.parse.quote(subject, safe="") + "/versions"
        answer = self._call("POST", path, {"schema": schema_text})
        if not isinstance(answer.get("id"), int):
            raise PeerError(f"POST {path}: no id in the answer: {answer}")
        return answer["id"]

    def schema_by_id(self, schema_id):
        """The parsed writer schema for an id (logical types dropped), cached."""
        if schema_id not in self.by_id:
            answer = self._call("GET", f"/schemas/ids/{schema_id}")
            kind = answer.get("schemaType", "AVRO")
            if kind != "AVRO":
                raise PeerError(f"schema {schema_id} is a {kind} schema, not Avro")
            names = avro.name.Names()
            self._parse_references(answer.get("references") or [], names, set())
            self.by_id[schema_id] = parse_schema(answer["schema"], names)
        return self.by_id[schema_id]

    def _parse_references(self, refs, names, seen):
        """Parses referenced schemas (depth first) into `names`, so that the schema naming them
        parses: Confluent's references, {"name", "subject", "version"}."""
        for ref in refs:
            key = (ref["subject"], ref["version"])
            if key in seen:
                continue
            seen.add(key)
            path = "/subjects/" + urllib.parse.quote(ref["subject"], safe="") + f"/versions/{ref['version']}"
            answer = self._call("GET", path)
            self._parse_references(answer.get("references") or [], names, seen)
            parse_schema(answer["schema"], names)


# --------------------------------------------------------------------------------------------------
# schemas


def strip_logical_types(node):
    """A copy of a schema's JSON without logicalType attributes (see the module doc). Walks only
    schema positions, so field defaults (JSON data) are left alone."""
    if isinstance(node, list):
        return [strip_logical_types(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k == "logicalType":
            continue
        if k in ("type", "items", "values"):
            v = strip_logical_types(v)
        elif k == "fields" and node.get("type") in ("record", "error") and isinstance(v, list):
            v = [strip_field(f) for f in v]
        out[k] = v
    return out


def strip_field(field):
    if not isinstance(field, dict):
        return field
    out = dict(field)
    if "type" in out:
        out["type"] = strip_logical_types(out["type"])
    return out


def parse_schema(text, names=None):
    data = strip_logical_types(json.loads(text))
    if names is None:
        names = avro.name.Names()
    return avro.schema.make_avsc_object(data, names)


def branch_name(schema):
    if schema.type in NAMED_TYPES:
        return schema.fullname
    return schema.type


# --------------------------------------------------------------------------------------------------
# datum reader/writer that keep union branches explicit


class Branch:
    """A union value with the index of its branch (Avro's own writer guesses the branch, picking
    the last one that validates: wrong for ["int","long"], ["float","double"], ...)."""

    __slots__ = ("index", "value")

    def __init__(self, index, value):
        self.index = index
        self.value = value


class BranchDatumReader(avro.io.DatumReader):
    """Reads with the writer schema as the reader schema; unions come back as Branch."""

    def read_union(self, writers_schema, readers_schema, decoder):
        index = int(decoder.read_long())
        if index < 0 or index >= len(writers_schema.schemas):
            raise PeerError(f"union branch index {index} out of range (union of {len(writers_schema.schemas)})")
        branch = writers_schema.schemas[index]
        return Branch(index, self.read_data(branch, branch, decoder))


class BranchDatumWriter(avro.io.DatumWriter):
    """Writes Branch values to the branch they name. Values must come from from_json, which checks
    them against the schema (so the package's own validate() pass, which knows no Branch, is
    skipped)."""

    def write_union(self, writers_schema, datum, encoder):
        if not isinstance(datum, Branch):
            raise PeerError("internal: union value without a branch")
        encoder.write_long(datum.index)
        self.write_data(writers_schema.schemas[datum.index], datum.value, encoder)

    def write_value(self, datum, encoder):
        self.write_data(self.writers_schema, datum, encoder)


# --------------------------------------------------------------------------------------------------
# Avro JSON encoding <-> datum


def float32(x):
    """The shortest decimal that reads back as the same 32-bit float (what Java's Float.toString
    prints), as a Python float."""
    for digits in range(1, 10):
        s = "%.*g" % (digits, x)
        try:
            back = struct.unpack("<f", struct.pack("<f", float(s)))[0]
        except OverflowError:  # rounded up past the largest float (3.4028235e38 > FLT_MAX)
            continue
        if back == x:
            return float(s)
    return x


def float_to_json(x, single):
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float32(x) if single else x


def to_json(schema, datum):
    """A value read by BranchDatumReader -> the Avro JSON encoding (as Python JSON data)."""
    t = schema.type
    if t == "union":
        branch = schema.schemas[datum.index]
        if branch.type == "null":
            return None
        return {branch_name(branch): to_json(branch, datum.value)}
    if t in ("record", "error"):
        return {f.name: to_json(f.type, datum[f.name]) for f in schema.fields}
    if t == "array":
        return [to_json(schema.items, v) for v in datum]
    if t == "map":
        return {k: to_json(schema.values, v) for k, v in datum.items()}
    if t in ("bytes", "fixed"):
        return datum.decode("latin-1")
    if t == "float":
        return float_to_json(datum, True)
    if t == "double":
        return float_to_json(datum, False)
    return datum  # null, boolean, int, long, string, enum


def _fail(path, msg):
    raise PeerError(f"{path or '$'}: {msg}")


def _number(j, path, single):
    if isinstance(j, str):
        specials = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if j in specials:
            return specials[j]
    if isinstance(j, bool) or not isinstance(j, (int, float)):
        _fail(path, f"expected a number, got {json.dumps(j)}")
    x = float(j)
    if single and math.isfinite(x):
        try:
            struct.pack("<f", x)
        except OverflowError:
            _fail(path, f"{j} is out of the float range")
    return x


def from_json(schema, j, path=""):
    """The Avro JSON encoding (parsed JSON) -> a datum for BranchDatumWriter, checked against the
    schema, as strictly as Java's JsonDecoder reads it."""
    t = schema.type
    if t == "union":
        if j is None:
            for i, s in enumerate(schema.schemas):
                if s.type == "null":
                    return Branch(i, None)
            _fail(path, "null, but the union has no null branch")
        if not isinstance(j, dict) or len(j) != 1:
            _fail(path, f"a union value must be null or a one-key object {{\"<branch>\": value}}, got {json.dumps(j)}")
        (name, value), = j.items()
        for i, s in enumerate(schema.schemas):
            if branch_name(s) == name:
                return Branch(i, from_json(s, value, f"{path}<{name}>"))
        _fail(path, f"no union branch named {name!r} (branches: {[branch_name(s) for s in schema.schemas]})")
    if t == "null":
        if j is not None:
            _fail(path, f"expected null, got {json.dumps(j)}")
        return None
    if t == "boolean":
        if not isinstance(j, bool):
            _fail(path, f"expected a boolean, got {json.dumps(j)}")
        return j
    if t in ("int", "long"):
        lo, hi = INT_RANGE if t == "int" else LONG_RANGE
        if isinstance(j, bool) or not isinstance(j, int) or not lo <= j <= hi:
            _fail(path, f"expected {'an int' if t == 'int' else 'a long'}, got {json.dumps(j)}")
        return j
    if t == "float":
        return _number(j, path, True)
    if t == "double":
        return _number(j, path, False)
    if t == "string":
        if not isinstance(j, str):
            _fail(path, f"expected a string, got {json.dumps(j)}")
        return j
    if t in ("bytes", "fixed"):
        if not isinstance(j, str):
            _fail(path, f"expected a string of code points 0-255 for {t}, got {json.dumps(j)}")
        try:
            b = j.encode("latin-1")
        except UnicodeEncodeError:
            _fail(path, f"{t} string has a code point above 255")
        if t == "fixed" and len(b) != schema.size:
            _fail(path, f"fixed {schema.fullname} needs {schema.size} bytes, got {len(b)}")
        return b
    if t == "enum":
        if j not in schema.symbols:
            _fail(path, f"{json.dumps(j)} is not a symbol of enum {schema.fullname} {schema.symbols}")
        return j
    if t == "array":
        if not isinstance(j, list):
            _fail(path, f"expected an array, got {json.dumps(j)}")
        return [from_json(schema.items, v, f"{path}[{i}]") for i, v in enumerate(j)]
    if t == "map":
        if not isinstance(j, dict):
            _fail(path, f"expected an object (map), got {json.dumps(j)}")
        return {k: from_json(schema.values, v, f"{path}.{k}") for k, v in j.items()}
    if t in ("record", "error"):
        if not isinstance(j, dict):
            _fail(path, f"expected an object (record {schema.fullname}), got {json.dumps(j)}")
        names = {f.name for f in schema.fields}
        extra = [k for k in j if k not in names]
        if extra:
            _fail(path, f"record {schema.fullname} has no field(s) {extra}")
        out = {}
        for f in schema.fields:
            if f.name not in j:
                # As Java's JsonDecoder: every field is written, defaults are for schema resolution.
                _fail(f"{path}.{f.name}", "missing (the Avro JSON encoding writes every field)")
            out[f.name] = from_json(f.type, j[f.name], f"{path}.{f.name}")
        return out
    _fail(path, f"unsupported schema type {t}")


# --------------------------------------------------------------------------------------------------
# commands


def frame(schema_id, payload):
    return b"\x00" + struct.pack(">I", schema_id) + payload


def unframe(framed, line_no):
    if len(framed) < 5 or framed[0] != 0:
        raise PeerError(f"stdin:{line_no}: not the Confluent wire format (magic 0 + 4-byte id): {framed[:8].hex()}")
    return struct.unpack(">i", framed[1:5])[0], framed[5:]


def decode(args):
    registry = Registry(args.registry)
    out = sys.stdout
    for line_no, line in enumerate(sys.stdin, 1):
        line = line.strip()
        if not line:
            continue
        try:
            framed = base64.b64decode(line, validate=True)
        except ValueError as e:
            raise PeerError(f"stdin:{line_no}: not base64: {e}") from None
        schema_id, payload = unframe(framed, line_no)
        schema = registry.schema_by_id(schema_id)
        reader = BranchDatumReader(schema, schema)
        buf = io.BytesIO(payload)
        try:
            datum = reader.read(avro.io.BinaryDecoder(buf))
        except (avro.errors.AvroException, struct.error, UnicodeDecodeError, EOFError) as e:
            raise PeerError(f"stdin:{line_no}: cannot decode with schema {schema_id}: {e!r}") from None
        rest = len(payload) - buf.tell()
        if rest:
            raise PeerError(f"stdin:{line_no}: {rest} byte(s) left after the value (schema {schema_id})")
        value = json.dumps(to_json(schema, datum), separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        out.write(f'{{"schema_id": {schema_id}, "value": {value}}}\n')
        out.flush()


def encode(args):
    with open(args.schema, encoding="utf-8") as f:
        text = f.read()
    # Registered compact, keys in the file's order: for a file written as Java's Schema.toString()
    # prints it (as the Apicurio serializer registers it), the very same text, so the same content
    # and id. Whatever the text, the registry answers the existing id when the subject already has
    # an equivalent schema.
    compact = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
    schema = parse_schema(compact)
    values = []
    for line_no, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            j = json.loads(line)
        except ValueError as e:
            raise PeerError(f"stdin:{line_no}: not JSON: {e}") from None
        try:
            values.append(from_json(schema, j))
        except PeerError as e:
            raise PeerError(f"stdin:{line_no}: {e}") from None
    schema_id = Registry(args.registry).register(args.subject, compact)
    writer = BranchDatumWriter(schema)
    for datum in values:
        buf = io.BytesIO()
        writer.write_value(datum, avro.io.BinaryEncoder(buf))
        sys.stdout.write(base64.b64encode(frame(schema_id, buf.getvalue())).decode("ascii") + "\n")
    sys.stdout.flush()


def main(argv=None):
    p = argparse.ArgumentParser(prog="avro_peer.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("decode", help="base64 framed records (stdin) -> {schema_id, value} JSON lines")
    d.add_argument("--registry", required=True, help="Confluent-compatible base URL")
    e = sub.add_parser("encode", help="Avro JSON lines (stdin) -> base64 framed records")
    e.add_argument("--registry", required=True, help="Confluent-compatible base URL")
    e.add_argument("--subject", required=True)
    e.add_argument("--schema", required=True, help=".avsc file")
    args = p.parse_args(argv)
    try:
        (decode if args.command == "decode" else encode)(args)
    except PeerError as err:
        print(f"avro_peer {args.command}: {err}", file=sys.stderr)
        return 1
    except avro.errors.AvroException as err:
        print(f"avro_peer {args.command}: {err!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
