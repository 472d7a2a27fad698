//! Test support: a byte-stream driver that runs the parser the way a server would (pipelined
//! requests, swallowing refused data blocks, closing when told to), answering valid requests
//! as memcached answers them on an empty cache. Comparing its output with memcached's output
//! for the same stream checks the parser's error replies, `noreply` handling and framing.
//!
//! Not a cache: every key misses, so test streams must not read back what they stored.

#![allow(dead_code)]

use memfleet_protocol::response::{self, MetaStatus, MetaWriter, Status};
use memfleet_protocol::{parse, ParseError, ParserConfig, Request, StoreCommand};

/// What a connection sent back, and whether it was closed.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub reply: Vec<u8>,
    pub closed: bool,
}

/// memcached's reply on an empty cache (no CAS, no values).
fn answer(req: &Request<'_>, out: &mut Vec<u8>) {
    let quiet_status = |out: &mut Vec<u8>, s: Status, noreply: bool| {
        if !noreply {
            response::status(out, s)
        }
    };
    match req {
        Request::Get(_) => response::end(out),
        Request::Store(s) => {
            let st = match s.command {
                StoreCommand::Set | StoreCommand::Add => Status::Stored,
                StoreCommand::Cas => Status::NotFound,
                _ => Status::NotStored,
            };
            quiet_status(out, st, s.noreply);
        }
        Request::Delete { noreply, .. } => quiet_status(out, Status::NotFound, *noreply),
        Request::Arith { noreply, .. } => quiet_status(out, Status::NotFound, *noreply),
        Request::Touch { noreply, .. } => quiet_status(out, Status::NotFound, *noreply),
        Request::FlushAll { noreply, .. } => quiet_status(out, Status::Ok, *noreply),
        Request::Verbosity { noreply, .. } => quiet_status(out, Status::Ok, *noreply),
        Request::Version => response::version(out, b"1.6.18"),
        Request::Stats { .. } => response::end(out),
        Request::Quit => {}
        Request::MetaNoop => response::meta_noop(out),
        Request::MetaDebug { .. } => MetaWriter::new(out, MetaStatus::En).finish(),
        Request::MetaGet(m) => {
            if !m.flags.quiet() {
                let mut w = MetaWriter::new(out, MetaStatus::En);
                w.echo(&m.flags, &m.key);
                w.finish();
            }
        }
        Request::MetaDelete(m) => {
            let mut w = MetaWriter::new(out, MetaStatus::Nf);
            w.echo(&m.flags, &m.key);
            w.finish();
        }
        Request::MetaArithmetic(m) => {
            let mut w = MetaWriter::new(out, MetaStatus::Nf);
            w.echo(&m.flags, &m.key);
            w.finish();
        }
        Request::MetaSet(m) => {
            let status = match m.command() {
                StoreCommand::Set | StoreCommand::Add => MetaStatus::Hd,
                StoreCommand::Cas => MetaStatus::Nf,
                _ => MetaStatus::Ns,
            };
            if status == MetaStatus::Hd && m.flags.quiet() {
                return;
            }
            let mut w = MetaWriter::new(out, status);
            w.echo(&m.flags, &m.key);
            w.finish();
        }
        Request::Other { command, .. } => match *command {
            b"shutdown" => out.extend_from_slice(b"SERVER_ERROR: shutdown not enabled\r\n"),
            _ => response::status(out, Status::Error),
        },
    }
}

/// A connection's read side: bytes arrive in chunks, requests are parsed as soon as they
/// are complete.
pub struct Conn {
    cfg: ParserConfig,
    buf: Vec<u8>,
    swallow: usize,
    pub out: Outcome,
}

impl Conn {
    pub fn new(cfg: ParserConfig) -> Self {
        Conn {
            cfg,
            buf: Vec::new(),
            swallow: 0,
            out: Outcome {
                reply: Vec::new(),
                closed: false,
            },
        }
    }

    /// Delivers `bytes` and processes every complete request.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.out.closed {
            return;
        }
        let mut bytes = bytes;
        let n = self.swallow.min(bytes.len());
        self.swallow -= n;
        bytes = &bytes[n..];
        self.buf.extend_from_slice(bytes);
        loop {
            match parse(&self.buf, &self.cfg) {
                Ok((req, used)) => {
                    assert!(used > 0 && used <= self.buf.len());
                    answer(&req, &mut self.out.reply);
                    let quit = req == Request::Quit;
                    self.buf.drain(..used);
                    if quit {
                        self.out.closed = true;
                        return;
                    }
                }
                Err(ParseError::Incomplete) => return,
                Err(ParseError::Invalid(r)) => {
                    assert!(r.skip > 0);
                    self.out.reply.extend_from_slice(r.reply());
                    if r.close() {
                        self.out.closed = true;
                        return;
                    }
                    let n = r.skip.min(self.buf.len());
                    self.buf.drain(..n);
                    self.swallow = r.skip - n;
                }
            }
        }
    }
}

/// Runs `stream` through a fresh connection, delivered in one piece.
pub fn run(stream: &[u8]) -> Outcome {
    run_chunks(&[stream])
}

