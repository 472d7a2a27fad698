//! Latency per route a listener serves (a pool or a route, by name): from the read that
//! brought a client's request to the write that sent its reply, what the client sees.
//!
//! A client connection's writer counts its own replies in a local histogram
//! (`memfleet_client::conn_stats::Measured`, no atomics) and adds it here once a second or
//! every [`FLUSH_EVERY`] replies, and when the client leaves: the lock below is taken per
//! flush, never per request. The clock is read once per read and once per write.

use memfleet_client::conn_stats::Measured;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Replies a connection counts before it adds them up here.
pub(crate) const FLUSH_EVERY: u64 = 4096;
/// The longest a connection keeps its counts.
const FLUSH_AFTER: Duration = Duration::from_secs(1);

/// Every route's latencies so far.
static ROUTES: Mutex<BTreeMap<String, Measured>> = Mutex::new(BTreeMap::new());

/// One client connection's counts, not yet added up.
pub(crate) struct Local {
    counts: Measured,
    since: Instant,
}

impl Local {
    pub(crate) fn new() -> Local {
        Local {
            counts: Measured::default(),
            since: Instant::now(),
        }
    }

    /// Counts a reply written at `now` for a request read at `read`.
    pub(crate) fn record(&mut self, read: Instant, now: Instant) {
        self.counts
            .record(now.saturating_duration_since(read).as_micros() as u64);
    }

    /// Whether it is time to add the counts up (at `now`).
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.counts.count() >= FLUSH_EVERY
            || now.saturating_duration_since(self.since) >= FLUSH_AFTER
    }

    /// Adds the counts to `route`'s and starts again.
    pub(crate) fn flush(&mut self, route: Option<String>, now: Instant) {
        self.since = now;
        if self.counts.count() == 0 {
            return;
        }
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
