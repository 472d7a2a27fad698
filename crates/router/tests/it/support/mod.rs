//! What the router's tests share: real `memfleet server` backends.

#![allow(dead_code)]

use memfleet_server::{Server, Settings};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A one-thread, 16 MiB server on `port` (0: the kernel picks).
pub fn server(port: u16) -> anyhow::Result<Server> {
    Server::start(Settings::single_worker(port, 16 << 20))
}

/// A server on a port the kernel picks (no window in which another test can take it).
pub fn backend() -> (Server, u16) {
    let s = server(0).expect("backend starts");
    let port = s.local_addr().port();
    (s, port)
}

pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A text-protocol connection to a server or a router (the test kit's).
pub use memfleet_testkit::TextConn as Client;

pub fn list(ports: &[u16]) -> String {
    ports
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
