//! Every stat name memcached 1.6.45 prints is printed by memfleet, in each of the five
//! forms (`stats`, `stats settings`, `stats slabs`, `stats items`, `stats conns`), so that
//! memcached's tooling (memcached_exporter refuses a reply that lacks one) works unchanged;
//! and the values behind the per-class and per-connection names are memfleet's real ones.
//!
//! The lists below were captured from the real binary: `memcached -u root -l 127.0.0.1 -p
//! PORT` (1.6.45, built from the release tarball with its defaults), one connection sending
//! `set a 0 0 1`, `get a`, then each `stats` form, keeping each `STAT` line's name in order
//! with a class or file-descriptor number replaced by `N` (`1:chunk_size` → `N:chunk_size`,
//! `items:1:age` → `items:N:age`, `27:addr` → `N:addr`).

use crate::common;

use common::TestServer;
use std::collections::{HashMap, HashSet};

const GENERAL: &[&str] = &[
    "pid",
    "uptime",
    "time",
    "version",
    "libevent",
    "pointer_size",
    "rusage_user",
    "rusage_system",
    "max_connections",
    "curr_connections",
    "total_connections",
    "rejected_connections",
    "connection_structures",
    "response_obj_oom",
    "response_obj_count",
    "response_obj_bytes",
    "read_buf_count",
    "read_buf_bytes",
    "read_buf_bytes_free",
    "read_buf_oom",
    "reserved_fds",
    "cmd_get",
    "cmd_set",
    "cmd_flush",
    "cmd_touch",
    "cmd_meta",
    "get_hits",
    "get_misses",
    "get_expired",
    "get_flushed",
    "delete_misses",
    "delete_hits",
    "incr_misses",
    "incr_hits",
    "decr_misses",
    "decr_hits",
    "cas_misses",
    "cas_hits",
    "cas_badval",
    "touch_hits",
    "touch_misses",
    "store_too_large",
    "store_no_memory",
    "auth_cmds",
    "auth_errors",
    "bytes_read",
    "bytes_written",
    "limit_maxbytes",
    "accepting_conns",
    "listen_disabled_num",
    "time_in_listen_disabled_us",
    "threads",
    "conn_yields",
    "hash_power_level",
    "hash_bytes",
    "hash_is_expanding",
    "slab_reassign_rescues",
    "slab_reassign_chunk_rescues",
    "slab_reassign_inline_reclaim",
    "slab_reassign_busy_items",
    "slab_reassign_busy_deletes",
    "slab_reassign_busy_nomem",
    "slab_reassign_last_busy_status",
    "slab_reassign_running",
    "slabs_moved",
    "lru_crawler_running",
    "lru_crawler_starts",
    "lru_maintainer_juggles",
    "malloc_fails",
    "log_worker_dropped",
    "log_worker_written",
    "log_watcher_skipped",
    "log_watcher_sent",
    "log_watchers",
    "unexpected_napi_ids",
    "round_robin_fallback",
    "bytes",
    "curr_items",
    "total_items",
    "slab_global_page_pool",
    "expired_unfetched",
    "evicted_unfetched",
    "evicted_active",
    "evictions",
    "reclaimed",
    "crawler_reclaimed",
    "crawler_items_checked",
    "lrutail_reflocked",
    "moves_to_cold",
    "moves_to_warm",
    "moves_within_lru",
    "direct_reclaims",
    "lru_bumps_dropped",
];

const SETTINGS: &[&str] = &[
    "maxbytes",
    "maxconns",
    "tcpport",
    "udpport",
    "inter",
    "verbosity",
    "oldest",
    "evictions",
    "domain_socket",
    "umask",
    "shutdown_command",
    "growth_factor",
    "chunk_size",
    "num_threads",
    "num_threads_per_udp",
    "stat_key_prefix",
    "detail_enabled",
    "reqs_per_event",
    "cas_enabled",
    "tcp_backlog",
    "binding_protocol",
    "auth_enabled_sasl",
    "auth_enabled_ascii",
    "item_size_max",
    "maxconns_fast",
    "hashpower_init",
    "slab_reassign",
    "slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_chunk_max",
    "lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "tail_repair_time",
    "flush_enabled",
    "dump_enabled",
    "hash_algorithm",
    "lru_maintainer_thread",
    "lru_segmented",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temp_lru",
    "temporary_ttl",
    "idle_timeout",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "read_buf_mem_limit",
    "track_sizes",
    "inline_ascii_response",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_wbuf_size",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_sleep",
    "ext_max_frag",
    "slab_automove_freeratio",
    "ext_drop_unread",
    "ssl_enabled",
    "ssl_chain_cert",
    "ssl_key",
    "ssl_verify_mode",
    "ssl_keyformat",
    "ssl_ciphers",
    "ssl_ca_cert",
    "ssl_wbuf_size",
    "ssl_session_cache",
    "ssl_kernel_tls",
    "ssl_min_version",
    "num_napi_ids",
    "memory_file",
    "client_flags_size",
];

