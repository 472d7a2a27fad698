//! `memfleet bench`'s load generator against real sockets: Debian's memcached
//! (must pass with zero errors and a server CPU figure) and a fake server that
//! returns wrong values (must be caught and fail the run).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use clap::Parser;
use memfleet_bench::load::{self, LoadArgs};

const MEMCACHED: &str = "/usr/bin/memcached";

/// Parses a `memfleet bench` command line the way the binary does.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: LoadArgs,
}

fn args(extra: &[&str]) -> LoadArgs {
    let base = ["bench", "--warmup", "200ms", "--conns", "8", "--no-pin"];
    Cli::parse_from(base.iter().chain(extra)).args
}

/// Whether memcached is here; outside CI a missing one skips the test, under CI it fails.
fn have_memcached() -> bool {
    if Path::new(MEMCACHED).exists() {
        return true;
    }
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        panic!("{MEMCACHED} is missing under CI: install Debian's memcached package");
    }
    eprintln!("skipped: {MEMCACHED} is not installed (apt-get install memcached)");
    false
}

#[test]
fn memcached_target_runs_clean_with_server_cpu() {
    if !have_memcached() {
        return;
    }
    // Started by the test (rather than by `--spawn`), killed on drop.
    let (server, port) = memfleet_testkit::memcached(&["-t", "1", "-m", "64"]);
    drop(memfleet_testkit::connect(port, Duration::from_secs(1)));
    let target = format!("mc=127.0.0.1:{port},pid={}", server.0.id());
    let rows = load::bench(&args(&[
        "--target",
        &target,
        "--pipeline",
        "1,16",
        "--duration",
        "1s",
        "--keys",
        "10000",
    ]))
    .unwrap();
    assert_eq!(rows.len(), 2);
    for (row, depth) in rows.iter().zip([1, 16]) {
        assert_eq!((row.target.as_str(), row.depth), ("mc", depth));
        assert!(row.ops_per_sec > 0.0, "{row:?}");
        assert_eq!(row.errors, 0, "{row:?}");
        // Everything was pre-filled into 64 MiB: every get hits.
        assert_eq!(row.hit_ratio, 1.0, "{row:?}");
        let cpu = row.server_us_per_op.expect("pid given, CPU known");
        // memcached needs some µs per op; 0 would mean the /proc sampling is broken.
        assert!(cpu > 0.0 && cpu < 1000.0, "{row:?}");
        let [p50, p90, p99, p999] = row.percentiles_us;
        assert!(0.0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= row.max_us);
    }
}

#[test]
fn spawn_mode_starts_memcached_and_passes() {
    if !have_memcached() {
        return;
    }
    let a = args(&[
        "--spawn",
        "memcached",
        "--memcached-bin",
        MEMCACHED,
        "--pipeline",
        "4",
        "--repeat",
        "2",
        "--duration",
        "500ms",
        "--keys",
        "10000",
    ]);
    let rows = load::bench(&a).unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].ops_per_sec > 0.0);
    assert_eq!(rows[0].errors, 0);
    assert!(rows[0].server_us_per_op.is_some_and(|c| c > 0.0));
    load::run(&a).unwrap();
}

/// Answers sets correctly but every get with a value that was never stored.
fn fake_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            // One small write per reply: without NODELAY, Nagle would stall every batch.
            conn.set_nodelay(true).unwrap();
            std::thread::spawn(move || {
                let mut out = conn.try_clone().unwrap();
                let mut lines = BufReader::new(conn);
                let mut line = String::new();
                while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
                    let words: Vec<&str> = line.split_whitespace().collect();
                    let reply = match words[..] {
                        ["get", key] => {
                            format!("VALUE {key} 0 100\r\n{}\r\nEND\r\n", "x".repeat(100))
                        }
                        ["set", ..] => {
                            let mut data = String::new();
                            let _ = lines.read_line(&mut data);
                            "STORED\r\n".to_string()
                        }
                        _ => "ERROR\r\n".to_string(),
                    };
                    if out.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    port
}

#[test]
fn wrong_values_are_counted_and_fail_the_run() {
    let port = fake_server();
    let target = format!("fake=127.0.0.1:{port}");
    let a = args(&[
        "--target",
        &target,
        "--pipeline",
        "8",
        "--duration",
        "300ms",
        "--keys",
        "100",
    ]);
    let rows = load::bench(&a).unwrap();
    assert!(rows[0].errors > 0, "{:?}", rows[0]);
    assert_eq!(rows[0].server_us_per_op, None);
    let err = load::run(&a).unwrap_err();
    assert!(err.to_string().contains("error"), "{err}");
}
