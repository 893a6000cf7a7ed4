//! Soft failover: one test per rule of the failover loop, each asserting what the client got
//! and how many calls each mock saw.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

fn failing(status: u16) -> FaultPlan {
    FaultPlan {
        status: Some(status),
        ..Default::default()
    }
}

async fn json(resp: reqwest::Response) -> Value {
    resp.json().await.unwrap()
}

#[tokio::test]
async fn each_failover_status_moves_to_the_next_target() {
    let m = mocks(2).await;
    // Ten failures in a row would open the primary's breaker; this test is about one request.
    let gw = Gateway::start(&config(&m, "[routes.breaker]\nconsecutive_failures = 0")).await;
    for status in [401, 403, 404, 408, 429, 500, 502, 503, 504, 529] {
        m[0].reset();
        m[1].reset();
        m[0].set_plan(failing(status));
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(resp.status(), 200, "status {status}");
        assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
        assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
        let body = json(resp).await;
        assert_eq!(completion_text(&body), canonical_text(12, 0));
        assert_eq!(
            body["model"], "model-1",
            "the response names the model that answered"
        );
        assert_eq!(m[0].stats().requests, 1, "status {status}");
        assert_eq!(m[1].stats().requests, 1, "status {status}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_healthy_primary_serves_alone() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "1");
    assert_eq!(header(&resp, "x-switchyard-request-id").len(), 36);
    assert_eq!(m[1].stats().requests, 0);
}

#[tokio::test]
async fn client_errors_are_returned_as_they_are() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    for (status, code) in [
        (400, None),
        (413, None),
        (422, None),
        (400, Some("content_filter")),
    ] {
        m[0].reset();
        m[0].set_plan(FaultPlan {
            status: Some(status),
            error_code: code.map(str::to_owned),
            ..Default::default()
        });
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(resp.status().as_u16(), status);
        assert_eq!(header(&resp, "x-switchyard-attempts"), "1");
        let body = json(resp).await;
        assert!(body["error"]["message"].is_string(), "{body}");
        if let Some(code) = code {
            assert_eq!(body["error"]["code"], code, "the reason is passed on");
        }
        assert_eq!(m[1].stats().requests, 0, "{status} must not fail over");
    }
}

#[tokio::test]
async fn a_refused_connection_is_retried_once_then_fails_over() {
    let m = mocks(1).await;
    let (_bound, dead) = refusing_addr();
    let toml = format!(
        "[[providers]]\nname = \"dead\"\nkind = \"openai\"\nbase_url = \"http://{dead}/v1\"\n\n\
         [[providers]]\nname = \"live\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n\
         [[routes]]\nname = \"chat\"\ntargets = [{{ provider = \"dead\", model = \"a\" }}, {{ provider = \"live\", model = \"b\" }}]\n",
        m[0].base_url()
    );
    let gw = Gateway::start(&toml).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "live/b");
    assert_eq!(
        header(&resp, "x-switchyard-attempts"),
        "3",
        "dead twice (never reached), then live"
    );
    assert_eq!(m[0].stats().requests, 1);
}

#[tokio::test]
async fn same_target_retries_come_first_for_quick_failures() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "same_target_retries = 1\nmax_attempts = 3")).await;
    m[0].set_plan(failing(503));
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "3");
    assert_eq!(m[0].stats().requests, 2, "one retry on the same target");
    assert_eq!(m[1].stats().requests, 1);

    // 401 is not a quick failure: no same-target retry.
    m[0].reset();
    m[1].reset();
    m[0].set_plan(failing(401));
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(m[0].stats().requests, 1);
}

#[tokio::test]
async fn max_attempts_caps_the_path_and_the_error_lists_it() {
    let m = mocks(3).await;
    let gw = Gateway::start(&config(&m, "max_attempts = 2")).await;
    m[0].set_plan(failing(503));
    m[1].set_plan(failing(500));
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 502);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    let body = json(resp).await;
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("p0/model-0: 503") && msg.contains("p1/model-1: 500"),
        "{msg}"
    );
    assert_eq!(body["error"]["code"], "upstream_failed");
    assert_eq!(m[2].stats().requests, 0);
}

#[tokio::test]
async fn all_targets_overloaded_is_503() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(failing(503));
    m[1].set_plan(failing(429));
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(json(resp).await["error"]["type"], "upstream_error");
}

#[tokio::test]
async fn retry_after_parks_the_target() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        status: Some(429),
        retry_after: Some(60),
        ..Default::default()
    });
    for _ in 0..3 {
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    }
    assert_eq!(m[0].stats().requests, 1, "parked after the first 429");
    assert_eq!(m[1].stats().requests, 3);
}

#[tokio::test]
async fn a_short_retry_after_is_waited_out_on_the_same_target() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "retry_after_wait = \"5s\"")).await;
    m[0].set_plan(FaultPlan {
        status: Some(429),
        retry_after: Some(0),
        ..Default::default()
    });
    let resp = gw.chat(chat_body(false)).await;
    // Retry-After fits the wait: the same target is tried once more, then the backup serves.
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    assert_eq!(
        m[0].stats().requests,
        2,
        "waited and retried the same target once"
    );
    assert_eq!(m[1].stats().requests, 1);
}

#[tokio::test]
async fn context_length_errors_move_to_a_larger_window() {
    let m = mocks(3).await;
    let windows = [Some(8_000), Some(4_000), Some(200_000)];
    let gw = Gateway::start(&config_with(&m, "", &windows)).await;
    m[0].set_plan(FaultPlan {
        max_context_tokens: Some(1),
        ..Default::default()
    });
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p2/model-2");
    assert_eq!(m[1].stats().requests, 0, "a smaller window is skipped");
    assert_eq!(m[2].stats().requests, 1);
}

#[tokio::test]
async fn failover_off_makes_exactly_one_attempt() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(failing(503));
    let resp = gw
        .chat_with(chat_body(false), &[("x-switchyard-failover", "off")])
        .await;
    assert_eq!(resp.status(), 503);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "1");
    assert_eq!(m[1].stats().requests, 0);
}

#[tokio::test]
async fn malformed_upstream_replies_fail_over() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        malformed_body: true,
        ..Default::default()
    });
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    assert_eq!(completion_text(&json(resp).await), canonical_text(12, 0));
}

#[tokio::test]
async fn a_context_length_error_with_no_larger_window_is_returned_as_is() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config_with(&m, "", &[Some(8_000), Some(4_000)])).await;
    m[0].set_plan(FaultPlan {
        max_context_tokens: Some(1),
        ..Default::default()
    });
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(
        resp.status(),
        400,
        "the client must trim: a 502 would hide that"
    );
    assert_eq!(json(resp).await["error"]["code"], "context_length_exceeded");
    assert_eq!(m[1].stats().requests, 0, "a smaller window is never tried");
}
