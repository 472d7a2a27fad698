//! What `memfleet sim --out DIR` leaves: `sim.json` (every cell of the comparison with its
//! per-window miss ratios, through [`memfleet_results::write_json`]) and the miss-ratio-vs-memory
//! figures: `sim-miss-ratio.png` with one line per cache, and `sim-miss-ratio-<cache>.png`
//! per cache with its miss ratio and byte miss ratio. Not here: running the replays.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::report::Report;
use super::RunResult;
use memfleet_results::plot::{self, Series};

/// One cache at one memory size, as written to JSON: its name and memory, then the
/// [`Report`]'s fields.
#[derive(Debug, Serialize)]
struct Cell<'a> {
    cache: &'a str,
    memory_mib: f64,
    #[serde(flatten)]
    report: &'a Report,
}

#[derive(Debug, Serialize)]
struct SimResult<'a> {
    workload: &'a str,
    cells: Vec<Cell<'a>>,
}

/// Writes `sim.json` and the figures into `dir`; returns the paths written.
pub fn write(dir: &Path, workload: &str, results: &[RunResult]) -> Result<Vec<PathBuf>> {
    let cells = results
        .iter()
        .map(|r| Cell {
            cache: &r.report.cache,
            memory_mib: r.memory_mib,
            report: &r.report,
        })
        .collect();
    let mut written = vec![memfleet_results::write_json(
        dir,
        "sim",
        "sim",
        &SimResult { workload, cells },
    )?];

    let mut caches: Vec<&str> = Vec::new();
    for r in results {
        if !caches.contains(&r.report.cache.as_str()) {
            caches.push(&r.report.cache);
        }
    }
    let curve = |cache: &str, of: fn(&RunResult) -> f64| -> Vec<(f64, f64)> {
        let mut points: Vec<(f64, f64)> = results
            .iter()
            .filter(|r| r.report.cache == cache)
            .map(|r| (r.memory_mib, of(r)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        points
    };
    let miss = |r: &RunResult| r.report.miss_ratio();
    let byte_miss = |r: &RunResult| r.report.byte_miss_ratio();
    let all: Vec<Series> = caches
        .iter()
        .map(|&cache| Series {
            name: cache.to_string(),
            points: curve(cache, miss),
        })
        .collect();
    let path = dir.join("sim-miss-ratio.png");
    plot::line_chart(
        &path,
        "memfleet sim: miss ratio vs memory",
        "memory (MiB, log scale)",
        "miss ratio",
        &all,
        true,
    )?;
    written.push(path);
    for &cache in &caches {
        let path = dir.join(format!("sim-miss-ratio-{cache}.png"));
        let series = [
            Series {
                name: "miss ratio".into(),
                points: curve(cache, miss),
            },
            Series {
                name: "byte miss ratio".into(),
                points: curve(cache, byte_miss),
            },
        ];
        plot::line_chart(
            &path,
            &format!("memfleet sim: {cache}, miss ratio vs memory"),
            "memory (MiB, log scale)",
            "miss ratio",
            &series,
            true,
        )?;
        written.push(path);
    }
    Ok(written)
}
