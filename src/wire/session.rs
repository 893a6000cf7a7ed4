//! A request's session: which conversation it belongs to, so a weighted or adaptive route can
//! keep one conversation on one target (its prompt cache stays warm) and the audit can tie an
//! agent's turns together.
//!
//! The key is, in this order: the client's `x-switchyard-session` header; the client's own
//! conversation hints (OpenAI and Responses `prompt_cache_key`, then `user`; Anthropic
//! `metadata.user_id`); else a hash of the conversation's system prompt and first user
//! message, which every turn of one conversation repeats. Hashes ([`hash`]) are the same on
//! every replica and every build, and cheap: a long system prompt is hashed by its first 8 KiB,
//! its last 1 KiB and its length, eight bytes at a time.

use std::borrow::Cow;

use http::HeaderValue;
use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::canonical::Dialect;

/// The request header that names the session (a typed name: a `&str` is parsed on every
/// lookup).
pub const HEADER: http::HeaderName = http::HeaderName::from_static("x-switchyard-session");

/// Longest key kept as sent; a longer one is kept as its hash.
const MAX_KEY: usize = 256;

/// A request's session key and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub key: String,
    pub hash: u64,
    pub source: Source,
}

/// Where a session key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `x-switchyard-session`.
    Header,
    /// The client's own hint (`prompt_cache_key`, `user`, `metadata.user_id`).
    Client,
    /// The hash of the system prompt and first user message.
    Prompt,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Header => "header",
            Source::Client => "client",
            Source::Prompt => "prompt",
        }
    }
}

