//! Any bytes as a Bedrock stream, read the way the gateway reads one: AWS event-stream frames
//! made into Anthropic's SSE events (`provider::bedrock::sse`), then framed by the SSE decoder
//! and read by the Anthropic stream decoder and the chunk tracker.
//!
//! The first byte says how. Its low bit: the rest is raw frames (lengths and checksums as they
//! come), or an SSE transcript (the seeds: Anthropic streams) whose events are framed here as
//! Bedrock frames them (each event's JSON in base64 in a `chunk` event; `event: error` as an
//! `exception`), so the fuzzer gets past the checksums to what the frames carry. The other
//! bits: how the bytes are split into reads.
#![no_main]

use std::task::{Context, Poll, Waker};

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt as _;
use libfuzzer_sys::fuzz_target;
use switchyard::canonical::Dialect;
use switchyard::provider::{bedrock, ByteStream};
use switchyard::wire::chunks::ChunkTracker;
use switchyard::wire::sse::SseDecoder;

/// The events of a transcript: the bytes between blank lines.
fn blocks(mut rest: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match rest.windows(2).position(|w| w == b"\n\n") {
            Some(end) => {
                let (block, tail) = rest.split_at(end);
                rest = &tail[2..];
                Some(block)
            }
            None => Some(std::mem::take(&mut rest)),
        }
    })
}

/// An SSE transcript as Bedrock's frames.
fn framed(transcript: &[u8]) -> Vec<u8> {
    let string = |s: &str| HeaderValue::String(s.to_owned().into());
    let mut out = Vec::new();
    for block in blocks(transcript) {
        let mut name: &[u8] = b"";
        let mut data = Vec::new();
        for line in block.split(|&b| b == b'\n') {
            if let Some(n) = line.strip_prefix(b"event: ") {
                name = n;
            } else if let Some(d) = line.strip_prefix(b"data: ") {
                data.extend_from_slice(d);
            }
        }
        let message = if name == b"error" {
            Message::new_from_parts(
                vec![
                    Header::new(":message-type", string("exception")),
                    Header::new(":exception-type", string("throttlingException")),
                ],
                Bytes::from(data),
            )
        } else {
            let encoded = base64::engine::general_purpose::STANDARD.encode(&data);
            Message::new_from_parts(
                vec![
                    Header::new(":message-type", string("event")),
                    Header::new(":event-type", string("chunk")),
                ],
                Bytes::from(format!(r#"{{"bytes":"{encoded}"}}"#)),
            )
        };
        // A frame too large to write is left out.
        let _ = write_message_to(&message, &mut out);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let frames = if pick & 1 == 0 {
        rest.to_vec()
    } else {
        framed(rest)
    };
    let step = usize::from(pick >> 1).max(1);
    let reads: Vec<Bytes> = frames.chunks(step).map(Bytes::copy_from_slice).collect();
    let upstream: ByteStream = futures_util::stream::iter(reads.into_iter().map(Ok)).boxed();
    let mut events = bedrock::sse(upstream);
    let mut sse = SseDecoder::new();
    let mut decoder = Dialect::Anthropic.decoder();
    let mut tracker = ChunkTracker::for_dialect(Dialect::Anthropic, pick & 2 == 0);
    let mut decoded = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match events.poll_next_unpin(&mut cx) {
            Poll::Ready(Some(Ok(bytes))) => {
                sse.push(&bytes);
                while let Some(ev) = sse.next_event() {
                    let _ = tracker.on_event(&ev);
                    decoded.clear();
                    let _ = decoder.decode(ev.event.as_deref(), &ev.data, &mut decoded);
                }
            }
            Poll::Ready(Some(Err(e))) => panic!("the upstream never fails here: {e}"),
            Poll::Ready(None) => break,
            Poll::Pending => panic!("waited on an upstream that is always ready"),
        }
    }
    let _ = tracker.error_tail("fuzz");
    let _ = decoder.is_done();
});
