//! Gemini answers: the `GenerateContentResponse` object, and the stream of them.

use axum::body::Bytes;
use serde_json::{json, Value};

use crate::mock::stream::Script;
use crate::mock::text::chunks;

/// The name of the one function the mock calls, with `{"city":"Paris"}`.
const TOOL_NAME: &str = "get_weather";

/// What identifies one answer.
#[derive(Debug, Clone)]
pub(super) struct Reply {
    /// The request number (1-based): `responseId` `mock-<id>`.
    pub(super) id: u64,
    /// The model in the path.
    pub(super) model: String,
}

/// What to answer, decided from the request and the plan.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub(super) prompt_tokens: u64,
    /// Prompt tokens read from the cache, on top of `prompt_tokens` (the plan's).
    pub(super) cache_read: u64,
    /// The canonical text, or what remains of it after a prefill.
    pub(super) text: String,
    /// Answer with the function call instead of the text.
    pub(super) tool_call: bool,
    /// Sign the answer as Gemini 3 does: the function call's part, else the last part.
    pub(super) signed: bool,
}

impl Answer {
    /// One token per content chunk (a function call is one chunk).
    fn output_tokens(&self) -> u64 {
        let count = if self.tool_call {
            1
        } else {
            chunks(&self.text).len()
        };
        u64::try_from(count).unwrap_or(u64::MAX)
    }

    /// The whole usage; without `output` (a chunk before the last), the prompt's only.
    /// Gemini counts cached tokens in `promptTokenCount` and says how many apart.
    fn usage(&self, output: Option<u64>) -> Value {
        let prompt = self.prompt_tokens.saturating_add(self.cache_read);
        let mut usage = json!({"promptTokenCount": prompt});
        if let Some(output) = output {
            usage["candidatesTokenCount"] = json!(output);
        }
        usage["totalTokenCount"] = json!(prompt.saturating_add(output.unwrap_or(0)));
        if self.cache_read > 0 {
            usage["cachedContentTokenCount"] = json!(self.cache_read);
        }
        usage
    }
}

/// `part` with the answer's `thoughtSignature`, when it is signed.
fn signed(reply: &Reply, answer: &Answer, mut part: Value) -> Value {
    if let (true, Some(object)) = (answer.signed, part.as_object_mut()) {
        let signature = super::signatures::sign(&response_id(reply));
        object.insert("thoughtSignature".into(), Value::String(signature));
    }
    part
}

fn response_id(reply: &Reply) -> String {
    format!("mock-{}", reply.id)
}

fn call_part(reply: &Reply, answer: &Answer) -> Value {
    let part = json!({"functionCall": {"name": TOOL_NAME, "args": {"city": "Paris"}}});
    signed(reply, answer, part)
}

/// One `GenerateContentResponse` with these parts; the last one of an answer carries the
/// finish reason and the whole usage, the others the prompt's.
fn chunk(reply: &Reply, answer: &Answer, parts: Value, last: bool) -> Value {
    let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    let usage = if last {
        if let Some(object) = candidate.as_object_mut() {
            object.insert("finishReason".into(), json!("STOP"));
        }
        answer.usage(Some(answer.output_tokens()))
    } else {
        answer.usage(None)
    };
    json!({
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": reply.model,
        "responseId": response_id(reply),
    })
}

/// The non-streamed answer.
pub(super) fn response(reply: &Reply, answer: &Answer) -> Value {
    let parts = if answer.tool_call {
        json!([call_part(reply, answer)])
    } else {
        json!([signed(reply, answer, json!({"text": answer.text}))])
    };
    chunk(reply, answer, parts, true)
}

/// The chunks of a streamed answer: one per word (or the whole call), then a last one with
/// the finish reason and usage (and a text answer's signature, as Gemini sends it: on an empty
/// text part).
fn chunks_of(reply: &Reply, answer: &Answer) -> Vec<Value> {
    let mut out: Vec<Value> = if answer.tool_call {
        vec![chunk(
            reply,
            answer,
            json!([call_part(reply, answer)]),
            false,
        )]
    } else {
        chunks(&answer.text)
            .into_iter()
            .map(|piece| chunk(reply, answer, json!([{"text": piece}]), false))
            .collect()
    };
    let last = if answer.tool_call {
        json!({"text": ""})
    } else {
        signed(reply, answer, json!({"text": ""}))
    };
    out.push(chunk(reply, answer, json!([last]), true));
    out
}

