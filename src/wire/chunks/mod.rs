//! Reading stream events just enough to know where a stream stands: its commit point (first
//! content), its finish, its usage, in-band errors, the text the client has seen (for mid-stream
//! continuation) and whether something a continuation cannot resume (a tool call, reasoning) is
//! under way. OpenAI chunks are read by `openai.rs` (one chunk) and here (the stream); an
//! Anthropic or Responses stream passed through to a client of its dialect by `anthropic.rs`
//! and `responses.rs`. Either way the events go on as they came.
//! `routing::attempt` reads a stream with it up to the commit point, `routing::relay` after it.

mod anthropic;
mod fields;
mod openai;
mod responses;
mod usage;

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use serde::Deserialize;

use super::sse::{encode_data, SseEvent, DONE};
use crate::canonical::Dialect;
use crate::wire::scan;

#[cfg(fuzzing)]
pub use anthropic::fuzz_event_read as fuzz_anthropic_event_read;
pub(super) use anthropic::UsageView as AnthropicUsage;
pub(super) use fields::{scanned, Scanned};
#[cfg(fuzzing)]
pub use openai::fuzz_chunk_read;
use openai::{ChunkRead, ChunkShape};
#[cfg(fuzzing)]
pub use responses::fuzz_event_read as fuzz_responses_event_read;
pub use responses::ResponsesProgress;
pub(super) use responses::UsageView as ResponsesUsage;
pub use usage::Usage;
pub(in crate::wire) use usage::{CountSpans, USAGE_KEYS};

/// What one upstream event means for the relay.
#[derive(Debug)]
pub enum ChunkAction {
    /// Send these bytes on.
    Forward(Bytes),
    /// Nothing to send (an unparseable chunk, or a usage chunk the client did not ask for).
    Skip,
    /// `[DONE]`.
    Done,
    /// The upstream reported an error inside the stream.
    Error(String),
}

/// Identity of the stream, copied into chunks we write ourselves.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
pub struct ChunkMeta {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    created: Option<u64>,
}

/// Reads a stream's events just enough to know where the stream stands.
#[derive(Debug)]
pub struct ChunkTracker {
    /// The dialect of the events: OpenAI chunks, or an Anthropic stream passed through.
    dialect: Dialect,
    client_wants_usage: bool,
    /// Content (text, a tool call, a refusal or a finish) has been seen: the commit point.
    pub committed: bool,
    /// A `finish_reason` has been seen.
    pub finished: bool,
    /// The usage chunk has been seen.
    pub usage_seen: bool,
    /// Chunks that could not be parsed and were skipped.
    pub malformed: u32,
    /// Content chunks seen.
    pub content_chunks: u32,
    /// Token counts from the usage chunk.
    pub usage: Option<Usage>,
    /// A tool call has started streaming (a continuation could not honestly resume it).
    pub tool_calls_seen: bool,
    /// Reasoning (Anthropic `thinking`, `redacted_thinking`) has streamed: signed by its vendor,
    /// it cannot be carried to a continuation.
    pub reasoning_seen: bool,
    /// Anthropic: the open content block (its index, whether it is text) and the next index.
    open_block: Option<(u32, bool)>,
    next_block: u32,
    /// The text content of the last event, when `capture_text` is set (one buffer for every
    /// event: emptied as each is read).
    last_text: String,
    capture_text: bool,
    /// The stream's identity: an Anthropic or Responses stream's, as its first event gave it.
    meta: Option<ChunkMeta>,
    /// An OpenAI stream's first chunk read, whose identity ([`ChunkMeta::read`]) is read only
    /// when it is needed (an error tail, a continuation), and then once (`identity`): reading
    /// it from every stream's first chunk cost two strings and a box before the first chunk
    /// went out.
    first: Option<Bytes>,
    identity: OnceLock<Option<Box<ChunkMeta>>>,
    /// Responses API: how far the stream got (boxed: other dialects never make one).
    responses: Option<Box<ResponsesProgress>>,
    /// The shape of the stream's most frequent events (OpenAI content chunks, Anthropic block
    /// deltas, Responses text deltas), from one read whole (or its target's last stream's);
    /// later events of that shape are read by it.
    shape: Option<Arc<Shaped>>,
    /// Shapes made: a stream whose chunks keep changing shape stops making them at
    /// [`MAX_SHAPES`] (each costs a second reading of its chunk).
    shapes: u8,
    /// Where the stream's target keeps the shape its streams' events were last read by: this
    /// stream started with it, and offers it the first shape it makes ([`ChunkTracker::learning`]).
    learned: Option<Arc<LearnedShapes>>,
    /// OpenAI chunks read whole (not by a shape).
    #[cfg(test)]
    wholes: u32,
}

