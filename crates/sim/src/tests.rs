//! Tests of the `memfleet sim` command surface: argument parsing and `run_to`
//! end to end, with an LRU standing in for the Segcache adapter. Not unit tests
//! of the models (those live beside each module).

use std::path::PathBuf;

use clap::Parser;

use super::*;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    sim: SimArgs,
}

fn args(extra: &[&str]) -> SimArgs {
    let argv = std::iter::once("sim").chain(extra.iter().copied());
    Cli::try_parse_from(argv).unwrap().sim
}

/// An LRU that answers to the name `fake-seg` and records how it was built.
fn fake_segcache(memory: u64, _segment: usize) -> Box<dyn SimCache> {
    struct Named(LruCache);
    impl SimCache for Named {
        fn name(&self) -> String {
            "fake-seg".into()
        }
        fn advance_to(&mut self, now: u32) {
            self.0.advance_to(now)
        }
        fn get(&mut self, key: &[u8]) -> bool {
            self.0.get(key)
        }
        fn set(&mut self, key: &[u8], value_len: usize, ttl: u32) {
            self.0.set(key, value_len, ttl)
        }
        fn delete(&mut self, key: &[u8]) {
            self.0.delete(key)
        }
    }
    Box::new(Named(LruCache::new(memory / 2)))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memfleet-bench-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn defaults_match_the_documented_command() {
    let a = args(&[]);
    assert_eq!(a.workload, "mix");
    assert_eq!(
        (a.keys, a.requests, a.rate, a.seed),
        (200_000, None, 2000, 42)
    );
    assert_eq!(a.alpha, 1.0);
    assert_eq!(a.memory, vec![32.0, 64.0]);
    assert_eq!(a.segment_size, 0);
    assert_eq!(a.caches, vec![CacheKind::Segcache, CacheKind::Lru]);
    assert_eq!(a.pelikan_clock, PelikanClock::Paced);
    assert_eq!(a.engine.workers, 1);
    assert_eq!(args(&["--workers", "4"]).engine.workers, 4);
    assert!(Cli::try_parse_from(["sim", "--workers", "0"]).is_err());
    assert!(!a.no_fill && a.trace.is_none() && a.format.is_none());

    let a = args(&[
        "--memory",
        "16,32,64",
        "--caches",
        "lru",
        "--format",
        "oracle",
        "--value-size",
        "key:10-20",
    ]);
    assert_eq!(a.memory, vec![16.0, 32.0, 64.0]);
    assert_eq!(a.caches, vec![CacheKind::Lru]);
    assert_eq!(a.format, Some(TraceFormat::Oracle));
    assert_eq!(a.value_size.unwrap().to_string(), "key:10-20");
    assert!(Cli::try_parse_from(["sim", "--caches", "fifo"]).is_err());
}

#[test]
fn synthetic_run_prints_a_miss_ratio_table() {
    let a = args(&[
        "--keys",
        "5000",
        "--requests",
        "60000",
        "--rate",
        "1000",
        "--memory",
        "0.25,0.5,1",
        "--segment-size",
        "4096",
        "--window",
        "20",
    ]);
    let mut out = Vec::new();
    let built = std::cell::RefCell::new(Vec::new());
    let make = |memory, segment| {
        built.borrow_mut().push((memory, segment));
        fake_segcache(memory, segment)
    };
    let results = run_to(&a, &make, &mut out).unwrap();
    assert_eq!(
        built.into_inner(),
        [(1 << 18, 4096), (1 << 19, 4096), (1 << 20, 4096)]
    );
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.lines().nth(1).unwrap().starts_with("# command: "),
        "{text}"
    );
    assert!(
        text.contains("# workload: synthetic mix: keys=5000 requests=60000"),
        "{text}"
    );
    assert_eq!(results.len(), 6);
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("memory_MiB"))
        .unwrap();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        [
            "memory_MiB",
            "fake-seg",
            "lru",
            "fake-seg_items",
            "lru_items",
            "fake-seg_bytes",
            "lru_bytes"
        ]
    );
    let lru: Vec<f64> = results
        .iter()
        .filter(|r| r.kind == CacheKind::Lru)
        .map(|r| r.report.miss_ratio())
        .collect();
    assert!(
        lru[0] > lru[1] && lru[1] > lru[2],
        "more memory, fewer misses: {lru:?}"
    );
    // The stand-in has half the memory, so at each size it misses more than the LRU.
    for pair in results.chunks(2) {
        assert_eq!(pair[0].report.requests, 60_000);
        assert_eq!(
            pair[0].report.gets, pair[1].report.gets,
            "both caches see the same workload"
        );
        assert!(pair[0].report.misses > pair[1].report.misses);
        assert_eq!(pair[1].report.windows.len(), 3);
    }
    let last = text.lines().last().unwrap();
    assert_eq!(last.split_whitespace().next(), Some("1"));
    assert_eq!(
        last.split_whitespace().nth(2).unwrap(),
        format!("{:.4}", lru[2])
    );
    // The stand-in reports neither items nor bytes; the LRU reports both.
    let lru_report = &results[5].report;
    assert_eq!(
        last.split_whitespace().skip(3).collect::<Vec<_>>(),
        [
            "-".to_string(),
            lru_report.items.unwrap().to_string(),
            "-".to_string(),
            lru_report.memory_used.unwrap().to_string()
        ]
    );
}

