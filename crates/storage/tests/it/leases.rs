//! Leases, stale values and hold-offs in the engine (Facebook §3.2.1, §4.3): one rule per
//! test, on a manual clock. The server's socket tests check the same through the protocols.

use memfleet_storage::{
    Cache, Clock, Config, Expiry, Handle, LeaseOutcome, LeaseRead, StoreMode, StoreStatus,
    MARK_EMPTY, MARK_STALE,
};

fn cache(stale_after_delete: u32) -> (Cache, Clock) {
    let clock = Clock::manual();
    // Under Miri a small heap and table (the rules do not depend on size; Miri interprets
    // every byte a 16 MiB heap's zeroing touches).
    let config = if cfg!(miri) {
        Config::new(8 * (16 << 10))
            .segment_size(16 << 10)
            .hash_power(4)
    } else {
        Config::new(16 << 20)
    };
    let config = config
        .clock(clock.clone())
        .lease_interval(10)
        .stale_after_delete(stale_after_delete);
    (Cache::new(config).unwrap(), clock)
}

const LEASE_GET: LeaseRead = LeaseRead {
    vivify: Some(Expiry::After(10)),
    recache_below: None,
    see_deleted: true,
    read_only: false,
    no_update: false,
    vivify_cas: None,
};

/// What a lease read says, flattened: (token if won, value, marks) or a miss/hold-off.
#[derive(Debug, PartialEq, Eq)]
enum Saw {
    Won(u64, Vec<u8>, u8),
    Lost(Vec<u8>, u8),
    Miss,
    HeldOff,
}

fn read(h: &mut Handle, key: &[u8], ask: LeaseRead) -> Saw {
    h.lease_read(key, ask, |found| match found {
        LeaseOutcome::Found { item, won: true } => {
            Saw::Won(item.cas(), item.value().to_vec(), item.marks())
        }
        LeaseOutcome::Found { item, won: false } => Saw::Lost(item.value().to_vec(), item.marks()),
        LeaseOutcome::Miss => Saw::Miss,
        LeaseOutcome::HeldOff => Saw::HeldOff,
    })
    .unwrap()
}

fn token(saw: Saw) -> u64 {
    match saw {
        Saw::Won(t, ..) => t,
        other => panic!("expected a token, got {other:?}"),
    }
}

fn lease_set(h: &mut Handle, key: &[u8], token: u64, value: &[u8]) -> StoreStatus {
    h.store(StoreMode::Lease(token), key, value, 0, Expiry::Never)
        .unwrap()
}

#[test]
fn a_miss_hands_out_one_token_and_the_holder_fills_the_key() {
    let (cache, _) = cache(10);
    let (mut a, mut b) = (cache.handle(), cache.handle());
    let t = token(read(&mut a, b"k", LEASE_GET));
    assert!(t >= 2, "0 and 1 mean hit and hot miss to mcrouter");
    // Everyone else misses hot while the lease is out, and plain gets miss.
    assert!(
        matches!(read(&mut b, b"k", LEASE_GET), Saw::Lost(v, m) if v.is_empty() && m & MARK_EMPTY != 0)
    );
    assert!(b.get(b"k").is_none());
    assert_eq!(lease_set(&mut a, b"k", t, b"fresh"), StoreStatus::Stored);
    assert_eq!(b.get(b"k").unwrap().value(), b"fresh");
    assert_eq!(
        read(&mut b, b"k", LEASE_GET),
        Saw::Lost(b"fresh".to_vec(), 0)
    );
}

