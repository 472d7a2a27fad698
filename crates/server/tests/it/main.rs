//! memfleet-server's integration tests: `memfleet server` driven through real sockets: every
//! protocol, connection and stats behaviour a client sees. One test binary (linked once), a
//! module per subject, each run in a process of its own by `scripts/test-binaries` (`cargo test
//! -p memfleet-server --test it MODULE::` runs one).

mod common;

mod binary;
mod commands;
mod connections;
mod dumps;
mod flash;
mod hostile;
mod leases;
mod meta;
mod meta_access;
mod meta_newer;
mod sasl;
mod stats_names;
mod text_newer;
mod udp;
mod warm_restart;
