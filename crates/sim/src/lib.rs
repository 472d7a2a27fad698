//! memfleet-sim, behind `memfleet sim`: an in-process cache simulator. It replays one
//! workload (a trace file or a seeded synthetic workload) through each selected cache model
//! at each memory size and prints a miss-ratio-vs-memory table, with the items and bytes
//! each cache held at the end. The workload side (trace readers and writers, the synthetic
//! generator, [`sizes`] and TTL mixes, [`Source`]) is shared with `memfleet bench`'s load
//! generator, which depends on this crate; this crate depends on no tool crate.
//!
//! The models: `segcache`, memfleet's engine (the adapter, [`segcache`], is supplied by
//! the caller through [`run`]); `pelikan`, pelikan's Segcache engine from crates.io
//! ([`pelikan`], built here; see its docs for its clock, which is the wall clock, paced to
//! simulated time by default); `lru`, an exact LRU with memcached's per-item overhead
//! ([`lru`], built here). Each cache at each memory size replays the same requests. No
//! networking, no threads. Not here: the models and readers themselves (see the
//! submodules).
//!
//! # The workload of issue 16
//!
//! 1,000,000 keys of 20–40 bytes (uniform, per key) with Zipf 0.9 popularity; values
//! log-normal per key with a mean of 243 B before clamping to 16 B–4 KiB and sigma 1
//! (median 147 B, clamped mean 242.4 B: 1.3% of values are raised to 16 B, 0.04% cut to
//! 4 KiB); Segcache's `mix` TTL classes scaled by 1/60 (30 d → 43,200 s 14%, 14 d →
//! 20,160 s 11%, 24 h → 1,440 s 23%, 12 h → 720 s 40% (mix's 38% plus the 2% remainder
//! it gets), 2 min → 2 s 12%); 7% of requests are sets and every get that misses is
//! filled; 60,000 requests per simulated second for 90 s (5.4M requests). The flags
//! express all of it:
//!
//! ```sh
//! memfleet sim --keys 1000000 --alpha 0.9 --key-size 20-40 \
//!     --value-size key:lognormal:243:1:16-4096 \
//!     --workload 43200:0.14,20160:0.11,1440:0.23,720:0.40,2:0.12 \
//!     --write-ratio 0.07 --rate 60000 --requests 5400000 \
//!     --memory 64 --caches segcache,pelikan,lru --segment-size 1048576
//! ```
//!
//! Add `--workers N` to spread memfleet's requests over N handles as a server's worker
//! threads would. The `pelikan` column takes 90 s of wall-clock time per memory size
//! (`--pelikan-clock paced`).

pub mod binary;
pub mod duration;
pub mod floors;
pub mod keys;
pub mod lru;
pub mod output;
pub mod pelikan;
pub mod replay;
pub mod report;
pub mod request;
pub mod segcache;
pub mod size;
pub mod sizes;
pub mod synthetic;
pub mod trace;
pub mod trace_error;
pub mod trace_writer;
pub mod workload;
pub mod zipf;

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use self::lru::LruCache;
use self::pelikan::{PelikanClock, PelikanSim};
use self::replay::{try_replay, ReplayConfig, Report, SimCache};
use self::report::or_dash;
use self::size::SizeSpec;
use self::synthetic::{Synthetic, SyntheticConfig};
use self::trace::{open_trace, Request, RequestStream, TraceError, TraceFormat};
use self::workload::Workload;

/// The cache models `memfleet sim` can compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CacheKind {
    /// memfleet's Segcache engine (adapter supplied by the caller).
    Segcache,
    /// Pelikan's Segcache engine (the `segcache` crate 0.4.4), configured as pelikan ships it.
    Pelikan,
    /// The exact LRU model with memcached's per-item overhead.
    Lru,
    /// A cache that never evicts: misses only first gets, gets after deletes and expiry.
    Infinite,
    /// A lower bound on any cache's misses at this byte size (PFOO-L; see `floors`).
    Optimal,
}

