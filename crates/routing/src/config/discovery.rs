//! Pools whose servers are found in DNS, with the convention Grafana Mimir, Thanos, Loki and
//! Cortex use for memcached: a `servers` entry `dns+NAME:PORT` makes every A/AAAA address of
//! NAME a member at PORT; `dnssrv+NAME` (e.g. `dnssrv+_memcache._tcp.cache.ns.svc.cluster.local`)
//! makes every SRV target of NAME a member, at the SRV port, keyed on the target's name (a
//! StatefulSet pod's stable DNS name), so a member whose address changes keeps its keys.
//!
//! This module only reads the entries and the `[router]` settings that go with them
//! (`resolve_interval`, `nameservers`); looking names up and following them is
//! `memfleet_client::discovery`'s job.

use std::net::SocketAddr;
use std::time::Duration;

/// One DNS entry of a pool's `servers`, as written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DnsEntry {
    /// `dns+NAME:PORT`: every A and AAAA address of NAME is a member at PORT (keyed on the
    /// address: A records name nothing more stable).
    Addresses {
        /// The name looked up.
        name: String,
        /// The members' port.
        port: u16,
    },
    /// `dnssrv+NAME`: every SRV target of NAME is a member at the record's port, keyed on
    /// the target's name; its address comes from an A/AAAA lookup of the target.
    Srv {
        /// The SRV name looked up (`_service._proto.domain`).
        name: String,
    },
}

impl DnsEntry {
    /// Reads a `servers` line that is a DNS entry: `None` when the line is not one (a
    /// static `host:port` line), `Some(Err)` when it is one but malformed.
    pub fn parse(line: &str) -> Option<Result<DnsEntry, String>> {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("dnssrv+") {
            return Some(check_name(line, name).map(|name| DnsEntry::Srv { name }));
        }
        let rest = line.strip_prefix("dns+")?;
        let Some((name, port)) = rest.rsplit_once(':') else {
            return Some(Err(format!("{line:?}: expected dns+NAME:PORT")));
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Some(Err(format!("{line:?}: bad port {port:?}"))),
        };
        Some(check_name(line, name).map(|name| DnsEntry::Addresses { name, port }))
    }

    /// The name looked up.
    pub fn name(&self) -> &str {
        match self {
            DnsEntry::Addresses { name, .. } | DnsEntry::Srv { name } => name,
        }
    }
}

/// The entry as written in `servers` (`dns+NAME:PORT`, `dnssrv+NAME`).
impl std::fmt::Display for DnsEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DnsEntry::Addresses { name, port } => write!(f, "dns+{name}:{port}"),
            DnsEntry::Srv { name } => write!(f, "dnssrv+{name}"),
        }
    }
}

/// A DNS name as a lookup takes it: letters, digits, `-`, `_` and dots, no empty label
/// (a final dot is allowed and dropped), at most 253 characters.
fn check_name(line: &str, name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let labels_ok = name.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    if name.is_empty() || name.len() > 253 || !labels_ok {
        return Err(format!("{line:?}: {name:?} is not a DNS name"));
    }
    Ok(name.to_ascii_lowercase())
}

/// How DNS entries are followed (the `[router]` table's `resolve_interval` and
/// `nameservers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoverySettings {
    /// How often every DNS entry is looked up again; sooner when an answer's TTL is
    /// shorter (but not more often than once a second, unless this is shorter). Default 10 s.
    pub resolve_interval: Duration,
    /// The nameservers asked (`ip:port`); empty: the system's (`/etc/resolv.conf`, with its
    /// search domains and options).
    pub nameservers: Vec<SocketAddr>,
}

/// The default `resolve_interval`.
pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(10);

impl Default for DiscoverySettings {
    fn default() -> DiscoverySettings {
        DiscoverySettings {
            resolve_interval: DEFAULT_RESOLVE_INTERVAL,
            nameservers: Vec::new(),
        }
    }
}

/// A `resolve_interval`: whole seconds, or a string with a unit (`"500ms"`, `"10s"`, `"2m"`),
/// at least 10 ms and at most a day.
pub(super) fn parse_interval(value: &toml::Value) -> Result<Duration, String> {
    let bad =
        || format!("resolve_interval {value}: expected seconds or \"500ms\", \"10s\", \"2m\"");
    let interval = match value {
        toml::Value::Integer(s) if *s > 0 => Duration::from_secs(*s as u64),
        toml::Value::String(s) => {
            let s = s.trim();
            let (number, unit) = s
                .find(|c: char| !c.is_ascii_digit())
                .map_or((s, ""), |i| s.split_at(i));
            let n: u64 = number.parse().map_err(|_| bad())?;
            match unit.trim() {
                "ms" => Duration::from_millis(n),
                "s" | "" => Duration::from_secs(n),
                "m" => Duration::from_secs(n.saturating_mul(60)),
                _ => return Err(bad()),
            }
        }
        _ => return Err(bad()),
    };
    if interval < Duration::from_millis(10) || interval > Duration::from_secs(86_400) {
        return Err(format!(
            "resolve_interval {value}: must be between 10ms and a day"
        ));
    }
    Ok(interval)
}

/// A `nameservers` entry: `ip:port`, or an IP address alone (port 53).
pub(super) fn parse_nameserver(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    text.parse::<std::net::IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| format!("nameserver {text:?}: expected ip:port (\"10.96.0.10:53\")"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries() {
        assert_eq!(DnsEntry::parse("10.0.0.1:11211"), None);
        assert_eq!(DnsEntry::parse("cache-a:11211:2 a"), None);
        assert_eq!(
            DnsEntry::parse("dns+Cache.NS.svc.cluster.local.:11211"),
            Some(Ok(DnsEntry::Addresses {
                name: "cache.ns.svc.cluster.local".into(),
                port: 11211
            }))
        );
        let srv = DnsEntry::parse(" dnssrv+_memcache._tcp.cache.ns.svc.cluster.local ")
            .unwrap()
            .unwrap();
        assert_eq!(
            srv,
            DnsEntry::Srv {
                name: "_memcache._tcp.cache.ns.svc.cluster.local".into()
            }
        );
        assert_eq!(
            srv.to_string(),
            "dnssrv+_memcache._tcp.cache.ns.svc.cluster.local"
        );
        for bad in [
            "dns+cache",
            "dns+cache:port",
            "dns+cache:0",
            "dns+:11211",
            "dns+a..b:11211",
            "dnssrv+",
            "dnssrv+bad name",
            "dnssrv+a/b",
        ] {
            assert!(matches!(DnsEntry::parse(bad), Some(Err(_))), "{bad}");
        }
    }

    #[test]
    fn intervals_and_nameservers() {
        let v = |s: &str| parse_interval(&toml::Value::String(s.into()));
        assert_eq!(v("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(v("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(v("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(v("7"), Ok(Duration::from_secs(7)));
        assert_eq!(
            parse_interval(&toml::Value::Integer(30)),
            Ok(Duration::from_secs(30))
        );
        for bad in ["", "1h", "ten", "5ms", "2d"] {
            assert!(v(bad).is_err(), "{bad}");
        }
        assert!(parse_interval(&toml::Value::Integer(0)).is_err());
        assert_eq!(
            parse_nameserver("127.0.0.1:5353"),
            Ok("127.0.0.1:5353".parse().unwrap())
        );
        assert_eq!(
            parse_nameserver("10.96.0.10"),
            Ok("10.96.0.10:53".parse().unwrap())
        );
        assert_eq!(
            parse_nameserver("[::1]:53"),
            Ok("[::1]:53".parse().unwrap())
        );
        assert!(parse_nameserver("dns.local:53").is_err());
    }
}
