//! `memfleet bench invalidation`: commit-to-deleted latency of the invalidator
//! (Facebook §4.1, §7.3: mcsqueal; the paper reports four 9s of deletes within a second in
//! the master region). A scratch PostgreSQL, two clusters of one `memfleet router` in front
//! of one `memfleet server` each (the paper's mcsqueal talks to each cluster's mcrouters),
//! `memfleet invalidator` (a child process, `--memfleet-bin invalidator`) with a broadcast
//! route to both; `--conns` writers commit transactions in a closed loop, each invalidating
//! one key with `pg_logical_emit_message`. Reported: committed transactions per second,
//! the invalidator's commit-to-deleted-everywhere latency percentiles (the database's
//! commit timestamp to the last cluster's reply), keys per batch, and the sampled check
//! that deleted keys are gone. `--outage 2s` hangs the second cluster's router
//! (SIGSTOP) for that long a third of the way in: its deletes are spooled by the invalidator
//! and count only once replayed, so the tail shows the outage plus the replay (with
//! `--no-spool`, the invalidator's retries instead). What the invalidator did
//! is read from its Prometheus metrics (`invalidator_metrics`). With `--out DIR`:
//! `invalidation.json` (with the latency CDF) and `invalidation-latency-cdf.png`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use memfleet_testkit::{Postgres, Router, RouterConfig, Spawned};
use serde_json::json;

use super::args::{Clients, MemfleetBin};
use super::invalidator_metrics::Scrape;
use super::run_log::{write_results, RunLog};
use super::target::free_port;
use super::{load_average, report};
use memfleet_sim::duration::parse_duration;

/// `memfleet bench invalidation`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct InvalidationArgs {
    /// The memfleet executable.
    #[command(flatten)]
    pub memfleet: MemfleetBin,
    /// The writers, each committing transactions in a closed loop, and the run time.
    #[command(flatten)]
    pub clients: Clients,
    /// Committed transactions per second across all writers (0: as fast as they go).
    #[arg(long, alias = "invalidation-rate", default_value_t = 0)]
    pub rate: u64,
    /// Hang the second cluster's router (SIGSTOP, then SIGCONT) for this long, starting a
    /// third of the way into the run: its deletes wait in the invalidator's spool and count
    /// as delivered only when replayed (0s: no outage).
    #[arg(long, alias = "invalidation-outage", value_parser = parse_duration, default_value = "0s")]
    pub outage: Duration,
    /// No delete spool (`spool_deletes = false`): a delete a cluster cannot take fails its
    /// batch, which the invalidator retries until it is delivered.
    #[arg(long, alias = "invalidation-no-spool")]
    pub no_spool: bool,
    /// Write invalidation.json and invalidation-latency-cdf.png into this directory, with
    /// the command that made them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

