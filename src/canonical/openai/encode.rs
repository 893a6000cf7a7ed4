//! Writing OpenAI chunk streams: a role chunk first, content and tool-call chunks, a finish
//! chunk, the usage chunk when the client asked for it, and `data: [DONE]`.

use serde::Serialize;

use super::response::{finish_word, out_error, OutUsage};
use crate::canonical::raw;
use crate::canonical::types::StreamEvent;

#[derive(Serialize)]
struct OutChunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [OutChoice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<OutUsage>,
}

#[derive(Serialize)]
struct OutChoice<'a> {
    index: u32,
    delta: OutDelta<'a>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize, Default)]
struct OutDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<OutToolDelta<'a>>,
}

#[derive(Serialize)]
struct OutToolDelta<'a> {
    index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: OutFunctionDelta<'a>,
}

#[derive(Serialize)]
struct OutFunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

#[derive(Serialize)]
struct OutErrorEvent<'a> {
    error: super::response::OutError<'a>,
}

/// Appends `data: <json>\n\n`; a value that fails to serialize (none of ours can) writes nothing.
pub(crate) fn write_data(out: &mut Vec<u8>, value: &impl Serialize) {
    crate::wire::sse::write_json(out, None, value);
}

/// Writes canonical events as an OpenAI chunk stream.
#[derive(Debug)]
pub struct Encoder {
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    started: bool,
    done: bool,
}

impl Encoder {
    /// An encoder; the usage chunk is written only when the client asked for it
    /// (`stream_options.include_usage`).
    pub fn new(include_usage: bool) -> Self {
        Encoder {
            id: String::new(),
            model: String::new(),
            created: raw::now_unix(),
            include_usage,
            started: false,
            done: false,
        }
    }

    /// The same, with a fixed `created` time (tests, reproducible output).
    pub fn with_created(mut self, created: u64) -> Self {
        self.created = created;
        self
    }

    fn chunk(&self, out: &mut Vec<u8>, delta: OutDelta<'_>, finish_reason: Option<&str>) {
        let choices = [OutChoice {
            index: 0,
            delta,
            finish_reason,
        }];
        write_data(
            out,
            &OutChunk {
                id: &self.id,
                object: "chat.completion.chunk",
                created: self.created,
                model: &self.model,
                choices: &choices,
                usage: None,
            },
        );
    }

    fn role_chunk(&mut self, out: &mut Vec<u8>) {
        self.started = true;
        let delta = OutDelta {
            role: Some("assistant"),
            content: Some(""),
            ..OutDelta::default()
        };
        self.chunk(out, delta, None);
    }

    /// Appends the SSE bytes of `event` to `out`.
    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if let StreamEvent::Start { id, model } = event {
            if !self.started {
                self.id.clone_from(id);
                self.model.clone_from(model);
                self.role_chunk(out);
            }
            return;
        }
        if !self.started && !matches!(event, StreamEvent::Error { .. }) {
            self.role_chunk(out);
        }
        match event {
            StreamEvent::Start { .. } => {}
            StreamEvent::TextDelta(text) => {
                let delta = OutDelta {
                    content: Some(text),
                    ..OutDelta::default()
                };
                self.chunk(out, delta, None);
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                let call = OutToolDelta {
                    index: *index,
                    id: Some(id),
                    kind: Some("function"),
                    function: OutFunctionDelta {
                        name: Some(name),
                        arguments: "",
                    },
                };
                let delta = OutDelta {
                    tool_calls: vec![call],
                    ..OutDelta::default()
                };
                self.chunk(out, delta, None);
            }
            StreamEvent::ToolCallArgsDelta { index, fragment } => {
                let call = OutToolDelta {
                    index: *index,
                    id: None,
                    kind: None,
                    function: OutFunctionDelta {
                        name: None,
                        arguments: fragment,
                    },
                };
                let delta = OutDelta {
                    tool_calls: vec![call],
                    ..OutDelta::default()
                };
                self.chunk(out, delta, None);
            }
            StreamEvent::Finish(reason) => {
                self.chunk(out, OutDelta::default(), Some(finish_word(reason)));
            }
            StreamEvent::Usage(usage) => {
                if self.include_usage {
                    write_data(
                        out,
                        &OutChunk {
                            id: &self.id,
                            object: "chat.completion.chunk",
                            created: self.created,
                            model: &self.model,
                            choices: &[],
                            usage: Some(OutUsage::from(*usage)),
                        },
                    );
                }
            }
            StreamEvent::Error { message, kind } => {
                let error = crate::canonical::error::UpstreamError::new(0, *kind, message.clone());
                write_data(
                    out,
                    &OutErrorEvent {
                        error: out_error(&error),
                    },
                );
            }
        }
    }

    /// Ends the stream: `data: [DONE]` (once).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.done {
            self.done = true;
            out.extend_from_slice(b"data: [DONE]\n\n");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::canonical::types::{FinishReason, Usage};

    #[test]
    fn encodes_a_text_stream() {
        let mut encoder = Encoder::new(false).with_created(1);
        let mut out = Vec::new();
        for event in [
            StreamEvent::TextDelta("Hi".into()),
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(Usage::default()),
        ] {
            encoder.encode(&event, &mut out);
        }
        encoder.finish(&mut out);
        encoder.finish(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("data: ").count(), 4, "{text}");
        assert!(text.contains(r#""delta":{"role":"assistant","content":""}"#));
        assert!(text.contains(r#""delta":{},"finish_reason":"stop""#));
        assert!(text.ends_with("data: [DONE]\n\n"));
    }
}
