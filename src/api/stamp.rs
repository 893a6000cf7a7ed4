//! The gateway's own fields of a client API answer, carried beside it rather than in its
//! header map.
//!
//! Every answer of a completion, a message or a response carries its request id, its attempt
//! count, the target that served it and its content type. Put into the answer's `HeaderMap`,
//! each was a hashed insert (the first allocating the map), then a walk of the map to write
//! the head, then its drop. The gateway's own HTTP/1.1 writer (`app::conn::h1`) now writes a
//! [`Stamp`] into the head as it is: a short request went from about 31,300 to 29,400
//! instructions (bench/instructions). hyper and the router get the fields in the map
//! ([`Stamp::apply`]).

use axum::response::{IntoResponse, Response};
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue};

use super::headers;

/// A client API answer and its gateway fields.
pub struct Answered {
    pub response: Response,
    pub stamp: Stamp,
}

impl Answered {
    /// `response` to a request refused before any upstream call: it says so (no attempt).
    pub(super) fn refused(response: Response) -> Answered {
        Answered {
            response,
            stamp: Stamp::default(),
        }
    }

    /// The answer under request `id`.
    pub(super) fn with_id(mut self, id: String) -> Answered {
        self.stamp.request_id = id;
        self
    }
}

impl IntoResponse for Answered {
    fn into_response(mut self) -> Response {
        self.stamp.apply(self.response.headers_mut());
        self.response
    }
}

/// What a body is, when the gateway says it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Content {
    /// The response's own fields say (an error's envelope), or nothing does.
    #[default]
    Own,
    /// `application/json`.
    Json,
    /// `text/event-stream`, not to be cached.
    EventStream,
}

/// The gateway's fields of one answer.
#[derive(Debug, Default)]
pub struct Stamp {
    /// `x-switchyard-request-id`: one of [`crate::request_id::new`]'s (empty: none).
    pub(super) request_id: String,
    pub(super) content: Content,
    /// `x-switchyard-target`: the target that served the answer.
    pub(super) target: Option<HeaderValue>,
    /// `x-switchyard-attempts`: upstream calls made (0: refused before any).
    pub(super) attempts: usize,
    /// `x-switchyard-hedged: true` when a hedge raced the first attempt.
    pub(super) hedged: bool,
    /// `x-switchyard-turns-dropped`, when more than none.
    pub(super) turns_dropped: usize,
}

impl Stamp {
    /// Each field as `name: value\r\n` onto a response head.
    pub fn write(&self, head: &mut Vec<u8>) {
        match self.content {
            Content::Own => {}
            Content::Json => head.extend_from_slice(b"content-type: application/json\r\n"),
            Content::EventStream => head.extend_from_slice(
                b"content-type: text/event-stream\r\ncache-control: no-cache\r\n",
            ),
        }
        if let Some(target) = &self.target {
            field(head, headers::TARGET_LINE, target.as_bytes());
        }
        let mut digits = itoa::Buffer::new();
        let attempts = digits.format(self.attempts).as_bytes();
        field(head, headers::ATTEMPTS_LINE, attempts);
        if self.hedged {
            field(head, headers::HEDGED_LINE, b"true");
        }
        if self.turns_dropped > 0 {
            let dropped = digits.format(self.turns_dropped).as_bytes();
            field(head, headers::TURNS_DROPPED_LINE, dropped);
        }
        if !self.request_id.is_empty() {
            debug_assert!(HeaderValue::from_str(&self.request_id).is_ok());
            field(head, headers::REQUEST_ID_LINE, self.request_id.as_bytes());
        }
    }

    /// The same fields put into `h`, for a writer that writes only the map's.
    pub fn apply(self, h: &mut HeaderMap) {
        match self.content {
            Content::Own => {}
            Content::Json => {
                h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            Content::EventStream => {
                h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
                h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            }
        }
        if let Some(target) = self.target {
            h.insert(headers::TARGET, target);
        }
        h.insert(headers::ATTEMPTS, count_value(self.attempts));
        if self.hedged {
            h.insert(headers::HEDGED, HeaderValue::from_static("true"));
        }
        if self.turns_dropped > 0 {
            h.insert(headers::TURNS_DROPPED, count_value(self.turns_dropped));
        }
        if !self.request_id.is_empty() {
            h.insert(headers::REQUEST_ID, id_value(self.request_id));
        }
    }
}

/// A request id as a header value: the id's own bytes become the value (a copy of them was an
/// allocation a request).
pub(super) fn id_value(id: String) -> HeaderValue {
    HeaderValue::from_maybe_shared(bytes::Bytes::from(id))
        .unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// A count as a header value; a small one without an allocation (`HeaderValue::from` a number
/// copies its digits into a new buffer: one allocation a request for `x-switchyard-attempts`).
fn count_value(n: usize) -> HeaderValue {
    const SMALL: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match SMALL.get(n) {
        Some(digit) => HeaderValue::from_static(digit),
        None => HeaderValue::from(n),
    }
}

/// `name: value\r\n` onto a head, its `name: ` one of [`headers`]' `*_LINE` constants:
/// copied as a constant, where a `HeaderName`'s bytes and the separator were two calls of
/// `memcpy`.
fn field(head: &mut Vec<u8>, name_colon: &'static [u8], value: &[u8]) {
    head.extend_from_slice(name_colon);
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamps() -> Vec<Stamp> {
        vec![
            Stamp::default(),
            Stamp {
                request_id: crate::request_id::new(),
                content: Content::Json,
                target: Some(HeaderValue::from_static("openai/gpt-4o")),
                attempts: 1,
                hedged: false,
                turns_dropped: 0,
            },
            Stamp {
                request_id: crate::request_id::new(),
                content: Content::EventStream,
                target: Some(HeaderValue::from_static("anthropic/claude")),
                attempts: 12,
                hedged: true,
                turns_dropped: 3,
            },
        ]
    }

    #[test]
    fn counts_are_their_digits() {
        for n in [0, 1, 9, 10, 12345] {
            assert_eq!(count_value(n).to_str().unwrap(), n.to_string());
        }
    }

    /// The head the gateway's writer gets and the map hyper gets hold the same fields.
    #[test]
    fn written_and_applied_say_the_same() {
        for stamp in stamps() {
            let mut head = Vec::new();
            stamp.write(&mut head);
            let mut map = HeaderMap::new();
            stamp.apply(&mut map);
            let text = std::str::from_utf8(&head).unwrap();
            let written: Vec<(&str, &str)> = text
                .strip_suffix("\r\n")
                .map(|t| t.split("\r\n").collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .map(|line| line.split_once(": ").unwrap())
                .collect();
            let applied: Vec<(&str, &str)> = map
                .iter()
                .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
                .collect();
            assert_eq!(written, applied);
            assert!(map.contains_key(headers::ATTEMPTS));
        }
    }

    /// The router's answer is the response with the fields in its map.
    #[test]
    fn into_a_response_the_fields_go_into_the_map() {
        let answered = Answered::refused(Response::new(axum::body::Body::empty()))
            .with_id("0190c5f2-7d3a-7b1e-9c4d-0123456789ab".to_owned());
        let resp = answered.into_response();
        let h = resp.headers();
        assert_eq!(h[headers::ATTEMPTS], "0");
        assert_eq!(
            h[headers::REQUEST_ID],
            "0190c5f2-7d3a-7b1e-9c4d-0123456789ab"
        );
        assert!(!h.contains_key(CONTENT_TYPE));
    }
}
