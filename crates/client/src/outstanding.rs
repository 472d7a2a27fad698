//! A server's cap on requests in flight (a pool's `max_outstanding`, mcrouter's name), kept
//! per connection so that no counter is shared between the router's workers.
//!
//! Each connection of a server is used by one worker's clients only and its task runs on
//! that worker (`lanes.rs`), so the cap is divided: each of a server's `n` connections
//! (`server_connections` per worker) takes `limit / n` requests in flight (at least one)
//! and `queue / n` more waiting (rounded up, so a queue set is never 0 on a connection). A
//! request over both is refused at once. The counters are relaxed atomics on the
//! connection's own cache line, touched by its worker only: one `fetch_add` and one
//! `fetch_sub` per request, none when the pool sets no cap.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// A pool's cap, per server and router, as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutstandingLimit {
    /// Requests in flight to the server.
    pub limit: usize,
    /// Requests waiting for a place.
    pub queue: usize,
}

/// One connection's share of its server's cap and its counts.
#[repr(align(64))]
#[derive(Debug)]
pub struct Gate {
    /// In flight on the connection (sent and not answered, or taken off its queue).
    pub(crate) in_flight: usize,
    /// In flight and waiting together.
    most: usize,
    /// Requests sent to the connection and not answered yet (in flight or waiting).
    count: AtomicUsize,
    /// Requests that had to wait.
    waited: AtomicU64,
    /// Requests refused: the connection's share of the queue was full.
    refused: AtomicU64,
}

/// A request's place at a [`Gate`]: given back when it is dropped (answered, failed, or
/// given up while it waited).
#[derive(Debug)]
pub struct Place(Arc<Gate>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Gate {
    /// The share of `limit` of one of `connections` connections.
    pub fn new(limit: OutstandingLimit, connections: usize) -> Arc<Gate> {
        let n = connections.max(1);
        let in_flight = (limit.limit / n).max(1);
        Arc::new(Gate {
            in_flight,
            most: in_flight + limit.queue.div_ceil(n),
            count: AtomicUsize::new(0),
            waited: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// A place for one more request, or `None` (counted) when in flight and waiting are full.
    pub fn enter(self: &Arc<Gate>) -> Option<Place> {
        let before = self.count.fetch_add(1, Ordering::Relaxed);
        if before >= self.most {
            self.count.fetch_sub(1, Ordering::Relaxed);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if before >= self.in_flight {
            self.waited.fetch_add(1, Ordering::Relaxed);
        }
        Some(Place(self.clone()))
    }

    /// (in flight or waiting now, waited so far, refused so far).
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.count.load(Ordering::Relaxed) as u64,
            self.waited.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_admits_its_share_then_queues_then_refuses() {
        let gate = Gate::new(OutstandingLimit { limit: 4, queue: 2 }, 2);
        assert_eq!((gate.in_flight, gate.most), (2, 3));
        let places: Vec<Place> = (0..3).map(|_| gate.enter().expect("a place")).collect();
        assert!(gate.enter().is_none());
        assert_eq!(gate.counts(), (3, 1, 1));
        drop(places);
        assert_eq!(gate.counts(), (0, 1, 1));
        // A share is never 0: one in flight per connection at least, no queue when 0.
        let gate = Gate::new(OutstandingLimit { limit: 1, queue: 0 }, 4);
        assert_eq!((gate.in_flight, gate.most), (1, 1));
    }
}
