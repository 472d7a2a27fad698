//! What `stats` (and `/metrics`) report: memcached's names, so existing dashboards and the
//! Prometheus memcached_exporter work unchanged, then memfleet's own engine figures.
//!
//! Where memcached's notion does not exist in Segcache, the nearest honest figure is given
//! and documented here:
//! - `evictions` counts items removed by merge or FIFO eviction; `evicted_unfetched` those
//!   of them whose access frequency was 0 (never read since written, or since a merge last
//!   kept them; FIFO eviction does not look at items and counts none).
//! - `bytes` is live items' bytes (header, key, value); `segcache_dead_bytes` is what old
//!   copies left by overwrites and deletes still occupy until their segment is merged or
//!   expires, and `segcache_unwritten_bytes` the room in active and free segments, so
//!   `bytes + segcache_dead_bytes + segcache_unwritten_bytes = limit_maxbytes` (rounded
//!   down to whole segments).
//! - `expired_unfetched` counts items reclaimed by proactive expiration (read or not).
//! - `stats slabs`/`stats items` describe one pseudo slab class `1` whose pages are
//!   segments, so tools that walk classes find something consistent (`classes`).
//! - Every name memcached 1.6.45 prints in `stats`, `stats settings`, `stats slabs`, `stats
//!   items` and `stats conns` is printed (memcached_exporter refuses a reply missing one);
//!   names for machinery Segcache does not have (slab reassignment, the segmented LRU, log
//!   watchers, response objects) are 0. the stats table in docs/server.md gives each name's meaning.

mod classes;
mod flash;
mod settings;

use crate::state::{Baseline, ServerState};
use crate::stats::{rusage, CounterValues};
use crate::version::VERSION;
use memfleet_protocol::response;
use memfleet_storage::Stats;
use std::sync::atomic::Ordering;

/// A snapshot of everything reportable, taken once per `stats` request.
pub struct StatsReport<'s> {
    server: &'s ServerState,
    engine: Stats,
    counters: CounterValues,
    base: Baseline,
}

/// A value in the general stats.
enum Value {
    Int(u64),
    Float(f64),
    Text(String),
}

impl<'s> StatsReport<'s> {
    /// Collects the engine's and the workers' counters now.
    pub fn new(server: &'s ServerState) -> Self {
        let (counters, base) = server.counters();
        StatsReport {
            server,
            engine: server.cache.stats(),
            counters,
            base,
        }
    }

    /// Zeroes the counters `stats reset` zeroes in memcached (command and hit counts), by
    /// moving the baseline.
    pub fn reset(&self) {
        let server = self.server;
        let mut base = server.reset_base.lock().unwrap_or_else(|e| e.into_inner());
        let engine = server.cache.stats();
        let conns = &server.connections;
        *base = Baseline {
            counters: server.raw_counters(),
            total_connections: conns.total.load(Ordering::Relaxed),
            rejected_connections: conns.rejected.load(Ordering::Relaxed),
            evicted_items: engine.evicted_items,
            evicted_unfetched: engine.evicted_unfetched,
            expired_items: engine.expired_items,
            flushed_items: engine.flushed_items,
        };
    }

