//! Pools that follow DNS, end to end: a DNS server the test runs (`memfleet_testkit::dns`,
//! in-process on 127.0.0.1), real `memfleet server`s on loopback addresses (127.0.0.x, all on
//! one port, as pods of a StatefulSet are), a router whose pool is a `dnssrv+` or `dns+`
//! entry, and clients through real sockets:
//!
//! | case | expected |
//! |---|---|
//! | (a) a member's address changes (SRV: same target name, new address) | followed within two intervals; no key changes owner; every other member's keys still hit |
//! | (a) the same with `dns+` (an address leaves, another joins) | only the leaver's keys and those the newcomer takes move; every other key still hits |
//! | (b) a member is added | 1/(N+1) ± 5 points of the keys move, all to the newcomer; 0 errors and 0 dropped connections meanwhile |
//! | (c) the DNS server is down for three intervals | the pool is unchanged; 0 client errors; the failures are counted |
//! | (d) an empty answer | the pool is unchanged; counted and shown as failing |
//! | a name that does not resolve at start | the other pools serve; the pool itself fails fast, then serves once the name resolves |
//!
//! The intervals are short (300 ms) so the cases take seconds.

use crate::support;

use memfleet_router::RunningRouter;
use memfleet_server::{Server, Settings};
use memfleet_testkit::dns::{DnsServer, Mode};
use memfleet_testkit::free_port;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{eventually, Client};

/// `resolve_interval` of every router here.
const INTERVAL: Duration = Duration::from_millis(300);
/// What a loaded two-core machine may add (scheduling, a debug build).
const SLACK: Duration = Duration::from_millis(1500);
/// Keys written before each change.
const KEYS: usize = 2000;
/// The records' TTL (seconds): the interval is shorter, so it decides.
const TTL: u32 = 1;
const SRV_NAME: &str = "_memcache._tcp.mc.test";
const A_NAME: &str = "mc.test";

/// How the pool names its members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `dnssrv+_memcache._tcp.mc.test`: targets `mc-<i>.mc.test`, each with its A record.
    Srv,
    /// `dns+mc.test:<port>`: every A record of `mc.test`.
    Addresses,
}

/// 127.0.0.<last>.
fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// Members live at 127.0.0.10 and up; replacements at 127.0.0.30 and up.
const FIRST: u8 = 10;
const REPLACEMENT: u8 = 30;

/// A port free on every address this test uses.
fn shared_port() -> u16 {
    'search: loop {
        let port = free_port();
        let mut held = Vec::new();
        for last in (FIRST..FIRST + 8).chain(REPLACEMENT..REPLACEMENT + 8) {
            match TcpListener::bind(SocketAddr::new(ip(last), port)) {
                Ok(l) => held.push(l),
                Err(_) => continue 'search,
            }
        }
        return port;
    }
}

fn server_at(last: u8, port: u16) -> Server {
    let mut settings = Settings::single_worker(port, 16 << 20);
    settings.listen.address = ip(last);
    Server::start(settings).expect("server starts")
}

/// The members as DNS names them: name (`mc-<i>`) → the last byte of its address.
type Zone = BTreeMap<String, u8>;

/// Writes `zone` into `dns` the way `kind` reads it.
fn publish(dns: &DnsServer, kind: Kind, port: u16, zone: &Zone) {
    match kind {
        Kind::Srv => {
            for (member, last) in zone {
                dns.set_a(&format!("{member}.mc.test"), &[ip(*last)], TTL);
            }
            let targets: Vec<(String, u16)> = zone
                .keys()
                .map(|m| (format!("{m}.mc.test"), port))
                .collect();
            let targets: Vec<(&str, u16)> = targets.iter().map(|(t, p)| (t.as_str(), *p)).collect();
            dns.set_srv(SRV_NAME, &targets, TTL);
        }
        Kind::Addresses => {
            let ips: Vec<IpAddr> = zone.values().map(|l| ip(*l)).collect();
            dns.set_a(A_NAME, &ips, TTL);
        }
    }
}

