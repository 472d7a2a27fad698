//! The flash tier's lines in `stats`, under memcached's extstore names where they mean the
//! same (so memcached_exporter's extstore families and dashboards show them), and `flash_*`
//! for what extstore does not have: write amplification, refused demotions, the device.

use super::Value::{self, Float, Int};
use memfleet_flash::IoStats;
use memfleet_storage::FlashStats;

/// `stats` lines for the flash tier: `f` the engine's view, `io` the files' counters.
pub(super) fn values(
    f: &FlashStats,
    io: &IoStats,
    direct: bool,
    demoted: u64,
) -> Vec<(&'static str, Value)> {
    vec![
        ("get_extstore", Int(f.hits)),
        ("get_aborted_extstore", Int(f.aborted)),
        ("get_oom_extstore", Int(0)),
        ("recache_from_extstore", Int(f.promotions)),
        ("miss_from_extstore", Int(f.misses)),
        ("badcrc_from_extstore", Int(f.bad_checksums)),
        ("extstore_page_allocs", Int(f.page_reclaims + f.pages_used)),
        ("extstore_page_evictions", Int(f.page_evictions)),
        ("extstore_page_reclaims", Int(f.page_reclaims)),
        ("extstore_pages_free", Int(f.pages_free)),
        ("extstore_pages_used", Int(f.pages_used)),
        ("extstore_objects_evicted", Int(f.objects_evicted)),
        ("extstore_bytes_evicted", Int(f.bytes_evicted)),
        // extstore compacts pages, rescuing their live items into new ones; memfleet's flash
        // reclaims its oldest segment whole (its items were merge eviction's leftovers
        // already), so nothing is compacted, rescued or skipped.
        ("extstore_compact_lost", Int(0)),
        ("extstore_compact_rescues", Int(0)),
        ("extstore_compact_skipped", Int(0)),
        ("extstore_objects_read", Int(f.objects_read)),
        ("extstore_objects_written", Int(f.objects_written)),
        ("extstore_objects_used", Int(f.objects_used)),
        ("extstore_bytes_written", Int(f.bytes_written)),
        ("extstore_bytes_read", Int(io.read_bytes)),
        ("extstore_bytes_used", Int(f.bytes_used)),
        (
            "extstore_bytes_fragmented",
            Int((f.pages_used * f.page_size).saturating_sub(f.bytes_used)),
        ),
        ("extstore_limit_maxbytes", Int(f.pages_total * f.page_size)),
        ("extstore_io_queue", Int(io.read_queue_depth)),
        ("flash_demoted_items", Int(demoted)),
        ("flash_item_bytes_admitted", Int(f.item_bytes_admitted)),
        ("flash_write_amplification", Float(f.write_amplification())),
        ("flash_pages_expired", Int(f.pages_expired)),
        ("flash_write_lag_drops", Int(f.write_lag_drops)),
        ("flash_write_budget_drops", Int(f.budget_drops)),
        ("flash_tag_conflict_drops", Int(f.tag_conflict_drops)),
        ("flash_purged", Int(f.purged)),
        ("flash_growth_drops", Int(f.growth_drops)),
        ("flash_index_drops", Int(f.index_drops)),
        ("flash_sweeps", Int(f.sweeps)),
        ("flash_write_errors", Int(f.write_errors + io.write_errors)),
        ("flash_read_errors", Int(io.read_errors)),
        ("flash_reads_rejected", Int(io.reads_rejected)),
        ("flash_direct_io", Int(u64::from(direct))),
        // Workers reading on an io_uring of their own (`--flash-io uring`; each makes its ring
        // at its first flash read; 0 with the reader threads).
        ("flash_io_uring_workers", Int(io.uring_rings)),
    ]
}
