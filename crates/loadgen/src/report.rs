//! Turning measured phases into rows (ops/s, hit ratio, latency percentiles
//! and CDF in µs, CPU µs per op), the median of repeated runs, the
//! side-by-side table with ratios against the first target ("the anchor"),
//! and the JSON document `--out` writes ([`LoadResults`], for scripts and the
//! plots). Also the shell-quoted command line printed with it. Pure
//! formatting: no I/O.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::client::Measured;
use super::workload::{Mix, Protocol, WorkloadSpec};
use memfleet_sim::workload::TtlMix;

/// Latency percentiles reported, with their column titles.
pub const PERCENTILES: [(f64, &str); 4] =
    [(50.0, "p50"), (90.0, "p90"), (99.0, "p99"), (99.9, "p99.9")];

/// The percentiles of a row's latency CDF: every whole percent, then finer towards
/// the tail (99.1 .. 99.9, 99.91 .. 99.99, 99.991 .. 99.999) and 100 (the maximum).
pub fn cdf_percentiles() -> Vec<f64> {
    let mut p: Vec<f64> = (0..=99).map(f64::from).collect();
    for step in [0.1, 0.01, 0.001] {
        let base = 100.0 - 10.0 * step;
        p.extend((1..=9).map(|i| base + f64::from(i) * step));
    }
    p.push(100.0);
    p
}

/// One point of a latency CDF: `percentile` % of the replies took at most `latency_us`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CdfPoint {
    /// 0 ..= 100.
    pub percentile: f64,
    /// Microseconds.
    pub latency_us: f64,
}

/// The latency CDF of `h` at [`cdf_percentiles`], its values multiplied by `us_per_unit`
/// (0.001 for a histogram of nanoseconds, 1 for microseconds); empty for an empty histogram,
/// which has no latencies to show.
pub fn histogram_cdf(h: &Histogram<u64>, us_per_unit: f64) -> Vec<CdfPoint> {
    if h.is_empty() {
        return Vec::new();
    }
    cdf_percentiles()
        .into_iter()
        .map(|percentile| CdfPoint {
            percentile,
            latency_us: h.value_at_percentile(percentile) as f64 * us_per_unit,
        })
        .collect()
}

/// Point by point median of CDFs taken at the same percentiles (repeated runs).
pub fn median_cdf(cdfs: &[&[CdfPoint]]) -> Vec<CdfPoint> {
    let Some(first) = cdfs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .enumerate()
        .map(|(i, p)| CdfPoint {
            percentile: p.percentile,
            latency_us: median(
                cdfs.iter()
                    .map(|c| c.get(i).map_or(0.0, |c| c.latency_us))
                    .collect(),
            ),
        })
        .collect()
}

/// A CDF as a line of [`memfleet_results::plot::latency_cdf`] (latencies below 1 µs drawn at 1 µs: the
/// axis is logarithmic).
pub fn cdf_series(name: impl Into<String>, cdf: &[CdfPoint]) -> memfleet_results::plot::Series {
    memfleet_results::plot::Series {
        name: name.into(),
        points: cdf
            .iter()
            .map(|p| (p.percentile, p.latency_us.max(1.0)))
            .collect(),
    }
}

/// One line of the result table: one target at one pipeline depth.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Target name.
    pub target: String,
    /// Pipeline depth.
    pub depth: usize,
    /// The open loop's target rate (requests per second), `None` for closed loop.
    pub target_rate: Option<f64>,
    /// Measured replies per second.
    pub ops_per_sec: f64,
    /// Latencies in µs at [`PERCENTILES`].
    pub percentiles_us: [f64; 4],
    /// Largest latency in µs.
    pub max_us: f64,
    /// Open loop: 99th percentile of how late requests were written after their
    /// intended send time, µs (`None` in closed loop).
    pub send_lag_p99_us: Option<f64>,
    /// Server CPU µs per op, when its PID is known.
    pub server_us_per_op: Option<f64>,
    /// The load generator's CPU µs per op.
    pub client_us_per_op: f64,
    /// Get hit ratio (1 when there were no gets).
    pub hit_ratio: f64,
    /// Errors (summed, not medians, over repeated runs).
    pub errors: u64,
    /// Latency at each of [`cdf_percentiles`].
    pub latency_cdf: Vec<CdfPoint>,
}

