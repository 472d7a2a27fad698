//! Filling the cache far past its memory limit keeps it working, within its limit.

use memfleet_storage::{Cache, Clock, Config, EvictionPolicy, Expiry};

fn fill(policy: EvictionPolicy) -> (Cache, usize) {
    let clock = Clock::manual();
    let cache = Cache::new(Config::new(8 << 20).clock(clock.clone()).eviction(policy)).unwrap();
    let mut h = cache.handle();
    let value = [7u8; 100];
    let n = 200_000;
    for i in 0..n {
        let key = format!("key:{i}");
        h.set(key.as_bytes(), &value, i as u32, Expiry::Never)
            .unwrap();
        // A small hot set that is read often, so merges have something to keep.
        if i % 10 == 0 {
            for j in 0..20 {
                let _ = h.get(format!("key:{j}").as_bytes());
            }
            if i % 1000 == 0 {
                clock.advance(1);
            }
        }
    }
    (cache, n)
}

#[test]
fn merge_eviction_keeps_hot_items_and_stays_consistent() {
    let (cache, n) = fill(EvictionPolicy::Merge);
    let stats = cache.stats();
    assert!(stats.merges > 0, "{stats:?}");
    assert!(stats.evicted_items > 0);
    assert!(stats.items < n as u64);
    assert!(stats.bytes <= stats.heap_bytes);
    let h = cache.handle();
    let mut found = 0;
    for i in 0..n {
        let key = format!("key:{i}");
        if let Some(item) = h.get(key.as_bytes()) {
            assert_eq!(item.value(), &[7u8; 100][..]);
            assert_eq!(item.flags(), i as u32);
            found += 1;
        }
    }
    assert_eq!(
        found as u64, stats.items,
        "every live item is readable and intact"
    );
    let hot = (0..20)
        .filter(|j| h.get(format!("key:{j}").as_bytes()).is_some())
        .count();
    assert!(hot >= 15, "hot keys survive merges: {hot}/20");
}

#[test]
fn fifo_eviction_works_too() {
    let (cache, _) = fill(EvictionPolicy::Fifo);
    let stats = cache.stats();
    assert_eq!(stats.merges, 0);
    assert!(stats.evicted_segments > 0);
    let h = cache.handle();
    assert!(h.get(b"key:199999").is_some());
}

#[test]
fn no_eviction_reports_out_of_memory() {
    let clock = Clock::manual();
    let cache = Cache::new(
        Config::new(8 << 20)
            .clock(clock)
            .eviction(EvictionPolicy::None),
    )
    .unwrap();
    let mut h = cache.handle();
    let value = [1u8; 1000];
    let mut oom = false;
    for i in 0..20_000 {
        if h.set(format!("k{i}").as_bytes(), &value, 0, Expiry::Never)
            .is_err()
        {
            oom = true;
            break;
        }
    }
    assert!(oom);
    assert!(cache.stats().out_of_memory > 0);
}
