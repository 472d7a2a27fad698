//! `memfleet router` as an operator changing a fleet runs it, with real `memfleet server`
//! processes behind a real router process: per-pool `item_size_max` (a 2 MB value through
//! to servers running `-I 4m`), twemproxy 0.5's listener keys (`client_connections`,
//! `reuseport`, `tcpkeepalive`, `backlog`, `preconnect`) with their meaning.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, memfleet_server, Conn, Killed};

/// `memfleet router ARGS FILE` (stderr kept in the test's output on failure through the
/// assertion messages), once `port` answers `version`.
fn router(args: &[&str], file: &std::path::Path, port: u16) -> Killed {
    let child = Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .arg("router")
        .args(args)
        .arg(file)
        .stderr(Stdio::null())
        .spawn()
        .expect("memfleet router starts");
    let router = Killed(child);
    assert!(until_serving(port), "the router never served on {port}");
    router
}

/// Waits until `port` accepts and answers `version`.
fn until_serving(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut s = BufReader::new(s);
            if s.get_mut().write_all(b"version\r\n").is_ok() {
                let mut line = String::new();
                if s.read_line(&mut line).is_ok() && line.starts_with("VERSION ") {
                    return true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A configuration file of its own in the temporary directory.
fn config_file(name: &str, text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "memfleet-router-operator-{}-{name}",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// What this module asks of a text connection beyond `support::Conn`'s own.
trait ConnExt {
    fn set(&mut self, command: &str, key: &str, value: &[u8]) -> String;
    fn ms(&mut self, key: &str, value: &[u8]) -> String;
    fn get_bytes(&mut self, key: &str) -> Option<Vec<u8>>;
}

impl ConnExt for Conn {
    /// `set KEY 0 0 <len>` of `value`: the reply line.
    fn set(&mut self, command: &str, key: &str, value: &[u8]) -> String {
        let mut req = format!("{command} {key} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.line(&req)
    }

    /// `ms KEY <len> T0` of `value`: the reply line.
    fn ms(&mut self, key: &str, value: &[u8]) -> String {
        let mut req = format!("ms {key} {} T0\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.line(&req)
    }

    /// A get's value, if any, byte for byte.
    fn get_bytes(&mut self, key: &str) -> Option<Vec<u8>> {
        let first = self.line(format!("get {key}\r\n").as_bytes());
        if first == "END\r\n" {
            return None;
        }
        let len: usize = first
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("get {key}: {first:?}"));
        let mut data = vec![0; len + 2];
        self.0.read_exact(&mut data).unwrap();
        data.truncate(len);
        let mut end = String::new();
        self.0.read_line(&mut end).unwrap();
        assert_eq!(end, "END\r\n");
        Some(data)
    }
}

const TOO_LARGE: &str = "SERVER_ERROR object too large for cache\r\n";

/// memcached's item overhead with CAS (48 + the key's NUL + 8 + the value's CRLF), as the
/// server and the router count it.
const OVERHEAD: usize = 59;

#[test]
fn each_pool_lets_items_through_up_to_its_item_size_max() {
    let (_a, a) = memfleet_server(&["-t", "1", "-m", "64", "-I", "4m"]);
    let (_b, b) = memfleet_server(&["-t", "1", "-m", "64", "-I", "4m"]);
    assert!(until_serving(a) && until_serving(b));
    let (big, small, tree) = (free_port(), free_port(), free_port());
    let file = config_file(
        "item-size.toml",
        &format!(
            "[pools.big]\nlisten = \"127.0.0.1:{big}\"\nitem_size_max = 4194304\n\
             servers = [\"127.0.0.1:{a}\"]\n\
             [pools.small]\nlisten = \"127.0.0.1:{small}\"\nservers = [\"127.0.0.1:{b}\"]\n\
             [routes.both]\nlisten = \"127.0.0.1:{tree}\"\ntype = \"prefix\"\n\
             prefixes = {{ \"s:\" = \"small\" }}\ndefault = \"big\"\n"
        ),
    );
    let _router = router(&["-t", "1", "--config"], &file, big);
    assert!(until_serving(tree) && until_serving(small));
    let two_mb: Vec<u8> = (0..2_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();

    // The pool's own listener: 2,000,000 bytes pass to a server running -I 4m, and back.
    let mut c = Conn::new(big);
    assert_eq!(c.set("set", "k", &two_mb), "STORED\r\n");
    assert_eq!(c.get_bytes("k").as_deref(), Some(&two_mb[..]));
    // The largest item 4 MiB holds for this key passes; one byte more is refused as
    // memcached -I 4m refuses it, and the data block is swallowed (the connection goes on).
    let largest = vec![b'x'; (4 << 20) - OVERHEAD - 1];
    assert_eq!(c.set("set", "k", &largest), "STORED\r\n");
    let over = vec![b'x'; (4 << 20) - OVERHEAD];
    assert_eq!(c.set("set", "k", &over), TOO_LARGE);
    assert_eq!(c.ms("k", &over), TOO_LARGE);
    assert_eq!(c.get_bytes("k").map(|v| v.len()), Some(largest.len()));

    // A pool without item_size_max keeps memcached's 1 MiB, whatever its servers take.
    let mut c = Conn::new(small);
    for command in ["set", "add", "replace", "append", "prepend"] {
        assert_eq!(c.set(command, "k", &two_mb), TOO_LARGE, "{command}");
    }
    assert_eq!(c.line(b"cas k 0 0 1 1\r\nx\r\n"), "NOT_FOUND\r\n");
    let one_mb_over = vec![b'y'; (1 << 20) - OVERHEAD];
    let mut cas = format!("cas k 0 0 {} 1\r\n", one_mb_over.len()).into_bytes();
    cas.extend_from_slice(&one_mb_over);
    cas.extend_from_slice(b"\r\n");
    assert_eq!(c.line(&cas), TOO_LARGE);
    assert_eq!(c.ms("k", &two_mb), TOO_LARGE);
    assert_eq!(c.set("set", "k", b"fits"), "STORED\r\n");
    assert_eq!(c.get_bytes("k").as_deref(), Some(&b"fits"[..]));

    // Through a route tree, each key's pool decides.
    let mut c = Conn::new(tree);
    assert_eq!(c.set("set", "b:k", &two_mb), "STORED\r\n");
    assert_eq!(c.get_bytes("b:k").as_deref(), Some(&two_mb[..]));
    assert_eq!(c.ms("b:m", &two_mb), "HD\r\n");
    for command in ["set", "add", "replace", "append", "prepend"] {
        assert_eq!(c.set(command, "s:k", &two_mb), TOO_LARGE, "{command}");
    }
    assert_eq!(c.ms("s:k", &two_mb), TOO_LARGE);
    assert_eq!(c.set("set", "s:k", b"small"), "STORED\r\n");
    // Over every pool's limit: refused as it arrives, the connection goes on.
    assert_eq!(c.set("set", "b:k", &over), TOO_LARGE);
    assert_eq!(c.get_bytes("s:k").as_deref(), Some(&b"small"[..]));
    let _ = std::fs::remove_file(file);
}

/// The state of the kernel's timer of the TCP socket from `local` to `remote` port
/// (`/proc/net/tcp`'s `tr`: 2 is the keepalive timer).
fn tcp_timer(local: u16, remote: u16) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
        if port(f[1])? == local && port(f[2])? == remote {
            u32::from_str_radix(f[5].split(':').next()?, 16).ok()
        } else {
            None
        }
    })
}

/// Waits (up to 10 s) until `ok`.
fn eventually(mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The server's `STAT curr_connections`.
fn curr_connections(port: u16) -> u64 {
    let mut c = Conn::new(port);
    c.0.get_mut().write_all(b"stats\r\n").unwrap();
    let mut found = 0;
    loop {
        let mut l = String::new();
        c.0.read_line(&mut l).unwrap();
        if l == "END\r\n" || l.is_empty() {
            return found;
        }
        if let Some(v) = l.strip_prefix("STAT curr_connections ") {
            found = v.trim().parse().unwrap();
        }
    }
}

#[test]
fn a_nutcracker_file_with_every_twemproxy_0_5_key_runs_as_twemproxy_reads_it() {
    let (_s, server) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (_idle, idle_server) = memfleet_server(&["-t", "1", "-m", "16"]);
    // preconnect happens once, at start: the servers must be up by then.
    assert!(until_serving(server) && until_serving(idle_server));
    let (port, other) = (free_port(), free_port());
    let file = config_file(
        "nutcracker.yml",
        &format!(
            "alpha:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  hash_tag: \"{{}}\"\n  \
             distribution: ketama\n  timeout: 400\n  backlog: 1024\n  client_connections: 2\n  \
             redis: false\n  tcpkeepalive: true\n  reuseport: true\n  redis_db: 0\n  \
             preconnect: true\n  auto_eject_hosts: false\n  server_connections: 2\n  \
             server_retry_timeout: 2000\n  server_failure_limit: 3\n  servers:\n   \
             - 127.0.0.1:{server}:1\n\
             beta:\n  listen: 127.0.0.1:{other}\n  servers:\n   - 127.0.0.1:{idle_server}:1\n"
        ),
    );
    let router = router(&["-t", "1", "--twemproxy"], &file, port);
    // until_serving's own connections are closed; wait for the router to see it.
    std::thread::sleep(Duration::from_millis(200));

    // preconnect: both of alpha's server connections are open before any request reaches
    // the server (the stats connection is the third); beta's server sees none.
    eventually(|| curr_connections(server) == 3);
    assert_eq!(curr_connections(idle_server), 1, "beta does not preconnect");

    // client_connections: 2 clients at once; a third is closed at once; a place that frees
    // up admits the next one.
    let mut one = Conn::new(port);
    let mut two = Conn::new(port);
    assert_eq!(one.line(b"set k 0 0 1\r\nv\r\n"), "STORED\r\n");
    assert_eq!(two.line(b"get k\r\n"), "VALUE k 0 1\r\n");
    let mut third = TcpStream::connect(("127.0.0.1", port)).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = third.write_all(b"version\r\n");
    let mut buf = [0u8; 64];
    assert!(
        matches!(third.read(&mut buf), Ok(0) | Err(_)),
        "a third client was served"
    );
    // tcpkeepalive: the router's side of a client's connection runs the keepalive timer.
    let client_port = one.0.get_ref().local_addr().unwrap().port();
    assert_eq!(tcp_timer(port, client_port), Some(2), "no keepalive timer");
    drop(one);
    eventually(|| {
        let mut c = Conn::new(port);
        c.0.get_mut().write_all(b"version\r\n").is_ok() && {
            let mut l = String::new();
            matches!(c.0.read_line(&mut l), Ok(n) if n > 0)
        }
    });

    // reuseport: another socket may listen on the router's port (SO_REUSEPORT on both);
    // beta, without it, keeps its port to itself.
    let reuse = |p: u16| {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.set_reuse_port(true)?;
        s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], p)).into())?;
        s.listen(1)
    };
    assert!(reuse(port).is_ok(), "alpha's port is not shared");
    assert!(reuse(other).is_err(), "beta's port is shared");
    drop(router);
    let _ = std::fs::remove_file(file);
}

