//! `memfleet bench replay` end to end: `memfleet sim --write-trace` writes a small
//! synthetic trace in each of the three formats, and the replay runs it against `memfleet
//! server` from this build and Debian's memcached, each started fresh per memory size. The
//! sizing curve must point the right way (more memory, no more misses) and the results must
//! land in `--out` as JSON and PNG.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_memfleet");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memfleet-replay-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "memfleet {}\n{stdout}\n{stderr}",
        args.join(" ")
    );
    stdout
}

/// 20 000 requests over 4 000 keys of about 5 KB (a ~20 MB working set, Zipf 1): 8 MiB holds
/// part of it, 64 MiB all of it. At the default 2 000 requests per trace second the trace
/// spans 10 s, replayed at 20x.
fn write_trace(path: &Path, format: &str) {
    let stdout = run(&[
        "sim",
        "--keys",
        "4000",
        "--requests",
        "20000",
        "--value-size",
        "key:4000-6000",
        "--write-trace",
        path.to_str().unwrap(),
        "--write-format",
        format,
    ]);
    assert!(stdout.contains("wrote 20000 requests"), "{stdout}");
}

fn replay(
    trace: &Path,
    format: &str,
    servers: &[&str],
    sizes: &str,
    out: &Path,
) -> serde_json::Value {
    let mut args = vec!["bench", "replay", "--memfleet-bin", BIN, "--no-pin"];
    for s in servers {
        args.extend(["--spawn", s]);
    }
    args.extend([
        "--trace",
        trace.to_str().unwrap(),
        "--trace-format",
        format,
        "--memory-sizes",
        sizes,
        "--speedup",
        "20",
        "--window",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = run(&args);
    assert!(stdout.contains("miss ratio over the trace"), "{stdout}");
    let text = std::fs::read_to_string(out.join("replay.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["scenario"], "replay");
    for png in ["replay-sizing.png", "replay-over-time.png"] {
        let bytes = std::fs::read(out.join(png)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{png} is a PNG");
    }
    json
}

fn rows(json: &serde_json::Value) -> &Vec<serde_json::Value> {
    json["result"]["rows"].as_array().unwrap()
}

#[test]
fn replay_sizing_curve_of_memfleet_and_memcached_points_down() {
    let dir = scratch("csv");
    let trace = dir.join("trace.csv");
    write_trace(&trace, "csv");
    let json = replay(
        &trace,
        "csv",
        &["memfleet", "memcached"],
        "8,64",
        &dir.join("out"),
    );
    let rows = rows(&json);
    assert_eq!(rows.len(), 4);
    for server in ["memfleet", "memcached"] {
        let ratio = |mib: u64| {
            let row = rows
                .iter()
                .find(|r| r["server"] == server && r["memory_mib"] == mib)
                .unwrap_or_else(|| panic!("no {server} {mib} MiB row in {json}"));
            assert_eq!(row["errors"], 0, "{row}");
            assert_eq!(row["requests"], 20000, "{row}");
            assert!(row["fills"].as_u64().unwrap() > 0, "{row}");
            assert!(row["windows"].as_array().unwrap().len() >= 4, "{row}");
            row["miss_ratio"].as_f64().unwrap()
        };
        let (small, big) = (ratio(8), ratio(64));
        assert!(
            0.0 < big && big <= small && small < 1.0,
            "{server}: 8 MiB {small}, 64 MiB {big}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn replay_reads_the_binary_formats() {
    let dir = scratch("binary");
    for (file, format, server) in [
        ("trace.oracleGeneral.bin", "oracle", "memfleet"),
        ("trace.twr", "twr", "memcached"),
    ] {
        let trace = dir.join(file);
        write_trace(&trace, format);
        let json = replay(&trace, format, &[server], "16", &dir.join(format));
        let row = &rows(&json)[0];
        assert_eq!(row["server"], server);
        let mut keys: Vec<&str> = row
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        keys.sort_unstable();
        #[rustfmt::skip]
        let expected = [
            "byte_miss_ratio", "deletes", "errors", "evictions", "fills", "gets", "hits", "items",
            "lag_secs", "limit_maxbytes", "memory_mib", "memory_used", "miss_ratio", "misses",
            "other", "rejected_sets", "requests", "rss_bytes", "server", "sets", "sim_secs",
            "skipped_large", "wall_secs", "window_secs", "windows",
        ];
        assert_eq!(keys, expected, "replay.json uses sim.json's names: {row}");
        assert!(
            row["memory_used"].as_u64().unwrap() > 0,
            "stats bytes: {row}"
        );
        assert_eq!(row["windows"][0].as_array().unwrap().len(), 4, "{row}");
        assert_eq!(row["requests"], 20000, "{row}");
        assert_eq!(row["errors"], 0, "{row}");
        let ratio = row["miss_ratio"].as_f64().unwrap();
        assert!(0.0 < ratio && ratio < 1.0, "{format}: {row}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Pipelining must not change look-aside semantics: a get right behind a missed get of the
/// same key hits (the fill went first), deletes and sets take effect in trace order, and
/// operations that are only counted are counted.
#[test]
fn replay_keeps_each_keys_requests_in_trace_order() {
    let dir = scratch("order");
    let trace = dir.join("order.csv");
    let mut text = String::new();
    for _ in 0..100 {
        text += "0,hot,3,100,1,get,0\n";
    }
    text += "1,hot,3,100,1,delete,0\n1,hot,3,100,1,get,0\n1,hot,3,100,1,get,0\n";
    text += "2,cold,4,50,1,set,0\n2,cold,4,50,1,get,0\n2,ctr,3,1,1,incr,0\n";
    std::fs::write(&trace, text).unwrap();
    let json = replay(
        &trace,
        "csv",
        &["memfleet", "memcached"],
        "16",
        &dir.join("out"),
    );
    for row in rows(&json) {
        let counts: Vec<u64> = [
            "requests", "gets", "misses", "fills", "sets", "deletes", "other",
        ]
        .iter()
        .map(|k| row[k].as_u64().unwrap())
        .collect();
        assert_eq!(counts, [106, 103, 2, 2, 1, 1, 1], "{row}");
        assert_eq!(row["errors"], 0, "{row}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
