//! Golden wire fixtures of each dialect (tests/fixtures/, written from the providers' public docs)
//! round-tripped through the canonical model and translated across dialects.
//!
//! Expected translations live in `tests/fixtures/<dialect>/from_*` files. After a deliberate
//! change, `UPDATE_GOLDEN=1 cargo test --test translation` rewrites them; review the diff.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::Value;
use support::golden::*;
use switchyard::canonical::{
    anthropic, gemini, openai, ChatRequest, ChatResponse, Dialect, ErrorClass, FinishReason,
    Message, Part, StreamEvent, Usage,
};

// ---- requests ----

const REQUESTS: [(Dialect, &str, &str); 3] = [
    (Dialect::OpenAi, "openai/request_tools.json", "gpt-4o"),
    (
        Dialect::Anthropic,
        "anthropic/request_tools.json",
        "claude-sonnet-4-5",
    ),
    (Dialect::Gemini, "gemini/request_tools.json", ""),
];

#[test]
fn requests_round_trip_through_the_canonical_model() {
    for (dialect, name, model) in REQUESTS {
        let body = fixture(name);
        let req = dialect.parse_request(&body).unwrap();
        let written = dialect.write_request(&req, model).unwrap();
        assert_eq!(json(&written), json(&body), "{name}");
        assert_eq!(dialect.parse_request(&written).unwrap(), req, "{name}");
    }
}

#[test]
fn openai_request_with_tools_to_anthropic_and_gemini() {
    let req = openai::parse_request(&fixture("openai/request_tools.json")).unwrap();
    let anthropic = anthropic::write_request(&req, "claude-sonnet-4-5").unwrap();
    golden("anthropic/from_openai_request_tools.json", &anthropic);
    let gemini = gemini::write_request(&req, "gemini-2.5-flash").unwrap();
    golden("gemini/from_openai_request_tools.json", &gemini);
}

#[test]
fn anthropic_and_gemini_requests_to_openai() {
    let req = anthropic::parse_request(&fixture("anthropic/request_tools.json")).unwrap();
    golden(
        "openai/from_anthropic_request_tools.json",
        &openai::write_request(&req, "gpt-4o").unwrap(),
    );
    let req = gemini::parse_request(&fixture("gemini/request_tools.json")).unwrap();
    golden(
        "openai/from_gemini_request_tools.json",
        &openai::write_request(&req, "gpt-4.1-mini").unwrap(),
    );
}

/// What must survive any translation: system prompts, roles, texts, tool names, arguments
/// (as JSON) and results. Ids may be made up (Gemini has none), and a dialect's own parts and
/// fields stay behind.
fn essence(req: &ChatRequest) -> Value {
    let parts = |content: &[Part]| -> Vec<Value> {
        content
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(Value::String(t.clone())),
                Part::Image(i) => Some(Value::String(format!("{i:?}"))),
                Part::Other { .. } | Part::CacheBreakpoint(_) => None,
            })
            .collect()
    };
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| match m {
            Message::User { content } => serde_json::json!({"user": parts(content)}),
            Message::Assistant {
                content,
                tool_calls,
            } => serde_json::json!({
                "assistant": parts(content),
                "calls": tool_calls
                    .iter()
                    .map(|c| serde_json::json!([c.name, json(c.arguments.as_bytes())]))
                    .collect::<Vec<_>>(),
            }),
            Message::Tool(r) => serde_json::json!({"tool": r.content, "error": r.is_error}),
        })
        .collect();
    let tools: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    serde_json::json!({
        "system": req.system,
        "messages": messages,
        "tools": tools,
        "tool_choice": format!("{:?}", req.tool_choice),
        "stop": req.stop,
        "max_tokens": req.max_tokens,
    })
}

#[test]
fn every_request_survives_every_dialect() {
    for (from, name, _) in REQUESTS {
        let req = from.parse_request(&fixture(name)).unwrap();
        for to in DIALECTS {
            let body = to.write_request(&req, "m").unwrap();
            let back = to.parse_request(&body).unwrap();
            assert_eq!(essence(&back), essence(&req), "{name} via {to:?}");
        }
    }
}

// ---- responses ----

const RESPONSES: [(Dialect, &str); 3] = [
    (Dialect::OpenAi, "openai/response_tool_call.json"),
    (Dialect::Anthropic, "anthropic/response_tool_call.json"),
    (Dialect::Gemini, "gemini/response_function_call.json"),
];

