//! A Bedrock stream (AWS event-stream frames) as Anthropic's SSE events, as the frames arrive.
//!
//! Each `chunk` event's payload is `{"bytes": "<base64>"}`, the base64 of one Anthropic
//! stream event's JSON: it becomes `event: <its type>\ndata: <it>\n\n`. An `exception` frame
//! (throttling, validation, a model's error mid-stream) or an `error` frame becomes Anthropic's
//! `event: error`, so it is read as an in-band error: failed over before the commit point,
//! continued or reported after it. A frame whose checksums do not hold, or that claims more
//! than [`MAX_FRAME`] bytes, ends the stream with an error event too.

use aws_smithy_eventstream::frame::read_message_from;
use aws_smithy_types::event_stream::{HeaderValue, Message};
use base64::Engine;
use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use http::StatusCode;

use crate::provider::ByteStream;

/// The largest frame read: a 16 MiB payload and its headers (AWS's own limits).
const MAX_FRAME: usize = 16 * 1024 * 1024 + 128 * 1024 + 16;

/// The Anthropic SSE events of a Bedrock stream.
pub fn sse(upstream: ByteStream) -> ByteStream {
    let state = (upstream, BytesMut::new(), false);
    futures_util::stream::unfold(state, |(mut upstream, mut buf, mut done)| async move {
        loop {
            if done {
                return None;
            }
            match next_frame(&mut buf) {
                Ok(Some(message)) => {
                    let (out, last) = event(&message);
                    done = last;
                    if let Some(out) = out {
                        return Some((Ok(out), (upstream, buf, done)));
                    }
                    continue;
                }
                Ok(None) => {}
                Err(why) => {
                    let out = error_event("api_error", &format!("malformed Bedrock stream: {why}"));
                    return Some((Ok(out), (upstream, buf, true)));
                }
            }
            match upstream.next().await {
                Some(Ok(bytes)) => buf.extend_from_slice(&bytes),
                // The connection broke (or closed mid-frame): the stream ends as it would.
                Some(Err(e)) => return Some((Err(e), (upstream, buf, true))),
                None => return None,
            }
        }
    })
    .boxed()
}

/// The next whole frame in `buf`, checked; `None` until one has arrived.
fn next_frame(buf: &mut BytesMut) -> Result<Option<Message>, String> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let total = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if !(16..=MAX_FRAME).contains(&total) {
        return Err(format!("a frame of {total} bytes"));
    }
    if buf.len() < total {
        return Ok(None);
    }
    let mut frame = buf.split_to(total).freeze();
    let message = read_message_from(&mut frame).map_err(|e| e.to_string())?;
    if frame.has_remaining() {
        return Err("trailing bytes in a frame".into());
    }
    Ok(Some(message))
}

/// The SSE event for one frame (none for one that carries nothing to pass on), and whether it
/// ends the stream.
fn event(message: &Message) -> (Option<Bytes>, bool) {
    let header = |name: &str| {
        message.headers().iter().find_map(|h| match h.value() {
            HeaderValue::String(s) if h.name().as_str() == name => Some(s.as_str().to_owned()),
            _ => None,
        })
    };
    match header(":message-type").as_deref() {
        Some("event") => {}
        Some("exception") => {
            let name = header(":exception-type").unwrap_or_default();
            let text = exception_message(message.payload());
            let (_, kind) =
                super::classify_exception(&name, StatusCode::INTERNAL_SERVER_ERROR, &text);
            return (Some(error_event(kind, &format!("{name}: {text}"))), true);
        }
        _ => {
            let code = header(":error-code").unwrap_or_else(|| "error".into());
            let text = header(":error-message").unwrap_or_default();
            return (
                Some(error_event("api_error", &format!("{code}: {text}"))),
                true,
            );
        }
    }
    if header(":event-type").as_deref() != Some("chunk") {
        return (None, false);
    }
    #[derive(serde::Deserialize)]
    struct Chunk {
        bytes: String,
    }
    let decoded = serde_json::from_slice::<Chunk>(message.payload())
        .ok()
        .and_then(|c| {
            base64::engine::general_purpose::STANDARD
                .decode(c.bytes)
                .ok()
        });
    let Some(data) = decoded else {
        return (
            Some(error_event(
                "api_error",
                "a Bedrock chunk without its bytes",
            )),
            true,
        );
    };
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
    }
    let kind = serde_json::from_slice::<Typed<'_>>(&data)
        .map(|t| t.kind.into_owned())
        .unwrap_or_else(|_| "message".into());
    let mut out = Vec::with_capacity(data.len() + kind.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // One event's JSON never holds a raw newline (JSON escapes them in strings), so it is one
    // `data:` line.
    out.extend(data.iter().filter(|&&b| b != b'\n' && b != b'\r'));
    out.extend_from_slice(b"\n\n");
    (Some(Bytes::from(out)), false)
}

