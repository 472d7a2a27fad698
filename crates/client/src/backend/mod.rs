//! One backend server: a few long-lived connections that every client's requests share,
//! pipelined, and the server's health.
//!
//! A connection is one task: requests queue on a channel; the task writes every request
//! waiting (one `write` for many, from any number of clients) and matches the replies, which
//! the server sends in order, to the requests in order, framing each with
//! `memfleet_protocol::reply`. A caller that gives up on a reply (its timeout) just drops its
//! receiver: the reply still arrives and is matched and discarded, so the order never slips.
//!
//! Health (the paper's and mcrouter's TKO, "technical knockout"): every timeout or
//! connection failure counts; `failure_limit` in a row mark the server down, and requests
//! then fail at once instead of waiting for timeouts. While down, a probe sends `version`
//! with a growing pause (the retry timeout, doubling up to a minute); its first success
//! brings the server back. A pool that ejects down servers (`auto_eject_hosts`, see
//! `Pool::pick`) routes their keys elsewhere meanwhile, and its probes keep the retry
//! timeout as their pause, as twemproxy retries an ejected server every
//! `server_retry_timeout`. Every down and up is counted in [`health_epoch`].
//!
//! TLS (a pool's `tls = true`): each connection, and each probe, runs a TLS handshake after
//! connecting, within the pool's timeout; the connection is then used as a plain one.
//!
//! Authentication (a pool's `auth_user`): each connection, and each probe, then sends
//! memcached's ASCII login (`memfleet_protocol::auth::login_request`) and waits for
//! `STORED` before any request. A refusal fails the requests that were waiting for the
//! connection with [`BackendError::Auth`] (logged, and counted towards marking the server
//! down like any failure).

mod aside;
mod binary_carrier;
mod connect;

use crate::conn_stats::{command_of, ConnStats, Measured, Stamp};
use crate::outstanding::{Gate, Place};
use connect::connect;
pub use connect::{BackendAuth, BackendOptions, BackendTls};
use memfleet_protocol::reply::{frame, Frame, ReplyKind};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// The largest value a reply may carry (a server claiming more is not trusted).
const MAX_VALUE: usize = 1 << 30;
/// Replies a connection waits for before it stops reading new requests off its queue.
const QUEUE: usize = 4096;

/// Why a request got no reply from its server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// Marked down after repeated failures (fails fast until a probe succeeds).
    #[error("server {0} is marked down")]
    Down(String),
    /// The connection failed or the server sent garbage.
    #[error("connection to {0} failed")]
    Connection(String),
    /// The server has spooled deletes to take before it serves reads again (the read
    /// was not sent).
    #[error("server {0} is replaying spooled deletes")]
    Replaying(String),
    /// No reply within the pool's timeout.
    #[error("server {0} timed out")]
    Timeout(String),
    /// The server refused the pool's authentication (or answered it with something else
    /// than `STORED`); the text is its reply.
    #[error("authentication to server {server} failed: {reply}")]
    Auth {
        /// The server.
        server: String,
        /// What it answered, or why there was no answer.
        reply: String,
    },
    /// Its pool's `max_outstanding` requests were in flight and its queue was full (the
    /// request was not sent).
    #[error("max_outstanding: {limit} requests in flight to server {server} and {queue} waiting")]
    Outstanding {
        /// The server.
        server: String,
        /// The pool's `max_outstanding`.
        limit: usize,
        /// The pool's `max_outstanding_queue`.
        queue: usize,
    },
}

/// Where a request's reply goes.
type ReplyTo = oneshot::Sender<Result<Vec<u8>, BackendError>>;

/// A request for a connection task.
struct Job {
    bytes: Vec<u8>,
    kind: ReplyKind,
    reply: ReplyTo,
    /// Its place under the server's `max_outstanding`, given back with the reply.
    place: Option<Place>,
}

/// A request waiting for its reply on a connection, and when it was written.
type Waiting = (ReplyKind, ReplyTo, Option<Place>, Stamp);

/// Downs and ups of every backend of the process so far: what a pool that ejects down
/// servers compares, with one load per key, to the count its live ring was built at.
static HEALTH_EPOCH: AtomicU64 = AtomicU64::new(0);

/// How many times, so far, any backend of this process was marked down or came back up.
/// Read after it, each backend's [`Health::down`] is at least as new.
pub fn health_epoch() -> u64 {
    HEALTH_EPOCH.load(Ordering::Acquire)
}