/// A router with one pool, `main`, of the one `servers` item `entry`, following DNS at
/// `dns` every [`INTERVAL`]; `extra`: more TOML.
fn router(entry: &str, dns: SocketAddr, extra: &str) -> RunningRouter {
    let toml = format!(
        "[router]\nresolve_interval = \"{}ms\"\nnameservers = [\"{dns}\"]\n\
         [pools.main]\nlisten = \"127.0.0.1:{}\"\ntimeout_ms = 1000\nservers = [\"{entry}\"]\n{extra}",
        INTERVAL.as_millis(),
        free_port()
    );
    let config = memfleet_routing::from_toml(&toml).expect("configuration");
    RunningRouter::start(config, 1, Some("127.0.0.1:0".into())).expect("router starts")
}

/// The router's `/metrics`.
fn metrics(router: &RunningRouter) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(router.admin_addr.expect("an admin port")).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// N members, the DNS server naming them, a router following it.
struct Fleet {
    kind: Kind,
    port: u16,
    dns: DnsServer,
    zone: Zone,
    servers: BTreeMap<u8, Server>,
    router: RunningRouter,
}

impl Fleet {
    fn start(kind: Kind, n: u8) -> Fleet {
        Fleet::start_with(kind, n, "")
    }

    /// [`Fleet::start`] with `extra` in the pool's TOML.
    fn start_with(kind: Kind, n: u8, extra: &str) -> Fleet {
        let port = shared_port();
        let dns = DnsServer::start();
        let zone: Zone = (0..n).map(|i| (format!("mc-{i}"), FIRST + i)).collect();
        let servers = zone.values().map(|l| (*l, server_at(*l, port))).collect();
        publish(&dns, kind, port, &zone);
        let entry = match kind {
            Kind::Srv => format!("dnssrv+{SRV_NAME}"),
            Kind::Addresses => format!("dns+{A_NAME}:{port}"),
        };
        let router = router(&entry, dns.addr(), extra);
        let fleet = Fleet {
            kind,
            port,
            dns,
            zone,
            servers,
            router,
        };
        let want = fleet.expected_members();
        eventually("the router's first members", || fleet.members() == want);
        fleet
    }

    /// Changes the zone (starting a server for any new address) and publishes it.
    fn change(&mut self, f: impl FnOnce(&mut Zone)) {
        f(&mut self.zone);
        for last in self.zone.values() {
            if !self.servers.contains_key(last) {
                self.servers.insert(*last, server_at(*last, self.port));
            }
        }
        publish(&self.dns, self.kind, self.port, &self.zone);
    }

    fn client(&self) -> Client {
        Client::connect(self.router.addrs[0])
    }

    /// (name, address) of the pool's members as `__memfleet__.pools` shows them.
    fn members(&self) -> Vec<(String, String)> {
        let json = self.client().get("__memfleet__.pools").expect("pools");
        let pools: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        pools["pools"][0]["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_string(),
                    s["addr"].as_str().unwrap_or("?").to_string(),
                )
            })
            .collect()
    }

    /// What [`Fleet::members`] should show for the zone.
    fn expected_members(&self) -> Vec<(String, String)> {
        let port = self.port;
        let mut want: Vec<(String, String)> = self
            .zone
            .iter()
            .map(|(member, last)| {
                let addr = format!("{}:{port}", ip(*last));
                match self.kind {
                    Kind::Srv => (format!("{member}.mc.test:{port}"), addr),
                    Kind::Addresses => (addr.clone(), addr),
                }
            })
            .collect();
        want.sort();
        want
    }

    /// Waits until the router shows the zone's members; how long that took.
    fn followed(&self) -> Duration {
        let start = Instant::now();
        let want = self.expected_members();
        eventually("the router following DNS", || self.members() == want);
        start.elapsed()
    }

    /// A `stats` value of the router.
    fn stat(&self, name: &str) -> u64 {
        self.client()
            .stat(name)
            .unwrap_or_else(|| panic!("no stat {name}"))
    }
}

fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("dns:{i}")).collect()
}

/// Which member (`host:port` as the ring knows it) each key goes to, asked 100 at a time.
fn owners(client: &mut Client, keys: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in keys.chunks(100) {
        let asked: Vec<String> = chunk
            .iter()
            .map(|k| format!("__memfleet__.route({k})"))
            .collect();
        client.send(format!("get {}\r\n", asked.join(" ")));
        for _ in chunk {
            let (_, value) = client.value().expect("a route answer");
            out.push(value);
        }
        assert_eq!(client.read_line(), "END\r\n");
    }
    out
}

