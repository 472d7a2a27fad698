//! `memfleet bench --scenario expiry`: Segcache §3.5's claim that proactive, segment-level
//! expiration frees expired items promptly, where memcached frees them lazily (on access),
//! from the LRU tails its maintainer walks, or when its LRU crawler visits them.
//!
//! Every `--spawn`/`--target` server gets the same write stream at the same time: new keys
//! at `--expiry-rate` sets per second, each with a TTL drawn uniformly from
//! `--expiry-short-ttl` or, for a `--expiry-long-share` of them, an hour (live for the whole
//! run). Nothing is ever read back, so nothing expires by access. The client keeps the
//! deadline of everything it wrote, so at every second it knows how many items are still
//! live; the server says how many it holds (`curr_items`) and their bytes (`bytes`). The
//! difference is the expired items it still holds; their bytes are that share of `bytes`
//! (all items have the same size, so each server's own per-item overhead is counted as it
//! is). An item counts as expired one second after its deadline ([`GRACE`]): both servers
//! keep time in whole seconds. Also sampled: the server's resident memory (procfs, when
//! its PID is known).
//!
//! memcached runs with its defaults (1.6: segmented LRU, the LRU maintainer thread and the
//! automatic LRU crawler on); the report prints those settings and its reclaim counters so
//! the comparison can be judged.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use memfleet_results::plot::{self, Timeline};

use super::server_stats::{resident_bytes, Stats, StatsConn};
use super::{command_line, load_average, runtime, start, LoadArgs, Target};
use memfleet_testkit::Spawned;

/// The TTL of long-lived items: longer than any run, so they never expire in one.
const LONG_TTL: u32 = 3600;
/// How long after its deadline an item counts as expired: memcached's clock ticks once a
/// second, so an item may legitimately outlive its deadline by up to a second there.
pub const GRACE: Duration = Duration::from_secs(1);
/// How often the writer sends the sets that are due.
const TICK: Duration = Duration::from_millis(10);
/// The most sets in one write (a writer that fell behind catches up in steps).
const MAX_BATCH: u64 = 2000;
/// Reported when present, to show how each server was configured to expire items.
const SETTINGS: [&str; 8] = [
    "lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "lru_maintainer_thread",
    "lru_segmented",
    "temp_lru",
    "temporary_ttl",
    "segment_size",
];
/// Reported at the end when present: what each server's expiry machinery did.
const COUNTERS: [&str; 7] = [
    "reclaimed",
    "crawler_reclaimed",
    "lru_crawler_starts",
    "expired_unfetched",
    "evictions",
    "segcache_expired_segments",
    "total_items",
];

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

/// What the writer of one server has set, by deadline.
#[derive(Default)]
struct Ledger {
    /// Items set.
    written: u64,
    /// Items whose deadline plus [`GRACE`] has passed, as of the last [`Ledger::live`].
    expired: u64,
    /// Items not yet counted as expired, by deadline in milliseconds since the start.
    pending: BTreeMap<u64, u64>,
}

impl Ledger {
    fn wrote(&mut self, deadline_ms: u64) {
        self.written += 1;
        *self.pending.entry(deadline_ms).or_default() += 1;
    }

    /// Items still live at `now_ms` (monotonic across calls).
    fn live(&mut self, now_ms: u64) -> u64 {
        let cutoff = now_ms.saturating_sub(GRACE.as_millis() as u64);
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > cutoff {
                break;
            }
            self.expired += entry.remove();
        }
        self.written - self.expired
    }
}

/// One second's look at one server.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Seconds since the start of the writes.
    at: f64,
    /// `curr_items`.
    held_items: u64,
    /// `bytes`.
    held_bytes: u64,
    /// Items the client wrote that are still live.
    live_items: u64,
    /// Resident memory of the server process.
    rss: Option<u64>,
}

impl Sample {
    /// Items the server holds past their deadline (0 when it expired some early: Segcache
    /// may, by up to its TTL bucket's tolerance).
    fn expired_items(&self) -> u64 {
        self.held_items.saturating_sub(self.live_items)
    }

