//! memfleet-client's integration tests: the client library against real servers: routes, auth,
//! the delete spool, UDP. One test binary (linked once), a module per subject, each run in a
//! process of its own by `scripts/test-binaries` (`cargo test -p memfleet-client --test it
//! MODULE::` runs one).

mod auth;
mod client;
mod spool;
mod udp;
