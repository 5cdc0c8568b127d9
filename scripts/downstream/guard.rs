//! The decoder guard reaches a crate that depends on onceflow: a 10-byte Metadata response
//! declaring 2^31-1 brokers is a decode error, not an abort. Built by
//! scripts/check-downstream.sh against the packaged crates; with an unguarded kafka-protocol
//! the allocation of the declared count aborts this test binary.

use onceflow::protocol::fuzzing::{fuzz_input, fuzz_response, RESPONSE_APIS};

#[test]
fn a_response_declaring_two_billion_brokers_in_ten_bytes_is_an_error_not_an_abort() {
    let metadata = *RESPONSE_APIS
        .iter()
        .find(|api| format!("{api:?}") == "Metadata")
        .expect("Metadata is among the decoded responses");
    // v0: correlation id, then the brokers array's Int32 count.
    let mut frame = 7i32.to_be_bytes().to_vec();
    frame.extend_from_slice(&i32::MAX.to_be_bytes());
    let input = fuzz_input(metadata, 0, &frame).expect("Metadata v0 is in range");
    // Decodes it as a connection does; returns (the error handled) or aborts the process.
    fuzz_response(&input);
}
