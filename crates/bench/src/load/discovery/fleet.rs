//! The fleet one discovery run starts and changes: `memfleet server`s on loopback addresses
//! (127.0.1.1, 127.0.1.2, ...: one address per member, all on ONE port, as the pods of a
//! StatefulSet share port 11211), the in-process DNS server naming them (SRV
//! `_memcache._tcp.fleet.bench` → `mc-<i>.fleet.bench:<port>`, an A record per target, TTL
//! 1 s), a two-server gutter pool written statically, and a `memfleet router` whose main
//! pool is `dnssrv+_memcache._tcp.fleet.bench` behind a `gutter` route.
//!
//! The two replacements a run makes, one member at a time ([`Fleet::replace_in_place`],
//! [`Fleet::replace_with_new_name`]), and how long the router takes to show each (its
//! `__memfleet__.pools`, polled every 10 ms). Everything here blocks: it runs on a thread of
//! its own beside the clients. Not here: the clients, the keys' placement (`placement`).

use memfleet_testkit::ServerSpec;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use memfleet_routing::PoolConfig;
use memfleet_testkit::dns::DnsServer;
use memfleet_testkit::{try_free_port, Router, RouterConfig, Spawned};

/// The SRV name of the main pool's members.
pub(super) const SRV_NAME: &str = "_memcache._tcp.fleet.bench";
/// The zone of the members' names.
const ZONE: &str = "fleet.bench";
/// The records' TTL, seconds.
const TTL: u32 = 1;
/// The longest TTL of a set into the gutter, seconds (the gutter experiment's).
pub(super) const GUTTER_TTL: u32 = 10;
/// Servers in the gutter pool.
pub(super) const GUTTER_SERVERS: usize = 2;
/// How often the router's members are read while it follows a change.
const POLL: Duration = Duration::from_millis(10);

/// The `i`-th address a run gives a member: 127.0.1.1, 127.0.1.2, ... (250 per third byte;
/// never 127.0.0.1, where the router, the DNS server and the gutter listen).
pub(super) fn address(i: usize) -> IpAddr {
    IpAddr::from([127, 0, 1 + (i / 250) as u8, 1 + (i % 250) as u8])
}

/// The DNS name of member `mc-<i>`.
pub(super) fn target(member: &str) -> String {
    format!("{member}.{ZONE}")
}

/// A port free on every one of `addrs` a moment ago (all bound at once, then released).
fn shared_port(addrs: &[IpAddr]) -> Result<u16> {
    'search: for _ in 0..200 {
        let port = try_free_port()?;
        let mut held = Vec::with_capacity(addrs.len());
        for ip in addrs {
            match TcpListener::bind(SocketAddr::new(*ip, port)) {
                Ok(l) => held.push(l),
                Err(_) => continue 'search,
            }
        }
        return Ok(port);
    }
    bail!(
        "no port is free on all of {} loopback addresses",
        addrs.len()
    )
}

/// A blocking connection to the router for its admin keys.
pub(super) struct Admin {
    conn: BufReader<TcpStream>,
}

