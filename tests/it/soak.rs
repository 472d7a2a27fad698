//! Soak: a `memfleet server` (`-m 32`) and a `memfleet router` in front of it, a thousand
//! client connections (half through the router, half straight to the server) running a
//! mixed workload that evicts (far more data than fits) and expires (a third of the sets
//! live 2 s), sampled at intervals: resident memory and open file descriptors of both
//! processes, the server's and the router's error counters. It fails on
//!
//! - any client-visible error (a reply that is not the command's normal answer, a closed
//!   connection), a router error counted against the server, a store refused for memory;
//! - resident memory that keeps growing once the cache is full (growth from the first
//!   sample with the cache evicting to the last beyond 8 MiB + 10%; the load goes on past
//!   the duration, up to three times it, until the cache has been full for a third of it);
//! - file descriptors left open after every client has gone (back to the count before the
//!   load, within 10 s).
//!
//! `cargo test --test it soak::` is the short form CI runs (20 s, 1000 connections);
//! `scripts/soak --duration 10m --conns 2000` runs the same test longer (the settings come
//! from `MEMFLEET_SOAK_SECS`, `MEMFLEET_SOAK_CONNS`, `MEMFLEET_SOAK_INTERVAL`).

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{connect, free_port, Killed};

const MIB: u64 = 1 << 20;
/// Distinct keys: ~200,000 × ~4 KB average is far more than 32 MiB.
const KEYS: u64 = 200_000;
/// Client threads (each drives its share of the connections round robin).
const THREADS: usize = 4;

struct Settings {
    duration: Duration,
    conns: usize,
    interval: Duration,
}

impl Settings {
    fn from_env() -> Settings {
        let number = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .map(|v| {
                    v.parse::<u64>()
                        .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
                })
                .unwrap_or(default)
        };
        let secs = number("MEMFLEET_SOAK_SECS", 20);
        Settings {
            duration: Duration::from_secs(secs),
            conns: number("MEMFLEET_SOAK_CONNS", 1000) as usize,
            interval: Duration::from_secs(number("MEMFLEET_SOAK_INTERVAL", (secs / 6).max(2))),
        }
    }
}

/// Raises this process's soft limit on open files to what `need` takes (children inherit
/// it); `Err` if the hard limit is lower.
fn raise_fd_limit(need: u64) -> Result<(), String> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own and pass by pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err("getrlimit failed".into());
    }
    if limit.rlim_cur >= need {
        return Ok(());
    }
    if limit.rlim_max < need {
        return Err(format!(
            "the hard limit on open files is {}",
            limit.rlim_max
        ));
    }
    limit.rlim_cur = need;
    // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard one
    // needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err("setrlimit failed".into());
    }
    Ok(())
}

fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Every `STAT` of `stats` at 127.0.0.1:`port`, as (name, rest of the line).
fn stats(port: u16) -> Vec<(String, String)> {
    let mut s = BufReader::new(connect(port, Duration::from_secs(10)));
    s.get_mut().write_all(b"stats\r\n").unwrap();
    let mut out = Vec::new();
    loop {
        let mut line = String::new();
        s.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line == "END" || line.is_empty() {
            return out;
        }
        let mut words = line.splitn(3, ' ').skip(1);
        if let (Some(name), Some(value)) = (words.next(), words.next()) {
            out.push((name.to_owned(), value.to_owned()));
        }
    }
}

fn stat_number(stats: &[(String, String)], name: &str) -> u64 {
    stats
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// A small xorshift generator: the workload needs spread, not quality.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// What the clients saw.
#[derive(Default)]
struct Counts {
    ops: AtomicU64,
    errors: AtomicU64,
    first_errors: Mutex<Vec<String>>,
}

impl Counts {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_errors.lock().unwrap();
        if first.len() < 5 {
            first.push(what);
        }
    }
}

/// One operation on `conn`: a get (50%), a set of 64 B–16 KB (40%; a third of them with a
/// 2 s TTL) or a delete (10%); any reply but the command's normal ones is an error.
fn operate(conn: &mut BufReader<TcpStream>, rng: &mut Rng, value: &[u8]) -> Result<(), String> {
    let r = rng.next();
    let key = format!("soak:{}", (r >> 8) % KEYS);
    let mut line = String::new();
    match r % 10 {
        0..=4 => {
            conn.get_mut()
                .write_all(format!("get {key}\r\n").as_bytes())
                .map_err(|e| format!("get: {e}"))?;
            conn.read_line(&mut line).map_err(|e| format!("get: {e}"))?;
            if let Some(header) = line.strip_prefix("VALUE ") {
                let len: usize = header
                    .split_whitespace()
                    .nth(2)
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| format!("bad VALUE line {line:?}"))?;
                let mut data = vec![0u8; len + 2];
                conn.read_exact(&mut data)
                    .map_err(|e| format!("value: {e}"))?;
                line.clear();
                conn.read_line(&mut line).map_err(|e| format!("get: {e}"))?;
            }
            (line == "END\r\n")
                .then_some(())
                .ok_or(format!("get {key}: {line:?}"))
        }
        5..=8 => {
            // Sizes spread over 64 B .. 16 KB, log-uniform-ish.
            let len = 64usize << ((r >> 40) % 9);
            let len = len.min(value.len());
            let ttl = if (r >> 50).is_multiple_of(3) { 2 } else { 0 };
            let mut request = format!("set {key} 0 {ttl} {len}\r\n").into_bytes();
            request.extend_from_slice(&value[..len]);
            request.extend_from_slice(b"\r\n");
            conn.get_mut()
                .write_all(&request)
                .map_err(|e| format!("set: {e}"))?;
            conn.read_line(&mut line).map_err(|e| format!("set: {e}"))?;
            (line == "STORED\r\n")
                .then_some(())
                .ok_or(format!("set {key}: {line:?}"))
        }
        _ => {
            conn.get_mut()
                .write_all(format!("delete {key}\r\n").as_bytes())
                .map_err(|e| format!("delete: {e}"))?;
            conn.read_line(&mut line)
                .map_err(|e| format!("delete: {e}"))?;
            matches!(line.as_str(), "DELETED\r\n" | "NOT_FOUND\r\n")
                .then_some(())
                .ok_or(format!("delete {key}: {line:?}"))
        }
    }
}

