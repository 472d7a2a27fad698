//! One client connection: requests are parsed as they arrive, routed to their servers at
//! once (so a client's pipelined requests run in parallel across servers), and the replies
//! written back in request order.
//!
//! The reader half parses and dispatches: for each request it sends the server requests
//! and queues a [`QueuedReply`] (what to wait for and how to build the client's reply).
//! The writer half takes them in order, awaits them, and writes. A multi-key get is split by server,
//! sent to each in parallel and reassembled in the client's key order; a failed server's
//! keys are misses, not an error for the whole request.
//!
//! With `--auth-file`, a connection first passes memcached's ASCII authentication
//! (`memfleet_protocol::auth`, the server's `-Y` rules and replies): until a `set` carries a
//! known `user password`, every request is refused and nothing reaches a server.
//!
//! What is forwarded is always a request that gets a reply (`noreply` and meta `q` are
//! stripped going out and applied coming back), so every connection to a server keeps
//! one reply per request and never loses its place.
//!
//! | file | what it holds |
//! |------|---------------|
//! | (this file) | the connection: the reader that parses and dispatches, the writer that replies in order |
//! | `pool.rs` | a plain pool listener's fast path: one server per key, multi-gets split per server |
//! | `tree.rs` | a route tree: one `RouteRequest` per key, reassembled |
//! | `local.rs` | what the router answers itself: `stats`, `flush_all`, `version`, the admin route key |
//! | `rewrite.rs` | requests rewritten for forwarding (`noreply` and `q` stripped, meta lines split) |
//! | `queued.rs` | [`QueuedReply`], what the writer waits for; a forwarded request's reply |

mod binary;
mod cluster_config;
mod local;
mod pool;
mod queued;
mod remote_markers;
mod rewrite;
mod tree;

pub(crate) use self::local::note_start;
pub(crate) use self::queued::QueuedReply;
use self::queued::{local, ReadyRun};
use crate::reloadable::{ClientAuth, RouteSlot, ServedTopology};
use crate::route_latency;
use memfleet_client::conn_stats::Stamp;
use memfleet_client::{Route, RouteContext};
use memfleet_protocol::auth::Attempt;
use memfleet_protocol::{parse, ErrorKind, ParseError, ParserConfig, Request};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Queued replies a client may have in flight before the reader waits.
const IN_FLIGHT: usize = 1024;
/// Bytes of unparsed input a client may leave beyond the largest item its route lets
/// through (one request: a command line and at most one such value).
const PENDING_INPUT_SLACK: usize = 64 * 1024;
/// A client's buffers shrink back to this once a large request or reply has passed (the
/// server's rule too: an idle connection must not pin the largest thing it ever sent).
const KEEP_CAPACITY: usize = 32 * 1024;

/// Serves one client until it closes. `lane` picks the connection to each server this
/// client's requests use (always the same one, which keeps them in order).
pub async fn serve(
    slot: RouteSlot,
    served: ServedTopology,
    auth: ClientAuth,
    stream: TcpStream,
    lane: usize,
) {
    let _ = stream.set_nodelay(true);
    // Replicated reads pick a replica per client host, as the paper's clients do.
    let client = stream.peer_addr().map_or(0, |a| client_hash(a.ip()));
    let (rd, wr) = stream.into_split();
    serve_halves(slot, served, auth, rd, wr, RouteContext { lane, client }).await;
}

/// Which replica a client host's replicated reads go to.
fn client_hash(ip: std::net::IpAddr) -> u64 {
    match ip {
        std::net::IpAddr::V4(ip) => xxhash_rust::xxh3::xxh3_64(&ip.octets()),
        std::net::IpAddr::V6(ip) => xxhash_rust::xxh3::xxh3_64(&ip.octets()),
    }
}

