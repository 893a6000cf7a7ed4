//! A traced request's spans, encoded straight into OTLP protobuf (`proto.rs`): the server span
//! (the client's request), a client span per upstream call, and an event on the server span
//! per target passed over. Attribute names follow the OpenTelemetry GenAI semantic conventions
//! (`gen_ai.*`, `error.type`, `http.response.status_code`, `server.address`) and add the
//! gateway's (`switchyard.*`).

use std::time::{Duration, SystemTime};

use super::proto::{self, attribute, Value};
use super::Traced;
use crate::config::ProviderKind;
use crate::routing::path::{Attempt, AttemptOutcome};
use crate::routing::select::Picked;

/// The operation every span names (`gen_ai.operation.name`): the gateway serves chat-style
/// generation on every client API.
const OPERATION: &str = "chat";

/// The longest error description kept on a span.
const MAX_DESCRIPTION: usize = 512;

/// The W3C flags of a sampled span, as OTLP's `flags` carry them.
const SAMPLED: u32 = 1;

/// `Span` fields (opentelemetry/proto/trace/v1/trace.proto).
mod field {
    pub(super) const TRACE_ID: u32 = 1;
    pub(super) const SPAN_ID: u32 = 2;
    pub(super) const PARENT_SPAN_ID: u32 = 4;
    pub(super) const NAME: u32 = 5;
    pub(super) const KIND: u32 = 6;
    pub(super) const START: u32 = 7;
    pub(super) const END: u32 = 8;
    pub(super) const ATTRIBUTES: u32 = 9;
    pub(super) const EVENTS: u32 = 11;
    pub(super) const STATUS: u32 = 15;
    pub(super) const FLAGS: u32 = 16;
    /// `ScopeSpans.spans`.
    pub(super) const SCOPE_SPANS: u32 = 2;
}

/// `SpanKind`.
const SERVER: u64 = 2;
const CLIENT: u64 = 3;
/// `Status.StatusCode.STATUS_CODE_ERROR`.
const ERROR: u64 = 2;

/// The `gen_ai.provider.name` of a provider kind (the conventions' names where they have one).
pub(super) fn provider_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAi => "openai",
        ProviderKind::OpenAiCompatible => "openai_compatible",
        ProviderKind::Azure => "azure.ai.openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Gemini => "gcp.gemini",
        ProviderKind::Bedrock => "aws.bedrock",
        ProviderKind::Vertex => "gcp.vertex_ai",
    }
}

