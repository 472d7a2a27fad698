//! A blocking text-protocol connection for tests that talk to a server or a router through
//! a real socket: send, read a line, a request and its one-line reply, a one-key get, a
//! value, `stats`. Reads time out after 10 s, failing the test rather than hanging it. A
//! test module adds what only it needs in a trait of its own.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A text-protocol connection (its buffered stream is `.0`, for a test that reads raw).
pub struct TextConn(pub BufReader<TcpStream>);

impl TextConn {
    /// Connects to 127.0.0.1:`port`, waiting up to 10 s for something to listen there.
    pub fn new(port: u16) -> TextConn {
        TextConn(BufReader::new(crate::connect(
            port,
            Duration::from_secs(10),
        )))
    }

    /// Connects to `addr` at once (a refused connection fails the test).
    pub fn connect(addr: SocketAddr) -> TextConn {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        TextConn(BufReader::new(s))
    }

    /// Connects to 127.0.0.1:`port` at once.
    pub fn direct(port: u16) -> TextConn {
        TextConn::connect(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Sends `bytes`.
    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.0.get_mut().write_all(bytes.as_ref()).unwrap();
    }

    /// One line as it came, `\r\n` included (empty at the end of the stream).
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

    /// Sends `request`, reads `n` lines (without their `\r\n`).
    pub fn lines(&mut self, request: &str, n: usize) -> Vec<String> {
        self.send(request);
        (0..n)
            .map(|_| self.read_line().trim_end().to_string())
            .collect()
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

    /// Sends `request` and reads exactly `want.len()` bytes, which must be `want`.
    #[track_caller]
    pub fn check(&mut self, request: &str, want: &str) {
        self.send(request);
        let mut got = vec![0; want.len()];
        self.0.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want, "request {request:?}");
    }

    /// `get KEY`: its value, or `None` for a miss; panics on any other reply.
    pub fn get(&mut self, key: &str) -> Option<String> {
        self.send(format!("get {key}\r\n"));
        let (_, value) = self.value()?;
        assert_eq!(self.read_line(), "END\r\n", "get {key}");
        Some(value)
    }

    /// Reads one `VALUE <key> <flags> <bytes>` line and its data: (key, data); `None` at
    /// `END`; panics on anything else.
    pub fn value(&mut self) -> Option<(String, String)> {
        let first = self.read_line();
        if first == "END\r\n" {
            return None;
        }
        let words: Vec<&str> = first.split_whitespace().collect();
        let ["VALUE", key, _, len, ..] = words.as_slice() else {
            panic!("not a value: {first:?}");
        };
        let len: usize = len
            .parse()
            .unwrap_or_else(|_| panic!("not a value: {first:?}"));
        let mut data = vec![0; len + 2];
        self.0.read_exact(&mut data).unwrap();
        Some((
            key.to_string(),
            String::from_utf8_lossy(&data[..len]).into_owned(),
        ))
    }

    /// `STAT name value`'s value in `stats` (the last one, if repeated).
    pub fn stat_text(&mut self, name: &str) -> Option<String> {
        let stats = self.stats("");
        stats
            .into_iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    /// `STAT name value`'s value in `stats`, as a number.
    pub fn stat(&mut self, name: &str) -> Option<u64> {
        self.stat_text(name).map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("STAT {name} {v}: not a number"))
        })
    }

    /// A `stats ARGS` reply (`stats` alone for `""`) as (name, value) pairs.
    pub fn stats(&mut self, args: &str) -> Vec<(String, String)> {
        if args.is_empty() {
            self.send("stats\r\n");
        } else {
            self.send(format!("stats {args}\r\n"));
        }
        let mut out = Vec::new();
        loop {
            let l = self.read_line();
            if l == "END\r\n" || l.is_empty() {
                return out;
            }
            let mut words = l.trim_end().splitn(3, ' ').skip(1);
            out.push((
                words.next().unwrap_or("").to_string(),
                words.next().unwrap_or("").to_string(),
            ));
        }
    }
}
