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
