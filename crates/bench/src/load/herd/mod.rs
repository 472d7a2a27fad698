//! `memfleet bench --scenario herd`: the thundering-herd experiment of Facebook §3.2.1.
//!
//! One hot key, read in a closed loop by `--conns` clients that each behave like a web
//! server doing look-aside caching against a simulated database. A writer updates the
//! database row every `--herd-invalidate` and then deletes the key, as the paper's
//! applications do. The database is in-process: every query takes `--herd-db-latency`
//! and is counted in 100 ms windows, so the report can give the mean and the peak query
//! rate the cache let through.
//!
//! The same traffic runs in up to three ways against each server:
//! - `plain`: `get`; on a miss, query the database and `set` (every client that misses
//!   after a delete queries: the herd).
//! - `lease`: mcrouter's `lease-get`/`lease-set` (memfleet): one client per key per delete
//!   gets a token and queries; the others get a hot miss and retry after `--herd-retry`.
//! - `meta`: memcached's meta-protocol leases, `mg <key> v c N30` then `ms <key> C<cas>`
//!   (memcached 1.6 and memfleet): the `W` winner queries, `Z` readers retry.
//!
//! With `--herd-accept-stale`, a reader told to wait takes a stale value instead when one is
//! offered (memfleet keeps deleted values for lease reads; `X` in meta).
//!
//! Every value carries the database version it was read at, so a reader can tell a stale
//! value served as fresh — a cache hit older than the last update whose delete had
//! completed before the read began — which is what a late `set` after a delete (the stale
//! set leases prevent) causes.
//!
//! With `--out DIR`: `herd.json` (the table's rows with each one's database timeline) and
//! `herd-db-queries.png` (database queries per second in each 100 ms window, per mode).

use super::run_log::{write_results, RunLog};
use super::{runtime, start, LoadArgs};
use anyhow::{bail, Context, Result};
use memfleet_results::plot::{self, Series};
use serde_json::json;

mod clients;
pub use self::clients::{run, supported_modes, HerdConfig, HerdResult, Mode, WINDOW};

/// The report table: one row per (server, mode).
pub fn table(rows: &[(String, Mode, HerdResult)]) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<12} {:<6} {:>10} {:>8} {:>9} {:>10} {:>10} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8}",
        "server",
        "mode",
        "reads/s",
        "hit1 %",
        "db total",
        "db q/s",
        "db peak/s",
        "waits",
        "stale",
        "stale-hit",
        "refused",
        "p50 µs",
        "p99 µs"
    );
    for (server, mode, r) in rows {
        let secs = r.elapsed.as_secs_f64().max(1e-9);
        let _ = writeln!(
            t,
            "{:<12} {:<6} {:>10.0} {:>8.2} {:>9} {:>10.1} {:>10.0} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8}",
            server,
            mode.name(),
            r.reads as f64 / secs,
            100.0 * r.first_try_hits as f64 / r.reads.max(1) as f64,
            r.db_queries,
            r.db_qps_mean,
            r.db_qps_peak,
            r.waits,
            r.stale_taken,
            r.stale_served_as_fresh,
            r.fills_refused,
            r.latency_us.0,
            r.latency_us.1
        );
    }
    t
}

/// `--scenario herd`: every target, every mode it speaks, `--repeat` times; prints each run
/// and the table of medians (by peak database rate).
pub fn bench(args: &LoadArgs) -> Result<()> {
    if args.spawn.is_empty() && args.target.is_empty() {
        bail!("nothing to load: give --spawn memcached|memfleet or --target NAME=HOST:PORT");
    }
    if args.repeat == 0 || args.duration.is_zero() || args.herd_invalidate.is_zero() {
        bail!("--repeat, --duration and --herd-invalidate must be positive");
    }
    let wanted: Vec<Mode> = args
        .herd_modes
        .iter()
        .map(|m| match m.as_str() {
            "plain" => Ok(Mode::Plain),
            "lease" => Ok(Mode::Lease),
            "meta" => Ok(Mode::Meta),
            other => bail!("--herd-modes: unknown mode {other:?} (plain, lease, meta)"),
        })
        .collect::<Result<_>>()?;
    let log = RunLog::new();
    println!(
        "memfleet bench --scenario herd: {} readers of one hot key, updated and deleted every \
         {:?}; database queries take {:?}; waiting readers retry after {:?}{}; {:?} per run, \
         {} repeat(s)",
        args.conns,
        args.herd_invalidate,
        args.herd_db_latency,
        args.herd_retry,
        if args.herd_accept_stale {
            ", or take a stale value"
        } else {
            ""
        },
        args.duration,
        args.repeat
    );
    log.print_start();
    let settings = args.server_settings(false);
    let (_, server_pin) = args.pins();
    let targets = args.targets();
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
                        conns: args.conns,
                        duration: args.duration,
                        invalidate_every: args.herd_invalidate,
                        db_latency: args.herd_db_latency,
                        retry_after: args.herd_retry,
                        accept_stale: args.herd_accept_stale,
                        value_size: args.fixed_value_size("--scenario herd")?,
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
    args: &LoadArgs,
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
            "conns": args.conns,
            "duration_s": args.duration.as_secs_f64(),
            "invalidate_every_ms": args.herd_invalidate.as_secs_f64() * 1000.0,
            "db_latency_ms": args.herd_db_latency.as_secs_f64() * 1000.0,
            "retry_after_ms": args.herd_retry.as_secs_f64() * 1000.0,
            "accept_stale": args.herd_accept_stale,
            "value_size": args.value_size.to_string(),
            "repeat": args.repeat,
            "window_ms": WINDOW.as_secs_f64() * 1000.0,
            "rows_are": "the run with the median database peak of each server and mode",
        },
        "load_average_at_end": load_at_end,
        "rows": rows,
    })
}
