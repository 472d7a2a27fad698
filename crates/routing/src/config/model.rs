//! The configuration as read: pools (with their TLS and authentication settings), the
//! router-wide settings, and why a file was refused.

use super::discovery::{DiscoverySettings, DnsEntry};
use crate::listener_workers::ListenerWorkers;
use crate::ring::{Ring, RingError};
use crate::routes::RouteConfig;
use crate::{Distribution, KeyHash, Node};

/// One pool, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// The pool's name.
    pub name: String,
    /// Where the router listens for this pool's clients (`host:port`, or a Unix socket
    /// path starting with `/`), if it has its own listener.
    pub listen: Option<String>,
    /// How keys are spread.
    pub distribution: Distribution,
    /// The key hash (ketama and modula).
    pub hash: KeyHash,
    /// Hash only the part of a key between these two characters, when both are present.
    pub hash_tag: Option<[u8; 2]>,
    /// Per-request timeout, ms.
    pub timeout_ms: u64,
    /// Connections to each server.
    pub server_connections: u32,
    /// Rehash a down server's keys over the live servers (twemproxy's `auto_eject_hosts`):
    /// while a server is marked down the pool routes by a ring without it, and its keys go
    /// back to it when it is up again. Off (the default in both formats), a down server's
    /// keys fail fast until it is back; a gutter route is the other way to keep them served.
    pub auto_eject_hosts: bool,
    /// Consecutive failures before a server is marked down (in every pool: requests to it
    /// then fail fast, or are rehashed with `auto_eject_hosts`).
    pub server_failure_limit: u32,
    /// How long a down server stays down before it is tried again, ms (a `version` probe;
    /// its success brings the server back). With `auto_eject_hosts` it is tried every
    /// `server_retry_timeout_ms`, as twemproxy does; without, the pause doubles up to a
    /// minute.
    pub server_retry_timeout_ms: u64,
    /// The servers written as `host:port`, in the order the distribution indexes them
    /// (members found through `dns` follow them, sorted by name).
    pub servers: Vec<Node>,
    /// Entries whose members are found in DNS (`dns+NAME:PORT`, `dnssrv+NAME`) and
    /// followed while the pool runs; see [`crate::config::discovery`].
    pub dns: Vec<DnsEntry>,
    /// A delete that cannot be delivered to a server waits in the spool and is replayed,
    /// before the server serves reads again, when it is back (default: on). Off, such a
    /// delete is answered with an error.
    pub spool_deletes: bool,
    /// TLS to the servers; `None`: plain TCP.
    pub tls: Option<PoolTls>,
    /// memcached's ASCII authentication towards the servers (their `-Y` file); `None`:
    /// connections start with requests.
    pub auth: Option<PoolAuth>,
    /// The largest item the router lets through to this pool, in bytes, counted as
    /// memcached counts against its `-I` (key, value and item overhead; default 1 MiB, as
    /// memcached's): a larger store is refused with memcached's `SERVER_ERROR object too
    /// large for cache` without reaching a server.
    pub item_size_max: usize,
    /// Open every connection to every server when the router starts (twemproxy's
    /// `preconnect`), instead of at the first request.
    pub preconnect: bool,
    /// How this pool's own listener (`listen`) listens and accepts.
    pub listener: ListenOptions,
    /// The most of its servers that may be marked down at once, as a fraction
    /// (`max_down_fraction`; TOML default 0.5, twemproxy YAML 1: no cap, as twemproxy);
    /// at least one server may always be. Past it a failing server is not marked down:
    /// its requests keep failing (and counting) one by one, so a router-side stall cannot
    /// take a whole pool out (or, with `auto_eject_hosts`, move all its keys).
    pub max_down_fraction: Fraction,
    /// The zone (rack, availability zone) its servers are in (`zone`): a replicated
    /// route reads first from the replicas in the router's own zone (`[router] zone`).
    pub zone: Option<String>,
    /// Requests per second this router sends the pool, by kind (`rates = { gets = N,
    /// sets = N, deletes = N }`); over a rate a request is answered `SERVER_ERROR` without
    /// reaching a server.
    pub rates: PoolRates,
    /// At most this many requests in flight to each server (`max_outstanding`), and this
    /// many more waiting for one of those places (`max_outstanding_queue`); `None`: no cap.
    pub max_outstanding: Option<MaxOutstanding>,
}

