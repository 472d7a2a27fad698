//! Ports on 127.0.0.1: one that is free a moment ago, and a connection that waits for its
//! listener. Not here: starting what listens (`process`).

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A port on 127.0.0.1 that was free a moment ago.
pub fn try_free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// [`try_free_port`] for tests: panics when no port can be had.
pub fn free_port() -> u16 {
    try_free_port().expect("a free port on 127.0.0.1")
}

/// Connects to 127.0.0.1:`port`, retrying for up to 10 s while nothing listens yet; reads
/// then time out after `read_timeout`. Panics (a test's failure) when nothing listens.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound_and_connect_finds_its_listener() {
        let port = free_port();
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let s = connect(port, Duration::from_millis(100));
        assert_eq!(s.peer_addr().unwrap(), listener.local_addr().unwrap());
    }
}
