//! `stats settings`: every name memcached 1.6.45 prints, with memfleet's value. Where
//! memcached's setting has no counterpart in Segcache (slab classes, the segmented LRU,
//! extstore, log watchers) the value says "off": `no`, or 0. the stats table in docs/server.md gives
//! each name's meaning here.

use crate::limits::BATCHES_BEFORE_YIELD;
use crate::state::ServerState;
use memfleet_storage::EvictionPolicy;

/// The rows, in memcached's order, then memfleet's own.
pub(super) fn rows(server: &ServerState) -> Vec<(String, String)> {
    let st = &server.settings;
    let cfg = server.cache.config();
    let idle = st.limits.idle_timeout.map_or(0, |d| d.as_secs());
    let eviction = match cfg.eviction {
        EvictionPolicy::Merge => "merge",
        EvictionPolicy::Fifo => "fifo",
        EvictionPolicy::None => "none",
    };
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    let path =
        |p: Option<&std::path::PathBuf>| p.map_or("NULL".into(), |p| p.display().to_string());
    let tls = st.listen.tls.as_ref();
    let verify_mode = match tls {
        Some(t) if t.verify_client => "2",
        Some(t) if t.ca.is_some() => "1",
        _ => "0",
    };
    let expire_us = crate::EXPIRE_INTERVAL.as_micros().to_string();
    let rows: Vec<(&str, String)> = vec![
        ("maxbytes", st.limits.memory_bytes.to_string()),
        ("maxconns", st.limits.max_connections.to_string()),
        ("tcpport", st.listen.port.to_string()),
        ("udpport", st.listen.udp_port.unwrap_or(0).to_string()),
        ("inter", st.listen.address.to_string()),
        ("verbosity", "0".into()),
        ("oldest", "0".into()),
        (
            "evictions",
            if eviction == "none" { "off" } else { "on" }.into(),
        ),
        ("domain_socket", "NULL".into()),
        // No Unix socket to apply it to; memcached's default.
        ("umask", "700".into()),
        ("shutdown_command", "no".into()),
        // One class of segment-sized pages: no growth between classes.
        ("growth_factor", "1.00".into()),
        // Items are packed byte by byte into segments, not into chunks: the smallest takes
        // its 5-byte header and a one-byte key.
        ("chunk_size", "6".into()),
        ("num_threads", st.limits.threads.to_string()),
        ("num_threads_per_udp", st.limits.threads.to_string()),
        ("stat_key_prefix", ":".into()),
        ("detail_enabled", "no".into()),
        // Pipelined read batches a connection serves before letting others run.
        ("reqs_per_event", BATCHES_BEFORE_YIELD.to_string()),
        ("cas_enabled", "yes".into()),
        ("tcp_backlog", st.listen.backlog.to_string()),
        ("binding_protocol", "auto-negotiate".into()),
        ("auth_enabled_sasl", yes_no(st.listen.sasl_pwdb.is_some())),
        ("auth_enabled_ascii", yes_no(st.listen.auth_file.is_some())),
        ("item_size_max", st.limits.max_item_size.to_string()),
        ("maxconns_fast", "yes".into()),
        ("hashpower_init", cfg.hash_power.unwrap_or(0).to_string()),
        ("slab_reassign", "no".into()),
        ("slab_automove", "0".into()),
        ("slab_automove_ratio", "0.00".into()),
        ("slab_automove_window", "0".into()),
        // The largest item, stored in one piece (never chunked).
        ("slab_chunk_max", st.limits.max_item_size.to_string()),
        // `lru_crawler enable|disable` as memcached reports it: whether key dumps run.
        // Proactive expiration plays the rest of the LRU crawler's part whatever this says:
        // it frees expired segments every `lru_crawler_sleep` microseconds (memcached: a
        // pause between items).
        ("lru_crawler", yes_no(server.crawler.enabled())),
        ("lru_crawler_sleep", expire_us),
        ("lru_crawler_tocrawl", "0".into()),
        ("tail_repair_time", "0".into()),
        ("flush_enabled", yes_no(!st.flush_disabled)),
        // `stats cachedump`, `lru_crawler metadump` and `mgdump` (`dump.rs`).
        ("dump_enabled", "yes".into()),
        ("hash_algorithm", "xxh3".into()),
        ("lru_maintainer_thread", "no".into()),
        ("lru_segmented", "no".into()),
        ("hot_lru_pct", "0".into()),
        ("warm_lru_pct", "0".into()),
        ("hot_max_factor", "0.00".into()),
        ("warm_max_factor", "0.00".into()),
        ("temp_lru", "no".into()),
        ("temporary_ttl", "0".into()),
        ("idle_timeout", idle.to_string()),
        ("watcher_logbuf_size", "0".into()),
        ("worker_logbuf_size", "0".into()),
        ("read_buf_mem_limit", "0".into()),
        ("track_sizes", "no".into()),
        ("inline_ascii_response", "no".into()),
        // No extstore.
        ("ext_item_size", "0".into()),
        ("ext_item_age", "0".into()),
        ("ext_low_ttl", "0".into()),
        ("ext_recache_rate", "0".into()),
        ("ext_wbuf_size", "0".into()),
        ("ext_compact_under", "0".into()),
        ("ext_drop_under", "0".into()),
        ("ext_max_sleep", "0".into()),
        ("ext_max_frag", "0.00".into()),
        ("slab_automove_freeratio", "0.000".into()),
        ("ext_drop_unread", "no".into()),
        ("ssl_enabled", yes_no(tls.is_some())),
        ("ssl_chain_cert", path(tls.map(|t| &t.cert))),
        ("ssl_key", path(tls.map(|t| &t.key))),
        ("ssl_verify_mode", verify_mode.into()),
        // PEM, as memcached's 1 (SSL_FILETYPE_PEM).
        ("ssl_keyformat", "1".into()),
        // rustls' default suites.
        ("ssl_ciphers", "NULL".into()),
        ("ssl_ca_cert", path(tls.and_then(|t| t.ca.as_ref()))),
        // rustls sizes its own buffers.
        ("ssl_wbuf_size", "0".into()),
        // rustls' in-memory session cache (resumption), always on with TLS.
        ("ssl_session_cache", yes_no(tls.is_some())),
        ("ssl_kernel_tls", "no".into()),
        ("ssl_min_version", "tlsv1.2".into()),
        ("num_napi_ids", "0".into()),
        // The warm-restart file (memcached's `-e`).
        ("memory_file", path(st.memory_file.as_ref())),
        ("client_flags_size", "4".into()),
        ("lease_interval", st.leases.interval.to_string()),
        (
            "stale_after_delete",
            st.leases.stale_after_delete.to_string(),
        ),
        ("segment_size", cfg.segment_size.to_string()),
        ("merge_segments", cfg.merge_segments.to_string()),
        ("eviction_policy", eviction.into()),
        (
            "expiry_precision_shift",
            cfg.expiry_precision_shift.to_string(),
        ),
    ];
    rows.into_iter().map(|(n, v)| (n.to_string(), v)).collect()
}