    fn general_values(&self) -> Vec<(&'static str, Value)> {
        use Value::*;
        let s = self.server;
        let e = &self.engine;
        let c = &self.counters;
        let conns = &s.connections;
        let (user, system) = rusage();
        let clock = s.cache.clock();
        let mut v = vec![
            ("pid", Int(u64::from(std::process::id()))),
            ("uptime", Int(conns.started.elapsed().as_secs())),
            ("time", Int(clock.unix_now())),
            (
                "version",
                Text(String::from_utf8_lossy(VERSION).into_owned()),
            ),
            // No libevent: tokio on epoll.
            ("libevent", Text("none".into())),
            ("pointer_size", Int(usize::BITS.into())),
            ("rusage_user", Float(user)),
            ("rusage_system", Float(system)),
            (
                "max_connections",
                Int(s.settings.limits.max_connections as u64),
            ),
            (
                "curr_connections",
                Int(conns.current.load(Ordering::Relaxed) as u64),
            ),
            (
                "total_connections",
                Int(conns
                    .total
                    .load(Ordering::Relaxed)
                    .saturating_sub(self.base.total_connections)),
            ),
            (
                "rejected_connections",
                Int(conns
                    .rejected
                    .load(Ordering::Relaxed)
                    .saturating_sub(self.base.rejected_connections)),
            ),
            (
                "connection_structures",
                Int(conns.current.load(Ordering::Relaxed) as u64),
            ),
            // Replies are built straight into the worker's write buffer: no response objects.
            ("response_obj_oom", Int(0)),
            ("response_obj_count", Int(0)),
            ("response_obj_bytes", Int(0)),
            // One shared read buffer per worker; a connection holds bytes of its own only
            // while a request is incomplete. A failed allocation aborts, so no OOM count.
            ("read_buf_count", Int(s.settings.limits.threads as u64)),
            (
                "read_buf_bytes",
                Int((s.settings.limits.threads * crate::limits::READ_CHUNK * 2) as u64),
            ),
            ("read_buf_bytes_free", Int(0)),
            ("read_buf_oom", Int(0)),
            (
                "reserved_fds",
                Int(reserved_fds(conns.current.load(Ordering::Relaxed))),
            ),
        ];
        for (name, value) in c.pairs() {
            if !matches!(
                name,
                "bytes_read" | "bytes_written" | "conn_yields" | "auth_cmds" | "auth_errors"
            ) {
                v.push((name, Int(value)));
            }
        }
        v.extend([
            ("auth_cmds", Int(c.auth_cmds)),
            ("auth_errors", Int(c.auth_errors)),
            ("bytes_read", Int(c.bytes_read)),
            ("bytes_written", Int(c.bytes_written)),
            ("limit_maxbytes", Int(s.settings.limits.memory_bytes as u64)),
            ("accepting_conns", Int(1)),
            (
                "listen_disabled_num",
                Int(conns.listen_disabled.load(Ordering::Relaxed)),
            ),
            (
                "time_in_listen_disabled_us",
                Int(conns.listen_disabled_us.load(Ordering::Relaxed)),
            ),
            ("threads", Int(s.settings.limits.threads as u64)),
            ("conn_yields", Int(c.conn_yields)),
            (
                "hash_power_level",
                Int(u64::from(e.hash_buckets.max(1).ilog2())),
            ),
            ("hash_bytes", Int(e.hash_bytes)),
            ("hash_is_expanding", Int(0)),
            // No slab classes to move pages between.
            ("slab_reassign_rescues", Int(0)),
            ("slab_reassign_chunk_rescues", Int(0)),
            ("slab_reassign_inline_reclaim", Int(0)),
            ("slab_reassign_busy_items", Int(0)),
            ("slab_reassign_busy_deletes", Int(0)),
            ("slab_reassign_busy_nomem", Int(0)),
            ("slab_reassign_last_busy_status", Text("none".into())),
            ("slab_reassign_running", Int(0)),
            ("slabs_moved", Int(0)),
            // Proactive expiration is the crawler: its passes, each a few microseconds.
            ("lru_crawler_running", Int(0)),
            ("lru_crawler_starts", Int(e.expire_passes)),
            ("lru_maintainer_juggles", Int(0)),
            ("malloc_fails", Int(0)),
            // No `watch` log streams.
            ("log_worker_dropped", Int(0)),
            ("log_worker_written", Int(0)),
            ("log_watcher_skipped", Int(0)),
            ("log_watcher_sent", Int(0)),
            ("log_watchers", Int(0)),
            ("unexpected_napi_ids", Int(0)),
            ("round_robin_fallback", Int(0)),
            ("bytes", Int(e.bytes)),
            ("curr_items", Int(e.items)),
            ("total_items", Int(c.cmd_set)),
            ("slab_global_page_pool", Int(e.segments_free)),
            (
                "expired_unfetched",
                Int(e.expired_items.saturating_sub(self.base.expired_items)),
            ),
            (
                "evicted_unfetched",
                Int(e
                    .evicted_unfetched
                    .saturating_sub(self.base.evicted_unfetched)),
            ),
            ("evicted_active", Int(0)),
            (
                "evictions",
                Int(e.evicted_items.saturating_sub(self.base.evicted_items)),
            ),
            (
                "reclaimed",
                Int((e.expired_items + e.flushed_items)
                    .saturating_sub(self.base.expired_items + self.base.flushed_items)),
            ),
            ("crawler_reclaimed", Int(self.evictions().expired)),
            ("crawler_items_checked", Int(self.evictions().expired)),
            ("lrutail_reflocked", Int(0)),
            ("moves_to_cold", Int(0)),
            ("moves_to_warm", Int(0)),
            ("moves_within_lru", Int(0)),
            ("direct_reclaims", Int(e.evicted_segments)),
            ("lru_bumps_dropped", Int(0)),
        ]);
        if let Some(tls) = &s.tls {
            v.extend(tls.stats().pairs().map(|(name, n)| (name, Int(n))));
        }
        if let (Some(f), Some(files)) = (&self.engine.flash, &s.flash) {
            v.extend(flash::values(
                f,
                &files.stats(),
                files.direct(),
                self.engine.demoted_items,
            ));
        }
        v.extend(self.engine_values());
        v
    }