impl Admin {
    pub(super) fn connect(router: SocketAddr) -> Result<Admin> {
        let stream =
            TcpStream::connect(router).with_context(|| format!("connecting to {router}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.set_nodelay(true)?;
        Ok(Admin {
            conn: BufReader::new(stream),
        })
    }

    /// The values of `keys` (one `get`), in order; an error if one is missing.
    pub(super) fn get(&mut self, keys: &[String]) -> Result<Vec<String>> {
        self.conn
            .get_mut()
            .write_all(format!("get {}\r\n", keys.join(" ")).as_bytes())?;
        let mut values = Vec::with_capacity(keys.len());
        let mut line = String::new();
        loop {
            line.clear();
            self.conn.read_line(&mut line)?;
            if line == "END\r\n" {
                break;
            }
            let len: usize = line
                .strip_prefix("VALUE ")
                .and_then(|rest| rest.trim_end().rsplit(' ').next())
                .and_then(|n| n.parse().ok())
                .with_context(|| format!("the router answered {line:?}"))?;
            let mut data = vec![0; len + 2];
            self.conn.read_exact(&mut data)?;
            data.truncate(len);
            values.push(String::from_utf8(data)?);
        }
        if values.len() != keys.len() {
            bail!("{} values for {} keys", values.len(), keys.len());
        }
        Ok(values)
    }

    /// The main pool's members as `__memfleet__.pools` shows them: `name:port` → the
    /// address it is reached at (`None` while unknown).
    pub(super) fn members(&mut self) -> Result<BTreeMap<String, Option<String>>> {
        let json = self.get(&["__memfleet__.pools".to_string()])?.remove(0);
        let pools: serde_json::Value = serde_json::from_str(&json)?;
        let main = pools["pools"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == "main"))
            .with_context(|| format!("no main pool in {json}"))?;
        let servers = main["servers"].as_array().context("servers")?;
        Ok(servers
            .iter()
            .filter_map(|s| {
                let name = s["name"].as_str()?.to_string();
                Some((name, s["addr"].as_str().map(str::to_string)))
            })
            .collect())
    }
}

/// One member replaced, and how long the router took to show it.
#[derive(Clone, Debug)]
pub(super) struct Step {
    /// The member replaced (`mc-<i>`).
    pub(super) member: String,
    /// Its replacement: the same name (in place) or a new one.
    pub(super) replacement: String,
    /// The old and the new server's address.
    pub(super) old_addr: SocketAddr,
    pub(super) new_addr: SocketAddr,
    /// When DNS said so, since the start of the load.
    pub(super) dns_change: Duration,
    /// From the DNS change until the router's members showed it.
    pub(super) followed: Duration,
}

/// The members, the DNS server, the gutter and the router of one run (dropped in that
/// order from the router: the fields' order).
pub(super) struct Fleet {
    router: Router,
    bin: String,
    port: u16,
    dns: DnsServer,
    /// `mc-<i>` → its server.
    members: BTreeMap<String, Spawned>,
    next_address: usize,
    next_name: usize,
    resolve_interval: Duration,
    /// The router's configuration file's text.
    config: String,
    _gutter: Vec<Spawned>,
    /// Where the router's gutter route listens.
    pub(super) addr: SocketAddr,
}

impl Fleet {
    /// `members` servers (`mc-0` ...), DNS naming them, the gutter and the router; returns
    /// once the router shows every member. `spare`: addresses kept free for replacements.
    pub(super) fn start(
        bin: &str,
        members: usize,
        spare: usize,
        resolve_interval: Duration,
    ) -> Result<Fleet> {
        let addrs: Vec<IpAddr> = (0..members + spare).map(address).collect();
        let port = shared_port(&addrs)?;
        let dns = DnsServer::start_on(SocketAddr::from(([127, 0, 0, 1], 0)))
            .context("starting the DNS server")?;
        let mut servers = BTreeMap::new();
        for i in 0..members {
            let name = format!("mc-{i}");
            servers.insert(name, server(bin, address(i), port)?);
        }
        let gutter: Vec<Spawned> = (0..GUTTER_SERVERS)
            .map(|_| server(bin, IpAddr::from([127, 0, 0, 1]), try_free_port()?))
            .collect::<Result<_>>()?;
        let listen = try_free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], listen));
        let gutter_ports: Vec<u16> = gutter.iter().map(|g| g.addr.port()).collect();
        let config = router_config(listen, dns.addr(), resolve_interval, &gutter_ports);
        publish_a(&dns, &servers);
        publish_srv(&dns, port, &servers);
        let fleet = Fleet {
            router: Router::start(bin, &config, addr, None)?,
            bin: bin.to_string(),
            port,
            dns,
            members: servers,
            next_address: members,
            next_name: members,
            resolve_interval,
            config,
            _gutter: gutter,
            addr,
        };
        let mut admin = Admin::connect(addr)?;
        fleet.wait_until(&mut admin, "its first members", |m| m.len() == members)?;
        Ok(fleet)
    }

    /// The router's process ID.
    pub(super) fn router_pid(&self) -> u32 {
        self.router.spawned.pid()
    }

    /// The main pool as the router reads it from its configuration.
    pub(super) fn main_pool(&self) -> Result<PoolConfig> {
        let config = memfleet_routing::from_toml(&self.config)?;
        config
            .pools
            .into_iter()
            .find(|p| p.name == "main")
            .context("no main pool in the router's configuration")
    }

    /// The members' port (every member's).
    pub(super) fn port(&self) -> u16 {
        self.port
    }

    /// The members' names (`mc-<i>`), sorted.
    pub(super) fn names(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    /// The ring's name of member `mc-<i>`: `mc-<i>.fleet.bench:<port>`.
    pub(super) fn ring_name(&self, member: &str) -> String {
        format!("{}:{}", target(member), self.port)
    }

    fn next_address(&mut self) -> IpAddr {
        self.next_address += 1;
        address(self.next_address - 1)
    }

    /// A StatefulSet pod recreated: `member`'s server stopped (SIGTERM), a new empty one
    /// started at a new address, and its A record changed.
    pub(super) fn replace_in_place(&mut self, member: &str, start: Instant) -> Result<Step> {
        let mut admin = Admin::connect(self.addr)?;
        let old = self.members.remove(member).context("no such member")?;
        let old_addr = old.addr;
        stop(old)?;
        let ip = self.next_address();
        let new = server(&self.bin, ip, self.port)?;
        let new_addr = new.addr;
        self.members.insert(member.to_string(), new);
        let changed = Instant::now();
        self.dns.set_a(&target(member), &[new_addr.ip()], TTL);
        let (name, want) = (self.ring_name(member), new_addr.to_string());
        self.wait_until(&mut admin, "the new address", |m| {
            m.get(&name).and_then(Option::as_deref) == Some(want.as_str())
        })?;
        Ok(Step {
            member: member.to_string(),
            replacement: member.to_string(),
            old_addr,
            new_addr,
            dns_change: changed - start,
            followed: changed.elapsed(),
        })
    }

    /// A Deployment-style rollout step: a member with a new name started at a new address
    /// and put in the SRV answer while `member` leaves it, and `member`'s server stopped at
    /// the same moment (SIGTERM, as Kubernetes does without a preStop hook).
    pub(super) fn replace_with_new_name(&mut self, member: &str, start: Instant) -> Result<Step> {
        let mut admin = Admin::connect(self.addr)?;
        let newcomer = format!("mc-{}", self.next_name);
        self.next_name += 1;
        let ip = self.next_address();
        let new = server(&self.bin, ip, self.port)?;
        let new_addr = new.addr;
        let old = self.members.remove(member).context("no such member")?;
        let old_addr = old.addr;
        self.members.insert(newcomer.clone(), new);
        let changed = Instant::now();
        self.dns.set_a(&target(&newcomer), &[new_addr.ip()], TTL);
        publish_srv(&self.dns, self.port, &self.members);
        stop(old)?;
        let (joined, left) = (self.ring_name(&newcomer), self.ring_name(member));
        let want = new_addr.to_string();
        self.wait_until(&mut admin, "the new member set", |m| {
            !m.contains_key(&left) && m.get(&joined).and_then(Option::as_deref) == Some(&want)
        })?;
        Ok(Step {
            member: member.to_string(),
            replacement: newcomer,
            old_addr,
            new_addr,
            dns_change: changed - start,
            followed: changed.elapsed(),
        })
    }

    /// Polls the router's members every 10 ms until `done`; fails after ten intervals and
    /// ten seconds more.
    fn wait_until(
        &self,
        admin: &mut Admin,
        what: &str,
        done: impl Fn(&BTreeMap<String, Option<String>>) -> bool,
    ) -> Result<()> {
        let limit = self.resolve_interval * 10 + Duration::from_secs(10);
        let started = Instant::now();
        loop {
            if done(&admin.members()?) {
                return Ok(());
            }
            if started.elapsed() > limit {
                bail!("the router did not show {what} within {limit:?}");
            }
            std::thread::sleep(POLL);
        }
    }
}

