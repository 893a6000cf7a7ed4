//! Traces (`[telemetry]`) received by a real OTLP/HTTP collector started by the test, which
//! decodes them with the published protocol definitions: a server span per request under the
//! client's `traceparent`, a client span per upstream call with the GenAI attributes and the
//! failover's reason, hedges and their losers marked, the `traceparent` each attempt sent
//! upstream, sampling, and a collector that is down costing requests nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use serde_json::json;
use support::otlp::{Collector, Span};
use support::*;
use switchyard::mock::{FaultPlan, MockServer};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn traced(toml: &str, collector: &str, extra: &str) -> String {
    format!("{toml}\n[telemetry]\notlp_endpoint = \"{collector}\"\nservice_name = \"gw-test\"\n{extra}\n")
}

fn client_traceparent(flags: &str) -> String {
    format!("00-{TRACE}-{CLIENT_SPAN}-{flags}")
}

/// A request under the client's sampled trace.
async fn sampled(gw: &Gateway, body: serde_json::Value) -> reqwest::Response {
    gw.chat_with(body, &[("traceparent", &client_traceparent("01"))])
        .await
}

/// `n` mocks, a collector, and a gateway tracing to it (`toml` extra route lines, `extra`
/// more `[telemetry]` keys).
async fn traced_gateway(
    n: usize,
    toml: &str,
    extra: &str,
) -> (Vec<MockServer>, Collector, Gateway) {
    let m = mocks(n).await;
    let collector = Collector::start().await;
    let gw = Gateway::start(&traced(&(config(&m, "") + toml), &collector.url, extra)).await;
    (m, collector, gw)
}

