//! The fault plan: what a mock does wrong, and when.
//!
//! A plan is plain data (JSON over the control API, a struct literal in tests), so a scenario is
//! written down instead of hidden behind magic model names. Every field is optional; the default
//! plan answers promptly and correctly.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a mock misbehaves. Set one for every model, or override it for one model (or Azure
/// deployment). "Content chunks" are the stream events that carry answer text (or tool-call
/// argument fragments), numbered from 0; the role chunk before them is not one of them.
///
/// When several stream faults name the same chunk, the first of stall, cut and in-band error
/// wins. A fault whose chunk number is past the last content chunk happens after the last one
/// (when equal to the count) or never (when larger).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultPlan {
    /// Answer this HTTP status with an OpenAI error envelope instead of an answer (with
    /// probability `error_rate`). Checked before anything about the request itself, like an
    /// outage in front of the provider.
    pub status: Option<u16>,
    /// Probability in `[0, 1]` that `status` applies to a request. Default 1.0: always.
    pub error_rate: f64,
    /// The `code` of the injected error (e.g. `"content_filter"`); default `"rate_limit_exceeded"`
    /// for 429 and null otherwise.
    pub error_code: Option<String>,
    /// Seconds sent as `Retry-After` with the injected error.
    pub retry_after: Option<u64>,
    /// The body of the injected error, sent as it is instead of the dialect's error envelope
    /// (`error_code` is then unused): another server's shape, such as vLLM's or llama.cpp's.
    /// Sent as `application/json` when it is JSON, else as `text/plain`. With
    /// `inband_error_after` (and no `status`), the in-band error event's data instead.
    pub error_body: Option<String>,
    /// Delay before the response headers, for every request.
    pub latency_ms: u64,
    /// Probability in `[0, 1]` that `tail_ms` is added to the delay: a heavy latency tail.
    pub tail_rate: f64,
    /// Extra delay for the requests picked by `tail_rate`.
    pub tail_ms: u64,
    /// Never answer: hang before the headers until the client goes away.
    pub stall: bool,
    /// Streams: delay between the role chunk (sent at once with the headers) and the first
    /// content chunk: the time to first token.
    pub first_token_ms: u64,
    /// Streams: delay between two content chunks.
    pub chunk_delay_ms: u64,
    /// Streams: after this many content chunks, hang with the connection open.
    pub stall_after_chunks: Option<u32>,
    /// Streams: after this many content chunks, abort the connection (no chunked terminator, no
    /// finish, no `[DONE]`), like a provider that crashed mid-answer.
    pub cut_after_chunks: Option<u32>,
    /// Streams: after this many content chunks, send an in-band `overloaded_error` event (the
    /// Responses API: `response.failed` with `server_error`), or `error_body` when set, and end
    /// the stream without `[DONE]`.
    pub inband_error_after: Option<u32>,
    /// Streams: send one event that is not JSON just before content chunk N, then go on.
    pub malformed_chunk_at: Option<u32>,
    /// Streams: finish normally (finish and usage chunks) but never send `data: [DONE]`.
    pub omit_done: bool,
    /// Streams: keep the body open this long after the last event before ending it (with
    /// `omit_done`, how long a client waiting for `[DONE]` waits).
    pub hold_open_ms: u64,
    /// Streams: while waiting (before the first token, between chunks, hung by
    /// `stall_after_chunks`), send `keepalive_event` every this many ms (0: never), like a
    /// provider or proxy keeping an idle connection open.
    pub keepalive_ms: u64,
    /// What `keepalive_ms` sends, as raw SSE text; default `": keepalive\n\n"` (a comment).
    /// Any text: an empty or role-only chunk, or part of an event (a `data:` line with no
    /// blank line after it makes one event that grows with every send).
    pub keepalive_event: Option<String>,
    /// Non-streamed requests: answer 200 with a body that is not JSON.
    pub malformed_body: bool,
    /// Length of the canonical answer text in words. Default 12.
    pub words: usize,
    /// Which canonical text to answer (see `canonical_text`); another variant diverges from the
    /// first word on.
    pub variant: u32,
    /// Answer with one `get_weather` tool call (`{"city":"Paris"}`) instead of text, until the
    /// conversation ends with the tool's result (OpenAI chat: a `tool` message; Responses: a
    /// `function_call_output` item; Anthropic: a `tool_result` block; Gemini: a
    /// `functionResponse` part): then with text, as a model in a tool loop does.
    pub tool_call: bool,
    /// Gemini: handle thought signatures as Gemini 3 does. Answers are signed (a function
    /// call's part, else the answer's last part carries a `thoughtSignature`), and a request
    /// is refused with a 400 when the first function call of a model step in its current turn
    /// (after the last user content that is not only function responses) has no signature or
    /// one the mock cannot read (Google's documented `skip_thought_signature_validator` is
    /// accepted). Set it for one model to make that model a Gemini 3 one.
    pub thought_signatures: bool,
    /// Reject a request whose last message is an assistant prefill with a 400.
    pub reject_prefill: bool,
    /// Answer OpenAI's context-length 400 when the estimated prompt tokens (message characters
    /// divided by 4, rounded up) exceed this.
    pub max_context_tokens: Option<u32>,
    /// Require this key (`Authorization: Bearer KEY` for OpenAI, `api-key: KEY` for Azure), else 401.
    pub expect_api_key: Option<String>,
    /// Report this many prompt tokens read from the provider's prompt cache, on top of the
    /// estimate, in the dialect's own fields: OpenAI `prompt_tokens_details.cached_tokens`,
    /// Responses `input_tokens_details.cached_tokens`, Gemini `cachedContentTokenCount` (each
    /// counted in that dialect's prompt total too), Anthropic (Bedrock, Claude on Vertex)
    /// `cache_read_input_tokens` (which Anthropic's `input_tokens` leaves out).
    pub cache_read_tokens: u64,
    /// Report this many prompt tokens written to the prompt cache: Anthropic (Bedrock, Claude
    /// on Vertex) `cache_creation_input_tokens`, with its `cache_creation` split (all 5-minute).
    /// The other dialects report no cache writes: they ignore it.
    pub cache_write_tokens: u64,
    /// Seed of the random choices (`error_rate`, `tail_rate`), combined with the mock's request
    /// counter: the same plan and the same request order give the same outcomes.
    pub seed: u64,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan {
            status: None,
            error_rate: 1.0,
            error_code: None,
            retry_after: None,
            error_body: None,
            latency_ms: 0,
            tail_rate: 0.0,
            tail_ms: 0,
            stall: false,
            first_token_ms: 0,
            chunk_delay_ms: 0,
            stall_after_chunks: None,
            cut_after_chunks: None,
            inband_error_after: None,
            malformed_chunk_at: None,
            omit_done: false,
            hold_open_ms: 0,
            keepalive_ms: 0,
            keepalive_event: None,
            malformed_body: false,
            words: 12,
            variant: 0,
            tool_call: false,
            thought_signatures: false,
            reject_prefill: false,
            max_context_tokens: None,
            expect_api_key: None,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            seed: 0,
        }
    }
}

