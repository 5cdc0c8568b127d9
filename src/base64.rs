//! Standard base64 (RFC 4648, padded).
//!
//! Kafka keys, values and headers are bytes; where onceflow writes them as JSON (the CLI's
//! `consume --format json`, the fixtures and the Java interop peer's files) non-UTF-8 bytes are
//! base64. One small codec instead of a dependency, shared by the CLI and the tests.

/// Encodes bytes as padded standard base64.
///
/// ```
/// assert_eq!(onceflow::base64::encode(b"foob"), "Zm9vYg==");
/// ```
pub fn encode(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Why a string is not base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Base64Error {
    /// A character outside the alphabet.
    #[error("invalid base64 character {0:?}")]
    Character(char),
    /// The length is not a multiple of 4 (padding missing).
    #[error("base64 length {0} is not a multiple of 4")]
    Length(usize),
    /// '=' anywhere but at the end, or more than two.
    #[error("misplaced base64 padding")]
    Padding,
}

/// Decodes padded standard base64, strictly.
///
/// # Errors
/// [`Base64Error`] naming what is wrong.
///
/// ```
/// assert_eq!(onceflow::base64::decode("Zm9vYg==").unwrap(), b"foob");
/// assert!(onceflow::base64::decode("Zm9").is_err());
/// ```
pub fn decode(s: &str) -> Result<Vec<u8>, Base64Error> {
    let sextet = |c: u8| -> Result<u32, Base64Error> {
        Ok(match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(Base64Error::Character(c as char)),
        })
    };
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return Err(Base64Error::Length(bytes.len()));
    }
    let quads = bytes.len() / 4;
    let mut out = Vec::with_capacity(quads * 3);
    for (i, quad) in bytes.chunks(4).enumerate() {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && i + 1 != quads) || quad[..4 - pad].contains(&b'=') {
            return Err(Base64Error::Padding);
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            n = (n << 6) | sextet(c)?;
        }
        n <<= 6 * pad;
        out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_4648_vectors_round_trip() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), enc);
            assert_eq!(decode(enc).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&all)).unwrap(), all);
        assert_eq!(encode(&[0xfb, 0xff, 0xbf]), "+/+/");
    }

    #[test]
    fn malformed_input_is_named() {
        assert_eq!(decode("Zm9"), Err(Base64Error::Length(3)));
        assert_eq!(decode("Zm=v"), Err(Base64Error::Padding));
        assert_eq!(decode("Z==="), Err(Base64Error::Padding));
        assert_eq!(decode("Zm9*"), Err(Base64Error::Character('*')));
    }
}