fn exception_message(payload: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Wire {
        #[serde(default, alias = "Message")]
        message: Option<String>,
    }
    serde_json::from_slice::<Wire>(payload)
        .ok()
        .and_then(|w| w.message)
        .unwrap_or_else(|| {
            String::from_utf8_lossy(payload)
                .chars()
                .take(1000)
                .collect()
        })
}

/// Anthropic's `event: error` with an error of `kind`.
fn error_event(kind: &str, message: &str) -> Bytes {
    let data = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
    Bytes::from(format!("event: error\ndata: {data}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0))
            .collect()
    }

    /// Frames built by hand with zlib's CRC-32 (independently of the crate), then read here.
    const MESSAGE_STOP: &str = "000000870000004b87ea2bf30b3a6576656e742d747970650700056368756e6b0d3a636f6e74656e742d747970650700
        106170706c69636174696f6e2f6a736f6e0d3a6d6573736167652d747970650700056576656e747b226279746573223a
        2265794a306558426c496a6f696257567a6332466e5a56397a64473977496e303d227dba48ab22";
    const THROTTLED: &str = "000000b2000000613590d5d30f3a657863657074696f6e2d747970650700137468726f74746c696e67457863657074696f
        6e0d3a636f6e74656e742d747970650700106170706c69636174696f6e2f6a736f6e0d3a6d6573736167652d74797065
        070009657863657074696f6e7b226d657373616765223a22546f6f206d616e792072657175657374732c20706c656173
        652077616974206265666f726520747279696e6720616761696e2e227de8ffb26a";

    async fn run(chunks: Vec<Vec<u8>>) -> String {
        let upstream = futures_util::stream::iter(chunks.into_iter().map(|c| Ok(Bytes::from(c))));
        let out: Vec<_> = sse(upstream.boxed()).collect().await;
        out.into_iter()
            .map(|r| {
                String::from_utf8(r.map(|b| b.to_vec()).unwrap_or_default()).unwrap_or_default()
            })
            .collect()
    }

    #[tokio::test]
    async fn a_chunk_becomes_its_anthropic_event_even_split_byte_by_byte() {
        let frame = hex(MESSAGE_STOP);
        let whole = run(vec![frame.clone()]).await;
        assert_eq!(
            whole,
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
        let split = run(frame.iter().map(|&b| vec![b]).collect()).await;
        assert_eq!(split, whole);
    }

    #[tokio::test]
    async fn an_exception_frame_is_an_in_band_error_and_ends_the_stream() {
        let mut both = hex(THROTTLED);
        both.extend(hex(MESSAGE_STOP));
        let out = run(vec![both]).await;
        assert!(out.starts_with("event: error\ndata: "), "{out}");
        assert!(out.contains("\"rate_limit_error\""), "{out}");
        assert!(
            out.contains("throttlingException: Too many requests"),
            "{out}"
        );
        assert!(!out.contains("message_stop"), "nothing after it: {out}");
    }

    #[tokio::test]
    async fn a_bad_checksum_or_an_oversized_frame_is_an_error_not_a_hang() {
        let mut bad = hex(MESSAGE_STOP);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let out = run(vec![bad]).await;
        assert!(out.contains("malformed Bedrock stream"), "{out}");
        let huge = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        let out = run(vec![huge]).await;
        assert!(out.contains("malformed Bedrock stream"), "{out}");
    }
}
