//! One client connection: requests are parsed as they arrive, routed to their servers at
//! once (so a client's pipelined requests run in parallel across servers), and the replies
//! written back in request order.
//!
//! The reader half parses and dispatches: for each request it sends the server requests
//! and queues a [`QueuedReply`] (what to wait for and how to build the client's reply). The writer
//! half takes plans in order, awaits them, and writes. A multi-key get is split by server,
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

use crate::{ClientAuth, RouteSlot, ServedTopology};
use memfleet_client::{
    BackendError, Pool, RequestClass, RequestForm, Route, RouteContext, RouteRequest,
};
use memfleet_protocol::auth::Attempt;
use memfleet_protocol::reply::{self, ReplyKind, ServerReply};
use memfleet_protocol::{parse, response, GetKind, ParseError, ParserConfig, Request};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

type ClientReplyFuture = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

/// Replies a quiet meta request does not send: a get's miss, a store's or delete's success,
/// an arithmetic's success (with or without the value).
const QUIET_MG: &[&[u8]] = &[b"EN"];
const QUIET_MS_MD: &[&[u8]] = &[b"HD"];
const QUIET_MA: &[&[u8]] = &[b"HD", b"VA"];

/// What the writer waits for, in request order.
enum QueuedReply {
    /// A reply to send as it comes.
    Reply(ClientReplyFuture),
    /// Close the connection after the replies before it.
    Close,
}

