//! `memfleet bench client`: the client library three ways against one server —
//! straight to the server over TCP, straight over UDP (Facebook §3.1: gets over UDP, about
//! 20% lower latency), and through `memfleet router` (mcrouter's place) — at the same load:
//! `--conns` tasks of one application, each getting a random pre-filled key at a time.
//! Reported: gets per second, latency, and CPU per get of the application (the load
//! generator's thread runs the client library), the router and the server. With `--out
//! DIR`: `client.json` (the medians, with latency CDFs) and `client-latency-cdf.png`.

use memfleet_testkit::ServerSpec;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use memfleet_client::{Client, ClientOptions, UdpGet};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde_json::json;

use super::args::{Clients, ClosedLoop, MemfleetBin, Pinning};
use super::cpu::{cpu_time, Who};
use super::run_log::{write_results, RunLog};
use super::table::{self, Column};
use super::target::free_port;
use super::workload::Workload;
use super::{client, load_average, report, runtime};
use memfleet_results::plot::Series;
use memfleet_testkit::{Router, RouterConfig};

/// `memfleet bench client`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// The clients, the keys, the repeats.
    #[command(flatten)]
    pub run: ClosedLoop,
    /// The memfleet executable.
    #[command(flatten)]
    pub memfleet: MemfleetBin,
    /// Where the load generator and the servers run.
    #[command(flatten)]
    pub pinning: Pinning,
    /// Write client.json and client-latency-cdf.png into this directory, with the command
    /// that made them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

/// How the application reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    DirectTcp,
    DirectUdp,
    ViaRouter,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::DirectTcp => "client → server, TCP",
            Mode::DirectUdp => "client → server, UDP",
            Mode::ViaRouter => "client → router → server",
        }
    }
}

/// One run's numbers.
#[derive(Clone, Debug)]
struct Run {
    gets_per_s: f64,
    p50: u64,
    p99: u64,
    lost: u64,
    client_us: f64,
    router_us: f64,
    server_us: f64,
    /// The get latency CDF (µs).
    latency_cdf: Vec<report::CdfPoint>,
}

/// `memfleet bench client`.
pub fn bench(args: &ClientArgs) -> Result<()> {
    if args.run.repeat == 0 || args.run.clients.duration.is_zero() || args.run.clients.conns == 0 {
        bail!("--repeat, --duration and --conns must be positive");
    }
    let workload = Rc::new(args.run.keys.gets_workload("client", args.run.keys.zipf)?);
    println!(
        "memfleet bench client: {} tasks of one application, one get at a time \
         each, {} keys, {}-byte values, {:?} per run, {} repeat(s)",
        args.run.clients.conns,
        args.run.keys.keys,
        args.run.keys.value_size,
        args.run.clients.duration,
        args.run.repeat
    );
    RunLog::new().print_start();
    let bin = &args.memfleet.memfleet_bin;
    let port = free_port()?;
    let server_addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let (client_cpu, server_cpu) = args.pinning.pins();
    let server = ServerSpec::memfleet(bin, 1024)
        .args(["-U", &port.to_string()])
        .cpu(server_cpu)
        .port(port)
        .start()?;
    let router_port = free_port()?;
    let router_addr: SocketAddr = ([127, 0, 0, 1], router_port).into();
    let config = RouterConfig::new()
        .pool("main", &[server_addr.port()])
        .listen(router_port)
        .text();
    let router = Router::start(bin, &config, router_addr, server_cpu)?;
    println!(
        "server pid {} on {server_addr} (TCP and UDP), router pid {} on {router_addr}",
        server.pid(),
        router.spawned.pid()
    );
    let _pinned = client_cpu.map(super::cpu::pin_this_thread).transpose()?;
    let (rt, local) = runtime()?;
    let modes = [Mode::DirectTcp, Mode::DirectUdp, Mode::ViaRouter];
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); modes.len()];
    local.block_on(&rt, async {
        client::prefill(server_addr, &workload, 100).await?;
        for r in 1..=args.run.repeat {
            for (i, &mode) in modes.iter().enumerate() {
                let run = measure(
                    mode,
                    server_addr,
                    router_addr,
                    (server.pid(), router.spawned.pid()),
                    &workload,
                    &args.run.clients,
                    args.run.seed.wrapping_add(r as u64),
                )
                .await
                .with_context(|| mode.name())?;
                println!(
                    "run {r}: {:<26} {:>8.0} gets/s  p50 {:>5} µs  p99 {:>6} µs  lost {:>4}  \
                     CPU µs/get: client {:.2}, router {:.2}, server {:.2}",
                    mode.name(),
                    run.gets_per_s,
                    run.p50,
                    run.p99,
                    run.lost,
                    run.client_us,
                    run.router_us,
                    run.server_us
                );
                runs[i].push(run);
            }
        }
        anyhow::Ok(())
    })?;
    const COLUMNS: [Column; 9] = [
        Column::left("path (medians)", 26),
        Column::right("gets/s", 9),
        Column::right("p50 µs", 7),
        Column::right("p99 µs", 7),
        Column::right("lost", 6),
        Column::right("client µs/op", 12),
        Column::right("router µs/op", 12),
        Column::right("server µs/op", 12),
        Column::right("total µs/op", 13),
    ];
    println!("\n{}", table::heading(&COLUMNS));
    // For --out: each path's medians, and its latency CDF as a figure line.
    let (mut medians, mut cdf_lines) = (Vec::new(), Vec::new());
    for (mode, runs) in modes.iter().zip(&runs) {
        let med = |f: &dyn Fn(&Run) -> f64| report::median(runs.iter().map(f).collect());
        let (client, router, server) = (
            med(&|r| r.client_us),
            med(&|r| r.router_us),
            med(&|r| r.server_us),
        );
        let (whole, hundredths) = (|x: f64| format!("{x:.0}"), |x: f64| format!("{x:.2}"));
        let row = [
            mode.name().to_string(),
            whole(med(&|r| r.gets_per_s)),
            whole(med(&|r| r.p50 as f64)),
            whole(med(&|r| r.p99 as f64)),
            whole(med(&|r| r.lost as f64)),
            hundredths(client),
            hundredths(router),
            hundredths(server),
            hundredths(client + router + server),
        ];
        let cells: Vec<&dyn std::fmt::Display> = row.iter().map(|c| c as _).collect();
        println!("{}", table::line(&COLUMNS, &cells));
        let cdfs: Vec<&[report::CdfPoint]> =
            runs.iter().map(|r| r.latency_cdf.as_slice()).collect();
        let latency_cdf = report::median_cdf(&cdfs);
        cdf_lines.push(report::cdf_series(mode.name(), &latency_cdf));
        medians.push(json!({
            "path": mode.name(),
            "gets_per_s": med(&|r| r.gets_per_s),
            "latency_p50_us": med(&|r| r.p50 as f64),
            "latency_p99_us": med(&|r| r.p99 as f64),
            "lost": med(&|r| r.lost as f64),
            "client_cpu_us_per_get": client,
            "router_cpu_us_per_get": router,
            "server_cpu_us_per_get": server,
            "latency_cdf": latency_cdf,
        }));
    }
    let load_at_end = load_average();
    println!("load average at end: {load_at_end}");
    drop(router);
    drop(server);
    if let Some(dir) = &args.out {
        let value = json!({
            "parameters": args.run.parameters(
                "medians over the repeats; latency_cdf point by point"
            ),
            "load_average_at_end": load_at_end,
            "paths": medians,
        });
        write_results(dir, "client", &value)?;
        let lines: Vec<Series> = cdf_lines
            .into_iter()
            .filter(|s| !s.points.is_empty())
            .collect();
        let figure = dir.join("client-latency-cdf.png");
        memfleet_results::plot::latency_cdf(&figure, "Client library get latency CDF", &lines)?;
        println!("figure: {}", figure.display());
    }
    Ok(())
}

