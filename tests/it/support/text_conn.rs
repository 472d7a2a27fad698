//! A blocking text-protocol connection for socket-level tests: send, read a line, a request
//! and its one-line reply, `stats`. A test file adds what only it needs in an `impl Conn`
//! of its own (the type is this test binary's).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A connection to 127.0.0.1 (reads time out after 10 s, failing the test).
pub struct Conn(pub BufReader<TcpStream>);

impl Conn {
    pub fn new(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn(BufReader::new(s))
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
    pub fn line(&mut self, request: &str) -> String {
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
}
