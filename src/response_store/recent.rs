//! What the store holds in memory: the recent responses by id, and the writer's work in the
//! order it was asked for. One lock over both, so that keeping a response and queueing its
//! write (or forgetting it and queueing its delete) is one step: the writer can never write a
//! response after its delete, and `get` finds a response from the moment it is put until it is
//! in the database and evicted.
//!
//! Bounds: responses not yet written are held until they are (at most `queue_bytes`; past
//! that, a response is kept in memory only, and the caller counts it as dropped); written
//! ones are evicted oldest first past `cache_bytes` or `cache_entries`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::oneshot;

use super::{ResponseStoreError, StoredResponse};

/// The in-memory bounds ([`super::Limits`] holds their defaults).
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub cache_bytes: usize,
    pub cache_entries: usize,
    pub queue_bytes: usize,
}

/// One response in memory.
#[derive(Debug)]
struct Slot {
    response: Arc<StoredResponse>,
    /// Tells this slot from an earlier one of the same id (replaced, or deleted and put again).
    generation: u64,
    bytes: usize,
    /// Written (or never to be): eviction may take it. Until then it is in the queue.
    evictable: bool,
}

/// A response queued for writing (or being written).
#[derive(Debug)]
pub(super) struct Put {
    pub response: Arc<StoredResponse>,
    generation: u64,
    bytes: usize,
}

/// A delete, and who waits for its answer: whether the database had it.
#[derive(Debug)]
pub(super) struct Delete {
    pub id: String,
    pub client_key_id: Option<String>,
    pub reply: oneshot::Sender<Result<bool, ResponseStoreError>>,
}

#[derive(Debug)]
enum Op {
    Put(Put),
    Delete(Delete),
}

/// The writer's next piece of work.
#[derive(Debug)]
pub(super) enum Work {
    /// Responses to write in one transaction, oldest first.
    Puts(Vec<Put>),
    Delete(Delete),
}

/// What [`Recent::delete`] found under an id.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Taken {
    /// Nothing in memory (the database may still have it).
    Absent,
    /// Another key's response: left alone.
    OtherKey,
    /// This key's response, now forgotten.
    Removed,
}

#[derive(Debug)]
pub(super) struct Recent {
    slots: HashMap<String, Slot>,
    /// Evictable slots, oldest first, by id and generation. A slot removed or replaced since
    /// leaves its entry here, skipped when it comes up (and counted against `cache_entries`,
    /// so entries left behind cannot pile up).
    order: VecDeque<(String, u64)>,
    ops: VecDeque<Op>,
    /// Bytes of the puts in `ops` or being written.
    queued_bytes: usize,
    /// Puts in `ops` or being written.
    queued: usize,
    /// Bytes of the evictable slots.
    kept_bytes: usize,
    next_generation: u64,
    /// Set at shutdown: nothing more is queued.
    closed: bool,
    bounds: Bounds,
}

impl Recent {
    pub(super) fn new(bounds: Bounds) -> Recent {
        Recent {
            slots: HashMap::new(),
            order: VecDeque::new(),
            ops: VecDeque::new(),
            queued_bytes: 0,
            queued: 0,
            kept_bytes: 0,
            next_generation: 0,
            closed: false,
            bounds,
        }
    }

