//! The sampled request log (`--log-requests RATE`, `--log-keys`, `--request-log PATH`): a
//! JSON line per sampled client request (op, route or pool, destination, latency, result;
//! the key's xxh3 unless `--log-keys`), written by a thread of its own to stderr or a file.
//!
//! Unused, a request costs one load of [`LOG`] (set once at start, never written again);
//! used, one step of a per-thread random number, and a sampled request the line built and
//! sent on std's channel (lock-free; never a file write on a worker's thread).

use crate::reloadable::ServedTopology;
use memfleet_client::{Route, RouteContext};
use std::cell::Cell;
use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A client's reply on its way.
type Reply = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

/// The log, when the router was started with `--log-requests`.
static LOG: OnceLock<RequestLog> = OnceLock::new();

/// Where sampled requests go.
pub(crate) struct RequestLog {
    /// A request is sampled when a draw is below it (`u64::MAX`: every one).
    threshold: u64,
    keys: bool,
    /// To the writer thread (std's channel: lock-free, `Sync`).
    lines: mpsc::Sender<String>,
}

thread_local! {
    /// Each thread's random state for sampling.
    static DRAW: Cell<u64> = const { Cell::new(0) };
}

/// Starts the log: `rate` in [0, 1] of the requests, to `path` (appended) or stderr.
pub fn start(rate: f64, keys: bool, path: Option<&Path>) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&rate) {
        anyhow::bail!("--log-requests {rate}: a fraction of the requests, 0 to 1");
    }
    let mut out: Box<dyn Write + Send> = match path {
        Some(p) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| anyhow::anyhow!("--request-log {}: {e}", p.display()))?,
        ),
        None => Box::new(std::io::stderr()),
    };
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::Builder::new()
        .name("request-log".into())
        .spawn(move || {
            let mut buf = std::io::BufWriter::new(&mut out);
            while let Ok(line) = rx.recv() {
                let _ = buf.write_all(line.as_bytes());
                while let Ok(line) = rx.try_recv() {
                    let _ = buf.write_all(line.as_bytes());
                }
                let _ = buf.flush();
            }
        })?;
    let threshold = if rate >= 1.0 {
        u64::MAX
    } else {
        (rate * u64::MAX as f64) as u64
    };
    let _ = LOG.set(RequestLog {
        threshold,
        keys,
        lines: tx,
    });
    Ok(())
}

/// The log, if this request is sampled.
#[inline]
pub(crate) fn sampled() -> Option<&'static RequestLog> {
    let log = LOG.get()?;
    if log.threshold == u64::MAX {
        return Some(log);
    }
    let draw = DRAW.with(|d| {
        // xorshift64*, seeded per thread from the clock and the state's address.
        let mut x = d.get();
        if x == 0 {
            x = (SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |t| t.as_nanos() as u64)
                ^ (d as *const _ as u64))
                | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        d.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    });
    (draw < log.threshold).then_some(log)
}

/// The words of a request's command line.
fn words(raw: &[u8]) -> Vec<&[u8]> {
    let line = raw.split(|&b| b == b'\n').next().unwrap_or(raw);
    line.trim_ascii_end()
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
        .collect()
}

impl RequestLog {
    /// `reply` (to `raw`), timed and logged when it is ready.
    pub(crate) fn wrap(
        &'static self,
        reply: Reply,
        raw: &[u8],
        root: &Arc<Route>,
        served: &ServedTopology,
        ctx: RouteContext,
    ) -> Reply {
        let started = Instant::now();
        let words = words(raw);
        let op = String::from_utf8_lossy(words.first().copied().unwrap_or(b"")).into_owned();
        // gat/gats: exptime, then keys.
        let first_key = if op == "gat" || op == "gats" { 2 } else { 1 };
        let key: Vec<u8> = words.get(first_key).map_or(Vec::new(), |k| k.to_vec());
        let keys = if op.starts_with("get") || op.starts_with("gat") {
            words.len().saturating_sub(first_key)
        } else {
            usize::from(!key.is_empty())
        };
        let route = served.load().name_of(root).unwrap_or_default();
        let mut destinations = Vec::new();
        if !key.is_empty() {
            root.servers_for(&key, ctx, &mut destinations);
        }
        let mut entry = serde_json::json!({
            "op": op,
            "route": route,
            "destination": destinations.first().cloned().unwrap_or_default(),
            "keys": keys,
        });
        if self.keys {
            entry["key"] = String::from_utf8_lossy(&key).into_owned().into();
        } else {
            entry["key_hash"] = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&key)).into();
        }
        Box::pin(async move {
            let bytes = reply.await;
            let end = bytes
                .iter()
                .position(|&b| b == b' ' || b == b'\r')
                .unwrap_or(bytes.len());
            entry["latency_us"] = (started.elapsed().as_micros() as u64).into();
            entry["result"] = if bytes.is_empty() {
                "noreply".into()
            } else {
                String::from_utf8_lossy(&bytes[..end]).into_owned().into()
            };
            let _ = self.lines.send(format!("{entry}\n"));
            bytes
        })
    }
}