/// A pool's cap on requests in flight per server, per router (mcrouter's
/// `max_outstanding`): a request over `limit` waits in a queue of at most `queue`; past the
/// queue it is answered `SERVER_ERROR` naming the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxOutstanding {
    /// Requests in flight to one server (`max_outstanding`, at least 1).
    pub limit: u32,
    /// Requests waiting for a place (`max_outstanding_queue`; default: `limit`; 0: none
    /// wait, over the limit is refused at once).
    pub queue: u32,
}

/// A fraction in (0, 1].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fraction(pub f64);

impl Eq for Fraction {}

/// A pool's request rates per second, per router (`None`: no limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolRates {
    /// Retrievals (get, gets, gat, gats, lease-get, mg), per key.
    pub gets: Option<u32>,
    /// Storage, arithmetic and touch (set, add, ..., incr, decr, touch, ms, ma).
    pub sets: Option<u32>,
    /// delete, md.
    pub deletes: Option<u32>,
}

/// memcached's default `-I`: the default [`PoolConfig::item_size_max`].
pub const DEFAULT_ITEM_SIZE_MAX: usize = 1 << 20;
/// The smallest `item_size_max` (memcached refuses `-I` below 1 KiB).
pub const MIN_ITEM_SIZE_MAX: usize = 1 << 10;
/// The largest `item_size_max` (memcached refuses `-I` above 1 GiB).
pub const MAX_ITEM_SIZE_MAX: usize = 1 << 30;

/// How a pool's listener listens and accepts clients (twemproxy's pool keys of the same
/// names, which memfleet's TOML pools take too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenOptions {
    /// `listen(2)`'s backlog (`backlog`; twemproxy's default, 512).
    pub backlog: u32,
    /// `SO_REUSEPORT` on the listening socket (`reuseport`), so several routers (or a new
    /// one during an upgrade) can listen on the same port.
    pub reuseport: bool,
    /// `SO_KEEPALIVE` on every accepted client connection (`tcpkeepalive`, set where
    /// twemproxy 0.5 sets it: on the clients' sockets).
    pub tcp_keepalive: bool,
    /// At most this many clients connected to the listener at once (`client_connections`;
    /// 0: no limit): one more is closed as soon as it is accepted, as twemproxy closes a
    /// connection over its limit.
    pub client_connections: u32,
    /// The router workers that serve this listener's clients (`workers = [0, 1]`).
    pub workers: ListenerWorkers,
    /// Answer AWS ElastiCache's auto discovery (`config get cluster`) with the pool's
    /// servers, so ElastiCache cluster clients find them with the router as their
    /// configuration endpoint (`auto_discovery = true`; default off: `ERROR`, as
    /// memcached).
    pub auto_discovery: bool,
    /// Serve remote markers for replica regions (Facebook §5) through the admin keys
    /// `__memfleet__.mark_remote(KEY,TTL)` and `__memfleet__.remote_marked(KEY)`, with the
    /// client library's scheme, stored in this pool (`remote_markers = true`; default off).
    pub remote_markers: bool,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            backlog: 512,
            reuseport: false,
            tcp_keepalive: false,
            client_connections: 0,
            workers: ListenerWorkers::ALL,
            auto_discovery: false,
            remote_markers: false,
        }
    }
}