/// Arguments of `memfleet sim`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Replay this trace instead of a synthetic workload (decompress .zst first).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Trace format; by default guessed from the file name (.csv → csv, *oracleGeneral* → oracle).
    #[arg(long, value_enum)]
    pub format: Option<TraceFormat>,
    /// Synthetic workload: preset c, u1, u2, n, mix (Segcache Table 3) or a TTL mix like 120:0.5,3600:0.5.
    #[arg(long, default_value = "mix")]
    pub workload: String,
    /// Synthetic: number of distinct keys.
    #[arg(long, default_value_t = 200_000)]
    pub keys: u64,
    /// Requests to replay [default: 2000000 synthetic, whole trace otherwise].
    #[arg(long)]
    pub requests: Option<u64>,
    /// Synthetic: requests per simulated second.
    #[arg(long, default_value_t = DEFAULT_RATE)]
    pub rate: u32,
    /// Synthetic: Zipf exponent of key popularity.
    #[arg(long, default_value_t = 1.0)]
    pub alpha: f64,
    /// Synthetic: fraction of requests that are explicit sets.
    #[arg(long, default_value_t = 0.0)]
    pub write_ratio: f64,
    /// Synthetic: RNG seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Synthetic: key sizes, e.g. 24 or 16-32 (always drawn once per key).
    #[arg(long)]
    pub key_size: Option<SizeSpec>,
    /// Synthetic: value sizes: 100 (fixed), 50-150 (uniform), lognormal:MEAN:SIGMA:MIN-MAX
    /// (log-normal with MEAN the unclamped mean, SIGMA the deviation of ln size, clamped to
    /// MIN..=MAX), drawn per request, or per key behind key: (key:50-150,
    /// key:lognormal:243:1:16-4096).
    #[arg(long)]
    pub value_size: Option<SizeSpec>,
    /// Synthetic: popularity drift, keys per simulated second: the key at each popularity
    /// rank moves on by this many keys a second, so keys become hot in turn and cool down
    /// (0 = fixed popularity).
    #[arg(long, default_value_t = 0.0)]
    pub drift: f64,
    /// Synthetic: value sizes every key switches to during the run, each at its own moment
    /// spread uniformly over it (same forms as --value-size); by default sizes never shift.
    #[arg(long, value_name = "SIZE")]
    pub value_size_late: Option<SizeSpec>,
    /// Cache memory sizes in MiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "32,64")]
    pub memory: Vec<f64>,
    /// Segment size in bytes of both Segcache engines (memfleet's and pelikan's); 0 picks
    /// about 512 segments per cache, between 64 KiB and 1 MiB (both engines' default for
    /// servers is 1 MiB).
    #[arg(long, default_value_t = 0)]
    pub segment_size: usize,
    /// Reporting window in seconds of trace time.
    #[arg(long, default_value_t = 60)]
    pub window: u32,
    /// Caches to compare, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "segcache,lru"
    )]
    pub caches: Vec<CacheKind>,
    /// Segcache engine settings.
    #[command(flatten)]
    pub engine: segcache::EngineArgs,
    /// Pelikan's clock, which cannot be set: paced (replay pelikan in real time, one second
    /// per simulated second, so its TTLs follow simulated time) or wall (full speed; its
    /// TTLs then last longer in simulated time than the other caches').
    #[arg(long, value_enum, default_value_t = PelikanClock::Paced)]
    pub pelikan_clock: PelikanClock,
    /// Do not fill the cache after a get miss (by default gets are look-aside).
    #[arg(long)]
    pub no_fill: bool,
    /// TTL in seconds for fills whose request records none (Twitter gets); 0 = never.
    #[arg(long, default_value_t = 0)]
    pub fill_ttl: u32,
    /// Write per-window CSVs (one per cache and memory size) into this directory.
    #[arg(long)]
    pub window_csv: Option<PathBuf>,
    /// Write the results as sim.json, and miss-ratio-vs-memory PNGs, into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Instead of simulating, write the workload (synthetic, or the --trace converted) to
    /// FILE as a trace, for `memfleet sim --trace` and `memfleet bench replay`.
    #[arg(long, value_name = "FILE")]
    pub write_trace: Option<PathBuf>,
    /// Format of --write-trace; by default guessed from the file name like --format.
    #[arg(long, value_enum)]
    pub write_format: Option<TraceFormat>,
}

/// Default synthetic request count.
pub const DEFAULT_REQUESTS: u64 = 2_000_000;

/// Default synthetic request rate, per second of trace time.
pub const DEFAULT_RATE: u32 = 2000;

/// Where requests come from (a trace file or a seeded synthetic workload); can be opened
/// any number of times. `memfleet bench replay` reads its workload through it too.
pub enum Source {
    /// A seeded synthetic workload.
    Synthetic(SyntheticConfig),
    /// A trace file.
    Trace {
        /// The file.
        path: PathBuf,
        /// How it is encoded.
        format: TraceFormat,
    },
}

impl Source {
    fn from_args(args: &SimArgs) -> Result<Source> {
        if let Some(path) = &args.trace {
            return Source::trace(path, args.format);
        }
        let mut workload = Workload::parse(&args.workload).map_err(anyhow::Error::msg)?;
        if let Some(mut k) = args.key_size {
            k.per_key = true;
            workload.key_size = k;
        }
        if let Some(v) = args.value_size {
            workload.value_size = v;
        }
        let cfg = SyntheticConfig {
            keys: args.keys,
            requests: args.requests.unwrap_or(DEFAULT_REQUESTS),
            rate: args.rate,
            alpha: args.alpha,
            write_ratio: args.write_ratio,
            seed: args.seed,
            workload,
            drift: args.drift,
            value_size_late: args.value_size_late,
        };
        cfg.validate().map_err(anyhow::Error::msg)?;
        Ok(Source::Synthetic(cfg))
    }

