//! What the application does in `memfleet bench regions`, and how staleness is judged.
//!
//! Every key `user:N` is a row of `kv` whose version only its one writer raises. A write
//! first sets a *tag* `tag:N:V` in both regions' caches, then commits version V on the
//! primary with the invalidation of `user:N` and of the tag (and, from the replica region,
//! the key's remote marker) in the same transaction: a region's invalidator deletes the
//! tag together with the key, so **a tag gone from a region's cache means that region's
//! caches were invalidated for version V**. That is what the checks read:
//!
//! - a reader that found the tag of version D gone before it read the key, and then read
//!   a version below D, read a stale value after its region was invalidated (the paper's
//!   §5 hazard: a cache filled from a replica that had not replayed the write);
//! - a writer reads its key back at once in its own region (read-your-writes): with remote
//!   markers the replica region reads the master, without them its lagging standby;
//! - the lag watcher polls a sample of pending tags every 10 ms, and in the replica region
//!   the standby's row after the tag: the commit-to-invalidated and commit-to-replayed times
//!   (from the moment the writer sent COMMIT: never less than the replay delay)
//!   (of transactions committed and invalidated while the phase's replay delay held: the
//!   delay is the standby's setting when it replays, and a change settles asynchronously), and a count of tags deleted while the
//!   standby still had the older row (never, when the invalidator reads the standby);
//! - after the run every tag of every version is gone from both regions (no lost
//!   invalidation) and every cached key holds the database's version.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use memfleet_client::Client;

/// The master region's index; the replica's is 1.
pub(super) const MASTER: usize = 0;
/// The replica region's index.
pub(super) const REPLICA: usize = 1;

/// A database connection that reconnects after an error (a standby restarting).
pub(super) struct Db {
    port: u16,
    client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
}

impl Db {
    pub(super) fn new(port: u16) -> Db {
        Db {
            port,
            client: tokio::sync::Mutex::new(None),
        }
    }

    async fn connected(
        &self,
    ) -> Result<tokio::sync::MutexGuard<'_, Option<tokio_postgres::Client>>> {
        let mut guard = self.client.lock().await;
        if guard.is_none() {
            let (client, conn) = tokio_postgres::Config::new()
                .host("127.0.0.1")
                .port(self.port)
                .user("postgres")
                .dbname("postgres")
                .connect_timeout(Duration::from_secs(2))
                .connect(tokio_postgres::NoTls)
                .await
                .context("connecting to PostgreSQL")?;
            tokio::spawn(conn);
            *guard = Some(client);
        }
        Ok(guard)
    }

    /// The version of `key`.
    pub(super) async fn version(&self, key: &str) -> Result<u64> {
        let mut guard = self.connected().await?;
        let client = guard.as_ref().expect("connected");
        match client
            .query_one("SELECT v FROM kv WHERE k = $1", &[&key])
            .await
        {
            Ok(row) => Ok(row.get::<_, i64>(0) as u64),
            Err(e) => {
                *guard = None;
                Err(e.into())
            }
        }
    }

    /// The versions of `keys`.
    async fn versions(&self, keys: &[String]) -> Result<Vec<(String, u64)>> {
        let mut guard = self.connected().await?;
        let client = guard.as_ref().expect("connected");
        match client
            .query("SELECT k, v FROM kv WHERE k = ANY($1)", &[&keys])
            .await
        {
            Ok(rows) => Ok(rows
                .iter()
                .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
                .collect()),
            Err(e) => {
                *guard = None;
                Err(e.into())
            }
        }
    }

    /// Commits version `v` of `key` with the invalidation of `invalidate` (one message);
    /// returns when COMMIT was sent: the commit's timestamp, which the standby's replay
    /// delay counts from, is later.
    async fn write(&self, key: &str, v: u64, invalidate: &str) -> Result<Instant> {
        let mut guard = self.connected().await?;
        let client = guard.as_mut().expect("connected");
        let result = async {
            let tx = client.transaction().await?;
            tx.execute("UPDATE kv SET v = $2 WHERE k = $1", &[&key, &(v as i64)])
                .await?;
            tx.execute(
                "SELECT pg_logical_emit_message(true, 'memfleet', $1)",
                &[&invalidate],
            )
            .await?;
            let committing = Instant::now();
            tx.commit().await.map(|()| committing)
        }
        .await;
        if result.is_err() {
            *guard = None;
        }
        Ok(result?)
    }
}

