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
            };
            // twemproxy waits forever without `timeout`; a router needs a bound.
            let timeout_ms = p.timeout.unwrap_or(60_000);
            pool(name, distribution, servers, timeout_ms, shared)
        })
        .collect()
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
}
