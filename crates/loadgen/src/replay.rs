//! The connections of `memfleet bench replay` (`memfleet_bench::load::replay`): they replay a stream of trace
//! requests against one live server with look-aside semantics and count what happened into a
//! [`Report`], overall and per window of trace time, exactly as `memfleet sim`'s in-process
//! replay does (same [`Report`], same rules), so a live miss ratio and a simulated one mean
//! the same thing.
//!
//! Semantics, per request: `get`/`gets` send a `get`; on a miss the connection sends a `set`
//! of the request's value size and TTL (the fill; not when the value size is 0, as in the
//! simulator). `set`/`add`/`replace`/`cas` are sent as `set`, `delete` as `delete`;
//! `append`/`prepend`/`incr`/`decr` are only counted. A value larger than [`MAX_VALUE`] is
//! never sent (counted in `skipped_large`): servers refuse items over 1 MiB by default.
//!
//! Ordering: a dispatcher reads the trace and hands each request to the connection its key
//! hashes to, so every key's requests stay in trace order on one connection. A connection
//! sends batches of up to `depth` requests in one write (pipelining) and sends the fills of a
//! batch's misses first in the next batch. A key can come back within one batch (a hot key
//! under Zipf popularity does, every few requests), before its fill is sent; the replies of a
//! batch are therefore counted as a serial replay would have seen them: a get that misses
//! while an earlier get of the same batch has its fill pending counts as a hit (in trace
//! order the fill came first) and sends no second fill, and a later set or delete of the key
//! cancels its pending fill (in trace order it came after the fill). Only the interleaving
//! of different keys across connections differs from the trace, by at most `conns × depth`
//! requests. (Stopping a batch at a repeated key instead keeps batches of 2 or 3 requests on
//! the hot key's connection, and the replay runs at a fraction of the server's speed.)
//!
//! Pacing and TTLs: see [`Pacing`]. Not here: starting servers, tables and files
//! (the bench's `replay` scenario).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use memfleet_protocol::reply::{self, frame, ErrorClass, Frame, ReplyKind, ServerReply};
use memfleet_protocol::response::Status;
use serde::{Serialize, Serializer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use memfleet_sim::keys::write_key;
use memfleet_sim::report::Report;
use memfleet_sim::request::{Request, TraceOp};
use memfleet_sim::trace::RequestStream;

/// Largest value sent (memcached's and memfleet's default item size limit is 1 MiB, key and
/// item header included).
pub const MAX_VALUE: u32 = 1_000_000;
/// memcached reads a TTL above 30 days as an absolute Unix time; longer ones are sent as this.
const MAX_RELATIVE_TTL: u32 = 30 * 86_400;

/// How trace time maps to wall time.
///
/// With a speed-up S > 0, trace time is compressed S-fold: the request recorded at trace
/// second t (counted from the first request) is sent no earlier than t/S wall seconds after
/// the replay starts, and a TTL of T trace seconds is sent as ⌈T/S⌉ wall seconds (at least
/// 1, as 0 would mean "never expires"). An item set at trace time t then expires at about
/// trace time t + T, the same point of the trace as in production, give or take S trace
/// seconds: memcached's TTLs are whole seconds and its clock ticks once a second. The replay
/// goes as fast as the server goes up to that pace; if the server falls behind, requests are
/// sent late and expirations fall *earlier* in the trace than they should (the report's
/// `lag` says by how much).
///
/// With S = 0 the replay is unpaced (as fast as the server goes) and TTLs are sent as
/// recorded: a replay of a long trace in a few seconds then sees almost no expiration.
/// TTLs above 30 days are sent as 30 days (memcached reads larger ones as a Unix time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pacing {
    /// Trace seconds per wall second; 0 = unpaced.
    pub speedup: f64,
}

impl Pacing {
    /// The TTL to send for a recorded TTL of `ttl` trace seconds (0 stays 0: no expiry).
    pub fn wire_ttl(&self, ttl: u32) -> u32 {
        if ttl == 0 {
            return 0;
        }
        let wall = if self.speedup > 0.0 {
            (f64::from(ttl) / self.speedup).ceil().max(1.0) as u32
        } else {
            ttl
        };
        wall.min(MAX_RELATIVE_TTL)
    }

    /// When, after the start, the request at trace second `t` may be sent.
    fn release_at(&self, t: u32) -> Option<Duration> {
        (self.speedup > 0.0).then(|| Duration::from_secs_f64(f64::from(t) / self.speedup))
    }
}

