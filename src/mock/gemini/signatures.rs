//! Thought signatures as Gemini 3 handles them (`FaultPlan::thought_signatures`): the mock signs
//! its answers and refuses a current turn whose steps come back unsigned, or signed with
//! something it cannot read.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::Value;

/// What every signature the mock makes decodes to first: bytes whose base64 has `+` and `/` in
/// it (and the whole, `=` padding more often than not), so a signature not carried exactly
/// through a client's dialect is caught.
const MAGIC: &[u8] = b"\xFB\xEF\xFFswitchyard-mock:";

/// The values Google documents for function calls Gemini did not make.
const DUMMIES: [&str; 2] = [
    "skip_thought_signature_validator",
    "context_engineering_is_the_way_to_go",
];

/// The signature of the answer `response_id`.
pub(super) fn sign(response_id: &str) -> String {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(response_id.as_bytes());
    STANDARD.encode(bytes)
}

/// Whether the mock made `signature` (or it is a documented dummy).
fn readable(signature: &str) -> bool {
    DUMMIES.contains(&signature)
        || STANDARD
            .decode(signature)
            .is_ok_and(|bytes| bytes.starts_with(MAGIC))
}

fn parts(content: &Value) -> &[Value] {
    content
        .get("parts")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn field<'a>(part: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    part.get(camel).or_else(|| part.get(snake))
}

fn is_model(content: &Value) -> bool {
    content.get("role").and_then(Value::as_str) == Some("model")
}

/// Gemini 3's check of `contents`: the current turn starts after the last user content with
/// something other than function responses in it; the first function call of every model
/// content after it must carry a signature Gemini can read. The error message is Gemini's.
pub(super) fn check(contents: &[Value]) -> Result<(), String> {
    let start = contents
        .iter()
        .rposition(|c| {
            !is_model(c)
                && parts(c)
                    .iter()
                    .any(|p| field(p, "functionResponse", "function_response").is_none())
        })
        .map_or(0, |i| i + 1);
    for (position, content) in contents.iter().enumerate().skip(start) {
        if !is_model(content) {
            continue;
        }
        let Some(part) = parts(content)
            .iter()
            .find(|p| field(p, "functionCall", "function_call").is_some())
        else {
            continue;
        };
        let name = field(part, "functionCall", "function_call")
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        match field(part, "thoughtSignature", "thought_signature").and_then(Value::as_str) {
            None => {
                return Err(format!(
                    "Function call is missing a thought_signature in functionCall parts. This \
                     is required for tools to work correctly, and missing thought_signature may \
                     lead to degraded model performance. Additional data, function call \
                     `{name}` , position {}. Please refer to \
                     https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                    position + 1
                ))
            }
            Some(signature) if !readable(signature) => {
                return Err(format!(
                    "Corrupted thought signature (function call `{name}`, position {}).",
                    position + 1
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Whether the last content answers function calls: the model's turn after it is text.
pub(super) fn ends_with_function_responses(contents: &[Value]) -> bool {
    contents.last().is_some_and(|c| {
        !is_model(c)
            && parts(c)
                .iter()
                .any(|p| field(p, "functionResponse", "function_response").is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(signature: Option<&str>) -> Value {
        let mut part = json!({"functionCall": {"name": "get_weather", "args": {}}});
        if let (Some(s), Some(object)) = (signature, part.as_object_mut()) {
            object.insert("thoughtSignature".into(), json!(s));
        }
        json!({"role": "model", "parts": [part]})
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "parts": [{"text": text}]})
    }

    fn answer() -> Value {
        json!({"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {}}}]})
    }

    #[test]
    fn only_the_current_turn_must_be_signed_by_the_mock_or_a_dummy() {
        let mine = sign("mock-1");
        assert!(mine.contains('+') && mine.contains('/'), "{mine}");
        assert!(check(&[user("q"), call(Some(&mine)), answer()]).is_ok());
        assert!(check(&[user("q"), call(Some(DUMMIES[0])), answer()]).is_ok());
        let missing = check(&[user("q"), call(None), answer()]).unwrap_err();
        assert!(missing.contains("missing a thought_signature"), "{missing}");
        let mangled = mine.replace('+', "-");
        assert!(check(&[user("q"), call(Some(&mangled)), answer()])
            .unwrap_err()
            .contains("Corrupted"));
        // An unsigned step of an earlier turn is not checked.
        assert!(check(&[user("q"), call(None), answer(), user("next")]).is_ok());
        assert!(ends_with_function_responses(&[
            user("q"),
            call(None),
            answer()
        ]));
        assert!(!ends_with_function_responses(&[user("q")]));
    }
}
