//! The OpenAI Responses API (`POST /v1/responses`): requests, responses, errors and streams.
//!
//! STUB: the interface the rest of the gateway is built against; the bodies are being written.

use super::error::{TranslateError, UpstreamError};
use super::types::{ChatRequest, ChatResponse, StreamEvent};

/// Parses a Responses request body (`instructions`, `input` as a string or items, `tools`,
/// `tool_choice`, `text.format`, `max_output_tokens`, ...). Items the model has no place for
/// (reasoning, built-in tool calls) are kept as `Part::Other` of this dialect.
pub fn parse_request(_body: &[u8]) -> Result<ChatRequest, TranslateError> {
    Err(TranslateError::invalid(
        "the Responses API is not built yet",
    ))
}

/// Writes `req` as a Responses request body for `model`.
pub fn write_request(_req: &ChatRequest, _model: &str) -> Result<Vec<u8>, TranslateError> {
    Err(TranslateError::invalid(
        "the Responses API is not built yet",
    ))
}

/// Parses a non-streamed Responses answer (a `response` object).
pub fn parse_response(_body: &[u8]) -> Result<ChatResponse, TranslateError> {
    Err(TranslateError::invalid(
        "the Responses API is not built yet",
    ))
}

/// Writes a non-streamed Responses answer (a `response` object).
pub fn write_response(_resp: &ChatResponse) -> Result<Vec<u8>, TranslateError> {
    Err(TranslateError::invalid(
        "the Responses API is not built yet",
    ))
}

/// Why a request can be served only by a target taking it as it came (a built-in tool such
/// as `web_search`), if it can.
pub fn needs_native(_body: &[u8]) -> Option<&'static str> {
    None
}

/// Reads a Responses error body (OpenAI's `{"error": {...}}` envelope).
pub fn parse_error(status: u16, body: &[u8]) -> UpstreamError {
    super::openai::parse_error(status, body)
}

/// Writes `err` as a Responses error body.
pub fn write_error(err: &UpstreamError) -> Vec<u8> {
    super::openai::write_error(err)
}

/// Reads a Responses event stream into canonical events.
#[derive(Debug, Default)]
pub struct Decoder {
    done: bool,
}

impl Decoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `response.completed` (or `response.incomplete`) has been seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes one event.
    pub fn decode(
        &mut self,
        _event: Option<&str>,
        _data: &[u8],
        _out: &mut Vec<StreamEvent>,
    ) -> Result<(), TranslateError> {
        Err(TranslateError::invalid(
            "the Responses API is not built yet",
        ))
    }
}

/// Writes canonical events as a Responses event stream.
#[derive(Debug, Default)]
pub struct Encoder {}

impl Encoder {
    /// An encoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// An encoder writing `id` as the response's id (the gateway mints its own).
    pub fn with_response_id(_id: String) -> Self {
        Self::default()
    }

    /// Appends the SSE bytes for `event`.
    pub fn encode(&mut self, _event: &StreamEvent, _out: &mut Vec<u8>) {}

    /// Ends the stream.
    pub fn finish(&mut self, _out: &mut Vec<u8>) {}
}
