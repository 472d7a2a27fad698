//! `memfleet bench` end to end: it spawns the do-nothing floor server and `memfleet server`
//! from this build, loads both, verifies every reply and exits 0 only if there was no error;
//! each experiment is a subcommand with only its own flags, and the older spellings
//! (`--scenario X`, `--herd-*` and the like) still run.

use crate::support;

use std::collections::BTreeSet;
use std::process::{Command, Output};
use support::results::{assert_figure, assert_results, out_dir};

fn memfleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args(args)
        .output()
        .unwrap()
}

/// The long flags an experiment's `--help` lists.
fn flags_of(experiment: &str) -> BTreeSet<String> {
    let out = memfleet(&["bench", experiment, "--help"]);
    assert!(out.status.success(), "{experiment} --help: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            // `      --keys <KEYS>` or `  -c, --conns <CONNS>`
            let l = l.trim_start();
            let l = l
                .split_once(", ")
                .filter(|(short, _)| short.len() == 2)
                .map_or(l, |s| s.1);
            let flag = l.strip_prefix("--")?.split([' ', '=']).next()?;
            Some(flag.to_string())
        })
        .collect()
}

/// Each experiment's `--help` lists exactly the flags it reads: the groups it shares with
/// others and its own, never another experiment's.
#[test]
fn each_experiment_lists_only_its_own_flags() {
    const SERVERS: &str = "spawn target server-threads server-memory memcached-bin \
                           memfleet-bin server-cpu client-cpu no-pin";
    const CLOSED_LOOP: &str = "conns duration keys value-size zipf repeat seed";
    let expected = [
        (
            "load",
            format!(
                "{SERVERS} {CLOSED_LOOP} pipeline get-ratio warmup no-prefill rate \
                 delete-ratio mix key-size ttl protocol workload"
            ),
        ),
        (
            "herd",
            format!(
                "{SERVERS} conns duration repeat value-size invalidate db-latency retry \
                 accept-stale modes"
            ),
        ),
        ("udp", format!("{SERVERS} {CLOSED_LOOP}")),
        (
            "restart",
            "server-threads server-memory memcached-bin memfleet-bin server-cpu client-cpu \
             no-pin keys value-size"
                .into(),
        ),
        (
            "gutter",
            "conns duration keys value-size zipf memfleet-bin db-latency fail-at gutter-ttl".into(),
        ),
        (
            "client",
            format!("{CLOSED_LOOP} memfleet-bin server-cpu client-cpu no-pin"),
        ),
        (
            "invalidation",
            "memfleet-bin conns duration rate outage no-spool".into(),
        ),
        (
            "replay",
            "spawn server-threads server-memory memcached-bin memfleet-bin server-cpu \
             client-cpu no-pin memory-sizes trace trace-format requests speedup workload \
             keys zipf seed window conns depth"
                .into(),
        ),
        (
            "warmup",
            "conns duration keys value-size zipf memfleet-bin db-latency seed server-memory \
             db-concurrency"
                .into(),
        ),
        (
            "expiry",
            "spawn target server-threads server-memory memcached-bin memfleet-bin duration \
             value-size seed rate short-ttl long-share"
                .into(),
        ),
        (
            "discovery",
            "conns duration keys value-size zipf memfleet-bin db-latency members replace-at \
             resolve-interval"
                .into(),
        ),
        (
            "regions",
            "memfleet-bin delays phase write-rate read-rate keys no-faults \
             replica-invalidator-on-primary"
                .into(),
        ),
        (
            "scale",
            "only skip quick threads workers pipeline engine-duration duration warmup keys \
             memory conns-per-worker memcached nutcracker memfleet-bin seed"
                .into(),
        ),
        (
            "migration",
            "keys value-size zipf memfleet-bin conns db-latency shadow-for migrate-for \
             drain-for ttl written-keys written-reads writes quick"
                .into(),
        ),
        (
            "admission",
            "only quick rate steady-rate steady-conns storm-conns storm-depth storm-rate storm-idle \
             storm-direct split-workers duration repeat keys value-size router-threads stall stall-conns stall-depth \
             server-failure-limit timeout-ms memfleet-bin seed"
                .into(),
        ),
        (
            "flash",
            "items value-size memory dir flash-threads conns flash-io keys-per-get pipeline fill-conns read-time memcached fio quick memfleet-bin seed"
                .into(),
        ),
    ];
    for (experiment, flags) in expected {
        let want: BTreeSet<String> = flags
            .split_whitespace()
            .chain(["out", "help"])
            .map(String::from)
            .collect();
        assert_eq!(
            flags_of(experiment),
            want,
            "memfleet bench {experiment} --help"
        );
    }
    // Where no experiment is named, the flags are load's.
    let out = String::from_utf8(memfleet(&["bench", "--help"]).stdout).unwrap();
    for experiment in ["load", "herd", "replay", "expiry"] {
        assert!(out.contains(&format!("\n  {experiment} ")), "{out}");
    }
}