/// A client thread: opens its connections (alternately to `ports`), then runs operations
/// on them round robin until `stop`; closes them all when it returns.
fn clients(ports: [u16; 2], conns: usize, seed: u64, stop: &AtomicBool, counts: &Counts) {
    let mut open: Vec<Option<BufReader<TcpStream>>> = (0..conns)
        .map(|i| {
            Some(BufReader::new(connect(
                ports[i % 2],
                Duration::from_secs(10),
            )))
        })
        .collect();
    let value = vec![b's'; 16 * 1024];
    let mut rng = Rng(seed | 1);
    while !stop.load(Ordering::Relaxed) {
        for slot in open.iter_mut() {
            let Some(conn) = slot else { continue };
            match operate(conn, &mut rng, &value) {
                Ok(()) => counts.ops.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    counts.error(e);
                    *slot = None;
                    continue;
                }
            };
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
    }
}

struct Sample {
    at: Duration,
    ops: u64,
    server_rss: u64,
    router_rss: u64,
    server_fds: usize,
    router_fds: usize,
    evictions: u64,
    expired: u64,
}

fn expired(stats: &[(String, String)]) -> u64 {
    stat_number(stats, "get_expired")
        + stat_number(stats, "expired_unfetched")
        + stat_number(stats, "segcache_expired_segments")
}

fn start_router(dir: &Path, listen: u16, server: u16) -> Killed {
    let config = dir.join("soak.toml");
    std::fs::write(
        &config,
        format!(
            "[pools.main]\nlisten = \"127.0.0.1:{listen}\"\nservers = [\"127.0.0.1:{server}\"]\n\
             timeout_ms = 5000\n"
        ),
    )
    .unwrap();
    let router = Killed(
        Command::new(env!("CARGO_BIN_EXE_memfleet"))
            .args(["router", "-t", "2", "--config"])
            .arg(&config)
            .stderr(Stdio::null())
            .spawn()
            .expect("memfleet router starts"),
    );
    drop(connect(listen, Duration::from_secs(10)));
    router
}

