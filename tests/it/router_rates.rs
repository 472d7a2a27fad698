//! Admission control through a real `memfleet router` in front of a real `memfleet
//! server`: a pool's `rates = { gets, sets, deletes }` (over a rate a request is answered
//! `SERVER_ERROR` naming the limit without reaching the server, and counted in `stats` and
//! `/metrics`; a pool without rates is untouched), and `[router] max_client_connections`
//! (refused as memcached refuses over its `-c`).

use crate::support;

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::{free_port, memfleet_server, until_serving, Conn};

/// What this module asks of a text connection beyond `support::Conn`'s own.
trait ConnExt {
    fn gets(&mut self, n: usize) -> (usize, Vec<String>);
}

impl ConnExt for Conn {
    /// `n` one-key gets of a missing key, pipelined: (answered END, refused lines).
    fn gets(&mut self, n: usize) -> (usize, Vec<String>) {
        self.0
            .get_mut()
            .write_all(&b"get nokey\r\n".repeat(n))
            .unwrap();
        let mut ends = 0;
        let mut refused = Vec::new();
        for _ in 0..n {
            match self.read_line() {
                l if l == "END\r\n" => ends += 1,
                l => refused.push(l),
            }
        }
        (ends, refused)
    }
}

#[test]
fn a_pool_over_its_rates_refuses_with_server_error_and_counts() {
    let (_s, server) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(server);
    let (limited, free, tree, admin) = (free_port(), free_port(), free_port(), free_port());
    let file = std::env::temp_dir().join(format!("memfleet-rates-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "[pools.limited]\nlisten = \"127.0.0.1:{limited}\"\n\
             rates = {{ gets = 200, sets = 100, deletes = 50 }}\n\
             servers = [\"127.0.0.1:{server}\"]\n\
             [pools.free]\nlisten = \"127.0.0.1:{free}\"\nservers = [\"127.0.0.1:{server}\"]\n\
             [routes.tree]\nlisten = \"127.0.0.1:{tree}\"\ntype = \"operation\"\n\
             default = \"limited\"\n"
        ),
    )
    .unwrap();
    let _router = support::router(&file, Some(admin));
    until_serving(limited);
    let mut direct = Conn::new(server);
    let served_before = direct.stat("cmd_get").unwrap();

    // 1000 gets at once: at most the rate over the time they took (plus the burst) pass.
    let mut c = Conn::new(limited);
    let started = Instant::now();
    let (passed, refused) = c.gets(1000);
    let elapsed = started.elapsed().as_secs_f64();
    let most = (200.0 * elapsed).ceil() as usize + 2;
    assert!(
        passed >= 1 && passed <= most,
        "{passed} passed in {elapsed:.3} s"
    );
    assert_eq!(passed + refused.len(), 1000);
    assert!(refused
        .iter()
        .all(|l| l == "SERVER_ERROR rate limit: pool limited takes 200 gets a second\r\n"));
    // Refused requests never reached the server.
    assert_eq!(
        direct.stat("cmd_get").unwrap() - served_before,
        passed as u64
    );
    assert_eq!(
        c.stat("pool:limited:rate_limited_gets"),
        Some(refused.len() as u64)
    );
    assert_eq!(c.stat("pool:limited:rate_limited_sets"), Some(0));

    // The other pool of the same router is not held back.
    let mut f = Conn::new(free);
    assert_eq!(f.gets(1000), (1000, Vec::new()));
    assert_eq!(
        f.stat("pool:free:rate_limited_gets"),
        None,
        "no rates, no counter"
    );

    // Sets and deletes have their own rates.
    let sets = "set k 0 0 1\r\nv\r\n".repeat(300);
    c.0.get_mut().write_all(sets.as_bytes()).unwrap();
    let lines: Vec<String> = (0..300).map(|_| c.read_line()).collect();
    let stored = lines.iter().filter(|l| *l == "STORED\r\n").count();
    assert!((1..300).contains(&stored), "{stored} of 300 sets stored");
    assert!(lines
        .iter()
        .filter(|l| *l != "STORED\r\n")
        .all(|l| l == "SERVER_ERROR rate limit: pool limited takes 100 sets a second\r\n"));

    // Through a route tree: a one-key get answers the refusal, a multi-key get misses.
    std::thread::sleep(Duration::from_millis(100));
    let mut t = Conn::new(tree);
    let (_, refused) = t.gets(500);
    assert!(!refused.is_empty());
    assert!(refused[0].starts_with("SERVER_ERROR rate limit: pool limited"));
    t.0.get_mut()
        .write_all(&b"get a b\r\n".repeat(300))
        .unwrap();
    for _ in 0..300 {
        assert_eq!(t.read_line(), "END\r\n");
    }

    // /metrics counts them too.
    let mut http = TcpStream::connect(("127.0.0.1", admin)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut metrics = String::new();
    http.read_to_string(&mut metrics).unwrap();
    assert!(
        metrics.contains("memfleet_router_pool_rate_limited_total{pool=\"limited\",kind=\"gets\"}"),
        "{metrics}"
    );
    let _ = std::fs::remove_file(file);
}

/// Lines up to (not with) `MN`.
fn until_mn(c: &mut Conn) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        match c.read_line() {
            l if l == "MN\r\n" => return lines,
            l if l.is_empty() => panic!("closed after {lines:?}"),
            l => lines.push(l),
        }
    }
}

