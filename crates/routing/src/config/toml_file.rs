//! memfleet's TOML: `[pools.NAME]` tables, `[routes.NAME]` tables (read by
//! `crate::route_config`) and the `[router]` table.

use super::discovery::{parse_interval, parse_nameserver, DiscoverySettings};
use super::model::{ConfigError, PasswordSource, PoolAuth, PoolConfig, PoolTls, RouterConfig};
use super::pool_keys::{parse_hash, parse_hash_tag, pool, pool_error, servers, SharedKeys};
use crate::hash::KeyHash;
use crate::ring::{Distribution, KetamaDialect};
use crate::route_config::{self, TomlRoute};
use serde::Deserialize;
use std::collections::BTreeMap;

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
    item_size_max: Option<u64>,
    preconnect: Option<bool>,
    backlog: Option<u32>,
    reuseport: Option<bool>,
    tcpkeepalive: Option<bool>,
    client_connections: Option<u32>,
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
    resolve_interval: Option<toml::Value>,
    nameservers: Option<Vec<String>>,
}

impl TomlRouter {
    /// The `[router]` keys of DNS discovery, checked.
    fn discovery(&self) -> Result<DiscoverySettings, ConfigError> {
        let router_error = |e: String| ConfigError::Syntax(format!("[router] {e}"));
        let mut settings = DiscoverySettings::default();
        if let Some(v) = &self.resolve_interval {
            settings.resolve_interval = parse_interval(v).map_err(router_error)?;
        }
        for ns in self.nameservers.iter().flatten() {
            settings
                .nameservers
                .push(parse_nameserver(ns).map_err(router_error)?);
        }
        Ok(settings)
    }
}

/// Reads memfleet's TOML configuration: pools, routes, router settings. The error is the
/// first problem [`check_toml`] finds.
pub fn from_toml(text: &str) -> Result<RouterConfig, ConfigError> {
    check_toml(text).map_err(|mut errors| errors.swap_remove(0))
}

/// Reads memfleet's TOML configuration and checks it, reporting every problem found (at
/// least one on `Err`): each pool, route and `[router]` table on its own, then the routes
/// together (names, loops) and the listeners (an address used twice, none at all).
pub fn check_toml(text: &str) -> Result<RouterConfig, Vec<ConfigError>> {
    let table: toml::Table =
        toml::from_str(text).map_err(|e| vec![ConfigError::Syntax(e.to_string())])?;
    let mut errors = Vec::new();
    let mut pool_tables = BTreeMap::new();
    let mut route_tables = BTreeMap::new();
    let mut router = TomlRouter::default();
    for (key, value) in table {
        match key.as_str() {
            "pools" => pool_tables = tables(value, "pools", &mut errors),
            "routes" => route_tables = tables(value, "routes", &mut errors),
            "router" => match table_as::<TomlRouter>(value) {
                Ok(r) => router = r,
                Err(e) => errors.push(ConfigError::Syntax(format!("[router] {e}"))),
            },
            other => errors.push(ConfigError::Syntax(format!(
                "unknown table {other:?} (pools, routes, router)"
            ))),
        }
    }
    if pool_tables.is_empty() && errors.is_empty() {
        return Err(vec![ConfigError::Empty]);
    }
    let pool_names: Vec<String> = pool_tables.keys().cloned().collect();
    let mut pools = Vec::new();
    for (name, value) in pool_tables {
        match table_as::<TomlPool>(value) {
            Ok(p) => match toml_pool(name, p) {
                Ok(pool) => pools.push(pool),
                Err(e) => errors.push(e),
            },
            Err(e) => errors.push(pool_error(&name, e)),
        }
    }
    let mut routes = Vec::new();
    for (name, value) in route_tables {
        let route_error = |problem: String| ConfigError::Route {
            route: name.clone(),
            problem,
        };
        match table_as::<TomlRoute>(value) {
            Ok(t) => match route_config::parse(&name, t) {
                Ok(route) => routes.push(route),
                Err(problem) => errors.push(route_error(problem)),
            },
            Err(e) => errors.push(route_error(e)),
        }
    }
    let names: Vec<&str> = pool_names.iter().map(String::as_str).collect();
    if errors.is_empty() {
        // Names and loops, once every route could be read.
        if let Err(e) = route_config::check(&routes, &names) {
            errors.push(ConfigError::Routes(e));
        }
    }
    let discovery = router.discovery().map_err(|e| errors.push(e)).ok();
    let config = RouterConfig {
        pools,
        routes,
        discovery: discovery.unwrap_or_default(),
        spool_dir: router.spool_dir,
        origin: None,
    };
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(errors)
    }
}

