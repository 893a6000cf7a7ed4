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

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::canonical::raw::{self, Shape};

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

/// Why a message content part of this `type` needs a Responses target.
fn part_reason(part: &ContentPart<'_>) -> Option<&'static str> {
    match part.kind.as_deref() {
        None | Some("input_text" | "output_text" | "text" | "refusal") => None,
        Some("input_image") => part
            .file_id
            .filter(|id| raw::shape(id) != Shape::Null)
            .map(|_| "an input_image by file_id"),
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
        if let Some(reason) = parts.iter().find_map(part_reason) {
            return Some(reason);
        }
    }
    None
}
