//! `memfleet bench`: a memcached text-protocol load generator that compares
//! servers side by side in one run. For each target (started here with
//! `--spawn`, or given with `--target`) it pre-fills the key range, then at
//! each pipeline depth runs a warm-up and a measured phase with identical load
//! (N connections, closed loop, 90% get / 10% set by default; open loop at a
//! target rate with `--rate`, see `open_loop`) and reports ops/s, hit ratio,
//! latency percentiles and the server's CPU time per operation (utime+stime of
//! its process from procfs, before and after the measured phase). The requests
//! (get/set/delete mix, key and value size distributions, TTL mix, text or meta
//! protocol) are `workload`'s and `memfleet_sim::sizes`'. With `--repeat N` targets are
//! interleaved run by run and the table shows medians; `--out DIR` also writes
//! them as JSON (`report::LoadResults`). Any wrong reply fails the run; a miss
//! does not.
//!
//! The load generator is one thread (a current-thread tokio runtime) so that on
//! a 2-core machine it can sit on one core (`--client-cpu`) and the server on
//! the other (`--server-cpu`, via `taskset`).

pub mod client_bench;
pub mod expiry;
pub mod gutter;
pub mod herd;
pub mod invalidation;
mod invalidator_metrics;
pub mod replay;
pub mod replay_client;
pub mod report;
pub mod restart;
pub mod udp;
pub mod warmup;

// The load generator the experiments share (`memfleet-loadgen`), under the paths the
// experiments and tests have always used.
pub use memfleet_loadgen::{client, conn, cpu, open_loop, reply, server_stats, target, workload};

use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use self::client::{LoadConfig, Measured};
use self::report::Row;
use self::target::{ExternalTarget, ServerSettings, SpawnSpec};
use self::workload::{Mix, Protocol, Workload, WorkloadSpec};
use memfleet_sim::duration::parse_duration;
use memfleet_sim::sizes::{KeySizes, SizeDistribution, ValueSizes};
use memfleet_sim::workload::TtlMix;
use memfleet_testkit::Spawned;

pub use memfleet_results::provenance::{command_line, load_average};

