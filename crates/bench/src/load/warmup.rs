//! `memfleet bench --scenario warmup`: Facebook §4.3's Cold Cluster Warmup — how fast an
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
//! The database has a fixed capacity: a query takes `--herd-db-latency` and at most
//! `--warmup-db-concurrency` run at once (the others queue), as a real database can absorb
//! only so much extra load. The clients are closed loops, so without warm-up that capacity
//! limits how fast the cold cluster fills (the reason the paper's cold clusters took days
//! rather than hours), and the queueing shows in the clients' latency. Reported per second:
//! the cold cluster's own hit rate (its servers' `get_hits`/`get_misses`), the hit rate the clients saw,
//! database queries, the client's latency (database included); in summary, when the cold
//! cluster first reached 50% and 90% hits, and the database queries of the whole run.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use serde_json::json;
use tokio::sync::Semaphore;

use memfleet_results::plot::{self, Timeline};

use super::client;
use super::conn::Conn;
use super::reply::Reply;
use super::server_stats::StatsConn;
use super::target::free_port;
use super::workload::{conn_rng, Op, Workload};
use super::{command_line, load_average, runtime, LoadArgs};
use memfleet_testkit::{Router, RouterConfig, Spawned};

/// Servers in each cluster.
const SERVERS_PER_CLUSTER: usize = 2;
/// Key popularity without `--zipf`: web workloads are skewed, and the skew is what lets a
/// cold cluster's hit rate climb long before it holds every key.
const DEFAULT_ZIPF: f64 = 1.0;
/// The cold-cluster hit rates whose arrival the summary reports.
const GOALS: [f64; 2] = [0.5, 0.9];
/// The name of the route the clients use (its counters are `route:front:*`).
const ROUTE: &str = "front";

/// One second of one run.
#[derive(Clone)]
struct Second {
    /// Gets the clients completed.
    gets: u64,
    /// Gets answered with a value (with warm-up, also those the router filled from warm).
    client_hits: u64,
    /// Database queries.
    db: u64,
    /// Wrong replies and refused sets.
    errors: u64,
    /// Time from sending a get to holding the value (database included), µs.
    latency_us: Histogram<u64>,
    /// The cold cluster's own gets that hit and missed (its servers' counters).
    cold_hits: u64,
    cold_misses: u64,
    /// Items the cold cluster held at the end of the second.
    cold_items: u64,
}

impl Second {
    fn new() -> Second {
        Second {
            gets: 0,
            client_hits: 0,
            db: 0,
            errors: 0,
            latency_us: Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds"),
            cold_hits: 0,
            cold_misses: 0,
            cold_items: 0,
        }
    }

    /// The cold cluster's hit rate, if it served any get this second.
    fn cold_hit_rate(&self) -> Option<f64> {
        let gets = self.cold_hits + self.cold_misses;
        (gets > 0).then(|| self.cold_hits as f64 / gets as f64)
    }

    fn client_hit_rate(&self) -> Option<f64> {
        (self.gets > 0).then(|| self.client_hits as f64 / self.gets as f64)
    }

    fn latency_ms(&self, quantile: f64) -> Option<f64> {
        (!self.latency_us.is_empty())
            .then(|| self.latency_us.value_at_quantile(quantile) as f64 / 1000.0)
    }
}

/// One run's timeline and the router's fill counters.
struct Outcome {
    label: &'static str,
    warm_up: bool,
    seconds: Vec<Second>,
    warm_fills: u64,
    fills_refused: u64,
}

/// What the summary table and the JSON report of a run.
struct Summary {
    gets: u64,
    db: u64,
    errors: u64,
    client_hit_rate: f64,
    last_cold_hit_rate: Option<f64>,
    /// Seconds (end of the window) until each of [`GOALS`] was first reached.
    reached: Vec<Option<usize>>,
    p50_ms: f64,
    p99_ms: f64,
    cold_items: u64,
}

impl Outcome {
    fn summary(&self) -> Summary {
        let mut all = Second::new();
        for s in &self.seconds {
            all.gets += s.gets;
            all.client_hits += s.client_hits;
            all.db += s.db;
            all.errors += s.errors;
            all.latency_us
                .add(&s.latency_us)
                .expect("histograms with the same bounds");
        }
        let reached = GOALS
            .iter()
            .map(|&goal| {
                self.seconds
                    .iter()
                    .position(|s| s.cold_hit_rate().is_some_and(|r| r >= goal))
                    .map(|i| i + 1)
            })
            .collect();
        Summary {
            gets: all.gets,
            db: all.db,
            errors: all.errors,
            client_hit_rate: all.client_hit_rate().unwrap_or(0.0),
            last_cold_hit_rate: self.seconds.last().and_then(Second::cold_hit_rate),
            reached,
            p50_ms: all.latency_ms(0.5).unwrap_or(0.0),
            p99_ms: all.latency_ms(0.99).unwrap_or(0.0),
            cold_items: self.seconds.last().map_or(0, |s| s.cold_items),
        }
    }
}

