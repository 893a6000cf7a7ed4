//! Prompt caching across dialects, on the golden wire fixtures (tests/fixtures/*/*_cache.*):
//! cache markers (`cache_control`) from an OpenAI or Anthropic request to each dialect, and
//! cache usage (reads and writes) from each dialect's answer, whole and streamed, to each
//! client dialect. `UPDATE_GOLDEN=1 cargo test --test translation_cache` rewrites the
//! expected translations; review the diff.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::golden::{decode, encode, fixture, golden, json};
use switchyard::canonical::{
    anthropic, openai, ChatResponse, Dialect, Message, Part, StreamEvent, Usage,
};

// ---- markers ----

/// Every `cache_control` object in a JSON document, with the path to it (members in key
/// order).
fn markers(value: &Value, at: &str, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if key == "cache_control" {
                    out.push((at.to_owned(), v.clone()));
                } else {
                    markers(v, &format!("{at}.{key}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                markers(v, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn markers_of(body: &[u8]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    markers(&json(body), "", &mut out);
    out
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// LiteLLM's and OpenRouter's convention: a content part's, a message's and a tool's
/// `cache_control` land on the Anthropic block they belong to, `ttl` and all.
#[test]
fn an_openai_clients_markers_reach_anthropic_on_the_blocks_they_name() {
    let req = openai::parse_request(&fixture("openai/request_cache.json")).unwrap();
    let body = anthropic::write_request(&req, "claude-sonnet-4-5").unwrap();
    golden("anthropic/from_openai_request_cache.json", &body);
    assert_eq!(
        markers_of(&body),
        [
            // The tool result message.
            (".messages[2].content[0]".to_owned(), ephemeral()),
            // The last user message's (string content, message-level marker).
            (".messages[2].content[1]".to_owned(), ephemeral()),
            // The system message's first part: the system is split after it.
            (".system[0]".to_owned(), ephemeral()),
            (
                ".tools[0]".to_owned(),
                json!({"type": "ephemeral", "ttl": "1h"})
            ),
        ]
    );
    let out = json(&body);
    assert_eq!(out["system"][1]["text"], "Today is 2025-03-10.");
    assert_eq!(
        out["messages"][2]["content"][1]["text"],
        "And who pays them?"
    );
}

/// OpenAI and Gemini cache by prefix: no marker is written to them (the OpenAI client's own
/// `prompt_cache_key` goes to OpenAI targets, and only to them).
#[test]
fn markers_are_not_written_to_dialects_that_cache_by_prefix() {
    for name in ["openai/request_cache.json", "anthropic/request_cache.json"] {
        let from = if name.starts_with("openai") {
            Dialect::OpenAi
        } else {
            Dialect::Anthropic
        };
        let req = from.parse_request(&fixture(name)).unwrap();
        for to in [Dialect::OpenAi, Dialect::Gemini, Dialect::Responses] {
            let body = to.write_request(&req, "m").unwrap();
            assert_eq!(markers_of(&body), [], "{name} to {to:?}");
            let key = json(&body).get("prompt_cache_key").cloned();
            let expected = (from == Dialect::OpenAi && to == Dialect::OpenAi)
                .then(|| Value::from("contracts-42"));
            assert_eq!(key, expected, "{name} to {to:?}");
        }
    }
    let req = anthropic::parse_request(&fixture("anthropic/request_cache.json")).unwrap();
    golden(
        "openai/from_anthropic_request_cache.json",
        &openai::write_request(&req, "gpt-4o").unwrap(),
    );
}

/// An Anthropic request written from the canonical model (a trimmed conversation, a
/// continuation) keeps every marker where the client put it: system, tools, blocks, tool
/// results, and blocks kept whole (a document) with theirs inside.
#[test]
fn an_anthropic_request_keeps_its_markers_through_the_canonical_model() {
    let body = fixture("anthropic/request_cache.json");
    let req = anthropic::parse_request(&body).unwrap();
    let written = anthropic::write_request(&req, "claude-sonnet-4-5").unwrap();
    assert_eq!(json(&written), json(&body));
    assert_eq!(markers_of(&written).len(), 4);
}

/// The rest of the convention, and what it cannot carry.
#[test]
fn part_message_and_image_markers_and_what_has_no_block_to_mark() {
    let body = json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief.", "cache_control": {"type": "ephemeral"}},
            {"role": "system", "content": "Use English."},
            {"role": "system", "content": [{"type": "text", "text": "",
             "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                 "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "", "cache_control": {"type": "ephemeral", "ttl": "5m"}},
                {"type": "text", "text": "What is it?", "cache_control": {"type": "ephemeral"}}
            ], "cache_control": {"type": "ephemeral"}},
            {"role": "assistant", "content": [{"type": "text", "text": "A cat.",
             "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": null, "cache_control": {"type": "ephemeral"},
             "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "ok",
             "cache_control": {"type": "ephemeral"}}]}
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"},
                   "cache_control": {"type": "ephemeral"}}}]
    });
    let req = openai::parse_request(body.to_string().as_bytes()).unwrap();
    // The user message's own marker and its last part's are one breakpoint.
    let Message::User { content } = &req.messages[0] else {
        panic!("{:?}", req.messages[0]);
    };
    let breakpoints = content
        .iter()
        .filter(|p| matches!(p, Part::CacheBreakpoint(_)))
        .count();
    assert_eq!(breakpoints, 3, "{content:?}");
    let out = json(&anthropic::write_request(&req, "claude").unwrap());
    // A system message's marker with no text before it marks the system prompt before it;
    // the empty prompt is not written (Anthropic refuses empty blocks).
    assert_eq!(
        out["system"],
        json!([
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Use English.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
        ])
    );
    // The empty text part is not written: its marker goes to the image before it.
    assert_eq!(
        out["messages"][0]["content"],
        json!([
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
             "cache_control": {"type": "ephemeral", "ttl": "5m"}},
            {"type": "text", "text": "What is it?", "cache_control": {"type": "ephemeral"}}
        ])
    );
    // An assistant text part's marker is kept; one on a message of tool calls alone has no
    // block to go on (a tool_use block cannot be marked from the canonical model).
    assert_eq!(
        out["messages"][1]["content"],
        json!([
            {"type": "text", "text": "A cat.", "cache_control": {"type": "ephemeral"}},
            {"type": "tool_use", "id": "c", "name": "f", "input": {}}
        ])
    );
    // A tool message's part marker marks its tool_result; `function.cache_control` is read
    // too.
    assert_eq!(
        out["messages"][2]["content"][0]["cache_control"],
        ephemeral()
    );
    assert_eq!(out["tools"][0]["cache_control"], ephemeral());

    let bad = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":"yes"}]}]}"#;
    let err = openai::parse_request(bad).unwrap_err().to_string();
    assert!(err.contains("`cache_control` must be an object"), "{err}");
}

