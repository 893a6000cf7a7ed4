//! An Anthropic event stream read in passing (same-dialect pass-through): `message_start` names
//! the message, `content_block_start` / `_delta` / `_stop` carry text, thinking and tool use,
//! `message_delta` the stop reason and usage, `message_stop` ends it, `error` reports a failure
//! in-band. Every event but `message_stop` and `error` goes on framed as it came; an unknown
//! event type goes on untouched.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::fields::{count, index, nested, number, owned_text, raw, scanned, text, Raw, Scanned};
use super::{ChunkAction, ChunkMeta, ChunkTracker, Shaped, Usage};
use crate::wire::scan;
use crate::wire::sse::{encode_event, SseEvent};

/// What the tracker reads of an event. Read by the scanner when it takes the event and every
/// value reads as its field's type (the nested objects, small, by serde_json), else by
/// serde_json, which reads it or says no: the reading is serde_json's either way. A stream's
/// block deltas are read by their shape ([`BlockDeltaShape`]).
#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug))]
struct EventView<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    message: Option<Raw<'a>>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    content_block: Option<TypeView<'a>>,
    #[serde(default, borrow)]
    delta: Option<DeltaView<'a>>,
    #[serde(default)]
    usage: Option<UsageView>,
    #[serde(default, borrow)]
    error: Option<ErrorView<'a>>,
    /// The fields of `message` ([`MESSAGE_KEYS`]) when the scanner found them in the event's
    /// own pass (a plain object); else `message` is read on its own.
    #[serde(skip)]
    message_fields: Option<scan::Spans<3>>,
}

/// The keys of an event, in the order [`EventView::scan`] reads them.
const EVENT_KEYS: [&str; 7] = [
    "type",
    "message",
    "index",
    "content_block",
    "delta",
    "usage",
    "error",
];
/// Where `message` is in [`EVENT_KEYS`].
const MESSAGE: usize = 1;
/// The fields of a `message_start`'s message that the tracker reads.
const MESSAGE_KEYS: [&str; 3] = ["id", "model", "usage"];

