//! Size-prefixed frames and request/response headers.
//!
//! A Kafka frame is a big-endian `i32` length followed by that many bytes. Requests start with a
//! [`RequestHeader`]; responses with a [`ResponseHeader`] whose correlation id matches the
//! request's. The header version depends on the API key and version, which is why encoding
//! and decoding take both.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

/// The largest response frame we accept (the broker's socket.request.max.bytes default is
/// 100 MiB; a Fetch can be up to fetch.max.bytes plus overhead). A length above this is treated
/// as a corrupt stream, never as an allocation size.
pub const MAX_FRAME_BYTES: usize = 512 * 1024 * 1024;

/// Errors while encoding or decoding a frame.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The message could not be encoded at the chosen version (a field the version lacks).
    #[error("cannot encode {api:?} v{version}: {reason}")]
    Encode {
        /// API key.
        api: ApiKey,
        /// Version used.
        version: i16,
        /// What kafka-protocol reported.
        reason: String,
    },
    /// The broker's bytes did not decode as the expected response.
    #[error("cannot decode {api:?} v{version} response: {reason}")]
    Decode {
        /// API key.
        api: ApiKey,
        /// Version used.
        version: i16,
        /// What went wrong.
        reason: String,
    },
    /// A frame length outside 0..=MAX_FRAME_BYTES.
    #[error("broker sent a frame of {0} bytes, outside the accepted range (corrupt stream or not a Kafka broker)")]
    BadLength(i64),
}

/// Encodes a whole request frame (length prefix, header, body) into `out`.
///
/// # Errors
/// [`FrameError::Encode`] when the body has fields the version cannot carry.
pub fn encode_request<R: Request>(
    out: &mut BytesMut,
    correlation_id: i32,
    client_id: &str,
    version: i16,
    body: &R,
) -> Result<(), FrameError> {
    let api = api_key::<R>();
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
    let start = out.len();
    let err = |reason: String| FrameError::Encode {
        api,
        version,
        reason,
    };
    // Sized once up front: a Produce request grew from empty through several reallocations,
    // each copying the record batches again (seen in profiles). The header is at most the
    // fixed fields, the client id and an empty tag buffer.
    let body_size = body.compute_size(version).map_err(|e| err(e.to_string()))?;
    out.reserve(4 + 16 + client_id.len() + body_size);
    out.put_i32(0);
    header
        .encode(out, api.request_header_version(version))
        .map_err(|e| err(e.to_string()))?;
    body.encode(out, version).map_err(|e| err(e.to_string()))?;
    let len = (out.len() - start - 4) as i32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// Reads the correlation id at the front of a response frame body without consuming it.
pub fn peek_correlation_id(frame: &[u8]) -> Option<i32> {
    frame
        .get(..4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Decodes a response frame body (without the length prefix) for request type `R`.
///
/// # Errors
/// [`FrameError::Decode`] when the bytes are not a valid response at that version.
pub fn decode_response<R: Request>(
    mut frame: Bytes,
    version: i16,
) -> Result<(i32, R::Response), FrameError> {
    let api = api_key::<R>();
    let err = |reason: String| FrameError::Decode {
        api,
        version,
        reason,
    };
    let header = ResponseHeader::decode(&mut frame, api.response_header_version(version))
        .map_err(|e| err(e.to_string()))?;
    let body =
        <R::Response as Decodable>::decode(&mut frame, version).map_err(|e| err(e.to_string()))?;
    Ok((header.correlation_id, body))
}

/// Parses the 4-byte length prefix.
///
/// # Errors
/// [`FrameError::BadLength`] for negative or oversized lengths.
pub fn frame_length(prefix: [u8; 4]) -> Result<usize, FrameError> {
    let len = i32::from_be_bytes(prefix);
    if len < 4 || len as usize > MAX_FRAME_BYTES {
        return Err(FrameError::BadLength(len as i64));
    }
    Ok(len as usize)
}

/// The [`ApiKey`] of a request type.
pub fn api_key<R: Request>() -> ApiKey {
    // R::KEY always comes from the generated messages, so the conversion cannot fail; fall
    // back to ApiVersions only to stay panic-free.
    ApiKey::try_from(R::KEY).unwrap_or(ApiKey::ApiVersions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::MetadataRequest;

    #[test]
    fn request_frame_has_length_prefix_and_header() {
        let mut out = BytesMut::new();
        encode_request(&mut out, 7, "t", 12, &MetadataRequest::default()).unwrap();
        let len = i32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
        assert_eq!(len, out.len() - 4);
        assert_eq!(i16::from_be_bytes([out[4], out[5]]), 3); // Metadata api key
        assert_eq!(i16::from_be_bytes([out[6], out[7]]), 12);
        assert_eq!(i32::from_be_bytes(out[8..12].try_into().unwrap()), 7);
    }

    #[test]
    fn bad_lengths_are_refused() {
        assert!(frame_length((-1i32).to_be_bytes()).is_err());
        assert!(frame_length(i32::MAX.to_be_bytes()).is_err());
        assert_eq!(frame_length(10i32.to_be_bytes()).unwrap(), 10);
    }

    /// A broker bit flip or a hostile broker declaring 2^31-1 elements in a tiny response must
    /// be a decode error: kafka-protocol 0.18.0 pre-allocated the declared count and the
    /// process aborted (handle_alloc_error), which no caller can catch.
    #[test]
    fn huge_declared_array_in_tiny_response_is_an_error_not_an_abort() {
        // v0: correlation id, then the brokers array's Int32 count.
        let mut v0 = 7i32.to_be_bytes().to_vec();
        v0.extend_from_slice(&i32::MAX.to_be_bytes());
        match decode_response::<MetadataRequest>(Bytes::from(v0), 0) {
            Err(FrameError::Decode { .. }) => {}
            other => panic!("v0: expected a decode error, got {other:?}"),
        }
        // v12 (flexible): correlation id, empty header tags, throttle time, then the brokers
        // compact array's varint count (2^31, i.e. 2^31-1 elements).
        let mut v12 = 7i32.to_be_bytes().to_vec();
        v12.push(0);
        v12.extend_from_slice(&0i32.to_be_bytes());
        v12.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x08]);
        match decode_response::<MetadataRequest>(Bytes::from(v12), 12) {
            Err(FrameError::Decode { .. }) => {}
            other => panic!("v12: expected a decode error, got {other:?}"),
        }
    }
}
