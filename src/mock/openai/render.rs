//! OpenAI answers: the `chat.completion` object and the `chat.completion.chunk` stream events.

use axum::body::Bytes;
use serde_json::{json, Value};

use crate::mock::stream::Script;
use crate::mock::text::chunks;

/// The name of the one tool the mock calls.
const TOOL_NAME: &str = "get_weather";
/// Its arguments, `{"city":"Paris"}`, in the fragments a stream sends them in.
const TOOL_ARGUMENT_FRAGMENTS: [&str; 3] = ["{\"city\":", "\"Paris\"", "}"];

/// What identifies one answer.
#[derive(Debug, Clone)]
pub(super) struct Reply {
    /// The request number (1-based): `chatcmpl-mock-<id>`, `call_mock_<id>`.
    pub(super) id: u64,
    /// Unix seconds.
    pub(super) created: u64,
    /// The requested model, or the Azure deployment.
    pub(super) model: String,
}

/// What to answer, decided from the request and the plan.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub(super) stream: bool,
    pub(super) include_usage: bool,
    pub(super) prompt_tokens: u64,
    /// Prompt tokens read from the cache, on top of `prompt_tokens` (the plan's).
    pub(super) cache_read: u64,
    /// The text to send: the canonical text, or what remains of it after a prefill.
    pub(super) text: String,
    /// Answer with the tool call instead of the text.
    pub(super) tool_call: bool,
}

impl Answer {
    /// One token per content chunk.
    fn completion_tokens(&self) -> u64 {
        let count = if self.tool_call {
            TOOL_ARGUMENT_FRAGMENTS.len()
        } else {
            chunks(&self.text).len()
        };
        u64::try_from(count).unwrap_or(u64::MAX)
    }

    /// OpenAI counts cached tokens in `prompt_tokens` and says how many in its details
    /// (written only when the plan asks for a cache read).
    fn usage(&self) -> Value {
        let completion = self.completion_tokens();
        let prompt = self.prompt_tokens.saturating_add(self.cache_read);
        let mut usage = json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt.saturating_add(completion),
        });
        if self.cache_read > 0 {
            usage["prompt_tokens_details"] =
                json!({"cached_tokens": self.cache_read, "audio_tokens": 0});
        }
        usage
    }

    fn finish_reason(&self) -> &'static str {
        if self.tool_call {
            "tool_calls"
        } else {
            "stop"
        }
    }
}

fn tool_call_id(reply: &Reply) -> String {
    format!("call_mock_{}", reply.id)
}

/// The non-streamed answer.
pub(super) fn completion(reply: &Reply, answer: &Answer) -> Value {
    let message = if answer.tool_call {
        json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": tool_call_id(reply),
                "type": "function",
                "function": {"name": TOOL_NAME, "arguments": TOOL_ARGUMENT_FRAGMENTS.concat()},
            }],
        })
    } else {
        json!({"role": "assistant", "content": answer.text})
    };
    json!({
        "id": format!("chatcmpl-mock-{}", reply.id),
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": answer.finish_reason(),
            "logprobs": null,
        }],
        "usage": answer.usage(),
    })
}

/// `data: <json>\n\n`.
fn event(data: &Value) -> Bytes {
    crate::mock::stream::sse_event(None, data, "\n\n")
}

/// One chunk event with one choice. With `include_usage`, OpenAI sends `"usage": null` on every
/// chunk but the last. Written as `serde_json` writes the object (its keys in their sorted
/// order), without building it: building each chunk as a `Value` was most of the mock's work
/// for a stream, which the benchmarks count as the upstream's time.
fn chunk(reply: &Reply, answer: &Answer, delta: &Value, finish_reason: Option<&str>) -> Bytes {
    use std::io::Write;
    let mut buf = Vec::with_capacity(320);
    buf.extend_from_slice(b"data: {\"choices\":[{\"delta\":");
    // A `Value` or a string always serialises, and a `Vec` takes every write.
    let _ = serde_json::to_writer(&mut buf, delta);
    buf.extend_from_slice(b",\"finish_reason\":");
    let _ = serde_json::to_writer(&mut buf, &finish_reason);
    let _ = write!(
        buf,
        ",\"index\":0,\"logprobs\":null}}],\"created\":{},\"id\":\"chatcmpl-mock-{}\",\"model\":",
        reply.created, reply.id
    );
    let _ = serde_json::to_writer(&mut buf, &reply.model);
    buf.extend_from_slice(b",\"object\":\"chat.completion.chunk\"");
    if answer.include_usage {
        buf.extend_from_slice(b",\"usage\":null");
    }
    buf.extend_from_slice(b"}\n\n");
    Bytes::from(buf)
}