/// How a pool's connections authenticate to its servers (`auth_user` and one of
/// `auth_password_file` or `auth_password` in a TOML pool): memcached's ASCII auth (`-Y`), a
/// `set` carrying `<user> <password>` right after connecting (after the TLS handshake), or
/// with `auth_mechanism = "sasl"` binary SASL PLAIN (`-S`), every request then carried in
/// the binary protocol (`memfleet_protocol::binary::carry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolAuth {
    /// The user name (no spaces: memcached splits at the first one).
    pub user: String,
    /// Where the password comes from.
    pub password: PasswordSource,
    /// Binary SASL (`auth_mechanism = "sasl"`) rather than ASCII auth.
    pub sasl: bool,
}

/// Where a pool's authentication password comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum PasswordSource {
    /// A file holding it (its content, without a final line break), read when the pool is
    /// built (at start and at each reload), so the secret stays out of the configuration.
    File(String),
    /// Written in the configuration itself (`auth_password`): for tests and throwaway
    /// setups; anyone who can read the configuration can read it.
    Inline(String),
}

/// Passwords stay out of logs and `--print-config`.
impl std::fmt::Debug for PasswordSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PasswordSource::File(path) => f.debug_tuple("File").field(path).finish(),
            PasswordSource::Inline(_) => f.write_str("Inline(<hidden>)"),
        }
    }
}

/// TLS on a pool's server connections (`tls = true` and the `tls_*` keys of a TOML pool).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolTls {
    /// CA certificates (a PEM file) the servers' certificates are checked against.
    pub ca: String,
    /// The name the servers' certificates must carry; `None`: each server's host as
    /// written in `servers` (a DNS name or an IP address).
    pub server_name: Option<String>,
    /// A client certificate chain (PEM file) for servers that verify clients.
    pub cert: Option<String>,
    /// Its private key (PEM file).
    pub key: Option<String>,
}

/// Everything a router serves: pools, the routes over them, and router-wide settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouterConfig {
    /// The pools.
    pub pools: Vec<PoolConfig>,
    /// The routes (none for a twemproxy file).
    pub routes: Vec<RouteConfig>,
    /// Where undeliverable deletes are kept (none: a slot of the state directory, see
    /// `memfleet_client::spool`); pools with `spool_deletes = false` do not use it.
    pub spool_dir: Option<String>,
    /// How the pools' DNS entries are looked up and followed.
    pub discovery: DiscoverySettings,
    /// Worker threads of the process that runs it (0 counts as 1): each server gets
    /// `server_connections` connections per worker, as k nutcracker processes would open k
    /// times `server_connections`, so that no one connection carries every worker's
    /// requests (mcrouter, likewise, connects each proxy thread on its own). Not read from
    /// a file: `memfleet router` sets it from its runtime; the client library leaves it 1.
    pub workers: usize,
    /// The zone the router runs in (`[router] zone`): replicated routes read from the
    /// replicas of this zone first.
    pub zone: Option<String>,
    /// Clients connected to all the router's listeners at once, at most (`[router]
    /// max_client_connections`; `None` or 0: no limit): one more is answered `ERROR Too
    /// many open connections` and closed, as memcached refuses over its `-c`.
    pub max_client_connections: Option<u32>,
    /// Where it was read from and when (the router's admin keys `config_file`,
    /// `config_md5`, `config_age`); `None` when built in memory.
    pub origin: Option<ConfigOrigin>,
}

/// Where a configuration was read from: set by whoever reads the file, kept through a
/// reload that applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigOrigin {
    /// The file, as given on the command line.
    pub file: String,
    /// The MD5 of the file's bytes, in hex (as `md5sum` prints it).
    pub md5: String,
    /// When it was read, Unix seconds.
    pub read_unix: u64,
}

impl ConfigOrigin {
    /// The origin of `text`, read from `file` now.
    pub fn of(file: &str, text: &[u8]) -> ConfigOrigin {
        use md5::Digest;
        let digest = md5::Md5::digest(text);
        let md5 = digest.iter().map(|b| format!("{b:02x}")).collect();
        let read_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        ConfigOrigin {
            file: file.to_string(),
            md5,
            read_unix,
        }
    }
}

