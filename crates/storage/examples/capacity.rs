//! How many small items fit in a memory limit, and what each costs beyond its key and value.
//!
//! ```sh
//! cargo run --release -p memfleet-storage --example capacity -- [memory MiB] [value bytes]
//! ```
//!
//! Fills a cache with keys "key:00000001".. and values of the given size until the first
//! eviction, then prints the item count and the per-item costs: the segment bytes beyond key
//! and value (header, client flags, alignment), the hash table's bytes per item, and the
//! heap left unused (partly filled active segments and the evictor's reserve). Compare with
//! `scripts/memcached-capacity.py`, which does the same against Debian's memcached.

use memfleet_storage::{Cache, Clock, Config, Expiry};

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(64, |s| s.parse().expect("memory MiB"));
    let value_len: usize = args.next().map_or(50, |s| s.parse().expect("value bytes"));
    let cache = Cache::new(Config::new(mib << 20).clock(Clock::manual())).expect("cache");
    let mut h = cache.handle();
    let value = vec![b'v'; value_len];
    let mut n = 0u64;
    loop {
        let key = format!("key:{:08}", n + 1);
        h.set(key.as_bytes(), &value, 0, Expiry::Never)
            .expect("set");
        n += 1;
        if n.is_multiple_of(1024) && cache.stats().evicted_items > 0 {
            break;
        }
    }
    let s = cache.stats();
    let key_len = "key:00000001".len() as u64;
    let payload = s.items * (key_len + value_len as u64);
    println!("memfleet Segcache, {mib} MiB heap, {key_len}-byte keys, {value_len}-byte values:");
    println!("  items held at the first eviction: {}", s.items);
    println!(
        "  segment bytes per item beyond key+value: {:.2}",
        (s.bytes - payload) as f64 / s.items as f64
    );
    println!(
        "  hash table: {} bytes, {:.2} bytes per item ({} buckets, {} overflow in use)",
        s.hash_bytes,
        s.hash_bytes as f64 / s.items as f64,
        s.hash_buckets,
        s.hash_overflow_used
    );
    println!(
        "  heap not holding live items: {:.1}% ({} free segments, {} active)",
        100.0 * (s.heap_bytes - s.bytes) as f64 / s.heap_bytes as f64,
        s.segments_free,
        s.segments_active
    );
    println!(
        "  total memory per item (heap + hash table) / items: {:.1} bytes",
        (s.heap_bytes + s.hash_bytes) as f64 / s.items as f64
    );
}
