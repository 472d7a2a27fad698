//! `memfleet bench warmup`: Facebook §4.3's Cold Cluster Warmup — how fast an
//! empty ("cold") cluster reaches a useful hit rate, and what it costs the database, with
//! and without the router's `warmup` route.
//!
//! Each run starts a warm cluster and a cold cluster of two `memfleet server`s each and a
//! `memfleet router` whose `warmup` route puts the cold cluster in front of the warm one
//! (`enabled = false` in the run without warm-up: the switch the paper turns off once the
//! cold cluster has recovered). The warm cluster is filled with all `--keys` keys through the
//! router's listener of the warm pool; the cold cluster starts empty. Then `--conns`
//! look-aside clients read through the route for `--duration`: `get` a key (Zipf with
//! exponent `--zipf`, 1.0 by default); on a miss query the simulated database and `set` the
//! value. With warm-up, the router turns a cold miss into a read of the warm cluster and an
//! `add` into the cold one, so the client gets a hit.
//!
//! The database has a fixed capacity: a query takes `--db-latency` and at most
//! `--db-concurrency` run at once (the others queue), as a real database can absorb
//! only so much extra load. The clients are closed loops, so without warm-up that capacity
//! limits how fast the cold cluster fills (the reason the paper's cold clusters took days
//! rather than hours), and the queueing shows in the clients' latency. Reported per second:
//! the cold cluster's own hit rate (its servers' `get_hits`/`get_misses`), the hit rate the clients saw,
//! database queries, the client's latency (database included); in summary, when the cold
//! cluster first reached 50% and 90% hits, and the database queries of the whole run.

use std::rc::Rc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;

use memfleet_results::plot::{self, Timeline};

use super::args::LookAside;
use super::run_log::{write_results, RunLog};
use super::runtime;
use super::table::{Column, Table};
use super::timeline;

mod measure;
use self::measure::{
    label, run, Second, Summary, WarmupRun, DEFAULT_ZIPF, GOALS, SERVERS_PER_CLUSTER,
};

/// `memfleet bench warmup`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct WarmupArgs {
    /// The clients, the keys, the servers' executable, the database.
    #[command(flatten)]
    pub look_aside: LookAside,
    /// RNG seed of the clients' key streams.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Memory of each cache server in MiB (-m).
    #[arg(long, default_value_t = 1024)]
    pub server_memory: u64,
    /// Database queries served at once; more wait their turn, so the database answers at
    /// most this many per --db-latency.
    #[arg(long, alias = "warmup-db-concurrency", default_value_t = 8)]
    pub db_concurrency: usize,
    /// Write warmup.json and its figures into this directory, with the command that made
    /// them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

/// `memfleet bench warmup`.
pub fn bench(args: &WarmupArgs) -> Result<()> {
    if args.look_aside.clients.conns == 0
        || args.db_concurrency == 0
        || args.look_aside.clients.duration < Duration::from_secs(1)
    {
        bail!(
            "warmup needs --conns and --db-concurrency of at least 1 and a --duration \
             of at least 1s"
        );
    }
    let zipf = args.look_aside.keys.zipf.unwrap_or(DEFAULT_ZIPF);
    let workload = Rc::new(args.look_aside.keys.gets_workload("warmup", Some(zipf))?);
    let log = RunLog::new();
    println!(
        "memfleet bench warmup: a cold and a warm cluster of {SERVERS_PER_CLUSTER} \
         servers each behind a router; the warm one holds {} keys of {} bytes; {} look-aside \
         clients read Zipf {zipf} keys through the router for {:?}; database queries take {:?}, \
         {} at a time",
        args.look_aside.keys.keys,
        args.look_aside.keys.value_size,
        args.look_aside.clients.conns,
        args.look_aside.clients.duration,
        args.look_aside.db_latency,
        args.db_concurrency
    );
    log.print_start();
    let (rt, local) = runtime()?;
    let mut outcomes = Vec::new();
    for warm_up in [true, false] {
        let outcome = local
            .block_on(&rt, run(args, &workload, warm_up))
            .with_context(|| format!("the run {}", label(warm_up)))?;
        outcomes.push(outcome);
    }
    print!("{}", timeline(&outcomes));
    let summaries: Vec<Summary> = outcomes.iter().map(WarmupRun::summary).collect();
    print!("{}", summary_table(&outcomes, &summaries));
    let load_at_end = log.print_end();
    if let Some(dir) = &args.out {
        let value = json_report(args, zipf, &outcomes, &summaries, &load_at_end);
        write_results(dir, "warmup", &value)?;
        for figure in figures(dir, &outcomes)? {
            println!("figure: {}", figure.display());
        }
    }
    let errors: u64 = summaries.iter().map(|s| s.errors).sum();
    if errors > 0 {
        bail!("{errors} wrong replies or refused sets (see the errors column)");
    }
    Ok(())
}

fn percent(rate: Option<f64>) -> String {
    rate.map_or("-".into(), |r| format!("{:.1}", 100.0 * r))
}

fn millis(ms: Option<f64>) -> String {
    ms.map_or("-".into(), |m| format!("{m:.2}"))
}

/// Per second, side by side: gets/s, the cold cluster's hit rate, the clients' hit rate,
/// database queries/s and p99 latency of each run.
fn timeline(outcomes: &[WarmupRun]) -> String {
    let names: Vec<&str> = outcomes.iter().map(|o| o.label).collect();
    let columns = format!(
        "{:>8} {:>9} {:>9} {:>8} {:>8}",
        "gets/s", "cold hit%", "clnt hit%", "db/s", "p99 ms"
    );
    let seconds = outcomes.iter().map(|o| o.seconds.len()).min().unwrap_or(0);
    timeline::timeline(&names, 46, &columns, seconds, |run, i| {
        let s = &outcomes[run].seconds[i];
        format!(
            "{:>8} {:>9} {:>9} {:>8} {:>8}",
            s.gets,
            percent(s.cold_hit_rate()),
            percent(s.client_hit_rate()),
            s.db,
            millis(s.latency_ms(0.99))
        )
    })
}