    /// A trace file, in `format` or the one its name suggests ([`TraceFormat::detect`]).
    pub fn trace(path: &std::path::Path, format: Option<TraceFormat>) -> Result<Source> {
        let format = match format.or_else(|| TraceFormat::detect(path)) {
            Some(f) => f,
            None if path.extension().is_some_and(|e| e == "zst") => {
                bail!(
                    "{} is zstd-compressed: decompress it first (zstd -d)",
                    path.display()
                )
            }
            None => bail!(
                "cannot tell the format of {}: pass --format csv|oracle|twr",
                path.display()
            ),
        };
        Ok(Source::Trace {
            path: path.to_path_buf(),
            format,
        })
    }

    /// The requests, at most `limit` of them.
    pub fn open(&self, limit: Option<u64>) -> Result<RequestStream> {
        let stream: RequestStream = match self {
            Source::Synthetic(cfg) => Box::new(
                Synthetic::new(cfg.clone())
                    .map_err(anyhow::Error::msg)?
                    .map(Ok::<Request, TraceError>),
            ),
            Source::Trace { path, format } => open_trace(path, *format)
                .with_context(|| format!("opening trace {}", path.display()))?,
        };
        Ok(match limit {
            Some(n) => Box::new(stream.take(usize::try_from(n).unwrap_or(usize::MAX))),
            None => stream,
        })
    }

    /// One line saying what the workload is.
    pub fn describe(&self) -> String {
        match self {
            Source::Synthetic(c) => format!(
                "synthetic {}: keys={} requests={} rate={}/s alpha={} write_ratio={} seed={} key_size={} value_size={} mean_object={:.0}B{}",
                c.workload.name,
                c.keys,
                c.requests,
                c.rate,
                c.alpha,
                c.write_ratio,
                c.seed,
                c.workload.key_size,
                c.workload.value_size,
                c.workload.mean_object_size(),
                describe_changes(c),
            ),
            Source::Trace { path, format } => format!("trace {} ({format:?})", path.display()),
        }
    }
}

/// The synthetic workload's changes over time, for [`Source::describe`] (empty if none).
fn describe_changes(c: &SyntheticConfig) -> String {
    let mut s = String::new();
    if c.drift > 0.0 {
        s += &format!(" drift={}keys/s", c.drift);
    }
    if let Some(late) = c.value_size_late {
        s += &format!(" value_size_late={late}");
    }
    s
}

/// One cell of the comparison: a cache at a memory size.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Memory given to the cache, MiB.
    pub memory_mib: f64,
    /// Which model.
    pub kind: CacheKind,
    /// What the replay counted.
    pub report: Report,
}

/// Runs `memfleet sim`, printing to stdout. `make_segcache(memory_bytes,
/// segment_size)` builds the Segcache adapter.
pub fn run(
    args: &SimArgs,
    make_segcache: &dyn Fn(u64, usize) -> Box<dyn SimCache>,
) -> anyhow::Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    run_to(args, make_segcache, &mut out).map(|_| ())
}

