//! `kind = "vertex"` against the mock's Vertex AI, whose token endpoint checks the JWT grant
//! of its test service account and whose model endpoints take only the tokens it issued:
//! Claude and Gemini models for every client API, whole and streamed; the bodies Vertex
//! wants; failover Anthropic -> Bedrock -> Vertex and Gemini API -> Vertex; Vertex's own errors
//! classified; a token that cannot be had as a `credentials` attempt failure that fails over;
//! tokens fetched once, refreshed ahead of their expiry without holding a request; and no
//! credential in anything sent out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use switchyard::mock::vertex::{service_account_json, ACCESS_TOKEN, PROJECT};
use switchyard::mock::{canonical_text, FaultPlan, MockServer};

const CLAUDE: &str = "claude-sonnet-4-5@20250929";
const GEMINI: &str = "gemini-2.5-pro";

/// A credentials file, removed when dropped.
struct Credentials(std::path::PathBuf);

impl Credentials {
    /// The mock's test service account, asking `mock` for its tokens (`query`: the token
    /// URL's, e.g. `expires_in=20`).
    fn for_mock(mock: &MockServer, query: &str) -> Credentials {
        let uri = format!("{}/token{query}", mock.root_url());
        Credentials::write(&service_account_json(&uri))
    }

    fn write(text: &str) -> Credentials {
        let path = std::env::temp_dir().join(format!(
            "switchyard-vertex-{}-{}.json",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::write(&path, text).unwrap();
        Credentials(path)
    }
}

impl Drop for Credentials {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Providers `ant` (m[0]), `bedrock` (m[1]), `gemini` (m[0], the Gemini API) and `vertex`
/// (m[2], with `auth`), and route `chat` over `targets` (`provider/model`).
fn toml(m: &[MockServer], targets: &[&str], auth: &str) -> String {
    use switchyard::mock::sigv4::{ACCESS_KEY_ID, SECRET_ACCESS_KEY};
    let mut s = format!(
        "[audit]\nstore = \"off\"\n\n[[providers]]\nname = \"ant\"\nkind = \"anthropic\"\nbase_url = \"{root0}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"bedrock\"\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = \"{root1}\"\naws_access_key_id = \"{ACCESS_KEY_ID}\"\naws_secret_access_key = \"{SECRET_ACCESS_KEY}\"\n\n\
         [[providers]]\nname = \"gemini\"\nkind = \"gemini\"\nbase_url = \"{root0}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"vertex\"\nkind = \"vertex\"\nlocation = \"us-east5\"\nbase_url = \"{root2}\"\n{auth}\n\n",
        root0 = m[0].root_url(),
        root1 = m[1].root_url(),
        root2 = m[2].root_url(),
    );
    s += "[[routes]]\nname = \"chat\"\ntargets = [\n";
    for t in targets {
        let (provider, model) = t.split_once('/').unwrap();
        s += &format!("  {{ provider = \"{provider}\", model = \"{model}\" }},\n");
    }
    s + "]\n[routes.hedge]\nenabled = false\n"
}

fn file_auth(creds: &Credentials) -> String {
    format!("credentials_file = \"{}\"", creds.0.display())
}

/// Three mocks, the test service account's credentials from the third, and a gateway whose
/// route `chat` is `targets`.
async fn vertex_gateway(targets: &[&str]) -> (Vec<MockServer>, Credentials, Gateway) {
    let m = mocks(3).await;
    let creds = Credentials::for_mock(&m[2], "");
    let gw = Gateway::start(&toml(&m, targets, &file_auth(&creds))).await;
    (m, creds, gw)
}

fn chat(stream: bool) -> Value {
    json!({
        "model": "chat",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say the canonical text."}
        ]
    })
}

async fn messages(gw: &Gateway, stream: bool) -> reqwest::Response {
    client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "unused")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "interleaved-thinking-2025-05-14")
        .json(&json!({
            "model": "chat",
            "max_tokens": 256,
            "stream": stream,
            "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "Say the canonical text."}]
        }))
        .send()
        .await
        .unwrap()
}

/// The text of an Anthropic SSE stream.
fn anthropic_text(text: &str) -> String {
    let mut answer = String::new();
    for ev in text.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let data = ev.lines().find_map(|l| l.strip_prefix("data: "));
        if let Some(t) = data
            .and_then(|d| serde_json::from_str::<Value>(d).ok())
            .and_then(|v| v["delta"]["text"].as_str().map(str::to_owned))
        {
            answer.push_str(&t);
        }
    }
    answer
}

