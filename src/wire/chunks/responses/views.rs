//! What the tracker reads of a Responses API event: an [`EventView`], and of the `response`
//! and `item` it may carry, a [`ResponseView`] and an [`ItemView`]. Each is read by the scanner
//! when the scanner takes it and every value reads as the field's type (as serde_json reads
//! it), else by serde_json, which either reads it or says no; so the reading is serde_json's,
//! and the scanner only a faster way to it for the events providers send. The stream's text
//! deltas are read by their shape ([`TextDeltaShape`]).

use std::borrow::Cow;

use serde::Deserialize;

use crate::wire::chunks::fields::{index, nested, number, owned_text, raw, text, Raw};
use crate::wire::scan;

#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug, PartialEq))]
pub(super) struct EventView<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Cow<'a, str>,
    #[serde(default)]
    pub(super) sequence_number: Option<u64>,
    #[serde(default)]
    pub(super) output_index: Option<u32>,
    #[serde(default)]
    pub(super) content_index: Option<u32>,
    #[serde(default, borrow)]
    pub(super) item_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) item: Option<Raw<'a>>,
    #[serde(default, borrow)]
    pub(super) delta: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) response: Option<Raw<'a>>,
    #[serde(default, borrow)]
    pub(super) message: Option<Cow<'a, str>>,
}

/// [`EventView`]'s keys, in its order.
const EVENT_KEYS: [&str; 9] = [
    "type",
    "sequence_number",
    "output_index",
    "content_index",
    "item_id",
    "item",
    "delta",
    "response",
    "message",
];

impl<'a> EventView<'a> {
    /// `data` read as serde_json reads it: by the scanner when it can, else by serde_json.
    pub(super) fn read(data: &'a [u8]) -> Option<EventView<'a>> {
        Self::scan(data).or_else(|| serde_json::from_slice(data).ok())
    }

    /// `data` read by the scanner, when it takes it and every value reads as its field's type.
    pub(super) fn scan(data: &'a [u8]) -> Option<EventView<'a>> {
        let [kind, sequence, output, content, item_id, item, delta, response, message] =
            scan::fields(data, EVENT_KEYS)?;
        Some(EventView {
            kind: scan::text(data, kind?)?,
            sequence_number: number(data, sequence)?,
            output_index: index(data, output)?,
            content_index: index(data, content)?,
            item_id: text(data, item_id)?,
            item: raw(data, item)?,
            delta: text(data, delta)?,
            response: raw(data, response)?,
            message: text(data, message)?,
        })
    }
}

/// The type of a text delta, the most frequent event of a Responses stream.
pub(super) const TEXT_DELTA: &str = "response.output_text.delta";
/// The same, as a JSON string.
const TEXT_DELTA_JSON: &[u8] = b"\"response.output_text.delta\"";

/// The shape of a Responses stream's text deltas ([`scan::Shape`]): a `response.output_text.delta`
/// event serde_json read, with its type, numbers, item id and text kept. A later event of the
/// shape reads as serde_json reads it when its type is the same and its numbers and texts read
/// as [`EventView`]'s fields do; otherwise serde_json reads it.
#[derive(Debug)]
pub(in crate::wire::chunks) struct TextDeltaShape {
    shape: scan::Shape<6>,
}

/// The fields [`TextDeltaShape`] keeps, in its order.
const DELTA_KEYS: [&str; 6] = [
    "type",
    "sequence_number",
    "output_index",
    "content_index",
    "item_id",
    "delta",
];

impl TextDeltaShape {
    /// The shape of `data`, read as `view`, when it is a text delta with none of the fields
    /// the shape does not keep (`item`, `response`, `message`).
    pub(super) fn of(data: &[u8], view: &EventView<'_>) -> Option<TextDeltaShape> {
        if view.kind != TEXT_DELTA
            || view.item.is_some()
            || view.response.is_some()
            || view.message.is_some()
        {
            return None;
        }
        let shape = scan::Shape::of_read(data, scan::fields(data, DELTA_KEYS)?)?;
        Some(TextDeltaShape { shape })
    }

    /// `data` read as serde_json reads it into an [`EventView`], when it has this shape and
    /// its values read as the view's fields do.
    pub(super) fn read<'a>(&self, data: &'a [u8]) -> Option<EventView<'a>> {
        let [kind, sequence, output, content, item_id, delta] = self.shape.read(data)?;
        if data.get(kind?)? != TEXT_DELTA_JSON {
            return None;
        }
        Some(EventView {
            kind: Cow::Borrowed(TEXT_DELTA),
            sequence_number: number(data, sequence)?,
            output_index: index(data, output)?,
            content_index: index(data, content)?,
            item_id: text(data, item_id)?,
            item: None,
            delta: text(data, delta)?,
            response: None,
            message: None,
        })
    }
}