/// A backend server shared by every client of the router.
pub struct Backend {
    addr: SocketAddr,
    name: String,
    options: BackendOptions,
    /// Each connection's queue, and its share of `max_outstanding` when the pool sets one.
    conns: Vec<(mpsc::UnboundedSender<Job>, Option<Arc<Gate>>)>,
    /// Each connection's commands and latencies.
    measured: Vec<Arc<ConnStats>>,
    health: Arc<Health>,
    /// False for [`Backend::unavailable`]: no address to connect or probe.
    reachable: bool,
    /// Its pool's cap on servers marked down at once (set when the pool is built).
    budget: arc_swap::ArcSwapOption<DownBudget>,
}

/// How many of a pool's servers may be marked down at once (`max_down_fraction`), how many
/// are, and how many times a server was left up because the cap was reached.
#[derive(Debug)]
pub struct DownBudget {
    max: usize,
    down: std::sync::atomic::AtomicUsize,
    /// Times a failing server was not marked down: the cap was reached.
    pub refused: AtomicU64,
}

impl DownBudget {
    /// A cap of `max` servers down, `down` of them down now.
    pub fn new(max: usize, down: usize) -> Arc<DownBudget> {
        Arc::new(DownBudget {
            max,
            down: down.into(),
            refused: AtomicU64::new(0),
        })
    }

    /// One more down, if the cap allows.
    fn take(&self) -> bool {
        self.down
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                (d < self.max).then_some(d + 1)
            })
            .is_ok()
    }

    /// One fewer down.
    fn give_back(&self) {
        let _ = self
            .down
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| d.checked_sub(1));
    }
}

/// Counters and state that outlive connections.
#[derive(Default)]
pub struct Health {
    /// Failures in a row.
    pub failures: AtomicU32,
    /// Marked down.
    pub down: AtomicBool,
    /// Requests sent.
    pub requests: AtomicU64,
    /// Requests that failed (timeout, connection, down).
    pub errors: AtomicU64,
    /// Times marked down.
    pub knockouts: AtomicU64,
}

impl Backend {
    /// A backend for `addr` (`name` is how logs and stats call it); connections are made
    /// lazily by their tasks, which must run on a tokio runtime.
    pub fn new(addr: SocketAddr, name: String, options: BackendOptions) -> Arc<Backend> {
        let health = Arc::new(Health::default());
        let n = options.connections.max(1);
        let measured: Vec<Arc<ConnStats>> = (0..n).map(|_| Arc::default()).collect();
        let conns = (0..n)
            .map(|lane| {
                // Unbounded so that queueing is synchronous (see `call`); what one client
                // can have queued is bounded by its in-flight limit in `proxy.rs`, and what
                // all have by `max_outstanding` when the pool sets it.
                let (tx, rx) = mpsc::unbounded_channel();
                let gate = options.outstanding.map(|limit| Gate::new(limit, n));
                let cap = gate.as_ref().map_or(usize::MAX, |g| g.in_flight);
                let task = connection(addr, rx, options.clone(), cap, measured[lane].clone());
                crate::lanes::spawn(lane, task);
                (tx, gate)
            })
            .collect();
        Arc::new(Backend {
            addr,
            name,
            options,
            conns,
            measured,
            health,
            reachable: true,
            budget: Default::default(),
        })
    }

    /// A server without an address to reach (a DNS-discovered member whose address is
    /// not known yet, or the stand-in of a pool that has no member): marked down from the
    /// start, so every request fails at once; nothing connects and no probe brings it up.
    pub fn unavailable(name: String, options: BackendOptions) -> Arc<Backend> {
        let health = Arc::new(Health::default());
        health.down.store(true, Ordering::Release);
        Arc::new(Backend {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            name,
            options,
            conns: Vec::new(),
            measured: Vec::new(),
            health,
            reachable: false,
            budget: Default::default(),
        })
    }

