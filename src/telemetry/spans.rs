//! A traced request's spans: the server span (the client's request), a client span per
//! upstream call, and an event on the server span per target passed over. Attribute names
//! follow the OpenTelemetry GenAI semantic conventions (`gen_ai.*`, `error.type`,
//! `http.response.status_code`, `server.address`) and add the gateway's (`switchyard.*`).

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::Traced;
use crate::config::ProviderKind;
use crate::routing::path::{Attempt, AttemptOutcome};
use crate::routing::select::Picked;

/// The operation every span names (`gen_ai.operation.name`): the gateway serves chat-style
/// generation on every client API.
const OPERATION: &str = "chat";

/// The longest error description kept on a span.
const MAX_DESCRIPTION: usize = 512;

/// The `gen_ai.provider.name` of a provider kind (the conventions' names where they have one).
pub(super) fn provider_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAi => "openai",
        ProviderKind::OpenAiCompatible => "openai_compatible",
        ProviderKind::Azure => "azure.ai.openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Gemini => "gcp.gemini",
    }
}

/// How many spans `t` makes.
pub(super) fn count(t: &Traced) -> usize {
    1 + t.path.iter().filter(|a| a.picked.is_some()).count()
}

/// The spans of `t`, the server span first.
pub(super) fn spans(t: Traced, scope: &InstrumentationScope, out: &mut Vec<SpanData>) {
    let Traced {
        trace,
        end,
        latency,
        record,
        path,
    } = t;
    let start = end.checked_sub(latency).unwrap_or(end);
    let trace_id = TraceId::from(trace.trace_id);
    let context = |span: u64| {
        SpanContext::new(
            trace_id,
            SpanId::from(span),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        )
    };
    let served = record.target.as_deref();
    let served_attempt = path
        .iter()
        .rposition(|a| a.outcome == AttemptOutcome::Ok && Some(a.target.id()) == served);
    let hedged_race = path
        .iter()
        .any(|a| a.picked == Some(Picked::Hedge) || a.outcome == AttemptOutcome::HedgeLost);

    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", OPERATION),
        KeyValue::new("gen_ai.request.model", record.route.clone()),
        KeyValue::new("http.response.status_code", i64::from(record.status)),
        KeyValue::new("switchyard.route", record.route.clone()),
        KeyValue::new("switchyard.request_id", record.request_id.clone()),
        KeyValue::new("switchyard.stream", record.stream),
        KeyValue::new("switchyard.attempts", count_calls(&path)),
        KeyValue::new("switchyard.hedged", record.hedged),
        KeyValue::new("switchyard.turns_dropped", i64::from(record.turns_dropped)),
    ];
    if let Some(a) = served_attempt.and_then(|i| path.get(i)) {
        attributes.push(KeyValue::new(
            "gen_ai.provider.name",
            provider_name(a.target.provider.config.kind),
        ));
        attributes.push(KeyValue::new(
            "gen_ai.response.model",
            a.target.config.model.clone(),
        ));
        attributes.push(KeyValue::new("switchyard.target", a.target.id().to_owned()));
    }
    if let Some(n) = record.tokens_in {
        attributes.push(KeyValue::new("gen_ai.usage.input_tokens", n as i64));
    }
    if let Some(n) = record.tokens_out {
        attributes.push(KeyValue::new("gen_ai.usage.output_tokens", n as i64));
    }
    if let Some(ttft) = record.ttft_ms {
        attributes.push(KeyValue::new("switchyard.time_to_first_token_ms", ttft));
    }
    if let Some(session) = &record.session {
        attributes.push(KeyValue::new("switchyard.session", session.clone()));
    }
    let failed = record.status >= 500 || record.status == 499 || record.error.is_some();
    let status = if failed {
        let kind = if record.status >= 400 {
            record.status.to_string()
        } else {
            "stream_broken".to_owned()
        };
        attributes.push(KeyValue::new("error.type", kind));
        Status::error(description(record.error.as_deref().unwrap_or("")))
    } else {
        Status::Unset
    };
    let mut events = SpanEvents::default();
    for a in path.iter().filter(|a| a.picked.is_none()) {
        events.events.push(Event::new(
            "switchyard.target_passed_over",
            start,
            vec![
                KeyValue::new("switchyard.target", a.target.id().to_owned()),
                KeyValue::new("switchyard.reason", a.outcome.label()),
                KeyValue::new("switchyard.breaker.state", breaker_state(a)),
            ],
            0,
        ));
    }
    out.push(SpanData {
        span_context: context(trace.span),
        parent_span_id: trace.parent.map_or(SpanId::INVALID, SpanId::from),
        parent_span_is_remote: trace.parent.is_some(),
        span_kind: SpanKind::Server,
        name: Cow::Owned(format!("{OPERATION} {}", record.route)),
        start_time: start,
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events,
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    });

    let calls: Vec<usize> = (0..path.len())
        .filter(|&i| path[i].picked.is_some())
        .collect();
    for (n, &i) in calls.iter().enumerate() {
        let a = &path[i];
        let moved_on = calls.get(n + 1).is_some();
        out.push(attempt_span(
            a,
            AttemptSpan {
                context: context(span_id(a)),
                parent: trace.span,
                start: at(start, a.start),
                moved_on,
                hedged_race,
                served: served_attempt == Some(i),
            },
            scope,
        ));
    }
}

