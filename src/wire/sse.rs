//! A server-sent events decoder for upstream streams (the WHATWG event-stream rules we need:
//! `data:` lines joined by `\n`, `event:` names, comments, CR/LF/CRLF line ends) and the encoder
//! for what we send on.
//!
//! What it holds is bounded, since the upstream decides what it sends: a line longer than
//! [`MAX_LINE`] or an event whose joined data is longer than [`MAX_EVENT`] ends the decoding.
//! The decoder then returns one error event ([`OVERFLOW`], read as an in-band error by every
//! dialect's reader, so the attempt fails like one: before the first content it fails over,
//! after it the stream is continued elsewhere or ends with the error event), ignores the rest
//! of the stream, and counts the overflow when given a counter.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the upstream names its events (Anthropic and the Responses API
    /// do): the names those send are kept as static texts, not read and allocated anew for each
    /// event.
    pub event: Option<Cow<'static, str>>,
    /// The `data:` lines joined by `\n`.
    pub data: Bytes,
    /// The event's bytes as they came, when they are the form [`SseEvent::framed`] writes (an
    /// `event: <name>` line or none, one `data: ` line, a blank line, each line ended by `\n`):
    /// most providers' events are, and go on as they came, not framed anew.
    pub raw: Option<Bytes>,
}

impl SseEvent {
    /// An event of `data`, named `event` or not, not read off the wire.
    pub fn new(event: Option<String>, data: Bytes) -> Self {
        SseEvent {
            event: event.map(Cow::Owned),
            data,
            raw: None,
        }
    }

    /// The event framed with the name `name` (none: a bare `data:` event): the bytes it came
    /// in when they are just that, else written anew ([`encode_event`], [`encode_data`]).
    pub fn framed(&self, name: Option<&str>) -> Bytes {
        match &self.raw {
            Some(raw) if self.event.as_deref() == name => raw.clone(),
            _ => frame(name, &self.data),
        }
    }
}

/// Incremental decoder: push bytes as they arrive, pull complete events.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buf: BytesMut,
    /// Bytes pushed as they came ([`SseDecoder::push_bytes`]) and not yet copied into `buf`,
    /// which is then empty: whole events are split off them without a copy.
    held: Bytes,
    event: Option<Cow<'static, str>>,
    /// The event's first `data:` value, as it came (most events have one: it is handed on
    /// without a copy).
    first: Option<Bytes>,
    /// The event's data joined, once it has a second `data:` line.
    data: BytesMut,
    /// `buf[..scanned]` holds no line end: a long event arriving in pieces is scanned once.
    scanned: usize,
    /// A line or an event outgrew its bound: everything from then on is ignored.
    overflowed: bool,
    /// The error event for the overflow is still to be returned.
    overflow_due: bool,
    /// Counts overflows (`switchyard_limits_total{limit="sse_event"}`).
    overflows: Option<Arc<AtomicU64>>,
}

/// The longest line (4 MiB): a stream without a line break this long is not SSE.
pub const MAX_LINE: usize = 4 << 20;
/// The most data one event may join from its `data:` lines (4 MiB): no chunk of any provider
/// comes near it.
pub const MAX_EVENT: usize = 4 << 20;

/// The data of the error event an overflow ends the decoding with: an OpenAI in-band error
/// that Anthropic's and Gemini's readers take for theirs too.
pub const OVERFLOW: &[u8] = br#"{"type":"error","error":{"type":"upstream_error","message":"the upstream sent a stream line or event over 4 MiB"}}"#;

impl SseDecoder {
    /// A decoder with no buffered bytes.
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder that adds one to `overflows` when a line or an event outgrows its bound.
    pub fn counting(overflows: Arc<AtomicU64>) -> Self {
        SseDecoder {
            overflows: Some(overflows),
            ..Self::default()
        }
    }

    /// Whether a line or an event outgrew its bound (the decoding ended there).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Append bytes received from upstream.
    pub fn push(&mut self, chunk: &[u8]) {
        if !self.overflowed {
            self.unhold();
            self.buf.extend_from_slice(chunk);
        }
    }

    /// Append bytes received from upstream, kept as they are while nothing else is held: the
    /// whole events they start with are then split off them, not copied (an upstream read
    /// mostly ends at an event's end).
    pub fn push_bytes(&mut self, chunk: Bytes) {
        if self.overflowed {
            return;
        }
        if self.buf.is_empty() && self.held.is_empty() {
            self.held = chunk;
        } else {
            self.unhold();
            self.buf.extend_from_slice(&chunk);
        }
    }

    /// What is held as it came, moved into `buf` (for the line loop, or to be added to).
    fn unhold(&mut self) {
        if !self.held.is_empty() {
            self.buf.extend_from_slice(&std::mem::take(&mut self.held));
        }
    }