async fn measure(
    mode: Mode,
    server: SocketAddr,
    router: SocketAddr,
    (server_pid, router_pid): (u32, u32),
    workload: &Rc<Workload>,
    args: &Clients,
    seed: u64,
) -> Result<Run> {
    let target = if mode == Mode::ViaRouter {
        router
    } else {
        server
    };
    let config = memfleet_routing::from_toml(&format!("[pools.main]\nservers = [\"{target}\"]\n"))?;
    let options = ClientOptions {
        udp: (mode == Mode::DirectUdp).then_some(Duration::from_millis(200)),
        compress_above: None,
        ..ClientOptions::default()
    };
    let cache = Client::new(&config, "main", options)?;
    // Warm the connections (and the router's) before measuring.
    for n in 0..workload.keys().min(100) {
        cache.get(format!("key:{n}")).await?;
    }
    let before = (
        cpu_time(Who::ThisThread)?,
        cpu_time(Who::Process(router_pid))?,
        cpu_time(Who::Process(server_pid))?,
    );
    let started = Instant::now();
    let deadline = started + args.duration;
    let mut tasks = Vec::new();
    for c in 0..args.conns {
        let (cache, workload) = (cache.clone(), workload.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let mut rng = SmallRng::seed_from_u64(seed ^ (c as u64).wrapping_mul(0x9e37_79b9));
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut lost = 0u64;
            while Instant::now() < deadline {
                let n = workload.key(&mut rng);
                let key = format!("key:{n}");
                let t = Instant::now();
                match cache.get_udp(&key).await? {
                    UdpGet::Hit(v) => {
                        if v.data != workload.value(n) {
                            bail!("wrong value for {key}");
                        }
                    }
                    UdpGet::Miss => bail!("{key} missing"),
                    UdpGet::Lost => lost += 1,
                }
                hist.record(t.elapsed().as_micros().max(1) as u64)?;
            }
            anyhow::Ok((hist, lost))
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut lost = 0;
    for t in tasks {
        let (h, l) = t.await??;
        hist.add(&h)?;
        lost += l;
    }
    let elapsed = started.elapsed();
    let after = (
        cpu_time(Who::ThisThread)?,
        cpu_time(Who::Process(router_pid))?,
        cpu_time(Who::Process(server_pid))?,
    );
    let gets = hist.len().max(1) as f64;
    let per = |a: Duration, b: Duration| (a.saturating_sub(b)).as_secs_f64() * 1e6 / gets;
    Ok(Run {
        gets_per_s: gets / elapsed.as_secs_f64(),
        p50: hist.value_at_quantile(0.5),
        p99: hist.value_at_quantile(0.99),
        lost,
        client_us: per(after.0, before.0),
        router_us: per(after.1, before.1),
        server_us: per(after.2, before.2),
        latency_cdf: report::histogram_cdf(&hist, 1.0),
    })
}
