//! twemproxy's (nutcracker's) YAML, read as twemproxy reads it: its defaults, its server
//! order, its server syntax.

use super::model::{ConfigError, PoolConfig};
use super::pool_keys::{parse_hash, parse_hash_tag, pool, pool_error, servers, SharedKeys};
use crate::hash::KeyHash;
use crate::ring::{twemproxy_order, Distribution, KetamaDialect};
use serde::Deserialize;
use std::collections::BTreeMap;

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
    tcpkeepalive: Option<bool>,
    reuseport: Option<bool>,
    server_connections: Option<u32>,
    auto_eject_hosts: Option<bool>,
    server_retry_timeout: Option<u64>,
    server_failure_limit: Option<u32>,
    servers: Option<Vec<String>>,
    /// memfleet's own key (twemproxy has no spool): `false` turns the delete spool off.
    spool_deletes: Option<bool>,
    /// memfleet's own key (twemproxy has no item limit): the largest item let through.
    item_size_max: Option<u64>,
}

/// Reads a twemproxy (nutcracker) YAML file as twemproxy does: its defaults (fnv1a_64,
/// ketama, 2 failures, 30 s retry, no timeout), its server order (sorted by name, which
/// modula depends on), its server syntax. Every key of twemproxy 0.5 is taken with its
/// meaning: `backlog`, `reuseport`, `tcpkeepalive` and `client_connections` set how the
/// pool's listener accepts ([`crate::config::ListenOptions`]), `preconnect` opens the
/// server connections at start, and `redis_db` only concerns Redis pools, so it changes
/// nothing for memcached. Redis pools, and `redis_auth` (which would make twemproxy
/// require a Redis `AUTH` from clients), are refused: memfleet routes memcached.
pub fn from_twemproxy_yaml(text: &str) -> Result<Vec<PoolConfig>, ConfigError> {
    check_twemproxy_yaml(text).map_err(|mut errors| errors.swap_remove(0))
}

/// Reads a twemproxy YAML file as [`from_twemproxy_yaml`] does, reporting every pool's
/// problem (at least one on `Err`), as `nutcracker -t` checks a file.
pub fn check_twemproxy_yaml(text: &str) -> Result<Vec<PoolConfig>, Vec<ConfigError>> {
    let file: BTreeMap<String, yaml_serde::Value> =
        yaml_serde::from_str(text).map_err(|e| vec![ConfigError::Syntax(e.to_string())])?;
    if file.is_empty() {
        return Err(vec![ConfigError::Empty]);
    }
    let (pools, errors): (Vec<_>, Vec<_>) = file
        .into_iter()
        .map(|(name, value)| {
            let p: YamlPool =
                yaml_serde::from_value(value).map_err(|e| pool_error(&name, e.to_string()))?;
            if p.redis == Some(true) {
                return Err(pool_error(
                    &name,
                    "is a redis pool; memfleet routes memcached",
                ));
            }
            if p.redis_auth.is_some() {
                return Err(pool_error(
                    &name,
                    "redis_auth asks clients for a Redis AUTH, which memcached clients cannot \
                     send; memfleet routes memcached (its server authentication is a TOML \
                     pool's auth_user, its clients' memfleet router --auth-file)",
                ));
            }
            // Redis's database number: nothing to select on a memcached server.
            let _ = p.redis_db;
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
            twemproxy_order(&mut servers.nodes);
            // twemproxy has no memcached authentication (`redis_auth` is Redis's), nor TLS.
            let shared = SharedKeys {
                hash: parse_hash(&name, p.hash, KeyHash::Fnv1a64)?,
                hash_tag: parse_hash_tag(&name, p.hash_tag)?,
                listen: p.listen,
                server_connections: p.server_connections,
                auto_eject_hosts: p.auto_eject_hosts,
                server_failure_limit: p.server_failure_limit,
                server_retry_timeout_ms: p.server_retry_timeout,
                spool_deletes: p.spool_deletes,
                item_size_max: p.item_size_max,
                preconnect: p.preconnect,
                backlog: p.backlog,
                reuseport: p.reuseport,
                tcpkeepalive: p.tcpkeepalive,
                client_connections: p.client_connections,
            };
            // twemproxy waits forever without `timeout`; a router needs a bound.
            let timeout_ms = p.timeout.unwrap_or(60_000);
            pool(name, distribution, servers, timeout_ms, shared)
        })
        .partition(Result::is_ok);
    if errors.is_empty() {
        Ok(pools.into_iter().map(Result::unwrap).collect())
    } else {
        Err(errors.into_iter().filter_map(Result::err).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn every_twemproxy_0_5_key_is_taken_or_refused_by_name() {
        use crate::config::ListenOptions;
        let yaml = "a:\n  listen: 127.0.0.1:22123\n  hash: fnv1a_64\n  hash_tag: \"{}\"\n  \
                    distribution: ketama\n  timeout: 400\n  backlog: 1024\n  \
                    client_connections: 100\n  redis: false\n  tcpkeepalive: true\n  \
                    reuseport: true\n  redis_db: 0\n  preconnect: true\n  \
                    auto_eject_hosts: false\n  server_connections: 2\n  \
                    server_retry_timeout: 2000\n  server_failure_limit: 3\n  \
                    servers:\n   - 127.0.0.1:11212:1\n";
        let pool = &from_twemproxy_yaml(yaml).unwrap()[0];
        assert_eq!(
            pool.listener,
            ListenOptions {
                backlog: 1024,
                reuseport: true,
                tcp_keepalive: true,
                client_connections: 100,
                ..ListenOptions::default()
            }
        );
        assert!(pool.preconnect);
        assert_eq!(pool.server_connections, 2);
        assert_eq!(pool.item_size_max, 1 << 20);
        // twemproxy's defaults where the file says nothing.
        let plain = "a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:2:1\n";
        let plain = &from_twemproxy_yaml(plain).unwrap()[0];
        assert_eq!(plain.listener, ListenOptions::default());
        assert_eq!(plain.listener.backlog, 512);
        assert!(!plain.preconnect);
        let err = |extra: &str| {
            from_twemproxy_yaml(&format!(
                "a:\n  listen: 127.0.0.1:1\n{extra}  servers:\n   - 127.0.0.1:2:1\n"
            ))
            .unwrap_err()
            .to_string()
        };
        assert!(err("  redis_auth: secret\n").contains("redis_auth"));
        assert!(err("  colour: blue\n").contains("pool a: unknown field `colour`"));
        let both = check_twemproxy_yaml(
            "a:\n  redis: true\n  servers:\n   - 127.0.0.1:1:1\n\
             b:\n  distribution: vnode\n  servers:\n   - 127.0.0.1:1:1\n",
        )
        .unwrap_err();
        assert_eq!(both.len(), 2, "{both:?}");
        assert!(err("  backlog: 0\n").contains("backlog"));
        assert!(err("  item_size_max: 100\n").contains("item_size_max = 100"));
        let big = from_twemproxy_yaml(
            "a:\n  listen: 127.0.0.1:1\n  item_size_max: 4194304\n  servers:\n   - 127.0.0.1:2:1\n",
        )
        .unwrap();
        assert_eq!(big[0].item_size_max, 4 << 20);
    }
}
