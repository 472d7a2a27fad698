//! `memfleet bench scale`: how throughput grows with cores, measured on whatever machine it
//! runs on, in three parts (issue 31):
//!
//! - `engine`: Segcache in-process, one pinned thread per core (`engine`);
//! - `server`: `memfleet server -t k` and memcached `-t k` over loopback, the servers pinned
//!   to CPUs `[0, k)` and a multi-threaded load generator to the others (`server`, `drive`);
//! - `router`: `memfleet router -t k` against k nutcracker processes (one per core, as
//!   twemproxy is deployed), both in front of the same backend (`router`).
//!
//! It prints the estimated time first, then one line per measured cell, then one table
//! (`report`) with the machine (`machine`) and the exact command; `--out DIR` also writes
//! `scale.json` and the figures (`scale-engine-zipf.png`, `scale-engine-uniform.png`,
//! `scale-server.png`, `scale-router.png`). It builds nothing and needs no toolchain: the
//! servers are this executable (or `--memfleet-bin`), `--memcached` and `--nutcracker`.

pub mod drive;
pub mod engine;
pub mod machine;
pub mod report;
pub mod router;
pub mod server;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use memfleet_sim::duration::parse_duration;

use self::engine::EngineSettings;
use self::machine::Machine;
use self::report::ScaleResults;

/// The parts of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// The engine in-process.
    Engine,
    /// Servers over loopback.
    Server,
    /// Proxies over loopback.
    Router,
}