impl Row {
    /// The row of one measured phase.
    pub fn from_measured(target: &str, depth: usize, m: &Measured) -> Row {
        let s = &m.stats;
        let ops = s.ops.max(1) as f64;
        let per_op = |d: std::time::Duration| d.as_secs_f64() * 1e6 / ops;
        let us = |ns: u64| ns as f64 / 1000.0;
        Row {
            target: target.to_string(),
            depth,
            target_rate: None,
            ops_per_sec: s.ops as f64 / m.elapsed.as_secs_f64().max(1e-9),
            percentiles_us: PERCENTILES.map(|(q, _)| us(s.latency_ns.value_at_percentile(q))),
            max_us: us(s.latency_ns.max()),
            send_lag_p99_us: (!s.send_lag_ns.is_empty())
                .then(|| us(s.send_lag_ns.value_at_percentile(99.0))),
            server_us_per_op: m.server_cpu.map(per_op),
            client_us_per_op: per_op(m.client_cpu),
            hit_ratio: if s.gets == 0 {
                1.0
            } else {
                s.hits as f64 / s.gets as f64
            },
            errors: s.errors,
            latency_cdf: histogram_cdf(&s.latency_ns, 0.001),
        }
    }

    /// Field by field median of repeated runs of the same target and depth (errors summed).
    pub fn median(runs: &[Row]) -> Row {
        assert!(!runs.is_empty(), "median of no runs");
        let med = |f: &dyn Fn(&Row) -> f64| median(runs.iter().map(f).collect());
        let server = if runs.iter().all(|r| r.server_us_per_op.is_some()) {
            Some(med(&|r| r.server_us_per_op.unwrap_or(0.0)))
        } else {
            None
        };
        let cdfs: Vec<&[CdfPoint]> = runs.iter().map(|r| r.latency_cdf.as_slice()).collect();
        let latency_cdf = median_cdf(&cdfs);
        Row {
            target: runs[0].target.clone(),
            depth: runs[0].depth,
            target_rate: runs[0].target_rate,
            ops_per_sec: med(&|r| r.ops_per_sec),
            percentiles_us: std::array::from_fn(|i| med(&|r| r.percentiles_us[i])),
            max_us: med(&|r| r.max_us),
            send_lag_p99_us: runs
                .iter()
                .all(|r| r.send_lag_p99_us.is_some())
                .then(|| med(&|r| r.send_lag_p99_us.unwrap_or(0.0))),
            server_us_per_op: server,
            client_us_per_op: med(&|r| r.client_us_per_op),
            hit_ratio: med(&|r| r.hit_ratio),
            errors: runs.iter().map(|r| r.errors).sum(),
            latency_cdf,
        }
    }

    /// A one-line summary of a single run, printed as runs finish.
    pub fn brief(&self) -> String {
        let cpu = match self.server_us_per_op {
            Some(c) => format!("{c:.2} µs/op server CPU"),
            None => "server CPU unknown".to_string(),
        };
        let rate = match (self.target_rate, self.send_lag_p99_us) {
            (Some(r), Some(lag)) => format!(" (target {r:.0}, send lag p99 {lag:.1} µs)"),
            (Some(r), None) => format!(" (target {r:.0})"),
            _ => String::new(),
        };
        format!(
            "{} depth {}: {:.0} ops/s{rate}, {:.2}% hits, p50 {:.1} µs, p99 {:.1} µs, {cpu}, {:.2} µs/op client CPU, {} errors",
            self.target,
            self.depth,
            self.ops_per_sec,
            self.hit_ratio * 100.0,
            self.percentiles_us[0],
            self.percentiles_us[2],
            self.client_us_per_op,
            self.errors
        )
    }
}

