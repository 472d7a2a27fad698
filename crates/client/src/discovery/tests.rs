//! Discovery's rules over a scripted lookup (the end-to-end tests, through a DNS server and
//! a router, are in `crates/router/tests/it/dns_discovery.rs`).

use super::*;
use std::sync::Mutex;

/// Answers from a table the test changes; a name missing from it fails.
#[derive(Default)]
struct Scripted {
    ips: Mutex<BTreeMap<String, Result<Answer<IpAddr>, LookupError>>>,
    srv: Mutex<BTreeMap<String, Result<Answer<SrvTarget>, LookupError>>>,
    asked: Mutex<Vec<String>>,
}

impl Scripted {
    fn set_ips(&self, name: &str, ips: &[&str], ttl: u64) {
        let records = ips.iter().map(|ip| ip.parse().unwrap()).collect();
        self.ips.lock().unwrap().insert(
            name.into(),
            Ok(Answer {
                records,
                ttl: Duration::from_secs(ttl),
            }),
        );
    }

    fn fail_ips(&self, name: &str, e: LookupError) {
        self.ips.lock().unwrap().insert(name.into(), Err(e));
    }

    fn set_srv(&self, name: &str, targets: &[(&str, u16, &[&str])], ttl: u64) {
        let records = targets
            .iter()
            .map(|(t, port, addrs)| SrvTarget {
                target: t.to_string(),
                port: *port,
                addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
            })
            .collect();
        self.srv.lock().unwrap().insert(
            name.into(),
            Ok(Answer {
                records,
                ttl: Duration::from_secs(ttl),
            }),
        );
    }

    fn fail_srv(&self, name: &str, e: LookupError) {
        self.srv.lock().unwrap().insert(name.into(), Err(e));
    }
}

impl Lookup for Scripted {
    fn ips<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Answer<IpAddr>, LookupError>> {
        self.asked.lock().unwrap().push(format!("A {name}"));
        let answer = self.ips.lock().unwrap().get(name).cloned();
        Box::pin(async move { answer.unwrap_or(Err(LookupError::Failed("unknown".into()))) })
    }

    fn srv<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Answer<SrvTarget>, LookupError>> {
        self.asked.lock().unwrap().push(format!("SRV {name}"));
        let answer = self.srv.lock().unwrap().get(name).cloned();
        Box::pin(async move { answer.unwrap_or(Err(LookupError::Failed("unknown".into()))) })
    }
}

use futures_util::future::BoxFuture;

const SRV: &str = "_memcache._tcp.mc.test";

fn config(servers: &str) -> RouterConfig {
    memfleet_routing::from_toml(&format!(
        "[router]\nresolve_interval = \"30s\"\n[pools.main]\nservers = [{servers}]\n"
    ))
    .unwrap()
}

