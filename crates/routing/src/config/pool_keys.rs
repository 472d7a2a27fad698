//! What memfleet's TOML and twemproxy's YAML share: server lines (`host:port[:weight]
//! [name]`), hash and hash-tag names, and the defaults a pool gets for what it does not say.

use super::discovery::DnsEntry;
use super::model::{
    ConfigError, Fraction, ListenOptions, PoolConfig, DEFAULT_ITEM_SIZE_MAX, MAX_ITEM_SIZE_MAX,
    MIN_ITEM_SIZE_MAX,
};
use crate::hash::KeyHash;
use crate::ring::{Distribution, Node};

/// A pool's problem.
pub(super) fn pool_error(pool: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Pool {
        pool: pool.to_string(),
        problem: problem.into(),
    }
}

/// Parses one server line: `host:port[:weight] [name]` (twemproxy's syntax).
pub fn parse_server(line: &str) -> Result<Node, String> {
    let line = line.trim();
    let (addr, name) = match line.split_once(char::is_whitespace) {
        Some((a, n)) => (a, Some(n.trim().to_string())),
        None => (line, None),
    };
    let mut parts = addr.rsplitn(3, ':').collect::<Vec<_>>();
    parts.reverse();
    let (host, port, weight) = match parts.as_slice() {
        [host, port, weight] => (*host, *port, Some(*weight)),
        [host, port] => (*host, *port, None),
        _ => return Err(format!("{line:?}: expected host:port[:weight] [name]")),
    };
    // "host:port:weight" splits from the right; "host:port" with an IPv6-less host too.
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{line:?}: bad port {port:?}"))?;
    let weight: u32 = match weight {
        Some(w) => w
            .parse()
            .map_err(|_| format!("{line:?}: bad weight {w:?}"))?,
        None => 1,
    };
    if host.is_empty() || weight == 0 {
        return Err(format!("{line:?}: needs a host and a weight of at least 1"));
    }
    Ok(Node {
        host: host.to_string(),
        port,
        weight,
        name: name.filter(|n| !n.is_empty()),
    })
}

/// A `hash_tag`: two characters, or none.
pub(super) fn parse_hash_tag(
    pool: &str,
    tag: Option<String>,
) -> Result<Option<[u8; 2]>, ConfigError> {
    match tag {
        None => Ok(None),
        Some(t) if t.len() == 2 => {
            let b = t.as_bytes();
            Ok(Some([b[0], b[1]]))
        }
        Some(t) => Err(pool_error(
            pool,
            format!("hash_tag {t:?} must be two characters"),
        )),
    }
}

/// A hash by twemproxy's name (`default` when not given).
pub(super) fn parse_hash(
    pool: &str,
    name: Option<String>,
    default: KeyHash,
) -> Result<KeyHash, ConfigError> {
    match name {
        None => Ok(default),
        Some(n) => KeyHash::from_name(&n).ok_or_else(|| {
            let known: Vec<&str> = KeyHash::ALL.iter().map(|(_, n)| *n).collect();
            pool_error(
                pool,
                format!("unknown hash {n:?} (one of {})", known.join(", ")),
            )
        }),
    }
}

/// A pool's `servers`: the static lines (`host:port[:weight] [name]`) and the DNS entries
/// (`dns+NAME:PORT`, `dnssrv+NAME`); at least one line, none listed twice.
pub(super) struct ServerLines {
    pub(super) nodes: Vec<Node>,
    pub(super) dns: Vec<DnsEntry>,
}

/// Reads a pool's server lines.
pub(super) fn servers(pool: &str, lines: &[String]) -> Result<ServerLines, ConfigError> {
    if lines.is_empty() {
        return Err(pool_error(pool, "has no servers"));
    }
    let mut nodes = Vec::new();
    let mut dns = Vec::new();
    for line in lines {
        match DnsEntry::parse(line) {
            Some(entry) => dns.push(entry.map_err(|e| pool_error(pool, e))?),
            None => nodes.push(parse_server(line).map_err(|e| pool_error(pool, e))?),
        }
    }
    let mut names: Vec<String> = nodes
        .iter()
        .map(|n| n.name.clone().unwrap_or_else(|| n.addr()))
        .chain(dns.iter().map(DnsEntry::to_string))
        .collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(pool_error(pool, format!("server {} is listed twice", w[0])));
    }
    Ok(ServerLines { nodes, dns })
}

