//! The expiry experiment's measurement: the stream of short- and long-TTL sets to one server
//! (`write`), the ledger of what should still be live, and the per-tick samples of what the
//! server holds (`run`). Not here: the report (the parent module).

use super::{ExpiryArgs, LONG_TTL};
use crate::load::server_stats::{resident_bytes, Stats, StatsConn};
use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long after its deadline an item counts as expired: memcached's clock ticks once a
/// second, so an item may legitimately outlive its deadline by up to a second there.
pub const GRACE: Duration = Duration::from_secs(1);
/// How often the writer sends the sets that are due.
pub(super) const TICK: Duration = Duration::from_millis(10);
/// The most sets in one write (a writer that fell behind catches up in steps).
pub(super) const MAX_BATCH: u64 = 2000;
/// Reported when present, to show how each server was configured to expire items.
pub(super) const SETTINGS: [&str; 8] = [
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
pub(super) const COUNTERS: [&str; 7] = [
    "reclaimed",
    "crawler_reclaimed",
    "lru_crawler_starts",
    "expired_unfetched",
    "evictions",
    "segcache_expired_segments",
    "total_items",
];

/// What the writer of one server has set, by deadline.
#[derive(Default)]
pub(super) struct Ledger {
    /// Items set.
    pub(super) written: u64,
    /// Items whose deadline plus [`GRACE`] has passed, as of the last [`Ledger::live`].
    pub(super) expired: u64,
    /// Items not yet counted as expired, by deadline in milliseconds since the start.
    pub(super) pending: BTreeMap<u64, u64>,
}

impl Ledger {
    pub(super) fn wrote(&mut self, deadline_ms: u64) {
        self.written += 1;
        *self.pending.entry(deadline_ms).or_default() += 1;
    }

    /// Items still live at `now_ms` (monotonic across calls).
    pub(super) fn live(&mut self, now_ms: u64) -> u64 {
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
pub(super) struct Sample {
    /// Seconds since the start of the writes.
    pub(super) at: f64,
    /// `curr_items`.
    pub(super) held_items: u64,
    /// `bytes`.
    pub(super) held_bytes: u64,
    /// Items the client wrote that are still live.
    pub(super) live_items: u64,
    /// Resident memory of the server process.
    pub(super) rss: Option<u64>,
}

impl Sample {
    /// Items the server holds past their deadline (0 when it expired some early: Segcache
    /// may, by up to its TTL bucket's tolerance).
    pub(super) fn expired_items(&self) -> u64 {
        self.held_items.saturating_sub(self.live_items)
    }

    /// The bytes of those items, at the server's own bytes per item.
    pub(super) fn expired_bytes(&self) -> u64 {
        if self.held_items == 0 {
            return 0;
        }
        (self.held_bytes as f64 * self.expired_items() as f64 / self.held_items as f64) as u64
    }

    pub(super) fn expired_share(&self) -> f64 {
        self.expired_items() as f64 / self.held_items.max(1) as f64
    }

    /// The share of live items the server no longer holds: Segcache's early expiration (a
    /// segment goes when its earliest deadline passes), or evictions.
    pub(super) fn early_share(&self) -> f64 {
        self.live_items.saturating_sub(self.held_items) as f64 / self.live_items.max(1) as f64
    }
}

/// One server's run.
pub(super) struct ExpiryRun {
    pub(super) name: String,
    pub(super) samples: Vec<Sample>,
    pub(super) written: u64,
    pub(super) settings: Stats,
    pub(super) end: Stats,
}

/// Peak and means of one server's expired bytes.
pub(super) struct Summary {
    pub(super) peak: u64,
    pub(super) mean: f64,
    /// Mean over the samples once the first short-TTL items have had time to expire.
    pub(super) steady_mean: f64,
    pub(super) steady_share: f64,
    /// Mean share of live items already gone, over the same samples.
    pub(super) steady_early_share: f64,
    pub(super) peak_rss: Option<u64>,
}

impl ExpiryRun {
    pub(super) fn summary(&self, steady_from: f64) -> Summary {
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

/// Writes to one server from `begin` for `--duration`, sampling it every second.
pub(super) async fn run(
    args: &ExpiryArgs,
    name: String,
    addr: SocketAddr,
    pid: Option<u32>,
    begin: Instant,
    stream: u64,
) -> Result<ExpiryRun> {
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
    Ok(ExpiryRun {
        name,
        samples,
        written,
        settings,
        end,
    })
}

/// Sets new keys at `--rate` per second until `--duration` has passed since `begin`,
/// recording each one's deadline; every reply must be `STORED`.
pub(super) async fn write(
    args: &ExpiryArgs,
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
    let value = vec![b'x'; args.value_size];
    let ttl = args.short_ttl;
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
        let due = (args.rate as f64 * elapsed.as_secs_f64()) as u64;
        let n = due.saturating_sub(sent).min(MAX_BATCH);
        if n == 0 {
            continue;
        }
        batch.clear();
        let now_ms = elapsed.as_millis() as u64;
        for i in sent..sent + n {
            let ttl = if rng.random_bool(args.long_share) {
                LONG_TTL
            } else {
                rng.random_range(ttl.min..=ttl.max)
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

#[cfg(test)]
mod tests {
    use super::*;

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
