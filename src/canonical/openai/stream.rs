//! Reading OpenAI `chat.completion.chunk` streams: `data: {chunk}` events ending with
//! `data: [DONE]`.
//!
//! Tool calls stream as OpenAI does: a delta naming the call (`index`, `id`, `function.name`,
//! empty arguments), then argument fragments under the same `index`. Servers that send a whole
//! call in one delta are read the same way.

use std::borrow::Cow;

use serde::Deserialize;

use super::response::{from_wire, WireError, WireUsage};
use crate::canonical::error::TranslateError;
use crate::canonical::types::{StreamEvent, Usage};

#[derive(Deserialize)]
struct WireChunk<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Vec<WireChoice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    error: Option<WireError<'a>>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Vec<WireToolDelta<'a>>,
}

#[derive(Deserialize)]
struct WireToolDelta<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<WireFunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct WireFunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

/// Reads an OpenAI stream's event data into canonical events.
#[derive(Debug, Default)]
pub struct Decoder {
    started: bool,
    done: bool,
    /// How many tool calls have started; a delta for index `n >= calls` starts one.
    calls: u32,
}

impl Decoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `data: [DONE]` has been seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes one event's data (`event` names are not used by OpenAI) into `out`.
    pub fn decode(
        &mut self,
        _event: Option<&str>,
        data: &[u8],
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), TranslateError> {
        let trimmed = data.trim_ascii();
        if trimmed == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        if trimmed.is_empty() {
            return Ok(());
        }
        let chunk: WireChunk<'_> = serde_json::from_slice(trimmed)?;
        if let Some(error) = chunk.error {
            let error = from_wire(0, error);
            out.push(StreamEvent::Error {
                message: error.message,
                kind: error.class,
            });
            return Ok(());
        }
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: chunk.id.map(Cow::into_owned).unwrap_or_default(),
                model: chunk.model.map(Cow::into_owned).unwrap_or_default(),
            });
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason {
                out.push(StreamEvent::Finish(super::response::finish_from(&reason)));
            }
        }
        if let Some(usage) = chunk.usage {
            out.push(StreamEvent::Usage(Usage::from(usage)));
        }
        Ok(())
    }

    fn delta(&mut self, delta: WireDelta<'_>, out: &mut Vec<StreamEvent>) {
        for text in [delta.content, delta.refusal].into_iter().flatten() {
            if !text.is_empty() {
                out.push(StreamEvent::TextDelta(text.into_owned()));
            }
        }
        for (position, call) in delta.tool_calls.into_iter().enumerate() {
            let position = u32::try_from(position).unwrap_or(u32::MAX);
            let index = call.index.unwrap_or(position);
            let (name, arguments) = match call.function {
                Some(f) => (f.name, f.arguments),
                None => (None, None),
            };
            if index >= self.calls && (call.id.is_some() || name.is_some()) {
                self.calls = index.saturating_add(1);
                out.push(StreamEvent::ToolCallStart {
                    index,
                    id: call.id.map(Cow::into_owned).unwrap_or_default(),
                    name: name.map(Cow::into_owned).unwrap_or_default(),
                });
            }
            if let Some(fragment) = arguments.filter(|a| !a.is_empty()) {
                out.push(StreamEvent::ToolCallArgsDelta {
                    index,
                    fragment: fragment.into_owned(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::canonical::error::ErrorClass;
    use crate::canonical::types::FinishReason;

    fn decode_all(events: &[&str]) -> Vec<StreamEvent> {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        for data in events {
            decoder.decode(None, data.as_bytes(), &mut out).unwrap();
        }
        out
    }

    #[test]
    fn decodes_text_tools_usage_and_errors() {
        let events = decode_all(&[
            r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}"#,
            r#"{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#,
            r#"{"error":{"message":"Overloaded","type":"overloaded_error"}}"#,
        ]);
        assert_eq!(
            events,
            [
                StreamEvent::Start {
                    id: "c1".into(),
                    model: "m".into()
                },
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "call_1".into(),
                    name: "f".into()
                },
                StreamEvent::ToolCallArgsDelta {
                    index: 0,
                    fragment: r#"{"a":1}"#.into()
                },
                StreamEvent::Finish(FinishReason::ToolCalls),
                StreamEvent::Usage(Usage::new(3, 4)),
                StreamEvent::Error {
                    message: "Overloaded".into(),
                    kind: ErrorClass::Overloaded
                },
            ]
        );
        let mut decoder = Decoder::new();
        decoder.decode(None, b" [DONE]", &mut Vec::new()).unwrap();
        assert!(decoder.is_done());
        assert!(decoder.decode(None, b"{nope", &mut Vec::new()).is_err());
    }
}
