//! Which provider made an encrypted reasoning item. A `store: false` client (Codex) sends its
//! reasoning back as `encrypted_content` each turn, and only the provider that made it can read
//! it: another one refuses the whole request (`invalid_encrypted_content`). The gateway
//! remembers, for the reasoning it passed on, a hash of each item's `encrypted_content` and the
//! provider: a later request carrying one goes to that provider as it came, and to the others
//! without its reasoning items. Only hashes and provider names are kept, in memory, at most
//! [`CAPACITY`] (the oldest forgotten first); a replica that never saw an item sends it as it
//! came.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::wire::scan;

/// Reasoning items remembered.
pub(crate) const CAPACITY: usize = 65_536;

/// The providers of recent encrypted reasoning items.
#[derive(Debug, Default)]
pub(crate) struct Provenance {
    inner: Mutex<Inner>,
    /// Set once an item is remembered, and never cleared (the oldest are forgotten only past
    /// [`CAPACITY`]): read on every Responses request without taking the lock.
    known: AtomicBool,
    hasher: std::collections::hash_map::RandomState,
}

#[derive(Debug, Default)]
struct Inner {
    by_hash: HashMap<u64, Arc<str>>,
    order: VecDeque<u64>,
}

#[derive(Deserialize)]
struct ItemView<'a> {
    #[serde(rename = "type", default)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    encrypted_content: Option<&'a RawValue>,
}

/// The `encrypted_content` of a reasoning item, as its JSON text.
fn sealed(item: &RawValue) -> Option<&str> {
    let view: ItemView<'_> = serde_json::from_str(item.get()).ok()?;
    if view.kind.as_deref() != Some("reasoning") {
        return None;
    }
    view.encrypted_content
        .map(RawValue::get)
        .filter(|c| c.starts_with('"'))
}

impl Provenance {
    fn hash(&self, content: &str) -> u64 {
        self.hasher.hash_one(content)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves a map of hashes: still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remember that `provider` made the reasoning items among `items` (output items).
    pub(crate) fn record(&self, provider: &str, items: &[&RawValue]) {
        let hashes: Vec<u64> = items
            .iter()
            .filter_map(|i| sealed(i))
            .map(|c| self.hash(c))
            .collect();
        if hashes.is_empty() {
            return;
        }
        let provider: Arc<str> = Arc::from(provider);
        let mut inner = self.lock();
        for h in hashes {
            if inner.by_hash.insert(h, provider.clone()).is_none() {
                inner.order.push_back(h);
            }
            while inner.order.len() > CAPACITY {
                if let Some(old) = inner.order.pop_front() {
                    inner.by_hash.remove(&old);
                }
            }
        }
        // Written once: every Responses request reads the flag, so its cache line is not
        // taken from the other server thread for each record.
        if !self.known.load(Ordering::Relaxed) {
            self.known.store(true, Ordering::Release);
        }
    }

    /// Remember the reasoning items of a whole response object `body` made by `provider`.
    pub(crate) fn record_response(&self, provider: &str, body: &[u8]) {
        #[derive(Deserialize)]
        struct Output<'a> {
            #[serde(default, borrow)]
            output: Vec<&'a RawValue>,
        }
        if let Ok(out) = serde_json::from_slice::<Output<'_>>(body) {
            self.record(provider, &out.output);
        }
    }

    /// Whether no reasoning item is known: then no request's reasoning has a known maker
    /// (a gateway whose clients send none reads no request for it).
    pub(crate) fn is_empty(&self) -> bool {
        !self.known.load(Ordering::Acquire)
    }

    /// [`Provenance::maker`] of the `input` items of the Responses request `body`, read by the
    /// scanner in one pass (each item's `type` and `encrypted_content`, nothing built): `None`
    /// when the body is not a plain object with an array of objects for `input` (serde_json
    /// then reads it). An agent's turn carries its whole history, read three times over by
    /// serde_json for this: ~10 instructions a byte.
    pub(crate) fn maker_of_input(&self, body: &[u8]) -> Option<Option<Arc<str>>> {
        let mut hashes = Vec::new();
        let item = |[kind, content]: [Option<std::ops::Range<usize>>; 2]| {
            let reasoning = kind.and_then(|k| scan::text(body, k)).as_deref() == Some("reasoning");
            let content = content.map(|c| &body[c]).filter(|c| c.starts_with(b"\""));
            if let (true, Some(content)) = (reasoning, content) {
                // UTF-8: the scanner checked the body.
                if let Ok(content) = std::str::from_utf8(content) {
                    hashes.push(self.hash(content));
                }
            }
            true
        };
        scan::fields_and_items(body, ["input"], 0, ["type", "encrypted_content"], item)?;
        if hashes.is_empty() {
            return Some(None);
        }
        let inner = self.lock();
        Some(hashes.iter().find_map(|h| inner.by_hash.get(h).cloned()))
    }

    /// The provider that made one of the reasoning items among `items`, when one is known.
    pub(crate) fn maker(&self, items: &[&RawValue]) -> Option<Arc<str>> {
        let hashes: Vec<u64> = items
            .iter()
            .filter_map(|i| sealed(i))
            .map(|c| self.hash(c))
            .collect();
        if hashes.is_empty() {
            return None;
        }
        let inner = self.lock();
        hashes.iter().find_map(|h| inner.by_hash.get(h).cloned())
    }
}

