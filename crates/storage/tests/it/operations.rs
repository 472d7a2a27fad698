//! memcached semantics of every engine operation, one behaviour per test.

use memfleet_storage::{Cache, Clock, Config, DeltaError, Expiry, StoreMode, StoreStatus};

fn cache() -> (Cache, Clock) {
    let clock = Clock::manual();
    let cache = Cache::new(Config::new(16 << 20).clock(clock.clone())).unwrap();
    (cache, clock)
}

fn value(h: &memfleet_storage::Handle, key: &[u8]) -> Option<Vec<u8>> {
    h.get(key).map(|i| i.value().to_vec())
}

#[test]
fn set_get_overwrite_and_flags() {
    let (cache, _) = cache();
    let mut h = cache.handle();
    assert_eq!(
        h.set(b"k", b"v1", 0, Expiry::Never).unwrap(),
        StoreStatus::Stored
    );
    assert_eq!(value(&h, b"k").unwrap(), b"v1");
    h.set(b"k", b"value two", u32::MAX, Expiry::Never).unwrap();
    let item = h.get(b"k").unwrap();
    assert_eq!(item.value(), b"value two");
    assert_eq!(item.flags(), u32::MAX);
    assert_eq!(item.key(), b"k");
    drop(item);
    assert!(h.get(b"other").is_none());
    let stats = cache.stats();
    assert_eq!(stats.items, 1);
    assert_eq!(stats.handles.get_hits, 2);
    assert_eq!(stats.handles.get_misses, 1);
}