/// A 64-bit hash of `bytes`, continuing from `h`: eight bytes at a time, each folded in with a
/// multiply, the length last, then splitmix64's finaliser. Not for adversaries (a client can
/// pick its session anyway); fast, and the same everywhere.
pub fn hash(mut h: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h.rotate_left(23) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    let rest = words.remainder();
    let mut b = [0u8; 8];
    b[..rest.len()].copy_from_slice(rest);
    h = (h.rotate_left(23) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    h = (h ^ bytes.len() as u64).wrapping_mul(K);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// [`hash`]'s starting value.
pub const HASH_START: u64 = 0x243f_6a88_85a3_08d3;

/// Bytes of a long message that its hash reads: the first [`HEAD`] and the last [`TAIL`].
const HEAD: usize = 8 * 1024;
const TAIL: usize = 1024;

/// The hash of a message's content, bounded: a long one by its head, tail and length.
fn hash_bounded(h: u64, bytes: &[u8]) -> u64 {
    if bytes.len() <= HEAD + TAIL {
        return hash(h, bytes);
    }
    let h = hash(h, &bytes[..HEAD]);
    hash(h, &bytes[bytes.len() - TAIL..])
}

impl Session {
    fn of(key: &str, source: Source) -> Option<Session> {
        let key = key.trim();
        if key.is_empty() {
            return None;
        }
        let hash = hash(HASH_START, key.as_bytes());
        let key = if key.len() > MAX_KEY {
            format!("{}:{hash:016x}", source.as_str())
        } else {
            key.to_owned()
        };
        Some(Session { key, hash, source })
    }
}

/// What a non-OpenAI client's body says of its session: its own hint, and its first turns.
#[derive(Deserialize)]
struct Native<'a> {
    #[serde(borrow)]
    prompt_cache_key: Option<Cow<'a, str>>,
    #[serde(borrow)]
    user: Option<Cow<'a, str>>,
    #[serde(borrow)]
    metadata: Option<Metadata<'a>>,
    /// Anthropic's system prompt, and its messages.
    #[serde(borrow)]
    system: Option<&'a RawValue>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    /// The Responses API's system prompt, and its input (a string or items).
    #[serde(borrow)]
    instructions: Option<&'a RawValue>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow)]
    user_id: Option<Cow<'a, str>>,
}

/// The session of a request: `header` is its `x-switchyard-session`, `forms` what the client
/// sent in `dialect`. An OpenAI client's hint was read with the rest of its body
/// (`ChatRequest::hint_json`); another dialect's body is read here, once, for its hint and its
/// first turns (its inner form is not made for this).
pub fn session(
    header: Option<&HeaderValue>,
    dialect: Dialect,
    forms: &crate::wire::Forms,
) -> Option<Session> {
    if let Some(s) = header
        .and_then(|v| v.to_str().ok())
        .and_then(|v| Session::of(v, Source::Header))
    {
        return Some(s);
    }
    // Fields of another type than expected are not hints: the request is read as it is.
    let Some(body) = forms.client_body() else {
        let chat = forms.chat().ok()?;
        let hint =
            (chat.hint_json()).and_then(|raw| serde_json::from_slice::<Cow<'_, str>>(raw).ok());
        if let Some(s) = hint.and_then(|k| Session::of(&k, Source::Client)) {
            return Some(s);
        }
        let (system, user) = first_turns(chat.messages_json());
        return prompt_session(system, user);
    };
    let native: Native<'_> = serde_json::from_slice(body).ok()?;
    let hint = match dialect {
        Dialect::Anthropic => native.metadata.and_then(|m| m.user_id),
        _ => native.prompt_cache_key.or(native.user),
    };
    if let Some(s) = hint.and_then(|k| Session::of(&k, Source::Client)) {
        return Some(s);
    }
    let (system, user) = match dialect {
        Dialect::Anthropic => {
            let (_, user) = native
                .messages
                .map_or((None, None), |m| first_turns(m.get().as_bytes()));
            (native.system, user)
        }
        _ => match native.input {
            Some(input) if input.get().starts_with('"') => (native.instructions, Some(input)),
            Some(input) => {
                let (system, user) = first_turns(input.get().as_bytes());
                (native.instructions.or(system), user)
            }
            None => (native.instructions, None),
        },
    };
    prompt_session(system, user)
}

/// The session of a conversation without a key: the hash of its first turns (the system
/// prompt, if any, and the first user message, each as the client wrote it).
fn prompt_session(system: Option<&RawValue>, user: Option<&RawValue>) -> Option<Session> {
    let user = user?;
    let mut h = HASH_START;
    if let Some(system) = system {
        h = hash_bounded(h, system.get().as_bytes());
    }
    h = hash(h, &[0xff]);
    h = hash_bounded(h, user.get().as_bytes());
    Some(Session {
        key: format!("prompt:{h:016x}"),
        hash: h,
        source: Source::Prompt,
    })
}

/// A message as far as its session needs it.
#[derive(Deserialize)]
struct Turn<'a> {
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
}

/// The contents of the first system (or developer) message and of the first user message of
/// an array of messages (OpenAI `messages`, Anthropic `messages`, Responses `input` items),
/// each message read once, none after the first user message.
fn first_turns(messages: &[u8]) -> (Option<&RawValue>, Option<&RawValue>) {
    struct Walk<'a, 'o> {
        out: &'o mut (Option<&'a RawValue>, Option<&'a RawValue>),
    }
    impl<'de: 'a, 'a> Visitor<'de> for Walk<'a, '_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an array of messages")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(m) = seq.next_element::<Turn<'de>>()? {
                let Some(content) = m.content else { continue };
                match m.role.as_deref() {
                    Some("system" | "developer") if self.out.0.is_none() => {
                        self.out.0 = Some(content);
                    }
                    Some("user") => {
                        self.out.1 = Some(content);
                        // Stop here: the rest of a long conversation is not read. The
                        // deserializer's complaint about the unread rest is expected.
                        return Err(serde::de::Error::custom("found"));
                    }
                    _ => {}
                }
            }
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(())
        }
    }
    let mut out = (None, None);
    let mut de = serde_json::Deserializer::from_slice(messages);
    let _ = serde::Deserializer::deserialize_seq(&mut de, Walk { out: &mut out });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `hash(HASH_START, b"conversation-42")`, as every build must compute it.
    const PINNED: u64 = 13_263_976_731_214_449_095;

    /// The session of a request of `dialect` with this `body`; an OpenAI one's `messages` are
    /// these (another dialect's are in its body).
    fn of(dialect: Dialect, body: &str, messages: &str) -> Option<Session> {
        session(None, dialect, &forms(dialect, body, messages))
    }

    fn forms(dialect: Dialect, body: &str, messages: &str) -> crate::wire::Forms {
        if dialect != Dialect::OpenAi {
            return crate::wire::Forms::native(dialect, bytes::Bytes::from(body.to_owned()));
        }
        let mut v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        v["model"] = "m".into();
        v["messages"] = serde_json::from_str(messages).unwrap_or_default();
        let chat = crate::wire::ChatRequest::parse(bytes::Bytes::from(v.to_string()))
            .unwrap_or_else(|e| panic!("{e}"));
        crate::wire::Forms::openai(chat)
    }

    #[test]
    fn the_header_comes_first_then_the_clients_hint_then_the_prompt() {
        let h = HeaderValue::from_static("task-7");
        let body = r#"{"prompt_cache_key":"conv-1","user":"u"}"#;
        let msgs = r#"[{"role":"user","content":"hi"}]"#;
        let s = session(
            Some(&h),
            Dialect::OpenAi,
            &forms(Dialect::OpenAi, body, msgs),
        );
        assert_eq!(
            s.map(|s| (s.key, s.source)),
            Some(("task-7".into(), Source::Header))
        );
        let s = of(Dialect::Responses, body, msgs).map(|s| s.key);
        assert_eq!(s.as_deref(), Some("conv-1"));
        let s = of(Dialect::OpenAi, r#"{"user":"u-9"}"#, msgs).map(|s| s.key);
        assert_eq!(s.as_deref(), Some("u-9"));
        let s = of(
            Dialect::Anthropic,
            r#"{"metadata":{"user_id":"sess-3"},"user":"x"}"#,
            msgs,
        );
        assert_eq!(
            s.map(|s| (s.key, s.source)),
            Some(("sess-3".into(), Source::Client))
        );
        let s = of(Dialect::OpenAi, r#"{"user":5}"#, msgs).map(|s| s.source);
        assert_eq!(
            s,
            Some(Source::Prompt),
            "a hint of the wrong type is no hint"
        );
    }

    #[test]
    fn turns_of_one_conversation_share_the_prompt_hash_and_other_conversations_do_not() {
        let turn1 = r#"[{"role":"system","content":"You are terse."},{"role":"user","content":"Fix the bug"}]"#;
        let turn2 = r#"[{"role":"system","content":"You are terse."},{"role":"user","content":"Fix the bug"},{"role":"assistant","content":"Done"},{"role":"user","content":"Thanks"}]"#;
        let other = r#"[{"role":"system","content":"You are terse."},{"role":"user","content":"Write docs"}]"#;
        let a = of(Dialect::OpenAi, "{}", turn1).map(|s| s.hash);
        let b = of(Dialect::OpenAi, "{}", turn2).map(|s| s.hash);
        let c = of(Dialect::OpenAi, "{}", other).map(|s| s.hash);
        assert!(a.is_some());
        assert_eq!(a, b);
        assert_ne!(a, c);
        // No user message: no session.
        assert_eq!(
            of(
                Dialect::OpenAi,
                "{}",
                r#"[{"role":"system","content":"x"}]"#
            ),
            None
        );
    }

    #[test]
    fn an_anthropic_or_responses_conversation_is_hashed_from_its_own_body() {
        let system = "You are terse.";
        let openai =
            json!([{"role": "system", "content": system}, {"role": "user", "content": "Fix it"}]);
        let anthropic = |later: serde_json::Value| {
            let mut messages = vec![json!({"role": "user", "content": "Fix it"})];
            messages.extend(later.as_array().cloned().unwrap_or_default());
            json!({"model": "m", "system": system, "messages": messages}).to_string()
        };
        let a = of(Dialect::Anthropic, &anthropic(json!([])), "").map(|s| s.hash);
        let later = json!([{"role": "assistant", "content": "Done"}, {"role": "user", "content": "Thanks"}]);
        let b = of(Dialect::Anthropic, &anthropic(later), "").map(|s| s.hash);
        // The same first turns hash alike in every dialect when they are written alike.
        let o = of(Dialect::OpenAi, "{}", &openai.to_string()).map(|s| s.hash);
        assert!(a.is_some());
        assert_eq!(a, b);
        assert_eq!(a, o);
        let r = json!({"model": "m", "instructions": system, "input": "Fix it"}).to_string();
        assert_eq!(of(Dialect::Responses, &r, "").map(|s| s.hash), o);
        let items = json!({"model": "m", "instructions": system,
            "input": [{"type": "message", "role": "user", "content": "Fix it"}]});
        assert_eq!(
            of(Dialect::Responses, &items.to_string(), "").map(|s| s.hash),
            o
        );
        let other = json!({"model": "m", "input": "Write docs"}).to_string();
        assert_ne!(of(Dialect::Responses, &other, "").map(|s| s.hash), o);
    }

    #[test]
    fn the_hash_is_pinned_and_long_prompts_are_read_by_head_and_tail() {
        // Replicas, and a gateway after an upgrade, must put a session where it was.
        assert_eq!(hash(HASH_START, b"conversation-42"), PINNED);
        assert_ne!(hash(HASH_START, b"a"), hash(HASH_START, b"a\0"));
        let long = |head: char, tail: char| {
            let text = format!("{head}{}{tail}", "x".repeat(100_000));
            let msgs =
                json!([{"role": "system", "content": text}, {"role": "user", "content": "go"}]);
            of(Dialect::OpenAi, "{}", &msgs.to_string()).map(|s| s.hash)
        };
        assert_eq!(long('a', 'z'), long('a', 'z'));
        assert_ne!(long('a', 'z'), long('b', 'z'), "the head counts");
        assert_ne!(long('a', 'z'), long('a', 'y'), "the tail counts");
    }

    #[test]
    fn a_long_key_is_kept_as_its_hash() {
        let long = "k".repeat(1000);
        let h = HeaderValue::from_str(&long).ok();
        let msgs = r#"[{"role":"user","content":"hi"}]"#;
        let s = session(
            h.as_ref(),
            Dialect::OpenAi,
            &forms(Dialect::OpenAi, "{}", msgs),
        );
        let key = s.map(|s| s.key).unwrap_or_default();
        assert!(key.starts_with("header:") && key.len() < 40, "{key}");
    }
}
