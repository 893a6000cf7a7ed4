//! `GET /dashboard`: one self-contained page (inline CSS and JS, embedded in the binary, nothing
//! loaded from elsewhere) that polls `/admin/status`, `/metrics` and `/admin/events` every
//! second and keeps the history for its charts in the browser. Its breaker buttons call
//! `POST /admin/targets/{provider}/{model}/breaker`.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue};

/// The page.
const PAGE: &str = include_str!("dashboard.html");

/// `GET /dashboard`.
pub(super) async fn page() -> Response {
    let mut resp = PAGE.into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Inline script and style only; no other origin is ever contacted. Never inside another
    // site's frame (its buttons change breakers: no clickjacking), no `<base>` or form to
    // send anything elsewhere.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src data:; frame-ancestors 'none'; base-uri 'none'; \
             form-action 'none'",
        ),
    );
    // `frame-ancestors` for browsers that predate it.
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}
