//! The canonical request, response and stream-event model: what every dialect is parsed into
//! and written from. Nothing here knows a wire format.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::error::ErrorClass;
use super::Dialect;

/// A piece of JSON kept as its text: tool schemas, unmodelled fields. Passing it through costs
/// one copy of the bytes and no parse tree.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(pub Box<RawValue>);

impl RawJson {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Copies borrowed raw JSON.
    pub fn from_raw(raw: &RawValue) -> Self {
        RawJson(raw.to_owned())
    }

    /// Checks `text` is one JSON value and keeps it.
    pub fn from_text(text: &str) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text.to_owned()).map(RawJson)
    }

    /// Serializes a value.
    pub fn from_value(value: &serde_json::Value) -> Self {
        // A `Value` always serializes; the fallback is never taken.
        serde_json::value::to_raw_value(value)
            .map(RawJson)
            .unwrap_or_else(|_| RawJson::null())
    }

    /// JSON `null`.
    pub fn null() -> Self {
        RawJson(RawValue::NULL.to_owned())
    }
}

/// Two raw values are equal when their text is: formatting counts.
impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RawJson {}

/// Top-level fields a dialect has that the canonical model does not: kept as they came and
/// written again only to the same dialect (an OpenAI `seed` means nothing to Anthropic).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extra {
    /// The dialect the fields came from; `None` when there are none.
    pub dialect: Option<Dialect>,
    /// Field name and raw value, in arrival order.
    pub fields: Vec<(String, RawJson)>,
}

impl Extra {
    /// The fields to write into a `dialect` body: all of them when they came from `dialect`.
    pub fn for_dialect(&self, dialect: Dialect) -> &[(String, RawJson)] {
        if self.dialect == Some(dialect) {
            &self.fields
        } else {
            &[]
        }
    }

    /// The raw value of field `name`.
    pub fn get(&self, name: &str) -> Option<&RawJson> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// One chat request, whatever dialect it came in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// The model the client asked for (a route name). Gemini carries it in the URL: its parser
    /// leaves this empty.
    pub model: String,
    /// System prompts in order. OpenAI `system`/`developer` messages anywhere in the
    /// conversation are gathered here: Anthropic and Gemini only have one top-level place.
    pub system: Vec<String>,
    /// Prompt-cache breakpoints among the system prompts: `(i, control)` ends a cached prefix
    /// with `system[i]`.
    pub system_cache: Vec<(usize, CacheControl)>,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    pub tools: Vec<Tool>,
    /// Whether and which tool must be called.
    pub tool_choice: Option<ToolChoice>,
    /// JSON mode or a JSON schema for the answer.
    pub response_format: Option<ResponseFormat>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Output token limit.
    pub max_tokens: Option<u32>,
    /// Stream the answer.
    pub stream: bool,
    /// Dialect-specific fields we do not model.
    pub extra: Extra,
}

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The end user (or the agent's harness).
    User,
    /// The model.
    Assistant,
    /// A tool's result, answering an assistant tool call.
    Tool,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A user message.
    User {
        /// Text, images and dialect-specific parts.
        content: Vec<Part>,
    },
    /// A model message: text and/or tool calls.
    Assistant {
        /// Text (and dialect-specific parts such as Anthropic thinking blocks).
        content: Vec<Part>,
        /// Tool calls, in order.
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool(ToolResult),
}

impl Message {
    /// The role of this message.
    pub fn role(&self) -> Role {
        match self {
            Message::User { .. } => Role::User,
            Message::Assistant { .. } => Role::Assistant,
            Message::Tool(_) => Role::Tool,
        }
    }

    /// A user message of one text part.
    pub fn user(text: impl Into<String>) -> Self {
        Message::User {
            content: vec![Part::Text(text.into())],
        }
    }

    /// An assistant message of one text part.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message::Assistant {
            content: vec![Part::Text(text.into())],
            tool_calls: Vec::new(),
        }
    }

    /// The text parts, concatenated.
    pub fn text(&self) -> String {
        match self {
            Message::User { content } | Message::Assistant { content, .. } => text_of(content),
            Message::Tool(result) => result.content.clone(),
        }
    }
}

/// The text parts of `parts`, concatenated.
pub fn text_of(parts: &[Part]) -> String {
    let mut out = String::new();
    for part in parts {
        if let Part::Text(text) = part {
            out.push_str(text);
        }
    }
    out
}

/// One piece of message content.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Text.
    Text(String),
    /// An image.
    Image(Image),
    /// A part only its own dialect understands (an OpenAI audio part, an Anthropic document or
    /// thinking block, a Gemini thought): written back to that dialect, dropped elsewhere.
    Other {
        /// Where it came from.
        dialect: Dialect,
        /// The part as it came.
        raw: RawJson,
    },
    /// A prompt-cache breakpoint after the part before it: the prefix up to there is to be
    /// cached (Anthropic's `cache_control` on that block; an OpenAI client's on that content
    /// part or message). Written to Anthropic only: the other dialects cache by prefix
    /// without markers.
    CacheBreakpoint(CacheControl),
}