/// Arguments of `memfleet bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Start this server for the run, on a free port: memcached, memfleet, floor (a server
    /// that only reads and writes its socket, not a cache: the cost of socket I/O alone), or
    /// NAME='COMMAND ... {port} ...' ({memory} and {threads} become --server-memory, or each
    /// --memory-sizes entry, and --server-threads). Repeatable; spawned servers come before
    /// --target ones, and the first target is the anchor of the ratio columns.
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
    /// Value sizes in bytes: N, A-B (uniform), fb-wildcard, fb-app, fb-replicated,
    /// fb-regional (Facebook's Table 3 pools) or etc (the ETC workload); a key's size is
    /// fixed. Scenarios other than load take N only.
    #[arg(long, default_value = "100")]
    pub value_size: ValueSizes,
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
    /// invalidation: committed transactions per second across all writers (0: as fast as
    /// they go).
    #[arg(long, default_value_t = 0)]
    pub invalidation_rate: u64,
    /// invalidation: hang the second cluster's server (SIGSTOP, then SIGCONT) for this long,
    /// starting a third of the way into the run: its deletes wait in the invalidator's
    /// spool and count as delivered only when replayed (0s: no outage).
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    pub invalidation_outage: Duration,
    /// invalidation: no delete spool (`spool_deletes = false`): a delete a cluster cannot
    /// take fails its batch, which the invalidator retries until it is delivered.
    #[arg(long)]
    pub invalidation_no_spool: bool,
    /// gutter: when a server of the main pool is killed.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub gutter_fail_at: Duration,
    /// gutter: the longest TTL of a set into the gutter, seconds.
    #[arg(long, default_value_t = 10)]
    pub gutter_ttl: u32,
    /// Write the results as JSON (and figures as PNG) into this directory, with the
    /// command that made them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// replay: the trace to replay (Twitter CSV, Twitter/libCacheSim twr, oracleGeneral);
    /// without it, a synthetic workload (--replay-workload, --keys, --zipf, --seed).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// replay: the trace's format; by default guessed from its name (.csv, *oracleGeneral*).
    #[arg(long, value_enum)]
    pub trace_format: Option<memfleet_sim::trace::TraceFormat>,
    /// replay: memory sizes in MiB, comma-separated; a fresh server is started at each.
    #[arg(long, value_delimiter = ',', default_value = "16,32,64")]
    pub memory_sizes: Vec<u64>,
    /// replay: requests to replay [default: 1000000 synthetic, the whole trace otherwise].
    #[arg(long)]
    pub replay_requests: Option<u64>,
    /// replay: trace seconds per wall second; TTLs are divided by it (0: unpaced, TTLs as
    /// recorded).
    #[arg(long, default_value_t = 100.0)]
    pub speedup: f64,
    /// replay: synthetic workload without --trace: c, u1, u2, n, mix or a TTL mix like
    /// 120:0.5,3600:0.5 (as memfleet sim --workload).
    #[arg(long, default_value = "mix")]
    pub replay_workload: String,
    /// replay: width of a miss-ratio window, in trace seconds.
    #[arg(long, default_value_t = 60)]
    pub replay_window: u32,
    /// replay: connections (a key always goes over the same one).
    #[arg(long, default_value_t = 4)]
    pub replay_conns: usize,
    /// replay: requests per pipelined batch on each connection.
    #[arg(long, default_value_t = 32)]
    pub replay_depth: usize,

    // The load scenario's open loop, request mix, key sizes, TTLs and protocol.
    /// Open loop: send this many requests per second across all connections on a schedule
    /// that ignores replies, measuring latency from each request's intended send time
    /// (without it: closed loop, as fast as replies come back).
    #[arg(long, value_name = "OPS")]
    pub rate: Option<f64>,
    /// Fraction of requests that are deletes (the rest after gets are sets).
    #[arg(long, default_value_t = 0.0)]
    pub delete_ratio: f64,
    /// The request mix as shares summing to 1, e.g. get=0.8,set=0.15,delete=0.05
    /// (instead of --get-ratio and --delete-ratio).
    #[arg(long, conflicts_with_all = ["get_ratio", "delete_ratio"])]
    pub mix: Option<Mix>,
    /// Key sizes in bytes: N, A-B (uniform) or etc (the ETC workload); keys are key:<n>
    /// padded to the size (never shorter than key:<n>). Default: key:<n> unpadded.
    #[arg(long)]
    pub key_size: Option<KeySizes>,
    /// TTL of sets: seconds (0 never expires), a mix such as 120:0.5,1h:0.5 (a key's
    /// TTL is fixed), or a Segcache Table 3 preset: c, u1, u2, n, mix.
    #[arg(long, value_parser = parse_ttl, default_value = "0")]
    pub ttl: TtlMix,
    /// Request protocol: text (get/set/delete) or meta (mg/ms/md).
    #[arg(long, value_enum, default_value = "text")]
    pub protocol: Protocol,
    /// A published workload: etc (Atikoglu et al. SIGMETRICS '12 as mutilate models it:
    /// ETC key and value sizes, 30 gets per set).
    #[arg(long, value_enum, conflicts_with_all = ["key_size", "value_size", "mix", "get_ratio"])]
    pub workload: Option<WorkloadPreset>,

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

/// A published workload for `--workload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadPreset {
    /// Facebook's ETC pool: GEV key sizes, generalized Pareto value sizes, 30:1 get:set.
    Etc,
}

