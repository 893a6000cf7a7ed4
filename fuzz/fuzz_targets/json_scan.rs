//! The JSON scanner of the request path (`wire::scan`) against serde_json: any bytes it accepts,
//! serde_json accepts, with the same value for each key asked for (and a nested object's keys
//! found in the same pass as after it); and what the gateway reads with it (a chat request, an
//! Anthropic request's head, what in a Responses request only a Responses target serves, the
//! usage of an answer passed on (read whole, or by the shape of the answers before it), a
//! chunk of an OpenAI stream, an Anthropic or Responses API event and what it carries) is what
//! it reads with serde_json alone.
#![no_main]

use std::collections::BTreeMap;
use std::sync::LazyLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use switchyard::canonical::Dialect;
use switchyard::wire::chunks::LearnedShapes;
use switchyard::wire::{client, scan, transcode, ChatRequest};

const KEYS: [&str; 4] = ["model", "messages", "choices", "usage"];

/// The shape of the inputs' last OpenAI answer with a usage, kept from one input to the next as
/// a target keeps its last answer's.
static LEARNED: LazyLock<LearnedShapes> = LazyLock::new(LearnedShapes::default);

fuzz_target!(|data: &[u8]| {
    if let Some(found) = scan::fields(data, KEYS) {
        assert!(
            serde_json::from_slice::<IgnoredAny>(data).is_ok(),
            "accepted, not JSON"
        );
        let map: BTreeMap<String, &RawValue> =
            serde_json::from_slice(data).expect("accepted, not a JSON object");
        for (key, span) in KEYS.iter().zip(found) {
            let theirs = map.get(*key).map(|raw| raw.get().as_bytes());
            assert_eq!(span.map(|r| &data[r]), theirs, "the value of {key}");
        }
    }
    // A nested object's fields found in the outer pass are those found after it.
    const INNER: [&str; 2] = ["prompt_tokens", "completion_tokens"];
    let outer = scan::fields(data, KEYS);
    let nested = scan::fields_and_nested(data, KEYS, &[0, 3], INNER);
    assert_eq!(
        nested.as_ref().map(|n| &n.0),
        outer.as_ref(),
        "the outer fields"
    );
    if let Some((found, nested)) = nested {
        let after = |k: usize| scan::fields_in(data, found[k].clone()?, INNER);
        match nested {
            Some((k, spans)) => assert_eq!(Some(spans), after(k), "the nested fields"),
            None => assert!(
                after(0).is_none() && after(3).is_none(),
                "a nested object missed"
            ),
        }
    }
    let theirs = transcode::fuzz_completion_usage(data).ok();
    let ours = transcode::native_usage(Dialect::OpenAi, data).ok();
    assert_eq!(ours, theirs, "the usage of an OpenAI answer");
    let learned = transcode::openai_usage(data, &LEARNED).ok();
    assert_eq!(
        learned, theirs,
        "the usage of an OpenAI answer, by a learned shape"
    );
    for dialect in [Dialect::Anthropic, Dialect::Responses] {
        let theirs = transcode::fuzz_whole_usage(dialect, data).map_err(|e| e.to_string());
        let ours = transcode::native_usage(dialect, data).map_err(|e| e.to_string());
        assert_eq!(ours, theirs, "the usage of a {dialect:?} answer");
    }
    switchyard::wire::chunks::fuzz_chunk_read(data);
    switchyard::wire::chunks::fuzz_responses_event_read(data);
    switchyard::wire::chunks::fuzz_anthropic_event_read(data);
    let body = Bytes::copy_from_slice(data);
    let theirs = ChatRequest::fuzz_parse_by_serde(body.clone()).map(|r| format!("{r:?}"));
    let ours = ChatRequest::parse(body).map(|r| format!("{r:?}"));
    match (ours, theirs) {
        (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs, "a chat request"),
        (Err(ours), Err(theirs)) => assert_eq!(ours.to_string(), theirs.to_string()),
        (ours, theirs) => panic!("a chat request: {ours:?} against {theirs:?}"),
    }
    let theirs = client::Head::fuzz_anthropic_by_serde(data).map_err(|e| e.to_string());
    let ours = client::Head::anthropic(data).map_err(|e| e.to_string());
    assert_eq!(ours, theirs, "an Anthropic request's head");
    let theirs = switchyard::canonical::responses::fuzz_needs_by_serde(data);
    let ours = switchyard::canonical::responses::native_needs(data);
    assert_eq!(ours, theirs, "what only a Responses target serves");
});
