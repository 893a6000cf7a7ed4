//! What a same-dialect target gets of the client's request beyond the inner form: the client's
//! own body when it spoke a dialect other than the inner one (sent as it came, only `model`
//! rewritten), and the dialect's protocol headers and query. Never the client's credentials or
//! hop-by-hop headers: only the names listed per dialect are taken.

use std::ops::Range;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::scan;
use crate::canonical::Dialect;

/// The client's side of a request, for targets of its own dialect.
#[derive(Debug, Clone)]
pub struct ClientWire {
    /// The dialect the client spoke.
    pub dialect: Dialect,
    /// The client's body and where its `model` is, when the dialect is not the inner one.
    native: Option<(Bytes, Range<usize>)>,
    /// Protocol headers sent on (`anthropic-beta`, `anthropic-version`, `openai-beta`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The client's query string (`beta=true` on `/v1/messages`), sent on.
    pub query: Option<String>,
    /// The body for targets of other providers than the one named, when the client's own
    /// carries state only that provider can read (a Responses conversation the gateway
    /// expanded, with that provider's reasoning items: the others get it without them).
    elsewhere: Option<Box<Elsewhere>>,
    /// Why the request can be served only by a target of the client's dialect taking its
    /// body as it came (a Responses API built-in tool), for the audit path of the others.
    pub native_only: Option<String>,
}

/// The body other providers get (see [`ClientWire`]'s `elsewhere`).
#[derive(Debug, Clone)]
struct Elsewhere {
    /// The provider the client's own body is for.
    provider: String,
    body: Bytes,
    model: Range<usize>,
}

/// Where the `model` string of `body` is, when it has one that can be spliced.
fn model_range(body: &[u8]) -> Option<Range<usize>> {
    let shallow: ModelOnly<'_> = serde_json::from_slice(body).ok()?;
    let raw = shallow.model?;
    if !raw.get().starts_with('"') {
        return None;
    }
    let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
    Some(start..start + raw.get().len())
}

/// `body` with `model_json` in place of `range`.
fn splice(body: &[u8], range: &Range<usize>, model_json: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + model_json.len());
    out.extend_from_slice(&body[..range.start]);
    out.extend_from_slice(model_json.as_bytes());
    out.extend_from_slice(&body[range.end..]);
    out
}

/// The protocol headers of each dialect that a same-dialect target gets as the client sent
/// them. A client's `anthropic-version` replaces the provider's default. Each is one of
/// `api::headers::READ`, the fields the client API is given.
fn protocol_headers(dialect: Dialect) -> &'static [HeaderName] {
    static ANTHROPIC: [HeaderName; 2] = [
        HeaderName::from_static("anthropic-beta"),
        HeaderName::from_static("anthropic-version"),
    ];
    static OPENAI: [HeaderName; 1] = [HeaderName::from_static("openai-beta")];
    match dialect {
        Dialect::Anthropic => &ANTHROPIC,
        Dialect::OpenAi | Dialect::Responses => &OPENAI,
        Dialect::Gemini => &[],
    }
}

#[derive(Deserialize)]
struct ModelOnly<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
}

/// What the edge reads of the body of a client of another dialect than the inner one, in one
/// shallow pass: the rest goes on as it came, and is read into other forms only if a target
/// needs them ([`super::Forms`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The route asked for.
    pub model: String,
    /// Whether the client asked for SSE.
    pub stream: bool,
    /// Where `model` is in the body (its JSON string), for the splice.
    model_range: Range<usize>,
}

/// Why a body was refused at the edge.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("request body is not valid JSON: {0}")]
    Json(serde_json::Error),
    #[error("`model` is required and must be a string")]
    Model,
    #[error("`{0}` must be an array")]
    NotArray(&'static str),
}

#[derive(Deserialize)]
struct RawHead<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    stream: Option<bool>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
}

impl Head {
    /// Read an Anthropic Messages body: `model` (a string), `stream`, and `messages` (which
    /// must be an array; its contents are the provider's to judge, or the translation's).
    pub fn anthropic(body: &[u8]) -> Result<Head, HeadError> {
        match Head::anthropic_plain(body) {
            Some(head) => Ok(head),
            None => Head::anthropic_by_serde(body),
        }
    }

    /// Fuzzing (`fuzz/fuzz_targets/json_scan.rs`): [`Head::anthropic`] by serde_json alone,
    /// to compare with the reading that takes the scanner's first.
    #[cfg(fuzzing)]
    #[doc(hidden)]
    pub fn fuzz_anthropic_by_serde(body: &[u8]) -> Result<Head, HeadError> {
        Head::anthropic_by_serde(body)
    }

    /// [`Head::anthropic`] by serde_json alone (which says why a body is refused).
    fn anthropic_by_serde(body: &[u8]) -> Result<Head, HeadError> {
        let raw: RawHead<'_> = serde_json::from_slice(body).map_err(HeadError::Json)?;
        if !raw.messages.is_some_and(|m| m.get().starts_with('[')) {
            return Err(HeadError::NotArray("messages"));
        }
        Head::of(body, raw.model, raw.stream)
    }

