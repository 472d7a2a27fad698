//! What `memfleet bench discovery` prints and writes: the per-second timelines of both runs
//! side by side, one summary table (replacements followed, keys moved against the ideal,
//! failed requests, hit ratio), and with `--out` `discovery.json` and
//! `discovery-timeline.png` (misses and failed requests per second, each DNS change
//! marked).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use memfleet_results::plot::{self, Series};
use serde_json::json;

use super::super::run_log::write_results;
use super::super::table::{Column, Table};
use super::super::timeline::timeline;
use super::fleet::{GUTTER_SERVERS, GUTTER_TTL};
use super::placement::SAMPLE;
use super::{DiscoveryArgs, Outcome, Second};

/// The median of ascending `sorted`.
fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    (n > 0).then(|| {
        if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        }
    })
}

fn hit_percent(s: &Second) -> Option<f64> {
    (s.gets > 0).then(|| 100.0 * s.hits as f64 / s.gets as f64)
}

fn failed_percent(s: &Second) -> Option<f64> {
    (s.gets > 0).then(|| 100.0 * s.failures as f64 / s.gets as f64)
}

const SUMMARY: [Column; 11] = [
    Column::left("run", 9),
    Column::right("replaced", 8),
    Column::right("followed p50", 12),
    Column::right("max", 7),
    Column::right("keys moved", 10),
    Column::right("ideal", 6),
    Column::right("leavers'", 8),
    Column::right("stayer→stayer", 13),
    Column::right("router≠ring", 11),
    Column::right("failed", 6),
    Column::right("hit ratio", 9),
];

/// The timelines, the summary table and what it means.
pub(super) fn text(args: &DiscoveryArgs, outcomes: &[Outcome]) -> String {
    let mut t = String::new();
    let names: Vec<&str> = outcomes.iter().map(|o| o.kind.label()).collect();
    let columns = format!(
        "{:>7} {:>6} {:>6} {:>6} {:>3}",
        "gets/s", "hit %", "failed", "gutter", "dns"
    );
    let seconds = outcomes.iter().map(|o| o.seconds.len()).min().unwrap_or(0);
    t += &timeline(&names, columns.len(), &columns, seconds, |run, i| {
        let o = &outcomes[run];
        let s = &o.seconds[i];
        let changes = o
            .steps
            .iter()
            .filter(|st| st.dns_change.as_secs() as usize == i)
            .count();
        format!(
            "{:>7} {:>6} {:>6} {:>6} {:>3}",
            s.gets,
            hit_percent(s).map_or("-".into(), |h| format!("{h:.1}")),
            s.failures,
            s.gutter_gets,
            if changes > 0 {
                changes.to_string()
            } else {
                String::new()
            }
        )
    });
    let _ = writeln!(
        t,
        "(dns: DNS changes in that second; gutter: gets the router sent to the gutter pool)\n"
    );
    let mut table = Table::new(&SUMMARY);
    for o in outcomes {
        let followed = o.followed_ms();
        let total = o.total();
        let m = &o.moves;
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0} ms"));
        table.row(&[
            &o.kind.label(),
            &format!("{} of {}", o.steps.len(), o.members),
            &ms(median(&followed)),
            &ms(followed.last().copied()),
            &format!("{:.2}%", m.percent(m.moved)),
            &format!("{:.1}%", o.ideal_percent),
            &format!("{:.2}%", m.percent(m.on_leavers)),
            &m.between_stayers,
            &m.disagreements,
            &total.failures,
            &hit_percent(&total).map_or("-".into(), |h| format!("{h:.2}%")),
        ]);
    }
    t += &table.text();
    let _ = writeln!(
        t,
        "\nfollowed: from each DNS change until the router's __memfleet__.pools showed it \
         (resolve_interval {:?}, TTL 1 s); keys moved: of {SAMPLE} sample keys, as the router \
         places them (__memfleet__.route) before and after; ideal: the fewest any placement \
         must move; leavers': keys that were on members that left; router≠ring: keys the \
         router places elsewhere than the ketama ring computed here over the member names",
        args.resolve_interval
    );
    for o in outcomes {
        let m = &o.moves;
        let total = o.total();
        let _ = writeln!(
            t,
            "{}: {} gets, {} failed requests, {} gutter gets ({} hits); keys moved {} \
             ({} from leavers, {} from stayers to newcomers; the offline ring moves {})",
            o.kind.label(),
            total.gets,
            total.failures,
            total.gutter_gets,
            total.gutter_hits,
            m.moved,
            m.on_leavers,
            m.to_newcomers,
            m.moved_on_ring
        );
    }
    t
}