/// Whether `item` is a reasoning item.
pub(super) fn is_reasoning(item: &RawValue) -> bool {
    serde_json::from_str::<ItemView<'_>>(item.get())
        .is_ok_and(|v| v.kind.as_deref() == Some("reasoning"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn a_reasoning_item_is_known_by_its_sealed_content_only() {
        let p = Provenance::default();
        let made =
            raw(r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA1"}"#);
        let text = raw(r#"{"type":"message","content":"gAAA1"}"#);
        p.record("openai", &[&made, &text]);
        let again = raw(r#"{"encrypted_content":"gAAA1","type":"reasoning","summary":[]}"#);
        assert_eq!(p.maker(&[&again]).as_deref(), Some("openai"));
        let other = raw(r#"{"type":"reasoning","encrypted_content":"gAAA2"}"#);
        assert_eq!(p.maker(&[&other, &text]), None);
        assert!(is_reasoning(&again) && !is_reasoning(&text));
    }

    /// The scanner finds the maker of a request's input reasoning as serde_json's reading
    /// does, or leaves the body to it.
    #[test]
    fn a_requests_reasoning_maker_reads_alike_by_the_scanner() {
        let p = Provenance::default();
        assert!(p.is_empty());
        let made = raw(r#"{"type":"reasoning","encrypted_content":"gAAA1"}"#);
        p.record("openai", &[&made]);
        assert!(!p.is_empty());
        let by_serde = |body: &str| {
            #[derive(Deserialize)]
            struct Input<'a> {
                #[serde(borrow)]
                input: Vec<&'a RawValue>,
            }
            let input: Input<'_> = serde_json::from_str(body).ok()?;
            Some(p.maker(&input.input))
        };
        let mut taken = 0;
        for body in [
            r#"{"model":"m","input":[{"type":"message","content":"gAAA1"},{"type":"reasoning","summary":[],"encrypted_content":"gAAA1"}]}"#,
            r#"{"input":[{"encrypted_content":"gAAA1","type":"reas\u006fning"}],"model":"m"}"#,
            r#"{"input":[{"type":"reasoning","encrypted_content":"gAAA2"}]}"#,
            r#"{"input":[{"type":"reasoning","encrypted_content":null}]}"#,
            r#"{"input":[{"type":"message","content":[{"type":"input_text","text":"gAAA1"}]}]}"#,
            r#"{"input":[]}"#,
            r#"{"input":"gAAA1"}"#,
            r#"{"input":[1]}"#,
            r#"{"input":[{"type":"reasoning","type":"reasoning","encrypted_content":"gAAA1"}]}"#,
        ] {
            if let Some(ours) = p.maker_of_input(body.as_bytes()) {
                taken += 1;
                assert_eq!(Some(ours), by_serde(body), "{body}");
            }
        }
        assert_eq!(taken, 6, "the plain bodies are the scanner's");
    }

    #[test]
    fn the_oldest_are_forgotten_past_capacity() {
        let p = Provenance::default();
        let items: Vec<Box<RawValue>> = (0..=CAPACITY)
            .map(|i| {
                raw(&format!(
                    r#"{{"type":"reasoning","encrypted_content":"c{i}"}}"#
                ))
            })
            .collect();
        let refs: Vec<&RawValue> = items.iter().map(AsRef::as_ref).collect();
        p.record("azure", &refs);
        assert_eq!(p.maker(&refs[..1]), None, "the first was forgotten");
        assert_eq!(p.maker(&refs[CAPACITY..]).as_deref(), Some("azure"));
        assert_eq!(p.lock().by_hash.len(), CAPACITY);
        assert!(!p.is_empty(), "forgetting the oldest leaves the rest known");
    }
}
