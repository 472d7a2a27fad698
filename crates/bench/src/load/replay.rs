//! `memfleet bench replay`: a trace (or a seeded synthetic workload) replayed
//! against live servers at several memory sizes, for sizing. For each `--spawn` server and
//! each `--memory-sizes` entry a fresh server is started with that memory (`-m`), the trace is
//! replayed with look-aside semantics ([`super::replay_client`]: same rules and counters as
//! `memfleet sim`), and the miss ratio is reported overall and per window of trace time,
//! beside the memory the server says it uses (`stats`: `bytes` of `limit_maxbytes`) and its
//! resident set: memcached's `-m` counts slab pages and memfleet's counts segments, so the
//! same `-m` does not mean the same bytes of items.
//!
//! Prints a table per server and size, then the miss ratio over the trace; with `--out DIR`
//! writes `replay.json`, `replay-sizing.png` (miss ratio vs memory, one line per server: the
//! sizing curve) and `replay-over-time.png` (miss ratio per window, one line per server and
//! size). Trace time and TTLs under a compressed clock: see
//! [`super::replay_client::Pacing`]. Not here: the connections (`replay_client`), the
//! trace readers and synthetic generator (`memfleet_sim`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::args::{Pinning, Spawning};
use super::replay_client::{self, LiveReport, Pacing, ReplayConfig};
use super::table::{Column, Table};
use super::target::{self, SpawnSpec};
use super::{cpu, start, Target};
use memfleet_results::plot::{self, Series};
use memfleet_sim::report::Report;
use memfleet_sim::synthetic::SyntheticConfig;
use memfleet_sim::workload::Workload;
use memfleet_sim::{Source, DEFAULT_RATE};

/// Synthetic requests replayed when neither --trace nor --requests says otherwise.
pub const DEFAULT_SYNTHETIC_REQUESTS: u64 = 1_000_000;

/// `memfleet bench replay`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Start this server afresh at each --memory-sizes entry: memcached, memfleet, or
    /// NAME='COMMAND ... {port} ... {memory} ...' ({memory}: the entry, {threads}:
    /// --server-threads). Repeatable.
    #[arg(long, value_parser = target::parse_spawn)]
    pub spawn: Vec<SpawnSpec>,
    /// How spawned servers are started.
    #[command(flatten)]
    pub spawning: Spawning,
    /// Where the load generator and the servers run.
    #[command(flatten)]
    pub pinning: Pinning,
    /// Memory sizes in MiB, comma-separated; a fresh server is started at each (instead of
    /// --server-memory).
    #[arg(long, value_delimiter = ',', default_value = "16,32,64")]
    pub memory_sizes: Vec<u64>,
    /// The trace to replay (Twitter CSV, Twitter/libCacheSim twr, oracleGeneral); without
    /// it, a synthetic workload (--workload, --keys, --zipf, --seed).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// The trace's format; by default guessed from its name (.csv, *oracleGeneral*).
    #[arg(long, value_enum)]
    pub trace_format: Option<memfleet_sim::trace::TraceFormat>,
    /// Requests to replay [default: 1000000 synthetic, the whole trace otherwise].
    #[arg(long, alias = "replay-requests")]
    pub requests: Option<u64>,
    /// Trace seconds per wall second; TTLs are divided by it (0: unpaced, TTLs as recorded).
    #[arg(long, default_value_t = 100.0)]
    pub speedup: f64,
    /// Synthetic workload without --trace: c, u1, u2, n, mix or a TTL mix like
    /// 120:0.5,3600:0.5 (as memfleet sim --workload).
    #[arg(long, alias = "replay-workload", default_value = "mix")]
    pub workload: String,
    /// Distinct keys of the synthetic workload.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Zipf exponent of the synthetic workload's key popularity [default: 1.0].
    #[arg(long)]
    pub zipf: Option<f64>,
    /// RNG seed of the synthetic workload.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Width of a miss-ratio window, in trace seconds.
    #[arg(long, alias = "replay-window", default_value_t = 60)]
    pub window: u32,
    /// Connections (a key always goes over the same one).
    #[arg(short = 'c', long, alias = "replay-conns", default_value_t = 4)]
    pub conns: usize,
    /// Requests per pipelined batch on each connection.
    #[arg(long, alias = "replay-depth", default_value_t = 32)]
    pub depth: usize,
    /// Write replay.json, replay-sizing.png and replay-over-time.png into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

