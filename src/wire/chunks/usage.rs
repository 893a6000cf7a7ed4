//! A stream's and an answer's token counts in the one meaning the gateway keeps ([`Usage`]),
//! and how an OpenAI `usage` object is read into it: by the scanner (its counts' spans, which a
//! shape keeps) or by serde_json.

use serde::Deserialize;

use super::fields::{count, Scanned};
use crate::wire::scan;

/// Token counts as OpenAI counts them: `prompt_tokens` is every input token, those the prompt
/// cache read (`cache_read_tokens`) or wrote (`cache_write_tokens`) included. Read from an
/// OpenAI `usage` object (`prompt_tokens_details.cached_tokens` and `.cache_write_tokens`); the
/// other dialects' counts are read into the same meaning (Anthropic's `input_tokens` plus its
/// two cache counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "OpenAiUsage")]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Prompt and completion tokens, with no cache counts.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            ..Usage::default()
        }
    }
}

impl From<crate::canonical::Usage> for Usage {
    fn from(u: crate::canonical::Usage) -> Self {
        Usage {
            prompt_tokens: u.input,
            completion_tokens: u.output,
            cache_read_tokens: u.cache_read,
            cache_write_tokens: u.cache_write,
        }
    }
}

/// An OpenAI `usage` object, as much as [`Usage`] keeps of it.
#[derive(Deserialize)]
struct OpenAiUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    /// `null` from some compatible servers.
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: u64,
    #[serde(default)]
    cache_write_tokens: u64,
}

impl From<OpenAiUsage> for Usage {
    fn from(u: OpenAiUsage) -> Self {
        let (read, write) = u
            .prompt_tokens_details
            .map_or((0, 0), |d| (d.cached_tokens, d.cache_write_tokens));
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cache_read_tokens: read,
            cache_write_tokens: write,
        }
    }
}

impl Usage {
    /// The usage whose fields [`USAGE_KEYS`] the scanner found at `fields` of `data`, read as
    /// serde_json reads an [`OpenAiUsage`], with the spans of its four counts (for a shape to
    /// keep); `None` when they do not read so.
    pub(in crate::wire) fn of_fields(
        data: &[u8],
        fields: scan::Spans<3>,
    ) -> Option<(Usage, CountSpans)> {
        let counts = Usage::count_spans(data, fields)?;
        Some((Usage::at(data, counts.clone())?, counts))
    }

    /// The spans of the four counts of the usage whose fields [`USAGE_KEYS`] are at `spans`;
    /// `None` when its `prompt_tokens_details` is not a plain object or `null`.
    fn count_spans(
        data: &[u8],
        [prompt, completion, details]: scan::Spans<3>,
    ) -> Option<CountSpans> {
        let [read, write] = match scan::not_null(data, details) {
            None => [None, None],
            Some(details) => scan::fields_in(data, details, PROMPT_DETAILS_KEYS)?,
        };
        Some([prompt, completion, read, write])
    }

    /// The usage whose counts are at `spans` of `data` ([`Usage::of_fields`]'s), as serde_json
    /// reads them (absent: 0).
    pub(in crate::wire) fn at(
        data: &[u8],
        [prompt, completion, read, write]: CountSpans,
    ) -> Option<Usage> {
        Some(Usage {
            prompt_tokens: count(data, prompt)?,
            completion_tokens: count(data, completion)?,
            cache_read_tokens: count(data, read)?,
            cache_write_tokens: count(data, write)?,
        })
    }
}

/// The spans of an OpenAI usage's four counts: `prompt_tokens`, `completion_tokens`,
/// `prompt_tokens_details.cached_tokens` and `.cache_write_tokens` (`None`: not there).
pub(in crate::wire) type CountSpans = scan::Spans<4>;

/// The keys of an OpenAI `prompt_tokens_details` that [`Usage`] reads: the cache's counts.
const PROMPT_DETAILS_KEYS: [&str; 2] = ["cached_tokens", "cache_write_tokens"];

/// The keys of an OpenAI `usage` that [`Usage`] reads, in [`Usage::of_fields`]'s order.
pub(in crate::wire) const USAGE_KEYS: [&str; 3] = [
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details",
];

impl Scanned for Usage {
    fn scan(data: &[u8], span: std::ops::Range<usize>) -> Option<Usage> {
        Usage::of_fields(data, scan::fields_in(data, span, USAGE_KEYS)?).map(|(usage, _)| usage)
    }
}