const SLABS: &[&str] = &[
    "N:chunk_size",
    "N:chunks_per_page",
    "N:total_pages",
    "N:total_chunks",
    "N:used_chunks",
    "N:free_chunks",
    "N:free_chunks_end",
    "N:get_hits",
    "N:cmd_set",
    "N:delete_hits",
    "N:incr_hits",
    "N:decr_hits",
    "N:cas_hits",
    "N:cas_badval",
    "N:touch_hits",
    "active_slabs",
    "total_malloced",
];

const ITEMS: &[&str] = &[
    "items:N:number",
    "items:N:number_hot",
    "items:N:number_warm",
    "items:N:number_cold",
    "items:N:age_hot",
    "items:N:age_warm",
    "items:N:age",
    "items:N:mem_requested",
    "items:N:evicted",
    "items:N:evicted_nonzero",
    "items:N:evicted_time",
    "items:N:outofmemory",
    "items:N:tailrepairs",
    "items:N:reclaimed",
    "items:N:expired_unfetched",
    "items:N:evicted_unfetched",
    "items:N:evicted_active",
    "items:N:crawler_reclaimed",
    "items:N:crawler_items_checked",
    "items:N:lrutail_reflocked",
    "items:N:moves_to_cold",
    "items:N:moves_to_warm",
    "items:N:moves_within_lru",
    "items:N:direct_reclaims",
    "items:N:hits_to_hot",
    "items:N:hits_to_warm",
    "items:N:hits_to_cold",
    "items:N:hits_to_temp",
];

const CONNS: &[&str] = &[
    "N:addr",
    "N:state",
    "N:secs_since_last_cmd",
    "N:listen_addr",
];

/// A name with its class or descriptor number replaced by `N`, as in the lists above.
fn generic(name: &str) -> String {
    let (prefix, rest) = match name.strip_prefix("items:") {
        Some(rest) => ("items:", rest),
        None => ("", name),
    };
    match rest.split_once(':') {
        Some((n, tail)) if n.parse::<u32>().is_ok() => format!("{prefix}N:{tail}"),
        _ => name.to_string(),
    }
}

#[test]
fn every_name_memcached_prints_is_printed() {
    let server = TestServer::start();
    let mut c = server.connect();
    c.check("set a 0 0 1\r\nx\r\n", "STORED\r\n");
    c.check("get a\r\n", "VALUE a 0 1\r\nx\r\nEND\r\n");
    for (form, want) in [
        ("", GENERAL),
        ("settings", SETTINGS),
        ("slabs", SLABS),
        ("items", ITEMS),
        ("conns", CONNS),
    ] {
        let got: HashSet<String> = c.stats(form).iter().map(|(n, _)| generic(n)).collect();
        let missing: Vec<&&str> = want.iter().filter(|n| !got.contains(**n)).collect();
        assert!(missing.is_empty(), "`stats {form}` lacks {missing:?}");
    }
}

#[test]
fn the_pseudo_class_counts_what_the_server_counts() {
    let server = TestServer::start();
    let mut c = server.connect();
    c.check("set a 0 0 1\r\n1\r\n", "STORED\r\n");
    c.check("get a b\r\n", "VALUE a 0 1\r\n1\r\nEND\r\n");
    c.check("incr a 2\r\n", "3\r\n");
    c.check("decr a 1\r\n", "2\r\n");
    c.check("touch a 100\r\n", "TOUCHED\r\n");
    c.check("cas a 0 0 1 12345\r\nz\r\n", "EXISTS\r\n");
    c.check("set d 0 0 1\r\nx\r\n", "STORED\r\n");
    c.check("delete d\r\n", "DELETED\r\n");
    let general: HashMap<String, String> = c.stats("").into_iter().collect();
    let slabs: HashMap<String, String> = c.stats("slabs").into_iter().collect();
    for (name, want) in [
        ("get_hits", "1"),
        ("cmd_set", "3"),
        ("delete_hits", "1"),
        ("incr_hits", "1"),
        ("decr_hits", "1"),
        ("cas_hits", "0"),
        ("cas_badval", "1"),
        ("touch_hits", "1"),
    ] {
        assert_eq!(general[name], want, "stats {name}");
        // One pseudo class holds every item, so its counters are the server's.
        assert_eq!(slabs[&format!("1:{name}")], want, "stats slabs 1:{name}");
    }
    // Its pages are the segments in use, one chunk each; free segments are the global pool.
    let n = |m: &HashMap<String, String>, k: &str| -> u64 { m[k].parse().unwrap() };
    assert_eq!(n(&slabs, "1:total_pages"), n(&slabs, "1:used_chunks"));
    assert!(n(&slabs, "1:total_pages") >= 1);
    assert_eq!(
        n(&slabs, "total_malloced"),
        n(&slabs, "1:total_pages") * n(&slabs, "1:chunk_size")
    );
    let items: HashMap<String, String> = c.stats("items").into_iter().collect();
    assert_eq!(items["items:1:number"], general["curr_items"]);
    assert_eq!(items["items:1:number_cold"], general["curr_items"]);
    assert_eq!(items["items:1:hits_to_cold"], "2", "a get hit and a touch");
}

