//! `memfleet invalidator`: the paper's mcsqueal (§4.1, §5). The database, not the web
//! servers, invalidates the caches: applications put the keys a transaction makes stale in
//! the transaction itself (`pg_logical_emit_message(true, 'memfleet', 'user:42 profile:42')`,
//! see `docs/INVALIDATION.md`), PostgreSQL decodes those messages only for transactions that
//! commit, in commit order, and this process reads them from a logical replication slot and
//! deletes the keys in every cache cluster.
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `config` | the TOML file: database, slot, batching, and the destinations as memfleet pools and routes |
//! | `source` | the commit log behind a small trait; PostgreSQL's logical replication (pgoutput) |
//! | `setup` | checks (`wal_level`, slot, credentials) with errors that say what to do |
//! | `delivery` | when spooled deletes were replayed: commit-to-delivered latency |
//! | `replication` | a standby's replication lag (bytes, seconds), read every second |
//! | `metrics` | Prometheus metrics (`metrics_listen`): counters, latency, spool depth and age |
//! | (this file) | the loop: batch, delete everywhere, acknowledge |
//!
//! **Nothing is lost.** The slot's position is acknowledged only after every key of every
//! transaction up to it was deleted in every destination, or durably spooled for one that is
//! down (the client library's delete spool). A crash of the invalidator before that replays
//! the unacknowledged transactions: deletes arrive at least once.
//!
//! **Delivery is what is reported.** The commit-to-delivered latency of a transaction whose
//! deletes were spooled is measured when the spool replayed them (`delivery`), and every
//! destination's spool depth and oldest waiting delete are in the log and the metrics.

pub mod config;
pub mod delivery;
pub mod metrics;
pub mod replication;
pub mod setup;
pub mod source;

pub use config::Config;
use hdrhistogram::Histogram;
use memfleet_client::spool::SpoolQueueStats;
use memfleet_client::{Client, ClientOptions};
use memfleet_protocol::reply::{self, MetaCode, ReplyKind, ServerReply};
use sd_notify::NotifyState;
use source::{CommitLog, CommittedTransaction};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `memfleet invalidator` flags.
#[derive(clap::Args, Clone, Debug)]
pub struct InvalidatorArgs {
    /// The configuration file (see `docs/INVALIDATION.md`).
    #[arg(long)]
    pub config: std::path::PathBuf,
}

/// What the invalidator has done, for logs, tests and benchmarks.
#[derive(Debug)]
pub struct Counters {
    /// Committed transactions that carried invalidations.
    pub transactions: AtomicU64,
    /// Keys deleted (each in every destination).
    pub keys: AtomicU64,
    /// Batches sent.
    pub batches: AtomicU64,
    /// Batches retried because a destination could neither take nor spool them.
    pub retries: AtomicU64,
    /// The last acknowledged position in the commit log.
    pub acked: AtomicU64,
    /// Sampled keys looked up in every destination after their delete (paper §7.3).
    pub checked: AtomicU64,
    /// Sampled keys some destination still held after their delete.
    pub check_failures: AtomicU64,
    /// Batches some of whose deletes went to a spool (delivered later, by its replay).
    pub spooled_batches: AtomicU64,
    /// Batches acknowledged (spooled) whose spooled deletes are not delivered yet.
    pub undelivered_batches: AtomicU64,
    /// Commit-to-delivered latency per transaction, µs: the database's commit timestamp
    /// to the last destination's reply, or to the replay of its last spooled delete. In a
    /// replica region, the commit is the master's: this is the region's invalidation lag.
    pub latency_us: Mutex<Histogram<u64>>,
    /// Commit-to-decoded latency per transaction, µs: until the invalidator read it from
    /// the log. From a standby, never less than its replication lag for that transaction.
    pub decoded_us: Mutex<Histogram<u64>>,
    /// Deleted keys that were remote markers (`marker_prefix`): markers cleared.
    pub markers_cleared: AtomicU64,
    /// The database's replication lag as last read ([`replication::watch`]).
    pub replication: Mutex<Option<replication::ReplicationLag>>,
    /// The spool queues as last seen (refreshed every 250 ms).
    pub spool: Mutex<Vec<SpoolQueueStats>>,
    /// The destinations' pools as last seen (refreshed with the spool): their members and,
    /// for destinations found in DNS, their lookups and errors.
    pub destinations: Mutex<Option<Arc<memfleet_client::Topology>>>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            transactions: AtomicU64::new(0),
            keys: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            checked: AtomicU64::new(0),
            check_failures: AtomicU64::new(0),
            spooled_batches: AtomicU64::new(0),
            undelivered_batches: AtomicU64::new(0),
            spool: Mutex::new(Vec::new()),
            destinations: Mutex::new(None),
            latency_us: Mutex::new(latency_histogram()),
            decoded_us: Mutex::new(latency_histogram()),
            markers_cleared: AtomicU64::new(0),
            replication: Mutex::new(None),
        }
    }
}

