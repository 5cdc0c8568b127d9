//! Feeds arbitrary bytes to the decoding of every broker response the client reads, through
//! the path a connection takes (`onceflow::protocol::frame::decode_response`), then to what the
//! client reads from the decoded response with pure functions: a Fetch response's records
//! through the record codecs, ApiVersions through version negotiation, error codes. Nothing may
//! panic, abort, hang or allocate beyond what the input's size explains.
//!
//! Input: byte 0 picks the API (`onceflow::protocol::fuzzing::RESPONSE_APIS`), byte 1 the
//! version within kafka-protocol's range for it, the rest is the frame after its length prefix.
//! Seeds: fuzz/seeds/decode_responses (one valid response per API and version).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    onceflow::protocol::fuzzing::fuzz_response(data);
});
