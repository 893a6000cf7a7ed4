//! The inner request: an OpenAI chat request, parsed shallowly: we read the few fields the gateway needs
//! (`model`, `stream`, `stream_options`, `messages`) and keep the client's bytes for everything
//! else, so parameters we have never heard of reach same-dialect providers untouched.
//!
//! The upstream body is the client's body with byte-range edits spliced in (the model name per
//! target, `stream_options.include_usage`), not a re-serialisation.

use std::ops::Range;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::scan;

/// Why a request body was refused before any upstream saw it.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("request body is not valid JSON: {0}")]
    Json(serde_json::Error),
    #[error("`model` is required and must be a string")]
    Model,
    #[error("`messages` must be a non-empty array")]
    Messages,
    #[error("`stream_options` must be an object")]
    StreamOptions,
}

/// A validated client request for `/v1/chat/completions`.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    body: Bytes,
    /// The route the client asked for.
    pub model: String,
    /// The client asked for SSE.
    pub stream: bool,
    /// The client asked for the final usage chunk of a stream.
    pub client_wants_usage: bool,
    model_range: Range<usize>,
    /// `messages` value, for context trimming and prefill.
    pub messages_range: Range<usize>,
    /// How to make the upstream stream report usage: `None` when the client already asked.
    usage_edit: Option<(Range<usize>, String)>,
    /// The client's own conversation hint: `prompt_cache_key`, else `user` (a JSON value).
    hint_range: Option<Range<usize>>,
}

#[derive(Deserialize)]
struct Shallow<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    stream: Option<bool>,
    /// Present even when `null` (serde's `Option` would read that as absent).
    #[serde(default, borrow, deserialize_with = "present")]
    stream_options: Option<&'a RawValue>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow)]
    prompt_cache_key: Option<&'a RawValue>,
    #[serde(borrow)]
    user: Option<&'a RawValue>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue as Deserialize>::deserialize(d).map(Some)
}

/// The text of a JSON value that must be a string. Read straight from its bytes when it has no
/// escapes (a model name never does): the value was checked as JSON already, so it is a
/// whole string without control characters, and a second parse only cost time.
pub(super) fn model_text(raw: &str) -> Option<String> {
    match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(text) if !text.contains('\\') => Some(text.to_owned()),
        _ => serde_json::from_str(raw).ok(),
    }
}

fn range_of(body: &[u8], raw: &RawValue) -> Range<usize> {
    let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
    start..start + raw.get().len()
}

/// Where in the body the fields the gateway reads are, as [`Shallow`] reads them (a `null`
/// is an absent field, but for `stream_options`).
struct Spans {
    model: Option<Range<usize>>,
    stream: Option<bool>,
    stream_options: Option<Range<usize>>,
    messages: Option<Range<usize>>,
    prompt_cache_key: Option<Range<usize>>,
    user: Option<Range<usize>>,
}

impl Spans {
    /// By the scanner, for a plain body (`None` for any other: see [`super::scan`]).
    fn plain(body: &[u8]) -> Option<Spans> {
        let [model, stream, stream_options, messages, prompt_cache_key, user] = scan::fields(
            body,
            [
                "model",
                "stream",
                "stream_options",
                "messages",
                "prompt_cache_key",
                "user",
            ],
        )?;
        let not_null = |span| scan::not_null(body, span);
        let stream = scan::flag(body, stream)?;
        Some(Spans {
            model: not_null(model),
            stream,
            stream_options,
            messages: not_null(messages),
            prompt_cache_key: not_null(prompt_cache_key),
            user: not_null(user),
        })
    }

    /// By serde_json, which says why a body is refused.
    fn read(body: &[u8]) -> Result<Spans, RequestError> {
        let shallow: Shallow<'_> = serde_json::from_slice(body).map_err(RequestError::Json)?;
        let span = |raw: Option<&RawValue>| raw.map(|raw| range_of(body, raw));
        Ok(Spans {
            model: span(shallow.model),
            stream: shallow.stream,
            stream_options: span(shallow.stream_options),
            messages: span(shallow.messages),
            prompt_cache_key: span(shallow.prompt_cache_key),
            user: span(shallow.user),
        })
    }
}

impl ChatRequest {
    /// Parse a client body. Validates JSON syntax and the fields we rely on.
    pub fn parse(body: Bytes) -> Result<ChatRequest, RequestError> {
        let spans = match Spans::plain(&body) {
            Some(spans) => spans,
            None => Spans::read(&body)?,
        };
        Self::from_spans(body, spans)
    }

