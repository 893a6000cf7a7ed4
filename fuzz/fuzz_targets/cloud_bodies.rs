//! Any bytes as what the gateway rewrites for Amazon Bedrock and Google Vertex AI: a client's
//! Anthropic body made into Bedrock's (with the client's `anthropic-beta`) and Vertex's (for
//! an Anthropic and a Google model), and an upstream error answer made into Anthropic's
//! envelope. A body that was a JSON object must come out one; every error written must parse
//! as Anthropic's.
#![no_main]

use http::{HeaderMap, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;
use switchyard::canonical::Dialect;
use switchyard::provider::bedrock;
use switchyard::provider::vertex::{self, Publisher};

fn object(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(bytes).is_ok()
}

fuzz_target!(|data: &[u8]| {
    let was_object = object(data);
    let betas = std::str::from_utf8(&data[..data.len().min(40)]).ok();
    for betas in [None, Some("fine-grained-tool-streaming-2025-05-14"), betas] {
        let body = bedrock::body(data, betas);
        assert!(
            !was_object || object(&body),
            "bedrock body: {}",
            String::from_utf8_lossy(&body)
        );
    }
    for publisher in [Publisher::Anthropic, Publisher::Google] {
        let body = vertex::body(publisher, data.to_vec());
        assert!(
            !was_object || object(&body),
            "vertex body: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let mut headers = HeaderMap::new();
    for status in [StatusCode::BAD_REQUEST, StatusCode::TOO_MANY_REQUESTS] {
        let (status, body) = bedrock::anthropic_error(status, &headers, data);
        assert!(
            object(&body),
            "bedrock error: {}",
            String::from_utf8_lossy(&body)
        );
        let _ = Dialect::Anthropic.parse_error(status.as_u16(), &body);
        if let Some((status, body)) = vertex::error_answer(Publisher::Anthropic, status, data) {
            assert!(
                object(&body),
                "vertex error: {}",
                String::from_utf8_lossy(&body)
            );
            let _ = Dialect::Anthropic.parse_error(status.as_u16(), &body);
        }
        headers.insert(
            "x-amzn-errortype",
            HeaderValue::from_static("ThrottlingException:http://internal.amazon.com/"),
        );
    }
});