/// The random choices for one request, drawn once when it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Draw {
    /// The injected error applies (if the plan has a `status`).
    pub(crate) error: bool,
    /// The latency tail applies.
    pub(crate) tail: bool,
}

impl FaultPlan {
    /// The status an injected error answers with (500 when the plan's is not a valid one).
    pub(crate) fn injected_status(&self) -> axum::http::StatusCode {
        self.status
            .and_then(|s| axum::http::StatusCode::from_u16(s).ok())
            .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// Checks what serde cannot: a real HTTP status, probabilities in `[0, 1]`, and an
    /// `error_body` only with a `status` to send it with.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(status) = self.status {
            if !(100..=999).contains(&status) {
                return Err(format!(
                    "status: {status} is not an HTTP status (100..=999)"
                ));
            }
        }
        if self.error_body.is_some() && self.status.is_none() {
            return Err("error_body: needs a status to be sent with".to_owned());
        }
        for (key, rate) in [
            ("error_rate", self.error_rate),
            ("tail_rate", self.tail_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("{key}: {rate} is not a probability in [0, 1]"));
            }
        }
        Ok(())
    }

    /// The random choices for the request numbered `seq` (0-based, per mock). Both coins are
    /// always tossed, in the same order, so one setting does not shift the other's sequence.
    pub(crate) fn draw(&self, seq: u64) -> Draw {
        let mut rng = fastrand::Rng::with_seed(self.seed ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let tail = rng.f64() < self.tail_rate;
        let error = rng.f64() < self.error_rate;
        Draw { error, tail }
    }

    /// What streams send while they wait, and how often (`keepalive_ms`).
    pub(crate) fn keepalive(&self) -> Option<(Duration, axum::body::Bytes)> {
        let event = self.keepalive_event.as_deref().unwrap_or(": keepalive\n\n");
        (self.keepalive_ms > 0).then(|| {
            (
                Duration::from_millis(self.keepalive_ms),
                axum::body::Bytes::copy_from_slice(event.as_bytes()),
            )
        })
    }

    /// The delay before the headers of a request with these random choices.
    pub(crate) fn delay(&self, draw: Draw) -> Duration {
        let tail = if draw.tail { self.tail_ms } else { 0 };
        Duration::from_millis(self.latency_ms.saturating_add(tail))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn empty_json_is_the_default_plan() {
        let plan: FaultPlan = serde_json::from_str("{}").unwrap();
        assert_eq!(plan, FaultPlan::default());
        assert_eq!(plan.words, 12);
        assert!((plan.error_rate - 1.0).abs() < f64::EPSILON);
        assert!(plan.validate().is_ok());
    }

    #[test]
    fn parses_fields_and_rejects_unknown_ones() {
        let plan: FaultPlan =
            serde_json::from_str(r#"{"status":429,"retry_after":3,"cut_after_chunks":2}"#).unwrap();
        assert_eq!(plan.status, Some(429));
        assert_eq!(plan.retry_after, Some(3));
        assert_eq!(plan.cut_after_chunks, Some(2));
        assert_eq!(plan.words, 12);
        let err = serde_json::from_str::<FaultPlan>(r#"{"stauts":500}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn round_trips_through_json() {
        let plan = FaultPlan {
            status: Some(503),
            error_rate: 0.25,
            seed: 9,
            ..FaultPlan::default()
        };
        let json = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<FaultPlan>(&json).unwrap(), plan);
    }

    #[test]
    fn validate_rejects_bad_values() {
        let bad_status = FaultPlan {
            status: Some(42),
            ..FaultPlan::default()
        };
        assert!(bad_status.validate().unwrap_err().contains("status"));
        let bad_rate = FaultPlan {
            error_rate: 1.5,
            ..FaultPlan::default()
        };
        assert!(bad_rate.validate().unwrap_err().contains("error_rate"));
        let body_alone = FaultPlan {
            error_body: Some("{}".into()),
            ..FaultPlan::default()
        };
        assert!(body_alone.validate().unwrap_err().contains("error_body"));
    }

    #[test]
    fn draws_are_reproducible_and_follow_the_rates() {
        let plan = FaultPlan {
            error_rate: 0.5,
            tail_rate: 0.1,
            seed: 7,
            ..FaultPlan::default()
        };
        let first: Vec<Draw> = (0..200).map(|n| plan.draw(n)).collect();
        let again: Vec<Draw> = (0..200).map(|n| plan.draw(n)).collect();
        assert_eq!(first, again);
        let errors = first.iter().filter(|d| d.error).count();
        assert!((60..140).contains(&errors), "{errors}");
        let tails = first.iter().filter(|d| d.tail).count();
        assert!((5..45).contains(&tails), "{tails}");
        let other = FaultPlan {
            seed: 8,
            ..plan.clone()
        };
        assert_ne!(first, (0..200).map(|n| other.draw(n)).collect::<Vec<_>>());
        assert!((0..100).all(|n| FaultPlan::default().draw(n).error));
        let never = FaultPlan {
            error_rate: 0.0,
            ..FaultPlan::default()
        };
        assert!((0..100).all(|n| !never.draw(n).error));
    }

    #[test]
    fn delay_adds_the_tail() {
        let plan = FaultPlan {
            latency_ms: 10,
            tail_ms: 500,
            ..FaultPlan::default()
        };
        assert_eq!(
            plan.delay(Draw {
                error: false,
                tail: false
            }),
            Duration::from_millis(10)
        );
        assert_eq!(
            plan.delay(Draw {
                error: false,
                tail: true
            }),
            Duration::from_millis(510)
        );
    }
}
