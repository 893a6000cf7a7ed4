//! One agent conversation, as an SDK-based agent would hold it: a system prompt and a history
//! that grows every turn; some turns plan with a tool (`tool_choice: "required"` on the tools
//! route), run it, and send its result back as a `role: tool` message. Every answer is checked
//! in full: the text word for word against the mock's canonical answer, a tool call for its
//! name and JSON arguments, a stream for its end (`[DONE]`, no error event).

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::setup::{CHAT_ROUTE, TOOLS_ROUTE};
use crate::api::headers;
use crate::mock::canonical_text;

const SYSTEM: &str = "You are a travel and operations assistant. Be brief.";
const ASKS: [&str; 6] = [
    "Summarise yesterday's incident report in three bullet points.",
    "Draft a reply to the customer about the delayed order.",
    "What should I pack for a weekend trip?",
    "Explain the difference between a retry and a hedge.",
    "Rewrite that more politely.",
    "Give me a one-line status update for the team.",
];
const TOOL_ASK: &str = "What's the weather in Paris right now? Plan my afternoon around it.";

/// The one tool the agent offers.
fn tools() -> Value {
    json!([{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"]
            }
        }
    }])
}

/// One conversation in progress.
#[derive(Debug)]
pub(super) struct Conversation {
    /// Sent as `x-switchyard-session`, as an agent framework names its task.
    session: String,
    messages: Vec<Value>,
    turns_left: u32,
    uses_tools: bool,
    /// The next turn answers a tool result (it goes to the chat route, tools offered).
    after_tool: bool,
    /// The next turn must call a tool.
    plan_with_tool: bool,
}

/// What one turn sends.
#[derive(Debug)]
pub(super) struct Turn {
    /// The chat request.
    pub body: Value,
    /// Whether it asks for a stream.
    pub stream: bool,
    /// Whether it must answer with a tool call (a planning turn).
    pub tool_step: bool,
    /// The conversation's session.
    pub session: String,
}

/// What came back, checked.
#[derive(Debug, Clone)]
pub(super) enum Answer {
    /// The assistant's text.
    Text(String),
    /// A `get_weather` call with its id and JSON arguments.
    ToolCall { id: String, arguments: String },
}

/// One client request's outcome as the client saw it.
#[derive(Debug, Clone)]
pub(super) struct Outcome {
    /// A complete, correct answer arrived.
    pub ok: bool,
    /// What was wrong otherwise.
    pub error: Option<String>,
    /// From sending to the answer's end.
    pub latency: Duration,
    /// `x-switchyard-target`: who answered.
    pub target: Option<String>,
    /// `x-switchyard-attempts`.
    pub attempts: u32,
    /// `x-switchyard-hedged: true`.
    pub hedged: bool,
    /// The request asked for a stream.
    pub stream: bool,
    /// The request was a planning turn (a tool call was due).
    pub tool_step: bool,
}

impl Conversation {
    /// A new conversation of a few turns; about a third of them use a tool at some point.
    pub(super) fn new(rng: &mut fastrand::Rng) -> Conversation {
        let uses_tools = rng.f64() < 0.35;
        let mut c = Conversation {
            session: format!("demo-task-{:06x}", rng.u32(..0x100_0000)),
            messages: vec![json!({"role": "system", "content": SYSTEM})],
            turns_left: rng.u32(2..=6),
            uses_tools,
            after_tool: false,
            plan_with_tool: false,
        };
        c.ask(rng);
        c
    }

    fn ask(&mut self, rng: &mut fastrand::Rng) {
        self.plan_with_tool = self.uses_tools && rng.f64() < 0.5;
        let text = if self.plan_with_tool {
            TOOL_ASK
        } else {
            ASKS[rng.usize(..ASKS.len())]
        };
        self.messages.push(json!({"role": "user", "content": text}));
    }

    /// Whether there is more to say.
    pub(super) fn is_done(&self) -> bool {
        self.turns_left == 0
    }

    /// The next request; about 30% are streamed.
    pub(super) fn turn(&self, rng: &mut fastrand::Rng) -> Turn {
        let stream = rng.f64() < 0.3;
        let route = if self.plan_with_tool {
            TOOLS_ROUTE
        } else {
            CHAT_ROUTE
        };
        let mut body = json!({"model": route, "messages": self.messages, "stream": stream});
        if self.plan_with_tool {
            body["tools"] = tools();
            body["tool_choice"] = json!("required");
        } else if self.after_tool {
            body["tools"] = tools();
        }
        Turn {
            body,
            stream,
            tool_step: self.plan_with_tool,
            session: self.session.clone(),
        }
    }

    /// Take an answer into the history: a text ends the turn (the user asks the next thing);
    /// a tool call is run and its result sent back on the next turn.
    pub(super) fn absorb(&mut self, answer: Answer, rng: &mut fastrand::Rng) {
        match answer {
            Answer::Text(text) => {
                self.messages
                    .push(json!({"role": "assistant", "content": text}));
                self.after_tool = false;
                self.turns_left = self.turns_left.saturating_sub(1);
                if !self.is_done() {
                    self.ask(rng);
                }
            }
            Answer::ToolCall { id, arguments } => {
                self.messages.push(json!({
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{"id": id, "type": "function",
                        "function": {"name": "get_weather", "arguments": arguments}}]
                }));
                self.messages.push(json!({
                    "role": "tool",
                    "tool_call_id": id,
                    "content": r#"{"city":"Paris","temp_c":18,"sky":"light rain"}"#
                }));
                self.plan_with_tool = false;
                self.after_tool = true;
            }
        }
    }
}

