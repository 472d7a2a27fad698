//! `memfleet bench load` end to end against this build's server and Debian's
//! memcached: the open loop reaches its target rate, the meta protocol and delete and TTL
//! mixes are verified reply by reply (misses allowed, wrong values not), and `--out`
//! leaves the rows with their latency CDFs as JSON.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const MEMCACHED: &str = "/usr/bin/memcached";

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

/// A directory of its own for one test's `--out`, removed when dropped.
struct OutDir(PathBuf);

impl OutDir {
    fn new(test: &str) -> OutDir {
        let dir =
            std::env::temp_dir().join(format!("memfleet-bench-load-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        OutDir(dir)
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `memfleet bench` with `args` against memfleet and memcached (spawned on free
/// ports), short runs, and returns its stdout and the `result` of its load.json.
fn bench(test: &str, args: &[&str]) -> (String, Value) {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    let out_dir = OutDir::new(test);
    let out = Command::new(bin)
        .args([
            "bench",
            "load",
            "--spawn",
            "memfleet",
            "--spawn",
            "memcached",
        ])
        .args(["--memfleet-bin", bin, "--memcached-bin", MEMCACHED])
        .args(["--no-pin", "--server-memory", "64", "--conns", "8"])
        .args(["--keys", "2000", "--pipeline", "1"])
        .arg("--out")
        .arg(&out_dir.0)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let text = std::fs::read_to_string(out_dir.0.join("load.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["scenario"], "load");
    let figure = std::fs::read(out_dir.0.join("load-latency-cdf.png")).unwrap();
    assert!(figure.starts_with(b"\x89PNG\r\n\x1a\n") && figure.len() > 5_000);
    (stdout, json["result"].clone())
}

/// The rows of both targets, checked for no errors.
fn rows<'a>(result: &'a Value, stdout: &str) -> Vec<&'a Value> {
    let rows: Vec<&Value> = result["rows"].as_array().unwrap().iter().collect();
    let targets: Vec<&str> = rows.iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert_eq!(targets, ["memfleet", "memcached"], "{stdout}");
    for r in &rows {
        assert_eq!(r["errors"], 0, "{}: errors:\n{stdout}", r["target"]);
    }
    rows
}

fn number(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

#[test]
fn open_loop_reaches_its_target_rate_on_both_servers() {
    if !have_memcached() {
        return;
    }
    let (stdout, result) = bench(
        "open",
        &[
            "--rate",
            "3000",
            "--duration",
            "1500ms",
            "--warmup",
            "300ms",
        ],
    );
    assert_eq!(number(&result["settings"]["rate"]), 3000.0);
    for r in rows(&result, &stdout) {
        assert_eq!(number(&r["target_rate"]), 3000.0);
        // How late the load generator wrote its requests: there, whatever the machine.
        assert!(number(&r["send_lag_p99_us"]) >= 0.0, "{r}");
        let ops = number(&r["ops_per_sec"]);
        // A Poisson schedule over 1.5 s: ~4500 requests, a few percent of noise.
        assert!(
            (2550.0..3450.0).contains(&ops),
            "{}: {ops} ops/s for a target of 3000:\n{stdout}",
            r["target"]
        );
        // Every key was stored first and nothing expires or is deleted.
        assert_eq!(number(&r["hit_ratio"]), 1.0, "{stdout}");
    }
    assert!(stdout.contains("target ops/s"), "{stdout}");
}

#[test]
fn a_rate_beyond_the_servers_is_reported_as_missed() {
    if !have_memcached() {
        return;
    }
    let (stdout, result) = bench(
        "overload",
        &["--rate", "5000000", "--duration", "1s", "--warmup", "200ms"],
    );
    for r in rows(&result, &stdout) {
        let ops = number(&r["ops_per_sec"]);
        assert!(ops > 100.0 && ops < 2_500_000.0, "{ops}:\n{stdout}");
        // Requests held back count from when they were due: the tail shows the backlog.
        assert!(number(&r["p99_us"]) > 10_000.0, "{stdout}");
    }
}

#[test]
fn meta_protocol_with_deletes_and_size_distributions_is_verified() {
    if !have_memcached() {
        return;
    }
    let (stdout, result) = bench(
        "meta",
        &[
            "--protocol",
            "meta",
            "--mix",
            "get=0.6,set=0.2,delete=0.2",
            "--key-size",
            "16-64",
            "--value-size",
            "fb-app",
            // Segcache's `c` TTLs (12 h to 14 d): every ms carries a T flag.
            "--ttl",
            "c",
            "--duration",
            "1s",
            "--warmup",
            "200ms",
        ],
    );
    let settings = &result["settings"];
    assert_eq!(settings["protocol"], "meta");
    assert_eq!(number(&settings["mix"]["delete"]), 0.2);
    assert_eq!(settings["key_size"], "16-64");
    assert_eq!(settings["value_size"], "fb-app");
    assert_eq!(settings["ttl"].as_array().unwrap().len(), 3);
    for r in rows(&result, &stdout) {
        let hits = number(&r["hit_ratio"]);
        // Deletes make misses (a set brings a key back): misses are fine, wrong
        // values would have been errors.
        assert!(
            hits < 0.95 && hits > 0.2,
            "{}: hit ratio {hits}:\n{stdout}",
            r["target"]
        );
        assert!(number(&r["ops_per_sec"]) > 100.0, "{stdout}");
    }
}

#[test]
fn ttl_mix_expires_keys_and_hits_stay_verified() {
    if !have_memcached() {
        return;
    }
    // Half the keys live 1 s; after a 2.5 s warm-up the pre-filled ones are gone unless
    // a set (1 request in 100) stored them again.
    let (stdout, result) = bench(
        "ttl",
        &[
            "--ttl",
            "1:0.5,0:0.5",
            "--get-ratio",
            "0.99",
            "--key-size",
            "etc",
            "--value-size",
            "etc",
            "--duration",
            "1s",
            "--warmup",
            "2500ms",
        ],
    );
    assert_eq!(result["settings"]["value_size"], "etc");
    for r in rows(&result, &stdout) {
        let hits = number(&r["hit_ratio"]);
        assert!(
            hits < 0.9 && hits > 0.3,
            "{}: hit ratio {hits}:\n{stdout}",
            r["target"]
        );
    }
}

#[test]
fn json_rows_carry_percentiles_ratios_and_a_latency_cdf() {
    if !have_memcached() {
        return;
    }
    let (stdout, result) = bench("json", &["--duration", "1s", "--warmup", "200ms"]);
    let rows = rows(&result, &stdout);
    for r in &rows {
        for field in [
            "ops_per_sec",
            "hit_ratio",
            "p50_us",
            "p90_us",
            "p99_us",
            "p999_us",
        ] {
            assert!(number(&r[field]) > 0.0, "{field} of {r}");
        }
        assert!(number(&r["server_cpu_us_per_op"]) > 0.0, "{r}");
        assert!(r["target_rate"].is_null());
        assert!(r["send_lag_p99_us"].is_null());
        let cdf = r["latency_cdf"].as_array().unwrap();
        assert!(cdf.len() > 100);
        let points: Vec<(f64, f64)> = cdf
            .iter()
            .map(|p| (number(&p["percentile"]), number(&p["latency_us"])))
            .collect();
        assert_eq!(points[0].0, 0.0);
        assert_eq!(points.last().unwrap().0, 100.0);
        assert!(points
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        let p50 = points.iter().find(|p| p.0 == 50.0).unwrap().1;
        assert!((p50 - number(&r["p50_us"])).abs() < 1e-9);
    }
    assert_eq!(number(&rows[0]["ops_per_sec_ratio"]), 1.0);
    assert!(number(&rows[1]["server_cpu_per_op_ratio"]) > 0.0);
}

#[test]
fn options_the_targets_cannot_serve_are_refused() {
    let bin = env!("CARGO_BIN_EXE_memfleet");
    for (args, why) in [
        (&["--spawn", "floor", "--value-size", "etc"][..], "floor"),
        (
            &[
                "--spawn",
                "memfleet",
                "--mix",
                "get=1",
                "--get-ratio",
                "0.5",
            ][..],
            "--mix",
        ),
        (
            &["--spawn", "memfleet", "--mix", "get=0.5,set=0.2"][..],
            "sum to 1",
        ),
        (&["--spawn", "memfleet", "--key-size", "300"][..], "250"),
        (&["--spawn", "memfleet", "--rate", "0"][..], "--rate"),
        (
            &[
                "--scenario",
                "udp",
                "--spawn",
                "memfleet",
                "--value-size",
                "1-9",
            ][..],
            "fixed",
        ),
    ] {
        let out = Command::new(bin)
            .args(["bench", "--no-pin", "--memfleet-bin", bin])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
}