/// The median of `v` (mean of the middle two for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "median of nothing");
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// The row `row`'s ratios are against: the first row of the same depth.
pub fn anchor<'a>(rows: &'a [Row], row: &'a Row) -> &'a Row {
    rows.iter().find(|a| a.depth == row.depth).unwrap_or(row)
}

/// The comparison table; ratios are against the first row of the same depth. An
/// open-loop run adds the target rate after ops/s.
pub fn table(rows: &[Row]) -> String {
    let open_loop = rows.iter().any(|r| r.target_rate.is_some());
    let mut header: Vec<String> = ["target", "depth", "ops/s"].map(String::from).to_vec();
    if open_loop {
        header.push("target ops/s".into());
        header.push("lag p99 µs".into());
    }
    header.extend(PERCENTILES.iter().map(|(_, name)| format!("{name} µs")));
    header.extend(
        [
            "max µs",
            "srv CPU µs/op",
            "cli CPU µs/op",
            "hit %",
            "errors",
            "ops/s ratio",
            "CPU/op ratio",
        ]
        .map(String::from),
    );
    let mut cells = vec![header];
    for row in rows {
        let anchor = anchor(rows, row);
        let cpu = |r: &Row| r.server_us_per_op;
        let mut line = vec![
            row.target.clone(),
            row.depth.to_string(),
            format!("{:.0}", row.ops_per_sec),
        ];
        if open_loop {
            line.push(row.target_rate.map_or("-".into(), |r| format!("{r:.0}")));
            line.push(
                row.send_lag_p99_us
                    .map_or("-".into(), |l| format!("{l:.1}")),
            );
        }
        line.extend(row.percentiles_us.iter().map(|p| format!("{p:.1}")));
        line.push(format!("{:.1}", row.max_us));
        line.push(cpu(row).map_or("-".into(), |c| format!("{c:.2}")));
        line.push(format!("{:.2}", row.client_us_per_op));
        line.push(format!("{:.2}", row.hit_ratio * 100.0));
        line.push(row.errors.to_string());
        line.push(ratio(row.ops_per_sec, anchor.ops_per_sec));
        line.push(match (cpu(row), cpu(anchor)) {
            (Some(a), Some(b)) => ratio(a, b),
            _ => "-".into(),
        });
        cells.push(line);
    }
    let columns = cells[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            cells
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &cells {
        let mut text = String::new();
        for (c, cell) in line.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                // Names left-aligned, numbers right-aligned.
                let _ = write!(text, "{cell}{}", " ".repeat(pad));
            } else {
                let _ = write!(text, "  {}{cell}", " ".repeat(pad));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

/// How the requests of a run were made, as the JSON document records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Connections.
    pub conns: usize,
    /// Pipeline depths, one run each.
    pub pipeline: Vec<usize>,
    /// Open-loop target rate (requests per second), `None` for closed loop.
    pub rate: Option<f64>,
    /// Distinct keys.
    pub keys: u64,
    /// Zipf exponent of key popularity, `None` for uniform.
    pub zipf: Option<f64>,
    /// Shares of gets, sets and deletes.
    pub mix: MixShares,
    /// Key sizes (`key:<n>` when not padded).
    pub key_size: String,
    /// Value sizes.
    pub value_size: String,
    /// TTL classes of sets: (seconds, share).
    pub ttl: Vec<(u32, f64)>,
    /// `text` or `meta`.
    pub protocol: String,
    /// Warm-up per run, seconds.
    pub warmup_s: f64,
    /// Measured time per run, seconds.
    pub duration_s: f64,
    /// Runs per target and depth (the rows are medians).
    pub repeat: usize,
    /// RNG seed.
    pub seed: u64,
}

/// The request shares of [`RunSettings`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MixShares {
    /// Gets.
    pub get: f64,
    /// Sets.
    pub set: f64,
    /// Deletes.
    pub delete: f64,
}

impl From<Mix> for MixShares {
    fn from(m: Mix) -> Self {
        MixShares {
            get: m.get,
            set: m.set,
            delete: m.delete,
        }
    }
}

impl RunSettings {
    /// The workload half of the settings, from the resolved `spec`; the run half (`conns`
    /// to `seed`) is left empty for the caller to fill from its flags.
    pub fn of_workload(spec: &WorkloadSpec) -> RunSettings {
        RunSettings {
            conns: 0,
            pipeline: Vec::new(),
            rate: None,
            keys: spec.keys,
            zipf: spec.zipf,
            mix: spec.mix.into(),
            key_size: spec
                .key_sizes
                .as_ref()
                .map_or("key:<n>".into(), |k| k.to_string()),
            value_size: spec.value_sizes.to_string(),
            ttl: spec.ttl.classes().to_vec(),
            protocol: protocol_name(spec.protocol).into(),
            warmup_s: 0.0,
            duration_s: 0.0,
            repeat: 0,
            seed: 0,
        }
    }
}

/// One row of the JSON document: a table row with its ratios and latency CDF.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowResult {
    /// Target name.
    pub target: String,
    /// Pipeline depth.
    pub depth: usize,
    /// Open-loop target rate, `None` for closed loop.
    pub target_rate: Option<f64>,
    /// Achieved replies per second.
    pub ops_per_sec: f64,
    /// Get hits / gets (1 without gets).
    pub hit_ratio: f64,
    /// Latency percentiles in µs.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest latency.
    pub max_us: f64,
    /// Open loop: p99 of how late requests were written after their intended time, µs.
    pub send_lag_p99_us: Option<f64>,
    /// Server CPU µs per op, when its PID is known.
    pub server_cpu_us_per_op: Option<f64>,
    /// Load generator CPU µs per op.
    pub client_cpu_us_per_op: f64,
    /// ops/s over the anchor's (first target at this depth).
    pub ops_per_sec_ratio: Option<f64>,
    /// Server CPU per op over the anchor's.
    pub server_cpu_per_op_ratio: Option<f64>,
    /// Wrong replies and failed connections.
    pub errors: u64,
    /// The latency CDF, for plotting.
    pub latency_cdf: Vec<CdfPoint>,
}