impl<'a> EventView<'a> {
    /// `data` read as serde_json reads it: by the scanner when it can, else by serde_json.
    fn read(data: &'a [u8]) -> Option<EventView<'a>> {
        Self::scan(data).or_else(|| serde_json::from_slice(data).ok())
    }

    /// `data` read by the scanner, when it takes it and every value reads as its field's type.
    fn scan(data: &'a [u8]) -> Option<EventView<'a>> {
        let ([kind, message, index_at, block, delta, usage, error], inner) =
            scan::fields_and_nested(data, EVENT_KEYS, &[MESSAGE], MESSAGE_KEYS)?;
        Some(EventView {
            kind: scan::text(data, kind?)?,
            message: raw(data, message)?,
            index: index(data, index_at)?,
            content_block: nested(data, block)?,
            delta: nested(data, delta)?,
            usage: scanned(data, usage)?,
            error: nested(data, error)?,
            message_fields: inner.map(|(_, spans)| spans),
        })
    }

    /// The view without what only the scanner finds (the message's fields), to compare with
    /// serde_json's.
    #[cfg(any(test, fuzzing))]
    fn into_serde_view(mut self) -> Self {
        self.message_fields = None;
        self
    }

    /// The `message` of a `message_start`, from the fields found in the event's pass when
    /// they read as its fields' types, else read on its own.
    fn message(&self, data: &[u8]) -> Option<MessageView> {
        self.message_fields
            .clone()
            .and_then(|spans| MessageView::of(data, spans))
            .or_else(|| self.message.and_then(MessageView::read))
    }
}

/// The types of a block's delta, as [`known_text`] reads them.
const DELTA_KINDS: [&str; 5] = [
    "text_delta",
    "input_json_delta",
    "thinking_delta",
    "signature_delta",
    "citations_delta",
];

/// As [`text`], but a string that is one of `known` (written as it is, no escape) is that
/// constant, with no copy nor UTF-8 check: a delta's type is one of a few words, read with
/// every block delta.
fn known_text<'a>(
    data: &'a [u8],
    span: Option<Range<usize>>,
    known: &[&'static str],
) -> Option<Option<Cow<'a, str>>> {
    let inner = span.as_ref().and_then(|span| {
        let value = &data[span.clone()];
        value.strip_prefix(b"\"")?.strip_suffix(b"\"")
    });
    match inner.and_then(|inner| known.iter().find(|k| k.as_bytes() == inner)) {
        Some(k) => Some(Some(Cow::Borrowed(k))),
        None => text(data, span),
    }
}

/// The type of a block's delta, the most frequent event of an Anthropic stream.
const BLOCK_DELTA: &str = "content_block_delta";
/// The same, as a JSON string.
const BLOCK_DELTA_JSON: &[u8] = b"\"content_block_delta\"";

/// The shape of an Anthropic stream's block deltas ([`scan::Shape`]): a `content_block_delta`
/// event serde_json read, with its type, index and its delta's type and text kept. A later
/// event of the shape reads as serde_json reads it when its type is the same and its index and
/// texts read as [`EventView`]'s fields do; otherwise serde_json reads it.
#[derive(Debug)]
pub(super) struct BlockDeltaShape {
    shape: scan::Shape<4>,
}

impl BlockDeltaShape {
    /// The shape of `data`, read by serde_json as `view`, when it is a block delta with none
    /// of the fields the shape does not keep.
    fn of(data: &[u8], view: &EventView<'_>) -> Option<BlockDeltaShape> {
        let plain = view.message.is_none()
            && view.content_block.is_none()
            && view.usage.is_none()
            && view.error.is_none()
            && view.delta.as_ref().is_some_and(|d| d.stop_reason.is_none());
        if view.kind != BLOCK_DELTA || !plain {
            return None;
        }
        let [kind, index, delta] = scan::fields(data, ["type", "index", "delta"])?;
        let [delta_kind, text] = scan::fields_in(data, delta?, ["type", "text"])?;
        let shape = scan::Shape::of_read(data, [kind, index, delta_kind, text])?;
        Some(BlockDeltaShape { shape })
    }

    /// `data` read as serde_json reads it into an [`EventView`], when it has this shape and
    /// its values read as the view's fields do.
    fn read<'a>(&self, data: &'a [u8]) -> Option<EventView<'a>> {
        let [kind, index, delta_kind, text] = self.shape.read(data)?;
        if data.get(kind?)? != BLOCK_DELTA_JSON {
            return None;
        }
        Some(EventView {
            kind: Cow::Borrowed(BLOCK_DELTA),
            message: None,
            index: self::index(data, index)?,
            content_block: None,
            delta: Some(DeltaView {
                kind: known_text(data, delta_kind, &DELTA_KINDS)?,
                text: self::text(data, text)?,
                stop_reason: None,
            }),
            usage: None,
            error: None,
            message_fields: None,
        })
    }
}

#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug))]
struct TypeView<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
}

#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug))]
struct DeltaView<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    stop_reason: Option<&'a RawValue>,
}

/// Anthropic's token counts, as much as the audit keeps: `input_tokens` leaves out what the
/// prompt cache read and wrote; the write's total is `cache_creation_input_tokens`, else the
/// sum of its parts by time to live (`cache_creation`). In a stream every field is optional.
#[derive(Deserialize, Default)]
#[cfg_attr(any(test, fuzzing), derive(Debug))]
pub(in crate::wire) struct UsageView {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation: Option<CacheCreationView>,
}

#[derive(Deserialize, Default)]
#[cfg_attr(any(test, fuzzing), derive(Debug))]
struct CacheCreationView {
    #[serde(default)]
    ephemeral_5m_input_tokens: u64,
    #[serde(default)]
    ephemeral_1h_input_tokens: u64,
}

