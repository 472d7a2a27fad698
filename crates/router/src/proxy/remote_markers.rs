//! Remote markers (Facebook §5) for applications in any language, on a pool listener with
//! `remote_markers = true`: two admin keys any client can `get`, running the client
//! library's scheme (`memfleet_client::remote_markers`) on the pool's servers.
//!
//! - `get __memfleet__.mark_remote(KEY,TTL)`: before writing KEY's data to the master
//!   database from a replica region. Marks this write for at most TTL seconds and answers
//!   the marker's key as the value: the write's transaction invalidates it with KEY (the
//!   invalidator's delete removes it when the region's replica has the write).
//! - `get __memfleet__.remote_marked(KEY)`: on a miss of KEY, `1` while a marked write has
//!   not reached the region's replica (read the master database), else `0` (read the
//!   replica). A server that cannot tell answers `1`: the master is always right.
//!
//! Markers live under `remote-marker:` (the client library's default prefix), so the Rust
//! client and applications behind the router share them.

use super::queued::QueuedReply;
use memfleet_client::remote_markers::{mark_remote_write, marked, MarkError, PoolStore};
use memfleet_client::Pool;
use memfleet_protocol::response;
use std::sync::Arc;

const MARK: &[u8] = b"__memfleet__.mark_remote(";
const MARKED: &[u8] = b"__memfleet__.remote_marked(";
/// The client library's default marker prefix (`ClientOptions::marker_prefix`).
const PREFIX: &str = "remote-marker:";
/// What a marker's key adds to the index's: `:` and 16 hex digits.
const MARKER_SUFFIX: usize = 17;

fn value(admin: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    response::value(&mut out, admin, 0, data, None);
    response::end(&mut out);
    out
}

/// The reply to the admin key `admin`, when it is one of these two; `None` otherwise.
pub(super) fn answer(pool: &Arc<Pool>, lane: usize, admin: &[u8]) -> Option<QueuedReply> {
    let reply = |bytes: Vec<u8>| Some(super::queued::local(bytes));
    let bad = || reply(b"CLIENT_ERROR bad command line format\r\n".to_vec());
    let (inner, mark) = if let Some(rest) = admin.strip_prefix(MARK) {
        (rest.strip_suffix(b")")?, true)
    } else {
        (admin.strip_prefix(MARKED)?.strip_suffix(b")")?, false)
    };
    let (key, ttl) = if mark {
        let Some(comma) = inner.iter().rposition(|&b| b == b',') else {
            return bad();
        };
        let ttl = std::str::from_utf8(&inner[comma + 1..])
            .ok()
            .and_then(|t| t.parse::<u32>().ok());
        match ttl {
            Some(ttl) if ttl > 0 => (&inner[..comma], ttl),
            _ => return bad(),
        }
    } else {
        (inner, 0)
    };
    let Ok(key) = std::str::from_utf8(key) else {
        return bad();
    };
    if key.is_empty() || PREFIX.len() + key.len() + MARKER_SUFFIX > memfleet_protocol::MAX_KEY_LEN {
        return bad();
    }
    let index = format!("{PREFIX}{key}");
    let store = PoolStore {
        pool: pool.clone(),
        lane,
    };
    let admin = admin.to_vec();
    Some(QueuedReply::Reply(Box::pin(async move {
        if mark {
            match mark_remote_write(&store, &index, ttl).await {
                Ok(marker) => value(&admin, marker.as_bytes()),
                Err(MarkError::Store(e)) => format!("SERVER_ERROR {}\r\n", e.0).into_bytes(),
                Err(MarkError::IndexBusy(_)) => {
                    b"SERVER_ERROR remote marker index busy\r\n".to_vec()
                }
            }
        } else {
            let is = marked(&store, &index).await;
            value(&admin, if is { b"1" } else { b"0" })
        }
    })))
}
