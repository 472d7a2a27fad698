//! The migration experiment's clients, all on one thread: look-aside readers (a get; on a
//! miss of a cached key, the simulated database and a fill), one writer (a written key's
//! version bumped in the database, deleted through the router and awaited, then stored
//! again, or left absent) and a sampler of every server's and the router's counters. Each records into
//! the second of the run it falls in.
//!
//! Written keys are stored by the writer alone, so a read of one can be judged: once the
//! delete that followed a version bump was acknowledged, a reply with an older version is
//! a stale read (no fill by a reader can race the writer and put an old version back).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::super::workload::Workload;
use super::Phase;

/// One second of the run.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub(super) struct Second {
    /// The phase at the start of the second.
    pub phase: Phase,
    pub gets: u64,
    pub hits: u64,
    /// Database queries (misses of cached keys).
    pub db: u64,
    /// Replies that were errors, or that a client did not expect.
    pub errors: u64,
    /// Reads of written keys.
    pub checked: u64,
    /// Reads of a written key older than its last acknowledged delete.
    pub stale: u64,
    /// The writer's bump, delete and store cycles.
    pub writes: u64,
    /// Shadow gets compared by the router, and those that differed, and copies dropped.
    pub compared: u64,
    pub mismatches: u64,
    pub dropped: u64,
    /// Requests the old and the new cluster's servers served (gets, sets, deletes).
    pub old_requests: u64,
    pub new_requests: u64,
}

impl Second {
    /// The servers' and the router's counters of `read` (the clients count the rest).
    pub(super) fn take_counters(&mut self, read: &Second) {
        self.old_requests = read.old_requests;
        self.new_requests = read.new_requests;
        self.compared = read.compared;
        self.mismatches = read.mismatches;
        self.dropped = read.dropped;
    }
}

/// What the clients share: the clock, the per-second counts, the database.
pub(super) struct Shared {
    pub start: Instant,
    pub seconds: RefCell<Vec<Second>>,
    /// The database: each written key's current version.
    versions: RefCell<Vec<u64>>,
    /// Each written key's version as of its last acknowledged delete: no read that starts
    /// later may return an older one.
    floor: RefCell<Vec<u64>>,
}

impl Shared {
    pub(super) fn new(start: Instant, seconds: usize, written_keys: u64) -> Shared {
        Shared {
            start,
            seconds: RefCell::new(vec![Second::default(); seconds]),
            versions: RefCell::new(vec![0; written_keys as usize]),
            floor: RefCell::new(vec![0; written_keys as usize]),
        }
    }

    /// Counts into the second `at` falls in (the last one past the end).
    fn count(&self, at: Instant, f: impl FnOnce(&mut Second)) {
        let mut s = self.seconds.borrow_mut();
        let i = ((at - self.start).as_secs() as usize).min(s.len() - 1);
        f(&mut s[i]);
    }
}

/// The value of a written key at `version`, `size` bytes (or just its prefix).
pub(super) fn written_value(version: u64, size: usize) -> Vec<u8> {
    let mut v = format!("v{version}:").into_bytes();
    if v.len() < size {
        v.resize(size, b'x');
    }
    v
}

/// The version a written key's value carries.
fn version_of(value: &[u8]) -> Option<u64> {
    let text = value.strip_prefix(b"v")?;
    let end = text.iter().position(|&b| b == b':')?;
    std::str::from_utf8(&text[..end]).ok()?.parse().ok()
}

/// Unix seconds now (the migrate route's `start_time`).
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A text-protocol connection.
pub(super) struct Conn(BufReader<TcpStream>);

/// A get's answer.
enum Got {
    Hit(Vec<u8>),
    Miss,
    /// An error line (or anything else unexpected), as it came.
    Error(String),
}

impl Conn {
    pub(super) async fn open(addr: SocketAddr) -> Result<Conn> {
        let s = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        s.set_nodelay(true)?;
        Ok(Conn(BufReader::new(s)))
    }