impl Scanned for UsageView {
    fn scan(data: &[u8], span: Range<usize>) -> Option<UsageView> {
        let [input, output, read, write, creation] = scan::fields_in(
            data,
            span,
            [
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
                "cache_creation",
            ],
        )?;
        Some(UsageView {
            input_tokens: number(data, input)?,
            output_tokens: number(data, output)?,
            cache_read_input_tokens: number(data, read)?,
            cache_creation_input_tokens: number(data, write)?,
            cache_creation: scanned(data, creation)?,
        })
    }
}

impl Scanned for CacheCreationView {
    fn scan(data: &[u8], span: Range<usize>) -> Option<CacheCreationView> {
        let [five_minutes, one_hour] = scan::fields_in(
            data,
            span,
            ["ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"],
        )?;
        Some(CacheCreationView {
            ephemeral_5m_input_tokens: count(data, five_minutes)?,
            ephemeral_1h_input_tokens: count(data, one_hour)?,
        })
    }
}

impl UsageView {
    fn cache_write(&self) -> Option<u64> {
        self.cache_creation_input_tokens.or_else(|| {
            self.cache_creation.as_ref().map(|c| {
                c.ephemeral_5m_input_tokens
                    .saturating_add(c.ephemeral_1h_input_tokens)
            })
        })
    }

    /// Folds these counts into `usage`: the ones given replace what was there (a stream's
    /// `message_delta` counts are cumulative), the prompt total follows.
    fn merge_into(&self, usage: &mut Usage) {
        let uncached = usage
            .prompt_tokens
            .saturating_sub(usage.cache_read_tokens)
            .saturating_sub(usage.cache_write_tokens);
        let uncached = self.input_tokens.unwrap_or(uncached);
        if let Some(read) = self.cache_read_input_tokens {
            usage.cache_read_tokens = read;
        }
        if let Some(write) = self.cache_write() {
            usage.cache_write_tokens = write;
        }
        if let Some(output) = self.output_tokens {
            usage.completion_tokens = output;
        }
        usage.prompt_tokens = uncached
            .saturating_add(usage.cache_read_tokens)
            .saturating_add(usage.cache_write_tokens);
    }

    /// The counts of a whole message.
    pub(in crate::wire) fn usage(&self) -> Usage {
        let mut usage = Usage::default();
        self.merge_into(&mut usage);
        usage
    }
}

#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug))]
struct MessageView {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<UsageView>,
}

impl MessageView {
    /// The message `raw` read as serde_json reads it: by the scanner when it can (its usage,
    /// a small object, by serde_json).
    fn read(raw: Raw<'_>) -> Option<MessageView> {
        raw.fields(MESSAGE_KEYS)
            .and_then(|spans| MessageView::of(raw.0, spans))
            .or_else(|| serde_json::from_slice(raw.0).ok())
    }

    /// The message whose fields the scanner found at `spans` of `data`, when each reads as
    /// its field's type.
    fn of(data: &[u8], [id, model, usage]: scan::Spans<3>) -> Option<MessageView> {
        Some(MessageView {
            id: owned_text(data, id)?,
            model: owned_text(data, model)?,
            usage: scanned(data, usage)?,
        })
    }
}

#[derive(Deserialize)]
#[cfg_attr(any(test, fuzzing), derive(Debug))]
struct ErrorView<'a> {
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
}

