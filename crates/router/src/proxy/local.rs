//! What the router answers itself, whatever it routes to: `stats` (its own counters),
//! `flush_all` (to every server, one answer), `version`, `verbosity`, `mn`, `quit`, and the
//! admin key that asks where a key goes.

use super::queued::{error_reply, local, QueuedReply};
use super::rewrite::raw_without_noreply;
use crate::reloadable::ServedTopology;
use memfleet_client::route::operation_class;
use memfleet_client::{Pool, RequestClass};
use memfleet_protocol::reply::ReplyKind;
use memfleet_protocol::{response, Request};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The requests the router answers itself, whatever it routes to.
pub(super) fn answer_locally(request: &Request<'_>) -> QueuedReply {
    match request {
        Request::MetaNoop => local(b"MN\r\n".to_vec()),
        // The memcached release memfleet follows first, as the server's: clients that parse
        // the version as numbers (spymemcached, meta-memcache) read 1.6.45.
        Request::Version => local(format!("VERSION {}\r\n", version()).into_bytes()),
        Request::Verbosity { noreply, .. } => local(if *noreply {
            Vec::new()
        } else {
            b"OK\r\n".to_vec()
        }),
        Request::Quit => QueuedReply::Close,
        _ => local(b"ERROR\r\n".to_vec()),
    }
}

/// The version the router answers, to text and binary clients alike.
pub(super) fn version() -> String {
    format!("1.6.45-memfleet-router-{}", env!("CARGO_PKG_VERSION"))
}

/// `stats ARGS`: `stats` itself, `stats detailed` (commands and latencies, `detailed.rs`),
/// or `stats suspect_servers` (mcrouter's: every server of
/// `pools` that failed its last request or is marked down, `STAT <pool>:<server>
/// failures=<in a row>,down=<0|1>`); any other argument gets the plain counters.
pub(super) fn stats_for(pools: &[Arc<Pool>], served: &ServedTopology, args: &[u8]) -> Vec<u8> {
    match args.trim_ascii() {
        b"suspect_servers" => {}
        // memcached's `stats detailed dump` (its `on`/`off` have nothing to switch here).
        b"detailed" | b"detailed dump" => return crate::detailed::stat_lines(pools),
        _ => return stats(pools, served),
    }
    let mut out = Vec::new();
    for pool in pools {
        for b in pool.members() {
            let h = b.health();
            let failures = h.failures.load(Ordering::Relaxed);
            let down = h.down.load(Ordering::Relaxed);
            if failures > 0 || down {
                out.extend_from_slice(
                    format!(
                        "STAT {}:{} failures={failures},down={}\r\n",
                        pool.name(),
                        b.name(),
                        u8::from(down)
                    )
                    .as_bytes(),
                );
            }
        }
    }
    out.extend_from_slice(b"END\r\n");
    out
}

/// `stats`: the router's counters for `pools`, its routes and its spool.
pub(super) fn stats(pools: &[Arc<Pool>], served: &ServedTopology) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pools {
        out.extend_from_slice(&p.stat_lines());
    }
    out.extend_from_slice(&served.load().stat_lines());
    out.extend_from_slice(b"END\r\n");
    out
}

/// `flush_all` to every server of `pools`, then one answer.
pub(super) fn flush_all(
    pools: &[Arc<Pool>],
    lane: usize,
    raw: &[u8],
    noreply: bool,
) -> QueuedReply {
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

/// The admin keys the router answers itself (`get` only):
/// - `__memfleet__.route(KEY)`: where a key goes, the server's `host:port` as the value
///   (mcrouter has `__mcrouter__.route(...)`); through a route tree, every server an
///   operation on KEY can reach, space-separated, the one a get goes to first;
/// - `__memfleet__.route_handles(OP,KEY)`: the route tree an OP (`get`, `set`, `delete`,
///   `mg`, ...) on KEY walks, one node a line, children indented (mcrouter's
///   `__mcrouter__.route_handles(op,key)`);
/// - `__memfleet__.pools`: every pool's servers and DNS entries, as JSON
///   (`memfleet_client::Topology::pools_json`);
/// - `__memfleet__.config_file`, `__memfleet__.config_md5`, `__memfleet__.config_age`: the
///   configuration serving now: its file, the MD5 of its bytes, the seconds since it was
///   read (mcrouter's `config_file`, `config_md5_digest`, `config_age`); empty when it was
///   not read from a file;
/// - `__memfleet__.worker`: the router worker (0 to k-1 of `-t k`) serving this connection,
///   as its listener's `workers` placed it.
pub(super) const ADMIN_PREFIX: &[u8] = b"__memfleet__.";
const ROUTE_PREFIX: &[u8] = b"__memfleet__.route(";
const HANDLES_PREFIX: &[u8] = b"__memfleet__.route_handles(";
const POOLS: &[u8] = b"__memfleet__.pools";
const CONFIG_FILE: &[u8] = b"__memfleet__.config_file";
const CONFIG_MD5: &[u8] = b"__memfleet__.config_md5";
const CONFIG_AGE: &[u8] = b"__memfleet__.config_age";
const WORKER: &[u8] = b"__memfleet__.worker";

/// Answers a get made only of admin keys: each route key with the servers `servers` names
/// for the key inside it, each route-handles key with what `handles` draws for its
/// operation and key; `None` when the get has other keys. `lane`: the connection's.
pub(super) fn admin_lookup(
    keys: &[Vec<u8>],
    servers: impl Fn(&[u8]) -> Vec<String>,
    handles: impl Fn(RequestClass, &[u8]) -> String,
    served: &ServedTopology,
    lane: usize,
) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for admin in keys {
        let topology = served.load();
        let origin = topology.config().origin.as_ref();
        let value = match admin.as_slice() {
            POOLS => topology.pools_json().to_string(),
            // A client on worker w sends on lanes ≡ w (mod k) (`ListenerWorkers::place`).
            WORKER => (lane % topology.config().workers.max(1)).to_string(),
            CONFIG_FILE => origin.map(|o| o.file.clone()).unwrap_or_default(),
            CONFIG_MD5 => origin.map(|o| o.md5.clone()).unwrap_or_default(),
            CONFIG_AGE => origin
                .map(|o| {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    now.saturating_sub(o.read_unix).to_string()
                })
                .unwrap_or_default(),
            _ => {
                if let Some(inner) = admin.strip_prefix(HANDLES_PREFIX) {
                    let inner = inner.strip_suffix(b")")?;
                    let comma = inner.iter().position(|&b| b == b',')?;
                    let op = std::str::from_utf8(&inner[..comma]).ok()?;
                    match operation_class(op) {
                        Some(class) => handles(class, &inner[comma + 1..]),
                        None => format!("unknown operation {op:?}"),
                    }
                } else {
                    let key = admin.strip_prefix(ROUTE_PREFIX)?.strip_suffix(b")")?;
                    servers(key).join(" ")
                }
            }
        };
        response::value(&mut out, admin, 0, value.as_bytes(), None);
    }
    response::end(&mut out);
    Some(out)
}