/// One server at one memory size, as printed and written to `replay.json`: the replay's
/// [`LiveReport`] (its report's `memory_used` and `items` are the server's `stats` `bytes` and
/// `curr_items` at the end), and what else the server and the OS said at the end.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayRow {
    /// Server name (`memfleet`, `memcached`, ...).
    pub server: String,
    /// `-m` it was started with, MiB.
    pub memory_mib: u64,
    /// Counters, overall and per window of trace time.
    #[serde(flatten)]
    pub live: LiveReport,
    /// `stats limit_maxbytes`.
    pub limit_maxbytes: Option<u64>,
    /// `stats evictions`.
    pub evictions: Option<u64>,
    /// Resident set of the server process at the end, bytes.
    pub rss_bytes: Option<u64>,
}

impl ReplayRow {
    fn new(
        server: &str,
        memory_mib: u64,
        mut live: LiveReport,
        stats: &HashMap<String, u64>,
    ) -> Self {
        live.report.memory_used = stats.get("bytes").copied();
        live.report.items = stats.get("curr_items").copied();
        ReplayRow {
            server: server.to_string(),
            memory_mib,
            live,
            limit_maxbytes: stats.get("limit_maxbytes").copied(),
            evictions: stats.get("evictions").copied(),
            rss_bytes: None,
        }
    }

    fn report(&self) -> &Report {
        &self.live.report
    }

    fn requests_per_sec(&self) -> f64 {
        self.report().requests as f64 / self.report().elapsed.as_secs_f64().max(1e-9)
    }
}

#[derive(Debug, Serialize)]
struct ReplayResult<'a> {
    workload: String,
    speedup: f64,
    conns: usize,
    depth: usize,
    rows: &'a [ReplayRow],
}

/// The workload of `args`: the trace, or the synthetic preset.
fn source(args: &ReplayArgs) -> Result<(Source, Option<u64>)> {
    if let Some(path) = &args.trace {
        return Ok((Source::trace(path, args.trace_format)?, args.requests));
    }
    let cfg = SyntheticConfig {
        keys: args.keys,
        requests: args.requests.unwrap_or(DEFAULT_SYNTHETIC_REQUESTS),
        rate: DEFAULT_RATE,
        alpha: args.zipf.unwrap_or(1.0),
        write_ratio: 0.0,
        seed: args.seed,
        workload: Workload::parse(&args.workload).map_err(anyhow::Error::msg)?,
        drift: 0.0,
        value_size_late: None,
    };
    cfg.validate().map_err(anyhow::Error::msg)?;
    Ok((Source::Synthetic(cfg), None))
}

fn check(args: &ReplayArgs) -> Result<()> {
    if args.spawn.is_empty() {
        bail!(
            "replay starts a fresh server per memory size: give --spawn memfleet, \
             --spawn memcached or --spawn NAME=CMD (with {{port}})"
        );
    }
    if args.memory_sizes.is_empty() || args.memory_sizes.contains(&0) {
        bail!("--memory-sizes needs sizes in MiB, like 16,32,64");
    }
    if args.conns == 0 || args.depth == 0 || args.window == 0 {
        bail!("--conns, --depth and --window must be at least 1");
    }
    if !(args.speedup.is_finite() && args.speedup >= 0.0) {
        bail!("--speedup must be 0 (unpaced) or positive");
    }
    Ok(())
}