/// Plans a client may have in flight before the reader waits.
const IN_FLIGHT: usize = 1024;
/// Bytes of unparsed input a client may leave (one request, at most a large value).
const MAX_PENDING_INPUT: usize = (1 << 20) + 64 * 1024;
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
    mut wr: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    ctx: RouteContext,
) {
    let (tx, mut rx) = mpsc::channel::<QueuedReply>(IN_FLIGHT);
    let writer = tokio::spawn(async move {
        let mut out = Vec::new();
        while let Some(plan) = rx.recv().await {
            match plan {
                QueuedReply::Reply(reply) => out.extend_from_slice(&reply.await),
                QueuedReply::Close => {
                    let _ = wr.write_all(&out).await;
                    return;
                }
            }
            // Write once nothing else is queued (replies to a pipelined batch go out
            // together).
            if rx.is_empty() {
                if wr.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
                if out.capacity() > KEEP_CAPACITY {
                    out = Vec::new();
                }
            }
        }
        let _ = wr.write_all(&out).await;
    });
    let cfg = ParserConfig::default();
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut swallow = 0usize;
    // Nothing to pass when the router does not require authentication.
    let mut authenticated = auth.load().is_none();
    'read: loop {
        buf.reserve(16 * 1024);
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let mut at = 0;
        if swallow > 0 {
            let n = swallow.min(buf.len());
            at += n;
            swallow -= n;
        }
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
                    if tx.send(local(reply.to_vec())).await.is_err() {
                        break 'read;
                    }
                }
                Ok((request, used)) => {
                    // The route as configured now (a reload applies from the next request).
                    let root = slot.load_full();
                    let raw = &buf[at..at + used];
                    let plan = match &*root {
                        // A spooling pool's deletes take the route path, which spools; so does
                        // everything while a server replays spooled deletes (reads wait).
                        Route::Pool(pool)
                            if !pool.replaying()
                                && (!pool.spools_deletes()
                                    || !matches!(
                                        request,
                                        Request::Delete { .. } | Request::MetaDelete(_)
                                    )) =>
                        {
                            route(pool, &served, ctx.lane, &request, raw)
                        }
                        _ => tree(&root, &served, ctx, &request, raw),
                    };
                    at += used;
                    let stop = matches!(plan, QueuedReply::Close);
                    if tx.send(plan).await.is_err() || stop {
                        break 'read;
                    }
                }
                Err(ParseError::Incomplete) => break,
                Err(ParseError::Invalid(rejection)) => {
                    let reply = if authenticated {
                        rejection.reply()
                    } else {
                        memfleet_protocol::auth::rejection_reply(rejection.kind)
                    }
                    .to_vec();
                    let close = rejection.close();
                    if !reply.is_empty() {
                        let _ = tx
                            .send(QueuedReply::Reply(Box::pin(async move { reply })))
                            .await;
                    }
                    if close {
                        let _ = tx.send(QueuedReply::Close).await;
                        break 'read;
                    }
                    let skip = rejection.skip;
                    let available = buf.len() - at;
                    if skip > available {
                        swallow = skip - available;
                        at = buf.len();
                    } else {
                        at += skip;
                    }
                }
            }
        }
        buf.drain(..at);
        if buf.capacity() > KEEP_CAPACITY && buf.len() < buf.capacity() / 4 {
            buf.shrink_to(buf.len().max(16 * 1024));
        }
        if buf.len() > MAX_PENDING_INPUT {
            let _ = tx.send(QueuedReply::Close).await;
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// A local reply.
fn local(bytes: Vec<u8>) -> QueuedReply {
    QueuedReply::Reply(Box::pin(async move { bytes }))
}

fn error_reply(e: &BackendError) -> Vec<u8> {
    format!("SERVER_ERROR {e}\r\n").into_bytes()
}

/// Decides where `request` (whose bytes are `raw`) goes and how its reply is built.
fn route(
    pool: &Arc<Pool>,
    served: &ServedTopology,
    lane: usize,
    request: &Request<'_>,
    raw: &[u8],
) -> QueuedReply {
    let forward = |key: &[u8], bytes, kind, noreply, quiet| {
        forward(pool, lane, key, bytes, kind, noreply, quiet)
    };
    match request {
        Request::Get(g) => get(pool, lane, g, raw),
        Request::Store(s) => {
            let mut r = *s;
            r.noreply = false;
            forward(
                s.key,
                request_bytes(&Request::Store(r)),
                ReplyKind::Line,
                s.noreply,
                None,
            )
        }
        Request::Delete {
            key,
            holdoff,
            noreply,
        } => {
            let bytes = request_bytes(&Request::Delete {
                key,
                holdoff: *holdoff,
                noreply: false,
            });
            forward(key, bytes, ReplyKind::Line, *noreply, None)
        }
        Request::Arith {
            op,
            key,
            delta,
            noreply,
        } => {
            let bytes = request_bytes(&Request::Arith {
                op: *op,
                key,
                delta: *delta,
                noreply: false,
            });
            forward(key, bytes, ReplyKind::Line, *noreply, None)
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            let bytes = request_bytes(&Request::Touch {
                key,
                exptime: *exptime,
                noreply: false,
            });
            forward(key, bytes, ReplyKind::Line, *noreply, None)
        }
        Request::MetaGet(m) | Request::MetaDelete(m) => {
            let key = m.key.bytes().to_vec();
            let quiet = m
                .flags
                .quiet()
                .then_some(if matches!(request, Request::MetaGet(_)) {
                    QUIET_MG
                } else {
                    QUIET_MS_MD
                });
            forward(&key, without_quiet(raw), ReplyKind::Meta, false, quiet)
        }
        Request::MetaSet(m) => {
            let key = m.key.bytes().to_vec();
            let quiet = m.flags.quiet().then_some(QUIET_MS_MD);
            forward(&key, without_quiet(raw), ReplyKind::Meta, false, quiet)
        }
        Request::MetaArithmetic(m) => {
            let key = m.key.bytes().to_vec();
            let quiet = m.flags.quiet().then_some(QUIET_MA);
            forward(&key, without_quiet(raw), ReplyKind::Meta, false, quiet)
        }
        Request::Stats { .. } => local(stats(std::slice::from_ref(pool), served)),
        Request::FlushAll { noreply, .. } => {
            flush_all(std::slice::from_ref(pool), lane, raw, *noreply)
        }
        Request::MetaDebug { key } => {
            let key = key.bytes().to_vec();
            forward(&key, raw.to_vec(), ReplyKind::Meta, false, None)
        }
        _ => answer_locally(request),
    }
}

/// The requests the router answers itself, whatever it routes to.
fn answer_locally(request: &Request<'_>) -> QueuedReply {
    match request {
        Request::MetaNoop => local(b"MN\r\n".to_vec()),
        Request::Version => {
            local(format!("VERSION memfleet-router-{}\r\n", env!("CARGO_PKG_VERSION")).into_bytes())
        }
        Request::Verbosity { noreply, .. } => local(if *noreply {
            Vec::new()
        } else {
            b"OK\r\n".to_vec()
        }),
        Request::Quit => QueuedReply::Close,
        _ => local(b"ERROR\r\n".to_vec()),
    }
}

/// `stats`: the router's counters for `pools`, its routes and its spool.
fn stats(pools: &[Arc<Pool>], served: &ServedTopology) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pools {
        out.extend_from_slice(&p.stat_lines());
    }
    out.extend_from_slice(&served.load().stat_lines());
    out.extend_from_slice(b"END\r\n");
    out
}

