//! What the router's tests share: real `memfleet server` backends.

#![allow(dead_code)]

use memfleet_server::{Server, Settings};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
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

pub struct Client(pub BufReader<TcpStream>);

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client(BufReader::new(s))
    }

    pub fn direct(port: u16) -> Client {
        Client::connect(addr(port))
    }

    /// Sends and reads exactly `want.len()` bytes, which must be `want`.
    pub fn check(&mut self, request: &str, want: &str) {
        self.0.get_mut().write_all(request.as_bytes()).unwrap();
        let mut got = vec![0; want.len()];
        self.0.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want, "request {request:?}");
    }

    /// Sends `bytes`.
    pub fn send(&mut self, bytes: &str) {
        self.0.get_mut().write_all(bytes.as_bytes()).unwrap();
    }

    /// Reads one line.
    pub fn read_line(&mut self) -> String {
        let mut l = String::new();
        self.0.read_line(&mut l).unwrap();
        l
    }

    /// Sends `request` (if any) and reads one line; an error, or the end of the
    /// connection, is `Err`.
    pub fn try_line(&mut self, request: &str) -> std::io::Result<String> {
        if !request.is_empty() {
            self.0.get_mut().write_all(request.as_bytes())?;
        }
        let mut l = String::new();
        match self.0.read_line(&mut l)? {
            0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => Ok(l),
        }
    }

    /// Reads one `VALUE <key> ...` line and its data: (key, data); `None` at `END`.
    pub fn value(&mut self) -> Option<(String, String)> {
        let first = self.read_line();
        if first == "END\r\n" {
            return None;
        }
        let key = first
            .strip_prefix("VALUE ")
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("not a value: {first:?}"))
            .to_string();
        let data = self.read_line();
        Some((key, data.trim_end().to_string()))
    }

    /// Sends one request and reads one line.
    pub fn line(&mut self, request: &str) -> String {
        self.0.get_mut().write_all(request.as_bytes()).unwrap();
        let mut l = String::new();
        self.0.read_line(&mut l).unwrap();
        l
    }

    /// A get's value, if any (one key).
    pub fn get(&mut self, key: &str) -> Option<String> {
        let first = self.line(&format!("get {key}\r\n"));
        if first == "END\r\n" {
            return None;
        }
        assert!(first.starts_with("VALUE "), "get {key}: {first}");
        let mut value = String::new();
        self.0.read_line(&mut value).unwrap();
        let mut end = String::new();
        self.0.read_line(&mut end).unwrap();
        assert_eq!(end, "END\r\n");
        Some(value.trim_end().to_string())
    }

    /// The `stats` line `STAT <name> <value>`'s value.
    pub fn stat(&mut self, name: &str) -> Option<String> {
        self.0.get_mut().write_all(b"stats\r\n").unwrap();
        let mut found = None;
        loop {
            let mut l = String::new();
            self.0.read_line(&mut l).unwrap();
            if l == "END\r\n" || l.is_empty() {
                return found;
            }
            if let Some(v) = l.strip_prefix(&format!("STAT {name} ")) {
                found = Some(v.trim_end().to_string());
            }
        }
    }
}

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
