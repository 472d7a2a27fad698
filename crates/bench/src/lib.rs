//! memfleet-bench: memfleet's network load generator and its experiments.
//!
//! - [`load`], behind `memfleet bench`: the load generator that compares memcached-protocol
//!   servers side by side (ops/s, latency percentiles, server CPU time per operation), and
//!   the scenarios built on it.
//!
//! Not here: the in-process cache simulator behind `memfleet sim` and the workloads both
//! share (trace readers, synthetic generator, size distributions, TTL mixes: the
//! `memfleet-sim` crate), and the JSON and PNG files both leave in `--out DIR`
//! (`memfleet-results`).

pub mod load;
