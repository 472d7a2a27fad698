//! The device's own limit: `fio` reading random blocks of the same file, the same size and
//! the same number of reads in flight as the server is given, with O_DIRECT (no page
//! cache), two ways: that many jobs each with one read in flight (`psync`, as reader threads
//! read), and one job keeping that many in flight on io_uring (usually the higher).

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// What fio measured.
#[derive(Debug, Clone, Copy)]
pub struct FioReads {
    /// Reads per second.
    pub iops: f64,
    /// Completion latency percentiles, microseconds.
    pub p50_us: f64,
    /// The 99th.
    pub p99_us: f64,
}

/// Whether `fio` can be run.
pub fn available(fio: &str) -> bool {
    Command::new(fio)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// How fio keeps its reads in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// One job per read in flight, each a blocking pread.
    Psync,
    /// One job with all of them in flight on io_uring.
    IoUring,
}

impl Engine {
    /// How the results table names it.
    pub fn describe(self, depth: usize) -> String {
        match self {
            Engine::Psync => format!("{depth} jobs, psync"),
            Engine::IoUring => format!("io_uring, depth {depth}"),
        }
    }
}

/// The exact fio command line (printed with the results): `depth` reads in flight.
pub fn command(
    fio: &str,
    file: &Path,
    block: usize,
    engine: Engine,
    depth: usize,
    seconds: u64,
) -> Vec<String> {
    let how: [String; 3] = match engine {
        Engine::Psync => [
            "--ioengine=psync".into(),
            "--iodepth=1".into(),
            format!("--numjobs={depth}"),
        ],
        Engine::IoUring => [
            "--ioengine=io_uring".into(),
            format!("--iodepth={depth}"),
            "--numjobs=1".into(),
        ],
    };
    [
        fio.to_string(),
        "--name=flash-randread".into(),
        format!("--filename={}", file.display()),
        "--rw=randread".into(),
        format!("--bs={block}"),
        "--direct=1".into(),
        how[0].clone(),
        how[1].clone(),
        how[2].clone(),
        "--group_reporting".into(),
        "--time_based".into(),
        format!("--runtime={seconds}"),
        "--output-format=json".into(),
    ]
    .into()
}

/// Runs `command` and reads its JSON.
pub fn run(command: &[String]) -> Result<FioReads> {
    let out = Command::new(&command[0])
        .args(&command[1..])
        .output()
        .with_context(|| format!("running {}", command[0]))?;
    if !out.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before its JSON.
    let json = &text[text.find('{').context("fio printed no JSON")?..];
    let v: serde_json::Value = serde_json::from_str(json).context("fio's JSON")?;
    let read = &v["jobs"][0]["read"];
    let pct = |p: &str| read["clat_ns"]["percentile"][p].as_f64().unwrap_or(0.0) / 1000.0;
    Ok(FioReads {
        iops: read["iops"].as_f64().context("fio's read iops")?,
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
    })
}
