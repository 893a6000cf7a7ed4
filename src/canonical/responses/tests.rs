//! Whole requests of the Responses dialect (Codex, the Agents SDK), their round trips through
//! the canonical model, and streams encoded then decoded.

#![allow(clippy::unwrap_used, clippy::panic)]

use serde_json::{json, Value};

use super::*;
use crate::canonical::error::ErrorClass;
use crate::canonical::types::{FinishReason, Image, StreamEvent, Usage};

/// A Codex CLI turn: instructions, a developer message, reasoning with encrypted content, a
/// call and its output, a built-in tool among the function tools.
const CODEX: &str = r#"{
  "model": "gpt-5-codex",
  "instructions": "You are Codex.",
  "input": [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>sandboxed</permissions>"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>cwd=/repo</environment_context>"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the test"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Looking around"}], "content": null, "encrypted_content": "gAAAA-secret"},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "Cargo.toml\nsrc"},
    {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAA-more"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}
  ],
  "tools": [
    {"type": "function", "name": "shell", "description": "Runs a command", "strict": false, "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}},
    {"type": "web_search"}
  ],
  "tool_choice": "auto",
  "parallel_tool_calls": false,
  "reasoning": {"effort": "medium", "summary": "auto"},
  "store": false,
  "stream": true,
  "include": ["reasoning.encrypted_content"],
  "prompt_cache_key": "conv-1"
}"#;

/// The OpenAI Agents SDK's second turn: easy input messages without `type`, the previous
/// output items as they came (ids, statuses, annotations), a strict function tool, nulls.
const AGENTS: &str = r#"{
  "model": "gpt-4.1",
  "instructions": "You are a helpful agent.",
  "input": [
    {"content": "What's the weather in Tokyo?", "role": "user"},
    {"id": "fc_abc", "arguments": "{\"city\":\"Tokyo\"}", "call_id": "call_x", "name": "get_weather", "type": "function_call", "status": "completed"},
    {"call_id": "call_x", "output": [{"type": "input_text", "text": "sunny"}], "type": "function_call_output"},
    {"id": "msg_1", "content": [{"annotations": [], "text": "It is sunny.", "type": "output_text", "logprobs": []}], "role": "assistant", "status": "completed", "type": "message"},
    {"role": "user", "content": [{"type": "input_text", "text": "And this?"}, {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}]}
  ],
  "tools": [{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}, "strict": true, "type": "function", "description": "Get the weather"}],
  "top_p": null,
  "temperature": 0.3,
  "max_output_tokens": 500,
  "text": {"format": {"type": "json_schema", "name": "weather", "schema": {"type": "object", "properties": {"sky": {"type": "string"}}}, "strict": true}, "verbosity": "low"},
  "metadata": {"run": "7"}
}"#;

fn assistant(message: &Message) -> (&[Part], &[ToolCall]) {
    match message {
        Message::Assistant {
            content,
            tool_calls,
        } => (content, tool_calls),
        other => panic!("not an assistant message: {other:?}"),
    }
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

/// Asserts two requests are the same, their kept fields compared as JSON (the writer keeps
/// each kept value's text but not the spacing of the `tools` array around them).
fn assert_same(a: &ChatRequest, b: &ChatRequest) {
    let bare = |r: &ChatRequest| ChatRequest {
        extra: crate::canonical::Extra::default(),
        ..r.clone()
    };
    assert_eq!(bare(a), bare(b));
    let kept = |r: &ChatRequest| -> Vec<(String, Value)> {
        r.extra
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::from_str(v.get()).unwrap()))
            .collect()
    };
    assert_eq!(a.extra.dialect, b.extra.dialect);
    assert_eq!(kept(a), kept(b));
}

