//! A server-sent events decoder for upstream streams (the WHATWG event-stream rules we need:
//! `data:` lines joined by `\n`, `event:` names, comments, CR/LF/CRLF line ends) and the encoder
//! for what we send on.

use bytes::{Buf, Bytes, BytesMut};

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the upstream names its events (Anthropic does).
    pub event: Option<String>,
    /// The `data:` lines joined by `\n`.
    pub data: Bytes,
}

/// Incremental decoder: push bytes as they arrive, pull complete events.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buf: BytesMut,
    event: Option<String>,
    data: BytesMut,
    has_data: bool,
    /// `buf[..scanned]` holds no line end: a long event arriving in pieces is scanned once.
    scanned: usize,
}

/// Streams longer than this without a line break are malformed; the decoder drops them.
const MAX_LINE: usize = 4 << 20;

impl SseDecoder {
    /// A decoder with no buffered bytes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append bytes received from upstream.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, if the buffer holds one.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            let from = self.scanned.min(self.buf.len());
            let end = self.buf[from..]
                .iter()
                .position(|&b| b == b'\n' || b == b'\r')
                .map(|i| from + i);
            let Some(end) = end else {
                self.scanned = self.buf.len();
                if self.buf.len() > MAX_LINE {
                    self.buf.clear();
                    self.scanned = 0;
                }
                return None;
            };
            // A CR at the very end may be the first half of a CRLF: wait for the next byte.
            if self.buf[end] == b'\r' && end + 1 == self.buf.len() {
                self.scanned = end;
                return None;
            }
            self.scanned = 0;
            let line = self.buf.split_to(end);
            let skip = if self.buf.starts_with(b"\r\n") { 2 } else { 1 };
            self.buf.advance(skip);
            if line.is_empty() {
                if self.has_data {
                    self.has_data = false;
                    return Some(SseEvent {
                        event: self.event.take(),
                        data: self.data.split().freeze(),
                    });
                }
                self.event = None;
                continue;
            }
            self.field(&line);
        }
    }

    fn field(&mut self, line: &[u8]) {
        if line[0] == b':' {
            return; // comment / keep-alive
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.data.extend_from_slice(b"\n");
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {} // id, retry and unknown fields do not matter to a relay
        }
    }
}

/// Frame one `data:` event (JSON payloads hold no raw newlines).
pub fn encode_data(data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    out.freeze()
}

/// Frame one named event (`event: <name>` then its `data:` line), as Anthropic streams are.
pub fn encode_event(name: &str, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(name.len() + data.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    out.freeze()
}

/// The payload of an event framed by [`encode_data`].
pub fn decode_data(framed: &Bytes) -> Bytes {
    let start = if framed.starts_with(b"data: ") { 6 } else { 0 };
    let end = framed.len() - if framed.ends_with(b"\n\n") { 2 } else { 0 };
    framed.slice(start.min(end)..end)
}

/// The terminator of an OpenAI stream.
pub const DONE: &[u8] = b"[DONE]";

#[cfg(test)]
mod tests {
    use super::*;

    fn all(dec: &mut SseDecoder) -> Vec<SseEvent> {
        std::iter::from_fn(|| dec.next_event()).collect()
    }

    #[test]
    fn decodes_split_events_and_line_endings() {
        let mut dec = SseDecoder::new();
        dec.push(b"data: {\"a\":1}\n\nda");
        assert_eq!(all(&mut dec).len(), 1);
        dec.push(b"ta: x\r");
        assert!(all(&mut dec).is_empty());
        dec.push(b"\n\r\n: keep-alive\n\nevent: ping\ndata: 1\ndata: 2\n\n");
        let evs = all(&mut dec);
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].data, Bytes::from_static(b"x"));
        assert_eq!(evs[0].event, None);
        assert_eq!(evs[1].event.as_deref(), Some("ping"));
        assert_eq!(evs[1].data, Bytes::from_static(b"1\n2"));
    }

    #[test]
    fn a_blank_line_without_data_dispatches_nothing() {
        let mut dec = SseDecoder::new();
        dec.push(b"event: x\n\n\n\ndata:y\n\n");
        let evs = all(&mut dec);
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].event, None);
        assert_eq!(evs[0].data, Bytes::from_static(b"y"));
    }

    #[test]
    fn encodes_data_events() {
        assert_eq!(&encode_data(b"[DONE]")[..], b"data: [DONE]\n\n");
        assert_eq!(&decode_data(&encode_data(b"{}"))[..], b"{}");
        assert_eq!(
            &encode_event("ping", b"{}")[..],
            b"event: ping\ndata: {}\n\n"
        );
    }
}
