//! What the router shows about the traffic it routes, through a real `memfleet router` in
//! front of real `memfleet server`s: per-server latency histograms and per-command counts
//! (`/metrics`, Prometheus conventions, and `stats detailed`), which trace a stalled server
//! by name; and the sampled request log (`--log-requests`, `--log-keys`, `--request-log`).

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, memfleet_server, until_serving, Conn, Killed};

fn stat(stats: &[(String, String)], name: &str) -> String {
    stats
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in {stats:?}"))
        .1
        .clone()
}

fn signal(child: &Killed, sig: i32) {
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    let sent = unsafe { libc::kill(child.0.id() as i32, sig) };
    assert_eq!(sent, 0);
}

fn metrics(admin: u16) -> String {
    let mut http = TcpStream::connect(("127.0.0.1", admin)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    http.read_to_string(&mut text).unwrap();
    text
}

/// The value of the series `line_start` (name and labels, exactly).
fn series(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {line_start} in {text}"))
        .parse()
        .unwrap()
}

/// A router on `config`, with `extra` flags.
fn router(name: &str, config: &str, extra: &[&str]) -> (Killed, std::path::PathBuf) {
    let file =
        std::env::temp_dir().join(format!("memfleet-obs-{name}-{}.toml", std::process::id()));
    std::fs::write(&file, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args(["router", "-t", "1"])
        .args(extra)
        .arg("--config")
        .arg(&file)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Killed(child), file)
}

#[test]
fn latency_histograms_and_command_counts_trace_a_stalled_server() {
    let (slow_process, slow) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (_fast_process, fast) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(slow);
    until_serving(fast);
    let (port, tree, admin) = (free_port(), free_port(), free_port());
    let admin_flag = format!("127.0.0.1:{admin}");
    let (_router, file) = router(
        "hist",
        &format!(
            "[pools.p]\nlisten = \"127.0.0.1:{port}\"\ntimeout_ms = 5000\n\
             servers = [\"127.0.0.1:{slow}\", \"127.0.0.1:{fast}\"]\n\
             [routes.t]\nlisten = \"127.0.0.1:{tree}\"\ntype = \"operation\"\ndefault = \"p\"\n"
        ),
        &["--admin-listen", &admin_flag],
    );
    until_serving(port);
    let mut c = Conn::new(port);
    for i in 0..20 {
        assert_eq!(
            c.line(format!("set k{i} 0 0 1\r\n{}\r\n", i % 10)),
            "STORED\r\n"
        );
    }
    for i in 0..20 {
        assert_eq!(c.get(&format!("k{i}")), Some(format!("{}", i % 10)));
    }
    let mut t = Conn::new(tree);
    for i in 0..5 {
        assert_eq!(t.line(format!("delete k{i}\r\n")), "DELETED\r\n");
    }
    assert_eq!(t.line("incr k10 1\r\n"), "1\r\n");
    let detailed = c.stats("detailed");
    for (name, want) in [
        ("cmd_set", "20"),
        ("cmd_get", "20"),
        ("cmd_delete", "5"),
        ("cmd_incr", "1"),
        ("cmd_mg", "0"),
        ("pool:p:cmd_set", "20"),
        ("pool:p:cmd_get", "20"),
        ("pool:p:cmd_delete", "5"),
    ] {
        assert_eq!(stat(&detailed, name), want, "{name}");
    }
    let served = |s: u16| -> u64 {
        stat(
            &detailed,
            &format!("pool:p:server:127.0.0.1:{s}:latency_count"),
        )
        .parse()
        .unwrap()
    };
    assert_eq!(served(slow) + served(fast), 46);

    // A key of the slow server, its server stalled for 1.5 s while its get waits.
    let key = (0..100)
        .map(|i| format!("s{i}"))
        .find(|k| {
            c.line(format!("get __memfleet__.route({k})\r\n"));
            let server = c.read_line();
            c.read_line();
            server.trim_end() == format!("127.0.0.1:{slow}")
        })
        .expect("a key on the slow server");
    signal(&slow_process, libc::SIGSTOP);
    // Stopped (state T in /proc) before the get is sent.
    let stat_file = format!("/proc/{}/stat", slow_process.0.id());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !std::fs::read_to_string(&stat_file)
        .unwrap()
        .rsplit(')')
        .next()
        .unwrap()
        .trim_start()
        .starts_with('T')
    {
        assert!(Instant::now() < deadline, "not stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    c.send(format!("get {key}\r\n"));
    std::thread::sleep(Duration::from_millis(1500));
    signal(&slow_process, libc::SIGCONT);
    let asked = Instant::now();
    assert_eq!(c.read_line(), "END\r\n");
    eprintln!(
        "the stalled get answered {:?} after SIGCONT",
        asked.elapsed()
    );

    let text = metrics(admin);
    let h = "memfleet_router_server_latency_seconds";
    let labels = |s: u16| format!("pool=\"p\",server=\"127.0.0.1:{s}\"");
    for s in [slow, fast] {
        // Prometheus' conventions: cumulative buckets, +Inf = _count, a _sum.
        let count = series(&text, &format!("{h}_count{{{}}}", labels(s)));
        let inf = series(&text, &format!("{h}_bucket{{{},le=\"+Inf\"}}", labels(s)));
        assert_eq!(count, inf);
        let mut last = 0.0;
        for le in ["0.00005", "0.0001", "0.25", "0.5", "1"] {
            let v = series(&text, &format!("{h}_bucket{{{},le=\"{le}\"}}", labels(s)));
            assert!(v >= last, "{le}: {v} < {last}");
            last = v;
        }
        assert!(series(&text, &format!("{h}_sum{{{}}}", labels(s))) > 0.0);
    }
    // The stall is on the slow server's histogram, over 0.25 s (over 1 s unless this
    // machine is very busy), and nowhere else.
    let slow_count = series(&text, &format!("{h}_count{{{}}}", labels(slow)));
    let under =
        |s: u16, le: &str| series(&text, &format!("{h}_bucket{{{},le=\"{le}\"}}", labels(s)));
    assert_eq!(under(slow, "0.25"), slow_count - 1.0, "{text}");
    let fast_count = series(&text, &format!("{h}_count{{{}}}", labels(fast)));
    assert_eq!(under(fast, "0.25"), fast_count);
    assert_eq!(
        series(
            &text,
            "memfleet_router_pool_commands_total{pool=\"p\",command=\"get\"}"
        ),
        21.0
    );
    assert_eq!(
        series(&text, "memfleet_router_commands_total{command=\"delete\"}"),
        5.0
    );
    let detailed = c.stats("detailed");
    let p99 = |s: u16| {
        stat(
            &detailed,
            &format!("pool:p:server:127.0.0.1:{s}:latency_p99_us"),
        )
    };
    assert!(
        ["inf", "1000000"].contains(&p99(slow).as_str()),
        "{}",
        p99(slow)
    );
    assert!(p99(fast).parse::<u64>().unwrap() <= 250_000);

    // Per listener's route, what clients saw: counted when a connection leaves (or each
    // second): the stall on the pool's listener, none on the route's.
    drop(t);
    drop(c);
    let mut d = Conn::new(port);
    let deadline = Instant::now() + Duration::from_secs(10);
    let detailed = loop {
        let detailed = d.stats("detailed");
        let has = |n: &str| detailed.iter().any(|(name, _)| name == n);
        if has("route:t:latency_count") && has("route:p:latency_count") {
            break detailed;
        }
        assert!(
            Instant::now() < deadline,
            "no route latencies: {detailed:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(stat(&detailed, "route:t:latency_count"), "6");
    let p99 = stat(&detailed, "route:p:latency_p99_us");
    assert!(["inf", "1000000"].contains(&p99.as_str()), "{p99}");
    let text = metrics(admin);
    let r = "memfleet_router_route_latency_seconds";
    let count = series(&text, &format!("{r}_count{{route=\"p\"}}"));
    assert_eq!(
        series(&text, &format!("{r}_bucket{{route=\"p\",le=\"0.25\"}}")),
        count - 1.0
    );
    assert_eq!(
        series(&text, &format!("{r}_bucket{{route=\"p\",le=\"+Inf\"}}")),
        count
    );
    assert_eq!(
        series(&text, &format!("{r}_bucket{{route=\"t\",le=\"0.25\"}}")),
        6.0
    );
    let _ = std::fs::remove_file(file);
}

/// The JSON lines of `path` once there are at least `n` of them.
fn log_lines(path: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} lines: {text}",
            lines.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_request_log_samples_requests_as_json_lines() {
    let (_s, server) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(server);
    let dir = std::env::temp_dir().join(format!("memfleet-reqlog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = |port: u16, tree: u16| {
        format!(
            "[pools.p]\nlisten = \"127.0.0.1:{port}\"\nservers = [\"127.0.0.1:{server}\"]\n\
             [routes.t]\nlisten = \"127.0.0.1:{tree}\"\ntype = \"operation\"\ndefault = \"p\"\n"
        )
    };

    // Every request, keys hashed.
    let all = dir.join("all.log");
    let (port, tree) = (free_port(), free_port());
    let (router_all, file_all) = router(
        "all",
        &config(port, tree),
        &[
            "--log-requests",
            "1",
            "--request-log",
            all.to_str().unwrap(),
        ],
    );
    until_serving(port);
    let mut c = Conn::new(port);
    assert_eq!(c.line("set secret 0 0 1\r\nv\r\n"), "STORED\r\n");
    assert_eq!(c.get("secret"), Some("v".into()));
    assert_eq!(c.get("other"), None);
    let mut t = Conn::new(tree);
    assert_eq!(t.line("delete secret\r\n"), "DELETED\r\n");
    // until_serving's `version` is a request too.
    let lines = log_lines(&all, 5);
    let text = std::fs::read_to_string(&all).unwrap();
    assert!(!text.contains("secret"), "keys are hashed: {text}");
    let find = |op: &str, result: &str| -> &serde_json::Value {
        lines
            .iter()
            .find(|l| l["op"] == op && l["result"] == result)
            .unwrap_or_else(|| panic!("no {op} {result} in {lines:?}"))
    };
    let set = find("set", "STORED");
    let hit = find("get", "VALUE");
    let miss = find("get", "END");
    let delete = find("delete", "DELETED");
    assert_eq!(set["route"], "p");
    assert_eq!(delete["route"], "t", "the route a listener serves");
    for l in [set, hit, miss, delete] {
        assert_eq!(l["destination"], format!("127.0.0.1:{server}"));
        assert!(l["latency_us"].as_u64().is_some(), "{l}");
        assert_eq!(l["key_hash"].as_str().unwrap().len(), 16);
        assert!(l.get("key").is_none());
    }
    assert_eq!(set["key_hash"], hit["key_hash"]);
    assert_eq!(set["key_hash"], delete["key_hash"]);
    assert_ne!(set["key_hash"], miss["key_hash"]);
    drop(router_all);

    // A fraction of the requests, keys as they are, to stderr.
    let (port, tree) = (free_port(), free_port());
    let file_half = dir.join("half.toml");
    std::fs::write(&file_half, config(port, tree)).unwrap();
    let half = dir.join("half.log");
    let stderr = std::fs::File::create(&half).unwrap();
    let _router_half = Killed(
        Command::new(env!("CARGO_BIN_EXE_memfleet"))
            .args([
                "router",
                "-t",
                "1",
                "--log-requests",
                "0.25",
                "--log-keys",
                "--config",
            ])
            .arg(&file_half)
            .env("RUST_LOG", "off")
            .stderr(stderr)
            .spawn()
            .unwrap(),
    );
    until_serving(port);
    let mut c = Conn::new(port);
    c.send("get somekey\r\n".repeat(2000));
    for _ in 0..2000 {
        assert_eq!(c.read_line(), "END\r\n");
    }
    std::thread::sleep(Duration::from_millis(300));
    let logged: Vec<serde_json::Value> = std::fs::read_to_string(&half)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &serde_json::Value| l["op"] == "get")
        .collect();
    assert!(
        (350..650).contains(&logged.len()),
        "{} of 2000 logged",
        logged.len()
    );
    assert!(logged
        .iter()
        .all(|l| l["key"] == "somekey" && l["result"] == "END"));

    // A rate out of range is refused before anything is bound.
    let out = Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args(["router", "--log-requests", "1.5", "--config"])
        .arg(&file_half)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--log-requests 1.5: a fraction"));
    let _ = std::fs::remove_file(file_all);
    let _ = std::fs::remove_dir_all(dir);
}
