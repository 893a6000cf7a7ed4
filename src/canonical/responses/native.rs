//! What in a Responses request only a Responses target can serve: translated to another
//! dialect, these would be dropped and the request would mean something else.
//!
//! Built-in tools (`web_search`, `file_search`, `code_interpreter`, computer use, `mcp`,
//! `image_generation`, shell, `custom` freeform tools, ...) run at or are defined by OpenAI;
//! `item_reference` items and files by id point into OpenAI's storage; built-in tool call items
//! in `input` record calls other providers cannot read back. Reasoning items are not in the
//! list: another provider does without them. State kept by OpenAI (`previous_response_id`,
//! `conversation`) is the router's concern, not this scan's.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::canonical::raw::{self, Shape};
use crate::wire::scan;

#[derive(Deserialize)]
struct View<'a> {
    #[serde(default, borrow)]
    tools: Option<Vec<Typed<'a>>>,
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_choice: Option<&'a RawValue>,
}

/// What in a request only a Responses target can serve, split by how much it matters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NativeNeeds {
    /// Used: an input item or content part only the Responses API reads, or a `tool_choice`
    /// forcing a built-in tool. Another dialect cannot serve the request at all.
    pub uses: Option<&'static str>,
    /// Offered only: a built-in tool in `tools`. Another dialect can serve the request
    /// without it, if the route allows that (`failover.builtin_tools = "drop"`).
    pub offers: Option<&'static str>,
}

#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ContentPart<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    file_id: Option<&'a RawValue>,
}

/// Why a tool of this `type` needs a Responses target (`None`: a function tool).
fn tool_reason(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "function" => return None,
        k if k.starts_with("web_search") => "a web_search tool",
        "file_search" => "a file_search tool",
        "code_interpreter" => "a code_interpreter tool",
        k if k.starts_with("computer") => "a computer use tool",
        "mcp" => "an mcp tool",
        "image_generation" => "an image_generation tool",
        "local_shell" | "shell" => "a shell tool",
        "apply_patch" => "an apply_patch tool",
        "custom" => "a custom (freeform) tool",
        _ => "a built-in tool",
    })
}

/// Why an input item of this `type` needs a Responses target (`None`: any target reads it).
fn item_reason(kind: &str) -> Option<&'static str> {
    match kind {
        "message" | "function_call" | "function_call_output" | "reasoning" => None,
        "item_reference" => Some("an item_reference input item"),
        _ => Some("a built-in tool call item in the input"),
    }
}

/// Why a message content part of this `type` (with a `file_id` or not) needs a Responses
/// target.
fn part_reason(kind: Option<&str>, file_id: bool) -> Option<&'static str> {
    match kind {
        None | Some("input_text" | "output_text" | "text" | "refusal") => None,
        Some("input_image") => file_id.then_some("an input_image by file_id"),
        Some("input_file") => Some("an input_file part"),
        Some(_) => Some("a content part only the Responses API reads"),
    }
}

/// Whether a Responses request body uses something only a Responses target can serve, and
/// what (a short reason for the audit path): `None` when it can be translated to any dialect
/// without losing meaning, or when the body cannot be read (parsing it will say why).
pub fn needs_native(body: &[u8]) -> Option<&'static str> {
    let needs = native_needs(body);
    needs.uses.or(needs.offers)
}

/// [`needs_native`]'s findings, with what the request uses apart from what it only offers.
pub fn native_needs(body: &[u8]) -> NativeNeeds {
    match plain_needs(body) {
        Some(needs) => needs,
        None => needs_by_serde(body),
    }
}

/// [`native_needs`] by the scanner in one pass (each tool's and each input item's `type`, each
/// content part's `type` and `file_id`), for a plain body whose fields read as serde_json
/// reads them: `None` for any other. An agent's turn carries its history and tools, which
/// serde_json read at ~9 instructions a byte for this (`DIALECT=responses BODY=...
/// bench/instructions`).
fn plain_needs(body: &[u8]) -> Option<NativeNeeds> {
    read_plain(body).map(|(needs, _)| needs)
}

/// The top-level fields a Responses request's head is read from (`api::responses`), found in
/// [`read_plain`]'s pass.
pub const HEAD_FIELDS: [&str; 5] = [
    "model",
    "stream",
    "store",
    "previous_response_id",
    "include",
];