/// `discovery.json` and `discovery-timeline.png` in `dir`.
pub(super) fn write(
    dir: &Path,
    args: &DiscoveryArgs,
    outcomes: &[Outcome],
    load_at_end: &str,
) -> Result<()> {
    write_results(dir, "discovery", &json_report(args, outcomes, load_at_end))?;
    let figure = dir.join("discovery-timeline.png");
    plot::line_chart(
        &figure,
        "A DNS-discovered pool while members are replaced: misses and failures",
        "seconds",
        "% of gets",
        &figure_series(outcomes),
        false,
    )?;
    println!("figure: {}", figure.display());
    Ok(())
}

/// Each run's misses and failed requests per second (percent of gets: misses rather than
/// hits, so that a dip of a few points is not lost at the top of a 0–100 axis), and the DNS
/// changes as one comb of vertical lines a quarter above the highest value (the legend's
/// corner stays free), with enough points on each line that no markers are drawn.
fn figure_series(outcomes: &[Outcome]) -> Vec<Series> {
    let mut series = Vec::new();
    for o in outcomes {
        series.push(Series {
            name: format!("misses, {}", o.kind.label()),
            points: plot::per_second(&o.seconds, |s| hit_percent(s).map(|h| 100.0 - h)),
        });
    }
    for o in outcomes {
        series.push(Series {
            name: format!("failed requests, {}", o.kind.label()),
            points: plot::per_second(&o.seconds, failed_percent),
        });
    }
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.25;
    let mut comb = Vec::new();
    for o in outcomes {
        for s in &o.steps {
            let x = s.dns_change.as_secs_f64();
            comb.extend((0..=10).map(|i| (x, top * i as f64 / 10.0)));
            comb.extend((0..=10).rev().map(|i| (x, top * i as f64 / 10.0)));
        }
    }
    comb.sort_by(|a, b| a.0.total_cmp(&b.0));
    series.insert(
        0,
        Series {
            name: "DNS change (a member replaced)".into(),
            points: comb,
        },
    );
    series
}

fn json_report(args: &DiscoveryArgs, outcomes: &[Outcome], load_at_end: &str) -> serde_json::Value {
    let runs: Vec<serde_json::Value> = outcomes
        .iter()
        .map(|o| {
            let total = o.total();
            let followed = o.followed_ms();
            let steps: Vec<serde_json::Value> = o
                .steps
                .iter()
                .map(|s| {
                    json!({
                        "member": s.member,
                        "replacement": s.replacement,
                        "old_addr": s.old_addr.to_string(),
                        "new_addr": s.new_addr.to_string(),
                        "dns_change_s": s.dns_change.as_secs_f64(),
                        "followed_ms": s.followed.as_secs_f64() * 1000.0,
                    })
                })
                .collect();
            let series = |f: fn(&Second) -> Option<f64>| plot::per_second(&o.seconds, f);
            json!({
                "label": o.kind.label(),
                "replacements": steps,
                "followed_ms": { "median": median(&followed), "max": followed.last() },
                "keys": o.moves.json(o.ideal_percent),
                "totals": {
                    "gets": total.gets,
                    "hits": total.hits,
                    "hit_ratio": hit_percent(&total).map(|h| h / 100.0),
                    "failures": total.failures,
                    "db_queries": total.db,
                    "gutter_gets": total.gutter_gets,
                    "gutter_hits": total.gutter_hits,
                },
                "failure_examples": o.failure_examples,
                "series": {
                    "gets_per_s": series(|s| Some(s.gets as f64)),
                    "hit_ratio_percent": series(hit_percent),
                    "failures_per_s": series(|s| Some(s.failures as f64)),
                    "db_queries_per_s": series(|s| Some(s.db as f64)),
                    "gutter_gets_per_s": series(|s| Some(s.gutter_gets as f64)),
                    "gutter_hits_per_s": series(|s| Some(s.gutter_hits as f64)),
                },
            })
        })
        .collect();
    json!({
        "parameters": {
            "members": args.members,
            "replaced": args.replaced(),
            "conns": args.look_aside.clients.conns,
            "keys": args.look_aside.keys.keys,
            "zipf": args.look_aside.keys.zipf,
            "value_size": args.look_aside.keys.value_size.to_string(),
            "db_latency_ms": args.look_aside.db_latency.as_secs_f64() * 1000.0,
            "duration_s": args.look_aside.clients.duration.as_secs_f64(),
            "replace_at_s": args.replace_at.as_secs_f64(),
            "step_gap_s": args.step_gap().as_secs_f64(),
            "resolve_interval_ms": args.resolve_interval.as_secs_f64() * 1000.0,
            "dns_ttl_s": 1,
            "gutter_servers": GUTTER_SERVERS,
            "gutter_ttl_s": GUTTER_TTL,
            "sample_keys": SAMPLE,
        },
        "load_average_at_end": load_at_end,
        "runs": runs,
    })
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, 5.0, 9.0]), Some(5.0));
        assert_eq!(median(&[1.0, 3.0, 5.0, 9.0]), Some(4.0));
    }
}
