//! The herd's clients and its database: readers doing look-aside caching (plain, lease or
//! meta-lease), the writer that updates the row and deletes the key, and the in-process
//! database counting queries per 100 ms. Not here: the report (the parent module).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
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
    /// Reads that took a stale value by choice (`--accept-stale`).
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
