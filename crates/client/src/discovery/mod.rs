//! Pools that follow DNS: the members of every `dns+NAME:PORT` and `dnssrv+NAME` entry
//! (`memfleet_routing::DnsEntry`), looked up again and again, the last good answer kept.
//!
//! One [`Discovery`] serves a whole configuration (every pool's entries, each looked up once
//! per round however many pools name it) and outlives reloads: a [`crate::Topology`] holds
//! it, and the next topology takes it over, with its last good answers and its counters. The
//! topology code decides when to ask ([`crate::Topology::follow_dns`]); the router, the client
//! library and the invalidator all follow DNS through it.
//!
//! - A member of a `dnssrv+` entry is its SRV target, keyed on the target's name (a
//!   StatefulSet pod's stable DNS name), at the SRV port: a member whose address changes keeps
//!   its place in the ring, and every key. Its address comes from the answer's additional
//!   section or an A/AAAA lookup of the target; a target whose address cannot be found stays a
//!   member, unreachable (its keys fail over to a gutter, none move), with its last known
//!   address if it had one.
//! - A member of a `dns+` entry is an address (A records name nothing more stable).
//! - A failed, timed-out or empty answer keeps the last good members (logged once per failure
//!   streak, counted); an entry that never answered has no members, and a pool without any
//!   member fails its requests (other pools are not held back).
//! - Each round comes [`DiscoverySettings::resolve_interval`] after the last, sooner when an
//!   answer's TTL is shorter (at most one round a second, unless the interval is shorter).

mod lookup;

pub use lookup::{Answer, HickoryLookup, Lookup, LookupError, SrvTarget};

use futures_util::future::join_all;
use memfleet_routing::{DiscoverySettings, DnsEntry, Node, PoolConfig, RouterConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// A member DNS found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Where the ring places it: the SRV target's name (or the address, for `dns+`) and the
    /// port; weight 1.
    pub node: Node,
    /// Where it is now; `None` while its address is unknown (it is a member all the same).
    pub addr: Option<SocketAddr>,
}

/// The members every entry has now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members(BTreeMap<DnsEntry, Vec<Member>>);

impl Members {
    /// The members of `pool`'s DNS entries, sorted by `host:port`, each once.
    pub fn of_pool(&self, pool: &PoolConfig) -> Vec<Member> {
        let mut members: Vec<Member> = pool
            .dns
            .iter()
            .filter_map(|e| self.0.get(e))
            .flatten()
            .cloned()
            .collect();
        members.sort_by_key(|m| m.node.addr());
        members.dedup_by_key(|m| m.node.addr());
        members
    }
}

/// What one entry has found and been through.
#[derive(Default)]
struct EntryState {
    /// The last good answer's members (`None`: never answered).
    members: Option<Vec<Member>>,
    /// The last good answer's TTL.
    ttl: Option<Duration>,
    lookups: u64,
    errors: u64,
    last_change: Option<SystemTime>,
    /// The error of the failure streak under way, if one is.
    failing: Option<String>,
}

/// One entry's figures, for `stats`, `/metrics` and `__memfleet__.pools`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryStats {
    /// The entry.
    pub entry: DnsEntry,
    /// Its members now (`None`: it never answered).
    pub members: Option<usize>,
    /// Lookups so far (a round's question about the entry; an SRV target's address
    /// lookup is part of it).
    pub lookups: u64,
    /// Rounds that failed or found nothing, and targets whose address could not be found.
    pub errors: u64,
    /// When its members last changed (the first answer counts).
    pub last_change: Option<SystemTime>,
    /// The error of the failure streak under way, if one is.
    pub failing: Option<String>,
}

/// Follows the DNS entries of a configuration; see the module docs.
pub struct Discovery {
    settings: DiscoverySettings,
    lookup: Result<Arc<dyn Lookup>, String>,
    entries: Mutex<BTreeMap<DnsEntry, EntryState>>,
    /// When the next round is due, as the last one computed it.
    next: Mutex<Duration>,
}

/// The longest a question may take, for a `resolve_interval`: half of it, between 100 ms
/// and 2 s per try (two tries).
fn question_timeout(interval: Duration) -> Duration {
    (interval / 2).clamp(Duration::from_millis(100), Duration::from_secs(2))
}

impl Discovery {
    /// Discovery with the hickory resolver (the system's nameservers, or
    /// `settings.nameservers`). A resolver that cannot be built (no `/etc/resolv.conf`)
    /// fails every lookup with the reason, so pools without DNS entries still run.
    pub fn new(settings: &DiscoverySettings) -> Arc<Discovery> {
        let timeout = question_timeout(settings.resolve_interval);
        let lookup = HickoryLookup::new(&settings.nameservers, timeout)
            .map(|l| Arc::new(l) as Arc<dyn Lookup>);
        if let Err(e) = &lookup {
            tracing::error!(error = %e, "DNS discovery has no resolver: DNS entries find no members");
        }
        Discovery::with(settings, lookup)
    }

