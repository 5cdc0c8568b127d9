//! Avro values to and from JSON in the Avro specification's JSON encoding, guided by the
//! schema: what the Java `JsonEncoder`/`JsonDecoder`, `kafka-avro-console-consumer` and
//! kcat print and read.
//!
//! - a union value that is not null is an object naming its branch: `{"string": "x"}`, a
//!   named type by its full name (`{"nyc.Ride": {...}}`); reading also takes the bare value,
//!   matched to the first branch it fits (for hand-written input);
//! - bytes and fixed (and decimals, which are bytes) are strings whose characters are the
//!   byte values U+0000 to U+00FF;
//! - enums are their symbols; logical types are their underlying type's value (a
//!   timestamp-millis is a long, a date an int, a uuid a string);
//! - reading a record takes a missing field's default and refuses a field the schema does
//!   not have, naming its path.

use apache_avro::schema::{NamesRef, RecordSchema, UnionSchema};
use apache_avro::types::Value;
use apache_avro::Schema;
use serde_json::{Number, Value as Json};

/// A decoded value in the JSON encoding; `schema` is the schema it was decoded with (the
/// reader schema when there was one), `names` its named types.
///
/// # Errors
/// A value that does not fit its schema (it cannot, when it was decoded with it), naming its
/// path.
pub(crate) fn to_json(
    value: &Value,
    schema: &Schema,
    names: &NamesRef<'_>,
) -> Result<Json, String> {
    Encoder {
        names,
        plain: false,
    }
    .value(value, schema, "$")
    .map(Json::from)
}

/// A decoded value as plain JSON: a union's value without its branch, a decimal as a
/// number, the other logical types as their numbers (timestamps in their unit since the
/// epoch, dates in days) or strings (UUIDs), bytes as strings of U+0000..U+00FF.
///
/// # Errors
/// As [`to_json`].
pub(crate) fn to_plain_json(
    value: &Value,
    schema: &Schema,
    names: &NamesRef<'_>,
) -> Result<Json, String> {
    Encoder { names, plain: true }
        .value(value, schema, "$")
        .map(Json::from)
}

/// [`to_json`] as text, with record fields in the schema's order (a `serde_json::Value`
/// sorts object keys).
///
/// # Errors
/// As [`to_json`].
pub(crate) fn to_json_text(
    value: &Value,
    schema: &Schema,
    names: &NamesRef<'_>,
) -> Result<String, String> {
    let ordered = Encoder {
        names,
        plain: false,
    }
    .value(value, schema, "$")?;
    serde_json::to_string(&ordered).map_err(|e| e.to_string())
}

/// JSON whose objects keep their fields in order (records in the schema's order, maps by
/// key).
enum Ordered {
    Leaf(Json),
    Array(Vec<Ordered>),
    Object(Vec<(String, Ordered)>),
}

impl From<Ordered> for Json {
    fn from(o: Ordered) -> Json {
        match o {
            Ordered::Leaf(j) => j,
            Ordered::Array(items) => Json::Array(items.into_iter().map(Json::from).collect()),
            Ordered::Object(fields) => Json::Object(
                fields
                    .into_iter()
                    .map(|(k, v)| (k, Json::from(v)))
                    .collect(),
            ),
        }
    }
}