/// How to replay against one server.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// Connections (keys are spread over them by hash).
    pub conns: usize,
    /// Requests per batch written at once.
    pub depth: usize,
    /// Window width in trace seconds.
    pub window_secs: u32,
    /// Trace time vs wall time.
    pub pacing: Pacing,
}

/// What a replay against a live server did, beyond the simulator's [`Report`]. As JSON (a
/// row of `replay.json`): the report's fields, then these, `lag` as `lag_secs`, without
/// `first_error`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveReport {
    /// The same counters as `memfleet sim` (cache = the server's name).
    #[serde(flatten)]
    pub report: Report,
    /// Sets (trace sets and fills) the server refused with `SERVER_ERROR` (out of memory).
    pub rejected_sets: u64,
    /// Fills and sets not sent because the value is over [`MAX_VALUE`].
    pub skipped_large: u64,
    /// Replies that made no sense for their request, with the first one.
    pub errors: u64,
    /// The first wrong reply.
    #[serde(skip)]
    pub first_error: Option<String>,
    /// Longest time a request was sent after its paced time.
    #[serde(rename = "lag_secs", serialize_with = "seconds")]
    pub lag: Duration,
}

fn seconds<S: Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(d.as_secs_f64())
}

/// One request as a connection sends it.
struct Job {
    op: TraceOp,
    key: Vec<u8>,
    value_size: u32,
    /// TTL to send, in wall seconds.
    ttl: u32,
    /// Window index of its trace time.
    window: usize,
    /// A fill after a miss rather than a trace request.
    fill: bool,
}

type Shared = Rc<RefCell<LiveReport>>;

/// Replays `requests` against `addr`; fails on a trace error or a broken connection.
pub async fn replay(
    addr: SocketAddr,
    requests: RequestStream,
    name: &str,
    config: &ReplayConfig,
) -> Result<LiveReport> {
    let started = Instant::now();
    let window = config.window_secs.max(1);
    let shared: Shared = Rc::new(RefCell::new(LiveReport {
        report: Report {
            cache: name.to_string(),
            window_secs: window,
            ..Report::default()
        },
        ..LiveReport::default()
    }));
    let mut senders = Vec::with_capacity(config.conns);
    let mut tasks = Vec::with_capacity(config.conns);
    for _ in 0..config.conns.max(1) {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        let (tx, rx) = mpsc::channel(config.depth * 4);
        senders.push(tx);
        let conn = Connection {
            stream,
            jobs: rx,
            depth: config.depth.max(1),
            shared: shared.clone(),
        };
        tasks.push(tokio::task::spawn_local(conn.run()));
    }
    let dispatched = dispatch(requests, &senders, config, window, &shared, started).await;
    drop(senders);
    for task in tasks {
        task.await.context("a replay connection panicked")??;
    }
    dispatched?;
    let mut live = Rc::try_unwrap(shared)
        .map_err(|_| anyhow::anyhow!("replay connections outlived the replay"))?
        .into_inner();
    live.report.elapsed = started.elapsed();
    Ok(live)
}

