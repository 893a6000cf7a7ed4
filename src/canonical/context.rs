//! Context carry-over: how many tokens a request needs on a target, and trimming a conversation
//! to fit a smaller context window.
//!
//! Counting is per target: OpenAI-family models get their real tokenizer (tiktoken:
//! `o200k_base` for gpt-4o, gpt-4.1, gpt-4.5, gpt-5 and the o-series, `cl100k_base` otherwise);
//! other vendors get an estimate, see [`TokenCounter::Estimate`]. Trimming drops the oldest
//! messages and keeps every system prompt, the newest messages, tool calls together with their
//! results, and a conversation that starts with a user message.
//!
//! The tokenizer is bounded, since a client chooses what it reads: its BPE takes time
//! quadratic in the length of one piece (an 8 MiB single word took seconds) and its regex
//! fails (a panic) on about a million consecutive spaces. So a text is tokenized in pieces of
//! at most [`PIECE`] bytes; one count tokenizes at most [`MAX_TOKENIZED`] bytes in all (system
//! prompts and tools first, then the newest messages: the ones trimming keeps), and counts the
//! rest, or a piece whose tokenizing panicked, by its bytes, an upper bound (a BPE token is at
//! least one byte). Overcounting only trims more than needed; it never sends a conversation
//! that does not fit. [`fit`] says when such a byte count was used (`estimated`). Callers run
//! counts off the server threads (`routing::body`).

use std::cell::Cell;

use tiktoken_rs::CoreBPE;

use super::types::{ChatRequest, Message, Part};
use super::Dialect;

/// Counts tokens for one target.
#[derive(Clone, Copy)]
pub enum TokenCounter {
    /// An OpenAI tokenizer (built once per process, on first use).
    Tiktoken(Encoding),
    /// UTF-8 bytes / 3.5, plus 4 tokens per message. Anthropic's and Gemini's tokenizers are
    /// not available offline; their BPEs, like OpenAI's, average about 4 characters per token
    /// on English prose and fewer on code, so dividing by 3.5 errs on the high side, and trimming
    /// a little too much beats a context-length error. Bytes rather than characters, because
    /// scripts outside ASCII take both more tokens and more UTF-8 bytes per character (a CJK
    /// character is 3 bytes and about one token).
    Estimate,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An OpenAI BPE encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4.
    O200kBase,
    /// gpt-4, gpt-3.5 and unknown OpenAI-compatible models.
    Cl100kBase,
}

/// Framing tokens per message (OpenAI's cookbook: 3 for current chat models).
const TIKTOKEN_PER_MESSAGE: u32 = 3;
/// Tokens that prime the reply.
const REPLY_PRIMING: u32 = 3;
/// Framing per message in the estimate.
const ESTIMATE_PER_MESSAGE: u32 = 4;
/// The most a text is tokenized in one go: BPE time grows with the square of a piece's length,
/// and at this size even a worst case (one long word, a run of whitespace) stays well under a
/// millisecond per piece. A piece ends at the last whitespace before this, when there is one,
/// so ordinary text counts as it would whole.
pub const PIECE: usize = 16 * 1024;
/// The most of one count's text run through the tokenizer (1 MiB: about a quarter of a second
/// in the worst case, on the blocking pool); the rest is counted by its bytes.
pub const MAX_TOKENIZED: usize = 1 << 20;

/// An image: OpenAI bills a 1024x1024 high-detail image 765 tokens; Anthropic up to ~1600 for a
/// large one, Gemini 258. The estimate takes the largest.
const IMAGE_TIKTOKEN: u32 = 765;
const IMAGE_ESTIMATE: u32 = 1600;

impl TokenCounter {
    /// The counter for a target of `dialect` serving `model` (an Azure deployment name works
    /// when it contains the model's name).
    pub fn for_target(dialect: Dialect, model: &str) -> Self {
        match dialect {
            Dialect::OpenAi | Dialect::Responses => {
                TokenCounter::Tiktoken(Encoding::for_model(model))
            }
            Dialect::Anthropic | Dialect::Gemini => TokenCounter::Estimate,
        }
    }

