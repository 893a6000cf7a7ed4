//! Parsing details: snake_case names, OpenAPI `parameters`, function responses.
#![allow(clippy::unwrap_used)]
use super::*;

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