/// Reads the trace, counts each request's window and hands it to its key's connection.
async fn dispatch(
    requests: RequestStream,
    senders: &[mpsc::Sender<Job>],
    config: &ReplayConfig,
    window: u32,
    shared: &Shared,
    started: Instant,
) -> Result<()> {
    let mut first: Option<u32> = None;
    let mut clock = 0u32;
    for req in requests {
        let req: Request = req?;
        let first = *first.get_or_insert(req.time);
        // As in the simulator: time is relative to the first request and never runs back.
        clock = clock.max(req.time.saturating_sub(first));
        if let Some(at) = config.pacing.release_at(clock) {
            let elapsed = started.elapsed();
            if elapsed < at {
                tokio::time::sleep(at - elapsed).await;
            } else {
                let mut s = shared.borrow_mut();
                s.lag = s.lag.max(elapsed - at);
            }
        }
        let w = shared.borrow_mut().report.window_for(clock, window);
        {
            let mut s = shared.borrow_mut();
            let r = &mut s.report;
            r.requests += 1;
            r.sim_secs = clock;
            if matches!(
                req.op,
                TraceOp::Append | TraceOp::Prepend | TraceOp::Incr | TraceOp::Decr
            ) {
                r.other += 1;
                continue;
            }
        }
        let mut key = Vec::with_capacity(req.key_size.clamp(1, 250) as usize);
        write_key(req.key, req.key_size, &mut key);
        let job = Job {
            op: req.op,
            key,
            value_size: req.value_size,
            ttl: config.pacing.wire_ttl(req.ttl),
            window: w,
            fill: false,
        };
        // Fibonacci hashing of the key id: any spread will do, as long as a key has one home.
        let home = (req.key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % senders.len();
        if senders[home].send(job).await.is_err() {
            // The connection ended with an error; its task reports it.
            break;
        }
    }
    Ok(())
}

/// One connection's loop: batch, write, read every reply, queue the fills.
struct Connection {
    stream: TcpStream,
    jobs: mpsc::Receiver<Job>,
    depth: usize,
    shared: Shared,
}

impl Connection {
    async fn run(mut self) -> Result<()> {
        let value = vec![b'v'; MAX_VALUE as usize];
        let mut fills: Vec<Job> = Vec::new();
        let mut out = Vec::with_capacity(64 << 10);
        let mut inbuf: Vec<u8> = Vec::with_capacity(64 << 10);
        let mut open = true;
        loop {
            let mut batch: Vec<Job> = std::mem::take(&mut fills);
            let fill_count = batch.len();
            while open && batch.len() - fill_count < self.depth {
                let next = if batch.is_empty() {
                    self.jobs.recv().await
                } else {
                    match self.jobs.try_recv() {
                        Ok(job) => Some(job),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => None,
                    }
                };
                let Some(job) = next else {
                    open = false;
                    break;
                };
                batch.push(job);
            }
            if batch.is_empty() {
                return Ok(());
            }
            out.clear();
            let mut sent = Vec::with_capacity(batch.len());
            for job in batch {
                if encode(&job, &value, &mut out) {
                    sent.push(job);
                } else {
                    self.shared.borrow_mut().skipped_large += 1;
                    self.count_unsent(&job);
                }
            }
            // Write and read at once: a batch of large sets behind gets with large values
            // would otherwise fill both directions' socket buffers and stall.
            let (mut reader, mut writer) = self.stream.split();
            let read_all = async {
                let mut replies = Vec::with_capacity(sent.len());
                for job in &sent {
                    replies.push(read_reply(&mut reader, &mut inbuf, job).await?);
                }
                anyhow::Ok(replies)
            };
            let (written, replies) = tokio::join!(writer.write_all(&out), read_all);
            written?;
            for (job, reply) in sent.into_iter().zip(replies?) {
                self.count(job, reply, &mut fills);
            }
        }
    }

    /// A get whose value was too large to store still counts as a get (and a miss).
    fn count_unsent(&self, job: &Job) {
        if is_trace_get(job) {
            let mut s = self.shared.borrow_mut();
            count_get(&mut s.report, job, false);
        }
    }

    /// Counts a reply, in batch order; `fills` holds the fills this batch's misses queued so
    /// far (see the module docs for why a pending fill turns a miss into a hit).
    fn count(&self, job: Job, reply: CountedReply, fills: &mut Vec<Job>) {
        let mut s = self.shared.borrow_mut();
        let s = &mut *s;
        match (job.op, reply) {
            (_, CountedReply::Wrong(what)) => {
                s.errors += 1;
                s.first_error
                    .get_or_insert(format!("{} {}", job.op.as_str(), what));
            }
            (TraceOp::Get | TraceOp::Gets, reply) if !job.fill => {
                let filled = fills.iter().any(|f| f.key == job.key);
                let hit = reply == CountedReply::Hit || filled;
                count_get(&mut s.report, &job, hit);
                if !hit && job.value_size > 0 {
                    fills.push(Job { fill: true, ..job });
                }
            }
            (TraceOp::Delete, _) => {
                fills.retain(|f| f.key != job.key);
                s.report.deletes += 1;
            }
            (_, reply) => {
                if !job.fill {
                    fills.retain(|f| f.key != job.key);
                }
                if job.fill {
                    s.report.fills += 1;
                } else {
                    s.report.sets += 1;
                }
                if reply == CountedReply::Refused {
                    s.rejected_sets += 1;
                }
            }
        }
    }
}

/// What a reply said, as far as counting goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CountedReply {
    /// A get returned a value.
    Hit,
    /// A get returned `END` alone.
    Miss,
    /// `STORED`, `DELETED` or `NOT_FOUND` (to a delete).
    Done,
    /// A store the server refused with `SERVER_ERROR` (out of memory, too large).
    Refused,
    /// Anything else: shown.
    Wrong(String),
}

fn is_trace_get(job: &Job) -> bool {
    matches!(job.op, TraceOp::Get | TraceOp::Gets) && !job.fill
}

