//! `memfleet bench gutter`: Facebook §3.3's experiment — what a server failure
//! costs the backing store and the clients, with and without a gutter pool.
//!
//! Each run starts four `memfleet server`s and a `memfleet router` in front of them (and,
//! for the gutter run, a fifth server as the gutter pool behind a `gutter` route), fills
//! `--keys` keys, and then `--conns` clients do look-aside caching for `--duration`: `get`;
//! on a miss (or an error) query the simulated database (`--db-latency`, counted) and
//! `set` the value back. At `--fail-at` one of the four servers is killed (SIGKILL).
//!
//! Reported per second and in total: gets, database queries, client-visible failures (error
//! replies), and for the gutter run the gutter's hit rate (its `stats`). The paper reports
//! 99% fewer client-visible failures and a gutter hit rate over 35% within minutes; its
//! failures are the gets that a dead server would have failed, which a router without a
//! gutter turns into misses (so: database load) and failed sets (errors).
//!
//! With `--out DIR`: `gutter.json` (both runs' per-second timelines and totals) and the
//! timelines `gutter-failures.png`, `gutter-db-per-100-gets.png` and `gutter-hit-rate.png`.

use memfleet_testkit::ServerSpec;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::args::LookAside;
use super::look_aside::{self, Event};
use super::run_log::{write_results, RunLog};
use super::target::free_port;
use super::workload::Workload;
use super::{load_average, runtime};
use anyhow::{bail, Context, Result};
use memfleet_results::plot::{self, Timeline};
use memfleet_sim::duration::parse_duration;
use memfleet_testkit::{Router, RouterConfig, Spawned};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// `memfleet bench gutter`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct GutterArgs {
    /// The clients, the keys, the servers' executable, the database.
    #[command(flatten)]
    pub look_aside: LookAside,
    /// When a server of the main pool is killed.
    #[arg(long, alias = "gutter-fail-at", value_parser = parse_duration, default_value = "5s")]
    pub fail_at: Duration,
    /// The longest TTL of a set into the gutter, seconds.
    #[arg(long, default_value_t = 10)]
    pub gutter_ttl: u32,
    /// Write gutter.json and its figures into this directory, with the command that made
    /// them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

/// Servers in the main pool.
const SERVERS: usize = 4;

/// One second of one run.
#[derive(Clone, Copy, Debug, Default)]
struct Second {
    gets: u64,
    hits: u64,
    db: u64,
    errors: u64,
    /// Gets the router sent to the gutter.
    gutter_requests: u64,
    gutter_hits: u64,
}

impl Second {
    /// Database queries per 100 gets: the load each get puts on the database (the clients
    /// are closed loops slowed by database latency, so raw rates differ between runs).
    fn db_per_100_gets(&self) -> Option<f64> {
        (self.gets > 0).then(|| 100.0 * self.db as f64 / self.gets as f64)
    }

    /// The gutter's hit rate, if the router sent it any get.
    fn gutter_hit_rate(&self) -> Option<f64> {
        (self.gutter_requests > 0).then(|| self.gutter_hits as f64 / self.gutter_requests as f64)
    }
}

/// A run with or without the gutter.
struct GutterRun {
    seconds: Vec<Second>,
}

impl GutterRun {
    fn sum(&self, range: std::ops::Range<usize>) -> Second {
        let mut s = Second::default();
        for x in self.seconds.get(range).unwrap_or_default() {
            s.gets += x.gets;
            s.hits += x.hits;
            s.db += x.db;
            s.errors += x.errors;
            s.gutter_requests += x.gutter_requests;
            s.gutter_hits += x.gutter_hits;
        }
        s
    }
}

/// `memfleet bench gutter`.
pub fn bench(args: &GutterArgs) -> Result<()> {
    let fail_at = args.fail_at;
    if fail_at >= args.look_aside.clients.duration {
        bail!("--fail-at must come before the end of --duration");
    }
    let workload = Rc::new(
        args.look_aside
            .keys
            .gets_workload("gutter", args.look_aside.keys.zipf)?,
    );
    println!(
        "memfleet bench gutter: {} servers behind a router, {}; one server killed at {:?} of \
         {:?}",
        SERVERS,
        args.look_aside.describe(),
        fail_at,
        args.look_aside.clients.duration
    );
    RunLog::new().print_start();
    let (rt, local) = runtime()?;
    let mut outcomes = Vec::new();
    for gutter in [false, true] {
        let outcome = local
            .block_on(&rt, run(args, &workload, gutter))
            .with_context(|| {
                format!("the run {} gutter", if gutter { "with" } else { "without" })
            })?;
        outcomes.push(outcome);
    }
    print!("{}", report(&outcomes[0], &outcomes[1], fail_at));
    let load_at_end = load_average();
    println!("load average at end: {load_at_end}");
    if let Some(dir) = &args.out {
        let value = json_report(args, &outcomes, &load_at_end);
        write_results(dir, "gutter", &value)?;
        for figure in figures(dir, &outcomes)? {
            println!("figure: {}", figure.display());
        }
    }
    Ok(())
}