/// `flush_all` to every server of `pools`, then one answer.
fn flush_all(pools: &[Arc<Pool>], lane: usize, raw: &[u8], noreply: bool) -> QueuedReply {
    let calls: Vec<_> = pools
        .iter()
        .flat_map(|p| p.backends().iter())
        .map(|b| b.call(lane, raw_without_noreply(raw, noreply), ReplyKind::Line))
        .collect();
    QueuedReply::Reply(Box::pin(async move {
        let mut failed = None;
        for c in calls {
            match c.await {
                Ok(r) if r == b"OK\r\n" => {}
                Ok(r) => failed = Some(r),
                Err(e) => failed = Some(error_reply(&e)),
            }
        }
        match (noreply, failed) {
            (true, _) => Vec::new(),
            (false, Some(r)) => r,
            (false, None) => b"OK\r\n".to_vec(),
        }
    }))
}

/// Decides how `request` goes down a route tree (any listener that is not a plain pool).
/// Multi-key gets become one operation per key, reassembled in the client's order.
fn tree(
    root: &Arc<Route>,
    served: &ServedTopology,
    ctx: RouteContext,
    request: &Request<'_>,
    raw: &[u8],
) -> QueuedReply {
    let one = |op: RouteRequest, noreply: bool, quiet: Option<&'static [&'static [u8]]>| {
        let call = root.call(op, ctx);
        QueuedReply::Reply(Box::pin(async move {
            let reply = call.await.unwrap_or_else(|e| error_reply(&e));
            let suppressed = quiet.is_some_and(|q| q.iter().any(|p| reply.starts_with(p)));
            if noreply || suppressed {
                Vec::new()
            } else {
                reply
            }
        }))
    };
    let raw_op = |class: RequestClass, key: &[u8], head: &[u8], tail: String| {
        RouteRequest::raw(class, key, head, tail.into_bytes(), ReplyKind::Line)
    };
    let meta =
        |class: RequestClass, key: &[u8], quiet: bool, suppress: &'static [&'static [u8]]| {
            let (head, wire_key, tail) = split_meta(&without_quiet(raw));
            let op = RouteRequest {
                class,
                key: key.to_vec(),
                form: RequestForm::Raw {
                    head,
                    wire_key,
                    tail,
                    kind: ReplyKind::Meta,
                },
            };
            one(op, false, quiet.then_some(suppress))
        };
    match request {
        Request::Get(g) => {
            // The first key says whether to look (no copy of the keys for a plain get).
            let first = { g.keys }.next();
            if g.kind == GetKind::Get && first.is_some_and(|k| k.starts_with(ROUTE_PREFIX)) {
                let keys: Vec<Vec<u8>> = g.keys.map(<[u8]>::to_vec).collect();
                let servers = |key: &[u8]| {
                    let mut out = Vec::new();
                    root.servers_for(key, ctx, &mut out);
                    out
                };
                if let Some(reply) = route_lookup(&keys, servers) {
                    return local(reply);
                }
            }
            let head: Vec<u8> = match g.kind {
                GetKind::Gat | GetKind::Gats => {
                    format!("{} {}", String::from_utf8_lossy(g.kind.name()), g.exptime).into_bytes()
                }
                _ => g.kind.name().to_vec(),
            };
            let calls: Vec<_> = g
                .keys
                .map(|k| {
                    let op = RouteRequest {
                        class: RequestClass::Get,
                        key: k.to_vec(),
                        form: RequestForm::Get { head: head.clone() },
                    };
                    root.call(op, ctx)
                })
                .collect();
            QueuedReply::Reply(Box::pin(async move {
                let mut out = Vec::new();
                for c in calls {
                    // A key whose route failed is a miss; so is an error line.
                    if let Ok(r) = c.await {
                        let values = reply::decode(&r, ReplyKind::Retrieval);
                        if matches!(values, Ok(ServerReply::Values(v)) if !v.is_empty()) {
                            out.extend_from_slice(r.strip_suffix(b"END\r\n").unwrap_or(&r));
                        }
                    }
                }
                response::end(&mut out);
                out
            }))
        }
        Request::Store(s) => one(
            RouteRequest {
                class: RequestClass::Set,
                key: s.key.to_vec(),
                form: RequestForm::Store {
                    command: s.command,
                    flags: s.flags,
                    exptime: s.exptime,
                    cas: s.cas,
                    data: Arc::from(s.data),
                },
            },
            s.noreply,
            None,
        ),
        Request::Delete {
            key,
            holdoff,
            noreply,
        } => one(
            RouteRequest {
                class: RequestClass::Delete,
                key: key.to_vec(),
                form: RequestForm::Delete { holdoff: *holdoff },
            },
            *noreply,
            None,
        ),
        Request::Arith {
            op,
            key,
            delta,
            noreply,
        } => {
            let head: &[u8] = match op {
                memfleet_protocol::ArithOp::Incr => b"incr ",
                memfleet_protocol::ArithOp::Decr => b"decr ",
            };
            one(
                raw_op(RequestClass::Set, key, head, format!(" {delta}\r\n")),
                *noreply,
                None,
            )
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => one(
            raw_op(RequestClass::Set, key, b"touch ", format!(" {exptime}\r\n")),
            *noreply,
            None,
        ),
        Request::MetaGet(m) => meta(RequestClass::Get, &m.key.bytes(), m.flags.quiet(), QUIET_MG),
        Request::MetaDelete(m) => meta(
            RequestClass::Delete,
            &m.key.bytes(),
            m.flags.quiet(),
            QUIET_MS_MD,
        ),
        Request::MetaSet(m) => meta(
            RequestClass::Set,
            &m.key.bytes(),
            m.flags.quiet(),
            QUIET_MS_MD,
        ),
        Request::MetaArithmetic(m) => {
            meta(RequestClass::Set, &m.key.bytes(), m.flags.quiet(), QUIET_MA)
        }
        Request::MetaDebug { key } => meta(RequestClass::Other, &key.bytes(), false, &[]),
        Request::Stats { .. } | Request::FlushAll { .. } => {
            let mut pools = Vec::new();
            root.pools(&mut pools);
            match request {
                Request::FlushAll { noreply, .. } => flush_all(&pools, ctx.lane, raw, *noreply),
                _ => local(stats(&pools, served)),
            }
        }
        _ => answer_locally(request),
    }
}

