//! `memfleet bench load` (and the home of every other experiment's module; the subcommands
//! are `cli`'s): a memcached text-protocol load generator that compares servers side by
//! side in one run. For each target (started here with
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

pub mod admission;
pub mod args;
pub mod cli;
pub mod client_bench;
pub mod discovery;
pub mod expiry;
pub mod flash;
pub mod gutter;
pub mod herd;
pub mod invalidation;
mod invalidator_metrics;
mod look_aside;
pub mod migration;
pub mod regions;
pub mod replay;
pub mod restart;
mod run_log;
pub mod scale;
mod table;
mod timeline;
pub mod udp;
pub mod warmup;

// The load generator the experiments share (`memfleet-loadgen`), under the paths the
// experiments and tests have always used.
pub use memfleet_loadgen::{
    client, conn, cpu, open_loop, replay as replay_client, reply, report, server_stats, target,
    workload,
};

use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use self::client::{LoadConfig, Measured};
use self::report::Row;
use self::target::{ServerSettings, SpawnSpec};
use self::workload::{Protocol, Workload, WorkloadSpec};
use memfleet_testkit::Spawned;

pub use self::args::{parse_ttl, LoadArgs, Target, WorkloadPreset};
pub use self::cli::Experiment;

pub use memfleet_results::provenance::{command_line, load_average};

/// The memfleet executable an experiment starts servers and routers with: `--memfleet-bin`
/// when given, else this one.
pub(crate) fn memfleet_bin(given: &Option<String>) -> Result<String> {
    match given {
        Some(b) => Ok(b.clone()),
        None => Ok(std::env::current_exe()
            .context("finding this executable (give --memfleet-bin)")?
            .display()
            .to_string()),
    }
}

/// Runs the benchmark, prints the per-run lines and the table, and returns the table's
/// rows (medians over repeats) without judging them. [`run`] is this plus the verdict.
pub fn bench(args: &LoadArgs) -> Result<Vec<Row>> {
    if args.servers.targets.is_empty() {
        bail!("nothing to load: give --spawn memcached|memfleet|floor|NAME=CMD or --target NAME=HOST:PORT[,pid=PID]");
    }
    if args.run.clients.conns == 0
        || args.run.repeat == 0
        || args.pipeline.contains(&0)
        || args.pipeline.is_empty()
    {
        bail!("--conns, --repeat and every --pipeline depth must be at least 1");
    }
    if args.run.clients.duration.is_zero() {
        bail!("--duration must be positive");
    }
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            bail!("--rate must be a positive number of requests per second, got {rate}");
        }
    }
    let spec = args.workload_spec().map_err(anyhow::Error::msg)?;
    let targets = args.servers.targets.list();
    refuse_floor_beyond_its_replies(&targets, &spec)?;
    let workload = Rc::new(Workload::from_spec(spec.clone()).map_err(anyhow::Error::msg)?);
    let command = command_line();
    let load_at_start = load_average();
    let cpus = cpu::online_cpus();

    println!(
        "memfleet bench: {} connections, pipeline {}, {}, {} keys ({}), {:.0}% get / {:.0}% set / \
         {:.0}% delete, {} protocol, key size {}, value size {}, TTL {}, {:?} warm-up + {:?} \
         measured per run, {} repeat(s)",
        args.run.clients.conns,
        args.pipeline
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(","),
        args.rate
            .map_or("closed loop".into(), |r| format!("open loop at {r} ops/s")),
        args.run.keys.keys,
        args.run
            .keys
            .zipf
            .map_or("uniform".into(), |s| format!("zipf {s}")),
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
        args.run.clients.duration,
        args.run.repeat
    );
    println!("load average at start: {load_at_start} ({cpus} CPUs online)");
    println!("command: {command}");

    let (client_pin, server_pin) = args.servers.pinning.pins();
    let _pinned = client_pin.map(cpu::pin_this_thread).transpose()?;
    if let (Some(c), Some(s)) = (client_pin, server_pin) {
        println!("pinning: load generator on CPU {c}, spawned servers on CPU {s}");
    }
    let settings = args.server_settings();
    let progress = progress_bar(args, targets.len());
    let (rt, local) = runtime()?;
    // runs[target][depth] holds one row per repeat.
    let mut runs: Vec<Vec<Vec<Row>>> = vec![vec![Vec::new(); args.pipeline.len()]; targets.len()];
    local.block_on(&rt, async {
        for r in 1..=args.run.repeat {
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
    if args.run.repeat > 1 {
        println!("median of {} runs:", args.run.repeat);
    }
    print!("{}", report::table(&rows));
    if args.run.repeat > 1 {
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
        let results = report::LoadResults::new(run_settings(args, &spec), &rows);
        run_log::write_results(dir, "load", &results)?;
        let figure = dir.join("load-latency-cdf.png");
        memfleet_results::plot::latency_cdf(&figure, "Latency CDF", &latency_series(&rows))?;
        println!("figure: {}", figure.display());
    }
    Ok(rows)
}

/// What `--out` records of a load run: its flags and its resolved workload `spec`.
fn run_settings(args: &LoadArgs, spec: &WorkloadSpec) -> report::RunSettings {
    report::RunSettings {
        conns: args.run.clients.conns,
        pipeline: args.pipeline.clone(),
        rate: args.rate,
        warmup_s: args.warmup.as_secs_f64(),
        duration_s: args.run.clients.duration.as_secs_f64(),
        repeat: args.run.repeat,
        seed: args.run.seed,
        ..report::RunSettings::of_workload(spec)
    }
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
    let runs = (targets * args.pipeline.len() * args.run.repeat) as u32;
    let total = (args.warmup + args.run.clients.duration) * runs;
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

/// Runs the load experiment and fails (after printing everything) if any reply was wrong or
/// any connection failed.
pub fn run(args: &LoadArgs) -> Result<()> {
    let rows = bench(args)?;
    let errors: u64 = rows.iter().map(|r| r.errors).sum();
    if errors > 0 {
        bail!("{errors} error(s): wrong replies or failed connections (details above)");
    }
    Ok(())
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
    let pid = target.pid(spawned.as_ref());
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
            bar.set_message(format!(
                "{name} depth {depth} run {repeat}/{}",
                args.run.repeat
            ));
        }
        let cfg = LoadConfig {
            addr,
            server_pid: pid,
            conns: args.run.clients.conns,
            depth,
            rate: args.rate,
            progress: progress.cloned(),
            warmup: args.warmup,
            duration: args.run.clients.duration,
            seed: args.run.seed.wrapping_add(repeat as u64),
        };
        let m: Measured = client::measure(&cfg, workload.clone())
            .await
            .with_context(|| format!("loading {name} at pipeline depth {depth}"))?;
        let mut row = Row::from_measured(name, depth, &m);
        row.target_rate = args.rate;
        say(
            progress,
            format_args!("[{name}] run {repeat}/{}: {}", args.run.repeat, row.brief()),
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
