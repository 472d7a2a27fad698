//! `memfleet bench migration`: moving a cache cluster through the router, as an operator
//! does with mcrouter (issue 29): shadow a new cluster while the old one answers (the
//! router compares their gets), migrate (`migrate` route: deletes to both, gets from the new
//! one falling back to the old), then drain the old one by putting a `null` route in its
//! place — all by reloading the router's file (SIGHUP) under look-aside load with writes.
//!
//! Four `memfleet server`s (two old, two new) behind one `memfleet router -t 1`. The old
//! cluster starts full (each key expiring within `--ttl`), the new one empty. Readers do
//! look-aside caching (`--conns` closed loops; a miss of a cached key queries the simulated
//! database and fills the key to expire `--ttl` seconds later); a writer bumps written
//! keys' versions, deletes each through the router (awaited) and stores the new version or
//! leaves the key absent (an invalidation), so every read of a written key is checked for staleness (`clients`). Per second: client
//! gets, hits, database queries, errors, stale reads; the requests each cluster's servers
//! served; the router's shadow comparisons and mismatches.
//!
//! What it shows: 0 client errors and 0 stale reads through every reload; the mismatches
//! fall as the new cluster warms from shadowed fills; the old cluster serves nothing once
//! drained. With `--out DIR`: `migration.json` and the figures `migration-requests.png`
//! (each cluster's requests per second) and `migration-mismatches.png`.

mod clients;
mod report;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use memfleet_sim::duration::parse_duration;
use memfleet_testkit::{Router, RouterConfig, Spawned};

use super::args::{Keys, MemfleetBin};
use super::run_log::{write_results, RunLog};
use super::runtime;
use super::target::free_port;
use clients::{unix_now, written_value, Conn, Reading, Shared};

/// `memfleet bench migration`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrationArgs {
    /// The cached keys (`key:N`), their popularity and value size.
    #[command(flatten)]
    pub keys: Keys,
    /// The memfleet executable (servers and router).
    #[command(flatten)]
    pub memfleet: MemfleetBin,
    /// Look-aside readers, each a closed loop on a connection of its own.
    #[arg(short = 'c', long, default_value_t = 16)]
    pub conns: usize,
    /// How long a simulated database query takes.
    #[arg(long, value_parser = parse_duration, default_value = "2ms")]
    pub db_latency: Duration,
    /// How long the new cluster is shadowed before the migration starts.
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    pub shadow_for: Duration,
    /// How long the migrate route runs with the old cluster as its fallback.
    #[arg(long, value_parser = parse_duration, default_value = "8s")]
    pub migrate_for: Duration,
    /// How long the run goes on after the old cluster is drained (a null route in its
    /// place).
    #[arg(long, value_parser = parse_duration, default_value = "8s")]
    pub drain_for: Duration,
    /// Cached keys expire within this many seconds of their fill.
    #[arg(long, default_value_t = 6)]
    pub ttl: u64,
    /// Keys only the writer stores (`w:N`); every read of one is checked for staleness.
    #[arg(long, default_value_t = 200)]
    pub written_keys: u64,
    /// The fraction of reads that are of written keys.
    #[arg(long, default_value_t = 0.2)]
    pub written_reads: f64,
    /// The writer's cycles per second (bump the version, delete, store).
    #[arg(long, default_value_t = 200)]
    pub writes: u64,
    /// A short run for tests: 5 000 keys at most, 4 readers, phases of 5, 3 and 3 s, a
    /// 3 s TTL.
    #[arg(long)]
    pub quick: bool,
    /// Write migration.json and its figures into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Where the migration stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Phase {
    /// `shadow`: old answers, new gets copies.
    #[default]
    Shadow,
    /// `migrate` from old to new.
    Migrate,
    /// `migrate` from a `null` route to new: the old cluster drained.
    Drain,
}

