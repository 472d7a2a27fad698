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
        // An administrative command memcached has and the router does not model; the
        // others are routed (by key, or to every server) before they could come here.
        Request::Other { .. }
        | Request::Get(_)
        | Request::Store(_)
        | Request::Delete { .. }
        | Request::Arith { .. }
        | Request::Touch { .. }
        | Request::FlushAll { .. }
        | Request::Stats { .. }
        | Request::MetaGet(_)
        | Request::MetaSet(_)
        | Request::MetaDelete(_)
        | Request::MetaArithmetic(_)
        | Request::MetaDebug { .. } => local(b"ERROR\r\n".to_vec()),
    }
}

/// When the router started: its `uptime` in `stats`.
static STARTED: std::sync::LazyLock<std::time::Instant> =
    std::sync::LazyLock::new(std::time::Instant::now);

/// Notes the router's start (for `uptime`).
pub(crate) fn note_start() {
    std::sync::LazyLock::force(&STARTED);
}

/// The statistics a server reports of itself that are not summed over the fleet: the
/// router reports its own (or none).
const NOT_SUMMED: &[&[u8]] = &[
    b"pid",
    b"uptime",
    b"time",
    b"version",
    b"libevent",
    b"pointer_size",
    b"parent_pid",
];

/// How long the fleet's `stats` waits for a server (or the pool's timeout if shorter): a
/// healthy server answers in a millisecond; a stalled one must not hold up monitoring.
const FLEET_STATS_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// `stats` without arguments: memcached's general statistics for the fleet behind
/// `pools`, so that a client or tool asking a memcached for them (curr_items, bytes,
/// get_hits, ...) gets the fleet's: the router's own `pid`, `uptime`, `time`, `version` and
/// `pointer_size`; how many servers there are and how many answered; every other numeric
/// statistic the servers report, summed over those that answered, in the first one's
/// order; then the router's own counters (`stats`). The servers are asked in parallel, each
/// on a connection of its own within [`FLEET_STATS_WAIT`] (`Backend::ask_aside`: not counted
/// as requests, and a down server is not asked), so a stalled server delays the reply by
/// that at most and shows as not answering.
pub(super) fn general_stats(pools: &[Arc<Pool>], served: &ServedTopology) -> QueuedReply {
    let backends: Vec<_> = pools
        .iter()
        .flat_map(|p| p.backends().iter().cloned())
        .collect();
    let own = stats(pools, served);
    QueuedReply::Reply(Box::pin(async move {
        let servers = backends.len();
        let mut asked = tokio::task::JoinSet::new();
        for (i, b) in backends.into_iter().enumerate() {
            asked.spawn(async move {
                let reply = b.ask_aside(b"stats\r\n", ReplyKind::Stats, FLEET_STATS_WAIT);
                (i, reply.await)
            });
        }
        let mut replies = vec![None; servers];
        while let Some(Ok((i, reply))) = asked.join_next().await {
            replies[i] = reply;
        }
        let mut answering = 0;
        let mut sums: Vec<(Vec<u8>, u64)> = Vec::new();
        for reply in replies {
            let Some(reply) = reply else { continue };
            if !reply.starts_with(b"STAT ") {
                continue;
            }
            answering += 1;
            for line in reply.split(|&b| b == b'\n') {
                let Some(stat) = line.trim_ascii_end().strip_prefix(b"STAT ") else {
                    continue;
                };
                let Some(space) = stat.iter().position(|&b| b == b' ') else {
                    continue;
                };
                let (name, value) = (&stat[..space], &stat[space + 1..]);
                let Some(value) = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                else {
                    continue;
                };
                if NOT_SUMMED.contains(&name) {
                    continue;
                }
                match sums.iter_mut().find(|(n, _)| n == name) {
                    Some((_, sum)) => *sum = sum.saturating_add(value),
                    None => sums.push((name.to_vec(), value)),
                }
            }
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut out = format!(
            "STAT pid {}\r\nSTAT uptime {}\r\nSTAT time {now}\r\nSTAT version {}\r\n\
             STAT pointer_size {}\r\nSTAT servers {servers}\r\nSTAT servers_answering {answering}\r\n",
            std::process::id(),
            STARTED.elapsed().as_secs(),
            version(),
            usize::BITS,
        )
        .into_bytes();
        for (name, sum) in sums {
            out.extend_from_slice(b"STAT ");
            out.extend_from_slice(&name);
            out.push(b' ');
            out.extend_from_slice(sum.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(&own);
        out
    }))
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