#[test]
fn stats_conns_lists_listeners_and_connections_until_they_close() {
    let server = TestServer::start();
    let port = server.addr.port();
    let mut c = server.connect();
    let mut idle = server.connect();
    idle.check("version\r\n", format!("VERSION {}\r\n", version(&mut c)));
    let by_fd = |rows: &[(String, String)]| {
        let mut fds: HashMap<String, HashMap<String, String>> = HashMap::new();
        for (name, value) in rows {
            let (fd, field) = name.split_once(':').unwrap();
            fds.entry(fd.to_string())
                .or_default()
                .insert(field.to_string(), value.clone());
        }
        fds
    };
    // The asking connection is reading its request; the idle one waits once it is done
    // answering `version` (a moment after its reply left: asked again until then).
    let state_of_clients = |rows: &[(String, String)]| {
        let mut states: Vec<String> = by_fd(rows)
            .values()
            .filter(|f| f.contains_key("listen_addr"))
            .map(|f| f["state"].clone())
            .collect();
        states.sort();
        states
    };
    // Each worker lists its listening socket once its thread runs: on a loaded machine the
    // second one can come a moment after the first answered (asked again until then).
    let listeners = |rows: &[(String, String)]| {
        by_fd(rows)
            .values()
            .filter(|f| f.get("state").is_some_and(|s| s == "conn_listening"))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let rows = loop {
        let rows = c.stats("conns");
        if state_of_clients(&rows) == ["conn_parse_cmd", "conn_waiting"] && listeners(&rows) == 2 {
            break rows;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "expected two listeners, one connection parsing and one waiting: {rows:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let fds = by_fd(&rows);
    let listening: Vec<_> = fds
        .values()
        .filter(|f| f["state"] == "conn_listening")
        .collect();
    // One listening socket per worker (SO_REUSEPORT), each on the server's port.
    assert_eq!(listening.len(), 2, "{rows:?}");
    for l in &listening {
        assert_eq!(l["addr"], format!("tcp:127.0.0.1:{port}"));
    }
    let clients: Vec<_> = fds
        .values()
        .filter(|f| f.contains_key("listen_addr"))
        .collect();
    assert_eq!(clients.len(), 2, "{rows:?}");
    for f in &clients {
        assert_eq!(f["listen_addr"], format!("tcp:127.0.0.1:{port}"));
        assert!(f["addr"].starts_with("tcp:127.0.0.1:"), "{f:?}");
        // Both spoke a moment ago (a second may have turned since).
        assert!(
            ["0", "1"].contains(&f["secs_since_last_cmd"].as_str()),
            "{f:?}"
        );
    }
    drop(idle);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let rows = c.stats("conns");
        let clients = by_fd(&rows)
            .values()
            .filter(|f| f.contains_key("listen_addr"))
            .count();
        if clients == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "closed connection still listed: {rows:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn version(c: &mut common::Client) -> String {
    let stats: HashMap<String, String> = c.stats("").into_iter().collect();
    stats["version"].clone()
}

/// `stats memfleet` reports where the engine's worker threads waited for each other (the
/// contention counters `memfleet bench scale` reads), as counters that only rise, and a
/// server that has done nothing concurrent reports no wait.
#[test]
fn stats_memfleet_reports_contention() {
    const CONTENTION: &[&str] = &[
        "segcache_reserve_retries",
        "segcache_open_lock_waits",
        "segcache_chain_lock_waits",
        "segcache_chain_lock_spins",
        "segcache_evict_lock_waits",
        "segcache_growth_stalls",
    ];
    let server = TestServer::start();
    let mut c = server.connect();
    for i in 0..50 {
        c.check(format!("set k{i} 0 0 1\r\nx\r\n").as_str(), "STORED\r\n");
    }
    let engine: HashMap<String, String> = c.stats("memfleet").into_iter().collect();
    for name in CONTENTION {
        let value = engine
            .get(*name)
            .unwrap_or_else(|| panic!("no {name}: {engine:?}"));
        assert_eq!(
            value, "0",
            "{name}: one connection cannot contend with itself"
        );
    }
    let general: HashSet<String> = c.stats("").into_iter().map(|(n, _)| n).collect();
    assert!(CONTENTION.iter().all(|n| general.contains(*n)));
}
