//! memfleet-bench: memfleet's experiments.
//!
//! - [`load`], behind `memfleet bench <experiment>`: the load experiment that compares
//!   memcached-protocol servers side by side (ops/s, latency percentiles, server CPU time
//!   per operation), and the other experiments, each starting what it needs, each a
//!   subcommand with its own flags ([`load::cli`]).
//!
//! Not here: the load generator they all drive (workload, connections, reply checks, CPU
//! time, the report table: `memfleet-loadgen`), starting servers, routers, PostgreSQL and
//! the invalidator as processes (`memfleet-testkit`), the floor server and proxy
//! (`memfleet floor`), the in-process cache simulator behind `memfleet sim` and the
//! workloads both share (`memfleet-sim`), and the JSON and PNG files left in `--out DIR`
//! (`memfleet-results`).

pub mod load;
