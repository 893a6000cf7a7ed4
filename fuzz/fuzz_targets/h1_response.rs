//! Any bytes as an upstream's answer to the HTTP/1.1 client (`provider::h1`): read whole and
//! in reads of the size the first byte picks, for a `POST` or a `HEAD` (its high bit), they
//! read the same (status, header fields, body, whether the connection is kept with nothing
//! sent after the answer, or the same error), and no more body comes out than went in.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::provider::fuzz_h1_response;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, answer)) = data.split_first() else {
        return;
    };
    let head = mode & 0x80 != 0;
    let piece = usize::from(mode & 0x7f) + 1;
    let whole = fuzz_h1_response(answer, answer.len(), head);
    let pieces = fuzz_h1_response(answer, piece, head);
    assert_eq!(pieces, whole, "read in pieces of {piece}");
});
