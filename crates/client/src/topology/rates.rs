//! A pool's request rates (`rates = { gets = N, sets = N, deletes = N }`, per second, per
//! router): one GCRA cell per kind (the generic cell rate algorithm: a theoretical arrival
//! time in one atomic word, no lock), a burst of 1/100 of a second's requests, and a count
//! of what was refused.

use crate::conn_stats::Stamp;
use crate::route::RequestClass;
use memfleet_routing::PoolRates;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One kind's rate: requests are let through at most `rate` a second (with a burst of
/// 1/100 of that, at least 1).
struct Cell {
    /// Nanoseconds between two requests at the rate.
    interval: u64,
    /// How far ahead of now the theoretical arrival time may run: the burst.
    tolerance: u64,
    /// The theoretical arrival time of the next request, ns on the monotonic clock
    /// ([`Stamp`]).
    tat: AtomicU64,
    /// Requests refused.
    refused: AtomicU64,
    /// The `SERVER_ERROR` line that answers a refused request (built once, shared by every
    /// refusal).
    line: Arc<[u8]>,
}

impl Cell {
    fn new(pool: &str, kind: &str, rate: u32) -> Cell {
        let interval = 1_000_000_000 / u64::from(rate.max(1));
        let burst = u64::from((rate / 100).max(1));
        Cell {
            interval,
            tolerance: interval * (burst - 1),
            tat: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            line: format!("SERVER_ERROR rate limit: pool {pool} takes {rate} {kind} a second\r\n")
                .into_bytes()
                .into(),
        }
    }

    /// Whether one more request fits at `now`.
    fn admit(&self, now: Stamp) -> bool {
        let now = now.nanos();
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let next = tat.max(now);
            if next - now > self.tolerance {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            match self.tat.compare_exchange_weak(
                tat,
                next + self.interval,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }
}

/// A pool's rates, as configured; `None` from [`RateLimits::new`] when it has none.
pub struct RateLimits {
    /// gets, sets, deletes.
    cells: [Option<Cell>; 3],
}

/// The kinds, in [`RateLimits`]'s order.
pub const KINDS: [&str; 3] = ["gets", "sets", "deletes"];

impl RateLimits {
    /// The limits of `rates`, or `None` when no rate is set.
    pub fn new(pool: &str, rates: &PoolRates) -> Option<RateLimits> {
        let rates = [rates.gets, rates.sets, rates.deletes];
        let cells: [Option<Cell>; 3] =
            std::array::from_fn(|i| rates[i].map(|rate| Cell::new(pool, KINDS[i], rate)));
        cells
            .iter()
            .any(Option::is_some)
            .then_some(RateLimits { cells })
    }

    /// `None` when a request of `class` may go now; else the `SERVER_ERROR` line that
    /// answers it, naming the limit (and it is counted).
    pub fn refusal(&self, class: RequestClass) -> Option<Vec<u8>> {
        self.refused_line(class, Stamp::now())
            .map(|line| line.to_vec())
    }

    /// [`RateLimits::refusal`] for a request that arrived at `now` (a router reads the
    /// clock once per read, not per request), without a copy: the line is shared.
    pub fn refused_line(&self, class: RequestClass, now: Stamp) -> Option<Arc<[u8]>> {
        let i = match class {
            RequestClass::Get => 0,
            RequestClass::Set => 1,
            RequestClass::Delete => 2,
            RequestClass::Other => return None,
        };
        let cell = self.cells[i].as_ref()?;
        if cell.admit(now) {
            return None;
        }
        Some(cell.line.clone())
    }

    /// (kind, requests refused) of each kind with a rate.
    pub fn refused(&self) -> Vec<(&'static str, u64)> {
        KINDS
            .iter()
            .zip(&self.cells)
            .filter_map(|(k, c)| Some((*k, c.as_ref()?.refused.load(Ordering::Relaxed))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_lets_its_rate_through_and_refuses_the_rest() {
        let limits = RateLimits::new(
            "p",
            &PoolRates {
                gets: Some(1000),
                sets: None,
                deletes: None,
            },
        )
        .unwrap();
        // A burst of 10 (1/100 of a second's), then the rate.
        let passed = (0..100)
            .filter(|_| limits.refusal(RequestClass::Get).is_none())
            .count();
        assert!((10..=12).contains(&passed), "{passed}");
        let refusal = limits.refusal(RequestClass::Get).unwrap();
        assert_eq!(
            refusal,
            b"SERVER_ERROR rate limit: pool p takes 1000 gets a second\r\n"
        );
        assert!(limits.refusal(RequestClass::Set).is_none(), "no set rate");
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            limits.refusal(RequestClass::Get).is_none(),
            "the rate refills"
        );
        assert_eq!(limits.refused()[0].0, "gets");
        assert!(limits.refused()[0].1 >= 89);
        assert!(RateLimits::new("p", &PoolRates::default()).is_none());
    }
}