// ---- usage ----

/// What the cache fixtures report: 3,584 tokens read from the cache, 188 written (Anthropic
/// only), 3,793 prompt tokens in all.
fn cached(write: u64) -> Usage {
    Usage {
        input: 3793,
        output: 14,
        cache_read: 3584,
        cache_write: write,
    }
}

const RESPONSES: [(Dialect, &str); 4] = [
    (Dialect::Anthropic, "anthropic/response_cache.json"),
    (Dialect::OpenAi, "openai/response_cache.json"),
    (Dialect::Gemini, "gemini/response_cache.json"),
    (Dialect::Responses, "responses/response_cache.json"),
];

const STREAMS: [(Dialect, &str); 4] = [
    (Dialect::Anthropic, "anthropic/stream_cache.sse"),
    (Dialect::OpenAi, "openai/stream_cache.sse"),
    (Dialect::Gemini, "gemini/stream_cache.sse"),
    (Dialect::Responses, "responses/stream_cache.sse"),
];

/// Anthropic leaves the cached tokens out of `input_tokens` (21 + 188 + 3,584 = 3,793);
/// OpenAI, Gemini and the Responses API count them in.
fn expected(dialect: Dialect) -> Usage {
    cached(if dialect == Dialect::Anthropic {
        188
    } else {
        0
    })
}