/// [`native_needs`] by the scanner in one pass, for a plain body whose fields read as
/// serde_json reads them (`None` for any other), and the spans of the values of
/// [`HEAD_FIELDS`] found in that pass: what the gateway reads of a request before routing it,
/// the body read once.
pub fn read_plain(body: &[u8]) -> Option<(NativeNeeds, scan::Spans<5>)> {
    /// The text of a `type`: `Some(None)` when absent or null, `None` when not a string (which
    /// serde_json refuses).
    fn kind(body: &[u8], span: Option<Range<usize>>) -> Option<Option<Cow<'_, str>>> {
        match scan::not_null(body, span) {
            Some(span) => scan::text(body, span).map(Some),
            None => Some(None),
        }
    }
    let mut offers = None;
    let mut forced = None;
    // The first input item's reason, or its content parts' (every item is still read: one
    // serde_json does not take makes the body serde_json's).
    let mut input = None;
    let mut unsure = false;
    let mut no_visit = |_: usize, _: &mut scan::Cursor<'_, '_>| Some(false);
    // The places of the keys read here; the head's follow.
    const TOOLS: usize = 0;
    const INPUT: usize = 1;
    const TOOL_CHOICE: usize = 2;
    let [_, _, _, model, stream, store, previous, include] = scan::fields_visiting(
        body,
        [
            "tools",
            "input",
            "tool_choice",
            HEAD_FIELDS[0],
            HEAD_FIELDS[1],
            HEAD_FIELDS[2],
            HEAD_FIELDS[3],
            HEAD_FIELDS[4],
        ],
        |k, value| {
            match (k, value.peek()) {
                // A list of tools or nothing, else serde_json refuses the body.
                (TOOLS, Some(b'n')) => Some(false),
                (TOOLS, Some(b'[')) => {
                    value.items(["type"], &mut no_visit, &mut |[k]| match kind(body, k) {
                        Some(k) => {
                            offers =
                                offers.or_else(|| tool_reason(k.as_deref().unwrap_or("function")));
                            true
                        }
                        None => false,
                    })?;
                    Some(true)
                }
                (INPUT, Some(b'[')) => {
                    let parts = std::cell::Cell::new(None);
                    // An item's `content` (its second key), when a list of parts.
                    let mut read_parts = |k: usize, value: &mut scan::Cursor<'_, '_>| {
                        if k != 1 || value.peek() != Some(b'[') {
                            return Some(false);
                        }
                        let mut reason = None;
                        value.items(["type", "file_id"], &mut no_visit, &mut |[k, id]| {
                            let Some(k) = kind(body, k) else {
                                return false;
                            };
                            let id = scan::not_null(body, id).is_some();
                            reason = reason.or_else(|| part_reason(k.as_deref(), id));
                            true
                        })?;
                        parts.set(reason);
                        Some(true)
                    };
                    value.items(["type", "content"], &mut read_parts, &mut |[k, _]| {
                        let Some(k) = kind(body, k) else {
                            return false;
                        };
                        let item = item_reason(k.as_deref().unwrap_or("message"));
                        input = input.or(item).or(parts.take());
                        true
                    })?;
                    Some(true)
                }
                (TOOLS, _) => None,
                (TOOL_CHOICE, Some(b'{')) => {
                    let Some([k]) = value.object(["type"]) else {
                        unsure = true;
                        return Some(false);
                    };
                    // (A `type` not a string: serde_json does not read it as a choice.)
                    forced = match kind(body, k) {
                        Some(Some(k)) if !matches!(&*k, "function" | "allowed_tools") => {
                            Some("a tool_choice naming a built-in tool")
                        }
                        _ => None,
                    };
                    Some(true)
                }
                _ => Some(false),
            }
        },
    )?;
    if unsure {
        return None;
    }
    let needs = NativeNeeds {
        uses: forced.or(input),
        offers,
    };
    Some((needs, [model, stream, store, previous, include]))
}

/// [`native_needs`] by serde_json alone.
fn needs_by_serde(body: &[u8]) -> NativeNeeds {
    let Ok(view) = serde_json::from_slice::<View<'_>>(body) else {
        return NativeNeeds::default();
    };
    let offers = view
        .tools
        .iter()
        .flatten()
        .find_map(|tool| tool_reason(tool.kind.as_deref().unwrap_or("function")));
    let forced = view
        .tool_choice
        .filter(|c| raw::shape(c) == Shape::Object)
        .and_then(|c| serde_json::from_str::<Typed<'_>>(c.get()).ok())
        .and_then(|c| match c.kind.as_deref() {
            None | Some("function" | "allowed_tools") => None,
            Some(_) => Some("a tool_choice naming a built-in tool"),
        });
    NativeNeeds {
        uses: forced.or_else(|| input_reason(view.input)),
        offers,
    }
}

