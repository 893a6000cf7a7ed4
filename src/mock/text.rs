//! The canonical answer text: deterministic, numbered words.
//!
//! Every mock answers with the same text for the same `(words, variant)`, whatever its name, so a
//! test can compare what a client received through the gateway with what it should have received.
//! Each word carries its position and the last one carries the final ".", so a truncated answer
//! can never pass for a whole one, and a continuation that skipped or repeated a word is visible.

use std::fmt::Write as _;

/// The NATO alphabet: short, distinct, easy to read in a failing test's output.
const WORDS: [&str; 26] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
];

/// How far apart the numbering of variants that share a rotation of [`WORDS`] starts.
const VARIANT_NUMBER_STRIDE: u64 = 1000;

/// The canonical answer of `words` words for `variant`.
///
/// Variant 0 is `"alpha-1 bravo-2 charlie-3 ... zulu-26 alpha-27 ..."` ending with `"."`.
/// Variant `v` rotates the word list by `v % 26` and, for `v >= 26`, starts the numbering at
/// `1 + 1000 * (v / 26)`, so two different variants differ at every position, from the first word
/// on. Zero words give the empty string.
pub fn canonical_text(words: usize, variant: u32) -> String {
    let rotation = (variant % 26) as usize;
    let first_number = 1 + u64::from(variant / 26) * VARIANT_NUMBER_STRIDE;
    let mut text = String::with_capacity(words * 11);
    for (position, number) in (0..words).zip(first_number..) {
        if position > 0 {
            text.push(' ');
        }
        let word = WORDS[(position + rotation) % WORDS.len()];
        // Writing to a String cannot fail.
        let _ = write!(text, "{word}-{number}");
    }
    if words > 0 {
        text.push('.');
    }
    text
}

/// Splits `text` into stream chunks on word boundaries: every chunk but the first starts with
/// the space before its word, so concatenating the chunks gives back exactly `text`.
pub(crate) fn chunks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (index, c) in text.char_indices() {
        if c == ' ' && index > start {
            out.push(&text[start..index]);
            start = index;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// What is left of `text` after an assistant prefill: the rest when `text` starts with `prefill`,
/// else the whole text (the mock does not pretend to continue an answer it would not have given).
pub(crate) fn continuation<'a>(text: &'a str, prefill: &str) -> &'a str {
    text.strip_prefix(prefill).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_zero_is_numbered_nato() {
        assert_eq!(canonical_text(3, 0), "alpha-1 bravo-2 charlie-3.");
        assert_eq!(canonical_text(1, 0), "alpha-1.");
        assert_eq!(canonical_text(0, 0), "");
        let long = canonical_text(28, 0);
        assert!(long.ends_with("zulu-26 alpha-27 bravo-28."), "{long}");
        assert_eq!(long.split(' ').count(), 28);
    }

    #[test]
    fn variants_differ_at_every_word() {
        let variants = [0, 1, 2, 25, 26, 27, 52, 1000];
        for (i, a) in variants.iter().enumerate() {
            for b in &variants[i + 1..] {
                let ta = canonical_text(40, *a);
                let tb = canonical_text(40, *b);
                for (wa, wb) in ta.split(' ').zip(tb.split(' ')) {
                    assert_ne!(wa, wb, "variants {a} and {b}");
                }
            }
        }
        assert_eq!(canonical_text(2, 1), "bravo-1 charlie-2.");
        assert_eq!(canonical_text(2, 26), "alpha-1001 bravo-1002.");
    }

    #[test]
    fn truncation_never_looks_whole() {
        let whole = canonical_text(12, 0);
        for words in 1..12 {
            let shorter = canonical_text(words, 0);
            assert!(!whole.starts_with(&shorter), "{shorter}");
        }
    }

    #[test]
    fn chunks_concatenate_to_the_text() {
        let text = canonical_text(5, 3);
        let parts = chunks(&text);
        assert_eq!(parts.len(), 5);
        assert_eq!(parts[0], "delta-1");
        assert_eq!(parts[1], " echo-2");
        assert_eq!(parts.concat(), text);
        assert!(chunks("").is_empty());
    }

    #[test]
    fn continuation_after_prefill() {
        let text = canonical_text(3, 0);
        assert_eq!(continuation(&text, "alpha-1"), " bravo-2 charlie-3.");
        assert_eq!(
            chunks(continuation(&text, "alpha-1")),
            [" bravo-2", " charlie-3."]
        );
        assert_eq!(
            chunks(continuation(&text, "alpha-1 bra")),
            ["vo-2", " charlie-3."]
        );
        assert_eq!(
            chunks(continuation(&text, "alpha-1 ")),
            ["bravo-2", " charlie-3."]
        );
        assert_eq!(continuation(&text, &text), "");
        assert_eq!(continuation(&text, "zulu"), text);
    }
}
