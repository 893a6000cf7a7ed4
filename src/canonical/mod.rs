//! Our own request, response and stream-event model, and translation to and from each wire
//! dialect: OpenAI Chat Completions ([`openai`]), Anthropic Messages ([`anthropic`]) and Gemini
//! generateContent ([`gemini`]).
//! A fourth, the OpenAI Responses API ([`responses`]), also says which requests need its targets.
//!
//! Every dialect module has the same pure functions: `parse_request`, `write_request` (given the
//! upstream model name), `parse_response`, `write_response`, `parse_error` (an error body, with
//! its HTTP status, classified for the failover loop), `write_error`, and a stateful stream
//! `Decoder` (SSE event name and data in, [`StreamEvent`]s out) and `Encoder` (events in, SSE
//! bytes out). [`Dialect`] dispatches to them for code that picks the dialect at run time.
//!
//! Translation is lossy only where a dialect has no place for something: those cases are said
//! in each module's doc. Fields a dialect has and the model does not are kept in
//! [`Extra`] and written back only to the same dialect; same-dialect traffic should keep
//! passing through untouched rather than through here.
//!
//! - `types.rs`: the model. `error.rs`: translation errors and [`UpstreamError`].
//! - [`context`]: token estimates and trimming a conversation to a context window.

pub mod anthropic;
pub mod context;
mod error;
pub mod gemini;
pub mod openai;
pub(crate) mod raw;
pub mod responses;
mod types;

pub use error::{ErrorClass, TranslateError, UpstreamError};
pub use types::{
    text_of, CacheControl, ChatRequest, ChatResponse, Extra, FinishReason, Image, Message, Part,
    RawJson, ResponseFormat, Role, StreamEvent, Tool, ToolCall, ToolChoice, ToolResult, Usage,
};

/// A wire dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// OpenAI Chat Completions; also Azure OpenAI and OpenAI-compatible servers.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini generateContent.
    Gemini,
    /// The OpenAI Responses API (`/v1/responses`): OpenAI and Azure OpenAI.
    Responses,
}

impl Dialect {
    /// A short name for logs.
    pub fn label(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Anthropic => "anthropic",
            Dialect::Gemini => "gemini",
            Dialect::Responses => "responses",
        }
    }

    /// Parses a request body of this dialect.
    pub fn parse_request(self, body: &[u8]) -> Result<ChatRequest, TranslateError> {
        match self {
            Dialect::OpenAi => openai::parse_request(body),
            Dialect::Anthropic => anthropic::parse_request(body),
            Dialect::Gemini => gemini::parse_request(body),
            Dialect::Responses => responses::parse_request(body),
        }
    }

    /// Writes `req` as this dialect's body for the upstream `model` (Gemini: the model is in
    /// the URL).
    pub fn write_request(self, req: &ChatRequest, model: &str) -> Result<Vec<u8>, TranslateError> {
        match self {
            Dialect::OpenAi => openai::write_request(req, model),
            Dialect::Anthropic => anthropic::write_request(req, model),
            Dialect::Gemini => gemini::write_request(req, model),
            Dialect::Responses => responses::write_request(req, model),
        }
    }

    /// Parses a non-streamed response body of this dialect.
    pub fn parse_response(self, body: &[u8]) -> Result<ChatResponse, TranslateError> {
        match self {
            Dialect::OpenAi => openai::parse_response(body),
            Dialect::Anthropic => anthropic::parse_response(body),
            Dialect::Gemini => gemini::parse_response(body),
            Dialect::Responses => responses::parse_response(body),
        }
    }

    /// Writes a non-streamed response body of this dialect.
    pub fn write_response(self, resp: &ChatResponse) -> Result<Vec<u8>, TranslateError> {
        match self {
            Dialect::OpenAi => openai::write_response(resp),
            Dialect::Anthropic => anthropic::write_response(resp),
            Dialect::Gemini => gemini::write_response(resp),
            Dialect::Responses => responses::write_response(resp),
        }
    }

    /// Reads an error body of this dialect (any body: a non-JSON one is classified by status).
    pub fn parse_error(self, status: u16, body: &[u8]) -> UpstreamError {
        match self {
            Dialect::OpenAi => openai::parse_error(status, body),
            Dialect::Anthropic => anthropic::parse_error(status, body),
            Dialect::Gemini => gemini::parse_error(status, body),
            Dialect::Responses => responses::parse_error(status, body),
        }
    }

    /// Writes `err` as this dialect's error body.
    pub fn write_error(self, err: &UpstreamError) -> Vec<u8> {
        match self {
            Dialect::OpenAi => openai::write_error(err),
            Dialect::Anthropic => anthropic::write_error(err),
            Dialect::Gemini => gemini::write_error(err),
            Dialect::Responses => responses::write_error(err),
        }
    }

    /// A stream decoder for this dialect.
    pub fn decoder(self) -> StreamDecoder {
        match self {
            Dialect::OpenAi => StreamDecoder::OpenAi(openai::Decoder::new()),
            Dialect::Anthropic => StreamDecoder::Anthropic(anthropic::Decoder::new()),
            Dialect::Gemini => StreamDecoder::Gemini(gemini::Decoder::new()),
            Dialect::Responses => StreamDecoder::Responses(responses::Decoder::new()),
        }
    }

    /// A stream encoder for this dialect; `include_usage` matters to OpenAI only (the usage
    /// chunk is sent when the client asked for it; the others always carry usage).
    pub fn encoder(self, include_usage: bool) -> StreamEncoder {
        match self {
            Dialect::OpenAi => StreamEncoder::OpenAi(openai::Encoder::new(include_usage)),
            Dialect::Anthropic => StreamEncoder::Anthropic(anthropic::Encoder::new()),
            Dialect::Gemini => StreamEncoder::Gemini(gemini::Encoder::new()),
            Dialect::Responses => StreamEncoder::Responses(responses::Encoder::new()),
        }
    }
}