#[test]
fn responses_parse_and_round_trip() {
    for (dialect, name) in RESPONSES {
        let resp = dialect.parse_response(&fixture(name)).unwrap();
        assert_eq!(resp.finish_reason, FinishReason::ToolCalls, "{name}");
        assert_eq!(resp.tool_calls.len(), 1, "{name}");
        let args = json(resp.tool_calls[0].arguments.as_bytes());
        assert!(args.get("location").is_some(), "{name}: {args}");
        let written = dialect.write_response(&resp).unwrap();
        let mut again = dialect.parse_response(&written).unwrap();
        if dialect != Dialect::OpenAi {
            again.created = resp.created;
        }
        assert_eq!(again, resp, "{name}");
    }
    let openai = openai::parse_response(&fixture("openai/response_tool_call.json")).unwrap();
    assert_eq!(openai.usage, Some(Usage::new(82, 17)));
    assert_eq!(openai.created, Some(1_741_569_952));
    let gemini = gemini::parse_response(&fixture("gemini/response_function_call.json")).unwrap();
    assert_eq!(gemini.tool_calls[0].id, "call_mJ0KaOWsGtKb1dkP8qHl2A0_0");
    assert_eq!(
        gemini.usage.map(|u| u.output),
        Some(35),
        "thoughts count as output"
    );
}

#[test]
fn responses_cross_dialects() {
    let mut resp: ChatResponse =
        anthropic::parse_response(&fixture("anthropic/response_tool_call.json")).unwrap();
    resp.created = Some(1_741_569_952);
    golden(
        "openai/from_anthropic_response_tool_call.json",
        &openai::write_response(&resp).unwrap(),
    );
    let resp = gemini::parse_response(&fixture("gemini/response_function_call.json")).unwrap();
    golden(
        "anthropic/from_gemini_response_function_call.json",
        &anthropic::write_response(&resp).unwrap(),
    );
}

#[test]
fn a_blocked_gemini_prompt_is_a_content_filter_finish() {
    let body = br#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":8,"totalTokenCount":8},"modelVersion":"gemini-2.5-flash"}"#;
    let resp = gemini::parse_response(body).unwrap();
    assert_eq!(resp.finish_reason, FinishReason::ContentFilter);
    assert!(resp.text.is_empty());
}

// ---- streams ----

fn anthropic_stream_events() -> Vec<StreamEvent> {
    vec![
        StreamEvent::Start {
            id: "msg_014p7gG3wDgGV9EUtLvnow3U".into(),
            model: "claude-sonnet-4-5-20250929".into(),
        },
        StreamEvent::TextDelta("Okay".into()),
        StreamEvent::TextDelta(", let's check the weather for San Francisco, CA:".into()),
        StreamEvent::ToolCallStart {
            index: 0,
            id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
            name: "get_weather".into(),
        },
        StreamEvent::ToolCallArgsDelta {
            index: 0,
            fragment: "{\"location\":".into(),
        },
        StreamEvent::ToolCallArgsDelta {
            index: 0,
            fragment: " \"San Francisco, CA\"}".into(),
        },
        StreamEvent::Finish(FinishReason::ToolCalls),
        StreamEvent::Usage(Usage::new(472, 89)),
    ]
}

