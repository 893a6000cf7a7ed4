//! Reading one OpenAI chunk: by the scanner for a plain one ([`ChunkRead::scan_noting`], a few
//! instructions a byte: every chunk of every stream is read), else by serde_json
//! ([`ChunkRead::parse`]), which reads or refuses it as the gateway always has; and the
//! stream's identity ([`ChunkMeta`]) in the same pass.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{ChunkMeta, CountSpans, Usage, USAGE_KEYS};
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
    /// then reads (or refuses) as serde_json does. Also what a [`ChunkShape`] is made of: the
    /// fields of the delta of the chunk's one choice and of its usage, found in the same pass.
    pub(super) fn scan_noting(data: &'a [u8], capture: bool) -> Option<(ChunkRead<'a>, Noted)> {
        let given = |span| scan::not_null(data, span);
        let mut read = ChunkRead::default();
        let mut sole = None;
        let ([_, usage, error], choices) = scan::fields_and_items(
            data,
            ["choices", "usage", "error"],
            0,
            ["delta", "finish_reason"],
            |[delta, finish]| {
                let finish = given(finish);
                if let Some(finish) = &finish {
                    // Anything but a string without escapes is left to `parse` (which refuses
                    // what is not a string).
                    if data[finish.start] != b'"' || data[finish.clone()].contains(&b'\\') {
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
                    finish,
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
        // The usage's counts read by the scanner (their spans kept for a shape), else by
        // serde_json.
        let mut usage_counts = None;
        read.usage = given(usage).map(|u| {
            let fields = scan::fields_in(data, u.clone(), USAGE_KEYS);
            match fields.and_then(|f| Usage::of_fields(data, f)) {
                Some((usage, counts)) => {
                    usage_counts = Some(counts);
                    Some(usage)
                }
                None => serde_json::from_slice(&data[u]).ok(),
            }
        });
        Some((read, Noted { sole, usage_counts }))
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

/// What a [`ChunkShape`] is made of, as the scanner found it in a chunk.
#[derive(Debug)]
pub(super) struct Noted {
    /// The delta of the chunk's one choice (none when it has more, or none).
    sole: Option<SoleDelta>,
    /// The spans of the chunk's usage's four counts, when the scanner read them.
    usage_counts: Option<CountSpans>,
}

/// The delta of a chunk's one choice.
#[derive(Debug)]
struct SoleDelta {
    /// Its text, when not `null`.
    text: Option<Range<usize>>,
    /// It has a refusal (not `null`).
    refusal: bool,
    /// It has a tool call (or a function call).
    tool: bool,
    /// The choice's `finish_reason`, when not `null` (a string without escapes).
    finish: Option<Range<usize>>,
}

/// The shape of a stream's chunks ([`scan::Shape`]): a chunk the scanner read with no error
/// and either one choice, whose delta's text is a string or none and has no refusal, or no
/// choice and a usage. Its content chunks are one shape; its last chunks, the finish and the
/// usage, are others ([`ChunkShape::closes`]). A later chunk of the shape reads as the scanner
/// would read it (without the stream's identity) from the shape's own reading and the values
/// kept: the text, the finish reason and the usage's counts, at a tenth of a scan's cost.
#[derive(Debug)]
pub(super) struct ChunkShape {
    /// The chunk; kept: its delta's text (when a string), its finish reason and its usage's
    /// four counts ([`super::usage::CountSpans`]), when it has them.
    shape: scan::Shape<6>,
    /// The delta has a tool call (the chunk is content whatever its text).
    tool: bool,
    /// The chunk has its one choice (a usage chunk has none).
    choices: bool,
    /// The choice has a finish reason.
    finish: bool,
    /// The chunk has a usage, read from the counts kept.
    usage: bool,
}

impl ChunkShape {
    /// The shape of `data`, a chunk [`ChunkRead::scan_noting`] read as `read`, noting `noted`,
    /// when it is one (see the type's docs). Not read again: the shape's holes are found in one
    /// walk over its bytes.
    pub(super) fn of(data: &[u8], read: &ChunkRead, noted: Noted) -> Option<ChunkShape> {
        if read.error.is_some() {
            return None;
        }
        let (text, finish, tool) = match noted.sole {
            Some(sole) if !sole.refusal => (sole.text, sole.finish, sole.tool),
            None if !read.choices && noted.usage_counts.is_some() => (None, None, false),
            _ => return None,
        };
        if text.as_ref().is_some_and(|t| data[t.start] != b'"') {
            return None;
        }
        // A usage whose counts the scanner read (not one only serde_json read, nor one that
        // did not read).
        let counts = match (&read.usage, noted.usage_counts) {
            (None, _) => [const { None }; 4],
            (Some(_), Some(counts)) => counts,
            (Some(_), None) => return None,
        };
        let [prompt, completion, cache_read, cache_write] = counts;
        let finishes = finish.is_some();
        let kept = [text, finish, prompt, completion, cache_read, cache_write];
        Some(ChunkShape {
            shape: scan::Shape::of_read(data, kept)?,
            tool,
            choices: read.choices,
            finish: finishes,
            usage: read.usage.is_some(),
        })
    }

    /// Whether chunks of this shape end a stream (a finish or a usage): they come once a
    /// stream, and their shape is kept for the next streams, not read by in this one.
    pub(super) fn closes(&self) -> bool {
        self.finish || self.usage || !self.choices
    }

    /// `data` read, when it has this shape: as [`ChunkRead::scan_noting`] reads it without the
    /// stream's identity.
    pub(super) fn read<'a>(&self, data: &'a [u8], capture: bool) -> Option<ChunkRead<'a>> {
        let [text, finish, prompt, completion, cache_read, cache_write] = self.shape.read(data)?;
        // What the scanner reads as a finish (else `parse`, which a shape does not stand for).
        if let Some(finish) = finish {
            if data[finish.start] != b'"' || data[finish].contains(&b'\\') {
                return None;
            }
        }
        let usage = match self.usage {
            false => None,
            true => Some(Some(Usage::at(
                data,
                [prompt, completion, cache_read, cache_write],
            )?)),
        };
        let said = text.as_ref().is_some_and(|t| &data[t.clone()] != b"\"\"");
        Some(ChunkRead {
            choices: self.choices,
            content: u32::from(self.tool || said),
            tool_calls: self.tool,
            finished: self.finish,
            text: text.filter(|_| capture).and_then(|t| scan::text(data, t)),
            usage,
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
        .and_then(|(read, noted)| ChunkShape::of(first, &read, noted))
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