/// `memfleet bench replay`: prints the tables, writes `--out`, fails on any wrong reply.
pub fn bench(args: &ReplayArgs) -> Result<()> {
    check(args)?;
    let (source, limit) = source(args)?;
    let config = ReplayConfig {
        conns: args.conns,
        depth: args.depth,
        window_secs: args.window,
        pacing: Pacing {
            speedup: args.speedup,
        },
    };
    let load_at_start = super::load_average();
    println!("memfleet bench replay: {}", source.describe());
    println!(
        "look-aside replay over {} connections x {} pipelined; {}; window {} trace s",
        config.conns,
        config.depth,
        if args.speedup > 0.0 {
            format!(
                "{}x trace time, TTLs divided by {}",
                args.speedup, args.speedup
            )
        } else {
            "unpaced, TTLs as recorded".to_string()
        },
        config.window_secs
    );
    println!("load average at start: {load_at_start}");
    println!("command: {}", super::command_line());

    let (client_pin, server_pin) = args.pinning.pins();
    let _pinned = client_pin.map(cpu::pin_this_thread).transpose()?;
    let (rt, local) = super::runtime()?;
    let mut rows = Vec::new();
    for target in args.spawn.iter().cloned().map(Target::Spawn) {
        for &mib in &args.memory_sizes {
            let mut settings = args.spawning.settings(false, 0);
            settings.memory_mib = mib;
            let row = local.block_on(
                &rt,
                replay_one(&target, &settings, server_pin, mib, &source, limit, &config),
            )?;
            let r = row.report();
            println!(
                "[{}] {mib} MiB: miss ratio {:.4} ({} of {} gets), {:.1} s, {:.0} req/s, lag {:.2} s",
                row.server,
                r.miss_ratio(),
                r.misses,
                r.gets,
                r.elapsed.as_secs_f64(),
                row.requests_per_sec(),
                row.live.lag.as_secs_f64()
            );
            rows.push(row);
        }
    }

    println!();
    print!("{}", sizing_table(&rows));
    println!();
    print!("{}", windows_table(&rows));
    let lagging = rows
        .iter()
        .filter(|r| r.live.lag > Duration::from_secs(1))
        .count();
    if args.speedup > 0.0 && lagging > 0 {
        println!(
            "note: {lagging} run(s) fell over 1 s behind the {}x schedule: their items expired \
             earlier in the trace than recorded (lower --speedup)",
            args.speedup
        );
    }
    if let Some(dir) = &args.out {
        for path in write_out(dir, &source.describe(), args, &config, &rows)? {
            println!("wrote {}", path.display());
        }
    }
    println!(
        "load average: {load_at_start} at start, {} at end",
        super::load_average()
    );
    let errors: u64 = rows.iter().map(|r| r.live.errors).sum();
    if errors > 0 {
        bail!("{errors} wrong repl(y/ies) during the replay (first ones above)");
    }
    Ok(())
}

async fn replay_one(
    target: &Target,
    settings: &super::target::ServerSettings,
    server_pin: Option<usize>,
    mib: u64,
    source: &Source,
    limit: Option<u64>,
    config: &ReplayConfig,
) -> Result<ReplayRow> {
    let (spawned, addr) = start(target, settings, server_pin, &[])?;
    let mut spawned = spawned.context("replay needs a spawned server")?;
    let live = replay_client::replay(addr, source.open(limit)?, target.name(), config)
        .await
        .with_context(|| format!("replaying against {} at {mib} MiB", target.name()))?;
    spawned.check_alive()?;
    if let Some(first) = &live.first_error {
        println!(
            "[{}] {} wrong replies; first: {first}",
            target.name(),
            live.errors
        );
    }
    let stats = server_stats(addr).await.unwrap_or_else(|e| {
        println!("[{}] no stats: {e:#}", target.name());
        HashMap::new()
    });
    let mut row = ReplayRow::new(target.name(), mib, live, &stats);
    row.rss_bytes = resident_bytes(spawned.pid());
    Ok(row)
}

/// The server's numeric `stats`.
async fn server_stats(addr: SocketAddr) -> Result<HashMap<String, u64>> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(b"stats\r\n").await?;
    let mut text = Vec::new();
    while !text.ends_with(b"END\r\n") {
        if stream.read_buf(&mut text).await? == 0 || text.len() > 1 << 20 {
            bail!("the stats reply did not end with END");
        }
    }
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| {
            let mut parts = l.strip_prefix("STAT ")?.split_whitespace();
            let name = parts.next()?;
            Some((name.to_string(), parts.next()?.parse().ok()?))
        })
        .collect())
}

