//! The router through real sockets, in front of real `memfleet server`s: placement matches
//! the ring, multi-gets split and reassemble, `noreply` and quiet meta behave as against one
//! server, and a dead or hung server costs its own keys only (fast errors after the
//! knockout, one timeout while hung), then comes back.

use crate::support;
use memfleet_router::RunningRouter;
use memfleet_routing::from_toml;

use memfleet_server::Server;
use memfleet_testkit::free_port;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use support::{backend, server};

fn backends(n: usize) -> (Vec<Server>, Vec<u16>) {
    (0..n).map(|_| backend()).unzip()
}

/// A backend again on `port`, once the port is free (a parallel test's short-lived
/// connection may hold it for a moment).
fn restart(port: u16) -> Server {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match server(port) {
            Ok(s) => return s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("backend restarts on {port}: {e:#}"),
        }
    }
}

struct Client(BufReader<TcpStream>);

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client(BufReader::new(s))
    }

    fn send(&mut self, bytes: &[u8]) {
        self.0.get_mut().write_all(bytes).unwrap();
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.0.read_line(&mut l).unwrap();
        l
    }

    /// Sends and reads exactly `want.len()` bytes, which must be `want`.
    fn check(&mut self, request: &str, want: &str) {
        self.send(request.as_bytes());
        let mut got = vec![0; want.len()];
        self.0.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want, "request {request:?}");
    }
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

fn pool_toml(listen: u16, servers: &[u16], extra: &str) -> String {
    let list: Vec<String> = servers
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    format!(
        "[pools.main]\nlisten = \"127.0.0.1:{listen}\"\nservers = [{}]\n{extra}\n",
        list.join(", ")
    )
}

#[test]
fn keys_go_where_the_ring_says_and_multigets_reassemble() {
    let (_servers, ports) = backends(3);
    let pools = from_toml(&pool_toml(0, &ports, "")).unwrap();
    let ring = pools.pools[0].ring().unwrap();
    let router = RunningRouter::start(pools, 2, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    for i in 0..300 {
        c.check(
            &format!("set key{i} {i} 0 2\r\nv{}\r\n", i % 10),
            "STORED\r\n",
        );
    }
    // Each key is on the server the ring picks, and only there.
    for i in (0..300).step_by(7) {
        let key = format!("key{i}");
        let owner = ring.nodes()[ring.pick(key.as_bytes())].port;
        for &p in &ports {
            let mut direct = Client::connect(SocketAddr::from(([127, 0, 0, 1], p)));
            direct.send(format!("get {key}\r\n").as_bytes());
            let first = direct.line();
            assert_eq!(
                first.starts_with("VALUE"),
                p == owner,
                "{key} on {p}: {first}"
            );
        }
    }
    // A multi-get spanning every server, with a miss and a repeat, in the client's order.
    let mut want = String::new();
    for k in ["key5", "nope", "key17", "key5", "key250"] {
        if let Some(i) = k.strip_prefix("key") {
            let i: usize = i.parse().unwrap();
            want.push_str(&format!("VALUE {k} {i} 2\r\nv{}\r\n", i % 10));
        }
    }
    want.push_str("END\r\n");
    c.check("get key5 nope key17 key5 key250\r\n", &want);
    // Pipelined requests of every kind come back in order.
    c.check(
        "incr n 1\r\nset n 0 0 1\r\n5\r\nincr n 2\r\ndelete key1\r\nget key1\r\nversion\r\n",
        &format!(
            "NOT_FOUND\r\nSTORED\r\n7\r\nDELETED\r\nEND\r\nVERSION 1.6.45-memfleet-router-{}\r\n",
            env!("CARGO_PKG_VERSION")
        ),
    );
    // noreply and quiet meta: silent on success, then a marker proves the order.
    c.check(
        "set q 0 0 1 noreply\r\nx\r\nget q\r\n",
        "VALUE q 0 1\r\nx\r\nEND\r\n",
    );
    c.check(
        "mg nope v q\r\nmg q v q\r\nms q 1 q\r\ny\r\nmn\r\n",
        "VA 1\r\nx\r\nMN\r\n",
    );
    c.check("mg q v\r\n", "VA 1\r\ny\r\n");
    // The admin key says where a key goes.
    let owner = ring.nodes()[ring.pick(b"key5")].addr();
    c.check(
        "get __memfleet__.route(key5)\r\n",
        &format!(
            "VALUE __memfleet__.route(key5) 0 {}\r\n{owner}\r\nEND\r\n",
            owner.len()
        ),
    );
    // Errors stay memcached's.
    c.check("bogus\r\n", "ERROR\r\n");
    // (memcached 1.6.45 ends this one twice.)
    c.check(
        &format!("get {}\r\n", "k".repeat(251)),
        "CLIENT_ERROR bad command line format\r\n\r\n",
    );
    c.check("flush_all\r\nget key5\r\n", "OK\r\nEND\r\n");
}

#[test]
fn a_dead_server_costs_only_its_keys_and_comes_back() {
    let (servers, ports) = backends(3);
    let mut servers: Vec<Option<Server>> = servers.into_iter().map(Some).collect();
    let extra = "timeout_ms = 200\nserver_failure_limit = 2\nserver_retry_timeout_ms = 100\n";
    let pools = from_toml(&pool_toml(0, &ports, extra)).unwrap();
    let ring = pools.pools[0].ring().unwrap();
    let router = RunningRouter::start(pools, 2, Some("127.0.0.1:0".into())).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    let keys: Vec<String> = (0..60).map(|i| format!("k{i}")).collect();
    for k in &keys {
        c.check(&format!("set {k} 0 0 1\r\nx\r\n"), "STORED\r\n");
    }
    let dead = 1;
    servers[dead].take().unwrap().shutdown().unwrap();
    let on_dead = |k: &String| ring.nodes()[ring.pick(k.as_bytes())].port == ports[dead];
    // Its keys fail (connection refused, then marked down: fast), the others still work.
    for k in &keys {
        c.send(format!("get {k}\r\n").as_bytes());
        let first = c.line();
        if on_dead(k) {
            assert_eq!(first, "END\r\n", "a dead server's key is a miss");
        } else {
            assert!(first.starts_with("VALUE"), "{k}: {first}");
            c.line();
            c.line();
        }
    }
    let victim = keys.iter().find(|k| on_dead(k)).unwrap();
    c.send(format!("set {victim} 0 0 1\r\ny\r\n").as_bytes());
    assert!(c.line().starts_with("SERVER_ERROR"));
    let started = Instant::now();
    c.send(format!("set {victim} 0 0 1\r\ny\r\n").as_bytes());
    assert_eq!(
        c.line(),
        format!(
            "SERVER_ERROR server 127.0.0.1:{} is marked down\r\n",
            ports[dead]
        )
    );
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "marked down fails fast"
    );
    // The admin port shows it.
    let metrics = http_get(router.admin_addr.unwrap(), "/metrics");
    let down = format!(
        "memfleet_router_server_down{{pool=\"main\",server=\"127.0.0.1:{}\"}} 1\n",
        ports[dead]
    );
    assert!(
        metrics.starts_with("HTTP/1.1 200 OK") && metrics.contains(&down),
        "{metrics}"
    );
    // Back: the probe finds it and its keys work again (empty, as a restarted cache is).
    servers[dead] = Some(restart(ports[dead]));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        c.send(format!("set {victim} 0 0 1\r\nz\r\n").as_bytes());
        if c.line() == "STORED\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "the server never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.check(
        &format!("get {victim}\r\n"),
        &format!("VALUE {victim} 0 1\r\nz\r\nEND\r\n"),
    );
}