/// `--scenario X` anywhere on the line is the subcommand X, and the old prefixed names of
/// an experiment's flags are aliases of the new ones.
#[test]
fn scenario_flag_and_old_flag_names_still_work() {
    let help = |args: &[&str]| memfleet(args).stdout;
    assert_eq!(
        help(&["bench", "--scenario", "herd", "--help"]),
        help(&["bench", "herd", "--help"])
    );
    assert_eq!(
        help(&["bench", "--scenario=replay", "--help"]),
        help(&["bench", "replay", "--help"])
    );
    // The same refusal by herd itself, however the experiment and the flag are spelled: the
    // flags reached herd's own checks.
    for args in [
        &["bench", "herd", "--spawn", "memfleet", "--invalidate", "0s"][..],
        &[
            "bench",
            "--spawn",
            "memfleet",
            "--scenario",
            "herd",
            "--herd-invalidate",
            "0s",
        ],
    ] {
        let out = memfleet(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--repeat, --duration and --invalidate must be positive"),
            "{args:?}: {stderr}"
        );
    }
    // Plain `memfleet bench --flag ...` is load.
    let out = memfleet(&["bench", "--conns", "0", "--spawn", "memfleet"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--conns, --repeat and every --pipeline"),
        "{stderr}"
    );
}

/// A flag of another experiment is refused before anything starts, naming the experiments
/// that take it.
#[test]
fn another_experiments_flag_is_refused_with_its_owner_named() {
    for (args, owner) in [
        (
            &["bench", "load", "--invalidate", "1s"][..],
            "`memfleet bench herd`",
        ),
        (
            &["bench", "--spawn", "memfleet", "--herd-invalidate", "1s"],
            "`memfleet bench herd`",
        ),
        (
            &["bench", "--scenario", "udp", "--pipeline", "4"],
            "`memfleet bench load|scale|flash`",
        ),
        (
            &["bench", "gutter", "--spawn", "memfleet"],
            "load|herd|udp|replay|expiry`",
        ),
        (
            &["bench", "expiry", "--trace", "t.csv"],
            "`memfleet bench replay`",
        ),
    ] {
        let out = memfleet(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?} was accepted: {stderr}"
        );
        let flag = args
            .iter()
            .find(|a| a.starts_with("--") && **a != "--spawn" && **a != "--scenario");
        let flag = flag.copied().unwrap_or("--spawn");
        assert!(
            stderr.contains(&format!("unexpected argument '{flag}'")),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("{flag} is a flag of")),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains(owner), "{args:?}: {stderr}");
    }
}

