//! Prompt-cache usage through the gateway, against mocks that report cache reads and writes
//! (the plan's `cache_read_tokens` and `cache_write_tokens`): each client dialect (OpenAI Chat,
//! Anthropic Messages, the Responses API) gets the counts of each target dialect (OpenAI,
//! Anthropic, Bedrock, Gemini, the Responses API) in its own fields, streamed and not, and
//! the audit record keeps them (SQLite and PostgreSQL); same-dialect answers pass through as
//! they came, their counts read in passing. Cache markers: `tests/cache_markers.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::audit::TestStore;
use support::*;
use switchyard::mock::sigv4::{ACCESS_KEY_ID, SECRET_ACCESS_KEY};
use switchyard::mock::{FaultPlan, MockServer};

/// What the mocks read from and write to the cache, on top of their prompt estimate.
const READ: u64 = 1024;
const WRITE: u64 = 200;

/// The route `chat` over one target among providers `oai` (kind `openai`: Chat Completions,
/// and its own Responses API for Responses clients, on m[0]), `ant` (m[1]), `gem` (m[2]) and
/// `bedrock` (m[3]).
fn toml(m: &[MockServer], target: Target) -> String {
    let (provider, model) = match target {
        Target::OpenAi => ("oai", "gpt-4o"),
        Target::Anthropic => ("ant", "claude-sonnet-4-5"),
        Target::Gemini => ("gem", "gemini-2.5-pro"),
        Target::Bedrock => ("bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0"),
    };
    format!(
        "[audit]\nstore = \"off\"\n\n\
         [[providers]]\nname = \"oai\"\nkind = \"openai\"\nbase_url = \"{oai}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"ant\"\nkind = \"anthropic\"\nbase_url = \"{ant}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"gem\"\nkind = \"gemini\"\nbase_url = \"{gem}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"bedrock\"\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = \"{bedrock}\"\n\
         aws_access_key_id = \"{ACCESS_KEY_ID}\"\naws_secret_access_key = \"{SECRET_ACCESS_KEY}\"\n\n\
         [[routes]]\nname = \"chat\"\ntargets = [{{ provider = \"{provider}\", model = \"{model}\" }}]\n\
         [routes.hedge]\nenabled = false\n",
        oai = m[0].base_url(),
        ant = m[1].root_url(),
        gem = m[2].root_url(),
        bedrock = m[3].root_url(),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    OpenAi,
    Anthropic,
    Gemini,
    Bedrock,
}

impl Target {
    fn mock(self, m: &[MockServer]) -> &MockServer {
        match self {
            Target::OpenAi => &m[0],
            Target::Anthropic => &m[1],
            Target::Gemini => &m[2],
            Target::Bedrock => &m[3],
        }
    }

    /// Only Anthropic's dialect reports cache writes.
    fn writes(self) -> bool {
        matches!(self, Target::Anthropic | Target::Bedrock)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    OpenAi,
    Anthropic,
    Responses,
}

/// A request of `client`'s dialect for route `chat`: its usage as the client got it (a
/// stream's as the SDKs put it together), and its request id.
async fn ask(gw: &Gateway, client: Client, stream: bool) -> (Value, String) {
    let (path, body) = match client {
        Client::OpenAi => (
            "/v1/chat/completions",
            json!({"model": "chat", "stream": stream, "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": "Say the canonical text."}]}),
        ),
        Client::Anthropic => (
            "/v1/messages",
            json!({"model": "chat", "stream": stream, "max_tokens": 256,
                "messages": [{"role": "user", "content": "Say the canonical text."}]}),
        ),
        Client::Responses => (
            "/v1/responses",
            json!({"model": "chat", "stream": stream, "store": false,
                "input": "Say the canonical text."}),
        ),
    };
    let resp = support::client()
        .post(gw.url(path))
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{client:?}");
    let id = header(&resp, "x-switchyard-request-id");
    let text = resp.text().await.unwrap();
    if !stream {
        let body: Value = serde_json::from_str(&text).unwrap();
        return (body["usage"].clone(), id);
    }
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let usage = match client {
        Client::OpenAi => events
            .iter()
            .rev()
            .find(|e| e["usage"].is_object())
            .map(|e| e["usage"].clone()),
        // As the SDKs do: message_start's counts, each one message_delta gives replacing it.
        Client::Anthropic => {
            let mut usage = events
                .iter()
                .find(|e| e["type"] == "message_start")
                .map(|e| e["message"]["usage"].clone());
            let delta = events.iter().find(|e| e["type"] == "message_delta");
            if let (Some(Value::Object(usage)), Some(delta)) = (&mut usage, delta) {
                for (key, value) in delta["usage"].as_object().unwrap() {
                    usage.insert(key.clone(), value.clone());
                }
            }
            usage
        }
        Client::Responses => events
            .iter()
            .find(|e| e["type"] == "response.completed")
            .map(|e| e["response"]["usage"].clone()),
    };
    (usage.unwrap_or_else(|| panic!("no usage in {text}")), id)
}

/// Every input token, those read from and written to the cache, as the client's dialect says
/// them.
fn counts(client: Client, usage: &Value) -> (u64, u64, u64) {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    match client {
        Client::OpenAi => (
            n(&usage["prompt_tokens"]),
            n(&usage["prompt_tokens_details"]["cached_tokens"]),
            n(&usage["prompt_tokens_details"]["cache_write_tokens"]),
        ),
        Client::Anthropic => {
            let (read, write) = (
                n(&usage["cache_read_input_tokens"]),
                n(&usage["cache_creation_input_tokens"]),
            );
            (n(&usage["input_tokens"]) + read + write, read, write)
        }
        Client::Responses => (
            n(&usage["input_tokens"]),
            n(&usage["input_tokens_details"]["cached_tokens"]),
            n(&usage["input_tokens_details"]["cache_write_tokens"]),
        ),
    }
}

