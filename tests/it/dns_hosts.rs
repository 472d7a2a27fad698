//! DNS discovery across machines, simulated as network namespaces with their own addresses
//! (`faults/netns.rs`): three server "hosts" (`mc-0`, `mc-1`, `mc-2`, each a `memfleet server`
//! on its own address, port 11211 as in production), a DNS server the test runs naming them
//! (`_memcache._tcp.fleet.test` SRV records and the hosts' A records), and a `memfleet router`
//! process on this machine (the fourth host) whose pool is `dnssrv+_memcache._tcp.fleet.test`,
//! under steady client traffic.
//!
//! Host `mc-1` is cut off (its link down: packets vanish, as with a dead machine), then
//! replaced under the same name by a fresh host at another address, and DNS says so. The
//! other hosts' keys never fail; `mc-1`'s fail only from the cut until the router follows
//! the new address (within two intervals of the DNS change), then store on the new host; no
//! key changes owner.
//!
//! Needs root and `ip` (network namespaces); skips, saying why, without them.

use crate::support;

use crate::faults::fleet::{answers, server_with, Router};
use crate::faults::netns::Namespace;
use crate::faults::traffic::Traffic;
use memfleet_routing::{Distribution, KetamaDialect, KeyHash, Node, Ring};
use memfleet_testkit::dns::DnsServer;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use support::free_port;

const SRV_NAME: &str = "_memcache._tcp.fleet.test";
const INTERVAL: Duration = Duration::from_millis(500);
/// What a loaded two-core machine may add to a deadline.
const SLACK: Duration = Duration::from_millis(1500);

fn target(i: usize) -> String {
    format!("mc-{i}.fleet.test")
}

/// The value of `key` through `addr` (one `get`), if it has one.
fn value(addr: SocketAddr, key: &str) -> Option<String> {
    use std::io::{BufRead, BufReader, Write};
    let s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut s = BufReader::new(s);
    s.get_mut()
        .write_all(format!("get {key}\r\n").as_bytes())
        .ok()?;
    let mut line = String::new();
    s.read_line(&mut line).ok()?;
    line.starts_with("VALUE ").then_some(())?;
    let mut data = String::new();
    s.read_line(&mut data).ok()?;
    Some(data.trim_end().to_string())
}

/// The address of host `mc-<i>`'s member in the router's `__memfleet__.pools`.
fn member_addr(router: SocketAddr, i: usize) -> Option<String> {
    let json = value(router, "__memfleet__.pools")?;
    let pools: serde_json::Value = serde_json::from_str(&json).ok()?;
    let name = format!("{}:11211", target(i));
    pools["pools"][0]["servers"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name.as_str())?["addr"]
        .as_str()
        .map(str::to_string)
}

