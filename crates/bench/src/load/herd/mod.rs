//! `memfleet bench herd`: the thundering-herd experiment of Facebook §3.2.1.
//!
//! One hot key, read in a closed loop by `--conns` clients that each behave like a web
//! server doing look-aside caching against a simulated database. A writer updates the
//! database row every `--invalidate` and then deletes the key, as the paper's
//! applications do. The database is in-process: every query takes `--db-latency`
//! and is counted in 100 ms windows, so the report can give the mean and the peak query
//! rate the cache let through.
//!
//! The same traffic runs in up to three ways against each server:
//! - `plain`: `get`; on a miss, query the database and `set` (every client that misses
//!   after a delete queries: the herd).
//! - `lease`: mcrouter's `lease-get`/`lease-set` (memfleet): one client per key per delete
//!   gets a token and queries; the others get a hot miss and retry after `--retry`.
//! - `meta`: memcached's meta-protocol leases, `mg <key> v c N30` then `ms <key> C<cas>`
//!   (memcached 1.6 and memfleet): the `W` winner queries, `Z` readers retry.
//!
//! With `--accept-stale`, a reader told to wait takes a stale value instead when one is
//! offered (memfleet keeps deleted values for lease reads; `X` in meta).
//!
//! Every value carries the database version it was read at, so a reader can tell a stale
//! value served as fresh — a cache hit older than the last update whose delete had
//! completed before the read began — which is what a late `set` after a delete (the stale
//! set leases prevent) causes.
//!
//! With `--out DIR`: `herd.json` (the table's rows with each one's database timeline) and
//! `herd-db-queries.png` (database queries per second in each 100 ms window, per mode).

use super::args::{Clients, Servers};
use super::run_log::{write_results, RunLog};
use super::table::{Column, Table};
use super::{runtime, start};
use anyhow::{bail, Context, Result};
use memfleet_results::plot::{self, Series};
use memfleet_sim::duration::parse_duration;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

mod clients;
pub use self::clients::{run, supported_modes, HerdConfig, HerdResult, Mode, WINDOW};

/// `memfleet bench herd`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct HerdArgs {
    /// The servers under test.
    #[command(flatten)]
    pub servers: Servers,
    /// The readers of the hot key and the run time.
    #[command(flatten)]
    pub clients: Clients,
    /// Run every server and mode N times and report the run with the median database peak.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Size of the hot key's value in bytes (at least 20: it starts with the version).
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Time between database updates, each followed by a delete of the key.
    #[arg(long, alias = "herd-invalidate", value_parser = parse_duration, default_value = "300ms")]
    pub invalidate: Duration,
    /// How long a simulated database query takes.
    #[arg(long, alias = "herd-db-latency", value_parser = parse_duration, default_value = "10ms")]
    pub db_latency: Duration,
    /// Pause before a reader told to wait (hot miss) asks again.
    #[arg(long, alias = "herd-retry", value_parser = parse_duration, default_value = "2ms")]
    pub retry: Duration,
    /// A reader told to wait takes a stale value when one is offered.
    #[arg(long, alias = "herd-accept-stale")]
    pub accept_stale: bool,
    /// Which modes to run where the server speaks them (plain, lease, meta).
    #[arg(
        long,
        alias = "herd-modes",
        value_delimiter = ',',
        default_value = "plain,lease,meta"
    )]
    pub modes: Vec<String>,
    /// Write herd.json and herd-db-queries.png into this directory, with the command that
    /// made them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// The report table's columns.
#[rustfmt::skip]
const COLUMNS: [Column; 13] = [
    Column::left("server", 12), Column::left("mode", 6), Column::right("reads/s", 10),
    Column::right("hit1 %", 8), Column::right("db total", 9), Column::right("db q/s", 10),
    Column::right("db peak/s", 10), Column::right("waits", 8), Column::right("stale", 8),
    Column::right("stale-hit", 9), Column::right("refused", 8), Column::right("p50 µs", 8),
    Column::right("p99 µs", 8),
];

