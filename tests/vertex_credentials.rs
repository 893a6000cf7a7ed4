//! `kind = "vertex"` credentials against the mock's token endpoint, which checks the JWT grant
//! of its test service account: the first token fetched when serving starts (and none by
//! `check`), one token for many calls, refreshed ahead of its expiry without holding a
//! request; a token that cannot be had as a `credentials` attempt failure that fails over; a
//! bad token refused by Vertex; no credential in anything sent out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::vertex::*;
use support::*;
use switchyard::mock::vertex::service_account_json;
use switchyard::mock::MockServer;

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
