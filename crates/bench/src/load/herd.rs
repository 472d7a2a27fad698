//! `memfleet bench --scenario herd`: the thundering-herd experiment of Facebook §3.2.1.
//!
//! One hot key, read in a closed loop by `--conns` clients that each behave like a web
//! server doing look-aside caching against a simulated database. A writer updates the
//! database row every `--herd-invalidate` and then deletes the key, as the paper's
//! applications do. The database is in-process: every query takes `--herd-db-latency`
//! and is counted in 100 ms windows, so the report can give the mean and the peak query
//! rate the cache let through.
//!
//! The same traffic runs in up to three ways against each server:
//! - `plain`: `get`; on a miss, query the database and `set` (every client that misses
//!   after a delete queries: the herd).
//! - `lease`: mcrouter's `lease-get`/`lease-set` (memfleet): one client per key per delete
//!   gets a token and queries; the others get a hot miss and retry after `--herd-retry`.
//! - `meta`: memcached's meta-protocol leases, `mg <key> v c N30` then `ms <key> C<cas>`
//!   (memcached 1.6 and memfleet): the `W` winner queries, `Z` readers retry.
//!
//! With `--herd-accept-stale`, a reader told to wait takes a stale value instead when one is
//! offered (memfleet keeps deleted values for lease reads; `X` in meta).
//!
//! Every value carries the database version it was read at, so a reader can tell a stale
//! value served as fresh — a cache hit older than the last update whose delete had
//! completed before the read began — which is what a late `set` after a delete (the stale
//! set leases prevent) causes.
//!
//! With `--out DIR`: `herd.json` (the table's rows with each one's database timeline) and
//! `herd-db-queries.png` (database queries per second in each 100 ms window, per mode).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::{command_line, load_average, runtime, start, LoadArgs};
use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use memfleet_results::plot::{self, Series};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How the readers talk to the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// get / set.
    Plain,
    /// lease-get / lease-set.
    Lease,
    /// mg N / ms C.
    Meta,
}

impl Mode {
    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Lease => "lease",
            Mode::Meta => "meta",
        }
    }
}

/// One herd run's parameters.
#[derive(Clone, Debug)]
pub struct HerdConfig {
    /// The cache.
    pub addr: SocketAddr,
    /// Reader connections.
    pub conns: usize,
    /// How long to run.
    pub duration: Duration,
    /// Time between database updates (each followed by a delete).
    pub invalidate_every: Duration,
    /// Time a database query takes.
    pub db_latency: Duration,
    /// Pause before a reader told to wait asks again.
    pub retry_after: Duration,
    /// Take a stale value rather than wait, when one is offered.
    pub accept_stale: bool,
    /// Value size in bytes (at least 20: the version is the first 20 digits).
    pub value_size: usize,
    /// The hot key.
    pub key: String,
}

/// What a herd run measured.
#[derive(Clone, Debug, Default)]
pub struct HerdResult {
    /// Reads completed (a value obtained, from the cache or the database).
    pub reads: u64,
    /// Reads answered by a cache hit on the first request.
    pub first_try_hits: u64,
    /// Database queries.
    pub db_queries: u64,
    /// Mean database queries per second over the run.
    pub db_qps_mean: f64,
    /// The busiest 100 ms window, as queries per second.
    pub db_qps_peak: f64,
    /// Times a reader was told to wait (hot miss, `Z` without a value).
    pub waits: u64,
    /// Reads that took a stale value by choice (`--herd-accept-stale`).
    pub stale_taken: u64,
    /// Cache hits older than the last completed update: stale data served as fresh.
    pub stale_served_as_fresh: u64,
    /// Fills the server refused (a lease voided by a delete, a CAS that moved on).
    pub fills_refused: u64,
    /// Database updates (each followed by a delete).
    pub updates: u64,
    /// Read latency percentiles, µs (p50, p99, max).
    pub latency_us: (u64, u64, u64),
    /// The measured wall time.
    pub elapsed: Duration,
    /// Database queries in each [`WINDOW`] of the run, from its start (the timeline behind
    /// the mean and the peak).
    pub db_windows: Vec<u64>,
}

