//! Any bytes as an SSE transcript: the first byte picks the dialect (OpenAI, Anthropic, Gemini
//! or the Responses API), the rest is split into events at blank lines (`event:` and `data:`
//! lines as on the wire). Every decoded event is encoded in every dialect, and what each
//! encoder writes must be SSE whose events are all JSON (or `[DONE]`); the bytes are also
//! read as each dialect's whole answer and error body (each written back in every dialect:
//! JSON), and as a Vertex error answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::canonical::{Dialect, StreamEvent};
use switchyard::provider::vertex::{self, Publisher};
use switchyard::wire::sse::SseDecoder;

const DIALECTS: [Dialect; 4] = [
    Dialect::OpenAi,
    Dialect::Anthropic,
    Dialect::Gemini,
    Dialect::Responses,
];

/// The events of a transcript: the bytes between blank lines.
fn blocks(mut rest: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match rest.windows(2).position(|w| w == b"\n\n") {
            Some(end) => {
                let (block, tail) = rest.split_at(end);
                rest = &tail[2..];
                Some(block)
            }
            None => Some(std::mem::take(&mut rest)),
        }
    })
}

fn json(what: &str, bytes: &[u8]) {
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        panic!(
            "{what} is not JSON ({e}): {}",
            String::from_utf8_lossy(bytes)
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, transcript)) = data.split_first() else {
        return;
    };
    let from = DIALECTS[usize::from(pick) % DIALECTS.len()];
    let mut decoder = from.decoder();
    let mut encoders: Vec<_> = DIALECTS
        .iter()
        .map(|d| (d.encoder(true), Vec::new()))
        .collect();
    let mut events: Vec<StreamEvent> = Vec::new();
    for block in blocks(transcript) {
        let mut name = None;
        let mut payload = Vec::new();
        for line in block.split(|&b| b == b'\n') {
            if let Some(n) = line.strip_prefix(b"event: ") {
                name = Some(String::from_utf8_lossy(n).into_owned());
            } else if let Some(d) = line.strip_prefix(b"data: ") {
                payload.extend_from_slice(d);
            }
        }
        events.clear();
        // A bad event is an error and the stream goes on, as the relay does.
        let _ = decoder.decode(name.as_deref(), &payload, &mut events);
        for event in &events {
            for (encoder, out) in &mut encoders {
                encoder.encode(event, out);
            }
        }
    }
    // What a client gets is SSE whose every event is JSON (or OpenAI's `[DONE]`).
    for (encoder, out) in &mut encoders {
        encoder.finish(out);
        let mut sse = SseDecoder::new();
        sse.push(out);
        while let Some(ev) = sse.next_event() {
            let json = serde_json::from_slice::<serde::de::IgnoredAny>(&ev.data);
            assert!(
                json.is_ok() || &ev.data[..] == b"[DONE]",
                "an event that is not JSON: {}",
                String::from_utf8_lossy(&ev.data)
            );
        }
    }
    let _ = decoder.is_done();
    for dialect in DIALECTS {
        let error = dialect.parse_error(400, transcript);
        for to in DIALECTS {
            json("an error written", &to.write_error(&error));
        }
        if let Ok(answer) = dialect.parse_response(transcript) {
            for to in DIALECTS {
                if let Ok(body) = to.write_response(&answer) {
                    json("an answer written", &body);
                }
            }
        }
    }
    for publisher in [Publisher::Anthropic, Publisher::Google] {
        let status = http::StatusCode::TOO_MANY_REQUESTS;
        if let Some((_, body)) = vertex::error_answer(publisher, status, transcript) {
            let _ = Dialect::Anthropic.parse_error(429, &body);
        }
    }
});
