//! `memfleet bench flash`: issue 30's flash tier against memcached 1.6.45's extstore and the
//! device itself, in one run on this machine's disk.
//!
//! For each server (memfleet `--flash`, memcached `-o ext_path=...,ext_item_age=0`, the
//! setting extstore's documentation gives for keeping items on flash rather than evicting
//! them while the disk has room): start it on a fresh file, store `--items` keys of
//! `--value-size` bytes (far more than its RAM; the flash file about that size, so that it
//! ends the fill about full, as a cache's flash is), let its flash writes settle, then
//! - **RAM per flash item**: resident memory (VmRSS) after the fill, less the resident
//!   memory of the idle server and less memfleet's RAM tier (its `-m` heap, full of RAM
//!   items), over the items on flash (`extstore_objects_used`). memcached's items on flash
//!   keep their header and key in its `-m` memory, so it is given enough `-m` to hold them
//!   all (shown) and nothing is subtracted: what its resident memory grew by is what they
//!   cost.
//! - **write amplification**: bytes written to flash over bytes of items written there.
//! - **flash hits per second and latency**: `--conns` connections, one get in flight each,
//!   random keys over all of them, every value checked, for `--read-time`; flash hits
//!   counted by the server (`get_extstore`). Whether the page cache served them: the file's
//!   pages are dropped from the page cache before the reads; memfleet reads with O_DIRECT
//!   (`flash_direct_io`); how much of memcached's file is resident at the end is shown
//!   (`fincore`).
//! - **the device**: `fio` reading random 4 KiB blocks of memfleet's file with O_DIRECT and
//!   as many reads in flight as the servers' reader threads (`--flash-threads`), when fio
//!   is installed.
//!
//! Prints one table with the exact commands; `--out DIR` also writes `flash.json`.

mod client;
mod fio;

use memfleet_testkit::ServerSpec;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use memfleet_sim::duration::parse_duration;
use memfleet_testkit::Killed;
use serde_json::json;

use self::client::{stat, Reads};
use super::run_log::{write_results, RunLog};

/// `memfleet bench flash`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct FlashArgs {
    /// Keys stored (key:0 .. key:N-1) [default: 10,000,000; --quick 20,000].
    #[arg(long)]
    pub items: Option<u64>,
    /// Value size in bytes (memcached's extstore keeps items under 512 bytes in RAM).
    #[arg(long, default_value_t = 512)]
    pub value_size: usize,
    /// memfleet's RAM (-m, MiB) [default: 64; --quick 8].
    #[arg(long)]
    pub memory: Option<u64>,
    /// Where the flash files go (a disk, not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    pub dir: PathBuf,
    /// Reader threads of both servers (memfleet --flash-threads, memcached ext_threads).
    #[arg(long, default_value_t = 4)]
    pub flash_threads: usize,
    /// Connections of the read phase, one get in flight each [default: --flash-threads; the
    /// reads the device is given at once are this × --keys-per-get, fio's --numjobs].
    #[arg(long)]
    pub conns: Option<u64>,
    /// How memfleet's workers read flash (its `--flash-io`: uring or threads).
    #[arg(long, default_value = "uring", value_parser = ["uring", "threads"])]
    pub flash_io: String,
    /// Keys per get of the read phase (a multi-get above 1): the reads the device is given
    /// at once are --conns × --pipeline × this, and fio keeps as many in flight.
    #[arg(long, default_value_t = 1)]
    pub keys_per_get: usize,
    /// Gets each read connection sends together before reading their replies.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Connections of the fill.
    #[arg(long, default_value_t = 4)]
    pub fill_conns: u64,
    /// Measured time of the read phase (and of fio) [default: 10s; --quick 1s].
    #[arg(long, value_parser = parse_duration)]
    pub read_time: Option<Duration>,
    /// memcached 1.6.45 (`scripts/memcached-reference` prints its path); left out, only
    /// memfleet runs.
    #[arg(long)]
    pub memcached: Option<String>,
    /// fio, for the device's own figures (skipped when it cannot be run).
    #[arg(long, default_value = "fio")]
    pub fio: String,
    /// For CI: few items, small memory, short phases.
    #[arg(long)]
    pub quick: bool,
    /// The memfleet executable [default: this executable].
    #[arg(long)]
    pub memfleet_bin: Option<String>,
    /// RNG seed of the read phase.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write flash.json into this directory, with the command that made it.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// One server's run.