    /// The bytes of those items, at the server's own bytes per item.
    fn expired_bytes(&self) -> u64 {
        if self.held_items == 0 {
            return 0;
        }
        (self.held_bytes as f64 * self.expired_items() as f64 / self.held_items as f64) as u64
    }

    fn expired_share(&self) -> f64 {
        self.expired_items() as f64 / self.held_items.max(1) as f64
    }

    /// The share of live items the server no longer holds: Segcache's early expiration (a
    /// segment goes when its earliest deadline passes), or evictions.
    fn early_share(&self) -> f64 {
        self.live_items.saturating_sub(self.held_items) as f64 / self.live_items.max(1) as f64
    }
}

/// One server's run.
struct Outcome {
    name: String,
    samples: Vec<Sample>,
    written: u64,
    settings: Stats,
    end: Stats,
}

/// Peak and means of one server's expired bytes.
struct Summary {
    peak: u64,
    mean: f64,
    /// Mean over the samples once the first short-TTL items have had time to expire.
    steady_mean: f64,
    steady_share: f64,
    /// Mean share of live items already gone, over the same samples.
    steady_early_share: f64,
    peak_rss: Option<u64>,
}

impl Outcome {
    fn summary(&self, steady_from: f64) -> Summary {
        let mean = |samples: &[&Sample], f: &dyn Fn(&Sample) -> f64| {
            samples.iter().map(|s| f(s)).sum::<f64>() / samples.len().max(1) as f64
        };
        let all: Vec<&Sample> = self.samples.iter().collect();
        let steady: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.at >= steady_from)
            .collect();
        Summary {
            peak: self
                .samples
                .iter()
                .map(Sample::expired_bytes)
                .max()
                .unwrap_or(0),
            mean: mean(&all, &|s| s.expired_bytes() as f64),
            steady_mean: mean(&steady, &|s| s.expired_bytes() as f64),
            steady_share: mean(&steady, &Sample::expired_share),
            steady_early_share: mean(&steady, &Sample::early_share),
            peak_rss: self.samples.iter().filter_map(|s| s.rss).max(),
        }
    }
}