/// The simulated database: one row whose version the writer bumps.
struct Db {
    version: Cell<u64>,
    /// The last version whose cache delete has completed.
    committed: Cell<u64>,
    start: Instant,
    latency: Duration,
    /// Queries per 100 ms window since `start`.
    windows: RefCell<Vec<u64>>,
    queries: Cell<u64>,
}

/// The database's query counting window.
pub const WINDOW: Duration = Duration::from_millis(100);

impl Db {
    /// A query: reads the row now, answers after the latency.
    async fn query(&self) -> u64 {
        let v = self.version.get();
        self.queries.set(self.queries.get() + 1);
        let w = (self.start.elapsed().as_nanos() / WINDOW.as_nanos()) as usize;
        {
            let mut windows = self.windows.borrow_mut();
            if windows.len() <= w {
                windows.resize(w + 1, 0);
            }
            windows[w] += 1;
        }
        tokio::time::sleep(self.latency).await;
        v
    }
}

/// A text-protocol connection with a read buffer.
struct Conn {
    s: BufReader<TcpStream>,
    line: String,
}

impl Conn {
    async fn connect(addr: SocketAddr) -> Result<Conn> {
        let s = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        s.set_nodelay(true)?;
        Ok(Conn {
            s: BufReader::new(s),
            line: String::new(),
        })
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<()> {
        self.s.get_mut().write_all(bytes).await?;
        Ok(())
    }

    /// The next reply line, without `\r\n`.
    async fn line(&mut self) -> Result<&str> {
        self.line.clear();
        let n = self.s.read_line(&mut self.line).await?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        Ok(self.line.trim_end())
    }

    /// A data block of `len` bytes and its `\r\n`.
    async fn data(&mut self, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0; len + 2];
        self.s.read_exact(&mut buf).await?;
        buf.truncate(len);
        Ok(buf)
    }

    async fn expect(&mut self, want: &str) -> Result<()> {
        let got = self.line().await?;
        if got != want {
            bail!("expected {want:?}, got {got:?}");
        }
        Ok(())
    }
}

fn encode(version: u64, size: usize) -> Vec<u8> {
    let mut v = format!("{version:020}").into_bytes();
    v.resize(size.max(20), b'x');
    v
}

