//! Tests of the upstream client: its pool against a bare HTTP/1.1 server, HTTP/2 against an
//! h2-only HTTPS server with a test CA (`testdata/`).

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::config::ProviderKind;

/// A bare HTTP/1.1 server answering every request with a 64 KiB body: counts the
/// connections it accepted and those that ended, and hangs up after each response as `close`
/// says.
struct Upstream {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
}

const BODY_LEN: usize = 64 * 1024;

/// Whether the upstream hangs up after a response.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Close {
    Never,
    /// With `connection: close` in the response.
    Said,
    /// Without a word (an upstream's idle timeout).
    Unsaid,
}

/// The length of the first whole request in `buf` (head and `content-length` body).
fn whole_request(buf: &[u8]) -> Option<usize> {
    let head = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = std::str::from_utf8(&buf[..head]).ok()?;
    let body = text
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    (buf.len() >= head + body).then_some(head + body)
}

async fn upstream(close: Close) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(AtomicUsize::new(0));
    let (a, e) = (accepted.clone(), ended.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            a.fetch_add(1, Ordering::SeqCst);
            let ended = e.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                'conn: loop {
                    match sock.read_buf(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    while let Some(len) = whole_request(&buf) {
                        buf.drain(..len);
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {BODY_LEN}\r\n{}\r\n",
                            if close == Close::Said {
                                "connection: close\r\n"
                            } else {
                                ""
                            }
                        );
                        let mut resp = head.into_bytes();
                        resp.resize(resp.len() + BODY_LEN, b'x');
                        if sock.write_all(&resp).await.is_err() || close != Close::Never {
                            break 'conn;
                        }
                    }
                }
                ended.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    Upstream {
        addr,
        accepted,
        ended,
    }
}

fn provider_config(addr: SocketAddr) -> ProviderConfig {
    ProviderConfig {
        name: "p".into(),
        kind: ProviderKind::OpenAi,
        base_url: format!("http://{addr}/v1"),
        api_key: None,
        api_version: String::new(),
        connect_timeout: Duration::from_secs(2),
        responses: true,
        aws: None,
        vertex: None,
    }
}

fn client(addr: SocketAddr) -> HttpClient {
    build_client(&provider_config(addr))
}

fn post(addr: SocketAddr) -> Request<Bytes> {
    let mut req = Request::new(Bytes::from_static(b"{}"));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = format!("http://{addr}/v1/chat/completions")
        .parse()
        .unwrap();
    req.headers_mut()
        .insert(header::HOST, addr.to_string().parse().unwrap());
    req
}