/// Why the input items need a Responses target.
fn input_reason(input: Option<&RawValue>) -> Option<&'static str> {
    let input = input.filter(|i| raw::shape(i) == Shape::Array)?;
    let items: Vec<Item<'_>> = serde_json::from_str(input.get()).ok()?;
    for item in items {
        if let Some(reason) = item_reason(item.kind.as_deref().unwrap_or("message")) {
            return Some(reason);
        }
        let Some(content) = item.content.filter(|c| raw::shape(c) == Shape::Array) else {
            continue;
        };
        let parts: Vec<ContentPart<'_>> = serde_json::from_str(content.get()).ok()?;
        let reason = |part: &ContentPart<'_>| {
            let id = part.file_id.is_some_and(|id| raw::shape(id) != Shape::Null);
            part_reason(part.kind.as_deref(), id)
        };
        if let Some(reason) = parts.iter().find_map(reason) {
            return Some(reason);
        }
    }
    None
}

/// Fuzzing (`fuzz/fuzz_targets/json_scan.rs`): [`native_needs`] by serde_json alone, to
/// compare with the reading that takes the scanner's first.
#[cfg(fuzzing)]
#[doc(hidden)]
pub fn fuzz_needs_by_serde(body: &[u8]) -> NativeNeeds {
    needs_by_serde(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scanner finds what only a Responses target serves as serde_json's reading does, or
    /// leaves the body to it.
    #[test]
    fn needs_read_alike_by_the_scanner_and_by_serde_json() {
        let text = r#"{"type":"input_text","text":"a \"b\" \u00e9"}"#;
        let mut taken = 0;
        for body in [
            r#"{"model":"m","input":"hi","tools":[{"type":"function","name":"f"}]}"#.to_owned(),
            r#"{"tools":[{"name":"f"},{"type":"web_search_preview"},{"type":"mcp"}]}"#.to_owned(),
            r#"{"tools":null,"tool_choice":{"type":"web_search"}}"#.to_owned(),
            r#"{"tool_choice":{"type":"function","name":"f"},"input":[]}"#.to_owned(),
            r#"{"tool_choice":"auto","input":[{"type":"item_reference","id":"x"}]}"#.to_owned(),
            format!(r#"{{"input":[{{"role":"user","content":[{text},{{"type":"input_image","file_id":"file_1"}}]}}]}}"#),
            format!(r#"{{"input":[{{"type":"message","content":[{text},{{"type":"input_image","file_id":null,"image_url":"u"}}]}}]}}"#),
            r#"{"input":[{"type":"reasoning","summary":[]},{"type":"function_call","arguments":"{}"},{"type":"message","content":"hi"}]}"#.to_owned(),
            r#"{"input":[{"type":"function_call_output","output":"x"},{"content":[{"type":"input_file","file_id":"f"}]}]}"#.to_owned(),
            r#"{"tool_choice":{"type":null},"input":[{"type":"local_shell_call"}]}"#.to_owned(),
            // Not the scanner's: serde_json reads these.
            r#"{"tools":{"type":"mcp"},"input":[{"type":"item_reference"}]}"#.to_owned(),
            r#"{"tools":[{"type":5}]}"#.to_owned(),
            r#"{"input":[{"type":5}]}"#.to_owned(),
            r#"{"input":[{"content":[1]}]}"#.to_owned(),
            r#"{"tool_choice":{"typ\u0065":"mcp"}}"#.to_owned(),
            r#"{"input":[{"type":"item_reference"},{"content":[1]}]}"#.to_owned(),
            r#"{"input":[{"type":"message"}],"input":[]}"#.to_owned(),
            r#"{"input":[]"#.to_owned(),
        ] {
            let by_serde = needs_by_serde(body.as_bytes());
            if let Some(ours) = plain_needs(body.as_bytes()) {
                taken += 1;
                assert_eq!(ours, by_serde, "{body}");
            }
            assert_eq!(native_needs(body.as_bytes()), by_serde, "{body}");
        }
        assert_eq!(taken, 10, "the plain bodies are the scanner's");
    }
}
