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

/// A cache of 128 segments of 64 KiB on a manual clock, and a handle.
fn small_segments() -> (Cache, Clock) {
    let clock = Clock::manual();
    let cache = Cache::new(
        Config::new(8 << 20)
            .segment_size(64 << 10)
            .clock(clock.clone()),
    )
    .unwrap();
    (cache, clock)
}

fn held(h: &memfleet_storage::Handle, keys: impl Iterator<Item = String>) -> usize {
    keys.filter(|k| h.get(k.as_bytes()).is_some()).count()
}

/// A merge ranks the items of all its sources together: an earlier merge's output, full of
/// items that are read, does not give up half of itself to make room for items never read
/// (it would with per-source quotas, pelikan's rule, which this engine used before).
#[test]
fn merges_keep_items_that_are_read_over_items_never_read() {
    let (cache, clock) = small_segments();
    let mut h = cache.handle();
    let value = [3u8; 200];
    let read_keys = || (0..10_000).map(|i| format!("read:{i}"));
    for k in read_keys() {
        h.set(k.as_bytes(), &value, 0, Expiry::Never).unwrap();
    }
    // 40 MB of keys never read (five times the heap), the read set read once a second.
    for i in 0..180_000 {
        if i % 15_000 == 0 {
            clock.advance(1);
            for k in read_keys() {
                let _ = h.get(k.as_bytes());
            }
        }
        h.set(format!("new:{i}").as_bytes(), &value, 0, Expiry::Never)
            .unwrap();
    }
    let stats = cache.stats();
    assert!(stats.merges > 100, "{stats:?}");
    assert!(stats.evicted_unfetched > 100_000, "{stats:?}");
    let kept = held(&h, read_keys());
    assert!(
        kept >= 9_500,
        "items read every second survive: {kept}/10000 {stats:?}"
    );
}

/// A key a merge dropped is remembered (a ghost): set again, it outlasts keys the cache has
/// never seen that were set at the same time.
#[test]
fn an_evicted_key_set_again_outlasts_new_keys() {
    let (cache, _clock) = small_segments();
    let mut h = cache.handle();
    let value = [5u8; 200];
    let churn = |h: &mut memfleet_storage::Handle, from: usize, n: usize| {
        for i in from..from + n {
            h.set(format!("new:{i}").as_bytes(), &value, 0, Expiry::Never)
                .unwrap();
        }
    };
    let first: Vec<String> = (0..8_000).map(|i| format!("back:{i}")).collect();
    for k in &first {
        h.set(k.as_bytes(), &value, 0, Expiry::Never).unwrap();
    }
    churn(&mut h, 0, 45_000);
    // The keys that were evicted come back, interleaved with as many keys never seen; none
    // is read.
    let returning: Vec<String> = first
        .into_iter()
        .filter(|k| h.get(k.as_bytes()).is_none())
        .collect();
    assert!(returning.len() > 2_000, "{} evicted", returning.len());
    let control: Vec<String> = (0..returning.len()).map(|i| format!("ctrl:{i}")).collect();
    for (b, c) in returning.iter().zip(&control) {
        h.set(b.as_bytes(), &value, 0, Expiry::Never).unwrap();
        h.set(c.as_bytes(), &value, 0, Expiry::Never).unwrap();
    }
    churn(&mut h, 100_000, 15_000);
    let back = held(&h, returning.iter().cloned());
    let new = held(&h, control.iter().cloned());
    assert!(
        back > new + returning.len() / 4,
        "remembered keys outlast new ones: {back} vs {new} of {}",
        returning.len()
    );
}
