//! What the tracker reads of a Responses API event: an [`EventView`], and of the `response`
//! and `item` it may carry, a [`ResponseView`] and an [`ItemView`]. Each is read by the scanner
//! when the scanner takes it and every value reads as the field's type (as serde_json reads
//! it), else by serde_json, which either reads it or says no; so the reading is serde_json's,
//! and the scanner only a faster way to it for the events providers send. The stream's text
//! deltas are read by their shape ([`TextDeltaShape`]).

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;

use crate::wire::chunks::fields::{
    count, index, nested, number, owned_text, raw, scanned, text, Raw, Scanned,
};
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

/// The keys of an event's `response` and `item` a [`ResponseView`] and an [`ItemView`] read,
/// found in the event's own pass.
const NESTED_KEYS: [&str; 6] = ["id", "model", "created_at", "usage", "error", "type"];
/// [`EVENT_KEYS`]' `item` and `response`.
const ITEM: usize = 5;
const RESPONSE: usize = 7;

/// An event as the tracker reads it: its [`EventView`], and when the scanner read it, the
/// fields of the `response` or `item` it carries, found in the same pass: each read once.
pub(super) struct EventRead<'a> {
    pub(super) view: EventView<'a>,
    data: &'a [u8],
    nested: Option<scan::Nested<6>>,
}

impl<'a> EventRead<'a> {
    /// `data` read as serde_json reads it: by the scanner when it can, else by serde_json.
    pub(super) fn read(data: &'a [u8]) -> Option<EventRead<'a>> {
        Self::scan(data).or_else(|| Some(Self::alone(serde_json::from_slice(data).ok()?, data)))
    }

    /// `data` read by the scanner, when it takes it and every value reads as its field's type.
    pub(super) fn scan(data: &'a [u8]) -> Option<EventRead<'a>> {
        let ([kind, sequence, output, content, item_id, item, delta, response, message], nested) =
            scan::fields_and_nested(data, EVENT_KEYS, &[ITEM, RESPONSE], NESTED_KEYS)?;
        let view = EventView {
            kind: scan::text(data, kind?)?,
            sequence_number: number(data, sequence)?,
            output_index: index(data, output)?,
            content_index: index(data, content)?,
            item_id: text(data, item_id)?,
            item: raw(data, item)?,
            delta: text(data, delta)?,
            response: raw(data, response)?,
            message: text(data, message)?,
        };
        Some(EventRead { view, data, nested })
    }

    /// The event `view` of `data`, its `response` or `item` (if any) to be read on its own.
    fn alone(view: EventView<'a>, data: &'a [u8]) -> EventRead<'a> {
        EventRead {
            view,
            data,
            nested: None,
        }
    }

    /// The fields of the event's `key` found in its pass, if they were.
    fn nested(&self, key: usize) -> Option<scan::Spans<6>> {
        self.nested
            .as_ref()
            .filter(|(k, _)| *k == key)
            .map(|(_, spans)| spans.clone())
    }

    /// The event's `response`, read as serde_json reads it.
    pub(super) fn response(&self) -> Option<ResponseView<'a>> {
        let raw = self.view.response?;
        let Some([id, model, created_at, usage, error, _]) = self.nested(RESPONSE) else {
            return ResponseView::read(raw);
        };
        ResponseView::of(self.data, [id, model, created_at, usage, error])
            .or_else(|| serde_json::from_slice(raw.0).ok())
    }

