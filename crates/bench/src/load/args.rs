//! `memfleet bench`'s flags (`LoadArgs`): the targets, the load, the workload, and each
//! scenario's own options; the scenario list (`Scenario`). Not here: running them (the
//! parent module).

use anyhow::Result;
use memfleet_loadgen::cpu;
use memfleet_loadgen::target::{self, ExternalTarget, ServerSettings, SpawnSpec};
use memfleet_loadgen::workload::{Mix, Protocol, Workload, WorkloadSpec};
use memfleet_sim::duration::parse_duration;
use memfleet_sim::sizes::{KeySizes, SizeDistribution, ValueSizes};
use memfleet_sim::workload::TtlMix;
use std::time::Duration;

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
    /// invalidation: hang the second cluster's router (SIGSTOP, then SIGCONT) for this long,
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
    #[arg(long, value_parser = parse_ttl_range, default_value = "2-10")]
    pub expiry_short_ttl: TtlRange,
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

    /// The `parameters` of a closed-loop report (`--scenario client` and `udp`): the load,
    /// and what its rows are.
    pub(crate) fn closed_loop_parameters(&self, rows_are: &str) -> serde_json::Value {
        serde_json::json!({
            "conns": self.conns,
            "keys": self.keys,
            "value_size": self.value_size.to_string(),
            "duration_s": self.duration.as_secs_f64(),
            "repeat": self.repeat,
            "rows_are": rows_are,
        })
    }
}

/// The TTL of long-lived items: longer than any run, so they never expire in one.
pub const LONG_TTL: u32 = 3600;

/// The range short TTLs are drawn from, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlRange {
    /// Shortest.
    pub min: u32,
    /// Longest.
    pub max: u32,
}

/// Parses `MIN-MAX` or a single TTL, in seconds (at least 1).
pub fn parse_ttl_range(s: &str) -> Result<TtlRange, String> {
    let (min, max) = s.split_once('-').unwrap_or((s, s));
    let parse = |n: &str| n.trim().parse::<u32>().ok().filter(|&n| n >= 1);
    match (parse(min), parse(max)) {
        (Some(min), Some(max)) if min <= max && max < LONG_TTL => Ok(TtlRange { min, max }),
        _ => Err(format!(
            "bad TTL range {s:?}: MIN-MAX seconds with 1 <= MIN <= MAX < {LONG_TTL}, like 2-10"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_ranges() {
        assert_eq!(parse_ttl_range("2-10"), Ok(TtlRange { min: 2, max: 10 }));
        assert_eq!(parse_ttl_range("5"), Ok(TtlRange { min: 5, max: 5 }));
        assert!(parse_ttl_range("10-2").is_err());
        assert!(parse_ttl_range("0-3").is_err());
        assert!(parse_ttl_range("2-99999").is_err());
        assert!(parse_ttl_range("soon").is_err());
    }
}
