//! Responses answers: the `response` object and its output items, as the API and the official
//! SDKs' models have them (the SDK requires `parallel_tool_calls`, `tool_choice` and `tools`
//! besides the obvious fields; the rest are sent as the API sends them).

use serde_json::{json, Map, Value};

use super::reasoning;
use crate::mock::text::chunks;

/// The name of the one tool the mock calls.
pub(super) const TOOL_NAME: &str = "get_weather";
/// Its arguments, `{"city":"Paris"}`, in the fragments a stream sends them in.
pub(super) const TOOL_ARGUMENT_FRAGMENTS: [&str; 3] = ["{\"city\":", "\"Paris\"", "}"];
/// The reasoning tokens a reasoning answer reports (they count in `output_tokens` too, as the
/// API counts them).
const REASONING_TOKENS: u64 = 4;

/// What identifies one answer.
#[derive(Debug, Clone)]
pub(super) struct Reply {
    /// The request number (1-based): `resp_mock_<id>`, `msg_mock_<id>`, `call_mock_<id>`, ...
    pub(super) id: u64,
    /// Unix seconds.
    pub(super) created_at: u64,
    /// The requested model (for Azure, the deployment).
    pub(super) model: String,
    /// The mock's name, sealed into the reasoning it makes.
    pub(super) mock: String,
}

impl Reply {
    pub(super) fn response_id(&self) -> String {
        format!("resp_mock_{}", self.id)
    }

    pub(super) fn message_id(&self) -> String {
        format!("msg_mock_{}", self.id)
    }

    pub(super) fn function_call_id(&self) -> String {
        format!("fc_mock_{}", self.id)
    }

    fn call_id(&self) -> String {
        format!("call_mock_{}", self.id)
    }

    fn reasoning_id(&self) -> String {
        format!("rs_mock_{}", self.id)
    }
}

/// Whether and how the answer reasons first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reasoning {
    /// No reasoning item.
    None,
    /// A reasoning item with an empty summary.
    Plain,
    /// With `encrypted_content` too (`include: ["reasoning.encrypted_content"]`).
    Encrypted,
}

/// What to answer, decided from the request and the plan.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub(super) stream: bool,
    pub(super) input_tokens: u64,
    /// Input tokens read from the cache, on top of `input_tokens` (the plan's).
    pub(super) cache_read: u64,
    /// The text to send: the canonical text, or what remains of it after a prefill.
    pub(super) text: String,
    /// Answer with the tool call instead of the text.
    pub(super) tool_call: bool,
    pub(super) reasoning: Reasoning,
    /// The request's settings the response object repeats (`instructions`, `tools`, ...).
    pub(super) echo: Map<String, Value>,
}

impl Answer {
    /// One token per content chunk, plus the reasoning tokens.
    fn output_tokens(&self) -> u64 {
        let count = if self.tool_call {
            TOOL_ARGUMENT_FRAGMENTS.len()
        } else {
            chunks(&self.text).len()
        };
        u64::try_from(count)
            .unwrap_or(u64::MAX)
            .saturating_add(self.reasoning_tokens())
    }

    fn reasoning_tokens(&self) -> u64 {
        if self.reasoning == Reasoning::None {
            0
        } else {
            REASONING_TOKENS
        }
    }

    pub(super) fn usage(&self) -> Value {
        let output = self.output_tokens();
        let input = self.input_tokens.saturating_add(self.cache_read);
        json!({
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": self.cache_read},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens()},
            "total_tokens": input.saturating_add(output),
        })
    }
}

/// The request fields a response object repeats, with the API's defaults for those not sent.
pub(super) fn echo(body: &Value) -> Map<String, Value> {
    let defaults = [
        ("instructions", Value::Null),
        ("max_output_tokens", Value::Null),
        ("metadata", json!({})),
        ("parallel_tool_calls", json!(true)),
        ("reasoning", json!({"effort": null, "summary": null})),
        ("store", json!(true)),
        ("temperature", json!(1.0)),
        ("text", json!({"format": {"type": "text"}})),
        ("tool_choice", json!("auto")),
        ("tools", json!([])),
        ("top_p", json!(1.0)),
        ("truncation", json!("disabled")),
        ("user", Value::Null),
    ];
    defaults
        .into_iter()
        .map(|(key, default)| {
            let sent = body.get(key).filter(|v| !v.is_null()).cloned();
            (key.to_owned(), sent.unwrap_or(default))
        })
        .collect()
}

