//! Any bytes as an upstream stream, read the way the gateway reads one in passing: the first
//! byte picks the dialect of the events (OpenAI chunks, or an Anthropic stream passed through)
//! and where the bytes are split into reads; the SSE decoder frames events and the chunk tracker
//! classifies each. Also the same bytes as an Anthropic client's body for pass-through.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::canonical::Dialect;
use switchyard::wire::chunks::ChunkTracker;
use switchyard::wire::sse::SseDecoder;
use switchyard::wire::ClientWire;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, stream)) = data.split_first() else {
        return;
    };
    let dialect = if pick & 1 == 0 {
        Dialect::OpenAi
    } else {
        Dialect::Anthropic
    };
    let mut tracker = ChunkTracker::for_dialect(dialect, pick & 2 == 0);
    tracker.set_capture(pick & 4 == 0);
    let mut decoder = SseDecoder::new();
    let step = usize::from(pick >> 3).max(1);
    for piece in stream.chunks(step) {
        decoder.push(piece);
        while let Some(ev) = decoder.next_event() {
            let _ = tracker.on_event(&ev);
        }
    }
    let _ = tracker.blocks();
    let _ = tracker.error_tail("fuzz");
    let headers = http::HeaderMap::new();
    let body = bytes::Bytes::copy_from_slice(stream);
    if let Some(wire) = ClientWire::native(Dialect::Anthropic, body, &headers, Some("beta=true")) {
        let _ = wire.native_body(Dialect::Anthropic, "fuzz", "\"m\"");
    }
});