/// `--scenario expiry`.
pub fn bench(args: &LoadArgs) -> Result<()> {
    let targets = args.targets();
    if targets.is_empty() {
        bail!("expiry: give the servers to compare, e.g. --spawn memfleet --spawn memcached");
    }
    if args.expiry_rate == 0 || args.duration < Duration::from_secs(1) {
        bail!("expiry needs a positive --expiry-rate and a --duration of at least 1s");
    }
    if !(0.0..=1.0).contains(&args.expiry_long_share) {
        bail!("--expiry-long-share must be within 0..=1");
    }
    let ttl = args.expiry_short_ttl;
    let command = command_line();
    let load_at_start = load_average();
    println!(
        "memfleet bench --scenario expiry: {} new keys per second with {}-byte values for {:?}, \
         {:.0}% with a TTL of {}-{} s and {:.0}% of {LONG_TTL} s, to {} at once; nothing is \
         read back",
        args.expiry_rate,
        args.value_size,
        args.duration,
        100.0 * (1.0 - args.expiry_long_share),
        ttl.min,
        ttl.max,
        100.0 * args.expiry_long_share,
        targets
            .iter()
            .map(Target::name)
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("load average at start: {load_at_start}");
    println!("command: {command}");
    let settings = args.server_settings(false);
    let mut servers: Vec<(Option<Spawned>, SocketAddr, Option<u32>)> = Vec::new();
    for t in &targets {
        let (spawned, addr) = start(t, &settings, None, &[])?;
        let pid = match t {
            Target::Spawn(_) => spawned.as_ref().map(Spawned::pid),
            Target::External(e) => e.pid,
        };
        servers.push((spawned, addr, pid));
    }
    let (rt, local) = runtime()?;
    let outcomes = local.block_on(&rt, async {
        let begin = Instant::now() + Duration::from_millis(200);
        let mut runs = Vec::new();
        for (i, (t, (_, addr, pid))) in targets.iter().zip(&servers).enumerate() {
            let (args, name, addr, pid) = (args.clone(), t.name().to_string(), *addr, *pid);
            runs.push(tokio::task::spawn_local(async move {
                run(&args, name, addr, pid, begin, i as u64).await
            }));
        }
        let mut outcomes = Vec::new();
        for (r, t) in runs.into_iter().zip(&targets) {
            outcomes.push(
                r.await
                    .context("a server's task")?
                    .with_context(|| format!("loading {}", t.name()))?,
            );
        }
        anyhow::Ok(outcomes)
    })?;
    for (spawned, _, _) in &mut servers {
        if let Some(s) = spawned {
            s.check_alive()?;
        }
    }
    drop(servers);

    // Once every short TTL written in the first second has run out, the expired bytes a
    // server holds reflect its expiry machinery rather than the start of the run.
    let steady_from = f64::from(ttl.max) + GRACE.as_secs_f64() + 1.0;
    let summaries: Vec<Summary> = outcomes.iter().map(|o| o.summary(steady_from)).collect();
    print!("{}", timeline(&outcomes));
    print!("{}", summary_table(&outcomes, &summaries, steady_from));
    let load_at_end = load_average();
    println!("load average: {load_at_start} at start, {load_at_end} at end");
    println!("command: {command}");
    if let Some(dir) = &args.out {
        let value = json_report(args, &outcomes, &summaries, steady_from, &load_at_end);
        let path = memfleet_results::write_json(dir, "expiry", "expiry", &value)?;
        println!("results: {}", path.display());
        for figure in figures(dir, &outcomes)? {
            println!("figure: {}", figure.display());
        }
    }
    Ok(())
}

/// Writes to one server from `begin` for `--duration`, sampling it every second.
async fn run(
    args: &LoadArgs,
    name: String,
    addr: SocketAddr,
    pid: Option<u32>,
    begin: Instant,
    stream: u64,
) -> Result<Outcome> {
    let mut stats = StatsConn::connect(addr).await?;
    let settings = stats.get("settings").await.unwrap_or_default();
    let ledger = Rc::new(RefCell::new(Ledger::default()));
    let writer = {
        let (args, ledger) = (args.clone(), ledger.clone());
        tokio::task::spawn_local(async move { write(&args, addr, begin, stream, &ledger).await })
    };
    let mut samples = Vec::new();
    let seconds = args.duration.as_secs_f64().ceil() as u64;
    for i in 1..=seconds {
        tokio::time::sleep_until((begin + Duration::from_secs(i)).into()).await;
        let s = stats.get("").await?;
        let now = begin.elapsed();
        let live_items = ledger.borrow_mut().live(now.as_millis() as u64);
        samples.push(Sample {
            at: now.as_secs_f64(),
            held_items: s.int_or_zero("curr_items"),
            held_bytes: s.int_or_zero("bytes"),
            live_items,
            rss: pid.and_then(|p| resident_bytes(p).ok()),
        });
    }
    writer.await.context("the writer task")??;
    let end = stats.get("").await?;
    let written = ledger.borrow().written;
    Ok(Outcome {
        name,
        samples,
        written,
        settings,
        end,
    })
}

/// Sets new keys at `--expiry-rate` per second until `--duration` has passed since `begin`,
/// recording each one's deadline; every reply must be `STORED`.
async fn write(
    args: &LoadArgs,
    addr: SocketAddr,
    begin: Instant,
    stream: u64,
    ledger: &RefCell<Ledger>,
) -> Result<()> {
    let mut conn = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    conn.set_nodelay(true)?;
    // Every server gets the same TTL sequence.
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let value = vec![b'x'; args.fixed_value_size("--scenario expiry")?];
    let ttl = args.expiry_short_ttl;
    let (mut batch, mut replies) = (Vec::new(), Vec::new());
    let mut sent = 0u64;
    tokio::time::sleep_until(begin.into()).await;
    let mut tick = tokio::time::interval(TICK);
    loop {
        tick.tick().await;
        let elapsed = begin.elapsed();
        if elapsed >= args.duration {
            return Ok(());
        }
        let due = (args.expiry_rate as f64 * elapsed.as_secs_f64()) as u64;
        let n = due.saturating_sub(sent).min(MAX_BATCH);
        if n == 0 {
            continue;
        }
        batch.clear();
        let now_ms = elapsed.as_millis() as u64;
        for i in sent..sent + n {
            let ttl = if rng.gen_bool(args.expiry_long_share) {
                LONG_TTL
            } else {
                rng.gen_range(ttl.min..=ttl.max)
            };
            // `stream` keeps the keys of servers that share a cache (two --target names for
            // one server) apart.
            batch.extend_from_slice(
                format!("set exp:{stream}:{i} 0 {ttl} {}\r\n", value.len()).as_bytes(),
            );
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
            ledger.borrow_mut().wrote(now_ms + u64::from(ttl) * 1000);
        }
        conn.write_all(&batch).await?;
        replies.resize(n as usize * b"STORED\r\n".len(), 0);
        conn.read_exact(&mut replies)
            .await
            .context("reading the replies to a batch of sets")?;
        if let Some(bad) = replies
            .chunks(b"STORED\r\n".len())
            .find(|r| *r != b"STORED\r\n")
        {
            bail!("a set was answered {:?}", String::from_utf8_lossy(bad));
        }
        sent += n;
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.2}", bytes / (1024.0 * 1024.0))
}

/// Per second, side by side: bytes held, bytes held in expired items, their share, RSS.
fn timeline(outcomes: &[Outcome]) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = write!(t, "\n{:>4}", "");
    for o in outcomes {
        let _ = write!(t, "  {:^41}", format!("--- {} ---", o.name));
    }
    let _ = write!(t, "\n{:>4}", "sec");
    for _ in outcomes {
        let _ = write!(
            t,
            "  {:>9} {:>10} {:>9} {:>9}",
            "held MiB", "expired MiB", "expired%", "RSS MiB"
        );
    }
    t.push('\n');
    let n = outcomes.iter().map(|o| o.samples.len()).min().unwrap_or(0);
    for i in 0..n {
        let _ = write!(t, "{:>4}", i + 1);
        for o in outcomes {
            let s = &o.samples[i];
            let _ = write!(
                t,
                "  {:>9} {:>10} {:>9.1} {:>9}",
                mib(s.held_bytes as f64),
                mib(s.expired_bytes() as f64),
                100.0 * s.expired_share(),
                s.rss.map_or("-".into(), |r| mib(r as f64))
            );
        }
        t.push('\n');
    }
    t
}

