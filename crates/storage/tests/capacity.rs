//! Memory accounting: 50-byte values in a 64 MiB cache until the first eviction. The engine
//! must spend 5 bytes of item memory per item beyond key and value (memcached: a 56-byte
//! header), and hold correspondingly more items. `--nocapture` prints the numbers that
//! docs/BENCHMARKS.md reports (the `capacity` example prints the same).

use memfleet_storage::{Cache, Clock, Config, Expiry};

#[test]
fn fifty_byte_values_in_64_mib() {
    let cache = Cache::new(Config::new(64 << 20).clock(Clock::manual())).unwrap();
    let mut h = cache.handle();
    let value = [b'v'; 50];
    let mut n = 0u64;
    while cache.stats().evicted_items == 0 {
        for _ in 0..4096 {
            n += 1;
            h.set(format!("key:{n:08}").as_bytes(), &value, 0, Expiry::Never)
                .unwrap();
        }
    }
    let s = cache.stats();
    let key_len = 12u64;
    let per_item_in_segments = (s.bytes - s.items * (key_len + 50)) as f64 / s.items as f64;
    let hash_per_item = s.hash_bytes as f64 / s.items as f64;
    // memcached: 56-byte header + key + NUL + value + "\r\n", before any slab rounding.
    let memcached_bound = (64u64 << 20) / (56 + key_len + 1 + 50 + 2);
    println!(
        "items={} segment-metadata/item={per_item_in_segments:.2} hash/item={hash_per_item:.2} \
         unused-heap={:.1}% memcached-upper-bound={memcached_bound}",
        s.items,
        100.0 * (s.heap_bytes - s.bytes) as f64 / s.heap_bytes as f64
    );
    assert!(
        (per_item_in_segments - 5.0).abs() < 1e-9,
        "{per_item_in_segments}"
    );
    assert!(s.items > memcached_bound * 3 / 2, "{} items", s.items);
    // Even counting the hash table, an item costs less than memcached's header alone
    // plus key and value.
    let total_per_item = (s.heap_bytes + s.hash_bytes) as f64 / s.items as f64;
    assert!(
        total_per_item < (56 + key_len + 50) as f64,
        "{total_per_item}"
    );
    // Everything the table points to is readable.
    let found = (1..=n)
        .filter(|i| h.get(format!("key:{i:08}").as_bytes()).is_some())
        .count() as u64;
    assert_eq!(found, s.items);
}
