//! Futures boxed where they are made.
//!
//! `Box::pin(make())` builds the future on the stack, then allocates and copies it into the
//! box: all of it, for a future is as large as its largest state, though a new one holds only
//! its arguments. A client API request's future is ~3.5 KB (a chat completion's, to its last
//! await), copied once a request, with a stack frame of that size written for it. Allocated
//! first, the box is the place the future is made in, and nothing is copied.

use std::future::Future;
use std::pin::Pin;

/// The future `make` returns, made in its box.
#[inline(always)]
pub fn pinned<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_future_made_in_its_box_runs_as_made() {
        let words = String::from("made in place");
        let made = super::pinned(|| async move {
            tokio::task::yield_now().await;
            words.split(' ').count()
        });
        assert_eq!(made.await, 3);
    }
}
