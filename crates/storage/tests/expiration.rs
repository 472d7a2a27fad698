//! Proactive expiration: expired items stop holding memory promptly, whatever the access
//! pattern, while longer-lived items stay; space freed by expiration is reused without
//! evicting anything.

use memfleet_storage::{Cache, Clock, Config, Expiry};
use std::time::{Duration, Instant};

fn key(prefix: &str, i: usize) -> Vec<u8> {
    format!("{prefix}:{i:08}").into_bytes()
}

#[test]
fn short_ttl_memory_is_reclaimed_and_long_ttl_items_stay() {
    let clock = Clock::manual();
    let cache = Cache::new(Config::new(32 << 20).clock(clock.clone())).unwrap();
    let mut h = cache.handle();
    let value = [b's'; 100];
    for i in 0..20_000 {
        h.set(&key("short", i), &value, 0, Expiry::After(5))
            .unwrap();
        h.set(&key("long", i), &value, 1, Expiry::After(3600))
            .unwrap();
    }
    let before = cache.stats();
    assert_eq!(before.items, 40_000);
    // Nobody reads the short-lived items: lazy expiration would never free them.
    clock.advance(7);
    let freed = cache.expire();
    let after = cache.stats();
    assert!(freed > 0);
    assert_eq!(after.items, 20_000, "{after:?}");
    assert_eq!(after.expired_items, 20_000);
    assert!(
        after.bytes * 2 <= before.bytes + 1024,
        "bytes {} -> {}",
        before.bytes,
        after.bytes
    );
    assert!(after.segments_free > before.segments_free);
    for i in 0..20_000 {
        assert!(h.get(&key("short", i)).is_none());
        let item = h.get(&key("long", i)).expect("long-lived item kept");
        assert_eq!((item.value(), item.flags()), (&value[..], 1));
    }
}

#[test]
fn expired_space_is_reused_without_eviction() {
    let clock = Clock::manual();
    let cache = Cache::new(Config::new(16 << 20).clock(clock.clone())).unwrap();
    let mut h = cache.handle();
    let value = [b'x'; 200];
    // Ten generations of 2 MiB+ each, 30 MiB in all through a 16 MiB cache.
    for generation in 0..10 {
        for i in 0..10_000 {
            h.set(
                &key(&format!("g{generation}"), i),
                &value,
                0,
                Expiry::After(10),
            )
            .unwrap();
        }
        clock.advance(12);
        cache.expire();
    }
    let s = cache.stats();
    assert_eq!(s.evicted_items, 0, "{s:?}");
    assert_eq!(s.items, 0);
    assert_eq!(s.expired_items, 100_000);
}

#[test]
fn background_expirer_reclaims_within_two_seconds_on_the_real_clock() {
    let cache = Cache::new(Config::new(16 << 20)).unwrap();
    let _expirer = cache.spawn_expirer(Duration::from_millis(200));
    let mut h = cache.handle();
    let value = [b'r'; 100];
    for i in 0..5_000 {
        h.set(&key("short", i), &value, 0, Expiry::After(2))
            .unwrap();
        h.set(&key("long", i), &value, 0, Expiry::After(600))
            .unwrap();
    }
    let written = Instant::now();
    // The short items expire within 2 s of being written (the clock has 1 s granularity);
    // their memory must be back within 2 s after that.
    loop {
        let s = cache.stats();
        if s.items == 5_000 {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_millis(4_500),
            "expired items still held after {:?}: {s:?}",
            written.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(cache.stats().expired_items >= 5_000);
    for i in 0..5_000 {
        assert!(h.get(&key("long", i)).is_some());
    }
}
