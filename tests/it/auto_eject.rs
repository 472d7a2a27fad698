//! twemproxy's `auto_eject_hosts`, through real processes: three `memfleet server`s behind
//! Debian's `nutcracker` and behind `memfleet router`, reading the *same* nutcracker.yml
//! (a ketama and a modula pool, md5 keys, `server_failure_limit: 1`,
//! `server_retry_timeout: 1000`).
//! One server is killed (`kill -9`): once it is ejected, every key of the pools is stored
//! and served by the two others, on the servers nutcracker puts them on; restarted, it gets
//! its keys back after the retry timeout, again as with nutcracker. The same pool written
//! in memfleet's TOML with `auto_eject_hosts = true` does the same; without it, a TOML pool
//! keeps the dead server's keys on it and fails them fast until it is back.

use crate::support;

use memfleet_routing::{from_toml, from_twemproxy_yaml};
use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, Conn, Killed};

/// Keys per pool.
const KEYS: usize = 100;
/// The pools' `server_retry_timeout`, ms: an ejected server is retried this often (and
/// nutcracker puts it back in its ring this long after ejecting it, so the requests
/// measured right after an ejection must fit in it).
const RETRY_MS: u64 = 1000;
/// Which of the three servers is killed.
const DEAD: usize = 1;

fn nutcracker() -> String {
    ["nutcracker", "/usr/sbin/nutcracker"]
        .into_iter()
        .find(|bin| Command::new(bin).arg("--version").output().is_ok())
        .map(String::from)
        .expect("nutcracker is not installed (scripts/test installs Debian's package)")
}

/// `memfleet server` on 127.0.0.1:`port`, answering when this returns.
fn server(port: u16) -> Killed {
    let child = Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args(["server", "-p", &port.to_string(), "-t", "1", "-m", "16"])
        .args(["-l", "127.0.0.1"])
        .stderr(Stdio::null())
        .spawn()
        .expect("memfleet server starts");
    let server = Killed(child);
    let mut c = Conn::new(port);
    c.send("version\r\n");
    assert!(c.read_line().starts_with("VERSION "));
    server
}

/// What this module asks of a text connection beyond `support::Conn`'s own.
trait ConnExt {
    fn value_or_line(&mut self) -> Result<String, String>;
}

impl ConnExt for Conn {
    /// One `get`'s reply: the value, or `Err` with the line that was not a value.
    fn value_or_line(&mut self) -> Result<String, String> {
        let line = self.read_line();
        let words: Vec<&str> = line.split_whitespace().collect();
        let ["VALUE", _, _, len] = words.as_slice() else {
            return Err(line);
        };
        let mut data = vec![0; len.parse::<usize>().unwrap() + 2];
        self.0.read_exact(&mut data).unwrap();
        assert_eq!(self.read_line(), "END\r\n");
        data.truncate(data.len() - 2);
        Ok(String::from_utf8(data).unwrap())
    }
}

/// Sets every key to `value` through `port`, pipelined: how many were `STORED`.
fn set_all(port: u16, keys: &[String], value: &str) -> usize {
    let mut c = Conn::new(port);
    let batch: String = keys
        .iter()
        .map(|k| format!("set {k} 0 0 {}\r\n{value}\r\n", value.len()))
        .collect();
    c.send(&batch);
    keys.iter()
        .filter(|_| c.read_line() == "STORED\r\n")
        .count()
}

/// Gets every key through `port`, one `get` each, pipelined: how many answered `value`.
fn served(port: u16, keys: &[String], value: &str) -> usize {
    let mut c = Conn::new(port);
    let batch: String = keys.iter().map(|k| format!("get {k}\r\n")).collect();
    c.send(&batch);
    keys.iter()
        .filter(|_| c.value_or_line().as_deref() == Ok(value))
        .count()
}

/// For each key, the index (in `ports`) of the server holding it with `value`, asked
/// directly, the servers of `skip` (dead) left out; a key with that value on two servers
/// fails the test. (Other values are copies left behind by a move.)
fn holders(ports: &[u16], skip: Option<usize>, keys: &[String], value: &str) -> Vec<Option<usize>> {
    let mut found = vec![None; keys.len()];
    for (s, port) in ports.iter().enumerate() {
        if Some(s) == skip {
            continue;
        }
        let mut c = Conn::new(*port);
        c.send(format!("get {}\r\n", keys.join(" ")));
        loop {
            let line = c.read_line();
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["END"] => break,
                ["VALUE", key, _, len] => {
                    let i = keys.iter().position(|k| k == key).unwrap();
                    let mut data = vec![0; len.parse::<usize>().unwrap() + 2];
                    c.0.read_exact(&mut data).unwrap();
                    if data[..data.len() - 2] == *value.as_bytes() {
                        assert_eq!(found[i], None, "{key} is on two servers");
                        found[i] = Some(s);
                    }
                }
                _ => panic!("unexpected reply {line:?}"),
            }
        }
    }
    found
}

