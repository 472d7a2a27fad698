//! memfleet-router's integration tests: `memfleet router` through real sockets: routes,
//! reloads, discovery, workers, stats. One test binary (linked once), a module per subject,
//! each run in a process of its own by `scripts/test-binaries` (`cargo test -p memfleet-router
//! --test it MODULE::` runs one).

mod support;

mod dns_discovery;
mod reconnect;
mod router;
mod routes;
mod stats;
mod warmup;
mod workers;
