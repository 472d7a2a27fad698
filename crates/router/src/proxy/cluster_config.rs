//! AWS ElastiCache's auto discovery on a pool listener with `auto_discovery = true`: `config
//! get cluster` answers the pool's servers as an ElastiCache configuration endpoint does,
//!
//! ```text
//! CONFIG cluster 0 <len>\r\n
//! <version>\n
//! <host>|<ip>|<port> <host>|<ip>|<port>\n
//! \r\n
//! END\r\n
//! ```
//!
//! `<len>` counts the two lines and their bare `\n`s (the AWS cluster client reads that many
//! bytes, then the `\r\n`). The version grows whenever the membership a client would be
//! told changes (a reload, a DNS answer, a server added or removed), and never goes back:
//! it is the Unix second the router first saw that membership, or one more than the last
//! version if that is later, so a restarted router does not answer a version lower than
//! the one its clients hold (clients ignore a lower one). Servers whose name did not resolve
//! are left out; with none left the pool answers `END` alone, as for an unknown name.
//!
//! Clients connect to every server listed, not to the router: this makes the router the
//! configuration endpoint of a fleet whose servers the clients can reach.

use memfleet_client::Pool;
use memfleet_protocol::response;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Each pool's last membership (its entries) and their version.
type Versions = HashMap<String, (Vec<u8>, u64)>;

/// The pools' versions, for the router's life (reloads and DNS changes build new `Pool`s;
/// the version must outlive them).
fn versions() -> &'static Mutex<Versions> {
    static VERSIONS: OnceLock<Mutex<Versions>> = OnceLock::new();
    VERSIONS.get_or_init(Default::default)
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs())
}

/// `host|ip|port` for each reachable server of `pool`, space-separated.
fn entries(pool: &Pool) -> Vec<u8> {
    let mut out = Vec::new();
    for b in pool.members().iter().filter(|b| b.reachable()) {
        let addr = b.addr();
        let host = b
            .name()
            .rsplit_once(':')
            .map_or(b.name(), |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        if !out.is_empty() {
            out.push(b' ');
        }
        out.extend_from_slice(format!("{host}|{}|{}", addr.ip(), addr.port()).as_bytes());
    }
    out
}

/// The version for `pool` answering `members` now.
fn version_of(pool: &str, members: &[u8]) -> u64 {
    let mut versions = versions().lock().unwrap_or_else(|e| e.into_inner());
    match versions.get_mut(pool) {
        Some((last, version)) if last == members => *version,
        Some((last, version)) => {
            *version = (*version + 1).max(unix_seconds());
            *last = members.to_vec();
            *version
        }
        None => {
            let version = unix_seconds();
            versions.insert(pool.to_string(), (members.to_vec(), version));
            version
        }
    }
}

/// The answer to `config <args>` on `pool`'s listener: the cluster's configuration for
/// `get cluster`, `ERROR` for anything else (memcached's answer to `config`).
pub(super) fn answer(pool: &Pool, args: &[u8]) -> Vec<u8> {
    if !response::is_config_get_cluster(args) {
        return b"ERROR\r\n".to_vec();
    }
    let members = entries(pool);
    if members.is_empty() {
        return b"END\r\n".to_vec();
    }
    let mut out = Vec::new();
    response::cluster_config(&mut out, version_of(pool.name(), &members), &members);
    out
}