/// The model calls a mock saw (its token requests aside).
fn model_calls(m: &MockServer) -> Vec<switchyard::mock::RecordedRequest> {
    m.requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/v1/"))
        .collect()
}

fn token_calls(m: &MockServer) -> usize {
    m.requests()
        .iter()
        .filter(|r| r.path.starts_with("/token"))
        .count()
}

#[tokio::test]
async fn an_anthropic_client_fails_over_from_anthropic_through_bedrock_to_vertex() {
    let m = mocks(3).await;
    let creds = Credentials::for_mock(&m[2], "");
    let route = [
        "ant/claude-sonnet-4-5",
        "bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0",
        &format!("vertex/{CLAUDE}"),
    ];
    let gw = Gateway::start(&toml(&m, &route, &file_auth(&creds))).await;
    m[0].set_plan(down());
    m[1].set_plan(FaultPlan {
        status: Some(429),
        ..FaultPlan::default()
    });
    let resp = messages(&gw, true).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        format!("vertex/{CLAUDE}")
    );
    assert_eq!(header(&resp, "x-switchyard-attempts"), "3");
    assert_eq!(
        anthropic_text(&resp.text().await.unwrap()),
        canonical_text(12, 0)
    );

    let sent = model_calls(&m[2]);
    assert_eq!(sent.len(), 1);
    let sent = &sent[0];
    assert_eq!(
        sent.path,
        format!("/v1/projects/{PROJECT}/locations/us-east5/publishers/anthropic/models/{CLAUDE}:streamRawPredict")
    );
    assert_eq!(sent.body["anthropic_version"], "vertex-2023-10-16");
    assert!(sent.body.get("model").is_none(), "{}", sent.body);
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(
        sent.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
    assert!(sent
        .header("authorization")
        .unwrap()
        .starts_with("Bearer ya29.mock-"));
    assert_eq!(sent.header("x-api-key"), None);

    // Each one down in turn: the next in order answers.
    let order = [
        "ant/claude-sonnet-4-5".to_owned(),
        "bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0".to_owned(),
        format!("vertex/{CLAUDE}"),
    ];
    for down_one in 0..3 {
        for (i, mock) in m.iter().enumerate() {
            mock.set_plan(if i == down_one {
                down()
            } else {
                FaultPlan::default()
            });
        }
        let resp = messages(&gw, false).await;
        assert_eq!(resp.status(), 200);
        let served = header(&resp, "x-switchyard-target");
        let want = if down_one == 0 { &order[1] } else { &order[0] };
        assert_eq!(&served, want, "with {} down", order[down_one]);
    }
    // The first two down: Vertex answers, whole this time.
    m[0].set_plan(down());
    m[1].set_plan(down());
    m[2].set_plan(FaultPlan::default());
    let resp = messages(&gw, false).await;
    assert_eq!(header(&resp, "x-switchyard-target"), order[2]);

    // Whole answers too, on the same token.
    m[0].set_plan(FaultPlan::default());
    let gw2 = Gateway::start(&toml(
        &m,
        &[&format!("vertex/{CLAUDE}")],
        &file_auth(&creds),
    ))
    .await;
    let resp = messages(&gw2, false).await;
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["content"][0]["text"], canonical_text(12, 0));
    let last = model_calls(&m[2]).pop().unwrap();
    assert!(last.path.ends_with(":rawPredict"), "{}", last.path);
    gw.stop().await;
    gw2.stop().await;
}

