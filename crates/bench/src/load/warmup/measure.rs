//! The warm-up experiment's measurement: two clusters behind a router's warm-up route (its
//! configuration), the look-aside clients against a database of fixed capacity, and the
//! per-second samples of each run. Not here: the report (the parent module).

use super::WarmupArgs;
use crate::load::client;
use crate::load::conn::Conn;
use crate::load::reply::CheckedReply;
use crate::load::server_stats::StatsConn;
use crate::load::target::free_port;
use crate::load::workload::{conn_rng, Workload, WorkloadOp};
use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use memfleet_testkit::ServerSpec;
use memfleet_testkit::{Router, RouterConfig};
use rand::rngs::SmallRng;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Servers in each cluster.
pub(super) const SERVERS_PER_CLUSTER: usize = 2;
/// Key popularity without `--zipf`: web workloads are skewed, and the skew is what lets a
/// cold cluster's hit rate climb long before it holds every key.
pub(super) const DEFAULT_ZIPF: f64 = 1.0;
/// The cold-cluster hit rates whose arrival the summary reports.
pub(super) const GOALS: [f64; 2] = [0.5, 0.9];
/// The name of the route the clients use (its counters are `route:front:*`).
pub(super) const ROUTE: &str = "front";

/// One second of one run.
#[derive(Clone)]
pub(super) struct Second {
    /// Gets the clients completed.
    pub(super) gets: u64,
    /// Gets answered with a value (with warm-up, also those the router filled from warm).
    pub(super) client_hits: u64,
    /// Database queries.
    pub(super) db: u64,
    /// Wrong replies and refused sets.
    pub(super) errors: u64,
    /// Time from sending a get to holding the value (database included), µs.
    pub(super) latency_us: Histogram<u64>,
    /// The cold cluster's own gets that hit and missed (its servers' counters).
    pub(super) cold_hits: u64,
    pub(super) cold_misses: u64,
    /// Items the cold cluster held at the end of the second.
    pub(super) cold_items: u64,
}

impl Second {
    pub(super) fn new() -> Second {
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
    pub(super) fn cold_hit_rate(&self) -> Option<f64> {
        let gets = self.cold_hits + self.cold_misses;
        (gets > 0).then(|| self.cold_hits as f64 / gets as f64)
    }

    pub(super) fn client_hit_rate(&self) -> Option<f64> {
        (self.gets > 0).then(|| self.client_hits as f64 / self.gets as f64)
    }

    pub(super) fn latency_ms(&self, quantile: f64) -> Option<f64> {
        (!self.latency_us.is_empty())
            .then(|| self.latency_us.value_at_quantile(quantile) as f64 / 1000.0)
    }
}

/// One run's timeline and the router's fill counters.
pub(super) struct WarmupRun {
    pub(super) label: &'static str,
    pub(super) warm_up: bool,
    pub(super) seconds: Vec<Second>,
    pub(super) warm_fills: u64,
    pub(super) fills_refused: u64,
}

/// What the summary table and the JSON report of a run.
pub(super) struct Summary {
    pub(super) gets: u64,
    pub(super) db: u64,
    pub(super) errors: u64,
    pub(super) client_hit_rate: f64,
    pub(super) last_cold_hit_rate: Option<f64>,
    /// Seconds (end of the window) until each of [`GOALS`] was first reached.
    pub(super) reached: Vec<Option<usize>>,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) cold_items: u64,
}

impl WarmupRun {
    pub(super) fn summary(&self) -> Summary {
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

pub(super) fn label(warm_up: bool) -> &'static str {
    if warm_up {
        "with warm-up"
    } else {
        "without warm-up"
    }
}

/// The router's configuration: the `warmup` route on `front`, the warm pool also on its own
/// listener `fill` (to fill it).
pub(super) fn router_config(
    front: u16,
    fill: u16,
    cold: &[u16],
    warm: &[u16],
    enabled: bool,
) -> String {
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

pub(super) async fn run(
    args: &WarmupArgs,
    workload: &Rc<Workload>,
    warm_up: bool,
) -> Result<WarmupRun> {
    let label = label(warm_up);
    let bin = &args.look_aside.memfleet.memfleet_bin;
    let start_server = |port: u16| {
        ServerSpec::memfleet(bin, args.server_memory)
            .port(port)
            .start()
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
    let router = Router::start(
        &args.look_aside.memfleet.memfleet_bin,
        &config,
        front_addr,
        None,
    )?;
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

    let seconds = args.look_aside.clients.duration.as_secs_f64().ceil() as usize;
    let windows = Rc::new(RefCell::new(vec![Second::new(); seconds]));
    let start = Instant::now();
    let deadline = start + args.look_aside.clients.duration;
    let database = Rc::new(Database {
        latency: args.look_aside.db_latency,
        slots: Semaphore::new(args.db_concurrency),
    });
    let mut clients = Vec::new();
    for c in 0..args.look_aside.clients.conns {
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
    Ok(WarmupRun {
        label,
        warm_up,
        seconds,
        warm_fills,
        fills_refused,
    })
}

/// The simulated database: a query takes `latency`, and only as many run at once as
/// `slots` has permits.
pub(super) struct Database {
    pub(super) latency: Duration,
    pub(super) slots: Semaphore,
}

impl Database {
    /// Waits for a free slot, then for the query.
    pub(super) async fn query(&self) -> Result<()> {
        let _slot = self.slots.acquire().await.context("the database closed")?;
        tokio::time::sleep(self.latency).await;
        Ok(())
    }
}

/// One look-aside client until `deadline`: get; on a miss, the database, then set.
pub(super) async fn look_aside(
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
        conn.round_trip(workload, &[WorkloadOp::Get(key)], |_, r, _| reply = Some(r))
            .await
            .map_err(|e| anyhow::anyhow!("get through the router: {e:?}"))?;
        let hit = matches!(reply, Some(CheckedReply::Hit));
        let miss = matches!(reply, Some(CheckedReply::Miss));
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
        conn.round_trip(workload, &[WorkloadOp::Set(key)], |_, r, _| {
            stored = matches!(r, CheckedReply::Stored)
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
pub(super) async fn sample_cold_cluster(
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