fn summary_table(outcomes: &[Outcome], summaries: &[Summary], steady_from: f64) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nbytes held in expired items (steady: from second {steady_from:.0} on, once the \
         first short TTLs have run out; early gone: live items no longer held):"
    );
    let _ = writeln!(
        t,
        "{:<12} {:>10} {:>10} {:>10} {:>15} {:>13} {:>13} {:>12}",
        "server",
        "sets",
        "peak MiB",
        "mean MiB",
        "steady mean MiB",
        "steady share%",
        "early gone%",
        "peak RSS MiB"
    );
    for (o, s) in outcomes.iter().zip(summaries) {
        let _ = writeln!(
            t,
            "{:<12} {:>10} {:>10} {:>10} {:>15} {:>13.1} {:>13.1} {:>12}",
            o.name,
            o.written,
            mib(s.peak as f64),
            mib(s.mean),
            mib(s.steady_mean),
            100.0 * s.steady_share,
            100.0 * s.steady_early_share,
            s.peak_rss.map_or("-".into(), |r| mib(r as f64))
        );
    }
    for o in outcomes {
        let pick = |stats: &Stats, names: &[&str]| {
            names
                .iter()
                .filter_map(|n| stats.0.get(*n).map(|v| format!("{n}={v}")))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(
            t,
            "{}: settings [{}]; at the end [{}]",
            o.name,
            pick(&o.settings, &SETTINGS),
            pick(&o.end, &COUNTERS)
        );
        if o.end.int_or_zero("evictions") > 0 {
            let _ = writeln!(
                t,
                "{}: evicted items (raise --server-memory): expired bytes are underestimated",
                o.name
            );
        }
    }
    t
}

