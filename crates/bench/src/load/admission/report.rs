//! What `memfleet bench admission` prints and writes: the storm's table (medians over the
//! repeats) and its goals, the stall runs' lines, per-second failures and the cap's goal,
//! `admission.json` and the figures. Not here: running anything (`storm`, `stall`).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use memfleet_results::plot::{self, Series};
use serde_json::json;

use super::stall::{StallRun, StallSettings, CAPS, SERVERS};
use super::storm::{self, StormRepeat, StormSettings};
use crate::load::report::median;
use crate::load::run_log::write_results;
use crate::load::timeline::timeline;

/// Both parts' settings and runs (a part not run is `None`).
#[derive(Default)]
pub(super) struct Results {
    pub storm: Option<(StormSettings, Vec<StormRepeat>)>,
    pub stall: Option<(StallSettings, Vec<StallRun>)>,
}

/// The medians of the storm's repeats.
struct StormMedians {
    baseline_p99: f64,
    storm_p99: f64,
    p99_ratio: f64,
    hot_ratio: f64,
    hot_per_s: f64,
    offered_per_s: f64,
}

fn storm_medians(s: &StormSettings, repeats: &[StormRepeat]) -> StormMedians {
    let m = |f: &dyn Fn(&StormRepeat) -> f64| median(repeats.iter().map(f).collect());
    StormMedians {
        baseline_p99: m(&|r| r.baseline.p99()),
        storm_p99: m(&|r| r.with_storm.p99()),
        p99_ratio: m(&StormRepeat::p99_ratio),
        hot_ratio: m(&|r| r.hot_per_s() / f64::from(s.rate)),
        hot_per_s: m(&StormRepeat::hot_per_s),
        offered_per_s: m(&StormRepeat::offered_per_s),
    }
}

/// Whether the counts of one repeat agree: the hot server's gets are the storm's values,
/// and the router's refusals the storm's refusals.
fn counts_agree(r: &StormRepeat) -> bool {
    r.hot_gets == r.storm_passed && r.router_refused == r.storm_refused
}

