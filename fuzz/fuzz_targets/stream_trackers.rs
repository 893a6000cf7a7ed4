//! Any bytes as an upstream stream, read the way the gateway reads one in passing: the first
//! byte picks the dialect of the events (OpenAI chunks, an Anthropic stream or a Responses API
//! stream passed through) and where the bytes are split into reads; the SSE decoder frames
//! events (the same wherever the reads split the bytes, and whether a read is kept as it came
//! or copied; an event kept as it came is what the gateway would write for it) and the chunk
//! tracker classifies each (by its stream's shape as it would read each whole, starting with
//! the shapes earlier inputs made, as a target's next stream starts with its last ones'). Also
//! the same bytes as an Anthropic or a Responses client's body for pass-through: a JSON object
//! must stay one with the target's model spliced in.
#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use switchyard::canonical::Dialect;
use switchyard::wire::chunks::{ChunkTracker, LearnedShapes};
use switchyard::wire::client::Head;
use switchyard::wire::sse::{encode_data, encode_event, SseDecoder};
use switchyard::wire::ClientWire;

/// The shapes the inputs' streams made, kept from one input to the next as a target keeps its
/// streams'.
static LEARNED: LazyLock<Arc<LearnedShapes>> = LazyLock::new(Arc::default);

fuzz_target!(|data: &[u8]| {
    let Some((&pick, stream)) = data.split_first() else {
        return;
    };
    let dialect = match pick & 3 {
        0 => Dialect::OpenAi,
        2 => Dialect::Responses,
        _ => Dialect::Anthropic,
    };
    let mut tracker = ChunkTracker::for_dialect(dialect, pick & 4 == 0).learning(&LEARNED);
    tracker.set_capture(pick & 8 == 0);
    // Every chunk read whole: what reading chunks by their stream's shape must equal.
    let mut whole = ChunkTracker::for_dialect(dialect, pick & 4 == 0).without_shapes();
    whole.set_capture(pick & 8 == 0);
    let mut decoder = SseDecoder::new();
    let step = usize::from(pick >> 4).max(1);
    let mut events = Vec::new();
    for (i, piece) in stream.chunks(step).enumerate() {
        // As the gateway pushes its reads (kept as they came), and every other one copied.
        if i % 2 == 0 {
            decoder.push_bytes(bytes::Bytes::copy_from_slice(piece));
        } else {
            decoder.push(piece);
        }
        while let Some(ev) = decoder.next_event() {
            let (a, b) = (tracker.on_event(&ev), whole.on_event(&ev));
            assert_eq!(
                format!("{a:?}"),
                format!("{b:?}"),
                "an event read by a shape"
            );
            assert_eq!(
                tracker.observed(),
                whole.observed(),
                "a stream read by shapes"
            );
            assert_eq!(
                tracker.last_text(),
                whole.last_text(),
                "a text read by a shape"
            );
            // An event kept as it came is what the gateway would write for it.
            if let Some(raw) = &ev.raw {
                let framed = match &ev.event {
                    Some(name) => encode_event(name, &ev.data),
                    None => encode_data(&ev.data),
                };
                assert_eq!(raw, &framed, "an event kept as it came");
            }
            events.push((ev.event, ev.data));
        }
    }
    // Wherever the reads split the bytes, the events are the same.
    let mut decoder = SseDecoder::new();
    decoder.push(stream);
    let at_once: Vec<_> = std::iter::from_fn(|| decoder.next_event())
        .map(|ev| (ev.event, ev.data))
        .collect();
    assert_eq!(events, at_once, "the events of the bytes read at once");
    let _ = tracker.blocks();
    let _ = tracker.error_tail("fuzz");
    let headers = http::HeaderMap::new();
    let object = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(stream);
    for client in [Dialect::Anthropic, Dialect::Responses] {
        let body = bytes::Bytes::copy_from_slice(stream);
        let Some(wire) = ClientWire::native(client, body, &headers, Some("beta=true")) else {
            continue;
        };
        let Some(native) = wire.native_body(client, "p", "\"m\"") else {
            continue;
        };
        if object.is_ok() {
            let spliced = serde_json::from_slice::<serde_json::Value>(&native);
            assert!(
                spliced.is_ok_and(|v| v["model"] == "m"),
                "{}",
                String::from_utf8_lossy(&native)
            );
        }
    }
    // The Anthropic edge's own shallow read, and the splice it feeds. The read checks only what
    // it reads (a same-dialect body is the provider's to judge, bad bytes in a field the
    // gateway skips included: they go on as they came), so the splice must be a JSON object
    // with the new model where the body was one.
    if let Ok(head) = Head::anthropic(stream) {
        let body = bytes::Bytes::copy_from_slice(stream);
        let wire = ClientWire::native_read(Dialect::Anthropic, body, &head, &headers, None);
        let native = wire.native_body(Dialect::Anthropic, "p", "\"m\"");
        assert!(native.is_some(), "a body read at the edge is passed on");
        if object.is_ok() {
            let spliced = native
                .as_deref()
                .map(serde_json::from_slice::<serde_json::Value>);
            assert!(
                matches!(spliced, Some(Ok(ref v)) if v["model"] == "m"),
                "{:?}",
                native.as_deref().map(String::from_utf8_lossy)
            );
        }
    }
});
