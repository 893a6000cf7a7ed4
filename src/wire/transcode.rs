//! Transcoding between the inner form and the other dialects. A target that speaks the OpenAI
//! dialect (OpenAI, Azure, compatible servers) gets the client's bytes; an Anthropic or Gemini
//! target gets the request written in its own dialect from the canonical model ([`super::Forms`]),
//! and its answer, whole or streamed, comes back as OpenAI bodies and chunks, so the failover
//! loop, the relay and continuation work the same for every target.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};

use super::chunks::{
    scanned, AnswerShape, AnthropicUsage, CountSpans, LearnedShapes, ResponsesUsage, Scanned,
    Usage, USAGE_KEYS,
};
use super::scan;
use super::sse::SseDecoder;
use crate::canonical::{self, Dialect, StreamDecoder, StreamEncoder, TranslateError};
use crate::config::ProviderKind;
use crate::provider::ByteStream;

/// The dialect a target of a provider kind speaks for `model` (a `vertex` provider serves
/// Gemini and Anthropic models, each in its publisher's dialect).
pub fn dialect_of(kind: ProviderKind, model: &str) -> Dialect {
    match kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiCompatible | ProviderKind::Azure => {
            Dialect::OpenAi
        }
        ProviderKind::Anthropic | ProviderKind::Bedrock => Dialect::Anthropic,
        ProviderKind::Gemini => Dialect::Gemini,
        ProviderKind::Vertex => match crate::provider::vertex::Publisher::of(model) {
            crate::provider::vertex::Publisher::Anthropic => Dialect::Anthropic,
            crate::provider::vertex::Publisher::Google => Dialect::Gemini,
        },
    }
}

/// A non-streamed answer of `dialect` as an OpenAI chat completion, with its usage.
pub fn response_to_openai(
    dialect: Dialect,
    body: &[u8],
) -> Result<(Bytes, Option<Usage>), TranslateError> {
    let resp = dialect.parse_response(body)?;
    let out = canonical::openai::write_response(&resp)?;
    let usage = resp.usage.map(Usage::from);
    Ok((Bytes::from(out), usage))
}

struct Recode<E> {
    body: BoxStream<'static, Result<Bytes, E>>,
    sse: SseDecoder,
    decoder: StreamDecoder,
    encoder: StreamEncoder,
    ended: bool,
}

/// An SSE stream of one dialect re-encoded in another. It ends with the target dialect's
/// terminator only when the source said it was complete: a cut stays a cut.
fn recode<E: Send + 'static>(
    body: BoxStream<'static, Result<Bytes, E>>,
    from: Dialect,
    to: Dialect,
    sse: SseDecoder,
) -> BoxStream<'static, Result<Bytes, E>> {
    recode_with(body, from, to.encoder(true), sse)
}

fn recode_with<E: Send + 'static>(
    body: BoxStream<'static, Result<Bytes, E>>,
    from: Dialect,
    encoder: StreamEncoder,
    sse: SseDecoder,
) -> BoxStream<'static, Result<Bytes, E>> {
    let state = Recode {
        body,
        sse,
        decoder: from.decoder(),
        encoder,
        ended: false,
    };
    futures_util::stream::unfold(state, |mut r| async move {
        loop {
            if r.ended {
                return None;
            }
            let bytes = match r.body.next().await? {
                Ok(bytes) => bytes,
                Err(e) => return Some((Err(e), r)),
            };
            r.sse.push_bytes(bytes);
            let mut events = Vec::new();
            while let Some(ev) = r.sse.next_event() {
                // An event that cannot be read is skipped; the stream goes on.
                let _ = r.decoder.decode(ev.event.as_deref(), &ev.data, &mut events);
            }
            let mut out = Vec::new();
            for ev in &events {
                r.encoder.encode(ev, &mut out);
            }
            if r.decoder.is_done() {
                r.encoder.finish(&mut out);
                r.ended = true;
            }
            if !out.is_empty() {
                return Some((Ok(Bytes::from(out)), r));
            }
        }
    })
    .boxed()
}

