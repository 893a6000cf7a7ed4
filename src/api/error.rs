//! The one place errors become HTTP: the OpenAI error envelope
//! `{"error":{"message","type","param","code"}}`.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};

/// An error the gateway itself answers with.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    /// 400 `invalid_request_error`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code,
            message: message.into(),
        }
    }

    /// Any status with an explicit type and code.
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            kind,
            code,
            message: message.into(),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        serde_json::json!({
            "error": {"message": self.message, "type": self.kind, "param": null, "code": self.code}
        })
        .to_string()
    }
}

impl ApiError {
    /// The error in a client dialect's own envelope (Anthropic's on `/v1/messages`).
    pub fn into_dialect_response(self, dialect: crate::canonical::Dialect) -> Response {
        use crate::canonical::Dialect;
        // The Responses API's errors are OpenAI's envelope.
        if matches!(dialect, Dialect::OpenAi | Dialect::Responses) {
            return self.into_response();
        }
        let class = match self.status.as_u16() {
            429 => crate::canonical::ErrorClass::RateLimited,
            503 | 529 => crate::canonical::ErrorClass::Overloaded,
            401 | 403 => crate::canonical::ErrorClass::Auth,
            _ => crate::canonical::ErrorClass::Other,
        };
        let err = crate::canonical::UpstreamError::new(self.status.as_u16(), class, self.message);
        let mut resp = (self.status, dialect.write_error(&err)).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, self.body()).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}
