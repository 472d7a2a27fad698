//! What the router answers itself, whatever it routes to: `stats` (its own counters),
//! `flush_all` (to every server, one answer), `version`, `verbosity`, `mn`, `quit`, and the
//! admin key that asks where a key goes.

use super::queued::{error_reply, local, QueuedReply};
use super::rewrite::raw_without_noreply;
use crate::reloadable::ServedTopology;
use memfleet_client::Pool;
use memfleet_protocol::reply::ReplyKind;
use memfleet_protocol::{response, Request};
use std::sync::Arc;

/// The requests the router answers itself, whatever it routes to.
pub(super) fn answer_locally(request: &Request<'_>) -> QueuedReply {
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
/// - `__memfleet__.pools`: every pool's servers and DNS entries, as JSON
///   (`memfleet_client::Topology::pools_json`).
pub(super) const ADMIN_PREFIX: &[u8] = b"__memfleet__.";
const ROUTE_PREFIX: &[u8] = b"__memfleet__.route(";
const POOLS: &[u8] = b"__memfleet__.pools";

/// Answers a get made only of admin keys, each route key with the servers `servers` names
/// for the key inside it; `None` when the get has other keys.
pub(super) fn admin_lookup(
    keys: &[Vec<u8>],
    servers: impl Fn(&[u8]) -> Vec<String>,
    served: &ServedTopology,
) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for admin in keys {
        let value = if admin.as_slice() == POOLS {
            served.load().pools_json().to_string()
        } else {
            let key = admin.strip_prefix(ROUTE_PREFIX)?.strip_suffix(b")")?;
            servers(key).join(" ")
        };
        response::value(&mut out, admin, 0, value.as_bytes(), None);
    }
    response::end(&mut out);
    Some(out)
}
