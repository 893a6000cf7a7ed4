//! Prompt-cache markers through the gateway: an OpenAI client's `cache_control` (as LiteLLM
//! and OpenRouter take it) reaches Anthropic-dialect targets (Anthropic, Bedrock, Claude on
//! Vertex AI) as Anthropic `cache_control` on the blocks it names; an OpenAI target gets the
//! client's body as it came; Gemini and OpenAI targets of an Anthropic client get none.
//! Cache usage: `tests/cache.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::vertex::{file_auth, Credentials, CLAUDE};
use support::*;
use switchyard::mock::sigv4::{ACCESS_KEY_ID, SECRET_ACCESS_KEY};
use switchyard::mock::{MockServer, RecordedRequest};

const BEDROCK: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";

/// The Vertex provider's credentials when the route does not use it.
const NO_VERTEX: &str = "access_token = \"unused\"\nproject = \"unused\"";

/// The route `chat` over `target` (`provider/model`) among `oai` (openai-compatible, m[0]),
/// `ant` (m[1]), `gem` (m[2]), `bedrock` and `vertex` (both on m[3], Vertex with the mock's
/// test service account, `auth`).
fn toml(m: &[MockServer], target: &str, auth: &str) -> String {
    let (provider, model) = target.split_once('/').unwrap();
    format!(
        "[audit]\nstore = \"off\"\n\n\
         [[providers]]\nname = \"oai\"\nkind = \"openai-compatible\"\nbase_url = \"{oai}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"ant\"\nkind = \"anthropic\"\nbase_url = \"{ant}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"gem\"\nkind = \"gemini\"\nbase_url = \"{gem}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"bedrock\"\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = \"{cloud}\"\n\
         aws_access_key_id = \"{ACCESS_KEY_ID}\"\naws_secret_access_key = \"{SECRET_ACCESS_KEY}\"\n\n\
         [[providers]]\nname = \"vertex\"\nkind = \"vertex\"\nlocation = \"us-east5\"\nbase_url = \"{cloud}\"\n{auth}\n\n\
         [[routes]]\nname = \"chat\"\ntargets = [{{ provider = \"{provider}\", model = \"{model}\" }}]\n\
         [routes.hedge]\nenabled = false\n",
        oai = m[0].base_url(),
        ant = m[1].root_url(),
        gem = m[2].root_url(),
        cloud = m[3].root_url(),
    )
}