fn set_all(client: &mut Client, keys: &[String]) {
    for k in keys {
        client.check(&format!("set {k} 0 0 {}\r\n{k}\r\n", k.len()), "STORED\r\n");
    }
}

/// Which keys hit through `client`.
fn hits(client: &mut Client, keys: &[String]) -> Vec<bool> {
    keys.iter()
        .map(|k| match client.get(k) {
            Some(v) => {
                assert_eq!(&v, k, "the value of {k}");
                true
            }
            None => false,
        })
        .collect()
}

/// A client connection setting and getting keys through the router until stopped: what
/// it met that was not a value, a miss or STORED is an error; a dropped connection ends it
/// (and is counted).
struct Traffic {
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Traffic {
    fn start(router: SocketAddr) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let (s, r) = (stop.clone(), requests.clone());
        let thread = std::thread::spawn(move || {
            let mut client = Client::connect(router);
            let mut errors = Vec::new();
            let mut i = 0u64;
            while !s.load(Ordering::Relaxed) {
                let key = format!("traffic:{}", i % 500);
                i += 1;
                let set = client.try_line(&format!("set {key} 0 0 2\r\nok\r\n"));
                let get = client.try_line(&format!("get {key}\r\n"));
                r.fetch_add(2, Ordering::Relaxed);
                match (set, get) {
                    (Ok(set), Ok(get)) => {
                        if set != "STORED\r\n" {
                            errors.push(format!("set {key}: {set:?}"));
                        }
                        if get.starts_with("VALUE ") {
                            let _ = client.try_line(""); // the data line
                            let end = client.try_line("");
                            if !matches!(end.as_deref(), Ok("END\r\n")) {
                                errors.push(format!("get {key}: {end:?}"));
                            }
                        } else if get != "END\r\n" {
                            errors.push(format!("get {key}: {get:?}"));
                        }
                    }
                    (set, get) => {
                        errors.push(format!("connection lost: {set:?} {get:?}"));
                        break;
                    }
                }
            }
            errors
        });
        Traffic {
            stop,
            requests,
            thread: Some(thread),
        }
    }

    /// Stops it; the errors it met and the requests it sent.
    fn finish(mut self) -> (Vec<String>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let errors = self.thread.take().unwrap().join().expect("traffic thread");
        (errors, self.requests.load(Ordering::Relaxed))
    }
}

/// (a) A member gets a new address.
fn address_change(kind: Kind) {
    let mut fleet = Fleet::start(kind, 4);
    let keys = keys();
    let mut client = fleet.client();
    set_all(&mut client, &keys);
    let before = owners(&mut client, &keys);
    let moved_member = match kind {
        Kind::Srv => format!("mc-1.mc.test:{}", fleet.port),
        Kind::Addresses => format!("{}:{}", ip(FIRST + 1), fleet.port),
    };
    // mc-1 comes back at another address, empty (a pod replaced under its name).
    fleet.change(|zone| {
        zone.insert("mc-1".into(), REPLACEMENT + 1);
    });
    let took = fleet.followed();
    eprintln!("{kind:?}: followed an address change in {took:?}");
    assert!(took <= 2 * INTERVAL + SLACK, "followed after {took:?}");
    let after = owners(&mut client, &keys);
    let hit = hits(&mut client, &keys);
    let (mut others, mut others_hit, mut moved) = (0, 0, 0);
    for i in 0..keys.len() {
        if before[i] != after[i] {
            moved += 1;
        }
        if before[i] != moved_member && before[i] == after[i] {
            others += 1;
            others_hit += usize::from(hit[i]);
        }
    }
    eprintln!(
        "{kind:?}: {moved} of {} keys changed owner; other members' keys: {others_hit} of {others} hit",
        keys.len()
    );
    assert!(
        others_hit as f64 >= 0.99 * others as f64,
        "{others_hit} of {others}"
    );
    match kind {
        // The ring is keyed on the name: nothing moved, and the others hold 3/4 of the keys.
        Kind::Srv => {
            assert_eq!(moved, 0);
            assert!(others > keys.len() / 2, "{others}");
        }
        // An address leaves and another joins: about 1/4 of the keys, plus what the
        // newcomer takes from the others (about 1/4 of 3/4), change owner.
        Kind::Addresses => {
            assert!(moved < keys.len() / 2, "{moved}");
            assert!(others > keys.len() / 3, "{others}");
        }
    }
    // A set of a key of the member at the new address reaches the new server.
    let newcomer = match kind {
        Kind::Srv => moved_member,
        Kind::Addresses => format!("{}:{}", ip(REPLACEMENT + 1), fleet.port),
    };
    let k = &keys[(0..keys.len())
        .find(|&i| after[i] == newcomer)
        .expect("a key on the new address")];
    client.check(&format!("set {k} 0 0 3\r\nnew\r\n"), "STORED\r\n");
    let mut direct = Client::connect(SocketAddr::new(ip(REPLACEMENT + 1), fleet.port));
    assert_eq!(direct.get(k).as_deref(), Some("new"));
}

