//! The Responses stream encoder: event order, numbering, held usage, failures, resuming.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::canonical::responses::tests::sse_events;
use serde_json::{json, Value};

/// Each event's name and data, checking the data's `type` is the name.
fn parsed(bytes: &[u8]) -> Vec<(String, Value)> {
    sse_events(bytes)
        .into_iter()
        .map(|(name, data)| {
            let data: Value = serde_json::from_str(&data).unwrap();
            assert_eq!(data["type"], name.as_str(), "{data}");
            (name, data)
        })
        .collect()
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

fn sequence(events: &[(String, Value)]) -> Vec<u64> {
    events
        .iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect()
}

fn start() -> StreamEvent {
    StreamEvent::Start {
        id: "resp_1".into(),
        model: "gpt-5".into(),
    }
}

#[test]
fn a_text_stream_comes_in_the_documented_order() {
    let mut encoder = Encoder::new().with_created_at(9);
    let mut out = Vec::new();
    for event in [
        start(),
        StreamEvent::TextDelta("Hel".into()),
        StreamEvent::TextDelta("lo".into()),
        StreamEvent::Finish(FinishReason::Stop),
    ] {
        encoder.encode(&event, &mut out);
    }
    assert!(!String::from_utf8_lossy(&out).contains("response.completed"));
    assert_eq!(encoder.final_response(), None);
    let usage = Usage::new(3, 2);
    encoder.encode(&StreamEvent::Usage(usage), &mut out);
    let len = out.len();
    encoder.finish(&mut out);
    assert_eq!(out.len(), len, "the stream was already complete");
    let events = parsed(&out);
    assert_eq!(
        names(&events),
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
    assert_eq!(sequence(&events), (0..10).collect::<Vec<_>>());
    let created = &events[0].1["response"];
    assert_eq!(
        (
            &created["id"],
            &created["status"],
            &created["output"],
            &created["created_at"]
        ),
        (
            &json!("resp_1"),
            &json!("in_progress"),
            &json!([]),
            &json!(9)
        )
    );
    assert_eq!(
        events[2].1["item"],
        json!({"type": "message", "id": "msg_1_0", "status": "in_progress", "role": "assistant", "content": []})
    );
    assert_eq!(
        events[4].1,
        json!({"type": "response.output_text.delta", "sequence_number": 4, "item_id": "msg_1_0",
               "output_index": 0, "content_index": 0, "delta": "Hel", "logprobs": []})
    );
    assert_eq!(events[6].1["text"], "Hello");
    let done_item = &events[8].1["item"];
    assert_eq!(done_item["status"], "completed");
    assert_eq!(done_item["content"][0]["text"], "Hello");
    let completed = &events[9].1["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"], json!([done_item]));
    assert_eq!(completed["usage"]["total_tokens"], 5);
    let stored: Value = serde_json::from_str(encoder.final_response().unwrap()).unwrap();
    assert_eq!(&stored, completed);
}

#[test]
fn tool_calls_are_items_of_their_own() {
    let mut encoder = Encoder::new();
    let mut out = Vec::new();
    for event in [
        start(),
        StreamEvent::ToolCallStart {
            index: 0,
            id: "call_1".into(),
            name: "shell".into(),
        },
        StreamEvent::ToolCallArgsDelta {
            index: 0,
            fragment: r#"{"a":"#.into(),
        },
        StreamEvent::ToolCallArgsDelta {
            index: 0,
            fragment: "1}".into(),
        },
        StreamEvent::ToolCallStart {
            index: 1,
            id: "call_2".into(),
            name: "read".into(),
        },
        // A late fragment for the closed call is dropped.
        StreamEvent::ToolCallArgsDelta {
            index: 0,
            fragment: "x".into(),
        },
        StreamEvent::Finish(FinishReason::ToolCalls),
    ] {
        encoder.encode(&event, &mut out);
    }
    encoder.finish(&mut out);
    let events = parsed(&out);
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(sequence(&events), (0..11).collect::<Vec<_>>());
    assert_eq!(
        events[2].1["item"],
        json!({"type": "function_call", "id": "fc_1_0", "call_id": "call_1", "name": "shell", "arguments": "", "status": "in_progress"})
    );
    assert_eq!(
        events[5].1,
        json!({"type": "response.function_call_arguments.done", "sequence_number": 5, "item_id": "fc_1_0",
               "output_index": 0, "name": "shell", "arguments": "{\"a\":1}"})
    );
    assert_eq!(events[7].1["output_index"], 1);
    let output = &events[10].1["response"]["output"];
    assert_eq!(output[0]["arguments"], "{\"a\":1}");
    assert_eq!(output[1]["call_id"], "call_2");
    assert_eq!(output[1]["arguments"], "");
    assert_eq!(events[10].1["response"]["usage"], Value::Null);
}

#[test]
fn a_length_finish_is_incomplete() {
    let mut encoder = Encoder::new();
    let mut out = Vec::new();
    encoder.encode(&StreamEvent::TextDelta("Once".into()), &mut out);
    encoder.encode(&StreamEvent::Finish(FinishReason::Length), &mut out);
    encoder.finish(&mut out);
    let events = parsed(&out);
    let (name, last) = events.last().unwrap();
    assert_eq!(name, "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(last["response"]["output"][0]["status"], "incomplete");
}

#[test]
fn an_error_fails_the_response_and_ends_the_stream() {
    let mut encoder = Encoder::new().with_response_id("resp_gw");
    let mut out = Vec::new();
    for event in [
        start(),
        StreamEvent::TextDelta("Hi".into()),
        StreamEvent::Error {
            message: "slow down".into(),
            kind: ErrorClass::RateLimited,
        },
        StreamEvent::TextDelta("more".into()),
    ] {
        encoder.encode(&event, &mut out);
    }
    encoder.finish(&mut out);
    let events = parsed(&out);
    assert_eq!(
        names(&events)[4..],
        ["response.output_text.delta", "error", "response.failed"]
    );
    assert_eq!(
        events[5].1,
        json!({"type": "error", "sequence_number": 5, "error": {"type": "rate_limit_error",
               "code": "rate_limit_exceeded", "message": "slow down", "param": null}})
    );
    let failed = &events[6].1["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(
        failed["error"],
        json!({"code": "rate_limit_exceeded", "message": "slow down"})
    );
    // The gateway's id everywhere, whatever the upstream called it.
    for (_, data) in &events {
        if let Some(response) = data.get("response") {
            assert_eq!(response["id"], "resp_gw");
        }
    }
    assert_eq!(events[2].1["item"]["id"], "msg_gw_0");
    assert_eq!(encoder.response_id(), "resp_gw");
    assert!(encoder
        .final_response()
        .unwrap()
        .contains(r#""status":"failed""#));
}

#[test]
fn a_resumed_stream_goes_on_in_the_open_item() {
    let reasoning = RawJson::from_text(r#"{"type":"reasoning","id":"rs_1","summary":[]}"#).unwrap();
    let mut encoder = Encoder::resuming(Resume {
        response_id: "resp_r".into(),
        model: "gpt-5".into(),
        created_at: 5,
        next_sequence_number: 7,
        next_output_index: 2,
        completed_items: vec![reasoning],
        open_text: Some(OpenText {
            item_id: "msg_r_1".into(),
            output_index: 1,
            content_index: 0,
            text: "Hello".into(),
        }),
    });
    let mut out = Vec::new();
    for event in [
        StreamEvent::Start {
            id: "other".into(),
            model: "other-model".into(),
        },
        StreamEvent::TextDelta(" world".into()),
        StreamEvent::ToolCallStart {
            index: 0,
            id: "call_9".into(),
            name: "f".into(),
        },
        StreamEvent::Finish(FinishReason::ToolCalls),
        StreamEvent::Usage(Usage::new(1, 1)),
    ] {
        encoder.encode(&event, &mut out);
    }
    let events = parsed(&out);
    assert_eq!(
        names(&events),
        [
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(sequence(&events), (7..15).collect::<Vec<_>>());
    assert_eq!(
        (&events[0].1["item_id"], &events[0].1["output_index"]),
        (&json!("msg_r_1"), &json!(1))
    );
    assert_eq!(events[1].1["text"], "Hello world");
    assert_eq!(events[4].1["output_index"], 2);
    assert_eq!(events[4].1["item"]["id"], "fc_r_2");
    let response = &events[7].1["response"];
    assert_eq!(
        (&response["id"], &response["model"]),
        (&json!("resp_r"), &json!("gpt-5"))
    );
    let kinds: Vec<&str> = response["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["reasoning", "message", "function_call"]);
    assert_eq!(response["output"][1]["content"][0]["text"], "Hello world");
}