/// Runs `chunks` through a fresh connection, one delivery each.
pub fn run_chunks(chunks: &[&[u8]]) -> Outcome {
    let mut c = Conn::new(ParserConfig::default());
    for ch in chunks {
        c.feed(ch);
    }
    c.out
}

/// One recorded exchange: a byte stream and memcached 1.6.18's reply to it on an empty
/// cache.
pub struct Case {
    pub stream: Vec<u8>,
    pub reply: Vec<u8>,
    pub closed: bool,
    /// memfleet's reply where it differs from memcached's by design (listed in the crate
    /// README under "Known differences"); `reply` stays memcached's for the live check.
    pub ours: Option<Vec<u8>>,
}

/// A case whose connection stays open.
pub fn c(stream: impl AsRef<[u8]>, reply: impl AsRef<[u8]>) -> Case {
    Case {
        stream: stream.as_ref().to_vec(),
        reply: reply.as_ref().to_vec(),
        closed: false,
        ours: None,
    }
}

/// A case where memfleet answers differently from memcached on purpose.
pub fn differs(
    stream: impl AsRef<[u8]>,
    memcached: impl AsRef<[u8]>,
    memfleet: impl AsRef<[u8]>,
) -> Case {
    Case {
        ours: Some(memfleet.as_ref().to_vec()),
        ..c(stream, memcached)
    }
}

/// A case where memcached closes the connection without a reply.
pub fn closes(stream: impl AsRef<[u8]>) -> Case {
    Case {
        stream: stream.as_ref().to_vec(),
        reply: Vec::new(),
        closed: true,
        ours: None,
    }
}

pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

pub const BCLF: &str = "CLIENT_ERROR bad command line format\r\n";
pub const ERR: &str = "ERROR\r\n";

/// Every case's stream gives the recorded reply.
pub fn check_replies(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for case in cases {
        let got = run(&case.stream);
        let want = case.ours.as_ref().unwrap_or(&case.reply);
        if got
            != (Outcome {
                reply: want.clone(),
                closed: case.closed,
            })
        {
            failures.push(format!(
                "{:?}\n  want {:?} closed={}\n  got  {:?} closed={}",
                String::from_utf8_lossy(&case.stream[..case.stream.len().min(80)]),
                String::from_utf8_lossy(want),
                case.closed,
                String::from_utf8_lossy(&got.reply),
                got.closed
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// However the stream is cut into two reads, the replies are the same: every prefix of a
/// request is `Incomplete`, never an error or a different request. (Streams with a line
/// over 2048 bytes are left out: there memcached's own reply depends on the cut.)
pub fn check_read_boundaries(cases: Vec<Case>) -> usize {
    let mut checked = 0;
    for case in cases {
        let long_line = case.stream.split(|&b| b == b'\n').any(|l| l.len() > 2048);
        if long_line || case.stream.len() > 4096 {
            continue;
        }
        let whole = run(&case.stream);
        for cut in 0..=case.stream.len() {
            let (a, b) = case.stream.split_at(cut);
            assert_eq!(
                run_chunks(&[a, b]),
                whole,
                "cut at {cut} of {:?}",
                case.stream
            );
        }
        let bytes: Vec<&[u8]> = case.stream.chunks(1).collect();
        assert_eq!(run_chunks(&bytes), whole, "byte by byte: {:?}", case.stream);
        checked += 1;
    }
    checked
}

/// Replays the cases against a real memcached (its address in `MEMFLEET_MEMCACHED`), after
/// a `flush_all` each time so that every key misses. `differs` lists the requests (whole
/// streams) where memfleet answers otherwise on purpose, with the reason: those must differ
/// (a listed difference memcached no longer shows is an error too, so the list stays true).
pub fn check_live(cases: Vec<Case>, differs: &[(&[u8], &str)]) {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    let addr = std::env::var("MEMFLEET_MEMCACHED").expect("MEMFLEET_MEMCACHED=host:port");
    let mut failures = Vec::new();
    for case in cases {
        let mut flush = TcpStream::connect(&addr).unwrap();
        flush.write_all(b"flush_all\r\nverbosity 0\r\n").unwrap();
        let mut ok = [0u8; 8];
        flush.read_exact(&mut ok).unwrap();
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        s.write_all(&case.stream).unwrap();
        let mut reply = Vec::new();
        let mut closed = false;
        let mut buf = [0u8; 65536];
        loop {
            match s.read(&mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => reply.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    closed = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let same = reply == case.reply && closed == case.closed;
        let listed = differs
            .iter()
            .any(|(stream, _)| *stream == case.stream.as_slice());
        if same && listed {
            failures.push(format!(
                "{:?}: listed as a deliberate difference, but memcached answers the same",
                String::from_utf8_lossy(&case.stream)
            ));
        } else if !same && !listed {
            failures.push(format!(
                "{:?}\n  table  {:?} closed={}\n  server {:?} closed={}",
                String::from_utf8_lossy(&case.stream[..case.stream.len().min(80)]),
                String::from_utf8_lossy(&case.reply),
                case.closed,
                String::from_utf8_lossy(&reply),
                closed
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
