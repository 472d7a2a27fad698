//! What the process-level tests of this directory share: child processes that die with the
//! test, free ports, and waiting for a listener (all from `memfleet-testkit`), plus the
//! `memfleet` executable this test binary was built with.

#![allow(dead_code, unused_imports)]

pub mod certs;
pub mod results;
pub mod text_conn;

pub use memfleet_testkit::{connect, free_port, memcached, Killed};
pub use text_conn::Conn;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// `memfleet server` on a free 127.0.0.1 port with `extra` arguments (stderr discarded).
/// A port nothing listens on, kept that way while the socket lives: bound, not listening,
/// so a connection is refused, and no other test (running beside this one) can take it, as
/// it could a port found free and let go.
#[allow(dead_code)]
pub fn refused_port() -> (socket2::Socket, u16) {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    socket
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind 127.0.0.1:0");
    let port = socket
        .local_addr()
        .expect("its address")
        .as_socket()
        .expect("an IP address")
        .port();
    (socket, port)
}

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

/// `memfleet router -t 1 [--admin-listen 127.0.0.1:ADMIN] --config FILE` (stderr
/// discarded), stopped with the test; the caller waits for its listeners.
pub fn router(file: &std::path::Path, admin: Option<u16>) -> Killed {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_memfleet"));
    c.args(["router", "-t", "1"]);
    if let Some(admin) = admin {
        c.arg("--admin-listen").arg(format!("127.0.0.1:{admin}"));
    }
    c.arg("--config")
        .arg(file)
        .stderr(std::process::Stdio::null());
    Killed(c.spawn().unwrap())
}