    /// Whether it has an address (see [`Backend::unavailable`]).
    pub fn reachable(&self) -> bool {
        self.reachable
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The settings it was made with.
    pub fn options(&self) -> &BackendOptions {
        &self.options
    }

    /// The server's name (`host:port`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Puts it under its pool's cap on servers marked down (a server in several pools:
    /// the last pool built).
    pub fn set_down_budget(&self, budget: Arc<DownBudget>) {
        self.budget.store(Some(budget));
    }

    /// Its health and counters.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// The commands sent to it and their latencies, over its connections.
    pub fn measured(&self) -> Measured {
        let mut m = Measured::default();
        for c in &self.measured {
            c.add_to(&mut m);
        }
        m
    }

    /// Under `max_outstanding`: (requests in flight or waiting now, requests that waited,
    /// requests refused), over its connections; `None` without the cap.
    pub fn outstanding(&self) -> Option<(u64, u64, u64)> {
        self.options.outstanding?;
        Some(
            self.conns
                .iter()
                .filter_map(|(_, g)| g.as_ref())
                .fold((0, 0, 0), |(a, b, c), g| {
                    let (x, y, z) = g.counts();
                    (a + x, b + y, c + z)
                }),
        )
    }

    /// Queues `bytes` (one complete request) on connection `lane` (mod the connection
    /// count) *now*, and returns the wait for its reply (up to the timeout). Queueing before
    /// returning is what keeps one client's requests to a server in order: a client always
    /// uses the same lane, and a lane is one connection, answered in order.
    pub fn call(
        self: &Arc<Self>,
        lane: usize,
        bytes: Vec<u8>,
        kind: ReplyKind,
    ) -> impl std::future::Future<Output = Result<Vec<u8>, BackendError>> + Send + 'static {
        self.health.requests.fetch_add(1, Ordering::Relaxed);
        // Down first: a server without an address (`Backend::unavailable`) is down and has
        // no connection to pick.
        let queued = if self.health.down.load(Ordering::Acquire) || self.conns.is_empty() {
            Err(BackendError::Down(self.name.clone()))
        } else {
            let (conn, gate) = &self.conns[lane % self.conns.len()];
            match gate.as_ref().map(Gate::enter) {
                Some(None) => {
                    let limit = self.options.outstanding.expect("a gate has a limit");
                    Err(BackendError::Outstanding {
                        server: self.name.clone(),
                        limit: limit.limit,
                        queue: limit.queue,
                    })
                }
                place => {
                    let (tx, rx) = oneshot::channel();
                    let job = Job {
                        bytes,
                        kind,
                        reply: tx,
                        place: place.flatten(),
                    };
                    match conn.send(job) {
                        Ok(()) => Ok(rx),
                        Err(_) => Err(BackendError::Connection(self.name.clone())),
                    }
                }
            }
        };
        let this = self.clone();
        async move {
            let rx = match queued {
                Ok(rx) => rx,
                // Refused by `max_outstanding`: counted there, not an error of the server.
                Err(e @ BackendError::Outstanding { .. }) => return Err(e),
                Err(e) => {
                    // Failing fast while down is not a new failure.
                    this.health.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
            };
            let result = match tokio::time::timeout(this.options.timeout, rx).await {
                Err(_) => Err(BackendError::Timeout(this.name.clone())),
                Ok(Err(_)) => Err(BackendError::Connection(this.name.clone())),
                Ok(Ok(r)) => r,
            };
            match &result {
                // Read first: a store on every reply would pull the line every worker
                // reads away from all of them, though it is almost always 0 already.
                Ok(_) if this.health.failures.load(Ordering::Relaxed) != 0 => {
                    this.health.failures.store(0, Ordering::Relaxed)
                }
                Ok(_) => {}
                Err(_) => this.failed(),
            }
            result
        }
    }

    fn failed(self: &Arc<Self>) {
        self.health.errors.fetch_add(1, Ordering::Relaxed);
        let n = self.health.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if n < self.options.failure_limit || self.health.down.load(Ordering::Acquire) {
            return;
        }
        let budget = self.budget.load_full();
        if let Some(b) = &budget {
            if !b.take() {
                // Past the pool's cap: its errors go on counting, one request at a time.
                if b.refused.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(server = %self.name, "not marked down: max_down_fraction reached");
                }
                return;
            }
        }
        if self.health.down.swap(true, Ordering::AcqRel) {
            if let Some(b) = &budget {
                b.give_back(); // marked down meanwhile by another failure
            }
        } else {
            self.health.knockouts.fetch_add(1, Ordering::Relaxed);
            HEALTH_EPOCH.fetch_add(1, Ordering::Release);
            tracing::warn!(server = %self.name, failures = n, "server marked down");
            tokio::spawn(aside::probe(self.clone()));
        }
    }

