//! [`Pool`]: one pool's ring over its servers (those written as `host:port`, then the members
//! its DNS entries found), their connections and delete spool queues, and its `stats` lines.

use super::rates::RateLimits;
use crate::backend::{health_epoch, Backend, BackendAuth, BackendOptions, BackendTls, DownBudget};
use crate::discovery::{Discovery, EntryStats, Member};
use crate::spool::{SpoolQueue, Spooler};
use anyhow::Context;
use memfleet_routing::{Node, PasswordSource, PoolAuth, PoolConfig, Ring};
use std::net::SocketAddr;
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
    /// Whether the ring holds only the stand-in of a pool without servers (DNS entries
    /// that found no member yet): every request fails.
    no_members: bool,
    /// Following its DNS entries, when it has some.
    discovery: Option<Arc<Discovery>>,
    /// How many of its servers its DNS entries found.
    found: usize,
    /// Its request rates, when it has some.
    rates: Option<RateLimits>,
    /// Its cap on servers marked down at once.
    down_budget: Arc<DownBudget>,
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
    /// Resolves the servers written as `host:port`, places them and the `members` its DNS
    /// entries found (sorted by name, after them) on the ring, and prepares their
    /// connections (made on first use), reusing those of `previous` (any pool's) for
    /// servers that stay at the same address with the same settings (a reload keeps their
    /// connections, counters and health). Undeliverable deletes go to `spooler` when the
    /// pool spools deletes (opening a queue resumes the replay of what an earlier run, or a
    /// server a reload brought back, left in it). Each server gets `server_connections`
    /// connections per one of the router's `workers`.
    pub(super) fn new(
        config: PoolConfig,
        members: Vec<Member>,
        discovery: Option<Arc<Discovery>>,
        previous: &[Arc<Backend>],
        spooler: Option<&Arc<Spooler>>,
        workers: usize,
    ) -> anyhow::Result<Pool> {
        let options = BackendOptions {
            // Per worker thread of the router (`RouterConfig::workers`).
            connections: config.server_connections as usize * workers,
            timeout: Duration::from_millis(config.timeout_ms.max(1)),
            // Down after this many failures in every pool (fail fast, probed back); only an
            // ejecting pool moves the keys meanwhile.
            failure_limit: config.server_failure_limit,
            retry: Duration::from_millis(config.server_retry_timeout_ms.max(10)),
            eject: config.auto_eject_hosts,
            outstanding: config
                .max_outstanding
                .map(|m| crate::outstanding::OutstandingLimit {
                    limit: m.limit as usize,
                    queue: m.queue as usize,
                }),
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
        let mut placed: Vec<(Node, Option<SocketAddr>)> = config
            .servers
            .iter()
            .map(|n| {
                let addr = std::net::ToSocketAddrs::to_socket_addrs(&(n.host.as_str(), n.port))
                    .ok()
                    .and_then(|mut a| a.next())
                    .with_context(|| {
                        format!("pool {}: cannot resolve {}", config.name, n.addr())
                    })?;
                Ok((n.clone(), Some(addr)))
            })
            .collect::<anyhow::Result<_>>()?;
        let written = placed.len();
        for m in members {
            if placed.iter().any(|(n, _)| n.addr() == m.node.addr()) {
                tracing::warn!(pool = %config.name, member = %m.node.addr(), "a DNS member is also a written server: placed once");
                continue;
            }
            placed.push((m.node, m.addr));
        }
        let found = placed.len() - written;
        let no_members = placed.is_empty();
        if no_members {
            placed.push((Node::new("(no members)", 0), None));
        }
        let ring = config.ring_of(placed.iter().map(|(n, _)| n.clone()).collect())?;
        let backends = placed
            .iter()
            .map(|(n, addr)| {
                let mut options = options.clone();
                let Some(addr) = *addr else {
                    return Ok(Backend::unavailable(n.addr(), options));
                };
                if let Some((files, client)) = &tls {
                    let name = config.tls.as_ref().and_then(|t| t.server_name.as_deref());
                    let host = n.host.trim_start_matches('[').trim_end_matches(']');
                    let name = memfleet_tls::server_name(name.unwrap_or(host))
                        .with_context(|| format!("pool {}: TLS", config.name))?;
                    options.tls = Some(BackendTls::new(files.clone(), client.clone(), name));
                }
                let kept = previous
                    .iter()
                    .find(|b| b.addr() == addr && b.name() == n.addr() && b.options() == &options);
                Ok(match kept {
                    Some(b) => b.clone(),
                    None => Backend::new(addr, n.addr(), options),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        // At most max_down_fraction of the servers down at once (at least one may be).
        let max_down =
            ((backends.len() as f64 * config.max_down_fraction.0).floor() as usize).max(1);
        let down_now = backends
            .iter()
            .filter(|b| b.health().down.load(Ordering::Acquire))
            .count();
        let down_budget = DownBudget::new(max_down, down_now);
        for b in &backends {
            b.set_down_budget(down_budget.clone());
        }
        let spooler = spooler
            .filter(|_| config.spool_deletes && !no_members)
            .cloned();
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
            ring,
            backends,
            spool_queues,
            spooler,
            live,
            no_members,
            discovery,
            found,
            rates: RateLimits::new(&config.name, &config.rates),
            down_budget,
            config,
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Its request rates, when it has some (`rates`).
    pub fn rates(&self) -> Option<&RateLimits> {
        self.rates.as_ref()
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

    /// Its servers and members, in ring order (none while a pool of DNS entries has found
    /// no member yet).
    pub fn members(&self) -> &[Arc<Backend>] {
        if self.no_members {
            &[]
        } else {
            &self.backends
        }
    }

    /// The figures of its DNS entries (none without any).
    pub fn dns_stats(&self) -> Vec<EntryStats> {
        match &self.discovery {
            Some(d) => self.config.dns.iter().map(|e| d.stats(e)).collect(),
            None => Vec::new(),
        }
    }

    /// Its DNS entries' figures summed up (`None` without DNS entries).
    pub fn dns_summary(&self) -> Option<DnsSummary> {
        let entries = self.dns_stats();
        self.discovery.as_ref()?;
        Some(DnsSummary {
            members: self.found,
            lookups: entries.iter().map(|e| e.lookups).sum(),
            errors: entries.iter().map(|e| e.errors).sum(),
            failing: entries.iter().filter(|e| e.failing.is_some()).count(),
            last_change: entries.iter().filter_map(|e| e.last_change).max(),
        })
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
            self.members().len().to_string(),
        );
        if let Some(dns) = self.dns_summary() {
            for (field, value) in [
                ("dns_members", dns.members as u64),
                ("dns_lookups", dns.lookups),
                ("dns_errors", dns.errors),
                ("dns_failing", dns.failing as u64),
                ("dns_last_change", dns.last_change_unix()),
            ] {
                stat(&format!("pool:{pool}:{field}"), value.to_string());
            }
        }
        stat(
            &format!("pool:{pool}:down_refused"),
            self.down_budget.refused.load(Ordering::Relaxed).to_string(),
        );
        for (kind, refused) in self.rates.iter().flat_map(RateLimits::refused) {
            stat(
                &format!("pool:{pool}:rate_limited_{kind}"),
                refused.to_string(),
            );
        }
        for b in self.members() {
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
            if let Some((now, waited, refused)) = b.outstanding() {
                for (field, value) in [
                    ("outstanding", now),
                    ("outstanding_waited", waited),
                    ("outstanding_refused", refused),
                ] {
                    stat(
                        &format!("pool:{pool}:server:{name}:{field}"),
                        value.to_string(),
                    );
                }
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
    if auth.sasl {
        return Ok(BackendAuth::sasl(&auth.user, &password));
    }
    Ok(BackendAuth::new(&auth.user, &password)?)
}

/// A pool's DNS entries' figures summed up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsSummary {
    /// Servers of the ring its DNS entries found.
    pub members: usize,
    /// DNS questions asked (SRV targets' address lookups included).
    pub lookups: u64,
    /// Rounds that failed or found nothing (the last good members kept), and SRV targets
    /// without an address.
    pub errors: u64,
    /// Entries whose last lookup failed.
    pub failing: usize,
    /// When its members last changed.
    pub last_change: Option<std::time::SystemTime>,
}

impl DnsSummary {
    /// [`DnsSummary::last_change`] in seconds since the Unix epoch (0: never).
    pub fn last_change_unix(&self) -> u64 {
        self.last_change
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs())
    }
}
