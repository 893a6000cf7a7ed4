//! A traced request's spans, written straight into the OTLP protocol's messages
//! (`opentelemetry-proto`): the server span (the client's request), a client span per upstream
//! call, and an event on the server span per target passed over. Attribute names follow the
//! OpenTelemetry GenAI semantic conventions (`gen_ai.*`, `error.type`,
//! `http.response.status_code`, `server.address`) and add the gateway's (`switchyard.*`).

use std::time::{Duration, SystemTime};

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};

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

/// The `gen_ai.provider.name` of a provider kind (the conventions' names where they have one).
pub(super) fn provider_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAi => "openai",
        ProviderKind::OpenAiCompatible => "openai_compatible",
        ProviderKind::Azure => "azure.ai.openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Gemini => "gcp.gemini",
        ProviderKind::Bedrock => "aws.bedrock",
    }
}

/// How many spans `t` makes.
pub(super) fn count(t: &Traced) -> usize {
    1 + t.path.iter().filter(|a| a.picked.is_some()).count()
}

/// An attribute.
fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        key_strindex: 0,
    }
}

fn text(key: &str, value: impl Into<String>) -> KeyValue {
    kv(key, Value::StringValue(value.into()))
}

fn int(key: &str, value: i64) -> KeyValue {
    kv(key, Value::IntValue(value))
}

