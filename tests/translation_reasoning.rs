//! Golden fixtures of reasoning state and unknown content, per dialect (tests/fixtures/):
//! Anthropic thinking, redacted thinking and signatures (whole, and streamed with
//! `signature_delta`), Gemini thought signatures (a Gemini 3 answer's signed parallel calls,
//! whole and SSE, and a signed conversation), an OpenAI conversation whose tool-call ids carry
//! a Gemini signature, and blocks, parts, events and fields nobody knows yet. Each round-trips
//! in its own dialect and is translated into the others as the routing sends it: a body for a
//! target that is not Gemini has the carried signatures cut out (`signature::strip`).
//!
//! After a deliberate change, `UPDATE_GOLDEN=1 cargo test --test translation_reasoning`
//! rewrites the `from_*` files; review the diff.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::golden::*;
use switchyard::canonical::gemini::signature;
use switchyard::canonical::{
    anthropic, gemini, openai, ChatRequest, Dialect, FinishReason, Message, StreamEvent, Usage,
};

/// The signature Gemini put on the first of its parallel calls in the fixtures.
const GEMINI_SIGNATURE: &str = "CiQBVKhc7vFYqdDB6oPhxDGnNk7ZFZYwH5nbq2qCKUwAGYlYL+nMRv8KXgFUqFzu2b1/ydL1hKAv3HlJxV+N6ImJmEo6yjfWsMn5p0Q7T2pNyEl7tK3N8xrKNCaSj+Rjw3kR5O1yR3zmN/BdvB3+sNwAWbKZx6TqUS6RftCc5vQvW2UlP==";

/// The id a client of another dialect gets for that call: Gemini's signature carried in it.
fn signed_id() -> String {
    let mut id = "call_Xq0waP2oMsCgz7IPyJ3rmAk_0".to_owned();
    assert!(signature::embed(&mut id, GEMINI_SIGNATURE));
    id
}

/// `req` written for a target of `dialect`, as the routing sends it.
fn for_target(dialect: Dialect, req: &ChatRequest, model: &str) -> Vec<u8> {
    let body = dialect.write_request(req, model).unwrap();
    match dialect {
        Dialect::Gemini => body,
        _ => signature::strip(&body).unwrap_or(body),
    }
}

const REQUESTS: [(Dialect, &str); 3] = [
    (Dialect::OpenAi, "openai/request_signed.json"),
    (Dialect::Anthropic, "anthropic/request_thinking.json"),
    (Dialect::Gemini, "gemini/request_signed.json"),
];

#[test]
fn reasoning_state_and_unknown_content_round_trip_in_their_own_dialect() {
    for (dialect, name) in REQUESTS {
        let body = fixture(name);
        let req = dialect.parse_request(&body).unwrap();
        let written = dialect.write_request(&req, "m").unwrap();
        let mut expected = json(&body);
        if dialect != Dialect::Gemini {
            expected["model"] = json!("m");
        }
        assert_eq!(json(&written), expected, "{name}");
    }
    let req = openai::parse_request(&fixture("openai/request_signed.json")).unwrap();
    let Message::Assistant { tool_calls, .. } = &req.messages[1] else {
        panic!("{:?}", req.messages[1]);
    };
    assert_eq!(
        tool_calls[0].id,
        signed_id(),
        "the fixture's id is the one a client gets"
    );
}