/// The shape a target's streams' events were last read by, for each dialect a tracker reads
/// (OpenAI chunks, Anthropic events, Responses API events), and the shape of its OpenAI
/// streams' first chunks. A target's streams are written alike, so the next stream starts with
/// the shape the last one made and reads its first content by it (and its first chunk by the
/// opening one), where it would read them whole and make the shape again from the content after
/// them. A shape reads only what it fits, as the scanner would read it, so one that does not
/// fit a stream costs a failed comparison and the stream makes its own (which it then offers
/// here). The target's whole OpenAI answers are read likewise (`answer`).
#[derive(Debug, Default)]
pub struct LearnedShapes {
    by_dialect: [ArcSwapOption<Shaped>; 3],
    /// The shape of an OpenAI stream's first chunk ([`ChunkTracker::open`]).
    opening: ArcSwapOption<Shaped>,
    /// The shapes of an OpenAI stream's last chunks ([`ChunkTracker::close`]): its finish
    /// (a chunk with choices) and its usage (one without).
    closing: [ArcSwapOption<ChunkShape>; 2],
    /// The shape of the target's last whole OpenAI answer with a usage, the spans of its
    /// counts kept ([`crate::wire::transcode::openai_usage`]).
    pub(in crate::wire) answer: ArcSwapOption<AnswerShape>,
}

/// The shape of a whole OpenAI answer, the spans of its usage's four counts kept.
pub(in crate::wire) type AnswerShape = scan::Shape<4>;

impl LearnedShapes {
    /// Whether a shape of `dialect`'s events is kept (for an OpenAI stream, its first chunk's
    /// too).
    pub fn holds(&self, dialect: Dialect) -> bool {
        let opening = dialect != Dialect::OpenAi || self.opening.load().is_some();
        opening && self.slot(dialect).load().is_some()
    }

    /// Whether the shape of a whole OpenAI answer is kept.
    pub fn holds_answer(&self) -> bool {
        self.answer.load().is_some()
    }

    fn slot(&self, dialect: Dialect) -> &ArcSwapOption<Shaped> {
        &self.by_dialect[match dialect {
            Dialect::Anthropic => 1,
            Dialect::Responses => 2,
            Dialect::OpenAi | Dialect::Gemini => 0,
        }]
    }
}

/// What a stream's most frequent events are read by ([`crate::wire::scan::Shape`]).
#[derive(Debug)]
enum Shaped {
    /// OpenAI content chunks.
    Chunk(ChunkShape),
    /// Responses API text deltas.
    TextDelta(responses::TextDeltaShape),
    /// Anthropic block deltas.
    BlockDelta(anthropic::BlockDeltaShape),
}

/// The most shapes one stream makes.
const MAX_SHAPES: u8 = 4;

impl ChunkTracker {
    /// A tracker for one OpenAI stream; `client_wants_usage` keeps the usage chunk in the output.
    pub fn new(client_wants_usage: bool) -> Self {
        Self::for_dialect(Dialect::OpenAi, client_wants_usage)
    }

    /// A tracker for a stream of `dialect` (OpenAI chunks, or Anthropic events passed through).
    pub fn for_dialect(dialect: Dialect, client_wants_usage: bool) -> Self {
        ChunkTracker {
            dialect,
            client_wants_usage,
            committed: false,
            finished: false,
            usage_seen: false,
            malformed: 0,
            content_chunks: 0,
            usage: None,
            tool_calls_seen: false,
            reasoning_seen: false,
            open_block: None,
            next_block: 0,
            last_text: String::new(),
            capture_text: false,
            meta: None,
            first: None,
            identity: OnceLock::new(),
            responses: None,
            shape: None,
            shapes: 0,
            learned: None,
            #[cfg(test)]
            wholes: 0,
        }
    }

    /// The tracker starting with the shape `learned` holds for its dialect (the last one a
    /// stream of the same target made), and offering it the first shape it makes.
    pub fn learning(mut self, learned: &Arc<LearnedShapes>) -> Self {
        self.shape = learned.slot(self.dialect).load_full();
        self.learned = Some(Arc::clone(learned));
        self
    }

    /// Whether an event read whole is made a shape: once the stream has committed (the events
    /// up to its first content are on the way to the client's first chunk, which a shape made
    /// for the chunks after them would only delay), and while it makes shapes.
    fn makes_shapes(&self) -> bool {
        self.committed && self.shapes < MAX_SHAPES
    }

    /// `shape` made of an event read whole: the stream's shape from now on, and, when it is the
    /// first the stream made, the one its target's next stream starts with.
    fn made(&mut self, shape: Shaped) {
        let shape = Arc::new(shape);
        if let (0, Some(learned)) = (self.shapes, &self.learned) {
            learned.slot(self.dialect).store(Some(Arc::clone(&shape)));
        }
        self.shape = Some(shape);
        self.shapes += 1;
    }

