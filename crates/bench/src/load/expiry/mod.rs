//! `memfleet bench expiry`: Segcache §3.5's claim that proactive, segment-level
//! expiration frees expired items promptly, where memcached frees them lazily (on access),
//! from the LRU tails its maintainer walks, or when its LRU crawler visits them.
//!
//! Every `--spawn`/`--target` server gets the same write stream at the same time: new keys
//! at `--rate` sets per second, each with a TTL drawn uniformly from
//! `--short-ttl` or, for a `--long-share` of them, an hour (live for the whole
//! run). Nothing is ever read back, so nothing expires by access. The client keeps the
//! deadline of everything it wrote, so at every second it knows how many items are still
//! live; the server says how many it holds (`curr_items`) and their bytes (`bytes`). The
//! difference is the expired items it still holds; their bytes are that share of `bytes`
//! (all items have the same size, so each server's own per-item overhead is counted as it
//! is). An item counts as expired one second after its deadline ([`GRACE`]): both servers
//! keep time in whole seconds. Also sampled: the server's resident memory (procfs, when
//! its PID is known).
//!
//! memcached runs with its defaults (1.6: segmented LRU, the LRU maintainer thread and the
//! automatic LRU crawler on); the report prints those settings and its reclaim counters so
//! the comparison can be judged.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use memfleet_results::plot::{self, Timeline};

use super::args::{Spawning, Targets};
use super::run_log::{write_results, RunLog};
use super::server_stats::Stats;
use super::table::{Column, Table};
use super::timeline;
use super::{runtime, start, Target};
use memfleet_sim::duration::parse_duration;
use memfleet_testkit::Spawned;

mod measure;
pub use self::measure::GRACE;
use self::measure::{run, ExpiryRun, Sample, Summary, COUNTERS, SETTINGS};

/// `memfleet bench expiry`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ExpiryArgs {
    /// The servers under test.
    #[command(flatten)]
    pub targets: Targets,
    /// How spawned servers are started.
    #[command(flatten)]
    pub spawning: Spawning,
    /// How long the sets go on, e.g. 30s (one sample per second).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub duration: Duration,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// RNG seed of the TTL sequence (the same for every server).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Sets per second, each of a new key, spread evenly over each second.
    #[arg(long, alias = "expiry-rate", default_value_t = 20_000)]
    pub rate: u64,
    /// The short TTLs, seconds, drawn uniformly from MIN-MAX.
    #[arg(long, alias = "expiry-short-ttl", value_parser = parse_ttl_range, default_value = "2-10")]
    pub short_ttl: TtlRange,
    /// The fraction of sets with a long TTL (an hour: live for the whole run).
    #[arg(long, alias = "expiry-long-share", default_value_t = 0.2)]
    pub long_share: f64,
    /// Write expiry.json and its figures into this directory, with the command that made
    /// them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

/// The TTL of long-lived items: longer than any run, so they never expire in one.
pub const LONG_TTL: u32 = 3600;

/// The range short TTLs are drawn from, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlRange {
    /// Shortest.
    pub min: u32,
    /// Longest.
    pub max: u32,
}

/// Parses `MIN-MAX` or a single TTL, in seconds (at least 1).
pub fn parse_ttl_range(s: &str) -> Result<TtlRange, String> {
    let (min, max) = s.split_once('-').unwrap_or((s, s));
    let parse = |n: &str| n.trim().parse::<u32>().ok().filter(|&n| n >= 1);
    match (parse(min), parse(max)) {
        (Some(min), Some(max)) if min <= max && max < LONG_TTL => Ok(TtlRange { min, max }),
        _ => Err(format!(
            "bad TTL range {s:?}: MIN-MAX seconds with 1 <= MIN <= MAX < {LONG_TTL}, like 2-10"
        )),
    }
}

