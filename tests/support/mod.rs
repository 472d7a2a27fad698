//! What the process-level tests of this directory share: child processes that die with the
//! test, free ports, and waiting for a listener (all from `memfleet-testkit`), plus the
//! `memfleet` executable this test binary was built with.

#![allow(dead_code, unused_imports)]

pub mod certs;
pub mod results;

pub use memfleet_testkit::{connect, free_port, memcached, Killed};

/// `memfleet server` on a free 127.0.0.1 port with `extra` arguments (stderr discarded).
pub fn memfleet_server(extra: &[&str]) -> (Killed, u16) {
    memfleet_testkit::memfleet_server(env!("CARGO_BIN_EXE_memfleet"), extra)
}