fn decode(value: &[u8]) -> Result<u64> {
    std::str::from_utf8(value.get(..20).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .with_context(|| {
            format!(
                "value without a version: {:?}",
                String::from_utf8_lossy(value)
            )
        })
}

/// Which herd modes a server speaks: `plain` always, `meta` if `mn` works, `lease` if
/// `lease-get` does.
pub async fn supported_modes(addr: SocketAddr) -> Result<Vec<Mode>> {
    let mut c = Conn::connect(addr).await?;
    let mut modes = vec![Mode::Plain];
    c.send(b"mn\r\n").await?;
    let meta = c.line().await? == "MN";
    c.send(b"lease-get memfleet:herd:probe\r\n").await?;
    let first = c.line().await?.to_string();
    let lease = first.starts_with("LVALUE") || first.starts_with("VALUE");
    if lease {
        let len: usize = first
            .rsplit(' ')
            .next()
            .and_then(|l| l.parse().ok())
            .context("lease-get reply")?;
        c.data(len).await?;
        c.expect("END").await?;
        modes.push(Mode::Lease);
    }
    if meta {
        modes.push(Mode::Meta);
    }
    Ok(modes)
}

/// Shared state of one run.
struct Run {
    cfg: HerdConfig,
    mode: Mode,
    db: Db,
    end: Instant,
    result: RefCell<HerdResult>,
    latency: RefCell<Histogram<u64>>,
}

/// Runs one mode for `cfg.duration` and returns what it measured.
pub async fn run(cfg: &HerdConfig, mode: Mode) -> Result<HerdResult> {
    if cfg.conns == 0 {
        bail!("--conns must be at least 1");
    }
    let start = Instant::now();
    let run = Rc::new(Run {
        cfg: cfg.clone(),
        mode,
        db: Db {
            version: Cell::new(0),
            committed: Cell::new(0),
            start,
            latency: cfg.db_latency,
            windows: RefCell::new(Vec::new()),
            queries: Cell::new(0),
        },
        end: start + cfg.duration,
        result: RefCell::new(HerdResult::default()),
        latency: RefCell::new(Histogram::new(3).expect("valid histogram")),
    });
    // Start from a clean key holding version 0.
    let mut setup = Conn::connect(cfg.addr).await?;
    let value = encode(0, cfg.value_size);
    setup
        .send(format!("set {} 0 0 {}\r\n", cfg.key, value.len()).as_bytes())
        .await?;
    setup.send(&value).await?;
    setup.send(b"\r\n").await?;
    setup.expect("STORED").await?;

    let mut tasks = Vec::new();
    for _ in 0..cfg.conns {
        let conn = Conn::connect(cfg.addr).await?;
        let run = run.clone();
        tasks.push(tokio::task::spawn_local(
            async move { reader(&run, conn).await },
        ));
    }
    let writer = {
        let run = run.clone();
        tokio::task::spawn_local(async move { writer(&run, setup).await })
    };
    for t in tasks {
        t.await.context("reader task")??;
    }
    writer.await.context("writer task")??;
    let elapsed = start.elapsed();
    let mut r = run.result.borrow().clone();
    r.db_queries = run.db.queries.get();
    r.db_qps_mean = r.db_queries as f64 / elapsed.as_secs_f64();
    let mut windows = run.db.windows.borrow().clone();
    // Quiet windows at the end count too: the timeline covers the whole run.
    let covered = elapsed.as_nanos().div_ceil(WINDOW.as_nanos()) as usize;
    windows.resize(windows.len().max(covered), 0);
    let peak = windows.iter().copied().max().unwrap_or(0);
    r.db_qps_peak = peak as f64 / WINDOW.as_secs_f64();
    r.db_windows = windows;
    let h = run.latency.borrow();
    r.latency_us = (h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max());
    r.elapsed = elapsed;
    Ok(r)
}

/// Updates the row and deletes the key, every `invalidate_every`, until the end.
async fn writer(run: &Run, mut conn: Conn) -> Result<()> {
    loop {
        let next = Instant::now() + run.cfg.invalidate_every;
        if next >= run.end {
            tokio::time::sleep_until(run.end.into()).await;
            return Ok(());
        }
        tokio::time::sleep_until(next.into()).await;
        let version = run.db.version.get() + 1;
        run.db.version.set(version);
        conn.send(format!("delete {}\r\n", run.cfg.key).as_bytes())
            .await?;
        let reply = conn.line().await?;
        if reply != "DELETED" && reply != "NOT_FOUND" {
            bail!("delete: unexpected reply {reply:?}");
        }
        run.db.committed.set(version);
        run.result.borrow_mut().updates += 1;
    }
}

/// What one request for the key told a reader.
enum Answer {
    /// A fresh value from the cache.
    Hit(u64),
    /// Fill it: query the database, then store with this token (0 for a plain set).
    Fill(u64),
    /// Someone else is filling; a stale value may come with the advice.
    Wait(Option<u64>),
}

async fn ask(run: &Run, c: &mut Conn) -> Result<Answer> {
    let key = &run.cfg.key;
    match run.mode {
        Mode::Plain => {
            c.send(format!("get {key}\r\n").as_bytes()).await?;
            let line = c.line().await?.to_string();
            if line == "END" {
                return Ok(Answer::Fill(0));
            }
            let len = last_number(&line)?;
            let v = decode(&c.data(len as usize).await?)?;
            c.expect("END").await?;
            Ok(Answer::Hit(v))
        }
        Mode::Lease => {
            c.send(format!("lease-get {key}\r\n").as_bytes()).await?;
            let line = c.line().await?.to_string();
            let words: Vec<&str> = line.split(' ').collect();
            let len = last_number(&line)? as usize;
            let data = c.data(len).await?;
            c.expect("END").await?;
            let value = (!data.is_empty()).then(|| decode(&data)).transpose()?;
            match words.as_slice() {
                ["VALUE", ..] => Ok(Answer::Hit(value.context("empty hit")?)),
                ["LVALUE", _, "1", ..] => Ok(Answer::Wait(value)),
                ["LVALUE", _, token, ..] => Ok(Answer::Fill(token.parse()?)),
                _ => bail!("lease-get: unexpected reply {line:?}"),
            }
        }
        Mode::Meta => {
            c.send(format!("mg {key} v c N30\r\n").as_bytes()).await?;
            let line = c.line().await?.to_string();
            let mut words = line.split(' ');
            if words.next() != Some("VA") {
                bail!("mg: unexpected reply {line:?}");
            }
            let len: usize = words.next().context("mg length")?.parse()?;
            let (mut cas, mut won, mut stale) = (0, false, false);
            for w in words {
                match w.as_bytes()[0] {
                    b'c' => cas = w[1..].parse()?,
                    b'W' => won = true,
                    b'X' => stale = true,
                    _ => {}
                }
            }
            let data = c.data(len).await?;
            let value = (!data.is_empty()).then(|| decode(&data)).transpose()?;
            if won {
                return Ok(Answer::Fill(cas));
            }
            match value {
                Some(v) if !stale => Ok(Answer::Hit(v)),
                _ => Ok(Answer::Wait(value)),
            }
        }
    }
}

/// Stores a value read from the database; false when the server refused it.
async fn fill(run: &Run, c: &mut Conn, token: u64, version: u64) -> Result<bool> {
    let key = &run.cfg.key;
    let value = encode(version, run.cfg.value_size);
    let line = match run.mode {
        Mode::Plain => format!("set {key} 0 0 {}\r\n", value.len()),
        Mode::Lease => format!("lease-set {key} {token} 0 0 {}\r\n", value.len()),
        Mode::Meta => format!("ms {key} {} C{token}\r\n", value.len()),
    };
    c.send(line.as_bytes()).await?;
    c.send(&value).await?;
    c.send(b"\r\n").await?;
    match c.line().await? {
        "STORED" | "HD" => Ok(true),
        "NOT_STORED" | "EX" | "NF" | "NS" => Ok(false),
        other => bail!("fill: unexpected reply {other:?}"),
    }
}

async fn reader(run: &Run, mut c: Conn) -> Result<()> {
    while Instant::now() < run.end {
        let began = Instant::now();
        let committed = run.db.committed.get();
        let mut first = true;
        loop {
            match ask(run, &mut c).await? {
                Answer::Hit(v) => {
                    let mut r = run.result.borrow_mut();
                    r.first_try_hits += u64::from(first);
                    r.stale_served_as_fresh += u64::from(v < committed);
                    break;
                }
                Answer::Fill(token) => {
                    let v = run.db.query().await;
                    if !fill(run, &mut c, token, v).await? {
                        run.result.borrow_mut().fills_refused += 1;
                    }
                    break;
                }
                Answer::Wait(Some(_)) if run.cfg.accept_stale => {
                    run.result.borrow_mut().stale_taken += 1;
                    break;
                }
                Answer::Wait(_) => {
                    run.result.borrow_mut().waits += 1;
                    first = false;
                    if Instant::now() >= run.end {
                        return Ok(());
                    }
                    tokio::time::sleep(run.cfg.retry_after).await;
                }
            }
        }
        run.result.borrow_mut().reads += 1;
        let us = began.elapsed().as_micros() as u64;
        let _ = run.latency.borrow_mut().record(us.max(1));
    }
    Ok(())
}

fn last_number(line: &str) -> Result<u64> {
    line.rsplit(' ')
        .next()
        .and_then(|w| w.parse().ok())
        .with_context(|| format!("no length in {line:?}"))
}

/// The report table: one row per (server, mode).
pub fn table(rows: &[(String, Mode, HerdResult)]) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<12} {:<6} {:>10} {:>8} {:>9} {:>10} {:>10} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8}",
        "server",
        "mode",
        "reads/s",
        "hit1 %",
        "db total",
        "db q/s",
        "db peak/s",
        "waits",
        "stale",
        "stale-hit",
        "refused",
        "p50 µs",
        "p99 µs"
    );
    for (server, mode, r) in rows {
        let secs = r.elapsed.as_secs_f64().max(1e-9);
        let _ = writeln!(
            t,
            "{:<12} {:<6} {:>10.0} {:>8.2} {:>9} {:>10.1} {:>10.0} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8}",
            server,
            mode.name(),
            r.reads as f64 / secs,
            100.0 * r.first_try_hits as f64 / r.reads.max(1) as f64,
            r.db_queries,
            r.db_qps_mean,
            r.db_qps_peak,
            r.waits,
            r.stale_taken,
            r.stale_served_as_fresh,
            r.fills_refused,
            r.latency_us.0,
            r.latency_us.1
        );
    }
    t
}