/// The runs' labels, in the order [`bench`] runs them.
const LABELS: [&str; 2] = ["without gutter", "with gutter"];

/// (seconds since the start at the end of the window, value) for each second with a value.
fn series(o: &GutterRun, f: &dyn Fn(&Second) -> Option<f64>) -> Vec<(f64, f64)> {
    plot::per_second(&o.seconds, f)
}

/// The timelines of both runs as PNGs beside gutter.json: client-visible failures, database
/// queries per 100 gets, and the gutter's hit rate (the run with a gutter only).
fn figures(dir: &std::path::Path, outcomes: &[GutterRun]) -> Result<Vec<std::path::PathBuf>> {
    let runs: Vec<(&str, &GutterRun)> = LABELS.into_iter().zip(outcomes).collect();
    plot::timelines(
        dir,
        &runs,
        |(label, _)| label.to_string(),
        &[
            Timeline {
                file: "gutter-failures",
                title: "Client-visible failures per second (Facebook §3.3)",
                y_label: "failures/s",
                points: |(_, o)| series(o, &|s| Some(s.errors as f64)),
            },
            Timeline {
                file: "gutter-db-per-100-gets",
                title: "Database queries per 100 gets",
                y_label: "queries per 100 gets",
                points: |(_, o)| series(o, &Second::db_per_100_gets),
            },
            Timeline {
                file: "gutter-hit-rate",
                title: "Gutter pool hit rate",
                y_label: "hit rate (%)",
                points: |(_, o)| series(o, &|s| s.gutter_hit_rate().map(|r| r * 100.0)),
            },
        ],
    )
}

/// `gutter.json`: the parameters and both runs' per-second timelines and totals.
fn json_report(args: &GutterArgs, outcomes: &[GutterRun], load_at_end: &str) -> serde_json::Value {
    let runs: Vec<serde_json::Value> = outcomes
        .iter()
        .zip(LABELS)
        .map(|(o, label)| {
            let total = o.sum(0..o.seconds.len());
            json!({
                "label": label,
                "gutter": label == LABELS[1],
                "series": {
                    "gets_per_s": series(o, &|s| Some(s.gets as f64)),
                    "hits_per_s": series(o, &|s| Some(s.hits as f64)),
                    "db_queries_per_s": series(o, &|s| Some(s.db as f64)),
                    "db_queries_per_100_gets": series(o, &Second::db_per_100_gets),
                    "failures_per_s": series(o, &|s| Some(s.errors as f64)),
                    "gutter_gets_per_s": series(o, &|s| Some(s.gutter_requests as f64)),
                    "gutter_hit_rate": series(o, &Second::gutter_hit_rate),
                },
                "totals": {
                    "gets": total.gets,
                    "hits": total.hits,
                    "db_queries": total.db,
                    "failures": total.errors,
                    "gutter_gets": total.gutter_requests,
                    "gutter_hits": total.gutter_hits,
                },
            })
        })
        .collect();
    json!({
        "parameters": {
            "servers": SERVERS,
            "conns": args.look_aside.clients.conns,
            "keys": args.look_aside.keys.keys,
            "zipf": args.look_aside.keys.zipf,
            "value_size": args.look_aside.keys.value_size.to_string(),
            "db_latency_ms": args.look_aside.db_latency.as_secs_f64() * 1000.0,
            "fail_at_s": args.fail_at.as_secs_f64(),
            "duration_s": args.look_aside.clients.duration.as_secs_f64(),
            "gutter_ttl_s": args.gutter_ttl,
        },
        "load_average_at_end": load_at_end,
        "runs": runs,
    })
}

fn router_config(listen: u16, servers: &[u16], gutter: Option<u16>, ttl: u32) -> String {
    let mut c = RouterConfig::new();
    match gutter {
        None => {
            c.pool("main", servers).listen(listen).quick_failover();
        }
        Some(g) => {
            c.pool("main", servers).quick_failover();
            c.pool("gutter", &[g]);
            c.gutter_route("cache", "main", "gutter", ttl)
                .listen(listen);
        }
    }
    c.text()
}