/// Any dialect's stream decoder.
#[derive(Debug)]
pub enum StreamDecoder {
    /// OpenAI chunks.
    OpenAi(openai::Decoder),
    /// Anthropic events.
    Anthropic(anthropic::Decoder),
    /// Gemini chunks.
    Gemini(gemini::Decoder),
    /// Responses events.
    Responses(responses::Decoder),
}

impl StreamDecoder {
    /// Decodes one SSE event (its `event:` name, if any, and its data) into `out`. An event
    /// that cannot be parsed is an error and leaves the decoder as it was: skip it and go on.
    pub fn decode(
        &mut self,
        event: Option<&str>,
        data: &[u8],
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), TranslateError> {
        match self {
            StreamDecoder::OpenAi(d) => d.decode(event, data, out),
            StreamDecoder::Anthropic(d) => d.decode(event, data, out),
            StreamDecoder::Gemini(d) => d.decode(event, data, out),
            StreamDecoder::Responses(d) => d.decode(event, data, out),
        }
    }

    /// Whether the stream said it is complete (`[DONE]`, `message_stop`, a Gemini
    /// `finishReason`). A stream that ends before this was cut.
    pub fn is_done(&self) -> bool {
        match self {
            StreamDecoder::OpenAi(d) => d.is_done(),
            StreamDecoder::Anthropic(d) => d.is_done(),
            StreamDecoder::Gemini(d) => d.is_done(),
            StreamDecoder::Responses(d) => d.is_done(),
        }
    }
}

/// Any dialect's stream encoder.
#[derive(Debug)]
pub enum StreamEncoder {
    /// OpenAI chunks.
    OpenAi(openai::Encoder),
    /// Anthropic events.
    Anthropic(anthropic::Encoder),
    /// Gemini chunks.
    Gemini(gemini::Encoder),
    /// Responses events.
    Responses(responses::Encoder),
}

impl StreamEncoder {
    /// Appends the SSE bytes for `event` to `out` (some dialects hold an event back until
    /// they can write it whole: Anthropic's `message_delta`, Gemini's function calls).
    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        match self {
            StreamEncoder::OpenAi(e) => e.encode(event, out),
            StreamEncoder::Anthropic(e) => e.encode(event, out),
            StreamEncoder::Gemini(e) => e.encode(event, out),
            StreamEncoder::Responses(e) => e.encode(event, out),
        }
    }

    /// Ends the stream: writes what was held back and the dialect's terminator.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        match self {
            StreamEncoder::OpenAi(e) => e.finish(out),
            StreamEncoder::Anthropic(e) => e.finish(out),
            StreamEncoder::Gemini(e) => e.finish(out),
            StreamEncoder::Responses(e) => e.finish(out),
        }
    }
}

/// `req` with the partial assistant answer appended as a trailing assistant message (merged into
/// a trailing assistant message already there), for a target to continue. Only Anthropic
/// promises to continue it; OpenAI-compatible servers and Gemini usually do, which the splicer
/// checks (`routing::continuation`). Anthropic rejects trailing whitespace in a prefill, so its
/// writer trims it and the continuation starts with that whitespace.
pub fn with_prefill(req: &ChatRequest, partial_assistant_text: &str) -> ChatRequest {
    let mut out = req.clone();
    if partial_assistant_text.is_empty() {
        return out;
    }
    match out.messages.last_mut() {
        Some(Message::Assistant {
            content,
            tool_calls,
        }) if tool_calls.is_empty() => match content.last_mut() {
            Some(Part::Text(text)) => text.push_str(partial_assistant_text),
            _ => content.push(Part::Text(partial_assistant_text.to_owned())),
        },
        _ => out
            .messages
            .push(Message::assistant(partial_assistant_text)),
    }
    out
}

#[cfg(test)]
mod usage_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// The event an SSE line or event over its bound ends the decoding with reads as an
    /// in-band error in every dialect (so a translated upstream's attempt fails like one).
    #[test]
    fn every_dialect_reads_the_sse_overflow_event_as_an_error() {
        for dialect in [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini] {
            let mut out = Vec::new();
            let read =
                dialect
                    .decoder()
                    .decode(Some("error"), crate::wire::sse::OVERFLOW, &mut out);
            assert!(read.is_ok(), "{dialect:?}: {read:?}");
            assert!(
                matches!(&out[..], [StreamEvent::Error { message, .. }] if message.contains("4 MiB")),
                "{dialect:?}: {out:?}"
            );
        }
    }

    #[test]
    fn prefill_appends_or_extends_the_assistant_turn() {
        let req = ChatRequest {
            messages: vec![Message::user("Count")],
            ..ChatRequest::default()
        };
        let once = with_prefill(&req, "alpha-1 ");
        assert_eq!(once.messages.last(), Some(&Message::assistant("alpha-1 ")));
        let twice = with_prefill(&once, "bravo-2");
        assert_eq!(twice.messages.len(), 2);
        assert_eq!(twice.messages[1], Message::assistant("alpha-1 bravo-2"));
        assert_eq!(with_prefill(&req, ""), req);
    }
}