/// An upstream stream of `dialect` as OpenAI SSE bytes (with the usage chunk). An upstream
/// line or event over the SSE bounds becomes an in-band error (see `wire::sse`), counted in
/// `overflows`.
pub fn stream_to_openai(
    upstream: ByteStream,
    dialect: Dialect,
    overflows: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> ByteStream {
    recode(
        upstream,
        dialect,
        Dialect::OpenAi,
        SseDecoder::counting(overflows),
    )
}

/// The relay's OpenAI SSE bytes re-encoded for a client of another dialect.
pub fn stream_from_openai(
    body: BoxStream<'static, Result<Bytes, std::convert::Infallible>>,
    dialect: Dialect,
) -> BoxStream<'static, Result<Bytes, std::convert::Infallible>> {
    recode(body, Dialect::OpenAi, dialect, SseDecoder::new())
}

/// The relay's OpenAI SSE bytes re-encoded by `encoder` (set up for the client's dialect).
pub fn stream_from_openai_with(
    body: BoxStream<'static, Result<Bytes, std::convert::Infallible>>,
    encoder: StreamEncoder,
) -> BoxStream<'static, Result<Bytes, std::convert::Infallible>> {
    recode_with(body, Dialect::OpenAi, encoder, SseDecoder::new())
}

/// The usage of a whole answer of `dialect` passed on as it came (same-dialect pass-through),
/// read shallowly; an error when the body is not an answer of that dialect.
pub fn native_usage(dialect: Dialect, body: &[u8]) -> Result<Option<Usage>, TranslateError> {
    match dialect {
        Dialect::OpenAi => match plain_completion_usage(body) {
            Some(usage) => Ok(usage.map(|(usage, _)| usage)),
            None => completion_usage(body),
        },
        // The scanner reads the usage; serde_json only what it does not take.
        Dialect::Anthropic => match plain_usage::<AnthropicUsage>(body, "content") {
            Some(usage) => Ok(usage.map(|u| u.usage())),
            None => whole_usage(dialect, body),
        },
        Dialect::Responses => match plain_usage::<ResponsesUsage>(body, "output") {
            Some(usage) => Ok(usage.map(|u| u.usage())),
            None => whole_usage(dialect, body),
        },
        Dialect::Gemini => Ok(dialect.parse_response(body)?.usage.map(Usage::from)),
    }
}

/// [`native_usage`] of an Anthropic message or a Responses API response, read by serde_json
/// alone (which says why a body is refused).
fn whole_usage(dialect: Dialect, body: &[u8]) -> Result<Option<Usage>, TranslateError> {
    #[derive(serde::Deserialize)]
    struct Message {
        /// Only its presence is checked.
        #[allow(dead_code, reason = "only its presence is checked")]
        content: serde::de::IgnoredAny,
        #[serde(default)]
        usage: Option<AnthropicUsage>,
    }
    /// A Responses API `response` object.
    #[derive(serde::Deserialize)]
    struct Response {
        /// Only its presence is checked.
        #[allow(dead_code, reason = "only its presence is checked")]
        output: serde::de::IgnoredAny,
        #[serde(default)]
        usage: Option<ResponsesUsage>,
    }
    if dialect == Dialect::Anthropic {
        let message: Message = serde_json::from_slice(body)?;
        Ok(message.usage.map(|u| u.usage()))
    } else {
        let response: Response = serde_json::from_slice(body)?;
        Ok(response.usage.map(|u| u.usage()))
    }
}

/// The `usage` of a plain object `body` (see [`scan`]) that has `required` (any value), as
/// [`whole_usage`] reads it, by the scanner alone (the body checked, then its usage read).
/// `None` when the scanner does not take the body, `required` is missing or
/// the usage does not read as `U`: [`whole_usage`] then says why, or accepts what is not
/// plain.
fn plain_usage<U: Scanned>(body: &[u8], required: &str) -> Option<Option<U>> {
    let [present, usage] = scan::fields(body, [required, "usage"])?;
    present?;
    scanned(body, usage)
}

