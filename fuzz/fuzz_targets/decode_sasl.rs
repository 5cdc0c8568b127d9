//! Feeds arbitrary bytes to what reads broker and user input in SASL: the SCRAM client's
//! server-first and server-final parsing, the OAUTHBEARER error challenge, `sasl.jaas.config`,
//! and the SaslHandshake/SaslAuthenticate response decoders (`onceflow::client::security::
//! fuzz_sasl`; the first byte picks which). Nothing may panic, hang or allocate without bound.
//!
//! Known finding: the kafka-protocol response decoders (first byte 4 and 5 mod 6) abort on an
//! array length near i32::MAX (`Vec::with_capacity` from the wire); every response type shares
//! it (issue 16, hostile brokers).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    onceflow::client::security::fuzz_sasl(data);
});
