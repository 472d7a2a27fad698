//! What the process-level tests of this directory share: child processes that die with the
//! test, free ports, and waiting for a listener.

#![allow(dead_code)]

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
