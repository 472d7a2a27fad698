//! `memfleet bench --scenario invalidation`: commit-to-deleted latency of the invalidator
//! (Facebook §4.1, §7.3: mcsqueal; the paper reports four 9s of deletes within a second in
//! the master region). A scratch PostgreSQL, two clusters of one `memfleet server` each,
//! `memfleet invalidator` (in this process, on its own runtime threads) with a broadcast
//! route to both; `--conns` writers commit transactions in a closed loop, each invalidating
//! one key with `pg_logical_emit_message`. Reported: committed transactions per second,
//! the invalidator's commit-to-deleted-everywhere latency percentiles (the database's
//! commit timestamp to the last cluster's reply), keys per batch, and the sampled check
//! that deleted keys are gone. Each cluster is a `memfleet router` in front of its server,
//! as the paper's mcsqueal talks to each cluster's mcrouters. `--invalidation-outage 2s`
//! hangs the second cluster's router (SIGSTOP) for that long a third of the way in: its
//! deletes are spooled by the invalidator and count only once replayed, so the tail shows the outage plus the replay (with
//! `--invalidation-no-spool`, the invalidator's retries instead). With `--out DIR`: `invalidation.json` (with the latency CDF)
//! and `invalidation-latency-cdf.png`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use memfleet_invalidator::{run, scratch::Postgres, setup, source::PgLogical, Config, Counters};
use serde_json::json;

use super::target::{free_port, Router, Spawned};
use super::{command_line, load_average, report, LoadArgs};