/// `--scenario warmup`.
pub fn bench(args: &LoadArgs) -> Result<()> {
    if args.conns == 0 || args.warmup_db_concurrency == 0 || args.duration < Duration::from_secs(1)
    {
        bail!(
            "warmup needs --conns and --warmup-db-concurrency of at least 1 and a --duration \
             of at least 1s"
        );
    }
    let zipf = args.zipf.unwrap_or(DEFAULT_ZIPF);
    let workload = Rc::new(args.gets_workload("--scenario warmup", Some(zipf))?);
    let command = command_line();
    let load_at_start = load_average();
    println!(
        "memfleet bench --scenario warmup: a cold and a warm cluster of {SERVERS_PER_CLUSTER} \
         servers each behind a router; the warm one holds {} keys of {} bytes; {} look-aside \
         clients read Zipf {zipf} keys through the router for {:?}; database queries take {:?}, \
         {} at a time",
        args.keys,
        args.value_size,
        args.conns,
        args.duration,
        args.herd_db_latency,
        args.warmup_db_concurrency
    );
    println!("load average at start: {load_at_start}");
    println!("command: {command}");
    let (rt, local) = runtime()?;
    let mut outcomes = Vec::new();
    for warm_up in [true, false] {
        let outcome = local
            .block_on(&rt, run(args, &workload, warm_up))
            .with_context(|| format!("the run {}", label(warm_up)))?;
        outcomes.push(outcome);
    }
    print!("{}", timeline(&outcomes));
    let summaries: Vec<Summary> = outcomes.iter().map(Outcome::summary).collect();
    print!("{}", summary_table(&outcomes, &summaries));
    let load_at_end = load_average();
    println!("load average: {load_at_start} at start, {load_at_end} at end");
    println!("command: {command}");
    if let Some(dir) = &args.out {
        let value = json_report(args, zipf, &outcomes, &summaries, &load_at_end);
        let path = memfleet_results::write_json(dir, "warmup", "warmup", &value)?;
        println!("results: {}", path.display());
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

fn label(warm_up: bool) -> &'static str {
    if warm_up {
        "with warm-up"
    } else {
        "without warm-up"
    }
}

/// The router's configuration: the `warmup` route on `front`, the warm pool also on its own
/// listener `fill` (to fill it).
fn router_config(front: u16, fill: u16, cold: &[u16], warm: &[u16], enabled: bool) -> String {
    let mut c = RouterConfig::new();
    c.pool("cold", cold).set("timeout_ms", 2000);
    c.pool("warm", warm).listen(fill).set("timeout_ms", 2000);
    c.route(ROUTE, "warmup")
        .listen(front)
        .set_str("cold", "cold")
        .set_str("warm", "warm")
        .set("holdoff", 2)
        .set("enabled", enabled);
    c.text()
}

async fn run(args: &LoadArgs, workload: &Rc<Workload>, warm_up: bool) -> Result<Outcome> {
    let label = label(warm_up);
    let start_server = |port: u16| -> Result<Spawned> {
        let argv: Vec<String> = [
            args.memfleet_bin.as_str(),
            "server",
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-m",
            &args.server_memory.to_string(),
            "-t",
            "1",
        ]
        .map(String::from)
        .to_vec();
        Spawned::start(&argv, ([127, 0, 0, 1], port).into(), None)
    };
    let ports = |n: usize| (0..n).map(|_| free_port()).collect::<Result<Vec<u16>>>();
    let (cold_ports, warm_ports) = (ports(SERVERS_PER_CLUSTER)?, ports(SERVERS_PER_CLUSTER)?);
    let mut servers = Vec::new();
    for &port in cold_ports.iter().chain(&warm_ports) {
        servers.push(start_server(port)?);
    }
    let (front, fill) = (free_port()?, free_port()?);
    let front_addr: SocketAddr = ([127, 0, 0, 1], front).into();
    let fill_addr: SocketAddr = ([127, 0, 0, 1], fill).into();
    let config = router_config(front, fill, &cold_ports, &warm_ports, warm_up);
    let router = Router::start(&args.memfleet_bin, &config, front_addr, None)?;
    println!(
        "[{label}] router pid {} on {front_addr}; cold cluster {cold_ports:?}, warm cluster \
         {warm_ports:?}",
        router.spawned.pid()
    );
    let filling = Instant::now();
    client::prefill(fill_addr, workload, 100)
        .await
        .context("filling the warm cluster")?;
    println!(
        "[{label}] filled the warm cluster with {} keys in {:.2} s",
        workload.keys(),
        filling.elapsed().as_secs_f64()
    );

    let seconds = args.duration.as_secs_f64().ceil() as usize;
    let windows = Rc::new(RefCell::new(vec![Second::new(); seconds]));
    let start = Instant::now();
    let deadline = start + args.duration;
    let database = Rc::new(Database {
        latency: args.herd_db_latency,
        slots: Semaphore::new(args.warmup_db_concurrency),
    });
    let mut clients = Vec::new();
    for c in 0..args.conns {
        let (workload, windows, database) = (workload.clone(), windows.clone(), database.clone());
        let rng = conn_rng(args.seed, c);
        clients.push(tokio::task::spawn_local(async move {
            look_aside(
                front_addr, &workload, rng, start, deadline, &database, &windows,
            )
            .await
        }));
    }
    let cold_addrs: Vec<SocketAddr> = cold_ports
        .iter()
        .map(|&p| SocketAddr::from(([127, 0, 0, 1], p)))
        .collect();
    let sampler = {
        let windows = windows.clone();
        tokio::task::spawn_local(async move {
            sample_cold_cluster(&cold_addrs, start, seconds, &windows).await
        })
    };
    for c in clients {
        c.await.context("a client task")??;
    }
    sampler.await.context("the sampler task")??;
    let mut stats = StatsConn::connect(front_addr).await?;
    let router_stats = stats.get("").await?;
    let counter = |name: &str| router_stats.int_or_zero(&format!("route:{ROUTE}:{name}"));
    let (warm_fills, fills_refused) = (counter("warm_fills"), counter("fills_refused"));
    for server in &mut servers {
        server.check_alive()?;
    }
    drop(router);
    drop(servers);
    let seconds = windows.borrow().clone();
    Ok(Outcome {
        label,
        warm_up,
        seconds,
        warm_fills,
        fills_refused,
    })
}

/// The simulated database: a query takes `latency`, and only as many run at once as
/// `slots` has permits.
struct Database {
    latency: Duration,
    slots: Semaphore,
}

impl Database {
    /// Waits for a free slot, then for the query.
    async fn query(&self) -> Result<()> {
        let _slot = self.slots.acquire().await.context("the database closed")?;
        tokio::time::sleep(self.latency).await;
        Ok(())
    }
}

/// One look-aside client until `deadline`: get; on a miss, the database, then set.
async fn look_aside(
    addr: SocketAddr,
    workload: &Workload,
    mut rng: SmallRng,
    start: Instant,
    deadline: Instant,
    database: &Database,
    windows: &RefCell<Vec<Second>>,
) -> Result<()> {
    let mut conn = Conn::connect(addr)
        .await
        .with_context(|| format!("connecting to the router at {addr}"))?;
    let last = windows.borrow().len() - 1;
    loop {
        let sent = Instant::now();
        if sent >= deadline {
            return Ok(());
        }
        let key = workload.key(&mut rng);
        let mut reply = None;
        conn.round_trip(workload, &[Op::Get(key)], |_, r, _| reply = Some(r))
            .await
            .map_err(|e| anyhow::anyhow!("get through the router: {e:?}"))?;
        let hit = matches!(reply, Some(Reply::Hit));
        let miss = matches!(reply, Some(Reply::Miss));
        if miss {
            // The database, then fill the cache.
            database.query().await?;
        }
        let second = ((sent - start).as_secs() as usize).min(last);
        {
            let mut w = windows.borrow_mut();
            let s = &mut w[second];
            s.gets += 1;
            s.client_hits += u64::from(hit);
            s.db += u64::from(miss);
            s.errors += u64::from(!hit && !miss);
            s.latency_us
                .saturating_record(sent.elapsed().as_micros() as u64);
        }
        if !miss {
            continue;
        }
        let mut stored = false;
        conn.round_trip(workload, &[Op::Set(key)], |_, r, _| {
            stored = matches!(r, Reply::Stored)
        })
        .await
        .map_err(|e| anyhow::anyhow!("set through the router: {e:?}"))?;
        if !stored {
            windows.borrow_mut()[second].errors += 1;
        }
    }
}

/// Every second, the cold cluster's get hits and misses (summed over its servers) into the
/// windows, and how many items it holds.
async fn sample_cold_cluster(
    servers: &[SocketAddr],
    start: Instant,
    seconds: usize,
    windows: &RefCell<Vec<Second>>,
) -> Result<()> {
    let mut conns = Vec::new();
    for &addr in servers {
        conns.push(StatsConn::connect(addr).await?);
    }
    let mut last = (0u64, 0u64);
    for i in 0..seconds {
        tokio::time::sleep_until((start + Duration::from_secs(i as u64 + 1)).into()).await;
        let (mut hits, mut misses, mut items) = (0, 0, 0);
        for conn in &mut conns {
            let s = conn.get("").await?;
            hits += s.int_or_zero("get_hits");
            misses += s.int_or_zero("get_misses");
            items += s.int_or_zero("curr_items");
        }
        let mut w = windows.borrow_mut();
        w[i].cold_hits = hits - last.0;
        w[i].cold_misses = misses - last.1;
        w[i].cold_items = items;
        last = (hits, misses);
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
fn timeline(outcomes: &[Outcome]) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = write!(t, "\n{:>4}", "");
    for o in outcomes {
        let _ = write!(t, "  {:^46}", format!("--- {} ---", o.label));
    }
    let _ = write!(t, "\n{:>4}", "sec");
    for _ in outcomes {
        let _ = write!(
            t,
            "  {:>8} {:>9} {:>9} {:>8} {:>8}",
            "gets/s", "cold hit%", "clnt hit%", "db/s", "p99 ms"
        );
    }
    t.push('\n');
    let n = outcomes.iter().map(|o| o.seconds.len()).min().unwrap_or(0);
    for i in 0..n {
        let _ = write!(t, "{:>4}", i + 1);
        for o in outcomes {
            let s = &o.seconds[i];
            let _ = write!(
                t,
                "  {:>8} {:>9} {:>9} {:>8} {:>8}",
                s.gets,
                percent(s.cold_hit_rate()),
                percent(s.client_hit_rate()),
                s.db,
                millis(s.latency_ms(0.99))
            );
        }
        t.push('\n');
    }
    t
}

fn summary_table(outcomes: &[Outcome], summaries: &[Summary]) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let after = |r: Option<usize>| r.map_or("never".into(), |s| format!("{s}s"));
    let _ = writeln!(
        t,
        "\n{:<16} {:>9} {:>9} {:>10} {:>9} {:>10} {:>9} {:>9} {:>8} {:>8} {:>10} {:>6}",
        "run",
        "gets",
        "db",
        "db/100get",
        "clnt hit%",
        "cold last%",
        "50% at",
        "90% at",
        "p50 ms",
        "p99 ms",
        "cold items",
        "errors"
    );
    for (o, s) in outcomes.iter().zip(summaries) {
        let _ = writeln!(
            t,
            "{:<16} {:>9} {:>9} {:>10.2} {:>9.1} {:>10} {:>9} {:>9} {:>8.2} {:>8.2} {:>10} {:>6}",
            o.label,
            s.gets,
            s.db,
            100.0 * s.db as f64 / s.gets.max(1) as f64,
            100.0 * s.client_hit_rate,
            percent(s.last_cold_hit_rate),
            after(s.reached[0]),
            after(s.reached[1]),
            s.p50_ms,
            s.p99_ms,
            s.cold_items,
            s.errors
        );
    }
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
fn series(o: &Outcome, f: &dyn Fn(&Second) -> Option<f64>) -> Vec<(f64, f64)> {
    plot::per_second(&o.seconds, f)
}

/// The figures of a run: the cold cluster's hit rate, the database's load and the clients'
/// p99 over time, with and without warm-up, as PNGs beside warmup.json.
fn figures(dir: &std::path::Path, outcomes: &[Outcome]) -> Result<Vec<std::path::PathBuf>> {
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
    args: &LoadArgs,
    zipf: f64,
    outcomes: &[Outcome],
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
            "keys": args.keys,
            "zipf": zipf,
            "value_size": args.value_size.to_string(),
            "conns": args.conns,
            "db_latency_ms": args.herd_db_latency.as_secs_f64() * 1000.0,
            "db_concurrency": args.warmup_db_concurrency,
            "duration_s": args.duration.as_secs_f64(),
            "server_memory_mib": args.server_memory,
        },
        "load_average_at_end": load_at_end,
        "runs": runs,
    })
}
