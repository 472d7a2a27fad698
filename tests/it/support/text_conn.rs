//! A blocking text-protocol connection for socket-level tests: send, read a line, a request
//! and its one-line reply, a one-key get, `stats`. A test module adds what only it needs in
//! a trait of its own.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A connection to 127.0.0.1 (reads time out after 10 s, failing the test).
pub struct Conn(pub BufReader<TcpStream>);

impl Conn {
    /// Connects, waiting up to 10 s for something to listen on `port`.
    pub fn new(port: u16) -> Conn {
        Conn(BufReader::new(memfleet_testkit::connect(
            port,
            Duration::from_secs(10),
        )))
    }

    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.0.get_mut().write_all(bytes.as_ref()).unwrap();
    }

    /// One line as it came (empty at the end of the stream).
    pub fn read_line(&mut self) -> String {
        let mut l = String::new();
        self.0.read_line(&mut l).unwrap();
        l
    }

    /// Sends `request`, reads one line.
    pub fn line(&mut self, request: impl AsRef<[u8]>) -> String {
        self.send(request);
        self.read_line()
    }

    /// `STAT name value`'s value in `stats` (the last one, if repeated).
    pub fn stat_text(&mut self, name: &str) -> Option<String> {
        self.send("stats\r\n");
        let prefix = format!("STAT {name} ");
        let mut found = None;
        loop {
            let l = self.read_line();
            if l == "END\r\n" || l.is_empty() {
                return found;
            }
            if let Some(v) = l.strip_prefix(&prefix) {
                found = Some(v.trim_end().to_string());
            }
        }
    }

    /// Sends `request`, reads `n` lines (without their `\r\n`).
    pub fn lines(&mut self, request: &str, n: usize) -> Vec<String> {
        self.send(request);
        (0..n)
            .map(|_| self.read_line().trim_end().to_string())
            .collect()
    }

    /// `get KEY`: its value, or `None` for a miss; panics on any other reply.
    pub fn get(&mut self, key: &str) -> Option<String> {
        let first = self.line(format!("get {key}\r\n"));
        if first == "END\r\n" {
            return None;
        }
        assert!(first.starts_with("VALUE "), "get {key}: {first:?}");
        let len: usize = first
            .trim_end()
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let mut data = vec![0; len + 2];
        self.0.read_exact(&mut data).unwrap();
        assert_eq!(self.read_line(), "END\r\n", "get {key}");
        Some(String::from_utf8_lossy(&data[..len]).into_owned())
    }

    /// `STAT name value`'s value in `stats`, as a number.
    pub fn stat(&mut self, name: &str) -> Option<u64> {
        self.stat_text(name).map(|v| v.parse().unwrap())
    }

    /// A `stats ARGS` reply as (name, value) pairs.
    pub fn stats(&mut self, args: &str) -> Vec<(String, String)> {
        self.send(format!("stats {args}\r\n"));
        let mut out = Vec::new();
        loop {
            let l = self.read_line();
            if l == "END\r\n" || l.is_empty() {
                return out;
            }
            let mut words = l.trim_end().splitn(3, ' ').skip(1);
            out.push((
                words.next().unwrap().to_string(),
                words.next().unwrap_or("").to_string(),
            ));
        }
    }
}
