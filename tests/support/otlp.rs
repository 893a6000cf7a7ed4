//! An OTLP/HTTP trace receiver for the tests: it decodes each export with the published
//! OpenTelemetry protocol definitions (`opentelemetry-proto`, protobuf) and keeps the spans.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

/// One span as received.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent: String,
    pub name: String,
    /// 2 server, 3 client (the protocol's `SpanKind`).
    pub kind: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attrs: BTreeMap<String, String>,
    /// 0 unset, 1 ok, 2 error.
    pub status: i32,
    /// `service.name` of its resource.
    pub service: String,
    /// Events: name and attributes.
    pub events: Vec<(String, BTreeMap<String, String>)>,
}

impl Span {
    pub fn attr(&self, key: &str) -> &str {
        self.attrs.get(key).map_or("", String::as_str)
    }
}

/// A receiver listening on 127.0.0.1.
pub struct Collector {
    pub url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    /// Content types of the exports received.
    pub content_types: Arc<Mutex<Vec<String>>>,
}

type Shared = (Arc<Mutex<Vec<Span>>>, Arc<Mutex<Vec<String>>>);

impl Collector {
    pub async fn start() -> Collector {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let content_types = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/traces", post(receive))
            .with_state((spans.clone(), content_types.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector {
            url,
            spans,
            content_types,
        }
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Wait (up to 10 s) until spans of trace `trace_id` number at least `n`; those spans.
    pub async fn trace(&self, trace_id: &str, n: usize) -> Vec<Span> {
        for _ in 0..200 {
            let got: Vec<Span> = (self.spans().into_iter())
                .filter(|s| s.trace_id == trace_id)
                .collect();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!(
            "fewer than {n} spans of trace {trace_id} arrived; got {:#?}",
            self.spans()
        );
    }
}

async fn receive(
    State((spans, types)): State<Shared>,
    headers: http::HeaderMap,
    body: Bytes,
) -> ([(http::HeaderName, &'static str); 1], Vec<u8>) {
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    types.lock().unwrap().push(content_type);
    let req = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    let mut out = spans.lock().unwrap();
    for rs in req.resource_spans {
        let resource = rs
            .resource
            .map(|r| attrs(&r.attributes))
            .unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(Span {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent: hex(&s.parent_span_id),
                    name: s.name,
                    kind: s.kind,
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                    attrs: attrs(&s.attributes),
                    status: s.status.map_or(0, |st| st.code),
                    service: service.clone(),
                    events: (s.events.iter())
                        .map(|e| (e.name.clone(), attrs(&e.attributes)))
                        .collect(),
                });
            }
        }
    }
    (
        [(http::header::CONTENT_TYPE, "application/x-protobuf")],
        Vec::new(),
    )
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
