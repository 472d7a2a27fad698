//! One load-generator connection and what its replies add up to: the socket with its
//! outgoing batch and [`ReplyBuffer`] (received bytes, replies parsed out of them), the
//! per-phase counters and latency histogram ([`Stats`]), and what the connections of one
//! run share (`RunState`, `Phase`). Used by the closed loop (`client`) and the open loop
//! (`open_loop`) alike. Not here: parsing one reply (`reply`), the loops themselves.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::reply::{parse_reply, show, CheckedReply, Parsed};
use super::workload::{Workload, WorkloadOp};

/// Counters and the latency histogram of one measured phase.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Latency of every measured reply in nanoseconds, from the write of its batch.
    pub latency_ns: Histogram<u64>,
    /// Open loop: how late each measured request was written after its intended send
    /// time, in nanoseconds (the load generator's own lag; empty in closed loop).
    pub send_lag_ns: Histogram<u64>,
    /// Replies received during the measured phase.
    pub ops: u64,
    /// Gets among them.
    pub gets: u64,
    /// Get hits among them.
    pub hits: u64,
    /// Get misses among them.
    pub misses: u64,
    /// Sets among them.
    pub sets: u64,
    /// Deletes among them.
    pub deletes: u64,
    /// Errors in any phase (warm-up included): wrong replies and broken connections.
    pub errors: u64,
    /// Errors by kind: count and first example.
    pub error_kinds: BTreeMap<&'static str, (u64, String)>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            // 3 significant digits from 1 ns to 100 s.
            latency_ns: Histogram::new_with_bounds(1, 100_000_000_000, 3)
                .expect("valid histogram bounds"),
            send_lag_ns: Histogram::new_with_bounds(1, 100_000_000_000, 3)
                .expect("valid histogram bounds"),
            ops: 0,
            gets: 0,
            hits: 0,
            misses: 0,
            sets: 0,
            deletes: 0,
            errors: 0,
            error_kinds: BTreeMap::new(),
        }
    }
}

impl Stats {
    /// Counts one error of `kind`, keeping the first example.
    pub fn error(&mut self, kind: &'static str, detail: String) {
        self.errors += 1;
        self.error_kinds.entry(kind).or_insert((0, detail)).0 += 1;
    }

    /// Counts one reply (its latency when `measured`; an error in any phase).
    pub(super) fn reply(
        &mut self,
        op: WorkloadOp,
        reply: CheckedReply,
        latency: Duration,
        measured: bool,
    ) {
        if let CheckedReply::Wrong(kind, detail) = reply {
            self.error(kind, detail);
            return;
        }
        if !measured {
            return;
        }
        self.ops += 1;
        self.latency_ns
            .saturating_record(latency.as_nanos().min(u64::MAX as u128) as u64);
        match (op, reply) {
            (WorkloadOp::Get(_), CheckedReply::Hit) => {
                self.gets += 1;
                self.hits += 1;
            }
            (WorkloadOp::Get(_), CheckedReply::Miss) => {
                self.gets += 1;
                self.misses += 1;
            }
            (WorkloadOp::Set(_), _) => self.sets += 1,
            (WorkloadOp::Delete(_), _) => self.deletes += 1,
            // parse_reply gives gets only Hit, Miss or Wrong.
            (WorkloadOp::Get(_), _) => {}
        }
    }
}

/// Why a connection stopped.
#[derive(Debug)]
pub enum ConnError {
    /// A socket error or the server closing the connection.
    Io(io::Error),
    /// A reply that cannot be delimited.
    Desync(String),
}

/// Received bytes not yet parsed, and the parsing of replies out of them.
pub struct ReplyBuffer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for ReplyBuffer {
    fn default() -> Self {
        ReplyBuffer {
            buf: vec![0; 64 << 10],
            start: 0,
            end: 0,
        }
    }
}

impl ReplyBuffer {
    /// The reply to `op` if it is complete, consuming it.
    pub fn next_reply(
        &mut self,
        op: WorkloadOp,
        w: &Workload,
    ) -> Result<Option<CheckedReply>, ConnError> {
        match parse_reply(&self.buf[self.start..self.end], op, w) {
            Parsed::CheckedReply { consumed, reply } => {
                self.start += consumed;
                Ok(Some(reply))
            }
            Parsed::Incomplete => Ok(None),
            Parsed::Desync(e) => Err(ConnError::Desync(e)),
        }
    }

    /// Fails if bytes are left over when no reply is expected.
    pub fn expect_empty(&mut self) -> Result<(), ConnError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            return Ok(());
        }
        Err(ConnError::Desync(format!(
            "{} bytes after the last reply expected: {}",
            self.end - self.start,
            show(&self.buf[self.start..self.end])
        )))
    }

    /// Reads more bytes from `from` and returns when they arrived.
    pub async fn fill<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        from: &mut R,
    ) -> Result<Instant, ConnError> {
        self.make_room();
        let n = from
            .read(&mut self.buf[self.end..])
            .await
            .map_err(ConnError::Io)?;
        if n == 0 {
            return Err(ConnError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            )));
        }
        self.end += n;
        Ok(Instant::now())
    }

    fn make_room(&mut self) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // A reply larger than the buffer (big values): grow rather than fail.
            self.buf.resize(self.buf.len() * 2, 0);
        }
    }
}

/// One client connection with its buffers.
pub struct Conn {
    stream: TcpStream,
    out: Vec<u8>,
    replies: ReplyBuffer,
}

impl Conn {
    /// Connects (with TCP_NODELAY: a batch is one write and must leave at once).
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            out: Vec::with_capacity(4096),
            replies: ReplyBuffer::default(),
        })
    }

    /// The socket, for drivers that read and write it separately.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// Sends `ops` in one write and parses their replies, calling `on_reply` with each
    /// and the time it was read.
    pub async fn round_trip(
        &mut self,
        w: &Workload,
        ops: &[WorkloadOp],
        mut on_reply: impl FnMut(WorkloadOp, CheckedReply, Instant),
    ) -> Result<(), ConnError> {
        self.out.clear();
        for &op in ops {
            w.encode(op, &mut self.out);
        }
        self.stream
            .write_all(&self.out)
            .await
            .map_err(ConnError::Io)?;
        let mut next = 0;
        let mut now = Instant::now();
        loop {
            while next < ops.len() {
                match self.replies.next_reply(ops[next], w)? {
                    Some(reply) => {
                        on_reply(ops[next], reply, now);
                        next += 1;
                    }
                    None => break,
                }
            }
            if next == ops.len() {
                return self.replies.expect_empty();
            }
            now = self.replies.fill(&mut self.stream).await?;
        }
    }
}

pub(super) fn conn_error(stats: &mut Stats, e: ConnError) {
    match e {
        ConnError::Io(e) => stats.error("connection: I/O error or closed", e.to_string()),
        ConnError::Desync(e) => stats.error("connection: unparseable reply", e),
    }
}
/// The phase of a run, shared by the controller and all connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Load, not counted.
    Warmup,
    /// Load, counted.
    Measure,
    /// No new requests.
    Stop,
}

/// What the connections of one run share.
pub(super) struct RunState {
    /// What the run is doing.
    pub(super) phase: Cell<Phase>,
    /// Counters of every connection.
    pub(super) stats: RefCell<Stats>,
    /// Tasks not finished yet.
    pub(super) running: Cell<usize>,
}

#[cfg(test)]
mod tests;
