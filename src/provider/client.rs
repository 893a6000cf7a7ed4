//! The upstream HTTP client: hyper's pooled client over rustls, one pool per provider,
//! HTTP/1.1 keep-alive and HTTP/2 (negotiated by ALPN), no retries or redirects (the failover
//! loop owns retries).
//!
//! hyper directly rather than reqwest: a request here is a prebuilt `Uri` and a few headers, and
//! reqwest's URL parsing and middleware layers cost about a tenth of the gateway's CPU per
//! request (`bench/overhead`, perf) for features the gateway does not use.
//!
//! A provider behind an egress proxy: the proxy the environment names for its URL
//! (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, minus `NO_PROXY`, read as curl reads them) is
//! used through a `CONNECT` tunnel, with the proxy URL's user and password as basic auth.

use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use http::Uri;
use http_body_util::{BodyDataStream, BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use crate::config::ProviderConfig;

/// A pooled client for one provider.
pub type HttpClient = Client<HttpsConnector<Dial>, Full<Bytes>>;

/// A response body as it arrives.
pub type ByteStream = BoxStream<'static, Result<Bytes, hyper::Error>>;

type BoxError = Box<dyn Error + Send + Sync>;

/// How a provider's connections are made (TLS goes on top): straight to it, or through a
/// `CONNECT` tunnel of a proxy.
#[derive(Clone, Debug)]
pub enum Dial {
    Direct(HttpConnector),
    Tunnel(Tunnel<HttpConnector>),
}

impl tower_service::Service<Uri> for Dial {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Dial::Direct(c) => c.poll_ready(cx).map_err(Into::into),
            Dial::Tunnel(t) => t.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        match self {
            Dial::Direct(c) => {
                let connect = c.call(dst);
                Box::pin(async move { connect.await.map_err(Into::into) })
            }
            Dial::Tunnel(t) => {
                let connect = t.call(dst);
                Box::pin(async move { connect.await.map_err(Into::into) })
            }
        }
    }
}

/// The dialer for a provider at `base_url`, given the environment's proxy settings.
fn dial(config: &ProviderConfig, proxies: &Matcher) -> Dial {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(config.connect_timeout));
    let intercept = config
        .base_url
        .parse::<Uri>()
        .ok()
        .and_then(|uri| proxies.intercept(&uri));
    let Some(proxy) = intercept else {
        return Dial::Direct(http);
    };
    tracing::info!(
        provider = %config.name,
        proxy = %proxy.uri().authority().map_or("?", |a| a.host()),
        "provider reached through a CONNECT proxy (from the environment)"
    );
    let mut tunnel = Tunnel::new(proxy.uri().clone(), http);
    if let Some(auth) = proxy.basic_auth() {
        tunnel = tunnel.with_auth(auth.clone());
    }
    Dial::Tunnel(tunnel)
}

/// Build the client for one provider.
pub fn build_client(config: &ProviderConfig) -> HttpClient {
    let https = HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(dial(config, &Matcher::from_env()));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(256)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(https)
}

/// A body read whole.
pub async fn read_all(body: Incoming) -> Result<Bytes, hyper::Error> {
    Ok(body.collect().await?.to_bytes())
}

/// A body as a stream of its data frames.
pub fn stream(body: Incoming) -> ByteStream {
    BodyDataStream::new(body).boxed()
}