/// The storm's table, the counts' check and the goals.
pub(super) fn storm_text(s: &StormSettings, repeats: &[StormRepeat]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n{:>7}  {:^23}  {:^23}  {:>6}  {:>10}  {:>10}  {:>6}  {:>9}  {:>9}",
        "",
        "other, without storm",
        "other, with storm",
        "p99",
        "storm",
        "hot server",
        "",
        "router",
        "storm"
    );
    let _ = writeln!(
        t,
        "{:>7}  {:>7} {:>7} {:>7}  {:>7} {:>7} {:>7}  {:>6}  {:>10}  {:>10}  {:>6}  {:>9}  {:>9}",
        "repeat",
        "p50 µs",
        "p99",
        "p99.9",
        "p50 µs",
        "p99",
        "p99.9",
        "ratio",
        "offered/s",
        "gets/s",
        "/ R",
        "refused",
        "refused"
    );
    for (i, r) in repeats.iter().enumerate() {
        let (b, w) = (&r.baseline.percentiles_us, &r.with_storm.percentiles_us);
        let _ = writeln!(
            t,
            "{:>7}  {:>7.0} {:>7.0} {:>7.0}  {:>7.0} {:>7.0} {:>7.0}  {:>6.2}  {:>10.0}  {:>10.0}  {:>6.3}  {:>9}  {:>9}",
            i + 1,
            b[0],
            b[1],
            b[2],
            w[0],
            w[1],
            w[2],
            r.p99_ratio(),
            r.offered_per_s(),
            r.hot_per_s(),
            r.hot_per_s() / f64::from(s.rate),
            r.router_refused,
            r.storm_refused
        );
    }
    let m = storm_medians(s, repeats);
    let _ = writeln!(
        t,
        "{:>7}  {:>7} {:>7.0} {:>7}  {:>7} {:>7.0} {:>7}  {:>6.2}  {:>10.0}  {:>10.0}  {:>6.3}",
        "median",
        "",
        m.baseline_p99,
        "",
        "",
        m.storm_p99,
        "",
        m.p99_ratio,
        m.offered_per_s,
        m.hot_per_s,
        m.hot_ratio
    );
    if let Some(line) = repeats.iter().find_map(|r| r.refusal.as_ref()) {
        let _ = writeln!(t, "the storm's refusals: {:?}", line);
    }
    for (i, r) in repeats.iter().enumerate() {
        if !counts_agree(r) {
            let _ = writeln!(
                t,
                "MISMATCH in repeat {}: the hot server counted {} gets, the storm read {} values; \
                 the router counted {} refusals, the storm read {}",
                i + 1,
                r.hot_gets,
                r.storm_passed,
                r.router_refused,
                r.storm_refused
            );
        }
    }
    if repeats.iter().all(counts_agree) {
        let _ = writeln!(
            t,
            "counts agree in every repeat: the hot server's cmd_get = the values the storm read, \
             the router's pool:hot:rate_limited_gets = the refusals it read"
        );
    }
    let burst = storm::burst(s.rate);
    let most = repeats
        .iter()
        .map(|r| 1.0 + burst as f64 / (f64::from(s.rate) * r.storm_s))
        .fold(0.0, f64::max);
    if s.storm_direct {
        let _ = writeln!(
            t,
            "control run (--storm-direct): the storm went to hot's server past the router \
             ({:.0} gets/s reached it), so the rate goal does not apply; other's p99 with it \
             over without: {:.2} (median {:.0} µs vs {:.0} µs), the machine's share of what \
             a storm does to other's latency",
            m.hot_per_s, m.p99_ratio, m.storm_p99, m.baseline_p99
        );
        return t;
    }
    let _ = writeln!(
        t,
        "goal: the hot server sees R = {} gets/s ±5%: median {:.0} gets/s = {:.3} × R over the \
         storm's time (the GCRA lets through at most R × t + a burst of {burst}: ≤ {most:.3} × R \
         here): {}",
        s.rate,
        m.hot_per_s,
        m.hot_ratio,
        if (0.95..=1.05).contains(&m.hot_ratio) {
            "met"
        } else {
            "NOT met"
        }
    );
    let _ = writeln!(
        t,
        "goal: other's p99 with the storm within 10% of without: median {:.0} µs vs {:.0} µs, \
         ratio {:.2}: {}",
        m.storm_p99,
        m.baseline_p99,
        m.p99_ratio,
        if m.p99_ratio <= 1.10 {
            "met"
        } else {
            "NOT met (likely: the storm's client and the router's refusals take the CPUs \
             the other pool's requests wait for; one router worker may serve both \
             pools; and the baseline itself varies with the machine's other load)"
        }
    );
    t
}

fn opt_s(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1} s"))
}

/// One stall run in a line.
pub(super) fn stall_line(r: &StallRun) -> String {
    format!(
        "[stall, max_down_fraction = {}] hung server read as down at {}; most servers down at \
         once {} of {SERVERS} (healthy: {}), healthy servers marked down {} time(s), \
         down_refused {}; every healthy server up again {} after the router continued",
        r.max_down_fraction,
        opt_s(r.hung_down_at_s()),
        r.max_down(),
        r.max_healthy_down(),
        r.healthy_knockouts(),
        r.down_refused(),
        opt_s(r.healthy_up_after_s()),
    )
}

