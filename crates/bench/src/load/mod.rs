//! `memfleet bench`: a memcached text-protocol load generator that compares
//! servers side by side in one run. For each target (started here with
//! `--spawn`, or given with `--target`) it pre-fills the key range, then at
//! each pipeline depth runs a warm-up and a measured phase with identical load
//! (N connections, closed loop, 90% get / 10% set by default) and reports
//! ops/s, latency percentiles and the server's CPU time per operation
//! (utime+stime of its process from procfs, before and after the measured
//! phase). With `--repeat N` targets are interleaved run by run and the table
//! shows medians. Any wrong reply fails the run.
//!
//! The load generator is one thread (a current-thread tokio runtime) so that on
//! a 2-core machine it can sit on one core (`--client-cpu`) and the server on
//! the other (`--server-cpu`, via `taskset`).

pub mod client;
pub mod client_bench;
pub mod cpu;
pub mod expiry;
pub mod floor;
pub mod floor_proxy;
pub mod gutter;
pub mod herd;
pub mod invalidation;
pub mod report;
pub mod restart;
pub mod server_stats;
pub mod target;
pub mod udp;
pub mod warmup;
pub mod workload;

use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use self::client::{LoadConfig, Measured};
use self::report::Row;
use self::target::{ExternalTarget, ServerSettings, SpawnSpec, Spawned};
use self::workload::Workload;

/// Arguments of `memfleet bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Start this server for the run, on a free port: memcached, memfleet, floor (a server
    /// that only reads and writes its socket, not a cache: the cost of socket I/O alone), or
    /// NAME='COMMAND ... {port} ...'. Repeatable; spawned servers come before --target ones,
    /// and the first target is the anchor of the ratio columns.
    #[arg(long, value_parser = target::parse_spawn)]
    pub spawn: Vec<SpawnSpec>,
    /// A running server: NAME=HOST:PORT[,pid=PID] (the PID gives its CPU time). Repeatable.
    #[arg(long, value_parser = target::parse_target)]
    pub target: Vec<ExternalTarget>,
    /// Client connections.
    #[arg(short = 'c', long, default_value_t = 50)]
    pub conns: usize,
    /// Pipeline depths (requests per batch, written at once), comma-separated; one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub pipeline: Vec<usize>,
    /// Distinct keys (key:0 .. key:N-1), all stored before measuring.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Fraction of requests that are gets (the rest are sets).
    #[arg(long, default_value_t = 0.9)]
    pub get_ratio: f64,
    /// Draw keys from a Zipf distribution with this exponent instead of uniformly.
    #[arg(long)]
    pub zipf: Option<f64>,
    /// Measured time per run, e.g. 10s, 500ms, 1m.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub duration: Duration,
    /// Unmeasured load before each measured phase.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub warmup: Duration,
    /// Run everything N times (targets interleaved) and report medians.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// RNG seed of the request streams.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Do not store every key first (the servers already hold them).
    #[arg(long)]
    pub no_prefill: bool,
    /// Worker threads of spawned servers (-t).
    #[arg(long, default_value_t = 1)]
    pub server_threads: u32,
    /// Memory of spawned servers in MiB (-m).
    #[arg(long, default_value_t = 1024)]
    pub server_memory: u64,
    /// The memcached executable for --spawn memcached.
    #[arg(long, default_value = "memcached")]
    pub memcached_bin: String,
    /// The memfleet executable for --spawn memfleet and --spawn floor.
    #[arg(long, default_value = "target/release/memfleet")]
    pub memfleet_bin: String,
    /// CPU that spawned servers are pinned to (taskset -c).
    #[arg(long, default_value_t = 1)]
    pub server_cpu: usize,
    /// CPU the load generator is pinned to.
    #[arg(long, default_value_t = 0)]
    pub client_cpu: usize,
    /// Pin nothing.
    #[arg(long)]
    pub no_pin: bool,
    /// What to run: `load` (the request mix above) or `herd` (one hot key invalidated
    /// every --herd-invalidate while --conns readers fill it from a simulated database,
    /// with and without leases: Facebook §3.2.1's thundering herd).
    #[arg(long, value_enum, default_value = "load")]
    pub scenario: Scenario,
    /// herd: time between database updates, each followed by a delete of the key.
    #[arg(long, value_parser = parse_duration, default_value = "300ms")]
    pub herd_invalidate: Duration,
    /// herd: how long a simulated database query takes.
    #[arg(long, value_parser = parse_duration, default_value = "10ms")]
    pub herd_db_latency: Duration,
    /// herd: pause before a reader told to wait (hot miss) asks again.
    #[arg(long, value_parser = parse_duration, default_value = "2ms")]
    pub herd_retry: Duration,
    /// herd: a reader told to wait takes a stale value when one is offered.
    #[arg(long)]
    pub herd_accept_stale: bool,
    /// herd: which modes to run where the server speaks them (plain, lease, meta).
    #[arg(long, value_delimiter = ',', default_value = "plain,lease,meta")]
    pub herd_modes: Vec<String>,
    /// Be the floor server on 127.0.0.1:PORT (with --value-size) instead of loading
    /// anything: what --spawn floor runs.
    #[arg(long, hide = true, value_name = "PORT")]
    pub floor_server: Option<u16>,
    /// invalidation: committed transactions per second across all writers (0: as fast as
    /// they go).
    #[arg(long, default_value_t = 0)]
    pub invalidation_rate: u64,
    /// gutter: when a server of the main pool is killed.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub gutter_fail_at: Duration,
    /// gutter: the longest TTL of a set into the gutter, seconds.
    #[arg(long, default_value_t = 10)]
    pub gutter_ttl: u32,
    /// Be the floor proxy on 127.0.0.1:PORT in front of --floor-backend instead of loading
    /// anything (scripts/bench-router runs it beside the proxies it bounds).
    #[arg(long, hide = true, value_name = "PORT", requires = "floor_backend")]
    pub floor_proxy: Option<u16>,
    /// The one server the floor proxy forwards to.
    #[arg(long, hide = true, value_name = "HOST:PORT")]
    pub floor_backend: Option<std::net::SocketAddr>,
    /// Write the results as JSON (and figures as PNG) into this directory, with the
    /// command that made them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// warmup: database queries served at once; more wait their turn, so the database
    /// answers at most this many per --herd-db-latency.
    #[arg(long, default_value_t = 8)]
    pub warmup_db_concurrency: usize,
    /// expiry: sets per second, each of a new key, spread evenly over each second.
    #[arg(long, default_value_t = 20_000)]
    pub expiry_rate: u64,
    /// expiry: the short TTLs, seconds, drawn uniformly from MIN-MAX.
    #[arg(long, value_parser = expiry::parse_ttl_range, default_value = "2-10")]
    pub expiry_short_ttl: expiry::TtlRange,
    /// expiry: the fraction of sets with a long TTL (an hour: live for the whole run).
    #[arg(long, default_value_t = 0.2)]
    pub expiry_long_share: f64,
}

