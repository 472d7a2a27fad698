//! What the process-level tests of this directory share: child processes that die with the
//! test, free ports, and waiting for a listener (all from `memfleet-testkit`), plus the
//! `memfleet` executable this test binary was built with.

#![allow(dead_code, unused_imports)]

pub mod certs;
pub mod results;

pub use memfleet_testkit::{connect, free_port, memcached, Killed};

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// `memfleet server` on a free 127.0.0.1 port with `extra` arguments (stderr discarded).
pub fn memfleet_server(extra: &[&str]) -> (Killed, u16) {
    memfleet_testkit::memfleet_server(env!("CARGO_BIN_EXE_memfleet"), extra)
}

/// Waits until 127.0.0.1:`port` answers `version` (a server, or a router, which answers it
/// itself); fails the test after 10 s.
pub fn until_serving(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let mut s = BufReader::new(s);
            let mut line = String::new();
            if s.get_mut().write_all(b"version\r\n").is_ok()
                && s.read_line(&mut line).is_ok()
                && line.starts_with("VERSION ")
            {
                return;
            }
        }
        assert!(Instant::now() < deadline, "nothing serves on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
