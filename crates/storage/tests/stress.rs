//! Several threads at once: no torn or mixed item under eviction, expiration and hash-table
//! growth, and no lost update for incr, cas and add. Bounded by operation counts.

use memfleet_storage::{Cache, Clock, Config, Expiry, StoreMode, StoreStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const THREADS: usize = 4;

/// A value that proves which key and version it belongs to: key, version, a pattern, and a
/// checksum over all of it.
fn make_value(key: &[u8], version: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 16);
    v.extend_from_slice(&(key.len() as u32).to_le_bytes());
    v.extend_from_slice(key);
    v.extend_from_slice(&version.to_le_bytes());
    while v.len() < len {
        v.push((version as u8).wrapping_add(v.len() as u8));
    }
    let sum = v
        .iter()
        .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

fn check_value(key: &[u8], v: &[u8]) {
    let (body, sum) = v.split_at(v.len() - 4);
    let expect = body
        .iter()
        .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
    assert_eq!(
        sum,
        expect.to_le_bytes(),
        "checksum of {}",
        String::from_utf8_lossy(key)
    );
    let klen = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
    assert_eq!(&body[4..4 + klen], key, "value belongs to another key");
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn no_torn_items_under_eviction_expiration_and_growth() {
    // Small table and heap: growth and merges happen during the run.
    let cache = Cache::new(Config::new(8 << 20).segment_size(64 << 10).hash_power(6)).unwrap();
    let _expirer = cache.spawn_expirer(Duration::from_millis(10));
    let checked = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let cache = cache.clone();
            let checked = checked.clone();
            std::thread::spawn(move || {
                let mut h = cache.handle();
                let mut x = 0x1234_5678_9abc_def0 ^ (t as u64 + 1);
                for op in 0..60_000u64 {
                    let k = format!("key:{}", next(&mut x) % 40_000).into_bytes();
                    if op % 3 == 0 {
                        let len = 40 + (next(&mut x) % 400) as usize;
                        let ttl = match next(&mut x) % 4 {
                            0 => Expiry::After(1),
                            1 => Expiry::After(2),
                            _ => Expiry::Never,
                        };
                        let v = make_value(&k, op, len);
                        assert_eq!(h.set(&k, &v, t as u32, ttl).unwrap(), StoreStatus::Stored);
                    } else if let Some(item) = h.get(&k) {
                        check_value(&k, item.value());
                        assert!((item.flags() as usize) < THREADS);
                        checked.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = cache.stats();
    assert!(
        checked.load(Ordering::Relaxed) > 10_000,
        "too few hits to mean anything"
    );
    assert!(s.merges > 0, "{s:?}");
    assert!(s.hash_growths > 0, "{s:?}");
    // Every item the table still points to is intact.
    let h = cache.handle();
    for i in 0..40_000 {
        let k = format!("key:{i}").into_bytes();
        if let Some(item) = h.get(&k) {
            check_value(&k, item.value());
        }
    }
}

#[test]
fn concurrent_incr_loses_no_update() {
    let cache = Cache::new(Config::new(64 << 20).clock(Clock::manual())).unwrap();
    cache.handle().set(b"a", b"0", 0, Expiry::Never).unwrap();
    cache
        .handle()
        .set(b"b", b"0", 0, Expiry::After(600))
        .unwrap();
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                let mut h = cache.handle();
                for i in 0..5_000 {
                    let key: &[u8] = if i % 2 == 0 { b"a" } else { b"b" };
                    h.incr(key, 1).unwrap().expect("counter exists");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let h = cache.handle();
    for key in [&b"a"[..], b"b"] {
        let v = h.get(key).unwrap();
        assert_eq!(std::str::from_utf8(v.value()).unwrap().trim(), "10000");
    }
}

#[test]
fn concurrent_cas_loops_count_exactly() {
    let cache = Cache::new(Config::new(64 << 20).clock(Clock::manual())).unwrap();
    cache.handle().set(b"n", b"0", 0, Expiry::Never).unwrap();
    let successes = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let cache = cache.clone();
            let successes = successes.clone();
            std::thread::spawn(move || {
                let mut h = cache.handle();
                for _ in 0..2_000 {
                    loop {
                        let (n, cas) = {
                            let item = h.get(b"n").unwrap();
                            let n: u64 =
                                std::str::from_utf8(item.value()).unwrap().parse().unwrap();
                            (n, item.cas())
                        };
                        let next = (n + 1).to_string();
                        match h.store(StoreMode::Cas(cas), b"n", next.as_bytes(), 0, Expiry::Never)
                        {
                            Ok(StoreStatus::Stored) => break,
                            Ok(StoreStatus::Exists) => continue,
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                    successes.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let h = cache.handle();
    let n: u64 = std::str::from_utf8(h.get(b"n").unwrap().value())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(n, successes.load(Ordering::Relaxed));
    assert_eq!(n, (THREADS * 2_000) as u64);
}

#[test]
fn concurrent_add_has_exactly_one_winner() {
    let cache = Cache::new(Config::new(64 << 20).clock(Clock::manual())).unwrap();
    for round in 0..200 {
        let key = format!("fresh:{round}").into_bytes();
        let winners = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let cache = cache.clone();
                let key = key.clone();
                let winners = winners.clone();
                std::thread::spawn(move || {
                    let mut h = cache.handle();
                    let status = h
                        .store(StoreMode::Add, &key, &[t as u8], 0, Expiry::Never)
                        .unwrap();
                    if status == StoreStatus::Stored {
                        winners.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(winners.load(Ordering::Relaxed), 1, "round {round}");
    }
}
