//! `memfleet bench regions`: Facebook §5 on one machine. A master region (PostgreSQL 16
//! primary) and a replica region (its streaming standby), each with its own servers,
//! router and invalidator, the replica's invalidator decoding the *standby's* WAL (`world`).
//! Writers in both regions commit to the primary at a steady rate, the replica region's
//! with remote markers (half of them; the other half without, for contrast); readers in
//! both regions read random keys look-aside from their own region's caches and database.
//! The standby's replay is held back on purpose (`recovery_min_apply_delay`, one phase per
//! `--delays` value), and a last phase kills the replica's invalidator (-9) and restarts it,
//! then restarts the standby. Measured per phase and region (`traffic` says how): stale
//! reads after the region's caches were invalidated, stale read-your-writes with and
//! without markers, replication lag and invalidation lag per sampled transaction (p50, p99,
//! max) and how often a delete came before the replay; after the run, lost invalidations
//! and keys cached at another version than the database's. With `--out DIR`:
//! `regions.json` and `regions-lag.png`.

mod traffic;
mod world;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use memfleet_client::Client;
use memfleet_sim::duration::parse_duration;
use serde_json::{json, Value};

use super::args::MemfleetBin;
use super::invalidator_metrics::Scrape;
use super::load_average;
use super::run_log::{write_results, RunLog};
use traffic::{Counts, Shared, MASTER, REPLICA};

/// `memfleet bench regions`' flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RegionsArgs {
    /// The memfleet executable (servers, routers, invalidators).
    #[command(flatten)]
    pub memfleet: MemfleetBin,
    /// The standby's replay delay (`recovery_min_apply_delay`) of each phase, in order.
    #[arg(long, value_delimiter = ',', value_parser = parse_duration, default_value = "0s,500ms,1s,2s")]
    pub delays: Vec<Duration>,
    /// How long each phase runs.
    #[arg(long, value_parser = parse_duration, default_value = "6s")]
    pub phase: Duration,
    /// Committed transactions per second in each region.
    #[arg(long, default_value_t = 40.0)]
    pub write_rate: f64,
    /// Look-aside reads per second in each region.
    #[arg(long, default_value_t = 400.0)]
    pub read_rate: f64,
    /// Keys (rows).
    #[arg(long, default_value_t = 400)]
    pub keys: usize,
    /// No fault phase (the replica's invalidator killed and restarted, the standby
    /// restarted, at a 500 ms replay delay).
    #[arg(long)]
    pub no_faults: bool,
    /// The replica region's invalidator reads the primary instead of the standby: deletes
    /// can reach the region before its data does (what the paper's design avoids).
    #[arg(long)]
    pub replica_invalidator_on_primary: bool,
    /// Write regions.json and regions-lag.png into this directory, with the command.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

const WRITERS: usize = 4;
const READERS: usize = 4;

