//! The server's state: what every worker shares ([`ServerState`]: settings, the cache,
//! every worker's counters, the `stats reset` baseline, authentication, TLS, the crawler
//! switch, the debug clock) and what one worker's connections share ([`WorkerContext`]:
//! its engine handle, buffers and open connections).
//!
//! Plain data with the few accessors that read it: no listener, connection or command
//! lives here, so everything else can depend on it and it on nothing above it.

use crate::auth::Credentials;
use crate::config::Settings;
use crate::debug_clock::DebugClock;
use crate::stats::{ConnectionCounts, CounterValues, WorkerCounters};
use memfleet_protocol::ParserConfig;
use memfleet_storage::{Cache, Handle};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// State every worker shares.
pub struct ServerState {
    /// The settings the server runs with.
    pub settings: Settings,
    /// The cache.
    pub cache: Cache,
    /// The parser's item size limit.
    pub parser: ParserConfig,
    /// Every worker's counters, for `stats` (each written only by its own worker).
    pub workers: Vec<Arc<WorkerCounters>>,
    /// Connection counts.
    pub connections: ConnectionCounts,
    /// Counter values at the last `stats reset`, subtracted when reporting (resetting the
    /// counters themselves would race with their single writers).
    pub reset_base: Mutex<Baseline>,
    /// Flips to true when the server is shutting down.
    pub shutdown: watch::Receiver<bool>,
    /// Who may connect, when authentication is on (`--auth-file`).
    pub auth: Option<Credentials>,
    /// Binary SASL's password database, when SASL is on (`-S`).
    pub sasl: Option<crate::sasl::SaslDb>,
    /// The nodes `config get cluster` answers (`--cluster-config`).
    pub cluster_config: Option<crate::cluster_config::ClusterConfig>,
    /// TLS on the TCP port, when on (`--tls-cert`): the certificate in service and its
    /// counters.
    pub tls: Option<Arc<memfleet_tls::ServerTls>>,
    /// `lru_crawler enable|disable` (key dumps, `dump.rs`).
    pub crawler: Crawler,
    /// The clock `debugtime` moves, with `--debug-time`.
    pub debug_clock: Option<Arc<DebugClock>>,
    /// The flash tier's files, with `--flash` (`flash.rs`).
    pub flash: Option<Arc<memfleet_flash::FlashFiles>>,
}

/// What `stats reset` zeroes, as the values it saw: the command counters and, as in
/// memcached, the connection totals and the engine's eviction and reclaim counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Baseline {
    /// The workers' counters.
    pub counters: CounterValues,
    /// `total_connections`.
    pub total_connections: u64,
    /// `rejected_connections`.
    pub rejected_connections: u64,
    /// `evictions`.
    pub evicted_items: u64,
    /// `evicted_unfetched`.
    pub evicted_unfetched: u64,
    /// `expired_unfetched` (and part of `reclaimed`).
    pub expired_items: u64,
    /// The rest of `reclaimed`.
    pub flushed_items: u64,
}

impl ServerState {
    /// All workers' counters, summed, minus the last reset, and that baseline. Holds the
    /// baseline's lock while summing, so a concurrent reset cannot make values go negative.
    pub fn counters(&self) -> (CounterValues, Baseline) {
        let base = self.reset_base.lock().unwrap_or_else(|e| e.into_inner());
        let mut total = self.raw_counters();
        total.subtract(&base.counters);
        (total, *base)
    }

    /// The workers' counters summed, without the reset baseline.
    pub fn raw_counters(&self) -> CounterValues {
        let mut total = CounterValues::default();
        for w in &self.workers {
            total.add(&w.snapshot());
        }
        total
    }
}

/// One worker's state, shared by the connections it serves (all on its thread).
pub struct WorkerContext {
    /// Server-wide state.
    pub server: Arc<ServerState>,
    /// This worker's counters.
    pub counters: Arc<WorkerCounters>,
    /// This worker's engine handle.
    pub handle: RefCell<Handle>,
    /// The read buffer every connection of this worker reads into. A connection keeps bytes
    /// of its own only while a request is incomplete, so idle connections hold none.
    pub read_buf: RefCell<Vec<u8>>,
    /// The buffer replies are built in before one write.
    pub write_buf: RefCell<Vec<u8>>,
    /// Connections open on this worker, to abort at shutdown.
    pub open: RefCell<HashMap<u64, AbortHandle>>,
    /// Identifies the next connection in `open`.
    pub next_id: Cell<u64>,
    /// This worker's io_uring for flash reads, made at the first one (`None` inside: reads
    /// go to the reader threads).
    pub flash_ring: std::cell::OnceCell<Option<memfleet_flash::UringReads>>,
}

/// Submission entries of a worker's flash io_uring: reads in flight at once, per worker.
const FLASH_RING_ENTRIES: u32 = 256;

impl WorkerContext {
    /// The worker's io_uring for flash reads, made on first use (inside the worker's
    /// runtime); `None` without flash, with `--flash-io threads`, or where the kernel refuses
    /// io_uring (said once per worker in the log).
    pub fn flash_ring(&self) -> Option<&memfleet_flash::UringReads> {
        self.flash_ring
            .get_or_init(|| {
                let files = self.server.flash.as_ref()?;
                if self.server.settings.flash.io != crate::config::FlashIo::Uring {
                    return None;
                }
                match files.uring_reads(FLASH_RING_ENTRIES) {
                    Ok(ring) => Some(ring),
                    Err(e) => {
                        tracing::warn!(error = %e, "io_uring refused: flash reads go to the reader threads");
                        None
                    }
                }
            })
            .as_ref()
    }
}

/// Server-wide `lru_crawler` state.
#[derive(Debug, Default)]
pub struct Crawler {
    /// `lru_crawler disable` was the last word (memcached starts with the crawler on).
    disabled: AtomicBool,
}

impl Crawler {
    /// Whether dumps are allowed (`lru_crawler enable`, the default, or no `disable` since).
    pub fn enabled(&self) -> bool {
        !self.disabled.load(Ordering::Relaxed)
    }

    /// `lru_crawler enable`: whether it was disabled (memcached refuses to start a crawler
    /// that is already running).
    pub fn enable(&self) -> bool {
        self.disabled.swap(false, Ordering::Relaxed)
    }

    /// `lru_crawler disable`.
    pub fn disable(&self) {
        self.disabled.store(true, Ordering::Relaxed);
    }
}
