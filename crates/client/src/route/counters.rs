//! The counters of routes that have something to count (gutter, warm-up, replicated),
//! kept across reloads by route name.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the routes that have something to count; kept across reloads by route name.
#[derive(Default, Debug)]
pub struct RouteCounters {
    /// gutter: requests the main route failed and the gutter took.
    pub gutter_requests: AtomicU64,
    /// gutter: gets the gutter took.
    pub gutter_gets: AtomicU64,
    /// gutter: gets the gutter answered with a value.
    pub gutter_hits: AtomicU64,
    /// warmup: gets the cold cluster answered with a value.
    pub cold_hits: AtomicU64,
    /// warmup: gets the cold cluster missed.
    pub cold_misses: AtomicU64,
    /// warmup: misses filled from the warm cluster (add accepted).
    pub warm_fills: AtomicU64,
    /// warmup: fills the cold cluster refused (a racing delete's hold-off, or a racing fill).
    pub fills_refused: AtomicU64,
    /// replicated: reads that failed over to another replica.
    pub replica_failovers: AtomicU64,
    /// failover: requests sent on to a next child.
    pub failovers: AtomicU64,
    /// failover: failovers the failover limit refused.
    pub failovers_limited: AtomicU64,
    /// shadow: requests copied to the shadow.
    pub shadow_requests: AtomicU64,
    /// shadow: copies dropped because `max_pending` were in flight.
    pub shadow_dropped: AtomicU64,
    /// shadow: gets whose main and shadow replies were compared.
    pub shadow_compared: AtomicU64,
    /// shadow: compared gets whose replies differed.
    pub shadow_mismatches: AtomicU64,
    /// The counters the route's type uses (set when it is built).
    pub(super) shown: std::sync::Mutex<&'static [&'static str]>,
}

/// Every [`RouteCounters`] field: (name, what it counts), for `stats` and `/metrics`.
pub const COUNTERS: [(&str, &str); 14] = [
    (
        "gutter_requests",
        "requests the main route failed and the gutter took",
    ),
    (
        "gutter_gets",
        "gets the main route failed and the gutter took",
    ),
    ("gutter_hits", "gets the gutter answered with a value"),
    (
        "cold_hits",
        "warm-up gets the cold cluster answered with a value",
    ),
    ("cold_misses", "warm-up gets the cold cluster missed"),
    (
        "warm_fills",
        "cold-cluster misses filled from the warm cluster",
    ),
    (
        "fills_refused",
        "warm fills the cold cluster refused (hold-off or a racing fill)",
    ),
    (
        "replica_failovers",
        "replicated reads that failed over to another replica",
    ),
    (
        "failovers",
        "requests a failover route sent on to a next child",
    ),
    (
        "failovers_limited",
        "failovers a failover route's failover_limit refused",
    ),
    ("shadow_requests", "requests copied to the shadow"),
    (
        "shadow_dropped",
        "shadow copies dropped: max_pending were in flight",
    ),
    (
        "shadow_compared",
        "gets whose main and shadow replies were compared",
    ),
    ("shadow_mismatches", "compared gets whose replies differed"),
];

impl RouteCounters {
    /// (name, help) of the counters its route's type uses.
    pub fn shown(&self) -> Vec<(&'static str, &'static str)> {
        let shown = *self.shown.lock().unwrap_or_else(|e| e.into_inner());
        COUNTERS
            .into_iter()
            .filter(|(n, _)| shown.contains(n))
            .collect()
    }

    /// The counter called `name` (one of [`COUNTERS`]).
    pub fn get(&self, name: &str) -> u64 {
        let c = match name {
            "gutter_requests" => &self.gutter_requests,
            "gutter_gets" => &self.gutter_gets,
            "gutter_hits" => &self.gutter_hits,
            "cold_hits" => &self.cold_hits,
            "cold_misses" => &self.cold_misses,
            "warm_fills" => &self.warm_fills,
            "fills_refused" => &self.fills_refused,
            "failovers" => &self.failovers,
            "failovers_limited" => &self.failovers_limited,
            "shadow_requests" => &self.shadow_requests,
            "shadow_dropped" => &self.shadow_dropped,
            "shadow_compared" => &self.shadow_compared,
            "shadow_mismatches" => &self.shadow_mismatches,
            _ => &self.replica_failovers,
        };
        c.load(Ordering::Relaxed)
    }
}