/// What `memfleet bench` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// The get/set mix at each pipeline depth.
    Load,
    /// The hot-key thundering herd, with and without leases.
    Herd,
    /// Get latency over TCP and over UDP at the same load (servers get `-U` on the same
    /// port number).
    Udp,
    /// Warm restart: fill a memfleet server that keeps its memory in a file, read every
    /// key, stop it with SIGUSR1, start it again, read every key again.
    Restart,
    /// A server of four killed behind a router, without and with a gutter pool: database
    /// load and client-visible failures per second, the gutter's hit rate.
    Gutter,
    /// The client library straight to a server over TCP, over UDP, and through the router:
    /// latency and CPU per get of each part.
    Client,
    /// Commit-to-deleted latency of the invalidator, from a scratch PostgreSQL to two
    /// clusters.
    Invalidation,
    /// Facebook §4.3's cold cluster warm-up: an empty cluster behind a router's warmup
    /// route, with and without it: its hit rate and the database's queries per second
    /// (Zipf 1.0 keys unless --zipf; database latency --herd-db-latency).
    Warmup,
    /// Segcache §3.5's proactive expiration: bytes each --spawn/--target server holds in
    /// expired items per second while short- and long-TTL items are written.
    Expiry,
}

/// Parses `10s`, `250ms`, `1.5s`, `2m` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Duration::from_secs_f64(v * scale)),
        _ => Err(format!("bad duration {s:?} (like 10s, 500ms, 1m)")),
    }
}

pub(crate) enum Target {
    Spawn(SpawnSpec),
    External(ExternalTarget),
}

impl Target {
    pub(crate) fn name(&self) -> &str {
        match self {
            Target::Spawn(s) => s.name(),
            Target::External(t) => &t.name,
        }
    }
}