/// The stall runs' per-second failures (the first run of each cap) and the cap's goal.
pub(super) fn stall_text(runs: &[StallRun]) -> String {
    let firsts: Vec<&StallRun> = CAPS
        .iter()
        .filter_map(|&c| runs.iter().find(|r| r.max_down_fraction == c))
        .collect();
    let names: Vec<String> = firsts
        .iter()
        .map(|r| format!("max_down_fraction {}", r.max_down_fraction))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let seconds = firsts
        .iter()
        .map(|r| r.replies_per_s.len())
        .min()
        .unwrap_or(0);
    let mut t = timeline(
        &names,
        30,
        "  replies  failures  down",
        seconds,
        |run, i| {
            let r = firsts[run];
            // Servers read as down at the end of second i.
            let down = r
                .samples
                .iter()
                .rfind(|s| s.at_s <= (i + 1) as f64)
                .map_or(0, |s| s.down.iter().filter(|&&d| d).count());
            format!(
                "{:>9} {:>9} {:>5}",
                r.replies_per_s[i],
                r.failures_per_s()[i],
                down
            )
        },
    );
    let _ = writeln!(
        t,
        "(failures: SERVER_ERROR replies and misses; down: servers read as down at the \
         second's end; the router stopped {:.1}..{:.1} s)",
        firsts.first().map_or(0.0, |r| r.stopped_at_s),
        firsts.first().map_or(0.0, |r| r.continued_at_s)
    );
    for cap in CAPS {
        let of: Vec<&StallRun> = runs.iter().filter(|r| r.max_down_fraction == cap).collect();
        if of.is_empty() {
            continue;
        }
        let most = of.iter().map(|r| r.max_down()).max().unwrap_or(0);
        let knocked: Vec<u64> = of.iter().map(|r| r.healthy_knockouts()).collect();
        let allowed = ((SERVERS as f64 * cap).floor() as usize).max(1);
        let _ = writeln!(
            t,
            "max_down_fraction = {cap}: at most {most} of {SERVERS} servers down at once over {} \
             run(s) (the cap allows {allowed}); healthy servers marked down per run {knocked:?}{}",
            of.len(),
            if cap < 1.0 {
                if most <= allowed {
                    ": goal (at most half the pool down after a 2 s stall) met"
                } else {
                    ": goal NOT met (the cap did not hold)"
                }
            } else {
                ""
            }
        );
    }
    if !runs.is_empty() && runs.iter().all(|r| r.healthy_knockouts() == 0) {
        let _ = writeln!(
            t,
            "no healthy server was marked down in any run, capped or not: the stall failed \
             (almost) no request (the replies that came while the router was stopped are read \
             before the timeouts are acted on, it seems), so the cap was never reached \
             (down_refused {})",
            runs.iter().map(|r| r.down_refused()).sum::<u64>()
        );
    }
    t
}

/// `admission.json` and the figures into `dir`.
pub(super) fn write(dir: &Path, results: &Results, load_at_end: &str) -> Result<()> {
    let storm = results.storm.as_ref().map(|(s, repeats)| {
        let m = storm_medians(s, repeats);
        json!({
            "settings": s,
            "repeats": repeats,
            "medians": {
                "other_p99_us_without_storm": m.baseline_p99,
                "other_p99_us_with_storm": m.storm_p99,
                "other_p99_ratio": m.p99_ratio,
                "hot_gets_per_s": m.hot_per_s,
                "hot_gets_over_rate": m.hot_ratio,
                "storm_offered_per_s": m.offered_per_s,
            },
            "burst": storm::burst(s.rate),
            "counts_agree": repeats.iter().all(counts_agree),
        })
    });
    let stall = results.stall.as_ref().map(|(s, runs)| {
        let summaries: Vec<serde_json::Value> = runs
            .iter()
            .map(|r| {
                json!({
                    "max_down_fraction": r.max_down_fraction,
                    "max_down": r.max_down(),
                    "max_healthy_down": r.max_healthy_down(),
                    "healthy_knockouts": r.healthy_knockouts(),
                    "down_refused": r.down_refused(),
                    "hung_down_at_s": r.hung_down_at_s(),
                    "healthy_up_after_s": r.healthy_up_after_s(),
                    "failures_per_s": r.failures_per_s(),
                    "run": r,
                })
            })
            .collect();
        json!({ "settings": s, "servers": SERVERS, "runs": summaries })
    });
    let value = json!({
        "load_average_at_end": load_at_end,
        "storm": storm,
        "stall": stall,
    });
    write_results(dir, "admission", &value)?;
    for figure in figures(dir, results)? {
        println!("figure: {}", figure.display());
    }
    Ok(())
}