    /// Sends `bytes` as they are (a pipelined batch; its replies are read after).
    pub(super) async fn write_raw(&mut self, bytes: &[u8]) -> Result<()> {
        Ok(self.0.get_mut().write_all(bytes).await?)
    }

    /// One reply line.
    pub(super) async fn read_line(&mut self) -> Result<String> {
        let mut l = String::new();
        if self.0.read_line(&mut l).await? == 0 {
            bail!("connection closed");
        }
        Ok(l)
    }

    /// Sends `request` and reads one reply line.
    pub(super) async fn call(&mut self, request: &[u8]) -> Result<String> {
        self.0.get_mut().write_all(request).await?;
        self.read_line().await
    }

    async fn get(&mut self, key: &str) -> Result<Got> {
        let l = self.call(format!("get {key}\r\n").as_bytes()).await?;
        if l == "END\r\n" {
            return Ok(Got::Miss);
        }
        let Some(rest) = l.strip_prefix("VALUE ") else {
            return Ok(Got::Error(l));
        };
        let len: usize = rest
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("a VALUE line without a length: {l:?}"))?;
        let mut value = vec![0; len + 2];
        self.0.read_exact(&mut value).await?;
        value.truncate(len);
        let end = self.read_line().await?;
        if end != "END\r\n" {
            bail!("after a value: {end:?}");
        }
        Ok(Got::Hit(value))
    }

    /// `set key 0 exptime` of `value`; true when STORED.
    pub(super) async fn set(&mut self, key: &str, exptime: u64, value: &[u8]) -> Result<bool> {
        let mut request = format!("set {key} 0 {exptime} {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(value);
        request.extend_from_slice(b"\r\n");
        Ok(self.call(&request).await? == "STORED\r\n")
    }

    /// `stats` as name → number (the numeric ones).
    pub(super) async fn stats(&mut self) -> Result<HashMap<String, u64>> {
        self.0.get_mut().write_all(b"stats\r\n").await?;
        let mut out = HashMap::new();
        loop {
            let l = self.read_line().await?;
            if l == "END\r\n" {
                return Ok(out);
            }
            let mut words = l.trim_end().splitn(3, ' ');
            if let (Some("STAT"), Some(name), Some(value)) =
                (words.next(), words.next(), words.next())
            {
                if let Ok(n) = value.parse() {
                    out.insert(name.to_string(), n);
                }
            }
        }
    }
}

/// How the readers read.
pub(super) struct Reading {
    pub workload: Workload,
    pub written_keys: u64,
    /// The fraction of reads that are of written keys.
    pub written_reads: f64,
    pub db_latency: Duration,
    pub ttl: u64,
    pub value_size: usize,
}

/// One look-aside reader until `deadline`.
pub(super) async fn reader(
    addr: SocketAddr,
    shared: &Shared,
    reading: &Reading,
    seed: u64,
    deadline: Instant,
) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(0x6d69_6772 ^ seed);
    let mut conn = Conn::open(addr).await?;
    let value = vec![b'c'; reading.value_size];
    while Instant::now() < deadline {
        let written = reading.written_keys > 0 && rng.random::<f64>() < reading.written_reads;
        let (key, floor) = if written {
            let n = rng.random_range(0..reading.written_keys);
            (format!("w:{n}"), Some(shared.floor.borrow()[n as usize]))
        } else {
            (format!("key:{}", reading.workload.key(&mut rng)), None)
        };
        let got = conn.get(&key).await?;
        let at = Instant::now();
        let stale = match (&got, floor) {
            (Got::Hit(v), Some(floor)) => match version_of(v) {
                Some(version) => version < floor,
                None => bail!("a written key's value without a version: {key}"),
            },
            _ => false,
        };
        if stale {
            eprintln!("stale read: {key} older than version {floor:?}");
        }
        shared.count(at, |s| {
            s.gets += 1;
            s.hits += u64::from(matches!(got, Got::Hit(_)));
            s.errors += u64::from(matches!(got, Got::Error(_)));
            s.checked += u64::from(floor.is_some());
            s.stale += u64::from(stale);
        });
        if let Got::Error(line) = &got {
            eprintln!("get {key}: {}", line.trim_end());
        }
        if written || !matches!(got, Got::Miss) {
            continue;
        }
        // A cached key's miss: the database, then the fill.
        shared.count(at, |s| s.db += 1);
        tokio::time::sleep(reading.db_latency).await;
        if !conn.set(&key, reading.ttl, &value).await? {
            shared.count(Instant::now(), |s| s.errors += 1);
        }
    }
    Ok(())
}