#[test]
fn bench_spawns_floor_and_memfleet_and_verifies_every_reply() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let out = Command::new(bin)
        .args([
            "bench",
            "load",
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

/// The herd experiment against this build's server: with leases one client per delete
/// queries the database; without, every reader that misses does. Spelled the old way
/// (`--scenario herd`, `--herd-*` flags), which must keep working.
#[test]
fn herd_scenario_shows_leases_cutting_database_queries() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("herd");
    let out = Command::new(bin)
        .args(["bench", "--scenario", "herd", "--spawn", "memfleet"])
        .arg("--out")
        .arg(&dir)
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
    let result = assert_results(&dir, "herd");
    let rows = result["rows"].as_array().unwrap();
    let json_plain = rows.iter().find(|r| r["mode"] == "plain").unwrap();
    assert_eq!(json_plain["db_queries"], plain);
    // The timeline covers the whole run (15 windows of 100 ms) and adds up to the total.
    let timeline = json_plain["db_qps_timeline"].as_array().unwrap();
    assert!(timeline.len() >= 15, "{json_plain}");
    let summed: f64 = timeline.iter().map(|p| p[1].as_f64().unwrap() * 0.1).sum();
    assert!((summed - plain as f64).abs() < 0.5, "{summed} vs {plain}");
    assert_figure(&dir, "herd-db-queries.png");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The restart scenario: every key read back with the right value after a warm restart.
#[test]
fn restart_scenario_keeps_every_item() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("restart");
    let out = Command::new(bin)
        .args(["bench", "restart", "--memfleet-bin", bin, "--no-pin"])
        .arg("--out")
        .arg(&dir)
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
    let result = assert_results(&dir, "restart");
    assert_eq!(result["after"]["hits"], 5000, "{result}");
    assert_eq!(result["after"]["wrong"], 0, "{result}");
    assert!(result["restart_ms"].as_f64().unwrap() > 0.0, "{result}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The flash experiment, quick: items pushed far past RAM land on flash, reads of them hit
/// with every value checked, and the figures are all there.
#[test]
fn flash_experiment_reports_ram_per_flash_item_and_flash_hits() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("flash");
    let out = Command::new(bin)
        .args([
            "bench",
            "flash",
            "--quick",
            "--memfleet-bin",
            bin,
            "--fio",
            "/nonexistent",
        ])
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("| memfleet |"), "{stdout}");
    assert!(stdout.contains("fio: not run"), "{stdout}");
    let result = assert_results(&dir, "flash");
    let run = &result["runs"][0];
    assert_eq!(run["server"], "memfleet", "{result}");
    assert!(run["flash_items"].as_u64().unwrap() > 5_000, "{result}");
    assert!(run["flash_hits"].as_u64().unwrap() > 0, "{result}");
    assert!(run["hits"].as_u64().unwrap() > 0, "{result}");
    let wa = run["write_amplification"].as_f64().unwrap();
    assert!((1.0..1.3).contains(&wa), "{result}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The gutter scenario: with a gutter, a killed server costs no client-visible failure and
/// far fewer database queries than without.
#[test]
fn gutter_scenario_shows_the_gutter_absorbing_a_failure() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("gutter");
    let out = Command::new(bin)
        .args(["bench", "gutter", "--memfleet-bin", bin])
        .arg("--out")
        .arg(&dir)
        .args(["--duration", "4s", "--fail-at", "1s", "--conns", "10"])
        .args(["--keys", "2000", "--db-latency", "2ms"])
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
    let result = assert_results(&dir, "gutter");
    let runs = result["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{result}");
    // The totals include the second of the kill, which the summary line leaves out.
    assert!(
        runs[0]["totals"]["failures"].as_f64().unwrap() >= failures[0],
        "{result}"
    );
    assert_eq!(runs[1]["totals"]["failures"], 0, "{result}");
    assert!(!runs[1]["series"]["gutter_hit_rate"]
        .as_array()
        .unwrap()
        .is_empty());
    for figure in [
        "gutter-failures.png",
        "gutter-db-per-100-gets.png",
        "gutter-hit-rate.png",
    ] {
        assert_figure(&dir, figure);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The client scenario: the client library straight over TCP, over UDP and through the
/// router, every reply checked, each row with the router's CPU only where it is in the path.
#[test]
fn client_scenario_compares_direct_udp_and_router_paths() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("client");
    let out = Command::new(bin)
        .args(["bench", "client", "--memfleet-bin", bin, "--no-pin"])
        .arg("--out")
        .arg(&dir)
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
    let result = assert_results(&dir, "client");
    let paths = result["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 3, "{result}");
    for path in paths {
        let cdf = path["latency_cdf"].as_array().unwrap();
        assert!(cdf.len() > 100, "{path}");
        assert_eq!(cdf.last().unwrap()["percentile"], 100.0);
    }
    assert_figure(&dir, "client-latency-cdf.png");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The udp scenario: gets over TCP and over UDP to this build's server, every reply checked;
/// one table row each, and with `--out` their latency CDFs.
#[test]
fn udp_scenario_measures_tcp_and_udp_latency() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("udp");
    let out = Command::new(bin)
        .args(["bench", "udp", "--spawn", "memfleet"])
        .args(["--memfleet-bin", bin, "--no-pin", "--server-memory", "64"])
        .arg("--out")
        .arg(&dir)
        .args(["--duration", "1s", "--repeat", "1", "--conns", "4"])
        .args(["--keys", "1000"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    for via in ["tcp", "udp"] {
        assert!(
            stdout.lines().any(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                words.len() == 8 && words[0] == "memfleet" && words[1] == via
            }),
            "no {via} row in:\n{stdout}"
        );
    }
    let result = assert_results(&dir, "udp");
    let rows = result["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{result}");
    for row in rows {
        assert!(row["gets"].as_u64().unwrap() > 0, "{row}");
        assert!(row["latency_cdf"].as_array().unwrap().len() > 100, "{row}");
    }
    assert_figure(&dir, "udp-latency-cdf.png");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The invalidation scenario: a scratch PostgreSQL, two clusters, the invalidator; every
/// committed transaction is handled (the bench fails otherwise) and latencies are printed.
#[test]
fn invalidation_scenario_reports_commit_to_deleted_latency() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let dir = out_dir("invalidation");
    let out = Command::new(bin)
        .args(["bench", "invalidation", "--memfleet-bin", bin])
        .arg("--out")
        .arg(&dir)
        .args(["--duration", "2s", "--conns", "4", "--rate", "400"])
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
    let result = assert_results(&dir, "invalidation");
    assert_eq!(result["transactions"], committed, "{result}");
    assert!(
        result["latency_cdf"].as_array().unwrap().len() > 100,
        "{result}"
    );
    assert_figure(&dir, "invalidation-latency-cdf.png");
    std::fs::remove_dir_all(dir).unwrap();
}