/// One table read as `T`; the error names the key it is about (`item_size_max: invalid
/// value: integer \`-1\`, expected u64`), as the table is read on its own.
fn table_as<T: serde::de::DeserializeOwned>(value: toml::Value) -> Result<T, String> {
    let text = toml::to_string(&value).unwrap_or_default();
    toml::from_str::<T>(&text).map_err(|e| {
        let message = e.message().trim_end().to_string();
        let key = e.span().and_then(|span| {
            let start = text.get(..span.start)?.rfind('\n').map_or(0, |i| i + 1);
            let (key, _) = text.get(start..)?.split_once(" = ")?;
            Some(key.trim().to_string())
        });
        match key {
            Some(key) if !message.contains(&key) => format!("{key}: {message}"),
            _ => message,
        }
    })
}

/// The named tables under `[what]` (`[pools.NAME]`, `[routes.NAME]`).
fn tables(
    value: toml::Value,
    what: &str,
    errors: &mut Vec<ConfigError>,
) -> BTreeMap<String, toml::Value> {
    match value {
        toml::Value::Table(t) => t.into_iter().collect(),
        other => {
            errors.push(ConfigError::Syntax(format!(
                "{what} must be tables ([{what}.NAME]), not a {}",
                other.type_str()
            )));
            BTreeMap::new()
        }
    }
}