impl Phase {
    pub(super) fn name(self) -> &'static str {
        match self {
            Phase::Shadow => "shadow",
            Phase::Migrate => "migrate",
            Phase::Drain => "drain",
        }
    }
}

/// Servers in each cluster.
const SERVERS: usize = 2;

/// The settings a run uses (`--quick` applied).
struct Settings {
    keys: u64,
    conns: usize,
    phases: [(Phase, Duration); 3],
    ttl: u64,
}

impl Settings {
    fn of(args: &MigrationArgs) -> Settings {
        if args.quick {
            let s = Duration::from_secs;
            Settings {
                keys: args.keys.keys.min(5_000),
                conns: args.conns.min(4),
                phases: [
                    (Phase::Shadow, s(5)),
                    (Phase::Migrate, s(3)),
                    (Phase::Drain, s(3)),
                ],
                ttl: args.ttl.min(3),
            }
        } else {
            Settings {
                keys: args.keys.keys,
                conns: args.conns,
                phases: [
                    (Phase::Shadow, args.shadow_for),
                    (Phase::Migrate, args.migrate_for),
                    (Phase::Drain, args.drain_for),
                ],
                ttl: args.ttl,
            }
        }
    }
}

/// The router's file in `phase`: the old pool also listens on `side` (the experiment fills
/// the old cluster through it); the route `cache` on `listen` is what clients use.
fn config(phase: Phase, listen: u16, side: u16, old: &[u16], new: &[u16], since: u64) -> String {
    let mut c = RouterConfig::new();
    c.pool("old", old).listen(side);
    c.pool("new", new);
    match phase {
        Phase::Shadow => {
            c.route("cache", "shadow")
                .listen(listen)
                .set_str("main", "old")
                .set_str("shadow", "new")
                .set("key_fraction", "[0.0, 1.0]");
        }
        Phase::Migrate | Phase::Drain => {
            let from = if phase == Phase::Drain {
                c.route("drained", "null");
                "drained"
            } else {
                "old"
            };
            c.route("cache", "migrate")
                .listen(listen)
                .set_str("from", from)
                .set_str("to", "new")
                .set("start_time", since)
                .set("interval", 86_400);
        }
    }
    c.text()
}