#[test]
fn a_signed_openai_conversation_to_gemini_and_anthropic() {
    let req = openai::parse_request(&fixture("openai/request_signed.json")).unwrap();
    let gemini = for_target(Dialect::Gemini, &req, "gemini-3-pro-preview");
    golden("gemini/from_openai_request_signed.json", &gemini);
    let calls: Vec<Value> = json(&gemini)["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().unwrap().clone())
        .filter(|p| p.get("functionCall").is_some())
        .map(|p| p.get("thoughtSignature").cloned().unwrap_or_default())
        .collect();
    assert_eq!(
        calls,
        [
            json!(GEMINI_SIGNATURE),
            Value::Null,
            json!(signature::SKIP_VALIDATOR)
        ],
        "Gemini's own back where it was; the other vendor's step signed with the dummy"
    );

    let anthropic = for_target(Dialect::Anthropic, &req, "claude-sonnet-4-5");
    golden("anthropic/from_openai_request_signed.json", &anthropic);
    let text = String::from_utf8(anthropic).unwrap();
    assert!(
        !text.contains("__gts") && !text.contains("CiQBVKhc"),
        "{text}"
    );
    assert!(text.contains(r#""id":"call_Xq0waP2oMsCgz7IPyJ3rmAk_0""#));
    assert!(text.contains(r#""tool_use_id":"call_Xq0waP2oMsCgz7IPyJ3rmAk_0""#));
}

#[test]
fn an_anthropic_thinking_conversation_to_gemini_and_openai() {
    let req = anthropic::parse_request(&fixture("anthropic/request_thinking.json")).unwrap();
    let gemini = for_target(Dialect::Gemini, &req, "gemini-3-pro-preview");
    golden("gemini/from_anthropic_request_thinking.json", &gemini);
    let openai = for_target(Dialect::OpenAi, &req, "gpt-4o");
    golden("openai/from_anthropic_request_thinking.json", &openai);
    for (name, body) in [("gemini", &gemini), ("openai", &openai)] {
        let text = String::from_utf8(body.clone()).unwrap();
        for anthropic_only in ["thinking", "EuYBCkQY", "EmwKAhgB", "x_future_block"] {
            assert!(
                !text.contains(anthropic_only),
                "{name}: {anthropic_only}: {text}"
            );
        }
    }
}

#[test]
fn a_signed_gemini_conversation_to_openai() {
    let req = gemini::parse_request(&fixture("gemini/request_signed.json")).unwrap();
    let openai = for_target(Dialect::OpenAi, &req, "gpt-4o");
    golden("openai/from_gemini_request_signed.json", &openai);
    let text = String::from_utf8(openai).unwrap();
    assert!(
        !text.contains("__gts") && !text.contains("thought"),
        "{text}"
    );
}

#[test]
fn reasoning_answers_cross_dialects() {
    let mut resp = gemini::parse_response(&fixture("gemini/response_signed.json")).unwrap();
    resp.created = Some(1_741_569_952);
    assert_eq!(resp.text, "Let me look both up.", "no thought summary");
    let ids: Vec<&str> = resp.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        [signed_id().as_str(), "call_Xq0waP2oMsCgz7IPyJ3rmAk_1"]
    );
    golden(
        "openai/from_gemini_response_signed.json",
        &openai::write_response(&resp).unwrap(),
    );
    golden(
        "anthropic/from_gemini_response_signed.json",
        &anthropic::write_response(&resp).unwrap(),
    );
    // Back in Gemini's own shape, the signature is on the call that had it.
    let again = json(&gemini::write_response(&resp).unwrap());
    let parts = &again["candidates"][0]["content"]["parts"];
    assert_eq!(parts[1]["thoughtSignature"], GEMINI_SIGNATURE);
    assert!(parts[2].get("thoughtSignature").is_none());
    let back = gemini::parse_response(&serde_json::to_vec(&again).unwrap()).unwrap();
    let calls = |r: &switchyard::canonical::ChatResponse| -> Vec<(String, Value)> {
        let args = |c: &switchyard::canonical::ToolCall| json(c.arguments.as_bytes());
        r.tool_calls
            .iter()
            .map(|c| (c.id.clone(), args(c)))
            .collect()
    };
    assert_eq!(calls(&back), calls(&resp));

    let mut resp = anthropic::parse_response(&fixture("anthropic/response_thinking.json")).unwrap();
    assert_eq!(resp.text, "Let me check the weather in Paris.");
    assert_eq!(resp.tool_calls[0].id, "toolu_01CswdEQBMshySk6Y9DFKrfq");
    resp.created = Some(1_741_569_952);
    golden(
        "openai/from_anthropic_response_thinking.json",
        &openai::write_response(&resp).unwrap(),
    );
}

#[test]
fn an_anthropic_thinking_stream_decodes_to_its_answer_and_crosses_dialects() {
    let (events, done) = decode(
        Dialect::Anthropic,
        &fixture("anthropic/stream_thinking.sse"),
    );
    assert!(done);
    assert_eq!(
        events,
        [
            StreamEvent::Start {
                id: "msg_01Lp3yZbVvZsS8yGq4aW5sXn".into(),
                model: "claude-sonnet-4-5-20250929".into(),
            },
            StreamEvent::TextDelta("Let me check the weather in Paris.".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "toolu_01CswdEQBMshySk6Y9DFKrfq".into(),
                name: "get_weather".into(),
            },
            StreamEvent::ToolCallArgsDelta {
                index: 0,
                fragment: "{\"location\": ".into(),
            },
            StreamEvent::ToolCallArgsDelta {
                index: 0,
                fragment: "\"Paris, France\"}".into(),
            },
            StreamEvent::Finish(FinishReason::ToolCalls),
            StreamEvent::Usage(Usage::new(512, 146)),
        ],
        "thinking, redacted thinking, unknown blocks and events stay behind"
    );
    golden(
        "openai/from_anthropic_stream_thinking.sse",
        &encode(Dialect::OpenAi, &events),
    );
    golden(
        "gemini/from_anthropic_stream_thinking.sse",
        &encode(Dialect::Gemini, &events),
    );
}

#[test]
fn a_signed_gemini_stream_carries_its_signature_into_the_other_dialects() {
    let (events, done) = decode(Dialect::Gemini, &fixture("gemini/stream_signed.sse"));
    assert!(done);
    let starts: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallStart { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        [signed_id().as_str(), "call_Xq0waP2oMsCgz7IPyJ3rmAk_1"]
    );
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Let me look both up.", "no thought summary");
    golden(
        "openai/from_gemini_stream_signed.sse",
        &encode(Dialect::OpenAi, &events),
    );
    golden(
        "anthropic/from_gemini_stream_signed.sse",
        &encode(Dialect::Anthropic, &events),
    );
    // Through Gemini's own encoder and back: the same calls, the signature where it was.
    let gemini = encode(Dialect::Gemini, &events);
    assert!(String::from_utf8_lossy(&gemini)
        .contains(&format!(r#""thoughtSignature":"{GEMINI_SIGNATURE}""#)));
    let (again, done) = decode(Dialect::Gemini, &gemini);
    assert!(done);
    assert_eq!(merge_args(&again), merge_args(&events));
}

/// Each fixture read into every dialect and back keeps what a client reads, and never a
/// signature outside Gemini.
#[test]
fn every_reasoning_fixture_survives_every_dialect() {
    for (from, name) in REQUESTS {
        let req = from.parse_request(&fixture(name)).unwrap();
        for to in DIALECTS {
            let body = for_target(to, &req, "m");
            let text = String::from_utf8(body.clone()).unwrap();
            if to != Dialect::Gemini {
                assert!(!text.contains("__gts"), "{name} via {to:?}: {text}");
            }
            let back = to.parse_request(&body).unwrap();
            assert_eq!(
                calls_and_results(&back),
                calls_and_results(&req),
                "{name} via {to:?}"
            );
            assert_eq!(back.tools.len(), req.tools.len(), "{name} via {to:?}");
        }
    }
}

/// A conversation's tool calls (name, arguments) and results (text), in order: what must
/// survive a translation (ids may be made anew, a dialect's own parts stay behind).
fn calls_and_results(req: &ChatRequest) -> Vec<Value> {
    req.messages
        .iter()
        .flat_map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls
                .iter()
                .map(|c| json!([c.name, json(c.arguments.as_bytes())]))
                .collect(),
            Message::Tool(r) => vec![json!(r.content)],
            Message::User { .. } => Vec::new(),
        })
        .collect()
}
