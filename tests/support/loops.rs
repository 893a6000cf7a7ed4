//! Tool loops as each client API runs them (`tests/signatures.rs`, `tests/loop_failover.rs`):
//! turn 1 asks for the weather and gets a tool call; turn 2 sends the conversation back with
//! the call (as the client got it: ids, thinking blocks) and the tool's result.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::panic)]

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};
use switchyard::mock::{FaultPlan, MockServer};

use super::{client, Gateway};

/// The Gemini model the tests make a Gemini 3 one (`FaultPlan::thought_signatures`).
pub const GEMINI_3: &str = "gemini-3-pro-preview";

/// The value Google documents for function calls Gemini did not make.
pub const SKIP_VALIDATOR: &str = "skip_thought_signature_validator";

/// Providers `oai` (kind `openai`: Chat Completions and Responses), `ant` (anthropic) and
/// `gem` (gemini), on `m[0]`, `m[1]` and `m[2]`; route `chat` lists the targets named in
/// `order`.
pub fn vendors(m: &[MockServer], order: &[&str]) -> String {
    let mut s = String::from("[audit]\nstore = \"off\"\n\n");
    let kinds = [
        ("oai", "openai", m[0].base_url()),
        ("ant", "anthropic", m[1].root_url()),
        ("gem", "gemini", m[2].root_url()),
    ];
    for (name, kind, url) in kinds {
        s += &format!("[[providers]]\nname = \"{name}\"\nkind = \"{kind}\"\nbase_url = \"{url}\"\napi_key = \"${{TEST_KEY}}\"\n\n");
    }
    s += "[[routes]]\nname = \"chat\"\ntargets = [\n";
    for name in order {
        let model = match *name {
            "oai" => "gpt-4o",
            "ant" => "claude-sonnet-4-5",
            _ => GEMINI_3,
        };
        s += &format!("  {{ provider = \"{name}\", model = \"{model}\" }},\n");
    }
    s + "]\n[routes.hedge]\nenabled = false\n"
}

/// Every mock answers with the `get_weather` call until the tool's result is in; `m[2]`'s
/// Gemini 3 model signs its answers and checks the current turn's signatures.
pub fn tool_loops(m: &[MockServer]) {
    let plan = FaultPlan {
        tool_call: true,
        ..Default::default()
    };
    for mock in m {
        mock.set_plan(plan.clone());
    }
    m[2].set_model_plan(
        GEMINI_3,
        FaultPlan {
            thought_signatures: true,
            ..plan
        },
    );
}

/// The mock Gemini's signature of its answer numbered `n` (its `n`th request).
pub fn mock_signature(n: u64) -> String {
    let mut bytes = b"\xFB\xEF\xFFswitchyard-mock:".to_vec();
    bytes.extend_from_slice(format!("mock-{n}").as_bytes());
    STANDARD.encode(bytes)
}

/// A client API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/messages`, with thinking on.
    Messages,
    /// `/v1/responses` (`store: false`: the client sends the whole conversation).
    Responses,
}

pub const APIS: [Api; 3] = [Api::Chat, Api::Messages, Api::Responses];

/// What turn 1 gave the client: the call's id and the assistant's turn as the client sends it
/// back.
#[derive(Debug, Clone)]
pub struct Called {
    pub id: String,
    /// Chat: the assistant message; Messages: its content blocks; Responses: the output items.
    pub turn: Value,
}

const QUESTION: &str = "What is the weather in Paris?";

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Messages => "/v1/messages",
            Api::Responses => "/v1/responses",
        }
    }

    /// Turn 1's body.
    pub fn first(self, stream: bool) -> Value {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        match self {
            Api::Chat => json!({
                "model": "chat", "stream": stream,
                "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}],
                "messages": [{"role": "user", "content": QUESTION}]
            }),
            Api::Messages => json!({
                "model": "chat", "max_tokens": 2048, "stream": stream,
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "tools": [{"name": "get_weather", "input_schema": schema}],
                "messages": [{"role": "user", "content": QUESTION}]
            }),
            Api::Responses => json!({
                "model": "chat", "stream": stream, "store": false,
                "tools": [{"type": "function", "name": "get_weather", "parameters": schema}],
                "input": [{"role": "user", "content": QUESTION}]
            }),
        }
    }

    /// Turn 2's body: the question, the assistant's turn and the tool's result.
    pub fn second(self, called: &Called, stream: bool) -> Value {
        let mut body = self.first(stream);
        match self {
            Api::Chat => {
                let messages = body["messages"].as_array_mut().unwrap();
                messages.push(called.turn.clone());
                messages
                    .push(json!({"role": "tool", "tool_call_id": called.id, "content": "sunny"}));
            }
            Api::Messages => {
                let messages = body["messages"].as_array_mut().unwrap();
                messages.push(json!({"role": "assistant", "content": called.turn}));
                messages.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": called.id, "content": "sunny"}
                ]}));
            }
            Api::Responses => {
                let input = body["input"].as_array_mut().unwrap();
                input.extend(called.turn.as_array().unwrap().iter().cloned());
                input.push(
                    json!({"type": "function_call_output", "call_id": called.id, "output": "sunny"}),
                );
            }
        }
        body
    }

    pub async fn send(self, gw: &Gateway, body: &Value) -> reqwest::Response {
        client()
            .post(gw.url(self.path()))
            .header("x-api-key", "unused")
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// Turn 1: the call the client got.
    pub async fn call(self, gw: &Gateway, stream: bool) -> Called {
        let resp = self.send(gw, &self.first(stream)).await;
        assert_eq!(resp.status(), 200, "{self:?}");
        let text = resp.text().await.unwrap();
        let called = match (self, stream) {
            (Api::Chat, false) => chat_call(&serde_json::from_str(&text).unwrap()),
            (Api::Chat, true) => chat_stream_call(&text),
            (Api::Messages, false) => {
                messages_call(serde_json::from_str::<Value>(&text).unwrap()["content"].clone())
            }
            (Api::Messages, true) => messages_call(messages_stream_blocks(&text)),
            (Api::Responses, false) => {
                responses_call(serde_json::from_str::<Value>(&text).unwrap()["output"].clone())
            }
            (Api::Responses, true) => responses_call(responses_stream_items(&text)),
        };
        called.unwrap_or_else(|| panic!("{self:?} stream={stream}: no call in {text}"))
    }

    /// Turn 2: the answer's text, once the tool's result is in.
    pub async fn answer(self, gw: &Gateway, called: &Called, stream: bool) -> (u16, String) {
        let resp = self.send(gw, &self.second(called, stream)).await;
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }
}