/// `memfleet bench migration`.
pub fn bench(args: &MigrationArgs) -> Result<()> {
    let settings = Settings::of(args);
    if settings.conns == 0 || !(0.0..=1.0).contains(&args.written_reads) {
        bail!("--conns must be at least 1 and --written-reads within 0..1");
    }
    if settings
        .phases
        .iter()
        .any(|p| p.1.subsec_nanos() != 0 || p.1.is_zero())
    {
        bail!("each phase lasts a whole number of seconds, at least 1");
    }
    let value_size = args.keys.fixed_value_size("migration")?;
    let workload = super::workload::Workload::new(settings.keys, 1.0, value_size, args.keys.zipf)
        .map_err(anyhow::Error::msg)?;
    println!(
        "memfleet bench migration: {SERVERS} old and {SERVERS} new memfleet servers behind a \
         router; {} look-aside readers over {} keys{} (TTL {} s, database {:?}), {:.0}% of reads \
         of {} written keys, {} writes/s; phases {}",
        settings.conns,
        settings.keys,
        args.keys.distribution(),
        settings.ttl,
        args.db_latency,
        args.written_reads * 100.0,
        args.written_keys,
        args.writes,
        settings
            .phases
            .iter()
            .map(|(p, d)| format!("{} {:?}", p.name(), d))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let log = RunLog::new();
    log.print_start();
    let reading = Reading {
        workload,
        written_keys: args.written_keys,
        written_reads: args.written_reads,
        db_latency: args.db_latency,
        ttl: settings.ttl,
        value_size,
    };
    let (rt, local) = runtime()?;
    let (seconds, boundaries) = local.block_on(&rt, run(args, &settings, Rc::new(reading)))?;
    let summary = report::Summary::of(&seconds);
    print!("{}", report::table(&seconds, &summary));
    let load_at_end = log.print_end();
    if let Some(dir) = &args.out {
        let value = report::json(
            &settings_json(args, &settings),
            &seconds,
            &summary,
            &boundaries,
            &load_at_end,
        );
        write_results(dir, "migration", &value)?;
        for figure in report::figures(dir, &seconds)? {
            println!("figure: {}", figure.display());
        }
    }
    if summary.errors > 0 || summary.stale > 0 {
        bail!(
            "{} client errors and {} stale reads (both must be 0)",
            summary.errors,
            summary.stale
        );
    }
    Ok(())
}

fn settings_json(args: &MigrationArgs, s: &Settings) -> serde_json::Value {
    serde_json::json!({
        "servers_per_cluster": SERVERS,
        "keys": s.keys,
        "zipf": args.keys.zipf,
        "conns": s.conns,
        "ttl_s": s.ttl,
        "db_latency_ms": args.db_latency.as_secs_f64() * 1000.0,
        "written_keys": args.written_keys,
        "written_reads": args.written_reads,
        "writes_per_s": args.writes,
        "phases_s": s.phases.iter().map(|(p, d)| (p.name(), d.as_secs_f64())).collect::<Vec<_>>(),
    })
}

/// The run: servers, router, the old cluster filled, the clients through the three
/// phases. Returns each second and when each phase began (seconds from the start).
async fn run(
    args: &MigrationArgs,
    settings: &Settings,
    reading: Rc<clients::Reading>,
) -> Result<(Vec<clients::Second>, Vec<(Phase, f64)>)> {
    let bin = &args.memfleet.memfleet_bin;
    let mut servers = Vec::new();
    for _ in 0..2 * SERVERS {
        servers.push(Spawned::memfleet_server(bin, 64)?);
    }
    let ports: Vec<u16> = servers.iter().map(|s| s.1).collect();
    let (old, new) = ports.split_at(SERVERS);
    let (listen, side) = (free_port()?, free_port()?);
    let addr: SocketAddr = ([127, 0, 0, 1], listen).into();
    let text = config(Phase::Shadow, listen, side, old, new, 0);
    let router = Router::start(bin, &text, addr, None)?;
    println!(
        "router pid {} on {addr}; old {old:?}, new {new:?}",
        router.spawned.pid()
    );
    fill_old(([127, 0, 0, 1], side).into(), settings, &reading).await?;

    let total: Duration = settings.phases.iter().map(|p| p.1).sum();
    let start = Instant::now();
    let deadline = start + total;
    let shared = Rc::new(Shared::new(
        start,
        total.as_secs_f64().ceil() as usize,
        reading.written_keys,
    ));
    let mut tasks = Vec::new();
    for c in 0..settings.conns {
        let (shared, reading) = (shared.clone(), reading.clone());
        tasks.push(tokio::task::spawn_local(async move {
            clients::reader(addr, &shared, &reading, c as u64, deadline).await
        }));
    }
    {
        let (shared, reading) = (shared.clone(), reading.clone());
        let (written, writes) = (args.written_keys, args.writes);
        tasks.push(tokio::task::spawn_local(async move {
            clients::writer(addr, &shared, written, writes, reading.value_size, deadline).await
        }));
    }
    let to_addr = |p: &u16| -> SocketAddr { ([127, 0, 0, 1], *p).into() };
    let (old_addrs, new_addrs): (Vec<_>, Vec<_>) = (
        old.iter().map(to_addr).collect(),
        new.iter().map(to_addr).collect(),
    );
    let mut sampler = clients::Sampler::open(addr, &old_addrs, &new_addrs).await?;
    // Each second: its counters read at its end, then (at a phase's end) the reload into
    // the next phase, waited for until the router serves the new file. A second is the
    // phase's that began at its start.
    let mut boundaries = vec![(Phase::Shadow, 0.0)];
    let mut phase_ends = Vec::new();
    let mut end = Duration::ZERO;
    for (phase, length) in &settings.phases {
        end += *length;
        phase_ends.push((*phase, end.as_secs()));
    }
    let since = unix_now();
    let mut phase = Phase::Shadow;
    for tick in 1..=total.as_secs() {
        tokio::time::sleep_until((start + Duration::from_secs(tick)).into()).await;
        let mut read = clients::Second::default();
        sampler.sample(&mut read).await?;
        {
            let mut seconds = shared.seconds.borrow_mut();
            let second = &mut seconds[tick as usize - 1];
            second.phase = phase;
            second.take_counters(&read);
        }
        let next = phase_ends
            .iter()
            .position(|(_, e)| *e == tick)
            .and_then(|i| phase_ends.get(i + 1));
        if let Some((next, _)) = next {
            let text = config(*next, listen, side, old, new, since);
            router.reload(&text)?;
            let took = until_serving(addr, &text).await?;
            let from = start.elapsed().as_secs_f64();
            println!(
                "{from:>6.2} s: reloaded into {} ({took:?} to apply)",
                next.name()
            );
            boundaries.push((*next, from));
            phase = *next;
        }
    }
    for t in tasks {
        t.await.context("a client task")??;
    }
    drop(router);
    drop(servers);
    let seconds = shared.seconds.borrow().clone();
    Ok((seconds, boundaries))
}

/// Stores every cached key (expiring within the TTL, spread so they do not all expire in
/// the same second; relative exptimes, see below) and every written key at version 0 in the old cluster, 1 000 sets per
/// batch.
///
/// Expiry times are relative, in the fills too: every memfleet (and memcached) server
/// counts whole seconds of the same monotonic clock, so a key set into both clusters within
/// a second expires in both at once; an absolute (Unix) exptime is turned into that count
/// from the wall clock at each server's start, so two servers may disagree on it by a
/// second, and a hot key's shadow gets would differ for that second of each TTL.
async fn fill_old(side: SocketAddr, settings: &Settings, reading: &Reading) -> Result<()> {
    let mut conn = Conn::open(side).await?;
    let value = vec![b'c'; reading.value_size];
    let spread = settings.ttl.max(1);
    let cached = (0..settings.keys).map(|n| (format!("key:{n}"), 1 + n % spread, value.clone()));
    let written = (0..reading.written_keys)
        .map(|n| (format!("w:{n}"), 0, written_value(0, reading.value_size)));
    let all: Vec<(String, u64, Vec<u8>)> = cached.chain(written).collect();
    for chunk in all.chunks(1000) {
        let mut batch = Vec::new();
        for (key, exptime, v) in chunk {
            batch.extend_from_slice(format!("set {key} 0 {exptime} {}\r\n", v.len()).as_bytes());
            batch.extend_from_slice(v);
            batch.extend_from_slice(b"\r\n");
        }
        conn.write_raw(&batch).await?;
        for _ in chunk {
            let l = conn.read_line().await?;
            if l != "STORED\r\n" {
                bail!("filling the old cluster: {l:?}");
            }
        }
    }
    Ok(())
}

/// Waits until the router at `addr` serves the file `text` (its `config_md5`); returns how
/// long that took.
async fn until_serving(addr: SocketAddr, text: &str) -> Result<Duration> {
    let want = memfleet_routing::config::ConfigOrigin::of("", text.as_bytes()).md5;
    let asked = Instant::now();
    let mut conn = Conn::open(addr).await?;
    while asked.elapsed() < Duration::from_secs(10) {
        let l = conn.call(b"get __memfleet__.config_md5\r\n").await?;
        let mut seen = String::new();
        if l.starts_with("VALUE ") {
            seen = conn.read_line().await?.trim_end().to_string();
            conn.read_line().await?; // END
        }
        if seen == want {
            return Ok(asked.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("the router did not apply its new file within 10 s")
}