/// A prompt-cache marker as the client wrote it: Anthropic's `cache_control` object
/// (`{"type":"ephemeral"}`, with a `ttl` or not), kept whole so what it says reaches the
/// provider unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheControl(pub RawJson);

/// An image, by reference or inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// An `https:` URL.
    Url(String),
    /// Inline bytes, base64-encoded (OpenAI `data:` URLs are parsed into this).
    Base64 {
        /// E.g. `image/png`.
        media_type: String,
        /// The base64 text.
        data: String,
    },
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The call's id; tool results name it. Gemini gives none: parsers make one up.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as a JSON text (OpenAI's shape; Anthropic and Gemini send an object).
    pub arguments: String,
}

/// The result of a tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub tool_call_id: String,
    /// The result as text (images in Anthropic tool results are dropped).
    pub content: String,
    /// The tool failed (Anthropic `is_error`, Gemini `error` key).
    pub is_error: bool,
    /// A prompt-cache breakpoint on the result (written to Anthropic only).
    pub cache: Option<CacheControl>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// The JSON schema of its arguments.
    pub parameters: Option<RawJson>,
    /// A prompt-cache breakpoint on the definition: the tools up to it are cached (written
    /// to Anthropic only).
    pub cache: Option<CacheControl>,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This tool.
    Tool(String),
}

/// The shape of the answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Free text (the default, said explicitly).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema.
    JsonSchema {
        /// The schema's name (OpenAI requires one; Gemini has none: `"response"`).
        name: String,
        /// The schema.
        schema: RawJson,
        /// OpenAI strict mode.
        strict: Option<bool>,
    },
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// The output token limit.
    Length,
    /// The model wants tool results.
    ToolCalls,
    /// A safety system or the model refused.
    ContentFilter,
    /// Anything else, as the provider (or the gateway, `"error"` for a broken stream) said it.
    Error(String),
}

/// Token counts of one answer.
///
/// `input` counts every prompt token, those read from and written to the provider's prompt
/// cache included (OpenAI's `prompt_tokens` and Gemini's `promptTokenCount` count them so;
/// Anthropic's `input_tokens` does not: its reader adds `cache_read_input_tokens` and
/// `cache_creation_input_tokens`, its writer takes them off again). `cache_read` and
/// `cache_write` say how many of `input` the cache served and how many it stored; 0 when the
/// provider did not say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
    /// Of `input`, the tokens read from the prompt cache (OpenAI `cached_tokens`, Anthropic
    /// `cache_read_input_tokens`, Gemini `cachedContentTokenCount`).
    #[serde(default)]
    pub cache_read: u64,
    /// Of `input`, the tokens written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`; OpenAI and Gemini report none).
    #[serde(default)]
    pub cache_write: u64,
}

impl Usage {
    /// Input and output tokens, with no cache counts.
    pub fn new(input: u64, output: u64) -> Self {
        Usage {
            input,
            output,
            ..Usage::default()
        }
    }

    /// Of `input`, the tokens neither read from nor written to the cache: Anthropic's
    /// `input_tokens`.
    pub fn uncached_input(&self) -> u64 {
        self.input
            .saturating_sub(self.cache_read)
            .saturating_sub(self.cache_write)
    }
}

/// One non-streamed answer (its first choice).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// The provider's id for the answer.
    pub id: String,
    /// The model that answered.
    pub model: String,
    /// Unix seconds of creation, when the dialect says (OpenAI); writers use the clock else.
    pub created: Option<u64>,
    /// The answer's text (empty when it only calls tools).
    pub text: String,
    /// Tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Token counts, when the provider sent them.
    pub usage: Option<Usage>,
}

/// One event of a streamed answer. A stream is `Start`, then deltas, then `Finish`, then
/// `Usage` (when the provider reports it); `Error` may come at any point and ends it.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// The answer began.
    Start {
        /// The provider's id for the answer.
        id: String,
        /// The model that answers.
        model: String,
    },
    /// More answer text.
    TextDelta(String),
    /// A tool call began. `index` counts the answer's tool calls from 0 (not Anthropic's
    /// content-block index).
    ToolCallStart {
        /// The call's position among this answer's tool calls.
        index: u32,
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of a tool call's arguments (a fragment of a JSON text).
    ToolCallArgsDelta {
        /// Which call.
        index: u32,
        /// The next fragment.
        fragment: String,
    },
    /// Why the answer ended.
    Finish(FinishReason),
    /// Token counts for the whole answer.
    Usage(Usage),
    /// An error inside the stream (Anthropic `event: error`, an OpenAI or Gemini error object).
    Error {
        /// The provider's message.
        message: String,
        /// What kind of failure it is.
        kind: ErrorClass,
    },
}