/// A meta request's line split around its key: (`"mg "`, key as written, the rest).
fn split_meta(bytes: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let start = bytes
        .iter()
        .position(|&b| b == b' ')
        .map_or(bytes.len(), |i| i + 1);
    let end = bytes[start..]
        .iter()
        .position(|&b| matches!(b, b' ' | b'\r' | b'\n'))
        .map_or(bytes.len(), |i| start + i);
    (
        bytes[..start].to_vec(),
        bytes[start..end].to_vec(),
        bytes[end..].to_vec(),
    )
}

fn request_bytes(request: &Request<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    request.encode(&mut out);
    if !out.ends_with(b"\r\n") {
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// `flush_all [delay] noreply` without its `noreply`.
fn raw_without_noreply(raw: &[u8], noreply: bool) -> Vec<u8> {
    if !noreply {
        return raw.to_vec();
    }
    let line = raw.strip_suffix(b"\r\n").unwrap_or(raw);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let words: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty() && *w != b"noreply")
        .collect();
    let mut out = words.join(&b' ');
    out.extend_from_slice(b"\r\n");
    out
}

/// A meta request's bytes with its `q` flag removed (the command line only; a data block
/// after it is kept as is).
fn without_quiet(raw: &[u8]) -> Vec<u8> {
    let end = raw
        .iter()
        .position(|&b| b == b'\n')
        .map_or(raw.len(), |i| i + 1);
    let (line, rest) = raw.split_at(end);
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let words: Vec<&[u8]> = text
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
        .enumerate()
        .filter(|(i, w)| *i < 2 || *w != b"q")
        .map(|(_, w)| w)
        .collect();
    let mut out = words.join(&b' ');
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(rest);
    out
}

/// Sends a one-key request to the key's server. `noreply`: the client wants no reply at
/// all; `quiet`: reply prefixes the client's quiet mode suppresses.
fn forward(
    pool: &Arc<Pool>,
    lane: usize,
    key: &[u8],
    bytes: Vec<u8>,
    kind: ReplyKind,
    noreply: bool,
    quiet: Option<&'static [&'static [u8]]>,
) -> QueuedReply {
    let call = pool.backend_for(key).call(lane, bytes, kind);
    QueuedReply::Reply(Box::pin(async move {
        let reply = match call.await {
            Ok(r) => r,
            Err(e) => error_reply(&e),
        };
        let suppressed = quiet.is_some_and(|q| q.iter().any(|p| reply.starts_with(p)));
        if noreply || suppressed {
            Vec::new()
        } else {
            reply
        }
    }))
}

/// The admin key that asks where a key goes: `get __memfleet__.route(KEY)` answers with
/// the server's `host:port` as the value (mcrouter has `__mcrouter__.route(...)`); through
/// a route tree, with every server an operation on KEY can reach, space-separated, the one
/// a get goes to first.
const ROUTE_PREFIX: &[u8] = b"__memfleet__.route(";