    /// Stop decoding: drop what is held, and return the error event next.
    fn overflow(&mut self) {
        self.overflowed = true;
        self.overflow_due = true;
        self.buf = BytesMut::new();
        self.held = Bytes::new();
        self.data = BytesMut::new();
        self.first = None;
        self.event = None;
        if let Some(counter) = &self.overflows {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The next complete event, if the buffer holds one.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        if self.overflowed {
            return std::mem::take(&mut self.overflow_due)
                .then(|| SseEvent::new(Some("error".to_owned()), Bytes::from_static(OVERFLOW)));
        }
        if let Some(event) = self.whole_event() {
            return Some(event);
        }
        self.unhold();
        loop {
            let from = self.scanned.min(self.buf.len());
            // memchr: a data line of a few hundred bytes is looked through a word at a time,
            // not a byte (byte by byte was 16% of a streamed answer's instructions).
            let end = memchr::memchr2(b'\n', b'\r', &self.buf[from..]).map(|i| from + i);
            let Some(end) = end else {
                self.scanned = self.buf.len();
                if self.buf.len() > MAX_LINE {
                    self.overflow();
                    return self.next_event();
                }
                return None;
            };
            if end > MAX_LINE {
                self.overflow();
                return self.next_event();
            }
            // A CR at the very end may be the first half of a CRLF: wait for the next byte.
            if self.buf[end] == b'\r' && end + 1 == self.buf.len() {
                self.scanned = end;
                return None;
            }
            self.scanned = 0;
            let line = self.buf.split_to(end).freeze();
            let skip = if self.buf.starts_with(b"\r\n") { 2 } else { 1 };
            self.buf.advance(skip);
            if line.is_empty() {
                if self.has_data() {
                    let data = match self.first.take() {
                        Some(first) => first,
                        None => self.data.split().freeze(),
                    };
                    return Some(SseEvent {
                        event: self.event.take(),
                        data,
                        raw: None,
                    });
                }
                self.event = None;
                continue;
            }
            if !self.field(&line) {
                self.overflow();
                return self.next_event();
            }
        }
    }

    /// The next event when the buffer starts with a whole one in the form
    /// [`SseEvent::framed`] writes (most providers' events are): taken in one piece, its
    /// data a slice of it and the whole kept as [`SseEvent::raw`], instead of line by line.
    /// `None` for anything else (other fields, comments, CR line ends, data over several
    /// lines, an event not whole yet, an event under way), which the line loop reads. Read
    /// from what is held as it came when there is some (`buf` is then empty).
    fn whole_event(&mut self) -> Option<SseEvent> {
        if self.scanned != 0 || self.has_data() || self.event.is_some() {
            return None;
        }
        let held = !self.held.is_empty();
        let buf = if held { &self.held[..] } else { &self.buf[..] };
        let (name, at) = match buf.strip_prefix(b"event: ") {
            Some(rest) => {
                let end = 7 + memchr::memchr2(b'\n', b'\r', rest)?;
                if buf[end] != b'\n' || end > MAX_LINE {
                    return None;
                }
                (Some(7..end), end + 1)
            }
            None => (None, 0),
        };
        let rest = buf[at..].strip_prefix(b"data: ")?;
        let end = at + 6 + memchr::memchr2(b'\n', b'\r', rest)?;
        let whole = buf[end] == b'\n' && buf.get(end + 1) == Some(&b'\n');
        // Over a bound: the line loop ends the decoding.
        if !whole || end - at > MAX_LINE || end - at - 6 + 1 > MAX_EVENT {
            return None;
        }
        // A name not UTF-8 is read lossily by the line loop, and written so.
        let event = match name {
            Some(name) => {
                let name = &buf[name];
                Some(match known_name(name) {
                    Some(known) => Cow::Borrowed(known),
                    None => Cow::Owned(std::str::from_utf8(name).ok()?.to_owned()),
                })
            }
            None => None,
        };
        let raw = if held {
            self.held.split_to(end + 2)
        } else {
            self.buf.split_to(end + 2).freeze()
        };
        Some(SseEvent {
            event,
            data: raw.slice(at + 6..end),
            raw: Some(raw),
        })
    }

    /// Whether the event has had a `data:` line (its first is held, or two or more joined).
    fn has_data(&self) -> bool {
        self.first.is_some() || !self.data.is_empty()
    }

    /// Take one field line; false when the event's data would outgrow [`MAX_EVENT`].
    fn field(&mut self, line: &Bytes) -> bool {
        if line[0] == b':' {
            return true; // comment / keep-alive
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (&line[..], &b""[..]),
        };
        match name {
            b"data" => {
                let held = self.first.as_ref().map_or(0, Bytes::len) + self.data.len();
                if held + value.len() + 1 > MAX_EVENT {
                    return false;
                }
                if !self.has_data() {
                    self.first = Some(line.slice_ref(value));
                    return true;
                }
                if let Some(first) = self.first.take() {
                    self.data.extend_from_slice(&first);
                }
                self.data.extend_from_slice(b"\n");
                self.data.extend_from_slice(value);
            }
            b"event" => {
                self.event = Some(match known_name(value) {
                    Some(known) => Cow::Borrowed(known),
                    None => Cow::Owned(String::from_utf8_lossy(value).into_owned()),
                });
            }
            _ => {} // id, retry and unknown fields do not matter to a relay
        }
        true
    }
}

/// `name` as one of the event names Anthropic's and the Responses API's streams send, if it is.
fn known_name(name: &[u8]) -> Option<&'static str> {
    Some(match name {
        b"message_start" => "message_start",
        b"content_block_start" => "content_block_start",
        b"content_block_delta" => "content_block_delta",
        b"content_block_stop" => "content_block_stop",
        b"message_delta" => "message_delta",
        b"message_stop" => "message_stop",
        b"ping" => "ping",
        b"error" => "error",
        b"response.created" => "response.created",
        b"response.in_progress" => "response.in_progress",
        b"response.queued" => "response.queued",
        b"response.output_item.added" => "response.output_item.added",
        b"response.content_part.added" => "response.content_part.added",
        b"response.output_text.delta" => "response.output_text.delta",
        b"response.output_text.done" => "response.output_text.done",
        b"response.content_part.done" => "response.content_part.done",
        b"response.output_item.done" => "response.output_item.done",
        b"response.function_call_arguments.delta" => "response.function_call_arguments.delta",
        b"response.function_call_arguments.done" => "response.function_call_arguments.done",
        b"response.reasoning_summary_text.delta" => "response.reasoning_summary_text.delta",
        b"response.completed" => "response.completed",
        b"response.incomplete" => "response.incomplete",
        b"response.failed" => "response.failed",
        _ => return None,
    })
}

