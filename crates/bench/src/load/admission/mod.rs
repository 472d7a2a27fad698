//! `memfleet bench admission`: issue 29's two admission-control experiments, with real
//! processes on loopback.
//!
//! - storm (`storm`): a hot-key storm against a pool with `rates = { gets = R }`: the
//!   pool's server must see at most R gets a second (±5%; the GCRA lets a burst of R/100
//!   through at once), and the router's other pool must not notice (its p99 within 10% of
//!   the run without the storm). Repeated `--repeat` times, medians reported.
//! - stall (`stall`): a pool of four servers, one hung, behind a router stopped for
//!   `--stall`: with `max_down_fraction = 0.5` at most half the pool may be marked down;
//!   the same with 1 (no cap) for comparison.
//!
//! Performance goals missed are printed, not failed: only a failed run or a wrong reply
//! fails. With `--out DIR`: `admission.json` and the figures `admission-hot-gets.png`,
//! `admission-other-p99.png`, `admission-stall-down.png` and `admission-stall-failures.png`.

mod fleet;
mod load;
mod report;
mod stall;
mod storm;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use memfleet_sim::duration::parse_duration;

use super::run_log::RunLog;
use super::{cpu, runtime};

/// The parts of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// The hot-key storm against a rate-limited pool.
    Storm,
    /// The router stalled in front of a pool with a hung server.
    Stall,
}

