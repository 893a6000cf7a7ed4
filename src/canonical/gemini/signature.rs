//! Gemini thought signatures carried through the tool-call ids of other dialects.
//!
//! Gemini signs its function calls (`thoughtSignature` on the `functionCall` part: every call
//! of a sequence, the first of parallel calls) and Gemini 3 rejects a conversation whose
//! current turn sends a call back without its signature. An OpenAI, Anthropic or Responses
//! client has no place for one, but it echoes each call's id back, in the call and in its
//! result. So the signature goes inside the id the client gets:
//!
//! `<id>__gts<pad><len>_<payload>`: `payload` is the signature (standard base64, as Gemini's
//! JSON writes bytes) with `+` and `/` written `-` and `_` and its `=` padding dropped (`pad`
//! says how many), `len` its length. Every character is in `[a-zA-Z0-9_-]`, as Anthropic
//! requires of a `tool_use` id, and the signature comes back exactly as Gemini sent it.
//!
//! - A request written for a Gemini target puts each id's signature back on its call
//!   ([`split`], in `write.rs`); a call of the current turn that has none (another vendor made
//!   it, or its signature was not carried) gets [`SKIP_VALIDATOR`], the value Google documents
//!   for function calls Gemini did not make.
//! - A body for any other target has the signature cut out of every id ([`strip`]), the
//!   call's and its result's alike, so they still pair.
//! - A signature longer than [`MAX_EMBEDDED`], or not base64, is not carried: an upstream
//!   cannot make ids of megabytes. Its call goes back unsigned (with [`SKIP_VALIDATOR`] in the
//!   current turn): Gemini goes on without that step's reasoning.
//! - Signatures on text parts are not carried: Google asks for them back but does not require
//!   them, and an answer's text has no id a client echoes.

use std::fmt;

use serde::{Serialize, Serializer};

/// What separates a call's own id from the signature carried in it.
const MARKER: &str = "__gts";

/// The longest signature carried in an id (its text, in bytes). Real signatures grow with the
/// reasoning behind a call and are mostly a few kilobytes.
pub const MAX_EMBEDDED: usize = 16 * 1024;

/// The signature Google documents for a function call Gemini did not make ("set the
/// `thoughtSignature` of the first function call of each step of the current turn to this
/// dummy value"): Gemini skips its check.
pub const SKIP_VALIDATOR: &str = "skip_thought_signature_validator";

/// The most digits of a carried signature's length (a bound on what [`strip`] reads).
const MAX_LEN_DIGITS: usize = 7;

/// A function call's `thoughtSignature`: one carried in an id, written back as Gemini sent it
/// without first being copied, or a plain value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature<'a> {
    /// Carried in an id: its payload and how many `=` it ended with.
    Carried {
        /// The id's payload (`-` and `_` for `+` and `/`).
        payload: &'a str,
        /// The `=` padding dropped.
        pad: u8,
    },
    /// A value as it is ([`SKIP_VALIDATOR`]).
    Plain(&'a str),
}

impl fmt::Display for Signature<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        match *self {
            Signature::Plain(text) => f.write_str(text),
            Signature::Carried { payload, pad } => {
                for c in payload.chars() {
                    f.write_char(match c {
                        '-' => '+',
                        '_' => '/',
                        c => c,
                    })?;
                }
                for _ in 0..pad {
                    f.write_char('=')?;
                }
                Ok(())
            }
        }
    }
}

impl Serialize for Signature<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Appends `signature` to `id` when it can be carried (standard base64, at most
/// [`MAX_EMBEDDED`] bytes); says whether it was.
pub fn embed(id: &mut String, signature: &str) -> bool {
    let body = signature.trim_end_matches('=');
    let pad = signature.len() - body.len();
    let fits = !body.is_empty()
        && signature.len() <= MAX_EMBEDDED
        && pad <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/');
    if !fits {
        return false;
    }
    id.reserve(MARKER.len() + 8 + body.len());
    id.push_str(MARKER);
    id.push(char::from(b"012"[pad]));
    id.push_str(&body.len().to_string());
    id.push('_');
    id.extend(body.chars().map(|c| match c {
        '+' => '-',
        '/' => '_',
        c => c,
    }));
    true
}

/// A call's own id and the signature carried in it, if any.
pub fn split(id: &str) -> (&str, Option<Signature<'_>>) {
    let mut from = 0;
    while let Some(at) = id.get(from..).and_then(|rest| rest.find(MARKER)) {
        let at = from + at;
        let suffix = &id[at + MARKER.len()..];
        if let Some((pad, head, len)) = header(suffix.as_bytes()) {
            let payload = &suffix[head..];
            if payload.len() == len && payload.bytes().all(is_id_byte) {
                return (&id[..at], Some(Signature::Carried { payload, pad }));
            }
        }
        from = at + 1;
    }
    (id, None)
}

/// `body` with every carried signature cut out of the ids in it (each one that ends a JSON
/// string), or `None` when it carries none: the body as it is will do.
pub fn strip(body: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    // Built once: a `Finder` made per call cost more than the search of a small body.
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(MARKER));
    // Most bodies carry no marker: one search says so, without the iterator (which copies the
    // searcher).
    let first = FINDER.find(body)?;
    for at in FINDER.find_iter(&body[first..]).map(|at| first + at) {
        if at < copied {
            continue;
        }
        let suffix = &body[at + MARKER.len()..];
        let Some((_, head, len)) = header(suffix) else {
            continue;
        };
        let end = head + len;
        let ends_string = suffix.get(end) == Some(&b'"');
        if !ends_string || !suffix[head..end].iter().copied().all(is_id_byte) {
            continue;
        }
        let out = out.get_or_insert_with(|| Vec::with_capacity(body.len()));
        out.extend_from_slice(&body[copied..at]);
        copied = at + MARKER.len() + end;
    }
    let mut out = out?;
    out.extend_from_slice(&body[copied..]);
    Some(out)
}

