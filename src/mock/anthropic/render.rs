//! Anthropic answers: the `message` object and the event stream, as the Messages API sends them.

use axum::body::Bytes;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

use crate::mock::stream::Script;
use crate::mock::text::chunks;

/// The name of the one tool the mock calls.
const TOOL_NAME: &str = "get_weather";
/// Its input, `{"city":"Paris"}`, in the fragments a stream sends it in.
const TOOL_INPUT_FRAGMENTS: [&str; 3] = ["{\"city\":", "\"Paris\"", "}"];

/// What identifies one answer.
#[derive(Debug, Clone)]
pub(super) struct Reply {
    /// The request number (1-based): `msg_mock_<id>`, `toolu_mock_<id>`.
    pub(super) id: u64,
    /// The requested model.
    pub(super) model: String,
}

/// What to answer, decided from the request and the plan.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub(super) stream: bool,
    pub(super) prompt_tokens: u64,
    /// Prompt tokens read from and written to the cache (the plan's), which Anthropic counts
    /// apart from `input_tokens`.
    pub(super) cache_read: u64,
    pub(super) cache_write: u64,
    /// The canonical text, or what remains of it after a prefill.
    pub(super) text: String,
    /// Answer with the tool call instead of the text.
    pub(super) tool_call: bool,
    /// Lead with a signed thinking block (the request turned `thinking` on): the number of
    /// messages it had, which the block's text and signature name, so a thinking block sent
    /// back can be told from the one of another turn.
    pub(super) thinking: Option<usize>,
}

impl Answer {
    /// One token per content event.
    fn output_tokens(&self) -> u64 {
        let count = if self.tool_call {
            TOOL_INPUT_FRAGMENTS.len()
        } else {
            chunks(&self.text).len()
        };
        u64::try_from(count).unwrap_or(u64::MAX)
    }

    /// `usage` with `output_tokens`: the cache counts (with the write's split by time to
    /// live) only when the plan asks for some, as `cache_control` would make them.
    fn usage(&self, output_tokens: u64) -> Value {
        let mut usage = json!({"input_tokens": self.prompt_tokens});
        if self.cache_read > 0 || self.cache_write > 0 {
            usage["cache_creation_input_tokens"] = json!(self.cache_write);
            usage["cache_read_input_tokens"] = json!(self.cache_read);
            usage["cache_creation"] = json!({"ephemeral_5m_input_tokens": self.cache_write, "ephemeral_1h_input_tokens": 0});
        }
        usage["output_tokens"] = json!(output_tokens);
        usage
    }

    fn stop_reason(&self) -> &'static str {
        if self.tool_call {
            "tool_use"
        } else {
            "end_turn"
        }
    }
}

fn message_id(reply: &Reply) -> String {
    format!("msg_mock_{}", reply.id)
}

fn tool_use_id(reply: &Reply) -> String {
    format!("toolu_mock_{}", reply.id)
}

/// The thinking of the turn after `messages` messages, and its signature (base64 that has `+`
/// and `/` in it, as Anthropic's signatures do).
pub(super) fn thinking(messages: usize) -> (String, String) {
    let text = format!("Turn {messages}: the canonical text answers it.");
    let mut signed = b"\xFB\xEF\xFFthinking:".to_vec();
    signed.extend_from_slice(messages.to_string().as_bytes());
    let signature = STANDARD.encode(signed);
    (text, signature)
}

/// The non-streamed answer.
pub(super) fn message(reply: &Reply, answer: &Answer) -> Value {
    let main = if answer.tool_call {
        json!({
            "type": "tool_use",
            "id": tool_use_id(reply),
            "name": TOOL_NAME,
            "input": {"city": "Paris"},
        })
    } else {
        json!({"type": "text", "text": answer.text})
    };
    let content = match answer.thinking {
        Some(turn) => {
            let (text, signature) = thinking(turn);
            json!([{"type": "thinking", "thinking": text, "signature": signature}, main])
        }
        None => json!([main]),
    };
    json!({
        "id": message_id(reply),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": answer.stop_reason(),
        "stop_sequence": null,
        "usage": answer.usage(answer.output_tokens()),
    })
}

/// `event: <name>\ndata: <json>\n\n`.
fn event(name: &str, data: &Value) -> Bytes {
    crate::mock::stream::sse_event(Some(name), data, "\n\n")
}