async fn call(client: &HttpClient, addr: SocketAddr) -> usize {
    let resp = client.request(post(addr)).await.unwrap();
    assert_eq!(resp.status(), 200);
    read_all(resp.into_body()).await.unwrap().len()
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// Connections the upstream accepted for three requests in a row, each read to its end.
async fn connections_for_three_calls(close: Close) -> usize {
    let up = upstream(close).await;
    let client = client(up.addr);
    for _ in 0..3 {
        assert_eq!(call(&client, up.addr).await, BODY_LEN);
    }
    up.accepted.load(Ordering::SeqCst)
}

#[tokio::test]
async fn requests_read_to_the_end_share_one_connection() {
    assert_eq!(connections_for_three_calls(Close::Never).await, 1);
}

#[tokio::test]
async fn a_body_dropped_unread_takes_its_connection_with_it() {
    let up = upstream(Close::Never).await;
    let client = client(up.addr);
    let resp = client.request(post(up.addr)).await.unwrap();
    drop(resp);
    assert_eq!(call(&client, up.addr).await, BODY_LEN);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
    eventually("the abandoned connection closes", || {
        up.ended.load(Ordering::SeqCst) == 1
    })
    .await;
}

#[tokio::test]
async fn a_connection_the_server_closes_is_not_used_again() {
    assert_eq!(connections_for_three_calls(Close::Said).await, 3);
}

#[tokio::test]
async fn an_idle_connection_the_server_closed_is_dropped_at_checkout() {
    let up = upstream(Close::Unsaid).await;
    let client = client(up.addr);
    for round in 1..=3 {
        assert_eq!(call(&client, up.addr).await, BODY_LEN);
        eventually("the server hangs up", || {
            up.ended.load(Ordering::SeqCst) == round
        })
        .await;
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn idle_connections_are_closed_after_two_whole_sweeps() {
    let up = upstream(Close::Never).await;
    let client = client(up.addr);
    call(&client, up.addr).await;
    let idle = || client.pools[0].lock().idle.len();
    assert_eq!(idle(), 1);
    client.pools[0].sweep();
    client.pools[0].sweep();
    assert_eq!(idle(), 1, "idle for less than two whole sweeps");
    client.pools[0].sweep();
    assert_eq!(idle(), 0);
    eventually("the server sees the connection close", || {
        up.ended.load(Ordering::SeqCst) == 1
    })
    .await;
    // A connection used since the last sweep stays.
    call(&client, up.addr).await;
    client.pools[0].sweep();
    call(&client, up.addr).await;
    client.pools[0].sweep();
    client.pools[0].sweep();
    assert_eq!(idle(), 1);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn each_server_thread_has_its_own_connections() {
    let up = upstream(Close::Never).await;
    let mut client = client(up.addr);
    client.pools = (0..2).map(|_| Arc::default()).collect();
    call(&client, up.addr).await;
    enter_worker(1);
    call(&client, up.addr).await;
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        2,
        "not thread 0's connection"
    );
    call(&client, up.addr).await;
    enter_worker(0);
    call(&client, up.addr).await;
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2, "each reuses its own");
    // Threads beyond the pools share them.
    enter_worker(3);
    call(&client, up.addr).await;
    enter_worker(0);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
}

const TEST_CA: &str = include_str!("testdata/test-ca.pem");
const TEST_CERT: &str = include_str!("testdata/test-localhost.pem");
const TEST_KEY: &str = include_str!("testdata/test-localhost.key");

/// An HTTPS server that speaks only HTTP/2 (ALPN `h2`), or only HTTP/1.1 (`http/1.1`), with
/// a certificate from the test CA (`testdata/`); it answers with the version and URI it saw
/// and whether a `host` header came along, and counts its connections.
async fn tls_upstream(h2: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(TEST_CERT.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(TEST_KEY.as_bytes()).unwrap();
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    tls.alpn_protocols = vec![if h2 { &b"h2"[..] } else { b"http/1.1" }.to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(sock).await else {
                    return;
                };
                let answer = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let seen = format!(
                        "{:?} {} host:{}",
                        req.version(),
                        req.uri(),
                        req.headers().contains_key(header::HOST)
                    );
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(
                        seen,
                    ))))
                });
                let io = TokioIo::new(tls);
                let _ = if h2 {
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, answer)
                        .await
                } else {
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, answer)
                        .await
                };
            });
        }
    });
    (addr, accepted)
}

/// A client of a TLS upstream that trusts the test CA.
fn tls_client(addr: SocketAddr) -> HttpClient {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(TEST_CA.as_bytes()).unwrap())
        .unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut config = provider_config(addr);
    config.base_url = format!("https://{addr}/v1");
    client_over(&config, HttpsConnectorBuilder::new().with_tls_config(tls))
}

/// A call to `url` over `client`: the answer's body.
async fn tls_call(client: &HttpClient, addr: SocketAddr, url: &str) -> Bytes {
    let mut req = post(addr);
    *req.uri_mut() = url.parse().unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    read_all(resp.into_body()).await.unwrap()
}

#[tokio::test]
async fn https_upstreams_that_choose_http2_share_one_connection() {
    let (addr, accepted) = tls_upstream(true).await;
    let client = tls_client(addr);
    let url = format!("https://{addr}/v1/chat/completions");
    // HTTP/2 with the URI's authority, and no `host` header beside it.
    assert_eq!(
        tls_call(&client, addr, &url).await,
        format!("HTTP/2.0 {url} host:false")
    );
    // Concurrent requests then go over the one connection.
    let answers =
        futures_util::future::join_all((0..4).map(|_| tls_call(&client, addr, &url))).await;
    assert!(answers.iter().all(|a| a.starts_with(b"HTTP/2.0 ")));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn https_upstreams_of_http1_keep_their_connection_between_calls() {
    let (addr, accepted) = tls_upstream(false).await;
    let client = tls_client(addr);
    let url = format!("https://{addr}/v1/chat/completions");
    for _ in 0..3 {
        // HTTP/1.1 in origin form, with the `host` header.
        assert_eq!(
            tls_call(&client, addr, &url).await,
            "HTTP/1.1 /v1/chat/completions host:true"
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error() {
    let addr = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let err = client(addr).request(post(addr)).await.unwrap_err();
    assert!(matches!(err, SendError::Connect(_)), "{err:?}");
}