/// `memfleet bench admission`'s flags. Durations and repeats left out take the defaults,
/// or `--quick`'s.
#[derive(Debug, Clone, clap::Args)]
pub struct AdmissionArgs {
    /// Run only these parts (comma-separated: storm,stall).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Part>,
    /// For CI: one repeat, 1 s storm windows, short stall runs (the stall stays --stall).
    #[arg(long)]
    pub quick: bool,
    /// The hot pool's `rates = { gets = R }`, per second.
    #[arg(long, default_value_t = 5000)]
    pub rate: u32,
    /// Requests a second of the paced client on the other pool (gets 90%, sets 10%).
    #[arg(long, default_value_t = 2000.0)]
    pub steady_rate: f64,
    /// Connections of the paced client (one request in flight each).
    #[arg(long, default_value_t = 8)]
    pub steady_conns: usize,
    /// Connections of the storm, each writing --storm-depth gets of one key at a time.
    #[arg(long, default_value_t = 4)]
    pub storm_conns: usize,
    /// Gets per write of each storm connection.
    #[arg(long, default_value_t = 32)]
    pub storm_depth: usize,
    /// Gets per second the storm offers in all (its batches paced); without it, each
    /// connection writes its next batch as soon as the last one's replies are in.
    #[arg(long)]
    pub storm_rate: Option<f64>,
    /// The storm's client and `hot`'s server run under SCHED_IDLE (they get only CPU time
    /// nothing else wants), standing in for other machines on one that has no cores to
    /// spare for them: what is left on `other`'s latency is the router's own work.
    #[arg(long)]
    pub storm_idle: bool,
    /// A control run: the storm goes to `hot`'s server itself, past the router, so that
    /// what it does to `other`'s latency is the machine's share, not the router's (the
    /// rate goal does not apply: the router refuses nothing).
    #[arg(long)]
    pub storm_direct: bool,
    /// Gives the pools' listeners workers of their own (`workers = [...]`): `hot`'s clients
    /// the router's last worker, `other`'s the rest (needs --router-threads 2 or more).
    #[arg(long)]
    pub split_workers: bool,
    /// Measured time of each storm part's phase [default: 5s; --quick 1s].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Runs of each part (medians reported) [default: 3; --quick 1].
    #[arg(long)]
    pub repeat: Option<usize>,
    /// Distinct keys of the clients (all stored first).
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// The router's worker threads (-t).
    #[arg(long, default_value_t = 1)]
    pub router_threads: usize,
    /// How long the router is stopped (SIGSTOP) in the stall part.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub stall: Duration,
    /// Closed-loop connections of the stall part's clients.
    #[arg(long, default_value_t = 16)]
    pub stall_conns: usize,
    /// Requests per batch of the stall part's clients.
    #[arg(long, default_value_t = 4)]
    pub stall_depth: usize,
    /// The stall pool's `server_failure_limit`.
    #[arg(long, default_value_t = 2)]
    pub server_failure_limit: u32,
    /// The stall pool's `timeout_ms`.
    #[arg(long, default_value_t = 200)]
    pub timeout_ms: u64,
    /// The memfleet executable for the servers and the router [default: this executable].
    #[arg(long)]
    pub memfleet_bin: Option<String>,
    /// RNG seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write admission.json and the figures into this directory, with the command that
    /// made them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `memfleet bench admission`.
pub fn bench(args: &AdmissionArgs) -> Result<()> {
    let bin = super::memfleet_bin(&args.memfleet_bin)?;
    let repeat = args.repeat.unwrap_or(if args.quick { 1 } else { 3 });
    let window = args.duration.unwrap_or(if args.quick {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(5)
    });
    if args.storm_rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        bail!("--storm-rate must be a positive number of gets per second");
    }
    if repeat == 0 || args.steady_conns == 0 || args.storm_conns == 0 || args.storm_depth == 0 {
        bail!("--repeat, --steady-conns, --storm-conns and --storm-depth must be at least 1");
    }
    if args.split_workers && args.router_threads < 2 {
        bail!("--split-workers needs --router-threads 2 or more (a worker for each pool)");
    }
    if args.stall_conns == 0 || args.stall_depth == 0 || args.rate == 0 {
        bail!("--stall-conns, --stall-depth and --rate must be at least 1");
    }
    if !(args.steady_rate.is_finite() && args.steady_rate > 0.0) || window.is_zero() {
        bail!("--steady-rate and --duration must be positive");
    }
    let parts: Vec<Part> = if args.only.is_empty() {
        vec![Part::Storm, Part::Stall]
    } else {
        args.only.clone()
    };
    let storm = storm::StormSettings {
        rate: args.rate,
        steady_rate: args.steady_rate,
        steady_conns: args.steady_conns,
        storm_conns: args.storm_conns,
        storm_depth: args.storm_depth,
        storm_rate: args.storm_rate,
        storm_idle: args.storm_idle,
        storm_direct: args.storm_direct,
        split_workers: args.split_workers,
        window_s: window.as_secs_f64(),
        warmup_s: if args.quick { 0.2 } else { 0.5 },
        repeat,
        keys: args.keys,
        value_size: args.value_size,
        router_threads: args.router_threads,
        seed: args.seed,
    };
    let hang_at_s = if args.quick { 0.3 } else { 0.5 };
    let stall_at_s = hang_at_s + if args.quick { 0.7 } else { 1.5 };
    let stall = stall::StallSettings {
        conns: args.stall_conns,
        depth: args.stall_depth,
        keys: args.keys,
        value_size: args.value_size,
        timeout_ms: args.timeout_ms,
        server_failure_limit: args.server_failure_limit,
        server_retry_timeout_ms: 1000,
        hang_at_s,
        stall_at_s,
        stall_s: args.stall.as_secs_f64(),
        duration_s: stall_at_s + args.stall.as_secs_f64() + if args.quick { 2.0 } else { 4.0 },
        router_threads: args.router_threads,
        seed: args.seed,
    };
    println!(
        "memfleet bench admission: {} on {} CPUs; router -t {}, nothing pinned (the router, \
         the servers and both clients share the CPUs as the scheduler places them{})",
        parts
            .iter()
            .map(|p| format!("{p:?}").to_lowercase())
            .collect::<Vec<_>>()
            .join(" + "),
        cpu::online_cpus(),
        args.router_threads,
        if args.storm_idle {
            "; the storm's client and hot's server under SCHED_IDLE"
        } else {
            ""
        }
    );
    if args.split_workers {
        println!(
            "--split-workers: pool hot's clients on router worker {}, pool other's on workers \
             0 to {} (each pool's `workers`)",
            args.router_threads - 1,
            args.router_threads - 2
        );
    }
    let log = RunLog::new();
    log.print_start();
    let (rt, local) = runtime()?;
    let mut results = report::Results::default();
    if parts.contains(&Part::Storm) {
        println!(
            "\nstorm: pool hot has rates = {{ gets = {} }} (burst {}); {} storm connections \
             writing {} gets of one key at a time ({}); other's client paced at {} requests/s on {} \
             connections over {} keys; {} s measured per phase after {} s warm-up, {} repeat(s)",
            storm.rate,
            storm::burst(storm.rate),
            storm.storm_conns,
            storm.storm_depth,
            storm
                .storm_rate
                .map_or("as fast as replies come".to_string(), |r| format!("paced at {r} gets/s in all")),
            storm.steady_rate,
            storm.steady_conns,
            storm.keys,
            storm.window_s,
            storm.warmup_s,
            storm.repeat
        );
        let repeats = local
            .block_on(&rt, storm::run(&bin, &storm))
            .context("the storm part")?;
        print!("{}", report::storm_text(&storm, &repeats));
        results.storm = Some((storm, repeats));
    }
    if parts.contains(&Part::Stall) {
        println!(
            "\nstall: 4 servers in one pool (timeout_ms = {}, server_failure_limit = {}, \
             server_retry_timeout_ms = {}), {} closed-loop connections writing {} requests at \
             a time over {} keys; the last server hung (SIGSTOP) at {} s, the router stopped \
             at {} s for {} s; {} s per run, {} repeat(s) of each max_down_fraction",
            stall.timeout_ms,
            stall.server_failure_limit,
            stall.server_retry_timeout_ms,
            stall.conns,
            stall.depth,
            stall.keys,
            stall.hang_at_s,
            stall.stall_at_s,
            stall.stall_s,
            stall.duration_s,
            repeat
        );
        let mut runs = Vec::new();
        for r in 0..repeat {
            for cap in stall::CAPS {
                let mut s = stall.clone();
                s.seed = s.seed.wrapping_add(r as u64);
                let run = local
                    .block_on(&rt, stall::run(&bin, &s, cap))
                    .with_context(|| format!("the stall run with max_down_fraction = {cap}"))?;
                println!("{}", report::stall_line(&run));
                runs.push(run);
            }
        }
        print!("{}", report::stall_text(&runs));
        results.stall = Some((stall, runs));
    }
    let load_at_end = log.print_end();
    if let Some(dir) = &args.out {
        report::write(dir, &results, &load_at_end)?;
    }
    Ok(())
}
