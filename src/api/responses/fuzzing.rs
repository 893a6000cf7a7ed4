//! The Responses API edge's own reading of a client's body, for the fuzz targets (`fuzz/`):
//! what `create` does with the body before any target is picked. Built only by `cargo fuzz`
//! (`--cfg fuzzing`).
#![allow(
    clippy::panic,
    clippy::expect_used,
    reason = "a fuzz target reports a finding by panicking"
)]

use super::provenance::Provenance;
use super::{expand, reasoning_elsewhere};

/// A stored turn, as the store keeps its input and output items: a user message, then a
/// reasoning item sealed by its provider and the answer, each with the provider's item id.
const HISTORY_IN: &str = r#"[{"type":"message","role":"user","content":"hi"}]"#;
const HISTORY_OUT: &str = r#"[{"type":"reasoning","id":"rs_1","encrypted_content":"gAAAAB","summary":[]},{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"hello"}]}]"#;

fn json(what: &str, bytes: &[u8]) {
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        panic!(
            "{what} is not JSON ({e}): {}",
            String::from_utf8_lossy(bytes)
        );
    }
}

/// `body` as a `POST /v1/responses` body: expanded without and with a stored turn before it
/// (every body written must be JSON, the stored input a JSON array), and read for reasoning
/// another provider made (the body for the others must be JSON too).
pub fn responses_request(body: &[u8]) {
    for history in [None, Some((HISTORY_IN, HISTORY_OUT))] {
        let Ok(expanded) = expand::expand(body, history) else {
            continue;
        };
        let items: Vec<serde::de::IgnoredAny> =
            serde_json::from_str(&expanded.input).expect("the stored input is a JSON array");
        if history.is_some() {
            assert!(items.len() >= 3, "the stored turn goes in front");
            json("the expanded body", &expanded.body);
            let elsewhere = expanded
                .elsewhere
                .expect("the stored reasoning and ids are not for another provider");
            json("the body for another provider", &elsewhere);
        }
    }
    let provenance = Provenance::default();
    provenance.record_response("maker", format!(r#"{{"output":{HISTORY_OUT}}}"#).as_bytes());
    if let Ok(Some((maker, elsewhere))) = reasoning_elsewhere(&provenance, body) {
        assert_eq!(&*maker, "maker");
        json("the body without the reasoning", &elsewhere);
    }
}
