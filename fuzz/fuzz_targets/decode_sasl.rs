//! Feeds arbitrary bytes to what reads broker and user input in SASL: the SCRAM client's
//! server-first and server-final parsing, the OAUTHBEARER error challenge, `sasl.jaas.config`,
//! and the SaslHandshake/SaslAuthenticate response decoders (`onceflow::client::security::
//! fuzz_sasl`; the first byte picks which). Nothing may panic, hang or allocate without bound.
//!
//! The response decoders (picks 4 and 5) once aborted the process on an array length near
//! i32::MAX (kafka-protocol allocated it from the wire); the vendored guard fixed that for every
//! response (vendor/kafka-protocol/ONCEFLOW-PATCH.md), so every pick is fuzzed.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    onceflow::client::security::fuzz_sasl(data);
});