#[test]
fn add_replace_semantics() {
    let (cache, _) = cache();
    let mut h = cache.handle();
    assert_eq!(
        h.store(StoreMode::Replace, b"k", b"x", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::NotStored
    );
    assert_eq!(
        h.store(StoreMode::Add, b"k", b"a", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Stored
    );
    assert_eq!(
        h.store(StoreMode::Add, b"k", b"b", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::NotStored
    );
    assert_eq!(value(&h, b"k").unwrap(), b"a");
    assert_eq!(
        h.store(StoreMode::Replace, b"k", b"r", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Stored
    );
    assert_eq!(value(&h, b"k").unwrap(), b"r");
}

#[test]
fn cas_semantics() {
    let (cache, _) = cache();
    let mut h = cache.handle();
    assert_eq!(
        h.store(StoreMode::Cas(1), b"k", b"x", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::NotFound
    );
    h.set(b"k", b"v", 0, Expiry::Never).unwrap();
    let cas = h.get(b"k").unwrap().cas();
    assert_eq!(
        h.store(StoreMode::Cas(cas + 1), b"k", b"x", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Exists
    );
    assert_eq!(
        h.store(StoreMode::Cas(cas), b"k", b"y", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Stored
    );
    assert_eq!(
        h.store(StoreMode::Cas(cas), b"k", b"z", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Exists
    );
    assert_eq!(value(&h, b"k").unwrap(), b"y");
    // touch keeps the CAS value, as memcached does.
    let cas = h.get(b"k").unwrap().cas();
    assert!(h.touch(b"k", Expiry::After(100)).unwrap());
    assert_eq!(h.get(b"k").unwrap().cas(), cas);
}

#[test]
fn append_prepend_keep_flags() {
    let (cache, _) = cache();
    let mut h = cache.handle();
    assert_eq!(
        h.store(StoreMode::Append, b"k", b"x", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::NotStored
    );
    h.set(b"k", b"mid", 7, Expiry::Never).unwrap();
    h.store(StoreMode::Append, b"k", b"-end", 99, Expiry::After(1))
        .unwrap();
    h.store(StoreMode::Prepend, b"k", b"start-", 99, Expiry::After(1))
        .unwrap();
    let item = h.get(b"k").unwrap();
    assert_eq!(item.value(), b"start-mid-end");
    assert_eq!(item.flags(), 7);
}

#[test]
fn incr_decr_like_memcached() {
    let (cache, _) = cache();
    let mut h = cache.handle();
    assert_eq!(h.incr(b"n", 1).unwrap(), None);
    h.set(b"n", b"100", 3, Expiry::Never).unwrap();
    assert_eq!(h.decr(b"n", 1).unwrap(), Some(99));
    // memcached updates in place and pads with spaces.
    assert_eq!(value(&h, b"n").unwrap(), b"99 ");
    assert_eq!(h.incr(b"n", 1).unwrap(), Some(100));
    assert_eq!(value(&h, b"n").unwrap(), b"100");
    assert_eq!(h.decr(b"n", 1000).unwrap(), Some(0));
    h.set(b"n", b"18446744073709551615", 0, Expiry::Never)
        .unwrap();
    assert_eq!(h.incr(b"n", 2).unwrap(), Some(1));
    h.set(b"s", b"abc", 0, Expiry::Never).unwrap();
    assert_eq!(h.incr(b"s", 1), Err(DeltaError::NonNumeric));
    assert_eq!(h.get(b"n").unwrap().flags(), 0);
}

#[test]
fn delete_and_missing() {
    let (cache, _) = cache();
    let mut h = cache.handle();
    assert!(!h.delete(b"k"));
    h.set(b"k", b"v", 0, Expiry::Never).unwrap();
    assert!(h.delete(b"k"));
    assert!(h.get(b"k").is_none());
    assert!(!h.delete(b"k"));
    assert_eq!(cache.stats().items, 0);
}

#[test]
fn ttl_expiry_is_exact_from_above() {
    let (cache, clock) = cache();
    let mut h = cache.handle();
    h.set(b"short", b"v", 0, Expiry::After(2)).unwrap();
    h.set(b"long", b"v", 0, Expiry::After(100)).unwrap();
    h.set(b"never", b"v", 0, Expiry::Never).unwrap();
    clock.advance(1);
    assert!(h.get(b"short").is_some());
    clock.advance(1);
    assert!(h.get(b"short").is_none());
    assert!(h.get(b"long").is_some());
    clock.advance(1000);
    assert!(h.get(b"long").is_none());
    assert!(h.get(b"never").is_some());
}

#[test]
fn negative_ttl_deletes() {
    let (cache, _) = cache();
    let mut h = cache.handle();
    h.set(b"k", b"v", 0, Expiry::Never).unwrap();
    assert_eq!(
        h.set(b"k", b"w", 0, Expiry::Expired).unwrap(),
        StoreStatus::Stored
    );
    assert!(h.get(b"k").is_none());
    assert_eq!(
        h.store(StoreMode::Add, b"k", b"w", 0, Expiry::Expired)
            .unwrap(),
        StoreStatus::Stored
    );
    assert!(h.get(b"k").is_none());
}

#[test]
fn absolute_unix_expiry() {
    let (cache, clock) = cache();
    let mut h = cache.handle();
    let at = clock.unix_now() + 5;
    h.set(b"k", b"v", 0, Expiry::from_memcached(at as i64))
        .unwrap();
    clock.advance(4);
    assert!(h.get(b"k").is_some());
    clock.advance(1);
    assert!(h.get(b"k").is_none());
}

#[test]
fn incr_keeps_the_deadline_exactly() {
    let (cache, clock) = cache();
    let mut h = cache.handle();
    h.set(b"rate", b"0", 0, Expiry::After(60)).unwrap();
    for _ in 0..50 {
        h.incr(b"rate", 1).unwrap();
    }
    clock.advance(30);
    for _ in 0..50 {
        h.incr(b"rate", 1).unwrap();
    }
    clock.advance(28);
    assert_eq!(value(&h, b"rate").unwrap(), b"100");
    clock.advance(2);
    assert!(h.get(b"rate").is_none());
}

#[test]
fn touch_and_gat() {
    let (cache, clock) = cache();
    let mut h = cache.handle();
    assert!(!h.touch(b"k", Expiry::After(10)).unwrap());
    h.set(b"k", b"v", 5, Expiry::After(2)).unwrap();
    assert!(h.touch(b"k", Expiry::After(100)).unwrap());
    clock.advance(50);
    let item = h.get_and_touch(b"k", Expiry::After(10)).unwrap().unwrap();
    assert_eq!((item.value(), item.flags()), (&b"v"[..], 5));
    drop(item);
    clock.advance(11);
    assert!(h.get(b"k").is_none());
}

#[test]
fn flush_all_now_and_delayed() {
    let (cache, clock) = cache();
    let mut h = cache.handle();
    h.set(b"a", b"1", 0, Expiry::Never).unwrap();
    h.flush_all(0);
    assert!(h.get(b"a").is_none());
    h.set(b"b", b"2", 0, Expiry::Never).unwrap();
    assert!(h.get(b"b").is_some());
    h.flush_all(10);
    clock.advance(9);
    assert!(h.get(b"b").is_some());
    clock.advance(1);
    assert!(h.get(b"b").is_none());
    h.set(b"c", b"3", 0, Expiry::Never).unwrap();
    assert!(h.get(b"c").is_some());
    cache.expire();
    assert_eq!(cache.stats().items, 1);
}

#[test]
fn oversized_and_bad_keys_are_refused() {
    let (cache, _) = cache();
    let mut h = cache.handle();
    let big = vec![0u8; 1 << 20];
    assert_eq!(
        h.set(b"k", &big, 0, Expiry::Never),
        Err(memfleet_storage::StoreError::TooLarge)
    );
    assert_eq!(
        h.set(b"", b"v", 0, Expiry::Never),
        Err(memfleet_storage::StoreError::BadKey)
    );
    let almost = vec![1u8; (1 << 20) - 300];
    assert_eq!(
        h.set(b"k", &almost, 0, Expiry::Never).unwrap(),
        StoreStatus::Stored
    );
    assert_eq!(h.get(b"k").unwrap().value().len(), almost.len());
}

#[test]
fn delete_hold_off_refuses_add_until_it_ends() {
    let (cache, clock) = cache();
    let mut h = cache.handle();
    h.set(b"k", b"v", 0, Expiry::Never).unwrap();
    assert!(h.delete_with_holdoff(b"k", 2).unwrap());
    assert!(h.get(b"k").is_none());
    assert_eq!(
        h.store(StoreMode::Add, b"k", b"stale", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::NotStored
    );
    assert_eq!(
        h.store(StoreMode::Replace, b"k", b"x", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::NotStored
    );
    clock.advance(2);
    assert_eq!(
        h.store(StoreMode::Add, b"k", b"fresh", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Stored
    );
    assert_eq!(value(&h, b"k").unwrap(), b"fresh");
    // A set replaces a hold-off at once.
    assert!(h.delete_with_holdoff(b"k", 60).unwrap());
    assert!(!h.delete_with_holdoff(b"missing", 60).unwrap());
    h.set(b"k", b"new", 0, Expiry::Never).unwrap();
    assert_eq!(value(&h, b"k").unwrap(), b"new");
    // The hold-off marker is visible to the lease machinery, not to get.
    h.delete_with_holdoff(b"k", 60).unwrap();
    let marked = h.lookup(b"k").unwrap();
    assert_eq!(marked.marks(), memfleet_storage::MARK_TOMBSTONE);
}

/// CAS uniques differ between keys, as memcached's global counter does, although the engine
/// keeps one write counter per hash bucket: fresh keys in fresh buckets all have counter 1.
#[test]
fn cas_values_differ_between_keys() {
    let cache = Cache::new(Config::new(16 << 20)).unwrap();
    let mut h = cache.handle();
    let mut seen = std::collections::HashSet::new();
    for i in 0..1000 {
        let key = format!("key:{i}");
        h.set(key.as_bytes(), b"v", 0, Expiry::Never).unwrap();
        let cas = h.get(key.as_bytes()).unwrap().cas();
        assert!(seen.insert(cas), "two keys share CAS {cas}");
    }
    // And a key's CAS still changes on every write and is honoured by a cas store.
    let before = h.get(b"key:1").unwrap().cas();
    h.set(b"key:1", b"w", 0, Expiry::Never).unwrap();
    let after = h.get(b"key:1").unwrap().cas();
    assert_ne!(before, after);
    assert_eq!(
        h.store(StoreMode::Cas(before), b"key:1", b"x", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Exists
    );
    assert_eq!(
        h.store(StoreMode::Cas(after), b"key:1", b"x", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Stored
    );
}

/// CAS uniques as clients expect memcached's: the first write's is 1, they grow by about one
/// per write (never past what memcached's counter would be, give or take a handle's block of
/// 64), so a client that keeps 32 bits or a signed 64-bit integer can hold them.
#[test]
fn cas_uniques_start_small_and_grow_with_the_writes() {
    let cache = Cache::new(Config::new(16 << 20)).unwrap();
    let mut h = cache.handle();
    h.set(b"first", b"v", 0, Expiry::Never).unwrap();
    assert_eq!(
        h.get(b"first").unwrap().cas(),
        1,
        "memcached's first unique"
    );
    let mut last = 1;
    for i in 0..10_000u64 {
        let key = format!("key:{}", i % 700);
        h.set(key.as_bytes(), b"v", 0, Expiry::Never).unwrap();
        let cas = h.get(key.as_bytes()).unwrap().cas();
        assert!(
            cas > last,
            "one handle's uniques only grow: {cas} after {last}"
        );
        last = cas;
    }
    assert_eq!(last, 10_001, "one unique per write, as memcached's counter");
    // Two more handles (two more blocks of 64 taken) and a few thousand writes each, in turn.
    let (mut a, mut b) = (cache.handle(), cache.handle());
    for i in 0..3000u64 {
        let key = format!("key:{}", i % 500);
        let w = if i % 2 == 0 { &mut a } else { &mut b };
        w.set(key.as_bytes(), b"v", 0, Expiry::Never).unwrap();
    }
    let most = (0..700)
        .filter_map(|i| h.get(format!("key:{i}").as_bytes()).map(|it| it.cas()))
        .max()
        .unwrap();
    let writes = 10_001 + 3000;
    assert!(
        most <= writes + 3 * 64,
        "{most}: more than the writes and the handles' blocks"
    );
    assert!(most > writes - 64, "{most}");
}

/// A server started with a high counter (the test-only `--test-cas-start`) hands out uniques
/// above 2^32, and past every 2^38 boundary (where a chain's word wraps) they still come back
/// whole and only grow.
#[test]
fn cas_uniques_above_2_32_and_across_2_38_come_back_whole() {
    for start in [(1u64 << 32) - 10, (1 << 38) - 50, (3 << 38) - 1] {
        let cache = Cache::new(Config::new(16 << 20).cas_start(start)).unwrap();
        let mut h = cache.handle();
        let mut seen = std::collections::HashSet::new();
        let mut last = start;
        for i in 0..200 {
            let key = format!("key:{i}");
            h.set(key.as_bytes(), b"v", 0, Expiry::Never).unwrap();
            let cas = h.get(key.as_bytes()).unwrap().cas();
            assert!(
                cas > last && cas <= start + 201,
                "{start}: {cas} after {last}"
            );
            assert!(seen.insert(cas));
            last = cas;
        }
        // Each key still reads the unique it was given, and a cas store honours it.
        let cas = h.get(b"key:0").unwrap().cas();
        // (No unique is a multiple of 2^38: those low bits mean a chain never written.)
        let first = if (start + 1) % (1 << 38) == 0 {
            start + 2
        } else {
            start + 1
        };
        assert_eq!(cas, first);
        assert_eq!(
            h.store(StoreMode::Cas(cas - 1), b"key:0", b"x", 0, Expiry::Never)
                .unwrap(),
            StoreStatus::Exists
        );
        assert_eq!(
            h.store(StoreMode::Cas(cas), b"key:0", b"x", 0, Expiry::Never)
                .unwrap(),
            StoreStatus::Stored
        );
        assert!(h.get(b"key:0").unwrap().cas() > last);
    }
}