/// `memfleet bench scale` flags. Durations, key counts and lists left out take the
/// defaults, or `--quick`'s.
#[derive(Debug, Clone, clap::Args)]
pub struct ScaleArgs {
    /// Run only these parts (comma-separated: engine,server,router).
    #[arg(long, value_enum, value_delimiter = ',', conflicts_with = "skip")]
    pub only: Vec<Part>,
    /// Leave out these parts (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub skip: Vec<Part>,
    /// For CI: tiny durations and key counts, one thread and one worker.
    #[arg(long)]
    pub quick: bool,
    /// Engine thread counts [default: 1,2,4,8,16, those the usable CPUs allow].
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Server and proxy worker counts k [default: 1,2,4,8, those that leave the load
    /// generator at least k CPUs; for the router also a backend CPU per 4 proxy workers].
    /// Given, all run, the load sharing CPUs where too few are left (said in a note).
    #[arg(long, value_delimiter = ',')]
    pub workers: Vec<usize>,
    /// Pipeline depths of the server and router parts.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub pipeline: Vec<usize>,
    /// Measured time per engine cell [default: 1500ms; --quick 200ms].
    #[arg(long, value_parser = parse_duration)]
    pub engine_duration: Option<Duration>,
    /// Measured time per server and router cell [default: 2s; --quick 300ms].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Unmeasured load before each server and router cell [default: 500ms; --quick 100ms].
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Distinct keys, all stored before measuring [default: 1000000; --quick 20000].
    #[arg(long)]
    pub keys: Option<u64>,
    /// Memory of the engine's heap and of every server, in MiB [default: 1024; --quick 64].
    #[arg(long)]
    pub memory: Option<u64>,
    /// Load-generator connections per server or proxy worker.
    #[arg(long, default_value_t = 16)]
    pub conns_per_worker: usize,
    /// The memcached executable (memcached 1.6.45 for the figures).
    #[arg(long, default_value = "memcached")]
    pub memcached: String,
    /// The nutcracker (twemproxy) executable [default: nutcracker on PATH, else
    /// /usr/sbin/nutcracker].
    #[arg(long)]
    pub nutcracker: Option<String>,
    /// The memfleet executable for the servers and routers [default: this executable].
    #[arg(long)]
    pub memfleet_bin: Option<String>,
    /// RNG seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write scale.json and the figures (scale-engine-zipf.png, scale-engine-uniform.png,
    /// scale-server.png, scale-router.png) here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The flags resolved against the defaults, `--quick` and the machine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Settings {
    /// Parts to run.
    pub parts: Vec<Part>,
    /// Engine thread counts.
    pub threads: Vec<usize>,
    /// Server and proxy worker counts.
    pub workers: Vec<usize>,
    /// Whether --workers gave them (then the router part runs them all, whatever fits).
    pub workers_given: bool,
    /// Pipeline depths.
    pub pipeline: Vec<usize>,
    /// Engine cell time, seconds.
    pub engine_duration_s: f64,
    /// Server and router cell time, seconds.
    pub duration_s: f64,
    /// Warm-up per server and router cell, seconds.
    pub warmup_s: f64,
    /// Distinct keys.
    pub keys: u64,
    /// Key size, bytes.
    pub key_size: usize,
    /// Value size, bytes.
    pub value_size: usize,
    /// Heap and server memory, MiB.
    pub memory_mib: u64,
    /// Connections per worker.
    pub conns_per_worker: usize,
    /// memcached executable.
    pub memcached: String,
    /// nutcracker executable.
    pub nutcracker: String,
    /// memfleet executable.
    pub memfleet_bin: String,
    /// RNG seed.
    pub seed: u64,
    /// Usable CPUs, in pinning order.
    pub cpus: Vec<usize>,
}

impl ScaleArgs {
    /// The settings of a run on `cpus`.
    fn settings(&self, cpus: &[usize]) -> Result<Settings> {
        let quick = self.quick;
        let pick = |given: Option<Duration>, quick_ms: u64, default_ms: u64| {
            given
                .unwrap_or(Duration::from_millis(if quick {
                    quick_ms
                } else {
                    default_ms
                }))
                .as_secs_f64()
        };
        let parts: Vec<Part> = [Part::Engine, Part::Server, Part::Router]
            .into_iter()
            .filter(|p| (self.only.is_empty() || self.only.contains(p)) && !self.skip.contains(p))
            .collect();
        let threads = if !self.threads.is_empty() {
            self.threads.clone()
        } else if quick {
            vec![1]
        } else {
            [1, 2, 4, 8, 16]
                .into_iter()
                .filter(|&k| k <= cpus.len())
                .collect()
        };
        let workers = if !self.workers.is_empty() {
            self.workers.clone()
        } else if quick {
            vec![1]
        } else {
            [1, 2, 4, 8]
                .into_iter()
                .filter(|&k| 2 * k <= cpus.len())
                .collect::<Vec<_>>()
        };
        if threads.contains(&0) || workers.contains(&0) || self.pipeline.contains(&0) {
            bail!("--threads, --workers and --pipeline take numbers of at least 1");
        }
        if self.pipeline.is_empty() || self.conns_per_worker == 0 {
            bail!("give at least one --pipeline depth and --conns-per-worker of at least 1");
        }
        let memfleet_bin = super::memfleet_bin(&self.memfleet_bin)?;
        let settings = Settings {
            parts,
            threads: sorted(threads),
            workers: sorted(workers),
            workers_given: !self.workers.is_empty(),
            pipeline: self.pipeline.clone(),
            engine_duration_s: pick(self.engine_duration, 200, 1500),
            duration_s: pick(self.duration, 300, 2000),
            warmup_s: pick(self.warmup, 100, 500),
            keys: self.keys.unwrap_or(if quick { 20_000 } else { 1_000_000 }),
            key_size: engine::KEY_SIZE,
            value_size: engine::VALUE_SIZE,
            memory_mib: self.memory.unwrap_or(if quick { 64 } else { 1024 }),
            conns_per_worker: self.conns_per_worker,
            memcached: self.memcached.clone(),
            nutcracker: self.nutcracker.clone().unwrap_or_else(default_nutcracker),
            memfleet_bin,
            seed: self.seed,
            cpus: cpus.to_vec(),
        };
        if settings.engine_duration_s <= 0.0 || settings.duration_s <= 0.0 {
            bail!("--engine-duration and --duration must be positive");
        }
        Ok(settings)
    }
}

fn sorted(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v.dedup();
    v
}

/// nutcracker on PATH, else Debian's.
fn default_nutcracker() -> String {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("nutcracker"))
                .find(|p| p.is_file())
        })
        .map_or("/usr/sbin/nutcracker".into(), |p| p.display().to_string())
}

