//! The Responses API's errors: OpenAI's envelope (the chat dialect's [`Rejection`]), with the
//! messages and codes the real API answers a Responses request with. The decisions (which
//! status, which words) are this dialect's own, so the Responses mock stays an implementation
//! of its wire format rather than a view of the chat one.

pub(super) use crate::mock::openai::error::Rejection;

impl Rejection {
    /// A required body field is absent.
    pub(super) fn missing(param: &'static str) -> Self {
        let message = format!("Missing required parameter: '{param}'.");
        Rejection::bad_request(message, Some("missing_required_parameter"), Some(param))
    }

    /// The Responses API's context-window error (its chat sibling counts tokens in the message;
    /// this one does not).
    pub(super) fn input_too_long() -> Self {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