#[test]
fn a_srv_member_at_a_new_address_keeps_its_name_and_every_key() {
    address_change(Kind::Srv);
}

#[test]
fn a_dns_member_at_a_new_address_is_a_leave_and_a_join() {
    address_change(Kind::Addresses);
}

/// (b) A member joins.
fn member_added(kind: Kind) {
    let mut fleet = Fleet::start(kind, 4);
    let keys = keys();
    let mut client = fleet.client();
    set_all(&mut client, &keys);
    let before = owners(&mut client, &keys);
    let traffic = Traffic::start(fleet.router.addrs[0]);
    std::thread::sleep(INTERVAL);
    fleet.change(|zone| {
        zone.insert("mc-4".into(), FIRST + 4);
    });
    let took = fleet.followed();
    std::thread::sleep(INTERVAL);
    let (errors, requests) = traffic.finish();
    let after = owners(&mut client, &keys);
    let newcomer = match kind {
        Kind::Srv => format!("mc-4.mc.test:{}", fleet.port),
        Kind::Addresses => format!("{}:{}", ip(FIRST + 4), fleet.port),
    };
    let moved: Vec<usize> = (0..keys.len()).filter(|&i| before[i] != after[i]).collect();
    let share = moved.len() as f64 / keys.len() as f64;
    eprintln!(
        "{kind:?}: a fifth member took {:.1}% of the keys (ideal 20%), followed in {took:?}; \
         {requests} requests meanwhile, {} errors",
        share * 100.0,
        errors.len()
    );
    assert!((0.15..=0.25).contains(&share), "{share}");
    assert!(moved.iter().all(|&i| after[i] == newcomer));
    assert!(errors.is_empty(), "{errors:?}");
    // Every key that stayed still hits.
    let hit = hits(&mut client, &keys);
    assert!((0..keys.len()).all(|i| before[i] != after[i] || hit[i]));
}

#[test]
fn an_added_srv_member_takes_a_fifth_of_the_keys_without_an_error() {
    member_added(Kind::Srv);
}

#[test]
fn an_added_dns_member_takes_a_fifth_of_the_keys_without_an_error() {
    member_added(Kind::Addresses);
}