/// `memfleet bench expiry`.
pub fn bench(args: &ExpiryArgs) -> Result<()> {
    let targets = args.targets.list();
    if targets.is_empty() {
        bail!("expiry: give the servers to compare, e.g. --spawn memfleet --spawn memcached");
    }
    if args.rate == 0 || args.duration < Duration::from_secs(1) {
        bail!("expiry needs a positive --rate and a --duration of at least 1s");
    }
    if !(0.0..=1.0).contains(&args.long_share) {
        bail!("--long-share must be within 0..=1");
    }
    let ttl = args.short_ttl;
    let log = RunLog::new();
    println!(
        "memfleet bench expiry: {} new keys per second with {}-byte values for {:?}, \
         {:.0}% with a TTL of {}-{} s and {:.0}% of {LONG_TTL} s, to {} at once; nothing is \
         read back",
        args.rate,
        args.value_size,
        args.duration,
        100.0 * (1.0 - args.long_share),
        ttl.min,
        ttl.max,
        100.0 * args.long_share,
        targets
            .iter()
            .map(Target::name)
            .collect::<Vec<_>>()
            .join(", ")
    );
    log.print_start();
    let settings = args.spawning.settings(false, args.value_size);
    let mut servers: Vec<(Option<Spawned>, SocketAddr, Option<u32>)> = Vec::new();
    for t in &targets {
        let (spawned, addr) = start(t, &settings, None, &[])?;
        let pid = t.pid(spawned.as_ref());
        servers.push((spawned, addr, pid));
    }
    let (rt, local) = runtime()?;
    let outcomes = local.block_on(&rt, async {
        let begin = Instant::now() + Duration::from_millis(200);
        let mut runs = Vec::new();
        for (i, (t, (_, addr, pid))) in targets.iter().zip(&servers).enumerate() {
            let (args, name, addr, pid) = (args.clone(), t.name().to_string(), *addr, *pid);
            runs.push(tokio::task::spawn_local(async move {
                run(&args, name, addr, pid, begin, i as u64).await
            }));
        }
        let mut outcomes = Vec::new();
        for (r, t) in runs.into_iter().zip(&targets) {
            outcomes.push(
                r.await
                    .context("a server's task")?
                    .with_context(|| format!("loading {}", t.name()))?,
            );
        }
        anyhow::Ok(outcomes)
    })?;
    for (spawned, _, _) in &mut servers {
        if let Some(s) = spawned {
            s.check_alive()?;
        }
    }
    drop(servers);

    // Once every short TTL written in the first second has run out, the expired bytes a
    // server holds reflect its expiry machinery rather than the start of the run.
    let steady_from = f64::from(ttl.max) + GRACE.as_secs_f64() + 1.0;
    let summaries: Vec<Summary> = outcomes.iter().map(|o| o.summary(steady_from)).collect();
    print!("{}", timeline(&outcomes));
    print!("{}", summary_table(&outcomes, &summaries, steady_from));
    let load_at_end = log.print_end();
    if let Some(dir) = &args.out {
        let value = json_report(args, &outcomes, &summaries, steady_from, &load_at_end);
        write_results(dir, "expiry", &value)?;
        for figure in figures(dir, &outcomes)? {
            println!("figure: {}", figure.display());
        }
    }
    Ok(())
}

fn mib(bytes: f64) -> String {
    format!("{:.2}", bytes / (1024.0 * 1024.0))
}

/// Per second, side by side: bytes held, bytes held in expired items, their share, RSS.
fn timeline(outcomes: &[ExpiryRun]) -> String {
    let names: Vec<&str> = outcomes.iter().map(|o| o.name.as_str()).collect();
    let columns = format!(
        "{:>9} {:>10} {:>9} {:>9}",
        "held MiB", "expired MiB", "expired%", "RSS MiB"
    );
    let seconds = outcomes.iter().map(|o| o.samples.len()).min().unwrap_or(0);
    timeline::timeline(&names, 41, &columns, seconds, |run, i| {
        let s = &outcomes[run].samples[i];
        format!(
            "{:>9} {:>10} {:>9.1} {:>9}",
            mib(s.held_bytes as f64),
            mib(s.expired_bytes() as f64),
            100.0 * s.expired_share(),
            s.rss.map_or("-".into(), |r| mib(r as f64))
        )
    })
}

fn summary_table(outcomes: &[ExpiryRun], summaries: &[Summary], steady_from: f64) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nbytes held in expired items (steady: from second {steady_from:.0} on, once the \
         first short TTLs have run out; early gone: live items no longer held):"
    );
    #[rustfmt::skip]
    const COLUMNS: [Column; 8] = [
        Column::left("server", 12), Column::right("sets", 10), Column::right("peak MiB", 10),
        Column::right("mean MiB", 10), Column::right("steady mean MiB", 15),
        Column::right("steady share%", 13), Column::right("early gone%", 13),
        Column::right("peak RSS MiB", 12),
    ];
    let mut table = Table::new(&COLUMNS);
    for (o, s) in outcomes.iter().zip(summaries) {
        table.row(&[
            &o.name,
            &o.written,
            &mib(s.peak as f64),
            &mib(s.mean),
            &mib(s.steady_mean),
            &format!("{:.1}", 100.0 * s.steady_share),
            &format!("{:.1}", 100.0 * s.steady_early_share),
            &s.peak_rss.map_or("-".into(), |r| mib(r as f64)),
        ]);
    }
    t += &table.text();
    for o in outcomes {
        let pick = |stats: &Stats, names: &[&str]| {
            names
                .iter()
                .filter_map(|n| stats.0.get(*n).map(|v| format!("{n}={v}")))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(
            t,
            "{}: settings [{}]; at the end [{}]",
            o.name,
            pick(&o.settings, &SETTINGS),
            pick(&o.end, &COUNTERS)
        );
        if o.end.int_or_zero("evictions") > 0 {
            let _ = writeln!(
                t,
                "{}: evicted items (raise --server-memory): expired bytes are underestimated",
                o.name
            );
        }
    }
    t
}