/// What `memfleet bench --out DIR` writes as `DIR/load.json` (inside the envelope of
/// [`memfleet_results::write_json`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadResults {
    /// How the requests were made.
    pub settings: RunSettings,
    /// Every target at every depth (medians over repeats).
    pub rows: Vec<RowResult>,
}

impl LoadResults {
    /// The document of a run's table `rows`.
    pub fn new(settings: RunSettings, rows: &[Row]) -> LoadResults {
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        let rows = rows
            .iter()
            .map(|row| {
                let anchor = anchor(rows, row);
                RowResult {
                    target: row.target.clone(),
                    depth: row.depth,
                    target_rate: row.target_rate,
                    ops_per_sec: row.ops_per_sec,
                    hit_ratio: row.hit_ratio,
                    p50_us: row.percentiles_us[0],
                    p90_us: row.percentiles_us[1],
                    p99_us: row.percentiles_us[2],
                    p999_us: row.percentiles_us[3],
                    max_us: row.max_us,
                    send_lag_p99_us: row.send_lag_p99_us,
                    server_cpu_us_per_op: row.server_us_per_op,
                    client_cpu_us_per_op: row.client_us_per_op,
                    ops_per_sec_ratio: ratio(row.ops_per_sec, anchor.ops_per_sec),
                    server_cpu_per_op_ratio: row
                        .server_us_per_op
                        .zip(anchor.server_us_per_op)
                        .and_then(|(a, b)| ratio(a, b)),
                    errors: row.errors,
                    latency_cdf: row.latency_cdf.clone(),
                }
            })
            .collect();
        LoadResults { settings, rows }
    }
}

/// `text` or `meta`.
pub fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Text => "text",
        Protocol::Meta => "meta",
    }
}

