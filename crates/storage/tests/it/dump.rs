//! Key dumps (`Handle::dump_step`): every live item exactly once, a bounded batch at a time,
//! across hash table growth and concurrent writers.

use memfleet_storage::{Cache, Clock, Config, DumpCursor, Expiry, Handle};
use std::collections::HashMap;

fn cache(power: u32) -> (Cache, Clock) {
    let clock = Clock::manual();
    let config = Config::new(32 << 20).clock(clock.clone()).hash_power(power);
    (Cache::new(config).unwrap(), clock)
}

/// Runs a dump to its end, `chains` chains per step, `between` called after each step;
/// returns how many times each key was seen.
fn dump_all(h: &Handle, chains: usize, mut between: impl FnMut(usize)) -> HashMap<Vec<u8>, usize> {
    let mut cursor = DumpCursor::new();
    let mut seen = HashMap::new();
    let mut steps = 0;
    while !cursor.is_done() {
        h.dump_step(&mut cursor, chains, |item| {
            *seen.entry(item.key().to_vec()).or_insert(0) += 1;
        });
        steps += 1;
        between(steps);
        assert!(steps < 10_000_000, "the dump does not end");
    }
    seen
}

fn key(i: usize) -> Vec<u8> {
    format!("key:{i}").into_bytes()
}

#[test]
fn every_live_item_once_and_nothing_dead() {
    let (cache, clock) = cache(8);
    let mut h = cache.handle();
    for i in 0..2000 {
        let expiry = if i % 10 == 0 {
            Expiry::After(5)
        } else {
            Expiry::Never
        };
        h.set(&key(i), b"value", i as u32, expiry).unwrap();
    }
    for i in (1..2000).step_by(7) {
        h.delete(&key(i));
    }
    clock.advance(10);
    let seen = dump_all(&h, 3, |_| {});
    for i in 0..2000 {
        let expect = usize::from(i % 10 != 0 && (i % 7 != 1));
        assert_eq!(seen.get(&key(i)).copied().unwrap_or(0), expect, "key {i}");
    }
    assert_eq!(seen.len(), seen.values().sum::<usize>());
    // A finished cursor stays finished.
    let mut cursor = DumpCursor::new();
    while !cursor.is_done() {
        h.dump_step(&mut cursor, 1 << 20, |_| {});
    }
    assert_eq!(h.dump_step(&mut cursor, 10, |_| panic!("done")), 0);
}

#[test]
fn items_report_what_a_get_would() {
    let (cache, clock) = cache(6);
    let mut h = cache.handle();
    clock.advance(100);
    h.set(b"forever", b"12345", 7, Expiry::Never).unwrap();
    h.set(b"soon", b"", 0, Expiry::After(60)).unwrap();
    h.get(b"forever").unwrap();
    let cas = h.get(b"forever").unwrap().cas();
    let mut cursor = DumpCursor::new();
    let mut items = Vec::new();
    while !cursor.is_done() {
        h.dump_step(&mut cursor, 16, |item| {
            items.push((
                item.key().to_vec(),
                item.value_len(),
                item.flags(),
                item.cas(),
                item.deadline(),
                item.fetched(),
                item.written_at(),
                item.stored_len(),
            ));
        });
    }
    items.sort();
    let (k, len, flags, c, deadline, fetched, written, stored) = items[0].clone();
    assert_eq!((k.as_slice(), len, flags, c), (&b"forever"[..], 5, 7, cas));
    assert_eq!((deadline, fetched, written), (None, true, 100));
    assert!(stored >= 5 + 7);
    let (k, len, _, _, deadline, fetched, _, _) = items[1].clone();
    assert_eq!((k.as_slice(), len), (&b"soon"[..], 0));
    assert!(!fetched);
    let deadline = deadline.expect("a deadline");
    assert!((100..=160).contains(&deadline), "{deadline}");
}

#[test]
fn flushed_items_are_not_dumped() {
    let (cache, _) = cache(6);
    let mut h = cache.handle();
    for i in 0..100 {
        h.set(&key(i), b"v", 0, Expiry::Never).unwrap();
    }
    h.flush_all(0);
    assert!(dump_all(&h, 1000, |_| {}).is_empty());
}

#[test]
fn table_growth_during_a_dump_neither_loses_nor_repeats_items() {
    let (cache, _) = cache(4);
    let mut h = cache.handle();
    let before = 300;
    for i in 0..before {
        h.set(&key(i), b"old", 0, Expiry::Never).unwrap();
    }
    let growths = cache.stats().hash_growths;
    let mut writer = cache.handle();
    let mut next = before;
    // Between steps, add enough new keys that the table doubles several times mid-walk.
    let seen = dump_all(&h, 1, |_| {
        for _ in 0..40 {
            if next >= before + 3000 {
                break;
            }
            writer.set(&key(next), b"new", 0, Expiry::Never).unwrap();
            next += 1;
        }
    });
    assert!(
        cache.stats().hash_growths >= growths + 2,
        "the table did not grow during the dump"
    );
    for i in 0..before {
        assert_eq!(seen.get(&key(i)), Some(&1), "key {i}");
    }
    assert!(seen.values().all(|&n| n == 1), "a key seen twice");
}

#[test]
fn a_dump_runs_beside_writers_on_other_threads() {
    let (cache, _) = cache(10);
    let mut h = cache.handle();
    let before = 5000;
    for i in 0..before {
        h.set(&key(i), b"old", 0, Expiry::Never).unwrap();
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..2)
            .map(|t| {
                let cache = cache.clone();
                let stop = &stop;
                s.spawn(move || {
                    let mut w = cache.handle();
                    let mut n = 0usize;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let k = format!("writer{t}:{}", n % 20_000);
                        w.set(k.as_bytes(), b"x", 0, Expiry::Never).unwrap();
                        w.delete(format!("writer{t}:{}", (n + 7) % 20_000).as_bytes());
                        n += 1;
                    }
                })
            })
            .collect();
        let seen = dump_all(&h, 8, |_| {});
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        for i in 0..before {
            assert_eq!(seen.get(&key(i)), Some(&1), "key {i}");
        }
    });
}

#[test]
fn items_moved_by_eviction_and_compaction_are_seen_once() {
    let clock = Clock::manual();
    let config = Config::new(4 << 20)
        .segment_size(64 << 10)
        .clock(clock)
        .hash_power(10);
    let cache = Cache::new(config).unwrap();
    let mut h = cache.handle();
    let keep = 2000;
    for i in 0..keep {
        h.set(&key(i), &[b'k'; 100], 0, Expiry::Never).unwrap();
    }
    let mut writer = cache.handle();
    let mut n = 0usize;
    // Between steps, churn enough to evict and merge segments (which move live items).
    let seen = dump_all(&h, 4, |_| {
        for _ in 0..200 {
            let k = format!("churn:{}", n % 20_000);
            writer
                .set(k.as_bytes(), &[b'c'; 300], 0, Expiry::Never)
                .unwrap();
            n += 1;
        }
    });
    assert!(cache.stats().evicted_items > 0, "nothing was evicted");
    assert!(seen.values().all(|&c| c == 1), "a key seen twice");
    let mut survivors = 0;
    for i in 0..keep {
        if h.get(&key(i)).is_some() {
            survivors += 1;
            assert_eq!(seen.get(&key(i)), Some(&1), "key {i}, live throughout");
        }
    }
    assert!(survivors > 0, "every kept key was evicted");
}
