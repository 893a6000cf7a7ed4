//! A race's attempts in flight. Most requests have one at a time: their first attempt answers,
//! or fails and the next one starts after it ended (hedging is off by default, and a route of
//! one target never hedges). That one is polled as it is, with the request's own waker; only
//! when a second attempt runs beside it (a hedge, or a failover joining a race) do they go into
//! a `FuturesUnordered`. A `FuturesUnordered` allocates its queue and a stub task when made,
//! and one task a future, and wakes through its own waker: ~1,000 instructions a request
//! (`bench/instructions`) for a set of one.

use std::future::{poll_fn, Future};
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;

use super::super::launch::Done;

/// The attempts in flight: none, one on its own, or several together.
pub(super) struct InFlight<'a> {
    /// The only attempt in flight, while there is one; `None` while `many` holds any.
    solo: Option<BoxFuture<'a, Done>>,
    /// Made when a second attempt joins one in flight, and kept for the rest of the race.
    many: Option<FuturesUnordered<BoxFuture<'a, Done>>>,
}

impl<'a> InFlight<'a> {
    pub(super) fn new() -> Self {
        InFlight {
            solo: None,
            many: None,
        }
    }

    /// Add an attempt. One that joins another moves it, started as it is, into the set with it:
    /// the set polls a new member at once, so it then registers the set's waker.
    pub(super) fn push(&mut self, attempt: BoxFuture<'a, Done>) {
        let many_empty = self.many.as_ref().is_none_or(FuturesUnordered::is_empty);
        if self.solo.is_none() && many_empty {
            self.solo = Some(attempt);
            return;
        }
        let many = self.many.get_or_insert_with(FuturesUnordered::new);
        if let Some(solo) = self.solo.take() {
            many.push(solo);
        }
        many.push(attempt);
    }

    /// The next attempt to end; `None` when none is in flight.
    pub(super) fn next(&mut self) -> impl Future<Output = Option<Done>> + use<'_, 'a> {
        poll_fn(|cx| self.poll_next(cx))
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Done>> {
        if let Some(solo) = &mut self.solo {
            let done = std::task::ready!(solo.as_mut().poll(cx));
            self.solo = None;
            return Poll::Ready(Some(done));
        }
        match &mut self.many {
            Some(many) => many.poll_next_unpin(cx),
            None => Poll::Ready(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::classify::AttemptError;

    fn done(seq: usize) -> Done {
        Done {
            seq,
            hedge: false,
            turns_dropped: 0,
            result: Err(AttemptError::Timeout),
            ended: tokio::time::Instant::now(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_attempt_is_polled_on_its_own_and_a_second_joins_it() {
        use std::time::Duration;
        let mut in_flight = InFlight::new();
        assert!(in_flight.next().await.is_none(), "nothing in flight");
        // A slow first attempt, then a fast one beside it: the fast one ends first, then the
        // first, moved into the set mid-flight, still ends.
        in_flight.push(Box::pin(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            done(0)
        }));
        assert!(in_flight.many.is_none(), "one attempt needs no set");
        // Polled once on its own (registers its timer with this task's waker).
        assert!(futures_util::poll!(in_flight.next()).is_pending());
        in_flight.push(Box::pin(async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            done(1)
        }));
        assert!(in_flight.solo.is_none());
        assert_eq!(in_flight.next().await.map(|d| d.seq), Some(1));
        assert_eq!(in_flight.next().await.map(|d| d.seq), Some(0));
        assert!(in_flight.next().await.is_none());
        // Alone again: the next attempt is on its own, the set kept (empty) beside it.
        in_flight.push(Box::pin(async { done(2) }));
        assert!(in_flight.solo.is_some());
        assert_eq!(in_flight.next().await.map(|d| d.seq), Some(2));
        assert!(in_flight.next().await.is_none());
    }
}
