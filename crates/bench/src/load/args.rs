//! The flag groups the experiments of `memfleet bench` share (`Targets`, `Spawning`,
//! `Pinning` and `Servers` for the servers under test; `Clients`, `Keys`, `ClosedLoop` and
//! `LookAside` for the load; `MemfleetBin`) and the load experiment's own flags
//! (`LoadArgs`). Not here: the other experiments' own flags (each in its module: e.g.
//! `herd::HerdArgs`), the subcommand list (`cli`), running anything (the parent module).

use anyhow::Result;
use memfleet_loadgen::cpu;
use memfleet_loadgen::target::{self, ExternalTarget, ServerSettings, SpawnSpec};
use memfleet_loadgen::workload::{Mix, Protocol, Workload, WorkloadSpec};
use memfleet_sim::duration::parse_duration;
use memfleet_sim::sizes::{KeySizes, SizeDistribution, ValueSizes};
use memfleet_sim::workload::TtlMix;
use memfleet_testkit::Spawned;
use std::time::Duration;

/// The servers under test: started for the run or already running.
#[derive(Debug, Clone, clap::Args)]
pub struct Targets {
    /// Start this server for the run, on a free port: memcached, memfleet, floor (a server
    /// that only reads and writes its socket, not a cache: the cost of socket I/O alone), or
    /// NAME='COMMAND ... {port} ...' ({memory} and {threads} become --server-memory and
    /// --server-threads). Repeatable; spawned servers come before --target ones, and the
    /// first target is the anchor of the ratio columns.
    #[arg(long, value_parser = target::parse_spawn)]
    pub spawn: Vec<SpawnSpec>,
    /// A running server: NAME=HOST:PORT[,pid=PID] (the PID gives its CPU time). Repeatable.
    #[arg(long, value_parser = target::parse_target)]
    pub target: Vec<ExternalTarget>,
}

/// A server of the run: started by it or already running.
pub enum Target {
    /// `--spawn`.
    Spawn(SpawnSpec),
    /// `--target`.
    External(ExternalTarget),
}

impl Target {
    /// Its name in the report.
    pub fn name(&self) -> &str {
        match self {
            Target::Spawn(s) => s.name(),
            Target::External(t) => &t.name,
        }
    }

    /// Its process ID, for its CPU time: of `spawned`, the process started for it, or the
    /// one `--target` gave.
    pub(crate) fn pid(&self, spawned: Option<&Spawned>) -> Option<u32> {
        match self {
            Target::Spawn(_) => spawned.map(Spawned::pid),
            Target::External(t) => t.pid,
        }
    }
}

impl Targets {
    /// Whether no server was given.
    pub fn is_empty(&self) -> bool {
        self.spawn.is_empty() && self.target.is_empty()
    }

    /// The targets in report order: spawned servers first, then `--target` ones.
    pub(crate) fn list(&self) -> Vec<Target> {
        self.spawn
            .iter()
            .cloned()
            .map(Target::Spawn)
            .chain(self.target.iter().cloned().map(Target::External))
            .collect()
    }
}

/// The memfleet executable, for experiments that start memfleet servers or routers.
#[derive(Debug, Clone, clap::Args)]
pub struct MemfleetBin {
    /// The memfleet executable for --spawn memfleet and --spawn floor, and for the servers and
    /// routers an experiment starts itself.
    #[arg(long, default_value = "target/release/memfleet")]
    pub memfleet_bin: String,
}

/// How the servers an experiment starts are started.
#[derive(Debug, Clone, clap::Args)]
pub struct Spawning {
    /// Worker threads of spawned servers (-t).
    #[arg(long, default_value_t = 1)]
    pub server_threads: u32,
    /// Memory of spawned servers in MiB (-m).
    #[arg(long, default_value_t = 1024)]
    pub server_memory: u64,
    /// The memcached executable for --spawn memcached.
    #[arg(long, default_value = "memcached")]
    pub memcached_bin: String,
    /// The memfleet executable.
    #[command(flatten)]
    pub memfleet: MemfleetBin,
}

impl Spawning {
    /// How spawned servers are started (`udp`: also serve UDP on the TCP port number;
    /// `value_size`: what the floor server answers, the only server that reads it).
    pub(crate) fn settings(&self, udp: bool, value_size: usize) -> ServerSettings {
        ServerSettings {
            memcached_bin: self.memcached_bin.clone(),
            memfleet_bin: self.memfleet.memfleet_bin.clone(),
            threads: self.server_threads,
            memory_mib: self.server_memory,
            value_size,
            udp,
        }
    }
}

/// Which CPUs the load generator and the spawned servers run on.
#[derive(Debug, Clone, clap::Args)]
pub struct Pinning {
    /// CPU that spawned servers are pinned to (taskset -c).
    #[arg(long, default_value_t = 1)]
    pub server_cpu: usize,
    /// CPU the load generator is pinned to.
    #[arg(long, default_value_t = 0)]
    pub client_cpu: usize,
    /// Pin nothing.
    #[arg(long)]
    pub no_pin: bool,
}

impl Pinning {
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

/// The key space of the requests.
#[derive(Debug, Clone, clap::Args)]
pub struct Keys {
    /// Distinct keys (key:0 .. key:N-1), all stored before measuring.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Value sizes in bytes: N; load also takes A-B (uniform), fb-wildcard, fb-app,
    /// fb-replicated, fb-regional (Facebook's Table 3 pools) or etc (the ETC workload); a
    /// key's size is fixed.
    #[arg(long, default_value = "100")]
    pub value_size: ValueSizes,
    /// Draw keys from a Zipf distribution with this exponent instead of uniformly.
    #[arg(long)]
    pub zipf: Option<f64>,
}

impl Keys {
    /// ` (Zipf S)` or ` (uniform)`: how keys are drawn, after their count.
    pub fn distribution(&self) -> String {
        self.zipf
            .map_or(String::from(" (uniform)"), |z| format!(" (Zipf {z})"))
    }

