//! Routing compatible with twemproxy: Debian's `nutcracker` spreads keys over four
//! `memfleet server` backends, one pool per key hash and distribution (ketama and modula,
//! every hash twemproxy offers, weights and named servers); then each backend is asked which
//! keys it holds, and every key must be where memfleet says it goes after reading the *same
//! YAML file* (`memfleet_routing::from_twemproxy_yaml`). This is what lets a twemproxy user
//! move a live pool to memfleet without moving a key.

use crate::support;

use memfleet_routing::{from_twemproxy_yaml, KeyHash, Node};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use support::{connect as connect_with, free_port, Killed};

const KEYS: usize = 200;

fn nutcracker() -> Option<String> {
    ["nutcracker", "/usr/sbin/nutcracker"]
        .into_iter()
        .find(|bin| Command::new(bin).arg("--version").output().is_ok())
        .map(String::from)
}

/// One pool of the generated nutcracker.yml.
struct Pool {
    name: String,
    port: u16,
    hash: KeyHash,
    distribution: &'static str,
    hash_tag: bool,
    nodes: Vec<Node>,
}

impl Pool {
    fn yml(&self) -> String {
        let mut y = format!(
            "{}:\n  listen: 127.0.0.1:{}\n  hash: {}\n  distribution: {}\n  \
             auto_eject_hosts: false\n",
            self.name,
            self.port,
            self.hash.name(),
            self.distribution
        );
        if self.hash_tag {
            y.push_str("  hash_tag: \"{}\"\n");
        }
        y.push_str("  servers:\n");
        for n in &self.nodes {
            y.push_str(&format!("   - {}:{}:{}", n.host, n.port, n.weight));
            if let Some(name) = &n.name {
                y.push_str(&format!(" {name}"));
            }
            y.push('\n');
        }
        y
    }

    fn key(&self, i: usize) -> String {
        if self.hash_tag {
            // Ten keys share each tag.
            format!("{}:{{user{}}}:key{i}", self.name, i / 10)
        } else {
            format!("{}:key{i}", self.name)
        }
    }
}

/// Which of `keys` the server on `port` holds.
fn held(port: u16, keys: &[String]) -> Vec<bool> {
    let mut s = BufReader::new(connect_to(port));
    s.get_mut()
        .write_all(format!("get {}\r\n", keys.join(" ")).as_bytes())
        .unwrap();
    let mut found = vec![false; keys.len()];
    let mut line = String::new();
    loop {
        line.clear();
        s.read_line(&mut line).unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["END"] => return found,
            ["VALUE", key, _, len] => {
                let i = keys.iter().position(|k| k == key).expect("a key asked for");
                found[i] = true;
                let mut data = vec![0; len.parse::<usize>().unwrap() + 2];
                s.read_exact(&mut data).unwrap();
            }
            _ => panic!("unexpected reply {line:?}"),
        }
    }
}