/// One region's counts in one phase.
#[derive(Default)]
pub(super) struct Counts {
    pub(super) writes: AtomicU64,
    pub(super) reads: AtomicU64,
    /// Reads that came back older than a version whose invalidation had reached the region.
    pub(super) stale_after_invalidation: AtomicU64,
    /// Read-your-writes reads and stale ones, [without markers, with markers].
    pub(super) ryw_reads: [AtomicU64; 2],
    pub(super) ryw_stale: [AtomicU64; 2],
    /// Reads or writes the database refused (a standby restarting): not judged.
    pub(super) db_errors: AtomicU64,
    /// Cache requests that failed (a write whose tags could not be set is skipped).
    pub(super) cache_errors: AtomicU64,
    /// Tags deleted while the standby still had the older row (replica region only).
    pub(super) invalidated_before_replayed: AtomicU64,
    /// Sampled transactions: (commit-to-replayed ms, if seen; commit-to-invalidated ms).
    pub(super) lags: Mutex<Vec<(Option<f64>, f64)>>,
    /// The largest replication lag the replica's invalidator reported (its /metrics).
    pub(super) reported_lag_s: Mutex<f64>,
}

/// A sampled write waiting for its invalidation in one region.
struct Pending {
    key: usize,
    version: u64,
    committed: Instant,
    phase: usize,
    epoch: usize,
    replayed: Option<Instant>,
}

/// What every task shares.
pub(super) struct Shared {
    /// Each key's last committed version.
    pub(super) versions: Vec<AtomicU64>,
    /// Every committed (key, version): all their tags must go.
    pub(super) written: Mutex<Vec<(usize, u64)>>,
    /// The phase now (index into `counts`).
    pub(super) phase: AtomicUsize,
    /// Counts changes of the replay delay: odd while one settles (the standby's startup
    /// process takes the reload asynchronously), even while the delay is the phase's. A
    /// lag is sampled only from a transaction committed and invalidated in one even epoch.
    pub(super) epoch: AtomicUsize,
    /// counts[phase][region].
    pub(super) counts: Vec<[Counts; 2]>,
    /// Each region's clients (through its router).
    pub(super) caches: [Client; 2],
    /// The primary; each region's own database (the master's is the primary).
    pub(super) master_db_port: u16,
    pub(super) region_db_port: [u16; 2],
    pending: [Mutex<Vec<Pending>>; 2],
    pub(super) stop: AtomicBool,
    /// Writers hold their writes (a planned standby restart).
    pub(super) paused: AtomicBool,
    /// Writers per region.
    pub(super) writers: usize,
}

impl Shared {
    pub(super) fn new(
        keys: usize,
        phases: usize,
        caches: [Client; 2],
        master_db_port: u16,
        region_db_port: [u16; 2],
        writers: usize,
    ) -> Shared {
        Shared {
            versions: (0..keys).map(|_| AtomicU64::new(0)).collect(),
            written: Mutex::new(Vec::new()),
            phase: AtomicUsize::new(0),
            epoch: AtomicUsize::new(0),
            counts: (0..phases).map(|_| Default::default()).collect(),
            caches,
            master_db_port,
            region_db_port,
            pending: Default::default(),
            stop: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            writers,
        }
    }

    fn counts(&self, phase: usize, region: usize) -> &Counts {
        &self.counts[phase][region]
    }
}

fn key_name(k: usize) -> String {
    format!("user:{k}")
}

fn tag_name(k: usize, v: u64) -> String {
    format!("tag:{k}:{v}")
}