    /// `--value-size` of an experiment that takes one fixed size (`what` names it).
    pub fn fixed_value_size(&self, what: &str) -> Result<usize> {
        self.value_size.fixed(what).map_err(anyhow::Error::msg)
    }

    /// The workload of an experiment that only reads: gets of `--keys` keys with
    /// `popularity` (uniform when `None`) and one fixed `--value-size` (`what` names the
    /// experiment in the error when a size distribution was given).
    pub fn gets_workload(&self, what: &str, popularity: Option<f64>) -> Result<Workload> {
        Workload::new(self.keys, 1.0, self.fixed_value_size(what)?, popularity)
            .map_err(anyhow::Error::msg)
    }
}

/// The clients of a run and how long they run.
#[derive(Debug, Clone, clap::Args)]
pub struct Clients {
    /// Client connections: the experiment's readers, writers or look-aside clients, each a
    /// closed loop on a connection of its own.
    #[arg(short = 'c', long, default_value_t = 50)]
    pub conns: usize,
    /// Measured time per run, e.g. 10s, 500ms, 1m.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub duration: Duration,
}

/// The servers under test (given or started) and where they run: the experiments that
/// compare servers side by side.
#[derive(Debug, Clone, clap::Args)]
pub struct Servers {
    /// The servers under test.
    #[command(flatten)]
    pub targets: Targets,
    /// How spawned servers are started.
    #[command(flatten)]
    pub spawning: Spawning,
    /// Where the load generator and the servers run.
    #[command(flatten)]
    pub pinning: Pinning,
}

/// Closed-loop clients requesting keys, repeated: load, udp and client.
#[derive(Debug, Clone, clap::Args)]
pub struct ClosedLoop {
    /// The clients and the run time.
    #[command(flatten)]
    pub clients: Clients,
    /// The keys and values requested.
    #[command(flatten)]
    pub keys: Keys,
    /// Run everything N times (targets interleaved) and report medians.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// RNG seed of the request streams.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl ClosedLoop {
    /// The `parameters` of a closed-loop report (`udp` and `client`): the load, and what
    /// its rows are.
    pub(crate) fn parameters(&self, rows_are: &str) -> serde_json::Value {
        serde_json::json!({
            "conns": self.clients.conns,
            "keys": self.keys.keys,
            "value_size": self.keys.value_size.to_string(),
            "duration_s": self.clients.duration.as_secs_f64(),
            "repeat": self.repeat,
            "rows_are": rows_are,
        })
    }
}

/// Look-aside clients in front of a simulated database, against memfleet servers and a
/// router the experiment starts itself: gutter and warmup.
#[derive(Debug, Clone, clap::Args)]
pub struct LookAside {
    /// The clients and the run time.
    #[command(flatten)]
    pub clients: Clients,
    /// The keys and values requested.
    #[command(flatten)]
    pub keys: Keys,
    /// The memfleet executable.
    #[command(flatten)]
    pub memfleet: MemfleetBin,
    /// How long a simulated database query takes.
    #[arg(long, alias = "herd-db-latency", value_parser = parse_duration, default_value = "10ms")]
    pub db_latency: Duration,
}

impl LookAside {
    /// The workload in words, for an experiment's first line: `N look-aside clients, K keys
    /// (Zipf S), database queries take D`.
    pub fn describe(&self) -> String {
        format!(
            "{} look-aside clients, {} keys{}, database queries take {:?}",
            self.clients.conns,
            self.keys.keys,
            self.keys.distribution(),
            self.db_latency
        )
    }
}

/// `memfleet bench load`: the request mix at each pipeline depth.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// The servers under test.
    #[command(flatten)]
    pub servers: Servers,
    /// The clients, the keys, the repeats.
    #[command(flatten)]
    pub run: ClosedLoop,
    /// Pipeline depths (requests per batch, written at once), comma-separated; one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub pipeline: Vec<usize>,
    /// Fraction of requests that are gets (the rest are sets).
    #[arg(long, default_value_t = 0.9)]
    pub get_ratio: f64,
    /// Unmeasured load before each measured phase.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub warmup: Duration,
    /// Do not store every key first (the servers already hold them).
    #[arg(long)]
    pub no_prefill: bool,
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
    /// Key sizes in bytes: N, A-B (uniform) or etc (the ETC workload); keys are `key:<n>`
    /// padded to the size (never shorter than `key:<n>`). Default: `key:<n>` unpadded.
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
    /// Write the results as JSON (and the latency CDF as PNG) into this directory, with the
    /// command that made them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
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

impl LoadArgs {
    /// The requests: `--workload`, or the mix, sizes, TTLs and protocol given one by one.
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
                self.run.keys.value_size.0.clone(),
            ),
        };
        Ok(WorkloadSpec {
            keys: self.run.keys.keys,
            mix,
            zipf: self.run.keys.zipf,
            key_sizes,
            value_sizes,
            ttl: self.ttl.clone(),
            protocol: self.protocol,
        })
    }

    /// How spawned servers are started: only the floor server reads the value size, and
    /// `bench` refuses floor with a distribution.
    pub(crate) fn server_settings(&self) -> ServerSettings {
        let value_size = self.run.keys.value_size.0.fixed().unwrap_or_default();
        self.servers.spawning.settings(false, value_size)
    }
}