/// `:streamGenerateContent` without `alt=sse`: the chunks as one JSON array.
pub(super) fn chunk_array(reply: &Reply, answer: &Answer) -> Value {
    Value::Array(chunks_of(reply, answer))
}

/// `data: <json>` with the CRLF line ends Gemini's SSE uses.
fn event(data: &Value) -> Bytes {
    crate::mock::stream::sse_event(None, data, "\r\n\r\n")
}

/// The SSE answer: no head, one event per chunk, the finish chunk as the tail, no terminator.
pub(super) fn script(reply: &Reply, answer: &Answer) -> Script {
    let mut content: Vec<Bytes> = chunks_of(reply, answer).iter().map(event).collect();
    let tail = content.pop().into_iter().collect();
    let inband_error = json!({
        "error": {
            "code": 503,
            "message": "The model is overloaded. Please try again later.",
            "status": "UNAVAILABLE",
        }
    });
    Script {
        head: Vec::new(),
        content,
        tail,
        done: None,
        inband_error: event(&inband_error),
        malformed: Bytes::from_static(b"data: {this is not json\r\n\r\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> Reply {
        Reply {
            id: 2,
            model: "gemini-2.5-flash".into(),
        }
    }

    fn answer(tool_call: bool) -> Answer {
        Answer {
            prompt_tokens: 3,
            cache_read: 0,
            text: "alpha-1 bravo-2.".into(),
            tool_call,
            signed: false,
        }
    }

    #[test]
    fn response_shape() {
        let text = response(&reply(), &answer(false));
        assert_eq!(
            text["candidates"][0]["content"]["parts"][0]["text"],
            "alpha-1 bravo-2."
        );
        assert_eq!(text["candidates"][0]["finishReason"], "STOP");
        assert_eq!(text["usageMetadata"]["totalTokenCount"], 5);
        assert!(text["usageMetadata"]
            .get("cachedContentTokenCount")
            .is_none());
        let cached = Answer {
            cache_read: 2048,
            ..answer(false)
        };
        let usage = &response(&reply(), &cached)["usageMetadata"];
        assert_eq!(usage["promptTokenCount"], 2051);
        assert_eq!(usage["cachedContentTokenCount"], 2048);
        assert_eq!(text["responseId"], "mock-2");
        let call = response(&reply(), &answer(true));
        let part = &call["candidates"][0]["content"]["parts"][0];
        assert_eq!(part["functionCall"]["args"]["city"], "Paris");
        assert!(part.get("thoughtSignature").is_none());
        let signed_call = Answer {
            signed: true,
            ..answer(true)
        };
        let call = response(&reply(), &signed_call);
        let part = &call["candidates"][0]["content"]["parts"][0];
        assert_eq!(
            part["thoughtSignature"],
            super::super::signatures::sign("mock-2")
        );
        let chunks = chunks_of(&reply(), &signed_call);
        assert!(chunks[0]["candidates"][0]["content"]["parts"][0]["thoughtSignature"].is_string());
        let signed_text = Answer {
            signed: true,
            ..answer(false)
        };
        let chunks = chunks_of(&reply(), &signed_text);
        let last = &chunks.last().unwrap()["candidates"][0]["content"]["parts"][0];
        assert_eq!(last["text"], "");
        assert!(last["thoughtSignature"].is_string());
    }

    #[test]
    fn stream_shape() {
        let script = script(&reply(), &answer(false));
        assert!(script.head.is_empty());
        assert_eq!((script.content.len(), script.tail.len()), (2, 1));
        let tail = String::from_utf8_lossy(&script.tail[0]).into_owned();
        assert!(tail.contains(r#""finishReason":"STOP""#), "{tail}");
        assert!(tail.ends_with("}\r\n\r\n"), "{tail}");
        assert_eq!(
            chunk_array(&reply(), &answer(true))
                .as_array()
                .map(Vec::len),
            Some(2)
        );
    }
}