    /// Fuzzing: [`ChatRequest::parse`] by serde_json alone, to compare with the scanner's
    /// reading (`fuzz/fuzz_targets/json_scan.rs`).
    #[cfg(fuzzing)]
    #[doc(hidden)]
    pub fn fuzz_parse_by_serde(body: Bytes) -> Result<ChatRequest, RequestError> {
        let spans = Spans::read(&body)?;
        Self::from_spans(body, spans)
    }

    fn from_spans(body: Bytes, shallow: Spans) -> Result<ChatRequest, RequestError> {
        let text = |span: &Range<usize>| std::str::from_utf8(&body[span.clone()]).unwrap_or("");
        let model_range = shallow.model.ok_or(RequestError::Model)?;
        let model = model_text(text(&model_range)).ok_or(RequestError::Model)?;
        let messages_range = shallow.messages.ok_or(RequestError::Messages)?;
        // Bytes, not text: the messages are most of a body, and were checked as JSON already.
        let messages = &body[messages_range.clone()];
        if messages.first() != Some(&b'[') || messages[1..].trim_ascii_start().starts_with(b"]") {
            return Err(RequestError::Messages);
        }
        let stream = shallow.stream.unwrap_or(false);
        let mut client_wants_usage = false;
        let mut usage_edit = None;
        if stream {
            match shallow.stream_options {
                Some(raw) if text(&raw) != "null" => {
                    let mut opts: serde_json::Map<String, serde_json::Value> =
                        serde_json::from_str(text(&raw))
                            .map_err(|_| RequestError::StreamOptions)?;
                    client_wants_usage =
                        opts.get("include_usage") == Some(&serde_json::Value::Bool(true));
                    if !client_wants_usage {
                        opts.insert("include_usage".into(), true.into());
                        let text = serde_json::Value::Object(opts).to_string();
                        usage_edit = Some((raw, text));
                    }
                }
                Some(raw) => {
                    // `"stream_options": null`: replace the null itself, or the key would be
                    // sent twice.
                    let field = r#"{"include_usage":true}"#.to_owned();
                    usage_edit = Some((raw, field));
                }
                None => {
                    // Insert right after the opening brace; `model` follows, so a comma is right.
                    let at = body.iter().position(|&b| b == b'{').map_or(0, |i| i + 1);
                    let field = r#""stream_options":{"include_usage":true},"#.to_owned();
                    usage_edit = Some((at..at, field));
                }
            }
        }
        let hint_range = shallow.prompt_cache_key.or(shallow.user);
        Ok(ChatRequest {
            model,
            stream,
            client_wants_usage,
            model_range,
            messages_range,
            usage_edit,
            hint_range,
            body,
        })
    }

    /// The client's conversation hint (`prompt_cache_key`, else `user`) as JSON, if it sent one.
    pub fn hint_json(&self) -> Option<&[u8]> {
        self.hint_range.clone().map(|r| &self.body[r])
    }

    /// The client's raw body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The `messages` JSON as the client sent it.
    pub fn messages_json(&self) -> &[u8] {
        &self.body[self.messages_range.clone()]
    }

    /// `messages` with the partial answer appended as a final assistant message (a prefill:
    /// the target is asked to continue it).
    pub fn prefill_messages(&self, partial: &str) -> Vec<u8> {
        let messages = self.messages_json();
        let close = messages
            .iter()
            .rposition(|&b| b == b']')
            .unwrap_or(messages.len());
        let assistant = serde_json::json!({"role": "assistant", "content": partial}).to_string();
        let mut out = Vec::with_capacity(messages.len() + assistant.len() + 2);
        out.extend_from_slice(&messages[..close]);
        out.push(b',');
        out.extend_from_slice(assistant.as_bytes());
        out.push(b']');
        out
    }