#[test]
fn a_hung_server_costs_one_timeout() {
    let (_server, live) = backend();
    // Accepts connections and never answers, like a stopped process.
    let hung = TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_port = hung.local_addr().unwrap().port();
    let extra = "timeout_ms = 300\nserver_failure_limit = 1\n";
    let pools = from_toml(&pool_toml(0, &[live, hung_port], extra)).unwrap();
    let ring = pools.pools[0].ring().unwrap();
    let router = RunningRouter::start(pools, 2, None).unwrap();
    let keys: Vec<String> = (0..40).map(|i| format!("h{i}")).collect();
    let on_hung = keys
        .iter()
        .find(|k| ring.nodes()[ring.pick(k.as_bytes())].port == hung_port)
        .unwrap();
    let on_live = keys
        .iter()
        .find(|k| ring.nodes()[ring.pick(k.as_bytes())].port == live)
        .unwrap();
    let mut c = Client::connect(router.addrs[0]);
    let started = Instant::now();
    c.send(format!("set {on_hung} 0 0 1\r\nx\r\n").as_bytes());
    assert_eq!(
        c.line(),
        format!("SERVER_ERROR server 127.0.0.1:{hung_port} timed out\r\n")
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    // Meanwhile another client's keys on the live server are served at once.
    let mut other = Client::connect(router.addrs[0]);
    let started = Instant::now();
    other.check(&format!("set {on_live} 0 0 1\r\nx\r\n"), "STORED\r\n");
    assert!(started.elapsed() < Duration::from_millis(200));
    // Now marked down: the hung server's keys fail fast.
    let started = Instant::now();
    c.send(format!("get {on_hung}\r\n").as_bytes());
    assert_eq!(c.line(), "END\r\n");
    assert!(started.elapsed() < Duration::from_millis(100));
    drop(hung);
}

#[test]
fn a_reload_reroutes_open_connections_and_a_bad_one_changes_nothing() {
    let (_servers, ports) = backends(2);
    // The same listen address in both configurations (the key a reload matches pools by).
    let listen = free_port();
    let one = from_toml(&pool_toml(listen, &ports[..1], "")).unwrap();
    let router = RunningRouter::start(one, 2, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    for i in 0..40 {
        c.check(&format!("set r{i} 0 0 1\r\na\r\n"), "STORED\r\n");
    }
    // Everything is on the first server.
    let mut first = Client::connect(SocketAddr::from(([127, 0, 0, 1], ports[0])));
    first.check(
        "get r0 r39\r\n",
        "VALUE r0 0 1\r\na\r\nVALUE r39 0 1\r\na\r\nEND\r\n",
    );
    // Add the second server: the same client connection now routes by the new ring.
    let two = from_toml(&pool_toml(listen, &ports, "")).unwrap();
    let ring = two.pools[0].ring().unwrap();
    router.reload(two);
    let moved = (0..40)
        .map(|i| format!("r{i}"))
        .find(|k| ring.nodes()[ring.pick(k.as_bytes())].port == ports[1])
        .expect("some key moves to the new server");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        c.send(format!("get {moved}\r\n").as_bytes());
        let line = c.line();
        if line == "END\r\n" {
            break; // asked the new server, which does not have it
        }
        c.line();
        c.line();
        assert!(Instant::now() < deadline, "the reload never applied");
        std::thread::sleep(Duration::from_millis(20));
    }
    c.check(&format!("set {moved} 0 0 1\r\nb\r\n"), "STORED\r\n");
    let mut second = Client::connect(SocketAddr::from(([127, 0, 0, 1], ports[1])));
    second.check(
        &format!("get {moved}\r\n"),
        &format!("VALUE {moved} 0 1\r\nb\r\nEND\r\n"),
    );
    // A configuration whose server does not resolve is refused; routing stays as it was.
    let bad = from_toml(&format!(
        "[pools.main]\nlisten = \"127.0.0.1:{listen}\"\nservers = [\"no-such-host.invalid:1\"]\n"
    ))
    .unwrap();
    router.reload(bad);
    std::thread::sleep(Duration::from_millis(300));
    c.check(
        &format!("get {moved}\r\n"),
        &format!("VALUE {moved} 0 1\r\nb\r\nEND\r\n"),
    );
}

#[test]
fn a_pool_can_listen_on_a_unix_socket() {
    use std::os::unix::net::UnixStream;
    let (_server, port) = backend();
    let path = std::env::temp_dir().join(format!("memfleet-router-{}.sock", std::process::id()));
    // A socket file left by an earlier run is replaced.
    let _stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(_stale);
    let toml = format!(
        "[pools.local]\nlisten = \"{}\"\nservers = [\"127.0.0.1:{port}\"]\n",
        path.display()
    );
    let _router = RunningRouter::start(from_toml(&toml).unwrap(), 1, None).unwrap();
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"set u 0 0 2\r\nhi\r\nget u\r\n").unwrap();
    let want = "STORED\r\nVALUE u 0 2\r\nhi\r\nEND\r\n";
    let mut got = vec![0; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), want);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_random_pool_spreads_one_key_over_every_server() {
    let (_servers, ports) = backends(3);
    let pools = from_toml(&pool_toml(0, &ports, "distribution = \"random\"")).unwrap();
    let router = RunningRouter::start(pools, 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    for i in 0..60 {
        c.check(&format!("set same 0 0 2\r\n{:02}\r\n", i), "STORED\r\n");
    }
    // With 60 random picks out of 3, every server got the key (a miss is 3 × (2/3)^60).
    for &p in &ports {
        let mut direct = Client::connect(SocketAddr::from(([127, 0, 0, 1], p)));
        direct.send(b"get same\r\n");
        let first = direct.line();
        assert!(first.starts_with("VALUE same 0 2"), "on {p}: {first}");
    }
}

/// Reads one `config get cluster` answer: (version, entries), checking ElastiCache's framing
/// (`CONFIG cluster 0 <len>`, `<len>` bytes of two `\n`-ended lines, `\r\n`, `END`).
fn cluster_config(c: &mut Client) -> (u64, String) {
    c.send(b"config get cluster\r\n");
    let head = c.line();
    let len: usize = head
        .strip_prefix("CONFIG cluster 0 ")
        .and_then(|l| l.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("{head:?}"))
        .parse()
        .unwrap();
    let mut data = vec![0; len + 2];
    std::io::Read::read_exact(&mut c.0, &mut data).unwrap();
    assert!(data.ends_with(b"\n\r\n"), "{data:?}");
    assert_eq!(c.line(), "END\r\n");
    let text = String::from_utf8(data[..len].to_vec()).unwrap();
    let (version, entries) = text.trim_end_matches('\n').split_once('\n').unwrap();
    (version.parse().unwrap(), entries.to_string())
}

#[test]
fn auto_discovery_answers_elasticache_s_config_get_cluster_and_follows_a_reload() {
    let (_servers, ports) = backends(2);
    let listen = free_port();
    let entry = |p: u16| format!("127.0.0.1|127.0.0.1|{p}");
    let one = from_toml(&pool_toml(listen, &ports[..1], "auto_discovery = true")).unwrap();
    let router = RunningRouter::start(one, 2, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    let (v1, entries) = cluster_config(&mut c);
    assert_eq!(entries, entry(ports[0]));
    assert!(v1 > 1_700_000_000, "a version from the clock: {v1}");
    // Asked again without a change: the same version.
    assert_eq!(cluster_config(&mut c), (v1, entry(ports[0])));
    // Other `config` forms are memcached's answer to an unknown command.
    c.check("config get nodes\r\n", "ERROR\r\n");
    c.check("config\r\n", "ERROR\r\n");
    // A reload adds the second server: the version grows, both are listed in ring order.
    let two = from_toml(&pool_toml(listen, &ports, "auto_discovery = true")).unwrap();
    router.reload(two);
    let want = format!("{} {}", entry(ports[0]), entry(ports[1]));
    let deadline = Instant::now() + Duration::from_secs(5);
    let v2 = loop {
        let (v, e) = cluster_config(&mut c);
        if e == want {
            break v;
        }
        assert!(Instant::now() < deadline, "the reload never showed: {e}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(v2 > v1, "{v2} after {v1}");
    // Back to one server: a newer version still, never an older one.
    let one = from_toml(&pool_toml(listen, &ports[..1], "auto_discovery = true")).unwrap();
    router.reload(one);
    let v3 = loop {
        let (v, e) = cluster_config(&mut c);
        if e == entry(ports[0]) {
            break v;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(v3 > v2, "{v3} after {v2}");
}

#[test]
fn without_auto_discovery_config_is_an_unknown_command() {
    let (_servers, ports) = backends(1);
    let config = from_toml(&pool_toml(free_port(), &ports, "")).unwrap();
    let router = RunningRouter::start(config, 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    c.check("config get cluster\r\n", "ERROR\r\n");
    c.check(
        "version\r\n",
        &format!(
            "VERSION 1.6.45-memfleet-router-{}\r\n",
            env!("CARGO_PKG_VERSION")
        ),
    );
}

/// Remote markers through the router (`remote_markers = true`) are the client library's: a
/// write the Rust client marks is marked for an application behind the router, and the
/// other way round (the scheme is `memfleet_client::remote_markers`, written once).
#[test]
fn remote_markers_through_the_router_are_the_client_library_s() {
    let (_servers, ports) = backends(1);
    let config = from_toml(&pool_toml(free_port(), &ports, "remote_markers = true")).unwrap();
    let router = RunningRouter::start(config, 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = format!("127.0.0.1:{}", ports[0]);
    let lib = rt.block_on(async { memfleet_client::Client::with_servers(&[&server]).unwrap() });
    let marked = |c: &mut Client, key: &str| {
        c.send(format!("get __memfleet__.remote_marked({key})\r\n").as_bytes());
        let head = c.line();
        let value = c.line();
        assert_eq!(c.line(), "END\r\n", "{head}");
        value.trim_end().to_string()
    };
    // Marked by the library, seen through the router.
    let marker = rt.block_on(lib.mark_remote_write("user:1", 30)).unwrap();
    assert_eq!(marked(&mut c, "user:1"), "1");
    rt.block_on(lib.delete(&marker)).unwrap();
    assert_eq!(marked(&mut c, "user:1"), "0");
    // Marked through the router: the answer is the marker's key, which the library sees.
    c.send(b"get __memfleet__.mark_remote(user:2,30)\r\n");
    let head = c.line();
    assert!(
        head.starts_with("VALUE __memfleet__.mark_remote(user:2,30) 0 "),
        "{head}"
    );
    let marker = c.line().trim_end().to_string();
    assert_eq!(c.line(), "END\r\n");
    assert!(marker.starts_with("remote-marker:user:2:"), "{marker}");
    assert_eq!(marker.len(), "remote-marker:user:2:".len() + 16);
    let got = rt.block_on(lib.get(&marker)).unwrap();
    assert!(got.is_some(), "the library finds the router's marker");
    // Without the setting, the admin keys are plain keys: a miss.
    let (_plain_servers, plain_ports) = backends(1);
    let plain = RunningRouter::start(
        from_toml(&pool_toml(free_port(), &plain_ports, "")).unwrap(),
        1,
        None,
    )
    .unwrap();
    let mut p = Client::connect(plain.addrs[0]);
    p.check("get __memfleet__.remote_marked(user:2)\r\n", "END\r\n");
}