async fn run(args: &GutterArgs, workload: &Rc<Workload>, with_gutter: bool) -> Result<GutterRun> {
    let bin = &args.look_aside.memfleet.memfleet_bin;
    let server = |port: u16| ServerSpec::memfleet(bin, 256).port(port).start();
    let ports: Vec<u16> = (0..SERVERS).map(|_| free_port()).collect::<Result<_>>()?;
    let mut servers: Vec<Option<Spawned>> = ports
        .iter()
        .map(|&p| server(p).map(Some))
        .collect::<Result<_>>()?;
    let gutter = if with_gutter {
        let p = free_port()?;
        Some((server(p)?, p))
    } else {
        None
    };
    let listen = free_port()?;
    let addr: SocketAddr = ([127, 0, 0, 1], listen).into();
    let config = router_config(
        listen,
        &ports,
        gutter.as_ref().map(|g| g.1),
        args.gutter_ttl,
    );
    let router = Router::start(bin, &config, addr, None)?;
    let name = if with_gutter { "gutter" } else { "no gutter" };
    println!(
        "[{name}] router pid {} on {addr}; servers {ports:?}",
        router.spawned.pid()
    );
    fill(addr, workload).await?;

    let seconds = (args.look_aside.clients.duration.as_secs_f64().ceil() as usize).max(1);
    let windows = Rc::new(RefCell::new(vec![Second::default(); seconds]));
    let start = Instant::now();
    let deadline = start + args.look_aside.clients.duration;
    let mut clients = Vec::new();
    for c in 0..args.look_aside.clients.conns {
        let (w, windows) = (workload.clone(), windows.clone());
        let db_latency = args.look_aside.db_latency;
        clients.push(tokio::task::spawn_local(async move {
            client(addr, &w, c as u64, start, deadline, db_latency, &windows).await
        }));
    }
    let sampler = {
        let windows = windows.clone();
        tokio::task::spawn_local(async move {
            if with_gutter {
                if let Err(e) = sample_gutter(addr, start, deadline, &windows).await {
                    eprintln!("reading the router's gutter counters: {e:#}");
                }
            }
        })
    };
    tokio::time::sleep_until((start + args.fail_at).into()).await;
    if let Some(victim) = servers[1].take() {
        // SAFETY: kill only sends a signal to our own child, which has not been reaped.
        unsafe { libc::kill(victim.pid() as libc::pid_t, libc::SIGKILL) };
        println!(
            "[{name}] killed server 127.0.0.1:{} at {:?}",
            ports[1],
            start.elapsed()
        );
        drop(victim);
    }
    for c in clients {
        c.await.context("a client task")??;
    }
    let _ = sampler.await;
    drop(router);
    drop(gutter);
    drop(servers);
    let seconds = windows.borrow().clone();
    Ok(GutterRun { seconds })
}

/// Stores every key through the router.
async fn fill(addr: SocketAddr, workload: &Workload) -> Result<()> {
    let stream = TcpStream::connect(addr).await?;
    let mut conn = BufReader::new(stream);
    let mut batch = Vec::new();
    for n in 0..workload.keys() {
        workload.encode(super::workload::WorkloadOp::Set(n), &mut batch);
        if batch.len() > 64 * 1024 || n + 1 == workload.keys() {
            conn.get_mut().write_all(&batch).await?;
            batch.clear();
        }
    }
    // Every set answered before the run starts.
    let mut line = String::new();
    for _ in 0..workload.keys() {
        line.clear();
        conn.read_line(&mut line).await?;
        if line != "STORED\r\n" {
            bail!("filling: {line:?}");
        }
    }
    Ok(())
}

/// One look-aside client until `deadline`.
async fn client(
    addr: SocketAddr,
    workload: &Workload,
    seed: u64,
    start: Instant,
    deadline: Instant,
    db_latency: Duration,
    windows: &RefCell<Vec<Second>>,
) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(0x6775_7474 ^ seed);
    let mut conn = BufReader::new(TcpStream::connect(addr).await?);
    let mut buffers = look_aside::Buffers::default();
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(());
        }
        let second = ((now - start).as_secs() as usize).min(windows.borrow().len() - 1);
        let key = workload.key(&mut rng);
        look_aside::read(&mut conn, workload, key, db_latency, &mut buffers, |e| {
            let mut w = windows.borrow_mut();
            let s = &mut w[second];
            match e {
                Event::Get { hit, error } => {
                    s.gets += 1;
                    s.hits += u64::from(hit);
                    s.errors += u64::from(error.is_some());
                }
                // A miss (or a failure): the database, then fill the cache.
                Event::Database => s.db += 1,
                Event::SetFailed(_) => s.errors += 1,
            }
        })
        .await?;
    }
}