/// The writer: `per_second` cycles of bump, delete (awaited) and, every other cycle on
/// average, store the new version, until `deadline`.
pub(super) async fn writer(
    addr: SocketAddr,
    shared: &Shared,
    written_keys: u64,
    per_second: u64,
    value_size: usize,
    deadline: Instant,
) -> Result<()> {
    if written_keys == 0 || per_second == 0 {
        return Ok(());
    }
    let mut rng = SmallRng::seed_from_u64(0x7772_6974);
    let mut conn = Conn::open(addr).await?;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if Instant::now() >= deadline {
            return Ok(());
        }
        let n = rng.random_range(0..written_keys) as usize;
        let version = {
            let mut v = shared.versions.borrow_mut();
            v[n] += 1;
            v[n]
        };
        let key = format!("w:{n}");
        let deleted = conn.call(format!("delete {key}\r\n").as_bytes()).await?;
        let ok = deleted == "DELETED\r\n" || deleted == "NOT_FOUND\r\n";
        if ok {
            shared.floor.borrow_mut()[n] = version;
        } else {
            eprintln!("delete {key}: {}", deleted.trim_end());
        }
        // Half the writes only invalidate (as the paper's mcsqueal does): the key stays
        // absent, so a read that finds an older version anywhere is stale.
        let stored = !rng.random::<bool>()
            || conn
                .set(&key, 0, &written_value(version, value_size))
                .await?;
        shared.count(Instant::now(), |s| {
            s.writes += 1;
            s.errors += u64::from(!ok) + u64::from(!stored);
        });
    }
}

/// Reads each server's requests (old and new cluster) and the router's shadow counters,
/// and counts their increase since the last reading into a second.
pub(super) struct Sampler {
    router: Conn,
    servers: Vec<Conn>,
    old: usize,
    /// The last reading: each server's requests, then compared, mismatches, dropped.
    last: Vec<u64>,
}

impl Sampler {
    pub(super) async fn open(
        router: SocketAddr,
        old: &[SocketAddr],
        new: &[SocketAddr],
    ) -> Result<Sampler> {
        let mut servers = Vec::new();
        for &a in old.iter().chain(new) {
            servers.push(Conn::open(a).await?);
        }
        let mut sampler = Sampler {
            router: Conn::open(router).await?,
            old: old.len(),
            last: Vec::new(),
            servers,
        };
        sampler.last = sampler.read().await?;
        Ok(sampler)
    }

    async fn read(&mut self) -> Result<Vec<u64>> {
        let mut now = Vec::new();
        for c in &mut self.servers {
            let s = c.stats().await?;
            now.push(
                ["cmd_get", "cmd_set", "delete_hits", "delete_misses"]
                    .iter()
                    .map(|k| s.get(*k).copied().unwrap_or(0))
                    .sum(),
            );
        }
        let r = self.router.stats().await?;
        for name in ["shadow_compared", "shadow_mismatches", "shadow_dropped"] {
            now.push(r.get(&format!("route:cache:{name}")).copied().unwrap_or(0));
        }
        Ok(now)
    }

    /// Reads the counters and counts their increase into `second`. A reload starts the
    /// route's counters again: read them just before one.
    pub(super) async fn sample(&mut self, second: &mut Second) -> Result<()> {
        let now = self.read().await?;
        let d: Vec<u64> = now
            .iter()
            .zip(&self.last)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let k = self.servers.len();
        second.old_requests = d[..self.old].iter().sum();
        second.new_requests = d[self.old..k].iter().sum();
        second.compared = d[k];
        second.mismatches = d[k + 1];
        second.dropped = d[k + 2];
        self.last = now;
        Ok(())
    }
}