fn chat_call(body: &Value) -> Option<Called> {
    let message = body["choices"][0]["message"].clone();
    let id = message["tool_calls"][0]["id"].as_str()?.to_owned();
    Some(Called { id, turn: message })
}

fn chat_stream_call(text: &str) -> Option<Called> {
    let (mut id, mut name, mut args) = (None, None, String::new());
    for event in super::sse_events(text) {
        let call = &event["choices"][0]["delta"]["tool_calls"][0];
        if let Some(i) = call["id"].as_str() {
            id = Some(i.to_owned());
        }
        if let Some(n) = call["function"]["name"].as_str() {
            name = Some(n.to_owned());
        }
        args.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
    }
    let id = id?;
    let turn = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name?, "arguments": args}}
    ]});
    Some(Called { id, turn })
}

fn messages_call(content: Value) -> Option<Called> {
    let id = content
        .as_array()?
        .iter()
        .find(|b| b["type"] == "tool_use")?["id"]
        .as_str()?
        .to_owned();
    Some(Called { id, turn: content })
}

/// The content blocks of an Anthropic stream, put together as the SDK does.
fn messages_stream_blocks(text: &str) -> Value {
    let mut blocks: Vec<Value> = Vec::new();
    let mut inputs: Vec<String> = Vec::new();
    for event in text.split("\n\n") {
        let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        let v: Value = serde_json::from_str(data).unwrap();
        let index = v["index"].as_u64().unwrap_or_default() as usize;
        match v["type"].as_str().unwrap_or_default() {
            "content_block_start" => {
                blocks.push(v["content_block"].clone());
                inputs.push(String::new());
            }
            "content_block_delta" => {
                let (block, delta) = (&mut blocks[index], &v["delta"]);
                match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => append(block, "text", &delta["text"]),
                    "thinking_delta" => append(block, "thinking", &delta["thinking"]),
                    "signature_delta" => append(block, "signature", &delta["signature"]),
                    "input_json_delta" => {
                        inputs[index].push_str(delta["partial_json"].as_str().unwrap())
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    for (block, input) in blocks.iter_mut().zip(&inputs) {
        if block["type"] == "tool_use" {
            block["input"] = serde_json::from_str(input).unwrap();
        }
    }
    Value::Array(blocks)
}

fn append(block: &mut Value, key: &str, more: &Value) {
    let text = format!(
        "{}{}",
        block[key].as_str().unwrap_or_default(),
        more.as_str().unwrap_or_default()
    );
    block[key] = Value::String(text);
}

fn responses_call(output: Value) -> Option<Called> {
    let id = output
        .as_array()?
        .iter()
        .find(|i| i["type"] == "function_call")?["call_id"]
        .as_str()?
        .to_owned();
    // As a client sends output items back: what the API takes as input.
    let turn: Vec<Value> = output
        .as_array()?
        .iter()
        .filter(|i| i["type"] == "function_call")
        .map(|i| {
            json!({"type": "function_call", "id": i["id"], "call_id": i["call_id"],
                "name": i["name"], "arguments": i["arguments"]})
        })
        .collect();
    Some(Called {
        id,
        turn: Value::Array(turn),
    })
}

fn responses_stream_items(text: &str) -> Value {
    let items = super::responses::events(text)
        .into_iter()
        .filter(|(name, _)| name == "response.output_item.done")
        .map(|(_, data)| data["item"].clone())
        .collect();
    Value::Array(items)
}

/// The first `functionCall` part of a Gemini request's `model` contents.
pub fn gemini_call(body: &Value) -> Value {
    body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "model")
        .flat_map(|c| c["parts"].as_array().unwrap().iter())
        .find(|p| p.get("functionCall").is_some())
        .cloned()
        .unwrap_or_else(|| panic!("no functionCall in {body}"))
}

/// The call's id and its result's in a request of a target's dialect, as `(call, result)`.
pub fn paired_ids(body: &Value) -> (String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    if let Some(messages) = body["messages"].as_array() {
        // Chat Completions or Anthropic Messages.
        let call = messages.iter().find_map(|m| {
            m["tool_calls"][0]["id"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| {
                    m["content"]
                        .as_array()?
                        .iter()
                        .find(|b| b["type"] == "tool_use")
                        .map(|b| s(&b["id"]))
                })
        });
        let result = messages.iter().find_map(|m| {
            m["tool_call_id"].as_str().map(str::to_owned).or_else(|| {
                m["content"]
                    .as_array()?
                    .iter()
                    .find(|b| b["type"] == "tool_result")
                    .map(|b| s(&b["tool_use_id"]))
            })
        });
        return (call.unwrap(), result.unwrap());
    }
    let input = body["input"].as_array().unwrap();
    let find = |kind: &str| s(&input.iter().find(|i| i["type"] == kind).unwrap()["call_id"]);
    (find("function_call"), find("function_call_output"))
}
