//! The Responses API's errors: OpenAI's envelope, with the messages and codes the real API
//! answers a Responses request with.
//!
//! The envelope is the chat dialect's (`crate::mock::openai::error`); the decisions (which status,
//! which words) are this dialect's own, so the Responses mock stays an implementation of its
//! wire format rather than a view of the chat one.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::mock::FaultPlan;

/// An error answer: what to say, decided before it becomes a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rejection {
    pub(super) status: StatusCode,
    pub(super) message: String,
    kind: &'static str,
    pub(super) code: Option<String>,
    param: Option<&'static str>,
    retry_after: Option<u64>,
    /// The plan's `error_body`, sent instead of the envelope.
    body: Option<Box<str>>,
}

impl Rejection {
    /// The error a plan injects: its `status`, `error_code` and `retry_after`, or its
    /// `error_body` as it is. Same types and default codes as the chat dialect: one provider,
    /// one outage, whichever API the client called.
    pub(super) fn injected(plan: &FaultPlan) -> Self {
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
    pub(super) fn bad_request(
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

    /// A required body field is absent.
    pub(super) fn missing(param: &'static str) -> Self {
        let message = format!("Missing required parameter: '{param}'.");
        Rejection::bad_request(message, Some("missing_required_parameter"), Some(param))
    }

    /// The Responses API's context-window error (its chat sibling counts tokens in the message;
    /// this one does not).
    pub(super) fn context_length() -> Self {
        let message = "Your input exceeds the context window of this model. Please adjust your \
                       input and try again.";
        Rejection::bad_request(message, Some("context_length_exceeded"), Some("input"))
    }

    /// The mock stores no responses, so every `previous_response_id` is unknown to it.
    pub(super) fn previous_response_not_found(id: &str) -> Self {
        let message = format!("Previous response with id '{id}' not found.");
        Rejection::bad_request(
            message,
            Some("previous_response_not_found"),
            Some("previous_response_id"),
        )
    }

    /// A reasoning item's `encrypted_content` this mock did not make, in OpenAI's words (which
    /// show the content's first and last four characters).
    pub(super) fn invalid_encrypted_content(content: &str) -> Self {
        let chars: Vec<char> = content.chars().collect();
        let shown = if chars.len() > 8 {
            let head: String = chars[..4].iter().collect();
            let tail: String = chars[chars.len() - 4..].iter().collect();
            format!("{head}...{tail}")
        } else {
            content.to_owned()
        };
        let message = format!(
            "The encrypted content {shown} could not be verified. Reason: Encrypted content \
             could not be decrypted or parsed."
        );
        Rejection::bad_request(message, Some("invalid_encrypted_content"), None)
    }

    /// 401 for a missing or wrong key.
    pub(super) fn invalid_api_key() -> Self {
        Rejection {
            status: StatusCode::UNAUTHORIZED,
            code: Some("invalid_api_key".to_owned()),
            ..Rejection::bad_request("Incorrect API key provided.", None, None)
        }
    }

    /// 404, as Azure answers a request without `api-version`.
    pub(super) fn not_found(message: &str) -> Self {
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
        let mut response = crate::mock::openai::error(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_errors_follow_the_plan() {
        let plan = FaultPlan {
            status: Some(503),
            retry_after: Some(2),
            ..FaultPlan::default()
        };
        let rejection = Rejection::injected(&plan);
        assert_eq!(rejection.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(rejection.kind, "server_error");
        assert_eq!(rejection.code, None);
        let response = rejection.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        let limited = FaultPlan {
            status: Some(429),
            ..FaultPlan::default()
        };
        assert_eq!(
            Rejection::injected(&limited).code.as_deref(),
            Some("rate_limit_exceeded")
        );
    }

    #[test]
    fn encrypted_content_is_shown_abbreviated() {
        let rejection = Rejection::invalid_encrypted_content("gAAAAabcdefghDQ==");
        assert!(
            rejection
                .message
                .starts_with("The encrypted content gAAA...DQ== could not be verified."),
            "{}",
            rejection.message
        );
        assert_eq!(rejection.code.as_deref(), Some("invalid_encrypted_content"));
        let short = Rejection::invalid_encrypted_content("abc");
        assert!(
            short.message.contains("content abc could"),
            "{}",
            short.message
        );
    }
}
