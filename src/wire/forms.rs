//! A client request in the forms the gateway may need of it, each made once and only when a
//! target needs it.
//!
//! An OpenAI client's body is the inner form already ([`ChatRequest`], read shallowly at the
//! edge); its canonical form is read from it on first use. Another client's body (Anthropic
//! Messages, the Responses API) goes as it came to a target of its own dialect
//! ([`super::ClientWire`]), so the edge reads only the few fields it needs of it; the canonical
//! form (for a target of another dialect, trimming, continuation) is read from that body on
//! first use, and the inner form is written from the canonical one on first use after that.
//! A same-dialect request that fits and never fails over makes neither.
//!
//! A body that cannot be read into the canonical form (valid JSON of the wrong shape) has
//! none, and says why: the attempt that needed it fails as untranslatable with that reason,
//! while a target of the client's own dialect still gets the body as it came (its provider
//! answers for it).

use std::sync::OnceLock;

use bytes::Bytes;

use super::chat::ChatRequest;
use crate::canonical::{self, Dialect};

/// See the module docs.
#[derive(Debug)]
pub struct Forms {
    /// The client's body: the inner form itself, or one of another dialect.
    client: Client,
    /// The canonical form, or why there is none. Boxed: most requests never make it, and
    /// each `Forms` is moved into its `Arc` at the edge, so its size is copied per request.
    canonical: OnceLock<Result<Box<canonical::ChatRequest>, String>>,
}

/// What the client sent, as the edge read it.
#[derive(Debug)]
enum Client {
    /// An OpenAI client's request: the inner form, held as it is (a `OnceLock` set at once
    /// cost its `Once`, and two copies of the request, ~190 instructions a request).
    OpenAi(ChatRequest),
    /// A body of another dialect, which the canonical form is read from; the inner form is
    /// made from that on first use.
    Native {
        dialect: Dialect,
        body: Bytes,
        chat: OnceLock<Result<ChatRequest, String>>,
    },
}

impl Forms {
    /// An OpenAI client's request, already read.
    pub fn openai(chat: ChatRequest) -> Forms {
        Forms {
            client: Client::OpenAi(chat),
            canonical: OnceLock::new(),
        }
    }

    /// The body of a client of `dialect` (not OpenAI), read only when a form is asked for.
    pub fn native(dialect: Dialect, body: Bytes) -> Forms {
        Forms {
            client: Client::Native {
                dialect,
                body,
                chat: OnceLock::new(),
            },
            canonical: OnceLock::new(),
        }
    }

    /// The canonical form, made on first use; or why the body cannot be read into it.
    pub fn canonical(&self) -> Result<&canonical::ChatRequest, &str> {
        self.canonical
            .get_or_init(|| {
                let read = match &self.client {
                    Client::Native { dialect, body, .. } => dialect.parse_request(body),
                    Client::OpenAi(chat) => canonical::openai::parse_request(chat.body()),
                };
                read.map(Box::new).map_err(|e| e.to_string())
            })
            .as_ref()
            .map(|canon| &**canon)
            .map_err(String::as_str)
    }

    /// The inner (OpenAI) form, made on first use; or why the body cannot be read into it. A
    /// client of another dialect always gets its stream's usage (its dialect reports usage on
    /// every stream), so the inner form asks for it.
    pub fn chat(&self) -> Result<&ChatRequest, &str> {
        let chat = match &self.client {
            Client::OpenAi(chat) => return Ok(chat),
            Client::Native { chat, .. } => chat,
        };
        chat.get_or_init(|| {
            let canon = self.canonical().map_err(str::to_owned)?;
            let inner =
                canonical::openai::write_request(canon, &canon.model).map_err(|e| e.to_string())?;
            let mut chat = ChatRequest::parse(Bytes::from(inner)).map_err(|e| e.to_string())?;
            chat.client_wants_usage = true;
            Ok(chat)
        })
        .as_ref()
        .map_err(String::as_str)
    }

    /// The client's body as it came, when it is not the inner form itself.
    pub fn client_body(&self) -> Option<&Bytes> {
        match &self.client {
            Client::OpenAi(_) => None,
            Client::Native { body, .. } => Some(body),
        }
    }

    /// The length of the client's body: what the context window's no-count shortcut reads
    /// (any dialect's bytes are at least its tokens).
    pub fn len(&self) -> usize {
        match &self.client {
            Client::OpenAi(chat) => chat.body().len(),
            Client::Native { body, .. } => body.len(),
        }
    }

    /// Whether the client's body is empty (never, for a request that was read).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_anthropic_body_is_read_only_when_a_form_is_asked_for() {
        let body = Bytes::from_static(
            br#"{"model":"claude","max_tokens":8,"system":"be brief","messages":[{"role":"user","content":"hi"}]}"#,
        );
        let forms = Forms::native(Dialect::Anthropic, body.clone());
        let Client::Native { chat, .. } = &forms.client else {
            panic!("an Anthropic body is a native one");
        };
        assert!(forms.canonical.get().is_none() && chat.get().is_none());
        assert_eq!(forms.len(), body.len());
        assert_eq!(forms.client_body(), Some(&body));
        let chat = forms.chat().unwrap();
        assert_eq!(chat.model, "claude");
        assert!(chat.client_wants_usage);
        let inner: serde_json::Value = serde_json::from_slice(chat.body()).unwrap();
        assert_eq!(inner["messages"][0]["role"], "system");
        assert_eq!(forms.canonical().unwrap().model, "claude");
    }

    #[test]
    fn a_body_of_the_wrong_shape_has_no_forms() {
        let forms = Forms::native(
            Dialect::Anthropic,
            Bytes::from_static(br#"{"model":"claude","messages":"not a list"}"#),
        );
        let why = forms.canonical().unwrap_err().to_owned();
        assert!(why.contains("messages"), "{why}");
        assert_eq!(forms.chat().unwrap_err(), why);
    }

    #[test]
    fn an_openai_request_is_its_own_inner_form() {
        let chat = ChatRequest::parse(Bytes::from_static(
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        ))
        .unwrap();
        let body = chat.body().clone();
        let forms = Forms::openai(chat);
        assert_eq!(forms.chat().unwrap().model, "m");
        assert_eq!(forms.chat().unwrap().body(), &body);
        assert_eq!(forms.len(), body.len());
        assert!(forms.client_body().is_none());
        assert!(forms.canonical.get().is_none(), "made only when asked for");
        assert_eq!(forms.canonical().unwrap().model, "m");
    }
}