#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug, PartialEq))]
pub(super) struct ItemView<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Cow<'a, str>,
    #[serde(default)]
    pub(super) id: Option<String>,
}

impl<'a> ItemView<'a> {
    /// The item `raw` read as serde_json reads it: by the scanner when it can.
    pub(super) fn read(raw: Raw<'a>) -> Option<ItemView<'a>> {
        let scanned = || {
            let [kind, id] = raw.fields(["type", "id"])?;
            let data = raw.0.as_bytes();
            Some(ItemView {
                kind: scan::text(data, kind?)?,
                id: owned_text(data, id)?,
            })
        };
        scanned().or_else(|| serde_json::from_str(raw.0).ok())
    }
}

#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug, PartialEq))]
pub(super) struct ResponseView<'a> {
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) model: Option<String>,
    #[serde(default)]
    pub(super) created_at: Option<u64>,
    #[serde(default)]
    pub(super) usage: Option<UsageView>,
    #[serde(default, borrow)]
    pub(super) error: Option<ErrorView<'a>>,
}

impl<'a> ResponseView<'a> {
    /// The response `raw` read as serde_json reads it: by the scanner when it can (its usage
    /// and error, small objects, by serde_json).
    pub(super) fn read(raw: Raw<'a>) -> Option<ResponseView<'a>> {
        let scanned = || {
            let [id, model, created_at, usage, error] =
                raw.fields(["id", "model", "created_at", "usage", "error"])?;
            let data = raw.0.as_bytes();
            Some(ResponseView {
                id: owned_text(data, id)?,
                model: owned_text(data, model)?,
                created_at: number(data, created_at)?,
                usage: nested(data, usage)?,
                error: nested(data, error)?,
            })
        };
        scanned().or_else(|| serde_json::from_str(raw.0).ok())
    }
}

/// A Responses `usage`: `input_tokens` counts the cached ones, as OpenAI Chat's does.
#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug, PartialEq))]
pub(in crate::wire) struct UsageView {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<InputDetailsView>,
}

#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug, PartialEq))]
struct InputDetailsView {
    #[serde(default)]
    cached_tokens: u64,
    #[serde(default)]
    cache_write_tokens: u64,
}

impl UsageView {
    pub(in crate::wire) fn usage(&self) -> super::Usage {
        let details = self.input_tokens_details.as_ref();
        super::Usage {
            prompt_tokens: self.input_tokens,
            completion_tokens: self.output_tokens,
            cache_read_tokens: details.map_or(0, |d| d.cached_tokens),
            cache_write_tokens: details.map_or(0, |d| d.cache_write_tokens),
        }
    }
}

#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug, PartialEq))]
pub(super) struct ErrorView<'a> {
    #[serde(default, borrow)]
    pub(super) message: Option<Cow<'a, str>>,
}

