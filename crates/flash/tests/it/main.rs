//! memfleet-flash's integration tests: the flash tier's files and io_uring reads. One test
//! binary (linked once), a module per subject, each run in a process of its own by
//! `scripts/test-binaries` (`cargo test -p memfleet-flash --test it MODULE::` runs one).

mod files;
mod uring;
