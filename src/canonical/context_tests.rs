#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::canonical::types::{ToolCall, ToolResult};

fn text(n: usize, tag: &str) -> String {
    format!("{tag}:{}", "x".repeat(n))
}

fn call(id: &str) -> Message {
    Message::Assistant {
        content: vec![],
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris"}"#.into(),
        }],
    }
}

fn result(id: &str, size: usize) -> Message {
    Message::Tool(ToolResult {
        tool_call_id: id.into(),
        content: text(size, id),
        is_error: false,
        cache: None,
    })
}

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        system: vec!["You are terse.".into(), "Answer in English.".into()],
        messages,
        ..ChatRequest::default()
    }
}

/// Starts with a user message; every tool result answers a call of the assistant message
/// before its run of results.
fn assert_valid(messages: &[Message]) {
    assert_eq!(messages.first().map(Message::role), Some(Role::User));
    let mut open: Vec<&str> = Vec::new();
    for message in messages {
        match message {
            Message::Assistant { tool_calls, .. } => {
                assert!(open.is_empty(), "a call left without its result");
                open = tool_calls.iter().map(|c| c.id.as_str()).collect();
            }
            Message::Tool(r) => {
                let at = open.iter().position(|id| *id == r.tool_call_id);
                assert!(at.is_some(), "result {} without its call", r.tool_call_id);
                open.retain(|id| *id != r.tool_call_id);
            }
            Message::User { .. } => assert!(open.is_empty(), "a call left without its result"),
        }
    }
}

const COUNTER: TokenCounter = TokenCounter::Estimate;

use crate::canonical::Role;

#[test]
fn a_request_that_fits_is_unchanged() {
    let req = request(vec![Message::user("hi"), Message::assistant("hello")]);
    let need = estimate_tokens(&req, &COUNTER);
    let (out, dropped) = trim_to_fit(&req, need + 100, 100, &COUNTER).unwrap();
    assert_eq!((out, dropped), (req, 0));
}

#[test]
fn drops_the_oldest_exchanges_and_keeps_the_system_prompt() {
    let req = request(vec![
        Message::user(text(700, "u1")),
        Message::assistant(text(700, "a1")),
        Message::user(text(70, "u2")),
        Message::assistant(text(70, "a2")),
        Message::user(text(70, "u3")),
    ]);
    let need = estimate_tokens(&req, &COUNTER);
    let (out, dropped) = trim_to_fit(&req, need - 10 + 500, 500, &COUNTER).unwrap();
    assert_eq!(dropped, 2);
    assert_eq!(out.system, req.system);
    assert_eq!(out.messages, req.messages[2..]);
    assert!(estimate_tokens(&out, &COUNTER) <= need - 10);
    assert_valid(&out.messages);
}

#[test]
fn never_splits_a_tool_call_from_its_results() {
    let req = request(vec![
        Message::user(text(50, "u1")),
        Message::Assistant {
            content: vec![Part::Text("Let me check both.".into())],
            tool_calls: vec![
                ToolCall {
                    id: "c1".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into(),
                },
                ToolCall {
                    id: "c2".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Rome"}"#.into(),
                },
            ],
        },
        result("c1", 400),
        result("c2", 400),
        Message::assistant(text(50, "a1")),
        Message::user(text(50, "u2")),
        call("c3"),
        result("c3", 60),
        Message::assistant(text(50, "a2")),
    ]);
    let need = estimate_tokens(&req, &COUNTER);
    for window in (need / 3..need).step_by(7) {
        match trim_to_fit(&req, window, 0, &COUNTER) {
            Ok((out, dropped)) => {
                assert_valid(&out.messages);
                assert!(estimate_tokens(&out, &COUNTER) <= window);
                assert_eq!(out.messages.len() + dropped, req.messages.len());
                assert_eq!(out.system.len(), 2);
            }
            Err(too_long) => assert!(too_long.needed > window, "{too_long:?} at {window}"),
        }
    }
    let after_u2 = estimate_tokens(
        &ChatRequest {
            messages: req.messages[5..].to_vec(),
            ..req.clone()
        },
        &COUNTER,
    );
    let (out, dropped) = trim_to_fit(&req, after_u2, 0, &COUNTER).unwrap();
    assert_eq!(dropped, 5);
    assert_eq!(out.messages[0], req.messages[5]);
}

#[test]
fn an_agent_run_loses_its_oldest_steps_but_keeps_its_task() {
    let task = Message::user("Plan the trip.");
    let req = request(vec![
        task.clone(),
        call("c1"),
        result("c1", 500),
        call("c2"),
        result("c2", 500),
        call("c3"),
        result("c3", 50),
        Message::assistant("Done."),
    ]);
    let kept = request(vec![
        task.clone(),
        call("c3"),
        result("c3", 50),
        Message::assistant("Done."),
    ]);
    let window = estimate_tokens(&kept, &COUNTER);
    let (out, dropped) = trim_to_fit(&req, window + 1000, 1000, &COUNTER).unwrap();
    assert_eq!(out.messages, kept.messages);
    assert_eq!(dropped, 4);
    assert_valid(&out.messages);
}