fn parse_version(bytes: &[u8]) -> u64 {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Look-aside read of `key` in `region`: the replica region with remote markers (a marked
/// key is read from the master), or plainly from the region's own database.
async fn read(
    cache: &Client,
    key: &str,
    region: usize,
    markers: bool,
    own: &Db,
    master: &Db,
) -> Result<u64> {
    let bytes = if region == REPLICA && markers {
        cache
            .get_or_fill_regional(key, 3600, || load(own, key), || load(master, key))
            .await?
    } else {
        cache.get_or_fill(key, 3600, || load(own, key)).await?
    };
    Ok(parse_version(&bytes))
}

/// A version read from `db`, as the cache stores it.
async fn load(db: &Db, key: &str) -> Result<Vec<u8>> {
    Ok(db.version(key).await?.to_string().into_bytes())
}

/// One writer of `region`, committing `rate` transactions per second (open loop) to its
/// own keys until `stop`; `markers`: the replica region's remote markers.
pub(super) async fn writer(
    shared: Arc<Shared>,
    region: usize,
    w: usize,
    markers: bool,
    rate: f64,
) -> Result<()> {
    let master = Db::new(shared.master_db_port);
    let own_db = Db::new(shared.region_db_port[region]);
    let slot = region * shared.writers + w;
    let own: Vec<usize> = (0..shared.versions.len())
        .filter(|k| k % (2 * shared.writers) == slot)
        .collect();
    let gap = Duration::from_secs_f64(1.0 / rate);
    let cache = &shared.caches[region];
    let mut next = tokio::time::Instant::now();
    let mut n = 0usize;
    while !shared.stop.load(Ordering::Relaxed) && !own.is_empty() {
        next += gap;
        tokio::time::sleep_until(next).await;
        if shared.paused.load(Ordering::Relaxed) {
            continue;
        }
        let k = own[n % own.len()];
        n += 1;
        let phase = shared.phase.load(Ordering::Relaxed);
        let counts = shared.counts(phase, region);
        let v = shared.versions[k].load(Ordering::Relaxed) + 1;
        let (key, tag) = (key_name(k), tag_name(k, v));
        let mut tagged = true;
        for c in &shared.caches {
            tagged &= c.set(&tag, b"1", 3600).await.is_ok();
        }
        let mut invalidate = format!("{key} {tag}");
        if markers {
            match cache.mark_remote_write(&key, 60).await {
                Ok(marker) => invalidate = format!("{invalidate} {marker}"),
                Err(_) => tagged = false,
            }
        }
        if !tagged {
            counts.cache_errors.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let epoch = shared.epoch.load(Ordering::Relaxed);
        let Ok(committed) = master.write(&key, v, &invalidate).await else {
            counts.db_errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        shared.versions[k].store(v, Ordering::Relaxed);
        shared.written.lock().unwrap().push((k, v));
        counts.writes.fetch_add(1, Ordering::Relaxed);
        // Every other write is sampled for the lags, unless the replay delay began to
        // change while it committed (the phase changes only then: the one read now is the
        // one it committed in).
        let settled = epoch.is_multiple_of(2) && shared.epoch.load(Ordering::Relaxed) == epoch;
        let phase = shared.phase.load(Ordering::Relaxed);
        if n.is_multiple_of(2) && settled {
            for pending in &shared.pending {
                pending.lock().unwrap().push(Pending {
                    key: k,
                    version: v,
                    committed,
                    phase,
                    epoch,
                    replayed: None,
                });
            }
        }
        // The paper's step (3): delete the key in the local cluster, then read it back.
        if cache.delete(&key).await.is_err() {
            counts.cache_errors.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        match read(cache, &key, region, markers, &own_db, &master).await {
            Ok(got) => {
                counts.ryw_reads[markers as usize].fetch_add(1, Ordering::Relaxed);
                if got < v {
                    counts.ryw_stale[markers as usize].fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                counts.db_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// One reader of `region`: `rate` reads per second of random keys, each judged against
/// the newest version whose invalidation had reached the region before it began.
pub(super) async fn reader(shared: Arc<Shared>, region: usize, seed: u64, rate: f64) -> Result<()> {
    let master = Db::new(shared.master_db_port);
    let own_db = Db::new(shared.region_db_port[region]);
    let cache = &shared.caches[region];
    let gap = Duration::from_secs_f64(1.0 / rate);
    let mut next = tokio::time::Instant::now();
    let mut x = seed | 1;
    while !shared.stop.load(Ordering::Relaxed) {
        next += gap;
        tokio::time::sleep_until(next).await;
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = (x % shared.versions.len() as u64) as usize;
        let counts = shared.counts(shared.phase.load(Ordering::Relaxed), region);
        let newest = shared.versions[k].load(Ordering::Relaxed);
        let mut invalidated = 0;
        for v in [newest, newest.saturating_sub(1)] {
            if v == 0 {
                break;
            }
            match cache.get(tag_name(k, v)).await {
                Ok(None) => {
                    invalidated = v;
                    break;
                }
                Ok(Some(_)) => {}
                Err(_) => break,
            }
        }
        match read(cache, &key_name(k), region, true, &own_db, &master).await {
            Ok(got) => {
                counts.reads.fetch_add(1, Ordering::Relaxed);
                if got < invalidated {
                    counts
                        .stale_after_invalidation
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                counts.db_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// Polls `region`'s sampled pending tags every 10 ms (and, in the replica region, the
/// standby's rows after them) until `stop` and nothing is pending, or `give_up`.
pub(super) async fn lag_watcher(shared: Arc<Shared>, region: usize, give_up: Instant) {
    let standby = Db::new(shared.region_db_port[REPLICA]);
    let cache = &shared.caches[region];
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let batch: Vec<(usize, u64)> = shared.pending[region]
            .lock()
            .unwrap()
            .iter()
            .map(|p| (p.key, p.version))
            .collect();
        if batch.is_empty() && shared.stop.load(Ordering::Relaxed) || Instant::now() > give_up {
            return;
        }
        // Tags first, then the standby: a tag found gone here while the standby, asked
        // after, still has the older row was deleted before the row was replayed.
        let gets =
            futures_util::future::join_all(batch.iter().map(|&(k, v)| cache.get(tag_name(k, v))))
                .await;
        // After the answers: a tag found gone was gone by then (never earlier than it went).
        let looked = Instant::now();
        let gone: Vec<bool> = gets.iter().map(|g| matches!(g, Ok(None))).collect();
        let replayed: Option<(Vec<(String, u64)>, Instant)> = if region == REPLICA {
            let keys: Vec<String> = batch.iter().map(|&(k, _)| key_name(k)).collect();
            standby
                .versions(&keys)
                .await
                .ok()
                .map(|r| (r, Instant::now()))
        } else {
            None
        };
        let mut pending = shared.pending[region].lock().unwrap();
        pending.retain_mut(|p| {
            let at = batch
                .iter()
                .position(|&(k, v)| k == p.key && v == p.version);
            let Some(j) = at else {
                return true;
            };
            let counts = &shared.counts[p.phase][region];
            let mut replayed_now = false;
            if let Some((rows, when)) = &replayed {
                let name = key_name(p.key);
                if rows.iter().any(|(k, v)| *k == name && *v >= p.version) {
                    replayed_now = true;
                    p.replayed.get_or_insert(*when);
                }
            }
            if !gone[j] {
                return true;
            }
            if region == REPLICA && replayed.is_some() && !replayed_now && p.replayed.is_none() {
                counts
                    .invalidated_before_replayed
                    .fetch_add(1, Ordering::Relaxed);
            }
            // A transaction invalidated after the replay delay began to change may have
            // taken either delay: it belongs to neither phase.
            if shared.epoch.load(Ordering::Relaxed) != p.epoch {
                return false;
            }
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            let replication = p
                .replayed
                .map(|t| ms(t.saturating_duration_since(p.committed)));
            let invalidation = ms(looked.saturating_duration_since(p.committed));
            counts
                .lags
                .lock()
                .unwrap()
                .push((replication, invalidation));
            false
        });
    }
}

/// After the run: how many written versions' tags a region's cache still holds (lost
/// invalidations), waiting up to `wait` for them to go; and how many keys it caches with
/// another version than the database's.
pub(super) async fn final_check(shared: &Shared, region: usize, wait: Duration) -> (u64, u64) {
    let cache = &shared.caches[region];
    let written: Vec<(usize, u64)> = shared.written.lock().unwrap().clone();
    let deadline = Instant::now() + wait;
    let mut left: Vec<(usize, u64)> = written;
    loop {
        let gets =
            futures_util::future::join_all(left.iter().map(|&(k, v)| cache.get(tag_name(k, v))))
                .await;
        left = left
            .into_iter()
            .zip(gets)
            .filter(|(_, g)| !matches!(g, Ok(None)))
            .map(|(kv, _)| kv)
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut stale = 0;
    for (k, version) in shared.versions.iter().enumerate() {
        if let Ok(Some(value)) = cache.get(key_name(k)).await {
            if parse_version(&value.data) != version.load(Ordering::Relaxed) {
                stale += 1;
            }
        }
    }
    (left.len() as u64, stale)
}
