//! A plain pool listener's fast path: each key's request goes to its server as it came
//! (less `noreply` and `q`); a multi-key get is split per server, sent in parallel and
//! reassembled in the client's key order, a failed server's keys being misses.

use super::local::{
    admin_lookup, answer_locally, flush_all, general_stats, stats_for, ADMIN_PREFIX,
};
use super::queued::{error_reply, forwarded, local, QueuedReply, Quiet};
use super::rewrite::{get_head, replying, without_quiet, QUIET_MA, QUIET_MG, QUIET_MS_MD};
use crate::reloadable::ServedTopology;
use memfleet_client::conn_stats::Stamp;
use memfleet_client::route::pool_handle;
use memfleet_client::{BackendError, Pool, RateLimits};
use memfleet_protocol::reply::ReplyKind;
use memfleet_protocol::{response, GetKind, Request};
use std::sync::Arc;

/// Decides where `request` (whose bytes are `raw`) goes and how its reply is built.
pub(super) fn route(
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
        Request::Get(g) => get(pool, served, lane, g, raw),
        Request::Store(_)
        | Request::Delete { .. }
        | Request::Arith { .. }
        | Request::Touch { .. } => {
            // Sent without `noreply`, so that a failure can be told apart (and dropped
            // here when the client asked for no reply).
            let (key, bytes, noreply) = replying(request).expect("a one-line-reply request");
            forward(key, bytes, ReplyKind::Line, noreply, None)
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
        Request::Stats { args } if args.is_empty() => {
            general_stats(std::slice::from_ref(pool), served)
        }
        Request::Stats { args } => local(stats_for(
            std::slice::from_ref(pool),
            served,
            args.as_bytes(),
        )),
        Request::FlushAll { noreply, .. } => {
            flush_all(std::slice::from_ref(pool), lane, raw, *noreply)
        }
        Request::MetaDebug { key } => {
            let key = key.bytes().to_vec();
            forward(&key, raw.to_vec(), ReplyKind::Meta, false, None)
        }
        Request::Other {
            command: b"config",
            args,
        } if pool.config().listener.auto_discovery => {
            local(super::cluster_config::answer(pool, args.as_bytes()))
        }
        Request::Other { .. }
        | Request::Version
        | Request::Verbosity { .. }
        | Request::Quit
        | Request::MetaNoop => answer_locally(request),
    }
}

/// What a pool with `rates` does with a request before anything is built for it.
pub(super) enum Admission {
    /// Within the pool's rate (counted) or not rated: the fast path forwards it.
    Admitted,
    /// Over the rate (counted): the `SERVER_ERROR` line naming the limit, or `None` for
    /// `noreply`.
    Refused(Option<Arc<[u8]>>),
    /// Several keys (or an admin key): each is counted on its own down the route tree.
    PerKey,
}

/// Checks a one-key request, read at `now`, against the pool's `rates` in place, so that a
/// storm's refusals cost a parse and an atomic word (no route request, future or copy).
pub(super) fn admission(rates: &RateLimits, request: &Request<'_>, now: Stamp) -> Admission {
    let Some(class) = request.class() else {
        return Admission::Admitted;
    };
    if let Request::Get(g) = request {
        let mut keys = g.keys;
        match (keys.next(), keys.next()) {
            (Some(key), None) if !key.starts_with(ADMIN_PREFIX) => {}
            (None, _) => return Admission::Admitted,
            _ => return Admission::PerKey,
        }
    }
    // A quiet meta request's refusal is an error, which quiet mode does not drop.
    let noreply = request.noreply();
    match rates.refused_line(class, now) {
        None => Admission::Admitted,
        Some(_) if noreply => Admission::Refused(None),
        Some(line) => Admission::Refused(Some(line)),
    }
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
    quiet: Quiet,
) -> QueuedReply {
    forwarded(
        pool.backend_for(key).call(lane, bytes, kind),
        noreply,
        quiet,
    )
}

/// A retrieval: split by server, in parallel, reassembled in the client's key order.
fn get(
    pool: &Arc<Pool>,
    served: &ServedTopology,
    lane: usize,
    g: &memfleet_protocol::Get<'_>,
    raw: &[u8],
) -> QueuedReply {
    // The common case, one key that is no admin key: to its server as it came, with
    // nothing allocated for the keys.
    let mut only = g.keys;
    if let (Some(key), None) = (only.next(), only.next()) {
        if !key.starts_with(ADMIN_PREFIX) {
            return one_server(pool, pool.pick(key), lane, raw, true);
        }
        if g.kind == GetKind::Get && pool.config().listener.remote_markers {
            if let Some(reply) = super::remote_markers::answer(pool, lane, key) {
                return reply;
            }
        }
    }
    let keys: Vec<Vec<u8>> = g.keys.map(<[u8]>::to_vec).collect();
    if g.kind == GetKind::Get {
        let server = |key: &[u8]| vec![pool.ring().nodes()[pool.pick(key)].addr()];
        let handles = |_, key: &[u8]| format!("{}\n", pool_handle(pool, key));
        if let Some(reply) = admin_lookup(&keys, server, handles, served, lane) {
            return local(reply);
        }
    }
    if keys.is_empty() {
        // `gat <exptime>` with no keys: memcached answers END.
        return local(b"END\r\n".to_vec());
    }
    let servers: Vec<usize> = keys.iter().map(|k| pool.pick(k)).collect();
    if servers.iter().all(|s| *s == servers[0]) {
        return one_server(pool, servers[0], lane, raw, keys.len() == 1);
    }
    let mut order: Vec<usize> = servers.clone();
    order.sort_unstable();
    order.dedup();
    let prefix = get_head(g);
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

/// A retrieval whose keys are all on server `server`: the request as it came. A failed
/// server's keys are misses; one key refused by `max_outstanding` is answered with the
/// refusal.
fn one_server(
    pool: &Arc<Pool>,
    server: usize,
    lane: usize,
    raw: &[u8],
    one_key: bool,
) -> QueuedReply {
    let call = pool.backends()[server].call(lane, raw.to_vec(), ReplyKind::Retrieval);
    QueuedReply::Reply(Box::pin(async move {
        call.await.unwrap_or_else(|e| match e {
            BackendError::Outstanding { .. } if one_key => error_reply(&e),
            _ => b"END\r\n".to_vec(),
        })
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