#[test]
fn too_long_when_the_newest_turn_cannot_fit() {
    let req = request(vec![
        Message::user("old"),
        Message::assistant("old answer"),
        Message::user(text(7000, "huge")),
    ]);
    let err = trim_to_fit(&req, 1000, 200, &COUNTER).unwrap_err();
    assert_eq!(err.available, 800);
    assert!(err.needed > 2000, "{err:?}");
    let no_user = ChatRequest {
        messages: vec![Message::assistant(text(7000, "a"))],
        ..ChatRequest::default()
    };
    assert!(trim_to_fit(&no_user, 100, 0, &COUNTER).is_err());
    assert!(err.to_string().contains("room for 800"));
}

#[test]
fn tiktoken_counts_openai_models() {
    let o200k = TokenCounter::for_target(Dialect::OpenAi, "gpt-4o-2024-08-06");
    assert_eq!(o200k.name(), "o200k_base");
    assert_eq!(o200k.count_text("hello world"), 2);
    let cl100k = TokenCounter::for_target(Dialect::OpenAi, "gpt-4-turbo");
    assert_eq!(cl100k.name(), "cl100k_base");
    assert_eq!(cl100k.count_text("hello world"), 2);
    assert!(cl100k.count_text("<|endoftext|>") > 1);
    assert_eq!(Encoding::for_model("o3-mini"), Encoding::O200kBase);
    assert_eq!(
        Encoding::for_model("openai/gpt-4.1-mini"),
        Encoding::O200kBase
    );
    assert_eq!(Encoding::for_model("my-gpt-4o-prod"), Encoding::O200kBase);
    assert_eq!(Encoding::for_model("llama-3-70b"), Encoding::Cl100kBase);
    let estimate = TokenCounter::for_target(Dialect::Anthropic, "claude-sonnet-4-5");
    assert_eq!(estimate.count_text("abcdefg"), 2);
    assert_eq!(estimate.count_text(""), 0);
    assert_eq!(format!("{estimate:?}"), "estimate");
}

#[test]
fn pieces_end_before_whitespace_and_on_character_boundaries() {
    assert_eq!(piece_end("hello world", 100), 11);
    assert_eq!(piece_end("hello world again", 12), 11, "before the space");
    assert_eq!(
        piece_end("abcdefghij", 4),
        4,
        "one word: cut where it must be"
    );
    assert_eq!(piece_end("ééééé", 5), 4, "never inside a character");
    assert_eq!(piece_end("é", 1), 2, "a character longer than what is left");
    assert_eq!(piece_end("   ", 1), 1);
}

/// What breaks the tokenizer is counted all the same, quickly and without a panic: a million
/// spaces (tiktoken's regex fails on them whole), one long word (quadratic BPE), and more text
/// than one count tokenizes (the rest is counted by its bytes, an upper bound, and said so).
#[test]
fn hostile_texts_are_counted_in_bounds() {
    let o200k = TokenCounter::for_target(Dialect::OpenAi, "gpt-4o");
    let spaces = " ".repeat(1_000_000);
    let n = o200k.count_text(&spaces);
    assert!((1_000..=1_000_000).contains(&n), "{n}");
    let word = "a".repeat(200_000);
    assert!(o200k.count_text(&word) <= 200_000);
    // Ordinary text counts as it does whole, piece by piece.
    let prose = "The quick brown fox jumps over the lazy dog. ".repeat(2_000);
    let whole = o200k_base_whole(&prose);
    assert_eq!(o200k.count_text(&prose) as usize, whole);
    // Past the budget: bytes, and flagged.
    let long = "word ".repeat(MAX_TOKENIZED / 5 + 100_000);
    let req = request(vec![Message::User {
        content: vec![Part::Text(long.clone())],
    }]);
    let fitting = fit(&req, u32::MAX, 0, &o200k);
    assert!(fitting.estimated);
    assert!(matches!(fitting.outcome, Ok(None)));
    let small = request(vec![Message::User {
        content: vec![Part::Text("hi".into())],
    }]);
    assert!(!fit(&small, 1000, 0, &o200k).estimated);
    assert!(estimate_tokens(&req, &o200k) as usize >= MAX_TOKENIZED / 5);
}

fn o200k_base_whole(text: &str) -> usize {
    tiktoken_rs::o200k_base_singleton()
        .encode_ordinary(text)
        .len()
}