    /// The pause before the next probe of this down server: `backed_off`, or the retry
    /// timeout itself when its pool ejects it (twemproxy retries an ejected server every
    /// `server_retry_timeout`).
    fn retry_pause(&self, backed_off: Duration) -> Duration {
        if self.options.eject {
            self.options.retry
        } else {
            backed_off
        }
    }
}

/// A connection task: (re)connects on demand, writes queued requests in batches, and hands
/// each reply to its request in order, with at most `cap` in flight (the connection's share
/// of `max_outstanding`; the rest wait on its queue, and one whose caller gave up waiting is
/// not sent).
async fn connection(
    addr: SocketAddr,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    options: BackendOptions,
    cap: usize,
    measured: Arc<ConnStats>,
) {
    let mut waiting: VecDeque<Waiting> = VecDeque::new();
    let mut batch = Vec::new();
    let mut inbuf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let limited = cap != usize::MAX;
    let fail_all = |waiting: &mut VecDeque<Waiting>| {
        for (_, tx, _, _) in waiting.drain(..) {
            let _ = tx.send(Err(BackendError::Connection(addr.to_string())));
        }
    };
    'connect: loop {
        // Wait for work before connecting, so an idle pool holds no dead sockets.
        let Some(first) = jobs.recv().await else {
            return;
        };
        let (mut rd, mut wr) = match connect(
            addr,
            options.tls.as_ref(),
            options.auth.as_ref(),
            options.timeout,
        )
        .await
        {
            Ok(halves) => halves,
            Err(e) => {
                let _ = first.reply.send(Err(e.to_backend(addr)));
                continue 'connect;
            }
        };
        inbuf.clear();
        let mut pending = Some(first);
        let mut closed = false;
        loop {
            // Everything queued goes out in one write.
            batch.clear();
            let mut written = None;
            while let Some(job) = pending.take().or_else(|| {
                (waiting.len() < cap)
                    .then(|| jobs.try_recv().ok())
                    .flatten()
            }) {
                if limited && job.reply.is_closed() {
                    continue; // it timed out waiting for a place: nobody reads its reply
                }
                batch.extend_from_slice(&job.bytes);
                measured.sent(command_of(&job.bytes));
                let at = *written.get_or_insert_with(Stamp::now);
                waiting.push_back((job.kind, job.reply, job.place, at));
                if batch.len() > 256 * 1024 {
                    break;
                }
            }
            // (A flush is free on TCP; TLS may hold the end of a record until it.)
            if !batch.is_empty()
                && (wr.write_all(&batch).await.is_err() || wr.flush().await.is_err())
            {
                fail_all(&mut waiting);
                continue 'connect;
            }
            if closed && waiting.is_empty() {
                return;
            }
            inbuf.reserve(16 * 1024);
            tokio::select! {
                job = jobs.recv(), if !closed && waiting.len() < QUEUE.min(cap) => match job {
                    Some(job) => pending = Some(job),
                    None => closed = true,
                },
                // read_buf is cancel-safe: a select won by the other branch loses nothing.
                // Read while idle too: a server that closed the connection (it restarted,
                // say) is noticed now, and the next request gets a new connection instead
                // of failing on the dead one (and, at a failure limit of 1, marking the
                // server down again).
                read = rd.read_buf(&mut inbuf) => {
                    if !matches!(read, Ok(n) if n > 0) {
                        fail_all(&mut waiting);
                        continue 'connect;
                    }
                    if waiting.is_empty() {
                        tracing::warn!(server = %addr, "a reply nobody asked for: closing the connection");
                        continue 'connect;
                    }
                    let mut used = 0;
                    let mut now = None;
                    while let Some((kind, _, _, _)) = waiting.front() {
                        match frame(&inbuf[used..], *kind, MAX_VALUE) {
                            Ok(Frame::Complete(n)) => {
                                let (_, tx, _, at) = waiting.pop_front().expect("checked");
                                let now = *now.get_or_insert_with(Stamp::now);
                                measured.replied(now.micros_since(at));
                                let _ = tx.send(Ok(inbuf[used..used + n].to_vec()));
                                used += n;
                            }
                            Ok(Frame::Incomplete) => break,
                            Err(e) => {
                                tracing::warn!(server = %addr, error = %e, "closing the connection");
                                fail_all(&mut waiting);
                                continue 'connect;
                            }
                        }
                    }
                    inbuf.drain(..used);
                }
            }
        }
    }
}
