//! Turning measured phases into rows (ops/s, latency percentiles in µs, CPU
//! µs per op), the median of repeated runs, and the side-by-side table with
//! ratios against the first target ("the anchor"). Also the shell-quoted
//! command line printed with it. Pure formatting: no I/O.

use std::fmt::Write as _;

use super::client::Measured;

/// Latency percentiles reported, with their column titles.
pub const PERCENTILES: [(f64, &str); 4] =
    [(50.0, "p50"), (90.0, "p90"), (99.0, "p99"), (99.9, "p99.9")];

/// One line of the result table: one target at one pipeline depth.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Target name.
    pub target: String,
    /// Pipeline depth.
    pub depth: usize,
    /// Measured replies per second.
    pub ops_per_sec: f64,
    /// Latencies in µs at [`PERCENTILES`].
    pub percentiles_us: [f64; 4],
    /// Largest latency in µs.
    pub max_us: f64,
    /// Server CPU µs per op, when its PID is known.
    pub server_us_per_op: Option<f64>,
    /// The load generator's CPU µs per op.
    pub client_us_per_op: f64,
    /// Get hit ratio (1 when there were no gets).
    pub hit_ratio: f64,
    /// Errors (summed, not medians, over repeated runs).
    pub errors: u64,
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
            ops_per_sec: s.ops as f64 / m.elapsed.as_secs_f64().max(1e-9),
            percentiles_us: PERCENTILES.map(|(q, _)| us(s.latency_ns.value_at_percentile(q))),
            max_us: us(s.latency_ns.max()),
            server_us_per_op: m.server_cpu.map(per_op),
            client_us_per_op: per_op(m.client_cpu),
            hit_ratio: if s.gets == 0 {
                1.0
            } else {
                s.hits as f64 / s.gets as f64
            },
            errors: s.errors,
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
        Row {
            target: runs[0].target.clone(),
            depth: runs[0].depth,
            ops_per_sec: med(&|r| r.ops_per_sec),
            percentiles_us: std::array::from_fn(|i| med(&|r| r.percentiles_us[i])),
            max_us: med(&|r| r.max_us),
            server_us_per_op: server,
            client_us_per_op: med(&|r| r.client_us_per_op),
            hit_ratio: med(&|r| r.hit_ratio),
            errors: runs.iter().map(|r| r.errors).sum(),
        }
    }

    /// A one-line summary of a single run, printed as runs finish.
    pub fn brief(&self) -> String {
        let cpu = match self.server_us_per_op {
            Some(c) => format!("{c:.2} µs/op server CPU"),
            None => "server CPU unknown".to_string(),
        };
        format!(
            "{} depth {}: {:.0} ops/s, p50 {:.1} µs, p99 {:.1} µs, {cpu}, {:.2} µs/op client CPU, {} errors",
            self.target,
            self.depth,
            self.ops_per_sec,
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

/// The comparison table; ratios are against the first row of the same depth.
pub fn table(rows: &[Row]) -> String {
    let mut header: Vec<String> = ["target", "depth", "ops/s"].map(String::from).to_vec();
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
        let anchor = rows
            .iter()
            .find(|a| a.depth == row.depth)
            .expect("a row is its own anchor at worst");
        let cpu = |r: &Row| r.server_us_per_op;
        let mut line = vec![
            row.target.clone(),
            row.depth.to_string(),
            format!("{:.0}", row.ops_per_sec),
        ];
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

/// `args` as one line a POSIX shell turns back into the same arguments.
pub fn shell_line<S: AsRef<str>>(args: &[S]) -> String {
    args.iter()
        .map(|a| shell_quote(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=,@%+".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::client::{Measured, Stats};
    use std::time::Duration;

    fn row(target: &str, depth: usize, ops: f64, cpu: Option<f64>) -> Row {
        Row {
            target: target.into(),
            depth,
            ops_per_sec: ops,
            percentiles_us: [10.0, 20.0, 30.0, 40.0],
            max_us: 1234.5,
            server_us_per_op: cpu,
            client_us_per_op: 3.0,
            hit_ratio: 1.0,
            errors: 0,
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

    #[test]
    fn command_lines_are_quoted_for_the_shell() {
        assert_eq!(
            shell_line(&["memfleet", "bench", "--target", "a=127.0.0.1:1,pid=2"]),
            "memfleet bench --target a=127.0.0.1:1,pid=2"
        );
        assert_eq!(
            shell_line(&["x", "--spawn", "m=srv -p {port}", "it's", ""]),
            r"x --spawn 'm=srv -p {port}' 'it'\''s' ''"
        );
    }
}
