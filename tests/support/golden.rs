//! Golden wire fixtures (`tests/fixtures/`): reading them, comparing with them (or rewriting
//! them under `UPDATE_GOLDEN=1`), and decoding and encoding their streams. Used by
//! `tests/translation.rs`, `tests/translation_reasoning.rs` and `tests/translation_cache.rs`.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::panic)]

use std::path::PathBuf;

use serde_json::Value;
use switchyard::canonical::{openai, responses, Dialect, StreamEvent};

pub const DIALECTS: [Dialect; 3] = [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini];

pub fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(path(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// Compares `actual` with a golden file (or rewrites it under `UPDATE_GOLDEN=1`).
pub fn golden(name: &str, actual: &[u8]) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path(name), actual).unwrap();
        return;
    }
    let expected = fixture(name);
    if name.ends_with(".json") {
        assert_eq!(json(actual), json(&expected), "{name}");
    } else {
        assert_eq!(
            String::from_utf8_lossy(actual),
            String::from_utf8_lossy(&expected),
            "{name}"
        );
    }
}

/// SSE events (name, data) of a transcript; LF or CRLF line ends.
pub fn sse_events(bytes: &[u8]) -> Vec<(Option<String>, String)> {
    let text = String::from_utf8(bytes.to_vec())
        .unwrap()
        .replace("\r\n", "\n");
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event:") {
                    event = Some(name.trim().to_owned());
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push(value.strip_prefix(' ').unwrap_or(value));
                }
            }
            (event, data.join("\n"))
        })
        .collect()
}

/// Decodes a transcript; also says whether the stream said it was complete.
pub fn decode(dialect: Dialect, bytes: &[u8]) -> (Vec<StreamEvent>, bool) {
    let mut decoder = dialect.decoder();
    let mut out = Vec::new();
    for (event, data) in sse_events(bytes) {
        decoder
            .decode(event.as_deref(), data.as_bytes(), &mut out)
            .unwrap_or_else(|e| panic!("{dialect:?}: {e}: {data}"));
    }
    (out, decoder.is_done())
}

/// Encodes events as a whole stream (OpenAI: with the usage chunk, `created` = 1; Responses:
/// `created_at` = 1).
pub fn encode(dialect: Dialect, events: &[StreamEvent]) -> Vec<u8> {
    let mut encoder = match dialect {
        Dialect::OpenAi => {
            switchyard::canonical::StreamEncoder::OpenAi(openai::Encoder::new(true).with_created(1))
        }
        Dialect::Responses => switchyard::canonical::StreamEncoder::Responses(
            responses::Encoder::new().with_created_at(1),
        ),
        other => other.encoder(true),
    };
    let mut out = Vec::new();
    for event in events {
        encoder.encode(event, &mut out);
    }
    encoder.finish(&mut out);
    out
}

/// Events with consecutive argument fragments of a call joined.
pub fn merge_args(events: &[StreamEvent]) -> Vec<StreamEvent> {
    let mut out: Vec<StreamEvent> = Vec::new();
    for event in events {
        if let (
            Some(StreamEvent::ToolCallArgsDelta { index: a, fragment }),
            StreamEvent::ToolCallArgsDelta {
                index: b,
                fragment: more,
            },
        ) = (out.last_mut(), event)
        {
            if a == b {
                fragment.push_str(more);
                continue;
            }
        }
        out.push(event.clone());
    }
    out
}
