//! Black-box tests of the mock's control API and lifecycle: per-model plans, the HTTP control
//! endpoints, shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::Duration;
use switchyard::mock::{FaultPlan, MockServer, MockStats};

mod mock_support;
use mock_support::*;

#[tokio::test]
async fn model_plan_overrides_the_default() {
    let mock = spawn_with(FaultPlan {
        status: Some(500),
        ..FaultPlan::default()
    })
    .await;
    mock.set_model_plan(
        "gpt-4o-mini",
        FaultPlan {
            words: 2,
            ..FaultPlan::default()
        },
    );
    assert_eq!(post(&mock, &chat_body("gpt-4o", false)).await.status(), 500);
    let body: Value = post(&mock, &chat_body("gpt-4o-mini", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "alpha-1 bravo-2.");
    mock.reset();
    assert_eq!(mock.stats(), MockStats::default());
    assert!(mock.requests().is_empty());
    assert_eq!(post(&mock, &chat_body("gpt-4o", false)).await.status(), 200);
}

#[tokio::test]
async fn control_api_over_http() {
    let mock = MockServer::spawn("m").await.unwrap();
    let client = reqwest::Client::new();
    let control = |path: &str| format!("{}/mock/{path}", mock.root_url());

    let put = client
        .put(control("plan"))
        .body(r#"{"status": 503}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(post(&mock, &chat_body("gpt-4o", false)).await.status(), 503);
    let plan: Value = client
        .get(control("plan"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(plan["status"], 503);

    let put = client
        .put(control("plan/gpt-4o-mini"))
        .body(r#"{"words": 1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let body: Value = post(&mock, &chat_body("gpt-4o-mini", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "alpha-1.");

    for bad in [
        r#"{"status": 503"#,
        r#"{"stauts": 503}"#,
        r#"{"error_rate": 2}"#,
    ] {
        let response = client.put(control("plan")).body(bad).send().await.unwrap();
        assert_eq!(response.status(), 400, "{bad}");
        let error: Value = response.json().await.unwrap();
        assert!(error["error"]["message"].is_string(), "{error}");
    }

    let stats: MockStats = client
        .get(control("stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!((stats.requests, stats.completed), (2, 2));
    assert_eq!(stats.by_model["gpt-4o"].requests, 1);
    let recorded: Vec<Value> = client
        .get(control("requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[1]["body"]["model"], "gpt-4o-mini");

    let reset = client.post(control("reset")).send().await.unwrap();
    assert!(reset.status().is_success());
    assert_eq!(mock.stats(), MockStats::default());
    assert_eq!(post(&mock, &chat_body("gpt-4o", false)).await.status(), 200);
}

#[tokio::test]
async fn shutdown_closes_stalled_connections() {
    let mock = spawn_with(FaultPlan {
        stall: true,
        ..FaultPlan::default()
    })
    .await;
    let url = format!("{}/chat/completions", mock.base_url());
    let addr = mock.addr();
    let request = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .json(&chat_body("gpt-4o", false))
            .send()
            .await
    });
    let _ = stats_when(&mock, |s| s.requests == 1).await;
    mock.shutdown().await;
    let outcome = tokio::time::timeout(Duration::from_secs(5), request).await;
    assert!(
        outcome.unwrap().unwrap().is_err(),
        "the stalled request must fail"
    );
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the port must be closed"
    );
}

#[tokio::test]
async fn serve_runs_until_shutdown() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(switchyard::mock::serve(listener, "served".into(), async {
        let _ = stopped.await;
    }));
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&chat_body("gpt-4o", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-mock-name"], "served");
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