/// Reads the router's gutter counters every second into the windows.
async fn sample_gutter(
    addr: SocketAddr,
    start: Instant,
    deadline: Instant,
    windows: &RefCell<Vec<Second>>,
) -> Result<()> {
    sample_gutter_counters(addr, start, deadline, |second, requests, hits| {
        if let Some(s) = windows.borrow_mut().get_mut(second) {
            s.gutter_requests = requests;
            s.gutter_hits = hits;
        }
    })
    .await
}

/// Reads the `gutter_gets` and `gutter_hits` counters of the router's route `cache` at
/// `addr` every second from `start` until just after `deadline`, and hands each second's
/// increase to `record(second, gets, hits)` (second 0 is the first).
pub(super) async fn sample_gutter_counters(
    addr: SocketAddr,
    start: Instant,
    deadline: Instant,
    mut record: impl FnMut(usize, u64, u64),
) -> Result<()> {
    let mut conn = BufReader::new(TcpStream::connect(addr).await?);
    let mut last = (0u64, 0u64);
    for tick in 1u64.. {
        let at = start + Duration::from_secs(tick);
        if at > deadline + Duration::from_millis(500) {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        conn.get_mut().write_all(b"stats\r\n").await?;
        let (mut gets, mut hits) = last;
        let mut line = String::new();
        loop {
            line.clear();
            if conn.read_line(&mut line).await? == 0 || line == "END\r\n" {
                break;
            }
            let number = |l: &str| l.trim_end().rsplit(' ').next().and_then(|n| n.parse().ok());
            if line.starts_with("STAT route:cache:gutter_gets ") {
                gets = number(&line).unwrap_or(gets);
            } else if line.starts_with("STAT route:cache:gutter_hits ") {
                hits = number(&line).unwrap_or(hits);
            }
        }
        record((tick - 1) as usize, gets - last.0, hits - last.1);
        last = (gets, hits);
    }
    Ok(())
}

fn report(plain: &GutterRun, gutter: &GutterRun, fail_at: Duration) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n{:>4}  {:>9} {:>9} {:>8}  {:>9} {:>9} {:>8} {:>10}",
        "sec", "gets/s", "db/s", "errors", "gets/s", "db/s", "errors", "gutter hit"
    );
    let _ = writeln!(
        t,
        "{:>4}  {:^28}  {:^39}",
        "", "--- without gutter ---", "--- with gutter ---"
    );
    let n = plain.seconds.len().min(gutter.seconds.len());
    for i in 0..n {
        let (p, g) = (plain.seconds[i], gutter.seconds[i]);
        let rate = if g.gutter_requests > 0 {
            format!(
                "{:.0}%",
                100.0 * g.gutter_hits as f64 / g.gutter_requests as f64
            )
        } else {
            "-".into()
        };
        let _ = writeln!(
            t,
            "{:>4}  {:>9} {:>9} {:>8}  {:>9} {:>9} {:>8} {:>10}",
            i + 1,
            p.gets,
            p.db,
            p.errors,
            g.gets,
            g.db,
            g.errors,
            rate
        );
    }
    let f = fail_at.as_secs() as usize;
    let (pb, pa) = (plain.sum(0..f), plain.sum(f + 1..n));
    let (gb, ga) = (gutter.sum(0..f), gutter.sum(f + 1..n));
    let per_s = |s: &Second, secs: usize| s.db as f64 / secs.max(1) as f64;
    let after = n.saturating_sub(f + 1);
    let _ = writeln!(
        t,
        "\nbefore the failure: database {:.0}/s without gutter, {:.0}/s with",
        per_s(&pb, f),
        per_s(&gb, f)
    );
    // The clients are closed loops slowed by database latency, so rates differ between
    // runs; queries per get compare the load each get puts on the database.
    let per_get = |s: &Second| 100.0 * s.db as f64 / s.gets.max(1) as f64;
    let _ = writeln!(
        t,
        "after it (from second {}): database {:.0}/s without gutter, {:.0}/s with \
         ({:.1} vs {:.1} queries per 100 gets); client-visible failures {} without, {} with{}",
        f + 2,
        per_s(&pa, after),
        per_s(&ga, after),
        per_get(&pa),
        per_get(&ga),
        pa.errors,
        ga.errors,
        if pa.errors > 0 {
            format!(
                " ({:.1}% fewer)",
                100.0 * (1.0 - ga.errors as f64 / pa.errors as f64)
            )
        } else {
            String::new()
        }
    );
    let last = gutter.sum(n.saturating_sub(5)..n);
    if last.gutter_requests > 0 {
        let _ = writeln!(
            t,
            "gutter hit rate over the last 5 s: {:.1}% ({} of {} gets sent to the gutter)",
            100.0 * last.gutter_hits as f64 / last.gutter_requests as f64,
            last.gutter_hits,
            last.gutter_requests
        );
    }
    t
}