/// µs from 1 to an hour, 3 significant digits.
fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// (p50, p99, p99.9, max) of a histogram.
fn quantiles(h: &Mutex<Histogram<u64>>) -> (u64, u64, u64, u64) {
    let h = h.lock().unwrap_or_else(|e| e.into_inner());
    (
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
    )
}

impl Counters {
    /// (p50, p99, p99.9, max) of the commit-to-deleted latency, µs.
    pub fn latency(&self) -> (u64, u64, u64, u64) {
        quantiles(&self.latency_us)
    }

    /// (p50, p99, p99.9, max) of the commit-to-decoded latency, µs.
    pub fn decoded(&self) -> (u64, u64, u64, u64) {
        quantiles(&self.decoded_us)
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        let (p50, p99, p999, max) = self.latency();
        let mut line = format!(
            "{} transactions, {} keys in {} batches; commit-to-delivered p50 {p50} µs, p99 \
             {p99} µs, p99.9 {p999} µs, max {max} µs; {} of {} sampled keys still cached \
             after their delete; {} batches spooled, {} not yet delivered",
            self.transactions.load(Ordering::Relaxed),
            self.keys.load(Ordering::Relaxed),
            self.batches.load(Ordering::Relaxed),
            self.check_failures.load(Ordering::Relaxed),
            self.checked.load(Ordering::Relaxed),
            self.spooled_batches.load(Ordering::Relaxed),
            self.undelivered_batches.load(Ordering::Relaxed),
        );
        for q in self.spool.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if q.depth > 0 {
                let age = q.oldest.unwrap_or_default().as_millis();
                line += &format!("; spool {}: {} waiting, oldest {age} ms", q.name, q.depth);
            }
        }
        let replication = self
            .replication
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(lag) = replication.filter(|l| l.standby) {
            let (p50, _, _, max) = self.decoded();
            line += &format!(
                "; standby {} bytes and {:.3} s behind, commit-to-decoded p50 {p50} µs, max \
                 {max} µs; {} remote markers cleared",
                lag.bytes,
                lag.seconds,
                self.markers_cleared.load(Ordering::Relaxed)
            );
        }
        line
    }
}

/// Where deletes go: the delivering client (with its delete spool) and one reading client
/// per destination pool for the sampled checks. Made once per process: a lost commit log
/// is read again with the same destinations (the spool directory is locked by its client).
pub struct Destinations {
    cache: Client,
    checkers: Arc<Vec<(String, Client)>>,
}

impl Destinations {
    /// Connects to `config`'s destinations (those found in DNS are looked up first, then
    /// followed).
    pub async fn connect(config: &Config) -> anyhow::Result<Destinations> {
        // A batch is one burst: the window starts as large as a batch (it still halves if
        // destinations time out).
        let window = config.batch_keys.max(64);
        let options = || ClientOptions {
            compress_above: None,
            window: (window, 2, window * 4),
            ..ClientOptions::default()
        };
        let cache = Client::connect(&config.destinations, &config.route, options()).await?;
        // One client per destination pool, to check sampled keys are gone from each. They
        // only read: no spool of their own (the delivering client holds the spool directory).
        let mut lookups = config.destinations.clone();
        for p in &mut lookups.pools {
            p.spool_deletes = false;
        }
        let mut checkers = Vec::new();
        for pool in cache.topology().pools() {
            let checker = Client::connect(&lookups, pool.name(), options()).await?;
            checkers.push((pool.name().to_string(), checker));
        }
        Ok(Destinations {
            cache,
            checkers: Arc::new(checkers),
        })
    }
}

/// Runs the invalidator until `log` ends or fails.
pub async fn run(
    config: &Config,
    log: impl CommitLog,
    counters: Arc<Counters>,
) -> anyhow::Result<()> {
    let destinations = Destinations::connect(config).await?;
    run_with(config, log, counters, &destinations).await
}