fn summary_table(outcomes: &[WarmupRun], summaries: &[Summary]) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let after = |r: Option<usize>| r.map_or("never".into(), |s| format!("{s}s"));
    #[rustfmt::skip]
    const COLUMNS: [Column; 12] = [
        Column::left("run", 16), Column::right("gets", 9), Column::right("db", 9),
        Column::right("db/100get", 10), Column::right("clnt hit%", 9),
        Column::right("cold last%", 10), Column::right("50% at", 9), Column::right("90% at", 9),
        Column::right("p50 ms", 8), Column::right("p99 ms", 8), Column::right("cold items", 10),
        Column::right("errors", 6),
    ];
    let mut table = Table::new(&COLUMNS);
    for (o, s) in outcomes.iter().zip(summaries) {
        table.row(&[
            &o.label,
            &s.gets,
            &s.db,
            &format!("{:.2}", 100.0 * s.db as f64 / s.gets.max(1) as f64),
            &format!("{:.1}", 100.0 * s.client_hit_rate),
            &percent(s.last_cold_hit_rate),
            &after(s.reached[0]),
            &after(s.reached[1]),
            &format!("{:.2}", s.p50_ms),
            &format!("{:.2}", s.p99_ms),
            &s.cold_items,
            &s.errors,
        ]);
    }
    t.push('\n');
    t += &table.text();
    for o in outcomes.iter().filter(|o| o.warm_up) {
        let _ = writeln!(
            t,
            "{}: the router filled {} cold misses from the warm cluster ({} fills refused)",
            o.label, o.warm_fills, o.fills_refused
        );
    }
    t
}

/// (seconds since the start of the run, value) at the end of each one-second window.
fn series(o: &WarmupRun, f: &dyn Fn(&Second) -> Option<f64>) -> Vec<(f64, f64)> {
    plot::per_second(&o.seconds, f)
}

/// The figures of a run: the cold cluster's hit rate, the database's load and the clients'
/// p99 over time, with and without warm-up, as PNGs beside warmup.json.
fn figures(dir: &std::path::Path, outcomes: &[WarmupRun]) -> Result<Vec<std::path::PathBuf>> {
    plot::timelines(
        dir,
        outcomes,
        |o| o.label.to_string(),
        &[
            Timeline {
                file: "warmup-cold-hit-rate",
                title: "Cold cluster hit rate (Facebook §4.3)",
                y_label: "hit rate (%)",
                points: |o| series(o, &|s| s.cold_hit_rate().map(|r| r * 100.0)),
            },
            Timeline {
                file: "warmup-db-queries",
                title: "Database queries per second",
                y_label: "queries/s",
                points: |o| series(o, &|s| Some(s.db as f64)),
            },
            Timeline {
                file: "warmup-latency-p99",
                title: "Client get latency, p99",
                y_label: "ms",
                points: |o| series(o, &|s| s.latency_ms(0.99)),
            },
        ],
    )
}

fn json_report(
    args: &WarmupArgs,
    zipf: f64,
    outcomes: &[WarmupRun],
    summaries: &[Summary],
    load_at_end: &str,
) -> serde_json::Value {
    let runs: Vec<serde_json::Value> = outcomes
        .iter()
        .zip(summaries)
        .map(|(o, s)| {
            json!({
                "label": o.label,
                "warm_up": o.warm_up,
                "series": {
                    "cold_hit_rate": series(o, &Second::cold_hit_rate),
                    "client_hit_rate": series(o, &Second::client_hit_rate),
                    "db_queries_per_s": series(o, &|s| Some(s.db as f64)),
                    "gets_per_s": series(o, &|s| Some(s.gets as f64)),
                    "latency_p50_ms": series(o, &|s| s.latency_ms(0.5)),
                    "latency_p99_ms": series(o, &|s| s.latency_ms(0.99)),
                    "cold_items": series(o, &|s| Some(s.cold_items as f64)),
                },
                "summary": {
                    "gets": s.gets,
                    "db_queries": s.db,
                    "errors": s.errors,
                    "client_hit_rate": s.client_hit_rate,
                    "last_second_cold_hit_rate": s.last_cold_hit_rate,
                    "seconds_to_cold_hit_rate": GOALS.iter().zip(&s.reached)
                        .map(|(g, r)| json!({"goal": g, "seconds": r}))
                        .collect::<Vec<_>>(),
                    "latency_p50_ms": s.p50_ms,
                    "latency_p99_ms": s.p99_ms,
                    "cold_items": s.cold_items,
                    "warm_fills": o.warm_fills,
                    "fills_refused": o.fills_refused,
                },
            })
        })
        .collect();
    json!({
        "parameters": {
            "servers_per_cluster": SERVERS_PER_CLUSTER,
            "keys": args.look_aside.keys.keys,
            "zipf": zipf,
            "value_size": args.look_aside.keys.value_size.to_string(),
            "conns": args.look_aside.clients.conns,
            "db_latency_ms": args.look_aside.db_latency.as_secs_f64() * 1000.0,
            "db_concurrency": args.db_concurrency,
            "duration_s": args.look_aside.clients.duration.as_secs_f64(),
            "server_memory_mib": args.server_memory,
        },
        "load_average_at_end": load_at_end,
        "runs": runs,
    })
}