#[derive(Debug, Clone)]
struct Run {
    name: &'static str,
    command: Vec<String>,
    fill_s: f64,
    rss_idle: u64,
    rss_end: u64,
    /// Bytes of RAM that hold RAM items (memfleet's heap), subtracted.
    ram_tier: u64,
    ram_items: u64,
    flash_items: u64,
    flash_bytes_written: u64,
    item_bytes_admitted: u64,
    reads: Reads,
    flash_hits: u64,
    page_cache_bytes: Option<u64>,
    direct: bool,
}

impl Run {
    fn ram_per_flash_item(&self) -> f64 {
        let grown = self.rss_end.saturating_sub(self.rss_idle + self.ram_tier);
        grown as f64 / self.flash_items.max(1) as f64
    }
    fn write_amplification(&self) -> f64 {
        self.flash_bytes_written as f64 / self.item_bytes_admitted.max(1) as f64
    }
    fn flash_hits_per_s(&self) -> f64 {
        self.flash_hits as f64 / self.reads.seconds.max(1e-9)
    }
}

struct Setup {
    items: u64,
    value_size: usize,
    read_time: Duration,
    conns: u64,
}

fn free_port() -> Result<u16> {
    Ok(memfleet_testkit::try_free_port()?)
}

fn wait_for(addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("nothing listening on {addr}")
}

/// Waits until the server's flash writes stop growing (memcached flushes in the
/// background; memfleet writes as it evicts).
fn settle(addr: SocketAddr) -> Result<()> {
    let mut last = u64::MAX;
    for _ in 0..120 {
        let now = stat(&client::stats(addr)?, "extstore_objects_written");
        if now == last {
            return Ok(());
        }
        last = now;
        std::thread::sleep(Duration::from_secs(1));
    }
    Ok(())
}