/// `--scenario herd`: every target, every mode it speaks, `--repeat` times; prints each run
/// and the table of medians (by peak database rate).
pub fn bench(args: &LoadArgs) -> Result<()> {
    if args.spawn.is_empty() && args.target.is_empty() {
        bail!("nothing to load: give --spawn memcached|memfleet or --target NAME=HOST:PORT");
    }
    if args.repeat == 0 || args.duration.is_zero() || args.herd_invalidate.is_zero() {
        bail!("--repeat, --duration and --herd-invalidate must be positive");
    }
    let wanted: Vec<Mode> = args
        .herd_modes
        .iter()
        .map(|m| match m.as_str() {
            "plain" => Ok(Mode::Plain),
            "lease" => Ok(Mode::Lease),
            "meta" => Ok(Mode::Meta),
            other => bail!("--herd-modes: unknown mode {other:?} (plain, lease, meta)"),
        })
        .collect::<Result<_>>()?;
    let command = command_line();
    let load_at_start = load_average();
    println!(
        "memfleet bench --scenario herd: {} readers of one hot key, updated and deleted every \
         {:?}; database queries take {:?}; waiting readers retry after {:?}{}; {:?} per run, \
         {} repeat(s)",
        args.conns,
        args.herd_invalidate,
        args.herd_db_latency,
        args.herd_retry,
        if args.herd_accept_stale {
            ", or take a stale value"
        } else {
            ""
        },
        args.duration,
        args.repeat
    );
    println!("load average at start: {load_at_start}");
    println!("command: {command}");
    let settings = args.server_settings(false);
    let (_, server_pin) = args.pins();
    let targets = args.targets();
    let (rt, local) = runtime()?;
    let mut runs: Vec<(String, Mode, Vec<HerdResult>)> = Vec::new();
    local.block_on(&rt, async {
        for t in &targets {
            let (spawned, addr) = start(t, &settings, server_pin, &[])?;
            let spoken = supported_modes(addr).await?;
            for &mode in wanted.iter().filter(|m| spoken.contains(m)) {
                let mut results = Vec::new();
                for r in 1..=args.repeat {
                    let cfg = HerdConfig {
                        addr,
                        conns: args.conns,
                        duration: args.duration,
                        invalidate_every: args.herd_invalidate,
                        db_latency: args.herd_db_latency,
                        retry_after: args.herd_retry,
                        accept_stale: args.herd_accept_stale,
                        value_size: args.fixed_value_size("--scenario herd")?,
                        key: format!("herd:{}:{r}", mode.name()),
                    };
                    let res = run(&cfg, mode)
                        .await
                        .with_context(|| format!("{} herd in mode {}", t.name(), mode.name()))?;
                    println!(
                        "[{}] {} run {r}/{}: db peak {:.0}/s, mean {:.1}/s, {} queries for {} \
                         updates, {} reads",
                        t.name(),
                        mode.name(),
                        args.repeat,
                        res.db_qps_peak,
                        res.db_qps_mean,
                        res.db_queries,
                        res.updates,
                        res.reads
                    );
                    results.push(res);
                }
                runs.push((t.name().to_string(), mode, results));
            }
            for m in wanted.iter().filter(|m| !spoken.contains(m)) {
                println!("[{}] does not speak mode {}: skipped", t.name(), m.name());
            }
            drop(spawned);
        }
        anyhow::Ok(())
    })?;
    let rows: Vec<(String, Mode, HerdResult)> = runs
        .into_iter()
        .map(|(name, mode, mut results)| {
            results.sort_by(|a, b| a.db_qps_peak.total_cmp(&b.db_qps_peak));
            let median = results.swap_remove(results.len() / 2);
            (name, mode, median)
        })
        .collect();
    println!();
    if args.repeat > 1 {
        println!("median (by database peak) of {} runs:", args.repeat);
    }
    print!("{}", table(&rows));
    println!(
        "columns: hit1 = reads answered by their first request; db q/s = mean database \
         queries per second, db peak/s = busiest 100 ms window; waits = hot misses retried; \
         stale = stale values taken by choice; stale-hit = stale values served as fresh; \
         refused = fills the server refused"
    );
    let load_at_end = load_average();
    println!("load average: {load_at_start} at start, {load_at_end} at end");
    println!("command: {command}");
    if let Some(dir) = &args.out {
        let value = json_report(args, &rows, &load_at_end);
        let path = memfleet_results::write_json(dir, "herd", "herd", &value)?;
        println!("results: {}", path.display());
        let figure = dir.join("herd-db-queries.png");
        plot::line_chart(
            &figure,
            "Database queries per second, per 100 ms window (Facebook §3.2.1)",
            "seconds",
            "queries/s",
            &rows
                .iter()
                .map(|(server, mode, r)| Series {
                    name: format!("{server} {}", mode.name()),
                    points: db_timeline(r),
                })
                .collect::<Vec<_>>(),
            false,
        )?;
        println!("figure: {}", figure.display());
    }
    Ok(())
}