/// The streamed answer: `message_start`, the block's start and a `ping` (head), one
/// `content_block_delta` per word or input fragment (content), then `content_block_stop`,
/// `message_delta` and `message_stop` (tail).
pub(super) fn script(reply: &Reply, answer: &Answer) -> Script {
    let start = event(
        "message_start",
        &json!({
            "type": "message_start",
            "message": {
                "id": message_id(reply),
                "type": "message",
                "role": "assistant",
                "model": reply.model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": answer.usage(1),
            },
        }),
    );
    // A thinking block, when there is one, is block 0 and the answer's block 1.
    let index = usize::from(answer.thinking.is_some());
    let (block, content): (Value, Vec<Bytes>) = if answer.tool_call {
        let block =
            json!({"type": "tool_use", "id": tool_use_id(reply), "name": TOOL_NAME, "input": {}});
        let content = TOOL_INPUT_FRAGMENTS
            .iter()
            .map(|fragment| {
                delta(
                    index,
                    json!({"type": "input_json_delta", "partial_json": fragment}),
                )
            })
            .collect();
        (block, content)
    } else {
        let content = chunks(&answer.text)
            .into_iter()
            .map(|piece| delta(index, json!({"type": "text_delta", "text": piece})))
            .collect();
        (json!({"type": "text", "text": ""}), content)
    };
    let mut head = vec![start];
    if let Some(turn) = answer.thinking {
        let (text, signature) = thinking(turn);
        let block = json!({"type": "thinking", "thinking": "", "signature": ""});
        head.extend([
            event(
                "content_block_start",
                &json!({"type": "content_block_start", "index": 0, "content_block": block}),
            ),
            delta(0, json!({"type": "thinking_delta", "thinking": text})),
            delta(
                0,
                json!({"type": "signature_delta", "signature": signature}),
            ),
            event(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": 0}),
            ),
        ]);
    }
    head.extend([
        event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ),
        event("ping", &json!({"type": "ping"})),
    ]);
    let tail = vec![
        event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ),
        event(
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": answer.stop_reason(), "stop_sequence": null},
                "usage": {"output_tokens": answer.output_tokens()},
            }),
        ),
        event("message_stop", &json!({"type": "message_stop"})),
    ];
    let inband_error = json!({
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    });
    Script {
        head,
        content,
        tail,
        done: None,
        inband_error: event("error", &inband_error),
        malformed: Bytes::from_static(b"event: content_block_delta\ndata: {this is not json\n\n"),
    }
}

fn delta(index: usize, delta: Value) -> Bytes {
    event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(tool_call: bool) -> Answer {
        Answer {
            stream: true,
            prompt_tokens: 3,
            cache_read: 0,
            cache_write: 0,
            text: "alpha-1 bravo-2.".into(),
            tool_call,
            thinking: None,
        }
    }

    #[test]
    fn message_shape() {
        let reply = Reply {
            id: 4,
            model: "claude".into(),
        };
        let text = message(&reply, &answer(false));
        assert_eq!(text["content"][0]["text"], "alpha-1 bravo-2.");
        assert_eq!(text["usage"]["output_tokens"], 2);
        assert!(text["usage"].get("cache_read_input_tokens").is_none());
        let cached = Answer {
            cache_read: 1000,
            cache_write: 24,
            ..answer(false)
        };
        let usage = &message(&reply, &cached)["usage"];
        assert_eq!(usage["input_tokens"], 3, "the cached tokens are not in it");
        assert_eq!(usage["cache_read_input_tokens"], 1000);
        assert_eq!(usage["cache_creation_input_tokens"], 24);
        assert_eq!(usage["cache_creation"]["ephemeral_5m_input_tokens"], 24);
        let tool = message(&reply, &answer(true));
        assert_eq!(tool["stop_reason"], "tool_use");
        assert_eq!(tool["content"][0]["id"], "toolu_mock_4");
    }

    #[test]
    fn stream_shape() {
        let reply = Reply {
            id: 1,
            model: "claude".into(),
        };
        let script = script(&reply, &answer(false));
        assert_eq!(
            (script.head.len(), script.content.len(), script.tail.len()),
            (3, 2, 3)
        );
        let second = String::from_utf8_lossy(&script.content[1]).into_owned();
        assert!(
            second.starts_with("event: content_block_delta\ndata: {"),
            "{second}"
        );
        assert!(second.contains(r#""text":" bravo-2.""#), "{second}");
        assert!(script.done.is_none());
    }

    #[test]
    fn thinking_leads_signed() {
        let reply = Reply {
            id: 1,
            model: "claude".into(),
        };
        let answer = Answer {
            thinking: Some(3),
            ..answer(true)
        };
        let (text, signature) = thinking(3);
        assert!(
            signature.contains('+') && signature.contains('/'),
            "{signature}"
        );
        let whole = message(&reply, &answer);
        assert_eq!(
            whole["content"][0],
            json!({"type": "thinking", "thinking": text, "signature": signature})
        );
        assert_eq!(whole["content"][1]["type"], "tool_use");
        let script = script(&reply, &answer);
        let head: String = script
            .head
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        assert!(
            head.contains(&format!(r#""signature":"{signature}""#)),
            "{head}"
        );
        let first = String::from_utf8_lossy(&script.content[0]).into_owned();
        assert!(first.contains(r#""index":1"#), "{first}");
    }
}