#[test]
fn parses_a_codex_request() {
    let req = parse_request(CODEX.as_bytes()).unwrap();
    assert_eq!(req.model, "gpt-5-codex");
    assert_eq!(
        req.system,
        ["You are Codex.", "<permissions>sandboxed</permissions>"]
    );
    assert_eq!(req.messages.len(), 5, "{:#?}", req.messages);
    assert_eq!(
        req.messages[0],
        Message::user("<environment_context>cwd=/repo</environment_context>")
    );
    let (content, calls) = assistant(&req.messages[2]);
    let [Part::Other { dialect, raw }] = content else {
        panic!("reasoning not kept: {content:?}");
    };
    assert_eq!(*dialect, Dialect::Responses);
    assert!(raw.get().contains(r#""encrypted_content": "gAAAA-secret""#));
    assert_eq!(
        calls,
        [ToolCall {
            id: "call_1".into(),
            name: "shell".into(),
            arguments: r#"{"command":["ls"]}"#.into(),
        }]
    );
    assert_eq!(
        req.messages[3],
        Message::Tool(ToolResult {
            tool_call_id: "call_1".into(),
            content: "Cargo.toml\nsrc".into(),
            is_error: false,
            cache: None,
        })
    );
    // The second reasoning item and the answer after it are one assistant message.
    let (content, calls) = assistant(&req.messages[4]);
    assert!(matches!(content[0], Part::Other { .. }));
    assert_eq!(content[1], Part::Text("Done.".into()));
    assert!(calls.is_empty());
    assert_eq!(req.tools.len(), 1);
    assert_eq!(req.tools[0].name, "shell");
    assert_eq!(req.tool_choice, Some(ToolChoice::Auto));
    assert!(req.stream);
    let kept: Vec<&str> = req.extra.fields.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kept,
        [
            "tools",
            "parallel_tool_calls",
            "reasoning",
            "store",
            "include",
            "prompt_cache_key"
        ]
    );
    assert_eq!(needs_native(CODEX.as_bytes()), Some("a web_search tool"));
}

#[test]
fn a_codex_request_round_trips() {
    let req = parse_request(CODEX.as_bytes()).unwrap();
    let written = write_request(&req, "gpt-5-codex").unwrap();
    assert_same(&parse_request(&written).unwrap(), &req);
    let out = json_of(&written);
    assert_eq!(out["instructions"], "You are Codex.");
    assert_eq!(
        out["input"][0],
        json!({"type": "message", "role": "developer", "content": "<permissions>sandboxed</permissions>"})
    );
    let original = json_of(CODEX.as_bytes());
    // Reasoning items and the built-in tool go back as they came, in their places.
    assert_eq!(out["input"][3], original["input"][3]);
    assert_eq!(
        out["input"][4],
        json!({"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"})
    );
    assert_eq!(
        out["input"][5],
        json!({"type": "function_call_output", "call_id": "call_1", "output": "Cargo.toml\nsrc"})
    );
    assert_eq!(out["input"][6], original["input"][6]);
    assert_eq!(
        out["input"][7],
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]})
    );
    assert_eq!(out["tools"], original["tools"]);
    for key in [
        "tool_choice",
        "parallel_tool_calls",
        "reasoning",
        "store",
        "stream",
        "include",
        "prompt_cache_key",
    ] {
        assert_eq!(out[key], original[key], "{key}");
    }
    // Writing what was written gives the same bytes.
    let again = write_request(&parse_request(&written).unwrap(), "gpt-5-codex").unwrap();
    assert_eq!(String::from_utf8(again), String::from_utf8(written));
}