/// Parses `--ttl`: plain seconds, or a [`TtlMix`] (preset or `ttl:share,...`).
pub fn parse_ttl(s: &str) -> Result<TtlMix, String> {
    match s.trim().parse::<u32>() {
        Ok(seconds) => Ok(TtlMix::single(seconds)),
        Err(_) => s.parse(),
    }
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
    /// Trace replay at each --memory-sizes against fresh servers, look-aside: miss ratio per
    /// server and size (the sizing curve) and over the trace.
    Replay,
    /// Facebook §4.3's cold cluster warm-up: an empty cluster behind a router's warmup
    /// route, with and without it: its hit rate and the database's queries per second
    /// (Zipf 1.0 keys unless --zipf; database latency --herd-db-latency).
    Warmup,
    /// Segcache §3.5's proactive expiration: bytes each --spawn/--target server holds in
    /// expired items per second while short- and long-TTL items are written.
    Expiry,
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
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            bail!("--rate must be a positive number of requests per second, got {rate}");
        }
    }
    let spec = args.workload_spec().map_err(anyhow::Error::msg)?;
    let targets = args.targets();
    refuse_floor_beyond_its_replies(&targets, &spec)?;
    let workload = Rc::new(Workload::from_spec(spec.clone()).map_err(anyhow::Error::msg)?);
    let command = command_line();
    let load_at_start = load_average();
    let cpus = cpu::online_cpus();

    println!(
        "memfleet bench: {} connections, pipeline {}, {}, {} keys ({}), {:.0}% get / {:.0}% set / \
         {:.0}% delete, {} protocol, key size {}, value size {}, TTL {}, {:?} warm-up + {:?} \
         measured per run, {} repeat(s)",
        args.conns,
        args.pipeline
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(","),
        args.rate
            .map_or("closed loop".into(), |r| format!("open loop at {r} ops/s")),
        args.keys,
        args.zipf.map_or("uniform".into(), |s| format!("zipf {s}")),
        spec.mix.get * 100.0,
        spec.mix.set * 100.0,
        spec.mix.delete * 100.0,
        report::protocol_name(spec.protocol),
        spec.key_sizes
            .as_ref()
            .map_or("key:<n>".into(), |k| k.to_string()),
        spec.value_sizes,
        report::ttl_text(&spec.ttl),
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
    let progress = progress_bar(args, targets.len());
    let (rt, local) = runtime()?;
    // runs[target][depth] holds one row per repeat.
    let mut runs: Vec<Vec<Vec<Row>>> = vec![vec![Vec::new(); args.pipeline.len()]; targets.len()];
    local.block_on(&rt, async {
        for r in 1..=args.repeat {
            for (ti, t) in targets.iter().enumerate() {
                let rows = run_target(
                    args,
                    t,
                    &settings,
                    server_pin,
                    &workload,
                    r,
                    progress.as_ref(),
                )
                .await?;
                for (di, row) in rows.into_iter().enumerate() {
                    runs[ti][di].push(row);
                }
            }
        }
        anyhow::Ok(())
    })?;
    if let Some(bar) = &progress {
        bar.finish_and_clear();
    }

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
    if let Some(dir) = &args.out {
        let results = report::LoadResults::new(report::RunSettings::new(args, &spec), &rows);
        let path = memfleet_results::write_json(dir, "load", "load", &results)?;
        println!("results: {}", path.display());
        let figure = dir.join("load-latency-cdf.png");
        memfleet_results::plot::latency_cdf(&figure, "Latency CDF", &latency_series(&rows))?;
        println!("figure: {}", figure.display());
    }
    Ok(rows)
}

/// One CDF line per table row (target at a pipeline depth), for the figure beside load.json.
fn latency_series(rows: &[Row]) -> Vec<memfleet_results::plot::Series> {
    rows.iter()
        .filter(|r| !r.latency_cdf.is_empty())
        .map(|r| {
            report::cdf_series(
                format!("{} (pipeline {})", r.target, r.depth),
                &r.latency_cdf,
            )
        })
        .collect()
}

/// The floor server answers text gets and sets of fixed-size values under `key:<n>`
/// only; anything else would be counted as its errors or misses, not as a floor.
fn refuse_floor_beyond_its_replies(targets: &[Target], spec: &WorkloadSpec) -> Result<()> {
    let has_floor = targets
        .iter()
        .any(|t| matches!(t, Target::Spawn(SpawnSpec::Floor)));
    if has_floor
        && (spec.value_sizes.fixed().is_none()
            || spec.key_sizes.is_some()
            || spec.mix.delete > 0.0
            || spec.protocol != Protocol::Text)
    {
        bail!(
            "--spawn floor answers only text gets and sets with a fixed --value-size and no \
             --key-size: drop floor or those options"
        );
    }
    Ok(())
}

/// A progress bar on stderr over every run's warm-up and measured time, when stderr is a
/// terminal and the runs take more than a few seconds.
fn progress_bar(args: &LoadArgs, targets: usize) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    let runs = (targets * args.pipeline.len() * args.repeat) as u32;
    let total = (args.warmup + args.duration) * runs;
    if !std::io::stderr().is_terminal() || total < Duration::from_secs(5) {
        return None;
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total.as_millis() as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    let style =
        indicatif::ProgressStyle::with_template("{msg:24} [{wide_bar}] {percent:>3}% eta {eta}")
            .expect("a valid progress template")
            .progress_chars("=> ");
    bar.set_style(style);
    Some(bar)
}

/// Prints `line` on stdout without tearing the progress bar.
fn say(progress: Option<&indicatif::ProgressBar>, line: impl std::fmt::Display) {
    match progress {
        Some(bar) => bar.suspend(|| println!("{line}")),
        None => println!("{line}"),
    }
}