    fn engine_values(&self) -> Vec<(&'static str, Value)> {
        use Value::*;
        let e = &self.engine;
        vec![
            ("segcache_segment_size", Int(e.segment_size)),
            ("segcache_segments", Int(e.segments)),
            ("segcache_segments_free", Int(e.segments_free)),
            ("segcache_segments_active", Int(e.segments_active)),
            ("segcache_evicted_segments", Int(e.evicted_segments)),
            ("segcache_merges", Int(e.merges)),
            ("segcache_merge_retained_items", Int(e.merge_retained_items)),
            ("segcache_compactions", Int(e.compactions)),
            ("segcache_compacted_items", Int(e.compacted_items)),
            ("segcache_dead_bytes", Int(e.dead_bytes)),
            ("segcache_ghost_bytes", Int(e.ghost_bytes)),
            ("segcache_unwritten_bytes", Int(e.unwritten_bytes)),
            ("segcache_expired_segments", Int(e.expired_segments)),
            ("segcache_flushed_items", Int(e.flushed_items)),
            ("segcache_out_of_memory", Int(e.out_of_memory)),
            ("segcache_hash_buckets", Int(e.hash_buckets)),
            ("segcache_hash_overflow_used", Int(e.hash_overflow_used)),
            (
                "segcache_hash_overflow_capacity",
                Int(e.hash_overflow_capacity),
            ),
            ("segcache_hash_growths", Int(e.hash_growths)),
            ("segcache_bytes_written", Int(e.handles.bytes_written)),
            // Where worker threads waited for each other (counted only when they did).
            (
                "segcache_reserve_retries",
                Int(e.contention.reserve_retries),
            ),
            (
                "segcache_open_lock_waits",
                Int(e.contention.open_lock_waits),
            ),
            (
                "segcache_chain_lock_waits",
                Int(e.contention.chain_lock_waits),
            ),
            (
                "segcache_chain_lock_spins",
                Int(e.contention.chain_lock_spins),
            ),
            (
                "segcache_evict_lock_waits",
                Int(e.contention.evict_lock_waits),
            ),
            ("segcache_growth_stalls", Int(e.contention.growth_stalls)),
        ]
    }

