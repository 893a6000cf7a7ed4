//! The upstream HTTP client: hyper's pooled client over rustls, one pool per provider,
//! HTTP/1.1 keep-alive and HTTP/2 (negotiated by ALPN), no retries or redirects (the failover
//! loop owns retries).
//!
//! hyper directly rather than reqwest: a request here is a prebuilt `Uri` and a few headers, and
//! reqwest's URL parsing and middleware layers cost about a tenth of the gateway's CPU per
//! request (`bench/overhead`, perf) for features the gateway does not use.

use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use http_body_util::{BodyDataStream, BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::ProviderConfig;

/// A pooled client for one provider.
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A response body as it arrives.
pub type ByteStream = BoxStream<'static, Result<Bytes, hyper::Error>>;

/// Build the client for one provider.
pub fn build_client(config: &ProviderConfig) -> HttpClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(config.connect_timeout));
    let https = HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
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