#[test]
fn parses_the_agents_sdk_shape() {
    let req = parse_request(AGENTS.as_bytes()).unwrap();
    assert_eq!(req.system, ["You are a helpful agent."]);
    assert_eq!(
        req.messages[0],
        Message::user("What's the weather in Tokyo?")
    );
    let (content, calls) = assistant(&req.messages[1]);
    assert!(content.is_empty());
    assert_eq!(calls[0].id, "call_x");
    assert_eq!(calls[0].arguments, r#"{"city":"Tokyo"}"#);
    assert_eq!(
        req.messages[2],
        Message::Tool(ToolResult {
            tool_call_id: "call_x".into(),
            content: "sunny".into(),
            is_error: false,
            cache: None,
        })
    );
    assert_eq!(req.messages[3], Message::assistant("It is sunny."));
    let Message::User { content } = &req.messages[4] else {
        panic!("not a user message");
    };
    assert_eq!(
        content[1],
        Part::Image(Image::Base64 {
            media_type: "image/png".into(),
            data: "AAAA".into()
        })
    );
    assert_eq!(req.top_p, None);
    assert_eq!(req.temperature, Some(0.3));
    assert_eq!(req.max_tokens, Some(500));
    let Some(ResponseFormat::JsonSchema {
        name,
        schema,
        strict,
    }) = &req.response_format
    else {
        panic!("no json schema: {:?}", req.response_format);
    };
    assert_eq!(name, "weather");
    assert_eq!(
        schema.get(),
        r#"{"type": "object", "properties": {"sky": {"type": "string"}}}"#
    );
    assert_eq!(*strict, Some(true));
    assert_eq!(
        req.extra.get("text").unwrap().get(),
        r#"{"verbosity":"low"}"#
    );
    assert_eq!(needs_native(AGENTS.as_bytes()), None);
}

#[test]
fn the_agents_sdk_shape_round_trips() {
    let req = parse_request(AGENTS.as_bytes()).unwrap();
    let written = write_request(&req, "gpt-4.1").unwrap();
    assert_same(&parse_request(&written).unwrap(), &req);
    let out = json_of(&written);
    let original = json_of(AGENTS.as_bytes());
    assert_eq!(out["tools"], original["tools"]);
    assert_eq!(out["text"], original["text"]);
    assert_eq!(out["metadata"], original["metadata"]);
    assert_eq!(out["max_output_tokens"], 500);
    assert_eq!(
        out["input"][3],
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]})
    );
    assert_eq!(
        out["input"][4]["content"][1],
        json!({"type": "input_image", "image_url": "data:image/png;base64,AAAA"})
    );
}

#[test]
fn rewritten_tools_keep_strict_and_others_are_not_strict() {
    let mut req = parse_request(AGENTS.as_bytes()).unwrap();
    req.tools[0].description = Some("Weather, now".into());
    req.tools.push(Tool {
        name: "from_chat".into(),
        description: None,
        parameters: None,
        cache: None,
    });
    let out = json_of(&write_request(&req, "gpt-4.1").unwrap());
    assert_eq!(out["tools"][0]["description"], "Weather, now");
    assert_eq!(out["tools"][0]["strict"], true);
    assert_eq!(
        out["tools"][1],
        json!({"type": "function", "name": "from_chat", "parameters": {"type": "object", "properties": {}}, "strict": false})
    );
}

#[test]
fn writes_a_request_from_another_dialect() {
    let chat = br#"{"model":"m","messages":[
        {"role":"system","content":"A"},{"role":"system","content":"B"},
        {"role":"user","content":"hi"},
        {"role":"assistant","content":"Let me look.","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"c1","content":"ok"}],
        "response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"},"strict":true}},
        "tool_choice":{"type":"function","function":{"name":"f"}},
        "stop":["X"],"seed":7,"max_tokens":9}"#;
    let req = crate::canonical::openai::parse_request(chat).unwrap();
    let out = json_of(&write_request(&req, "gpt-5").unwrap());
    assert_eq!(
        out,
        json!({
            "model": "gpt-5",
            "instructions": "A",
            "input": [
                {"type": "message", "role": "developer", "content": "B"},
                {"type": "message", "role": "user", "content": "hi"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"}
            ],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}, "strict": true}},
            "max_output_tokens": 9
        })
    );
}