#[tokio::test]
async fn an_openai_client_fails_over_from_the_gemini_api_to_vertex_whole_and_streamed() {
    let (m, _creds, gw) =
        vertex_gateway(&[&format!("gemini/{GEMINI}"), &format!("vertex/{GEMINI}")]).await;
    m[0].set_plan(down());
    let resp = gw.chat(chat(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        format!("vertex/{GEMINI}")
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(completion_text(&body), canonical_text(12, 0));

    let resp = gw.chat(chat(true)).await;
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    assert_eq!(events.last().unwrap(), "[DONE]");

    let sent = model_calls(&m[2]);
    let base =
        format!("/v1/projects/{PROJECT}/locations/us-east5/publishers/google/models/{GEMINI}");
    assert_eq!(sent[0].path, format!("{base}:generateContent"));
    assert_eq!(
        sent[1].path,
        format!("{base}:streamGenerateContent?alt=sse")
    );
    for s in &sent {
        let contents = s.body["contents"].as_array().unwrap();
        assert!(
            contents
                .iter()
                .all(|c| c["role"] == "user" || c["role"] == "model"),
            "{}",
            s.body
        );
        assert_eq!(
            s.body["systemInstruction"]["parts"][0]["text"],
            "You are terse."
        );
        assert_eq!(s.header("x-goog-api-key"), None);
    }
    assert_eq!(token_calls(&m[2]), 1, "one token for every call");
    gw.stop().await;
}

#[tokio::test]
async fn a_responses_client_is_served_by_vertex_claude_with_a_given_token() {
    let m = mocks(3).await;
    let auth = format!("project = \"p-1\"\naccess_token = \"{ACCESS_TOKEN}\"");
    let toml = toml(&m, &[&format!("vertex/{CLAUDE}")], &auth) + "\n[responses]\nstore = \"off\"\n";
    let gw = Gateway::start(&toml).await;
    let body = json!({"model": "chat", "input": "Say the canonical text.", "stream": true, "store": false});
    let resp = support::responses::create(&gw, &body).await;
    assert_eq!(resp.status(), 200);
    let evs = support::responses::events(&resp.text().await.unwrap());
    assert_eq!(support::responses::deltas(&evs), canonical_text(12, 0));
    let sent = &model_calls(&m[2])[0];
    assert!(sent
        .path
        .starts_with("/v1/projects/p-1/locations/us-east5/publishers/anthropic/"));
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {ACCESS_TOKEN}").as_str())
    );
    assert_eq!(token_calls(&m[2]), 0, "a given token is not fetched");
    gw.stop().await;
}

#[tokio::test]
async fn vertexs_own_errors_are_classified_for_failover() {
    // Claude on Vertex out of quota (Google's envelope, in an array): the next target answers.
    let (m, creds, gw) =
        vertex_gateway(&[&format!("vertex/{CLAUDE}"), "ant/claude-sonnet-4-5"]).await;
    m[2].set_plan(FaultPlan {
        status: Some(429),
        ..FaultPlan::default()
    });
    let resp = gw.chat(chat(false)).await;
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    // Alone, the client hears why, in its own dialect.
    let gw2 = Gateway::start(&toml(
        &m,
        &[&format!("vertex/{CLAUDE}")],
        &file_auth(&creds),
    ))
    .await;
    let resp = messages(&gw2, false).await;
    assert_eq!(resp.status(), 503, "every target rate-limited");
    let text = resp.text().await.unwrap();
    assert!(text.contains(&format!("vertex/{CLAUDE}: 429")), "{text}");

    // A Gemini model's context overflow on Vertex moves to a larger window.
    m[2].set_plan(FaultPlan {
        max_context_tokens: Some(1),
        ..FaultPlan::default()
    });
    let toml = toml(
        &m,
        &["vertex/gemini-2.0-flash", &format!("gemini/{GEMINI}")],
        &file_auth(&creds),
    )
    .replacen(
        "model = \"gemini-2.0-flash\" }",
        "model = \"gemini-2.0-flash\", context_window = 8000 }",
        1,
    )
    .replacen(
        &format!("model = \"{GEMINI}\" }}"),
        &format!("model = \"{GEMINI}\", context_window = 1000000 }}"),
        1,
    );
    let gw3 = Gateway::start(&toml).await;
    let resp = gw3.chat(chat(false)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        format!("gemini/{GEMINI}")
    );
    gw.stop().await;
    gw2.stop().await;
    gw3.stop().await;
}

#[tokio::test]
async fn a_vertex_stream_cut_mid_answer_is_continued_elsewhere() {
    let route = [&format!("vertex/{GEMINI}") as &str, "ant/claude-sonnet-4-5"];
    let (m, _creds, gw) = vertex_gateway(&route).await;
    m[2].set_plan(FaultPlan {
        cut_after_chunks: Some(4),
        ..FaultPlan::default()
    });
    assert_seamless_stream(gw.chat(chat(true)).await).await;
    assert_eq!(m[0].requests().len(), 1, "the continuation");
    gw.stop().await;
}

#[tokio::test]
async fn a_token_that_cannot_be_had_is_a_credentials_failure_that_fails_over() {
    let m = mocks(3).await;
    // A service account the token endpoint does not know.
    let json = service_account_json(&format!("{}/token", m[2].root_url()))
        .replace("switchyard-test@", "intruder@");
    let creds = Credentials::write(&json);
    let route = [&format!("vertex/{GEMINI}") as &str, "ant/claude-sonnet-4-5"];
    let store = support::audit::TestStore::sqlite();
    let audited = with_audit(&toml(&m, &route, &file_auth(&creds)), &store.url(), "");
    let gw = Gateway::start(&audited).await;
    let resp = gw.chat(chat(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    let records = support::audit::eventually(5, || async {
        Some(store.all().await).filter(|r| !r.is_empty())
    })
    .await
    .expect("the request's audit record");
    let path = &records[0].path;
    assert_eq!(path[0].target, format!("vertex/{GEMINI}"));
    assert_eq!(path[0].outcome, "credentials");
    assert_eq!(path[0].status, None, "never sent");
    assert_eq!(path[1].outcome, "ok");
    assert!(
        model_calls(&m[2]).is_empty(),
        "nothing sent without a token"
    );
    let metrics = metrics(&gw).await;
    assert!(
        metrics.contains("reason=\"credentials\""),
        "the failover's reason: {}",
        metrics
            .lines()
            .filter(|l| l.contains("failovers"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Alone: the path says why, without the key.
    let gw2 = Gateway::start(&toml(
        &m,
        &[&format!("vertex/{GEMINI}")],
        &file_auth(&creds),
    ))
    .await;
    let resp = gw2.chat(chat(false)).await;
    assert_eq!(resp.status(), 502);
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("credentials: the token endpoint answered 400: invalid_grant"),
        "{text}"
    );
    // The failure is remembered a few seconds: the next request does not ask again.
    let asked = token_calls(&m[2]);
    let _ = gw2.chat(chat(false)).await;
    assert_eq!(token_calls(&m[2]), asked);
    for out in [
        text,
        get_json(&gw2, "/admin/status").await.to_string(),
        metrics,
    ] {
        assert!(
            !out.contains("PRIVATE KEY") && !out.contains("MIIE"),
            "a key leaked: {out}"
        );
    }
    let stored = serde_json::to_string(&records[0].path).unwrap();
    assert!(!stored.contains("PRIVATE KEY"), "{stored}");
    gw.stop().await;
    gw2.stop().await;
    store.cleanup().await;
}

#[tokio::test]
async fn a_bad_token_is_refused_by_vertex_and_never_shown() {
    let m = mocks(3).await;
    let auth = "project = \"p-1\"\naccess_token = \"ya29.not-a-token-0123456789\"";
    let gw = Gateway::start(&toml(
        &m,
        &[&format!("vertex/{GEMINI}"), "ant/claude-sonnet-4-5"],
        auth,
    ))
    .await;
    let resp = gw.chat(chat(true)).await;
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    let gw2 = Gateway::start(&toml(&m, &[&format!("vertex/{GEMINI}")], auth)).await;
    let resp = gw2.chat(chat(false)).await;
    assert_eq!(resp.status(), 502);
    let text = resp.text().await.unwrap();
    assert!(text.contains(&format!("vertex/{GEMINI}: 401")), "{text}");
    for out in [
        text,
        get_json(&gw2, "/admin/status").await.to_string(),
        metrics(&gw2).await,
    ] {
        assert!(!out.contains("ya29.not-a-token"), "the token leaked: {out}");
    }
    gw.stop().await;
    gw2.stop().await;
}

/// A token source on a paused clock: fetched once, used until it is due, then refreshed in the
/// background while the old token is still handed out; past its expiry with the endpoint down,
/// a request waits for a fetch and gets its error.
#[tokio::test]
async fn tokens_are_refreshed_ahead_of_expiry_without_holding_a_request() {
    use switchyard::provider::vertex::auth::{Bearer, TokenSource};
    let mock = MockServer::spawn("vertex").await.unwrap();
    let creds = Credentials::for_mock(&mock, "?expires_in=3600");
    let config = switchyard::config::Config::from_toml(
        &format!(
            "[[providers]]\nname = \"v\"\nkind = \"vertex\"\nlocation = \"global\"\ncredentials_file = \"{}\"\n\
             [[routes]]\nname = \"r\"\ntargets = [{{ provider = \"v\", model = \"{GEMINI}\" }}]\n",
            creds.0.display()
        ),
        &|_: &str| None,
    )
    .unwrap();
    let vertex = config.providers[0].vertex.clone().unwrap();
    let source = TokenSource::new(&vertex.credentials, Duration::from_secs(2))
        .unwrap()
        .unwrap();
    let first = source.wait().await.unwrap();
    let token_calls = || {
        mock.requests()
            .iter()
            .filter(|r| r.path.starts_with("/token"))
            .count()
    };
    assert_eq!(
        token_calls(),
        1,
        "the early fetch and the first wait share one"
    );
    let ready = |b: Bearer| match b {
        Bearer::Ready(v) => v,
        Bearer::Fetch(_) => panic!("a request would wait"),
    };
    assert_eq!(ready(source.bearer()), first);

    // 56 minutes on: due for a refresh (five minutes ahead), still valid.
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(56 * 60)).await;
    tokio::time::resume();
    assert_eq!(ready(source.bearer()), first, "the old token, at once");
    for _ in 0..200 {
        if token_calls() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(token_calls(), 2, "refreshed in the background");
    let mut second = ready(source.bearer());
    for _ in 0..200 {
        if second != first {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        second = ready(source.bearer());
    }
    assert_ne!(second, first);
    assert!(second.is_sensitive());

    // Past the new token's expiry with the endpoint gone: a request waits and hears why.
    mock.shutdown().await;
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(3600)).await;
    tokio::time::resume();
    let Bearer::Fetch(fetch) = source.bearer() else {
        panic!("an expired token is not handed out");
    };
    let err = fetch.wait().await.unwrap_err();
    assert!(err.contains("cannot reach the token endpoint"), "{err}");
}

#[tokio::test]
async fn each_client_api_is_served_by_each_publisher_across_dialects() {
    let m = mocks(3).await;
    let creds = Credentials::for_mock(&m[2], "");
    // An OpenAI client on Claude (Vertex's Anthropic publisher), streamed and whole.
    let claude = Gateway::start(&toml(
        &m,
        &[&format!("vertex/{CLAUDE}")],
        &file_auth(&creds),
    ))
    .await;
    let resp = claude.chat(chat(true)).await;
    assert_eq!(resp.status(), 200);
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    let body: Value = claude.chat(chat(false)).await.json().await.unwrap();
    assert_eq!(completion_text(&body), canonical_text(12, 0));
    // An Anthropic client on Gemini, whole and streamed.
    let gemini = Gateway::start(&toml(
        &m,
        &[&format!("vertex/{GEMINI}")],
        &file_auth(&creds),
    ))
    .await;
    let body: Value = messages(&gemini, false).await.json().await.unwrap();
    assert_eq!(body["type"], "message");
    assert_eq!(body["content"][0]["text"], canonical_text(12, 0));
    let resp = messages(&gemini, true).await;
    assert_eq!(
        anthropic_text(&resp.text().await.unwrap()),
        canonical_text(12, 0)
    );
    let ops: Vec<String> = model_calls(&m[2])
        .iter()
        .map(|r| r.path.rsplit(':').next().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        ops,
        [
            "streamRawPredict",
            "rawPredict",
            "generateContent",
            "streamGenerateContent?alt=sse"
        ]
    );
    claude.stop().await;
    gemini.stop().await;
}

#[tokio::test]
async fn the_first_token_is_fetched_when_serving_starts_and_check_fetches_none() {
    let m = mocks(3).await;
    let creds = Credentials::for_mock(&m[2], "");
    let toml = toml(&m, &[&format!("vertex/{GEMINI}")], &file_auth(&creds));
    // What `switchyard check` does: the state built and dropped, nothing served.
    drop(support::build(&toml));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(token_calls(&m[2]), 0, "check asks for no token");
    // Serving: the token comes before any request does.
    let gw = Gateway::start(&toml).await;
    let fetched =
        support::audit::eventually(5, || async { (token_calls(&m[2]) == 1).then_some(()) }).await;
    assert!(fetched.is_some(), "the first token, fetched at start");
    let resp = gw.chat(chat(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(token_calls(&m[2]), 1, "and used by the first request");
    gw.stop().await;
}
