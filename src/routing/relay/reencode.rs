//! A continuation's chunks written on in the dialect of the stream they continue.

use bytes::Bytes;

use crate::canonical::{
    self, anthropic, Dialect, ErrorClass, StreamDecoder, StreamEncoder, StreamEvent,
};
use crate::wire::chunks::ChunkTracker;
use crate::wire::sse::decode_data;

/// A continuation's chunks written in the dialect of the stream they continue.
pub(super) struct Reencode {
    decoder: StreamDecoder,
    encoder: StreamEncoder,
}

impl Reencode {
    /// For an Anthropic stream the client has up to `tracker`'s blocks.
    pub(super) fn anthropic(tracker: &ChunkTracker) -> Reencode {
        let (next_block, open_text) = tracker.blocks();
        Reencode {
            decoder: Dialect::OpenAi.decoder(),
            encoder: StreamEncoder::Anthropic(anthropic::Encoder::resuming(next_block, open_text)),
        }
    }

    /// For a Responses stream the client has up to `tracker`'s events.
    pub(super) fn responses(tracker: &ChunkTracker) -> Reencode {
        Reencode {
            decoder: Dialect::OpenAi.decoder(),
            encoder: StreamEncoder::Responses(canonical::responses::Encoder::resuming(
                tracker.responses_resume(),
            )),
        }
    }

    /// For a stream passed through in the client's dialect (`tracker`'s).
    pub(super) fn resuming(tracker: &ChunkTracker) -> Reencode {
        match tracker.dialect() {
            Dialect::Responses => Reencode::responses(tracker),
            _ => Reencode::anthropic(tracker),
        }
    }

    /// One framed chunk of the inner form, in the stream's dialect (possibly nothing yet).
    pub(super) fn chunk(&mut self, framed: &Bytes) -> Option<Bytes> {
        let mut events = Vec::new();
        // A chunk that cannot be read is skipped; the stream goes on.
        let _ = self.decoder.decode(None, &decode_data(framed), &mut events);
        let mut out = Vec::new();
        for ev in &events {
            self.encoder.encode(ev, &mut out);
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    pub(super) fn end(&mut self) -> Bytes {
        let mut out = Vec::new();
        self.encoder.finish(&mut out);
        Bytes::from(out)
    }

    pub(super) fn error(&mut self, message: &str) -> Bytes {
        let mut out = Vec::new();
        let event = StreamEvent::Error {
            message: message.to_owned(),
            kind: ErrorClass::Other,
        };
        self.encoder.encode(&event, &mut out);
        Bytes::from(out)
    }
}