/// Writes each member's A record.
fn publish_a(dns: &DnsServer, members: &BTreeMap<String, Spawned>) {
    for (name, s) in members {
        dns.set_a(&target(name), &[s.addr.ip()], TTL);
    }
}

/// Writes the SRV records naming every member, at `port`.
fn publish_srv(dns: &DnsServer, port: u16, members: &BTreeMap<String, Spawned>) {
    let targets: Vec<String> = members.keys().map(|m| target(m)).collect();
    let records: Vec<(&str, u16)> = targets.iter().map(|t| (t.as_str(), port)).collect();
    dns.set_srv(SRV_NAME, &records, TTL);
}

/// `bin server -l IP -p PORT -m 16 -t 1`, once it accepts connections.
fn server(bin: &str, ip: IpAddr, port: u16) -> Result<Spawned> {
    ServerSpec::memfleet(bin, 16).on(ip).port(port).start()
}

/// Stops a member with SIGTERM (what Kubernetes sends) and waits for it to exit.
fn stop(mut server: Spawned) -> Result<()> {
    server
        .stop_with(libc::SIGTERM)
        .with_context(|| format!("stopping the member at {}", server.addr))?;
    Ok(())
}

/// The router's configuration: the main pool found through DNS at `dns` every
/// `resolve_interval`, the gutter pool on `gutter`, a gutter route listening on `listen`.
fn router_config(
    listen: u16,
    dns: SocketAddr,
    resolve_interval: Duration,
    gutter: &[u16],
) -> String {
    let mut c = RouterConfig::new();
    c.section("router")
        .set_str(
            "resolve_interval",
            &format!("{}ms", resolve_interval.as_millis()),
        )
        .set_strs("nameservers", &[&dns.to_string()]);
    c.section("pools.main")
        .set_strs("servers", &[&format!("dnssrv+{SRV_NAME}")])
        .quick_failover();
    c.pool("gutter", gutter);
    c.gutter_route("cache", "main", "gutter", GUTTER_TTL)
        .listen(listen);
    c.text()
}
