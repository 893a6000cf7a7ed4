//! A provider behind an egress proxy: the gateway reads `HTTP_PROXY` / `HTTPS_PROXY` /
//! `NO_PROXY` from the environment (as curl does) and reaches the provider through a `CONNECT`
//! tunnel, with the proxy URL's credentials as basic auth.
//!
//! One test in its own binary: it sets process-wide environment variables.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A `CONNECT` proxy that records each request head and splices the tunnel.
async fn connect_proxy() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            let log = log.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8(head).unwrap();
                let target = head
                    .strip_prefix("CONNECT ")
                    .and_then(|rest| rest.split(' ').next())
                    .map(str::to_owned);
                log.lock().unwrap().push(head);
                let Some(target) = target else {
                    let _ = client
                        .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                        .await;
                    return;
                };
                let mut upstream = TcpStream::connect(&target).await.unwrap();
                client
                    .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    .await
                    .unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn providers_are_reached_through_the_environments_proxy_unless_no_proxy_says_otherwise() {
    let m = mocks(1).await;
    let (proxy, seen) = connect_proxy().await;
    // The provider is named `localhost`, the gateway is reached at 127.0.0.1: NO_PROXY keeps
    // this test's own client off the proxy, while the gateway's provider traffic goes through it.
    let port = m[0].addr().port();
    let toml = config(&m, "").replace(&m[0].base_url(), &format!("http://localhost:{port}/v1"));
    std::env::set_var("HTTP_PROXY", format!("http://user:secret@{proxy}"));
    std::env::set_var("NO_PROXY", "127.0.0.1");
    let gw = Gateway::start(&toml).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");
    gw.stop().await;
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "one tunnel: {seen:?}");
        let head = seen[0].to_ascii_lowercase();
        assert!(
            head.starts_with(&format!("connect localhost:{port} http/1.1\r\n")),
            "{head}"
        );
        // "user:secret" in base64.
        assert!(
            head.contains("proxy-authorization: basic dxnlcjpzzwnyzxq="),
            "{head}"
        );
    }
    assert_eq!(m[0].stats().requests, 1);

    // NO_PROXY names the provider's host: straight to it.
    std::env::set_var("NO_PROXY", "127.0.0.1,localhost");
    let gw = Gateway::start(&toml).await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    gw.stop().await;
    assert_eq!(seen.lock().unwrap().len(), 1, "no new tunnel");
    assert_eq!(m[0].stats().requests, 2);
}