/// `memfleet bench invalidation`.
pub fn bench(args: &InvalidationArgs) -> Result<()> {
    if args.clients.duration.is_zero() || args.clients.conns == 0 {
        bail!("--duration and --conns must be positive");
    }
    println!(
        "memfleet bench invalidation: {} writers committing one invalidation per \
         transaction for {:?} ({}); two clusters; the invalidator a process of its own",
        args.clients.conns,
        args.clients.duration,
        if args.rate > 0 {
            format!("{} transactions/s in all", args.rate)
        } else {
            "as fast as they go".to_string()
        }
    );
    RunLog::new().print_start();
    let pg = Postgres::start().context("starting a scratch PostgreSQL")?;
    let bin = &args.memfleet.memfleet_bin;
    // Each cluster as in the paper: a router in front of its server (mcsqueal talks to the
    // cluster's mcrouters). Every delete spool of this run (the routers' and the
    // invalidator's) lives under one private directory.
    let spool = std::env::temp_dir().join(format!("memfleet-bench-spool-{}", std::process::id()));
    let mut clusters = Vec::new();
    for name in ["a", "b"] {
        let port = free_port()?;
        let argv: Vec<String> = [bin.as_str(), "server", "-p", &port.to_string(), "-t", "1"]
            .map(String::from)
            .to_vec();
        let server = Spawned::start(&argv, ([127, 0, 0, 1], port).into(), None)?;
        let (router, router_port) =
            Router::in_front_of(bin, name, &[port], &spool.join(format!("router-{name}")))?;
        clusters.push((server, router, router_port));
    }
    let metrics_port = free_port()?;
    let metrics: std::net::SocketAddr = ([127, 0, 0, 1], metrics_port).into();
    let mut config = RouterConfig::new();
    config.invalidator_database(pg.port, "memfleet", None);
    config
        .section("invalidator")
        .set_str("route", "everywhere")
        .set("check_one_in", 100)
        .set("report_every_s", 3600)
        .set_str("metrics_listen", &metrics.to_string());
    config.section("router").set_str(
        "spool_dir",
        &spool.join("invalidator").display().to_string(),
    );
    for (name, (_, _, port)) in ["a", "b"].into_iter().zip(&clusters) {
        config.pool(name, &[*port]);
        if args.no_spool {
            config.set("spool_deletes", false);
        }
    }
    config
        .route("everywhere", "broadcast")
        .set_strs("to", &["a", "b"]);
    let config_path = spool.with_extension("toml");
    std::fs::write(&config_path, config.text())
        .with_context(|| format!("writing {}", config_path.display()))?;
    // Its metrics listener opens once the database is set up (the slot exists), so every
    // transaction from here on is in the slot.
    let argv: Vec<String> = [bin.as_str(), "invalidator", "--config"]
        .map(String::from)
        .into_iter()
        .chain([config_path.display().to_string()])
        .collect();
    let started_invalidator = Spawned::start(&argv, metrics, None);
    let _ = std::fs::remove_file(&config_path);
    let mut invalidator = started_invalidator?;
    let outage = args.outage;
    let hung = &clusters[1].1.spawned;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (mut results, latency_cdf) = rt.block_on(async {
        let committed = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let deadline = started + args.clients.duration;
        let mut writers = Vec::new();
        let gap = (args.rate > 0)
            .then(|| Duration::from_secs_f64(args.clients.conns as f64 / args.rate as f64));
        for w in 0..args.clients.conns {
            let db = pg.connect().await?;
            let committed = committed.clone();
            writers.push(tokio::spawn(async move {
                let statement = db
                    .prepare("SELECT pg_logical_emit_message(true, 'memfleet', $1)")
                    .await?;
                let mut n = 0u64;
                let mut next = tokio::time::Instant::now();
                while Instant::now() < deadline {
                    if let Some(gap) = gap {
                        // Open loop at the asked rate: a late transaction does not push
                        // the schedule back.
                        next += gap;
                        tokio::time::sleep_until(next).await;
                    }
                    let key = format!("inv:{w}:{n}");
                    db.execute(&statement, &[&key]).await?;
                    committed.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                anyhow::Ok(())
            }));
        }
        if !outage.is_zero() {
            tokio::time::sleep(args.clients.duration / 3).await;
            hung.signal(libc::SIGSTOP);
            println!(
                "cluster b's router hung (SIGSTOP) at {:.1} s",
                started.elapsed().as_secs_f64()
            );
            tokio::time::sleep(outage).await;
            hung.signal(libc::SIGCONT);
            println!(
                "cluster b's router back (SIGCONT) at {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        for w in writers {
            w.await??;
        }
        let elapsed = started.elapsed();
        let total = committed.load(Ordering::Relaxed);
        // Let the invalidator finish the tail, spooled deletes included.
        let drain = Instant::now() + Duration::from_secs(30);
        loop {
            let m = Scrape::fetch(metrics)?;
            let handled = m.counter("transactions_total");
            if handled >= total && m.counter("undelivered_batches") == 0 {
                break;
            }
            if Instant::now() > drain || invalidator.check_alive().is_err() {
                bail!("the invalidator handled {handled} of {total} transactions");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let m = Scrape::fetch(metrics)?;
        let (p50, p99, p999, max) = (
            m.quantile_us("0.5"),
            m.quantile_us("0.99"),
            m.quantile_us("0.999"),
            m.quantile_us("1"),
        );
        let keys = m.counter("keys_total");
        let batches = m.counter("batches_total").max(1);
        let within_1s = m.share_within(1e6);
        let latency_cdf = m.latency_cdf();
        println!(
            "\n{total} transactions committed in {:.1} s ({:.0}/s) by {} writers",
            elapsed.as_secs_f64(),
            total as f64 / elapsed.as_secs_f64(),
            args.clients.conns
        );
        println!(
            "invalidator: {keys} keys deleted in 2 clusters, {batches} batches ({:.1} keys per \
             batch), {} retries",
            keys as f64 / batches as f64,
            m.counter("retries_total")
        );
        println!(
            "commit-to-deleted latency: p50 {p50} µs, p99 {p99} µs, p99.9 {p999} µs, max {max} \
             µs; {:.4}% within 1 s",
            within_1s * 100.0
        );
        let (check_failures, checked) = (
            m.counter("check_failures_total"),
            m.counter("checked_total"),
        );
        println!("sampled check: {check_failures} of {checked} deleted keys still cached");
        let (spooled, undelivered) = (
            m.counter("spooled_batches_total"),
            m.counter("undelivered_batches"),
        );
        println!("spooled batches: {spooled}; still undelivered at the end: {undelivered}");
        let results = json!({
            "parameters": {
                "writers": args.clients.conns,
                "duration_s": args.clients.duration.as_secs_f64(),
                "rate_per_s": (args.rate > 0).then_some(args.rate),
                "clusters": 2,
                "outage_s": outage.as_secs_f64(),
                "spooling": !args.no_spool,
            },
            "spooled_batches": spooled,
            "undelivered_batches": undelivered,
            "transactions": total,
            "elapsed_s": elapsed.as_secs_f64(),
            "transactions_per_s": total as f64 / elapsed.as_secs_f64(),
            "keys_deleted": keys,
            "batches": batches,
            "keys_per_batch": keys as f64 / batches as f64,
            "retries": m.counter("retries_total"),
            "latency_p50_us": p50,
            "latency_p99_us": p99,
            "latency_p999_us": p999,
            "latency_max_us": max,
            "within_1s": within_1s,
            "sampled_check": {"checked": checked, "still_cached": check_failures},
            "latency_cdf": latency_cdf,
        });
        anyhow::Ok((results, latency_cdf))
    })?;
    let load_at_end = load_average();
    println!("load average at end: {load_at_end}");
    drop(invalidator);
    drop(clusters);
    let _ = std::fs::remove_dir_all(&spool);
    if let Some(dir) = &args.out {
        results["load_average_at_end"] = json!(load_at_end);
        write_results(dir, "invalidation", &results)?;
        let figure = dir.join("invalidation-latency-cdf.png");
        memfleet_results::plot::latency_cdf(
            &figure,
            "Commit-to-deleted latency CDF (Facebook §4.1)",
            &[report::cdf_series(
                "commit → deleted in both clusters",
                &latency_cdf,
            )],
        )?;
        println!("figure: {}", figure.display());
    }
    Ok(())
}