#[test]
fn stream_transcripts_decode_to_canonical_events() {
    let (events, done) = decode(
        Dialect::Anthropic,
        &fixture("anthropic/stream_tool_call.sse"),
    );
    assert!(done);
    assert_eq!(events, anthropic_stream_events());

    let (events, done) = decode(Dialect::OpenAi, &fixture("openai/stream_tool_call.sse"));
    assert!(done);
    assert_eq!(events.len(), 10);
    assert_eq!(
        events[1],
        StreamEvent::ToolCallStart {
            index: 0,
            id: "call_DdmO9pD3xa9XTPNJ32zg2hcA".into(),
            name: "get_weather".into()
        }
    );
    let args: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallArgsDelta { fragment, .. } => Some(fragment.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(args, r#"{"location":"Paris, France"}"#);
    assert_eq!(
        events[8..],
        [
            StreamEvent::Finish(FinishReason::ToolCalls),
            StreamEvent::Usage(Usage::new(60, 15))
        ]
    );

    let (events, done) = decode(Dialect::Gemini, &fixture("gemini/stream_function_call.sse"));
    assert!(done);
    assert_eq!(
        events,
        [
            StreamEvent::Start {
                id: "6Ln5aKnvG8OhkdUPlY-m8AQ".into(),
                model: "gemini-2.5-flash".into()
            },
            StreamEvent::TextDelta("Let me check".into()),
            StreamEvent::TextDelta(" the weather in London.".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "call_6Ln5aKnvG8OhkdUPlY-m8AQ_0".into(),
                name: "get_current_temperature".into()
            },
            StreamEvent::ToolCallArgsDelta {
                index: 0,
                fragment: r#"{"location": "London"}"#.into()
            },
            StreamEvent::Finish(FinishReason::ToolCalls),
            StreamEvent::Usage(Usage::new(30, 20)),
        ]
    );
}

#[test]
fn streams_round_trip_through_their_own_dialect() {
    for (dialect, name) in [
        (Dialect::OpenAi, "openai/stream_tool_call.sse"),
        (Dialect::Anthropic, "anthropic/stream_tool_call.sse"),
        (Dialect::Gemini, "gemini/stream_function_call.sse"),
    ] {
        let (events, _) = decode(dialect, &fixture(name));
        let (again, done) = decode(dialect, &encode(dialect, &events));
        assert!(done, "{name}");
        // Gemini sends function calls whole: its encoder joins the argument fragments.
        assert_eq!(merge_args(&again), merge_args(&events), "{name}");
    }
}

#[test]
fn anthropic_stream_to_openai_chunks() {
    let (events, _) = decode(
        Dialect::Anthropic,
        &fixture("anthropic/stream_tool_call.sse"),
    );
    golden(
        "openai/from_anthropic_stream_tool_call.sse",
        &encode(Dialect::OpenAi, &events),
    );
}

#[test]
fn gemini_stream_to_anthropic_events() {
    let (events, _) = decode(Dialect::Gemini, &fixture("gemini/stream_function_call.sse"));
    golden(
        "anthropic/from_gemini_stream_function_call.sse",
        &encode(Dialect::Anthropic, &events),
    );
}

#[test]
fn openai_stream_to_gemini_and_anthropic() {
    let (events, _) = decode(Dialect::OpenAi, &fixture("openai/stream_tool_call.sse"));
    golden(
        "gemini/from_openai_stream_tool_call.sse",
        &encode(Dialect::Gemini, &events),
    );
    golden(
        "anthropic/from_openai_stream_tool_call.sse",
        &encode(Dialect::Anthropic, &events),
    );
}

#[test]
fn every_stream_survives_every_dialect() {
    for (from, name) in [
        (Dialect::OpenAi, "openai/stream_tool_call.sse"),
        (Dialect::Anthropic, "anthropic/stream_tool_call.sse"),
        (Dialect::Gemini, "gemini/stream_function_call.sse"),
    ] {
        let (events, _) = decode(from, &fixture(name));
        for to in DIALECTS {
            let (back, done) = decode(to, &encode(to, &events));
            assert!(done, "{name} via {to:?}");
            let mut expected = merge_args(&events);
            let mut back = merge_args(&back);
            // Gemini calls carry no id of their own (the decoder makes one up), and text may be
            // chunked differently: compare what a client reads.
            for list in [&mut expected, &mut back] {
                for event in list.iter_mut() {
                    if let StreamEvent::ToolCallStart { id, .. } = event {
                        id.clear();
                    }
                }
                let text: String = list
                    .iter()
                    .filter_map(|e| match e {
                        StreamEvent::TextDelta(t) => Some(t.as_str()),
                        _ => None,
                    })
                    .collect();
                list.retain(|e| !matches!(e, StreamEvent::TextDelta(_)));
                list.push(StreamEvent::TextDelta(text));
            }
            assert_eq!(back, expected, "{name} via {to:?}");
        }
    }
}

#[test]
fn in_band_stream_errors_are_classified() {
    let (events, done) = decode(Dialect::Anthropic, &fixture("anthropic/stream_error.sse"));
    assert!(!done, "an error is not a complete stream");
    assert_eq!(events[1], StreamEvent::TextDelta("Hello".into()));
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Error {
            message: "Overloaded".into(),
            kind: ErrorClass::Overloaded
        })
    );
    let (events, done) = decode(Dialect::Gemini, &fixture("gemini/stream_error.sse"));
    assert!(!done);
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Error {
            kind: ErrorClass::Overloaded,
            ..
        })
    ));
    // Written on to an OpenAI client: the error object after the text.
    let sse = String::from_utf8(encode(Dialect::OpenAi, &events)).unwrap();
    assert!(sse.contains(r#"data: {"error":{"message":"The model is overloaded. Please try again later.","type":"server_error","param":null,"code":"overloaded"}}"#), "{sse}");
    let sse = String::from_utf8(encode(Dialect::Anthropic, &events)).unwrap();
    assert!(
        sse.contains(
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\""
        ),
        "{sse}"
    );
}

// ---- errors ----

#[test]
fn error_bodies_are_classified_for_failover() {
    let e = openai::parse_error(400, &fixture("openai/error_context_length.json"));
    assert_eq!(e.class, ErrorClass::ContextLength);
    let e = anthropic::parse_error(529, &fixture("anthropic/error_overloaded.json"));
    assert_eq!(
        (e.class, e.kind.as_deref()),
        (ErrorClass::Overloaded, Some("overloaded_error"))
    );
    let e = anthropic::parse_error(400, &fixture("anthropic/error_prompt_too_long.json"));
    assert_eq!(e.class, ErrorClass::ContextLength);
    let e = gemini::parse_error(429, &fixture("gemini/error_rate_limited.json"));
    assert_eq!(e.class, ErrorClass::RateLimited);
    assert_eq!(e.retry_delay, Some(std::time::Duration::from_secs(22)));
    // The same error told to a client of another dialect.
    assert_eq!(
        json(&anthropic::write_error(&e)),
        serde_json::json!({"type": "error", "error": {"type": "rate_limit_error", "message": e.message}})
    );
    let ctx = openai::parse_error(400, &fixture("openai/error_context_length.json"));
    assert_eq!(
        json(&gemini::write_error(&ctx))["error"]["status"],
        "INVALID_ARGUMENT"
    );
}
