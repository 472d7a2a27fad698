//! The connection driver: N connections on one current-thread tokio runtime,
//! each sending a pipelined batch of requests in one write and reading until
//! every reply of the batch is in, then the next batch (closed loop). Every
//! reply is checked against the request: a get hit must carry the asked key,
//! flags 0 and exactly the value the workload stores for it; a set must get
//! `STORED`. Anything else is an error, counted by kind with a first example.
//! Not here: which requests (`workload`), CPU accounting (`cpu`), printing
//! (`report`).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::workload::{parse_u64, Op, Protocol, Workload};

/// Longest reply line accepted before the stream is declared garbage.
const MAX_LINE: usize = 4096;
/// Largest value a reply may announce; beyond it the length field is garbage.
const MAX_VALUE: u64 = 64 << 20;
/// How long connections may take to finish their last batch after the run ends.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// What a well-formed reply said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A get returned the expected value.
    Hit,
    /// A get returned `END` alone (meta: `EN`).
    Miss,
    /// A set returned `STORED` (meta: `HD`).
    Stored,
    /// A delete removed the key (`DELETED`, meta: `HD`).
    Deleted,
    /// A delete found no key (`NOT_FOUND`, meta: `NF`): not an error, since keys are
    /// deleted, expire and are evicted during a run.
    NotFound,
    /// A complete reply that is wrong for its request: (kind, example).
    Wrong(&'static str, String),
}

/// The outcome of parsing the start of a receive buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed.
    Incomplete,
    /// One reply, `consumed` bytes long.
    Reply {
        /// Bytes the reply took.
        consumed: usize,
        /// What it said.
        reply: Reply,
    },
    /// The stream cannot be followed any more (no way to find the next reply).
    Desync(String),
}

fn show(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(120)];
    let mut s = String::from_utf8_lossy(cut).escape_debug().to_string();
    if bytes.len() > cut.len() {
        s.push('…');
    }
    s
}

/// The first line of `buf` without its `\r\n`, or why there is none yet.
fn line(buf: &[u8]) -> Result<Option<&[u8]>, String> {
    match buf.iter().position(|&b| b == b'\n') {
        Some(i) if i > 0 && buf[i - 1] == b'\r' => Ok(Some(&buf[..i - 1])),
        Some(i) => Err(format!(
            "reply line not ended by \\r\\n: {}",
            show(&buf[..i])
        )),
        None if buf.len() > MAX_LINE => Err(format!(
            "no end of line in {} bytes: {}",
            buf.len(),
            show(buf)
        )),
        None => Ok(None),
    }
}