/// Runs the benchmark, prints the per-run lines and the table, and returns the table's
/// rows (medians over repeats) without judging them. [`run`] is this plus the verdict.
pub fn bench(args: &LoadArgs) -> Result<Vec<Row>> {
    if args.spawn.is_empty() && args.target.is_empty() {
        bail!("nothing to load: give --spawn memcached|memfleet|floor|NAME=CMD or --target NAME=HOST:PORT[,pid=PID]");
    }
    if args.conns == 0 || args.repeat == 0 || args.pipeline.contains(&0) || args.pipeline.is_empty()
    {
        bail!("--conns, --repeat and every --pipeline depth must be at least 1");
    }
    if args.duration.is_zero() {
        bail!("--duration must be positive");
    }
    let workload = Workload::new(args.keys, args.get_ratio, args.value_size, args.zipf)
        .map_err(anyhow::Error::msg)?;
    let workload = Rc::new(workload);
    let targets = args.targets();
    let command = command_line();
    let load_at_start = load_average();
    let cpus = cpu::online_cpus();

    println!(
        "memfleet bench: {} connections, pipeline {}, {} keys ({}), {:.0}% get / {:.0}% set, \
         {}-byte values, {:?} warm-up + {:?} measured per run, {} repeat(s)",
        args.conns,
        args.pipeline
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(","),
        args.keys,
        args.zipf.map_or("uniform".into(), |s| format!("zipf {s}")),
        args.get_ratio * 100.0,
        (1.0 - args.get_ratio) * 100.0,
        args.value_size,
        args.warmup,
        args.duration,
        args.repeat
    );
    println!("load average at start: {load_at_start} ({cpus} CPUs online)");
    println!("command: {command}");

    let (client_pin, server_pin) = args.pins();
    let _pinned = client_pin.map(cpu::pin_this_thread).transpose()?;
    if let (Some(c), Some(s)) = (client_pin, server_pin) {
        println!("pinning: load generator on CPU {c}, spawned servers on CPU {s}");
    }
    let settings = args.server_settings(false);
    let (rt, local) = runtime()?;
    // runs[target][depth] holds one row per repeat.
    let mut runs: Vec<Vec<Vec<Row>>> = vec![vec![Vec::new(); args.pipeline.len()]; targets.len()];
    local.block_on(&rt, async {
        for r in 1..=args.repeat {
            for (ti, t) in targets.iter().enumerate() {
                let rows = run_target(args, t, &settings, server_pin, &workload, r).await?;
                for (di, row) in rows.into_iter().enumerate() {
                    runs[ti][di].push(row);
                }
            }
        }
        anyhow::Ok(())
    })?;

    let rows: Vec<Row> = runs
        .iter()
        .flat_map(|per_depth| per_depth.iter().map(|reps| Row::median(reps)))
        .collect();
    println!();
    if args.repeat > 1 {
        println!("median of {} runs:", args.repeat);
    }
    print!("{}", report::table(&rows));
    if args.repeat > 1 {
        for per_depth in &runs {
            for reps in per_depth {
                let cpu: Vec<String> = reps
                    .iter()
                    .map(|r| r.server_us_per_op.map_or("-".into(), |c| format!("{c:.2}")))
                    .collect();
                let ops: Vec<String> = reps
                    .iter()
                    .map(|r| format!("{:.0}", r.ops_per_sec))
                    .collect();
                println!(
                    "  {} depth {}: srv CPU µs/op per run [{}], ops/s per run [{}]",
                    reps[0].target,
                    reps[0].depth,
                    cpu.join(", "),
                    ops.join(", ")
                );
            }
        }
    }
    println!(
        "load average: {load_at_start} at start, {} at end",
        load_average()
    );
    println!("command: {command}");
    Ok(rows)
}

/// Runs the benchmark and fails (after printing everything) if any reply was wrong or any
/// connection failed.
pub fn run(args: &LoadArgs) -> Result<()> {
    if let Some(port) = args.floor_server {
        return floor::serve(port, args.value_size)
            .with_context(|| format!("floor server on 127.0.0.1:{port}"));
    }
    if let (Some(port), Some(backend)) = (args.floor_proxy, args.floor_backend) {
        return floor_proxy::serve(port, backend)
            .with_context(|| format!("floor proxy on 127.0.0.1:{port} to {backend}"));
    }
    match args.scenario {
        Scenario::Herd => return herd::bench(args),
        Scenario::Udp => return udp::bench(args),
        Scenario::Restart => return restart::bench(args),
        Scenario::Gutter => return gutter::bench(args),
        Scenario::Client => return client_bench::bench(args),
        Scenario::Invalidation => return invalidation::bench(args),
        Scenario::Warmup => return warmup::bench(args),
        Scenario::Expiry => return expiry::bench(args),
        Scenario::Load => {}
    }
    let rows = bench(args)?;
    let errors: u64 = rows.iter().map(|r| r.errors).sum();
    if errors > 0 {
        bail!("{errors} error(s): wrong replies or failed connections (details above)");
    }
    Ok(())
}