/// `--scenario invalidation`.
pub fn bench(args: &LoadArgs) -> Result<()> {
    if args.duration.is_zero() || args.conns == 0 {
        bail!("--duration and --conns must be positive");
    }
    println!(
        "memfleet bench --scenario invalidation: {} writers committing one invalidation per \
         transaction for {:?} ({}); two clusters; the invalidator in this process",
        args.conns,
        args.duration,
        if args.invalidation_rate > 0 {
            format!("{} transactions/s in all", args.invalidation_rate)
        } else {
            "as fast as they go".to_string()
        }
    );
    println!("load average at start: {}", load_average());
    println!("command: {}", command_line());
    let pg = Postgres::start().context("starting a scratch PostgreSQL")?;
    let bin = &args.memfleet_bin;
    // Each cluster as in the paper: a router in front of its server (mcsqueal talks to the
    // cluster's mcrouters). The routers keep their own delete spools, private to this run.
    let spool = std::env::temp_dir().join(format!("memfleet-bench-spool-{}", std::process::id()));
    let mut clusters = Vec::new();
    for name in ["a", "b"] {
        let port = free_port()?;
        let argv: Vec<String> = [bin.as_str(), "server", "-p", &port.to_string(), "-t", "1"]
            .map(String::from)
            .to_vec();
        let server = Spawned::start(&argv, ([127, 0, 0, 1], port).into(), None)?;
        let router_port = free_port()?;
        let router_config = format!(
            "[router]\nspool_dir = \"{}\"\n\n[pools.{name}]\nlisten = \"127.0.0.1:{router_port}\"\n\
             servers = [\"127.0.0.1:{port}\"]\n",
            spool.join(format!("router-{name}")).display(),
        );
        let router = Router::start(
            bin,
            &router_config,
            ([127, 0, 0, 1], router_port).into(),
            None,
        )?;
        clusters.push((server, router, router_port));
    }
    // The invalidator's own spool, for a cluster whose router does not answer.
    let config = Config::parse(&format!(
        "[database]\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\ndbname = \"postgres\"\n\
         create = true\n\n[invalidator]\nroute = \"everywhere\"\ncheck_one_in = 100\n\
         report_every_s = 3600\n\n\
         [router]\nspool_dir = \"{}\"\n\n\
         [pools.a]\nservers = [\"127.0.0.1:{}\"]\n{spooling}[pools.b]\nservers = [\"127.0.0.1:{}\"]\n\
         {spooling}[routes.everywhere]\ntype = \"broadcast\"\nto = [\"a\", \"b\"]\n",
        pg.port,
        spool.join("invalidator").display(),
        clusters[0].2,
        clusters[1].2,
        spooling = if args.invalidation_no_spool {
            "spool_deletes = false\n"
        } else {
            ""
        },
    ))?;
    let outage = args.invalidation_outage;
    let hung = &clusters[1].1.spawned;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (mut results, latency_cdf) = rt.block_on(async {
        setup::prepare(&config.database).await?;
        let counters = Arc::new(Counters::default());
        let log = PgLogical::connect(&config.database).await?;
        let invalidator = {
            let (config, counters) = (config.clone(), counters.clone());
            tokio::spawn(async move { run(&config, log, counters).await })
        };
        let committed = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let deadline = started + args.duration;
        let mut writers = Vec::new();
        let gap = (args.invalidation_rate > 0)
            .then(|| Duration::from_secs_f64(args.conns as f64 / args.invalidation_rate as f64));
        for w in 0..args.conns {
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
            tokio::time::sleep(args.duration / 3).await;
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
        while counters.transactions.load(Ordering::Relaxed) < total
            || counters.undelivered_batches.load(Ordering::Relaxed) > 0
        {
            if Instant::now() > drain || invalidator.is_finished() {
                bail!(
                    "the invalidator handled {} of {total} transactions",
                    counters.transactions.load(Ordering::Relaxed)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        invalidator.abort();
        let (p50, p99, p999, max) = counters.latency();
        let keys = counters.keys.load(Ordering::Relaxed);
        let batches = counters.batches.load(Ordering::Relaxed).max(1);
        let h = counters
            .latency_us
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let within_1s = h.count_between(0, 1_000_000) as f64 / h.len().max(1) as f64;
        let latency_cdf = report::histogram_cdf(&h, 1.0);
        drop(h);
        println!(
            "\n{total} transactions committed in {:.1} s ({:.0}/s) by {} writers",
            elapsed.as_secs_f64(),
            total as f64 / elapsed.as_secs_f64(),
            args.conns
        );
        println!(
            "invalidator: {keys} keys deleted in 2 clusters, {batches} batches ({:.1} keys per \
             batch), {} retries",
            keys as f64 / batches as f64,
            counters.retries.load(Ordering::Relaxed)
        );
        println!(
            "commit-to-deleted latency: p50 {p50} µs, p99 {p99} µs, p99.9 {p999} µs, max {max} \
             µs; {:.4}% within 1 s",
            within_1s * 100.0
        );
        let (check_failures, checked) = (
            counters.check_failures.load(Ordering::Relaxed),
            counters.checked.load(Ordering::Relaxed),
        );
        println!("sampled check: {check_failures} of {checked} deleted keys still cached");
        let (spooled, undelivered) = (
            counters.spooled_batches.load(Ordering::Relaxed),
            counters.undelivered_batches.load(Ordering::Relaxed),
        );
        println!("spooled batches: {spooled}; still undelivered at the end: {undelivered}");
        let results = json!({
            "parameters": {
                "writers": args.conns,
                "duration_s": args.duration.as_secs_f64(),
                "rate_per_s": (args.invalidation_rate > 0).then_some(args.invalidation_rate),
                "clusters": 2,
                "outage_s": outage.as_secs_f64(),
                "spooling": !args.invalidation_no_spool,
            },
            "spooled_batches": spooled,
            "undelivered_batches": undelivered,
            "transactions": total,
            "elapsed_s": elapsed.as_secs_f64(),
            "transactions_per_s": total as f64 / elapsed.as_secs_f64(),
            "keys_deleted": keys,
            "batches": batches,
            "keys_per_batch": keys as f64 / batches as f64,
            "retries": counters.retries.load(Ordering::Relaxed),
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
    drop(clusters);
    let _ = std::fs::remove_dir_all(&spool);
    if let Some(dir) = &args.out {
        results["load_average_at_end"] = json!(load_at_end);
        let path = memfleet_results::write_json(dir, "invalidation", "invalidation", &results)?;
        println!("results: {}", path.display());
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