/// Send one turn and check the answer.
pub(super) async fn send(
    client: &reqwest::Client,
    base: &str,
    turn: &Turn,
) -> (Outcome, Option<Answer>) {
    let start = Instant::now();
    let mut outcome = Outcome {
        ok: false,
        error: None,
        latency: Duration::ZERO,
        target: None,
        attempts: 0,
        hedged: false,
        stream: turn.stream,
        tool_step: turn.tool_step,
    };
    let sent = client
        .post(format!("{base}/v1/chat/completions"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(crate::wire::session::HEADER, &turn.session)
        .body(turn.body.to_string())
        .send()
        .await;
    let result = match sent {
        Err(e) => Err(format!("transport: {e}")),
        Ok(resp) => {
            let h = |name: http::HeaderName| {
                resp.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            outcome.target = h(headers::TARGET);
            outcome.attempts = h(headers::ATTEMPTS)
                .and_then(|a| a.parse().ok())
                .unwrap_or(0);
            outcome.hedged = h(headers::HEDGED).as_deref() == Some("true");
            let status = resp.status();
            match resp.bytes().await {
                Err(e) => Err(format!("body: {e}")),
                Ok(_) if !status.is_success() => Err(format!("HTTP {}", status.as_u16())),
                Ok(body) if turn.stream => check_stream(&String::from_utf8_lossy(&body)),
                Ok(body) => check_json(&body),
            }
        }
    };
    outcome.latency = start.elapsed();
    let answer = result
        .and_then(|a| match (&a, turn.tool_step) {
            (Answer::Text(t), false) if *t == canonical_text(12, 0) => Ok(a),
            (Answer::Text(t), _) => Err(format!("unexpected answer text: {t:.60}")),
            (Answer::ToolCall { arguments, .. }, true) => serde_json::from_str::<Value>(arguments)
                .map(|_| a.clone())
                .map_err(|e| format!("tool call arguments are not JSON: {e}")),
            (Answer::ToolCall { .. }, false) => Err("a tool call where text was due".to_owned()),
        })
        .map_err(|e| outcome.error = Some(e))
        .ok();
    outcome.ok = answer.is_some();
    (outcome, answer)
}

fn check_json(body: &[u8]) -> Result<Answer, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("bad JSON answer: {e}"))?;
    let message = &v["choices"][0]["message"];
    if let Some(call) = message["tool_calls"].get(0) {
        return Ok(Answer::ToolCall {
            id: call["id"].as_str().unwrap_or_default().to_owned(),
            arguments: call["function"]["arguments"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        });
    }
    message["content"]
        .as_str()
        .map(|t| Answer::Text(t.to_owned()))
        .ok_or_else(|| "an answer with neither text nor a tool call".to_owned())
}

fn check_stream(body: &str) -> Result<Answer, String> {
    let (mut text, mut id, mut arguments) = (String::new(), String::new(), String::new());
    let (mut finish, mut done) = (None::<String>, false);
    for data in body
        .split("\n\n")
        .filter_map(|e| e.trim().strip_prefix("data: "))
    {
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).map_err(|e| format!("bad stream event: {e}"))?;
        if let Some(err) = v.get("error") {
            return Err(format!("error event in the stream: {err}"));
        }
        let choice = &v["choices"][0];
        text.push_str(choice["delta"]["content"].as_str().unwrap_or_default());
        if let Some(call) = choice["delta"]["tool_calls"].get(0) {
            id.push_str(call["id"].as_str().unwrap_or_default());
            arguments.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_owned());
        }
    }
    match (done, finish.as_deref()) {
        (true, Some("stop")) => Ok(Answer::Text(text)),
        (true, Some("tool_calls")) => Ok(Answer::ToolCall { id, arguments }),
        (_, f) => Err(format!(
            "incomplete stream (finish_reason {f:?}, [DONE] {done})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_turn_is_followed_by_its_result_on_the_chat_route() {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut c = Conversation::new(&mut rng);
        c.plan_with_tool = true;
        let t = c.turn(&mut rng);
        assert_eq!(t.body["model"], TOOLS_ROUTE);
        assert_eq!(t.body["tool_choice"], "required");
        c.absorb(
            Answer::ToolCall {
                id: "call_1".into(),
                arguments: "{}".into(),
            },
            &mut rng,
        );
        let t = c.turn(&mut rng);
        assert_eq!(t.body["model"], CHAT_ROUTE);
        let messages = t.body["messages"].as_array().map(Vec::len).unwrap_or(0);
        assert_eq!(t.body["messages"][messages - 1]["role"], "tool");
        assert!(t.body.get("tools").is_some());
    }

    #[test]
    fn a_stream_without_its_end_is_a_failure() {
        let ok = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n\
                  data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        assert!(matches!(check_stream(ok), Ok(Answer::Text(t)) if t == "a"));
        let cut = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
        assert!(check_stream(cut).is_err());
        let err = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"error\"}]}\n\n\
                   data: {\"error\":{\"message\":\"x\"}}\n\n";
        assert!(check_stream(err).is_err());
    }
}