impl Settings {
    /// One server or router cell's load: `k` workers' worth of connections at `depth` to
    /// `addrs` (whose processes are `pids`), from the load generator's `cpus`.
    pub(crate) fn cell_load<'a>(
        &'a self,
        target: (&'a [std::net::SocketAddr], &'a [u32]),
        k: usize,
        depth: usize,
        cpus: &'a [usize],
        spec: &'a memfleet_loadgen::workload::WorkloadSpec,
    ) -> drive::Load<'a> {
        drive::Load {
            addrs: target.0,
            pids: target.1,
            conns: self.conns_per_worker * k,
            depth,
            cpus,
            warmup: Duration::from_secs_f64(self.warmup_s),
            duration: Duration::from_secs_f64(self.duration_s),
            spec,
            seed: self.seed,
        }
    }

    /// The engine part's settings.
    fn engine(&self) -> EngineSettings {
        EngineSettings {
            threads: self.threads.clone(),
            keys: self.keys,
            memory_bytes: (self.memory_mib << 20) as usize,
            duration: Duration::from_secs_f64(self.engine_duration_s),
            seed: self.seed,
            cpus: self.cpus.clone(),
        }
    }

    /// Seconds the parts should take, roughly: measured and warm-up time plus fills and
    /// starts at rates a 16-core machine reaches with a release build.
    fn estimate_s(&self) -> f64 {
        let fill = self.keys as f64 / 500_000.0;
        let mut total = 0.0;
        if self.parts.contains(&Part::Engine) {
            let cells = engine::cells(&self.engine()) as f64;
            total += cells * (self.engine_duration_s + fill / 2.0 + 0.1);
        }
        let cell = self.warmup_s + self.duration_s + 0.2;
        let per_k = self.pipeline.len() as f64 * cell;
        if self.parts.contains(&Part::Server) {
            total += self.workers.len() as f64 * 2.0 * (fill + 0.5 + per_k);
        }
        if self.parts.contains(&Part::Router) {
            total += fill + router::workers(self).len() as f64 * 3.0 * (0.5 + per_k);
        }
        total
    }
}

/// Runs the experiment: the parts asked for, the table, `--out`'s files. Fails after
/// printing everything if any reply was wrong.
pub fn bench(args: &ScaleArgs) -> Result<()> {
    let started = std::time::Instant::now();
    let machine = Machine::now()?;
    let s = args.settings(&machine.cpus)?;
    let mut results = ScaleResults::new(machine, s.clone());
    results.estimated_s = s.estimate_s();
    println!(
        "memfleet bench scale: {} keys of {} bytes, values of {} bytes, {} MiB; engine {:?} s \
         per cell, server/router {:?} s warm-up + {:?} s per cell; estimated {:.0} s",
        s.keys,
        s.key_size,
        s.value_size,
        s.memory_mib,
        s.engine_duration_s,
        s.warmup_s,
        s.duration_s,
        results.estimated_s
    );
    println!("machine: {}", results.machine.line());
    println!("command: {}", results.command);
    if s.parts.contains(&Part::Engine) {
        results.engine = engine::run(&s.engine())?;
    }
    if s.parts.contains(&Part::Server) {
        results.server = server::run(&s, &mut results.notes)?;
    }
    if s.parts.contains(&Part::Router) {
        results.router = router::run(&s, &mut results.notes)?;
    }
    results.elapsed_s = started.elapsed().as_secs_f64();
    results.finish();
    println!();
    print!("{}", results.table());
    if let Some(dir) = &args.out {
        let path = memfleet_results::write_json(dir, "scale", "scale", &results)?;
        println!("results: {}", path.display());
        for figure in results.figures(dir)? {
            println!("figure: {}", figure.display());
        }
    }
    let errors = results.errors();
    if errors > 0 {
        bail!("{errors} error(s): wrong replies or failed connections (details above)");
    }
    Ok(())
}