/// The pool keys both formats have, as read (absent: the default both formats use), and the
/// key hash, parsed with the format's own default.
pub(super) struct SharedKeys {
    pub(super) hash: KeyHash,
    pub(super) hash_tag: Option<[u8; 2]>,
    pub(super) listen: Option<String>,
    pub(super) server_connections: Option<u32>,
    pub(super) auto_eject_hosts: Option<bool>,
    pub(super) server_failure_limit: Option<u32>,
    pub(super) server_retry_timeout_ms: Option<u64>,
    pub(super) spool_deletes: Option<bool>,
    pub(super) item_size_max: Option<u64>,
    pub(super) preconnect: Option<bool>,
    pub(super) backlog: Option<u32>,
    pub(super) reuseport: Option<bool>,
    pub(super) tcpkeepalive: Option<bool>,
    pub(super) client_connections: Option<u32>,
}

/// The pool `name`, checked by building its ring (of its static servers, when it has
/// some: DNS entries are checked when their members are found), without TLS or
/// authentication: one
/// connection per server, a server marked down after 2 failures and retried after 30 s,
/// its keys not moved while it is down (the paper's default, which a gutter route serves;
/// `auto_eject_hosts = true` rehashes them as twemproxy does), and undeliverable deletes
/// spooled (twemproxy forgets them), unless `shared` says otherwise.
pub(super) fn pool(
    name: String,
    distribution: Distribution,
    servers: ServerLines,
    timeout_ms: u64,
    shared: SharedKeys,
) -> Result<PoolConfig, ConfigError> {
    let item_size_max = match shared.item_size_max {
        None => DEFAULT_ITEM_SIZE_MAX,
        Some(n) if (MIN_ITEM_SIZE_MAX as u64..=MAX_ITEM_SIZE_MAX as u64).contains(&n) => n as usize,
        Some(n) => {
            return Err(pool_error(
                &name,
                format!(
                    "item_size_max = {n} is out of range: {MIN_ITEM_SIZE_MAX} to \
                     {MAX_ITEM_SIZE_MAX} bytes (memcached's -I limits)"
                ),
            ))
        }
    };
    let defaults = ListenOptions::default();
    let listener = ListenOptions {
        backlog: shared.backlog.unwrap_or(defaults.backlog),
        reuseport: shared.reuseport.unwrap_or(defaults.reuseport),
        tcp_keepalive: shared.tcpkeepalive.unwrap_or(defaults.tcp_keepalive),
        client_connections: shared
            .client_connections
            .unwrap_or(defaults.client_connections),
        ..defaults
    };
    if shared.listen.is_none() {
        let given = [
            ("backlog", shared.backlog.is_some()),
            ("reuseport", shared.reuseport.is_some()),
            ("tcpkeepalive", shared.tcpkeepalive.is_some()),
            ("client_connections", shared.client_connections.is_some()),
        ];
        if let Some((key, _)) = given.iter().find(|(_, set)| *set) {
            return Err(pool_error(
                &name,
                format!("{key} sets how the pool's listener accepts clients: it needs listen"),
            ));
        }
    }
    if listener.backlog == 0 {
        return Err(pool_error(&name, "backlog must be at least 1"));
    }
    let pool = PoolConfig {
        item_size_max,
        preconnect: shared.preconnect.unwrap_or(false),
        listener,
        rates: Default::default(),
        max_outstanding: None,
        zone: None,
        max_down_fraction: Fraction(1.0),
        tls: None,
        auth: None,
        hash: shared.hash,
        hash_tag: shared.hash_tag,
        servers: servers.nodes,
        dns: servers.dns,
        listen: shared.listen,
        distribution,
        timeout_ms,
        server_connections: shared.server_connections.unwrap_or(1).max(1),
        auto_eject_hosts: shared.auto_eject_hosts.unwrap_or(false),
        server_failure_limit: shared.server_failure_limit.unwrap_or(2).max(1),
        server_retry_timeout_ms: shared.server_retry_timeout_ms.unwrap_or(30_000),
        spool_deletes: shared.spool_deletes.unwrap_or(true),
        name,
    };
    if !pool.servers.is_empty() || pool.dns.is_empty() {
        pool.ring()
            .map_err(|e| pool_error(&pool.name, e.to_string()))?;
    }
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_lines() {
        assert_eq!(
            parse_server("127.0.0.1:11211:3 alpha").unwrap(),
            Node {
                host: "127.0.0.1".into(),
                port: 11211,
                weight: 3,
                name: Some("alpha".into())
            }
        );
        assert_eq!(parse_server("cache1:11212").unwrap().weight, 1);
        assert!(parse_server("cache1").is_err());
        assert!(parse_server("cache1:port:1").is_err());
        assert!(parse_server("cache1:11211:0").is_err());
    }
}
