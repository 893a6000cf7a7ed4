//! The Responses event stream: typed events (`event: <type>`, and the same `type` in the data),
//! each numbered by `sequence_number` from 0, in the order the API sends them.
//!
//! Head (sent with the headers): `response.created`, `response.in_progress`, the reasoning item
//! (`response.output_item.added` and `.done`) when the answer reasons, then the answer's item
//! opening: `response.output_item.added` and `response.content_part.added` for text, or
//! `response.output_item.added` (a `function_call` with empty arguments) for the tool call.
//! Content (what the fault plan counts): one `response.output_text.delta` per word, or one
//! `response.function_call_arguments.delta` per argument fragment. Tail: the `.done` events
//! and `response.completed` with the whole response. There is no `[DONE]`.
//!
//! `inband_error_after` sends `response.failed` (status `failed`, error `server_error`), numbered
//! as the next event, and ends the stream, as the API ends a response that failed mid-way.

use axum::body::Bytes;
use serde_json::{json, Value};

use super::render::{self, Answer, Reply, TOOL_ARGUMENT_FRAGMENTS};
use crate::mock::stream::Script;
use crate::mock::text::chunks;

/// The message of the in-band failure.
const FAILED_MESSAGE: &str =
    "The server had an error processing your request. Sorry about that! (injected by the mock's \
     fault plan)";

/// Numbers events as they are rendered.
#[derive(Debug, Default)]
struct Numbered {
    next: u64,
}

impl Numbered {
    /// The next event, `type` and `sequence_number` added to `data`.
    fn event(&mut self, kind: &str, data: Value) -> Bytes {
        let bytes = event(kind, self.next, data);
        self.next += 1;
        bytes
    }
}

/// `event: <kind>\ndata: <json>\n\n`, with `type` and `sequence_number` in the JSON.
fn event(kind: &str, sequence_number: u64, mut data: Value) -> Bytes {
    if let Some(fields) = data.as_object_mut() {
        fields.insert("type".into(), Value::String(kind.to_owned()));
        fields.insert("sequence_number".into(), json!(sequence_number));
    }
    crate::mock::stream::sse_event(Some(kind), &data, "\n\n")
}

/// The streamed answer; `inband_error_after` is the plan's, to number the failure event as the
/// one that takes the place of content event N.
pub(super) fn script(reply: &Reply, answer: &Answer, inband_error_after: Option<u32>) -> Script {
    let mut seq = Numbered::default();
    let opening =
        |status| render::response(reply, answer, status, vec![], Value::Null, Value::Null);
    let mut head = vec![
        seq.event(
            "response.created",
            json!({"response": opening("in_progress")}),
        ),
        seq.event(
            "response.in_progress",
            json!({"response": opening("in_progress")}),
        ),
    ];
    let mut output_index = 0;
    if let Some(item) = render::reasoning_item(reply, answer) {
        head.push(seq.event(
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        ));
        head.push(seq.event(
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        ));
        output_index = 1;
    }
    let (content, mut tail) = if answer.tool_call {
        tool_call(&mut seq, &mut head, reply, output_index)
    } else {
        text(&mut seq, &mut head, reply, answer, output_index)
    };
    let whole = render::completed(reply, answer);
    tail.push(seq.event("response.completed", json!({"response": whole})));
    // The failure takes the place of content event N (or follows the last one).
    let failed_at = inband_error_after
        .and_then(|n| usize::try_from(n).ok())
        .map_or(content.len(), |n| n.min(content.len()));
    let failed_seq = u64::try_from(head.len() + failed_at).unwrap_or(u64::MAX);
    let error = json!({"code": "server_error", "message": FAILED_MESSAGE});
    let failed = render::response(reply, answer, "failed", vec![], Value::Null, error);
    Script {
        head,
        content,
        tail,
        done: None,
        inband_error: event("response.failed", failed_seq, json!({"response": failed})),
        malformed: Bytes::from_static(
            b"event: response.output_text.delta\ndata: {this is not json\n\n",
        ),
    }
}