/// Fuzzing: [`native_usage`] of an Anthropic message or a Responses API response read by
/// serde_json alone, to compare with the scanner's reading (`fuzz/fuzz_targets/json_scan.rs`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub fn fuzz_whole_usage(dialect: Dialect, body: &[u8]) -> Result<Option<Usage>, TranslateError> {
    whole_usage(dialect, body)
}

/// [`native_usage`] of a `chat.completion` body, read by serde_json (which says why a body is
/// refused).
fn completion_usage(body: &[u8]) -> Result<Option<Usage>, TranslateError> {
    /// A `chat.completion`: at least one choice, each with a message.
    #[derive(serde::Deserialize)]
    struct Completion {
        choices: Vec<Choice>,
        #[serde(default)]
        usage: Option<Usage>,
    }
    /// Zero-sized: the choices' list is checked without allocating.
    #[derive(serde::Deserialize)]
    struct Choice {
        /// Only that it is an object is checked.
        #[allow(dead_code, reason = "only that it is an object is checked")]
        message: Object,
    }
    /// Any JSON object, its fields skipped.
    #[derive(serde::Deserialize)]
    struct Object {}
    let completion: Completion = serde_json::from_slice(body)?;
    if completion.choices.is_empty() {
        return Err(TranslateError::invalid("a completion without choices"));
    }
    Ok(completion.usage)
}

/// Fuzzing: [`native_usage`] of an OpenAI body read by serde_json alone, to compare with the
/// scanner's reading (`fuzz/fuzz_targets/json_scan.rs`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub fn fuzz_completion_usage(body: &[u8]) -> Result<Option<Usage>, TranslateError> {
    completion_usage(body)
}

/// [`native_usage`] of an OpenAI answer (`chat.completion`) whose target's answers are
/// written alike: read by the shape of the last one `learned` keeps when it fits (the bytes
/// between its values compared, its values read, as the scanner would), else read as
/// [`native_usage`] reads it, and its shape kept for the next answer when it has a usage.
pub fn openai_usage(body: &[u8], learned: &LearnedShapes) -> Result<Option<Usage>, TranslateError> {
    if let Some(shape) = &*learned.answer.load() {
        if let Some(usage) = shape.read(body).and_then(|spans| Usage::at(body, spans)) {
            return Ok(Some(usage));
        }
    }
    match plain_completion_usage(body) {
        Some(Some((usage, counts))) => {
            // A shape keeps a copy of its body: none of a long one.
            if body.len() <= MAX_ANSWER_SHAPE {
                if let Some(shape) = AnswerShape::of_read(body, counts) {
                    learned.answer.store(Some(Arc::new(shape)));
                }
            }
            Ok(Some(usage))
        }
        Some(None) => Ok(None),
        None => completion_usage(body),
    }
}

/// The longest answer whose shape a target keeps (the shape is a copy of it).
const MAX_ANSWER_SHAPE: usize = 16 * 1024;

