//! Cache counts in every dialect's usage, whole and streamed: read into the canonical meaning
//! (every input token, of which the cache read and wrote so many) and written back in each
//! dialect's own (Anthropic's `input_tokens` without them).

use serde_json::{json, Value};

use super::{Dialect, StreamEvent, Usage};

/// 3,000 tokens read from the cache, 200 written, 10 neither: 3,210 in all.
const CACHED: Usage = Usage {
    input: 3210,
    output: 7,
    cache_read: 3000,
    cache_write: 200,
};

/// The same without the write, for the dialects that report none.
const READ_ONLY: Usage = Usage {
    cache_write: 0,
    ..CACHED
};

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn whole_answers_read_their_cache_counts() {
    let cases: [(Dialect, Value, Usage); 4] = [
        (
            Dialect::Anthropic,
            json!({"id": "m", "content": [], "usage": {"input_tokens": 10,
                "cache_creation_input_tokens": 200, "cache_read_input_tokens": 3000,
                "cache_creation": {"ephemeral_5m_input_tokens": 150, "ephemeral_1h_input_tokens": 50},
                "output_tokens": 7}}),
            CACHED,
        ),
        (
            Dialect::OpenAi,
            json!({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": 3210,
                "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 3000}}}),
            READ_ONLY,
        ),
        (
            Dialect::Responses,
            json!({"id": "r", "output": [], "usage": {"input_tokens": 3210,
                "input_tokens_details": {"cached_tokens": 3000}, "output_tokens": 7}}),
            READ_ONLY,
        ),
        (
            Dialect::Gemini,
            json!({"candidates": [{"content": {"parts": [{"text": "x"}]}}],
                "usageMetadata": {"promptTokenCount": 3210, "candidatesTokenCount": 7,
                "cachedContentTokenCount": 3000}}),
            READ_ONLY,
        ),
    ];
    for (dialect, body, usage) in cases {
        let body = body.to_string();
        let resp = dialect.parse_response(body.as_bytes());
        assert_eq!(resp.ok().and_then(|r| r.usage), Some(usage), "{dialect:?}");
    }
    // Only the parts of Anthropic's write: their sum.
    let parts = br#"{"content":[],"usage":{"input_tokens":10,"cache_read_input_tokens":3000,"cache_creation":{"ephemeral_5m_input_tokens":150,"ephemeral_1h_input_tokens":50},"output_tokens":7}}"#;
    let resp = Dialect::Anthropic.parse_response(parts);
    assert_eq!(resp.ok().and_then(|r| r.usage), Some(CACHED));
}

#[test]
fn whole_answers_write_the_counts_in_the_dialects_own_fields() {
    let resp = super::ChatResponse {
        id: "a".into(),
        model: "m".into(),
        created: Some(1),
        text: "x".into(),
        tool_calls: Vec::new(),
        finish_reason: super::FinishReason::Stop,
        usage: Some(CACHED),
    };
    let usage = |dialect: Dialect, key: &str| -> Value {
        let body = dialect.write_response(&resp).unwrap_or_default();
        json(&body)[key].clone()
    };
    assert_eq!(
        usage(Dialect::Anthropic, "usage"),
        json!({"input_tokens": 10, "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 3000, "output_tokens": 7})
    );
    assert_eq!(
        usage(Dialect::OpenAi, "usage"),
        json!({"prompt_tokens": 3210, "completion_tokens": 7, "total_tokens": 3217,
            "prompt_tokens_details": {"cached_tokens": 3000, "cache_write_tokens": 200}})
    );
    assert_eq!(
        usage(Dialect::Responses, "usage"),
        json!({"input_tokens": 3210, "input_tokens_details": {"cached_tokens": 3000,
            "cache_write_tokens": 200}, "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 3217})
    );
    assert_eq!(
        usage(Dialect::Gemini, "usageMetadata"),
        json!({"promptTokenCount": 3210, "candidatesTokenCount": 7, "totalTokenCount": 3217,
            "cachedContentTokenCount": 3000})
    );
    // Every dialect reads back what it wrote (Gemini has no place for the write).
    for dialect in [Dialect::Anthropic, Dialect::OpenAi, Dialect::Responses] {
        let body = dialect.write_response(&resp).unwrap_or_default();
        let back = dialect.parse_response(&body).ok().and_then(|r| r.usage);
        assert_eq!(back, Some(CACHED), "{dialect:?}");
    }
    // Without cache counts nothing says "none was cached" but the Responses API, whose
    // details are required.
    let plain = super::ChatResponse {
        usage: Some(Usage::new(5, 6)),
        ..resp
    };
    for (dialect, key, absent) in [
        (Dialect::Anthropic, "usage", "cache_read_input_tokens"),
        (Dialect::OpenAi, "usage", "prompt_tokens_details"),
        (Dialect::Gemini, "usageMetadata", "cachedContentTokenCount"),
    ] {
        let body = json(&dialect.write_response(&plain).unwrap_or_default());
        assert!(body[key].get(absent).is_none(), "{dialect:?}: {body}");
    }
}

/// Anthropic's stream says its input and cache counts in `message_start`; `message_delta`'s
/// counts are cumulative and may repeat or update them.
#[test]
fn an_anthropic_stream_keeps_message_starts_counts_unless_the_delta_gives_its_own() {
    let decode = |delta_usage: &str| {
        let mut decoder = Dialect::Anthropic.decoder();
        let mut out = Vec::new();
        let start = r#"{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":1}}}"#;
        let delta = format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"end_turn"}},"usage":{delta_usage}}}"#
        );
        for data in [start, &delta] {
            let _ = decoder.decode(None, data.as_bytes(), &mut out);
        }
        out.into_iter().find_map(|e| match e {
            StreamEvent::Usage(u) => Some(u),
            _ => None,
        })
    };
    assert_eq!(decode(r#"{"output_tokens":7}"#), Some(CACHED));
    // A count the delta gives replaces message_start's: here no write after all.
    assert_eq!(
        decode(
            r#"{"input_tokens":10,"cache_read_input_tokens":3000,"cache_creation_input_tokens":0,"output_tokens":7}"#
        ),
        Some(Usage {
            input: 3010,
            ..READ_ONLY
        })
    );
}

/// Each dialect's encoder writes the counts where its clients read them, and its decoder
/// reads them back.
#[test]
fn streams_carry_the_counts_through_every_dialect() {
    let events = [
        StreamEvent::Start {
            id: "s".into(),
            model: "m".into(),
        },
        StreamEvent::TextDelta("Hi".into()),
        StreamEvent::Finish(super::FinishReason::Stop),
        StreamEvent::Usage(CACHED),
    ];
    for (dialect, expected) in [
        (Dialect::Anthropic, CACHED),
        (Dialect::OpenAi, CACHED),
        (Dialect::Responses, CACHED),
        (Dialect::Gemini, READ_ONLY),
    ] {
        let mut encoder = dialect.encoder(true);
        let mut bytes = Vec::new();
        for event in &events {
            encoder.encode(event, &mut bytes);
        }
        encoder.finish(&mut bytes);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let mut decoder = dialect.decoder();
        let mut back = Vec::new();
        for block in text.replace("\r\n", "\n").split("\n\n") {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            if !data.is_empty() {
                let _ = decoder.decode(name.as_deref(), data.as_bytes(), &mut back);
            }
        }
        let usage = back.into_iter().find_map(|e| match e {
            StreamEvent::Usage(u) => Some(u),
            _ => None,
        });
        assert_eq!(usage, Some(expected), "{dialect:?}: {text}");
        if dialect == Dialect::Anthropic {
            assert!(
                text.contains(r#""usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":7}"#),
                "message_delta carries every count: {text}"
            );
        }
    }
}