/// [`serve`] for a TLS client, its handshake done.
pub async fn serve_tls(
    slot: RouteSlot,
    served: ServedTopology,
    auth: ClientAuth,
    stream: memfleet_tls::tokio_rustls::server::TlsStream<TcpStream>,
    lane: usize,
) {
    let socket = stream.get_ref().0;
    let _ = socket.set_nodelay(true);
    let client = socket.peer_addr().map_or(0, |a| client_hash(a.ip()));
    let (rd, wr) = tokio::io::split(stream);
    serve_halves(slot, served, auth, rd, wr, RouteContext { lane, client }).await;
}

/// [`serve`] for a Unix-socket client (twemproxy's `listen: /path`).
pub async fn serve_unix(
    slot: RouteSlot,
    served: ServedTopology,
    auth: ClientAuth,
    stream: tokio::net::UnixStream,
    lane: usize,
) {
    let (rd, wr) = stream.into_split();
    serve_halves(slot, served, auth, rd, wr, RouteContext { lane, client: 0 }).await;
}

async fn serve_halves(
    slot: RouteSlot,
    served: ServedTopology,
    auth: ClientAuth,
    mut rd: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    wr: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    ctx: RouteContext,
) {
    // Each reply with when its request was read (the clock read once per read).
    let (tx, rx) = mpsc::channel::<(QueuedReply, Stamp)>(IN_FLIGHT);
    // The name of the route this listener serves, for its latencies (looked up per flush).
    let route_name = {
        let (slot, served) = (slot.clone(), served.clone());
        move || served.load().name_of(&slot.load_full())
    };
    let writer = tokio::spawn(write_replies(rx, wr, route_name));
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    // The first byte picks the protocol, as memcached's `-B auto` does.
    if matches!(rd.read_buf(&mut buf).await, Ok(n) if n > 0) {
        if memfleet_protocol::binary::is_binary(buf[0]) {
            binary::read_requests(&slot, &served, &auth, rd, buf, &tx, ctx).await;
        } else {
            read_text(&slot, &served, &auth, rd, buf, &tx, ctx).await;
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// Writes the replies queued on `rx` in order, each once it is ready; records latencies.
async fn write_replies(
    mut rx: mpsc::Receiver<(QueuedReply, Stamp)>,
    mut wr: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    route_name: impl Fn() -> Option<String> + Send + 'static,
) {
    let mut out = Vec::new();
    // When each reply's request was read, and how many replies (a ready run's).
    let mut read_at: Vec<(Stamp, u32)> = Vec::new();
    let mut latency = route_latency::Local::new();
    let written = |read_at: &mut Vec<(Stamp, u32)>, latency: &mut route_latency::Local| {
        // The clock read once per write, however many replies it carries.
        let now = Stamp::now();
        for (read, n) in read_at.drain(..) {
            latency.record(read, now, n);
        }
        if latency.due(now) {
            latency.flush(route_name(), now);
        }
    };
    while let Some((next, read)) = rx.recv().await {
        match next {
            QueuedReply::Reply(reply) => {
                out.extend_from_slice(&reply.await);
                read_at.push((read, 1));
            }
            QueuedReply::Ready { bytes, replies } => {
                out.extend_from_slice(&bytes);
                read_at.push((read, replies));
            }
            QueuedReply::Close => break,
        }
        // Write once nothing else is next (replies to a pipelined batch go out
        // together).
        if rx.is_empty() {
            if wr.write_all(&out).await.is_err() {
                return;
            }
            written(&mut read_at, &mut latency);
            out.clear();
            if out.capacity() > KEEP_CAPACITY {
                out = Vec::new();
            }
        }
    }
    let _ = wr.write_all(&out).await;
    written(&mut read_at, &mut latency);
    latency.flush(route_name(), Stamp::now());
}

/// Reads, parses and dispatches a text-protocol client's requests (`buf` holds what was
/// read first) until it closes or must be closed.
async fn read_text(
    slot: &RouteSlot,
    served: &ServedTopology,
    auth: &ClientAuth,
    mut rd: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    mut buf: Vec<u8>,
    tx: &mpsc::Sender<(QueuedReply, Stamp)>,
    ctx: RouteContext,
) {
    // Items as large as the route's largest `item_size_max` parse (each pool refuses what
    // is over its own); recomputed only when a reload swaps the route.
    let mut parsed_for = slot.load_full();
    let mut cfg = ParserConfig::with_max_item_size(parsed_for.item_size_max());
    let mut swallow = 0usize;
    // What the first read brought is parsed before reading more.
    let mut unread = true;
    // Nothing to pass when the router does not require authentication.
    let mut authenticated = auth.load().is_none();
    let mut ready = ReadyRun::default();
    // Queues a reply after the ready run before it (if any); false once the writer is
    // gone. (A macro, not an async fn: no future of its own on every request's path.)
    macro_rules! queue {
        ($reply:expr, $read:expr) => {{
            let run_sent = match ready.take() {
                Some(run) => tx.send(run).await.is_ok(),
                None => true,
            };
            run_sent && tx.send(($reply, $read)).await.is_ok()
        }};
    }
    'read: loop {
        // What the last read's requests left ready goes before waiting for more.
        if let Some(run) = ready.take() {
            if tx.send(run).await.is_err() {
                break;
            }
        }
        if !read_more(&mut rd, &mut buf, &mut unread).await {
            break;
        }
        let read = Stamp::now();
        let mut at = swallowed(&buf, &mut swallow);
        while at < buf.len() {
            match parse(&buf[at..], &cfg) {
                Ok((request, used)) if !authenticated && !matches!(request, Request::Quit) => {
                    // Judged by the auth file as loaded now (a reload applies to the next
                    // attempt; connections already in stay in, as with memcached).
                    let reply = match &*auth.load() {
                        Some(credentials) => {
                            let attempt = credentials.attempt(&request);
                            authenticated = attempt == Attempt::Accepted;
                            attempt.reply()
                        }
                        None => {
                            authenticated = true;
                            continue;
                        }
                    };
                    at += used;
                    if !queue!(local(reply.to_vec()), read) {
                        break 'read;
                    }
                }
                Ok((request, used)) => {
                    // The route as configured now (a reload applies from the next request).
                    let root = slot.load_full();
                    if !Arc::ptr_eq(&root, &parsed_for) && reparse(&root, &mut parsed_for, &mut cfg)
                    {
                        continue;
                    }
                    let raw = &buf[at..at + used];
                    let next = match route_request(&root, served, ctx, &request, raw, read) {
                        Routed::Queued(next) => next,
                        // Refused: joins the run of ready replies.
                        Routed::Refused(line) => {
                            ready.push(line.as_deref(), read);
                            at += used;
                            continue;
                        }
                    };
                    at += used;
                    let stop = matches!(next, QueuedReply::Close);
                    if !queue!(next, read) || stop {
                        break 'read;
                    }
                }
                Err(ParseError::Incomplete) => break,
                Err(ParseError::Invalid(rejection)) => {
                    if rejection.kind == ErrorKind::TooLarge {
                        let root = slot.load_full();
                        if !Arc::ptr_eq(&root, &parsed_for)
                            && reparse(&root, &mut parsed_for, &mut cfg)
                        {
                            continue;
                        }
                    }
                    let reply = if authenticated {
                        rejection.reply()
                    } else {
                        memfleet_protocol::auth::rejection_reply(rejection.kind)
                    }
                    .to_vec();
                    let close = rejection.close();
                    if !reply.is_empty() {
                        let _ = queue!(local(reply), read);
                    }
                    if close {
                        let _ = queue!(QueuedReply::Close, read);
                        break 'read;
                    }
                    at += skip(rejection.skip, buf.len() - at, &mut swallow);
                }
            }
        }
        if !keep_unparsed(&mut buf, at, &cfg) {
            let _ = queue!(QueuedReply::Close, read);
            break;
        }
    }
    if let Some(run) = ready.take() {
        let _ = tx.send(run).await;
    }
}

/// Reads more of a client's input into `buf`, unless what the first read brought is still
/// to be parsed (`unread`, cleared here). False at the end of the connection.
async fn read_more(
    rd: &mut (impl tokio::io::AsyncRead + Unpin),
    buf: &mut Vec<u8>,
    unread: &mut bool,
) -> bool {
    if std::mem::take(unread) {
        return true;
    }
    buf.reserve(16 * 1024);
    matches!(rd.read_buf(buf).await, Ok(n) if n > 0)
}

/// Where parsing starts in `buf`: after what is left of a refused data block being
/// swallowed (`swallow`, counted down).
fn swallowed(buf: &[u8], swallow: &mut usize) -> usize {
    let n = (*swallow).min(buf.len());
    *swallow -= n;
    n
}

/// The bytes a refusal skips of the `available` ones buffered; the rest of `skip` is
/// swallowed as it arrives.
fn skip(skip: usize, available: usize, swallow: &mut usize) -> usize {
    *swallow = skip.saturating_sub(available);
    skip.min(available)
}

/// Drops the `at` bytes parsed from `buf` and shrinks it back after a large request. False
/// when what is left is more than one request can be (`cfg`'s largest item and a command
/// line): the client is closed.
fn keep_unparsed(buf: &mut Vec<u8>, at: usize, cfg: &ParserConfig) -> bool {
    buf.drain(..at.min(buf.len()));
    if buf.capacity() > KEEP_CAPACITY && buf.len() < buf.capacity() / 4 {
        buf.shrink_to(buf.len().max(16 * 1024));
    }
    buf.len() <= cfg.max_item_size + PENDING_INPUT_SLACK
}

/// Where a request goes.
pub(super) enum Routed {
    /// Its reply, on its way.
    Queued(QueuedReply),
    /// Refused by the pool's rate limit, not logged: the line to answer (`None`:
    /// `noreply`), known at once.
    Refused(Option<Arc<[u8]>>),
}

/// Routes one parsed `request` (its bytes `raw`, read at `read`) down `root`.
pub(super) fn route_request(
    root: &Arc<Route>,
    served: &ServedTopology,
    ctx: RouteContext,
    request: &Request<'_>,
    raw: &[u8],
    read: Stamp,
) -> Routed {
    let next = match &**root {
        // A spooling pool's deletes take the route path, which spools; so does
        // everything while a server replays spooled deletes (reads wait).
        // A pool with rates counts a one-key request here; a multi-key
        // get's keys are counted one by one down the route's pool leaf.
        Route::Pool(pool)
            if !pool.replaying()
                && (!pool.spools_deletes()
                    || !matches!(request, Request::Delete { .. } | Request::MetaDelete(_))) =>
        {
            match pool.rates().map(|r| pool::admission(r, request, read)) {
                None | Some(pool::Admission::Admitted) => {
                    pool::route(pool, served, ctx.lane, request, raw)
                }
                // Refused: a sampled one is logged as any reply.
                Some(pool::Admission::Refused(line)) => {
                    if crate::request_log::sampled().is_none() {
                        return Routed::Refused(line);
                    }
                    local(line.map_or(Vec::new(), |l| l.to_vec()))
                }
                Some(pool::Admission::PerKey) => tree::tree(root, served, ctx, request, raw),
            }
        }
        _ => tree::tree(root, served, ctx, request, raw),
    };
    // `--log-requests`: one load of a static when it is off.
    Routed::Queued(match (crate::request_log::sampled(), next) {
        (Some(log), QueuedReply::Reply(r)) => {
            QueuedReply::Reply(log.wrap(r, raw, root, served, ctx))
        }
        (_, next) => next,
    })
}

/// A reload swapped the route to `root`: the parser's item size limit follows it. True when
/// the limit changed, so the request at hand must be parsed again under it.
fn reparse(root: &Arc<Route>, parsed_for: &mut Arc<Route>, cfg: &mut ParserConfig) -> bool {
    *parsed_for = root.clone();
    let now = ParserConfig::with_max_item_size(root.item_size_max());
    let changed = now != *cfg;
    *cfg = now;
    changed
}