/// How many spans `t` makes.
pub(super) fn count(t: &Traced) -> usize {
    1 + t.path.iter().filter(|a| a.picked.is_some()).count()
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `chat {what}` as field `field`.
fn name(out: &mut Vec<u8>, field: u32, what: &str) {
    let at = proto::open(out, field);
    out.extend_from_slice(OPERATION.as_bytes());
    out.push(b' ');
    out.extend_from_slice(what.as_bytes());
    proto::close(out, at);
}

/// An error `Status` (message = 2, code = 3).
fn error_status(out: &mut Vec<u8>, message: &str) {
    let at = proto::open(out, field::STATUS);
    proto::string(out, 2, message);
    proto::uint(out, 3, ERROR);
    proto::close(out, at);
}

/// The fields every span starts with: ids, flags, name, kind, times.
fn head(out: &mut Vec<u8>, trace_id: u128, span: u64, parent: Option<u64>, kind: u64) {
    proto::bytes(out, field::TRACE_ID, &trace_id.to_be_bytes());
    proto::bytes(out, field::SPAN_ID, &span.to_be_bytes());
    if let Some(parent) = parent {
        proto::bytes(out, field::PARENT_SPAN_ID, &parent.to_be_bytes());
    }
    proto::fixed32(out, field::FLAGS, SAMPLED);
    proto::uint(out, field::KIND, kind);
}

fn times(out: &mut Vec<u8>, start: SystemTime, end: SystemTime) {
    proto::fixed64(out, field::START, nanos(start));
    proto::fixed64(out, field::END, nanos(end));
}

/// The spans of `t`, the server span first, appended to `out` as `ScopeSpans.spans` entries
/// (each written in place).
pub(super) fn write(t: &Traced, out: &mut Vec<u8>) {
    let Traced {
        trace,
        end,
        latency,
        record,
        path,
    } = t;
    let start = end.checked_sub(*latency).unwrap_or(*end);
    let served = record.target.as_deref();
    let served_attempt = path
        .iter()
        .rposition(|a| a.outcome == AttemptOutcome::Ok && Some(a.target.id()) == served);
    let hedged_race = path
        .iter()
        .any(|a| a.picked == Some(Picked::Hedge) || a.outcome == AttemptOutcome::HedgeLost);
    let calls = path.iter().filter(|a| a.picked.is_some()).count();

    let mark = proto::open(out, field::SCOPE_SPANS);
    let span = &mut *out;
    head(span, trace.trace_id, trace.span, trace.parent, SERVER);
    name(span, field::NAME, &record.route);
    times(span, start, *end);
    let mut attr = |key: &str, value: Value<'_>| attribute(span, field::ATTRIBUTES, key, value);
    attr("gen_ai.operation.name", Value::Str(OPERATION));
    attr("gen_ai.request.model", Value::Str(&record.route));
    attr(
        "http.response.status_code",
        Value::Int(i64::from(record.status)),
    );
    attr("switchyard.route", Value::Str(&record.route));
    attr("switchyard.request_id", Value::Str(&record.request_id));
    attr("switchyard.stream", Value::Bool(record.stream));
    attr("switchyard.attempts", Value::Int(calls as i64));
    attr("switchyard.hedged", Value::Bool(record.hedged));
    attr(
        "switchyard.turns_dropped",
        Value::Int(i64::from(record.turns_dropped)),
    );
    if let Some(a) = served_attempt.and_then(|i| path.get(i)) {
        let kind = provider_name(a.target.provider.config.kind);
        attr("gen_ai.provider.name", Value::Str(kind));
        attr("gen_ai.response.model", Value::Str(&a.target.config.model));
        attr("switchyard.target", Value::Str(a.target.id()));
    }
    if let Some(n) = record.tokens_in {
        attr("gen_ai.usage.input_tokens", Value::Int(n as i64));
    }
    if let Some(n) = record.tokens_out {
        attr("gen_ai.usage.output_tokens", Value::Int(n as i64));
    }
    if let Some(ttft) = record.ttft_ms {
        attr("switchyard.time_to_first_token_ms", Value::Double(ttft));
    }
    if let Some(session) = &record.session {
        attr("switchyard.session", Value::Str(session));
    }
    let failed = record.status >= 500 || record.status == 499 || record.error.is_some();
    if failed {
        let kind = if record.status >= 400 {
            record.status.to_string()
        } else {
            "stream_broken".to_owned()
        };
        attr("error.type", Value::Str(&kind));
        error_status(span, &description(record.error.as_deref().unwrap_or("")));
    }
    for a in path.iter().filter(|a| a.picked.is_none()) {
        let event_at = proto::open(span, field::EVENTS);
        let event = &mut *span;
        // Event: time_unix_nano = 1, name = 2, attributes = 3.
        proto::fixed64(event, 1, nanos(start));
        proto::string(event, 2, "switchyard.target_passed_over");
        attribute(event, 3, "switchyard.target", Value::Str(a.target.id()));
        attribute(event, 3, "switchyard.reason", Value::Str(a.outcome.label()));
        attribute(
            event,
            3,
            "switchyard.breaker.state",
            Value::Str(breaker_state(a)),
        );
        proto::close(span, event_at);
    }
    proto::close(out, mark);

    let mut seen = 0;
    for (i, a) in path.iter().enumerate().filter(|(_, a)| a.picked.is_some()) {
        seen += 1;
        let mark = proto::open(out, field::SCOPE_SPANS);
        attempt_span(
            out,
            a,
            AttemptSpan {
                trace_id: trace.trace_id,
                parent: trace.span,
                start: at(start, a.start),
                moved_on: seen < calls,
                hedged_race,
                served: served_attempt == Some(i),
            },
        );
        proto::close(out, mark);
    }
}

/// What an attempt's span needs beside the attempt.
struct AttemptSpan {
    trace_id: u128,
    parent: u64,
    start: SystemTime,
    /// Another call followed it.
    moved_on: bool,
    /// The request raced a hedge.
    hedged_race: bool,
    /// It produced the answer.
    served: bool,
}

fn attempt_span(span: &mut Vec<u8>, a: &Attempt, s: AttemptSpan) {
    let target = &a.target;
    head(span, s.trace_id, span_id(a), Some(s.parent), CLIENT);
    name(span, field::NAME, &target.config.model);
    times(span, s.start, at(s.start, a.duration));
    let mut attr = |key: &str, value: Value<'_>| attribute(span, field::ATTRIBUTES, key, value);
    attr("gen_ai.operation.name", Value::Str(OPERATION));
    attr(
        "gen_ai.provider.name",
        Value::Str(provider_name(target.provider.config.kind)),
    );
    attr("gen_ai.request.model", Value::Str(&target.config.model));
    attr("switchyard.target", Value::Str(target.id()));
    attr("switchyard.attempt.outcome", Value::Str(a.outcome.label()));
    attr("switchyard.breaker.state", Value::Str(breaker_state(a)));
    if let Some(host) = target.url.host() {
        attr("server.address", Value::Str(host));
    }
    if let Some(picked) = a.picked {
        attr("switchyard.attempt.picked", Value::Str(picked.label()));
    }
    if let Some(status) = a.status {
        attr("http.response.status_code", Value::Int(i64::from(status)));
    }
    if let Some(chars) = a.carried_chars {
        attr("switchyard.carried_chars", Value::Int(chars as i64));
    }
    let hedge = match a.outcome {
        AttemptOutcome::HedgeLost => Some("lost"),
        _ if s.served && s.hedged_race => Some("won"),
        _ if a.picked == Some(Picked::Hedge) => Some("failed"),
        _ => None,
    };
    if let Some(hedge) = hedge {
        attr("switchyard.hedge.outcome", Value::Str(hedge));
    }
    let failed = !matches!(
        a.outcome,
        AttemptOutcome::Ok | AttemptOutcome::HedgeLost | AttemptOutcome::Cancelled
    );
    if failed {
        let kind = match (a.outcome, a.status) {
            (AttemptOutcome::Status, Some(code)) => code.to_string(),
            (outcome, _) => outcome.label().to_owned(),
        };
        attr("error.type", Value::Str(&kind));
        if s.moved_on {
            attr("switchyard.failover.reason", Value::Str(a.outcome.label()));
        }
        error_status(span, a.outcome.label());
    } else if a.outcome == AttemptOutcome::Ok {
        attr("gen_ai.response.model", Value::Str(&target.config.model));
    }
}

/// The attempt's span id (one of its own if the request path gave it none).
fn span_id(a: &Attempt) -> u64 {
    match a.span {
        0 => crate::wire::trace::fresh_span(),
        id => id,
    }
}

/// The target's breaker state as the span is written (just after the request).
fn breaker_state(a: &Attempt) -> &'static str {
    a.target
        .health
        .breaker_state(tokio::time::Instant::now())
        .as_str()
}

fn at(t: SystemTime, after: Duration) -> SystemTime {
    t.checked_add(after).unwrap_or(t)
}

fn description(text: &str) -> String {
    match text.char_indices().nth(MAX_DESCRIPTION) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
    }
}