/// Reads one complete reply for `job` (leaving what follows in `inbuf`) and classifies it.
async fn read_reply<R: AsyncReadExt + Unpin>(
    reader: &mut R,
    inbuf: &mut Vec<u8>,
    job: &Job,
) -> Result<CountedReply> {
    let get = is_trace_get(job);
    let kind = if get {
        ReplyKind::Retrieval
    } else {
        ReplyKind::Line
    };
    loop {
        if let Frame::Complete(n) = frame(inbuf, kind, MAX_VALUE as usize + 1024)? {
            let r = &inbuf[..n];
            let reply = match (reply::decode(r, kind), job.op) {
                (Ok(ServerReply::Values(v)), _) if get => {
                    if v.is_empty() {
                        CountedReply::Miss
                    } else {
                        CountedReply::Hit
                    }
                }
                (Ok(ServerReply::Status(Status::Deleted | Status::NotFound)), TraceOp::Delete) => {
                    CountedReply::Done
                }
                (Ok(ServerReply::Status(Status::Stored)), _) if !get => CountedReply::Done,
                (Ok(ServerReply::Error(ErrorClass::Server, _)), op)
                    if !get && op != TraceOp::Delete =>
                {
                    CountedReply::Refused
                }
                _ => CountedReply::Wrong(
                    String::from_utf8_lossy(&r[..r.len().min(120)])
                        .escape_debug()
                        .to_string(),
                ),
            };
            inbuf.drain(..n);
            return Ok(reply);
        }
        inbuf.reserve(16 << 10);
        if reader.read_buf(inbuf).await? == 0 {
            bail!("the server closed the connection in the middle of a replay");
        }
    }
}

fn count_get(r: &mut Report, job: &Job, hit: bool) {
    r.gets += 1;
    r.get_bytes += u64::from(job.value_size);
    r.windows[job.window].gets += 1;
    if hit {
        r.hits += 1;
    } else {
        r.misses += 1;
        r.miss_bytes += u64::from(job.value_size);
        r.windows[job.window].misses += 1;
    }
}

/// Appends the request's bytes; false when its value is too large to send.
fn encode(job: &Job, value: &[u8], out: &mut Vec<u8>) -> bool {
    let (verb, stores) = match job.op {
        TraceOp::Get | TraceOp::Gets if !job.fill => ("get", false),
        TraceOp::Delete => ("delete", false),
        _ => ("set", true),
    };
    if stores && job.value_size > MAX_VALUE {
        return false;
    }
    out.extend_from_slice(verb.as_bytes());
    out.push(b' ');
    out.extend_from_slice(&job.key);
    if stores {
        let len = job.value_size as usize;
        out.extend_from_slice(format!(" 0 {} {len}\r\n", job.ttl).as_bytes());
        out.extend_from_slice(&value[..len]);
    }
    out.extend_from_slice(b"\r\n");
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_compressed_by_the_speedup_and_never_zero() {
        let paced = Pacing { speedup: 60.0 };
        assert_eq!(paced.wire_ttl(0), 0, "no TTL stays no TTL");
        assert_eq!(paced.wire_ttl(120), 2);
        assert_eq!(paced.wire_ttl(121), 3, "rounded up to whole seconds");
        assert_eq!(paced.wire_ttl(1), 1, "a short TTL still expires, not never");
        assert_eq!(paced.release_at(90), Some(Duration::from_millis(1500)));
        let unpaced = Pacing { speedup: 0.0 };
        assert_eq!(unpaced.wire_ttl(3600), 3600);
        assert_eq!(unpaced.wire_ttl(90 * 86_400), MAX_RELATIVE_TTL);
        assert_eq!(unpaced.release_at(90), None);
    }

    #[test]
    fn requests_are_encoded_as_memcached_text() {
        let job = |op, fill| Job {
            op,
            key: b"A.xx".to_vec(),
            value_size: 3,
            ttl: 7,
            window: 0,
            fill,
        };
        let value = vec![b'v'; 8];
        let mut out = Vec::new();
        assert!(encode(&job(TraceOp::Get, false), &value, &mut out));
        assert!(encode(&job(TraceOp::Get, true), &value, &mut out));
        assert!(encode(&job(TraceOp::Add, false), &value, &mut out));
        assert!(encode(&job(TraceOp::Delete, false), &value, &mut out));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "get A.xx\r\nset A.xx 0 7 3\r\nvvv\r\nset A.xx 0 7 3\r\nvvv\r\ndelete A.xx\r\n"
        );
        let mut big = job(TraceOp::Set, false);
        big.value_size = MAX_VALUE + 1;
        assert!(!encode(&big, &value, &mut Vec::new()));
    }
}