#[test]
fn pelikan_runs_beside_the_others_on_the_same_requests() {
    let a = args(&[
        "--keys",
        "5000",
        "--requests",
        "20000",
        "--memory",
        "1",
        "--segment-size",
        "65536",
        "--caches",
        "segcache,pelikan,lru",
        "--pelikan-clock",
        "wall",
        "--value-size",
        "key:lognormal:100:1:16-1000",
        "--write-ratio",
        "0.1",
    ]);
    assert_eq!(a.pelikan_clock, PelikanClock::Wall);
    let mut out = Vec::new();
    let results = run_to(&a, &fake_segcache, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("value_size=key:lognormal:100:1:16-1000"),
        "{text}"
    );
    let pelikan = &results[1].report;
    assert_eq!(pelikan.cache, "pelikan");
    assert_eq!(pelikan.gets, results[2].report.gets);
    assert!(pelikan.hits > 0 && pelikan.misses > 0);
    assert!(pelikan.items.unwrap() > 0);
    assert!(pelikan.memory_used.unwrap() <= 1 << 20);
    assert!(
        text.lines()
            .any(|l| l
                .starts_with("# 1 MiB pelikan: segcache 0.4.4 heap=1048576 segment_size=65536")),
        "{text}"
    );
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("memory_MiB"))
        .unwrap();
    assert!(header.contains(" pelikan ") && header.contains(" pelikan_items "));
}

