//! Test support: an in-process server on a kernel-chosen port, and a blocking client that
//! checks replies byte for byte.

#![allow(dead_code)]

use memfleet_server::{Server, Settings};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A server for one test, shut down when dropped.
pub struct TestServer {
    server: Option<Server>,
    pub addr: SocketAddr,
}

impl TestServer {
    /// Defaults for tests: 2 workers, 64 MiB, any port.
    pub fn start() -> TestServer {
        TestServer::with(|_| {})
    }

    /// Test defaults adjusted by `f`.
    pub fn with(f: impl FnOnce(&mut Settings)) -> TestServer {
        let mut s = Settings::default();
        s.listen.port = 0;
        s.limits.threads = 2;
        f(&mut s);
        let server = Server::start(s).expect("server starts");
        let addr = server.local_addr();
        TestServer {
            server: Some(server),
            addr,
        }
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().unwrap()
    }

    pub fn stop(mut self) {
        self.server
            .take()
            .unwrap()
            .shutdown()
            .expect("clean shutdown");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            let _ = s.shutdown();
        }
    }
}

/// A blocking client with a read timeout, so a missing reply fails instead of hanging.
pub struct Client {
    pub stream: TcpStream,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Client { stream }
    }

    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.stream.write_all(bytes.as_ref()).expect("send");
    }

    /// Reads exactly `n` bytes.
    pub fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        self.stream.read_exact(&mut buf).unwrap_or_else(|e| {
            panic!("reading {n} bytes: {e}");
        });
        buf
    }

    /// Reads one line, `\r\n` included, and nothing after it.
    pub fn read_line(&mut self) -> String {
        let mut out = Vec::new();
        while !out.ends_with(b"\r\n") {
            out.extend_from_slice(&self.read_n(1));
        }
        String::from_utf8(out).expect("a text line")
    }

    /// Reads until the reply ends with `terminator`.
    pub fn read_until(&mut self, terminator: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut byte = [0u8; 4096];
        while !out.ends_with(terminator) {
            let n = self.stream.read(&mut byte).expect("read");
            assert!(
                n > 0,
                "closed before {:?}; got {}",
                esc(terminator),
                esc(&out)
            );
            out.extend_from_slice(&byte[..n]);
        }
        out
    }

    /// Sends `request` and checks that exactly `expected` comes back.
    #[track_caller]
    pub fn check(&mut self, request: impl AsRef<[u8]>, expected: impl AsRef<[u8]>) {
        let (request, expected) = (request.as_ref(), expected.as_ref());
        self.send(request);
        let got = self.read_n(expected.len());
        assert_eq!(
            esc(&got),
            esc(expected),
            "request {}",
            esc(&request[..request.len().min(200)])
        );
    }

    /// Sends `request`, which has no reply, and proves it with a `mn` round trip.
    #[track_caller]
    pub fn silent(&mut self, request: impl AsRef<[u8]>) {
        let mut r = request.as_ref().to_vec();
        r.extend_from_slice(b"mn\r\n");
        self.check(r, "MN\r\n");
    }

    /// Whether the server has closed the connection: EOF or a reset within the read
    /// timeout. A timeout means it is still open (so a server that never closes fails the
    /// tests that expect a close, rather than passing slowly).
    pub fn is_closed(&mut self) -> bool {
        let mut buf = [0u8; 64];
        match self.stream.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }

    /// `stats` as (name, value) pairs.
    pub fn stats(&mut self, args: &str) -> Vec<(String, String)> {
        self.send(if args.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {args}\r\n")
        });
        let text = String::from_utf8(self.read_until(b"END\r\n")).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .map(|l| {
                let (k, v) = l.split_once(' ').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    pub fn stat(&mut self, name: &str) -> u64 {
        let stats = self.stats("");
        let (_, v) = stats
            .iter()
            .find(|(k, _)| k == name)
            .unwrap_or_else(|| panic!("no stat {name}"));
        v.parse().unwrap()
    }
}

/// Bytes as readable text (for assertion messages).
pub fn esc(b: &[u8]) -> String {
    b.escape_ascii().to_string()
}
