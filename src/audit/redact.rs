//! Secrets out of stored text and out of what is sent to clients. Bodies (with
//! `audit.bodies = true`) and error messages pass through [`Redactor::redact`] in the writer
//! task, off the request path, before they are stored; the error answers a client gets (a
//! provider's client error passed through, a failure's message, a stream's error event) pass
//! through the same redactor at the edge, so a provider that echoes its credential does not
//! hand it to the client. One redactor per config, rebuilt on reload (`routing::Routing`).
//! What is replaced by `[REDACTED]`:
//! - the configured secrets themselves: provider API keys, client keys and admin keys,
//!   wherever they appear;
//! - credentials by their shape: OpenAI / Anthropic style `sk-...` keys, `Bearer` tokens,
//!   Google `AIza...` keys, AWS access key ids, GitHub and Slack tokens, PEM private keys;
//! - the string value of a JSON field whose name says it holds a secret (`api_key`,
//!   `password`, `secret`, `token`, `authorization`, ...).
//!
//! Shapes catch what a user pastes into a prompt or a tool returns; they cannot catch a secret
//! with no recognisable form, which is why bodies stay off by default.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::bytes::{Captures, Regex, RegexBuilder};

/// What replaces a secret.
pub const MASK: &str = "[REDACTED]";

/// Configured secrets shorter than this are not searched for (they would mask ordinary text).
const MIN_SECRET_LEN: usize = 8;

/// Credentials by their shape.
const SHAPES: &str = concat!(
    r"sk-[A-Za-z0-9_\-]{16,}",
    r"|(?i:bearer)[ \t]+[A-Za-z0-9\-._~+/]{16,}=*",
    r"|AIza[0-9A-Za-z_\-]{35}",
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}",
    r"|gh[pousr]_[A-Za-z0-9]{36,}",
    r"|github_pat_[A-Za-z0-9_]{22,}",
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}",
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----(?s:.)*?-----END [A-Z ]*PRIVATE KEY-----",
);

/// Field names that say a secret follows.
macro_rules! secret_names {
    () => {
        "(?i:api[_-]?key|apikey|x-api-key|password|passwd|secret|client[_-]?secret|token|\
         access[_-]?token|refresh[_-]?token|auth[_-]?token|authorization|private[_-]?key)"
    };
}

/// A JSON string field named like a secret: in the body itself (groups 1, 2: up to the value's
/// opening quote, the value), or escaped once inside a JSON string such as a tool call's
/// `arguments` (groups 3, 4).
const FIELDS: &str = concat!(
    r#"(""#,
    secret_names!(),
    r#""\s*:\s*")((?:[^"\\]|\\.)*)"#,
    r#"|(\\""#,
    secret_names!(),
    r#"\\"\s*:\s*\\")((?:[^"\\]|\\[^"])*)"#,
);

/// The patterns, compiled on first use (a gateway that never stores a body or an error never
/// pays for them).
static SHAPES_RE: LazyLock<Regex> = LazyLock::new(|| compile(SHAPES));
static FIELDS_RE: LazyLock<Regex> = LazyLock::new(|| compile(FIELDS));

/// Byte-oriented, ASCII-only patterns (Unicode classes compile into larger UTF-8 automata) with
/// a small lazy-DFA cache: this runs on a few records, off the request path. Every match starts
/// and ends at an ASCII byte, so what is left around a mask stays UTF-8.
fn compile(pattern: &str) -> Regex {
    RegexBuilder::new(pattern)
        .unicode(false)
        .dfa_size_limit(256 * 1024)
        .build()
        .unwrap_or_else(|_| never())
}

