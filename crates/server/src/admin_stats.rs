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
//!   segments, so tools that walk classes find something consistent.

use crate::execute::VERSION;
use crate::stats::{rusage, CounterValues};
use crate::worker::{Baseline, Shared};
use memfleet_protocol::response;
use memfleet_storage::{EvictionPolicy, Stats};
use std::sync::atomic::Ordering;

/// A snapshot of everything reportable, taken once per `stats` request.
pub struct StatsReport<'s> {
    shared: &'s Shared,
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
    pub fn new(shared: &'s Shared) -> Self {
        let (counters, base) = shared.counters();
        StatsReport {
            shared,
            engine: shared.cache.stats(),
            counters,
            base,
        }
    }

    /// Zeroes the counters `stats reset` zeroes in memcached (command and hit counts), by
    /// moving the baseline.
    pub fn reset(&self) {
        let shared = self.shared;
        let mut base = shared.reset_base.lock().unwrap_or_else(|e| e.into_inner());
        let engine = shared.cache.stats();
        let conns = &shared.connections;
        *base = Baseline {
            counters: shared.raw_counters(),
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
        let s = self.shared;
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
            ("pointer_size", Int(usize::BITS.into())),
            ("rusage_user", Float(user)),
            ("rusage_system", Float(system)),
            ("max_connections", Int(s.settings.max_connections as u64)),
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
            ("limit_maxbytes", Int(s.settings.memory_bytes as u64)),
            ("accepting_conns", Int(1)),
            ("threads", Int(s.settings.threads as u64)),
            ("conn_yields", Int(c.conn_yields)),
            (
                "hash_power_level",
                Int(u64::from(e.hash_buckets.max(1).ilog2())),
            ),
            ("hash_bytes", Int(e.hash_bytes)),
            ("hash_is_expanding", Int(0)),
            ("bytes", Int(e.bytes)),
            ("curr_items", Int(e.items)),
            ("total_items", Int(c.cmd_set)),
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
            (
                "evictions",
                Int(e.evicted_items.saturating_sub(self.base.evicted_items)),
            ),
            (
                "reclaimed",
                Int((e.expired_items + e.flushed_items)
                    .saturating_sub(self.base.expired_items + self.base.flushed_items)),
            ),
        ]);
        if let Some(tls) = &s.tls {
            v.extend(tls.stats().pairs().map(|(name, n)| (name, Int(n))));
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
            b"settings" => self.settings(),
            b"items" => self.items(),
            b"slabs" => self.slabs(),
            b"conns" | b"sizes" => Vec::new(),
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

    fn settings(&self) -> Vec<(String, String)> {
        let st = &self.shared.settings;
        let cfg = self.shared.cache.config();
        let idle = st.idle_timeout.map_or(0, |d| d.as_secs());
        let eviction = match cfg.eviction {
            EvictionPolicy::Merge => "merge",
            EvictionPolicy::Fifo => "fifo",
            EvictionPolicy::None => "none",
        };
        let rows: Vec<(&str, String)> = vec![
            ("maxbytes", st.memory_bytes.to_string()),
            ("maxconns", st.max_connections.to_string()),
            ("tcpport", st.port.to_string()),
            ("udpport", st.udp_port.unwrap_or(0).to_string()),
            ("inter", st.listen.to_string()),
            ("verbosity", "0".into()),
            ("oldest", "0".into()),
            (
                "evictions",
                if eviction == "none" { "off" } else { "on" }.into(),
            ),
            ("domain_socket", "NULL".into()),
            ("num_threads", st.threads.to_string()),
            ("num_threads_per_udp", st.threads.to_string()),
            ("stat_key_prefix", ":".into()),
            ("detail_enabled", "no".into()),
            ("cas_enabled", "yes".into()),
            ("tcp_backlog", st.backlog.to_string()),
            ("binding_protocol", "auto-negotiate".into()),
            ("auth_enabled_sasl", "no".into()),
            ("item_size_max", st.max_item_size.to_string()),
            ("maxconns_fast", "yes".into()),
            ("idle_timeout", idle.to_string()),
            ("lease_interval", st.lease_interval.to_string()),
            ("stale_after_delete", st.stale_after_delete.to_string()),
            ("segment_size", cfg.segment_size.to_string()),
            ("merge_segments", cfg.merge_segments.to_string()),
            ("eviction_policy", eviction.into()),
            (
                "expiry_precision_shift",
                cfg.expiry_precision_shift.to_string(),
            ),
        ];
        let mut rows: Vec<(String, String)> =
            rows.into_iter().map(|(n, v)| (n.to_string(), v)).collect();
        // memcached's names for its TLS settings.
        let tls = st.tls.as_ref();
        let path =
            |p: Option<&std::path::PathBuf>| p.map_or("NULL".into(), |p| p.display().to_string());
        let verify_mode = match tls {
            Some(t) if t.verify_client => "2",
            Some(t) if t.ca.is_some() => "1",
            _ => "0",
        };
        rows.extend([
            (
                "ssl_enabled".into(),
                if tls.is_some() { "yes" } else { "no" }.into(),
            ),
            ("ssl_chain_cert".into(), path(tls.map(|t| &t.cert))),
            ("ssl_key".into(), path(tls.map(|t| &t.key))),
            ("ssl_verify_mode".into(), verify_mode.into()),
            ("ssl_ca_cert".into(), path(tls.and_then(|t| t.ca.as_ref()))),
        ]);
        rows
    }

    /// One pseudo class holding every item (nothing when empty, like memcached).
    fn items(&self) -> Vec<(String, String)> {
        let e = &self.engine;
        if e.items == 0 {
            return Vec::new();
        }
        [
            ("items:1:number", e.items),
            ("items:1:age", 0),
            ("items:1:evicted", e.evicted_items),
            (
                "items:1:evicted_nonzero",
                e.evicted_items.saturating_sub(e.evicted_unfetched),
            ),
            ("items:1:outofmemory", e.out_of_memory),
            ("items:1:reclaimed", e.expired_items),
            ("items:1:expired_unfetched", e.expired_items),
            ("items:1:evicted_unfetched", e.evicted_unfetched),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
    }

    /// Segments presented as one slab class of segment-sized pages.
    fn slabs(&self) -> Vec<(String, String)> {
        let e = &self.engine;
        let used = e.segments - e.segments_free;
        let mut rows = Vec::new();
        if used > 0 {
            rows.extend([
                ("1:chunk_size", e.segment_size),
                ("1:chunks_per_page", 1),
                ("1:total_pages", used),
                ("1:total_chunks", used),
                ("1:used_chunks", e.items),
                ("1:free_chunks", e.segments_free),
                ("1:mem_requested", e.bytes),
            ]);
        }
        rows.push(("active_slabs", u64::from(used > 0)));
        rows.push(("total_malloced", used * e.segment_size));
        rows.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
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