#[test]
fn content_after_a_call_starts_a_new_assistant_message() {
    let body = br#"{"input":[
        {"type":"function_call","call_id":"a","name":"f","arguments":"{}"},
        {"type":"reasoning","id":"rs","summary":[]},
        {"type":"function_call","call_id":"b","name":"f","arguments":"{}"},
        {"type":"web_search_call","id":"ws","status":"completed"},
        {"type":"message","role":"assistant","content":[{"type":"refusal","refusal":"no"}]}
    ]}"#;
    let req = parse_request(body).unwrap();
    assert_eq!(req.messages.len(), 3, "{:#?}", req.messages);
    assert_eq!(assistant(&req.messages[0]).1[0].id, "a");
    let (content, calls) = assistant(&req.messages[1]);
    assert_eq!((content.len(), calls[0].id.as_str()), (1, "b"));
    let (content, _) = assistant(&req.messages[2]);
    let Part::Other { raw, .. } = &content[1] else {
        panic!("refusal not kept");
    };
    assert_eq!(
        raw.get(),
        r#"{"type":"message","role":"assistant","content":[{"type":"refusal","refusal":"no"}]}"#
    );
    let out = json_of(&write_request(&req, "m").unwrap());
    let kinds: Vec<&str> = out["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "function_call",
            "reasoning",
            "function_call",
            "web_search_call",
            "message"
        ]
    );
}

