//! A conversation the gateway stored, put back in front of a request's input: the request
//! names its earlier turn by `previous_response_id`, and whichever target is picked gets the
//! whole conversation as input (a backup cannot resolve an id another provider minted, and the
//! id is ours anyway).

use serde_json::value::RawValue;
use serde_json::Value;

use crate::canonical::raw;
use crate::canonical::TranslateError;

/// A request body with its conversation made explicit.
#[derive(Debug, Default)]
pub(super) struct Expanded {
    /// The body for the provider that served the earlier turn (or for any provider, when
    /// there was none): `input` holds the whole conversation, `previous_response_id` is gone.
    pub body: Vec<u8>,
    /// The body for the other providers: the earlier turns without their reasoning items (a
    /// provider's encrypted reasoning means nothing to another) and without the item ids only
    /// the first provider knows. `None` when it would be the same.
    pub elsewhere: Option<Vec<u8>>,
    /// The whole input as a JSON array: what the gateway stores with this turn.
    pub input: String,
}

/// The input items of a request: `input` as an array, or a string as one user message.
fn input_items(input: Option<&RawValue>) -> Result<Vec<Box<RawValue>>, TranslateError> {
    let Some(input) = input else {
        return Ok(Vec::new());
    };
    match raw::shape(input) {
        raw::Shape::Null => Ok(Vec::new()),
        raw::Shape::String => {
            let item = format!(
                r#"{{"type":"message","role":"user","content":{}}}"#,
                input.get()
            );
            Ok(vec![RawValue::from_string(item)?])
        }
        _ => raw::parse("input", input),
    }
}

/// `item` as another provider gets it: `None` for a reasoning item, else without its `id`.
fn portable(item: &RawValue) -> Result<Option<Box<RawValue>>, TranslateError> {
    let mut value: Value = serde_json::from_str(item.get())?;
    let Some(map) = value.as_object_mut() else {
        return Ok(Some(item.to_owned()));
    };
    if map.get("type").and_then(Value::as_str) == Some("reasoning") {
        return Ok(None);
    }
    if map.remove("id").is_none() {
        return Ok(Some(item.to_owned()));
    }
    Ok(Some(serde_json::value::to_raw_value(&value)?))
}

/// Writes `items` as one JSON array.
fn array<'a>(items: impl Iterator<Item = &'a RawValue>) -> String {
    let mut out = String::from("[");
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item.get());
    }
    out.push(']');
    out
}

/// `body` with `input` in place of its own and without `previous_response_id`, the other
/// members as they came, in order.
pub(super) fn rewrite(body: &[u8], input: &str) -> Result<Vec<u8>, TranslateError> {
    let raw::Fields(fields) = raw::fields(body)?;
    let mut out = Vec::with_capacity(body.len() + input.len());
    out.push(b'{');
    let mut wrote_input = false;
    for (key, value) in &fields {
        let value = match key.as_ref() {
            "previous_response_id" => continue,
            "input" => {
                wrote_input = true;
                input
            }
            _ => value.get(),
        };
        if out.len() > 1 {
            out.push(b',');
        }
        out.extend_from_slice(serde_json::to_string(key.as_ref())?.as_bytes());
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
    }
    if !wrote_input {
        if out.len() > 1 {
            out.push(b',');
        }
        out.extend_from_slice(b"\"input\":");
        out.extend_from_slice(input.as_bytes());
    }
    out.push(b'}');
    Ok(out)
}

/// The request `body` continuing a stored turn whose input and output items (JSON arrays)
/// are `history_input` and `history_output`; `None` for a request that names no earlier turn.
pub(super) fn expand(
    body: &[u8],
    history: Option<(&str, &str)>,
) -> Result<Expanded, TranslateError> {
    #[derive(serde::Deserialize)]
    struct Input<'a> {
        #[serde(default, borrow)]
        input: Option<&'a RawValue>,
    }
    let head: Input<'_> = serde_json::from_slice(body)?;
    let new = input_items(head.input)?;
    let Some((history_input, history_output)) = history else {
        return Ok(Expanded {
            input: array(new.iter().map(AsRef::as_ref)),
            ..Expanded::default()
        });
    };
    let earlier_in: Vec<Box<RawValue>> = serde_json::from_str(history_input)?;
    let earlier_out: Vec<Box<RawValue>> = serde_json::from_str(history_output)?;
    let earlier = || earlier_in.iter().chain(&earlier_out).map(AsRef::as_ref);
    let input = array(earlier().chain(new.iter().map(AsRef::as_ref)));
    let body_here = rewrite(body, &input)?;
    let mut portable_items = Vec::new();
    let mut changed = false;
    for item in earlier() {
        match portable(item)? {
            Some(p) => {
                changed |= p.get() != item.get();
                portable_items.push(p);
            }
            None => changed = true,
        }
    }
    let elsewhere = if changed {
        let there = array(
            portable_items
                .iter()
                .map(AsRef::as_ref)
                .chain(new.iter().map(AsRef::as_ref)),
        );
        Some(rewrite(body, &there)?)
    } else {
        None
    };
    Ok(Expanded {
        body: body_here,
        elsewhere,
        input,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn text(bytes: &[u8]) -> &str {
        std::str::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_string_input_is_one_user_message() {
        let out = expand(br#"{"model":"m","input":"Hi"}"#, None).unwrap();
        assert_eq!(
            out.input,
            r#"[{"type":"message","role":"user","content":"Hi"}]"#
        );
        assert!(out.body.is_empty() && out.elsewhere.is_none());
    }

    #[test]
    fn the_stored_turn_goes_in_front_and_the_id_goes() {
        let body = br#"{"model":"m","previous_response_id":"resp_1","input":[{"role":"user","content":"And 3?"}],"x_new":{"a":1}}"#;
        let history_in = r#"[{"type":"message","role":"user","content":"2+2?"}]"#;
        let history_out = r#"[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"},{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"4"}]}]"#;
        let out = expand(body, Some((history_in, history_out))).unwrap();
        let want_input = r#"[{"type":"message","role":"user","content":"2+2?"},{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"},{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"4"}]},{"role":"user","content":"And 3?"}]"#;
        assert_eq!(out.input, want_input);
        assert_eq!(
            text(&out.body),
            format!(r#"{{"model":"m","input":{want_input},"x_new":{{"a":1}}}}"#)
        );
        let elsewhere = out.elsewhere.unwrap();
        let elsewhere = text(&elsewhere);
        assert!(
            !elsewhere.contains("rs_1") && !elsewhere.contains("gAAA"),
            "{elsewhere}"
        );
        assert!(!elsewhere.contains("msg_1"), "{elsewhere}");
        assert!(elsewhere.contains(r#""text":"4""#), "{elsewhere}");
        assert!(!elsewhere.contains("previous_response_id"), "{elsewhere}");
    }

    #[test]
    fn a_history_without_provider_state_needs_no_second_body() {
        let out = expand(
            br#"{"previous_response_id":"resp_1","model":"m"}"#,
            Some((
                "[]",
                r#"[{"type":"message","role":"assistant","content":"4"}]"#,
            )),
        )
        .unwrap();
        assert!(out.elsewhere.is_none());
        assert_eq!(
            text(&out.body),
            r#"{"model":"m","input":[{"type":"message","role":"assistant","content":"4"}]}"#
        );
    }
}