    /// The event's `item`, read as serde_json reads it.
    pub(super) fn item(&self) -> Option<ItemView<'a>> {
        let raw = self.view.item?;
        let Some([id, _, _, _, _, kind]) = self.nested(ITEM) else {
            return ItemView::read(raw);
        };
        ItemView::of(self.data, [kind, id]).or_else(|| serde_json::from_slice(raw.0).ok())
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
    pub(super) fn of(data: &[u8], read: &EventRead<'_>) -> Option<TextDeltaShape> {
        let view = &read.view;
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
    pub(super) fn read<'a>(&self, data: &'a [u8]) -> Option<EventRead<'a>> {
        let [kind, sequence, output, content, item_id, delta] = self.shape.read(data)?;
        if data.get(kind?)? != TEXT_DELTA_JSON {
            return None;
        }
        let view = EventView {
            kind: Cow::Borrowed(TEXT_DELTA),
            sequence_number: number(data, sequence)?,
            output_index: index(data, output)?,
            content_index: index(data, content)?,
            item_id: text(data, item_id)?,
            item: None,
            delta: text(data, delta)?,
            response: None,
            message: None,
        };
        Some(EventRead::alone(view, data))
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
        raw.fields(["type", "id"])
            .and_then(|spans| Self::of(raw.0, spans))
            .or_else(|| serde_json::from_slice(raw.0).ok())
    }

    /// The item whose `type` and `id` the scanner found at `spans` in `data`, when they read
    /// as the fields' types.
    fn of(data: &'a [u8], [kind, id]: [Option<Range<usize>>; 2]) -> Option<ItemView<'a>> {
        Some(ItemView {
            kind: scan::text(data, kind?)?,
            id: owned_text(data, id)?,
        })
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
        raw.fields(["id", "model", "created_at", "usage", "error"])
            .and_then(|spans| Self::of(raw.0, spans))
            .or_else(|| serde_json::from_slice(raw.0).ok())
    }

    /// The response whose fields the scanner found at `spans` in `data`, when they read as
    /// the fields' types.
    fn of(data: &'a [u8], spans: [Option<Range<usize>>; 5]) -> Option<ResponseView<'a>> {
        let [id, model, created_at, usage, error] = spans;
        Some(ResponseView {
            id: owned_text(data, id)?,
            model: owned_text(data, model)?,
            created_at: number(data, created_at)?,
            usage: scanned(data, usage)?,
            error: nested(data, error)?,
        })
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

impl Scanned for UsageView {
    fn scan(data: &[u8], span: Range<usize>) -> Option<UsageView> {
        let [input, output, details] = scan::fields_in(
            data,
            span,
            ["input_tokens", "output_tokens", "input_tokens_details"],
        )?;
        Some(UsageView {
            input_tokens: count(data, input)?,
            output_tokens: count(data, output)?,
            input_tokens_details: scanned(data, details)?,
        })
    }
}

impl Scanned for InputDetailsView {
    fn scan(data: &[u8], span: Range<usize>) -> Option<InputDetailsView> {
        let [read, write] = scan::fields_in(data, span, ["cached_tokens", "cache_write_tokens"])?;
        Some(InputDetailsView {
            cached_tokens: count(data, read)?,
            cache_write_tokens: count(data, write)?,
        })
    }
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
    let Some(scanned) = EventRead::scan(data) else {
        return;
    };
    let theirs = serde_json::from_slice::<EventView<'_>>(data).ok();
    assert_eq!(Some(&scanned.view), theirs.as_ref(), "a Responses event");
    let view = &scanned.view;
    let response = view
        .response
        .and_then(|raw| serde_json::from_slice(raw.0).ok());
    assert_eq!(scanned.response(), response, "the event's response");
    let item = view.item.and_then(|raw| serde_json::from_slice(raw.0).ok());
    assert_eq!(scanned.item(), item, "the event's item");
    for raw in [view.item, view.response].into_iter().flatten() {
        let theirs = serde_json::from_slice::<ResponseView<'_>>(raw.0).ok();
        assert_eq!(ResponseView::read(raw), theirs, "a response");
        let theirs = serde_json::from_slice::<ItemView<'_>>(raw.0).ok();
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
            let scanned = EventRead::scan(event.as_bytes());
            assert!(scanned.is_some(), "not read by the scanner: {event}");
            let scanned = scanned.unwrap();
            assert_eq!(Some(&scanned.view), by_serde(event).as_ref(), "{event}");
            let view = &scanned.view;
            // The response or item the event carries was read in the event's pass.
            assert_eq!(
                scanned.nested.as_ref().map(|(k, _)| *k),
                view.response.map(|_| RESPONSE).or(view.item.map(|_| ITEM)),
                "{event}"
            );
            let response = view.response.and_then(|r| serde_json::from_slice(r.0).ok());
            assert_eq!(scanned.response(), response, "{event}");
            let item = view.item.and_then(|r| serde_json::from_slice(r.0).ok());
            assert_eq!(scanned.item(), item, "{event}");
            for raw in [view.item, view.response].into_iter().flatten() {
                let response = ResponseView::read(raw);
                assert_eq!(response, serde_json::from_slice(raw.0).ok(), "{raw:?}");
                let item = ItemView::read(raw);
                assert_eq!(item, serde_json::from_slice(raw.0).ok(), "{raw:?}");
            }
        }
        let completed = EventRead::scan(COMPLETED.as_bytes()).unwrap();
        let usage = completed.response().unwrap().usage;
        assert_eq!(
            usage.map(|u| u.usage()),
            Some(super::super::Usage {
                cache_read_tokens: 5,
                ..super::super::Usage::new(37, 11)
            })
        );
        let failed = EventRead::scan(FAILED.as_bytes()).unwrap();
        let error = failed.response().unwrap().error;
        assert_eq!(
            error.and_then(|e| e.message).as_deref(),
            Some("the model érred")
        );
        let item = EventRead::scan(DONE.as_bytes()).unwrap().item();
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
            let ours = EventRead::read(event.as_bytes());
            assert_eq!(ours.map(|r| r.view), by_serde(event), "{event}");
            scanned += usize::from(EventRead::scan(event.as_bytes()).is_some());
        }
        assert_eq!(scanned, 3, "null fields, null raw values, a raw array");
        let responses = [
            r#"{"id":null,"created_at":null,"usage":null,"error":null}"#,
            r#"{"id":"r","created_at":-5}"#,
            r#"{"id":"r","usage":{"input_tokens":"3"}}"#,
            r#"{"id":"r","id":"s"}"#,
            r#"{"id":"r","error":{"message":null}}"#,
            r#"{"\u0069d":"r","type":"message"}"#,
            r#"{"type":"message","type":"reasoning"}"#,
            r#"{"type":7}"#,
            r#"[1]"#,
        ];
        for response in responses {
            let theirs = serde_json::from_str::<ResponseView<'_>>(response).ok();
            assert_eq!(
                ResponseView::read(Raw(response.as_bytes())),
                theirs,
                "{response}"
            );
            let theirs = serde_json::from_str::<ItemView<'_>>(response).ok();
            assert_eq!(
                ItemView::read(Raw(response.as_bytes())),
                theirs,
                "{response}"
            );
        }
        // The same values carried by events, read in the event's pass (or, when the scanner
        // does not take them there, as above).
        for value in responses {
            let event = format!(r#"{{"type":"response.created","response":{value}}}"#);
            let read = EventRead::read(event.as_bytes()).unwrap();
            let theirs = serde_json::from_str::<ResponseView<'_>>(value).ok();
            assert_eq!(read.response(), theirs, "{event}");
            let event = format!(r#"{{"type":"response.output_item.added","item":{value}}}"#);
            let read = EventRead::read(event.as_bytes()).unwrap();
            let theirs = serde_json::from_str::<ItemView<'_>>(value).ok();
            assert_eq!(read.item(), theirs, "{event}");
        }
        // An event with both: the first read in the event's pass, the other after it.
        let both = r#"{"type":"x","item":{"id":"i","type":"message"},"response":{"id":"r"}}"#;
        let read = EventRead::scan(both.as_bytes()).unwrap();
        assert_eq!(read.nested.as_ref().map(|(k, _)| *k), Some(ITEM));
        assert_eq!(read.item().and_then(|i| i.id).as_deref(), Some("i"));
        assert_eq!(read.response().and_then(|r| r.id).as_deref(), Some("r"));
    }
}
