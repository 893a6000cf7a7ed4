//! Any bytes as a gemini request body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::canonical::Dialect;

mod common;

fuzz_target!(|data: &[u8]| common::request(Dialect::Gemini, data));
