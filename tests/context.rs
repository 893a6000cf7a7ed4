//! Context carry-over: a conversation too long for a target's `context_window` is trimmed to fit
//! before the attempt: the system prompt and the newest turns stay, a tool call keeps its
//! result, and the number of turns dropped is reported.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::*;

fn long_conversation() -> Value {
    let mut messages = vec![json!({"role": "system", "content": "You are the agent's planner."})];
    for i in 0..40 {
        let filler = format!("turn {i}: ") + &"lorem ipsum dolor sit amet ".repeat(20);
        messages.push(json!({"role": "user", "content": filler.clone()}));
        messages.push(json!({"role": "assistant", "content": filler}));
    }
    messages.push(json!({"role": "user", "content": "What is the weather?"}));
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}));
    json!({"model": "chat", "max_tokens": 100, "messages": messages})
}

#[tokio::test]
async fn a_conversation_too_long_for_the_target_is_trimmed_to_fit() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config_with(&m, "", &[Some(3_000)])).await;
    let resp = gw.chat(long_conversation()).await;
    assert_eq!(resp.status(), 200);
    let dropped: usize = header(&resp, "x-switchyard-turns-dropped").parse().unwrap();
    assert!(dropped > 10, "{dropped}");
    let sent = &m[0].requests()[0].body;
    let msgs = sent["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["role"], "system", "the system prompt stays");
    assert_eq!(
        msgs[1]["role"], "user",
        "the conversation still starts with the user"
    );
    assert_eq!(
        msgs.last().unwrap()["role"],
        "tool",
        "the newest turns stay"
    );
    assert_eq!(
        msgs[msgs.len() - 2]["tool_calls"][0]["id"],
        "call_1",
        "the tool call keeps its result"
    );
    assert_eq!(
        msgs.len() + dropped,
        long_conversation()["messages"].as_array().unwrap().len()
    );
}

#[tokio::test]
async fn a_conversation_that_fits_passes_through_untouched() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config_with(&m, "", &[Some(128_000)])).await;
    let resp = gw.chat(long_conversation()).await;
    assert_eq!(header(&resp, "x-switchyard-turns-dropped"), "");
    let mut expected = long_conversation();
    expected["model"] = json!("model-0");
    assert_eq!(m[0].requests()[0].body, expected);
}

#[tokio::test]
async fn with_on_overflow_error_nothing_is_trimmed() {
    let m = mocks(1).await;
    let toml = config_with(&m, "", &[Some(3_000)]) + "[routes.context]\non_overflow = \"error\"\n";
    let gw = Gateway::start(&toml).await;
    gw.chat(long_conversation()).await;
    let sent = &m[0].requests()[0].body;
    assert_eq!(
        sent["messages"].as_array().unwrap().len(),
        long_conversation()["messages"].as_array().unwrap().len()
    );
}

/// Two mocks; route `chat` on `p0/gpt-4o` alone (tiktoken's `o200k_base`) with a context
/// window of `window` tokens, route `small` on `p1/model-1`; bodies up to 9 MiB.
fn tokenizer_config(m: &[switchyard::mock::MockServer], window: u32) -> String {
    let mut toml = String::from("[server]\nmax_body = \"9MiB\"\n\n");
    for (i, mock) in m.iter().enumerate() {
        toml += &format!(
            "[[providers]]\nname = \"p{i}\"\nkind = \"openai-compatible\"\nbase_url = \"{}\"\n\n",
            mock.base_url()
        );
    }
    toml + &format!(
        "[[routes]]\nname = \"chat\"\n\
         targets = [{{ provider = \"p0\", model = \"gpt-4o\", context_window = {window} }}]\n\n\
         [[routes]]\nname = \"small\"\ntargets = [{{ provider = \"p1\", model = \"model-1\" }}]\n"
    )
}

fn one_message(content: String) -> Value {
    json!({"model": "chat", "max_tokens": 16, "messages": [{"role": "user", "content": content}]})
}

/// About a million consecutive spaces (under the default 8 MiB body limit) made tiktoken's
/// regex panic inside the gateway, and the client got an empty reply. Counted in pieces, they
/// are a few thousand tokens that fit: the answer is a proper one.
#[tokio::test]
async fn a_million_spaces_get_a_proper_answer() {
    let m = mocks(2).await;
    let gw = Gateway::start(&tokenizer_config(&m, 128_000)).await;
    let resp = client()
        .post(gw.url("/v1/chat/completions"))
        .json(&one_message(" ".repeat(1_000_000)))
        .send()
        .await
        .expect("an answer, not an empty reply");
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/gpt-4o");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        completion_text(&body),
        switchyard::mock::canonical_text(12, 0)
    );
}

/// A conversation that must be counted is counted off the server thread: an unrelated small
/// request is answered while a large one (one 8 MiB word: seconds of tokenizer time) waits for
/// its count. The gateway serves on this test's single thread; the one thread of its blocking
/// pool is held by the test until the small request has its answer, so the large count cannot
/// finish first. Had the count run on the server thread, the small request's answer (its
/// upstream holds it 2 s, long after the large count began) would wait for it instead.
#[test]
fn a_long_token_count_does_not_hold_an_unrelated_request() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .unwrap();
    rt.block_on(async {
        let m = mocks(2).await;
        m[1].set_plan(switchyard::mock::FaultPlan {
            latency_ms: 2_000,
            ..Default::default()
        });
        let gw = Gateway::start(&tokenizer_config(&m, 500_000)).await;
        let (release, held) = std::sync::mpsc::channel::<()>();
        let blocker = tokio::task::spawn_blocking(move || {
            let _ = held.recv();
        });
        let url = gw.url("/v1/chat/completions");
        let small = tokio::spawn({
            let url = url.clone();
            async move {
                let mut body = one_message("hi".into());
                body["model"] = "small".into();
                client()
                    .post(url)
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .status()
            }
        });
        while user_requests(&m[1]) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let mut large = tokio::spawn(async move {
            let resp = client()
                .post(url)
                .json(&one_message("a".repeat(8 << 20)))
                .send()
                .await
                .unwrap();
            (resp.status(), resp.text().await.unwrap())
        });
        tokio::select! {
            status = small => assert_eq!(status.unwrap(), 200),
            done = &mut large => panic!("the large request ended first: {done:?}"),
        }
        release.send(()).unwrap();
        blocker.await.unwrap();
        let (status, body) = large.await.unwrap();
        // Its one message is far over the window (counted in bounds): its target cannot take it.
        assert_eq!(status, 502, "{body}");
        assert!(body.contains("does not fit"), "{body}");
        assert_eq!(user_requests(&m[0]), 0);
        assert_eq!(user_requests(&m[1]), 1);
    });
}
