//! Reading one OpenAI chunk: by the scanner for a plain one ([`ChunkRead::scan_noting`], a few
//! instructions a byte: every chunk of every stream is read), else by serde_json
//! ([`ChunkRead::parse`]), which reads or refuses it as the gateway always has; and the
//! stream's identity ([`ChunkMeta`]) in the same pass.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::fields::Scanned;
use super::{ChunkMeta, Usage};
use crate::wire::scan;

impl ChunkMeta {
    /// The identity of an OpenAI chunk (its `id`, `model` and `created`), read as serde_json
    /// reads a [`ChunkMeta`]: `None` when one of them is not what it reads (a string, a whole
    /// number, or `null`), or `data` is not a JSON object. Read only when a stream needs it (an
    /// error tail, a continuation), not for every stream.
    pub(super) fn read(data: &[u8]) -> Option<ChunkMeta> {
        match scan::fields(data, ["id", "model", "created"]) {
            Some(spans) => ChunkMeta::scan(data, spans),
            None => serde_json::from_slice(data).ok(),
        }
    }

    /// The identity in a chunk the scanner accepted, from the spans of its `id`, `model` and
    /// `created`: `None` when one of them is not what [`ChunkMeta`] reads (a string, a whole
    /// number, or `null`), as serde_json would refuse it.
    fn scan(data: &[u8], [id, model, created]: [Option<Range<usize>>; 3]) -> Option<ChunkMeta> {
        let text = |span| match scan::not_null(data, span) {
            None => Some(None),
            Some(span) => scan::text(data, span).map(|t| Some(t.into_owned())),
        };
        let created = match scan::not_null(data, created) {
            None => None,
            Some(span) => Some(scan::whole_number(&data[span])?),
        };
        Some(ChunkMeta {
            id: text(id)?,
            model: text(model)?,
            created,
        })
    }
}

#[derive(Deserialize)]
struct ChunkView<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<ChoiceView<'a>>>,
    #[serde(default, borrow)]
    usage: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChoiceView<'a> {
    #[serde(default, borrow)]
    delta: Option<DeltaView<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_calls: Option<&'a RawValue>,
    #[serde(default, borrow)]
    function_call: Option<&'a RawValue>,
    #[serde(default, borrow)]
    refusal: Option<&'a RawValue>,
}

fn has_text(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| r.get() != "\"\"")
}

/// The human message of an in-band `{"error": ...}` payload.
fn error_message(raw: &RawValue) -> String {
    #[derive(Deserialize)]
    struct E {
        message: Option<String>,
    }
    serde_json::from_str::<E>(raw.get())
        .ok()
        .and_then(|e| e.message)
        .unwrap_or_else(|| raw.get().chars().take(200).collect())
}

/// What one OpenAI chunk says, as the tracker needs it.
#[derive(Debug, Default, PartialEq)]
pub(super) struct ChunkRead<'a> {
    /// The message of an in-band `error`.
    pub(super) error: Option<String>,
    /// The chunk has choices.
    pub(super) choices: bool,
    /// Choices with content (text, a tool call, a refusal).
    pub(super) content: u32,
    /// A choice has a tool call.
    pub(super) tool_calls: bool,
    /// A choice has a `finish_reason`.
    pub(super) finished: bool,
    /// The choices' text, when asked for and there is some: borrowed from the chunk when one
    /// choice has it with no escapes (as a stream's content chunks do).
    pub(super) text: Option<Cow<'a, str>>,
    /// The `usage` field, when not `null`: its counts, when they read as such.
    pub(super) usage: Option<Option<Usage>>,
}

