//! The DNS questions discovery asks, behind a small trait ([`Lookup`]) so that the resolver
//! crate (hickory, pre-1.0, whose API changes every minor release) stays in this one file,
//! and tests can answer without a nameserver.

use futures_util::future::BoxFuture;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::{Resolver, TokioResolver};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// An answer's records and the smallest TTL among them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer<T> {
    /// The records.
    pub records: Vec<T>,
    /// The smallest TTL of the records (how long the answer may be trusted).
    pub ttl: Duration,
}

/// One SRV record's target: a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrvTarget {
    /// The target's name, lower case, without the final dot.
    pub target: String,
    /// The port.
    pub port: u16,
    /// The target's addresses the answer carried in its additional section (none: look
    /// the target up).
    pub addrs: Vec<IpAddr>,
}

/// Why a lookup found nothing to use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The name does not exist, or has no records of the type asked (NXDOMAIN, or NOERROR
    /// with no answers).
    #[error("no records")]
    Empty,
    /// No usable answer: a timeout, a refusal (SERVFAIL, REFUSED), an I/O error.
    #[error("{0}")]
    Failed(String),
}

/// The two questions discovery asks.
pub trait Lookup: Send + Sync {
    /// Every A and AAAA address of `name`.
    fn ips<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Answer<IpAddr>, LookupError>>;
    /// Every SRV record of `name`.
    fn srv<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Answer<SrvTarget>, LookupError>>;
}

/// The resolver of the hickory project, asking the system's nameservers (with its search
/// domains and options, `/etc/resolv.conf`) or the given ones, afresh each time (its cache
/// is emptied before every question: discovery decides how long an answer is kept).
pub struct HickoryLookup {
    resolver: TokioResolver,
}

impl HickoryLookup {
    /// A resolver asking `nameservers` (UDP, then TCP for truncated answers), or the
    /// system's when empty. A question gets `timeout` per try, two tries.
    pub fn new(nameservers: &[SocketAddr], timeout: Duration) -> Result<HickoryLookup, String> {
        let mut builder = if nameservers.is_empty() {
            Resolver::builder_tokio().map_err(|e| format!("the system's DNS settings: {e}"))?
        } else {
            let servers = nameservers
                .iter()
                .map(|addr| {
                    let mut server = NameServerConfig::udp_and_tcp(addr.ip());
                    for connection in &mut server.connections {
                        connection.port = addr.port();
                    }
                    server
                })
                .collect();
            Resolver::builder_with_config(
                ResolverConfig::from_name_servers(servers),
                TokioRuntimeProvider::default(),
            )
        };
        let options = builder.options_mut();
        options.timeout = timeout;
        options.attempts = 2;
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        let resolver = builder.build().map_err(|e| e.to_string())?;
        Ok(HickoryLookup { resolver })
    }
}

/// What a hickory error means to discovery.
fn failure(e: hickory_resolver::net::NetError) -> LookupError {
    if e.is_no_records_found() || e.is_nx_domain() {
        LookupError::Empty
    } else {
        LookupError::Failed(e.to_string())
    }
}

/// A name as discovery keeps it: lower case, no final dot.
fn plain(name: &hickory_resolver::proto::rr::Name) -> String {
    let text = name.to_ascii().to_ascii_lowercase();
    text.strip_suffix('.').map(str::to_string).unwrap_or(text)
}

impl Lookup for HickoryLookup {
    fn ips<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Answer<IpAddr>, LookupError>> {
        Box::pin(async move {
            self.resolver.clear_cache();
            let found = self.resolver.lookup_ip(name).await.map_err(failure)?;
            let ttl = found
                .as_lookup()
                .answers()
                .iter()
                .filter(|r| r.data.ip_addr().is_some())
                .map(|r| r.ttl)
                .min();
            let records: Vec<IpAddr> = found.iter().collect();
            match ttl {
                Some(ttl) if !records.is_empty() => Ok(Answer {
                    records,
                    ttl: Duration::from_secs(u64::from(ttl)),
                }),
                _ => Err(LookupError::Empty),
            }
        })
    }

    fn srv<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Answer<SrvTarget>, LookupError>> {
        Box::pin(async move {
            self.resolver.clear_cache();
            let found = self.resolver.srv_lookup(name).await.map_err(failure)?;
            let mut ttl = u32::MAX;
            let mut records = Vec::new();
            for record in found.answers() {
                if let RData::SRV(srv) = &record.data {
                    // A target of "." means the service is not available at this name.
                    if srv.target.is_root() {
                        continue;
                    }
                    ttl = ttl.min(record.ttl);
                    let target = plain(&srv.target);
                    let addrs = found
                        .additionals()
                        .iter()
                        .filter(|a| plain(&a.name) == target)
                        .filter_map(|a| a.data.ip_addr())
                        .collect();
                    records.push(SrvTarget {
                        target,
                        port: srv.port,
                        addrs,
                    });
                }
            }
            if records.is_empty() {
                return Err(LookupError::Empty);
            }
            Ok(Answer {
                records,
                ttl: Duration::from_secs(u64::from(ttl)),
            })
        })
    }
}