fn flush(ports: &[u16]) {
    for port in ports {
        let mut c = Conn::new(*port);
        c.send("flush_all\r\n");
        assert_eq!(c.read_line(), "OK\r\n");
    }
}

/// One pool of the test's configurations.
struct Pool {
    name: &'static str,
    distribution: &'static str,
    listen: u16,
}

impl Pool {
    fn keys(&self) -> Vec<String> {
        (0..KEYS).map(|i| format!("{}:key{i}", self.name)).collect()
    }
}

fn yaml(pools: &[Pool], ports: &[u16]) -> String {
    let mut out = String::new();
    for p in pools {
        out += &format!(
            "{}:\n  listen: 127.0.0.1:{}\n  hash: md5\n  distribution: {}\n  \
             timeout: 400\n  auto_eject_hosts: true\n  server_failure_limit: 1\n  \
             server_retry_timeout: {RETRY_MS}\n  servers:\n",
            p.name, p.listen, p.distribution
        );
        for port in ports {
            out += &format!("   - 127.0.0.1:{port}:1\n");
        }
    }
    out
}

fn toml(pools: &[Pool], ports: &[u16], eject: bool) -> String {
    let servers: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    pools
        .iter()
        .map(|p| {
            format!(
                "[pools.{}]\nlisten = \"127.0.0.1:{}\"\nhash = \"md5\"\n\
                 distribution = \"{}\"\ntimeout_ms = 400\nauto_eject_hosts = {eject}\n\
                 server_failure_limit = 1\nserver_retry_timeout_ms = {RETRY_MS}\n\
                 servers = [{}]\n",
                p.name,
                p.listen,
                p.distribution,
                servers.join(", ")
            )
        })
        .collect()
}

/// A proxy: how its configuration is written, and its command line for that file.
struct Proxy {
    name: &'static str,
    file: &'static str,
    write: fn(&[Pool], &[u16]) -> String,
    command: fn(&Path) -> Command,
}

const NUTCRACKER: Proxy = Proxy {
    name: "nutcracker",
    file: "nutcracker.yml",
    write: yaml,
    command: |conf| {
        let mut c = Command::new(nutcracker());
        c.arg("-c")
            .arg(conf)
            .args(["-s", &free_port().to_string(), "-a", "127.0.0.1"])
            .stdout(Stdio::null());
        c
    },
};

const MEMFLEET_YAML: Proxy = Proxy {
    name: "memfleet router --twemproxy",
    file: "nutcracker.yml",
    write: yaml,
    command: |conf| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_memfleet"));
        c.args(["router", "-t", "2", "--twemproxy"]).arg(conf);
        c
    },
};

