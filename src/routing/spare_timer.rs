//! Attempts' timers, kept between attempts on a thread and moved later for the next: a
//! stream's first-token timer, and a whole answer's attempt deadline.
//!
//! tokio wakes its own driver (a `write` to its eventfd, then an `epoll_wait` that returns at
//! once) whenever a timer is set earlier than the time the driver last planned to wake. A
//! stream's first-token timer (10 s by default) is such a timer on a server thread whose other
//! deadlines are its connections' idle ones (120 s): 0.58 `write`s a stream at 20 streams a
//! second (`bench/syscalls STREAM=1 Q=20`). A timer moved later, though, stays where it is in
//! tokio's wheel until its old deadline comes, and is then put back at the new one without
//! waking anything. So a timer that did its work (the first token came first) is kept, a few
//! a thread, and the next stream moves it later: while streams keep coming, the thread wakes
//! once a first-token timeout for it, not its driver once a stream.
//!
//! A whole answer's attempt deadline is kept the same way. Setting a timer in tokio's wheel
//! and taking it out again when the answer came first cost ~450 instructions an answer
//! (`bench/instructions`, function by function); handing a kept one out, moving it later and
//! keeping it again, ~250. Each [`Kind`] is kept apart: its deadlines are the same time ahead
//! of when it is set (the first-token timeout, the attempt timeout), so a kept timer of its
//! kind is moved later, where one of the other kind could be moved earlier (set anew in the
//! wheel).
//!
//! A kept timer holds the waker of the task that polled it last, so that task's memory is kept
//! until the timer is used again or fires (and when it fires while kept, that task is polled
//! once for nothing): at most [`KEPT`] a thread of each kind.

use std::cell::RefCell;
use std::pin::Pin;

use tokio::runtime::{Handle, Id};
use tokio::time::{Instant, Sleep};

/// The most timers of one kind kept on one thread (attempts awaited at once).
const KEPT: usize = 4;

/// What a timer is for (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A stream's first token.
    FirstToken,
    /// A whole answer's attempt.
    Attempt,
}

/// The timers kept on this thread, by [`Kind`], and the runtime they belong to (a thread may
/// run one runtime after another, as test threads do: a timer is not used outside its own).
#[derive(Default)]
struct Kept {
    runtime: Option<Id>,
    timers: [Vec<Pin<Box<Sleep>>>; 2],
}

thread_local! {
    static KEPT_TIMERS: RefCell<Kept> = RefCell::default();
}

/// An attempt's timer, its kind, and the runtime it belongs to (looked up once, when it is
/// handed out).
pub(super) struct Timer {
    pub(super) sleep: Pin<Box<Sleep>>,
    kind: Kind,
    runtime: Option<Id>,
}

/// A timer of `kind` that fires at `deadline`: one kept on this thread, moved there, or a new
/// one.
pub(super) fn timer(kind: Kind, deadline: Instant) -> Timer {
    let runtime = Handle::try_current().ok().map(|h| h.id());
    let kept = KEPT_TIMERS.with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept.runtime != runtime {
            kept.timers.iter_mut().for_each(Vec::clear);
            kept.runtime = runtime;
        }
        kept.timers[kind as usize].pop()
    });
    let sleep = match kept {
        Some(mut sleep) => {
            sleep.as_mut().reset(deadline);
            sleep
        }
        None => Box::pin(tokio::time::sleep_until(deadline)),
    };
    Timer {
        sleep,
        kind,
        runtime,
    }
}

/// Keep `timer` for the next [`timer`] on this thread, unless it has fired (moving it later
/// would set it anew), enough are kept, or this thread's timers are another runtime's (a task
/// of a multi-threaded runtime may end on another thread than it began).
pub(super) fn keep(timer: Timer) {
    if timer.sleep.is_elapsed() {
        return;
    }
    KEPT_TIMERS.with(|kept| {
        let kept = &mut *kept.borrow_mut();
        let timers = &mut kept.timers[timer.kind as usize];
        if kept.runtime == timer.runtime && timers.len() < KEPT {
            timers.push(timer.sleep);
        }
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Where `timer`'s `Sleep` lies: the same place when a kept timer is handed out again.
    fn place(timer: &Timer) -> *const Sleep {
        std::ptr::from_ref::<Sleep>(&timer.sleep)
    }

    /// How many timers of `kind` this thread keeps.
    fn kept(kind: Kind) -> usize {
        KEPT_TIMERS.with(|k| k.borrow().timers[kind as usize].len())
    }

    /// A kept timer is the next one handed out, moved to its new deadline: it fires then,
    /// not at the deadline it was kept with.
    #[tokio::test(start_paused = true)]
    async fn a_kept_timer_is_moved_later_for_the_next_stream() {
        let start = Instant::now();
        let first = timer(Kind::FirstToken, start + Duration::from_secs(10));
        let at = place(&first);
        keep(first);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let mut second = timer(Kind::FirstToken, start + Duration::from_secs(15));
        assert_eq!(place(&second), at, "the kept timer");
        assert_eq!(second.sleep.deadline(), start + Duration::from_secs(15));
        let fired = tokio::select! {
            () = second.sleep.as_mut() => false,
            () = tokio::time::sleep_until(start + Duration::from_secs(12)) => true,
        };
        assert!(fired, "the timer fired at the deadline it was kept with");
        second.sleep.as_mut().await;
        assert_eq!(Instant::now(), start + Duration::from_secs(15));
        // A timer that fired is not kept.
        keep(second);
        assert_eq!((kept(Kind::FirstToken), kept(Kind::Attempt)), (0, 0));
    }

    /// A kept timer goes only to a timer of its own kind: one of the other kind would be moved
    /// earlier (set anew in tokio's wheel).
    #[tokio::test(start_paused = true)]
    async fn each_kind_is_kept_apart() {
        let start = Instant::now();
        let first_token = timer(Kind::FirstToken, start + Duration::from_secs(10));
        let at = place(&first_token);
        keep(first_token);
        let attempt = timer(Kind::Attempt, start + Duration::from_secs(30));
        assert_ne!(place(&attempt), at, "a new one");
        keep(attempt);
        let again = timer(Kind::FirstToken, start + Duration::from_secs(11));
        assert_eq!(place(&again), at, "the kept one");
        assert_eq!(kept(Kind::Attempt), 1);
    }

    /// No more than [`KEPT`] are kept.
    #[tokio::test(start_paused = true)]
    async fn a_few_timers_are_kept() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let timers: Vec<_> = (0..KEPT + 2)
            .map(|_| timer(Kind::Attempt, deadline))
            .collect();
        timers.into_iter().for_each(keep);
        assert_eq!(kept(Kind::Attempt), KEPT);
    }

    /// A timer kept under one runtime is not used under the next one on the same thread (its
    /// driver is gone): a new one is made, and fires.
    #[test]
    fn a_timer_is_not_used_outside_its_runtime() {
        let paused = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("a runtime")
        };
        paused().block_on(async {
            keep(timer(
                Kind::FirstToken,
                Instant::now() + Duration::from_secs(10),
            ));
            assert_eq!(kept(Kind::FirstToken), 1);
        });
        // Moving the first runtime's timer would fail (its driver is shut down), and a timer
        // that failed panics when polled.
        paused().block_on(async {
            let start = Instant::now();
            timer(Kind::FirstToken, start + Duration::from_secs(10))
                .sleep
                .await;
            assert_eq!(Instant::now(), start + Duration::from_secs(10));
        });
    }
}