/// Runs the invalidator on `destinations` until `log` ends or fails.
pub async fn run_with(
    config: &Config,
    mut log: impl CommitLog,
    counters: Arc<Counters>,
    destinations: &Destinations,
) -> anyhow::Result<()> {
    let cache = &destinations.cache;
    let checkers = &destinations.checkers;
    let mut keys: Vec<String> = Vec::new();
    let mut commits: Vec<i64> = Vec::new();
    let mut upto: Option<u64> = None;
    let mut report = tokio::time::interval(config.report_every);
    report.tick().await;
    // Spool state for the log and metrics, and the batches waiting for replays.
    let mut look = tokio::time::interval(Duration::from_millis(250));
    let mut deliveries = delivery::Deliveries::default();
    // When the batch being gathered must go, at the latest.
    let mut batch_due: Option<tokio::time::Instant> = None;
    loop {
        // Gather while the batch has room and is younger than batch_wait. `next` is
        // cancel-safe (its partial transaction lives in the log), so the wait can end it.
        let next = tokio::select! {
            biased;
            _ = report.tick() => {
                tracing::info!("{}", counters.summary());
                continue;
            }
            _ = look.tick() => {
                let spool = cache.topology().spool_stats();
                if deliveries.waiting() {
                    deliveries.poll(&spool, &counters);
                    if !deliveries.waiting() {
                        tracing::info!("spooled deletes delivered; {}", counters.summary());
                    }
                }
                *counters.spool.lock().unwrap_or_else(|e| e.into_inner()) = spool;
                *counters.destinations.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(cache.topology());
                // Checked often while replays are owed, so the latency is the replay's.
                let every = if deliveries.waiting() { 20 } else { 250 };
                if look.period() != Duration::from_millis(every) {
                    look = tokio::time::interval(Duration::from_millis(every));
                    look.tick().await;
                }
                continue;
            }
            next = async {
                match batch_due {
                    None => log.next().await,
                    Some(due) => match tokio::time::timeout_at(due, log.next()).await {
                        Ok(event) => event,
                        Err(_) => Ok(None),
                    },
                }
            } => next?,
        };
        match next {
            Some(CommittedTransaction {
                keys: k,
                end,
                committed_at_us,
            }) => {
                counters.transactions.fetch_add(1, Ordering::Relaxed);
                let decoded = (unix_micros() - committed_at_us).max(1) as u64;
                let _ = counters
                    .decoded_us
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .record(decoded.min(3_600_000_000));
                keys.extend(k);
                commits.push(committed_at_us);
                upto = Some(end);
                batch_due.get_or_insert_with(|| tokio::time::Instant::now() + config.batch_wait);
                if keys.len() < config.batch_keys {
                    continue;
                }
            }
            None if keys.is_empty() => {
                if log.ended() {
                    return Ok(());
                }
                continue;
            }
            // A keepalive while the batch is young: keep gathering.
            None if batch_due.is_some_and(|due| tokio::time::Instant::now() < due)
                && !log.ended() =>
            {
                continue;
            }
            None => {}
        }
        batch_due = None;
        let Some(end) = upto.take() else {
            continue;
        };
        deliver(cache, &keys, &counters).await;
        let markers = keys
            .iter()
            .filter(|key| key.starts_with(&config.marker_prefix))
            .count();
        counters
            .markers_cleared
            .fetch_add(markers as u64, Ordering::Relaxed);
        let spool = cache.topology().spool_stats();
        deliveries.settle(std::mem::take(&mut commits), &spool, &counters);
        let before = counters
            .keys
            .fetch_add(keys.len() as u64, Ordering::Relaxed);
        log.ack(end);
        counters.acked.store(end, Ordering::Release);
        // Every `check_one_in`-th key is looked up everywhere, off the delivery path: it
        // should be gone.
        if config.check_one_in > 0 {
            let sampled: Vec<String> = keys
                .iter()
                .enumerate()
                .filter(|(i, _)| (before + *i as u64).is_multiple_of(config.check_one_in))
                .map(|(_, k)| k.clone())
                .collect();
            if !sampled.is_empty() {
                let (checkers, counters) = (checkers.clone(), counters.clone());
                tokio::spawn(async move {
                    for key in sampled {
                        check(&checkers, &key, &counters).await;
                    }
                });
            }
        }
        keys.clear();
    }
}