/// The event that ends a complete Anthropic stream.
pub(super) fn message_stop() -> Bytes {
    encode_event("message_stop", br#"{"type":"message_stop"}"#)
}

/// An Anthropic `error` event with `message` (the SDKs raise it as an API error).
pub(super) fn error_event(message: &str) -> Bytes {
    let body = serde_json::json!({
        "type": "error",
        "error": {"type": "api_error", "message": message},
    });
    encode_event("error", body.to_string().as_bytes())
}

impl ChunkTracker {
    /// Classify one Anthropic event and update the stream's state.
    pub(super) fn on_anthropic_event(&mut self, ev: &SseEvent) -> ChunkAction {
        let read = self.read_event(
            &ev.data,
            |shape, data| match shape {
                Shaped::BlockDelta(shape) => shape.read(data),
                _ => None,
            },
            EventView::read,
            |data, view| BlockDeltaShape::of(data, view).map(Shaped::BlockDelta),
        );
        let Some(view) = read else {
            self.malformed += 1;
            return ChunkAction::Skip;
        };
        match view.kind.as_ref() {
            "message_start" => {
                let message = view.message(&ev.data);
                if let Some(m) = message {
                    if let Some(u) = m.usage {
                        u.merge_into(self.usage.get_or_insert_with(Usage::default));
                    }
                    self.meta = Some(ChunkMeta {
                        id: m.id,
                        model: m.model,
                        created: None,
                    });
                }
            }
            "content_block_start" => {
                let kind = view.content_block.map(|b| b.kind);
                let index = view.index.unwrap_or(self.next_block);
                let text = kind.as_deref() == Some("text");
                match kind.as_deref() {
                    Some("text") => {}
                    Some("thinking" | "redacted_thinking") => self.reasoning_seen = true,
                    // tool_use, server_tool_use and the blocks of tools that run upstream.
                    _ => {
                        self.tool_calls_seen = true;
                        self.committed = true;
                        self.content_chunks += 1;
                    }
                }
                self.open_block = Some((index, text));
                self.next_block = self.next_block.max(index.saturating_add(1));
            }
            "content_block_delta" => {
                let delta = view.delta;
                let text = delta.as_ref().and_then(|d| d.text.as_deref());
                let is_text = delta
                    .as_ref()
                    .is_some_and(|d| d.kind.as_deref() == Some("text_delta"));
                if !(is_text && text.is_some_and(str::is_empty)) {
                    self.committed = true;
                    self.content_chunks += 1;
                }
                if self.capture_text && is_text {
                    self.last_text.push_str(text.unwrap_or_default());
                }
            }
            "content_block_stop" => self.open_block = None,
            "message_delta" => {
                if view
                    .delta
                    .as_ref()
                    .and_then(|d| d.stop_reason)
                    .is_some_and(|r| r.get() != "null")
                {
                    self.committed = true;
                    self.finished = true;
                }
                if let Some(u) = view.usage {
                    self.usage_seen |= u.output_tokens.is_some();
                    u.merge_into(self.usage.get_or_insert_with(Usage::default));
                }
            }
            "message_stop" => return ChunkAction::Done,
            "error" => {
                let message = view.error.and_then(|e| e.message).map(Cow::into_owned);
                return ChunkAction::Error(message.unwrap_or_else(|| "upstream error".into()));
            }
            _ => {} // ping, and types we do not know: passed on
        }
        let name = ev.event.as_deref().unwrap_or(view.kind.as_ref());
        ChunkAction::Forward(ev.framed(Some(name)))
    }
}

/// Fuzzing (`fuzz/fuzz_targets/json_scan.rs`): an Anthropic event, and the message it carries,
/// the scanner reads, read as serde_json reads them; panics when not.
#[cfg(fuzzing)]
pub fn fuzz_event_read(data: &[u8]) {
    let Some(scanned) = EventView::scan(data) else {
        return;
    };
    let theirs = serde_json::from_slice::<EventView<'_>>(data).ok();
    let message = scanned.message(data);
    let scanned = scanned.into_serde_view();
    let (ours, theirs) = (
        format!("{:?}", Some(&scanned)),
        format!("{:?}", theirs.as_ref()),
    );
    assert_eq!(ours, theirs, "an Anthropic event");
    if let Some(raw) = scanned.message {
        let theirs = serde_json::from_slice::<MessageView>(raw.0).ok();
        assert_eq!(format!("{message:?}"), format!("{theirs:?}"), "a message");
        let alone = MessageView::read(raw);
        assert_eq!(
            format!("{alone:?}"),
            format!("{theirs:?}"),
            "a message alone"
        );
    }
}

#[cfg(test)]
mod tests;
