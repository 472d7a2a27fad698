//! memfleet-storage's integration tests: the engine through its public API: operations, leases,
//! eviction, memory, flash, warm restarts, a model check. One test binary (linked once), a
//! module per subject, each run in a process of its own by `scripts/test-binaries` (`cargo test
//! -p memfleet-storage --test it MODULE::` runs one).
//!
//! The loom model checks stay a binary of their own (`tests/loom_protocol.rs`): they build only
//! with `--cfg loom`.

mod support;

mod access;
mod churn;
mod concurrency;
mod dump;
mod eviction_smoke;
mod flash;
mod flash_dump;
mod leases;
mod memory;
mod model;
mod operations;
mod warm_restart;