/// Fuzzing (`fuzz/fuzz_targets/json_scan.rs`): an event, and the response and item it
/// carries, the scanner reads, read as serde_json reads them; panics when not.
#[cfg(fuzzing)]
pub fn fuzz_event_read(data: &[u8]) {
    let Some(scanned) = EventView::scan(data) else {
        return;
    };
    let theirs = serde_json::from_slice::<EventView<'_>>(data).ok();
    assert_eq!(Some(&scanned), theirs.as_ref(), "a Responses event");
    for raw in [scanned.item, scanned.response].into_iter().flatten() {
        let theirs = serde_json::from_str::<ResponseView<'_>>(raw.0).ok();
        assert_eq!(ResponseView::read(raw), theirs, "a response");
        let theirs = serde_json::from_str::<ItemView<'_>>(raw.0).ok();
        assert_eq!(ItemView::read(raw), theirs, "an item");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATED: &str = r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1741290958,"status":"in_progress","model":"gpt-4.1","output":[],"usage":null,"error":null}}"#;
    const ADDED: &str = r#"{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}"#;
    const DONE: &str = r#"{"type":"response.output_item.done","sequence_number":9,"output_index":0,"item":{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Hi \"there\"","annotations":[]}],"role":"assistant"}}"#;
    const COMPLETED: &str = r#"{"type":"response.completed","sequence_number":10,"response":{"id":"resp_1","created_at":1741290958,"model":"gpt-4.1","output":[],"usage":{"input_tokens":37,"output_tokens":11,"input_tokens_details":{"cached_tokens":5},"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48}}}"#;
    const FAILED: &str = r#"{"type":"response.failed","sequence_number":3,"response":{"id":"resp_1","error":{"code":"server_error","message":"the model \u00e9rred"}}}"#;
    const ERROR: &str =
        r#"{"type":"error","sequence_number":1,"message":"overloaded","code":"server_error"}"#;

    fn by_serde(data: &str) -> Option<EventView<'_>> {
        serde_json::from_str(data).ok()
    }

    /// The events providers send are read by the scanner, and read as serde_json reads them,
    /// the response and the item they carry too.
    #[test]
    fn the_events_providers_send_are_read_by_the_scanner_as_by_serde() {
        for event in [CREATED, ADDED, DONE, COMPLETED, FAILED, ERROR] {
            let scanned = EventView::scan(event.as_bytes());
            assert!(scanned.is_some(), "not read by the scanner: {event}");
            assert_eq!(scanned, by_serde(event), "{event}");
            let scanned = scanned.unwrap();
            for raw in [scanned.item, scanned.response].into_iter().flatten() {
                let response = ResponseView::read(raw);
                assert_eq!(response, serde_json::from_str(raw.0).ok(), "{}", raw.0);
                let item = ItemView::read(raw);
                assert_eq!(item, serde_json::from_str(raw.0).ok(), "{}", raw.0);
            }
        }
        let completed = EventView::scan(COMPLETED.as_bytes()).unwrap();
        let usage = ResponseView::read(completed.response.unwrap())
            .unwrap()
            .usage;
        assert_eq!(
            usage.map(|u| u.usage()),
            Some(super::super::Usage {
                cache_read_tokens: 5,
                ..super::super::Usage::new(37, 11)
            })
        );
        let failed = EventView::scan(FAILED.as_bytes()).unwrap();
        let error = ResponseView::read(failed.response.unwrap()).unwrap().error;
        assert_eq!(
            error.and_then(|e| e.message).as_deref(),
            Some("the model érred")
        );
        let item = ItemView::read(EventView::scan(DONE.as_bytes()).unwrap().item.unwrap());
        assert_eq!(
            item.map(|i| (i.kind, i.id)),
            Some(("message".into(), Some("msg_1".into())))
        );
    }

    /// What the scanner does not read as serde_json does, it leaves to serde_json: the reading
    /// is serde_json's whichever reads it.
    #[test]
    fn what_the_scanner_does_not_take_is_read_by_serde() {
        let events = [
            r#"{"type":"response.output_text.delta","output_index":null,"item_id":null,"delta":null}"#,
            r#"{"type":"x","sequence_number":-1}"#,
            r#"{"type":"x","sequence_number":1.0}"#,
            r#"{"type":"x","output_index":4294967296}"#,
            r#"{"type":"x","sequence_number":18446744073709551616}"#,
            r#"{"type":"x","delta":7}"#,
            r#"{"type":"x","delta":"\ud800"}"#,
            r#"{"type":"x","type":"y"}"#,
            r#"{"\u0074ype":"x","delta":"d"}"#,
            r#"{"type":7}"#,
            r#"{"sequence_number":1}"#,
            r#"{"type":"x","item":null,"response":null}"#,
            r#"{"type":"x","response":[1, {"a":2}] }"#,
            r#"{"type":"x"} trailing"#,
        ];
        let mut scanned = 0;
        for event in events {
            let ours = EventView::read(event.as_bytes());
            assert_eq!(ours, by_serde(event), "{event}");
            scanned += usize::from(EventView::scan(event.as_bytes()).is_some());
        }
        assert_eq!(scanned, 3, "null fields, null raw values, a raw array");
        let responses = [
            r#"{"id":null,"created_at":null,"usage":null,"error":null}"#,
            r#"{"id":"r","created_at":-5}"#,
            r#"{"id":"r","usage":{"input_tokens":"3"}}"#,
            r#"{"id":"r","id":"s"}"#,
            r#"{"id":"r","error":{"message":null}}"#,
            r#"[1]"#,
        ];
        for response in responses {
            let theirs = serde_json::from_str::<ResponseView<'_>>(response).ok();
            assert_eq!(ResponseView::read(Raw(response)), theirs, "{response}");
            let theirs = serde_json::from_str::<ItemView<'_>>(response).ok();
            assert_eq!(ItemView::read(Raw(response)), theirs, "{response}");
        }
    }
}
