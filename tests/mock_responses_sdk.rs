//! The mock's OpenAI Responses dialect read by the official OpenAI Python SDK (when it is
//! installed; under CI it must be): every body and stream event the SDK parses, and validated
//! against its pydantic models, from a real mock on port 0.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{json, Value};
use switchyard::mock::{canonical_text, FaultPlan, MockServer};

/// Drives the mock with the SDK (given ROOT, the mock's root URL) and prints one JSON object of
/// what it parsed. Besides the SDK's own (lenient) parsing, every body and stream event is
/// validated against the SDK's pydantic models, so a missing required field fails here.
const SDK_SCRIPT: &str = r#"
import json, sys
import pydantic
from openai import OpenAI, AzureOpenAI
from openai.types.responses import Response, ResponseStreamEvent

root = sys.argv[1]
client = OpenAI(base_url=root + "/v1", api_key="sk-test", max_retries=0)
events = pydantic.TypeAdapter(ResponseStreamEvent)
out = {}

raw = client.responses.with_raw_response.create(model="gpt-5-mini", instructions="Be brief.", input="Say it.")
Response.model_validate(raw.http_response.json())
r = raw.parse()
out["text"] = r.output_text
out["usage"] = [r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens]

with client.responses.stream(model="gpt-5-mini", input="Say it.") as stream:
    parts = []
    for e in stream:
        if e.type == "response.output_text.delta":
            parts.append(e.delta)
    final = stream.get_final_response()
out["stream_text"] = "".join(parts)
out["stream_final_text"] = final.output_text

kinds = []
for e in client.responses.create(model="gpt-5-mini", input="Say it.", stream=True,
                                 reasoning={"effort": "low"}, include=["reasoning.encrypted_content"]):
    events.validate_python(e.to_dict())
    kinds.append(e.type)
out["stream_types"] = kinds

tools = [{"type": "function", "name": "get_weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
call = client.responses.create(model="tools", input="Weather?", tools=tools)
fc = call.output[0]
out["call"] = [fc.type, fc.name, fc.arguments]
after = client.responses.create(model="tools", tools=tools, input=[
    {"role": "user", "content": "Weather?"},
    {"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments},
    {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"},
])
out["after_tool"] = after.output_text
with client.responses.stream(model="tools", input="Weather?", tools=tools) as stream:
    args = []
    for e in stream:
        events.validate_python(e.to_dict())
        if e.type == "response.function_call_arguments.delta":
            args.append(e.delta)
    out["stream_call"] = ["".join(args), stream.get_final_response().output[0].arguments]

raw = client.responses.with_raw_response.create(model="gpt-5-mini", input="Think.", store=False,
    reasoning={"effort": "low"}, include=["reasoning.encrypted_content"])
Response.model_validate(raw.http_response.json())
reasoned = raw.parse()
item = reasoned.output[0]
out["reasoning"] = [item.type, bool(item.encrypted_content)]

try:
    with client.responses.stream(model="failing", input="Say it.") as stream:
        last = None
        for e in stream:
            events.validate_python(e.to_dict())
            last = e.type
        out["failed_last_event"] = last
        stream.get_final_response()
    out["failed"] = None
except Exception as e:
    out["failed"] = type(e).__name__ + ": " + str(e)

try:
    client.responses.create(model="gpt-5-mini", input="Again.", previous_response_id=r.id)
    out["previous"] = None
except Exception as e:
    out["previous"] = [type(e).__name__, e.code]

azure = AzureOpenAI(azure_endpoint=root, api_key="azure-key", api_version="2025-04-01-preview",
                    max_retries=0)
a = azure.responses.create(model="gpt-5-prod", input="Say it.")
out["azure"] = [a.model, a.output_text]
print(json.dumps(out))
"#;

/// Whether `python3` can import the SDK. Outside CI a missing SDK skips the test (saying so);
/// under CI (`CI` set) it fails it, as the other SDK tests do.
fn python_sdk() -> bool {
    let have = std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install the Python SDK: pip install openai"
        );
        eprintln!("SKIPPED: the Python SDK `openai` is not installed (pip install openai)");
    }
    have
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_parses_the_mock() {
    if !python_sdk() {
        return;
    }
    let mock = MockServer::spawn("responses").await.unwrap();
    mock.set_model_plan(
        "tools",
        FaultPlan {
            tool_call: true,
            ..FaultPlan::default()
        },
    );
    mock.set_model_plan(
        "failing",
        FaultPlan {
            inband_error_after: Some(2),
            ..FaultPlan::default()
        },
    );
    let root = mock.root_url();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args(["-c", SDK_SCRIPT, &root])
            .output()
    })
    .await
    .unwrap()
    .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the SDK script failed:\n{stderr}");
    let got: Value = serde_json::from_slice(&output.stdout).unwrap();
    let whole = canonical_text(12, 0);
    assert_eq!(got["text"], whole.as_str());
    assert_eq!(got["usage"], json!([4, 12, 16]));
    assert_eq!(got["stream_text"], whole.as_str());
    assert_eq!(got["stream_final_text"], whole.as_str());
    let kinds: Vec<&str> = got["stream_types"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(kinds.len(), 2 + 2 + 2 + 12 + 4, "{kinds:?}");
    assert_eq!(kinds[2], "response.output_item.added");
    assert_eq!(kinds.last(), Some(&"response.completed"));
    let arguments = r#"{"city":"Paris"}"#;
    assert_eq!(
        got["call"],
        json!(["function_call", "get_weather", arguments])
    );
    assert_eq!(got["after_tool"], whole.as_str());
    assert_eq!(got["stream_call"], json!([arguments, arguments]));
    assert_eq!(got["reasoning"], json!(["reasoning", true]));
    assert_eq!(got["failed_last_event"], "response.failed");
    let failed = got["failed"].as_str().unwrap_or_default();
    assert!(failed.contains("response.completed"), "{failed}");
    assert_eq!(
        got["previous"],
        json!(["BadRequestError", "previous_response_not_found"])
    );
    assert_eq!(got["azure"], json!(["gpt-5-prod", whole]));
    let paths: Vec<String> = mock.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths.last().map(String::as_str),
        Some("/openai/responses?api-version=2025-04-01-preview")
    );
}
