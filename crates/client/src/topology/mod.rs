//! A configuration built: pools with their servers' connections, routes over them, the
//! delete spool and the route counters. A reload builds a new `Topology` from the previous
//! one, which keeps the connections (and health) of servers that stay, the spool and the
//! counters of routes that keep their names. TLS files and authentication passwords are read
//! once per build: a reload rereads them.
//!
//! A pool with `auto_eject_hosts` routes by a live ring, its ring [`Ring::without`] the
//! servers marked down, rebuilt at the first key after a server goes down or comes back
//! (twemproxy rebuilds its continuum so); other pools keep every key on its server, which
//! fails fast while down.
//!
//! Pools with DNS entries (`dns+`, `dnssrv+`) get their members from a [`Discovery`] the
//! topology holds and hands on to the next one: [`Topology::build_resolving`] looks them up
//! before building; [`Topology::follow_dns`] looks again and, when a pool's members
//! changed, builds the topology that replaces this one (through the same all-or-nothing
//! swap as a reload: servers that stay keep their connections).
//!
//! | file | what it holds |
//! |------|---------------|
//! | (this file) | [`Topology`]: building, following DNS, counters and spool figures |
//! | `pool.rs` | [`Pool`]: a pool's ring over its servers and members, their connections, `stats` lines |
//! | `rates.rs` | [`RateLimits`]: a pool's request rates (GCRA cells, no lock) and refusals |

mod pool;
mod rates;

pub use pool::{DnsSummary, Pool};
pub use rates::RateLimits;

use crate::backend::Backend;
use crate::discovery::{Discovery, Members};
use crate::route::{self, Route, RouteCounters};
use crate::spool::{SpoolQueueStats, Spooler};
use anyhow::Context;
use memfleet_routing::RouterConfig;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Every pool and route of a configuration, ready to run.
#[derive(Default)]
pub struct Topology {
    pools: Vec<Arc<Pool>>,
    routes: HashMap<String, Arc<Route>>,
    counters: HashMap<String, Arc<RouteCounters>>,
    spooler: Option<Arc<Spooler>>,
    /// The configuration it was built from, as read (DNS entries unresolved).
    config: RouterConfig,
    /// Following the pools' DNS entries, when some have any.
    discovery: Option<Arc<Discovery>>,
    /// The members the DNS entries had when it was built.
    members: Members,
}

/// Its pools' names (what a log or a `Debug` of a holder needs).
impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pools: Vec<&str> = self.pools.iter().map(|p| p.name()).collect();
        f.debug_struct("Topology")
            .field("pools", &pools)
            .finish_non_exhaustive()
    }
}

impl Topology {
    /// Builds `config`, reusing from `previous` the server connections that stay, the spool
    /// and the route counters. Must run inside a tokio runtime (connections are tasks).
    /// Pools' DNS entries get the members `previous` knew (none without one): look them up
    /// with [`Topology::build_resolving`], follow them with [`Topology::follow_dns`].
    pub fn build(config: &RouterConfig, previous: Option<&Topology>) -> anyhow::Result<Topology> {
        let discovery = discovery_for(config, previous);
        let members = discovery
            .as_ref()
            .map(|d| d.current(config))
            .unwrap_or_default();
        Topology::assemble(config, discovery, members, previous)
    }

    /// Builds `config` as [`Topology::build`] does, its pools' DNS entries looked up first
    /// (an entry that does not answer keeps the members `previous` knew, or has none).
    pub async fn build_resolving(
        config: &RouterConfig,
        previous: Option<&Topology>,
    ) -> anyhow::Result<Topology> {
        let discovery = discovery_for(config, previous);
        let members = match &discovery {
            Some(d) => d.refresh(config).await,
            None => Members::default(),
        };
        Topology::assemble(config, discovery, members, previous)
    }

    /// Builds `config` with DNS entries answered by `discovery` (tests and tools that bring
    /// their own lookup: [`Discovery::with_lookup`]).
    pub async fn build_with_discovery(
        config: &RouterConfig,
        discovery: Arc<Discovery>,
    ) -> anyhow::Result<Topology> {
        let members = discovery.refresh(config).await;
        Topology::assemble(config, Some(discovery), members, None)
    }

    /// One round of DNS lookups for this topology's DNS entries. `None` when no pool's
    /// members changed (or it has no DNS entries); else the topology that replaces this one
    /// (built with this one as the previous: connections, spool and counters carry over),
    /// or why it could not be built.
    pub async fn follow_dns(&self) -> Option<anyhow::Result<Topology>> {
        let discovery = self.discovery.as_ref()?;
        let members = discovery.refresh(&self.config).await;
        if members == self.members {
            return None;
        }
        Some(Topology::assemble(
            &self.config,
            Some(discovery.clone()),
            members,
            Some(self),
        ))
    }

    /// When [`Topology::follow_dns`] is due next (`None`: no DNS entries to follow).
    pub fn next_dns_round(&self) -> Option<Duration> {
        self.discovery.as_ref().map(|d| d.next_round())
    }