fn flag(key: &str, value: bool) -> KeyValue {
    kv(key, Value::BoolValue(value))
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn error_status(message: String) -> Option<Status> {
    Some(Status {
        message,
        code: StatusCode::Error as i32,
    })
}

/// The spans of `t`, the server span first, appended to `out`.
pub(super) fn spans(t: Traced, out: &mut Vec<Span>) {
    let Traced {
        trace,
        end,
        latency,
        record,
        path,
    } = t;
    let start = end.checked_sub(latency).unwrap_or(end);
    let trace_id = trace.trace_id.to_be_bytes().to_vec();
    let served = record.target.as_deref();
    let served_attempt = path
        .iter()
        .rposition(|a| a.outcome == AttemptOutcome::Ok && Some(a.target.id()) == served);
    let hedged_race = path
        .iter()
        .any(|a| a.picked == Some(Picked::Hedge) || a.outcome == AttemptOutcome::HedgeLost);
    let calls: Vec<usize> = (0..path.len())
        .filter(|&i| path[i].picked.is_some())
        .collect();

    let mut attributes = Vec::with_capacity(18);
    attributes.extend([
        text("gen_ai.operation.name", OPERATION),
        text("gen_ai.request.model", record.route.as_str()),
        int("http.response.status_code", i64::from(record.status)),
        text("switchyard.route", record.route.as_str()),
        text("switchyard.request_id", record.request_id.as_str()),
        flag("switchyard.stream", record.stream),
        int("switchyard.attempts", calls.len() as i64),
        flag("switchyard.hedged", record.hedged),
        int("switchyard.turns_dropped", i64::from(record.turns_dropped)),
    ]);
    if let Some(a) = served_attempt.and_then(|i| path.get(i)) {
        attributes.extend([
            text(
                "gen_ai.provider.name",
                provider_name(a.target.provider.config.kind),
            ),
            text("gen_ai.response.model", a.target.config.model.as_str()),
            text("switchyard.target", a.target.id()),
        ]);
    }
    if let Some(n) = record.tokens_in {
        attributes.push(int("gen_ai.usage.input_tokens", n as i64));
    }
    if let Some(n) = record.tokens_out {
        attributes.push(int("gen_ai.usage.output_tokens", n as i64));
    }
    if let Some(ttft) = record.ttft_ms {
        attributes.push(kv(
            "switchyard.time_to_first_token_ms",
            Value::DoubleValue(ttft),
        ));
    }
    if let Some(session) = record.session {
        attributes.push(text("switchyard.session", session));
    }
    let failed = record.status >= 500 || record.status == 499 || record.error.is_some();
    let status = if failed {
        let kind = if record.status >= 400 {
            record.status.to_string()
        } else {
            "stream_broken".to_owned()
        };
        attributes.push(text("error.type", kind));
        error_status(description(record.error.as_deref().unwrap_or("")))
    } else {
        None
    };
    let events = (path.iter().filter(|a| a.picked.is_none()))
        .map(|a| Event {
            time_unix_nano: nanos(start),
            name: "switchyard.target_passed_over".to_owned(),
            attributes: vec![
                text("switchyard.target", a.target.id()),
                text("switchyard.reason", a.outcome.label()),
                text("switchyard.breaker.state", breaker_state(a)),
            ],
            dropped_attributes_count: 0,
        })
        .collect();
    out.push(Span {
        trace_id: trace_id.clone(),
        span_id: trace.span.to_be_bytes().to_vec(),
        trace_state: String::new(),
        parent_span_id: trace
            .parent
            .map_or_else(Vec::new, |p| p.to_be_bytes().to_vec()),
        flags: SAMPLED,
        name: format!("{OPERATION} {}", record.route),
        kind: SpanKind::Server as i32,
        start_time_unix_nano: nanos(start),
        end_time_unix_nano: nanos(end),
        attributes,
        dropped_attributes_count: 0,
        events,
        dropped_events_count: 0,
        links: Vec::new(),
        dropped_links_count: 0,
        status,
    });

    for (n, &i) in calls.iter().enumerate() {
        let a = &path[i];
        let mut span = attempt_span(
            a,
            at(start, a.start),
            calls.get(n + 1).is_some(),
            hedged_race,
            served_attempt == Some(i),
        );
        span.trace_id = trace_id.clone();
        span.parent_span_id = trace.span.to_be_bytes().to_vec();
        out.push(span);
    }
}

/// The span of one upstream call that started at `start`; `moved_on`: another call followed
/// it; `hedged_race`: the request raced a hedge; `served`: it produced the answer.
fn attempt_span(
    a: &Attempt,
    start: SystemTime,
    moved_on: bool,
    hedged_race: bool,
    served: bool,
) -> Span {
    let target = &a.target;
    let mut attributes = Vec::with_capacity(14);
    attributes.extend([
        text("gen_ai.operation.name", OPERATION),
        text(
            "gen_ai.provider.name",
            provider_name(target.provider.config.kind),
        ),
        text("gen_ai.request.model", target.config.model.as_str()),
        text("switchyard.target", target.id()),
        text("switchyard.attempt.outcome", a.outcome.label()),
        text("switchyard.breaker.state", breaker_state(a)),
    ]);
    if let Some(host) = target.url.host() {
        attributes.push(text("server.address", host));
    }
    if let Some(picked) = a.picked {
        attributes.push(text("switchyard.attempt.picked", picked.label()));
    }
    if let Some(status) = a.status {
        attributes.push(int("http.response.status_code", i64::from(status)));
    }
    if let Some(chars) = a.carried_chars {
        attributes.push(int("switchyard.carried_chars", chars as i64));
    }
    let hedge = match a.outcome {
        AttemptOutcome::HedgeLost => Some("lost"),
        _ if served && hedged_race => Some("won"),
        _ if a.picked == Some(Picked::Hedge) => Some("failed"),
        _ => None,
    };
    if let Some(hedge) = hedge {
        attributes.push(text("switchyard.hedge.outcome", hedge));
    }
    let failed = !matches!(
        a.outcome,
        AttemptOutcome::Ok | AttemptOutcome::HedgeLost | AttemptOutcome::Cancelled
    );
    let status = if failed {
        let kind = match (a.outcome, a.status) {
            (AttemptOutcome::Status, Some(code)) => code.to_string(),
            (outcome, _) => outcome.label().to_owned(),
        };
        attributes.push(text("error.type", kind));
        if moved_on {
            attributes.push(text("switchyard.failover.reason", a.outcome.label()));
        }
        error_status(a.outcome.label().to_owned())
    } else {
        if a.outcome == AttemptOutcome::Ok {
            attributes.push(text("gen_ai.response.model", target.config.model.as_str()));
        }
        None
    };
    Span {
        trace_id: Vec::new(),
        span_id: span_id(a).to_be_bytes().to_vec(),
        trace_state: String::new(),
        parent_span_id: Vec::new(),
        flags: SAMPLED,
        name: format!("{OPERATION} {}", target.config.model),
        kind: SpanKind::Client as i32,
        start_time_unix_nano: nanos(start),
        end_time_unix_nano: nanos(at(start, a.duration)),
        attributes,
        dropped_attributes_count: 0,
        events: Vec::new(),
        dropped_events_count: 0,
        links: Vec::new(),
        dropped_links_count: 0,
        status,
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