impl RouterConfig {
    /// What is wrong with the listeners: an address two pools or routes listen on, or
    /// none at all (a router would serve nothing).
    pub fn listener_problems(&self) -> Vec<ConfigError> {
        let mut problems = Vec::new();
        let mut seen: Vec<(&str, &str)> = Vec::new();
        let listens = self
            .pools
            .iter()
            .filter_map(|p| Some((p.listen.as_deref()?, p.name.as_str())))
            .chain(
                self.routes
                    .iter()
                    .filter_map(|r| Some((r.listen.as_deref()?, r.name.as_str()))),
            );
        for (listen, name) in listens {
            let port_ok = listen
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !listen.starts_with('/') && !port_ok {
                problems.push(ConfigError::Listeners(format!(
                    "{name}: listen {listen:?} is neither host:port nor a Unix socket path"
                )));
            }
            match seen.iter().find(|(l, _)| *l == listen) {
                Some((_, first)) => problems.push(ConfigError::Listeners(format!(
                    "{name} and {first} both listen on {listen}"
                ))),
                None => seen.push((listen, name)),
            }
        }
        if seen.is_empty() {
            problems.push(ConfigError::Listeners(
                "no pool or route has a listen address".into(),
            ));
        }
        problems.extend(self.worker_problems());
        problems
    }

    /// Listeners whose `workers` name a worker the router does not run (`workers`
    /// workers; nothing to check while that is 0, unknown).
    pub fn worker_problems(&self) -> Vec<ConfigError> {
        let listeners = self
            .pools
            .iter()
            .filter(|p| p.listen.is_some())
            .map(|p| (p.name.as_str(), p.listener.workers))
            .chain(
                self.routes
                    .iter()
                    .filter(|r| r.listen.is_some())
                    .map(|r| (r.name.as_str(), r.workers)),
            );
        let mut problems = Vec::new();
        for (name, workers) in listeners {
            match workers.highest() {
                Some(w) if self.workers > 0 && w >= self.workers => {
                    problems.push(ConfigError::Listeners(format!(
                        "{name}: workers = {:?} names worker {w}, but the router runs {} \
                         (-t {}): workers are numbered 0 to {}",
                        workers.list(),
                        self.workers,
                        self.workers,
                        self.workers - 1
                    )))
                }
                _ => {}
            }
        }
        problems
    }

    /// Whether some pool has DNS entries to follow.
    pub fn has_dns(&self) -> bool {
        self.pools.iter().any(|p| !p.dns.is_empty())
    }
}

impl From<Vec<PoolConfig>> for RouterConfig {
    fn from(pools: Vec<PoolConfig>) -> RouterConfig {
        RouterConfig {
            pools,
            ..RouterConfig::default()
        }
    }
}

impl PoolConfig {
    /// The ring of this pool's `servers` (without the members DNS entries find).
    pub fn ring(&self) -> Result<Ring, RingError> {
        self.ring_of(self.servers.clone())
    }

    /// A ring of `nodes` with this pool's distribution, key hash and hash tag (the pool's
    /// servers and the members its DNS entries found).
    pub fn ring_of(&self, nodes: Vec<Node>) -> Result<Ring, RingError> {
        Ok(Ring::new(nodes, self.distribution, self.hash)?.with_hash_tag(self.hash_tag))
    }
}

/// Why a configuration is refused (the router keeps its old one and logs this).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Not valid TOML or YAML, or an unknown or mistyped key.
    #[error("{0}")]
    Syntax(String),
    /// A pool that cannot work.
    #[error("pool {pool}: {problem}")]
    Pool {
        /// The pool.
        pool: String,
        /// What is wrong.
        problem: String,
    },
    /// Nothing to route.
    #[error("no pools")]
    Empty,
    /// A route that cannot work.
    #[error("route {route}: {problem}")]
    Route {
        /// The route.
        route: String,
        /// What is wrong.
        problem: String,
    },
    /// Routes that do not fit together (an unknown name, a loop).
    #[error("{0}")]
    Routes(String),
    /// Listeners that cannot all be bound (an address twice) or none at all.
    #[error("{0}")]
    Listeners(String),
}