/// Appends one event (`event: <name>` when named, then `data: <json>`, then the blank line
/// that ends it) and returns true; a value that fails to serialize appends nothing and
/// returns false.
///
/// A raw line break in serialized JSON can only be whitespace between tokens (strings escape
/// theirs), yet one there, as a raw value passed through as it came may hold, would end the
/// `data:` line and split the JSON over lines a client reads as separate fields: each becomes
/// a space.
pub fn write_json(out: &mut Vec<u8>, name: Option<&str>, value: &impl serde::Serialize) -> bool {
    let start = out.len();
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    let json = out.len();
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(start);
        return false;
    }
    let mut at = json;
    while let Some(i) = memchr::memchr2(b'\n', b'\r', &out[at..]) {
        out[at + i] = b' ';
        at += i + 1;
    }
    out.extend_from_slice(b"\n\n");
    true
}

/// Frame one `data:` event.
pub fn encode_data(data: &[u8]) -> Bytes {
    frame(None, data)
}

/// Frame one named event (`event: <name>` then its `data:` line), as Anthropic streams are.
pub fn encode_event(name: &str, data: &[u8]) -> Bytes {
    frame(Some(name), data)
}

/// An event's bytes: data holding line breaks (a decoded event whose upstream sent it over
/// several `data:` lines, which the decoder joined by `\n`) goes out as as many `data:`
/// lines, so a client reads back the same data.
fn frame(name: Option<&str>, data: &[u8]) -> Bytes {
    let name_len = name.map_or(0, |n| n.len() + 8);
    let mut out = BytesMut::with_capacity(name_len + data.len() + 8);
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\n");
    }
    let mut rest = data;
    loop {
        out.extend_from_slice(b"data: ");
        let Some(end) = memchr::memchr2(b'\n', b'\r', rest) else {
            out.extend_from_slice(rest);
            break;
        };
        out.extend_from_slice(&rest[..end]);
        out.extend_from_slice(b"\n");
        let skip = if rest[end..].starts_with(b"\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + skip..];
    }
    out.extend_from_slice(b"\n\n");
    out.freeze()
}

/// The payload of an event framed by [`encode_data`].
pub fn decode_data(framed: &Bytes) -> Bytes {
    let start = if framed.starts_with(b"data: ") { 6 } else { 0 };
    let end = framed.len() - if framed.ends_with(b"\n\n") { 2 } else { 0 };
    let data = framed.slice(start.min(end)..end);
    if memchr::memchr(b'\n', &data).is_none() {
        return data;
    }
    // Data framed over several lines: the lines joined by `\n`, as the decoder joins them.
    let mut lines = data.split(|&b| b == b'\n');
    let mut joined = lines.next().unwrap_or_default().to_vec();
    for line in lines {
        joined.push(b'\n');
        joined.extend_from_slice(line.strip_prefix(b"data: ").unwrap_or(line));
    }
    Bytes::from(joined)
}

/// The terminator of an OpenAI stream.
pub const DONE: &[u8] = b"[DONE]";

#[cfg(test)]
mod tests;