/// Drops `file`'s pages from the page cache (GNU dd's `iflag=nocache count=0`).
fn drop_page_cache(file: &Path) {
    let _ = Command::new("dd")
        .arg(format!("if={}", file.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status();
}

fn page_cache_bytes(file: &Path) -> Option<u64> {
    let out = Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(file)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn run_server(
    name: &'static str,
    command: Vec<String>,
    port: u16,
    file: &Path,
    ram_tier: u64,
    s: &Setup,
    args: &FlashArgs,
) -> Result<Run> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let child = Command::new(&command[0])
        .args(&command[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", command[0]))?;
    let server = Killed(child);
    let pid = server.0.id();
    wait_for(addr)?;
    let rss_idle = client::rss(pid)?;
    let t = Instant::now();
    client::fill(addr, s.items, s.value_size, args.fill_conns)?;
    let fill_s = t.elapsed().as_secs_f64();
    settle(addr)?;
    let rss_end = client::rss(pid)?;
    let before = client::stats(addr)?;
    // Reads start from the device: the file's pages leave the page cache first (memcached
    // reads through it; memfleet bypasses it).
    drop_page_cache(file);
    let reads = client::read_random(
        addr,
        s.items,
        s.value_size,
        s.conns,
        args.pipeline,
        args.keys_per_get,
        s.read_time,
        args.seed,
    )?;
    let after = client::stats(addr)?;
    let page_cache = page_cache_bytes(file);
    drop(server);
    let direct = stat(&before, "flash_direct_io") == 1;
    let flash_items = stat(&before, "extstore_objects_used");
    let ram_items = stat(&before, "curr_items").saturating_sub(if name == "memcached" {
        flash_items
    } else {
        0
    });
    // memfleet counts item bytes admitted; memcached writes whole items into its pages.
    let item_bytes_admitted = match stat(&before, "flash_item_bytes_admitted") {
        0 => stat(&before, "extstore_objects_written") * (s.value_size as u64 + 60),
        n => n,
    };
    Ok(Run {
        name,
        command,
        fill_s,
        rss_idle,
        rss_end,
        ram_tier,
        ram_items,
        flash_items,
        flash_bytes_written: stat(&before, "extstore_bytes_written"),
        item_bytes_admitted,
        flash_hits: stat(&after, "get_extstore").saturating_sub(stat(&before, "get_extstore")),
        reads,
        page_cache_bytes: if direct { None } else { page_cache },
        direct,
    })
}

struct FlashFile(PathBuf);

impl Drop for FlashFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `memfleet bench flash`.
pub fn bench(args: &FlashArgs) -> Result<()> {
    let bin = super::memfleet_bin(&args.memfleet_bin)?;
    let items = args
        .items
        .unwrap_or(if args.quick { 20_000 } else { 10_000_000 });
    let memory_mib = args.memory.unwrap_or(if args.quick { 8 } else { 64 });
    let read_time = args
        .read_time
        .unwrap_or(Duration::from_secs(if args.quick { 1 } else { 10 }));
    let conns = args.conns.unwrap_or(args.flash_threads as u64);
    if items == 0 || args.value_size < 16 || conns == 0 || args.fill_conns == 0 {
        bail!("--items, --conns and --fill-conns must be at least 1, --value-size at least 16");
    }
    if !(1..=100).contains(&args.keys_per_get) || args.keys_per_get as u64 > items {
        bail!("--keys-per-get must be between 1 and 100, and at most --items");
    }
    if !(1..=64).contains(&args.pipeline) {
        bail!("--pipeline must be between 1 and 64");
    }
    // The reads the device is given at once: fio's jobs.
    let queue_depth = conns as usize * args.pipeline * args.keys_per_get;
    // Room for every item's record (value, key, headers, padding), so that the flash ends
    // the fill about full, as a cache's does (its index, the hash table, is sized for it).
    // (A record is the item, 12 bytes of record header and padding: records of up to a block
    // do not straddle one, 7 of 540 bytes to a 4 KiB block.)
    let record = args.value_size as u64 + 64;
    let unit: u64 = 64 << 20;
    let flash_size = (items * (args.value_size as u64 + 96)).div_ceil(unit) * unit;
    let s = Setup {
        items,
        value_size: args.value_size,
        read_time,
        conns,
    };
    println!(
        "memfleet bench flash: {items} keys of {} bytes ({:.2} GiB of values), flash files of \
         {} MiB in {}, RAM -m {memory_mib} MiB for memfleet; reads: {} connections, {} gets \
         of {} random keys in flight each, {:?}",
        args.value_size,
        items as f64 * args.value_size as f64 / f64::from(1 << 30),
        flash_size >> 20,
        args.dir.display(),
        conns,
        args.pipeline,
        args.keys_per_get,
        read_time
    );
    let log = RunLog::new();
    log.print_start();
    let mut runs = Vec::new();
    let pid = std::process::id();
    let memfleet_file = FlashFile(args.dir.join(format!("memfleet-bench-flash-{pid}")));
    {
        let port = free_port()?;
        let command = ServerSpec::memfleet(&bin, memory_mib)
            .threads(2)
            .args([
                "--flash",
                &format!("{}:{flash_size}", memfleet_file.0.display()),
            ])
            .args(["--flash-threads", &args.flash_threads.to_string()])
            .args(["--flash-io", &args.flash_io])
            .args(["--flash-item-size", &record.to_string()])
            .argv(port);
        let run = run_server(
            "memfleet",
            command,
            port,
            &memfleet_file.0,
            memory_mib << 20,
            &s,
            args,
        )?;
        print_run(&run);
        runs.push(run);
    }
    if let Some(mc) = &args.memcached {
        let file = FlashFile(args.dir.join(format!("memcached-bench-flash-{pid}")));
        // Enough -m for every item's header and key (about 100-165 bytes each), so that none
        // is evicted for want of RAM: what its resident memory grows by is their cost.
        let mc_memory = memory_mib.max((items * 200) >> 20);
        let port = free_port()?;
        let ext = format!(
            "ext_path={}:{}m,ext_item_age=0,ext_threads={}",
            file.0.display(),
            flash_size >> 20,
            args.flash_threads
        );
        let command = ServerSpec::memcached(mc, mc_memory)
            .threads(2)
            .args(["-o", &ext])
            .argv(port);
        let run = run_server("memcached", command, port, &file.0, 0, &s, args)?;
        print_run(&run);
        runs.push(run);
    }
    let fio_results = if fio::available(&args.fio) {
        // memfleet's file, kept until here: the device that served its reads.
        let mut results = Vec::new();
        for engine in [fio::Engine::Psync, fio::Engine::IoUring] {
            let command = fio::command(
                &args.fio,
                &memfleet_file.0,
                4096,
                engine,
                queue_depth,
                read_time.as_secs().max(1),
            );
            println!("fio: {}", command.join(" "));
            results.push((engine, command.clone(), fio::run(&command)?));
        }
        results
    } else {
        println!(
            "fio: not run ({} cannot be run; `apt-get install fio`)",
            args.fio
        );
        Vec::new()
    };
    drop(memfleet_file);
    let fio_rows: Vec<(String, fio::FioReads)> = fio_results
        .iter()
        .map(|(engine, _, f)| (engine.describe(queue_depth), *f))
        .collect();
    print_table(&runs, &fio_rows);
    let load_at_end = log.print_end();
    if let Some(dir) = &args.out {
        let value = json!({
            "parameters": {
                "items": items,
                "value_size": args.value_size,
                "memfleet_memory_mib": memory_mib,
                "flash_file_bytes": flash_size,
                "read_conns": conns,
                "keys_per_get": args.keys_per_get,
                "pipeline": args.pipeline,
                "flash_io": args.flash_io,
                "read_seconds": read_time.as_secs_f64(),
                "flash_threads": args.flash_threads,
            },
            "runs": runs.iter().map(run_json).collect::<Vec<_>>(),
            "fio": fio_results.iter().map(|(_, c, f)| json!({
                "command": c.join(" "),
                "iops": f.iops,
                "p50_us": f.p50_us,
                "p99_us": f.p99_us,
            })).collect::<Vec<_>>(),
            "load_average_at_end": load_at_end,
        });
        write_results(dir, "flash", &value)?;
    }
    Ok(())
}

fn run_json(r: &Run) -> serde_json::Value {
    json!({
        "server": r.name,
        "command": r.command.join(" "),
        "fill_s": r.fill_s,
        "rss_idle_bytes": r.rss_idle,
        "rss_end_bytes": r.rss_end,
        "ram_tier_bytes": r.ram_tier,
        "ram_items": r.ram_items,
        "flash_items": r.flash_items,
        "ram_per_flash_item_bytes": r.ram_per_flash_item(),
        "flash_bytes_written": r.flash_bytes_written,
        "item_bytes_admitted": r.item_bytes_admitted,
        "write_amplification": r.write_amplification(),
        "gets": r.reads.gets,
        "hits": r.reads.hits,
        "flash_hits": r.flash_hits,
        "flash_hits_per_s": r.flash_hits_per_s(),
        "p50_us": r.reads.latency.value_at_quantile(0.5),
        "p99_us": r.reads.latency.value_at_quantile(0.99),
        "direct_io": r.direct,
        "page_cache_bytes": r.page_cache_bytes,
    })
}

fn print_run(r: &Run) {
    println!("{}: {}", r.name, r.command.join(" "));
    println!(
        "{}: filled in {:.1} s; resident {:.0} MiB idle, {:.0} MiB after the fill; {} items on \
         flash, {} in RAM",
        r.name,
        r.fill_s,
        r.rss_idle as f64 / f64::from(1 << 20),
        r.rss_end as f64 / f64::from(1 << 20),
        r.flash_items,
        r.ram_items
    );
}

fn print_table(runs: &[Run], fio: &[(String, fio::FioReads)]) {
    println!();
    println!(
        "| server | items on flash | RAM per flash item (B) | write amplification | gets/s | hit ratio | flash hits/s | p50 / p99 µs | page cache |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in runs {
        println!(
            "| {} | {} | {:.1} | {:.3} | {:.0} | {:.3} | {:.0} | {} / {} | {} |",
            r.name,
            r.flash_items,
            r.ram_per_flash_item(),
            r.write_amplification(),
            r.reads.gets as f64 / r.reads.seconds.max(1e-9),
            r.reads.hits as f64 / r.reads.gets.max(1) as f64,
            r.flash_hits_per_s(),
            r.reads.latency.value_at_quantile(0.5),
            r.reads.latency.value_at_quantile(0.99),
            match (r.direct, r.page_cache_bytes) {
                (true, _) => "none (O_DIRECT)".to_string(),
                (false, Some(b)) => format!("{} MiB of the file resident", b >> 20),
                (false, None) => "unknown".to_string(),
            }
        );
    }
    for (how, f) in fio {
        println!(
            "| fio (4 KiB random reads, O_DIRECT, {how}) | — | — | — | — | — | {:.0} | {:.0} / {:.0} | none |",
            f.iops, f.p50_us, f.p99_us
        );
    }
    if let [m, c, ..] = runs {
        println!(
            "RAM per flash item: memcached / memfleet = {:.1}x",
            c.ram_per_flash_item() / m.ram_per_flash_item().max(1e-9)
        );
    }
    // Against the device's limit: the better of fio's two ways.
    let best = fio.iter().max_by(|a, b| a.1.iops.total_cmp(&b.1.iops));
    if let (Some(m), Some((how, f))) = (runs.first(), best) {
        println!(
            "memfleet flash hits / fio reads per second = {:.2}; p99 / fio's p99 = {:.2} \
             (fio {how}, the better of the two)",
            m.flash_hits_per_s() / f.iops.max(1e-9),
            m.reads.latency.value_at_quantile(0.99) as f64 / f.p99_us.max(1e-9)
        );
    }
}