/// (seconds since the first write, value) at each sample.
fn series(o: &ExpiryRun, f: &dyn Fn(&Sample) -> Option<f64>) -> Vec<(f64, f64)> {
    o.samples
        .iter()
        .filter_map(|s| f(s).map(|v| (s.at, v)))
        .collect()
}

/// The figures of a run, one line per server: bytes held in expired items and resident
/// memory over time, as PNGs beside expiry.json.
fn figures(dir: &std::path::Path, outcomes: &[ExpiryRun]) -> Result<Vec<std::path::PathBuf>> {
    const MIB: f64 = 1024.0 * 1024.0;
    plot::timelines(
        dir,
        outcomes,
        |o| o.name.clone(),
        &[
            Timeline {
                file: "expiry-expired-bytes",
                title: "Memory held by expired items (Segcache §3.5)",
                y_label: "MiB",
                points: |o| series(o, &|s| Some(s.expired_bytes() as f64 / MIB)),
            },
            Timeline {
                file: "expiry-rss",
                title: "Resident memory",
                y_label: "MiB",
                points: |o| series(o, &|s| s.rss.map(|r| r as f64 / MIB)),
            },
        ],
    )
}

fn json_report(
    args: &ExpiryArgs,
    outcomes: &[ExpiryRun],
    summaries: &[Summary],
    steady_from: f64,
    load_at_end: &str,
) -> serde_json::Value {
    let servers: Vec<serde_json::Value> = outcomes
        .iter()
        .zip(summaries)
        .map(|(o, s)| {
            json!({
                "name": o.name,
                "series": {
                    "held_bytes": series(o, &|s| Some(s.held_bytes as f64)),
                    "expired_bytes": series(o, &|s| Some(s.expired_bytes() as f64)),
                    "expired_share": series(o, &|s| Some(s.expired_share())),
                    "early_gone_share": series(o, &|s| Some(s.early_share())),
                    "held_items": series(o, &|s| Some(s.held_items as f64)),
                    "live_items": series(o, &|s| Some(s.live_items as f64)),
                    "rss_bytes": series(o, &|s| s.rss.map(|r| r as f64)),
                },
                "summary": {
                    "sets": o.written,
                    "peak_expired_bytes": s.peak,
                    "mean_expired_bytes": s.mean,
                    "steady_mean_expired_bytes": s.steady_mean,
                    "steady_expired_share": s.steady_share,
                    "steady_early_gone_share": s.steady_early_share,
                    "peak_rss_bytes": s.peak_rss,
                },
                "settings": o.settings.0,
                "stats_at_end": o.end.0,
            })
        })
        .collect();
    json!({
        "parameters": {
            "rate": args.rate,
            "short_ttl_s": [args.short_ttl.min, args.short_ttl.max],
            "long_ttl_s": LONG_TTL,
            "long_share": args.long_share,
            "value_size": args.value_size,
            "duration_s": args.duration.as_secs_f64(),
            "server_memory_mib": args.spawning.server_memory,
            "grace_s": GRACE.as_secs_f64(),
            "steady_from_s": steady_from,
        },
        "load_average_at_end": load_at_end,
        "servers": servers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_ranges() {
        assert_eq!(parse_ttl_range("2-10"), Ok(TtlRange { min: 2, max: 10 }));
        assert_eq!(parse_ttl_range("5"), Ok(TtlRange { min: 5, max: 5 }));
        assert!(parse_ttl_range("10-2").is_err());
        assert!(parse_ttl_range("0-3").is_err());
        assert!(parse_ttl_range("2-99999").is_err());
        assert!(parse_ttl_range("soon").is_err());
    }
}
