//! Latency per route a listener serves (a pool or a route, by name): from the read that
//! brought a client's request to the write that sent its reply, what the client sees.
//!
//! A client connection's writer counts its own replies in a local histogram
//! (`memfleet_client::conn_stats::Measured`, no atomics) and adds it here once a second or
//! every [`FLUSH_EVERY`] replies, and when the client leaves: the lock below is taken per
//! flush, never per request. The clock is read once per read and once per write.

use memfleet_client::conn_stats::{Measured, Stamp};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Replies a connection counts before it adds them up here.
pub(crate) const FLUSH_EVERY: u64 = 4096;
/// The longest a connection keeps its counts, µs.
const FLUSH_AFTER_US: u64 = 1_000_000;

/// Every route's latencies so far.
static ROUTES: Mutex<BTreeMap<String, Measured>> = Mutex::new(BTreeMap::new());

/// One client connection's counts, not yet added up.
pub(crate) struct Local {
    counts: Measured,
    /// Replies in `counts`.
    replies: u64,
    since: Stamp,
}

impl Local {
    pub(crate) fn new() -> Local {
        Local {
            counts: Measured::default(),
            replies: 0,
            since: Stamp::now(),
        }
    }

    /// Counts `n` replies written at `now` for requests read at `read`.
    pub(crate) fn record(&mut self, read: Stamp, now: Stamp, n: u32) {
        self.counts.record_n(now.micros_since(read), u64::from(n));
        self.replies += u64::from(n);
    }

    /// Whether it is time to add the counts up (at `now`).
    pub(crate) fn due(&self, now: Stamp) -> bool {
        self.replies >= FLUSH_EVERY || now.micros_since(self.since) >= FLUSH_AFTER_US
    }

    /// Adds the counts to `route`'s and starts again.
    pub(crate) fn flush(&mut self, route: Option<String>, now: Stamp) {
        self.since = now;
        if self.replies == 0 {
            return;
        }
        self.replies = 0;
        let counts = std::mem::take(&mut self.counts);
        let Some(route) = route else {
            return;
        };
        if let Ok(mut routes) = ROUTES.lock() {
            routes.entry(route).or_default().add(&counts);
        }
    }
}

/// Every route's latencies so far.
pub(crate) fn snapshot() -> Vec<(String, Measured)> {
    ROUTES
        .lock()
        .map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}