/// `memfleet bench regions`.
pub fn bench(args: &RegionsArgs) -> Result<()> {
    if args.delays.is_empty() || args.phase.is_zero() || args.write_rate <= 0.0 {
        bail!("--delays, --phase and --write-rate must be given and positive");
    }
    if args.keys < 2 * WRITERS {
        bail!("--keys must be at least {}", 2 * WRITERS);
    }
    let mut phases: Vec<(String, Duration)> = args
        .delays
        .iter()
        .map(|d| (format!("delay {}", ms(*d)), *d))
        .collect();
    if !args.no_faults {
        phases.push(("faults".to_string(), Duration::from_millis(500)));
    }
    println!(
        "memfleet bench regions: a master and a replica region (PostgreSQL 16 primary and \
         standby), {} writes/s and {} reads/s in each, {} keys; phases of {:?}: {}; the \
         replica's invalidator reads the {}",
        args.write_rate,
        args.read_rate,
        args.keys,
        args.phase,
        phases
            .iter()
            .map(|p| p.0.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        if args.replica_invalidator_on_primary {
            "primary (the wrong set-up)"
        } else {
            "standby"
        }
    );
    RunLog::new().print_start();
    let mut world = world::World::start(
        &args.memfleet.memfleet_bin,
        args.replica_invalidator_on_primary,
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let results = rt.block_on(run(args, &mut world, &phases))?;
    drop(world);
    print_and_save(args, &phases, results)
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// What a run measured.
struct Results {
    shared: Arc<Shared>,
    lost: [u64; 2],
    stale_at_end: [u64; 2],
    scrapes: [Scrape; 2],
    regional: memfleet_client::RegionalStats,
    /// Remote markers the replica region's invalidator deleted (across its restart).
    markers_cleared: u64,
    /// How the standby was stopped for its restart ("fast", or "immediate" if that hung).
    standby_restart: Option<&'static str>,
}

async fn run(
    args: &RegionsArgs,
    world: &mut world::World,
    phases: &[(String, Duration)],
) -> Result<Results> {
    let primary = world.primary.connect().await?;
    let mut standby = world.standby.connect().await?;
    world::create_table(&primary, &standby, args.keys).await?;
    let connect = |port: u16| Client::with_servers(&[&format!("127.0.0.1:{port}")]);
    let caches = [
        connect(world.regions[MASTER].router_port)?,
        connect(world.regions[REPLICA].router_port)?,
    ];
    let shared = Arc::new(Shared::new(
        args.keys,
        phases.len(),
        caches,
        world.primary.port,
        [world.primary.port, world.standby.port],
        WRITERS,
    ));
    world::set_apply_delay(&standby, phases[0].1).await?;
    let mut tasks = Vec::new();
    for region in [MASTER, REPLICA] {
        for w in 0..WRITERS {
            // The replica region's even writers use remote markers, the odd ones do not.
            let markers = region == REPLICA && w % 2 == 0;
            let rate = args.write_rate / WRITERS as f64;
            tasks.push(tokio::spawn(traffic::writer(
                shared.clone(),
                region,
                w,
                markers,
                rate,
            )));
        }
        for r in 0..READERS {
            let rate = args.read_rate / READERS as f64;
            let seed = 0x9E37_79B9_7F4A_7C15 ^ (region * READERS + r + 1) as u64;
            tasks.push(tokio::spawn(traffic::reader(
                shared.clone(),
                region,
                seed,
                rate,
            )));
        }
    }
    let give_up = Instant::now() + args.phase * phases.len() as u32 + Duration::from_secs(60);
    let watchers: Vec<_> = [MASTER, REPLICA]
        .map(|region| tokio::spawn(traffic::lag_watcher(shared.clone(), region, give_up)))
        .into();
    let replica_metrics = world.regions[REPLICA].metrics;
    let started = Instant::now();
    let mut cleared_before_kill = 0;
    let mut standby_restart = None;
    for (i, (label, delay)) in phases.iter().enumerate() {
        if i > 0 {
            // The reload reaches the standby's startup process asynchronously: no lag is
            // sampled from a transaction that may have met either delay.
            shared.epoch.fetch_add(1, Ordering::Relaxed);
            world::set_apply_delay(&standby, *delay).await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            shared.phase.store(i, Ordering::Relaxed);
            shared.epoch.fetch_add(1, Ordering::Relaxed);
        }
        println!(
            "phase {i}: {label} (from {:.1} s)",
            started.elapsed().as_secs_f64()
        );
        let ends = Instant::now() + args.phase;
        let mut faults = if label == "faults" { 2 } else { 0 };
        while Instant::now() < ends {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if let Ok(m) = Scrape::fetch(replica_metrics) {
                let lag = m.gauge("replication_lag_seconds");
                let mut top = shared.counts[i][REPLICA].reported_lag_s.lock().unwrap();
                *top = top.max(lag);
            }
            let left = ends.saturating_duration_since(Instant::now());
            if faults == 2 && left < args.phase * 3 / 4 {
                // Its counters die with it: what it cleared so far is kept here.
                if let Ok(m) = Scrape::fetch(replica_metrics) {
                    cleared_before_kill = m.counter("remote_markers_cleared_total");
                }
                world.kill_invalidator(REPLICA);
                println!("  the replica region's invalidator killed (-9)");
                tokio::time::sleep(Duration::from_secs(1)).await;
                tokio::task::block_in_place(|| world.restart_invalidator(REPLICA))?;
                println!("  ...and started again");
                faults = 1;
            } else if faults == 1 && left < args.phase / 3 {
                // A planned restart: writes held, the replay delay cleared and the standby
                // caught up, then a fast shutdown (PostgreSQL 16.2's never ends while a
                // logical walsender waits for WAL received but not replayed; if it does
                // not end in 10 s anyway, an immediate stop: reported).
                shared.paused.store(true, Ordering::Relaxed);
                shared.epoch.fetch_add(1, Ordering::Relaxed);
                world::set_apply_delay(&standby, Duration::ZERO).await?;
                world::wait_replayed(&primary, &standby, Duration::from_secs(10)).await?;
                let how = tokio::task::block_in_place(|| {
                    world.standby.restart_within(Duration::from_secs(10))
                })?;
                standby_restart = Some(how);
                standby = world.standby.connect().await?;
                world::set_apply_delay(&standby, *delay).await?;
                shared.paused.store(false, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500)).await;
                shared.epoch.fetch_add(1, Ordering::Relaxed);
                println!("  the standby restarted (writes held; pg_ctl stop -m {how}, start)");
                faults = 0;
            }
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    for w in watchers {
        w.await?;
    }
    let mut lost = [0; 2];
    let mut stale_at_end = [0; 2];
    for region in [MASTER, REPLICA] {
        (lost[region], stale_at_end[region]) =
            traffic::final_check(&shared, region, Duration::from_secs(30)).await;
    }
    let scrapes = [
        Scrape::fetch(world.regions[MASTER].metrics)?,
        Scrape::fetch(replica_metrics)?,
    ];
    let regional = shared.caches[REPLICA].regional_stats();
    let markers_cleared =
        cleared_before_kill + scrapes[REPLICA].counter("remote_markers_cleared_total");
    for region in [MASTER, REPLICA] {
        if lost[region] > 0 {
            // What went wrong is in the invalidator's log and the database's.
            if let Some(inv) = &world.regions[region].invalidator {
                eprintln!("invalidator {region}'s log:\n{}", inv.stderr_text());
            }
            let db = if region == MASTER {
                &world.primary
            } else {
                &world.standby
            };
            eprintln!("its database's log:\n{}", db.log());
        }
    }
    Ok(Results {
        shared,
        lost,
        stale_at_end,
        scrapes,
        regional,
        markers_cleared,
        standby_restart,
    })
}

/// (p50, p99, max) of `values`.
fn percentiles(mut values: Vec<f64>) -> Value {
    if values.is_empty() {
        return Value::Null;
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    json!({"p50": at(0.5), "p99": at(0.99), "max": values[values.len() - 1], "min": values[0], "samples": values.len()})
}

fn region_json(c: &Counts) -> Value {
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let lags = c.lags.lock().unwrap().clone();
    let replication: Vec<f64> = lags.iter().filter_map(|l| l.0).collect();
    let invalidation: Vec<f64> = lags.iter().map(|l| l.1).collect();
    json!({
        "writes": n(&c.writes),
        "reads": n(&c.reads),
        "stale_reads_after_invalidation": n(&c.stale_after_invalidation),
        "read_your_writes": {
            "with_markers": {"reads": n(&c.ryw_reads[1]), "stale": n(&c.ryw_stale[1])},
            "without_markers": {"reads": n(&c.ryw_reads[0]), "stale": n(&c.ryw_stale[0])},
        },
        "db_errors": n(&c.db_errors),
        "cache_errors": n(&c.cache_errors),
        "replication_lag_ms": percentiles(replication),
        "invalidation_lag_ms": percentiles(invalidation),
        "invalidated_before_replayed": n(&c.invalidated_before_replayed),
        "reported_replication_lag_max_s": *c.reported_lag_s.lock().unwrap(),
    })
}

fn print_and_save(args: &RegionsArgs, phases: &[(String, Duration)], r: Results) -> Result<()> {
    let names = ["master", "replica"];
    let mut rows = Vec::new();
    println!(
        "\n{:<14} {:<8} {:>6} {:>6} {:>10} {:>12} {:>12} {:>22} {:>22} {:>8}",
        "phase",
        "region",
        "writes",
        "reads",
        "stale aft.",
        "RYW stale m",
        "RYW stale -",
        "repl. lag p50/p99/max",
        "inval. lag p50/p99/max",
        "del<rep"
    );
    for (i, (label, delay)) in phases.iter().enumerate() {
        let mut regions = serde_json::Map::new();
        for (region, name) in names.iter().enumerate() {
            let j = region_json(&r.shared.counts[i][region]);
            let lag = |k: &str| match &j[k] {
                Value::Null => "-".to_string(),
                v => format!(
                    "{:.0}/{:.0}/{:.0}",
                    v["p50"].as_f64().unwrap_or(0.0),
                    v["p99"].as_f64().unwrap_or(0.0),
                    v["max"].as_f64().unwrap_or(0.0)
                ),
            };
            let ryw = |m: &str| {
                format!(
                    "{}/{}",
                    j["read_your_writes"][m]["stale"], j["read_your_writes"][m]["reads"]
                )
            };
            println!(
                "{:<14} {:<8} {:>6} {:>6} {:>10} {:>12} {:>12} {:>22} {:>22} {:>8}",
                label,
                name,
                j["writes"].to_string(),
                j["reads"].to_string(),
                j["stale_reads_after_invalidation"].to_string(),
                ryw("with_markers"),
                ryw("without_markers"),
                lag("replication_lag_ms"),
                lag("invalidation_lag_ms"),
                j["invalidated_before_replayed"].to_string(),
            );
            regions.insert(name.to_string(), j);
        }
        rows.push(
            json!({"label": label, "apply_delay_ms": delay.as_millis() as u64, "regions": regions}),
        );
    }
    println!("(lags in ms, per sampled transaction, polled every 10 ms; RYW stale: stale/reads)");
    for (region, name) in names.iter().enumerate() {
        println!(
            "{name}: lost invalidations {}, keys cached at another version at the end {}; \
             its invalidator (since it last started): commit-to-delivered p50 {} µs, max {} \
             µs, commit-to-decoded max {} µs",
            r.lost[region],
            r.stale_at_end[region],
            r.scrapes[region].quantile_us("0.5"),
            r.scrapes[region].quantile_us("1"),
            r.scrapes[region].summary_us("commit_to_decoded_seconds", "1"),
        );
    }
    println!(
        "remote markers: {} cleared by the replica region's invalidator",
        r.markers_cleared
    );
    println!(
        "replica region's client: {} remote markers set, {} misses read the master because \
         of one, {} read the standby",
        r.regional.markers_set, r.regional.master_reads, r.regional.replica_reads
    );
    let load_at_end = load_average();
    println!("load average at end: {load_at_end}");
    let results = json!({
        "parameters": {
            "delays_ms": args.delays.iter().map(|d| d.as_millis() as u64).collect::<Vec<_>>(),
            "phase_s": args.phase.as_secs_f64(),
            "write_rate_per_region": args.write_rate,
            "read_rate_per_region": args.read_rate,
            "keys": args.keys,
            "faults": !args.no_faults,
            "replica_invalidator_reads": if args.replica_invalidator_on_primary { "primary" } else { "standby" },
        },
        "phases": rows,
        "lost_invalidations": {"master": r.lost[MASTER], "replica": r.lost[REPLICA]},
        "stale_keys_at_end": {"master": r.stale_at_end[MASTER], "replica": r.stale_at_end[REPLICA]},
        "remote_markers": {
            "set": r.regional.markers_set,
            "master_reads": r.regional.master_reads,
            "replica_reads": r.regional.replica_reads,
            "cleared": r.markers_cleared,
        },
        "standby_restart": r.standby_restart,
        "load_average_at_end": load_at_end,
    });
    if let Some(dir) = &args.out {
        write_results(dir, "regions", &results)?;
        let figure = dir.join("regions-lag.png");
        let series = |what: &str, q: &str, name: &str| memfleet_results::plot::Series {
            name: name.to_string(),
            points: rows_points(&results, what, q),
        };
        memfleet_results::plot::line_chart(
            &figure,
            "Replica region: replication lag and invalidation lag vs replay delay (Facebook §5)",
            "standby replay delay (ms)",
            "lag (ms)",
            &[
                series("replication_lag_ms", "p50", "replication lag p50"),
                series("replication_lag_ms", "max", "replication lag max"),
                series("invalidation_lag_ms", "p50", "invalidation lag p50"),
                series("invalidation_lag_ms", "max", "invalidation lag max"),
            ],
            false,
        )?;
        println!("figure: {}", figure.display());
    }
    Ok(())
}

/// (apply delay, the replica region's `what` at quantile `q`) for each delay phase.
fn rows_points(results: &Value, what: &str, q: &str) -> Vec<(f64, f64)> {
    results["phases"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter(|row| row["label"] != "faults")
                .filter_map(|row| {
                    let x = row["apply_delay_ms"].as_f64()?;
                    let y = row["regions"]["replica"][what][q].as_f64()?;
                    Some((x, y))
                })
                .collect()
        })
        .unwrap_or_default()
}