/// What an attempt's span needs beside the attempt.
struct AttemptSpan {
    context: SpanContext,
    parent: u64,
    start: SystemTime,
    /// Another call followed it.
    moved_on: bool,
    /// The request raced a hedge.
    hedged_race: bool,
    /// It produced the answer.
    served: bool,
}

fn attempt_span(a: &Attempt, s: AttemptSpan, scope: &InstrumentationScope) -> SpanData {
    let target = &a.target;
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", OPERATION),
        KeyValue::new(
            "gen_ai.provider.name",
            provider_name(target.provider.config.kind),
        ),
        KeyValue::new("gen_ai.request.model", target.config.model.clone()),
        KeyValue::new("switchyard.target", target.id().to_owned()),
        KeyValue::new("switchyard.attempt.outcome", a.outcome.label()),
        KeyValue::new("switchyard.breaker.state", breaker_state(a)),
    ];
    if let Some(host) = target.url.host() {
        attributes.push(KeyValue::new("server.address", host.to_owned()));
    }
    if let Some(picked) = a.picked {
        attributes.push(KeyValue::new("switchyard.attempt.picked", picked.label()));
    }
    if let Some(status) = a.status {
        attributes.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
    }
    if let Some(chars) = a.carried_chars {
        attributes.push(KeyValue::new("switchyard.carried_chars", chars as i64));
    }
    let hedge = match a.outcome {
        AttemptOutcome::HedgeLost => Some("lost"),
        _ if s.served && s.hedged_race => Some("won"),
        _ if a.picked == Some(Picked::Hedge) => Some("failed"),
        _ => None,
    };
    if let Some(hedge) = hedge {
        attributes.push(KeyValue::new("switchyard.hedge.outcome", hedge));
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
        attributes.push(KeyValue::new("error.type", kind));
        if s.moved_on {
            attributes.push(KeyValue::new(
                "switchyard.failover.reason",
                a.outcome.label(),
            ));
        }
        Status::error(a.outcome.label())
    } else {
        if a.outcome == AttemptOutcome::Ok {
            attributes.push(KeyValue::new(
                "gen_ai.response.model",
                target.config.model.clone(),
            ));
        }
        Status::Unset
    };
    SpanData {
        span_context: s.context,
        parent_span_id: SpanId::from(s.parent),
        parent_span_is_remote: false,
        span_kind: SpanKind::Client,
        name: Cow::Owned(format!("{OPERATION} {}", target.config.model)),
        start_time: s.start,
        end_time: at(s.start, a.duration),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

/// Upstream calls made (targets passed over are not).
fn count_calls(path: &[Attempt]) -> i64 {
    path.iter().filter(|a| a.picked.is_some()).count() as i64
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