impl serde::Serialize for Ordered {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Ordered::Leaf(j) => j.serialize(s),
            Ordered::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
            Ordered::Object(fields) => {
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// JSON in the JSON encoding (or plain JSON that fits without ambiguity) as a value of
/// `schema`.
///
/// # Errors
/// What does not fit, naming its path: `$.pickup.zone: expected a string, got 42`.
pub(crate) fn from_json(
    json: &Json,
    schema: &Schema,
    names: &NamesRef<'_>,
) -> Result<Value, String> {
    Decoder { names }.value(json, schema, "$")
}

/// The name of a union branch in the JSON encoding.
fn branch_name(schema: &Schema, names: &NamesRef<'_>) -> String {
    match schema {
        Schema::Null => "null".into(),
        Schema::Boolean => "boolean".into(),
        Schema::Int | Schema::Date | Schema::TimeMillis => "int".into(),
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => "long".into(),
        Schema::Float => "float".into(),
        Schema::Double => "double".into(),
        Schema::Bytes | Schema::BigDecimal => "bytes".into(),
        Schema::String => "string".into(),
        Schema::Array(_) => "array".into(),
        Schema::Map(_) => "map".into(),
        Schema::Union(_) => "union".into(),
        Schema::Record(r) => r.name.fullname(None),
        Schema::Enum(e) => e.name.fullname(None),
        Schema::Fixed(f) | Schema::Duration(f) => f.name.fullname(None),
        Schema::Decimal(d) => match &d.inner {
            apache_avro::schema::InnerDecimalSchema::Fixed(f) => f.name.fullname(None),
            apache_avro::schema::InnerDecimalSchema::Bytes => "bytes".into(),
        },
        Schema::Uuid(u) => match u {
            apache_avro::schema::UuidSchema::Fixed(f) => f.name.fullname(None),
            apache_avro::schema::UuidSchema::Bytes => "bytes".into(),
            _ => "string".into(),
        },
        Schema::Ref { name } => names
            .get(name)
            .map_or_else(|| name.fullname(None), |s| branch_name(s, names)),
    }
}

fn bytes_text(b: &[u8]) -> Json {
    Json::String(b.iter().map(|b| char::from(*b)).collect())
}

fn number(f: f64) -> Json {
    // The Java encoder writes NaN and the infinities as strings.
    Number::from_f64(f).map_or_else(
        || {
            Json::String(if f.is_nan() {
                "NaN".into()
            } else if f > 0.0 {
                "Infinity".into()
            } else {
                "-Infinity".into()
            })
        },
        Json::Number,
    )
}

struct Encoder<'a, 's> {
    names: &'a NamesRef<'s>,
    /// Plain JSON ([`to_plain_json`]), not the JSON encoding.
    plain: bool,
}

/// A decimal's unscaled two's-complement big-endian bytes at `scale`, as a JSON number (as
/// a string when it does not fit 128 bits).
fn decimal_number(unscaled: &[u8], scale: usize) -> Json {
    if unscaled.len() > 16 {
        return Json::String(format!("decimal of {} bytes", unscaled.len()));
    }
    let negative = unscaled.first().is_some_and(|b| b & 0x80 != 0);
    let mut buf = if negative { [0xffu8; 16] } else { [0u8; 16] };
    buf[16 - unscaled.len()..].copy_from_slice(unscaled);
    let n = i128::from_be_bytes(buf);
    let digits = n.unsigned_abs().to_string();
    let text = if scale == 0 {
        digits
    } else if digits.len() > scale {
        format!(
            "{}.{}",
            &digits[..digits.len() - scale],
            &digits[digits.len() - scale..]
        )
    } else {
        format!("0.{}{digits}", "0".repeat(scale - digits.len()))
    };
    let text = if negative { format!("-{text}") } else { text };
    text.parse::<f64>().map_or(Json::String(text), number)
}

/// A JSON number as a decimal's unscaled two's-complement big-endian bytes at `scale`.
fn decimal_bytes(n: &Number, scale: usize, path: &str) -> Result<Vec<u8>, String> {
    let text = n.to_string();
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    if text.contains(['e', 'E']) || frac.len() > scale {
        return Err(format!(
            "{path}: {text} does not fit a decimal of scale {scale}"
        ));
    }
    let digits = format!("{int}{frac}{}", "0".repeat(scale - frac.len()));
    let unscaled: i128 = digits
        .parse()
        .map_err(|e| format!("{path}: {text} as a decimal: {e}"))?;
    let bytes = unscaled.to_be_bytes();
    // The shortest two's complement form.
    let mut start = 0;
    while start < 15
        && ((bytes[start] == 0 && bytes[start + 1] & 0x80 == 0)
            || (bytes[start] == 0xff && bytes[start + 1] & 0x80 != 0))
    {
        start += 1;
    }
    Ok(bytes[start..].to_vec())
}

impl Encoder<'_, '_> {
    fn value(&self, v: &Value, schema: &Schema, path: &str) -> Result<Ordered, String> {
        let schema = self.deref(schema, path)?;
        let leaf = match (v, schema) {
            (Value::Null, _) => Json::Null,
            (Value::Boolean(b), _) => Json::Bool(*b),
            (Value::Int(i) | Value::Date(i) | Value::TimeMillis(i), _) => Json::from(*i),
            (
                Value::Long(i)
                | Value::TimeMicros(i)
                | Value::TimestampMillis(i)
                | Value::TimestampMicros(i)
                | Value::TimestampNanos(i)
                | Value::LocalTimestampMillis(i)
                | Value::LocalTimestampMicros(i)
                | Value::LocalTimestampNanos(i),
                _,
            ) => Json::from(*i),
            (Value::Float(f), _) => number(f64::from(*f)),
            (Value::Double(f), _) => number(*f),
            (Value::Bytes(b) | Value::Fixed(_, b), _) => bytes_text(b),
            (Value::String(s) | Value::Enum(_, s), _) => Json::String(s.clone()),
            (Value::Uuid(u), _) => Json::String(u.to_string()),
            (Value::Decimal(d), _) => self.decimal(d, schema, path)?,
            (Value::Duration(d), _) => bytes_text(&<[u8; 12]>::from(*d)),
            (Value::BigDecimal(_), _) => {
                return Err(format!(
                    "{path}: big-decimal values are not supported in JSON"
                ))
            }
            (Value::Union(i, inner), Schema::Union(u)) => {
                let branch = variant(u, *i, path)?;
                if matches!(**inner, Value::Null) {
                    Json::Null
                } else if self.plain {
                    return self.value(inner, branch, path);
                } else {
                    let name = branch_name(branch, self.names);
                    let inner = self.value(inner, branch, path)?;
                    return Ok(Ordered::Object(vec![(name, inner)]));
                }
            }
            (Value::Array(items), Schema::Array(a)) => {
                let items = items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.value(v, &a.items, &format!("{path}[{i}]")))
                    .collect::<Result<_, _>>()?;
                return Ok(Ordered::Array(items));
            }
            (Value::Map(entries), Schema::Map(m)) => {
                let mut keys: Vec<&String> = entries.keys().collect();
                keys.sort();
                let mut out = Vec::with_capacity(keys.len());
                for k in keys {
                    let v = self.value(&entries[k], &m.types, &format!("{path}.{k}"))?;
                    out.push((k.clone(), v));
                }
                return Ok(Ordered::Object(out));
            }
            (Value::Record(fields), Schema::Record(r)) => {
                let mut out = Vec::with_capacity(fields.len());
                for ((name, v), field) in fields.iter().zip(&r.fields) {
                    let v = self.value(v, &field.schema, &format!("{path}.{name}"))?;
                    out.push((name.clone(), v));
                }
                return Ok(Ordered::Object(out));
            }
            (v, s) => {
                return Err(format!(
                    "{path}: the value {v:?} does not fit the schema {s:?}"
                ))
            }
        };
        Ok(Ordered::Leaf(leaf))
    }

    fn deref<'x>(&'x self, schema: &'x Schema, path: &str) -> Result<&'x Schema, String> {
        deref(schema, self.names, path)
    }

    /// A decimal: a number in plain JSON, its unscaled bytes in the JSON encoding.
    fn decimal(
        &self,
        d: &apache_avro::Decimal,
        schema: &Schema,
        path: &str,
    ) -> Result<Json, String> {
        let unscaled = <Vec<u8>>::try_from(d).map_err(|e| format!("{path}: decimal: {e}"))?;
        Ok(match schema {
            Schema::Decimal(s) if self.plain => decimal_number(&unscaled, s.scale),
            _ => bytes_text(&unscaled),
        })
    }
}

fn deref<'x>(
    schema: &'x Schema,
    names: &'x NamesRef<'_>,
    path: &str,
) -> Result<&'x Schema, String> {
    match schema {
        Schema::Ref { name } => names.get(name).copied().ok_or_else(|| {
            format!(
                "{path}: the schema refers to '{}', which it does not define",
                name.fullname(None)
            )
        }),
        s => Ok(s),
    }
}