fn discovery() -> (Arc<Scripted>, Arc<Discovery>) {
    let lookup = Arc::new(Scripted::default());
    let settings = DiscoverySettings {
        resolve_interval: Duration::from_secs(30),
        nameservers: Vec::new(),
    };
    (lookup.clone(), Discovery::with_lookup(&settings, lookup))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `(node host:port, address)` of the pool's members.
fn shown(members: &Members, config: &RouterConfig) -> Vec<(String, Option<String>)> {
    members
        .of_pool(&config.pools[0])
        .iter()
        .map(|m| (m.node.addr(), m.addr.map(|a| a.to_string())))
        .collect()
}

#[test]
fn srv_members_are_keyed_on_the_target_name_and_keep_their_last_good_set() {
    runtime().block_on(async {
        let (lookup, discovery) = discovery();
        let config = config(&format!("\"dnssrv+{SRV}\""));
        lookup.set_srv(
            SRV,
            &[
                ("mc-1.mc.test", 11211, &["10.0.0.2"]),
                ("mc-0.mc.test", 11211, &["10.0.0.1"]),
            ],
            30,
        );
        let first = discovery.refresh(&config).await;
        assert_eq!(
            shown(&first, &config),
            vec![
                ("mc-0.mc.test:11211".into(), Some("10.0.0.1:11211".into())),
                ("mc-1.mc.test:11211".into(), Some("10.0.0.2:11211".into())),
            ]
        );
        let stats = discovery.stats(&config.pools[0].dns[0]);
        assert_eq!(
            (stats.members, stats.lookups, stats.errors),
            (Some(2), 1, 0)
        );
        let first_change = stats.last_change.expect("the first answer is a change");

        // mc-1 moves: same node, new address.
        lookup.set_srv(
            SRV,
            &[
                ("mc-0.mc.test", 11211, &["10.0.0.1"]),
                ("mc-1.mc.test", 11211, &["10.0.0.9"]),
            ],
            30,
        );
        let moved = discovery.refresh(&config).await;
        assert_eq!(
            shown(&moved, &config)[1].1.as_deref(),
            Some("10.0.0.9:11211")
        );
        assert_eq!(
            shown(&moved, &config)
                .iter()
                .map(|m| m.0.clone())
                .collect::<Vec<_>>(),
            vec!["mc-0.mc.test:11211", "mc-1.mc.test:11211"]
        );
        assert!(discovery.stats(&config.pools[0].dns[0]).last_change >= Some(first_change));

        // A failure, then an empty answer: the last good set stays, both counted.
        lookup.fail_srv(SRV, LookupError::Failed("timed out".into()));
        assert_eq!(discovery.refresh(&config).await, moved);
        lookup.fail_srv(SRV, LookupError::Empty);
        assert_eq!(discovery.refresh(&config).await, moved);
        let stats = discovery.stats(&config.pools[0].dns[0]);
        assert_eq!((stats.lookups, stats.errors), (4, 2));
        assert_eq!(stats.failing.as_deref(), Some("no records"));
        // An unchanged answer is no change.
        lookup.set_srv(
            SRV,
            &[
                ("mc-0.mc.test", 11211, &["10.0.0.1"]),
                ("mc-1.mc.test", 11211, &["10.0.0.9"]),
            ],
            30,
        );
        assert_eq!(discovery.refresh(&config).await, moved);
        assert_eq!(discovery.stats(&config.pools[0].dns[0]).failing, None);
    });
}

#[test]
fn srv_targets_without_addresses_are_looked_up_and_stay_members_when_they_cannot_be() {
    runtime().block_on(async {
        let (lookup, discovery) = discovery();
        let config = config(&format!("\"dnssrv+{SRV}\""));
        lookup.set_srv(
            SRV,
            &[("mc-0.mc.test", 11211, &[]), ("mc-1.mc.test", 11300, &[])],
            30,
        );
        lookup.set_ips("mc-0.mc.test", &["10.0.0.1"], 30);
        lookup.set_ips("mc-1.mc.test", &["10.0.0.3", "10.0.0.2"], 30);
        let members = discovery.refresh(&config).await;
        // The lowest address, so rotating A records do not look like a move.
        assert_eq!(
            shown(&members, &config),
            vec![
                ("mc-0.mc.test:11211".into(), Some("10.0.0.1:11211".into())),
                ("mc-1.mc.test:11300".into(), Some("10.0.0.2:11300".into())),
            ]
        );
        // mc-1's address lookup fails: it keeps its last address; a new target that
        // cannot be found is a member without one.
        lookup.fail_ips("mc-1.mc.test", LookupError::Failed("SERVFAIL".into()));
        lookup.set_srv(
            SRV,
            &[
                ("mc-0.mc.test", 11211, &[]),
                ("mc-1.mc.test", 11300, &[]),
                ("mc-2.mc.test", 11211, &[]),
            ],
            30,
        );
        let members = discovery.refresh(&config).await;
        assert_eq!(
            shown(&members, &config),
            vec![
                ("mc-0.mc.test:11211".into(), Some("10.0.0.1:11211".into())),
                ("mc-1.mc.test:11300".into(), Some("10.0.0.2:11300".into())),
                ("mc-2.mc.test:11211".into(), None),
            ]
        );
        let stats = discovery.stats(&config.pools[0].dns[0]);
        // Two rounds: one SRV question and two or three address questions each.
        assert_eq!((stats.lookups, stats.errors), (2 + 2 + 3, 2));
    });
}

#[test]
fn address_entries_make_every_address_a_member_and_short_ttls_bring_the_next_round_forward() {
    runtime().block_on(async {
        let (lookup, discovery) = discovery();
        let config = config("\"dns+mc.test:11211\", \"dns+other.test:11300\"");
        lookup.set_ips(
            "mc.test",
            &["10.0.0.2", "fd00::1", "10.0.0.1", "10.0.0.2"],
            3,
        );
        let members = discovery.refresh(&config).await;
        // other.test never answered: no members, and no effect on mc.test's.
        assert_eq!(
            shown(&members, &config),
            vec![
                ("10.0.0.1:11211".into(), Some("10.0.0.1:11211".into())),
                ("10.0.0.2:11211".into(), Some("10.0.0.2:11211".into())),
                ("[fd00::1]:11211".into(), Some("[fd00::1]:11211".into())),
            ]
        );
        assert_eq!(discovery.next_round(), Duration::from_secs(3));
        assert_eq!(discovery.stats(&config.pools[0].dns[1]).members, None);
        // A TTL of 0 still leaves a second between rounds.
        lookup.set_ips("mc.test", &["10.0.0.1"], 0);
        discovery.refresh(&config).await;
        assert_eq!(discovery.next_round(), Duration::from_secs(1));
        // Nothing answers: the interval.
        lookup.fail_ips("mc.test", LookupError::Empty);
        discovery.refresh(&config).await;
        assert_eq!(discovery.next_round(), Duration::from_secs(30));
        // A configuration without the entry forgets it.
        let other = config_other();
        discovery.refresh(&other).await;
        assert_eq!(discovery.stats(&config.pools[0].dns[0]).lookups, 0);
        assert_eq!(discovery.current(&config), Members::default());
    });
}

fn config_other() -> RouterConfig {
    config("\"dns+other.test:11300\"")
}

#[test]
fn renewed_discovery_keeps_what_was_found() {
    runtime().block_on(async {
        let (lookup, discovery) = discovery();
        let config = config(&format!("\"dnssrv+{SRV}\""));
        lookup.set_srv(SRV, &[("mc-0.mc.test", 11211, &["10.0.0.1"])], 30);
        let members = discovery.refresh(&config).await;
        assert!(Arc::ptr_eq(
            &discovery.renewed(discovery.settings()),
            &discovery
        ));
        let settings = DiscoverySettings {
            resolve_interval: Duration::from_secs(5),
            nameservers: vec!["127.0.0.1:1".parse().unwrap()],
        };
        let renewed = discovery.renewed(&settings);
        assert_eq!(renewed.settings(), &settings);
        assert_eq!(renewed.current(&config), members);
        assert_eq!(renewed.stats(&config.pools[0].dns[0]).lookups, 1);
    });
}