/// The streamed answer: role chunk, content chunks, finish chunk, usage chunk, `[DONE]`.
/// A tool call streams as OpenAI does: the first delta names the call with empty arguments,
/// then the arguments follow in fragments (the content chunks the plan counts).
pub(super) fn script(reply: &Reply, answer: &Answer) -> Script {
    let (head, content) = if answer.tool_call {
        let head = json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "index": 0,
                "id": tool_call_id(reply),
                "type": "function",
                "function": {"name": TOOL_NAME, "arguments": ""},
            }],
        });
        let content = TOOL_ARGUMENT_FRAGMENTS
            .iter()
            .map(|fragment| {
                let delta =
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]});
                chunk(reply, answer, &delta, None)
            })
            .collect();
        (head, content)
    } else {
        let head = json!({"role": "assistant", "content": ""});
        let content = chunks(&answer.text)
            .into_iter()
            .map(|piece| chunk(reply, answer, &json!({"content": piece}), None))
            .collect();
        (head, content)
    };
    let mut tail = vec![chunk(
        reply,
        answer,
        &json!({}),
        Some(answer.finish_reason()),
    )];
    if answer.include_usage {
        tail.push(event(&json!({
            "id": format!("chatcmpl-mock-{}", reply.id),
            "object": "chat.completion.chunk",
            "created": reply.created,
            "model": reply.model,
            "choices": [],
            "usage": answer.usage(),
        })));
    }
    let inband_error = json!({
        "error": {"message": "Overloaded", "type": "overloaded_error", "code": "overloaded"}
    });
    Script {
        head: vec![chunk(reply, answer, &head, None)],
        content,
        tail,
        done: Some(Bytes::from_static(b"data: [DONE]\n\n")),
        inband_error: event(&inband_error),
        malformed: Bytes::from_static(b"data: {this is not json\n\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> Reply {
        Reply {
            id: 7,
            created: 1,
            model: "m".into(),
        }
    }

    fn answer(tool_call: bool) -> Answer {
        Answer {
            stream: true,
            include_usage: false,
            prompt_tokens: 3,
            cache_read: 0,
            text: "alpha-1 bravo-2.".into(),
            tool_call,
        }
    }

    #[test]
    fn completion_shape() {
        let text = completion(&reply(), &answer(false));
        assert_eq!(text["id"], "chatcmpl-mock-7");
        assert_eq!(text["choices"][0]["message"]["content"], "alpha-1 bravo-2.");
        assert_eq!(text["usage"]["total_tokens"], 5);
        assert!(text["usage"].get("prompt_tokens_details").is_none());
        let cached = Answer {
            cache_read: 1024,
            ..answer(false)
        };
        let usage = &completion(&reply(), &cached)["usage"];
        assert_eq!(usage["prompt_tokens"], 1027);
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 1024);
        let tool = completion(&reply(), &answer(true));
        assert_eq!(tool["choices"][0]["finish_reason"], "tool_calls");
        let call = &tool["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["arguments"], "{\"city\":\"Paris\"}");
    }

    /// [`chunk`] writes what serialising the chunk as a `Value` writes, byte for byte.
    #[test]
    fn a_chunk_is_written_as_its_value_serialises() {
        for (model, usage, delta, finish) in [
            (
                "m",
                false,
                json!({"role": "assistant", "content": ""}),
                None,
            ),
            (
                "gpt-4o \"quoted\" ❄",
                true,
                json!({"content": " bravo-2."}),
                None,
            ),
            ("m", true, json!({}), Some("stop")),
        ] {
            let reply = Reply {
                model: model.into(),
                ..reply()
            };
            let answer = Answer {
                include_usage: usage,
                ..answer(false)
            };
            let mut value = json!({
                "id": format!("chatcmpl-mock-{}", reply.id),
                "object": "chat.completion.chunk",
                "created": reply.created,
                "model": reply.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            });
            if usage {
                value["usage"] = Value::Null;
            }
            assert_eq!(
                String::from_utf8_lossy(&chunk(&reply, &answer, &delta, finish)),
                format!("data: {value}\n\n")
            );
        }
    }

    #[test]
    fn stream_shape() {
        let script = script(&reply(), &answer(false));
        assert_eq!(script.content.len(), 2);
        assert_eq!(script.tail.len(), 1);
        let second = String::from_utf8_lossy(&script.content[1]).into_owned();
        assert!(
            second.starts_with("data: {") && second.ends_with("}\n\n"),
            "{second}"
        );
        assert!(
            second.contains(r#""delta":{"content":" bravo-2."}"#),
            "{second}"
        );
        assert!(!second.contains("usage"), "{second}");
    }
}
