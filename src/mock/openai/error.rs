//! OpenAI's error envelope, and the error answers the mock decides on before rendering them.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::mock::FaultPlan;

/// An error answer: what to say, decided before it becomes a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::mock) struct Rejection {
    pub(in crate::mock) status: StatusCode,
    pub(in crate::mock) message: String,
    pub(in crate::mock) kind: &'static str,
    pub(in crate::mock) code: Option<String>,
    param: Option<&'static str>,
    retry_after: Option<u64>,
    /// The plan's `error_body`, sent instead of the envelope.
    body: Option<Box<str>>,
}

impl Rejection {
    /// The error a plan injects: its `status`, `error_code` and `retry_after`, or its
    /// `error_body` as it is.
    pub(in crate::mock) fn injected(plan: &FaultPlan) -> Self {
        let status = plan.injected_status();
        let kind = match status.as_u16() {
            429 => "requests",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        };
        let default_code =
            (status == StatusCode::TOO_MANY_REQUESTS).then(|| "rate_limit_exceeded".to_owned());
        let reason = status.canonical_reason().unwrap_or("Error");
        Rejection {
            status,
            message: format!("{reason} (injected by the mock's fault plan)"),
            kind,
            code: plan.error_code.clone().or(default_code),
            param: None,
            retry_after: plan.retry_after,
            body: plan.error_body.as_deref().map(Box::from),
        }
    }

    /// A 400 `invalid_request_error`.
    pub(in crate::mock) fn bad_request(
        message: impl Into<String>,
        code: Option<&str>,
        param: Option<&'static str>,
    ) -> Self {
        Rejection {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            code: code.map(str::to_owned),
            param,
            retry_after: None,
            body: None,
        }
    }

    /// OpenAI's context-length error, word for word.
    pub(super) fn context_length(max: u32, tokens: u64) -> Self {
        let message = format!(
            "This model's maximum context length is {max} tokens. However, your messages \
             resulted in {tokens} tokens. Please reduce the length of the messages."
        );
        Rejection::bad_request(message, Some("context_length_exceeded"), Some("messages"))
    }

    /// 401 for a missing or wrong key.
    pub(in crate::mock) fn invalid_api_key() -> Self {
        Rejection {
            status: StatusCode::UNAUTHORIZED,
            code: Some("invalid_api_key".to_owned()),
            ..Rejection::bad_request("Incorrect API key provided.", None, None)
        }
    }

    /// 404, as Azure answers a request without `api-version`.
    pub(in crate::mock) fn not_found(message: &str) -> Self {
        Rejection {
            status: StatusCode::NOT_FOUND,
            code: Some("404".to_owned()),
            ..Rejection::bad_request(message, None, None)
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        if let Some(body) = self.body {
            return crate::mock::raw_error(self.status, body.into(), self.retry_after);
        }
        let mut response = error(
            self.status,
            &self.message,
            self.kind,
            self.code.as_deref(),
            self.param,
        );
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// An OpenAI error envelope: `{"error":{"message","type","param","code"}}`.
pub(crate) fn error(
    status: StatusCode,
    message: &str,
    kind: &str,
    code: Option<&str>,
    param: Option<&str>,
) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": param, "code": code}});
    (status, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_errors_follow_the_plan() {
        let plan = FaultPlan {
            status: Some(429),
            retry_after: Some(2),
            ..FaultPlan::default()
        };
        let rejection = Rejection::injected(&plan);
        assert_eq!(rejection.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(rejection.code.as_deref(), Some("rate_limit_exceeded"));
        let response = rejection.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        let filtered = FaultPlan {
            status: Some(400),
            error_code: Some("content_filter".into()),
            ..FaultPlan::default()
        };
        assert_eq!(
            Rejection::injected(&filtered).code.as_deref(),
            Some("content_filter")
        );
        let server = FaultPlan {
            status: Some(503),
            ..FaultPlan::default()
        };
        assert_eq!(Rejection::injected(&server).kind, "server_error");
        assert_eq!(Rejection::injected(&server).code, None);
    }

    #[tokio::test]
    async fn an_injected_error_body_is_sent_as_it_is() {
        let vllm = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400}"#;
        let plan = FaultPlan {
            status: Some(400),
            error_body: Some(vllm.to_owned()),
            retry_after: Some(3),
            ..FaultPlan::default()
        };
        let response = Rejection::injected(&plan).into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await;
        assert_eq!(body.ok().as_deref(), Some(vllm.as_bytes()));
        let html = FaultPlan {
            status: Some(502),
            error_body: Some("<html>Bad Gateway</html>".to_owned()),
            ..FaultPlan::default()
        };
        let response = Rejection::injected(&html).into_response();
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert!(response.headers()[header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|v| v.starts_with("text/plain")));
    }

    #[test]
    fn context_length_message() {
        let rejection = Rejection::context_length(10, 11);
        assert!(rejection.message.starts_with(
            "This model's maximum context length is 10 tokens. However, your messages resulted \
             in 11 tokens."
        ));
        assert_eq!(rejection.code.as_deref(), Some("context_length_exceeded"));
    }
}
