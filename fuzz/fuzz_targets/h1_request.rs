//! Any bytes as what a client sends first on a connection to the gateway's HTTP/1.1 server
//! (`app::conn::h1`): a head it serves itself reads as httparse reads it and as `http` takes
//! it, each of its prefixes is partial, and a body over `max_body` is left to hyper.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| switchyard::app::fuzz_h1_request(data));