/// [`run`] with the output going to `out`; returns every cell.
pub fn run_to(
    args: &SimArgs,
    make_segcache: &dyn Fn(u64, usize) -> Box<dyn SimCache>,
    out: &mut dyn Write,
) -> Result<Vec<RunResult>> {
    if args.memory.is_empty() || args.memory.iter().any(|m| !(m.is_finite() && *m > 0.0)) {
        bail!(
            "--memory needs positive sizes in MiB, got {:?}",
            args.memory
        );
    }
    if args.caches.is_empty() {
        bail!("--caches needs at least one of segcache, pelikan, lru, infinite, optimal");
    }
    if args.window == 0 {
        bail!("--window must be positive");
    }
    let source = Source::from_args(args)?;
    let limit = if args.trace.is_some() {
        args.requests
    } else {
        None
    };
    if let Some(path) = &args.write_trace {
        let Some(format) = args.write_format.or_else(|| TraceFormat::detect(path)) else {
            bail!(
                "cannot tell which format to write {} in: pass --write-format csv|oracle|twr",
                path.display()
            );
        };
        let mut file = BufWriter::new(
            File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        let written = trace_writer::write_trace(source.open(limit)?, format, &mut file)
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(
            out,
            "# wrote {written} requests of {} to {} ({format:?})",
            source.describe(),
            path.display()
        )?;
        return Ok(Vec::new());
    }
    let config = ReplayConfig {
        window_secs: args.window,
        fill_on_miss: !args.no_fill,
        fill_ttl: args.fill_ttl,
    };
    if let Some(dir) = &args.window_csv {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }

    writeln!(out, "# memfleet sim: miss ratio vs memory")?;
    writeln!(
        out,
        "# command: {}",
        memfleet_results::provenance::command_line()
    )?;
    writeln!(out, "# workload: {}", source.describe())?;
    writeln!(
        out,
        "# replay: fill_on_miss={} fill_ttl={} window={}s segment_size={}B (0 = auto)",
        config.fill_on_miss, config.fill_ttl, config.window_secs, args.segment_size
    )?;

    let memory_bytes: Vec<u64> = args
        .memory
        .iter()
        .map(|&mib| (mib * (1u64 << 20) as f64) as u64)
        .collect();
    let mut optimal = if args.caches.contains(&CacheKind::Optimal) {
        floors::optimal_bounds(source.open(limit)?, &config, &memory_bytes)?
    } else {
        Vec::new()
    }
    .into_iter();
    let mut results = Vec::new();
    for (&mib, &bytes) in args.memory.iter().zip(&memory_bytes) {
        for &kind in &args.caches {
            if kind == CacheKind::Optimal {
                let report = optimal.next().expect("one bound per memory size");
                writeln!(out, "# {mib} MiB {}", report.summary_line())?;
                results.push(RunResult {
                    memory_mib: mib,
                    kind,
                    report,
                });
                continue;
            }
            let requests = source.open(limit)?;
            let mut cache: Box<dyn SimCache> = match kind {
                CacheKind::Segcache => make_segcache(bytes, args.segment_size),
                CacheKind::Pelikan => {
                    let segment_size = match args.segment_size {
                        0 => segcache::auto_segment_size(bytes),
                        n => n,
                    };
                    Box::new(PelikanSim::new(bytes, segment_size, args.pelikan_clock)?)
                }
                CacheKind::Lru => Box::new(LruCache::new(bytes)),
                CacheKind::Infinite => Box::new(floors::InfiniteCache::new()),
                CacheKind::Optimal => unreachable!("computed above"),
            };
            let report = try_replay(requests, cache.as_mut(), &config)?;
            writeln!(out, "# {mib} MiB {}", report.summary_line())?;
            for remark in cache.remarks() {
                writeln!(out, "# {mib} MiB {}: {remark}", report.cache)?;
            }
            if let Some(dir) = &args.window_csv {
                let path = dir.join(format!("{}-{mib}MiB.csv", report.cache));
                let mut file = BufWriter::new(
                    File::create(&path).with_context(|| format!("creating {}", path.display()))?,
                );
                report.write_window_csv(&mut file)?;
                file.flush()?;
            }
            results.push(RunResult {
                memory_mib: mib,
                kind,
                report,
            });
        }
    }

    write_table(out, &args.memory, &args.caches, &results)?;
    if let Some(dir) = &args.out {
        for path in output::write(dir, &source.describe(), &results)? {
            writeln!(out, "# wrote {}", path.display())?;
        }
    }
    out.flush()?;
    Ok(results)
}

/// The comparison table: a row per memory size, with each cache's miss ratio, then the
/// items (`<cache>_items`) and bytes (`<cache>_bytes`) each held at the end, `-` where a
/// cache does not report them.
fn write_table(
    out: &mut dyn Write,
    memory: &[f64],
    caches: &[CacheKind],
    results: &[RunResult],
) -> io::Result<()> {
    let names: Vec<&str> = caches
        .iter()
        .map(|&kind| {
            results
                .iter()
                .find(|r| r.kind == kind)
                .map_or("?", |r| r.report.cache.as_str())
        })
        .collect();
    let mut header = vec!["memory_MiB".to_string()];
    header.extend(names.iter().map(|n| n.to_string()));
    header.extend(names.iter().map(|n| format!("{n}_items")));
    header.extend(names.iter().map(|n| format!("{n}_bytes")));
    let widths: Vec<usize> = header.iter().map(|h| h.len().max(12)).collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, &w)| format!("{c:>w$}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    writeln!(out, "{}", line(&header))?;
    for &mib in memory {
        let cells: Vec<Option<&Report>> = caches
            .iter()
            .map(|&kind| {
                results
                    .iter()
                    .find(|r| r.kind == kind && r.memory_mib == mib)
                    .map(|r| &r.report)
            })
            .collect();
        let mut row = vec![mib.to_string()];
        row.extend(
            cells
                .iter()
                .map(|c| c.map_or("-".to_string(), |r| format!("{:.4}", r.miss_ratio()))),
        );
        row.extend(cells.iter().map(|c| or_dash(c.and_then(|r| r.items))));
        row.extend(cells.iter().map(|c| or_dash(c.and_then(|r| r.memory_used))));
        writeln!(out, "{}", line(&row))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