#[test]
fn trace_run_reads_csv_and_writes_window_csvs() {
    let dir = scratch("trace");
    let trace = dir.join("tiny.csv");
    let mut lines = String::new();
    for i in 0..300u32 {
        lines.push_str(&format!("{},key{},8,100,1,get,0\n", 1000 + i / 10, i % 20));
    }
    lines.push_str("1030,key1,8,100,1,delete,0\n1030,key1,8,100,1,get,0\n");
    fs::write(&trace, lines).unwrap();
    let csv_dir = dir.join("windows");
    let a = args(&[
        "--trace",
        trace.to_str().unwrap(),
        "--caches",
        "lru",
        "--memory",
        "1",
        "--window",
        "10",
        "--window-csv",
        csv_dir.to_str().unwrap(),
    ]);
    let mut out = Vec::new();
    let results = run_to(&a, &fake_segcache, &mut out).unwrap();
    let r = &results[0].report;
    assert_eq!(
        (r.gets, r.misses, r.deletes),
        (301, 21, 1),
        "20 compulsory misses and one after the delete"
    );
    assert_eq!(r.sim_secs, 30);
    let csv = fs::read_to_string(csv_dir.join("lru-1MiB.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "window_start,gets,misses,miss_ratio");
    assert_eq!(rows[1], "0,100,20,0.200000");
    assert_eq!(rows[4], "30,1,1,1.000000");

    let limited = args(&[
        "--trace",
        trace.to_str().unwrap(),
        "--caches",
        "lru",
        "--requests",
        "50",
    ]);
    let results = run_to(&limited, &fake_segcache, &mut Vec::new()).unwrap();
    assert_eq!(results[0].report.requests, 50);

    fs::write(&trace, "0,k,1,1,1,get,0\nnot a line\n").unwrap();
    let err = run_to(&a, &fake_segcache, &mut Vec::new()).unwrap_err();
    assert!(err.to_string().contains("trace line 2"), "{err}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn bad_arguments_are_errors() {
    let run = |extra: &[&str]| run_to(&args(extra), &fake_segcache, &mut Vec::new()).map(|_| ());
    assert!(run(&["--memory", "0"]).is_err());
    assert!(run(&["--workload", "bogus"])
        .unwrap_err()
        .to_string()
        .contains("presets are"));
    assert!(run(&["--write-ratio", "2"]).is_err());
    assert!(run(&["--trace", "/nonexistent/x.bin"])
        .unwrap_err()
        .to_string()
        .contains("--format"));
    assert!(run(&["--trace", "/nonexistent/x.csv.zst"])
        .unwrap_err()
        .to_string()
        .contains("zstd -d"));
    assert!(run(&["--trace", "/nonexistent/x.csv"]).is_err());
}

#[test]
fn written_traces_replay_like_the_workload_they_came_from() {
    let dir = scratch("write-trace");
    let synthetic = [
        "--keys",
        "500",
        "--requests",
        "5000",
        "--caches",
        "lru",
        "--memory",
        "0.05",
    ];
    let direct = run_to(&args(&synthetic), &fake_segcache, &mut Vec::new()).unwrap();
    for (file, format) in [
        ("t.csv", None),
        ("t.oracleGeneral.bin", None),
        ("t.twr", Some("twr")),
    ] {
        let path = dir.join(file);
        let path_text = path.to_str().unwrap();
        let mut write: Vec<&str> = synthetic.to_vec();
        write.extend(["--write-trace", path_text]);
        if let Some(f) = format {
            write.extend(["--write-format", f]);
        }
        let mut out = Vec::new();
        assert!(run_to(&args(&write), &fake_segcache, &mut out)
            .unwrap()
            .is_empty());
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("wrote 5000 requests"));
        let mut read = vec!["--trace", path_text, "--caches", "lru", "--memory", "0.05"];
        if let Some(f) = format {
            read.extend(["--format", f]);
        }
        let replayed = run_to(&args(&read), &fake_segcache, &mut Vec::new()).unwrap();
        let (a, b) = (&direct[0].report, &replayed[0].report);
        assert_eq!((b.requests, b.gets), (a.requests, a.gets), "{file}");
        // CSV keeps every key and size; oracleGeneral gives every key 8 bytes, which changes
        // the LRU's byte accounting a little but not the picture.
        if format.is_some() || file.ends_with(".csv") {
            assert_eq!(b.misses, a.misses, "{file}");
        } else {
            assert!((b.miss_ratio() - a.miss_ratio()).abs() < 0.1, "{file}");
        }
    }
    let unknown = args(&["--requests", "10", "--write-trace", "/tmp/x.bin"]);
    let err = run_to(&unknown, &fake_segcache, &mut Vec::new()).unwrap_err();
    assert!(err.to_string().contains("--write-format"), "{err}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn out_writes_json_and_one_figure_per_cache() {
    let dir = scratch("out");
    let a = args(&[
        "--keys",
        "500",
        "--requests",
        "5000",
        "--caches",
        "segcache,lru",
        "--memory",
        "0.02,0.05",
        "--out",
        dir.to_str().unwrap(),
    ]);
    run_to(&a, &fake_segcache, &mut Vec::new()).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("sim.json")).unwrap()).unwrap();
    let cells = json["result"]["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    assert!(cells
        .iter()
        .all(|c| c["miss_ratio"].as_f64().unwrap() > 0.0));
    let mut keys: Vec<&str> = cells[0]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort_unstable();
    #[rustfmt::skip]
    let expected = [
        "byte_miss_ratio", "cache", "deletes", "fills", "gets", "hits", "items", "memory_mib",
        "memory_used", "miss_ratio", "misses", "other", "requests", "sets", "sim_secs",
        "wall_secs", "window_secs", "windows",
    ];
    assert_eq!(
        keys, expected,
        "sim.json's field names are what readers use"
    );
    let window = cells[0]["windows"][0].as_array().unwrap();
    assert_eq!(
        window.len(),
        4,
        "[start, gets, misses, miss_ratio]: {window:?}"
    );
    for png in [
        "sim-miss-ratio.png",
        "sim-miss-ratio-fake-seg.png",
        "sim-miss-ratio-lru.png",
    ] {
        let bytes = fs::read(dir.join(png)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{png}");
    }
    let _ = fs::remove_dir_all(&dir);
}