/// Answers admin route keys locally, each with the servers `servers` names for the key
/// inside it; `None` when the get has other keys.
fn route_lookup(keys: &[Vec<u8>], servers: impl Fn(&[u8]) -> Vec<String>) -> Option<Vec<u8>> {
    let asked: Vec<&[u8]> = keys
        .iter()
        .map(|k| k.strip_prefix(ROUTE_PREFIX)?.strip_suffix(b")"))
        .collect::<Option<_>>()?;
    let mut out = Vec::new();
    for (admin, key) in keys.iter().zip(asked) {
        let servers = servers(key).join(" ");
        response::value(&mut out, admin, 0, servers.as_bytes(), None);
    }
    response::end(&mut out);
    Some(out)
}

/// A retrieval: split by server, in parallel, reassembled in the client's key order.
fn get(pool: &Arc<Pool>, lane: usize, g: &memfleet_protocol::Get<'_>, raw: &[u8]) -> QueuedReply {
    let keys: Vec<Vec<u8>> = g.keys.map(<[u8]>::to_vec).collect();
    if g.kind == GetKind::Get {
        let server = |key: &[u8]| vec![pool.ring().nodes()[pool.pick(key)].addr()];
        if let Some(reply) = route_lookup(&keys, server) {
            return local(reply);
        }
    }
    if keys.is_empty() {
        // `gat <exptime>` with no keys: memcached answers END.
        return local(b"END\r\n".to_vec());
    }
    let servers: Vec<usize> = keys.iter().map(|k| pool.pick(k)).collect();
    if servers.iter().all(|s| *s == servers[0]) {
        // One server: the request as it came.
        let call = pool.backends()[servers[0]].call(lane, raw.to_vec(), ReplyKind::Retrieval);
        return QueuedReply::Reply(Box::pin(async move {
            // A failed server's keys are misses.
            call.await.unwrap_or_else(|_| b"END\r\n".to_vec())
        }));
    }
    let mut order: Vec<usize> = servers.clone();
    order.sort_unstable();
    order.dedup();
    let prefix: Vec<u8> = match g.kind {
        GetKind::Gat | GetKind::Gats => {
            format!("{} {}", String::from_utf8_lossy(g.kind.name()), g.exptime).into_bytes()
        }
        _ => g.kind.name().to_vec(),
    };
    let calls: Vec<(usize, _)> = order
        .iter()
        .map(|&s| {
            let mut bytes = prefix.clone();
            for (k, _) in keys.iter().zip(&servers).filter(|(_, t)| **t == s) {
                bytes.push(b' ');
                bytes.extend_from_slice(k);
            }
            bytes.extend_from_slice(b"\r\n");
            (
                s,
                pool.backends()[s].call(lane, bytes, ReplyKind::Retrieval),
            )
        })
        .collect();
    QueuedReply::Reply(Box::pin(async move {
        // Per server: its index, its (key, block) hits in request order, the next unread.
        let mut parts: Vec<(usize, Vec<Block>, usize)> = Vec::new();
        for (s, call) in calls {
            let blocks = match call.await {
                Ok(reply) => value_blocks(&reply),
                Err(_) => Vec::new(),
            };
            parts.push((s, blocks, 0));
        }
        let mut out = Vec::new();
        for (key, s) in keys.iter().zip(&servers) {
            let (_, blocks, next) = parts
                .iter_mut()
                .find(|(t, _, _)| t == s)
                .expect("a part per server");
            if let Some((k, block)) = blocks.get(*next) {
                if k == key {
                    out.extend_from_slice(block);
                    *next += 1;
                }
            }
        }
        response::end(&mut out);
        out
    }))
}

/// A `VALUE` block of a retrieval reply and its key.
type Block = (Vec<u8>, Vec<u8>);

/// The `VALUE`/`LVALUE` blocks of a retrieval reply, each with its key (an error reply has
/// none).
fn value_blocks(reply: &[u8]) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut at = 0;
    while let Some(nl) = reply[at..].iter().position(|&b| b == b'\n') {
        let line = &reply[at..at + nl + 1];
        let words: Vec<&[u8]> = line
            .trim_ascii_end()
            .split(|&b| b == b' ')
            .filter(|w| !w.is_empty())
            .collect();
        let len_at = match words.first() {
            Some(&b"VALUE") => 3,
            Some(&b"LVALUE") => 4,
            _ => break,
        };
        let len: usize = match words
            .get(len_at)
            .and_then(|w| std::str::from_utf8(w).ok())
            .and_then(|w| w.parse().ok())
        {
            Some(n) => n,
            None => break,
        };
        let end = at + nl + 1 + len + 2;
        if end > reply.len() {
            break;
        }
        blocks.push((words[1].to_vec(), reply[at..end].to_vec()));
        at = end;
    }
    blocks
}
