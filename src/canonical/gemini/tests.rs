//! Parsing details: snake_case names, OpenAPI `parameters`, function responses.
#![allow(clippy::unwrap_used)]
use super::*;
use crate::canonical::types::Part;

#[test]
fn reads_snake_case_and_openapi_parameters() {
    let body = br#"{"system_instruction":{"parts":[{"text":"s"}]},
        "contents":[{"role":"user","parts":[{"text":"hi"}]},
            {"role":"model","parts":[{"function_call":{"name":"f","args":{"a":1}}},{"functionCall":{"name":"f"}}]},
            {"role":"user","parts":[{"functionResponse":{"name":"f","response":{"error":"boom"}}},{"functionResponse":{"name":"f","response":{"a":1,"b":2}}}]}],
        "tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT"}}]},{"googleSearch":{}}],
        "generation_config":{"response_mime_type":"application/json","seed":3}}"#;
    let req = parse_request(body).unwrap();
    assert_eq!(req.system, ["s"]);
    assert_eq!(req.tools.len(), 1);
    assert_eq!(
        req.tools[0].parameters.as_ref().map(RawJson::get),
        Some(r#"{"type":"OBJECT"}"#)
    );
    assert_eq!(req.response_format, Some(ResponseFormat::JsonObject));
    assert_eq!(
        req.extra.get(GENERATION_CONFIG).map(RawJson::get),
        Some(r#"{"seed":3}"#)
    );
    let results: Vec<(&str, &str, bool)> = req
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.tool_call_id.as_str(), r.content.as_str(), r.is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("call_0", "boom", true),
            ("call_1", r#"{"a":1,"b":2}"#, false)
        ]
    );
    let out: serde_json::Value =
        serde_json::from_slice(&write_request(&req, "g").unwrap()).unwrap();
    assert_eq!(
        out["generationConfig"],
        serde_json::json!({"responseMimeType": "application/json", "seed": 3})
    );
    assert!(out.get("generation_config").is_none());
}

/// A Gemini answer with parallel calls (only the first signed, as Gemini signs them), then
/// the conversation as a client of another dialect sends it back: the signature returns to
/// the call that had it, the other call stays unsigned, and the results pair with their calls.
#[test]
fn a_signature_carried_in_an_id_goes_back_on_its_call() {
    let answer = br#"{"candidates":[{"content":{"role":"model","parts":[
        {"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"CiQB0e2Kb+/x9y=="},
        {"functionCall":{"name":"get_time","args":{"tz":"CET"}}}]},"finishReason":"STOP"}],
        "responseId":"r1"}"#;
    let resp = parse_response(answer).unwrap();
    let ids: Vec<&str> = resp.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_r1_0__gts214_CiQB0e2Kb-_x9y", "call_r1_1"]);
    let req = ChatRequest {
        messages: vec![
            Message::user("Weather and time in Paris?"),
            Message::Assistant {
                content: Vec::new(),
                tool_calls: resp.tool_calls.clone(),
            },
            Message::Tool(ToolResult {
                tool_call_id: ids[1].into(),
                content: "14:00".into(),
                is_error: false,
                cache: None,
            }),
            Message::Tool(ToolResult {
                tool_call_id: ids[0].into(),
                content: "sunny".into(),
                is_error: false,
                cache: None,
            }),
        ],
        ..ChatRequest::default()
    };
    let out: serde_json::Value =
        serde_json::from_slice(&write_request(&req, "gemini-3-pro-preview").unwrap()).unwrap();
    assert_eq!(
        out["contents"][1],
        serde_json::json!({"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
             "thoughtSignature": "CiQB0e2Kb+/x9y=="},
            {"functionCall": {"name": "get_time", "args": {"tz": "CET"}}}
        ]})
    );
    assert_eq!(
        out["contents"][2],
        serde_json::json!({"role": "user", "parts": [
            {"functionResponse": {"name": "get_time", "response": {"output": "14:00"}}},
            {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}}
        ]})
    );
    // Written back as a Gemini answer, the signature is where Gemini put it.
    let again: serde_json::Value = serde_json::from_slice(&write_response(&resp).unwrap()).unwrap();
    assert_eq!(
        again["candidates"][0]["content"]["parts"][0]["thoughtSignature"],
        "CiQB0e2Kb+/x9y=="
    );
    assert!(again["candidates"][0]["content"]["parts"][1]
        .get("thoughtSignature")
        .is_none());
}

