//! Zigzag LEB128 varints as Kafka writes them (`ByteUtils.writeVarint` / `writeVarlong`).
//!
//! Decoding mirrors the Java client: at most 5 bytes for a varint and 10 for a varlong, with
//! surplus high bits of the last byte dropped rather than rejected, so that anything Java
//! accepts we accept too.

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The input ended in the middle of the varint.
    Truncated,
    /// More continuation bytes than the type allows (5 for varint, 10 for varlong).
    TooLong,
}

impl VarintError {
    /// One-line description for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            VarintError::Truncated => "truncated varint",
            VarintError::TooLong => "varint longer than its maximum encoded length",
        }
    }
}

/// Appends `value` as a zigzag varint (1 to 5 bytes).
pub fn put_varint(out: &mut Vec<u8>, value: i32) {
    put_unsigned(out, u64::from(((value << 1) ^ (value >> 31)) as u32));
}

/// Appends `value` as a zigzag varlong (1 to 10 bytes).
pub fn put_varlong(out: &mut Vec<u8>, value: i64) {
    put_unsigned(out, ((value << 1) ^ (value >> 63)) as u64);
}

fn put_unsigned(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encoded size of `value` as a zigzag varint.
pub fn varint_size(value: i32) -> usize {
    unsigned_size(u64::from(((value << 1) ^ (value >> 31)) as u32))
}

/// Encoded size of `value` as a zigzag varlong.
pub fn varlong_size(value: i64) -> usize {
    unsigned_size(((value << 1) ^ (value >> 63)) as u64)
}

fn unsigned_size(v: u64) -> usize {
    // 7 payload bits per byte; a zero still takes one byte.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Reads a zigzag varint from the front of `buf`, returning it and the bytes consumed.
pub fn get_varint(buf: &[u8]) -> Result<(i32, usize), VarintError> {
    let (raw, n) = get_unsigned(buf, 5)?;
    let raw = raw as u32;
    Ok((((raw >> 1) as i32) ^ -((raw & 1) as i32), n))
}

/// Reads a zigzag varlong from the front of `buf`, returning it and the bytes consumed.
pub fn get_varlong(buf: &[u8]) -> Result<(i64, usize), VarintError> {
    let (raw, n) = get_unsigned(buf, 10)?;
    Ok((((raw >> 1) as i64) ^ -((raw & 1) as i64), n))
}

fn get_unsigned(buf: &[u8], max_len: usize) -> Result<(u64, usize), VarintError> {
    let mut value = 0u64;
    for (i, &b) in buf.iter().enumerate() {
        if i >= max_len {
            return Err(VarintError::TooLong);
        }
        // checked_shl cannot fail (i < 10 so the shift is < 64); bits shifted out of the top are
        // discarded, as in Java.
        value |= u64::from(b & 0x7F).wrapping_shl(7 * i as u32);
        if b & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    if buf.len() >= max_len {
        Err(VarintError::TooLong)
    } else {
        Err(VarintError::Truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc32(v: i32) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, v);
        out
    }

    fn enc64(v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        put_varlong(&mut out, v);
        out
    }

    #[test]
    fn known_encodings_match_kafka() {
        // Values from Kafka's ByteUtilsTest.
        assert_eq!(enc32(0), [0x00]);
        assert_eq!(enc32(-1), [0x01]);
        assert_eq!(enc32(1), [0x02]);
        assert_eq!(enc32(63), [0x7E]);
        assert_eq!(enc32(-64), [0x7F]);
        assert_eq!(enc32(64), [0x80, 0x01]);
        assert_eq!(enc32(-65), [0x81, 0x01]);
        assert_eq!(enc32(i32::MAX), [0xFE, 0xFF, 0xFF, 0xFF, 0x0F]);
        assert_eq!(enc32(i32::MIN), [0xFF, 0xFF, 0xFF, 0xFF, 0x0F]);
        assert_eq!(enc64(i64::MAX).len(), 10);
        assert_eq!(
            enc64(i64::MIN),
            [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]
        );
    }

    #[test]
    fn sizes_match_encodings_at_boundaries() {
        for v in [
            0,
            -1,
            1,
            63,
            -64,
            64,
            -65,
            8191,
            8192,
            -8193,
            i32::MAX,
            i32::MIN,
        ] {
            assert_eq!(varint_size(v), enc32(v).len(), "{v}");
        }
        for v in [0, -1, 1 << 40, -(1 << 40), i64::MAX, i64::MIN] {
            assert_eq!(varlong_size(v), enc64(v).len(), "{v}");
        }
    }

    #[test]
    fn truncated_and_overlong_inputs() {
        assert_eq!(get_varint(&[]), Err(VarintError::Truncated));
        assert_eq!(get_varint(&[0x80]), Err(VarintError::Truncated));
        assert_eq!(
            get_varint(&[0x80, 0x80, 0x80, 0x80]),
            Err(VarintError::Truncated)
        );
        assert_eq!(
            get_varint(&[0x80, 0x80, 0x80, 0x80, 0x80]),
            Err(VarintError::TooLong)
        );
        assert_eq!(
            get_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            Err(VarintError::TooLong)
        );
        assert_eq!(get_varlong(&[0xFF; 10]), Err(VarintError::TooLong));
        assert_eq!(get_varlong(&[0xFF; 9]), Err(VarintError::Truncated));
        // Non-minimal encodings are accepted, as in Java.
        assert_eq!(get_varint(&[0x82, 0x00]), Ok((1, 2)));
        // Surplus high bits in the fifth byte are dropped, as in Java.
        assert_eq!(
            get_varint(&[0xFE, 0xFF, 0xFF, 0xFF, 0x7F]),
            Ok((i32::MAX, 5))
        );
        // Only the varint is consumed.
        assert_eq!(get_varint(&[0x02, 0xAA]), Ok((1, 1)));
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<i32>()) {
            let e = enc32(v);
            prop_assert_eq!(e.len(), varint_size(v));
            prop_assert_eq!(get_varint(&e), Ok((v, e.len())));
        }

        #[test]
        fn varlong_round_trip(v in any::<i64>()) {
            let e = enc64(v);
            prop_assert_eq!(e.len(), varlong_size(v));
            prop_assert_eq!(get_varlong(&e), Ok((v, e.len())));
        }

        #[test]
        fn varint_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let _ = get_varint(&bytes);
            let _ = get_varlong(&bytes);
        }
    }
}
