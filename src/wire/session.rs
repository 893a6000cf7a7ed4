//! A request's session: which conversation it belongs to, so a weighted or adaptive route can
//! keep one conversation on one target (its prompt cache stays warm) and the audit can tie an
//! agent's turns together.
//!
//! The key is, in this order: the client's `x-switchyard-session` header; the client's own
//! conversation hints (OpenAI and Responses `prompt_cache_key`, then `user`; Anthropic
//! `metadata.user_id`); else a hash of the conversation's system prompt and first user
//! message, which every turn of one conversation repeats. Hashes are FNV-1a, the same on
//! every replica and every build.

use std::borrow::Cow;

use http::HeaderValue;
use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::canonical::Dialect;

/// The request header that names the session.
pub const HEADER: &str = "x-switchyard-session";

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

/// FNV-1a over `bytes`, continuing from `h`.
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// FNV-1a's starting value.
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

impl Session {
    fn of(key: &str, source: Source) -> Option<Session> {
        let key = key.trim();
        if key.is_empty() {
            return None;
        }
        let hash = fnv1a(FNV_START, key.as_bytes());
        let key = if key.len() > MAX_KEY {
            format!("{}:{hash:016x}", source.as_str())
        } else {
            key.to_owned()
        };
        Some(Session { key, hash, source })
    }
}

#[derive(Deserialize)]
struct Hints<'a> {
    #[serde(borrow)]
    prompt_cache_key: Option<Cow<'a, str>>,
    #[serde(borrow)]
    user: Option<Cow<'a, str>>,
    #[serde(borrow)]
    metadata: Option<Metadata<'a>>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow)]
    user_id: Option<Cow<'a, str>>,
}

/// The session of a request: `header` is its `x-switchyard-session`, `body` what the client
/// sent in `dialect`, `messages` the inner (OpenAI) form's `messages` array.
pub fn session(
    header: Option<&HeaderValue>,
    dialect: Dialect,
    body: &[u8],
    messages: &[u8],
) -> Option<Session> {
    if let Some(s) = header
        .and_then(|v| v.to_str().ok())
        .and_then(|v| Session::of(v, Source::Header))
    {
        return Some(s);
    }
    if dialect != Dialect::Gemini {
        // Fields of another type than expected are not hints: the request is read as it is.
        if let Ok(h) = serde_json::from_slice::<Hints<'_>>(body) {
            let hint = match dialect {
                Dialect::Anthropic => h.metadata.and_then(|m| m.user_id),
                _ => h.prompt_cache_key.or(h.user),
            };
            if let Some(s) = hint.and_then(|k| Session::of(&k, Source::Client)) {
                return Some(s);
            }
        }
    }
    let (system, user) = first_turns(messages);
    let user = user?;
    let mut h = FNV_START;
    if let Some(system) = system {
        h = fnv1a(h, system.get().as_bytes());
    }
    h = fnv1a(h, &[0xff]);
    h = fnv1a(h, user.get().as_bytes());
    Some(Session {
        key: format!("prompt:{h:016x}"),
        hash: h,
        source: Source::Prompt,
    })
}

#[derive(Deserialize)]
struct Role<'a> {
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
}

/// The first system (or developer) message and the first user message of an OpenAI
/// `messages` array, read no further than the latter.
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
            while let Some(m) = seq.next_element::<&'de RawValue>()? {
                let role = serde_json::from_str::<Role<'_>>(m.get())
                    .ok()
                    .and_then(|r| r.role);
                match role.as_deref() {
                    Some("system" | "developer") if self.out.0.is_none() => self.out.0 = Some(m),
                    Some("user") => {
                        self.out.1 = Some(m);
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

    fn of(dialect: Dialect, body: &str, messages: &str) -> Option<Session> {
        session(None, dialect, body.as_bytes(), messages.as_bytes())
    }

    #[test]
    fn the_header_comes_first_then_the_clients_hint_then_the_prompt() {
        let h = HeaderValue::from_static("task-7");
        let body = r#"{"prompt_cache_key":"conv-1","user":"u"}"#;
        let msgs = r#"[{"role":"user","content":"hi"}]"#;
        let s = session(Some(&h), Dialect::OpenAi, body.as_bytes(), msgs.as_bytes());
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
    fn a_long_key_is_kept_as_its_hash() {
        let long = "k".repeat(1000);
        let h = HeaderValue::from_str(&long).ok();
        let s = session(h.as_ref(), Dialect::OpenAi, b"{}", b"[]");
        let key = s.map(|s| s.key).unwrap_or_default();
        assert!(key.starts_with("header:") && key.len() < 40, "{key}");
    }
}