    /// Discovery asking `lookup` (tests: answers without a nameserver).
    pub fn with_lookup(settings: &DiscoverySettings, lookup: Arc<dyn Lookup>) -> Arc<Discovery> {
        Discovery::with(settings, Ok(lookup))
    }

    fn with(
        settings: &DiscoverySettings,
        lookup: Result<Arc<dyn Lookup>, String>,
    ) -> Arc<Discovery> {
        Arc::new(Discovery {
            settings: settings.clone(),
            lookup,
            entries: Mutex::new(BTreeMap::new()),
            next: Mutex::new(settings.resolve_interval),
        })
    }

    /// This discovery for `settings`: itself when they are its own; else a new one asking
    /// the new nameservers that keeps every entry's last good members and counters.
    pub fn renewed(self: &Arc<Self>, settings: &DiscoverySettings) -> Arc<Discovery> {
        if &self.settings == settings {
            return self.clone();
        }
        let renewed = Discovery::new(settings);
        let mut taken = self.lock();
        *renewed.lock() = std::mem::take(&mut *taken);
        renewed
    }

    /// Its settings.
    pub fn settings(&self) -> &DiscoverySettings {
        &self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<DnsEntry, EntryState>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long until the next round is due.
    pub fn next_round(&self) -> Duration {
        *self.next.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The members every DNS entry of `config` has now, without asking.
    pub fn current(&self, config: &RouterConfig) -> Members {
        let entries = self.lock();
        Members(
            entries_of(config)
                .into_iter()
                .filter_map(|e| {
                    let members = entries.get(&e)?.members.clone()?;
                    Some((e, members))
                })
                .collect(),
        )
    }

    /// One round: looks every DNS entry of `config` up (all at once), keeps what answered
    /// and the last good members of what did not, and returns the members every entry has
    /// now. Entries `config` no longer names are forgotten.
    pub async fn refresh(&self, config: &RouterConfig) -> Members {
        let wanted = entries_of(config);
        let previous: Vec<Option<Vec<Member>>> = {
            let entries = self.lock();
            wanted
                .iter()
                .map(|e| entries.get(e).and_then(|s| s.members.clone()))
                .collect()
        };
        let answers = join_all(
            wanted
                .iter()
                .zip(&previous)
                .map(|(e, before)| self.resolve(e, before.as_deref().unwrap_or(&[]))),
        )
        .await;
        let mut entries = self.lock();
        entries.retain(|e, _| wanted.contains(e));
        let mut shortest_ttl: Option<Duration> = None;
        for (entry, answer) in wanted.iter().zip(answers) {
            let state = entries.entry(entry.clone()).or_default();
            state.lookups += answer.lookups;
            state.errors += answer.target_errors;
            match answer.members {
                Ok((members, ttl)) => {
                    shortest_ttl = Some(shortest_ttl.map_or(ttl, |t| t.min(ttl)));
                    if let Some(was) = state.failing.take() {
                        tracing::info!(%entry, members = members.len(), after = %was, "DNS answers again");
                    }
                    if state.members.as_ref() != Some(&members) {
                        log_change(entry, state.members.as_deref().unwrap_or(&[]), &members);
                        state.last_change = Some(SystemTime::now());
                        state.members = Some(members);
                    }
                    state.ttl = Some(ttl);
                }
                Err(e) => {
                    state.errors += 1;
                    let why = e.to_string();
                    if state.failing.as_deref() != Some(&why) {
                        tracing::warn!(
                            %entry,
                            error = %why,
                            kept = state.members.as_ref().map_or(0, Vec::len),
                            "DNS lookup found no members: keeping the last good ones"
                        );
                    }
                    state.failing = Some(why);
                }
            }
        }
        let interval = self.settings.resolve_interval;
        // A short TTL brings the next round forward, at most to once a second.
        let next = shortest_ttl.map_or(interval, |ttl| {
            interval.min(ttl.max(Duration::from_secs(1)))
        });
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = next;
        drop(entries);
        self.current(config)
    }

    /// The figures of `entry`.
    pub fn stats(&self, entry: &DnsEntry) -> EntryStats {
        let entries = self.lock();
        let state = entries.get(entry);
        EntryStats {
            entry: entry.clone(),
            members: state.and_then(|s| s.members.as_ref().map(Vec::len)),
            lookups: state.map_or(0, |s| s.lookups),
            errors: state.map_or(0, |s| s.errors),
            last_change: state.and_then(|s| s.last_change),
            failing: state.and_then(|s| s.failing.clone()),
        }
    }

    /// Looks `entry` up; `before` is its last good members (an SRV target whose address
    /// cannot be found keeps the address it had there).
    async fn resolve(&self, entry: &DnsEntry, before: &[Member]) -> Resolved {
        let lookup = match &self.lookup {
            Ok(l) => l.clone(),
            Err(e) => return Resolved::failed(LookupError::Failed(e.clone())),
        };
        // The resolver's own timeouts bound a question; this bounds a stuck one.
        let limit = question_timeout(self.settings.resolve_interval) * 3;
        match entry {
            DnsEntry::Addresses { name, port } => {
                let answer = bounded(limit, lookup.ips(name)).await;
                let members = answer.map(|a| {
                    let mut members: Vec<Member> = a
                        .records
                        .iter()
                        .map(|ip| Member {
                            node: Node::new(&host_of(*ip), *port),
                            addr: Some(SocketAddr::new(*ip, *port)),
                        })
                        .collect();
                    members.sort_by_key(|m| m.node.addr());
                    members.dedup_by_key(|m| m.node.addr());
                    (members, a.ttl)
                });
                Resolved {
                    members,
                    lookups: 1,
                    target_errors: 0,
                }
            }
            DnsEntry::Srv { name } => {
                let answer = match bounded(limit, lookup.srv(name)).await {
                    Ok(a) => a,
                    Err(e) => return Resolved::failed(e),
                };
                // Targets the answer gave no address for are looked up, all at once.
                let found = join_all(answer.records.iter().map(|t| {
                    let lookup = lookup.clone();
                    async move {
                        if t.addrs.is_empty() {
                            Some(
                                bounded(limit, lookup.ips(&t.target))
                                    .await
                                    .map(|a| a.records),
                            )
                        } else {
                            None
                        }
                    }
                }))
                .await;
                let mut resolved = Resolved {
                    members: Ok((Vec::new(), answer.ttl)),
                    lookups: 1,
                    target_errors: 0,
                };
                let mut members = Vec::new();
                for (target, looked_up) in answer.records.iter().zip(found) {
                    let node = Node::new(&target.target, target.port);
                    let mut addrs = match looked_up {
                        None => target.addrs.clone(),
                        Some(result) => {
                            resolved.lookups += 1;
                            result.unwrap_or_else(|e| {
                                resolved.target_errors += 1;
                                tracing::debug!(target = %node.addr(), error = %e, "SRV target without an address");
                                Vec::new()
                            })
                        }
                    };
                    // One address per member, the same one every round.
                    addrs.sort();
                    let addr = addrs
                        .first()
                        .map(|ip| SocketAddr::new(*ip, target.port))
                        .or_else(|| before.iter().find(|m| m.node == node)?.addr);
                    members.push(Member { node, addr });
                }
                members.sort_by_key(|m| m.node.addr());
                members.dedup_by_key(|m| m.node.addr());
                resolved.members = Ok((members, answer.ttl));
                resolved
            }
        }
    }
}

/// `question`, given at most `limit`.
async fn bounded<T>(
    limit: Duration,
    question: futures_util::future::BoxFuture<'_, Result<T, LookupError>>,
) -> Result<T, LookupError> {
    tokio::time::timeout(limit, question)
        .await
        .unwrap_or_else(|_| Err(LookupError::Failed("timed out".into())))
}

/// One entry's round.
struct Resolved {
    members: Result<(Vec<Member>, Duration), LookupError>,
    lookups: u64,
    target_errors: u64,
}

impl Resolved {
    fn failed(e: LookupError) -> Resolved {
        Resolved {
            members: Err(e),
            lookups: 1,
            target_errors: 0,
        }
    }
}

/// Every DNS entry of `config`, each once.
fn entries_of(config: &RouterConfig) -> Vec<DnsEntry> {
    let set: BTreeSet<&DnsEntry> = config.pools.iter().flat_map(|p| &p.dns).collect();
    set.into_iter().cloned().collect()
}

/// How an address is written as a member's host: IPv6 in brackets, so `host:port` reads
/// as one.
fn host_of(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

fn log_change(entry: &DnsEntry, before: &[Member], after: &[Member]) {
    let show = |m: &Member| match m.addr {
        Some(a) if a.to_string() != m.node.addr() => format!("{}={a}", m.node.addr()),
        Some(_) => m.node.addr(),
        None => format!("{}=?", m.node.addr()),
    };
    let added: Vec<String> = after
        .iter()
        .filter(|m| !before.contains(m))
        .map(show)
        .collect();
    let removed: Vec<String> = before
        .iter()
        .filter(|m| !after.contains(m))
        .map(show)
        .collect();
    tracing::info!(
        %entry,
        members = after.len(),
        added = %added.join(" "),
        removed = %removed.join(" "),
        "DNS members changed"
    );
}

#[cfg(test)]
mod tests;
