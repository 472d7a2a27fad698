//! Per-item access state for memcached's meta flags: the fetched mark (`h`, `me`'s
//! `fetch=`) and the last-access time (`l`, `la=`), on a manual clock.

use memfleet_storage::{Cache, Clock, Config, Expiry, LeaseRead, StoreMode};

fn cache() -> (Cache, Clock) {
    let clock = Clock::manual();
    let config = Config::new(16 << 20).clock(clock.clone());
    (Cache::new(config).unwrap(), clock)
}

#[test]
fn fetched_is_set_by_the_first_read_and_cleared_by_a_write() {
    let (cache, clock) = cache();
    let mut h = cache.handle();
    h.store(StoreMode::Set, b"k", b"v", 0, Expiry::Never)
        .unwrap();
    assert!(!h.peek(b"k").unwrap().fetched(), "a peek records nothing");
    assert!(
        !h.get(b"k").unwrap().fetched(),
        "first read: not fetched before"
    );
    assert!(
        h.get(b"k").unwrap().fetched(),
        "second read: fetched before"
    );
    clock.advance(3);
    assert!(
        h.get(b"k").unwrap().fetched(),
        "a new second keeps the mark"
    );
    h.store(StoreMode::Set, b"k", b"w", 0, Expiry::Never)
        .unwrap();
    assert!(!h.peek(b"k").unwrap().fetched(), "a write clears it");
}

#[test]
fn no_update_reads_leave_the_mark_alone() {
    let (cache, _clock) = cache();
    let mut h = cache.handle();
    h.store(StoreMode::Set, b"k", b"v", 0, Expiry::Never)
        .unwrap();
    let quiet = LeaseRead {
        no_update: true,
        ..LeaseRead::default()
    };
    for _ in 0..2 {
        let fetched = h.lease_read(b"k", quiet, |found| match found {
            memfleet_storage::LeaseOutcome::Found { item, .. } => item.fetched(),
            _ => panic!("a miss"),
        });
        assert!(!fetched.unwrap());
    }
}

#[test]
fn idle_seconds_count_from_the_last_write_or_read() {
    let (cache, clock) = cache();
    let mut h = cache.handle();
    h.store(StoreMode::Set, b"k", b"v", 0, Expiry::Never)
        .unwrap();
    clock.advance(5);
    assert_eq!(h.get(b"k").unwrap().idle_secs(clock.now()), 5);
    clock.advance(2);
    assert_eq!(h.peek(b"k").unwrap().idle_secs(clock.now()), 2);
    h.store(StoreMode::Set, b"k", b"w", 0, Expiry::Never)
        .unwrap();
    clock.advance(1);
    assert_eq!(h.peek(b"k").unwrap().idle_secs(clock.now()), 1);
}
