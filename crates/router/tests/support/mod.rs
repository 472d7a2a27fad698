//! What the router's tests share: real `memfleet server` backends.

#![allow(dead_code)]

use memfleet_server::{Server, Settings};

/// A one-thread, 16 MiB server on `port` (0: the kernel picks).
pub fn server(port: u16) -> anyhow::Result<Server> {
    Server::start(Settings {
        port,
        threads: 1,
        memory_bytes: 16 << 20,
        ..Settings::default()
    })
}

/// A server on a port the kernel picks (no window in which another test can take it).
pub fn backend() -> (Server, u16) {
    let s = server(0).expect("backend starts");
    let port = s.local_addr().port();
    (s, port)
}