#[test]
fn refusals_keep_noreply_quiet_mode_and_multi_key_gets_as_a_server_would() {
    let (_s, server) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(server);
    let port = free_port();
    let dir = std::env::temp_dir();
    let file = dir.join(format!("memfleet-rates-forms-{}.toml", std::process::id()));
    let log = dir.join(format!("memfleet-rates-forms-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    std::fs::write(
        &file,
        format!(
            "[pools.p]\nlisten = \"127.0.0.1:{port}\"\n\
             rates = {{ gets = 20, sets = 20, deletes = 20 }}\n\
             servers = [\"127.0.0.1:{server}\"]\n"
        ),
    )
    .unwrap();
    let _router = support::Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_memfleet"))
            .args(["router", "-t", "1", "--log-requests", "1", "--request-log"])
            .arg(&log)
            .arg("--config")
            .arg(&file)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    until_serving(port);
    let mut direct = Conn::new(server);
    let mut c = Conn::new(port);
    let counted =
        |c: &mut Conn, kind: &str| c.stat(&format!("pool:p:rate_limited_{kind}")).unwrap();

    // `noreply` sets over the rate: no reply at all, counted, never at the server.
    let sets_before = direct.stat("cmd_set").unwrap();
    c.send("set k 0 0 1 noreply\r\nv\r\n".repeat(100) + "mn\r\n");
    assert_eq!(until_mn(&mut c), Vec::<String>::new());
    let refused = counted(&mut c, "sets");
    assert!((50..100).contains(&refused), "{refused} of 100 refused");
    assert_eq!(direct.stat("cmd_set").unwrap() - sets_before, 100 - refused);

    // Quiet meta gets: quiet mode drops misses, never the refusal (an error).
    c.send("mg nokey v q\r\n".repeat(100) + "mn\r\n");
    let lines = until_mn(&mut c);
    let refused = counted(&mut c, "gets");
    assert!((50..100).contains(&refused), "{refused} of 100 refused");
    assert_eq!(lines.len() as u64, refused);
    assert!(lines
        .iter()
        .all(|l| l == "SERVER_ERROR rate limit: pool p takes 20 gets a second\r\n"));

    // Quiet meta deletes: a miss (NF) is shown, as memcached does, and so is a refusal;
    // noreply deletes are silent.
    c.send("md nokey q\r\n".repeat(50) + &"delete nokey noreply\r\n".repeat(50) + "mn\r\n");
    let lines = until_mn(&mut c);
    assert_eq!(lines.len(), 50, "{lines:?}");
    let refusals = lines
        .iter()
        .filter(|l| *l == "SERVER_ERROR rate limit: pool p takes 20 deletes a second\r\n")
        .count() as u64;
    let misses = lines.iter().filter(|l| *l == "NF\r\n").count() as u64;
    assert_eq!(refusals + misses, 50, "{lines:?}");
    assert!(refusals >= 25, "{lines:?}");
    assert!(
        counted(&mut c, "deletes") > refusals,
        "noreply refusals counted"
    );

    // A multi-key get: each key counted on its own, a refused key a miss.
    let gets_before = (counted(&mut c, "gets"), direct.stat("cmd_get").unwrap());
    c.send("get a b c\r\n".repeat(50));
    for _ in 0..50 {
        assert_eq!(c.read_line(), "END\r\n");
    }
    let refused = counted(&mut c, "gets") - gets_before.0;
    let served = direct.stat("cmd_get").unwrap() - gets_before.1;
    assert_eq!(refused + served, 150, "{refused} refused, {served} served");
    assert!(refused >= 100, "{refused}");

    // The sampled request log has the refusals too.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let refusal = text
            .lines()
            .find(|l| l.contains("\"result\":\"SERVER_ERROR\""));
        if let Some(line) = refusal {
            assert!(line.contains("\"op\":\"mg\""), "{line}");
            break;
        }
        assert!(Instant::now() < deadline, "no refusal logged: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(log);
}

#[test]
fn max_client_connections_refuses_as_memcached_refuses_across_listeners() {
    let (_s, server) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(server);
    let (a, b) = (free_port(), free_port());
    let file =
        std::env::temp_dir().join(format!("memfleet-max-clients-{}.toml", std::process::id()));
    let config = |limit: u32| {
        format!(
            "[router]\nmax_client_connections = {limit}\n\
             [pools.a]\nlisten = \"127.0.0.1:{a}\"\nservers = [\"127.0.0.1:{server}\"]\n\
             [pools.b]\nlisten = \"127.0.0.1:{b}\"\nservers = [\"127.0.0.1:{server}\"]\n"
        )
    };
    std::fs::write(&file, config(2)).unwrap();
    let _router = support::router(&file, None);
    until_serving(a);
    // A client the router serves (retried while closed connections still hold places:
    // the router lets a place go once it has seen the close).
    let admitted = |port: u16| -> Conn {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut c = Conn::new(port);
            let mut l = String::new();
            // A refused client may see its connection reset: not served either.
            let sent = c.0.get_mut().write_all(b"version\r\n").is_ok();
            if sent && c.0.read_line(&mut l).is_ok() && l.starts_with("VERSION") {
                return c;
            }
            assert!(Instant::now() < deadline, "no place on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let one = admitted(a);
    let mut two = admitted(b);
    // A third client, on either listener: memcached's refusal, then the end.
    for port in [a, b] {
        let mut third = Conn::new(port);
        assert_eq!(third.read_line(), "ERROR Too many open connections\r\n");
        assert_eq!(third.read_line(), "", "closed");
    }
    drop(one);
    let _three = admitted(a);
    // A reload raises the limit for the next clients.
    std::fs::write(&file, config(10)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = Conn::new(b);
        let mut l = String::new();
        let sent = c.0.get_mut().write_all(b"version\r\n").is_ok();
        if sent && c.0.read_line(&mut l).is_ok() && l.starts_with("VERSION") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reload never raised the limit"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _held: Vec<Conn> = (0..5).map(|_| admitted(a)).collect();
    assert!(two.line("version\r\n").starts_with("VERSION"));
    let _ = std::fs::remove_file(file);
}

#[test]
fn max_down_fraction_keeps_most_of_a_pool_from_being_marked_down() {
    let (_s, server) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(server);
    // Nothing listens (held, so that no test beside this one takes them).
    let held: Vec<_> = (0..3).map(|_| support::refused_port()).collect();
    let dead: Vec<u16> = held.iter().map(|(_, p)| *p).collect();
    let port = free_port();
    let servers: Vec<String> = std::iter::once(server)
        .chain(dead.iter().copied())
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    let file = std::env::temp_dir().join(format!("memfleet-max-down-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "[pools.p]\nlisten = \"127.0.0.1:{port}\"\nmax_down_fraction = 0.5\n\
             server_failure_limit = 1\ntimeout_ms = 200\nservers = [{}]\n",
            servers.join(", ")
        ),
    )
    .unwrap();
    let _router = support::router(&file, None);
    until_serving(port);
    let mut c = Conn::new(port);
    // Keys on every server, each failing one a few times.
    for round in 0..3 {
        for i in 0..200 {
            c.line(format!("set k{i} 0 0 1\r\n{round}\r\n"));
        }
    }
    let downs: Vec<u64> = dead
        .iter()
        .map(|p| {
            c.stat(&format!("pool:p:server:127.0.0.1:{p}:down"))
                .expect("a down stat per server")
        })
        .collect();
    assert_eq!(downs.iter().sum::<u64>(), 2, "half of 4 at most: {downs:?}");
    assert_eq!(
        c.stat(&format!("pool:p:server:127.0.0.1:{server}:down")),
        Some(0)
    );
    assert!(c.stat("pool:p:down_refused").unwrap() > 0);
    // The server left up still fails its own keys, one request at a time (not fast).
    let errors = |c: &mut Conn| -> u64 {
        dead.iter()
            .map(|p| {
                c.stat(&format!("pool:p:server:127.0.0.1:{p}:errors"))
                    .unwrap()
            })
            .sum()
    };
    let before = errors(&mut c);
    for i in 0..200 {
        c.line(format!("mg k{i}\r\n")); // one line: HD, or an error
    }
    assert!(errors(&mut c) > before);
    let _ = std::fs::remove_file(file);
}