    /// The counter's name for logs: `o200k_base`, `cl100k_base` or `estimate`.
    pub fn name(&self) -> &'static str {
        match self {
            TokenCounter::Tiktoken(Encoding::O200kBase) => "o200k_base",
            TokenCounter::Tiktoken(Encoding::Cl100kBase) => "cl100k_base",
            TokenCounter::Estimate => "estimate",
        }
    }

    /// Tokens of a text (within the bounds of one count, see the module doc).
    pub fn count_text(&self, text: &str) -> u32 {
        Meter::new(self).text(text)
    }

    /// Tokens of one message, framing included (within the bounds of one count).
    pub fn count_message(&self, message: &Message) -> u32 {
        Meter::new(self).message(message)
    }

    fn per_message(&self) -> u32 {
        match self {
            TokenCounter::Tiktoken(_) => TIKTOKEN_PER_MESSAGE,
            TokenCounter::Estimate => ESTIMATE_PER_MESSAGE,
        }
    }

    fn image(&self) -> u32 {
        match self {
            TokenCounter::Tiktoken(_) => IMAGE_TIKTOKEN,
            TokenCounter::Estimate => IMAGE_ESTIMATE,
        }
    }
}

/// One count: a counter with what is left of [`MAX_TOKENIZED`], and whether some text was
/// counted by its bytes instead.
struct Meter<'c> {
    counter: &'c TokenCounter,
    left: Cell<usize>,
    estimated: Cell<bool>,
}

impl<'c> Meter<'c> {
    fn new(counter: &'c TokenCounter) -> Self {
        Meter {
            counter,
            left: Cell::new(MAX_TOKENIZED),
            estimated: Cell::new(false),
        }
    }

    fn per_message(&self) -> u32 {
        self.counter.per_message()
    }

    fn image(&self) -> u32 {
        self.counter.image()
    }

    /// Tokens of a text.
    fn text(&self, text: &str) -> u32 {
        if text.is_empty() {
            return 0;
        }
        let count = match self.counter {
            TokenCounter::Tiktoken(encoding) => self.tokenize(encoding.bpe(), text),
            TokenCounter::Estimate => (text.len() * 2).div_ceil(7),
        };
        u32::try_from(count).unwrap_or(u32::MAX)
    }

    /// Tiktoken's count of `text`, piece by piece, within what is left to tokenize.
    fn tokenize(&self, bpe: &CoreBPE, mut text: &str) -> usize {
        let mut count = 0usize;
        while !text.is_empty() {
            let left = self.left.get();
            if left == 0 {
                self.estimated.set(true);
                return count.saturating_add(text.len());
            }
            let piece = &text[..piece_end(text, PIECE.min(left))];
            text = &text[piece.len()..];
            self.left.set(left.saturating_sub(piece.len()));
            let tokens = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                bpe.encode_ordinary(piece).len()
            }));
            count = count.saturating_add(tokens.unwrap_or_else(|_| {
                self.estimated.set(true);
                piece.len()
            }));
        }
        count
    }

    /// Tokens of one message, framing included.
    fn message(&self, message: &Message) -> u32 {
        let parts = |content: &[Part]| {
            content.iter().fold(0u32, |sum, part| {
                sum.saturating_add(match part {
                    Part::Text(text) => self.text(text),
                    Part::Image(_) => self.image(),
                    Part::Other { raw, .. } => self.text(raw.get()),
                    Part::CacheBreakpoint(_) => 0,
                })
            })
        };
        let body = match message {
            Message::User { content } => parts(content),
            Message::Assistant {
                content,
                tool_calls,
            } => tool_calls.iter().fold(parts(content), |sum, call| {
                sum.saturating_add(self.text(&call.name))
                    .saturating_add(self.text(&call.arguments))
                    .saturating_add(self.per_message())
            }),
            Message::Tool(result) => self.text(&result.content),
        };
        body.saturating_add(self.per_message())
    }

    /// Tokens of what every attempt sends whatever the trimming: system prompts, tool
    /// definitions and the reply priming.
    fn fixed(&self, req: &ChatRequest) -> u32 {
        let system = req.system.iter().fold(0u32, |sum, text| {
            sum.saturating_add(self.text(text))
                .saturating_add(self.per_message())
        });
        let tools = req.tools.iter().fold(0u32, |sum, tool| {
            sum.saturating_add(self.text(&tool.name))
                .saturating_add(tool.description.as_deref().map_or(0, |d| self.text(d)))
                .saturating_add(tool.parameters.as_ref().map_or(0, |p| self.text(p.get())))
        });
        system.saturating_add(tools).saturating_add(REPLY_PRIMING)
    }

    /// What every attempt sends, then each message's tokens (counted newest first, so that the
    /// tokenizer's budget goes to the messages trimming keeps).
    fn costs(&self, req: &ChatRequest) -> (u32, Vec<u32>) {
        let fixed = self.fixed(req);
        let mut costs: Vec<u32> = req.messages.iter().rev().map(|m| self.message(m)).collect();
        costs.reverse();
        (fixed, costs)
    }
}

