//! Sliding-window flow control (Facebook §3.1, "incast congestion"): a cap on the requests a
//! client has outstanding across all servers. Like TCP's congestion window it grows slowly
//! while requests succeed (by one for every window's worth of successes) and halves when
//! one times out, so a client that fans out to many servers backs off as soon as replies
//! start to be lost in queues, and ramps up again when they are not.
//!
//! A request waits for a slot before it is sent; the wait is where the paper's trade-off
//! lives (a too-small window delays requests, a too-large one lets them time out).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use tokio::sync::Notify;

/// The window.
#[derive(Debug)]
pub struct Window {
    state: Mutex<State>,
    changed: Notify,
    outstanding: AtomicUsize,
}

#[derive(Debug)]
struct State {
    /// Current size (requests allowed in flight).
    size: usize,
    /// Successes since the size last grew.
    credit: usize,
    min: usize,
    max: usize,
}

/// A slot in the window: the request it stands for is in flight until it is dropped or
/// settled with [`Slot::done`].
#[must_use = "a slot holds a place in the window until it is dropped"]
pub struct Slot<'a> {
    window: &'a Window,
}

/// How a request ended, for the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestOutcome {
    /// A reply came (whatever it said).
    Replied,
    /// No reply in time: the sign of congestion.
    TimedOut,
    /// Failed otherwise (connection refused, server marked down): says nothing about
    /// congestion, so the window does not move.
    Failed,
}

impl Window {
    /// A window starting at `initial` requests, kept within `min..=max`.
    pub fn new(initial: usize, min: usize, max: usize) -> Window {
        let min = min.max(1);
        let max = max.max(min);
        Window {
            state: Mutex::new(State {
                size: initial.clamp(min, max),
                credit: 0,
                min,
                max,
            }),
            changed: Notify::new(),
            outstanding: AtomicUsize::new(0),
        }
    }

    /// Its size now.
    pub fn size(&self) -> usize {
        self.lock().size
    }

    /// Requests in flight now.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a free slot.
    pub async fn acquire(&self) -> Slot<'_> {
        loop {
            // Register interest before checking, so a release between the check and the
            // wait is not missed.
            let notified = self.changed.notified();
            {
                let state = self.lock();
                let now = self.outstanding.load(Ordering::Acquire);
                if now < state.size {
                    self.outstanding.fetch_add(1, Ordering::AcqRel);
                    return Slot { window: self };
                }
            }
            notified.await;
        }
    }

    fn settle(&self, outcome: RequestOutcome) {
        let mut state = self.lock();
        match outcome {
            RequestOutcome::Replied => {
                state.credit += 1;
                if state.credit >= state.size {
                    state.credit = 0;
                    state.size = (state.size + 1).min(state.max);
                }
            }
            RequestOutcome::TimedOut => {
                state.credit = 0;
                state.size = (state.size / 2).max(state.min);
            }
            RequestOutcome::Failed => {}
        }
    }

    fn release(&self) {
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }
}

impl Slot<'_> {
    /// Frees the slot and tells the window how the request ended.
    pub fn done(self, outcome: RequestOutcome) {
        self.window.settle(outcome);
        // Dropping releases.
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.window.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn grows_by_one_per_window_of_successes_and_halves_on_timeouts() {
        let w = Window::new(4, 1, 100);
        for _ in 0..4 {
            w.acquire().await.done(RequestOutcome::Replied);
        }
        assert_eq!(w.size(), 5);
        for _ in 0..5 {
            w.acquire().await.done(RequestOutcome::Replied);
        }
        assert_eq!(w.size(), 6);
        w.acquire().await.done(RequestOutcome::TimedOut);
        assert_eq!(w.size(), 3);
        w.acquire().await.done(RequestOutcome::Failed);
        assert_eq!(w.size(), 3);
        for _ in 0..5 {
            w.acquire().await.done(RequestOutcome::TimedOut);
        }
        assert_eq!(w.size(), 1, "never below the minimum");
        assert_eq!(w.outstanding(), 0);
    }

    #[tokio::test]
    async fn a_full_window_makes_requests_wait() {
        let w = std::sync::Arc::new(Window::new(2, 1, 2));
        let a = w.acquire().await;
        let b = w.acquire().await;
        assert_eq!(w.outstanding(), 2);
        let waiter = {
            let w = w.clone();
            tokio::spawn(async move {
                let _c = w.acquire().await;
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "a third request got in");
        drop(a);
        waiter.await.unwrap();
        drop(b);
        assert_eq!(w.outstanding(), 0);
    }
}