/// A `response` object in `status`, with `output`, `usage` and `error` as given.
pub(super) fn response(
    reply: &Reply,
    answer: &Answer,
    status: &str,
    output: Vec<Value>,
    usage: Value,
    error: Value,
) -> Value {
    let mut object = json!({
        "id": reply.response_id(),
        "object": "response",
        "created_at": reply.created_at,
        "status": status,
        "background": false,
        "error": error,
        "incomplete_details": null,
        "model": reply.model,
        "output": output,
        "previous_response_id": null,
        "service_tier": "default",
        "usage": usage,
    });
    if let Some(fields) = object.as_object_mut() {
        fields.extend(answer.echo.clone());
    }
    object
}

/// The whole answer's output items, each `completed`.
pub(super) fn output(reply: &Reply, answer: &Answer) -> Vec<Value> {
    let mut items: Vec<Value> = reasoning_item(reply, answer).into_iter().collect();
    items.push(if answer.tool_call {
        function_call(reply, &TOOL_ARGUMENT_FRAGMENTS.concat(), "completed")
    } else {
        message(reply, Some(&answer.text), "completed")
    });
    items
}

/// The non-streamed answer.
pub(super) fn completed(reply: &Reply, answer: &Answer) -> Value {
    let output = output(reply, answer);
    response(
        reply,
        answer,
        "completed",
        output,
        answer.usage(),
        Value::Null,
    )
}

/// The reasoning item, when the answer reasons: no summary (the mock has no thoughts to
/// summarise), and the seal of this mock when asked for the encrypted content.
pub(super) fn reasoning_item(reply: &Reply, answer: &Answer) -> Option<Value> {
    let id = reply.reasoning_id();
    let mut item = json!({"id": id, "type": "reasoning", "summary": []});
    match answer.reasoning {
        Reasoning::None => return None,
        Reasoning::Plain => {}
        Reasoning::Encrypted => {
            item["encrypted_content"] = Value::String(reasoning::seal(&reply.mock, &id));
        }
    }
    Some(item)
}

/// The assistant message item; `None` text: no content part yet (a stream's first sight).
pub(super) fn message(reply: &Reply, text: Option<&str>, status: &str) -> Value {
    let content: Vec<Value> = text.map(output_text).into_iter().collect();
    json!({
        "id": reply.message_id(),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    })
}

/// One `output_text` content part.
pub(super) fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The `function_call` item.
pub(super) fn function_call(reply: &Reply, arguments: &str, status: &str) -> Value {
    json!({
        "id": reply.function_call_id(),
        "type": "function_call",
        "status": status,
        "call_id": reply.call_id(),
        "name": TOOL_NAME,
        "arguments": arguments,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::mock::responses) fn reply() -> Reply {
        Reply {
            id: 7,
            created_at: 1,
            model: "gpt-5".into(),
            mock: "m".into(),
        }
    }

    pub(in crate::mock::responses) fn answer(tool_call: bool, reasoning: Reasoning) -> Answer {
        Answer {
            stream: false,
            input_tokens: 3,
            cache_read: 0,
            text: "alpha-1 bravo-2.".into(),
            tool_call,
            reasoning,
            echo: echo(&json!({"instructions": "Be brief.", "tools": null})),
        }
    }

    #[test]
    fn completed_shape() {
        let text = completed(&reply(), &answer(false, Reasoning::None));
        assert_eq!(text["id"], "resp_mock_7");
        assert_eq!(text["object"], "response");
        assert_eq!(text["status"], "completed");
        assert_eq!(text["instructions"], "Be brief.");
        assert_eq!(text["tools"], json!([]));
        assert_eq!(text["output"][0]["content"][0]["text"], "alpha-1 bravo-2.");
        assert_eq!(text["output"][0]["content"][0]["annotations"], json!([]));
        assert_eq!(text["usage"]["total_tokens"], 5);
        let cached = Answer {
            cache_read: 1024,
            ..answer(false, Reasoning::None)
        };
        let usage = &completed(&reply(), &cached)["usage"];
        assert_eq!(usage["input_tokens"], 1027);
        assert_eq!(usage["input_tokens_details"]["cached_tokens"], 1024);
        let tool = completed(&reply(), &answer(true, Reasoning::Encrypted));
        assert_eq!(tool["output"][0]["type"], "reasoning");
        let sealed = tool["output"][0]["encrypted_content"]
            .as_str()
            .unwrap_or("");
        assert!(reasoning::made_by("m", sealed), "{sealed}");
        assert_eq!(tool["output"][1]["call_id"], "call_mock_7");
        assert_eq!(tool["output"][1]["arguments"], "{\"city\":\"Paris\"}");
        assert_eq!(tool["usage"]["output_tokens"], 7);
        assert_eq!(
            tool["usage"]["output_tokens_details"]["reasoning_tokens"],
            4
        );
        let plain = completed(&reply(), &answer(false, Reasoning::Plain));
        assert!(plain["output"][0].get("encrypted_content").is_none());
    }
}
