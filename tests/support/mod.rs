//! What the process-level tests of this directory share: child processes that die with the
//! test, free ports, and waiting for a listener.

#![allow(dead_code)]

pub mod certs;
pub mod results;

use std::net::{TcpListener, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

/// A child process killed (and reaped) when dropped, whatever the test's outcome.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Connects to 127.0.0.1:`port`, retrying for up to 10 s while nothing listens yet; reads
/// then time out after `read_timeout`.
pub fn connect(port: u16, read_timeout: Duration) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(read_timeout)).unwrap();
            return s;
        }
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `memfleet server` on a free 127.0.0.1 port with `extra` arguments (stderr discarded).
pub fn memfleet_server(extra: &[&str]) -> (Killed, u16) {
    let port = free_port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args(["server", "-p", &port.to_string()])
        .args(extra)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("memfleet server starts");
    (Killed(child), port)
}

/// Debian's memcached (the reference) on a free 127.0.0.1 port, TCP only, with `extra`
/// arguments; run as `nobody` so it also starts as root.
pub fn memcached(extra: &[&str]) -> (Killed, u16) {
    let port = free_port();
    let child = std::process::Command::new("memcached")
        .args([
            "-u",
            "nobody",
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-p",
            &port.to_string(),
        ])
        .args(extra)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("Debian's memcached (scripts/test installs it)");
    (Killed(child), port)
}