fn variant<'u>(u: &'u UnionSchema, i: u32, path: &str) -> Result<&'u Schema, String> {
    u.variants()
        .get(i as usize)
        .ok_or_else(|| format!("{path}: union branch {i} is not in the schema"))
}

struct Decoder<'a, 's> {
    names: &'a NamesRef<'s>,
}

fn kind(j: &Json) -> String {
    let text = j.to_string();
    if text.chars().count() > 40 {
        format!("{}...", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}

impl Decoder<'_, '_> {
    /// Long: one arm per Avro type, read as a table.
    fn value(&self, j: &Json, schema: &Schema, path: &str) -> Result<Value, String> {
        let schema = deref(schema, self.names, path)?;
        let expected = |what: &str| format!("{path}: expected {what}, got {}", kind(j));
        let long = || j.as_i64().ok_or_else(|| expected("a whole number"));
        let int = || {
            j.as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(|| expected("a whole number within 32 bits"))
        };
        let float = || match j {
            Json::Number(n) => n.as_f64().ok_or_else(|| expected("a number")),
            Json::String(s) if s == "NaN" => Ok(f64::NAN),
            Json::String(s) if s == "Infinity" => Ok(f64::INFINITY),
            Json::String(s) if s == "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => Err(expected("a number")),
        };
        let bytes = || -> Result<Vec<u8>, String> {
            let s = j
                .as_str()
                .ok_or_else(|| expected("a string of bytes (characters U+0000 to U+00FF)"))?;
            s.chars()
                .map(|c| u8::try_from(u32::from(c)).map_err(|_| format!("{path}: the character {c:?} is not a byte (bytes are written as characters U+0000 to U+00FF)")))
                .collect()
        };
        let fixed = |size: usize| -> Result<Vec<u8>, String> {
            let b = bytes()?;
            if b.len() != size {
                return Err(format!("{path}: expected {size} bytes, got {}", b.len()));
            }
            Ok(b)
        };
        Ok(match schema {
            Schema::Null if j.is_null() => Value::Null,
            Schema::Null => return Err(expected("null")),
            Schema::Boolean => {
                Value::Boolean(j.as_bool().ok_or_else(|| expected("true or false"))?)
            }
            Schema::Int => Value::Int(int()?),
            Schema::Date => Value::Date(int()?),
            Schema::TimeMillis => Value::TimeMillis(int()?),
            Schema::Long => Value::Long(long()?),
            Schema::TimeMicros => Value::TimeMicros(long()?),
            Schema::TimestampMillis => Value::TimestampMillis(long()?),
            Schema::TimestampMicros => Value::TimestampMicros(long()?),
            Schema::TimestampNanos => Value::TimestampNanos(long()?),
            Schema::LocalTimestampMillis => Value::LocalTimestampMillis(long()?),
            Schema::LocalTimestampMicros => Value::LocalTimestampMicros(long()?),
            Schema::LocalTimestampNanos => Value::LocalTimestampNanos(long()?),
            Schema::Float => Value::Float(float()? as f32),
            Schema::Double => Value::Double(float()?),
            Schema::Bytes => Value::Bytes(bytes()?),
            Schema::String => {
                Value::String(j.as_str().ok_or_else(|| expected("a string"))?.to_owned())
            }
            Schema::Uuid(_) => {
                let s = j.as_str().ok_or_else(|| expected("a UUID string"))?;
                Value::Uuid(
                    s.parse()
                        .map_err(|e| format!("{path}: '{s}' is not a UUID: {e}"))?,
                )
            }
            Schema::Fixed(f) => Value::Fixed(f.size, fixed(f.size)?),
            Schema::Duration(_) => {
                let b: [u8; 12] = fixed(12)?.try_into().map_err(|_| expected("12 bytes"))?;
                Value::Duration(b.into())
            }
            Schema::Decimal(d) if j.is_number() => {
                let n = j.as_number().ok_or_else(|| expected("a number"))?;
                let unscaled = decimal_bytes(n, d.scale, path)?;
                Value::Decimal(match &d.inner {
                    apache_avro::schema::InnerDecimalSchema::Fixed(f) => {
                        if unscaled.len() > f.size {
                            return Err(format!(
                                "{path}: {n} does not fit a decimal of {} bytes",
                                f.size
                            ));
                        }
                        let fill = if unscaled.first().is_some_and(|b| b & 0x80 != 0) {
                            0xff
                        } else {
                            0
                        };
                        let mut b = vec![fill; f.size - unscaled.len()];
                        b.extend_from_slice(&unscaled);
                        b.into()
                    }
                    apache_avro::schema::InnerDecimalSchema::Bytes => unscaled.into(),
                })
            }
            Schema::Decimal(d) => Value::Decimal(match &d.inner {
                apache_avro::schema::InnerDecimalSchema::Fixed(f) => fixed(f.size)?.into(),
                apache_avro::schema::InnerDecimalSchema::Bytes => bytes()?.into(),
            }),
            Schema::BigDecimal => {
                return Err(format!(
                    "{path}: big-decimal values are not supported in JSON"
                ))
            }
            Schema::Enum(e) => {
                let s = j.as_str().ok_or_else(|| expected("an enum symbol"))?;
                let i = e.symbols.iter().position(|x| x == s).ok_or_else(|| {
                    format!(
                        "{path}: '{s}' is not a symbol of {} (symbols: {})",
                        e.name.fullname(None),
                        e.symbols.join(", ")
                    )
                })?;
                Value::Enum(i as u32, s.to_owned())
            }
            Schema::Array(a) => Value::Array(
                j.as_array()
                    .ok_or_else(|| expected("an array"))?
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.value(v, &a.items, &format!("{path}[{i}]")))
                    .collect::<Result<_, _>>()?,
            ),
            Schema::Map(m) => Value::Map(
                j.as_object()
                    .ok_or_else(|| expected("an object"))?
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), self.value(v, &m.types, &format!("{path}.{k}"))?)))
                    .collect::<Result<_, String>>()?,
            ),
            Schema::Record(r) => self.record(j, r, path)?,
            Schema::Union(u) => self.union(j, u, path)?,
            Schema::Ref { .. } => return Err(format!("{path}: a reference to a reference")),
        })
    }

    fn record(&self, j: &Json, r: &RecordSchema, path: &str) -> Result<Value, String> {
        let Some(object) = j.as_object() else {
            return Err(format!(
                "{path}: expected an object ({}), got {}",
                r.name.fullname(None),
                kind(j)
            ));
        };
        if let Some(extra) = object
            .keys()
            .find(|k| !r.fields.iter().any(|f| &f.name == *k))
        {
            return Err(format!(
                "{path}: '{extra}' is not a field of {} (fields: {})",
                r.name.fullname(None),
                r.fields
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut fields = Vec::with_capacity(r.fields.len());
        for f in &r.fields {
            let at = format!("{path}.{}", f.name);
            let v = match (object.get(&f.name), &f.default) {
                (Some(v), _) => self.value(v, &f.schema, &at)?,
                // A default is written as its schema's first branch for a union, unwrapped.
                (None, Some(default)) => match deref(&f.schema, self.names, &at)? {
                    Schema::Union(u) => {
                        let first = variant(u, 0, &at)?;
                        Value::Union(0, Box::new(self.value(default, first, &at)?))
                    }
                    s => self.value(default, s, &at)?,
                },
                (None, None) => {
                    return Err(format!(
                        "{path}: the field '{}' is missing and has no default",
                        f.name
                    ))
                }
            };
            fields.push((f.name.clone(), v));
        }
        Ok(Value::Record(fields))
    }

    fn union(&self, j: &Json, u: &UnionSchema, path: &str) -> Result<Value, String> {
        let variants = u.variants();
        if j.is_null() {
            if let Some(i) = variants.iter().position(|s| matches!(s, Schema::Null)) {
                return Ok(Value::Union(i as u32, Box::new(Value::Null)));
            }
        }
        // The JSON encoding: {"<branch name>": value}.
        if let Some((name, inner)) = j
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.iter().next())
        {
            if let Some(i) = variants
                .iter()
                .position(|s| branch_name(s, self.names) == *name)
            {
                return Ok(Value::Union(
                    i as u32,
                    Box::new(self.value(inner, &variants[i], path)?),
                ));
            }
        }
        // A bare value: the first branch it fits.
        for (i, s) in variants.iter().enumerate() {
            if let Ok(v) = self.value(j, s, path) {
                return Ok(Value::Union(i as u32, Box::new(v)));
            }
        }
        Err(format!(
            "{path}: {} fits none of the union's branches ({})",
            kind(j),
            variants
                .iter()
                .map(|s| branch_name(s, self.names))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::schema::ResolvedSchema;
    use serde_json::json;

    const RIDE: &str = r#"{"type":"record","name":"Ride","namespace":"nyc","fields":[
        {"name":"id","type":"long"},
        {"name":"zone","type":["null","string"],"default":null},
        {"name":"fare","type":"double"},
        {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["YELLOW","GREEN"]}},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"tag","type":"bytes","default":""},
        {"name":"next","type":["null","Ride"],"default":null}
    ]}"#;

    fn round_trip(schema: &Schema, input: Json) -> Result<Json, String> {
        let resolved = ResolvedSchema::try_from(schema).unwrap();
        let names = resolved.get_names();
        let v = from_json(&input, schema, names)?;
        assert!(v.validate(schema), "{v:?}");
        let bytes = apache_avro::writer::datum::GenericDatumWriter::builder(schema)
            .build()
            .and_then(|w| w.write_value_to_vec(v.clone()))
            .unwrap();
        let back = apache_avro::reader::datum::GenericDatumReader::builder(schema)
            .build()
            .and_then(|r| r.read_value(&mut &bytes[..]))
            .unwrap();
        to_json(&back, schema, names)
    }

    #[test]
    fn values_read_and_print_in_the_json_encoding() {
        let schema = Schema::parse_str(RIDE).unwrap();
        let full = json!({"id": 1, "zone": {"string": "JFK"}, "fare": 52.5, "kind": "YELLOW",
            "at": 1_700_000_000_000i64, "tag": "\u{0}\u{ff}", "next": null});
        assert_eq!(round_trip(&schema, full.clone()).unwrap(), full);
        // Bare union values and defaults are taken too; the output is canonical.
        let short = json!({"id": 2, "zone": "JFK", "fare": 1, "kind": "GREEN", "at": 5,
            "next": {"id": 3, "fare": 2.5, "kind": "GREEN", "at": 6}});
        let got = round_trip(&schema, short).unwrap();
        assert_eq!(got["zone"], json!({"string": "JFK"}));
        assert_eq!(got["tag"], json!(""));
        assert_eq!(got["next"]["nyc.Ride"]["zone"], Json::Null);
    }

    #[test]
    fn plain_json_unwraps_unions_and_gives_decimals_as_numbers_and_reads_back() {
        let schema = Schema::parse_str(r#"{"type":"record","name":"Fare","fields":[
            {"name":"zone","type":["null","string"]},
            {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
            {"name":"fixed","type":{"type":"fixed","name":"F","size":4,"logicalType":"decimal","precision":6,"scale":3}},
            {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#).unwrap();
        let resolved = ResolvedSchema::try_from(&schema).unwrap();
        let names = resolved.get_names();
        // (plain JSON in, the same out; what does not fit)
        #[rustfmt::skip]
        let cases: &[(Json, Result<Json, &str>)] = &[
            (json!({"zone": "JFK", "amount": 12.34, "fixed": -1.5, "at": 1700000000000i64}), Ok(json!({"zone": "JFK", "amount": 12.34, "fixed": -1.5, "at": 1700000000000i64}))),
            (json!({"zone": null, "amount": -0.05, "fixed": 0, "at": 0}),                    Ok(json!({"zone": null, "amount": -0.05, "fixed": 0.0, "at": 0}))),
            (json!({"zone": null, "amount": 1234567.89, "fixed": 999.999, "at": 0}),         Ok(json!({"zone": null, "amount": 1234567.89, "fixed": 999.999, "at": 0}))),
            (json!({"zone": null, "amount": 0.001, "fixed": 0, "at": 0}),                    Err("$.amount: 0.001 does not fit a decimal of scale 2")),
        ];
        for (input, want) in cases {
            let got =
                from_json(input, &schema, names).and_then(|v| to_plain_json(&v, &schema, names));
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(&g, w),
                (Err(e), Err(w)) => assert!(e.contains(w), "{e}"),
                (g, w) => panic!("{input}: {g:?}, want {w:?}"),
            }
        }
        // Two's complement at its edges, both ways.
        for (n, bytes) in [
            ("-1", vec![0xff]),
            ("127", vec![0x7f]),
            ("128", vec![0, 0x80]),
            ("-129", vec![0xff, 0x7f]),
            ("0", vec![0]),
        ] {
            let number: Number = n.parse().unwrap();
            assert_eq!(decimal_bytes(&number, 0, "$").unwrap(), bytes, "{n}");
            assert_eq!(
                decimal_number(&bytes, 0),
                json!(n.parse::<f64>().unwrap()),
                "{n}"
            );
        }
    }

    #[test]
    fn what_does_not_fit_is_named_with_its_path() {
        let schema = Schema::parse_str(RIDE).unwrap();
        let base = json!({"id": 1, "fare": 2.0, "kind": "YELLOW", "at": 5});
        let with = |k: &str, v: Json| {
            let mut j = base.clone();
            j[k] = v;
            j
        };
        #[rustfmt::skip]
        let cases = [
            (with("id", json!("x")),               "$.id: expected a whole number, got \"x\""),
            (with("kind", json!("RED")),           "$.kind: 'RED' is not a symbol of nyc.Kind (symbols: YELLOW, GREEN)"),
            (with("zone", json!(7)),               "$.zone: 7 fits none of the union's branches (null, string)"),
            (with("tag", json!("\u{100}")),        "is not a byte"),
            (with("extra", json!(1)),              "$: 'extra' is not a field of nyc.Ride"),
            (json!({"id": 1}),                     "$: the field 'fare' is missing and has no default"),
            (with("next", json!({"nyc.Ride": {"id": "x"}})), "$.next.id: expected a whole number"),
        ];
        for (input, want) in cases {
            let e = round_trip(&schema, input).unwrap_err();
            assert!(e.contains(want), "{e}\nwant: {want}");
        }
    }

    #[test]
    fn text_keeps_the_schemas_field_order() {
        let schema = Schema::parse_str(RIDE).unwrap();
        let resolved = ResolvedSchema::try_from(&schema).unwrap();
        let v = from_json(
            &json!({"id": 1, "fare": 2.5, "kind": "GREEN", "at": 3}),
            &schema,
            resolved.get_names(),
        )
        .unwrap();
        let text = to_json_text(&v, &schema, resolved.get_names()).unwrap();
        assert_eq!(
            text,
            r#"{"id":1,"zone":null,"fare":2.5,"kind":"GREEN","at":3,"tag":"","next":null}"#
        );
    }

    #[test]
    fn floats_beyond_json_numbers_are_strings_as_java_writes_them() {
        let schema = Schema::parse_str(r#"{"type":"array","items":"double"}"#).unwrap();
        let j = json!(["NaN", "Infinity", "-Infinity", 1.5]);
        let got = round_trip(&schema, j.clone()).unwrap();
        assert_eq!(got, j);
    }
}
