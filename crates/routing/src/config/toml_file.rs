//! memfleet's TOML: `[pools.NAME]` tables, `[routes.NAME]` tables (read by
//! `crate::routes`) and the `[router]` table.

use super::discovery::{parse_interval, parse_nameserver, DiscoverySettings};
use super::model::{
    ConfigError, Fraction, ListenOptions, MaxOutstanding, PasswordSource, PoolAuth, PoolConfig,
    PoolRates, PoolTls, RouterConfig,
};
use super::pool_keys::{parse_hash, parse_hash_tag, pool, pool_error, servers, SharedKeys};
use crate::hash::KeyHash;
use crate::listener_workers::listener_workers;
use crate::ring::{Distribution, KetamaDialect};
use crate::routes;
use crate::toml_table::table_as;
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
    workers: Option<Vec<u64>>,
    auto_discovery: Option<bool>,
    remote_markers: Option<bool>,
    rates: Option<BTreeMap<String, u64>>,
    max_outstanding: Option<u64>,
    max_outstanding_queue: Option<u64>,
    zone: Option<String>,
    max_down_fraction: Option<f64>,
    servers: Vec<String>,
    tls: Option<bool>,
    tls_ca: Option<String>,
    tls_server_name: Option<String>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    auth_user: Option<String>,
    auth_password_file: Option<String>,
    auth_password: Option<String>,
    auth_mechanism: Option<String>,
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
    let sasl = match p.auth_mechanism.as_deref() {
        None | Some("ascii") => false,
        Some("sasl") => true,
        Some(other) => {
            return Err(pool_error(
                pool,
                format!("auth_mechanism is \"ascii\" (memcached -Y) or \"sasl\" (memcached -S), not {other:?}"),
            ))
        }
    };
    if p.auth_mechanism.is_some() && p.auth_user.is_none() {
        return Err(pool_error(pool, "auth_mechanism needs auth_user"));
    }
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
            sasl,
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
    zone: Option<String>,
    max_client_connections: Option<u32>,
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
        match routes::parse(&name, value) {
            Ok(route) => routes.push(route),
            Err(problem) => errors.push(route_error(problem)),
        }
    }
    let names: Vec<&str> = pool_names.iter().map(String::as_str).collect();
    if errors.is_empty() {
        // Names and loops, once every route could be read.
        if let Err(e) = routes::check(&routes, &names) {
            errors.push(ConfigError::Routes(e));
        }
    }
    let discovery = router.discovery().map_err(|e| errors.push(e)).ok();
    let config = RouterConfig {
        pools,
        routes,
        discovery: discovery.unwrap_or_default(),
        spool_dir: router.spool_dir,
        zone: router.zone,
        max_client_connections: router.max_client_connections.filter(|n| *n > 0),
        origin: None,
        workers: 0,
    };
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(errors)
    }
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

/// A pool's `rates = { gets = N, sets = N, deletes = N }`, each at least 1 per second.
fn toml_rates(pool: &str, rates: Option<BTreeMap<String, u64>>) -> Result<PoolRates, ConfigError> {
    let mut out = PoolRates::default();
    for (kind, n) in rates.unwrap_or_default() {
        let n = u32::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
            pool_error(
                pool,
                format!("rates.{kind} = {n}: 1 to 4294967295 per second"),
            )
        })?;
        match kind.as_str() {
            "gets" => out.gets = Some(n),
            "sets" => out.sets = Some(n),
            "deletes" => out.deletes = Some(n),
            other => {
                return Err(pool_error(
                    pool,
                    format!("unknown rate {other:?} (gets, sets, deletes)"),
                ))
            }
        }
    }
    Ok(out)
}

/// The largest `max_outstanding` and `max_outstanding_queue`.
const MAX_OUTSTANDING: u64 = 1 << 20;

/// A pool's `max_outstanding` (1 to 2^20) and `max_outstanding_queue` (0 to 2^20; default:
/// `max_outstanding`; only with it).
fn toml_max_outstanding(
    pool: &str,
    limit: Option<u64>,
    queue: Option<u64>,
) -> Result<Option<MaxOutstanding>, ConfigError> {
    let Some(limit) = limit else {
        return match queue {
            Some(_) => Err(pool_error(
                pool,
                "max_outstanding_queue needs max_outstanding",
            )),
            None => Ok(None),
        };
    };
    if !(1..=MAX_OUTSTANDING).contains(&limit) {
        return Err(pool_error(
            pool,
            format!(
                "max_outstanding = {limit}: 1 to {MAX_OUTSTANDING} requests in flight per server"
            ),
        ));
    }
    let queue = queue.unwrap_or(limit);
    if queue > MAX_OUTSTANDING {
        return Err(pool_error(
            pool,
            format!("max_outstanding_queue = {queue}: 0 to {MAX_OUTSTANDING} waiting requests"),
        ));
    }
    Ok(Some(MaxOutstanding {
        limit: limit as u32,
        queue: queue as u32,
    }))
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
    let rates = p.rates.clone();
    let zone = p.zone.clone();
    let workers = listener_workers(p.workers.as_deref(), p.listen.is_some())
        .map_err(|e| pool_error(&name, e))?;
    let fraction = p.max_down_fraction.unwrap_or(0.5);
    if fraction.is_nan() || fraction <= 0.0 || fraction > 1.0 {
        return Err(pool_error(
            &name,
            format!("max_down_fraction = {fraction}: in (0, 1] (1: no cap)"),
        ));
    }
    let auth = toml_auth(&name, &p)?;
    let auto_discovery = p.auto_discovery.unwrap_or(false);
    let remote_markers = p.remote_markers.unwrap_or(false);
    for (on, what) in [
        (auto_discovery, "auto_discovery"),
        (remote_markers, "remote_markers"),
    ] {
        if on && p.listen.is_none() {
            return Err(pool_error(
                &name,
                format!("{what} answers on the pool's own listener: it needs listen"),
            ));
        }
    }
    let max_outstanding = toml_max_outstanding(&name, p.max_outstanding, p.max_outstanding_queue)?;
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
    let rates = toml_rates(&pool.name, rates)?;
    Ok(PoolConfig {
        tls,
        auth,
        rates,
        max_outstanding,
        zone,
        max_down_fraction: Fraction(fraction),
        listener: ListenOptions {
            workers,
            auto_discovery,
            remote_markers,
            ..pool.listener
        },
        ..pool
    })
}

#[cfg(test)]
#[path = "toml_file_tests.rs"]
mod tests;