/// Text back from a replacement (always UTF-8, see [`compile`]; lossy if not).
fn utf8(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The redactor the audit writer uses: the routing table's, swapped in on reload (the
/// gateway's state holds the same cell, so a reload reaches a writer started before it).
pub type RedactorCell = std::sync::Arc<arc_swap::ArcSwap<Redactor>>;

/// Masks secrets in text; made with each routing table (at start and on reload).
#[derive(Debug)]
pub struct Redactor {
    /// The configured secrets, longest first (so a key that contains another is masked whole).
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for these configured secrets (provider and client keys).
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `self` in a [`RedactorCell`] of its own.
    pub fn cell(self) -> RedactorCell {
        std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(self))
    }

    /// No configured secrets (shapes and secret-named fields are still masked): for records
    /// with no text to mask, so that the request path never loads the current redactor.
    pub const NONE: Redactor = Redactor {
        secrets: Vec::new(),
    };

    /// A redactor for `config`'s provider API keys, client keys and admin keys.
    pub fn for_config(config: &crate::config::Config) -> Redactor {
        Redactor::new(Redactor::secrets_of(config))
    }

    /// The secrets of `config`: provider API keys, client keys and admin keys.
    pub fn secrets_of(config: &crate::config::Config) -> impl Iterator<Item = String> + '_ {
        let providers = config.providers.iter().filter_map(|p| p.api_key.clone());
        let keys = config
            .auth
            .iter()
            .flat_map(|a| a.keys.iter().chain(&a.admin_keys).cloned());
        providers.chain(keys)
    }

    /// `bytes` (text sent to a client, UTF-8 or not) with every secret masked; the same bytes
    /// when there was none.
    pub fn redact_bytes(&self, bytes: bytes::Bytes) -> bytes::Bytes {
        let text = String::from_utf8_lossy(&bytes);
        match self.redact(&text) {
            Cow::Borrowed(_) => bytes,
            Cow::Owned(clean) => bytes::Bytes::from(clean),
        }
    }

    /// `text` with every secret masked; borrowed when there was none.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), MASK));
            }
        }
        if let Cow::Owned(s) = FIELDS_RE.replace_all(out.as_bytes(), |c: &Captures<'_>| {
            let (head, value) = match (c.get(1), c.get(2), c.get(3), c.get(4)) {
                (Some(h), Some(v), _, _) | (_, _, Some(h), Some(v)) => (h.as_bytes(), v.as_bytes()),
                _ => return c[0].to_vec(),
            };
            if value.is_empty() || value == MASK.as_bytes() {
                c[0].to_vec()
            } else {
                [head, MASK.as_bytes()].concat()
            }
        }) {
            out = Cow::Owned(utf8(s));
        }
        if let Cow::Owned(s) = SHAPES_RE.replace_all(out.as_bytes(), MASK.as_bytes()) {
            out = Cow::Owned(utf8(s));
        }
        out
    }

    /// Redact an optional field in place.
    pub fn apply(&self, field: &mut Option<String>) {
        if let Some(text) = field {
            if let Cow::Owned(clean) = self.redact(text) {
                *text = clean;
            }
        }
    }
}

/// A pattern of ours that does not compile: a bug the tests catch; never reached at run time.
#[allow(clippy::panic, reason = "constant patterns, compiled in the tests")]
fn never() -> Regex {
    panic!("an audit redaction pattern does not compile")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r() -> Redactor {
        Redactor::new(["provider-key-123456".to_owned(), "short".to_owned()])
    }

    #[test]
    fn configured_secrets_are_masked_wherever_they_appear() {
        let out = r().redact("my key is provider-key-123456, really");
        assert_eq!(out, "my key is [REDACTED], really");
        // Too short to search for safely.
        assert_eq!(r().redact("a short story"), "a short story");
    }

    #[test]
    fn credentials_are_masked_by_their_shape() {
        let r = r();
        for (text, want) in [
            ("use sk-proj-abcdefghijklmnop1234 now", "use [REDACTED] now"),
            ("sk-ant-api03-AAAAAAAAAAAAAAAAAAAA", "[REDACTED]"),
            (
                "Authorization: Bearer abcdefghijklmnopqrstuvwxyz",
                "Authorization: [REDACTED]",
            ),
            ("AIzaSyA-1234567890abcdefghijklmnopqrstu", "[REDACTED]"),
            ("aws AKIAIOSFODNN7EXAMPLE key", "aws [REDACTED] key"),
            ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED]"),
            ("xoxb-1234567890-abcdef", "[REDACTED]"),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----!",
                "[REDACTED]!",
            ),
        ] {
            assert_eq!(r.redact(text), want, "{text}");
        }
        // Ordinary text is left alone, borrowed.
        let plain = "ask-me anything: the sky is blue, tokens = 12";
        assert!(matches!(r.redact(plain), Cow::Borrowed(_)));
    }

    #[test]
    fn json_fields_named_like_secrets_lose_their_values() {
        let r = r();
        let body = r#"{"model":"m","api_key":"hunter2hunter2","messages":[],"Password" : "p\"w"}"#;
        assert_eq!(
            r.redact(body),
            r#"{"model":"m","api_key":"[REDACTED]","messages":[],"Password" : "[REDACTED]"}"#
        );
        // Escaped once, inside a tool call's arguments string.
        let args = r#"{"arguments":"{\"token\":\"abc123xyz\",\"city\":\"Paris\"}"}"#;
        assert_eq!(
            r.redact(args),
            r#"{"arguments":"{\"token\":\"[REDACTED]\",\"city\":\"Paris\"}"}"#
        );
        // A field that merely mentions a secret word keeps its value.
        let fine = r#"{"max_tokens":32,"content":"what is a token?"}"#;
        assert_eq!(r.redact(fine), fine);
    }

    #[test]
    fn text_around_a_mask_stays_whole() {
        let r = r();
        assert_eq!(
            r.redact("é sk-abcdefghijklmnopqrstu ü, 密码"),
            "é [REDACTED] ü, 密码"
        );
        assert_eq!(
            r.redact(r#"{"password":"pässwörd 密码","note":"ünchanged"}"#),
            r#"{"password":"[REDACTED]","note":"ünchanged"}"#
        );
    }

    #[test]
    fn apply_edits_in_place() {
        let r = r();
        let mut field = Some("key provider-key-123456".to_owned());
        r.apply(&mut field);
        assert_eq!(field.as_deref(), Some("key [REDACTED]"));
        let mut none = None;
        r.apply(&mut none);
        assert_eq!(none, None);
    }
}