/// Reads `<pad><len>_` at the start of what follows a marker: the padding, the header's length
/// and the payload's.
fn header(suffix: &[u8]) -> Option<(u8, usize, usize)> {
    let (&pad, rest) = suffix.split_first()?;
    let pad = match pad {
        b'0'..=b'2' => pad - b'0',
        _ => return None,
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > MAX_LEN_DIGITS || rest[0] == b'0' || rest.get(digits) != Some(&b'_')
    {
        return None;
    }
    let len = rest[..digits]
        .iter()
        .fold(0usize, |n, d| n * 10 + usize::from(d - b'0'));
    Some((pad, 1 + digits + 1, len))
}

fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SIGNED: &str = "CiQB0e2Kb+/x9y==";

    fn carried(id: &str, signature: &str) -> String {
        let mut id = id.to_owned();
        assert!(embed(&mut id, signature), "{signature}");
        id
    }

    #[test]
    fn a_signature_rides_in_an_id_anthropic_accepts_and_comes_back_exactly() {
        let id = carried("call_r1_0", SIGNED);
        assert_eq!(id, "call_r1_0__gts214_CiQB0e2Kb-_x9y");
        assert!(id.bytes().all(is_id_byte), "{id}");
        let (own, signature) = split(&id);
        assert_eq!(own, "call_r1_0");
        assert_eq!(signature.unwrap().to_string(), SIGNED);
        assert_eq!(
            serde_json::to_string(&signature).unwrap(),
            format!("\"{SIGNED}\"")
        );
        for signature in ["A", "AB==", "abc=", "+/+/"] {
            let id = carried("c", signature);
            assert_eq!(split(&id).1.unwrap().to_string(), signature);
        }
        assert_eq!(split("call_r1_0"), ("call_r1_0", None));
    }

    #[test]
    fn what_cannot_be_carried_exactly_or_is_too_long_is_not() {
        let too_long = "A".repeat(MAX_EMBEDDED + 1);
        for signature in ["", "===", "A===", "abc-def", "a=b", "é", too_long.as_str()] {
            let mut id = "call_1".to_owned();
            assert!(!embed(&mut id, signature), "{signature}");
            assert_eq!(id, "call_1");
        }
        let longest = "A".repeat(MAX_EMBEDDED);
        let id = carried("c", &longest);
        assert_eq!(split(&id).1.unwrap().to_string(), longest);
    }

    #[test]
    fn an_id_that_only_looks_carried_is_its_own() {
        for id in [
            "x__gts",
            "x__gts3",
            "x__gts1005_abcde",
            "x__gts15_abcd",
            "x__gts15_abcdef",
            "x__gts12_a+",
            "x__gts1_abc",
        ] {
            assert_eq!(split(id), (id, None), "{id}");
        }
        // A marker inside the call's own id: the one that starts a well-formed suffix counts.
        let id = carried("call__gts2_x", SIGNED);
        let (own, signature) = split(&id);
        assert_eq!(own, "call__gts2_x");
        assert_eq!(signature.unwrap().to_string(), SIGNED);
    }

    #[test]
    fn strip_cuts_every_carried_signature_and_nothing_else() {
        let id = carried("call_r1_0", SIGNED);
        let other = carried("toolu_9", "Zm9vYmFy");
        let body = format!(
            r#"{{"messages":[{{"tool_calls":[{{"id":"{id}"}},{{"id":"{other}"}}]}},{{"tool_call_id":"{id}","content":"the id was {id} and __gts0 stays"}}]}}"#
        );
        let out = String::from_utf8(strip(body.as_bytes()).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"messages":[{"tool_calls":[{"id":"call_r1_0"},{"id":"toolu_9"}]},{"tool_call_id":"call_r1_0","content":"the id was call_r1_0__gts214_CiQB0e2Kb-_x9y and __gts0 stays"}]}"#
        );
        assert_eq!(strip(br#"{"id":"call_1","x":"__gts1"}"#), None);
        assert_eq!(strip(b""), None);
        assert_eq!(strip(b"__gts213_CiQB0e2Kb-_x9y"), None, "no closing quote");
    }

    /// Random signatures and ids: each comes back exactly, and a stripped JSON body stays
    /// JSON with the ids it had before the signatures were added.
    #[test]
    fn random_signatures_round_trip_and_strip_to_the_plain_ids() {
        let mut rng = fastrand::Rng::with_seed(17);
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for _ in 0..500 {
            let len = rng.usize(1..300);
            let mut signature: String = (0..len)
                .map(|_| char::from(B64[rng.usize(..B64.len())]))
                .collect();
            signature.push_str(&"=".repeat(rng.usize(..3)));
            let plain = format!("call_{}_{}", rng.u32(..), rng.u8(..4));
            let id = carried(&plain, &signature);
            assert_eq!(split(&id).0, plain);
            assert_eq!(split(&id).1.unwrap().to_string(), signature);
            let body =
                serde_json::json!({"calls": [{"id": id}], "results": [{"id": id, "text": "t"}]});
            let stripped = strip(body.to_string().as_bytes()).unwrap();
            let back: serde_json::Value = serde_json::from_slice(&stripped).unwrap();
            assert_eq!(
                back,
                serde_json::json!({"calls": [{"id": plain}], "results": [{"id": plain, "text": "t"}]})
            );
        }
    }
}