    /// Keep `response` (replacing one of the same id) and queue it for writing. With the queue
    /// full (in bytes; it always takes one) or closed it is kept in memory only, evictable at
    /// once, and the reason is returned.
    pub(super) fn put(&mut self, response: Arc<StoredResponse>) -> Result<(), &'static str> {
        let bytes = response.held_bytes();
        let generation = self.next_generation;
        self.next_generation += 1;
        let id = response.id.clone();
        self.forget(&id);
        let refused = if self.closed {
            Some("the writer stopped")
        } else if self.queued > 0
            && self.queued_bytes.saturating_add(bytes) > self.bounds.queue_bytes
        {
            Some("queue full")
        } else {
            None
        };
        let evictable = refused.is_some();
        if !evictable {
            self.queued += 1;
            self.queued_bytes += bytes;
            self.ops.push_back(Op::Put(Put {
                response: response.clone(),
                generation,
                bytes,
            }));
        }
        self.slots.insert(
            id.clone(),
            Slot {
                response,
                generation,
                bytes,
                evictable,
            },
        );
        if evictable {
            self.kept_bytes += bytes;
            self.order.push_back((id, generation));
            self.evict();
        }
        refused.map_or(Ok(()), Err)
    }

    /// The response under `id`, whoever's it is.
    pub(super) fn get(&self, id: &str) -> Option<&Arc<StoredResponse>> {
        self.slots.get(id).map(|s| &s.response)
    }

    /// Forget `delete.id` if it is `delete.client_key_id`'s response, and queue its delete
    /// from the database behind every write asked for before it (unless it is another key's:
    /// then nothing is done). `Err` gives the delete back when the queue is closed.
    pub(super) fn delete(&mut self, delete: Delete) -> Result<Taken, Delete> {
        if self.closed {
            return Err(delete);
        }
        let taken = match self.slots.get(&delete.id) {
            None => Taken::Absent,
            Some(s) if s.response.client_key_id != delete.client_key_id => Taken::OtherKey,
            Some(_) => {
                self.forget(&delete.id);
                Taken::Removed
            }
        };
        if taken != Taken::OtherKey {
            self.ops.push_back(Op::Delete(delete));
        }
        Ok(taken)
    }

    /// Remove the slot of `id`, if any. A queued one stays queued (its write is then
    /// harmless: a delete queued after it follows).
    fn forget(&mut self, id: &str) {
        if let Some(old) = self.slots.remove(id) {
            if old.evictable {
                self.kept_bytes -= old.bytes;
            }
        }
    }

    /// The writer's next work: the oldest delete, or a run of puts up to `max_rows` and
    /// `max_bytes` (at least one), which stay queued (and found) until [`Recent::settle`].
    pub(super) fn next_work(&mut self, max_rows: usize, max_bytes: usize) -> Option<Work> {
        match self.ops.pop_front()? {
            Op::Delete(d) => Some(Work::Delete(d)),
            Op::Put(first) => {
                let mut bytes = first.bytes;
                let mut puts = vec![first];
                while puts.len() < max_rows && bytes < max_bytes {
                    let Some(Op::Put(_)) = self.ops.front() else {
                        break;
                    };
                    let Some(Op::Put(next)) = self.ops.pop_front() else {
                        break;
                    };
                    bytes += next.bytes;
                    puts.push(next);
                }
                Some(Work::Puts(puts))
            }
        }
    }

    /// Puts done with (written, or given up): they leave the queue, and their slots (unless
    /// replaced or removed since) may be evicted from now on.
    pub(super) fn settle(&mut self, puts: &[Put]) {
        for put in puts {
            self.queued -= 1;
            self.queued_bytes -= put.bytes;
            if let Some(slot) = self.slots.get_mut(&put.response.id) {
                if slot.generation == put.generation && !slot.evictable {
                    slot.evictable = true;
                    self.kept_bytes += slot.bytes;
                    self.order
                        .push_back((put.response.id.clone(), slot.generation));
                }
            }
        }
        self.evict();
    }

    /// Evict the oldest evictable slots while over the bounds.
    fn evict(&mut self) {
        while self.kept_bytes > self.bounds.cache_bytes
            || self.order.len() > self.bounds.cache_entries
        {
            let Some((id, generation)) = self.order.pop_front() else {
                break;
            };
            if self
                .slots
                .get(&id)
                .is_some_and(|s| s.generation == generation && s.evictable)
            {
                self.forget(&id);
            }
        }
    }

    /// Queue nothing more (shutdown); what is queued is still handed out.
    pub(super) fn close(&mut self) {
        self.closed = true;
    }

    /// Puts waiting to be written (or being written).
    pub(super) fn queued(&self) -> usize {
        self.queued
    }

    /// Responses in memory.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn response(id: &str, text_bytes: usize) -> Arc<StoredResponse> {
        Arc::new(StoredResponse {
            id: id.into(),
            client_key_id: Some("key-a".into()),
            created_ms: 1,
            route: "r".into(),
            provider: "p".into(),
            previous_id: None,
            input: "x".repeat(text_bytes),
            output: "[]".into(),
            response: "{}".into(),
        })
    }

    /// A response's bytes beside `text_bytes` of input.
    fn overhead() -> usize {
        response("a", 0).held_bytes()
    }

    fn bounds(cache_bytes: usize, cache_entries: usize, queue_bytes: usize) -> Bounds {
        Bounds {
            cache_bytes,
            cache_entries,
            queue_bytes,
        }
    }

    /// Write everything queued (a batch at a time) and settle it, skipping deletes; the ids
    /// written.
    fn write_all(r: &mut Recent) -> Vec<String> {
        let mut ids = Vec::new();
        while let Some(work) = r.next_work(2, usize::MAX) {
            if let Work::Puts(puts) = work {
                ids.extend(puts.iter().map(|p| p.response.id.clone()));
                r.settle(&puts);
            }
        }
        ids
    }

    fn delete(r: &mut Recent, id: &str, key: Option<&str>) -> Taken {
        let (reply, _) = oneshot::channel();
        r.delete(Delete {
            id: id.into(),
            client_key_id: key.map(str::to_owned),
            reply,
        })
        .unwrap()
    }

    #[test]
    fn a_response_is_found_while_queued_and_evicted_only_once_written() {
        let one = overhead() + 100;
        let mut r = Recent::new(bounds(2 * one, 100, usize::MAX));
        for id in ["a", "b", "c", "d"] {
            r.put(response(id, 100)).unwrap();
        }
        // Over the cache's bytes, but nothing is written: all four are kept.
        assert_eq!((r.len(), r.queued()), (4, 4));
        assert_eq!(write_all(&mut r), ["a", "b", "c", "d"]);
        assert_eq!((r.len(), r.queued()), (2, 0));
        assert!(r.get("a").is_none() && r.get("b").is_none());
        assert!(r.get("c").is_some() && r.get("d").is_some());
    }

    #[test]
    fn past_the_queue_s_bytes_a_response_is_kept_in_memory_only() {
        let one = overhead() + 100;
        let mut r = Recent::new(bounds(usize::MAX, 100, 2 * one));
        r.put(response("a", 100)).unwrap();
        r.put(response("b", 100)).unwrap();
        assert_eq!(r.put(response("c", 100)), Err("queue full"));
        assert!(r.get("c").is_some(), "still found");
        assert_eq!(write_all(&mut r), ["a", "b"]);
        // Room again. One larger than the whole queue is taken when the queue is empty.
        r.put(response("d", 10 * one)).unwrap();
        assert_eq!(r.put(response("e", 1)), Err("queue full"));
        assert_eq!(write_all(&mut r), ["d"]);
        r.close();
        assert_eq!(r.put(response("f", 1)), Err("the writer stopped"));
        assert!(r.next_work(10, usize::MAX).is_none());
    }

    #[test]
    fn batches_stop_at_rows_or_bytes_and_at_a_delete() {
        let mut r = Recent::new(bounds(usize::MAX, 100, usize::MAX));
        for id in ["a", "b", "c"] {
            r.put(response(id, 1000)).unwrap();
        }
        // Another key's: nothing to queue.
        assert_eq!(delete(&mut r, "a", None), Taken::OtherKey);
        assert_eq!(delete(&mut r, "a", Some("key-a")), Taken::Removed);
        r.put(response("d", 1000)).unwrap();
        let ids = |w: Option<Work>| match w {
            Some(Work::Puts(p)) => p.iter().map(|p| p.response.id.clone()).collect(),
            Some(Work::Delete(d)) => vec![format!("delete {}", d.id)],
            None => Vec::new(),
        };
        // Bytes: the first put alone passes 500 bytes, so it goes alone.
        assert_eq!(ids(r.next_work(10, 500)), ["a"]);
        assert_eq!(ids(r.next_work(10, usize::MAX)), ["b", "c"]);
        assert_eq!(ids(r.next_work(10, usize::MAX)), ["delete a"]);
        assert_eq!(ids(r.next_work(1, usize::MAX)), ["d"]);
        r.close();
        let (reply, _) = oneshot::channel();
        let closed = r.delete(Delete {
            id: "d".into(),
            client_key_id: Some("key-a".into()),
            reply,
        });
        assert!(closed.is_err(), "nothing is queued once closed");
        assert!(r.get("d").is_some(), "nor forgotten");
        assert!(r.next_work(1, usize::MAX).is_none());
    }

    #[test]
    fn deleting_checks_the_key_and_a_replaced_or_removed_slot_is_not_evicted_twice() {
        let one = overhead() + 10;
        let mut r = Recent::new(bounds(3 * one, 3, usize::MAX));
        r.put(response("a", 10)).unwrap();
        assert_eq!(delete(&mut r, "a", Some("key-b")), Taken::OtherKey);
        assert_eq!(delete(&mut r, "a", None), Taken::OtherKey);
        assert_eq!(delete(&mut r, "z", Some("key-a")), Taken::Absent);
        // Removed while queued: its write settles nothing.
        assert_eq!(delete(&mut r, "a", Some("key-a")), Taken::Removed);
        assert_eq!(write_all(&mut r), ["a"]);
        assert_eq!((r.len(), r.kept_bytes), (0, 0));
        // Put again while the first is queued: the second is what stays.
        r.put(response("b", 10)).unwrap();
        write_all(&mut r);
        r.put(Arc::new(StoredResponse {
            output: "[1]".into(),
            ..(*response("b", 10)).clone()
        }))
        .unwrap();
        assert_eq!(r.kept_bytes, 0, "the written one was replaced");
        write_all(&mut r);
        assert_eq!(r.get("b").unwrap().output, "[1]");
        assert_eq!(r.kept_bytes, one + 1);
        // Entries left behind count against `cache_entries`: they cannot pile up.
        for i in 0..100 {
            let id = format!("x{i}");
            r.put(response(&id, 10)).unwrap();
            write_all(&mut r);
            assert_eq!(delete(&mut r, &id, Some("key-a")), Taken::Removed);
        }
        assert!(r.order.len() <= 3, "{}", r.order.len());
        assert!(r.get("b").is_none(), "evicted as the oldest");
        assert_eq!(r.kept_bytes, 0);
    }
}