/// Where a piece of at most `max` bytes of `text` ends: at the last whitespace in its second
/// half when there is one (the tokenizer's regex splits before whitespace anyway, so ordinary
/// text counts as it would whole), else at a character boundary.
fn piece_end(text: &str, max: usize) -> usize {
    if text.len() <= max {
        return text.len();
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    if end == 0 {
        // One character longer than what is left (only with a budget of a few bytes).
        return text.chars().next().map_or(text.len(), char::len_utf8);
    }
    let from = (max / 2).min(end);
    match text.as_bytes()[from..end]
        .iter()
        .rposition(u8::is_ascii_whitespace)
    {
        Some(at) if from + at > 0 => from + at,
        _ => end,
    }
}

impl Encoding {
    /// The encoding of an OpenAI model name (a provider prefix such as `openai/` is ignored).
    pub fn for_model(model: &str) -> Self {
        let name = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        let o_series = ["o1", "o3", "o4"].iter().any(|p| name.starts_with(p));
        let o200k = ["gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o"]
            .iter()
            .any(|p| name.contains(p));
        if o_series || o200k {
            Encoding::O200kBase
        } else {
            Encoding::Cl100kBase
        }
    }

    fn bpe(self) -> &'static CoreBPE {
        match self {
            Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        }
    }
}

/// The tokens `req` needs before any output.
pub fn estimate_tokens(req: &ChatRequest, counter: &TokenCounter) -> u32 {
    let (fixed, costs) = Meter::new(counter).costs(req);
    costs.iter().fold(fixed, |sum, c| sum.saturating_add(*c))
}

/// What [`fit`] made of a conversation.
#[derive(Debug)]
pub struct Fitting {
    /// `Ok(None)`: it fits as it is; `Ok(Some((trimmed, dropped)))`: it fits once `dropped`
    /// messages are dropped; `Err`: it cannot fit.
    pub outcome: Result<Option<(ChatRequest, usize)>, TooLong>,
    /// Some of it was counted by its bytes (past [`MAX_TOKENIZED`], or where the tokenizer
    /// failed), not by the tokenizer.
    pub estimated: bool,
}

/// Count `req` once and fit it into `window` with `reserve_output` left for the answer (see
/// [`trim_to_fit`]). CPU-bound on a long conversation: run it off the server threads.
pub fn fit(req: &ChatRequest, window: u32, reserve_output: u32, counter: &TokenCounter) -> Fitting {
    let meter = Meter::new(counter);
    let (fixed, costs) = meter.costs(req);
    let outcome = trim_counted(req, window, reserve_output, fixed, &costs)
        .map(|(kept, dropped)| kept.map(|trimmed| (trimmed, dropped)));
    Fitting {
        outcome,
        estimated: meter.estimated.get(),
    }
}

/// The request cannot fit the window, however many turns are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the conversation needs at least {needed} tokens; the target has room for {available}")]
pub struct TooLong {
    /// The smallest the request could be made (system prompts, tools and the newest turn).
    pub needed: u32,
    /// The window minus the output reserve.
    pub available: u32,
}