const MEMFLEET_TOML: Proxy = Proxy {
    name: "memfleet router --config (auto_eject_hosts = true)",
    file: "pools.toml",
    write: |pools, ports| toml(pools, ports, true),
    command: |conf| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_memfleet"));
        c.args(["router", "-t", "2", "--config"]).arg(conf);
        c
    },
};

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memfleet-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the configuration and starts the proxy once every pool's port accepts
/// connections; a port taken meanwhile (the proxy exits) gives the pools fresh ones.
fn start(proxy: &Proxy, pools: &mut [Pool], ports: &[u16], dir: &Path) -> Killed {
    let conf = dir.join(proxy.file);
    let log = dir.join(format!("{}.log", proxy.file));
    for _attempt in 0..5 {
        std::fs::write(&conf, (proxy.write)(pools, ports)).unwrap();
        let mut child = Killed(
            (proxy.command)(&conf)
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut listening = 0;
        while listening < pools.len() && child.0.try_wait().unwrap().is_none() {
            if TcpStream::connect(("127.0.0.1", pools[listening].listen)).is_ok() {
                listening += 1;
                continue;
            }
            assert!(Instant::now() < deadline, "{} never listened", proxy.name);
            std::thread::sleep(Duration::from_millis(20));
        }
        if listening == pools.len() {
            return child;
        }
        for p in pools.iter_mut() {
            p.listen = free_port();
        }
    }
    panic!(
        "{} could not bind its ports in 5 attempts; it said:\n{}",
        proxy.name,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// What one proxy did with one pool.
#[derive(Debug)]
struct Seen {
    /// Where each key was with every server up.
    before: Vec<Option<usize>>,
    /// Requests for a dead server's key that failed before it was ejected.
    failed_before_eject: usize,
    /// Keys stored, then served, right after the ejection (of `KEYS`).
    stored: usize,
    served: usize,
    /// Where each key was stored while the server was ejected.
    ejected: Vec<Option<usize>>,
    /// Where each key was stored once the server was back.
    back: Vec<Option<usize>>,
}

/// Runs the scenario through `proxy`: keys stored with three servers, one killed and
/// ejected, keys stored and served on the two others, the server restarted, keys back.
fn eject_and_return(
    proxy: &Proxy,
    pools: &mut [Pool],
    ports: &[u16],
    servers: &mut [Option<Killed>],
    dir: &Path,
) -> Vec<Seen> {
    flush(ports);
    let _proxy = start(proxy, pools, ports, dir);
    let mut seen = Vec::new();
    for p in pools.iter() {
        let keys = p.keys();
        assert_eq!(
            set_all(p.listen, &keys, "a"),
            KEYS,
            "{}: {}",
            proxy.name,
            p.name
        );
        seen.push(holders(ports, None, &keys, "a"));
    }
    // kill -9.
    drop(servers[DEAD].take());
    let mut out = Vec::new();
    for (p, before) in pools.iter().zip(seen) {
        let keys = p.keys();
        let victim = &keys[before.iter().position(|s| *s == Some(DEAD)).unwrap()];
        // The dead server's key until it is stored elsewhere: the request that finds the
        // server dead may fail (the failure limit is 1), the next goes to a live server.
        let mut failed = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while set_all(p.listen, std::slice::from_ref(victim), "v") == 0 {
            failed += 1;
            assert!(
                Instant::now() < deadline,
                "{}: {victim} never stored",
                p.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // At once (nutcracker puts the server back in its ring after the retry timeout).
        let stored = set_all(p.listen, &keys, "b");
        let served = served(p.listen, &keys, "b");
        out.push(Seen {
            before,
            failed_before_eject: failed,
            stored,
            served,
            ejected: holders(ports, Some(DEAD), &keys, "b"),
            back: Vec::new(),
        });
    }
    servers[DEAD] = Some(server(ports[DEAD]));
    for (p, seen) in pools.iter().zip(&mut out) {
        let keys = p.keys();
        let i = seen.before.iter().position(|s| *s == Some(DEAD)).unwrap();
        // Retried after the retry timeout: its keys go back to it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            set_all(p.listen, &keys[i..=i], "c");
            let on = holders(&ports[DEAD..=DEAD], None, &keys[i..=i], "c");
            if on[0].is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {} never went back to the restarted server",
                proxy.name,
                p.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    flush(ports);
    for (p, seen) in pools.iter().zip(&mut out) {
        let keys = p.keys();
        assert_eq!(
            set_all(p.listen, &keys, "d"),
            KEYS,
            "{}: {}",
            proxy.name,
            p.name
        );
        seen.back = holders(ports, None, &keys, "d");
    }
    out
}

/// Three servers, in the order twemproxy sorts them (ports of five digits: by number), so
/// that a TOML pool listing them so has the same modula slots as the YAML one.
fn three_servers() -> (Vec<Option<Killed>>, Vec<u16>) {
    let mut ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    ports.sort_by_key(|p| p.to_string());
    (ports.iter().map(|p| Some(server(*p))).collect(), ports)
}

#[test]
fn an_ejected_server_s_keys_are_stored_and_served_on_the_others_as_by_nutcracker() {
    let (mut servers, ports) = three_servers();
    let mut pools = [
        Pool {
            name: "ketama",
            distribution: "ketama",
            listen: free_port(),
        },
        Pool {
            name: "modula",
            distribution: "modula",
            listen: free_port(),
        },
    ];
    let dir = scratch("auto-eject");
    let runs: Vec<(&Proxy, Vec<Seen>)> = [NUTCRACKER, MEMFLEET_YAML, MEMFLEET_TOML]
        .iter()
        .map(|proxy| {
            let seen = eject_and_return(proxy, &mut pools, &ports, &mut servers, &dir);
            (proxy, seen)
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);

    // What memfleet's rings predict: the live ring without the dead server.
    let parsed = from_twemproxy_yaml(&yaml(&pools, &ports)).unwrap();
    let mut failures = Vec::new();
    for (p, pool) in pools.iter().enumerate() {
        let ring = parsed.iter().find(|c| c.name == pool.name).unwrap().ring();
        let ring = ring.unwrap();
        let index_of = |port: u16| ports.iter().position(|p| *p == port);
        let dead = ring
            .nodes()
            .iter()
            .position(|n| n.port == ports[DEAD])
            .unwrap();
        let live = ring.without(&[dead]).unwrap();
        let predicted: Vec<Option<usize>> = pool
            .keys()
            .iter()
            .map(|k| index_of(ring.nodes()[live.pick(k.as_bytes())].port))
            .collect();
        let (_, reference) = &runs[0];
        let reference = &reference[p];
        let moved = (0..KEYS)
            .filter(|i| reference.before[*i] != reference.ejected[*i])
            .count();
        for (proxy, seen) in &runs {
            let seen = &seen[p];
            println!(
                "{} / {}: {} failed before the ejection; {}/{KEYS} stored and {}/{KEYS} \
                 served while ejected; {moved} keys moved",
                proxy.name, pool.name, seen.failed_before_eject, seen.stored, seen.served
            );
            let mut check = |ok: bool, what: &str| {
                if !ok {
                    failures.push(format!("{} / {}: {what}", proxy.name, pool.name));
                }
            };
            check(seen.stored == KEYS, "not every key stored while ejected");
            check(seen.served == KEYS, "not every key served while ejected");
            check(
                seen.before == reference.before,
                "placement differs (all up)",
            );
            check(
                seen.ejected == reference.ejected,
                "placement differs (ejected)",
            );
            check(seen.back == reference.back, "placement differs (back)");
            check(seen.back == seen.before, "keys not back where they were");
            check(seen.ejected == predicted, "not where Ring::without says");
            if proxy.name != NUTCRACKER.name {
                check(
                    seen.failed_before_eject <= 1,
                    "more failures than server_failure_limit",
                );
            }
        }
        // ketama moves only the dead server's keys (modula, most keys).
        let dead_keys = reference.before.iter().filter(|s| **s == Some(DEAD));
        assert!(dead_keys.count() > 10, "{}", pool.name);
        if pool.distribution == "ketama" {
            let only_dead = (0..KEYS).all(|i| {
                reference.before[i] == Some(DEAD) || reference.before[i] == reference.ejected[i]
            });
            assert!(only_dead, "ketama moved a live server's key");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_toml_pool_without_auto_eject_keeps_a_dead_server_s_keys_and_fails_them_fast() {
    let (mut servers, ports) = three_servers();
    let mut pools = [Pool {
        name: "kept",
        distribution: "ketama",
        listen: free_port(),
    }];
    let dir = scratch("no-eject");
    let proxy = Proxy {
        name: "memfleet router --config",
        file: "pools.toml",
        write: |pools, ports| toml(pools, ports, false),
        command: MEMFLEET_TOML.command,
    };
    let _router = start(&proxy, &mut pools, &ports, &dir);
    let pool = &pools[0];
    let keys = pool.keys();
    assert_eq!(set_all(pool.listen, &keys, "a"), KEYS);
    let before = holders(&ports, None, &keys, "a");
    let config = from_toml(&toml(&pools, &ports, false)).unwrap();
    let ring = config.pools[0].ring().unwrap();
    let on_dead: Vec<bool> = keys
        .iter()
        .map(|k| ring.nodes()[ring.pick(k.as_bytes())].port == ports[DEAD])
        .collect();
    assert!((0..KEYS).all(|i| on_dead[i] == (before[i] == Some(DEAD))));
    let dead_keys = on_dead.iter().filter(|d| **d).count();
    assert!(dead_keys > 10);

    drop(servers[DEAD].take());
    let victim = &keys[on_dead.iter().position(|d| *d).unwrap()];
    // Marked down after one failure.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = Conn::new(pool.listen);
        c.send(format!("set {victim} 0 0 1\r\nv\r\n"));
        let reply = c.read_line();
        assert_ne!(reply, "STORED\r\n", "a dead server's key stored elsewhere");
        if reply.contains("is marked down") {
            break;
        }
        assert!(Instant::now() < deadline, "never marked down: {reply}");
    }
    // Its keys fail fast; the others' work.
    let started = Instant::now();
    let stored = set_all(pool.listen, &keys, "b");
    let took = started.elapsed();
    let hits = served(pool.listen, &keys, "b");
    println!(
        "{stored} stored and {hits} served of {KEYS} in {took:?}; {dead_keys} on the dead server"
    );
    assert_eq!(stored, KEYS - dead_keys);
    assert_eq!(hits, KEYS - dead_keys);
    assert!(took < Duration::from_secs(2), "no timeouts: {took:?}");
    let ejected = holders(&ports, Some(DEAD), &keys, "b");
    assert!(
        (0..KEYS).all(|i| if on_dead[i] {
            ejected[i].is_none()
        } else {
            ejected[i] == before[i]
        }),
        "a key moved"
    );
    // Back after a restart (probed from the retry timeout on).
    servers[DEAD] = Some(server(ports[DEAD]));
    let deadline = Instant::now() + Duration::from_secs(10);
    while set_all(pool.listen, std::slice::from_ref(victim), "c") == 0 {
        assert!(Instant::now() < deadline, "the server never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    let on = holders(&ports, None, std::slice::from_ref(victim), "c");
    assert_eq!(on[0], Some(DEAD));
    let _ = std::fs::remove_dir_all(&dir);
}