/// (c) and (d): DNS fails or answers nothing; the pool stays as it was.
fn dns_trouble(kind: Kind, mode: Mode) {
    let fleet = Fleet::start(kind, 4);
    let keys = keys();
    let mut client = fleet.client();
    set_all(&mut client, &keys);
    let members = fleet.members();
    let errors_before = fleet.stat("pool:main:dns_errors");
    let traffic = Traffic::start(fleet.router.addrs[0]);
    fleet.dns.set_mode(mode);
    // Three intervals and the time a lookup takes to give up.
    std::thread::sleep(3 * INTERVAL + Duration::from_millis(600));
    assert_eq!(fleet.members(), members);
    assert_eq!(fleet.stat("pool:main:dns_failing"), 1);
    let text = metrics(&fleet.router);
    for series in [
        "memfleet_router_pool_members{pool=\"main\"} 4",
        "memfleet_router_dns_members{pool=\"main\"} 4",
        "memfleet_router_dns_failing{pool=\"main\"} 1",
    ] {
        assert!(text.contains(series), "{series} in {text}");
    }
    let failures = fleet.stat("pool:main:dns_errors") - errors_before;
    assert!(failures >= 2, "{failures} failures counted");
    fleet.dns.set_mode(Mode::Answer);
    eventually("DNS answering again", || {
        fleet.stat("pool:main:dns_failing") == 0
    });
    let (errors, requests) = traffic.finish();
    eprintln!(
        "{kind:?} {mode:?}: {failures} failed lookups counted, {requests} requests, {} errors",
        errors.len()
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(fleet.members(), members);
    assert!(hits(&mut client, &keys).iter().all(|h| *h));
}

#[test]
fn dns_down_for_three_intervals_leaves_a_srv_pool_as_it_was() {
    dns_trouble(Kind::Srv, Mode::Down);
}

#[test]
fn dns_down_for_three_intervals_leaves_a_dns_pool_as_it_was() {
    dns_trouble(Kind::Addresses, Mode::Down);
}

#[test]
fn an_empty_answer_leaves_a_srv_pool_as_it_was() {
    dns_trouble(Kind::Srv, Mode::Empty);
}

#[test]
fn an_empty_answer_leaves_a_dns_pool_as_it_was() {
    dns_trouble(Kind::Addresses, Mode::Empty);
}

#[test]
fn a_name_that_does_not_resolve_holds_no_other_pool_back() {
    let dns = DnsServer::start();
    let (_static_server, static_port) = support::backend();
    let port = shared_port();
    let dns_listen = free_port();
    let extra = format!(
        "[pools.pending]\nlisten = \"127.0.0.1:{dns_listen}\"\ntimeout_ms = 1000\n\
         servers = [\"dnssrv+{SRV_NAME}\"]\n"
    );
    let static_entry = format!("127.0.0.1:{static_port}");
    let router = router(&static_entry, dns.addr(), &extra);
    let mut written = Client::connect(router.addrs[0]);
    written.check("set k 0 0 1\r\nv\r\n", "STORED\r\n");
    assert_eq!(written.get("k").as_deref(), Some("v"));
    let mut pending = Client::connect(SocketAddr::from(([127, 0, 0, 1], dns_listen)));
    let refused = pending.line("set k 0 0 1\r\nv\r\n");
    assert!(refused.starts_with("SERVER_ERROR"), "{refused:?}");
    assert_eq!(
        pending.stat_text("pool:pending:servers").as_deref(),
        Some("0")
    );
    // The name appears: the pool serves, on the same connection.
    let _server = server_at(FIRST, port);
    let zone: Zone = [("mc-0".to_string(), FIRST)].into();
    publish(&dns, Kind::Srv, port, &zone);
    eventually("the pending pool's member", || {
        pending.stat_text("pool:pending:servers").as_deref() == Some("1")
    });
    pending.check("set k 0 0 1\r\nw\r\n", "STORED\r\n");
    assert_eq!(pending.get("k").as_deref(), Some("w"));
    assert_eq!(written.get("k").as_deref(), Some("v"));
}

/// `config get cluster` on a pool with `auto_discovery`: (version, entries).
fn cluster_config(client: &mut Client) -> (u64, String) {
    client.send("config get cluster\r\n");
    let head = client.read_line();
    let len: usize = head
        .strip_prefix("CONFIG cluster 0 ")
        .and_then(|l| l.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("{head:?}"))
        .parse()
        .unwrap();
    let version = client.read_line();
    let entries = client.read_line();
    assert_eq!(
        version.len() + entries.len(),
        len,
        "{version:?} {entries:?}"
    );
    assert_eq!(client.read_line(), "\r\n");
    assert_eq!(client.read_line(), "END\r\n");
    (
        version.trim_end().parse().unwrap(),
        entries.trim_end().to_string(),
    )
}

#[test]
fn auto_discovery_lists_the_dns_members_and_a_new_version_when_they_change() {
    let mut fleet = Fleet::start_with(Kind::Srv, 2, "auto_discovery = true");
    let port = fleet.port;
    let entry = |i: u8| format!("mc-{i}.mc.test|{}|{port}", ip(FIRST + i));
    let mut client = fleet.client();
    let (v1, entries) = cluster_config(&mut client);
    assert_eq!(entries, format!("{} {}", entry(0), entry(1)));
    fleet.change(|zone| {
        zone.insert("mc-2".into(), FIRST + 2);
    });
    fleet.followed();
    let (v2, entries) = cluster_config(&mut client);
    assert_eq!(entries, format!("{} {} {}", entry(0), entry(1), entry(2)));
    assert!(v2 > v1, "{v2} after {v1}");
}