fn unix_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Looks `key` up in every destination pool; a hit right after its delete is reported (it
/// may also be a legitimate refill by an application, which is why this is a sample and a
/// rate, not an error).
async fn check(checkers: &[(String, Client)], key: &str, counters: &Counters) {
    counters.checked.fetch_add(1, Ordering::Relaxed);
    for (pool, client) in checkers {
        if let Ok(reply) = client.meta("mg", key, "", None).await {
            let hit = matches!(
                reply::decode(&reply, ReplyKind::Meta),
                Ok(ServerReply::Meta(m)) if m.code == MetaCode::Hd
            );
            if hit {
                counters.check_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%key, %pool, "still cached after its invalidation");
                return;
            }
        }
    }
}

/// Deletes every key everywhere: all requests go out at once (each destination's
/// connection writes them in one go: the paper's batching), then every reply is awaited.
/// A key no destination could take nor spool is sent again after a pause (at most a
/// second, down servers probed meanwhile), until it is.
async fn deliver(cache: &Client, keys: &[String], counters: &Counters) {
    counters.batches.fetch_add(1, Ordering::Relaxed);
    let mut pending: Vec<&String> = keys.iter().collect();
    let mut pause = Duration::from_millis(50);
    loop {
        // Polled together: all deletes queue at once and go out in one write per
        // destination connection (within the client's window).
        let replies =
            futures_util::future::join_all(pending.iter().map(|k| cache.delete(k.as_str()))).await;
        let mut failed = Vec::new();
        for (key, reply) in pending.iter().zip(replies) {
            if let Err(e) = reply {
                tracing::warn!(%key, error = %e, "delete not delivered; retrying");
                failed.push(*key);
            }
        }
        if failed.is_empty() {
            return;
        }
        counters.retries.fetch_add(1, Ordering::Relaxed);
        pending = failed;
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
        // A server marked down is otherwise tried again only at its own probe (30 s and
        // more): probe it now, as the spool's replay does, so that the retry can reach it
        // as soon as it answers.
        let topology = cache.topology();
        let down = topology
            .pools()
            .iter()
            .flat_map(|pool| pool.backends())
            .map(|backend| backend.probe_once());
        futures_util::future::join_all(down).await;
    }
}

/// `memfleet invalidator`: checks the database, then runs until SIGINT or SIGTERM.
pub fn run_cli(args: &InvalidatorArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        // A database that is not set up is an operator's mistake: say so and stop.
        setup::prepare(&config.database).await?;
        let destinations = Destinations::connect(&config).await?;
        let counters = Arc::new(Counters::default());
        let _replication = AbortOnDrop(tokio::spawn(replication::watch(
            config.database.clone(),
            counters.clone(),
        )));
        let _metrics = match &config.metrics_listen {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| anyhow::anyhow!("metrics_listen {addr}: {e}"))?;
                tracing::info!(%addr, "metrics at /metrics");
                Some(AbortOnDrop(tokio::spawn(metrics::serve(listener, counters.clone()))))
            }
            None => None,
        };
        let stream = async {
            // Once running, a lost stream (PostgreSQL restarting, a network blip, the slot
            // still held by a killed predecessor) is retried; what was not acknowledged is
            // read again from the slot.
            let mut pause = Duration::from_millis(100);
            let mut ready_sent = false;
            loop {
                let started = std::time::Instant::now();
                let attempt = async {
                    let log = source::PgLogical::connect(&config.database).await?;
                    tracing::info!(slot = %config.database.slot, "invalidating from the commit log");
                    // Streaming (and the metrics port, if any, bound): ready, the first
                    // time; after a lost stream, the status says it streams again.
                    let status = format!("streaming from slot {}", config.database.slot);
                    if ready_sent {
                        notify(&[NotifyState::Status(&status)]);
                    } else {
                        ready_sent = true;
                        notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
                    }
                    run_with(&config, log, counters.clone(), &destinations).await
                };
                match attempt.await {
                    Ok(()) => return anyhow::Ok(()),
                    Err(e) => {
                        notify(&[NotifyState::Status("commit log lost: reconnecting")]);
                        if started.elapsed() > Duration::from_secs(30) {
                            pause = Duration::from_millis(100);
                        }
                        tracing::warn!(error = %format!("{e:#}"), retry_in = ?pause, "commit log lost");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(10));
                    }
                }
            }
        };
        tokio::select! {
            r = stream => r,
            _ = int.recv() => Ok(()),
            _ = term.recv() => Ok(()),
        }?;
        notify(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
        Ok(())
    })
}

/// Tells the service manager (systemd's `sd_notify(3)`; nothing is sent without
/// `NOTIFY_SOCKET`); a failure is logged, never fatal.
fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}

/// A task stopped when its handle goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
