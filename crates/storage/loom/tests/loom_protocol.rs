//! Loom model checks of the engine's own concurrent protocols (not a copy of them): built
//! with `--cfg loom`, the segment headers, hash slots, chain locks and the engine's mutexes
//! are loom's (`src/sync.rs`), and every heap byte a thread reads or writes is checked for a
//! race (`Heap`'s loom shadow), so each test below runs the real `Cache` code under every
//! interleaving loom explores, with loom's weaker-than-x86 memory model for each ordering.
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p memfleet-storage-loom --test loom_protocol --release
//! ```
//!
//! Preemptions are bounded (3 unless `LOOM_MAX_PREEMPTIONS` says otherwise), which keeps the
//! run to seconds; bugs that need more context switches than that to show are not covered.
//! Without `--cfg loom` this file is empty.
#![cfg(loom)]

use loom::thread;
use memfleet_storage::{Cache, Clock, Config, Expiry, StoreMode, StoreStatus};

/// Runs `f` under loom with a preemption bound (unless the environment sets one).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(3);
    }
    // An expiration pass locks each of the 1024 TTL chains once: more branch points than
    // loom's default limit, none of them contended.
    builder.max_branches = 100_000;
    builder.check(f);
}

/// The smallest cache: 8 segments of 16 KiB, 16 hash chains, a manual clock.
fn small_cache(clock: &Clock) -> Cache {
    Cache::new(
        Config::new(8 * (16 << 10))
            .segment_size(16 << 10)
            .hash_power(4)
            .clock(clock.clone()),
    )
    .expect("cache")
}

/// A reader racing the retirement of the item's segment (expired, then reclaimed by an
/// expiration pass that drains readers) and the segment's reuse for another key: the reader
/// either misses or reads the item's own bytes, and never a byte the reuse wrote (the shadow
/// heap fails the model if its read is not ordered before the reuse's write).
#[test]
fn reads_never_overlap_retirement_or_reuse() {
    model(|| {
        let clock = Clock::manual();
        let cache = small_cache(&clock);
        let mut writer = cache.handle();
        let status = writer.set(b"a", &[1; 40], 0, Expiry::After(1)).unwrap();
        assert_eq!(status, StoreStatus::Stored);
        let reader = {
            let cache = cache.clone();
            thread::spawn(move || {
                let h = cache.handle();
                if let Some(item) = h.get(b"a") {
                    assert_eq!(item.value(), &[1; 40][..]);
                };
            })
        };
        clock.advance(2);
        assert_eq!(cache.expire(), 1, "the expired segment is reclaimed");
        // The free pool hands the segment just freed out first: "b" reuses its bytes.
        writer.set(b"b", &[2; 40], 0, Expiry::Never).unwrap();
        reader.join().unwrap();
        assert!(writer.get(b"a").is_none());
    });
}

/// A reader racing an overwrite of the same key: it sees the old value or the new one,
/// whole, and reading the new one is ordered after its bytes were written (publication is a
/// Release store of the slot, lookup an Acquire load).
#[test]
fn reads_see_a_published_value_whole() {
    model(|| {
        let clock = Clock::manual();
        let cache = small_cache(&clock);
        let mut writer = cache.handle();
        writer.set(b"k", &[1; 24], 1, Expiry::Never).unwrap();
        let reader = {
            let cache = cache.clone();
            thread::spawn(move || {
                let h = cache.handle();
                let item = h.get(b"k").expect("the key always holds a value");
                let expect = if item.flags() == 1 { [1; 24] } else { [2; 24] };
                assert_eq!(item.value(), &expect[..]);
            })
        };
        let st2 = writer.set(b"k", &[2; 24], 2, Expiry::Never);
        assert_eq!(st2, Ok(StoreStatus::Stored));
        reader.join().unwrap();
        let st = cache.stats();
        let item = writer.get(b"k").unwrap();
        assert_eq!(
            item.value(),
            &[2; 24][..],
            "flags {} items {} cas {}",
            item.flags(),
            st.items,
            item.cas()
        );
    });
}

/// Two writers racing to `add` the same key serialise on its chain lock: exactly one wins,
/// and the table keeps one slot for the key, holding the winner's value.
#[test]
fn the_chain_lock_lets_one_add_win() {
    model(|| {
        let clock = Clock::manual();
        let cache = small_cache(&clock);
        let other = {
            let cache = cache.clone();
            thread::spawn(move || {
                let mut h = cache.handle();
                h.store(StoreMode::Add, b"k", &[2; 16], 2, Expiry::Never)
                    .unwrap()
            })
        };
        let mut h = cache.handle();
        let mine = h
            .store(StoreMode::Add, b"k", &[1; 16], 1, Expiry::Never)
            .unwrap();
        let theirs = other.join().unwrap();
        let stored = [mine, theirs]
            .iter()
            .filter(|s| **s == StoreStatus::Stored)
            .count();
        assert_eq!(stored, 1, "{mine:?} {theirs:?}");
        let item = h.get(b"k").unwrap();
        let winner = if mine == StoreStatus::Stored { 1 } else { 2 };
        assert_eq!(item.flags(), winner);
        assert_eq!(item.value(), &[winner as u8; 16][..]);
        drop(item);
        assert_eq!(cache.stats().items, 1);
    });
}