impl<'a> ChunkRead<'a> {
    /// [`ChunkRead::scan_noting`] without the delta (what the tests and the fuzz target compare
    /// with [`ChunkRead::parse`]).
    #[cfg(any(test, fuzzing))]
    pub(super) fn scan(data: &'a [u8], capture: bool) -> Option<ChunkRead<'a>> {
        Self::scan_noting(data, capture).map(|(read, _)| read)
    }

    /// The chunk read by [`crate::wire::scan`] (a few instructions a byte: every chunk of
    /// every stream is read); `None` for anything but a plain chunk, which [`ChunkRead::parse`]
    /// then reads (or refuses) as serde_json does. Also what a [`ChunkShape`] is made of when
    /// the chunk has one choice with a delta: its delta's fields, found in the same pass.
    pub(super) fn scan_noting(
        data: &'a [u8],
        capture: bool,
    ) -> Option<(ChunkRead<'a>, Option<SoleDelta>)> {
        let given = |span| scan::not_null(data, span);
        let mut read = ChunkRead::default();
        let mut sole = None;
        let ([_, usage, error], choices) = scan::fields_and_items(
            data,
            ["choices", "usage", "error"],
            0,
            ["delta", "finish_reason"],
            |[delta, finish]| {
                if let Some(finish) = given(finish) {
                    // Anything but a string without escapes is left to `parse` (which refuses
                    // what is not a string).
                    if data[finish.start] != b'"' || data[finish].contains(&b'\\') {
                        return false;
                    }
                    read.finished = true;
                }
                let Some(delta) = given(delta) else {
                    return true;
                };
                let Some([text, tools, function, refusal]) = scan::fields_in(
                    data,
                    delta,
                    ["content", "tool_calls", "function_call", "refusal"],
                ) else {
                    return false;
                };
                let (text, refusal) = (given(text), given(refusal));
                let tool = given(tools).is_some() || given(function).is_some();
                sole = Some(SoleDelta {
                    text: text.clone(),
                    refusal: refusal.is_some(),
                    tool,
                });
                let said = |r: &Option<Range<usize>>| {
                    r.as_ref().is_some_and(|r| &data[r.clone()] != b"\"\"")
                };
                if tool || said(&text) || said(&refusal) {
                    read.content += 1;
                }
                read.tool_calls |= tool;
                if let Some(text) = text.filter(|_| capture).and_then(|t| scan::text(data, t)) {
                    add_text(&mut read.text, text);
                }
                true
            },
        )?;
        if given(error).is_some() {
            return None; // rare: `parse` reads its message
        }
        read.choices = choices > 0;
        let sole = sole.filter(|_| choices == 1);
        read.usage = given(usage).map(|u| {
            Usage::scan(data, u.clone()).or_else(|| serde_json::from_slice(&data[u]).ok())
        });
        Some((read, sole))
    }

    /// The chunk read by serde_json; `None` when it is not an OpenAI chunk.
    pub(super) fn parse(data: &'a [u8], capture: bool) -> Option<ChunkRead<'a>> {
        let view = serde_json::from_slice::<ChunkView<'_>>(data).ok()?;
        let mut read = ChunkRead {
            error: view.error.map(error_message),
            ..ChunkRead::default()
        };
        let choices = view.choices.unwrap_or_default();
        read.choices = !choices.is_empty();
        for choice in &choices {
            if let Some(d) = &choice.delta {
                let tool = d.tool_calls.is_some() || d.function_call.is_some();
                read.tool_calls |= tool;
                if capture {
                    if let Some(text) = d
                        .content
                        .and_then(|c| serde_json::from_str::<Cow<'_, str>>(c.get()).ok())
                    {
                        add_text(&mut read.text, text);
                    }
                }
                if has_text(d.content) || tool || has_text(d.refusal) {
                    read.content += 1;
                }
            }
            read.finished |= choice.finish_reason.is_some();
        }
        read.usage = view.usage.map(|u| serde_json::from_str(u.get()).ok());
        Some(read)
    }
}

/// A choice's `text` added to what the chunk's earlier choices said.
fn add_text<'a>(said: &mut Option<Cow<'a, str>>, text: Cow<'a, str>) {
    match said {
        Some(said) => said.to_mut().push_str(&text),
        None => *said = Some(text),
    }
}

/// What a [`ChunkShape`] is made of: the delta of a chunk's one choice, as the scanner found it.
#[derive(Debug)]
pub(super) struct SoleDelta {
    /// Its text, when not `null`.
    text: Option<Range<usize>>,
    /// It has a refusal (not `null`).
    refusal: bool,
    /// It has a tool call (or a function call).
    tool: bool,
}

/// The shape of a stream's content chunks ([`scan::Shape`]): a chunk the scanner read with one
/// choice, a delta whose text is a string or none and no refusal, no finish, no usage and no
/// error. A later chunk of the shape reads as the scanner would read it (without the stream's
/// identity) from the shape's own reading and its text alone, at a tenth of a scan's cost.
#[derive(Debug)]
pub(super) struct ChunkShape {
    /// The chunk, its delta's text (when a string) kept.
    shape: scan::Shape<1>,
    /// The delta has a tool call (the chunk is content whatever its text).
    tool: bool,
}

impl ChunkShape {
    /// The shape of `data`, a chunk [`ChunkRead::scan_noting`] read as `read` with its one
    /// choice's delta `sole`, when it is one (see the type's docs). Not read again: the shape's
    /// holes are found in one walk over its bytes.
    pub(super) fn of(data: &[u8], read: &ChunkRead, sole: SoleDelta) -> Option<ChunkShape> {
        if read.finished || read.usage.is_some() || read.error.is_some() || sole.refusal {
            return None;
        }
        if sole.text.as_ref().is_some_and(|t| data[t.start] != b'"') {
            return None;
        }
        Some(ChunkShape {
            shape: scan::Shape::of_read(data, [sole.text])?,
            tool: sole.tool,
        })
    }

    /// `data` read, when it has this shape: as [`ChunkRead::scan_noting`] reads it without the
    /// stream's identity.
    pub(super) fn read<'a>(&self, data: &'a [u8], capture: bool) -> Option<ChunkRead<'a>> {
        let [text] = self.shape.read(data)?;
        let said = text.as_ref().is_some_and(|t| &data[t.clone()] != b"\"\"");
        Some(ChunkRead {
            choices: true,
            content: u32::from(self.tool || said),
            tool_calls: self.tool,
            text: text.filter(|_| capture).and_then(|t| scan::text(data, t)),
            ..ChunkRead::default()
        })
    }
}