    /// Keep each event's text in `last_text` (for mid-stream continuation).
    pub fn capture_text(&mut self) {
        self.capture_text = true;
    }

    /// Keep each event's text in `last_text`, or stop keeping it.
    pub fn set_capture(&mut self, capture: bool) {
        self.capture_text = capture;
    }

    /// The text content of the last event read (empty when it had none, or when text is not
    /// kept: [`ChunkTracker::capture_text`]).
    pub fn last_text(&self) -> &str {
        &self.last_text
    }

    /// The dialect of the events read.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The stream's identity, once seen: an OpenAI stream's from its first chunk read.
    fn identity(&self) -> Option<&ChunkMeta> {
        match &self.first {
            Some(first) => (self.identity)
                .get_or_init(|| ChunkMeta::read(first).map(Box::new))
                .as_deref(),
            None => self.meta.as_ref(),
        }
    }

    /// The stream's `id`, once seen.
    pub fn stream_id(&self) -> Option<&str> {
        self.identity()?.id.as_deref()
    }

    /// Whether a continuation could take over here: no tool call and no reasoning under way.
    pub fn resumable(&self) -> bool {
        !self.tool_calls_seen && !self.reasoning_seen
    }

    /// Anthropic: where a continuation's blocks go on, `(next block index, the open text block)`.
    pub fn blocks(&self) -> (u32, Option<u32>) {
        let open_text = self.open_block.filter(|b| b.1).map(|b| b.0);
        (self.next_block, open_text)
    }

    /// Classify one event and update the stream's state.
    pub fn on_event(&mut self, ev: &SseEvent) -> ChunkAction {
        self.last_text.clear();
        match self.dialect {
            Dialect::Anthropic => return self.on_anthropic_event(ev),
            Dialect::Responses => return self.on_responses_event(ev),
            Dialect::OpenAi | Dialect::Gemini => {}
        }
        if ev.data.as_ref() == DONE {
            return ChunkAction::Done;
        }
        let capture = self.capture_text;
        let shaped = match self.shape.as_deref() {
            Some(Shaped::Chunk(shape)) => shape.read(&ev.data, capture),
            _ => None,
        };
        let read = match shaped {
            Some(read) => Some(read),
            None if self.first.is_none() => self.open(&ev.data, capture),
            None => match self.close(&ev.data, capture) {
                Some(read) => Some(read),
                None => self.scan(&ev.data, capture, false),
            },
        };
        let Some(read) = read else {
            self.malformed += 1;
            return ChunkAction::Skip;
        };
        if let Some(message) = read.error {
            return ChunkAction::Error(message);
        }
        if let Some(text) = read.text {
            self.last_text.push_str(&text);
        }
        self.tool_calls_seen |= read.tool_calls;
        if read.content > 0 || read.finished {
            self.committed = true;
        }
        self.content_chunks += read.content;
        self.finished |= read.finished;
        if self.first.is_none() {
            self.first = Some(ev.data.clone());
        }
        if let (false, Some(usage)) = (read.choices, read.usage) {
            self.usage_seen = true;
            self.usage = usage;
            if !self.client_wants_usage {
                return ChunkAction::Skip;
            }
        }
        ChunkAction::Forward(ev.framed(None))
    }