/// The server span and the client spans (in start order) of one trace.
fn split(spans: Vec<Span>) -> (Span, Vec<Span>) {
    let (mut servers, mut clients): (Vec<Span>, Vec<Span>) =
        spans.into_iter().partition(|s| s.kind == 2);
    assert_eq!(servers.len(), 1, "one server span: {servers:#?}");
    clients.sort_by_key(|s| s.start_ns);
    (servers.remove(0), clients)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_one_trace_under_the_clients_span() {
    let (m, collector, gw) = traced_gateway(2, "", "").await;
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..FaultPlan::default()
    });
    let resp = sampled(&gw, chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let (server, calls) = split(collector.trace(TRACE, 3).await);

    // The gateway's span joins the client's trace, under the client's span.
    assert_eq!(server.parent, CLIENT_SPAN);
    assert_eq!(server.service, "gw-test");
    assert_eq!(server.name, "chat chat");
    assert_eq!(server.attr("gen_ai.operation.name"), "chat");
    assert_eq!(server.attr("gen_ai.request.model"), "chat");
    assert_eq!(server.attr("gen_ai.response.model"), "model-1");
    assert_eq!(server.attr("gen_ai.provider.name"), "openai_compatible");
    assert_eq!(server.attr("switchyard.route"), "chat");
    assert_eq!(server.attr("switchyard.target"), "p1/model-1");
    assert_eq!(server.attr("switchyard.attempts"), "2");
    assert_eq!(server.attr("http.response.status_code"), "200");
    assert_eq!(
        server.attr("switchyard.request_id"),
        header(&resp, "x-switchyard-request-id")
    );
    assert!(server.attrs.contains_key("gen_ai.usage.input_tokens"));
    assert!(server.attrs.contains_key("gen_ai.usage.output_tokens"));
    assert_eq!(server.status, 0, "an answered request is no error");

    // One client span per upstream call, children of the server span.
    assert_eq!(calls.len(), 2, "{calls:#?}");
    for c in &calls {
        assert_eq!(c.parent, server.span_id);
        assert_eq!(c.attr("gen_ai.operation.name"), "chat");
        assert_eq!(c.attr("gen_ai.provider.name"), "openai_compatible");
        assert_eq!(c.attr("server.address"), "127.0.0.1");
        assert!(c.start_ns >= server.start_ns && c.end_ns <= server.end_ns);
    }
    let (failed, answered) = (&calls[0], &calls[1]);
    assert_eq!(failed.name, "chat model-0");
    assert_eq!(failed.attr("switchyard.target"), "p0/model-0");
    assert_eq!(failed.attr("switchyard.attempt.outcome"), "status");
    assert_eq!(failed.attr("switchyard.failover.reason"), "status");
    assert_eq!(failed.attr("http.response.status_code"), "503");
    assert_eq!(failed.attr("error.type"), "503");
    assert_eq!(failed.attr("switchyard.breaker.state"), "closed");
    assert_eq!(failed.status, 2, "a failed call is an error span");
    assert_eq!(answered.attr("switchyard.target"), "p1/model-1");
    assert_eq!(answered.attr("switchyard.attempt.outcome"), "ok");
    assert_eq!(answered.attr("switchyard.attempt.picked"), "failover");
    assert_eq!(answered.attr("gen_ai.response.model"), "model-1");
    assert_eq!(answered.attr("switchyard.failover.reason"), "");
    assert_eq!(answered.status, 0);

    // Each call carried its own span as the parent in the `traceparent` it sent upstream.
    for (mock, call) in m.iter().zip(&calls) {
        let sent = mock.requests();
        let tp = sent[0]
            .header("traceparent")
            .expect("a traceparent upstream");
        assert_eq!(tp, format!("00-{TRACE}-{}-01", call.span_id));
    }
    assert_eq!(
        collector.content_types.lock().unwrap()[0],
        "application/x-protobuf"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedge_and_its_loser_are_marked() {
    let hedge = "\n[routes.hedge]\ndelay = \"50ms\"\nbudget = 1.0\n";
    let (m, collector, gw) = traced_gateway(2, hedge, "").await;
    m[0].set_plan(FaultPlan {
        latency_ms: 1500,
        ..FaultPlan::default()
    });
    let resp = sampled(&gw, chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-hedged"), "true");
    let (server, calls) = split(collector.trace(TRACE, 3).await);
    assert_eq!(server.attr("switchyard.hedged"), "true");
    assert_eq!(calls.len(), 2, "{calls:#?}");
    let (slow, hedge) = (&calls[0], &calls[1]);
    assert_eq!(slow.attr("switchyard.target"), "p0/model-0");
    assert_eq!(slow.attr("switchyard.attempt.outcome"), "hedge_lost");
    assert_eq!(slow.attr("switchyard.hedge.outcome"), "lost");
    assert_eq!(slow.status, 0, "a lost race is no error");
    assert_eq!(hedge.attr("switchyard.target"), "p1/model-1");
    assert_eq!(hedge.attr("switchyard.attempt.picked"), "hedge");
    assert_eq!(hedge.attr("switchyard.hedge.outcome"), "won");
    assert!(
        hedge.start_ns >= slow.start_ns + 40_000_000,
        "the hedge started at its delay"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_continued_elsewhere_has_a_span_per_target() {
    let (m, collector, gw) = traced_gateway(2, "", "").await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..FaultPlan::default()
    });
    let resp = sampled(&gw, chat_body(true)).await;
    let text = resp.text().await.unwrap();
    assert!(text.contains("[DONE]"), "the stream was continued: {text}");
    let (server, calls) = split(collector.trace(TRACE, 3).await);
    assert_eq!(server.attr("switchyard.stream"), "true");
    assert_eq!(server.attr("switchyard.target"), "p1/model-1");
    assert!(server
        .attrs
        .contains_key("switchyard.time_to_first_token_ms"));
    let outcomes: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| {
            (
                c.attr("switchyard.target"),
                c.attr("switchyard.attempt.outcome"),
            )
        })
        .collect();
    assert_eq!(outcomes, [("p0/model-0", "cut"), ("p1/model-1", "ok")]);
    assert_eq!(calls[0].attr("switchyard.failover.reason"), "cut");
    assert_eq!(calls[1].attr("switchyard.attempt.picked"), "continuation");
    assert_ne!(calls[1].attr("switchyard.carried_chars"), "0");
    let tp = m[1].requests()[0].header("traceparent").unwrap().to_owned();
    assert_eq!(tp, format!("00-{TRACE}-{}-01", calls[1].span_id));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_follows_the_client_then_the_ratio() {
    let m = mocks(1).await;
    let collector = Collector::start().await;
    let gw = Gateway::start(&traced(
        &config(&m, ""),
        &collector.url,
        "sample_ratio = 0.0",
    ))
    .await;
    // Not sampled by the client, and the ratio traces nothing else.
    let unsampled = gw
        .chat_with(
            chat_body(false),
            &[("traceparent", &client_traceparent("00"))],
        )
        .await;
    assert_eq!(unsampled.status(), 200);
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    // A sampled client trace is always traced.
    let sampled = sampled(&gw, chat_body(false)).await;
    assert_eq!(sampled.status(), 200);
    let spans = collector.trace(TRACE, 2).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let all = collector.spans();
    assert_eq!(all.len(), 2, "only the sampled request: {all:#?}");
    assert_eq!(
        spans
            .iter()
            .find(|s| s.kind == 2)
            .unwrap()
            .attr("switchyard.request_id"),
        header(&sampled, "x-switchyard-request-id")
    );
    let sent = m[0].requests();
    assert_eq!(
        sent[0].header("traceparent"),
        None,
        "an untraced request sends none"
    );
    assert_eq!(sent[1].header("traceparent"), None);
    assert!(sent[2].header("traceparent").is_some());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_starts_a_trace_of_its_own_without_a_client_one() {
    let m = mocks(1).await;
    let collector = Collector::start().await;
    let toml = with_audit(&config(&m, ""), "sqlite://", "");
    let db = std::env::temp_dir().join(format!("switchyard-traces-{}.db", fastrand::u64(..)));
    let toml = toml.replace("sqlite://", &format!("sqlite://{}", db.display()));
    let gw = Gateway::start(&traced(&toml, &collector.url, "")).await;
    let resp = gw
        .chat(json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(resp.status(), 200);
    let id = header(&resp, "x-switchyard-request-id");
    let upstream = m[0].requests()[0].header("traceparent").unwrap().to_owned();
    let trace = upstream.split('-').nth(1).unwrap().to_owned();
    let (server, calls) = split(collector.trace(&trace, 2).await);
    assert_eq!(server.parent, "", "a root span");
    assert_eq!(calls[0].parent, server.span_id);
    // The audit record names the trace, so one leads to the other.
    let record = support::audit::eventually(5, || async {
        let body = get_json(&gw, &format!("/admin/audit?request_id={id}")).await;
        body["records"].as_array().and_then(|r| r.first().cloned())
    })
    .await
    .unwrap();
    assert_eq!(record["trace_id"], trace.as_str());
    gw.stop().await;
    let _ = std::fs::remove_file(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_requests_nothing() {
    let m = mocks(1).await;
    // A port nothing listens on.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let gw = Gateway::start(&traced(&config(&m, ""), &closed, "")).await;
    for _ in 0..5 {
        let resp = sampled(&gw, chat_body(false)).await;
        assert_eq!(resp.status(), 200);
    }
    let failed = support::audit::eventually(10, || async {
        let text = metrics(&gw).await;
        let line = text
            .lines()
            .find(|l| l.starts_with("switchyard_trace_spans_total{outcome=\"failed\"}"))?
            .to_owned();
        let n: u64 = line.rsplit(' ').next()?.parse().ok()?;
        (n == 10).then_some(n)
    })
    .await;
    assert_eq!(
        failed,
        Some(10),
        "2 spans of each of 5 requests counted as failed"
    );
    let text = metrics(&gw).await;
    assert!(text.contains("switchyard_trace_spans_total{outcome=\"exported\"} 0"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_telemetry_nothing_is_traced_or_sent_upstream() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    let resp = sampled(&gw, chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(m[0].requests()[0].header("traceparent"), None);
    assert!(!metrics(&gw).await.contains("switchyard_trace_spans_total"));
    gw.stop().await;
}

/// The OpenTelemetry Python SDK around the official OpenAI SDK: the agent's own span is the
/// parent of the gateway's, in the agent's trace. `.ci/run` installs both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_traced_with_the_opentelemetry_sdk_gets_the_gateways_spans_in_its_trace() {
    if !python_sdk("openai") || !python_sdk("opentelemetry.sdk") {
        return;
    }
    let m = mocks(2).await;
    let collector = Collector::start().await;
    let gw = Gateway::start(&traced(
        &config(&m, ""),
        &collector.url,
        "sample_ratio = 0.0",
    ))
    .await;
    m[0].set_plan(down());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/otel_client.py");
    let env = &[
        ("OTEL_SDK_DISABLED", "false"),
        ("OTEL_TRACES_EXPORTER", "none"),
    ];
    let agent = python_json(script, vec![gw.url("/v1")], env).await;
    let trace = agent["trace_id"].as_str().unwrap();
    // Sampled: bit 0 of the flags (level 2 of the W3C spec adds bit 1, "random").
    let flags = agent["traceparent"]
        .as_str()
        .unwrap_or("")
        .rsplit('-')
        .next()
        .unwrap_or("");
    let flags = u8::from_str_radix(flags, 16).unwrap_or(0);
    assert_eq!(flags & 1, 1, "the agent's sampled context: {agent}");
    assert!(!agent["text"].as_str().unwrap().is_empty());
    let (server, calls) = split(collector.trace(trace, 3).await);
    assert_eq!(server.parent, agent["span_id"].as_str().unwrap());
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].attr("switchyard.failover.reason"), "status");
    assert_eq!(calls[1].attr("switchyard.target"), "p1/model-1");
    gw.stop().await;
}

/// A request answered just before the gateway stops (its batch still lingering) is exported
/// by the shutdown's last round, not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_still_lingering_at_shutdown_are_exported() {
    let (_m, collector, gw) = traced_gateway(1, "", "").await;
    for _ in 0..3 {
        let resp = sampled(&gw, chat_body(false)).await;
        assert_eq!(resp.status(), 200);
    }
    gw.stop().await;
    assert_eq!(
        collector.spans().len(),
        6,
        "the server span and the call of each request, flushed before stop returned"
    );
}