/// The text item's events: opening into `head`, deltas returned as content, `.done` as tail.
fn text(
    seq: &mut Numbered,
    head: &mut Vec<Bytes>,
    reply: &Reply,
    answer: &Answer,
    output_index: usize,
) -> (Vec<Bytes>, Vec<Bytes>) {
    let item_id = reply.message_id();
    let at = json!({"item_id": item_id, "output_index": output_index, "content_index": 0});
    let with = |extra: Value| merge(&at, extra);
    head.push(seq.event(
        "response.output_item.added",
        json!({"output_index": output_index, "item": render::message(reply, None, "in_progress")}),
    ));
    head.push(seq.event(
        "response.content_part.added",
        with(json!({"part": render::output_text("")})),
    ));
    let content = chunks(&answer.text)
        .into_iter()
        .map(|piece| {
            seq.event(
                "response.output_text.delta",
                with(json!({"delta": piece, "logprobs": []})),
            )
        })
        .collect();
    let tail = vec![
        seq.event(
            "response.output_text.done",
            with(json!({"text": answer.text, "logprobs": []})),
        ),
        seq.event(
            "response.content_part.done",
            with(json!({"part": render::output_text(&answer.text)})),
        ),
        seq.event(
            "response.output_item.done",
            json!({
                "output_index": output_index,
                "item": render::message(reply, Some(&answer.text), "completed"),
            }),
        ),
    ];
    (content, tail)
}

/// The tool call's events: the item with empty arguments into `head`, argument deltas as
/// content, `.done` events as tail.
fn tool_call(
    seq: &mut Numbered,
    head: &mut Vec<Bytes>,
    reply: &Reply,
    output_index: usize,
) -> (Vec<Bytes>, Vec<Bytes>) {
    let at = json!({"item_id": reply.function_call_id(), "output_index": output_index});
    head.push(seq.event(
        "response.output_item.added",
        json!({"output_index": output_index, "item": render::function_call(reply, "", "in_progress")}),
    ));
    let content = TOOL_ARGUMENT_FRAGMENTS
        .iter()
        .map(|fragment| {
            seq.event(
                "response.function_call_arguments.delta",
                merge(&at, json!({"delta": fragment})),
            )
        })
        .collect();
    let arguments = TOOL_ARGUMENT_FRAGMENTS.concat();
    let tail = vec![
        seq.event(
            "response.function_call_arguments.done",
            merge(
                &at,
                json!({"name": render::TOOL_NAME, "arguments": arguments}),
            ),
        ),
        seq.event(
            "response.output_item.done",
            json!({
                "output_index": output_index,
                "item": render::function_call(reply, &arguments, "completed"),
            }),
        ),
    ];
    (content, tail)
}

/// `base`'s fields and `extra`'s (both objects).
fn merge(base: &Value, extra: Value) -> Value {
    let mut out = base.clone();
    if let (Some(out), Value::Object(extra)) = (out.as_object_mut(), extra) {
        out.extend(extra);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::mock::responses::render::tests::{answer, reply};
    use crate::mock::responses::render::Reasoning;

    /// (type, sequence_number) of each event.
    fn kinds(events: &[Bytes]) -> Vec<(String, u64)> {
        events
            .iter()
            .map(|bytes| {
                let text = String::from_utf8_lossy(bytes);
                let (name, data) = text.split_once('\n').unwrap();
                let data: Value = serde_json::from_str(data.trim_start_matches("data: ")).unwrap();
                assert_eq!(name.trim_start_matches("event: "), data["type"]);
                (
                    data["type"].as_str().unwrap().to_owned(),
                    data["sequence_number"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn text_stream_is_numbered_in_order() {
        let script = script(&reply(), &answer(false, Reasoning::None), Some(1));
        let all: Vec<Bytes> = [&script.head[..], &script.content[..], &script.tail[..]].concat();
        let got = kinds(&all);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        assert!(got.iter().map(|(_, s)| *s).eq(0..10));
        assert!(script.done.is_none());
        // The failure replaces the second delta: number 5.
        assert_eq!(
            kinds(&[script.inband_error]),
            [("response.failed".to_owned(), 5)]
        );
    }

    #[test]
    fn reasoning_and_tool_call_stream() {
        let script = script(&reply(), &answer(true, Reasoning::Encrypted), None);
        assert_eq!(
            (script.head.len(), script.content.len(), script.tail.len()),
            (5, 3, 3)
        );
        let head = kinds(&script.head);
        assert_eq!(head[2].0, "response.output_item.added");
        let added = String::from_utf8_lossy(&script.head[2]).into_owned();
        assert!(added.contains("\"type\":\"reasoning\""), "{added}");
        assert!(added.contains("encrypted_content"), "{added}");
        let call = String::from_utf8_lossy(&script.head[4]).into_owned();
        assert!(call.contains("\"output_index\":1"), "{call}");
        assert!(call.contains("\"arguments\":\"\""), "{call}");
        let delta = String::from_utf8_lossy(&script.content[1]).into_owned();
        assert!(delta.contains(r#""delta":"\"Paris\"""#), "{delta}");
        assert_eq!(kinds(&[script.inband_error])[0].1, 8);
    }
}