/// Fits `req` into `window` tokens with `reserve_output` left for the answer, by dropping the
/// oldest messages. Returns the request and how many messages (turns) were dropped: 0 and an
/// unchanged request when it fits.
///
/// It drops whole exchanges first (everything before a user message); if the newest exchange
/// alone is still too long (an agent's long run of tool calls after one user message), it
/// keeps that user message and drops the oldest tool-call steps after it, each step being an
/// assistant message with the results of its calls. So system prompts always stay, a tool call
/// is never separated from its result, and the conversation still starts with a user message.
pub fn trim_to_fit(
    req: &ChatRequest,
    window: u32,
    reserve_output: u32,
    counter: &TokenCounter,
) -> Result<(ChatRequest, usize), TooLong> {
    let (fixed, costs) = Meter::new(counter).costs(req);
    let (kept, dropped) = trim_counted(req, window, reserve_output, fixed, &costs)?;
    Ok((kept.unwrap_or_else(|| req.clone()), dropped))
}

/// [`trim_to_fit`] with the counts made: `None` when `req` fits as it is.
fn trim_counted(
    req: &ChatRequest,
    window: u32,
    reserve_output: u32,
    fixed: u32,
    costs: &[u32],
) -> Result<(Option<ChatRequest>, usize), TooLong> {
    let available = window.saturating_sub(reserve_output);
    // suffix[i]: tokens of messages[i..].
    let mut suffix = vec![0u32; costs.len() + 1];
    for i in (0..costs.len()).rev() {
        suffix[i] = suffix[i + 1].saturating_add(costs[i]);
    }
    if fixed.saturating_add(suffix[0]) <= available {
        return Ok((None, 0));
    }
    let users: Vec<usize> = (0..costs.len())
        .filter(|&i| req.messages[i].role() == super::Role::User)
        .collect();
    for &start in users.iter().filter(|&&i| i > 0) {
        if fixed.saturating_add(suffix[start]) <= available {
            return Ok((Some(keep(req, None, start)), start));
        }
    }
    let Some(&last_user) = users.last() else {
        return Err(TooLong {
            needed: fixed.saturating_add(costs.last().copied().unwrap_or(0)),
            available,
        });
    };
    let head = fixed.saturating_add(costs[last_user]);
    let mut needed = fixed.saturating_add(suffix[last_user]);
    let steps = suffix
        .iter()
        .enumerate()
        .take(costs.len())
        .skip(last_user + 2);
    for (step, &rest) in steps {
        if !starts_step(&req.messages, step) {
            continue;
        }
        let need = head.saturating_add(rest);
        needed = needed.min(need);
        if need <= available {
            return Ok((Some(keep(req, Some(last_user), step)), step - 1));
        }
    }
    Err(TooLong { needed, available })
}

/// Whether `messages[i]` is an assistant message that begins a step: the one before it is not
/// an assistant message still waiting for its tool results.
fn starts_step(messages: &[Message], i: usize) -> bool {
    matches!(messages[i], Message::Assistant { .. })
        && !matches!(&messages[i - 1], Message::Assistant { tool_calls, .. } if !tool_calls.is_empty())
}

/// `req` with only `messages[user]` (when given) and `messages[from..]`.
fn keep(req: &ChatRequest, user: Option<usize>, from: usize) -> ChatRequest {
    let mut messages = Vec::with_capacity(req.messages.len() - from + 1);
    messages.extend(user.map(|u| req.messages[u].clone()));
    messages.extend_from_slice(&req.messages[from..]);
    ChatRequest {
        model: req.model.clone(),
        system: req.system.clone(),
        system_cache: req.system_cache.clone(),
        messages,
        tools: req.tools.clone(),
        tool_choice: req.tool_choice.clone(),
        response_format: req.response_format.clone(),
        stop: req.stop.clone(),
        temperature: req.temperature,
        top_p: req.top_p,
        max_tokens: req.max_tokens,
        stream: req.stream,
        extra: req.extra.clone(),
    }
}

#[cfg(test)]
#[path = "context_tests.rs"]
mod tests;
