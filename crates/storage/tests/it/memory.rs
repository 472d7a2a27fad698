//! Memory accounting and reclamation.
//!
//! * `per_item_overhead_beats_memcached`: fills a 64 MiB cache with 50-byte values until the
//!   first eviction, prints the per-item metadata cost (segment bytes beyond key and value,
//!   hash-table bytes) and checks it against the documented 5-byte header and against what
//!   64 MiB holds at memcached's 56-byte item header.
//! * `expire_reclaims_short_ttl_segments`: on a manual clock, short-TTL items interleaved with
//!   long-TTL ones; one expiration pass after the short TTL frees exactly the short items'
//!   segments and accounting, while every long-TTL item stays readable.
//! * `background_expirer_reclaims_on_the_real_clock`: the same with the system clock and a
//!   200 ms background expirer; the short items' segments are freed within 2 s of expiry.
//! * `expiration_makes_room_without_eviction`: generations of short-TTL writes, eight times the
//!   heap in total, need no eviction (merge policy) and never run out of memory (no-eviction
//!   policy): expired segments are reused.
//! * Two ignored tests document bugs: the heap is made resident at creation, and items whose
//!   TTLs differ by more than their bucket's tolerance waste a segment each.

use memfleet_storage::{Cache, Clock, Config, EvictionPolicy, Expiry, Stats};
use std::time::{Duration, Instant};

/// Writes `prefix` followed by `i` as 8 decimal digits into `buf` (no allocation per key).
fn key_into<'a>(buf: &'a mut Vec<u8>, prefix: &[u8], i: u32) -> &'a [u8] {
    buf.clear();
    buf.extend_from_slice(prefix);
    let mut digits = [b'0'; 8];
    let mut n = i;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    buf.extend_from_slice(&digits);
    buf
}