/// Parses the reply to `op` at the start of `buf`, in the workload's protocol.
pub fn parse_reply(buf: &[u8], op: Op, w: &Workload) -> Parsed {
    let first = match line(buf) {
        Ok(Some(l)) => l,
        Ok(None) => return Parsed::Incomplete,
        Err(e) => return Parsed::Desync(e),
    };
    let line_len = first.len() + 2;
    let reply = |reply| Parsed::Reply {
        consumed: line_len,
        reply,
    };
    let key = |n: u64| {
        let mut k = Vec::new();
        w.push_key_bytes(n, &mut k);
        String::from_utf8_lossy(&k).into_owned()
    };
    match (w.protocol(), op) {
        (Protocol::Text, Op::Set(n)) => match first {
            b"STORED" => reply(Reply::Stored),
            _ => reply(Reply::Wrong(
                "set: reply is not STORED",
                format!("set {} -> {}", key(n), show(first)),
            )),
        },
        (Protocol::Text, Op::Delete(n)) => match first {
            b"DELETED" => reply(Reply::Deleted),
            b"NOT_FOUND" => reply(Reply::NotFound),
            _ => reply(Reply::Wrong(
                "delete: reply is not DELETED or NOT_FOUND",
                format!("delete {} -> {}", key(n), show(first)),
            )),
        },
        (Protocol::Text, Op::Get(n)) => {
            if first == b"END" {
                return reply(Reply::Miss);
            }
            let Some(header) = first.strip_prefix(b"VALUE ") else {
                return reply(Reply::Wrong(
                    "get: unexpected reply line",
                    format!("get {} -> {}", key(n), show(first)),
                ));
            };
            parse_value(buf, header, line_len, n, w)
        }
        (Protocol::Meta, Op::Set(n)) => match first {
            b"HD" => reply(Reply::Stored),
            _ => reply(Reply::Wrong(
                "ms: reply is not HD",
                format!("ms {} -> {}", key(n), show(first)),
            )),
        },
        (Protocol::Meta, Op::Delete(n)) => match first {
            b"HD" => reply(Reply::Deleted),
            b"NF" => reply(Reply::NotFound),
            _ => reply(Reply::Wrong(
                "md: reply is not HD or NF",
                format!("md {} -> {}", key(n), show(first)),
            )),
        },
        (Protocol::Meta, Op::Get(n)) => {
            // A miss echoes the requested return flags (`EN k<key>`) in memcached and
            // memfleet alike; the key is not checked: a miss is a miss.
            if first == b"EN" || first.starts_with(b"EN ") {
                return reply(Reply::Miss);
            }
            let Some(header) = first.strip_prefix(b"VA ") else {
                return reply(Reply::Wrong(
                    "mg: unexpected reply line",
                    format!("mg {} -> {}", key(n), show(first)),
                ));
            };
            parse_meta_value(buf, header, line_len, n, w)
        }
    }
}

/// The data block of a hit: `Incomplete` until `<bytes>\r\n<trailer>` is in, then the
/// consumed length, or a desync if the block is not framed as announced.
fn data_block<'b>(
    buf: &'b [u8],
    line_len: usize,
    bytes: u64,
    trailer: &[u8],
    n: u64,
) -> Result<(&'b [u8], usize), Parsed> {
    let data_end = line_len + bytes as usize;
    let total = data_end + 2 + trailer.len();
    if buf.len() < total {
        return Err(Parsed::Incomplete);
    }
    if &buf[data_end..data_end + 2] != b"\r\n" || &buf[data_end + 2..total] != trailer {
        return Err(Parsed::Desync(format!(
            "value of get key {n} not followed by \\r\\n{}: {}",
            show(trailer).trim_end_matches("\\r\\n"),
            show(&buf[data_end..total])
        )));
    }
    Ok((&buf[line_len..data_end], total))
}

fn parse_value(buf: &[u8], header: &[u8], line_len: usize, n: u64, w: &Workload) -> Parsed {
    let fields: Vec<&[u8]> = header.split(|&b| b == b' ').collect();
    let (key, flags, bytes) = match fields[..] {
        [key, flags, bytes] | [key, flags, bytes, _] => (key, flags, bytes),
        _ => return Parsed::Desync(format!("malformed VALUE line: VALUE {}", show(header))),
    };
    let Some(bytes) = parse_u64(bytes).filter(|&b| b <= MAX_VALUE) else {
        return Parsed::Desync(format!("bad length in VALUE line: VALUE {}", show(header)));
    };
    let (data, total) = match data_block(buf, line_len, bytes, b"END\r\n", n) {
        Ok(d) => d,
        Err(p) => return p,
    };
    let wrong = |kind, detail| Parsed::Reply {
        consumed: total,
        reply: Reply::Wrong(kind, detail),
    };
    if !w.key_matches(n, key) {
        return wrong(
            "get: reply for another key",
            format!("get key {n} -> VALUE {}", show(header)),
        );
    }
    if flags != b"0" {
        return wrong(
            "get: wrong flags",
            format!("get key {n} -> VALUE {}", show(header)),
        );
    }
    if data != w.value(n) {
        return wrong("get: wrong value", format!("get key {n} -> {}", show(data)));
    }
    Parsed::Reply {
        consumed: total,
        reply: Reply::Hit,
    }
}