    /// The body to send upstream: the client's bytes with `model` set to `upstream_model`, usage
    /// requested on streams, and `messages` replaced when `messages` is given (context trimming,
    /// prefill).
    /// `model_json` is the upstream model name already written as a JSON string (targets keep
    /// it made).
    pub fn upstream_body(&self, model_json: &str, messages: Option<&[u8]>) -> Vec<u8> {
        let mut edits: Vec<(Range<usize>, &[u8])> = Vec::with_capacity(3);
        edits.push((self.model_range.clone(), model_json.as_bytes()));
        if let Some((range, text)) = &self.usage_edit {
            edits.push((range.clone(), text.as_bytes()));
        }
        if let Some(m) = messages {
            edits.push((self.messages_range.clone(), m));
        }
        edits.sort_by_key(|(r, _)| r.start);
        let extra: usize = edits.iter().map(|(_, t)| t.len()).sum();
        let mut out = Vec::with_capacity(self.body.len() + extra);
        let mut pos = 0;
        for (range, text) in edits {
            out.extend_from_slice(&self.body[pos..range.start]);
            out.extend_from_slice(text);
            pos = range.end;
        }
        out.extend_from_slice(&self.body[pos..]);
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{json, Value};

    fn upstream(body: Value, model: &str) -> (ChatRequest, Value) {
        let req = ChatRequest::parse(Bytes::from(body.to_string())).unwrap();
        let out = req.upstream_body(&serde_json::Value::from(model).to_string(), None);
        (req, serde_json::from_slice(&out).unwrap())
    }

    #[test]
    fn the_model_is_read_with_or_without_escapes_and_must_be_a_string() {
        let parse = |body: &str| ChatRequest::parse(Bytes::from(body.to_owned()));
        let messages = r#""messages":[{"role":"user","content":"hi"}]"#;
        for (model, want) in [
            (r#""gpt-4o""#, "gpt-4o"),
            (r#""a\u0062\"c""#, "ab\"c"),
            (r#""""#, ""),
        ] {
            let req = parse(&format!("{{\"model\":{model},{messages}}}")).unwrap();
            assert_eq!(req.model, want, "{model}");
        }
        for model in ["4", "null", "[\"m\"]"] {
            let err = parse(&format!("{{\"model\":{model},{messages}}}")).unwrap_err();
            assert!(matches!(err, RequestError::Model), "{model}: {err}");
        }
    }

    #[test]
    fn rewrites_model_and_keeps_unknown_fields() {
        let body = json!({"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],
            "brand_new_param":{"x":[1,2]},"temperature":0.2});
        let (req, out) = upstream(body.clone(), "gpt-4o-2024-08-06");
        assert_eq!(req.model, "gpt-4o");
        assert!(!req.stream);
        let mut expected = body;
        expected["model"] = json!("gpt-4o-2024-08-06");
        assert_eq!(out, expected);
    }

    #[test]
    fn streams_ask_for_usage_without_losing_client_options() {
        let (req, out) = upstream(
            json!({"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}),
            "u",
        );
        assert!(req.stream && !req.client_wants_usage);
        assert_eq!(out["stream_options"], json!({"include_usage": true}));
        assert_eq!(out["model"], json!("u"));

        let (req, out) = upstream(
            json!({"model":"m","stream":true,"stream_options":{"foo":1},"messages":[{"role":"user","content":"x"}]}),
            "u",
        );
        assert!(!req.client_wants_usage);
        assert_eq!(
            out["stream_options"],
            json!({"foo":1,"include_usage": true})
        );

        let (_, out) = upstream(
            json!({"model":"m","stream":true,"stream_options":null,"messages":[{"role":"user","content":"x"}]}),
            "u",
        );
        assert_eq!(out["stream_options"], json!({"include_usage": true}));

        let (req, out) = upstream(
            json!({"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}),
            "u",
        );
        assert!(req.client_wants_usage);
        assert_eq!(out["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn replaces_messages() {
        let req = ChatRequest::parse(Bytes::from(
            json!({"messages":[{"role":"user","content":"a"}],"model":"m"}).to_string(),
        ))
        .unwrap();
        let out: Value = serde_json::from_slice(&req.upstream_body("\"x\"", Some(b"[]"))).unwrap();
        assert_eq!(out, json!({"messages":[],"model":"x"}));
    }

    #[test]
    fn prefill_appends_the_partial_answer() {
        let chat = ChatRequest::parse(Bytes::from_static(
            br#"{"model":"m","messages":[{"role":"user","content":"q"}]}"#,
        ))
        .unwrap();
        let m: Value = serde_json::from_slice(&chat.prefill_messages("alpha-1 br")).unwrap();
        assert_eq!(
            m[1],
            serde_json::json!({"role": "assistant", "content": "alpha-1 br"})
        );
    }

    #[test]
    fn refuses_bad_bodies() {
        for body in [
            "not json",
            r#"{"messages":[{"role":"user","content":"a"}]}"#,
            r#"{"model":3,"messages":[{"role":"user","content":"a"}]}"#,
            r#"{"model":"m","messages":[]}"#,
            r#"{"model":"m","messages":"hi"}"#,
            r#"{"model":"m"}"#,
            r#"{"model":"m","stream":true,"stream_options":3,"messages":[1]}"#,
            r#"{"model":"m","model":"n","messages":[1]}"#,
        ] {
            assert!(ChatRequest::parse(Bytes::from(body)).is_err(), "{body}");
        }
    }
}