    /// [`Head::anthropic`] by the scanner, for a plain body it accepts (see `super::scan`):
    /// `None` for any other, which serde_json then refuses saying why, or accepts. An agent's
    /// turn is tens of kilobytes (its history, its tools), which serde_json read at ~6
    /// instructions a byte and the scanner at ~4 (`BODY=... DIALECT=anthropic
    /// bench/instructions`).
    fn anthropic_plain(body: &[u8]) -> Option<Head> {
        let [model, stream, messages] = scan::fields(body, ["model", "stream", "messages"])?;
        if body.get(messages?.start) != Some(&b'[') {
            return None;
        }
        let stream = scan::flag(body, stream)?.unwrap_or(false);
        let model_range = model.filter(|m| body.get(m.start) == Some(&b'"'))?;
        let model = super::chat::model_text(std::str::from_utf8(&body[model_range.clone()]).ok()?)?;
        Some(Head {
            model,
            stream,
            model_range,
        })
    }

    /// A head from what a dialect's own shallow read found: `model` must be a JSON string.
    pub fn of(
        body: &[u8],
        model: Option<&RawValue>,
        stream: Option<bool>,
    ) -> Result<Head, HeadError> {
        let raw = model
            .filter(|m| m.get().starts_with('"'))
            .ok_or(HeadError::Model)?;
        let model: String = serde_json::from_str(raw.get()).map_err(|_| HeadError::Model)?;
        let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
        Ok(Head {
            model,
            stream: stream.unwrap_or(false),
            model_range: start..start + raw.get().len(),
        })
    }
}

impl ClientWire {
    /// An OpenAI client's: its body is the inner form already; `openai-beta` goes on.
    pub fn openai(headers: &HeaderMap) -> ClientWire {
        ClientWire {
            dialect: Dialect::OpenAi,
            native: None,
            headers: Self::take_headers(Dialect::OpenAi, headers),
            query: None,
            elsewhere: None,
            native_only: None,
        }
    }