/// A value that names its key's number, so a mix-up would show.
fn value_for(i: u32, len: usize) -> Vec<u8> {
    let mut v = vec![(i % 251) as u8; len];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

#[test]
fn per_item_overhead_beats_memcached() {
    const VALUE: usize = 50;
    const KEY: usize = 12; // "key:" + 8 digits
    let clock = Clock::manual();
    let cache = Cache::new(Config::new(64 << 20).clock(clock)).unwrap();
    let mut h = cache.handle();
    let value = [b'v'; VALUE];
    let mut key = Vec::new();
    let mut written = 0u32;
    let stats = loop {
        for _ in 0..1024 {
            written += 1;
            h.set(
                key_into(&mut key, b"key:", written),
                &value,
                0,
                Expiry::Never,
            )
            .unwrap();
        }
        let stats = cache.stats();
        if stats.evicted_items > 0 {
            break stats;
        }
        assert!(written < 4_000_000, "no eviction after {written} items");
    };
    assert_eq!(key.len(), KEY);

    let items = stats.items;
    let payload = items * (KEY + VALUE) as u64;
    let segment_meta = (stats.bytes - payload) as f64 / items as f64;
    let hash_meta = stats.hash_bytes as f64 / items as f64;
    let memcached_item = 56 + KEY + VALUE + 2 + 8; // header, key, value + "\r\n", CAS
    let memcached_items = (64u64 << 20) / memcached_item as u64;
    println!("written before the first eviction: {written}");
    println!("items stored:                       {items}");
    println!(
        "heap used by items:                 {} of {} bytes ({:.1}%)",
        stats.bytes,
        stats.heap_bytes,
        100.0 * stats.bytes as f64 / stats.heap_bytes as f64
    );
    println!("segment metadata per item:          {segment_meta:.2} B");
    println!(
        "hash table per item:                {hash_meta:.2} B ({} bytes, {} buckets, {} growths)",
        stats.hash_bytes, stats.hash_buckets, stats.hash_growths
    );
    println!(
        "total metadata per item:            {:.2} B (memcached: 56 B header + hash)",
        segment_meta + hash_meta
    );
    println!(
        "memcached at {memcached_item} B/item would hold {memcached_items}; ratio {:.2}",
        items as f64 / memcached_items as f64
    );

    // Flags 0 cost nothing: exactly the 5-byte header per item.
    assert!(
        segment_meta <= 6.0,
        "segment metadata {segment_meta} B/item"
    );
    assert_eq!(stats.bytes, items * (5 + KEY + VALUE) as u64);
    assert!(hash_meta < 32.0, "hash table {hash_meta} B/item");
    assert!(segment_meta + hash_meta < 56.0);
    assert!(stats.bytes <= stats.heap_bytes);
    // Nearly the whole heap holds live items when eviction starts...
    assert!(
        stats.bytes as f64 >= 0.9 * stats.heap_bytes as f64,
        "{stats:?}"
    );
    // ...so far more items than memcached's per-item cost allows.
    assert!(
        items as f64 >= 1.5 * memcached_items as f64,
        "{items} items vs memcached's {memcached_items}"
    );
    // And they are all readable.
    let mut present = 0u64;
    for i in 1..=written {
        if let Some(item) = h.get(key_into(&mut key, b"key:", i)) {
            assert_eq!(item.value(), &value[..]);
            present += 1;
        }
    }
    assert_eq!(present, items);
}

/// Writes `n` short-TTL and `n` long-TTL items interleaved; returns their stored size.
fn write_mixed(cache: &Cache, n: u32, short: Expiry, long: Expiry) -> u64 {
    let mut h = cache.handle();
    let mut key = Vec::new();
    for i in 0..n {
        h.set(key_into(&mut key, b"s:", i), &value_for(i, 100), 0, short)
            .unwrap();
        h.set(key_into(&mut key, b"l:", i), &value_for(i, 100), 0, long)
            .unwrap();
    }
    (5 + 10 + 100) as u64
}

fn check_long_intact(cache: &Cache, n: u32) {
    let h = cache.handle();
    let mut key = Vec::new();
    for i in 0..n {
        let item = h
            .get(key_into(&mut key, b"l:", i))
            .unwrap_or_else(|| panic!("long-TTL item {i} lost"));
        assert_eq!(item.value(), &value_for(i, 100)[..]);
    }
}

fn check_short_gone(cache: &Cache, n: u32) {
    let h = cache.handle();
    let mut key = Vec::new();
    for i in 0..n {
        assert!(
            h.get(key_into(&mut key, b"s:", i)).is_none(),
            "short item {i}"
        );
    }
}

#[test]
fn expire_reclaims_short_ttl_segments() {
    const N: u32 = 40_000;
    let clock = Clock::manual();
    let cache = Cache::new(Config::new(64 << 20).clock(clock.clone())).unwrap();
    let size = write_mixed(&cache, N, Expiry::After(5), Expiry::After(3600));
    let per_segment = (1u64 << 20) / size;
    let short_segments = u64::from(N).div_ceil(per_segment);
    let before = cache.stats();
    assert_eq!(before.items, 2 * u64::from(N));
    assert_eq!(before.bytes, 2 * u64::from(N) * size);

    // Nothing is due yet: a pass frees nothing.
    clock.advance(4);
    assert_eq!(cache.expire(), 0);
    assert_eq!(cache.stats().items, 2 * u64::from(N));

    clock.advance(3); // t = 7 = short TTL + 2
    let freed = cache.expire();
    let after = cache.stats();
    println!("freed {freed} segments; before {before:?}\nafter {after:?}");
    assert_eq!(freed as u64, short_segments);
    assert_eq!(after.items, u64::from(N));
    assert_eq!(after.bytes, u64::from(N) * size);
    assert_eq!(after.expired_items, u64::from(N));
    assert_eq!(after.expired_segments, short_segments);
    assert_eq!(after.segments_free, before.segments_free + short_segments);
    assert_eq!(after.evicted_items, 0);
    check_long_intact(&cache, N);
    check_short_gone(&cache, N);
    // A second pass has nothing left to do.
    assert_eq!(cache.expire(), 0);
}

#[test]
fn background_expirer_reclaims_on_the_real_clock() {
    const N: u32 = 20_000;
    let cache = Cache::new(Config::new(32 << 20)).unwrap();
    let clock = cache.clock().clone();
    let start = Instant::now();
    let _expirer = cache.spawn_expirer(Duration::from_millis(200));
    let size = write_mixed(&cache, N, Expiry::After(2), Expiry::After(3600));
    // The last short item expires when the clock reaches this.
    let last_deadline = clock.now() + 2;
    let peak = cache.stats();
    let short_segments = u64::from(N).div_ceil((1u64 << 20) / size);

    let reclaimed = |s: &Stats| s.items == u64::from(N) && s.expired_items == u64::from(N);
    let mut expired_at = None;
    let stats = loop {
        let stats = cache.stats();
        if expired_at.is_none() && clock.now() >= last_deadline {
            expired_at = Some(Instant::now());
        }
        if reclaimed(&stats) || start.elapsed() > Duration::from_millis(4500) {
            break stats;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let done = Instant::now();
    println!(
        "reclaimed after {:?} (expiry at {:?}): {stats:?}",
        done - start,
        expired_at.map(|t| t - start)
    );
    assert!(reclaimed(&stats), "not reclaimed within 4.5 s: {stats:?}");
    if let Some(at) = expired_at {
        assert!(
            done.saturating_duration_since(at) <= Duration::from_secs(2),
            "reclaimed {:?} after expiry",
            done - at
        );
    }
    assert_eq!(stats.bytes, u64::from(N) * size);
    assert!(stats.expired_segments >= short_segments, "{stats:?}");
    assert_eq!(
        stats.segments_free,
        peak.segments_free + stats.expired_segments,
        "every expired segment went back to the free pool"
    );
    assert_eq!(stats.evicted_items, 0);
    check_short_gone(&cache, N);
    check_long_intact(&cache, N);
}

/// Eight generations of 5-second items, each about a third of a 16 MiB heap, written 6 s
/// apart: only expiration can make room, and it must.
fn run_generations(policy: EvictionPolicy) -> Stats {
    const GENERATIONS: u32 = 8;
    const PER_GENERATION: u32 = 25_000; // × 215 B ≈ 5.1 MiB
    let clock = Clock::manual();
    let cache = Cache::new(Config::new(16 << 20).clock(clock.clone()).eviction(policy)).unwrap();
    let mut h = cache.handle();
    let mut key = Vec::new();
    for g in 0..GENERATIONS {
        for i in 0..PER_GENERATION {
            let id = g * PER_GENERATION + i;
            h.set(
                key_into(&mut key, b"g:", id),
                &value_for(id, 200),
                0,
                Expiry::After(5),
            )
            .unwrap_or_else(|e| panic!("generation {g} item {i}: {e}"));
        }
        // The generation just written is complete and readable.
        for i in 0..PER_GENERATION {
            let id = g * PER_GENERATION + i;
            let item = h
                .get(key_into(&mut key, b"g:", id))
                .unwrap_or_else(|| panic!("generation {g} item {i} missing"));
            assert_eq!(item.value(), &value_for(id, 200)[..]);
        }
        clock.advance(6);
    }
    let written = u64::from(GENERATIONS * PER_GENERATION);
    let stats = cache.stats();
    assert!(
        written * 215 > 2 * stats.heap_bytes,
        "the test must write more than the heap"
    );
    assert_eq!(stats.evicted_items, 0, "{policy:?}: {stats:?}");
    assert_eq!(stats.evicted_segments, 0);
    assert_eq!(stats.merges, 0);
    assert_eq!(stats.out_of_memory, 0);
    assert!(stats.expired_segments > 0);
    // Everything is past its TTL now: one more pass reclaims the rest.
    cache.expire();
    let end = cache.stats();
    assert_eq!(end.items, 0);
    assert_eq!(end.bytes, 0);
    assert_eq!(end.expired_items, written);
    println!("{policy:?}: {end:?}");
    end
}

#[test]
fn expiration_makes_room_without_eviction() {
    run_generations(EvictionPolicy::Merge);
    run_generations(EvictionPolicy::None);
}

/// `src/heap.rs` says the heap's pages stay untouched until segments fill: an empty cache
/// must not make its memory limit resident. (It once did: an over-aligned `alloc_zeroed`
/// is served with an aligned allocation plus a full `memset`.) The measurement runs in a
/// child process running only this test, so other tests' allocations cannot merge with the
/// heap's mapping.
#[test]
fn new_cache_does_not_commit_its_heap() {
    const MIB: u64 = 200;
    if std::env::var_os("MEMFLEET_RSS_CHILD").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "new_cache_does_not_commit_its_heap",
                "--test-threads",
                "1",
            ])
            .env("MEMFLEET_RSS_CHILD", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "child failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let vm_rss_kb = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let before = vm_rss_kb();
    let cache = Cache::new(Config::new((MIB as usize) << 20)).unwrap();
    let grown = vm_rss_kb().saturating_sub(before);
    drop(cache);
    // The hash table (a few MiB, zero-filled by the allocator) is resident; the heap is not.
    assert!(
        grown < 16 * 1024,
        "creating an empty {MIB} MiB cache made {grown} KiB resident"
    );
}

/// In group 0 the TTL buckets are 4 s wide but the tolerance is `max(1, lower_bound >> 3)`
/// (1–3 s for TTLs under 32 s), so items alternating between two TTLs of one bucket (here
/// 20 s and 23 s: bucket 5, tolerance 2) cannot share a segment. With one active segment per
/// bucket, each such item sealed it and opened a new 1 MiB one: 1 000 items (115 KB) took
/// hundreds of segments and the eviction this forced threw out the 4.6 MB of never-expiring
/// items that fit comfortably in the 16 MiB cache. Handles now keep a few active segments
/// per bucket.
#[test]
fn mixed_ttls_in_one_bucket_share_segments() {
    let clock = Clock::manual();
    let cache = Cache::new(Config::new(16 << 20).clock(clock)).unwrap();
    let mut h = cache.handle();
    let mut key = Vec::new();
    for i in 0..40_000u32 {
        h.set(
            key_into(&mut key, b"n:", i),
            &value_for(i, 100),
            0,
            Expiry::Never,
        )
        .unwrap();
    }
    for i in 0..1000u32 {
        let ttl = if i % 2 == 0 { 20 } else { 23 };
        h.set(
            key_into(&mut key, b"m:", i),
            &value_for(i, 100),
            0,
            Expiry::After(ttl),
        )
        .unwrap();
    }
    let stats = cache.stats();
    let used = stats.segments - stats.segments_free;
    println!("{used} segments in use; {stats:?}");
    assert_eq!(
        stats.evicted_items, 0,
        "4.7 MB of items caused eviction in a 16 MiB cache"
    );
    assert_eq!(stats.items, 41_000);
    assert!(used <= 8, "{used} segments for 4.7 MB");
}
