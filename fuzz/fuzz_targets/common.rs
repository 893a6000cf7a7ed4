//! Shared by the targets: what to do with a request that parsed.

use switchyard::canonical::context::{self, TokenCounter};
use switchyard::canonical::gemini::signature;
use switchyard::canonical::{ChatRequest, Dialect};

const DIALECTS: [Dialect; 4] = [
    Dialect::OpenAi,
    Dialect::Anthropic,
    Dialect::Gemini,
    Dialect::Responses,
];

/// Parses `data` as a `dialect` request; one that parses is written in every dialect (each
/// output must parse back, also with the Gemini signatures carried in its ids cut out, as
/// the routing sends it to a target that is not Gemini) and trimmed to a small window.
pub fn request(dialect: Dialect, data: &[u8]) {
    let _ = signature::strip(data);
    let Ok(req) = dialect.parse_request(data) else {
        return;
    };
    for to in DIALECTS {
        let body = to
            .write_request(&req, "fuzz-model")
            .expect("a parsed request writes");
        to.parse_request(&body)
            .expect("a written request parses back");
        if let Some(stripped) = signature::strip(&body) {
            to.parse_request(&stripped)
                .expect("a written request without its signatures parses back");
        }
    }
    trim(&req);
}

fn trim(req: &ChatRequest) {
    let counter = TokenCounter::Estimate;
    let need = context::estimate_tokens(req, &counter);
    if let Ok((trimmed, _)) = context::trim_to_fit(req, need / 2, 0, &counter) {
        assert!(context::estimate_tokens(&trimmed, &counter) <= need / 2);
    }
}
