//! `stats slabs` and `stats items`: Segcache has no slab classes, so both describe one
//! pseudo class `1` that holds every item, whose pages and chunks are segments (an item is
//! packed into a segment byte by byte, not into a chunk of its own). Every name memcached
//! 1.6.45 prints is there; with one class, the per-class command counters are the server's
//! own. the stats table in docs/server.md gives each name's meaning here.

use crate::stats::CounterValues;
use memfleet_storage::Stats;

fn rows(pairs: &[(&str, u64)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// Segments in use (written or being written) as the class's pages, each one chunk; the
/// free segments are the global page pool (`slab_global_page_pool` in `stats`). The class's
/// bytes are `items:1:mem_requested` (as in memcached 1.6.45: memcached_exporter refuses a
/// reply that has it in both).
pub(super) fn slabs(e: &Stats, c: &CounterValues) -> Vec<(String, String)> {
    let used = e.segments - e.segments_free;
    let mut out = Vec::new();
    if used > 0 {
        out = rows(&[
            ("1:chunk_size", e.segment_size),
            ("1:chunks_per_page", 1),
            ("1:total_pages", used),
            ("1:total_chunks", used),
            ("1:used_chunks", used),
            ("1:free_chunks", 0),
            // Chunks never handed out from the last page: a segment is handed out whole.
            ("1:free_chunks_end", 0),
            ("1:get_hits", c.get_hits),
            ("1:cmd_set", c.cmd_set),
            ("1:delete_hits", c.delete_hits),
            ("1:incr_hits", c.incr_hits),
            ("1:decr_hits", c.decr_hits),
            ("1:cas_hits", c.cas_hits),
            ("1:cas_badval", c.cas_badval),
            ("1:touch_hits", c.touch_hits),
        ]);
    }
    out.extend(rows(&[
        ("active_slabs", u64::from(used > 0)),
        ("total_malloced", used * e.segment_size),
    ]));
    out
}

/// The class's items, all in one queue: memcached without a segmented LRU (`lru_segmented
/// no`) keeps every item in its COLD queue, and so does this report.
pub(super) fn items(
    e: &Stats,
    c: &CounterValues,
    since_reset: &Evictions,
) -> Vec<(String, String)> {
    if e.items == 0 {
        return Vec::new();
    }
    rows(&[
        ("items:1:number", e.items),
        ("items:1:number_hot", 0),
        ("items:1:number_warm", 0),
        ("items:1:number_cold", e.items),
        ("items:1:age_hot", 0),
        ("items:1:age_warm", 0),
        ("items:1:age", e.oldest_item_age),
        ("items:1:mem_requested", e.bytes),
        ("items:1:evicted", since_reset.evicted),
        (
            "items:1:evicted_nonzero",
            since_reset.evicted.saturating_sub(since_reset.unfetched),
        ),
        ("items:1:evicted_time", e.last_evicted_age),
        ("items:1:outofmemory", e.out_of_memory),
        ("items:1:tailrepairs", 0),
        ("items:1:reclaimed", since_reset.expired),
        ("items:1:expired_unfetched", since_reset.expired),
        ("items:1:evicted_unfetched", since_reset.unfetched),
        ("items:1:evicted_active", 0),
        ("items:1:crawler_reclaimed", since_reset.expired),
        ("items:1:crawler_items_checked", since_reset.expired),
        ("items:1:lrutail_reflocked", 0),
        ("items:1:moves_to_cold", 0),
        ("items:1:moves_to_warm", 0),
        ("items:1:moves_within_lru", 0),
        ("items:1:direct_reclaims", e.evicted_segments),
        ("items:1:hits_to_hot", 0),
        ("items:1:hits_to_warm", 0),
        ("items:1:hits_to_cold", c.get_hits + c.touch_hits),
        ("items:1:hits_to_temp", 0),
    ])
}

/// The engine's eviction and expiration counts since the last `stats reset`.
pub(super) struct Evictions {
    pub evicted: u64,
    pub unfetched: u64,
    pub expired: u64,
}