/// The report table: one row per (server, mode).
pub fn table(rows: &[(String, Mode, HerdResult)]) -> String {
    let mut t = Table::new(&COLUMNS);
    for (server, mode, r) in rows {
        let secs = r.elapsed.as_secs_f64().max(1e-9);
        t.row(&[
            server,
            &mode.name(),
            &format!("{:.0}", r.reads as f64 / secs),
            &format!(
                "{:.2}",
                100.0 * r.first_try_hits as f64 / r.reads.max(1) as f64
            ),
            &r.db_queries,
            &format!("{:.1}", r.db_qps_mean),
            &format!("{:.0}", r.db_qps_peak),
            &r.waits,
            &r.stale_taken,
            &r.stale_served_as_fresh,
            &r.fills_refused,
            &r.latency_us.0,
            &r.latency_us.1,
        ]);
    }
    t.text()
}

/// `memfleet bench herd`: every target, every mode it speaks, `--repeat` times; prints each run
/// and the table of medians (by peak database rate).
pub fn bench(args: &HerdArgs) -> Result<()> {
    if args.servers.targets.is_empty() {
        bail!("nothing to load: give --spawn memcached|memfleet or --target NAME=HOST:PORT");
    }
    if args.repeat == 0 || args.clients.duration.is_zero() || args.invalidate.is_zero() {
        bail!("--repeat, --duration and --invalidate must be positive");
    }
    let wanted: Vec<Mode> = args
        .modes
        .iter()
        .map(|m| match m.as_str() {
            "plain" => Ok(Mode::Plain),
            "lease" => Ok(Mode::Lease),
            "meta" => Ok(Mode::Meta),
            other => bail!("--modes: unknown mode {other:?} (plain, lease, meta)"),
        })
        .collect::<Result<_>>()?;
    let log = RunLog::new();
    println!(
        "memfleet bench herd: {} readers of one hot key, updated and deleted every \
         {:?}; database queries take {:?}; waiting readers retry after {:?}{}; {:?} per run, \
         {} repeat(s)",
        args.clients.conns,
        args.invalidate,
        args.db_latency,
        args.retry,
        if args.accept_stale {
            ", or take a stale value"
        } else {
            ""
        },
        args.clients.duration,
        args.repeat
    );
    log.print_start();
    let settings = args.servers.spawning.settings(false, args.value_size);
    let (_, server_pin) = args.servers.pinning.pins();
    let targets = args.servers.targets.list();
    let (rt, local) = runtime()?;
    let mut runs: Vec<(String, Mode, Vec<HerdResult>)> = Vec::new();
    local.block_on(&rt, async {
        for t in &targets {
            let (spawned, addr) = start(t, &settings, server_pin, &[])?;
            let spoken = supported_modes(addr).await?;
            for &mode in wanted.iter().filter(|m| spoken.contains(m)) {
                let mut results = Vec::new();
                for r in 1..=args.repeat {
                    let cfg = HerdConfig {
                        addr,
                        conns: args.clients.conns,
                        duration: args.clients.duration,
                        invalidate_every: args.invalidate,
                        db_latency: args.db_latency,
                        retry_after: args.retry,
                        accept_stale: args.accept_stale,
                        value_size: args.value_size,
                        key: format!("herd:{}:{r}", mode.name()),
                    };
                    let res = run(&cfg, mode)
                        .await
                        .with_context(|| format!("{} herd in mode {}", t.name(), mode.name()))?;
                    println!(
                        "[{}] {} run {r}/{}: db peak {:.0}/s, mean {:.1}/s, {} queries for {} \
                         updates, {} reads",
                        t.name(),
                        mode.name(),
                        args.repeat,
                        res.db_qps_peak,
                        res.db_qps_mean,
                        res.db_queries,
                        res.updates,
                        res.reads
                    );
                    results.push(res);
                }
                runs.push((t.name().to_string(), mode, results));
            }
            for m in wanted.iter().filter(|m| !spoken.contains(m)) {
                println!("[{}] does not speak mode {}: skipped", t.name(), m.name());
            }
            drop(spawned);
        }
        anyhow::Ok(())
    })?;
    let rows: Vec<(String, Mode, HerdResult)> = runs
        .into_iter()
        .map(|(name, mode, mut results)| {
            results.sort_by(|a, b| a.db_qps_peak.total_cmp(&b.db_qps_peak));
            let median = results.swap_remove(results.len() / 2);
            (name, mode, median)
        })
        .collect();
    println!();
    if args.repeat > 1 {
        println!("median (by database peak) of {} runs:", args.repeat);
    }
    print!("{}", table(&rows));
    println!(
        "columns: hit1 = reads answered by their first request; db q/s = mean database \
         queries per second, db peak/s = busiest 100 ms window; waits = hot misses retried; \
         stale = stale values taken by choice; stale-hit = stale values served as fresh; \
         refused = fills the server refused"
    );
    let load_at_end = log.print_end();
    if let Some(dir) = &args.out {
        let value = json_report(args, &rows, &load_at_end);
        write_results(dir, "herd", &value)?;
        let figure = dir.join("herd-db-queries.png");
        plot::line_chart(
            &figure,
            "Database queries per second, per 100 ms window (Facebook §3.2.1)",
            "seconds",
            "queries/s",
            &rows
                .iter()
                .map(|(server, mode, r)| Series {
                    name: format!("{server} {}", mode.name()),
                    points: db_timeline(r),
                })
                .collect::<Vec<_>>(),
            false,
        )?;
        println!("figure: {}", figure.display());
    }
    Ok(())
}

