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

use crate::backend::{health_epoch, Backend, BackendAuth, BackendOptions, BackendTls};
use crate::route::{self, Route, RouteCounters};
use crate::spool::{SpoolQueue, SpoolQueueStats, Spooler};
use anyhow::Context;
use memfleet_routing::{PasswordSource, PoolAuth, PoolConfig, Ring, RouterConfig};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A pool: its ring and its servers' connections.
pub struct Pool {
    config: PoolConfig,
    ring: Ring,
    backends: Vec<Arc<Backend>>,
    /// Each backend's delete spool queue, in ring order; empty when the pool does not spool.
    spool_queues: Vec<Arc<SpoolQueue>>,
    /// The spooler of those queues.
    spooler: Option<Arc<Spooler>>,
    /// With `auto_eject_hosts`: the ring without the servers marked down.
    live: Option<LiveRing>,
}

/// An ejecting pool's live ring, current as of a [`health_epoch`].
struct LiveRing {
    current: arc_swap::ArcSwap<LiveSnapshot>,
    /// Held while rebuilding (one rebuild per change, not one per thread).
    rebuild: Mutex<()>,
}

/// The servers down at one [`health_epoch`], and the ring without them.
struct LiveSnapshot {
    epoch: u64,
    /// Indexes of the ejected servers, ascending.
    ejected: Vec<usize>,
    /// `None`: the pool's full ring (no server down, or every one: then all fail fast).
    ring: Option<Ring>,
}

impl LiveRing {
    fn new(ring: &Ring, backends: &[Arc<Backend>], name: &str) -> LiveRing {
        let live = LiveRing {
            current: arc_swap::ArcSwap::from_pointee(LiveSnapshot {
                epoch: u64::MAX,
                ejected: Vec::new(),
                ring: None,
            }),
            rebuild: Mutex::new(()),
        };
        live.refresh(ring, backends, name);
        live
    }

    /// The live ring, rebuilt first if a server went down or came back since it was built.
    fn current(
        &self,
        ring: &Ring,
        backends: &[Arc<Backend>],
        name: &str,
    ) -> arc_swap::Guard<Arc<LiveSnapshot>> {
        let live = self.current.load();
        if live.epoch == health_epoch() {
            return live;
        }
        drop(live);
        self.refresh(ring, backends, name);
        self.current.load()
    }

    fn refresh(&self, ring: &Ring, backends: &[Arc<Backend>], name: &str) {
        let _one = self.rebuild.lock().unwrap_or_else(|e| e.into_inner());
        // Read before the down flags: a change after this read rebuilds again.
        let epoch = health_epoch();
        let old = self.current.load();
        if old.epoch == epoch {
            return; // another thread rebuilt it meanwhile
        }
        let ejected: Vec<usize> = (0..backends.len())
            .filter(|&i| backends[i].health().down.load(Ordering::Acquire))
            .collect();
        let ring = if ejected == old.ejected {
            old.ring.clone()
        } else {
            tracing::info!(
                pool = name,
                ejected = ejected.len(),
                servers = backends.len(),
                "servers ejected or back: keys rehashed over the live ones"
            );
            if ejected.is_empty() {
                None
            } else {
                ring.without(&ejected)
            }
        };
        self.current.store(Arc::new(LiveSnapshot {
            epoch,
            ejected,
            ring,
        }));
    }
}