#[test]
fn a_host_cut_off_and_replaced_under_its_name_is_followed_by_the_router() {
    let hosts: Result<Vec<Namespace>, String> = (0..3).map(Namespace::host).collect();
    let mut hosts = match hosts {
        Ok(h) => h,
        Err(why) => {
            eprintln!("SKIPPED: cannot make network namespaces ({why}); run as root with iproute2");
            return;
        }
    };
    let memfleet = env!("CARGO_BIN_EXE_memfleet");
    let mut servers: Vec<_> = hosts
        .iter()
        .map(|h| Some(server_with(h.command(memfleet), &h.ns_addr, 11211)))
        .collect();
    let dns = DnsServer::start();
    let addr_of = |h: &Namespace| -> IpAddr { h.ns_addr.parse().unwrap() };
    for (i, h) in hosts.iter().enumerate() {
        dns.set_a(&target(i), &[addr_of(h)], 1);
    }
    let targets: Vec<String> = (0..3).map(target).collect();
    let srv: Vec<(&str, u16)> = targets.iter().map(|t| (t.as_str(), 11211)).collect();
    dns.set_srv(SRV_NAME, &srv, 1);

    let listen = free_port();
    let toml = format!(
        "[router]\nresolve_interval = \"{}ms\"\nnameservers = [\"{}\"]\n\
         [pools.main]\nlisten = \"127.0.0.1:{listen}\"\nservers = [\"dnssrv+{SRV_NAME}\"]\n\
         timeout_ms = 300\nserver_failure_limit = 3\nserver_retry_timeout_ms = 200\n",
        INTERVAL.as_millis(),
        dns.addr()
    );
    let router_addr = SocketAddr::from(([127, 0, 0, 1], listen));
    let router = Router::start("dns-hosts", &toml, listen);
    let deadline = Instant::now() + Duration::from_secs(10);
    while member_addr(router_addr, 2).is_none() {
        assert!(
            Instant::now() < deadline,
            "the router never found its members"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Where each key lives: the ring of the three names (what the router must keep).
    let keys: Vec<String> = (0..90).map(|i| format!("host:{i}")).collect();
    let ring = Ring::new(
        targets.iter().map(|t| Node::new(t, 11211)).collect(),
        Distribution::Ketama(KetamaDialect::Libmemcached),
        KeyHash::Md5,
    )
    .unwrap();
    let on: Vec<usize> = keys.iter().map(|k| ring.pick(k.as_bytes())).collect();
    let traffic = Traffic::start(router_addr, &keys, 4);
    std::thread::sleep(Duration::from_secs(1));

    // mc-1's machine is gone...
    let cut = traffic.now();
    hosts[1].link(false);
    std::thread::sleep(Duration::from_secs(1));
    // ... and a new machine takes its name.
    let replacement = match Namespace::host(3) {
        Ok(h) => h,
        Err(why) => panic!("a fourth host: {why}"),
    };
    let _new_server = server_with(replacement.command(memfleet), &replacement.ns_addr, 11211);
    assert!(answers(SocketAddr::new(addr_of(&replacement), 11211)));
    let renamed = traffic.now();
    let changed = Instant::now();
    dns.set_a(&target(1), &[addr_of(&replacement)], 1);
    let want = format!("{}:11211", replacement.ns_addr);
    let deadline = Instant::now() + Duration::from_secs(10);
    while member_addr(router_addr, 1).as_deref() != Some(want.as_str()) {
        assert!(Instant::now() < deadline, "the router never followed mc-1");
        std::thread::sleep(Duration::from_millis(20));
    }
    let followed = changed.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let samples = traffic.stop();
    // The old machine is gone for good.
    drop(servers[1].take());
    hosts.remove(1);

    let others = samples.tally(
        Duration::ZERO,
        Duration::MAX,
        Duration::from_millis(300),
        |k| on[k] != 1,
    );
    let victim = samples.tally(
        Duration::ZERO,
        Duration::MAX,
        Duration::from_millis(300),
        |k| on[k] == 1,
    );
    let back = samples
        .first_stored_after(renamed, |k| on[k] == 1)
        .expect("mc-1's keys never stored on the new host");
    eprintln!(
        "other hosts: {} requests, {} failures; mc-1: {} requests, {} failures; \
         cut at {cut:?}, renamed at {renamed:?}, followed in {followed:?}, first store on the new host at {back:?}",
        others.requests,
        others.failures(),
        victim.requests,
        victim.failures()
    );
    assert_eq!(
        others.failures(),
        0,
        "{:?}",
        samples.failures(Duration::ZERO, Duration::MAX, |k| on[k] != 1)
    );
    assert!(
        followed <= 2 * INTERVAL + SLACK,
        "followed after {followed:?}"
    );
    assert!(back <= renamed + followed + SLACK, "{back:?}");
    // After the first store on the new host, mc-1's keys fail no more.
    let late = samples.failures(back, Duration::MAX, |k| on[k] == 1);
    assert!(late.is_empty(), "{late:?}");
    // No key changed owner: the router's answer for each is still its host's name.
    for (k, &i) in keys.iter().zip(&on) {
        let owner = value(router_addr, &format!("__memfleet__.route({k})"));
        assert_eq!(owner, Some(format!("{}:11211", target(i))), "{k}");
    }
    drop(router);
}
