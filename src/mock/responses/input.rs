//! Reading a Responses request's `input`: a string, or a list of items (messages,
//! `function_call`, `function_call_output`, `reasoning`, ...).

use serde_json::{json, Value};

use super::error::Rejection;
use super::reasoning;

/// The input as a list of items: a string is one user message, as the API reads it.
pub(super) fn items(body: &Value) -> Result<Vec<Value>, Rejection> {
    match body.get("input") {
        None | Some(Value::Null) => Err(Rejection::missing("input")),
        Some(Value::String(text)) => Ok(vec![json!({"role": "user", "content": text})]),
        Some(Value::Array(items)) => {
            if let Some((index, item)) = items.iter().enumerate().find(|(_, i)| !i.is_object()) {
                let message = format!(
                    "Invalid type for 'input[{index}]': expected an input item, but got {} \
                     instead.",
                    kind(item)
                );
                return Err(Rejection::bad_request(
                    message,
                    Some("invalid_type"),
                    Some("input"),
                ));
            }
            Ok(items.clone())
        }
        Some(other) => {
            let message = format!(
                "Invalid type for 'input': expected one of a string or array of input items, \
                 but got {} instead.",
                kind(other)
            );
            Err(Rejection::bad_request(
                message,
                Some("invalid_type"),
                Some("input"),
            ))
        }
    }
}

/// "a string", "an object", ... as OpenAI's type errors name a JSON value.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The text of message content or of a tool's output: a string, or the `text` of its parts
/// (`input_text`, `output_text`).
fn text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Whether `item` is a message (`type` "message", or no type and a role).
fn is_message(item: &Value) -> bool {
    match item.get("type").and_then(Value::as_str) {
        Some(kind) => kind == "message",
        None => item.get("role").is_some(),
    }
}

fn item_type(item: &Value) -> Option<&str> {
    item.get("type").and_then(Value::as_str)
}

/// Prompt tokens, estimated as the chat dialects do: the characters of the instructions, of
/// every message's text and of every tool output, divided by 4 and rounded up (a conversation
/// sent as chat or as Responses counts the same).
pub(super) fn estimate_tokens(instructions: Option<&Value>, items: &[Value]) -> u64 {
    let instructions = instructions
        .and_then(Value::as_str)
        .map_or(0, |s| s.chars().count());
    let items: usize = items
        .iter()
        .map(|item| {
            if is_message(item) {
                text(item.get("content")).chars().count()
            } else if item_type(item) == Some("function_call_output") {
                text(item.get("output")).chars().count()
            } else {
                0
            }
        })
        .sum();
    u64::try_from((instructions + items).div_ceil(4)).unwrap_or(u64::MAX)
}

/// The assistant prefill: the text of the last item when it is an assistant message (a gateway
/// continuing a cut answer sends what was received so far that way).
pub(super) fn prefill(items: &[Value]) -> Option<String> {
    let last = items.last()?;
    let assistant = last.get("role").and_then(Value::as_str) == Some("assistant");
    (is_message(last) && assistant).then(|| text(last.get("content")))
}

/// Whether the input ends with a tool's result: the turn after a tool call.
pub(super) fn ends_with_tool_output(items: &[Value]) -> bool {
    items.last().and_then(item_type) == Some("function_call_output")
}

/// The first reasoning item's `encrypted_content` that mock `name` did not make.
pub(super) fn foreign_reasoning<'a>(items: &'a [Value], name: &str) -> Option<&'a str> {
    items
        .iter()
        .filter(|item| item_type(item) == Some("reasoning"))
        .filter_map(|item| item.get("encrypted_content").and_then(Value::as_str))
        .find(|content| !reasoning::made_by(name, content))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn input_is_a_string_or_items() {
        let string = items(&json!({"input": "hi"})).unwrap();
        assert_eq!(string, [json!({"role": "user", "content": "hi"})]);
        assert_eq!(
            items(&json!({"input": [{"role": "user", "content": "a"}]}))
                .unwrap()
                .len(),
            1
        );
        let missing = items(&json!({})).unwrap_err();
        assert_eq!(missing.code.as_deref(), Some("missing_required_parameter"));
        let number = items(&json!({"input": 3})).unwrap_err();
        assert!(
            number.message.contains("got a number"),
            "{}",
            number.message
        );
        let inner = items(&json!({"input": ["x"]})).unwrap_err();
        assert!(inner.message.contains("'input[0]'"), "{}", inner.message);
    }

    #[test]
    fn counts_messages_and_tool_outputs() {
        let items = [
            json!({"role": "user", "content": "abcd"}),
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ab"}]}),
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{\"long\":1}"}),
            json!({"type": "function_call_output", "call_id": "c", "output": "sunny"}),
            json!({"type": "reasoning", "id": "rs", "summary": []}),
        ];
        assert_eq!(estimate_tokens(Some(&json!("abc")), &items), 4);
        assert_eq!(estimate_tokens(None, &[]), 0);
    }

    #[test]
    fn finds_the_prefill_and_the_tool_turn() {
        let user = json!({"role": "user", "content": "hi"});
        let said = json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "alpha-1"}]});
        assert_eq!(
            prefill(&[user.clone(), said.clone()]).as_deref(),
            Some("alpha-1")
        );
        assert_eq!(prefill(&[said, user.clone()]), None);
        let output = json!({"type": "function_call_output", "call_id": "c", "output": "x"});
        assert!(ends_with_tool_output(&[user.clone(), output]));
        assert!(!ends_with_tool_output(&[user]));
    }

    #[test]
    fn reasoning_from_another_mock_is_foreign() {
        let mine = json!({"type": "reasoning", "id": "rs_mock_1", "summary": [], "encrypted_content": reasoning::seal("a", "rs_mock_1")});
        let theirs = json!({"type": "reasoning", "id": "rs_mock_1", "summary": [], "encrypted_content": reasoning::seal("b", "rs_mock_1")});
        let bare = json!({"type": "reasoning", "id": "rs_mock_1", "summary": []});
        assert_eq!(foreign_reasoning(&[mine.clone(), bare], "a"), None);
        assert!(foreign_reasoning(&[mine, theirs], "a").is_some_and(|c| c.contains(":b:")));
    }
}
