//! Pool configuration: memfleet's TOML, and twemproxy's YAML read unchanged, both into the
//! same [`PoolConfig`]s, so a twemproxy user switches by changing one command line and keeps
//! every key on its server.
//!
//! memfleet's TOML names pools as tables; servers use twemproxy's `host:port:weight [name]`
//! syntax (weight and name optional):
//!
//! ```toml
//! [pools.main]
//! listen = "127.0.0.1:22122"
//! distribution = "ketama"        # ketama | ketama-spymemcached | modula | rendezvous | jump
//! hash = "md5"                   # any twemproxy hash name
//! hash_tag = "{}"                # optional: hash only what is between the two characters
//! timeout_ms = 400
//! server_failure_limit = 2       # failures in a row that mark a server down
//! server_retry_timeout_ms = 30000
//! auto_eject_hosts = false       # true: rehash a down server's keys (twemproxy's)
//! servers = ["10.0.0.1:11211:1", "10.0.0.2:11211:1 cache-b"]
//! ```
//!
//! A server marked down fails its keys fast until a probe finds it back (the paper's and
//! mcrouter's behaviour: no key moves, so no stale copy is left behind when it returns);
//! `auto_eject_hosts = true` rehashes them over the live servers instead, as twemproxy's
//! YAML key of that name does (and means the same in both formats).
//!
//! Routes across pools (prefix routing, replication, gutter, broadcast, warm-up) are
//! `[routes.NAME]` tables beside the pools: see [`crate::route_config`]. A `[router]` table holds
//! what is not a pool's: `spool_dir`, where deletes that could not be delivered wait.
//!
//! Not here: listening, connecting, reloading (the router).

use crate::hash::KeyHash;
use crate::ring::{twemproxy_order, Distribution, KetamaDialect, Node, Ring, RingError};
use crate::route_config::{self, RouteConfig, TomlRoute};
use serde::Deserialize;
use std::collections::BTreeMap;

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
    /// The servers, in the order the distribution indexes them.
    pub servers: Vec<Node>,
    /// A delete that cannot be delivered to a server waits in the spool and is replayed,
    /// before the server serves reads again, when it is back (default: on). Off, such a
    /// delete is answered with an error.
    pub spool_deletes: bool,
    /// TLS to the servers; `None`: plain TCP.
    pub tls: Option<PoolTls>,
    /// memcached's ASCII authentication towards the servers (their `-Y` file); `None`:
    /// connections start with requests.
    pub auth: Option<PoolAuth>,
}

/// How a pool's connections authenticate to its servers (`auth_user` and one of
/// `auth_password_file` or `auth_password` in a TOML pool): memcached's ASCII auth, a
/// `set` carrying `<user> <password>` right after connecting (after the TLS handshake).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolAuth {
    /// The user name (no spaces: memcached splits at the first one).
    pub user: String,
    /// Where the password comes from.
    pub password: PasswordSource,
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
    /// The ring of this pool's servers.
    pub fn ring(&self) -> Result<Ring, RingError> {
        Ok(
            Ring::new(self.servers.clone(), self.distribution, self.hash)?
                .with_hash_tag(self.hash_tag),
        )
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
}