#[test]
fn keys_land_where_twemproxy_puts_them() {
    let Some(bin) = nutcracker() else {
        panic!("nutcracker is not installed (scripts/test installs Debian's package)");
    };
    let memfleet = env!("CARGO_BIN_EXE_memfleet");
    let backend_ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let _backends: Vec<Killed> = backend_ports
        .iter()
        .map(|p| {
            Killed(
                Command::new(memfleet)
                    .args(["server", "-p", &p.to_string(), "-t", "1", "-m", "16"])
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    for p in &backend_ports {
        drop(connect_to(*p));
    }
    let node = |i: usize, weight: u32, named: bool| Node {
        host: "127.0.0.1".into(),
        port: backend_ports[i],
        weight,
        name: named.then(|| format!("server{i}")),
    };
    let mut pools: Vec<Pool> = Vec::new();
    for (h, _) in KeyHash::ALL {
        for distribution in ["ketama", "modula"] {
            pools.push(Pool {
                name: format!("{}_{distribution}", h.name()),
                port: free_port(),
                hash: h,
                distribution,
                hash_tag: false,
                nodes: (0..4).map(|i| node(i, 1, false)).collect(),
            });
        }
    }
    // Weights, and named servers (the name is hashed instead of the address).
    for (suffix, weights, named) in [
        ("weighted", [1, 2, 3, 5], false),
        ("named", [1, 1, 1, 1], true),
    ] {
        for distribution in ["ketama", "modula"] {
            pools.push(Pool {
                name: format!("fnv1a_64_{distribution}_{suffix}"),
                port: free_port(),
                hash: KeyHash::Fnv1a64,
                distribution,
                hash_tag: false,
                nodes: (0..4).map(|i| node(i, weights[i], named)).collect(),
            });
        }
    }
    pools.push(Pool {
        name: "murmur_ketama_tagged".into(),
        port: free_port(),
        hash: KeyHash::Murmur,
        distribution: "ketama",
        hash_tag: true,
        nodes: (0..4).map(|i| node(i, 1, false)).collect(),
    });
    let dir = std::env::temp_dir().join(format!("memfleet-nutcracker-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("nutcracker.yml");
    // memfleet reads the same file.
    let yml: String = pools.iter().map(Pool::yml).collect();
    let parsed = from_twemproxy_yaml(&yml).expect("memfleet reads the nutcracker.yml");
    // Through nutcracker, then through `memfleet router` on the very same file.
    let nutcracker = start_proxy(&mut pools, &conf, |conf| {
        let mut c = Command::new(&bin);
        c.arg("-c")
            .arg(conf)
            .args(["-s", &free_port().to_string(), "-a", "127.0.0.1"])
            .stdout(Stdio::null());
        c
    });
    let by_nutcracker = place(&pools, &backend_ports);
    drop(nutcracker);
    for p in &backend_ports {
        let mut s = BufReader::new(connect_to(*p));
        s.get_mut().write_all(b"flush_all\r\n").unwrap();
        let mut line = String::new();
        s.read_line(&mut line).unwrap();
        assert_eq!(line, "OK\r\n");
    }
    let router = start_proxy(&mut pools, &conf, |conf| {
        let mut c = Command::new(memfleet);
        c.arg("router").arg("--twemproxy").arg(conf);
        c
    });
    let by_memfleet = place(&pools, &backend_ports);
    drop(router);
    let _ = std::fs::remove_dir_all(&dir);

    let mut failures = Vec::new();
    for (p, pool) in pools.iter().enumerate() {
        let ring = parsed
            .iter()
            .find(|c| c.name == pool.name)
            .expect("every pool parsed")
            .ring()
            .unwrap();
        let (mut wrong, mut differ) = (0, 0);
        for i in 0..KEYS {
            let key = pool.key(i);
            let predicted = ring.nodes()[ring.pick(key.as_bytes())].port;
            if backend_ports[by_nutcracker[p][i]] != predicted {
                wrong += 1;
            }
            if by_memfleet[p][i] != by_nutcracker[p][i] {
                differ += 1;
            }
        }
        if wrong + differ > 0 {
            failures.push(format!(
                "{}: {wrong} of {KEYS} keys not where the ring says, {differ} placed \
                 differently by memfleet router and nutcracker",
                pool.name
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Writes the pools to `conf` and starts a proxy on it (`command` builds its command line),
/// once every pool's port accepts connections. The ports were free a moment before; if one
/// was taken meanwhile (parallel tests open connections from the same port range), the
/// proxy exits at start: the pools get fresh ports and it is started again.
fn start_proxy(
    pools: &mut [Pool],
    conf: &std::path::Path,
    command: impl Fn(&std::path::Path) -> Command,
) -> Killed {
    for _attempt in 0..5 {
        let yml: String = pools.iter().map(Pool::yml).collect();
        std::fs::write(conf, yml).unwrap();
        let mut proxy = Killed(command(conf).stderr(Stdio::null()).spawn().unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut listening = 0;
        while listening < pools.len() {
            if proxy.0.try_wait().unwrap().is_some() {
                break; // could not bind: new ports
            }
            if std::net::TcpStream::connect(("127.0.0.1", pools[listening].port)).is_ok() {
                listening += 1;
                continue;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the proxy never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if listening == pools.len() {
            return proxy;
        }
        for p in pools.iter_mut() {
            p.port = free_port();
        }
    }
    panic!("the proxy could not bind its ports in 5 attempts");
}

/// Stores every pool's keys through the proxy listening on the pools' ports, then asks each
/// backend which keys it holds: the backend index of every key, per pool.
fn place(pools: &[Pool], backend_ports: &[u16]) -> Vec<Vec<usize>> {
    for pool in pools {
        let mut s = BufReader::new(connect_to(pool.port));
        let mut batch = String::new();
        for i in 0..KEYS {
            batch.push_str(&format!("set {} 0 0 1\r\nx\r\n", pool.key(i)));
        }
        s.get_mut().write_all(batch.as_bytes()).unwrap();
        let mut line = String::new();
        for _ in 0..KEYS {
            line.clear();
            s.read_line(&mut line).unwrap();
            assert_eq!(line, "STORED\r\n", "pool {}", pool.name);
        }
    }
    pools
        .iter()
        .map(|pool| {
            let keys: Vec<String> = (0..KEYS).map(|i| pool.key(i)).collect();
            let holders: Vec<Vec<bool>> = backend_ports.iter().map(|p| held(*p, &keys)).collect();
            (0..KEYS)
                .map(|i| {
                    let on: Vec<usize> = (0..backend_ports.len())
                        .filter(|b| holders[*b][i])
                        .collect();
                    assert_eq!(on.len(), 1, "{} is on backends {on:?}", keys[i]);
                    on[0]
                })
                .collect()
        })
        .collect()
}

fn connect_to(port: u16) -> std::net::TcpStream {
    connect_with(port, std::time::Duration::from_secs(10))
}
