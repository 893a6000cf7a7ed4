//! Any bytes as a `POST /v1/responses` body: read into the canonical model and written back
//! in every dialect (each must parse back) and trimmed, as the other request targets do;
//! scanned for what only a Responses target can serve; and read as the edge reads it before
//! a target is picked (a stored turn put in front, reasoning another provider made taken out:
//! every body written must be JSON).
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::canonical::{responses, Dialect};

mod common;

fuzz_target!(|data: &[u8]| {
    common::request(Dialect::Responses, data);
    let needs = responses::native_needs(data);
    if needs.uses.is_some() || needs.offers.is_some() {
        assert!(responses::needs_native(data).is_some());
    }
    switchyard::api::fuzz_responses_request(data);
});