/// Calls Gemini did not make: each step of the current turn gets the documented dummy value
/// on its first call; steps of earlier turns are not checked by Gemini and get nothing.
#[test]
fn unsigned_steps_of_the_current_turn_get_the_validator_skipping_value() {
    let call = |id: &str| ToolCall {
        id: id.into(),
        name: "f".into(),
        arguments: "{}".into(),
    };
    let result = |id: &str| {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            content: "ok".into(),
            is_error: false,
            cache: None,
        })
    };
    let step = |calls: Vec<ToolCall>| Message::Assistant {
        content: vec![Part::Text("Calling.".into())],
        tool_calls: calls,
    };
    let req = ChatRequest {
        messages: vec![
            Message::user("first"),
            step(vec![call("toolu_1")]),
            result("toolu_1"),
            Message::assistant("Done."),
            Message::user("second"),
            step(vec![call("call_a"), call("call_b")]),
            result("call_a"),
            result("call_b"),
            step(vec![call("call_c")]),
            result("call_c"),
        ],
        ..ChatRequest::default()
    };
    let out: serde_json::Value =
        serde_json::from_slice(&write_request(&req, "gemini-3-pro-preview").unwrap()).unwrap();
    let signatures: Vec<(String, serde_json::Value)> = out["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().unwrap().iter())
        .filter(|p| p.get("functionCall").is_some())
        .map(|p| {
            let name = p["functionCall"]["name"].as_str().unwrap().to_owned();
            (name, p.get("thoughtSignature").cloned().unwrap_or_default())
        })
        .collect();
    let skip = serde_json::json!(signature::SKIP_VALIDATOR);
    assert_eq!(
        signatures,
        [
            ("f".to_owned(), serde_json::Value::Null),
            ("f".to_owned(), skip.clone()),
            ("f".to_owned(), serde_json::Value::Null),
            ("f".to_owned(), skip),
        ]
    );
}

/// A signature past the bound is not carried (the id stays the call's own), and the call goes
/// back as one Gemini did not make; a streamed signed call carries its signature as a whole one.
#[test]
fn an_oversized_signature_is_not_carried_and_streams_carry_signatures_too() {
    let huge = "A".repeat(signature::MAX_EMBEDDED + 4);
    let answer = format!(
        r#"{{"candidates":[{{"content":{{"role":"model","parts":[{{"functionCall":{{"name":"f","args":{{}}}},"thoughtSignature":"{huge}"}}]}},"finishReason":"STOP"}}],"responseId":"r2"}}"#
    );
    let resp = parse_response(answer.as_bytes()).unwrap();
    assert_eq!(resp.tool_calls[0].id, "call_r2_0");

    let mut decoder = Decoder::new();
    let mut events = Vec::new();
    let chunk = br#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"f","args":{"a":1}},"thoughtSignature":"Zm9v"}]},"finishReason":"STOP"}],"responseId":"r3"}"#;
    decoder.decode(None, chunk, &mut events).unwrap();
    assert!(
        events.iter().any(|e| matches!(e,
            crate::canonical::StreamEvent::ToolCallStart { id, .. } if id == "call_r3_0__gts04_Zm9v")),
        "{events:?}"
    );
}

/// Signed thought parts of a Gemini conversation go back to Gemini with their signatures.
#[test]
fn a_gemini_conversation_keeps_its_signatures_through_the_canonical_model() {
    let body = br#"{"contents":[{"role":"user","parts":[{"text":"q"}]},
        {"role":"model","parts":[{"text":"plan","thought":true,"thoughtSignature":"dGhvdWdodA=="},
            {"functionCall":{"name":"f","args":{"x":1}},"thoughtSignature":"Zm9vYmFy"}]},
        {"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"ok"}}}]}]}"#;
    let req = parse_request(body).unwrap();
    let out: serde_json::Value =
        serde_json::from_slice(&write_request(&req, "g").unwrap()).unwrap();
    let expected: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(out["contents"], expected["contents"]);
}