    /// Its DNS discovery, when some pool has DNS entries.
    pub fn discovery(&self) -> Option<&Arc<Discovery>> {
        self.discovery.as_ref()
    }

    /// The configuration it runs, as read.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    fn assemble(
        config: &RouterConfig,
        discovery: Option<Arc<Discovery>>,
        members: Members,
        previous: Option<&Topology>,
    ) -> anyhow::Result<Topology> {
        let empty = Topology::default();
        let previous = previous.unwrap_or(&empty);
        // Deletes a server cannot take wait in a spool unless every pool turned it off:
        // in the configured directory, or in a slot of the state directory.
        let spooler = if !config.pools.iter().any(|p| p.spool_deletes) {
            None
        } else {
            match (&config.spool_dir, &previous.spooler) {
                (Some(dir), Some(s)) if s.dir() == std::path::Path::new(dir) => Some(s.clone()),
                (None, Some(s)) if s.is_default_location() => Some(s.clone()),
                (Some(dir), _) => Some(
                    Spooler::new(std::path::Path::new(dir))
                        .with_context(|| format!("spool directory {dir}"))?,
                ),
                (None, _) => Some(Spooler::in_state_dir().context("the delete spool")?),
            }
        };
        let old_backends: Vec<Arc<Backend>> = previous
            .pools
            .iter()
            .flat_map(|p| p.backends().iter().cloned())
            .collect();
        let pools = config
            .pools
            .iter()
            .map(|c| {
                let found = members.of_pool(c);
                let discovery = discovery.clone().filter(|_| !c.dns.is_empty());
                let workers = config.workers.max(1);
                Pool::new(
                    c.clone(),
                    found,
                    discovery,
                    &old_backends,
                    spooler.as_ref(),
                    workers,
                )
                .map(Arc::new)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let by_name: HashMap<String, Arc<Pool>> = pools
            .iter()
            .map(|p| (p.name().to_string(), p.clone()))
            .collect();
        let mut counters = previous.counters.clone();
        let mut routes = route::build(
            &config.routes,
            &by_name,
            &mut counters,
            config.zone.as_deref(),
        );
        for p in &pools {
            routes.insert(p.name().to_string(), Arc::new(Route::Pool(p.clone())));
        }
        Ok(Topology {
            pools,
            routes,
            counters,
            spooler,
            config: config.clone(),
            discovery,
            members,
        })
    }

    /// The route (or pool) called `name`.
    pub fn route(&self, name: &str) -> Option<Arc<Route>> {
        self.routes.get(name).cloned()
    }

    /// The name of the pool or route `route` is (what a listener serves), if it is one of
    /// this topology's.
    pub fn name_of(&self, route: &Arc<Route>) -> Option<String> {
        if let Route::Pool(pool) = &**route {
            if let Some(p) = self.pools.iter().find(|p| Arc::ptr_eq(p, pool)) {
                return Some(p.name().to_string());
            }
        }
        self.routes
            .iter()
            .find(|(_, r)| Arc::ptr_eq(r, route))
            .map(|(name, _)| name.clone())
    }

    /// Every pool, in configuration order.
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    /// Every counting route's counters, sorted by route name.
    pub fn route_counters(&self) -> Vec<(String, Arc<RouteCounters>)> {
        let mut named: Vec<_> = self
            .counters
            .iter()
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named
    }

    /// Every spool queue's state, sorted by name.
    pub fn spool_stats(&self) -> Vec<SpoolQueueStats> {
        self.spooler.as_ref().map(|s| s.stats()).unwrap_or_default()
    }

    /// The spool directory, when deletes are spooled.
    pub fn spool_dir(&self) -> Option<&std::path::Path> {
        self.spooler.as_ref().map(|s| s.dir())
    }

    /// Every pool's servers (its ring, in order: name, address, whether it is marked down)
    /// and DNS entries (members, lookups, errors, the failure under way, when the members
    /// last changed), as JSON: what the router's admin key `__memfleet__.pools` answers.
    pub fn pools_json(&self) -> serde_json::Value {
        let pools: Vec<serde_json::Value> = self
            .pools
            .iter()
            .map(|p| {
                let servers: Vec<serde_json::Value> = p
                    .members()
                    .iter()
                    .map(|b| {
                        serde_json::json!({
                            "name": b.name(),
                            "addr": b.reachable().then(|| b.addr().to_string()),
                            "down": b.health().down.load(std::sync::atomic::Ordering::Relaxed),
                        })
                    })
                    .collect();
                let dns: Vec<serde_json::Value> = p
                    .dns_stats()
                    .iter()
                    .map(|e| {
                        serde_json::json!({
                            "entry": e.entry.to_string(),
                            "members": e.members,
                            "lookups": e.lookups,
                            "errors": e.errors,
                            "failing": e.failing,
                            "last_change": e.last_change.and_then(|t| {
                                t.duration_since(std::time::UNIX_EPOCH).ok()
                            }).map(|d| d.as_secs()),
                        })
                    })
                    .collect();
                serde_json::json!({ "name": p.name(), "servers": servers, "dns": dns })
            })
            .collect();
        let settings = &self.config.discovery;
        serde_json::json!({
            "pools": pools,
            "resolve_interval_ms": settings.resolve_interval.as_millis() as u64,
            "nameservers": settings.nameservers.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        })
    }

    /// Prometheus text of each pool's member count (`<prefix>_pool_members{pool}`), and for
    /// pools with DNS entries their members found, lookups, errors, failing entries and the
    /// time their members last changed (`<prefix>_dns_*{pool}`): the router's `/metrics`
    /// and the invalidator's (its destinations).
    pub fn prometheus_pools(&self, prefix: &str, text: &mut String) {
        use std::fmt::Write as _;
        let snapshot = self;
        let _ = writeln!(
            text,
            "# HELP {prefix}_pool_members servers in the pool's ring (written and found in DNS)"
        );
        let _ = writeln!(text, "# TYPE {prefix}_pool_members gauge");
        for pool in snapshot.pools() {
            let _ = writeln!(
                text,
                "{prefix}_pool_members{{pool=\"{}\"}} {}",
                pool.name(),
                pool.members().len()
            );
        }
        let limited: Vec<_> = snapshot
            .pools()
            .iter()
            .filter_map(|p| Some((p.name(), p.rates()?.refused())))
            .collect();
        if !limited.is_empty() {
            let _ = writeln!(
                text,
                "# HELP {prefix}_pool_rate_limited_total requests refused over the pool's rates"
            );
            let _ = writeln!(text, "# TYPE {prefix}_pool_rate_limited_total counter");
            for (pool, kinds) in limited {
                for (kind, n) in kinds {
                    let _ = writeln!(
                        text,
                        "{prefix}_pool_rate_limited_total{{pool=\"{pool}\",kind=\"{kind}\"}} {n}"
                    );
                }
            }
        }
        let dns: Vec<_> = snapshot
            .pools()
            .iter()
            .filter_map(|p| Some((p.name(), p.dns_summary()?)))
            .collect();
        if dns.is_empty() {
            return;
        }
        let series: [(&str, &str, &str); 5] = [
            (
                "dns_members",
                "gauge",
                "servers of the pool's ring found through its DNS entries",
            ),
            (
                "dns_lookups_total",
                "counter",
                "DNS questions asked for the pool's entries (SRV targets' addresses included)",
            ),
            (
                "dns_errors_total",
                "counter",
                "DNS rounds that failed, timed out or found nothing (the last good members were kept), and SRV targets without an address",
            ),
            (
                "dns_failing",
                "gauge",
                "DNS entries of the pool whose last lookup failed",
            ),
            (
                "dns_last_change_seconds",
                "gauge",
                "when the pool's DNS members last changed (Unix time; 0: never found)",
            ),
        ];
        for (name, kind, help) in series {
            let _ = writeln!(text, "# HELP {prefix}_{name} {help}");
            let _ = writeln!(text, "# TYPE {prefix}_{name} {kind}");
            for (pool, dns) in &dns {
                let v = match name {
                    "dns_members" => dns.members as u64,
                    "dns_lookups_total" => dns.lookups,
                    "dns_errors_total" => dns.errors,
                    "dns_failing" => dns.failing as u64,
                    _ => dns.last_change_unix(),
                };
                let _ = writeln!(text, "{prefix}_{name}{{pool=\"{pool}\"}} {v}");
            }
        }
    }

    /// `STAT` lines of the route counters and spool depths.
    pub fn stat_lines(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (route, counters) in self.route_counters() {
            for (name, _) in counters.shown() {
                let v = counters.get(name);
                out.extend_from_slice(format!("STAT route:{route}:{name} {v}\r\n").as_bytes());
            }
        }
        for q in self.spool_stats() {
            let name = &q.name;
            out.extend_from_slice(format!("STAT spool:{name} {}\r\n", q.depth).as_bytes());
            let age = q.oldest.map_or(0, |a| a.as_millis());
            out.extend_from_slice(format!("STAT spool_oldest_ms:{name} {age}\r\n").as_bytes());
            out.extend_from_slice(
                format!("STAT spool_delivered:{name} {}\r\n", q.delivered).as_bytes(),
            );
        }
        out
    }
}

/// The discovery a build of `config` uses: `previous`'s (for `config`'s settings), or a new
/// one; none when `config` has no DNS entries.
fn discovery_for(config: &RouterConfig, previous: Option<&Topology>) -> Option<Arc<Discovery>> {
    if !config.has_dns() {
        return None;
    }
    Some(match previous.and_then(|p| p.discovery.as_ref()) {
        Some(d) => d.renewed(&config.discovery),
        None => Discovery::new(&config.discovery),
    })
}