/// The database's query rate over a run: (seconds since the start at the end of the
/// window, queries per second in the window).
fn db_timeline(r: &HerdResult) -> Vec<(f64, f64)> {
    let window = WINDOW.as_secs_f64();
    r.db_windows
        .iter()
        .enumerate()
        .map(|(i, &n)| ((i + 1) as f64 * window, n as f64 / window))
        .collect()
}

/// `herd.json`: the parameters and, per server and mode, the table's row (the median run)
/// with its database timeline.
fn json_report(
    args: &HerdArgs,
    rows: &[(String, Mode, HerdResult)],
    load_at_end: &str,
) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|(server, mode, r)| {
            let secs = r.elapsed.as_secs_f64().max(1e-9);
            json!({
                "server": server,
                "mode": mode.name(),
                "reads": r.reads,
                "reads_per_s": r.reads as f64 / secs,
                "first_try_hits": r.first_try_hits,
                "db_queries": r.db_queries,
                "db_qps_mean": r.db_qps_mean,
                "db_qps_peak": r.db_qps_peak,
                "waits": r.waits,
                "stale_taken": r.stale_taken,
                "stale_served_as_fresh": r.stale_served_as_fresh,
                "fills_refused": r.fills_refused,
                "updates": r.updates,
                "latency_p50_us": r.latency_us.0,
                "latency_p99_us": r.latency_us.1,
                "latency_max_us": r.latency_us.2,
                "elapsed_s": secs,
                "db_qps_timeline": db_timeline(r),
            })
        })
        .collect();
    json!({
        "parameters": {
            "conns": args.clients.conns,
            "duration_s": args.clients.duration.as_secs_f64(),
            "invalidate_every_ms": args.invalidate.as_secs_f64() * 1000.0,
            "db_latency_ms": args.db_latency.as_secs_f64() * 1000.0,
            "retry_after_ms": args.retry.as_secs_f64() * 1000.0,
            "accept_stale": args.accept_stale,
            "value_size": args.value_size,
            "repeat": args.repeat,
            "window_ms": WINDOW.as_secs_f64() * 1000.0,
            "rows_are": "the run with the median database peak of each server and mode",
        },
        "load_average_at_end": load_at_end,
        "rows": rows,
    })
}