impl Pool {
    /// Resolves the servers and prepares their connections (made on first use), reusing
    /// those of `previous` (any pool's) for servers that stay with the same settings (a
    /// reload keeps their connections, counters and health). Undeliverable deletes go to
    /// `spooler` when the pool spools deletes (opening a queue resumes the replay of what an
    /// earlier run, or a server a reload brought back, left in it).
    fn new(
        config: PoolConfig,
        previous: &[Arc<Backend>],
        spooler: Option<&Arc<Spooler>>,
    ) -> anyhow::Result<Pool> {
        let ring = config.ring()?;
        let options = BackendOptions {
            connections: config.server_connections as usize,
            timeout: Duration::from_millis(config.timeout_ms.max(1)),
            // Down after this many failures in every pool (fail fast, probed back); only an
            // ejecting pool moves the keys meanwhile.
            failure_limit: config.server_failure_limit,
            retry: Duration::from_millis(config.server_retry_timeout_ms.max(10)),
            eject: config.auto_eject_hosts,
            tls: None,
            auth: config
                .auth
                .as_ref()
                .map(login)
                .transpose()
                .with_context(|| format!("pool {}: authentication", config.name))?,
        };
        // The pool's TLS configuration, read once: a file that does not load fails the
        // build (and so refuses a reload).
        let tls = match &config.tls {
            Some(t) => {
                let files = memfleet_tls::ClientTlsFiles {
                    ca: t.ca.clone().into(),
                    cert: t.cert.clone().map(Into::into),
                    key: t.key.clone().map(Into::into),
                };
                let client = memfleet_tls::client_config(&files)
                    .with_context(|| format!("pool {}: TLS", config.name))?;
                Some((files, Arc::new(client)))
            }
            None => None,
        };
        let backends = ring
            .nodes()
            .iter()
            .map(|n| {
                let addr = std::net::ToSocketAddrs::to_socket_addrs(&(n.host.as_str(), n.port))
                    .ok()
                    .and_then(|mut a| a.next())
                    .with_context(|| {
                        format!("pool {}: cannot resolve {}", config.name, n.addr())
                    })?;
                let mut options = options.clone();
                if let Some((files, client)) = &tls {
                    let name = config.tls.as_ref().and_then(|t| t.server_name.as_deref());
                    let name = memfleet_tls::server_name(name.unwrap_or(&n.host))
                        .with_context(|| format!("pool {}: TLS", config.name))?;
                    options.tls = Some(BackendTls::new(files.clone(), client.clone(), name));
                }
                let kept = previous
                    .iter()
                    .find(|b| b.addr() == addr && b.options() == &options);
                Ok(match kept {
                    Some(b) => b.clone(),
                    None => Backend::new(addr, n.addr(), options),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let spooler = spooler.filter(|_| config.spool_deletes).cloned();
        let spool_queues = match &spooler {
            Some(spooler) => backends
                .iter()
                .map(|b| spooler.queue(&config.name, b))
                .collect(),
            None => Vec::new(),
        };
        let live = config
            .auto_eject_hosts
            .then(|| LiveRing::new(&ring, &backends, &config.name));
        Ok(Pool {
            config,
            ring,
            backends,
            spool_queues,
            spooler,
            live,
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Its ring, every server in it (where keys go while every server is up).
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The index (in [`Pool::backends`] and the ring's nodes) of the server that holds
    /// `key` now: its ring's pick, or with `auto_eject_hosts` the live ring's, which leaves
    /// out the servers marked down (an atomic load and an `ArcSwap` load more than the
    /// ring's pick, until a server goes down or comes back and the live ring is rebuilt).
    pub fn pick(&self, key: &[u8]) -> usize {
        match &self.live {
            None => self.ring.pick(key),
            Some(live) => {
                let live = live.current(&self.ring, &self.backends, &self.config.name);
                live.ring.as_ref().unwrap_or(&self.ring).pick(key)
            }
        }
    }

    /// Whether deletes its servers cannot take wait in a spool.
    pub fn spools_deletes(&self) -> bool {
        !self.spool_queues.is_empty()
    }

    /// Whether some spool queue may hold deletes: then reads must check their server's
    /// queue ([`SpoolQueue::holds_reads`]) before going to it. One load.
    pub fn replaying(&self) -> bool {
        self.spooler.as_ref().is_some_and(|s| s.busy())
    }

    /// The server that holds `key`, and its delete spool queue if the pool spools.
    pub fn server_for(&self, key: &[u8]) -> (Arc<Backend>, Option<Arc<SpoolQueue>>) {
        let i = self.pick(key);
        (self.backends[i].clone(), self.spool_queues.get(i).cloned())
    }

    /// The spool queue of `key`'s own server when `auto_eject_hosts` has taken that server
    /// out of the ring (it may still hold the key when it comes back); `None` otherwise.
    pub fn ejected_home_queue(&self, key: &[u8]) -> Option<Arc<SpoolQueue>> {
        self.live.as_ref()?;
        let home = self.ring.pick(key);
        self.backends[home]
            .health()
            .down
            .load(Ordering::Acquire)
            .then(|| self.spool_queues.get(home).cloned())
            .flatten()
    }

    /// The server that holds `key`.
    pub fn backend_for(&self, key: &[u8]) -> Arc<Backend> {
        self.backends[self.pick(key)].clone()
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Its servers, in ring order.
    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// `stats` lines: this pool's server count and each server's counters, one value per line.
    pub fn stat_lines(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut stat = |name: &str, value: String| {
            out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
        };
        // One value per line (clients such as pymemcache keep only a line's first value),
        // each named by its pool so that several pools' lines never share a name.
        let pool = &self.config.name;
        stat(
            &format!("pool:{pool}:servers"),
            self.backends.len().to_string(),
        );
        for b in &self.backends {
            let h = b.health();
            let name = b.name();
            for (field, value) in [
                ("requests", h.requests.load(Ordering::Relaxed)),
                ("errors", h.errors.load(Ordering::Relaxed)),
                ("down", u64::from(h.down.load(Ordering::Relaxed))),
                ("knockouts", h.knockouts.load(Ordering::Relaxed)),
            ] {
                stat(
                    &format!("pool:{pool}:server:{name}:{field}"),
                    value.to_string(),
                );
            }
        }
        out
    }
}

/// The pool's login, its password read now (a file that cannot be read fails the build,
/// and so refuses a reload; a reload that finds a new password makes new connections).
fn login(auth: &PoolAuth) -> anyhow::Result<BackendAuth> {
    let password = match &auth.password {
        PasswordSource::Inline(p) => p.clone().into_bytes(),
        PasswordSource::File(path) => {
            let mut text =
                std::fs::read(path).with_context(|| format!("reading the password file {path}"))?;
            // An editor's final line break is not part of the password.
            if text.ends_with(b"\n") {
                text.pop();
                if text.ends_with(b"\r") {
                    text.pop();
                }
            }
            text
        }
    };
    Ok(BackendAuth::new(&auth.user, &password)?)
}

/// Every pool and route of a configuration, ready to run.
#[derive(Default)]
pub struct Topology {
    pools: Vec<Arc<Pool>>,
    routes: HashMap<String, Arc<Route>>,
    counters: HashMap<String, Arc<RouteCounters>>,
    spooler: Option<Arc<Spooler>>,
}

impl Topology {
    /// Builds `config`, reusing from `previous` the server connections that stay, the spool
    /// and the route counters. Must run inside a tokio runtime (connections are tasks).
    pub fn build(config: &RouterConfig, previous: Option<&Topology>) -> anyhow::Result<Topology> {
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
            .flat_map(|p| p.backends.iter().cloned())
            .collect();
        let pools = config
            .pools
            .iter()
            .map(|c| Pool::new(c.clone(), &old_backends, spooler.as_ref()).map(Arc::new))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let by_name: HashMap<String, Arc<Pool>> = pools
            .iter()
            .map(|p| (p.name().to_string(), p.clone()))
            .collect();
        let mut counters = previous.counters.clone();
        let mut routes = route::build(&config.routes, &by_name, &mut counters);
        for p in &pools {
            routes.insert(p.name().to_string(), Arc::new(Route::Pool(p.clone())));
        }
        Ok(Topology {
            pools,
            routes,
            counters,
            spooler,
        })
    }

    /// The route (or pool) called `name`.
    pub fn route(&self, name: &str) -> Option<Arc<Route>> {
        self.routes.get(name).cloned()
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