/// The database's query rate over a run: (seconds since the start at the end of the
/// window, queries per second in the window).
fn db_timeline(r: &HerdResult) -> Vec<(f64, f64)> {
    let window = WINDOW.as_secs_f64();
    r.db_windows
        .iter()
        .enumerate()
        .map(|(i, &n)| ((i + 1) as f64 * window, n as f64 / window))
        .collect()
}

/// `herd.json`: the parameters and, per server and mode, the table's row (the median run)
/// with its database timeline.
fn json_report(
    args: &LoadArgs,
    rows: &[(String, Mode, HerdResult)],
    load_at_end: &str,
) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|(server, mode, r)| {
            let secs = r.elapsed.as_secs_f64().max(1e-9);
            json!({
                "server": server,
                "mode": mode.name(),
                "reads": r.reads,
                "reads_per_s": r.reads as f64 / secs,
                "first_try_hits": r.first_try_hits,
                "db_queries": r.db_queries,
                "db_qps_mean": r.db_qps_mean,
                "db_qps_peak": r.db_qps_peak,
                "waits": r.waits,
                "stale_taken": r.stale_taken,
                "stale_served_as_fresh": r.stale_served_as_fresh,
                "fills_refused": r.fills_refused,
                "updates": r.updates,
                "latency_p50_us": r.latency_us.0,
                "latency_p99_us": r.latency_us.1,
                "latency_max_us": r.latency_us.2,
                "elapsed_s": secs,
                "db_qps_timeline": db_timeline(r),
            })
        })
        .collect();
    json!({
        "parameters": {
            "conns": args.conns,
            "duration_s": args.duration.as_secs_f64(),
            "invalidate_every_ms": args.herd_invalidate.as_secs_f64() * 1000.0,
            "db_latency_ms": args.herd_db_latency.as_secs_f64() * 1000.0,
            "retry_after_ms": args.herd_retry.as_secs_f64() * 1000.0,
            "accept_stale": args.herd_accept_stale,
            "value_size": args.value_size.to_string(),
            "repeat": args.repeat,
            "window_ms": WINDOW.as_secs_f64() * 1000.0,
            "rows_are": "the run with the median database peak of each server and mode",
        },
        "load_average_at_end": load_at_end,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_carry_their_version() {
        let v = encode(42, 100);
        assert_eq!(v.len(), 100);
        assert_eq!(decode(&v).unwrap(), 42);
        assert_eq!(decode(&encode(7, 5)).unwrap(), 7);
        assert!(decode(b"junk").is_err());
    }
}