/// [`native_usage`] of a plain `chat.completion` body (see [`scan`]), read by the scanner in
/// one pass, with the spans of its usage's counts: `None` when it is not one, for serde_json
/// to say why (or to accept what is not plain).
fn plain_completion_usage(body: &[u8]) -> Option<Option<(Usage, CountSpans)>> {
    let ([_, usage], choices, counts) = scan::fields_items_and_nested(
        body,
        ["choices", "usage"],
        (0, ["message"]),
        |[message]| message.is_some_and(|m| body[m.start] == b'{'),
        (1, USAGE_KEYS),
    )?;
    if choices == 0 {
        return None;
    }
    if scan::not_null(body, usage).is_none() {
        return Some(None);
    }
    // Read in the same pass, when the usage is a plain object (else not a plain answer).
    Some(Some(Usage::of_fields(body, counts?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every dialect's whole answer gives the same counts: every input token, of which the
    /// cache read and wrote so many.
    #[test]
    fn whole_answers_give_their_cache_counts_in_the_inner_meaning() {
        let anthropic = br#"{"id":"m","type":"message","content":[],"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":7}}"#;
        let responses = br#"{"id":"r","output":[],"usage":{"input_tokens":3210,"input_tokens_details":{"cached_tokens":3000},"output_tokens":7}}"#;
        let openai = br#"{"id":"c","choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":3210,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":3000}}}"#;
        let gemini = br#"{"candidates":[{"content":{"parts":[{"text":"x"}]}}],"usageMetadata":{"promptTokenCount":3210,"candidatesTokenCount":7,"cachedContentTokenCount":3000}}"#;
        let read = Usage {
            cache_read_tokens: 3000,
            ..Usage::new(3210, 7)
        };
        let with_write = Usage {
            cache_write_tokens: 200,
            ..read
        };
        let native = |d, b: &[u8]| native_usage(d, b).ok().flatten();
        assert_eq!(native(Dialect::Anthropic, anthropic), Some(with_write));
        assert_eq!(native(Dialect::Responses, responses), Some(read));
        assert_eq!(native(Dialect::OpenAi, openai), Some(read));
        let translated = |d, b: &[u8]| response_to_openai(d, b).ok().and_then(|(_, u)| u);
        assert_eq!(translated(Dialect::Anthropic, anthropic), Some(with_write));
        assert_eq!(translated(Dialect::Gemini, gemini), Some(read));
    }

    /// An Anthropic or Responses usage is read by the scanner as serde_json reads it: the same
    /// counts, and the same refusals (a count that is no whole number, a `null` where a count
    /// has a default, a key twice), which the scanner leaves to serde_json.
    #[test]
    fn a_usage_reads_alike_by_the_scanner_and_by_serde_json() {
        // Per dialect: the usages the scanner reads, and those it leaves to serde_json.
        let anthropic = (
            Dialect::Anthropic,
            [
                r#"{"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":null,"cache_creation":{"ephemeral_5m_input_tokens":4,"ephemeral_1h_input_tokens":6}}"#,
                r#"{"output_tokens":2,"cache_creation":{"ephemeral_1h_input_tokens":6},"other":[1,{"x":null}]}"#,
                r#"{"input_tokens":5,"cache_creation":null}"#,
                r#"{}"#,
            ],
            [
                r#"{"input_tokens":5.0}"#,
                r#"{"input_tokens":-1}"#,
                r#"{"cache_creation":{"ephemeral_5m_input_tokens":null}}"#,
                r#"{"input_tokens":1,"input_tokens":2}"#,
                r#"[1]"#,
            ],
        );
        let responses = (
            Dialect::Responses,
            [
                r#"{"input_tokens":3210,"input_tokens_details":{"cached_tokens":3000,"cache_write_tokens":10},"output_tokens":7}"#,
                r#"{"output_tokens":7,"input_tokens_details":null}"#,
                r#"{}"#,
                r#"{"input_tokens":3,"other":{"input_tokens":null}}"#,
            ],
            [
                r#"{"input_tokens":null}"#,
                r#"{"input_tokens_details":{"cached_tokens":1e3}}"#,
                r#""none""#,
                r#"{"output_tokens":7,"output_tokens":7}"#,
                r#"{"input_tokens_details":[]}"#,
            ],
        );
        let cases = [anthropic, responses]
            .into_iter()
            .flat_map(|(dialect, read, left)| {
                let read = read.into_iter().map(move |u| (dialect, u, true));
                read.chain(left.into_iter().map(move |u| (dialect, u, false)))
            });
        for (dialect, usage, plain) in cases {
            let required = if dialect == Dialect::Anthropic {
                "content"
            } else {
                "output"
            };
            let body = format!(r#"{{"{required}":[],"usage":{usage}}}"#);
            let ours = native_usage(dialect, body.as_bytes()).map_err(|e| e.to_string());
            let theirs = whole_usage(dialect, body.as_bytes()).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{body}");
            let scanned = match dialect {
                Dialect::Anthropic => plain_usage::<AnthropicUsage>(body.as_bytes(), required)
                    .map(|u| u.map(|u| u.usage())),
                _ => plain_usage::<ResponsesUsage>(body.as_bytes(), required)
                    .map(|u| u.map(|u| u.usage())),
            };
            assert_eq!(scanned.is_some(), plain, "read by the scanner: {body}");
        }
    }

    /// A same-dialect OpenAI answer is checked for what the gateway relies on (a choice with a
    /// message) and its usage read; what the choices hold is the client's to read.
    #[test]
    fn an_openai_answer_passed_on_needs_a_choice_with_a_message() {
        let usage = |b: &[u8]| native_usage(Dialect::OpenAi, b);
        let counted = br#"{"choices":[{"message":{"content":7}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        assert_eq!(usage(counted).ok(), Some(Some(Usage::new(3, 2))));
        assert_eq!(usage(br#"{"choices":[{"message":{}}]}"#).ok(), Some(None));
        for malformed in [
            &br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#[..],
            br#"{"choices":[{"finish_reason":"stop"}]}"#,
            br#"{"choices":[{"message":null}]}"#,
            br#"{"choices":[{"message":"hi"}]}"#,
            br#"{"choices":{"message":{}}}"#,
            br#"{"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            br#"{"choices":[{"message":{}}]"#,
            b"[]",
        ] {
            assert!(
                usage(malformed).is_err(),
                "{}",
                String::from_utf8_lossy(malformed)
            );
        }
    }

    /// A target's OpenAI answers are read by the shape of its last one with a usage: what
    /// that shape fits is read by it (the shape kept, not made again), with the counts
    /// [`native_usage`] reads; an answer it does not fit is read whole, as [`native_usage`]
    /// reads it, and its shape kept when it has a usage. Errors are [`native_usage`]'s.
    #[test]
    fn a_target_s_answers_are_read_by_the_shape_of_its_last_one() {
        let learned = LearnedShapes::default();
        let text = |id: &str, text: &str, counts: &str| {
            format!(
                r#"{{"id":"{id}","choices":[{{"index":0,"message":{{"role":"assistant","content":"{text}"}},"finish_reason":"stop"}}],"usage":{counts}}}"#
            )
        };
        let shape = || learned.answer.load_full().map(|s| Arc::as_ptr(&s) as usize);
        let read = |body: &str| {
            let ours = openai_usage(body.as_bytes(), &learned).map_err(|e| e.to_string());
            let theirs = native_usage(Dialect::OpenAi, body.as_bytes()).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{body}");
            ours
        };
        let first = text("a", "Hi.", r#"{"prompt_tokens":3,"completion_tokens":2}"#);
        assert_eq!(read(&first), Ok(Some(Usage::new(3, 2))));
        let made = shape();
        assert!(made.is_some(), "no shape kept");
        // Other values where the first had values: read by its shape.
        let second = text(
            "bb",
            r#"Hello \"there\"."#,
            r#"{"prompt_tokens":1234,"completion_tokens":56}"#,
        );
        assert_eq!(read(&second), Ok(Some(Usage::new(1234, 56))));
        assert_eq!(shape(), made, "a body of the kept shape was read whole");
        // Counts the scanner refuses, in the shape's places: serde_json's verdict.
        let refused = text("c", "x", r#"{"prompt_tokens":1.5,"completion_tokens":2}"#);
        assert!(read(&refused).is_err());
        assert_eq!(shape(), made);
        // Another shape (the cache's counts): read whole, then its shape kept.
        let cached = text(
            "d",
            "x",
            r#"{"prompt_tokens":3210,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":3000,"cache_write_tokens":10}}"#,
        );
        let counts = Usage {
            cache_read_tokens: 3000,
            cache_write_tokens: 10,
            ..Usage::new(3210, 7)
        };
        assert_eq!(read(&cached), Ok(Some(counts)));
        let remade = shape();
        assert!(remade.is_some() && remade != made, "the new shape not kept");
        let again = cached.replace("3000", "12").replace(r#""d""#, r#""e""#);
        assert_eq!(read(&again).unwrap().unwrap().cache_read_tokens, 12);
        assert_eq!(shape(), remade);
        // No usage, or a count that is `null`: read whole, no shape made of it.
        assert_eq!(read(&text("f", "x", "null")), Ok(None));
        let null = text("g", "x", r#"{"prompt_tokens":null,"completion_tokens":1}"#);
        assert!(read(&null).is_err());
        assert_eq!(shape(), remade);
        // A long answer is read whole and leaves the kept shape as it was.
        let long = text(
            "h",
            &"x".repeat(MAX_ANSWER_SHAPE),
            r#"{"prompt_tokens":1,"completion_tokens":2}"#,
        );
        assert_eq!(read(&long), Ok(Some(Usage::new(1, 2))));
        assert_eq!(shape(), remade, "a long answer's shape kept");
        // Not an answer at all, or not whole.
        assert!(read(&again[..again.len() - 1]).is_err());
        assert!(read(r#"{"choices":[]}"#).is_err());
    }

    /// An Anthropic message's or a Responses API response's usage, found by the scanner and
    /// read alone, is what serde_json reading the whole body gives, and a body either refuses
    /// is refused with serde_json's own error.
    #[test]
    fn a_usage_found_by_the_scanner_reads_as_the_whole_body_read_by_serde() {
        let anthropic: [&[u8]; 12] = [
            br#"{"content":[],"usage":{"input_tokens":3,"output_tokens":2,"cache_creation":{"ephemeral_1h_input_tokens":5}}}"#,
            br#" {"usage": null, "content": "x"} "#,
            br#"{"content":{}}"#,
            br#"{"content":[],"usage":{"input_tokens":-3}}"#,
            br#"{"content":[],"usage":{"input_tokens":1.5}}"#,
            br#"{"content":[],"usage":7}"#,
            br#"{"content":[],"usage":{},"usage":{}}"#,
            br#"{"content":[],"usage":{"input_tokens":1,"input_tokens":2}}"#,
            br#"{"\u0063ontent":[],"usage":{"input_tokens":4}}"#,
            br#"{"usage":{"input_tokens":4}}"#,
            br#"{"content":[],"usage":{"input_tokens":4}} x"#,
            br#"[{"content":[]}]"#,
        ];
        let responses: [&[u8]; 4] = [
            br#"{"output":[],"usage":{"input_tokens":3,"output_tokens":2,"input_tokens_details":{"cached_tokens":1}}}"#,
            br#"{"output":null,"usage":{"input_tokens":"3"}}"#,
            br#"{"usage":{"input_tokens":3}}"#,
            br#"{"output":[],"usage":{"input_tokens":18446744073709551616}}"#,
        ];
        let read = |d, body: &[u8]| match native_usage(d, body) {
            Ok(usage) => Ok(usage),
            Err(e) => Err(e.to_string()),
        };
        let whole = |d, body: &[u8]| match whole_usage(d, body) {
            Ok(usage) => Ok(usage),
            Err(e) => Err(e.to_string()),
        };
        let bodies = (anthropic.iter().map(|b| (Dialect::Anthropic, b)))
            .chain(responses.iter().map(|b| (Dialect::Responses, b)));
        let mut counted = 0;
        for (dialect, body) in bodies {
            let ours = read(dialect, body);
            assert_eq!(
                ours,
                whole(dialect, body),
                "{}",
                String::from_utf8_lossy(body)
            );
            counted += usize::from(matches!(ours, Ok(Some(_))));
        }
        assert_eq!(counted, 3, "three bodies have a usage");
        let found = |body| plain_usage::<AnthropicUsage>(body, "content").map(|u| u.is_some());
        assert_eq!(found(anthropic[0]), Some(true), "read by the scanner");
        assert_eq!(
            found(anthropic[1]),
            Some(false),
            "a null usage, by the scanner"
        );
        assert_eq!(
            found(anthropic[6]),
            None,
            "a usage twice: serde_json says why"
        );
        assert_eq!(
            read(Dialect::Anthropic, anthropic[0]),
            Ok(Some(Usage {
                cache_write_tokens: 5,
                ..Usage::new(3 + 5, 2)
            }))
        );
    }
}