impl LoadArgs {
    /// The targets in report order: spawned servers first, then `--target` ones.
    pub(crate) fn targets(&self) -> Vec<Target> {
        self.spawn
            .iter()
            .cloned()
            .map(Target::Spawn)
            .chain(self.target.iter().cloned().map(Target::External))
            .collect()
    }

    /// How spawned servers are started (`udp`: also serve UDP on the TCP port number).
    pub(crate) fn server_settings(&self, udp: bool) -> ServerSettings {
        ServerSettings {
            memcached_bin: self.memcached_bin.clone(),
            memfleet_bin: self.memfleet_bin.clone(),
            threads: self.server_threads,
            memory_mib: self.server_memory,
            value_size: self.value_size,
            udp,
        }
    }

    /// CPUs for the load generator and the spawned servers, unless `--no-pin` or a CPU is
    /// not online (said on stdout).
    pub(crate) fn pins(&self) -> (Option<usize>, Option<usize>) {
        let cpus = cpu::online_cpus();
        if self.no_pin {
            (None, None)
        } else if self.client_cpu < cpus && self.server_cpu < cpus {
            (Some(self.client_cpu), Some(self.server_cpu))
        } else {
            println!(
                "note: not pinning (CPU {} or {} is not online)",
                self.client_cpu, self.server_cpu
            );
            (None, None)
        }
    }
}

/// The load generator's single-threaded runtime.
pub(crate) fn runtime() -> Result<(tokio::runtime::Runtime, tokio::task::LocalSet)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    Ok((rt, tokio::task::LocalSet::new()))
}

/// Starts a `--spawn` target on a free port with `extra` arguments appended (an external
/// target is already running); returns the process, if one was started, and the address.
pub(crate) fn start(
    target: &Target,
    settings: &ServerSettings,
    pin: Option<usize>,
    extra: &[String],
) -> Result<(Option<Spawned>, std::net::SocketAddr)> {
    match target {
        Target::Spawn(spec) => {
            let port = target::free_port()?;
            let addr = ([127, 0, 0, 1], port).into();
            let mut argv = spec.argv(port, settings);
            argv.extend(extra.iter().cloned());
            let server = Spawned::start(&argv, addr, pin)?;
            println!(
                "[{}] started {} (pid {})",
                spec.name(),
                report::shell_line(&server.command),
                server.pid()
            );
            Ok((Some(server), addr))
        }
        Target::External(t) => Ok((None, t.addr)),
    }
}

/// The command line of this run, for the report.
pub fn command_line() -> String {
    report::shell_line(&std::env::args().collect::<Vec<_>>())
}

/// The load average now, or why it is unknown.
pub fn load_average() -> String {
    cpu::load_average().unwrap_or_else(|e| format!("unknown ({e})"))
}

/// One repeat of one target: start it if needed, pre-fill, one run per depth.
async fn run_target(
    args: &LoadArgs,
    target: &Target,
    settings: &ServerSettings,
    server_pin: Option<usize>,
    workload: &Rc<Workload>,
    repeat: usize,
) -> Result<Vec<Row>> {
    let (mut spawned, addr) = start(target, settings, server_pin, &[])?;
    let pid = match target {
        Target::Spawn(_) => spawned.as_ref().map(Spawned::pid),
        Target::External(t) => t.pid,
    };
    if !args.no_prefill {
        let start = Instant::now();
        client::prefill(addr, workload, 100).await?;
        println!(
            "[{}] pre-filled {} keys in {:.2} s",
            target.name(),
            workload.keys(),
            start.elapsed().as_secs_f64()
        );
    }
    let mut rows = Vec::new();
    for &depth in &args.pipeline {
        let cfg = LoadConfig {
            addr,
            server_pid: pid,
            conns: args.conns,
            depth,
            warmup: args.warmup,
            duration: args.duration,
            seed: args.seed.wrapping_add(repeat as u64),
        };
        let m: Measured = client::measure(&cfg, workload.clone())
            .await
            .with_context(|| format!("loading {} at pipeline depth {depth}", target.name()))?;
        let row = Row::from_measured(target.name(), depth, &m);
        println!(
            "[{}] run {repeat}/{}: {}",
            target.name(),
            args.repeat,
            row.brief()
        );
        if m.stats.misses > 0 {
            println!(
                "[{}]   {} get misses after pre-fill (evictions, or --no-prefill)",
                target.name(),
                m.stats.misses
            );
        }
        for (kind, (count, example)) in &m.stats.error_kinds {
            println!(
                "[{}]   ERROR {count} x {kind}; first: {example}",
                target.name()
            );
        }
        rows.push(row);
        if let Some(server) = &mut spawned {
            server.check_alive()?;
        }
    }
    // Dropping `spawned` stops the server before the next target starts.
    drop(spawned);
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