/// A TTL mix as `0` or `120s 50%, 3600s 50%`.
pub fn ttl_text(ttl: &TtlMix) -> String {
    match ttl.classes() {
        [(seconds, _)] => format!("{seconds}s"),
        classes => classes
            .iter()
            .map(|(seconds, share)| format!("{seconds}s {:.0}%", share * 100.0))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Measured;
    use crate::conn::Stats;
    use std::time::Duration;

    fn row(target: &str, depth: usize, ops: f64, cpu: Option<f64>) -> Row {
        Row {
            target: target.into(),
            depth,
            target_rate: None,
            ops_per_sec: ops,
            percentiles_us: [10.0, 20.0, 30.0, 40.0],
            max_us: 1234.5,
            send_lag_p99_us: None,
            server_us_per_op: cpu,
            client_us_per_op: 3.0,
            hit_ratio: 1.0,
            errors: 0,
            latency_cdf: Vec::new(),
        }
    }

    #[test]
    fn rows_come_from_the_histogram_and_cpu() {
        let mut stats = Stats::default();
        for us in 1..=1000u64 {
            stats.latency_ns.record(us * 1000).unwrap();
        }
        stats.ops = 1000;
        stats.gets = 900;
        stats.hits = 891;
        stats.errors = 2;
        let m = Measured {
            stats,
            elapsed: Duration::from_millis(500),
            server_cpu: Some(Duration::from_millis(6)),
            client_cpu: Duration::from_millis(4),
        };
        let r = Row::from_measured("mc", 16, &m);
        assert_eq!(r.ops_per_sec, 2000.0);
        // 3 significant digits, and a rank that float rounding can move by one.
        for (got, want) in r.percentiles_us.iter().zip([500.0, 900.0, 990.0, 999.0]) {
            assert!((got - want).abs() <= want * 0.001 + 1.0, "{got} vs {want}");
        }
        assert!((r.max_us - 1000.0).abs() <= 1.0);
        assert!((r.server_us_per_op.unwrap() - 6.0).abs() < 1e-9);
        assert!((r.client_us_per_op - 4.0).abs() < 1e-9);
        assert!((r.hit_ratio - 0.99).abs() < 1e-9);
        assert_eq!(r.errors, 2);
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        let mut b = row("a", 1, 300.0, Some(9.0));
        b.errors = 1;
        let m = Row::median(&[
            row("a", 1, 100.0, Some(5.0)),
            b,
            row("a", 1, 200.0, Some(7.0)),
        ]);
        assert_eq!(m.ops_per_sec, 200.0);
        assert_eq!(m.server_us_per_op, Some(7.0));
        assert_eq!(m.errors, 1);
        let unknown = Row::median(&[row("a", 1, 1.0, Some(5.0)), row("a", 1, 1.0, None)]);
        assert_eq!(unknown.server_us_per_op, None);
    }

    #[test]
    fn table_aligns_and_compares_with_the_first_target_per_depth() {
        let rows = [
            row("memcached", 1, 100_000.0, Some(8.0)),
            row("memcached", 16, 400_000.0, Some(6.0)),
            row("memfleet", 1, 150_000.0, Some(4.0)),
            row("memfleet", 16, 200_000.0, None),
        ];
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5);
        let expected = [
            "target     depth   ops/s  p50 µs  p90 µs  p99 µs  p99.9 µs  max µs  srv CPU µs/op  cli CPU µs/op   hit %  errors  ops/s ratio  CPU/op ratio",
            "memcached      1  100000    10.0    20.0    30.0      40.0  1234.5           8.00           3.00  100.00       0        1.00x         1.00x",
            "memcached     16  400000    10.0    20.0    30.0      40.0  1234.5           6.00           3.00  100.00       0        1.00x         1.00x",
            "memfleet       1  150000    10.0    20.0    30.0      40.0  1234.5           4.00           3.00  100.00       0        1.50x         0.50x",
            "memfleet      16  200000    10.0    20.0    30.0      40.0  1234.5              -           3.00  100.00       0        0.50x             -",
        ];
        assert_eq!(lines, expected);
    }
}