/// `memfleet router ARGS`: (exit status, stdout, stderr).
fn memfleet_router(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .arg("router")
        .args(args)
        .output()
        .expect("memfleet router runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn validate_config_and_dash_t_check_a_file_and_bind_nothing() {
    // A port the check must leave alone: it is held here, and nothing may bind it.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let good = config_file(
        "good.toml",
        &format!(
            "[pools.a]\nlisten = \"127.0.0.1:{port}\"\nservers = [\"127.0.0.1:1\"]\n\
             [routes.r]\nlisten = \"/tmp/memfleet-never-{port}.sock\"\ntype = \"operation\"\n\
             default = \"a\"\n"
        ),
    );
    let good_path = good.to_str().unwrap();
    for args in [
        vec!["--validate-config", good_path],
        vec!["-t", "--config", good_path],
        vec!["--config", good_path, "-t"],
        vec!["--test-conf", "--config", good_path],
    ] {
        let (code, out, err) = memfleet_router(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            out.contains("OK: 1 pool(s), 1 route(s), 2 listener(s)"),
            "{args:?}: {out}"
        );
    }
    assert!(!std::path::Path::new(&format!("/tmp/memfleet-never-{port}.sock")).exists());

    // Every problem, each on its own line, and a failure status.
    let bad = config_file(
        "bad.toml",
        "[pools.a]\nlisten = \"127.0.0.1:7001\"\nservers = []\n\
         [pools.b]\nlisten = \"127.0.0.1:7002\"\nitem_size_max = 10\nservers = [\"127.0.0.1:1\"]\n\
         [pools.c]\nlisten = \"127.0.0.1:7003\"\nservers = [\"127.0.0.1:2\"]\ncolour = \"blue\"\n\
         [routes.r]\ntype = \"gutter\"\nmain = \"a\"\n",
    );
    let bad_path = bad.to_str().unwrap();
    for args in [
        vec!["--validate-config", bad_path],
        vec!["-t", "--config", bad_path],
    ] {
        let (code, out, err) = memfleet_router(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(out.is_empty(), "{out}");
        for problem in [
            "pool a: has no servers",
            "pool b: item_size_max = 10 is out of range",
            "pool c: unknown field `colour`",
            "route r: a gutter route needs \"gutter\"",
            "4 problem(s)",
        ] {
            assert!(err.contains(problem), "{args:?}: {problem} not in {err}");
        }
    }
    // Listeners that cannot all be bound are problems too.
    let twice = config_file(
        "twice.toml",
        "[pools.a]\nlisten = \"127.0.0.1:7001\"\nservers = [\"127.0.0.1:1\"]\n\
         [routes.r]\nlisten = \"127.0.0.1:7001\"\ntype = \"operation\"\ndefault = \"a\"\n",
    );
    let (code, _, err) = memfleet_router(&["--validate-config", twice.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("r and a both listen on 127.0.0.1:7001"),
        "{err}"
    );

    // A nutcracker file, as nutcracker -t reads it.
    let yaml = config_file(
        "nutcracker.yml",
        "alpha:\n  listen: 127.0.0.1:7004\n  tcpkeepalive: true\n  servers:\n   - 127.0.0.1:1:1\n\
         beta:\n  listen: 127.0.0.1:7005\n  redis: true\n  servers:\n   - 127.0.0.1:2:1\n",
    );
    let yaml_path = yaml.to_str().unwrap();
    let (code, _, err) = memfleet_router(&["-t", "--twemproxy", yaml_path]);
    assert_ne!(code, 0);
    assert!(err.contains("pool beta: is a redis pool"), "{err}");
    let (code, _, err) = memfleet_router(&["--validate-config", yaml_path]);
    assert_ne!(code, 0, "{err}");
    std::fs::write(
        &yaml,
        "alpha:\n  listen: 127.0.0.1:7004\n  tcpkeepalive: true\n  servers:\n   - 127.0.0.1:1:1\n",
    )
    .unwrap();
    let (code, out, err) = memfleet_router(&["-t", "--twemproxy", yaml_path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("OK: 1 pool(s)"), "{out}");
    // `-t N` still sets the threads; a file that cannot be read is a problem.
    let (code, _, err) = memfleet_router(&["-t", "--config", "/nonexistent/memfleet.toml"]);
    assert_ne!(code, 0);
    assert!(err.contains("cannot read"), "{err}");
    drop(held);
    for f in [good, bad, twice, yaml] {
        let _ = std::fs::remove_file(f);
    }
}

/// `md5sum FILE`'s digest.
fn md5sum(file: &std::path::Path) -> String {
    let out = Command::new("md5sum").arg(file).output().expect("md5sum");
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn admin_keys_name_the_running_configuration_and_the_route_an_operation_walks() {
    let (_a, a) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (_b, b) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (_g, g) = memfleet_server(&["-t", "1", "-m", "16"]);
    assert!(until_serving(a) && until_serving(b) && until_serving(g));
    let (web, plain) = (free_port(), free_port());
    let text = |ttl: u32| {
        format!(
            "[pools.a]\nlisten = \"127.0.0.1:{plain}\"\nservers = [\"127.0.0.1:{a}\"]\n\
             [pools.b]\nservers = [\"127.0.0.1:{b}\"]\n\
             [pools.g]\nservers = [\"127.0.0.1:{g}\"]\n\
             [routes.web]\nlisten = \"127.0.0.1:{web}\"\ntype = \"prefix\"\n\
             prefixes = {{ \"s:\" = \"safe\" }}\ndefault = \"ops\"\n\
             [routes.safe]\ntype = \"gutter\"\nmain = \"a\"\ngutter = \"g\"\ngutter_ttl = {ttl}\n\
             [routes.ops]\ntype = \"operation\"\ndelete = \"both\"\ndefault = \"a\"\n\
             [routes.both]\ntype = \"broadcast\"\nto = [\"a\", \"b\"]\n"
        )
    };
    let file = config_file("admin.toml", &text(10));
    let _router = router(&["-t", "1", "--config"], &file, web);
    let mut c = Conn::new(web);
    let value = |c: &mut Conn, key: &str| {
        String::from_utf8(c.get_bytes(key).unwrap_or_else(|| panic!("{key}: a miss"))).unwrap()
    };
    assert_eq!(
        value(&mut c, "__memfleet__.config_file"),
        file.display().to_string()
    );
    assert_eq!(value(&mut c, "__memfleet__.config_md5"), md5sum(&file));
    let age: u64 = value(&mut c, "__memfleet__.config_age").parse().unwrap();
    assert!(age < 5, "{age}");

    let (a, b, g) = (
        format!("127.0.0.1:{a}"),
        format!("127.0.0.1:{b}"),
        format!("127.0.0.1:{g}"),
    );
    assert_eq!(
        value(&mut c, "__memfleet__.route_handles(get,s:k)"),
        format!("prefix|s:\n gutter|ttl=10\n  pool|a|{a}\n  pool|g|{g}\n")
    );
    assert_eq!(
        value(&mut c, "__memfleet__.route_handles(get,k)"),
        format!("prefix|default\n operation|get\n  pool|a|{a}\n")
    );
    assert_eq!(
        value(&mut c, "__memfleet__.route_handles(md,k)"),
        format!("prefix|default\n operation|delete\n  broadcast|all-sync\n   pool|a|{a}\n   pool|b|{b}\n")
    );
    assert_eq!(
        value(&mut c, "__memfleet__.route_handles(frob,k)"),
        "unknown operation \"frob\""
    );
    // A pool's own listener: the pool and the key's server.
    let mut p = Conn::new(plain);
    assert_eq!(
        value(&mut p, "__memfleet__.route_handles(set,k)"),
        format!("pool|a|{a}\n")
    );
    assert_eq!(value(&mut p, "__memfleet__.config_md5"), md5sum(&file));

    // A reload: the new file's digest, an age from the reload, the new tree.
    std::thread::sleep(Duration::from_secs(2));
    let age: u64 = value(&mut c, "__memfleet__.config_age").parse().unwrap();
    assert!(age >= 2, "{age}");
    std::fs::write(&file, text(20)).unwrap();
    let new_md5 = md5sum(&file);
    let deadline = Instant::now() + Duration::from_secs(10);
    while value(&mut c, "__memfleet__.config_md5") != new_md5 {
        assert!(Instant::now() < deadline, "the reload never showed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let age: u64 = value(&mut c, "__memfleet__.config_age").parse().unwrap();
    assert!(age < 2, "{age}");
    assert!(value(&mut c, "__memfleet__.route_handles(get,s:k)").contains("gutter|ttl=20"));
    let _ = std::fs::remove_file(file);
}