/// Runs the benchmark and fails (after printing everything) if any reply was wrong or any
/// connection failed.
pub fn run(args: &LoadArgs) -> Result<()> {
    match args.scenario {
        Scenario::Herd => return herd::bench(args),
        Scenario::Udp => return udp::bench(args),
        Scenario::Restart => return restart::bench(args),
        Scenario::Gutter => return gutter::bench(args),
        Scenario::Client => return client_bench::bench(args),
        Scenario::Invalidation => return invalidation::bench(args),
        Scenario::Replay => return replay::bench(args),
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
    /// `--value-size` of a scenario that takes one fixed size (`what` names it).
    pub fn fixed_value_size(&self, what: &str) -> Result<usize> {
        self.value_size.fixed(what).map_err(anyhow::Error::msg)
    }

    /// The workload of a scenario that only reads: gets of `--keys` keys with `popularity`
    /// (uniform when `None`) and one fixed `--value-size` (`scenario` names the scenario in
    /// the error when a size distribution was given).
    pub fn gets_workload(&self, scenario: &str, popularity: Option<f64>) -> Result<Workload> {
        Workload::new(self.keys, 1.0, self.fixed_value_size(scenario)?, popularity)
            .map_err(anyhow::Error::msg)
    }

    /// The requests of the load scenario: `--workload`, or the mix, sizes, TTLs and
    /// protocol given one by one.
    pub fn workload_spec(&self) -> Result<WorkloadSpec, String> {
        let (mix, key_sizes, value_sizes) = match self.workload {
            Some(WorkloadPreset::Etc) => (
                Mix::new(30.0 / 31.0, 1.0 / 31.0, 0.0)?,
                Some(SizeDistribution::etc_keys()),
                SizeDistribution::etc_values(),
            ),
            None => (
                match self.mix {
                    Some(mix) => mix,
                    None => Mix::from_ratios(self.get_ratio, self.delete_ratio)?,
                },
                self.key_size.as_ref().map(|k| k.0.clone()),
                self.value_size.0.clone(),
            ),
        };
        Ok(WorkloadSpec {
            keys: self.keys,
            mix,
            zipf: self.zipf,
            key_sizes,
            value_sizes,
            ttl: self.ttl.clone(),
            protocol: self.protocol,
        })
    }

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
            // Only the floor server reads it, and `bench` refuses floor with a distribution.
            value_size: self.value_size.0.fixed().unwrap_or_default(),
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
                memfleet_results::provenance::shell_line(&server.command),
                server.pid()
            );
            Ok((Some(server), addr))
        }
        Target::External(t) => Ok((None, t.addr)),
    }
}

/// One repeat of one target: start it if needed, pre-fill, one run per depth.
async fn run_target(
    args: &LoadArgs,
    target: &Target,
    settings: &ServerSettings,
    server_pin: Option<usize>,
    workload: &Rc<Workload>,
    repeat: usize,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<Vec<Row>> {
    let name = target.name();
    let (mut spawned, addr) = match progress {
        Some(bar) => bar.suspend(|| start(target, settings, server_pin, &[]))?,
        None => start(target, settings, server_pin, &[])?,
    };
    let pid = match target {
        Target::Spawn(_) => spawned.as_ref().map(Spawned::pid),
        Target::External(t) => t.pid,
    };
    if !args.no_prefill {
        let start = Instant::now();
        client::prefill(addr, workload, 100).await?;
        say(
            progress,
            format_args!(
                "[{name}] pre-filled {} keys in {:.2} s",
                workload.keys(),
                start.elapsed().as_secs_f64()
            ),
        );
    }
    let mut rows = Vec::new();
    for &depth in &args.pipeline {
        if let Some(bar) = progress {
            bar.set_message(format!("{name} depth {depth} run {repeat}/{}", args.repeat));
        }
        let cfg = LoadConfig {
            addr,
            server_pid: pid,
            conns: args.conns,
            depth,
            rate: args.rate,
            progress: progress.cloned(),
            warmup: args.warmup,
            duration: args.duration,
            seed: args.seed.wrapping_add(repeat as u64),
        };
        let m: Measured = client::measure(&cfg, workload.clone())
            .await
            .with_context(|| format!("loading {name} at pipeline depth {depth}"))?;
        let mut row = Row::from_measured(name, depth, &m);
        row.target_rate = args.rate;
        say(
            progress,
            format_args!("[{name}] run {repeat}/{}: {}", args.repeat, row.brief()),
        );
        if m.stats.misses > 0 {
            say(
                progress,
                format_args!(
                    "[{name}]   {} get misses (TTLs, deletes, evictions or --no-prefill)",
                    m.stats.misses
                ),
            );
        }
        for (kind, (count, example)) in &m.stats.error_kinds {
            say(
                progress,
                format_args!("[{name}]   ERROR {count} x {kind}; first: {example}"),
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
