//! memfleet-loadgen: the memcached-protocol load generator every `memfleet bench`
//! experiment drives, and the requests the floor server answers.
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `workload` | keys `key:<n>`, their popularity, sizes, TTLs and values (a pure function of `n`, so every reply can be checked) |
//! | `client` | the closed loop: N pipelined connections on one current-thread runtime |
//! | `open_loop` | the open loop (`--rate`): a Poisson schedule per connection |
//! | `conn` | one connection: its reply buffer, counters and latencies |
//! | `replay` | a trace replayed look-aside against one live server, counted as `memfleet sim` counts |
//! | `reply` | every reply delimited and verified |
//! | `cpu` | server and client CPU time from /proc, pinning |
//! | `report` | rows, medians of repeats, the side-by-side table, latency CDFs, the JSON of `--out` |
//! | `server_stats` | a server's `stats` as numbers |
//! | `target` | the servers under test: `--spawn` command lines and `--target` addresses |
//!
//! Not here: the experiments (`memfleet-bench`), starting and stopping
//! processes (`memfleet-testkit`), trace and synthetic workloads (`memfleet-sim`).

pub mod client;
pub mod conn;
pub mod cpu;
pub mod open_loop;
pub mod replay;
pub mod reply;
pub mod report;
pub mod server_stats;
pub mod target;
pub mod workload;