#[test]
fn a_string_input_is_one_user_message_and_text_formats_map() {
    let req = parse_request(
        br#"{"model":"m","input":"hello","text":{"format":{"type":"json_object"}},"tool_choice":"required"}"#,
    )
    .unwrap();
    assert_eq!(req.messages, [Message::user("hello")]);
    assert_eq!(req.response_format, Some(ResponseFormat::JsonObject));
    assert_eq!(req.tool_choice, Some(ToolChoice::Required));
    assert!(req.extra.fields.is_empty());
    let kept = parse_request(
        br#"{"input":[],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]},"text":{"format":{"type":"grammar","x":1}}}"#,
    )
    .unwrap();
    assert_eq!(kept.tool_choice, None);
    assert_eq!(kept.response_format, None);
    let out = json_of(&write_request(&kept, "m").unwrap());
    assert_eq!(out["tool_choice"]["type"], "allowed_tools");
    assert_eq!(out["text"], json!({"format": {"type": "grammar", "x": 1}}));
    let forced = ChatRequest {
        tool_choice: Some(ToolChoice::None),
        ..kept
    };
    let out = String::from_utf8(write_request(&forced, "m").unwrap()).unwrap();
    assert_eq!(out.matches("tool_choice").count(), 1, "{out}");
    assert!(out.contains(r#""tool_choice":"none""#), "{out}");
}

#[test]
fn rejects_bad_shapes_naming_the_field() {
    let cases: [(&[u8], &str); 9] = [
        (b"[]", "invalid JSON"),
        (br#"{"input":5}"#, "`input`"),
        (
            br#"{"input":[{"content":"x"}]}"#,
            "`input[0]`: an item needs `type`",
        ),
        (
            br#"{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}"#,
            "`input[0]`: this item needs `call_id`",
        ),
        (
            br#"{"input":[{"type":"function_call_output","call_id":"c"}]}"#,
            "`input[0]`: a function_call_output needs `output`",
        ),
        (
            br#"{"input":["x",{"role":"wizard","content":"x"}]}"#,
            "`input[0]`",
        ),
        (
            br#"{"input":[{"role":"user","content":"x"},{"role":"wizard","content":"x"}]}"#,
            "`input[1].role`: unsupported role `wizard`",
        ),
        (
            br#"{"tools":[{"type":"function","function":{"name":"f"}}]}"#,
            "`tools[0]`: a function tool needs `name`",
        ),
        (
            br#"{"text":{"format":{"type":"json_schema","name":"s"}}}"#,
            "`text.format`: a json_schema format needs `schema`",
        ),
    ];
    for (body, expected) in cases {
        let err = parse_request(body).unwrap_err().to_string();
        assert!(
            err.contains(expected),
            "{}: {err}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn needs_native_names_what_only_responses_serves() {
    let cases: [(&str, Option<&str>); 10] = [
        (r#"{"input":"hi","previous_response_id":"resp_1"}"#, None),
        (
            r#"{"input":[{"type":"reasoning","id":"rs","summary":[]}],"tools":[{"type":"function","name":"f"}]}"#,
            None,
        ),
        (
            r#"{"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/y.png"}]}]}"#,
            None,
        ),
        (
            r#"{"tools":[{"type":"function","name":"f"},{"type":"file_search","vector_store_ids":["vs"]}]}"#,
            Some("a file_search tool"),
        ),
        (
            r#"{"tools":[{"type":"custom","name":"apply_patch","format":{"type":"grammar"}}]}"#,
            Some("a custom (freeform) tool"),
        ),
        (
            r#"{"input":[{"type":"item_reference","id":"msg_1"}]}"#,
            Some("an item_reference input item"),
        ),
        (
            r#"{"input":[{"type":"computer_call_output","call_id":"c","output":{}}]}"#,
            Some("a built-in tool call item in the input"),
        ),
        (
            r#"{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}"#,
            Some("an input_file part"),
        ),
        (
            r#"{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}"#,
            Some("an input_image by file_id"),
        ),
        ("not json", None),
    ];
    for (body, expected) in cases {
        assert_eq!(needs_native(body.as_bytes()), expected, "{body}");
    }
}

/// Splits an SSE byte stream into `(event name, data)` pairs.
pub(super) fn sse_events(bytes: &[u8]) -> Vec<(String, String)> {
    let text = std::str::from_utf8(bytes).unwrap();
    text.split("\n\n")
        .filter(|block| !block.is_empty())
        .map(|block| {
            let (event, data) = block.split_once('\n').unwrap();
            (
                event.strip_prefix("event: ").unwrap().to_owned(),
                data.strip_prefix("data: ").unwrap().to_owned(),
            )
        })
        .collect()
}

fn encode_then_decode(events: &[StreamEvent]) -> (Vec<StreamEvent>, bool) {
    let mut encoder = Encoder::new();
    let mut bytes = Vec::new();
    for event in events {
        encoder.encode(event, &mut bytes);
    }
    encoder.finish(&mut bytes);
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    for (name, data) in sse_events(&bytes) {
        decoder
            .decode(Some(&name), data.as_bytes(), &mut out)
            .unwrap();
    }
    (out, decoder.is_done())
}

#[test]
fn an_encoded_stream_decodes_to_the_same_events() {
    let start = StreamEvent::Start {
        id: "resp_1".into(),
        model: "gpt-5".into(),
    };
    let usage = StreamEvent::Usage(Usage::new(12, 7));
    let tools = vec![
        start.clone(),
        StreamEvent::TextDelta("Let me ".into()),
        StreamEvent::TextDelta("look.".into()),
        StreamEvent::ToolCallStart {
            index: 0,
            id: "call_1".into(),
            name: "shell".into(),
        },
        StreamEvent::ToolCallArgsDelta {
            index: 0,
            fragment: r#"{"command":"#.into(),
        },
        StreamEvent::ToolCallArgsDelta {
            index: 0,
            fragment: r#"["ls"]}"#.into(),
        },
        StreamEvent::ToolCallStart {
            index: 1,
            id: "call_2".into(),
            name: "read".into(),
        },
        StreamEvent::ToolCallArgsDelta {
            index: 1,
            fragment: "{}".into(),
        },
        StreamEvent::Finish(FinishReason::ToolCalls),
        usage.clone(),
    ];
    assert_eq!(encode_then_decode(&tools), (tools, true));
    let cut = vec![
        start.clone(),
        StreamEvent::TextDelta("Once upon".into()),
        StreamEvent::Finish(FinishReason::Length),
        usage,
    ];
    assert_eq!(encode_then_decode(&cut), (cut, true));
    for kind in [
        ErrorClass::ContextLength,
        ErrorClass::RateLimited,
        ErrorClass::Overloaded,
        ErrorClass::ContentFilter,
        ErrorClass::Auth,
    ] {
        let failed = vec![
            start.clone(),
            StreamEvent::TextDelta("Hi".into()),
            StreamEvent::Error {
                message: "it broke".into(),
                kind,
            },
        ];
        assert_eq!(encode_then_decode(&failed), (failed, true), "{kind:?}");
    }
}
