//! The schema registry's wire format: what a serializer puts before the payload so that any
//! reader can find the schema.
//!
//! ```text
//! byte 0      magic byte 0
//! bytes 1-4   the schema id, big-endian (the registry's global id)
//! Protobuf:   the message indexes: which message of the schema's file this is, as a path
//!             through nested messages; a zig-zag varint count, then each index as a zig-zag
//!             varint; the first message ([0]) is the single byte 0
//! then        the payload (Avro binary, Protobuf binary, JSON text)
//! ```
//!
//! Reading never trusts a length from the record: a count of message indexes larger than the
//! bytes that follow is an error, not an allocation.

use super::error::{Result, SchemaError};

/// The first byte of a framed record.
pub const MAGIC: u8 = 0;

/// The prefix before an Avro or JSON payload: magic byte and schema id.
pub fn prefix(id: u32) -> [u8; 5] {
    let mut p = [MAGIC, 0, 0, 0, 0];
    p[1..].copy_from_slice(&id.to_be_bytes());
    p
}

/// A record framed for schema `id`: [`prefix`] then `payload`.
pub fn frame(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.extend_from_slice(&prefix(id));
    out.extend_from_slice(payload);
    out
}

/// A Protobuf record framed for schema `id` and the message at `indexes` in its file.
pub fn frame_protobuf(id: u32, indexes: &[i32], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + 1 + indexes.len() * 2 + payload.len());
    out.extend_from_slice(&prefix(id));
    if indexes == [0] {
        out.push(0);
    } else {
        put_zigzag(&mut out, indexes.len() as i64);
        for i in indexes {
            put_zigzag(&mut out, i64::from(*i));
        }
    }
    out.extend_from_slice(payload);
    out
}

/// The schema id and the payload of a framed record.
///
/// # Errors
/// [`SchemaError::Framing`] when the record is shorter than 5 bytes or its first byte is not 0
/// (it was not written by a registry serializer).
pub fn unframe(record: &[u8]) -> Result<(u32, &[u8])> {
    match record {
        [MAGIC, a, b, c, d, payload @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), payload)),
        [] => Err(SchemaError::Framing(
            "empty record: a record in the schema registry's format starts with the magic byte 0 and a 4-byte schema id".into(),
        )),
        [m, ..] if *m != MAGIC => Err(SchemaError::Framing(format!(
            "the record does not start with the magic byte 0 (it starts with 0x{m:02x}): it was not written by a schema registry serializer; read it with another format"
        ))),
        _ => Err(SchemaError::Framing(format!(
            "a record of {} bytes is too short for the schema registry's format (magic byte and a 4-byte schema id)",
            record.len()
        ))),
    }
}

/// The schema id, the message indexes and the payload of a framed Protobuf record.
///
/// # Errors
/// As [`unframe`]; and when the message indexes are truncated, negative, or count more
/// entries than there are bytes.
pub fn unframe_protobuf(record: &[u8]) -> Result<(u32, Vec<i32>, &[u8])> {
    let (id, rest) = unframe(record)?;
    let bad = |what: &str| {
        SchemaError::Framing(format!(
            "Protobuf record with schema id {id}: {what} in its message indexes"
        ))
    };
    let (count, mut rest) = get_zigzag(rest).ok_or_else(|| bad("a truncated count"))?;
    if count == 0 {
        return Ok((id, vec![0], rest));
    }
    if count < 0 || count as u64 > rest.len() as u64 {
        return Err(bad(&format!("a count of {count}")));
    }
    let mut indexes = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (i, after) = get_zigzag(rest).ok_or_else(|| bad("a truncated index"))?;
        let i = i32::try_from(i)
            .ok()
            .filter(|i| *i >= 0)
            .ok_or_else(|| bad(&format!("the index {i}")))?;
        indexes.push(i);
        rest = after;
    }
    Ok((id, indexes, rest))
}

fn put_zigzag(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn get_zigzag(b: &[u8]) -> Option<(i64, &[u8])> {
    let mut z = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        z |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            let v = ((z >> 1) as i64) ^ -((z & 1) as i64);
            return Some((v, &b[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_table() {
        type Case<'a> = (&'a [u8], Result<(u32, &'a [u8]), &'a str>);
        #[rustfmt::skip]
        let cases: &[Case] = &[
            (&[0, 0, 0, 0, 7, b'x'],         Ok((7, b"x"))),
            (&[0, 0, 0, 1, 0],               Ok((256, b""))),
            (&[0, 0xff, 0xff, 0xff, 0xff, 1], Ok((u32::MAX, &[1]))),
            (&[],                            Err("empty record")),
            (b"{\"",                          Err("starts with 0x7b")),
            (&[0, 0, 0],                     Err("3 bytes is too short")),
        ];
        for (record, want) in cases {
            match (unframe(record), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{record:?}"),
                (Err(e), Err(want)) => assert!(e.to_string().contains(want), "{e}"),
                (got, want) => panic!("{record:?}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(frame(7, b"x"), vec![0, 0, 0, 0, 7, b'x']);
    }

    #[test]
    fn message_indexes_round_trip_and_the_first_message_is_one_zero_byte() {
        for indexes in [vec![0], vec![1], vec![0, 2], vec![3, 0, 70_000]] {
            let framed = frame_protobuf(9, &indexes, b"pb");
            let (id, got, payload) = unframe_protobuf(&framed).unwrap();
            assert_eq!((id, &got, payload), (9, &indexes, &b"pb"[..]));
        }
        assert_eq!(frame_protobuf(9, &[0], b""), vec![0, 0, 0, 0, 9, 0]);
        // [1]: count 1 (zig-zag 2), index 1 (zig-zag 2).
        assert_eq!(frame_protobuf(9, &[1], b""), vec![0, 0, 0, 0, 9, 2, 2]);
    }

    #[test]
    fn bad_message_indexes_are_errors_not_allocations() {
        #[rustfmt::skip]
        let cases: &[(&[u8], &str)] = &[
            (&[0, 0, 0, 0, 1],                       "a truncated count"),
            (&[0, 0, 0, 0, 1, 0xfe, 0xff, 0xff, 0x0f], "a count of"),
            (&[0, 0, 0, 0, 1, 1],                    "a count of -1"),
            (&[0, 0, 0, 0, 1, 2, 0x80],              "a truncated index"),
            (&[0, 0, 0, 0, 1, 2, 1],                 "the index -1"),
        ];
        for (record, want) in cases {
            let e = unframe_protobuf(record).unwrap_err().to_string();
            assert!(
                e.contains(want) && e.contains("schema id 1"),
                "{record:?}: {e}"
            );
        }
    }
}