/// An agent's turn with markers where LiteLLM takes them: a system part, a tool definition
/// (with a ttl), a tool message, and the last user message.
fn marked(stream: bool) -> Value {
    json!({
        "model": "chat",
        "stream": stream,
        "messages": [
            {"role": "system", "content": [
                {"type": "text", "text": "You are a contracts analyst.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Today is Monday."}
            ]},
            {"role": "user", "content": "What does clause 3 say?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"clause\":3}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Fees are due in 30 days.",
             "cache_control": {"type": "ephemeral"}},
            {"role": "user", "content": "Say the canonical text.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [{"type": "function", "cache_control": {"type": "ephemeral", "ttl": "1h"},
                   "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    })
}

/// The one model call a mock saw (a Vertex token fetch aside).
fn model_call(m: &MockServer) -> RecordedRequest {
    let calls: Vec<RecordedRequest> = m
        .requests()
        .into_iter()
        .filter(|r| !r.path.starts_with("/token"))
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    calls.into_iter().next().unwrap()
}

fn has_markers(body: &Value) -> bool {
    body.to_string().contains("cache_control")
}

#[tokio::test]
async fn an_openai_clients_markers_reach_anthropic_bedrock_and_claude_on_vertex_on_their_blocks() {
    for (target, mock) in [
        ("ant/claude-sonnet-4-5".to_owned(), 1),
        (format!("bedrock/{BEDROCK}"), 3),
        (format!("vertex/{CLAUDE}"), 3),
    ] {
        for stream in [false, true] {
            let m = mocks(4).await;
            let creds = Credentials::for_mock(&m[3], "");
            let gw = Gateway::start(&toml(&m, &target, &file_auth(&creds))).await;
            let resp = gw.chat(marked(stream)).await;
            assert_eq!(resp.status(), 200, "{target}");
            resp.text().await.unwrap();
            let sent = model_call(&m[mock]).body;
            let ephemeral = json!({"type": "ephemeral"});
            assert_eq!(
                sent["system"],
                json!([
                    {"type": "text", "text": "You are a contracts analyst.", "cache_control": ephemeral},
                    {"type": "text", "text": "Today is Monday."}
                ]),
                "{target}"
            );
            assert_eq!(
                sent["tools"][0]["cache_control"],
                json!({"type": "ephemeral", "ttl": "1h"}),
                "{target}"
            );
            let last = &sent["messages"][2]["content"];
            assert_eq!(last[0]["type"], "tool_result", "{target}: {sent}");
            assert_eq!(last[0]["cache_control"], ephemeral, "{target}");
            assert_eq!(
                last[1],
                json!({"type": "text", "text": "Say the canonical text.", "cache_control": ephemeral}),
                "{target}"
            );
            gw.stop().await;
        }
    }
}

/// An OpenAI target gets an OpenAI client's body as it came (markers, `prompt_cache_key`);
/// a Gemini target, which caches by prefix, gets no marker.
#[tokio::test]
async fn an_openai_clients_markers_go_to_openai_as_they_came_and_not_to_gemini() {
    let m = mocks(4).await;
    let mut body = marked(false);
    body["prompt_cache_key"] = "contracts-42".into();
    let gw = Gateway::start(&toml(&m, "oai/gpt-4o", NO_VERTEX)).await;
    assert_eq!(gw.chat(body.clone()).await.status(), 200);
    let mut want = body.clone();
    want["model"] = "gpt-4o".into();
    assert_eq!(model_call(&m[0]).body, want);
    gw.stop().await;

    let gw = Gateway::start(&toml(&m, "gem/gemini-2.5-pro", NO_VERTEX)).await;
    assert_eq!(gw.chat(body).await.status(), 200);
    let sent = model_call(&m[2]).body;
    assert!(!has_markers(&sent), "{sent}");
    assert!(sent.get("prompt_cache_key").is_none(), "{sent}");
    gw.stop().await;
}

/// An Anthropic client's markers (Claude Code's on its system prompt) are not sent to OpenAI
/// or Gemini targets: they cache by prefix without them.
#[tokio::test]
async fn an_anthropic_clients_markers_are_dropped_for_openai_and_gemini_targets() {
    for (target, mock) in [("oai/gpt-4o", 0), ("gem/gemini-2.5-pro", 2)] {
        let m = mocks(4).await;
        let gw = Gateway::start(&toml(&m, target, NO_VERTEX)).await;
        let resp = anthropic_messages(&gw, false, None).await;
        assert_eq!(resp.status(), 200, "{target}");
        let sent = model_call(&m[mock]).body;
        assert!(!has_markers(&sent), "{target}: {sent}");
        assert!(
            sent.to_string().contains("You are terse."),
            "{target}: {sent}"
        );
        gw.stop().await;
    }
}

/// A `cache_control` that is not an object: an Anthropic client's body goes to an Anthropic
/// target as it came (same-dialect traffic is the provider's to judge), while for an OpenAI
/// client every target that would need it translated refuses it, and the error names why
/// (here the only one: 502).
#[tokio::test]
async fn a_cache_control_that_is_not_an_object_goes_as_it_came_or_is_a_clear_error() {
    let m = mocks(4).await;
    let gw = Gateway::start(&toml(&m, "ant/claude-sonnet-4-5", NO_VERTEX)).await;
    let body = json!({"model": "chat", "max_tokens": 16, "messages": [{"role": "user",
        "content": [{"type": "text", "text": "hi", "cache_control": "yes"}]}]});
    let resp = client()
        .post(gw.url("/v1/messages"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sent = m[1].requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].body["messages"], body["messages"],
        "the marker as the client wrote it"
    );

    let resp = gw
        .chat(
            json!({"model": "chat", "messages": [{"role": "user", "content": "hi",
            "cache_control": ["ephemeral"]}]}),
        )
        .await;
    assert_eq!(resp.status(), 502);
    let body: Value = resp.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`cache_control` must be an object"),
        "{body}"
    );
    assert_eq!(m[1].requests().len(), 1, "nothing more reached Anthropic");
    gw.stop().await;
}