/// A meta hit, `VA <bytes> <flags>*` (asked with `k f v`): the `k` flag must echo the
/// key, `f` must be 0, and the data must be the key's value.
fn parse_meta_value(buf: &[u8], header: &[u8], line_len: usize, n: u64, w: &Workload) -> Parsed {
    let mut fields = header.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let Some(bytes) = fields
        .next()
        .and_then(parse_u64)
        .filter(|&b| b <= MAX_VALUE)
    else {
        return Parsed::Desync(format!("bad length in VA line: VA {}", show(header)));
    };
    let (data, total) = match data_block(buf, line_len, bytes, b"", n) {
        Ok(d) => d,
        Err(p) => return p,
    };
    let wrong = |kind, detail| Parsed::Reply {
        consumed: total,
        reply: Reply::Wrong(kind, detail),
    };
    let (mut key, mut flags) = (None, None);
    for f in fields {
        match f[0] {
            b'k' => key = Some(&f[1..]),
            b'f' => flags = Some(&f[1..]),
            _ => {}
        }
    }
    if !key.is_some_and(|k| w.key_matches(n, k)) {
        return wrong(
            "mg: reply for another key",
            format!("mg key {n} -> VA {}", show(header)),
        );
    }
    if flags != Some(b"0".as_slice()) {
        return wrong(
            "mg: wrong flags",
            format!("mg key {n} -> VA {}", show(header)),
        );
    }
    if data != w.value(n) {
        return wrong("mg: wrong value", format!("mg key {n} -> {}", show(data)));
    }
    Parsed::Reply {
        consumed: total,
        reply: Reply::Hit,
    }
}

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
    pub(super) fn reply(&mut self, op: Op, reply: Reply, latency: Duration, measured: bool) {
        if let Reply::Wrong(kind, detail) = reply {
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
            (Op::Get(_), Reply::Hit) => {
                self.gets += 1;
                self.hits += 1;
            }
            (Op::Get(_), Reply::Miss) => {
                self.gets += 1;
                self.misses += 1;
            }
            (Op::Set(_), _) => self.sets += 1,
            (Op::Delete(_), _) => self.deletes += 1,
            // parse_reply gives gets only Hit, Miss or Wrong.
            (Op::Get(_), _) => {}
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
    pub fn next_reply(&mut self, op: Op, w: &Workload) -> Result<Option<Reply>, ConnError> {
        match parse_reply(&self.buf[self.start..self.end], op, w) {
            Parsed::Reply { consumed, reply } => {
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
        ops: &[Op],
        mut on_reply: impl FnMut(Op, Reply, Instant),
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

/// Stores every key once (`set`, pipelined `depth` deep), checking each reply.
pub async fn prefill(addr: SocketAddr, w: &Workload, depth: usize) -> Result<()> {
    let mut conn = Conn::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr} to pre-fill"))?;
    let mut stats = Stats::default();
    let mut ops = Vec::with_capacity(depth);
    let mut key = 0;
    while key < w.keys() {
        ops.clear();
        ops.extend((key..w.keys().min(key + depth as u64)).map(Op::Set));
        key += ops.len() as u64;
        let r = conn
            .round_trip(w, &ops, |op, reply, _| {
                stats.reply(op, reply, Duration::ZERO, false)
            })
            .await;
        if let Err(e) = r {
            conn_error(&mut stats, e);
        }
        if stats.errors > 0 {
            let (kind, (_, example)) = stats.error_kinds.iter().next().expect("an error");
            bail!("pre-filling {addr} failed: {kind}: {example}");
        }
    }
    Ok(())
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
pub(super) struct Shared {
    /// What the run is doing.
    pub(super) phase: Cell<Phase>,
    /// Counters of every connection.
    pub(super) stats: RefCell<Stats>,
    /// Tasks not finished yet.
    pub(super) running: Cell<usize>,
}

async fn drive(
    mut conn: Conn,
    w: Rc<Workload>,
    depth: usize,
    seed: u64,
    id: usize,
    sh: Rc<Shared>,
) {
    let mut rng = super::workload::conn_rng(seed, id);
    let mut ops = Vec::with_capacity(depth);
    while sh.phase.get() != Phase::Stop {
        ops.clear();
        ops.extend((0..depth).map(|_| w.op(&mut rng)));
        let sent = Instant::now();
        let r = conn
            .round_trip(&w, &ops, |op, reply, at| {
                let measured = sh.phase.get() == Phase::Measure;
                sh.stats
                    .borrow_mut()
                    .reply(op, reply, at.duration_since(sent), measured);
            })
            .await;
        if let Err(e) = r {
            conn_error(&mut sh.stats.borrow_mut(), e);
            break;
        }
    }
    sh.running.set(sh.running.get() - 1);
}

/// One measured phase of load: its counters, duration and the CPU readings.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Counters and latencies.
    pub stats: Stats,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Server CPU time (user+system, all threads) during the measured phase.
    pub server_cpu: Option<Duration>,
    /// The load generator's event-loop thread's CPU time during the measured phase.
    pub client_cpu: Duration,
}

/// How to load one server.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Server address.
    pub addr: SocketAddr,
    /// The server's PID, for its CPU time.
    pub server_pid: Option<u32>,
    /// Connections.
    pub conns: usize,
    /// Requests per batch (open loop: most requests per write when behind).
    pub depth: usize,
    /// Open loop at this many requests per second across all connections; closed loop
    /// when `None`.
    pub rate: Option<f64>,
    /// Advanced by the milliseconds of warm-up and measured time as they pass.
    pub progress: Option<indicatif::ProgressBar>,
    /// Unmeasured time first.
    pub warmup: Duration,
    /// Measured time.
    pub duration: Duration,
    /// RNG seed.
    pub seed: u64,
}

/// Sleeps for `time`, advancing `progress` ten times a second.
async fn wait(time: Duration, progress: Option<&indicatif::ProgressBar>) {
    let Some(bar) = progress else {
        return tokio::time::sleep(time).await;
    };
    let start = tokio::time::Instant::now();
    let end = start + time;
    let mut shown = Duration::ZERO;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep_until(end.min(tokio::time::Instant::now() + Duration::from_millis(100)))
            .await;
        let passed = start.elapsed().min(time);
        bar.inc((passed - shown).as_millis() as u64);
        shown = Duration::from_millis(passed.as_millis() as u64);
    }
}

fn server_cpu(pid: Option<u32>) -> Result<Option<Duration>> {
    pid.map(|p| super::cpu::cpu_time(super::cpu::Who::Process(p)))
        .transpose()
        .context("reading the server's CPU time (has it exited?)")
}

/// Runs warm-up then the measured phase against one server, on the calling thread.
/// Must be called inside a current-thread runtime's `LocalSet`.
pub async fn measure(cfg: &LoadConfig, w: Rc<Workload>) -> Result<Measured> {
    use super::cpu::{cpu_time, Who};
    let sh = Rc::new(Shared {
        phase: Cell::new(Phase::Warmup),
        stats: RefCell::new(Stats::default()),
        running: Cell::new(0),
    });
    let mut conns = Vec::with_capacity(cfg.conns);
    for i in 0..cfg.conns {
        let c = Conn::connect(cfg.addr)
            .await
            .with_context(|| format!("opening connection {} to {}", i + 1, cfg.addr))?;
        conns.push(c);
    }
    let mut tasks = Vec::with_capacity(cfg.conns);
    if let Some(rate) = cfg.rate {
        tasks = super::open_loop::spawn(conns, &w, rate, cfg.depth, cfg.seed, &sh);
    } else {
        for (id, conn) in conns.into_iter().enumerate() {
            sh.running.set(sh.running.get() + 1);
            tasks.push(tokio::task::spawn_local(drive(
                conn,
                w.clone(),
                cfg.depth,
                cfg.seed,
                id,
                sh.clone(),
            )));
        }
    }
    wait(cfg.warmup, cfg.progress.as_ref()).await;

    sh.phase.set(Phase::Measure);
    let t0 = Instant::now();
    let srv0 = server_cpu(cfg.server_pid)?;
    let cli0 = cpu_time(Who::ThisThread)?;
    wait(cfg.duration, cfg.progress.as_ref()).await;
    sh.phase.set(Phase::Stop);
    let elapsed = t0.elapsed();
    let srv1 = server_cpu(cfg.server_pid)?;
    let cli1 = cpu_time(Who::ThisThread)?;

    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        for t in &mut tasks {
            // A panicking connection task is a bug: surface it.
            if let Err(e) = t.await {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    })
    .await;
    if drained.is_err() {
        for t in &tasks {
            t.abort();
        }
        let stuck = sh.running.get();
        sh.stats.borrow_mut().error(
            "connection: no reply at the end of the run",
            format!("{stuck} connection(s) still waiting after {DRAIN_TIMEOUT:?}"),
        );
    }
    let stats = sh.stats.borrow().clone();
    Ok(Measured {
        stats,
        elapsed,
        server_cpu: srv0.zip(srv1).map(|(a, b)| b.saturating_sub(a)),
        client_cpu: cli1.saturating_sub(cli0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w() -> Workload {
        Workload::new(1000, 0.9, 10, None).unwrap()
    }

    fn hit(n: u64, w: &Workload) -> Vec<u8> {
        let mut v = format!("VALUE key:{n} 0 10\r\n").into_bytes();
        v.extend_from_slice(w.value(n));
        v.extend_from_slice(b"\r\nEND\r\n");
        v
    }

    #[test]
    fn hits_misses_and_stores() {
        let w = w();
        let h = hit(7, &w);
        assert_eq!(
            parse_reply(&h, Op::Get(7), &w),
            Parsed::Reply {
                consumed: h.len(),
                reply: Reply::Hit
            }
        );
        assert_eq!(
            parse_reply(b"END\r\nEND\r\n", Op::Get(7), &w),
            Parsed::Reply {
                consumed: 5,
                reply: Reply::Miss
            }
        );
        assert_eq!(
            parse_reply(b"STORED\r\n", Op::Set(7), &w),
            Parsed::Reply {
                consumed: 8,
                reply: Reply::Stored
            }
        );
        // A cas field (as `gets` would add) does not matter.
        let mut g = b"VALUE key:7 0 10 99\r\n".to_vec();
        g.extend_from_slice(w.value(7));
        g.extend_from_slice(b"\r\nEND\r\n");
        assert!(matches!(
            parse_reply(&g, Op::Get(7), &w),
            Parsed::Reply {
                reply: Reply::Hit,
                ..
            }
        ));
    }

    #[test]
    fn every_prefix_of_a_reply_is_incomplete() {
        let w = w();
        let h = hit(123, &w);
        for cut in 0..h.len() {
            assert_eq!(
                parse_reply(&h[..cut], Op::Get(123), &w),
                Parsed::Incomplete,
                "{cut}"
            );
        }
        for cut in 0..8 {
            assert_eq!(
                parse_reply(&b"STORED\r\n"[..cut], Op::Set(1), &w),
                Parsed::Incomplete
            );
        }
    }

    fn wrong_kind(p: Parsed) -> &'static str {
        match p {
            Parsed::Reply {
                reply: Reply::Wrong(kind, _),
                ..
            } => kind,
            other => panic!("not a wrong reply: {other:?}"),
        }
    }

    #[test]
    fn wrong_replies_are_errors_that_keep_the_stream() {
        let w = w();
        let other_key = hit(8, &w);
        let mut wrong = hit(7, &w);
        wrong.extend_from_slice(b"ignored");
        wrong[0..18].copy_from_slice(b"VALUE key:8 0 10\r\n");
        assert_eq!(
            wrong_kind(parse_reply(&other_key, Op::Get(7), &w)),
            "get: reply for another key"
        );
        // Key 8's header with key 7's data: caught as another key first.
        assert_eq!(
            wrong_kind(parse_reply(&wrong, Op::Get(7), &w)),
            "get: reply for another key"
        );
        let mut bad_value = hit(7, &w);
        bad_value[20] ^= 1;
        assert_eq!(
            wrong_kind(parse_reply(&bad_value, Op::Get(7), &w)),
            "get: wrong value"
        );
        let mut flags = b"VALUE key:7 5 10\r\n".to_vec();
        flags.extend_from_slice(w.value(7));
        flags.extend_from_slice(b"\r\nEND\r\n");
        assert_eq!(
            wrong_kind(parse_reply(&flags, Op::Get(7), &w)),
            "get: wrong flags"
        );
        let short = b"VALUE key:7 0 3\r\nabc\r\nEND\r\n";
        assert_eq!(
            wrong_kind(parse_reply(short, Op::Get(7), &w)),
            "get: wrong value"
        );
        let p = parse_reply(b"SERVER_ERROR out of memory\r\nX", Op::Set(7), &w);
        assert_eq!(
            p,
            Parsed::Reply {
                consumed: 28,
                reply: Reply::Wrong(
                    "set: reply is not STORED",
                    "set key:7 -> SERVER_ERROR out of memory".into()
                )
            }
        );
        assert_eq!(
            wrong_kind(parse_reply(b"ERROR\r\n", Op::Get(7), &w)),
            "get: unexpected reply line"
        );
    }

    #[test]
    fn garbage_desyncs() {
        let w = w();
        for bad in [
            b"END\n".as_slice(),
            b"VALUE key:7 0\r\n",
            b"VALUE key:7 0 x\r\n",
            b"VALUE key:7 0 99999999999\r\n",
            b"VALUE key:7 0 10\r\nbcdefghijkXXEND\r\n",
        ] {
            assert!(
                matches!(parse_reply(bad, Op::Get(7), &w), Parsed::Desync(_)),
                "{}",
                show(bad)
            );
        }
        let long = vec![b'x'; MAX_LINE + 1];
        assert!(matches!(
            parse_reply(&long, Op::Set(1), &w),
            Parsed::Desync(_)
        ));
    }

    #[test]
    fn deletes_and_meta_replies() {
        use crate::load::workload::{Mix, WorkloadSpec};
        use memfleet_sim::workload::TtlMix;
        let text = w();
        for (reply, want) in [
            (b"DELETED\r\n".as_slice(), Reply::Deleted),
            (b"NOT_FOUND\r\n", Reply::NotFound),
        ] {
            assert_eq!(
                parse_reply(reply, Op::Delete(3), &text),
                Parsed::Reply {
                    consumed: reply.len(),
                    reply: want
                }
            );
        }
        assert_eq!(
            wrong_kind(parse_reply(b"STORED\r\n", Op::Delete(3), &text)),
            "delete: reply is not DELETED or NOT_FOUND"
        );
        let meta = Workload::from_spec(WorkloadSpec {
            keys: 1000,
            mix: Mix::new(1.0, 0.0, 0.0).unwrap(),
            zipf: None,
            key_sizes: Some(memfleet_sim::sizes::SizeDistribution::Fixed(12)),
            value_sizes: memfleet_sim::sizes::SizeDistribution::Fixed(10),
            ttl: TtlMix::single(0),
            protocol: Protocol::Meta,
        })
        .unwrap();
        let mut key = Vec::new();
        meta.push_key_bytes(7, &mut key);
        let key = String::from_utf8(key).unwrap();
        assert_eq!(key.len(), 12);
        let hit = |header: &str| {
            let mut v = format!("VA 10 {header}\r\n").into_bytes();
            v.extend_from_slice(meta.value(7));
            v.extend_from_slice(b"\r\n");
            v
        };
        let good = hit(&format!("k{key} f0"));
        assert_eq!(
            parse_reply(&good, Op::Get(7), &meta),
            Parsed::Reply {
                consumed: good.len(),
                reply: Reply::Hit
            }
        );
        for cut in 0..good.len() {
            assert_eq!(
                parse_reply(&good[..cut], Op::Get(7), &meta),
                Parsed::Incomplete
            );
        }
        // Flags in another order are fine.
        let reordered = hit(&format!("f0 k{key}"));
        assert!(matches!(
            parse_reply(&reordered, Op::Get(7), &meta),
            Parsed::Reply {
                reply: Reply::Hit,
                ..
            }
        ));
        assert_eq!(
            wrong_kind(parse_reply(&hit("kkey:7 f0"), Op::Get(7), &meta)),
            "mg: reply for another key"
        );
        assert_eq!(
            wrong_kind(parse_reply(&hit(&format!("k{key} f3")), Op::Get(7), &meta)),
            "mg: wrong flags"
        );
        let mut bad = good.clone();
        let at = bad.len() - 4;
        bad[at] ^= 1;
        assert_eq!(
            wrong_kind(parse_reply(&bad, Op::Get(7), &meta)),
            "mg: wrong value"
        );
        assert_eq!(
            parse_reply(b"EN\r\n", Op::Get(7), &meta),
            Parsed::Reply {
                consumed: 4,
                reply: Reply::Miss
            }
        );
        assert_eq!(
            parse_reply(b"EN kkey:7\r\n", Op::Get(7), &meta),
            Parsed::Reply {
                consumed: 11,
                reply: Reply::Miss
            }
        );
        assert_eq!(
            parse_reply(b"HD\r\n", Op::Set(7), &meta),
            Parsed::Reply {
                consumed: 4,
                reply: Reply::Stored
            }
        );
        assert_eq!(
            parse_reply(b"NF\r\n", Op::Delete(7), &meta),
            Parsed::Reply {
                consumed: 4,
                reply: Reply::NotFound
            }
        );
        assert_eq!(
            wrong_kind(parse_reply(b"NS\r\n", Op::Set(7), &meta)),
            "ms: reply is not HD"
        );
        let mut unframed = good.clone();
        let end = unframed.len() - 2;
        unframed[end] = b'X';
        assert!(matches!(
            parse_reply(&unframed, Op::Get(7), &meta),
            Parsed::Desync(_)
        ));
    }

    #[test]
    fn stats_count_only_measured_replies_but_every_error() {
        let mut s = Stats::default();
        s.reply(Op::Get(1), Reply::Hit, Duration::from_micros(5), false);
        s.reply(
            Op::Get(1),
            Reply::Wrong("k", "first".into()),
            Duration::ZERO,
            false,
        );
        s.reply(Op::Get(1), Reply::Hit, Duration::from_micros(5), true);
        s.reply(Op::Get(2), Reply::Miss, Duration::from_micros(7), true);
        s.reply(Op::Set(2), Reply::Stored, Duration::from_micros(9), true);
        s.reply(
            Op::Set(2),
            Reply::Wrong("k", "second".into()),
            Duration::ZERO,
            true,
        );
        assert_eq!((s.ops, s.gets, s.hits, s.misses, s.sets), (3, 2, 1, 1, 1));
        assert_eq!(s.errors, 2);
        assert_eq!(s.error_kinds["k"], (2, "first".to_string()));
        assert_eq!(s.latency_ns.len(), 3);
        assert_eq!(s.latency_ns.max(), s.latency_ns.highest_equivalent(9000));
    }
}