#[test]
fn every_dialects_answer_reads_to_the_same_counts_whole_and_streamed() {
    for (dialect, name) in RESPONSES {
        let resp = dialect.parse_response(&fixture(name)).unwrap();
        assert_eq!(resp.usage, Some(expected(dialect)), "{name}");
    }
    for (dialect, name) in STREAMS {
        let (events, done) = decode(dialect, &fixture(name));
        assert!(done, "{name}");
        let usage: Vec<&Usage> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Usage(u) => Some(u),
                _ => None,
            })
            .collect();
        assert_eq!(usage, [&expected(dialect)], "{name}");
    }
}

/// An answer crosses the gateway as OpenAI inside: from its target's dialect to OpenAI, then
/// to the client's. Each step keeps the counts, in the client's own fields.
#[test]
fn whole_answers_carry_the_counts_to_each_client_dialect() {
    let parse = |dialect: Dialect, name: &str| -> ChatResponse {
        let mut resp = dialect.parse_response(&fixture(name)).unwrap();
        resp.created = Some(1_741_569_952);
        resp
    };
    let anthropic = parse(Dialect::Anthropic, "anthropic/response_cache.json");
    let inner = openai::write_response(&anthropic).unwrap();
    golden("openai/from_anthropic_response_cache.json", &inner);
    let usage = &json(&inner)["usage"];
    assert_eq!(usage["prompt_tokens"], 3793);
    assert_eq!(
        usage["prompt_tokens_details"],
        json!({"cached_tokens": 3584, "cache_write_tokens": 188})
    );
    // ...and on to a Responses client.
    let inner = openai::parse_response(&inner).unwrap();
    golden(
        "responses/from_anthropic_response_cache.json",
        &Dialect::Responses.write_response(&inner).unwrap(),
    );

    let openai = parse(Dialect::OpenAi, "openai/response_cache.json");
    let body = anthropic::write_response(&openai).unwrap();
    golden("anthropic/from_openai_response_cache.json", &body);
    assert_eq!(
        json(&body)["usage"],
        json!({"input_tokens": 209, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 3584, "output_tokens": 14})
    );

    let gemini = parse(Dialect::Gemini, "gemini/response_cache.json");
    golden(
        "openai/from_gemini_response_cache.json",
        &openai::write_response(&gemini).unwrap(),
    );
}

#[test]
fn streams_carry_the_counts_to_each_client_dialect() {
    let (anthropic, _) = decode(Dialect::Anthropic, &fixture("anthropic/stream_cache.sse"));
    // Anthropic's counts came in message_start; the OpenAI usage chunk has them all.
    let inner = encode(Dialect::OpenAi, &anthropic);
    golden("openai/from_anthropic_stream_cache.sse", &inner);
    let (inner, _) = decode(Dialect::OpenAi, &inner);
    golden(
        "responses/from_anthropic_stream_cache.sse",
        &encode(Dialect::Responses, &inner),
    );

    let (openai, _) = decode(Dialect::OpenAi, &fixture("openai/stream_cache.sse"));
    let body = encode(Dialect::Anthropic, &openai);
    golden("anthropic/from_openai_stream_cache.sse", &body);
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains(r#""usage":{"input_tokens":209,"cache_creation_input_tokens":0,"cache_read_input_tokens":3584,"output_tokens":14}"#),
        "{text}"
    );

    let (gemini, _) = decode(Dialect::Gemini, &fixture("gemini/stream_cache.sse"));
    golden(
        "anthropic/from_gemini_stream_cache.sse",
        &encode(Dialect::Anthropic, &gemini),
    );
}
