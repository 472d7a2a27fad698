//! `memfleet bench` end to end: it spawns the do-nothing floor server and `memfleet server`
//! from this build, loads both, verifies every reply and exits 0 only if there was no error.

use std::process::Command;

#[test]
fn bench_spawns_floor_and_memfleet_and_verifies_every_reply() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let out = Command::new(bin)
        .args([
            "bench",
            "--spawn",
            "floor",
            "--spawn",
            "memfleet",
            "--memfleet-bin",
            bin,
        ])
        .args([
            "--duration",
            "1s",
            "--warmup",
            "200ms",
            "--conns",
            "8",
            "--no-pin",
        ])
        .args(["--keys", "10000", "--pipeline", "1,16"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    // The table rows: target name, pipeline depth, ops/s, ...
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for (name, depth) in [
        ("floor", "1"),
        ("floor", "16"),
        ("memfleet", "1"),
        ("memfleet", "16"),
    ] {
        assert!(
            rows.iter()
                .any(|r| r.len() > 3 && r[0] == name && r[1] == depth),
            "no {name} depth {depth} row in:\n{stdout}"
        );
    }
}

/// The herd scenario against this build's server: with leases one client per delete
/// queries the database; without, every reader that misses does.
#[test]
fn herd_scenario_shows_leases_cutting_database_queries() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let out = Command::new(bin)
        .args(["bench", "--scenario", "herd", "--spawn", "memfleet"])
        .args(["--memfleet-bin", bin, "--no-pin", "--server-memory", "64"])
        .args(["--duration", "1500ms", "--conns", "30"])
        .args(["--herd-invalidate", "100ms", "--herd-db-latency", "10ms"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    // Table rows: server, mode, reads/s, hit1 %, db total, ...
    let db_total = |mode: &str| -> u64 {
        stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|r| r.len() > 5 && r[0] == "memfleet" && r[1] == mode)
            .unwrap_or_else(|| panic!("no {mode} row in:\n{stdout}"))[4]
            .parse()
            .unwrap()
    };
    let (plain, lease, meta) = (db_total("plain"), db_total("lease"), db_total("meta"));
    // About 14 updates in 1.5 s: leases allow one query each (plus the key's first fill).
    assert!(
        lease <= 16 && meta <= 16,
        "lease {lease}, meta {meta}:\n{stdout}"
    );
    assert!(
        plain >= 5 * lease,
        "plain {plain} vs lease {lease}:\n{stdout}"
    );
}

/// The restart scenario: every key read back with the right value after a warm restart.
#[test]
fn restart_scenario_keeps_every_item() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let out = Command::new(bin)
        .args([
            "bench",
            "--scenario",
            "restart",
            "--memfleet-bin",
            bin,
            "--no-pin",
        ])
        .args([
            "--server-memory",
            "16",
            "--keys",
            "5000",
            "--value-size",
            "500",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("right after the restart: 5000 of 5000 keys hit (100.00%), 0 wrong"),
        "{stdout}"
    );
    assert!(stdout.contains("warm restart items=5000"), "{stdout}");
}

/// The gutter scenario: with a gutter, a killed server costs no client-visible failure and
/// far fewer database queries than without.
#[test]
fn gutter_scenario_shows_the_gutter_absorbing_a_failure() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let out = Command::new(bin)
        .args(["bench", "--scenario", "gutter", "--memfleet-bin", bin])
        .args([
            "--duration",
            "4s",
            "--gutter-fail-at",
            "1s",
            "--conns",
            "10",
        ])
        .args(["--keys", "2000", "--herd-db-latency", "2ms"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    // "after it (...): database A/s without gutter, B/s with (P vs Q queries per 100
    // gets); client-visible failures C without, D with ..."
    let line = stdout
        .lines()
        .find(|l| l.starts_with("after it"))
        .unwrap_or_else(|| panic!("no summary in:\n{stdout}"));
    let after = |label: &str| -> Vec<f64> {
        line.split_once(label)
            .unwrap_or_else(|| panic!("no {label:?} in {line}"))
            .1
            .split(|c: char| !c.is_ascii_digit() && c != '.')
            .filter_map(|w| w.parse().ok())
            .take(2)
            .collect()
    };
    let per_get = after("with (");
    let failures = after("client-visible failures ");
    assert!(failures[0] > 0.0 && failures[1] == 0.0, "{line}");
    assert!(per_get[1] * 2.0 < per_get[0], "{line}");
    assert!(stdout.contains("gutter hit rate"), "{stdout}");
}

/// The client scenario: the client library straight over TCP, over UDP and through the
/// router, every reply checked, each row with the router's CPU only where it is in the path.
#[test]
fn client_scenario_compares_direct_udp_and_router_paths() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let out = Command::new(bin)
        .args([
            "bench",
            "--scenario",
            "client",
            "--memfleet-bin",
            bin,
            "--no-pin",
        ])
        .args([
            "--duration",
            "1s",
            "--repeat",
            "1",
            "--conns",
            "8",
            "--keys",
            "1000",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let row = |path: &str| -> Vec<f64> {
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with(path))
            .unwrap_or_else(|| panic!("no {path} row in:\n{stdout}"));
        line[path.len()..]
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect()
    };
    // gets/s, p50, p99, lost, client, router, server, total
    let tcp = row("client → server, TCP");
    let udp = row("client → server, UDP");
    let routed = row("client → router → server");
    assert!(tcp[0] > 0.0 && udp[0] > 0.0 && routed[0] > 0.0, "{stdout}");
    // The router is idle off its path (its once-a-second config check aside).
    assert!(routed[5] > 0.0, "{stdout}");
    assert!(
        tcp[5] < routed[5] / 5.0 && udp[5] < routed[5] / 5.0,
        "{stdout}"
    );
}

/// The invalidation scenario: a scratch PostgreSQL, two clusters, the invalidator; every
/// committed transaction is handled (the bench fails otherwise) and latencies are printed.
#[test]
fn invalidation_scenario_reports_commit_to_deleted_latency() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let out = Command::new(bin)
        .args(["bench", "--scenario", "invalidation", "--memfleet-bin", bin])
        .args([
            "--duration",
            "2s",
            "--conns",
            "4",
            "--invalidation-rate",
            "400",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let committed: u64 = stdout
        .lines()
        .find_map(|l| {
            l.split(" transactions committed")
                .next()
                .filter(|_| l.contains(" transactions committed"))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no commit count in:\n{stdout}"));
    assert!(committed > 400, "{stdout}");
    assert!(
        stdout.contains(&format!(
            "invalidator: {committed} keys deleted in 2 clusters"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("commit-to-deleted latency: p50 "),
        "{stdout}"
    );
    assert!(stdout.contains("sampled check: 0 of "), "{stdout}");
}