fn figures(dir: &Path, results: &Results) -> Result<Vec<std::path::PathBuf>> {
    let mut written = Vec::new();
    let per_s = |v: &[f64]| -> Vec<(f64, f64)> {
        v.iter()
            .enumerate()
            .filter(|(_, y)| y.is_finite())
            .map(|(i, &y)| ((i + 1) as f64, y))
            .collect()
    };
    if let Some((s, repeats)) = &results.storm {
        let mut lines: Vec<Series> = repeats
            .iter()
            .enumerate()
            .map(|(i, r)| Series {
                name: format!("hot server's gets/s, repeat {}", i + 1),
                points: per_s(
                    &r.hot_gets_per_s
                        .iter()
                        .map(|&g| g as f64)
                        .collect::<Vec<_>>(),
                ),
            })
            .collect();
        let end = repeats
            .iter()
            .map(|r| r.hot_gets_per_s.len())
            .max()
            .unwrap_or(1) as f64;
        lines.push(Series {
            name: format!("R = {}", s.rate),
            points: vec![(1.0, f64::from(s.rate)), (end, f64::from(s.rate))],
        });
        let path = dir.join("admission-hot-gets.png");
        plot::line_chart(
            &path,
            "Gets reaching the rate-limited pool's server during the storm",
            "seconds",
            "gets/s",
            &lines,
            false,
        )?;
        written.push(path);
        let mut lines = Vec::new();
        for (i, r) in repeats.iter().enumerate() {
            lines.push(Series {
                name: format!("without storm, repeat {}", i + 1),
                points: per_s(&r.baseline.p99_per_s),
            });
            lines.push(Series {
                name: format!("with storm, repeat {}", i + 1),
                points: per_s(&r.with_storm.p99_per_s),
            });
        }
        let path = dir.join("admission-other-p99.png");
        plot::line_chart(
            &path,
            "The other pool's p99 per second",
            "seconds",
            "p99 (µs)",
            &lines,
            false,
        )?;
        written.push(path);
    }
    if let Some((_, runs)) = &results.stall {
        let firsts: Vec<&StallRun> = CAPS
            .iter()
            .filter_map(|&c| runs.iter().find(|r| r.max_down_fraction == c))
            .collect();
        let down: Vec<Series> = firsts
            .iter()
            .map(|r| Series {
                name: format!("max_down_fraction = {}", r.max_down_fraction),
                points: steps(&r.samples),
            })
            .collect();
        let path = dir.join("admission-stall-down.png");
        plot::line_chart(
            &path,
            "Servers marked down (of 4; one hung, the router stalled)",
            "seconds",
            "servers down",
            &down,
            false,
        )?;
        written.push(path);
        let failures: Vec<Series> = firsts
            .iter()
            .map(|r| Series {
                name: format!("max_down_fraction = {}", r.max_down_fraction),
                points: per_s(
                    &r.failures_per_s()
                        .iter()
                        .map(|&f| f as f64)
                        .collect::<Vec<_>>(),
                ),
            })
            .collect();
        let path = dir.join("admission-stall-failures.png");
        plot::line_chart(
            &path,
            "Client-visible failures per second",
            "seconds",
            "failures/s",
            &failures,
            false,
        )?;
        written.push(path);
    }
    Ok(written)
}

/// Servers read as down over time, as steps: a reading holds until the next one (no
/// reading comes while the router is stopped).
fn steps(samples: &[super::stall::Sample]) -> Vec<(f64, f64)> {
    let mut points = Vec::new();
    let mut last = None;
    for s in samples {
        let down = s.down.iter().filter(|&&d| d).count() as f64;
        if let Some(prev) = last {
            points.push((s.at_s, prev));
        }
        points.push((s.at_s, down));
        last = Some(down);
    }
    points
}