#[test]
fn a_server_and_a_router_under_a_thousand_connections_hold_memory_fds_and_errors_flat() {
    let settings = Settings::from_env();
    let need = settings.conns as u64 * 2 + 512;
    if let Err(why) = raise_fd_limit(need) {
        eprintln!(
            "SKIPPED: {} connections need {need} open files: {why}",
            settings.conns
        );
        return;
    }
    let max_conns = (settings.conns + 256).to_string();
    let (server, server_port) =
        support::memfleet_server(&["-t", "2", "-m", "32", "-c", &max_conns]);
    let dir = std::env::temp_dir().join(format!("memfleet-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let router_port = free_port();
    let router = start_router(&dir, router_port, server_port);
    let (server_pid, router_pid) = (server.0.id(), router.0.id());
    // A request from each of two clients opens the router's connection to the server for
    // each of its two workers (clients are dealt to workers in turn), which it keeps.
    for _ in 0..2 {
        let mut c = BufReader::new(connect(router_port, Duration::from_secs(10)));
        c.get_mut().write_all(b"get warm\r\n").unwrap();
        let mut line = String::new();
        c.read_line(&mut line).unwrap();
        assert_eq!(line, "END\r\n");
    }
    std::thread::sleep(Duration::from_millis(500));
    let (server_fds_before, router_fds_before) = (fds(server_pid), fds(router_pid));

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (stop, counts) = (stop.clone(), counts.clone());
            let conns = settings.conns / THREADS + usize::from(t < settings.conns % THREADS);
            std::thread::spawn(move || {
                clients(
                    [router_port, server_port],
                    conns,
                    0x9e37_79b9 * (t as u64 + 1),
                    &stop,
                    &counts,
                )
            })
        })
        .collect();
    let mut samples = Vec::new();
    // The load runs for the duration, and on (up to three times as long, on a slow or busy
    // machine) until the cache has been full for a third of it: memory is judged from the
    // moment the cache is full (evicting), not from a fixed time.
    let end = started + settings.duration;
    let give_up = started + settings.duration * 3;
    loop {
        let now = Instant::now();
        let next = if now < end {
            (now + settings.interval).min(end)
        } else {
            now + settings.interval
        };
        std::thread::sleep(next.saturating_duration_since(now));
        let s = stats(server_port);
        samples.push(Sample {
            at: started.elapsed(),
            ops: counts.ops.load(Ordering::Relaxed),
            server_rss: rss(server_pid),
            router_rss: rss(router_pid),
            server_fds: fds(server_pid),
            router_fds: fds(router_pid),
            evictions: stat_number(&s, "evictions"),
            expired: expired(&s),
        });
        let full_since = samples.iter().find(|s| s.evictions > 0).map(|s| s.at);
        let judged = full_since.is_some_and(|at| started.elapsed() >= at + settings.duration / 3);
        if next >= end && (judged || next >= give_up) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // Every client connection is closed now: both processes must give their fds back.
    let settled = Instant::now();
    while (fds(server_pid) > server_fds_before || fds(router_pid) > router_fds_before)
        && settled.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (server_fds_after, router_fds_after) = (fds(server_pid), fds(router_pid));
    let server_stats = stats(server_port);
    let router_stats = stats(router_port);

    eprintln!(
        "soak: {} connections for {:?} (half through the router)",
        settings.conns, settings.duration
    );
    eprintln!(
        "  {:>6} {:>9} {:>8} {:>11} {:>11} {:>10} {:>10} {:>10} {:>9}",
        "secs",
        "ops",
        "ops/s",
        "server MiB",
        "router MiB",
        "server fd",
        "router fd",
        "evictions",
        "expired"
    );
    let mut previous = (Duration::ZERO, 0);
    for s in &samples {
        let rate = (s.ops - previous.1) as f64 / (s.at - previous.0).as_secs_f64();
        previous = (s.at, s.ops);
        eprintln!(
            "  {:>6.0} {:>9} {:>8.0} {:>11.1} {:>11.1} {:>10} {:>10} {:>10} {:>9}",
            s.at.as_secs_f64(),
            s.ops,
            rate,
            s.server_rss as f64 / MIB as f64,
            s.router_rss as f64 / MIB as f64,
            s.server_fds,
            s.router_fds,
            s.evictions,
            s.expired
        );
    }
    eprintln!(
        "  fds before the load / after it closed: server {server_fds_before}/{server_fds_after}, \
         router {router_fds_before}/{router_fds_after}"
    );
    let errors = counts.errors.load(Ordering::Relaxed);
    eprintln!(
        "  client errors: {errors} {:?}",
        counts.first_errors.lock().unwrap()
    );
    // The router's lines for its one server: pool:<pool>:server:<name>:<counter>.
    let backend: Vec<(String, String)> = router_stats
        .iter()
        .filter(|(n, _)| n.starts_with("pool:") && n.contains(":server:"))
        .cloned()
        .collect();
    eprintln!("  router's view of the server: {backend:?}");
    let server_errors = backend
        .iter()
        .find(|(n, _)| n.ends_with(":errors"))
        .map(|(_, v)| v.as_str());

    assert_eq!(errors, 0, "clients saw errors");
    assert_eq!(
        server_errors,
        Some("0"),
        "the router counted errors: {backend:?}"
    );
    for counter in [
        "store_no_memory",
        "segcache_out_of_memory",
        "rejected_connections",
    ] {
        assert_eq!(stat_number(&server_stats, counter), 0, "{counter}");
    }
    assert!(
        stat_number(&server_stats, "evictions") > 0,
        "the workload never evicted"
    );
    assert!(expired(&server_stats) > 0, "nothing ever expired");
    // All connections were really open at once.
    let busiest = samples
        .iter()
        .map(|s| s.server_fds + s.router_fds)
        .max()
        .unwrap();
    assert!(
        busiest >= settings.conns,
        "only {busiest} fds open at the peak"
    );
    assert!(
        server_fds_after <= server_fds_before && router_fds_after <= router_fds_before,
        "fds leaked: server {server_fds_before} -> {server_fds_after}, router {router_fds_before} -> {router_fds_after}"
    );
    // Memory flat once warmed up: compare the first sample with the cache full (evicting)
    // with the last.
    let warm = samples
        .iter()
        .find(|s| s.evictions > 0)
        .expect("the workload evicted");
    let last = samples.last().unwrap();
    for (what, then, now) in [
        ("server", warm.server_rss, last.server_rss),
        ("router", warm.router_rss, last.router_rss),
    ] {
        let allowed = then + 8 * MIB + then / 10;
        assert!(
            now <= allowed,
            "{what} RSS grew from {} MiB at {:?} to {} MiB",
            then / MIB,
            warm.at,
            now / MIB
        );
    }
    drop(router);
    let _ = std::fs::remove_dir_all(&dir);
}
