//! The client API of a gateway without client keys against hostile pages: a page of another
//! site cannot make a visitor's browser spend the gateway's provider credit (its `Origin` is
//! refused), and a rebound name cannot reach a gateway listening on loopback (its `Host` is
//! refused), while SDKs, agents and curl (no `Origin`, the name they were given) are served as
//! before. With client keys, the key is what is checked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::*;

/// A chat request as a foreign page's browser sends it without a preflight: `text/plain`.
async fn simple_post(
    gw: &Gateway,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = client()
        .post(gw.url(path))
        .header("content-type", "text/plain;charset=UTF-8")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

fn anthropic_body() -> Value {
    json!({"model": "chat", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})
}

fn responses_body() -> Value {
    json!({"model": "chat", "input": "hi"})
}

/// Status and the error's `type`/`code`, from either envelope.
async fn refusal(resp: reqwest::Response) -> (u16, String) {
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    let code = body["error"]["code"]
        .as_str()
        .or_else(|| body["error"]["type"].as_str())
        .unwrap_or("");
    (status, code.to_owned())
}

/// The refusal of `method path` sent with the header `(name, value)` and no body.
async fn refusal_of(
    gw: &Gateway,
    method: reqwest::Method,
    path: &str,
    (name, value): (&str, &str),
) -> (u16, String) {
    let resp = client()
        .request(method, gw.url(path))
        .header(name, value)
        .send()
        .await
        .unwrap();
    refusal(resp).await
}

/// Without `[auth]`: a request whose `Origin` is another site's gets 403 `cross_origin` on
/// every client API endpoint, in its dialect's envelope, and reaches no provider; `null`
/// (a sandboxed frame) too. The gateway's own origin, a page of this machine and a request
/// without `Origin` are served. (Before: a foreign page's text/plain POST was answered.)
#[tokio::test]
async fn a_page_of_another_site_cannot_use_the_client_api_without_keys() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    let port = gw.addr.port();
    for origin in ["https://evil.example", "http://10.0.0.8:8080", "null"] {
        let from = [("origin", origin)];
        let resp = simple_post(&gw, "/v1/chat/completions", &chat_body(false), &from).await;
        assert_eq!(header(&resp, "x-switchyard-attempts"), "0");
        assert_eq!(
            refusal(resp).await,
            (403, "cross_origin".into()),
            "{origin}"
        );
        let resp = simple_post(&gw, "/v1/messages", &anthropic_body(), &from).await;
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["type"], "error", "Anthropic's envelope: {body}");
        assert_eq!(body["error"]["type"], "permission_error", "{body}");
        let resp = simple_post(&gw, "/v1/messages/count_tokens", &anthropic_body(), &from).await;
        assert_eq!(resp.status(), 403, "{origin}");
        assert_eq!(header(&resp, "x-switchyard-attempts"), "0", "{origin}");
        let resp = simple_post(&gw, "/v1/responses", &responses_body(), &from).await;
        assert_eq!(
            refusal(resp).await,
            (403, "cross_origin".into()),
            "{origin}"
        );
        for (method, path) in [
            (reqwest::Method::GET, "/v1/models"),
            (reqwest::Method::DELETE, "/v1/responses/resp_x"),
        ] {
            assert_eq!(
                refusal_of(&gw, method, path, ("origin", origin)).await,
                (403, "cross_origin".into()),
                "{origin} {path}"
            );
        }
    }
    assert_eq!(m[0].stats().requests, 0, "no provider was asked");

    let own = format!("http://127.0.0.1:{port}");
    for origin in [own.as_str(), "http://localhost:5173", "http://[::1]:3000"] {
        let resp = gw.chat_with(chat_body(false), &[("origin", origin)]).await;
        assert_eq!(resp.status(), 200, "{origin}");
    }
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200, "an SDK");
    gw.stop().await;
}

/// Without `[auth]`, a gateway listening on loopback answers its client API only under local
/// names and `[server] allowed_hosts`: a rebound name (whose page's reads carry no `Origin`)
/// gets 403 `host_not_allowed` and reaches no provider. (Before: answered.)
#[tokio::test]
async fn a_rebound_name_cannot_reach_the_client_api_of_a_loopback_gateway_without_keys() {
    let m = mocks(1).await;
    let toml = config(&m, "").replacen(
        "[server]\n",
        "[server]\nallowed_hosts = [\"gw.internal\"]\n",
        1,
    );
    let gw = Gateway::start(&toml).await;
    let port = gw.addr.port();
    let evil = format!("evil.example:{port}");
    let evil = [("host", evil.as_str())];
    let resp = gw.chat_with(chat_body(false), &evil).await;
    assert_eq!(refusal(resp).await, (403, "host_not_allowed".into()));
    let resp = simple_post(&gw, "/v1/responses", &responses_body(), &evil).await;
    assert_eq!(refusal(resp).await, (403, "host_not_allowed".into()));
    for path in ["/v1/models", "/v1/responses/resp_x"] {
        assert_eq!(
            refusal_of(&gw, reqwest::Method::GET, path, evil[0]).await,
            (403, "host_not_allowed".into()),
            "{path}"
        );
    }
    assert_eq!(m[0].stats().requests, 0, "no provider was asked");
    for host in [
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("gw.internal:{port}"),
    ] {
        let resp = gw.chat_with(chat_body(false), &[("host", &host)]).await;
        assert_eq!(resp.status(), 200, "{host}");
    }
    gw.stop().await;
}

/// Listening on every interface without `[auth]`: SDKs reach the gateway under names it cannot
/// know (a service name), so the client API's `Host` is not checked; a foreign page's `Origin`
/// still is, an IP address's included (any address is a `Host` there, not a page of its own).
#[tokio::test]
async fn on_every_interface_any_host_is_served_but_not_a_foreign_origin() {
    let m = mocks(1).await;
    let toml = config(&m, "").replacen("listen = \"127.0.0.1:0\"", "listen = \"0.0.0.0:0\"", 1);
    let gw = Gateway::start(&toml).await;
    let named = [("host", "switchyard.default.svc:8080")];
    assert_eq!(gw.chat_with(chat_body(false), &named).await.status(), 200);
    for origin in ["https://evil.example", "http://203.0.113.7"] {
        let resp = gw.chat_with(chat_body(false), &[("origin", origin)]).await;
        assert_eq!(
            refusal(resp).await,
            (403, "cross_origin".into()),
            "{origin}"
        );
    }
    gw.stop().await;
}

/// With client keys the key is what is checked: a request carrying one is served whatever its
/// `Origin` and `Host` (a page cannot send a key), and one without gets 401, not 403.
#[tokio::test]
async fn with_client_keys_the_key_is_what_is_checked() {
    let m = mocks(1).await;
    let gw = Gateway::start(&with_client_key(&config(&m, ""))).await;
    let key = ("authorization", "Bearer sk-test-secret");
    let foreign = [
        key,
        ("origin", "https://app.example"),
        ("host", "gw.example"),
    ];
    assert_eq!(gw.chat_with(chat_body(false), &foreign).await.status(), 200);
    let resp = gw
        .chat_with(chat_body(false), &[("origin", "https://evil.example")])
        .await;
    assert_eq!(refusal(resp).await, (401, "invalid_api_key".into()));
    gw.stop().await;
}