    /// An Anthropic or Responses event: read by the stream's shape when it has one that reads
    /// it (`by_shape`), else whole (`whole`, serde_json); a shape made of what was read whole
    /// (`shape_of`) while the stream makes shapes ([`ChunkTracker::makes_shapes`]). `None`: not
    /// an event of the dialect.
    fn read_event<'a, V>(
        &mut self,
        data: &'a [u8],
        by_shape: impl FnOnce(&Shaped, &'a [u8]) -> Option<V>,
        whole: impl FnOnce(&'a [u8]) -> Option<V>,
        shape_of: impl FnOnce(&[u8], &V) -> Option<Shaped>,
    ) -> Option<V> {
        if let Some(view) = self
            .shape
            .as_deref()
            .and_then(|shape| by_shape(shape, data))
        {
            return Some(view);
        }
        let view = whole(data)?;
        if self.makes_shapes() {
            if let Some(shape) = shape_of(data, &view) {
                self.made(shape);
            }
        }
        Some(view)
    }

    /// An OpenAI chunk read whole, by the scanner or else serde_json; a shape made of it when it
    /// can be one and the stream makes shapes ([`ChunkTracker::makes_shapes`]). `opening`: the
    /// stream's first chunk, whose shape (when it can be one) is kept on the target as its
    /// streams' opening ([`ChunkTracker::open`]), not made the stream's shape.
    fn scan<'a>(&mut self, data: &'a [u8], capture: bool, opening: bool) -> Option<ChunkRead<'a>> {
        #[cfg(test)]
        {
            self.wholes += 1;
        }
        let Some((read, noted)) = ChunkRead::scan_noting(data, capture) else {
            return ChunkRead::parse(data, capture);
        };
        let opening = if opening { self.learned.as_ref() } else { None };
        if opening.is_none() && !self.makes_shapes() {
            return Some(read);
        }
        let Some(shape) = ChunkShape::of(data, &read, noted) else {
            return Some(read);
        };
        match (opening, shape.closes()) {
            (Some(learned), false) => learned.opening.store(Some(Arc::new(Shaped::Chunk(shape)))),
            (None, false) => self.made(Shaped::Chunk(shape)),
            // A finish or a usage comes once a stream: its shape is for the target's next
            // streams ([`ChunkTracker::close`]).
            (None, true) => {
                if let Some(learned) = &self.learned {
                    let slot = usize::from(!read.choices);
                    learned.closing[slot].store(Some(Arc::new(shape)));
                    self.shapes += 1;
                }
            }
            // A first chunk that ends its stream: not the opening of the target's next ones.
            (Some(_), true) => {}
        }
        Some(read)
    }

    /// An OpenAI stream's first chunk (most often a role-only one, before the first content):
    /// read by the shape of its target's streams' first chunks when it fits, else whole, its
    /// shape then kept in place of the one that did not fit. Made before the commit point, as
    /// no other shape is, but once for a target's streams, not once a stream.
    fn open<'a>(&mut self, data: &'a [u8], capture: bool) -> Option<ChunkRead<'a>> {
        if let Some(learned) = &self.learned {
            if let Some(Shaped::Chunk(shape)) = learned.opening.load().as_deref() {
                if let Some(read) = shape.read(data, capture) {
                    return Some(read);
                }
            }
        }
        self.scan(data, capture, true)
    }

    /// An OpenAI chunk that ends a stream (its finish, its usage), read by the shapes its
    /// target's last streams kept (`None`: none fits). A target's first stream reads them whole;
    /// the next ones read them by shape for as long as they keep it.
    fn close<'a>(&self, data: &'a [u8], capture: bool) -> Option<ChunkRead<'a>> {
        let learned = self.learned.as_ref()?;
        (learned.closing.iter()).find_map(|slot| slot.load().as_deref()?.read(data, capture))
    }

    /// Read every chunk whole, making no shape: what a shaped reading must equal (the
    /// `stream_trackers` fuzz target compares the two).
    #[cfg(any(test, fuzzing))]
    #[doc(hidden)]
    pub fn without_shapes(mut self) -> Self {
        self.shapes = MAX_SHAPES;
        self
    }

    /// What reading the events has made of the stream, as seen from outside the tracker: what a
    /// shaped reading must leave as a whole one does (the unit tests' and the
    /// `stream_trackers` fuzz target's comparison).
    #[cfg(any(test, fuzzing))]
    #[doc(hidden)]
    pub fn observed(&self) -> impl PartialEq + std::fmt::Debug + '_ {
        (
            (self.committed, self.finished, self.usage_seen),
            (self.malformed, self.content_chunks, self.usage),
            (self.tool_calls_seen, self.reasoning_seen),
            (self.last_text(), self.blocks(), self.stream_id()),
            self.responses_progress(),
        )
    }

    /// What ends a complete stream: `[DONE]` (Anthropic's `message_stop` is the event itself;
    /// a Responses stream ends with its `response.completed`, already sent: nothing).
    pub fn terminator(&self) -> Bytes {
        match self.dialect {
            Dialect::Anthropic => anthropic::message_stop(),
            Dialect::Responses => Bytes::new(),
            _ => encode_data(DONE),
        }
    }

    /// The events that end a broken stream: for OpenAI a chunk whose `finish_reason` says
    /// `error` and an error event; for Anthropic an `error` event (the SDKs raise on both).
    pub fn error_tail(&self, message: &str) -> Vec<Bytes> {
        match self.dialect {
            Dialect::Anthropic => return vec![anthropic::error_event(message)],
            Dialect::Responses => return vec![self.responses_failed(message)],
            Dialect::OpenAi | Dialect::Gemini => {}
        }
        let meta = self.identity().cloned().unwrap_or_default();
        let finish = serde_json::json!({
            "id": meta.id,
            "object": "chat.completion.chunk",
            "created": meta.created,
            "model": meta.model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}],
        });
        let error = serde_json::json!({
            "error": {"message": message, "type": "upstream_error", "code": "stream_interrupted"}
        });
        vec![
            encode_data(finish.to_string().as_bytes()),
            encode_data(error.to_string().as_bytes()),
        ]
    }
}

#[cfg(test)]
mod tests;