fn pool_error(pool: &str, problem: impl Into<String>) -> ConfigError {
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

fn parse_hash_tag(pool: &str, tag: Option<String>) -> Result<Option<[u8; 2]>, ConfigError> {
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

fn parse_hash(pool: &str, name: Option<String>, default: KeyHash) -> Result<KeyHash, ConfigError> {
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

fn servers(pool: &str, lines: &[String]) -> Result<Vec<Node>, ConfigError> {
    if lines.is_empty() {
        return Err(pool_error(pool, "has no servers"));
    }
    let nodes = lines
        .iter()
        .map(|l| parse_server(l).map_err(|e| pool_error(pool, e)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut names: Vec<String> = nodes
        .iter()
        .map(|n| n.name.clone().unwrap_or_else(|| n.addr()))
        .collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(pool_error(pool, format!("server {} is listed twice", w[0])));
    }
    Ok(nodes)
}

/// memfleet's TOML pool table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlPool {
    listen: Option<String>,
    distribution: Option<String>,
    hash: Option<String>,
    hash_tag: Option<String>,
    timeout_ms: Option<u64>,
    server_connections: Option<u32>,
    auto_eject_hosts: Option<bool>,
    server_failure_limit: Option<u32>,
    server_retry_timeout_ms: Option<u64>,
    spool_deletes: Option<bool>,
    servers: Vec<String>,
    tls: Option<bool>,
    tls_ca: Option<String>,
    tls_server_name: Option<String>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    auth_user: Option<String>,
    auth_password_file: Option<String>,
    auth_password: Option<String>,
}

/// A TOML pool's authentication keys, checked: `auth_user` needs exactly one of
/// `auth_password_file` and `auth_password`, and they need it.
fn toml_auth(pool: &str, p: &TomlPool) -> Result<Option<PoolAuth>, ConfigError> {
    let password = match (&p.auth_password_file, &p.auth_password) {
        (Some(_), Some(_)) => {
            return Err(pool_error(
                pool,
                "auth_password_file and auth_password are alternatives: give one",
            ))
        }
        (Some(file), None) => Some(PasswordSource::File(file.clone())),
        (None, Some(inline)) => Some(PasswordSource::Inline(inline.clone())),
        (None, None) => None,
    };
    match (&p.auth_user, password) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(pool_error(pool, "auth_password* keys need auth_user")),
        (Some(_), None) => Err(pool_error(
            pool,
            "auth_user needs auth_password_file (or auth_password)",
        )),
        (Some(user), Some(_)) if user.is_empty() || user.contains([' ', '\r', '\n']) => Err(
            pool_error(pool, "auth_user must be non-empty and without spaces"),
        ),
        (Some(_), Some(PasswordSource::Inline(p))) if p.contains(['\r', '\n']) => Err(pool_error(
            pool,
            "auth_password cannot contain a line break",
        )),
        (Some(user), Some(password)) => Ok(Some(PoolAuth {
            user: user.clone(),
            password,
        })),
    }
}

/// A TOML pool's TLS keys, checked: `tls = true` needs `tls_ca`; the other keys need
/// `tls = true`; a client certificate needs its key.
fn toml_tls(pool: &str, p: &TomlPool) -> Result<Option<PoolTls>, ConfigError> {
    let any_detail = p.tls_ca.is_some()
        || p.tls_server_name.is_some()
        || p.tls_cert.is_some()
        || p.tls_key.is_some();
    if !p.tls.unwrap_or(false) {
        if any_detail {
            return Err(pool_error(pool, "tls_* keys need tls = true"));
        }
        return Ok(None);
    }
    let Some(ca) = p.tls_ca.clone() else {
        return Err(pool_error(
            pool,
            "tls = true needs tls_ca, the CA file the servers' certificates are checked against",
        ));
    };
    if p.tls_cert.is_some() != p.tls_key.is_some() {
        return Err(pool_error(pool, "tls_cert and tls_key go together"));
    }
    Ok(Some(PoolTls {
        ca,
        server_name: p.tls_server_name.clone(),
        cert: p.tls_cert.clone(),
        key: p.tls_key.clone(),
    }))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TomlRouter {
    spool_dir: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    pools: BTreeMap<String, TomlPool>,
    #[serde(default)]
    routes: BTreeMap<String, TomlRoute>,
    #[serde(default)]
    router: TomlRouter,
}

/// Reads memfleet's TOML configuration: pools, routes, router settings.
pub fn from_toml(text: &str) -> Result<RouterConfig, ConfigError> {
    let file: TomlFile = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
    if file.pools.is_empty() {
        return Err(ConfigError::Empty);
    }
    let pools = toml_pools(file.pools)?;
    let routes = file
        .routes
        .into_iter()
        .map(|(name, t)| {
            route_config::parse(&name, t).map_err(|problem| ConfigError::Route {
                route: name.clone(),
                problem,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pool_names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    route_config::check(&routes, &pool_names).map_err(ConfigError::Routes)?;
    Ok(RouterConfig {
        pools,
        routes,
        spool_dir: file.router.spool_dir,
    })
}

fn toml_pools(pools: BTreeMap<String, TomlPool>) -> Result<Vec<PoolConfig>, ConfigError> {
    pools
        .into_iter()
        .map(|(name, p)| {
            let distribution = match p.distribution.as_deref().unwrap_or("ketama") {
                "ketama" => Distribution::Ketama(KetamaDialect::Libmemcached),
                "ketama-spymemcached" => Distribution::Ketama(KetamaDialect::Spymemcached),
                "modula" => Distribution::Modula,
                "rendezvous" => Distribution::Rendezvous,
                "jump" => Distribution::Jump,
                "random" => Distribution::Random,
                other => {
                    return Err(pool_error(
                        &name,
                        format!(
                            "unknown distribution {other:?} (ketama, ketama-spymemcached, \
                             modula, rendezvous, jump, random)"
                        ),
                    ))
                }
            };
            let tls = toml_tls(&name, &p)?;
            let auth = toml_auth(&name, &p)?;
            let pool = PoolConfig {
                tls,
                auth,
                hash: parse_hash(&name, p.hash, KeyHash::Md5)?,
                hash_tag: parse_hash_tag(&name, p.hash_tag)?,
                servers: servers(&name, &p.servers)?,
                listen: p.listen,
                distribution,
                timeout_ms: p.timeout_ms.unwrap_or(400),
                server_connections: p.server_connections.unwrap_or(1).max(1),
                // The paper's default: a down server's keys do not move (a gutter route
                // serves them); `auto_eject_hosts = true` rehashes them as twemproxy does.
                auto_eject_hosts: p.auto_eject_hosts.unwrap_or(false),
                server_failure_limit: p.server_failure_limit.unwrap_or(2).max(1),
                server_retry_timeout_ms: p.server_retry_timeout_ms.unwrap_or(30_000),
                spool_deletes: p.spool_deletes.unwrap_or(true),
                name,
            };
            pool.ring()
                .map_err(|e| pool_error(&pool.name, e.to_string()))?;
            Ok(pool)
        })
        .collect()
}

/// twemproxy's YAML pool, every key it knows.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlPool {
    listen: Option<String>,
    hash: Option<String>,
    hash_tag: Option<String>,
    distribution: Option<String>,
    timeout: Option<u64>,
    backlog: Option<u32>,
    preconnect: Option<bool>,
    redis: Option<bool>,
    redis_auth: Option<String>,
    redis_db: Option<u32>,
    client_connections: Option<u32>,
    server_connections: Option<u32>,
    auto_eject_hosts: Option<bool>,
    server_retry_timeout: Option<u64>,
    server_failure_limit: Option<u32>,
    servers: Option<Vec<String>>,
    /// memfleet's own key (twemproxy has no spool): `false` turns the delete spool off.
    spool_deletes: Option<bool>,
}

/// Reads a twemproxy (nutcracker) YAML file as twemproxy does: its defaults (fnv1a_64,
/// ketama, 2 failures, 30 s retry, no timeout), its server order (sorted by name, which
/// modula depends on), its server syntax. Redis pools are refused: memfleet routes memcached.
pub fn from_twemproxy_yaml(text: &str) -> Result<Vec<PoolConfig>, ConfigError> {
    let file: BTreeMap<String, YamlPool> =
        yaml_serde::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
    if file.is_empty() {
        return Err(ConfigError::Empty);
    }
    file.into_iter()
        .map(|(name, p)| {
            if p.redis == Some(true) {
                return Err(pool_error(
                    &name,
                    "is a redis pool; memfleet routes memcached",
                ));
            }
            let _ = (
                p.backlog,
                p.preconnect,
                p.redis_auth,
                p.redis_db,
                p.client_connections,
            );
            let distribution = match p.distribution.as_deref().unwrap_or("ketama") {
                "ketama" => Distribution::Ketama(KetamaDialect::Libmemcached),
                "modula" => Distribution::Modula,
                "random" => Distribution::Random,
                other => {
                    return Err(pool_error(
                        &name,
                        format!("distribution {other:?} is not supported (ketama, modula, random)"),
                    ))
                }
            };
            let mut servers = servers(&name, &p.servers.unwrap_or_default())?;
            twemproxy_order(&mut servers);
            let pool = PoolConfig {
                tls: None,
                // twemproxy has no memcached authentication (`redis_auth` is Redis's).
                auth: None,
                hash: parse_hash(&name, p.hash, KeyHash::Fnv1a64)?,
                hash_tag: parse_hash_tag(&name, p.hash_tag)?,
                listen: p.listen,
                distribution,
                // twemproxy waits forever without `timeout`; a router needs a bound.
                timeout_ms: p.timeout.unwrap_or(60_000),
                server_connections: p.server_connections.unwrap_or(1).max(1),
                auto_eject_hosts: p.auto_eject_hosts.unwrap_or(false),
                server_failure_limit: p.server_failure_limit.unwrap_or(2).max(1),
                server_retry_timeout_ms: p.server_retry_timeout.unwrap_or(30_000),
                // twemproxy forgets a delete it cannot deliver; memfleet spools it unless
                // told not to.
                spool_deletes: p.spool_deletes.unwrap_or(true),
                servers,
                name,
            };
            pool.ring()
                .map_err(|e| pool_error(&pool.name, e.to_string()))?;
            Ok(pool)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route_config::RouteKind;

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

    #[test]
    fn toml_pools() {
        let pools = from_toml(
            r#"
            [pools.main]
            listen = "127.0.0.1:22122"
            hash_tag = "{}"
            servers = ["10.0.0.1:11211:1", "10.0.0.2:11211:2 b"]

            [pools.jumpy]
            distribution = "jump"
            servers = ["10.0.0.3:11211"]
            "#,
        )
        .unwrap()
        .pools;
        assert_eq!(pools.len(), 2);
        let main = pools.iter().find(|p| p.name == "main").unwrap();
        assert_eq!(
            main.distribution,
            Distribution::Ketama(KetamaDialect::Libmemcached)
        );
        assert_eq!((main.hash, main.hash_tag), (KeyHash::Md5, Some(*b"{}")));
        assert_eq!(main.servers[1].name.as_deref(), Some("b"));
        // No rehash unless asked for; servers are marked down after 2 failures either way.
        assert!(!main.auto_eject_hosts);
        assert_eq!(
            (main.server_failure_limit, main.server_retry_timeout_ms),
            (2, 30_000)
        );
        let ejecting = from_toml(
            "[pools.e]\nauto_eject_hosts = true\nserver_retry_timeout_ms = 500\n\
             servers = [\"10.0.0.1:11211\"]\n",
        )
        .unwrap();
        assert!(ejecting.pools[0].auto_eject_hosts);
        let err = |text: &str| from_toml(text).unwrap_err().to_string();
        assert!(err("[pools.x]\nservers = []\n").contains("no servers"));
        assert!(err("[pools.x]\nhash = \"sha1\"\nservers = [\"a:1\"]\n").contains("unknown hash"));
        assert!(err("[pools.x]\nservers = [\"a:1\", \"a:1\"]\n").contains("twice"));
        assert!(err("[pools.x]\nservrs = [\"a:1\"]\n").contains("unknown field"));
        assert_eq!(from_toml("pools = {}\n").unwrap_err(), ConfigError::Empty);
    }

    #[test]
    fn twemproxy_example_file() {
        // Debian's nutcracker example, less its redis pools and Unix-socket pool weights.
        let yaml = r#"
gamma:
  listen: 127.0.0.1:22123
  hash: fnv1a_64
  distribution: ketama
  timeout: 400
  backlog: 1024
  preconnect: true
  auto_eject_hosts: true
  server_retry_timeout: 2000
  server_failure_limit: 3
  servers:
   - 127.0.0.1:11212:1
   - 127.0.0.1:11213:1

omega:
  listen: /tmp/gamma
  hash: hsieh
  distribution: modula
  auto_eject_hosts: false
  servers:
   - 127.0.0.1:11215:1
   - 127.0.0.1:11214:100000
"#;
        let pools = from_twemproxy_yaml(yaml).unwrap();
        let gamma = &pools[0];
        assert_eq!((gamma.timeout_ms, gamma.server_failure_limit), (400, 3));
        assert!(gamma.auto_eject_hosts);
        let omega = &pools[1];
        assert!(!omega.auto_eject_hosts);
        assert_eq!(
            (omega.hash, omega.distribution),
            (KeyHash::Hsieh, Distribution::Modula)
        );
        // Sorted as twemproxy sorts them.
        assert_eq!(omega.servers[0].port, 11214);
        assert_eq!(omega.listen.as_deref(), Some("/tmp/gamma"));
        let redis = "a:\n  listen: 127.0.0.1:1\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n";
        assert!(from_twemproxy_yaml(redis)
            .unwrap_err()
            .to_string()
            .contains("redis"));
        let random = "a:\n  distribution: random\n  servers:\n   - 127.0.0.1:1:1\n";
        assert_eq!(
            from_twemproxy_yaml(random).unwrap()[0].distribution,
            Distribution::Random
        );
        let vnode = "a:\n  distribution: vnode\n  servers:\n   - 127.0.0.1:1:1\n";
        assert!(from_twemproxy_yaml(vnode)
            .unwrap_err()
            .to_string()
            .contains("vnode"));
        assert!(from_twemproxy_yaml("a:\n  colour: blue\n").is_err());
    }

    #[test]
    fn toml_pool_tls() {
        let pool = |keys: &str| format!("[pools.a]\nservers = [\"10.0.0.1:11211\"]\n{keys}");
        let config = from_toml(&pool(
            "tls = true\ntls_ca = \"/ca.pem\"\ntls_server_name = \"cache\"\n\
             tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n",
        ))
        .unwrap();
        assert_eq!(
            config.pools[0].tls,
            Some(PoolTls {
                ca: "/ca.pem".into(),
                server_name: Some("cache".into()),
                cert: Some("/c.pem".into()),
                key: Some("/k.pem".into()),
            })
        );
        assert_eq!(from_toml(&pool("")).unwrap().pools[0].tls, None);
        for refused in [
            "tls = true\n",
            "tls_ca = \"/ca.pem\"\n",
            "tls = true\ntls_ca = \"/ca.pem\"\ntls_cert = \"/c.pem\"\n",
        ] {
            assert!(from_toml(&pool(refused)).is_err(), "{refused}");
        }
    }

    #[test]
    fn toml_pool_auth() {
        let pool = |keys: &str| format!("[pools.a]\nservers = [\"10.0.0.1:11211\"]\n{keys}");
        let config =
            from_toml(&pool("auth_user = \"app\"\nauth_password_file = \"/pw\"\n")).unwrap();
        assert_eq!(
            config.pools[0].auth,
            Some(PoolAuth {
                user: "app".into(),
                password: PasswordSource::File("/pw".into()),
            })
        );
        let inline = from_toml(&pool("auth_user = \"app\"\nauth_password = \"hush\"\n")).unwrap();
        assert_eq!(
            inline.pools[0].auth.as_ref().unwrap().password,
            PasswordSource::Inline("hush".into())
        );
        assert!(!format!("{inline:?}").contains("hush"), "{inline:?}");
        assert_eq!(from_toml(&pool("")).unwrap().pools[0].auth, None);
        for (refused, why) in [
            ("auth_user = \"app\"\n", "auth_user needs"),
            ("auth_password = \"x\"\n", "need auth_user"),
            ("auth_password_file = \"/pw\"\n", "need auth_user"),
            (
                "auth_user = \"app\"\nauth_password = \"x\"\nauth_password_file = \"/pw\"\n",
                "alternatives",
            ),
            (
                "auth_user = \"a b\"\nauth_password = \"x\"\n",
                "without spaces",
            ),
            (
                "auth_user = \"\"\nauth_password = \"x\"\n",
                "without spaces",
            ),
            (
                "auth_user = \"a\"\nauth_password = \"x\\ny\"\n",
                "line break",
            ),
        ] {
            let err = from_toml(&pool(refused)).unwrap_err().to_string();
            assert!(err.contains(why), "{refused}: {err}");
        }
    }

    #[test]
    fn toml_routes() {
        let pools = "[pools.a]\nservers = [\"10.0.0.1:11211\"]\n\
                     [pools.b]\nservers = [\"10.0.0.2:11211\"]\n";
        let config = from_toml(&format!(
            "{pools}[router]\nspool_dir = \"/var/spool/memfleet\"\n\
             [routes.web]\nlisten = \"127.0.0.1:5000\"\ntype = \"prefix\"\n\
             prefixes = {{ \"u:\" = \"both\", \"u:x:\" = \"a\" }}\ndefault = \"safe\"\n\
             [routes.both]\ntype = \"replicated\"\nreplicas = [\"a\", \"b\"]\n\
             [routes.safe]\ntype = \"gutter\"\nmain = \"a\"\ngutter = \"b\"\n"
        ))
        .unwrap();
        assert_eq!(config.spool_dir.as_deref(), Some("/var/spool/memfleet"));
        let web = config.routes.iter().find(|r| r.name == "web").unwrap();
        assert_eq!(web.listen.as_deref(), Some("127.0.0.1:5000"));
        // Longest prefix first.
        assert_eq!(
            web.kind,
            RouteKind::Prefix {
                prefixes: vec![("u:x:".into(), "a".into()), ("u:".into(), "both".into())],
                default: "safe".into(),
                strip: false,
            }
        );
        let safe = config.routes.iter().find(|r| r.name == "safe").unwrap();
        assert_eq!(
            safe.kind,
            RouteKind::Gutter {
                main: "a".into(),
                gutter: "b".into(),
                ttl: 10
            }
        );
        let err = |routes: &str| {
            from_toml(&format!("{pools}{routes}"))
                .unwrap_err()
                .to_string()
        };
        assert!(
            err("[routes.r]\ntype = \"gutter\"\nmain = \"a\"\ngutter = \"c\"\n")
                .contains("no pool or route named \"c\"")
        );
        assert!(err("[routes.r]\ntype = \"gutter\"\nmain = \"a\"\n").contains("needs \"gutter\""));
        assert!(
            err("[routes.r]\ntype = \"broadcast\"\nto = [\"a\"]\nmain = \"a\"\n")
                .contains("takes no \"main\"")
        );
        assert!(err("[routes.r]\ntype = \"fanout\"\n").contains("unknown route type"));
        assert!(err("[routes.a]\ntype = \"broadcast\"\nto = [\"b\"]\n").contains("both a pool"));
        assert!(err("[routes.x]\ntype = \"broadcast\"\nto = [\"y\"]\n\
             [routes.y]\ntype = \"operation\"\ndefault = \"x\"\n")
        .contains("loop"));
    }
}
