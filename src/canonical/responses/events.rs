//! The events of a Responses stream as they are written: one serialized shape per event type,
//! each framed as `event: <type>` and `data: <json>` with its `sequence_number` ([`emit`]).

use serde::Serialize;
use serde_json::value::RawValue;

use super::response::{OutItem, OutText};
use crate::canonical::types::RawJson;

/// One event of a Responses stream, as its data is serialized (its `type` from the variant).
#[derive(Serialize)]
#[serde(tag = "type")]
pub(super) enum OutEvent<'a> {
    #[serde(rename = "response.created")]
    Created {
        sequence_number: u64,
        response: &'a RawValue,
    },
    #[serde(rename = "response.in_progress")]
    InProgress {
        sequence_number: u64,
        response: &'a RawValue,
    },
    #[serde(rename = "response.output_item.added")]
    ItemAdded {
        sequence_number: u64,
        output_index: u32,
        item: OutItem<'a>,
    },
    #[serde(rename = "response.content_part.added")]
    PartAdded {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        content_index: u32,
        part: OutText<'a>,
    },
    #[serde(rename = "response.output_text.delta")]
    TextDelta {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        content_index: u32,
        delta: &'a str,
        logprobs: [(); 0],
    },
    #[serde(rename = "response.output_text.done")]
    TextDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        content_index: u32,
        text: &'a str,
        logprobs: [(); 0],
    },
    #[serde(rename = "response.content_part.done")]
    PartDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        content_index: u32,
        part: OutText<'a>,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgsDelta {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        delta: &'a str,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    ArgsDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        name: &'a str,
        arguments: &'a str,
    },
    #[serde(rename = "response.output_item.done")]
    ItemDone {
        sequence_number: u64,
        output_index: u32,
        item: &'a RawValue,
    },
    #[serde(rename = "response.completed")]
    Completed {
        sequence_number: u64,
        response: &'a RawValue,
    },
    #[serde(rename = "response.incomplete")]
    Incomplete {
        sequence_number: u64,
        response: &'a RawValue,
    },
    #[serde(rename = "response.failed")]
    Failed {
        sequence_number: u64,
        response: &'a RawValue,
    },
    #[serde(rename = "error")]
    Error {
        sequence_number: u64,
        error: OutStreamError<'a>,
    },
}

impl OutEvent<'_> {
    /// The event's `type`, which is also its SSE `event:` name.
    pub(super) fn name(&self) -> &'static str {
        match self {
            OutEvent::Created { .. } => "response.created",
            OutEvent::InProgress { .. } => "response.in_progress",
            OutEvent::ItemAdded { .. } => "response.output_item.added",
            OutEvent::PartAdded { .. } => "response.content_part.added",
            OutEvent::TextDelta { .. } => "response.output_text.delta",
            OutEvent::TextDone { .. } => "response.output_text.done",
            OutEvent::PartDone { .. } => "response.content_part.done",
            OutEvent::ArgsDelta { .. } => "response.function_call_arguments.delta",
            OutEvent::ArgsDone { .. } => "response.function_call_arguments.done",
            OutEvent::ItemDone { .. } => "response.output_item.done",
            OutEvent::Completed { .. } => "response.completed",
            OutEvent::Incomplete { .. } => "response.incomplete",
            OutEvent::Failed { .. } => "response.failed",
            OutEvent::Error { .. } => "error",
        }
    }
}

/// The `error` event's error object.
#[derive(Serialize)]
pub(super) struct OutStreamError<'a> {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) code: &'static str,
    pub(super) message: &'a str,
    pub(super) param: Option<()>,
}

/// Serializes a value as raw JSON (none of ours fail; a failure writes `null`).
pub(super) fn to_raw(value: &impl Serialize) -> RawJson {
    serde_json::value::to_raw_value(value).map_or_else(|_| RawJson::null(), RawJson)
}

/// Appends `event: <type>\ndata: <json>\n\n` numbered `*sequence_number`, and counts it.
pub(super) fn emit<'e>(
    sequence_number: &mut u64,
    out: &mut Vec<u8>,
    event: impl FnOnce(u64) -> OutEvent<'e>,
) {
    let event = event(*sequence_number);
    if crate::wire::sse::write_json(out, Some(event.name()), &event) {
        *sequence_number = sequence_number.saturating_add(1);
    }
}