#[test]
fn a_delete_voids_outstanding_leases() {
    let (cache, _) = cache(10);
    let mut h = cache.handle();
    let t = token(read(&mut h, b"k", LEASE_GET));
    assert!(
        h.delete(b"k"),
        "deleting a placeholder counts, as in memcached"
    );
    assert_eq!(lease_set(&mut h, b"k", t, b"stale"), StoreStatus::NotStored);
    assert!(h.get(b"k").is_none());

    // Same with a stale value kept behind: the delete after the token voids it.
    h.set(b"v", b"one", 0, Expiry::Never).unwrap();
    assert!(h.delete(b"v"));
    let t = token(read(&mut h, b"v", LEASE_GET));
    assert!(
        !h.delete(b"v"),
        "no value left to delete, but the token is voided"
    );
    assert_eq!(lease_set(&mut h, b"v", t, b"late"), StoreStatus::NotStored);
    let t2 = token(read(&mut h, b"v", LEASE_GET));
    assert_ne!(t, t2);
    assert_eq!(lease_set(&mut h, b"v", t2, b"two"), StoreStatus::Stored);
    assert_eq!(h.get(b"v").unwrap().value(), b"two");
    // Once filled, no token stores over the value: the late fill may be older than it.
    assert_eq!(lease_set(&mut h, b"v", t, b"late"), StoreStatus::NotStored);
    assert_eq!(
        lease_set(&mut h, b"v", t2, b"again"),
        StoreStatus::NotStored
    );
    assert_eq!(h.get(b"v").unwrap().value(), b"two");
}

#[test]
fn one_token_per_key_per_interval() {
    let (cache, clock) = cache(10);
    let mut h = cache.handle();
    let placeholder = LeaseRead {
        vivify: Some(Expiry::After(60)),
        ..LEASE_GET
    };
    let t = token(read(&mut h, b"k", placeholder));
    clock.advance(9);
    assert!(matches!(read(&mut h, b"k", placeholder), Saw::Lost(..)));
    clock.advance(1);
    // The holder may have died: after the interval the next miss gets a new token and the
    // old one no longer stores.
    let t2 = token(read(&mut h, b"k", placeholder));
    assert_ne!(t, t2);
    assert_eq!(lease_set(&mut h, b"k", t, b"old"), StoreStatus::NotStored);
    assert_eq!(lease_set(&mut h, b"k", t2, b"new"), StoreStatus::Stored);
}