    /// A client of `dialect` (not OpenAI) whose `body` targets of that dialect get as it came.
    /// `None` when the body has no `model` string where one can be spliced.
    pub fn native(
        dialect: Dialect,
        body: Bytes,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Option<ClientWire> {
        let range = model_range(&body)?;
        Some(ClientWire {
            dialect,
            native: Some((body, range)),
            headers: Self::take_headers(dialect, headers),
            query: query.filter(|q| !q.is_empty()).map(str::to_owned),
            elsewhere: None,
            native_only: None,
        })
    }

    /// A client of `dialect` (not OpenAI) whose `body`, read at the edge as `head`, targets of
    /// that dialect get as it came.
    pub fn native_read(
        dialect: Dialect,
        body: Bytes,
        head: &Head,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> ClientWire {
        ClientWire {
            dialect,
            native: Some((body, head.model_range.clone())),
            headers: Self::take_headers(dialect, headers),
            query: query.filter(|q| !q.is_empty()).map(str::to_owned),
            elsewhere: None,
            native_only: None,
        }
    }

    /// The client's body is for targets of `provider` only; the others get `body` (which must
    /// have a `model` string, else they get none).
    pub fn elsewhere(mut self, provider: &str, body: Bytes) -> ClientWire {
        self.elsewhere = model_range(&body).map(|model| {
            Box::new(Elsewhere {
                provider: provider.to_owned(),
                body,
                model,
            })
        });
        self
    }

    fn take_headers(dialect: Dialect, headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
        let names = protocol_headers(dialect);
        // One pass comparing names beats a hashed lookup per name: this runs for every
        // request, and a client sends a handful of headers.
        headers
            .iter()
            .filter(|(name, _)| names.contains(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect()
    }

    /// The client's own body for a target of `dialect` at `provider` with `model_json` (a JSON
    /// string) as its model, when the client spoke that dialect and it is not the inner one.
    pub fn native_body(
        &self,
        dialect: Dialect,
        provider: &str,
        model_json: &str,
    ) -> Option<Vec<u8>> {
        let (body, range) = self.native.as_ref().filter(|_| dialect == self.dialect)?;
        if let Some(e) = self.elsewhere.as_deref().filter(|e| e.provider != provider) {
            return Some(splice(&e.body, &e.model, model_json));
        }
        Some(splice(body, range, model_json))
    }
}

impl Default for ClientWire {
    fn default() -> Self {
        ClientWire {
            dialect: Dialect::OpenAi,
            native: None,
            headers: Vec::new(),
            query: None,
            elsewhere: None,
            native_only: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_client_body_goes_on_with_only_its_model_rewritten() {
        let body = Bytes::from_static(
            br#"{"model":"fast","system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[],"x_new":1}"#,
        );
        let mut h = HeaderMap::new();
        h.insert(
            "anthropic-beta",
            "context-management-2025-06-27".parse().unwrap(),
        );
        h.append(
            "anthropic-beta",
            "interleaved-thinking-2025-05-14".parse().unwrap(),
        );
        h.insert("x-api-key", "sk-client".parse().unwrap());
        h.insert("connection", "keep-alive".parse().unwrap());
        let wire = ClientWire::native(Dialect::Anthropic, body, &h, Some("beta=true")).unwrap();
        let out = wire
            .native_body(Dialect::Anthropic, "anthropic", "\"claude-x\"")
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"model":"claude-x","system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[],"x_new":1}"#
        );
        assert_eq!(
            wire.native_body(Dialect::OpenAi, "anthropic", "\"m\""),
            None
        );
        let names: Vec<&str> = wire.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["anthropic-beta", "anthropic-beta"],
            "no credentials, no hop-by-hop"
        );
        assert_eq!(wire.query.as_deref(), Some("beta=true"));
        assert!(
            ClientWire::native(Dialect::Anthropic, Bytes::from_static(b"{}"), &h, None).is_none()
        );
    }

    /// The client API is given only the fields of `api::headers::READ` (`app::conn::h1`):
    /// the protocol fields sent on are among them.
    #[test]
    fn the_protocol_fields_are_among_those_the_client_api_is_given() {
        for dialect in [Dialect::OpenAi, Dialect::Anthropic, Dialect::Responses] {
            for name in protocol_headers(dialect) {
                assert!(crate::api::headers::READ.contains(name), "{name}");
            }
        }
    }

    /// The scanner reads an Anthropic head as serde_json does, or leaves the body to it.
    #[test]
    fn an_anthropic_head_reads_alike_by_the_scanner_and_by_serde_json() {
        let messages = r#""messages":[{"role":"user","content":"a \"quoted\" \u00e9 text"}]"#;
        let mut taken = 0;
        for body in [
            format!(r#"{{"model":"fast",{messages}}}"#),
            format!(r#"{{{messages},"model":"fast","stream":true,"max_tokens":9}}"#),
            format!(r#"{{"model":"a\u0062\"c","stream":false,{messages}}}"#),
            format!(r#"{{"model":"fast","stream":null,{messages}}}"#),
            format!(r#"{{"model":"fést","system":[{{"type":"text","text":"s"}}],{messages}}}"#),
            format!(r#"{{"model":"fast","stream":"yes",{messages}}}"#),
            format!(r#"{{"model":7,{messages}}}"#),
            format!(r#"{{"model":null,{messages}}}"#),
            format!(r#"{{{messages}}}"#),
            r#"{"model":"fast","messages":{}}"#.to_owned(),
            r#"{"model":"fast","messages":null}"#.to_owned(),
            r#"{"model":"fast"}"#.to_owned(),
            format!(r#"{{"model":"a","model":"b",{messages}}}"#),
            format!(r#"{{"mod\u0065l":"a",{messages}}}"#),
            format!(r#"{{"model":"fast",{messages},}}"#),
            format!(r#"{{"model":"fast",{messages}}} x"#),
        ] {
            let by_serde = Head::anthropic_by_serde(body.as_bytes());
            let by_scanner = Head::anthropic_plain(body.as_bytes());
            if let Some(head) = &by_scanner {
                taken += 1;
                assert_eq!(Some(head), by_serde.as_ref().ok(), "{body}");
            }
            let either = Head::anthropic(body.as_bytes());
            assert_eq!(either.ok(), by_serde.ok(), "{body}");
        }
        assert_eq!(taken, 5, "the plain bodies are the scanner's");
    }

    #[test]
    fn an_anthropic_head_is_read_in_one_pass_and_the_same_splice_follows() {
        let body = Bytes::from_static(
            br#"{"messages":[{"role":"user","content":"hi"}],"stream":true,"model":"fast","max_tokens":9}"#,
        );
        let head = Head::anthropic(&body).unwrap();
        assert_eq!((head.model.as_str(), head.stream), ("fast", true));
        let wire = ClientWire::native_read(
            Dialect::Anthropic,
            body.clone(),
            &head,
            &HeaderMap::new(),
            None,
        );
        let out = wire
            .native_body(Dialect::Anthropic, "p", "\"claude\"")
            .unwrap();
        assert_eq!(
            out,
            br#"{"messages":[{"role":"user","content":"hi"}],"stream":true,"model":"claude","max_tokens":9}"#
        );
        for bad in [
            &b"not json"[..],
            br#"{"messages":[]}"#,
            br#"{"model":7,"messages":[]}"#,
            br#"{"model":"m","messages":{}}"#,
            br#"{"model":"m"}"#,
            br#"{"model":"m","messages":[],"stream":"yes"}"#,
        ] {
            assert!(
                Head::anthropic(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