/// (seconds since the first write, value) at each sample.
fn series(o: &Outcome, f: &dyn Fn(&Sample) -> Option<f64>) -> Vec<(f64, f64)> {
    o.samples
        .iter()
        .filter_map(|s| f(s).map(|v| (s.at, v)))
        .collect()
}

/// The figures of a run, one line per server: bytes held in expired items and resident
/// memory over time, as PNGs beside expiry.json.
fn figures(dir: &std::path::Path, outcomes: &[Outcome]) -> Result<Vec<std::path::PathBuf>> {
    const MIB: f64 = 1024.0 * 1024.0;
    plot::timelines(
        dir,
        outcomes,
        |o| o.name.clone(),
        &[
            Timeline {
                file: "expiry-expired-bytes",
                title: "Memory held by expired items (Segcache §3.5)",
                y_label: "MiB",
                points: |o| series(o, &|s| Some(s.expired_bytes() as f64 / MIB)),
            },
            Timeline {
                file: "expiry-rss",
                title: "Resident memory",
                y_label: "MiB",
                points: |o| series(o, &|s| s.rss.map(|r| r as f64 / MIB)),
            },
        ],
    )
}

fn json_report(
    args: &LoadArgs,
    outcomes: &[Outcome],
    summaries: &[Summary],
    steady_from: f64,
    load_at_end: &str,
) -> serde_json::Value {
    let servers: Vec<serde_json::Value> = outcomes
        .iter()
        .zip(summaries)
        .map(|(o, s)| {
            json!({
                "name": o.name,
                "series": {
                    "held_bytes": series(o, &|s| Some(s.held_bytes as f64)),
                    "expired_bytes": series(o, &|s| Some(s.expired_bytes() as f64)),
                    "expired_share": series(o, &|s| Some(s.expired_share())),
                    "early_gone_share": series(o, &|s| Some(s.early_share())),
                    "held_items": series(o, &|s| Some(s.held_items as f64)),
                    "live_items": series(o, &|s| Some(s.live_items as f64)),
                    "rss_bytes": series(o, &|s| s.rss.map(|r| r as f64)),
                },
                "summary": {
                    "sets": o.written,
                    "peak_expired_bytes": s.peak,
                    "mean_expired_bytes": s.mean,
                    "steady_mean_expired_bytes": s.steady_mean,
                    "steady_expired_share": s.steady_share,
                    "steady_early_gone_share": s.steady_early_share,
                    "peak_rss_bytes": s.peak_rss,
                },
                "settings": o.settings.0,
                "stats_at_end": o.end.0,
            })
        })
        .collect();
    json!({
        "parameters": {
            "rate": args.expiry_rate,
            "short_ttl_s": [args.expiry_short_ttl.min, args.expiry_short_ttl.max],
            "long_ttl_s": LONG_TTL,
            "long_share": args.expiry_long_share,
            "value_size": args.value_size.to_string(),
            "duration_s": args.duration.as_secs_f64(),
            "server_memory_mib": args.server_memory,
            "grace_s": GRACE.as_secs_f64(),
            "steady_from_s": steady_from,
        },
        "load_average_at_end": load_at_end,
        "servers": servers,
    })
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

    #[test]
    fn the_ledger_counts_items_live_until_their_deadline_plus_the_grace() {
        let mut l = Ledger::default();
        l.wrote(1000);
        l.wrote(1000);
        l.wrote(5000);
        assert_eq!(l.live(1500), 3);
        assert_eq!(l.live(2000), 1);
        assert_eq!(l.live(5999), 1);
        assert_eq!(l.live(6000), 0);
    }

    #[test]
    fn expired_bytes_use_the_servers_own_bytes_per_item() {
        let s = Sample {
            at: 1.0,
            held_items: 100,
            held_bytes: 20_000,
            live_items: 25,
            rss: None,
        };
        assert_eq!(s.expired_items(), 75);
        assert_eq!(s.expired_bytes(), 15_000);
        // A server that expired items early holds no expired bytes.
        let early = Sample {
            live_items: 150,
            ..s
        };
        assert_eq!(early.expired_bytes(), 0);
    }
}