/// One TOML pool, checked.
fn toml_pool(name: String, p: TomlPool) -> Result<PoolConfig, ConfigError> {
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
    let shared = SharedKeys {
        hash: parse_hash(&name, p.hash, KeyHash::Md5)?,
        hash_tag: parse_hash_tag(&name, p.hash_tag)?,
        listen: p.listen,
        server_connections: p.server_connections,
        auto_eject_hosts: p.auto_eject_hosts,
        server_failure_limit: p.server_failure_limit,
        server_retry_timeout_ms: p.server_retry_timeout_ms,
        spool_deletes: p.spool_deletes,
        item_size_max: p.item_size_max,
        preconnect: p.preconnect,
        backlog: p.backlog,
        reuseport: p.reuseport,
        tcpkeepalive: p.tcpkeepalive,
        client_connections: p.client_connections,
    };
    let servers = servers(&name, &p.servers)?;
    let timeout_ms = p.timeout_ms.unwrap_or(400);
    let pool = pool(name, distribution, servers, timeout_ms, shared)?;
    Ok(PoolConfig { tls, auth, ..pool })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route_config::RouteKind;

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
    fn every_problem_of_a_file_is_reported() {
        let errors = check_toml(
            "[pools.a]\nservers = []\n\
             [pools.b]\nservrs = [\"a:1\"]\n\
             [pools.c]\nitem_size_max = 5\nservers = [\"10.0.0.1:1\"]\n\
             [pools.ok]\nservers = [\"10.0.0.1:2\"]\n\
             [routes.r]\ntype = \"fanout\"\n\
             [routes.s]\ntype = \"gutter\"\nmain = \"ok\"\n\
             [router]\nresolve_interval = \"soon\"\n\
             [pool.typo]\nservers = []\n",
        )
        .unwrap_err();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let want = [
            "pool a: has no servers",
            "pool b: unknown field `servrs`",
            "pool c: item_size_max = 5",
            "route r: unknown route type",
            "route s: a gutter route needs \"gutter\"",
            "[router] resolve_interval",
            "unknown table \"pool\"",
        ];
        assert_eq!(text.len(), want.len(), "{text:#?}");
        for w in want {
            assert!(text.iter().any(|t| t.contains(w)), "{w} not in {text:#?}");
        }
        // Routes are checked together once each could be read.
        let errors = check_toml(
            "[pools.a]\nservers = [\"10.0.0.1:1\"]\n\
             [routes.r]\ntype = \"gutter\"\nmain = \"a\"\ngutter = \"nowhere\"\n",
        )
        .unwrap_err();
        assert!(errors[0].to_string().contains("nowhere"), "{errors:?}");
        let twice = check_toml(
            "[pools.a]\nlisten = \"127.0.0.1:1\"\nservers = [\"10.0.0.1:1\"]\n\
             [routes.r]\nlisten = \"127.0.0.1:1\"\ntype = \"operation\"\ndefault = \"a\"\n",
        )
        .unwrap();
        let problems: Vec<String> = twice
            .listener_problems()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(problems, ["r and a both listen on 127.0.0.1:1"]);
        let bad = check_toml("[pools.a]\nlisten = \"localhost\"\nservers = [\"10.0.0.1:1\"]\n");
        assert!(bad.unwrap().listener_problems()[0]
            .to_string()
            .contains("a: listen \"localhost\" is neither"));
        let none = check_toml("[pools.a]\nservers = [\"10.0.0.1:1\"]\n").unwrap();
        assert!(none.listener_problems()[0]
            .to_string()
            .contains("no pool or route"));
    }

    #[test]
    fn toml_item_size_and_listener_keys() {
        use crate::config::ListenOptions;
        let pool = |keys: &str| format!("[pools.a]\nservers = [\"10.0.0.1:11211\"]\n{keys}");
        let config = from_toml(&pool(
            "listen = \"127.0.0.1:1\"\nitem_size_max = 4194304\npreconnect = true\n\
             backlog = 64\nreuseport = true\ntcpkeepalive = true\nclient_connections = 9\n",
        ))
        .unwrap();
        let a = &config.pools[0];
        assert_eq!(a.item_size_max, 4 << 20);
        assert!(a.preconnect);
        assert_eq!(
            a.listener,
            ListenOptions {
                backlog: 64,
                reuseport: true,
                tcp_keepalive: true,
                client_connections: 9
            }
        );
        let plain = from_toml(&pool("")).unwrap();
        assert_eq!(plain.pools[0].item_size_max, 1 << 20);
        let err = |keys: &str| from_toml(&pool(keys)).unwrap_err().to_string();
        assert!(err("item_size_max = 1000\n").contains("pool a: item_size_max = 1000"));
        assert!(err("item_size_max = 1073741825\n").contains("out of range"));
        assert_eq!(
            from_toml(&pool("item_size_max = 1073741824\n"))
                .unwrap()
                .pools[0]
                .item_size_max,
            1 << 30
        );
        assert!(err("reuseport = true\n").contains("reuseport sets how the pool's listener"));
        assert!(err("item_size_max = -1\n").contains("item_size_max"));
    }

    #[test]
    fn toml_dns_pools() {
        use crate::config::DnsEntry;
        let config = from_toml(
            "[router]\nresolve_interval = \"250ms\"\nnameservers = [\"127.0.0.1:5353\"]\n\
             [pools.main]\nservers = [\"dnssrv+_memcache._tcp.cache.test\", \
             \"dns+cache.test:11211\", \"10.0.0.9:11211\"]\n\
             [pools.plain]\nservers = [\"10.0.0.1:11211\"]\n",
        )
        .unwrap();
        assert_eq!(
            config.discovery.resolve_interval,
            std::time::Duration::from_millis(250)
        );
        assert_eq!(
            config.discovery.nameservers,
            vec!["127.0.0.1:5353".parse().unwrap()]
        );
        assert!(config.has_dns());
        let main = &config.pools[0];
        assert_eq!(main.servers.len(), 1);
        assert_eq!(
            main.dns,
            vec![
                DnsEntry::Srv {
                    name: "_memcache._tcp.cache.test".into()
                },
                DnsEntry::Addresses {
                    name: "cache.test".into(),
                    port: 11211
                }
            ]
        );
        // Only DNS entries: no ring to check yet.
        let only = from_toml("[pools.a]\nservers = [\"dnssrv+_memcache._tcp.a.test\"]\n").unwrap();
        assert!(only.pools[0].servers.is_empty());
        assert_eq!(only.discovery, DiscoverySettings::default());
        assert!(!from_toml("[pools.a]\nservers = [\"10.0.0.1:1\"]\n")
            .unwrap()
            .has_dns());
        let err = |text: &str| from_toml(text).unwrap_err().to_string();
        assert!(err("[pools.a]\nservers = [\"dns+a.test\"]\n").contains("dns+NAME:PORT"));
        assert!(
            err("[pools.a]\nservers = [\"dns+a.test:1\", \"dns+A.test:1\"]\n").contains("twice")
        );
        assert!(
            err("[router]\nresolve_interval = \"soon\"\n[pools.a]\nservers = [\"a:1\"]\n")
                .contains("resolve_interval")
        );
        assert!(
            err("[router]\nnameservers = [\"dns.test\"]\n[pools.a]\nservers = [\"a:1\"]\n")
                .contains("nameserver")
        );
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