const CASES: [(Target, Client); 9] = [
    // Translated.
    (Target::Anthropic, Client::OpenAi),
    (Target::Bedrock, Client::OpenAi),
    (Target::Anthropic, Client::Responses),
    (Target::OpenAi, Client::Anthropic),
    (Target::Gemini, Client::OpenAi),
    (Target::Gemini, Client::Anthropic),
    // Passed through.
    (Target::Anthropic, Client::Anthropic),
    (Target::OpenAi, Client::OpenAi),
    (Target::OpenAi, Client::Responses),
];

/// Each pair, whole and streamed: first with no cache counts (the prompt's own tokens), then
/// with the plan's. The client sees the same prompt tokens plus the cached ones, the read and
/// (from an Anthropic-dialect target) the write; the audit record says the same.
async fn every_client_gets_each_targets_cache_counts_and_the_record_keeps_them(store: TestStore) {
    let m = mocks(4).await;
    let mut expected = Vec::new();
    for (target, client) in CASES {
        let gw = Gateway::start(&with_audit(&toml(&m, target), &store.url(), "")).await;
        for stream in [false, true] {
            let what = format!("{target:?} to {client:?}, stream {stream}");
            target.mock(&m).set_plan(FaultPlan::default());
            let (usage, _) = ask(&gw, client, stream).await;
            let (plain, read, write) = counts(client, &usage);
            assert_eq!((read, write), (0, 0), "{what}: {usage}");
            target.mock(&m).set_plan(FaultPlan {
                cache_read_tokens: READ,
                cache_write_tokens: WRITE,
                ..FaultPlan::default()
            });
            let (usage, id) = ask(&gw, client, stream).await;
            let write = if target.writes() { WRITE } else { 0 };
            let want = (plain + READ + write, READ, write);
            assert_eq!(counts(client, &usage), want, "{what}: {usage}");
            expected.push((id, want, what));
        }
        gw.stop().await;
    }
    let records = store.all().await;
    for (id, (input, read, write), what) in expected {
        let r = records.iter().find(|r| r.request_id == id).unwrap();
        assert_eq!(
            (r.tokens_in, r.cache_read_tokens, r.cache_write_tokens),
            (Some(input), Some(read), Some(write)),
            "{what}"
        );
    }
    store.cleanup().await;
}
both!(every_client_gets_each_targets_cache_counts_and_the_record_keeps_them);

/// A target's whole OpenAI answers are read by the shape of its last one (kept on the target):
/// each answer's counts, as the record keeps them, are its own.
#[tokio::test]
async fn a_target_reads_its_answers_by_the_shape_of_its_last() {
    let m = mocks(4).await;
    let store = TestStore::sqlite();
    let state = build(&with_audit(&toml(&m, Target::OpenAi), &store.url(), ""));
    let gw = Gateway::serve(state.clone(), None).await;
    let kept = || {
        let routing = state.routing.load();
        routing.target("oai/gpt-4o").unwrap().shapes.holds_answer()
    };
    assert!(!kept());
    let (first, _) = ask(&gw, Client::OpenAi, false).await;
    assert!(kept(), "the first answer's shape kept");
    let prompt = counts(Client::OpenAi, &first).0;
    let mut asked = Vec::new();
    for read in [READ, 7, 0, 123_456] {
        m[0].set_plan(FaultPlan {
            cache_read_tokens: read,
            ..FaultPlan::default()
        });
        let (usage, id) = ask(&gw, Client::OpenAi, false).await;
        assert_eq!(counts(Client::OpenAi, &usage), (prompt + read, read, 0));
        asked.push((id, read));
    }
    gw.stop().await;
    let records = store.all().await;
    for (id, read) in asked {
        let r = records.iter().find(|r| r.request_id == id).unwrap();
        let counts = (r.tokens_in, r.cache_read_tokens, r.cache_write_tokens);
        assert_eq!(counts, (Some(prompt + read), Some(read), Some(0)));
    }
    store.cleanup().await;
}

/// A same-dialect answer goes back as the provider sent it: Anthropic's `input_tokens` without
/// the cached tokens and its `cache_creation` split, OpenAI's details with its `audio_tokens`.
#[tokio::test]
async fn same_dialect_answers_keep_the_providers_own_usage() {
    let m = mocks(4).await;
    let plan = FaultPlan {
        cache_read_tokens: READ,
        cache_write_tokens: WRITE,
        ..FaultPlan::default()
    };
    for (target, client) in [
        (Target::Anthropic, Client::Anthropic),
        (Target::OpenAi, Client::OpenAi),
    ] {
        target.mock(&m).set_plan(plan.clone());
        let gw = Gateway::start(&toml(&m, target)).await;
        for stream in [false, true] {
            let (usage, _) = ask(&gw, client, stream).await;
            if client == Client::Anthropic {
                assert_eq!(
                    usage["cache_creation"],
                    json!({"ephemeral_5m_input_tokens": WRITE, "ephemeral_1h_input_tokens": 0}),
                    "{usage}"
                );
                assert!(usage["input_tokens"].as_u64().unwrap() < READ, "{usage}");
            } else {
                assert_eq!(
                    usage["prompt_tokens_details"],
                    json!({"cached_tokens": READ, "audio_tokens": 0})
                );
            }
        }
        gw.stop().await;
    }
}
