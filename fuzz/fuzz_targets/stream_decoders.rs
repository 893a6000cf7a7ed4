//! Any bytes as an SSE transcript: the first byte picks the dialect, the rest is split into
//! events at blank lines (`event:` and `data:` lines as on the wire). Every decoded event is
//! encoded in every dialect; the bytes are also read as each dialect's error body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::canonical::{Dialect, StreamEvent};

const DIALECTS: [Dialect; 3] = [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini];

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

fuzz_target!(|data: &[u8]| {
    let Some((&pick, transcript)) = data.split_first() else {
        return;
    };
    let from = DIALECTS[usize::from(pick) % DIALECTS.len()];
    let mut decoder = from.decoder();
    let mut encoders: Vec<_> = DIALECTS.iter().map(|d| d.encoder(true)).collect();
    let mut events: Vec<StreamEvent> = Vec::new();
    let mut out = Vec::new();
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
            for encoder in &mut encoders {
                encoder.encode(event, &mut out);
            }
        }
    }
    for encoder in &mut encoders {
        encoder.finish(&mut out);
    }
    let _ = decoder.is_done();
    for dialect in DIALECTS {
        let _ = dialect.parse_error(400, transcript);
        let _ = dialect.parse_response(transcript);
    }
});