/// VmRSS of a process, from procfs.
fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), |b| {
        format!("{:.1}", b as f64 / f64::from(1 << 20))
    })
}

/// One row per server and memory size.
pub fn sizing_table(rows: &[ReplayRow]) -> String {
    #[rustfmt::skip]
    const COLUMNS: [Column; 11] = [
        Column::left("server", 12), Column::right("mem_MiB", 8), Column::right("miss_ratio", 10),
        Column::right("byte_miss", 10), Column::right("gets", 10), Column::right("used_MiB", 9),
        Column::right("limit_MiB", 9), Column::right("rss_MiB", 9), Column::right("items", 9),
        Column::right("evictions", 10), Column::right("req/s", 8),
    ];
    let mut t = Table::new(&COLUMNS);
    let count = |n: Option<u64>| n.map_or("-".into(), |n| n.to_string());
    for row in rows {
        let r = row.report();
        t.row(&[
            &row.server,
            &row.memory_mib,
            &format!("{:.4}", r.miss_ratio()),
            &format!("{:.4}", r.byte_miss_ratio()),
            &r.gets,
            &mib(r.memory_used),
            &mib(row.limit_maxbytes),
            &mib(row.rss_bytes),
            &count(r.items),
            &count(row.evictions),
            &format!("{:.0}", row.requests_per_sec()),
        ]);
    }
    t.text()
}

/// Miss ratio per window of trace time: one row per window, one column per server and size.
pub fn windows_table(rows: &[ReplayRow]) -> String {
    let mut out = format!("miss ratio over the trace\n{:>12}", "trace_s");
    for r in rows {
        out += &format!(" {:>16}", format!("{}@{}MiB", r.server, r.memory_mib));
    }
    out.push('\n');
    let windows = rows.iter().map(|r| r.report().windows.len()).max();
    for i in 0..windows.unwrap_or(0) {
        let start = rows
            .iter()
            .find_map(|r| r.report().windows.get(i))
            .map_or(0, |w| w.start);
        out += &format!("{start:>12}");
        for r in rows {
            match r.report().windows.get(i) {
                Some(w) if w.gets > 0 => out += &format!(" {:>16.4}", w.miss_ratio()),
                _ => out += &format!(" {:>16}", "-"),
            }
        }
        out.push('\n');
    }
    out
}

fn write_out(
    dir: &Path,
    workload: &str,
    args: &ReplayArgs,
    config: &ReplayConfig,
    rows: &[ReplayRow],
) -> Result<Vec<std::path::PathBuf>> {
    let result = ReplayResult {
        workload: workload.to_string(),
        speedup: args.speedup,
        conns: config.conns,
        depth: config.depth,
        rows,
    };
    let mut written = vec![memfleet_results::write_json(
        dir, "replay", "replay", &result,
    )?];
    let mut servers: Vec<&str> = Vec::new();
    for r in rows {
        if !servers.contains(&r.server.as_str()) {
            servers.push(&r.server);
        }
    }
    let sizing: Vec<Series> = servers
        .iter()
        .map(|&s| {
            let mut points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.server == s)
                .map(|r| (r.memory_mib as f64, r.report().miss_ratio()))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                name: s.to_string(),
                points,
            }
        })
        .collect();
    let path = dir.join("replay-sizing.png");
    plot::line_chart(
        &path,
        "trace replay: miss ratio vs memory",
        "server memory -m (MiB, log scale)",
        "miss ratio",
        &sizing,
        true,
    )?;
    written.push(path);
    let over_time: Vec<Series> = rows
        .iter()
        .map(|r| Series {
            name: format!("{} {} MiB", r.server, r.memory_mib),
            points: r
                .report()
                .windows
                .iter()
                .filter(|w| w.gets > 0)
                .map(|w| (f64::from(w.start), w.miss_ratio()))
                .collect(),
        })
        .collect();
    let path = dir.join("replay-over-time.png");
    plot::line_chart(
        &path,
        "trace replay: miss ratio over the trace",
        "trace time (s, window start)",
        "miss ratio",
        &over_time,
        false,
    )?;
    written.push(path);
    Ok(written)
}
