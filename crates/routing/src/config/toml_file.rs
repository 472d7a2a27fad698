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
        discovery: file.router.discovery()?,
        spool_dir: file.router.spool_dir,
        ..RouterConfig::default()
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
            let shared = SharedKeys {
                hash: parse_hash(&name, p.hash, KeyHash::Md5)?,
                hash_tag: parse_hash_tag(&name, p.hash_tag)?,
                listen: p.listen,
                server_connections: p.server_connections,
                auto_eject_hosts: p.auto_eject_hosts,
                server_failure_limit: p.server_failure_limit,
                server_retry_timeout_ms: p.server_retry_timeout_ms,
                spool_deletes: p.spool_deletes,
            };
            let servers = servers(&name, &p.servers)?;
            let timeout_ms = p.timeout_ms.unwrap_or(400);
            let pool = pool(name, distribution, servers, timeout_ms, shared)?;
            Ok(PoolConfig { tls, auth, ..pool })
        })
        .collect()
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