#[test]
fn deleted_values_are_served_stale_to_lease_reads_only() {
    let (cache, clock) = cache(5);
    let mut h = cache.handle();
    h.set(b"k", b"v1", 7, Expiry::Never).unwrap();
    assert!(h.delete(b"k"));
    assert!(h.get(b"k").is_none());
    let plain_mg = LeaseRead::default();
    assert_eq!(read(&mut h, b"k", plain_mg), Saw::Miss);
    match read(&mut h, b"k", LEASE_GET) {
        Saw::Won(_, v, marks) => {
            assert_eq!(v, b"v1");
            assert_ne!(marks & MARK_STALE, 0);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(read(&mut h, b"k", LEASE_GET), Saw::Lost(v, _) if v == b"v1"));
    // add treats the key as deleted.
    assert_eq!(
        h.store(StoreMode::Add, b"k", b"added", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Stored
    );
    assert!(h.delete(b"k"));
    clock.advance(5);
    // The stale copy is gone after its time; a lease read now creates a placeholder.
    assert!(
        matches!(read(&mut h, b"k", LEASE_GET), Saw::Won(_, v, m) if v.is_empty() && m & MARK_EMPTY != 0)
    );
}

#[test]
fn without_stale_retention_a_delete_drops_the_value() {
    let (cache, _) = cache(0);
    let mut h = cache.handle();
    h.set(b"k", b"v1", 0, Expiry::Never).unwrap();
    assert!(h.delete(b"k"));
    assert!(matches!(read(&mut h, b"k", LEASE_GET), Saw::Won(_, v, _) if v.is_empty()));
}

#[test]
fn meta_invalidate_keeps_a_visible_stale_value_and_the_first_reader_wins() {
    let (cache, _) = cache(10);
    let mut h = cache.handle();
    h.set(b"k", b"v1", 0, Expiry::Never).unwrap();
    assert!(h.invalidate(b"k", None).unwrap());
    assert!(!h.invalidate(b"missing", None).unwrap());
    // memcached serves an invalidated value to plain gets.
    assert_eq!(h.get(b"k").unwrap().value(), b"v1");
    let plain_mg = LeaseRead::default();
    let t = token(read(&mut h, b"k", plain_mg));
    assert!(matches!(read(&mut h, b"k", plain_mg), Saw::Lost(_, m) if m & MARK_STALE != 0));
    // The winner's token is the item's CAS: a meta set with C<token> refreshes it.
    assert_eq!(
        h.store(StoreMode::Cas(t + 1), b"k", b"x", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Exists
    );
    assert_eq!(
        h.store(StoreMode::Cas(t), b"k", b"v2", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::Stored
    );
    assert_eq!(read(&mut h, b"k", plain_mg), Saw::Lost(b"v2".to_vec(), 0));
}

#[test]
fn recache_wins_one_token_on_a_value_about_to_expire() {
    let (cache, clock) = cache(10);
    let mut h = cache.handle();
    h.set(b"k", b"v", 0, Expiry::After(100)).unwrap();
    let recache = LeaseRead {
        recache_below: Some(30),
        ..LeaseRead::default()
    };
    assert_eq!(read(&mut h, b"k", recache), Saw::Lost(b"v".to_vec(), 0));
    clock.advance(75);
    let t = token(read(&mut h, b"k", recache));
    assert!(matches!(read(&mut h, b"k", recache), Saw::Lost(..)));
    // Still a plain value for everyone else; touching keeps the lease, a set voids it.
    assert_eq!(h.get(b"k").unwrap().value(), b"v");
    assert!(h.touch(b"k", Expiry::After(20)).unwrap());
    assert_eq!(h.get(b"k").unwrap().cas(), t);
    assert_eq!(
        h.store(StoreMode::Cas(t), b"k", b"v2", 0, Expiry::After(100))
            .unwrap(),
        StoreStatus::Stored
    );
}

#[test]
fn a_hold_off_refuses_add_and_hands_out_no_token() {
    let (cache, clock) = cache(10);
    let mut h = cache.handle();
    h.set(b"k", b"v", 0, Expiry::Never).unwrap();
    assert!(h.delete_with_holdoff(b"k", 3).unwrap());
    assert_eq!(read(&mut h, b"k", LEASE_GET), Saw::HeldOff);
    assert!(
        !h.delete(b"k"),
        "a plain delete leaves the hold-off in force"
    );
    assert_eq!(
        h.store(StoreMode::Add, b"k", b"a", 0, Expiry::Never)
            .unwrap(),
        StoreStatus::NotStored
    );
    clock.advance(3);
    assert!(matches!(read(&mut h, b"k", LEASE_GET), Saw::Won(..)));
}

#[test]
fn stale_set_with_an_older_cas_is_kept_as_stale() {
    let (cache, _) = cache(10);
    let mut h = cache.handle();
    h.set(b"k", b"v1", 0, Expiry::After(100)).unwrap();
    let old = h.get(b"k").unwrap().cas();
    h.set(b"k", b"v2", 0, Expiry::After(100)).unwrap();
    assert_eq!(
        h.set_stale_if_older(b"k", b"late", 3, old).unwrap(),
        Some(())
    );
    let item = h.get(b"k").unwrap();
    assert_eq!((item.value(), item.flags()), (&b"late"[..], 3));
    assert_ne!(item.marks() & MARK_STALE, 0);
    let newer = item.cas() + 1;
    drop(item);
    assert_eq!(h.set_stale_if_older(b"k", b"x", 0, newer).unwrap(), None);
}

#[test]
fn concurrent_misses_hand_out_exactly_one_token() {
    let (cache, _) = cache(10);
    // Fewer rounds under Miri, which checks every one of them for data races.
    const ROUNDS: usize = if cfg!(miri) { 40 } else { 200 };
    const THREADS: usize = 4;
    let barrier = std::sync::Barrier::new(THREADS);
    // One handle per thread for the whole test (a handle per round would open a segment per
    // round and evict the placeholders under test).
    let wins: Vec<Vec<bool>> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..THREADS)
            .map(|_| {
                let (cache, barrier) = (cache.clone(), &barrier);
                s.spawn(move || {
                    let mut h = cache.handle();
                    (0..ROUNDS)
                        .map(|round| {
                            barrier.wait();
                            let key = format!("hot{round}");
                            matches!(read(&mut h, key.as_bytes(), LEASE_GET), Saw::Won(..))
                        })
                        .collect()
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    for round in 0..ROUNDS {
        let winners = wins.iter().filter(|w| w[round]).count();
        assert_eq!(winners, 1, "round {round}");
    }
}