    /// A statistics group by name, as `(name, value)` pairs: `None` for an unknown group.
    /// The general group is the empty name; `memfleet` is the engine's own figures.
    pub fn group(&self, name: &[u8]) -> Option<Vec<(String, String)>> {
        let pairs = |values: Vec<(&'static str, Value)>| {
            values
                .into_iter()
                .map(|(n, v)| (n.to_string(), v.render()))
                .collect()
        };
        Some(match name {
            b"" => pairs(self.general_values()),
            b"memfleet" => pairs(self.engine_values()),
            b"settings" => settings::rows(self.server),
            b"items" => classes::items(&self.engine, &self.counters, &self.evictions()),
            b"slabs" => classes::slabs(&self.engine, &self.counters),
            b"conns" => self.server.connections.table.rows(),
            b"sizes" => Vec::new(),
            _ => return None,
        })
    }

    /// Writes a group in the text protocol (`STAT name value` lines, then `END`).
    pub fn write_text(pairs: &[(String, String)], out: &mut Vec<u8>) {
        for (name, value) in pairs {
            response::stat(out, name.as_bytes(), value.as_bytes());
        }
        response::end(out);
    }

    /// Evictions and expirations since the last `stats reset`.
    fn evictions(&self) -> classes::Evictions {
        let (e, b) = (&self.engine, &self.base);
        classes::Evictions {
            evicted: e.evicted_items.saturating_sub(b.evicted_items),
            unfetched: e.evicted_unfetched.saturating_sub(b.evicted_unfetched),
            expired: e.expired_items.saturating_sub(b.expired_items),
        }
    }

    /// The Prometheus text exposition of the general statistics: `memfleet_<name>`, one
    /// gauge or counter each (the text ones become labels of `memfleet_info`).
    pub fn prometheus(&self) -> String {
        use std::fmt::Write;
        let mut text = String::new();
        for (name, value) in self.general_values() {
            match value {
                Value::Text(t) => {
                    let _ = writeln!(text, "# TYPE memfleet_{name}_info gauge");
                    let _ = writeln!(text, "memfleet_{name}_info{{{name}=\"{t}\"}} 1");
                }
                Value::Int(n) => {
                    let kind = if is_gauge(name) { "gauge" } else { "counter" };
                    let _ = writeln!(text, "# TYPE memfleet_{name} {kind}");
                    let _ = writeln!(text, "memfleet_{name} {n}");
                }
                Value::Float(f) => {
                    let _ = writeln!(text, "# TYPE memfleet_{name} counter");
                    let _ = writeln!(text, "memfleet_{name} {f:.6}");
                }
            }
        }
        text
    }
}

/// Descriptors the process holds besides client connections (listeners, epoll, event and
/// log descriptors): memcached's `reserved_fds`.
fn reserved_fds(connections: usize) -> u64 {
    // The directory listing holds one descriptor of its own while it is read.
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count().saturating_sub(1));
    open.saturating_sub(connections) as u64
}

/// Stats that go up and down (the rest only count up).
fn is_gauge(name: &str) -> bool {
    matches!(
        name,
        "pid"
            | "uptime"
            | "time"
            | "pointer_size"
            | "max_connections"
            | "curr_connections"
            | "connection_structures"
            | "limit_maxbytes"
            | "accepting_conns"
            | "threads"
            | "hash_power_level"
            | "hash_bytes"
            | "hash_is_expanding"
            | "bytes"
            | "curr_items"
            | "time_since_server_cert_refresh"
            | "response_obj_count"
            | "response_obj_bytes"
            | "read_buf_count"
            | "read_buf_bytes"
            | "read_buf_bytes_free"
            | "reserved_fds"
            | "slab_reassign_running"
            | "lru_crawler_running"
            | "log_watchers"
            | "slab_global_page_pool"
    ) || name.starts_with("segcache_segment")
        || (name.starts_with("segcache_hash_") && name != "segcache_hash_growths")
}

impl Value {
    fn render(&self) -> String {
        match self {
            Value::Int(n) => n.to_string(),
            Value::Float(f) => format!("{f:.6}"),
            Value::Text(t) => t.clone(),
        }
    }
}
