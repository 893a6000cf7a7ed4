//! The shared HTTP client settings: one pool per provider, HTTP/1.1 keep-alive and HTTP/2
//! (negotiated by ALPN over rustls), no automatic retries or redirects (the failover loop owns
//! retries).

use std::time::Duration;

use crate::config::ProviderConfig;

/// A pooled client for one provider.
pub fn build_client(config: &ProviderConfig) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("switchyard/", env!("CARGO_PKG_VERSION")))
        .build()
}
