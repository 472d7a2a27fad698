//! `memfleet bench scale --quick` end to end through the built binary: the engine
//! in-process, `memfleet server` and Debian's memcached, `memfleet router` and Debian's
//! nutcracker (both installed by scripts/test), each measured for a fraction of a second;
//! the table has its three sections and the JSON holds sane, nonzero numbers for every
//! cell. Bad flags are refused before anything starts.

use crate::support;

use std::process::{Command, Output};
use support::results::{assert_figure, assert_results, out_dir};

/// One run at a time: each pins its threads and processes to the same first CPUs, so runs
/// side by side would measure each other (and, on a loaded 2-core machine, time out).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn memfleet(args: &[&str]) -> Output {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args(args)
        .output()
        .unwrap()
}

fn number(v: &serde_json::Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} of {v}"))
}

/// Every cell of a server or router section: nonzero throughput, efficiency 1 at the
/// single worker, every get a hit, no error, a plausible CPU time per reply (nonzero over
/// the section).
fn assert_net_cells(cells: &serde_json::Value, targets: &[&str], pipelines: &[u64]) {
    let cells = cells.as_array().unwrap();
    assert_eq!(cells.len(), targets.len() * pipelines.len(), "{cells:?}");
    for target in targets {
        for &pipeline in pipelines {
            let c = cells
                .iter()
                .find(|c| c["target"] == *target && c["pipeline"] == pipeline)
                .unwrap_or_else(|| panic!("no {target} pipeline {pipeline} in {cells:?}"));
            assert_eq!(c["workers"], 1, "{c}");
            assert!(number(c, "ops_per_sec") > 100.0, "{c}");
            assert!(c["ops"].as_u64().unwrap() > 0, "{c}");
            // CPU time comes in 10 ms ticks: one short cell may read none, never a lot.
            let cpu = number(c, "server_us_per_op");
            assert!((0.0..100_000.0).contains(&cpu), "{c}");
            assert_eq!(number(c, "efficiency"), 1.0, "{c}");
            assert_eq!(number(c, "hit_ratio"), 1.0, "{c}");
            assert_eq!(c["errors"], 0, "{c}");
            let busy = number(c, "load_busy");
            assert!((0.0..=1.5).contains(&busy), "{c}");
        }
    }
    let total = |field: &str| cells.iter().map(|c| number(c, field)).sum::<f64>();
    assert!(
        total("server_us_per_op") > 0.0,
        "no CPU time read: {cells:?}"
    );
    assert!(total("load_busy") > 0.0, "no load CPU time read: {cells:?}");
}

#[test]
fn quick_scale_measures_every_part() {
    let dir = out_dir("scale");
    let out = memfleet(&["bench", "scale", "--quick", "--out", dir.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for heading in [
        "engine in-process",
        "server over loopback",
        "router over loopback",
        "command: ",
        "estimated",
    ] {
        assert!(stdout.contains(heading), "no {heading:?} in:\n{stdout}");
    }
    let result = assert_results(&dir, "scale");
    assert!(!result["machine"]["cpus"].as_array().unwrap().is_empty());

    let engine = result["engine"].as_array().unwrap();
    assert_eq!(
        engine.len(),
        6,
        "3 mixes x 2 popularities x 1 thread: {engine:?}"
    );
    for c in engine {
        assert_eq!(c["threads"], 1, "{c}");
        assert!(number(c, "ops_per_sec") > 1000.0, "{c}");
        assert_eq!(
            number(c, "ops_per_sec"),
            number(c, "ops_per_sec_per_thread")
        );
        assert_eq!(number(c, "efficiency"), 1.0, "{c}");
        // Every key was stored first and the heap holds them all: every get hits.
        assert_eq!(number(c, "hit_ratio"), 1.0, "{c}");
        assert_eq!(c["evicted_items"], 0, "{c}");
        // One thread contends with nobody.
        for counter in ["reserve_retries", "chain_lock_waits", "evict_lock_waits"] {
            assert_eq!(c["contention"][counter], 0, "{counter} of {c}");
        }
    }
    assert_net_cells(&result["server"], &["memfleet", "memcached"], &[1, 16]);
    // memfleet's contention counters come from `stats memfleet`; memcached has none.
    for c in result["server"].as_array().unwrap() {
        let counted = c["contention"]["reserve_retries"].is_u64();
        assert_eq!(counted, c["target"] == "memfleet", "{c}");
    }
    assert!(stdout.contains("contention of"), "{stdout}");
    assert_net_cells(
        &result["router"],
        &["memfleet-router", "memfleet-router-pc", "nutcracker"],
        &[1, 16],
    );
    for figure in [
        "scale-engine-zipf.png",
        "scale-engine-uniform.png",
        "scale-server.png",
        "scale-router.png",
    ] {
        assert_figure(&dir, figure);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn only_and_skip_choose_the_parts() {
    let out = memfleet(&[
        "bench",
        "scale",
        "--quick",
        "--only",
        "engine",
        "--engine-duration",
        "50ms",
        "--keys",
        "1000",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("engine in-process"), "{stdout}");
    assert!(!stdout.contains("server over loopback"), "{stdout}");
    assert!(!stdout.contains("router over loopback"), "{stdout}");
}

#[test]
fn bad_flags_are_refused() {
    for (args, says) in [
        (&["--threads", "0"][..], "at least 1"),
        (&["--pipeline", "0"][..], "at least 1"),
        (
            &["--only", "engine", "--skip", "server"][..],
            "cannot be used with",
        ),
        (&["--only", "disk"][..], "invalid value"),
        (&["--threads", "100000"][..], "CPUs"),
    ] {
        let mut argv = vec!["bench", "scale", "--quick"];
        argv.extend(args);
        let out = memfleet(&argv);
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(text.contains(says), "{args:?}: {text}");
        assert!(!out.status.success(), "{args:?}: {text}");
    }
}

/// A --memcached that does not run leaves memcached out, and the table says so.
#[test]
fn a_missing_memcached_is_left_out_and_said() {
    let out = memfleet(&[
        "bench",
        "scale",
        "--quick",
        "--only",
        "server",
        "--keys",
        "100",
        "--pipeline",
        "1",
        "--memcached",
        "/nonexistent/memcached",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("note: memcached left out: /nonexistent/memcached -V did not run"),
        "{stdout}"
    );
    assert!(stdout.contains("\nmemfleet "), "{stdout}");
    assert!(!stdout.contains("\nmemcached "), "{stdout}");
}