/// Fuzzing: an OpenAI chunk the scanner reads, it reads as serde_json does (with and without
/// its text), as `fuzz/fuzz_targets/json_scan.rs` checks; panics when not.
#[cfg(fuzzing)]
#[doc(hidden)]
pub fn fuzz_chunk_read(data: &[u8]) {
    for capture in [false, true] {
        if let Some(scanned) = ChunkRead::scan(data, capture) {
            assert_eq!(
                Some(scanned),
                ChunkRead::parse(data, capture),
                "an OpenAI chunk"
            );
        }
    }
    assert_eq!(
        ChunkMeta::read(data),
        serde_json::from_slice(data).ok(),
        "a chunk's identity"
    );
    // A chunk of a stream's shape reads as the scanner reads it: the first line the chunk the
    // shape is made of, the rest another chunk, and that chunk's bytes as the shape's text.
    let (first, rest) = data.split_at(data.iter().position(|&b| b == b'\n').unwrap_or(data.len()));
    let rest = rest.get(1..).unwrap_or_default();
    let Some(shape) = ChunkRead::scan_noting(first, true)
        .and_then(|(read, sole)| ChunkShape::of(first, &read, sole?))
    else {
        return;
    };
    let text = shape.shape.read(first).expect("a chunk has its own shape")[0].clone();
    let mut texted = None;
    if let Some(text) = text {
        let mut other = first[..text.start].to_vec();
        other.push(b'"');
        other.extend_from_slice(rest);
        other.push(b'"');
        other.extend_from_slice(&first[text.end..]);
        texted = Some(other);
    }
    for chunk in [first, rest].into_iter().chain(texted.as_deref()) {
        for capture in [false, true] {
            if let Some(read) = shape.read(chunk, capture) {
                assert_eq!(
                    Some(read),
                    ChunkRead::scan(chunk, capture),
                    "a chunk of the shape"
                );
            }
        }
    }
}
