//! memfleet-bench: memfleet's benchmarking tools.
//!
//! - [`sim`], behind `memfleet sim`: the in-process cache simulator. It replays
//!   recorded traces or seeded synthetic workloads through cache models and
//!   reports miss ratios; it does not depend on the storage engine (the
//!   Segcache adapter is handed to [`sim::run`] by the caller).
//! - [`load`], behind `memfleet bench`: the network load generator that
//!   compares memcached-protocol servers side by side (ops/s, latency
//!   percentiles, server CPU time per operation).
//! - [`results`]: the JSON files both leave in `--out DIR` for scripts, and [`plot`]: the
//!   PNG figures beside them.

pub mod load;
pub mod plot;
pub mod results;
pub mod sim;
