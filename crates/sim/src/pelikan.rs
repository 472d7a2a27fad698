//! Pelikan's Segcache engine as a [`SimCache`]: the `segcache` crate 0.4.4 from crates.io
//! (pelikan-io/cache-rs, the storage of pelikan's `pelikan_segcache` server), built without
//! its `metrics` feature and driven in-process on one request stream beside memfleet's
//! engine (`segcache.rs`) and the LRU.
//!
//! Configuration, as pelikan ships it (pelikan-io/pelikan `src/config/src/seg.rs` and
//! `config/segcache.toml` at 49300de, July 2026; its `entrystore` maps them onto this
//! builder): heap = the memory size, rounded down to whole segments; segments of 1 MiB
//! unless `--segment-size` says otherwise (whatever memfleet's adapter gets, the automatic
//! size included); eviction `Policy::Merge { max: 8, merge: 4, compact: 2 }` (pelikan's
//! `MERGE_MAX`, `MERGE_TARGET`, `COMPACT_TARGET`). Pelikan's own `hash_power` default is
//! 16 (65,536 slots) and its example config sets 22 for a 4 GB heap; here it is sized for
//! what the heap can hold: one slot per 32 bytes of heap (the smallest item of this
//! crate's 12-byte header, a 20-byte key and an empty value), at least 2^16, so the table
//! never limits the heap (the crate's table has 8 slots per bucket and two bucket choices,
//! no overflow chains: `overflow_factor` is accepted but unused in 0.4.4). Writes the
//! engine refuses are counted by error in the remarks.
//!
//! Items: a 12-byte header (the crate's dependency `keyvalue` is always built with its
//! `integrity` feature: 2 magic bytes and a CRC32 per item), the key and the value, rounded
//! up to the next multiple of 8 bytes (one 8 more when already aligned); TTLs go to 1024
//! buckets whose segments expire at `create_at` + the bucket's lower bound + 1 s (TTLs of
//! 1–7 s share a 1-second bucket); a TTL of 0 goes to the last bucket (about 97 days).
//!
//! Clock: segcache 0.4.4 reads time only from `clocksource::coarse::Instant::now()`, whole
//! seconds of the system's `CLOCK_MONOTONIC_COARSE` (`CLOCK_MONOTONIC` on macOS), with no
//! manual clock, no refresh hook and no way to inject time. With `--pelikan-clock paced`
//! (the default) the adapter makes the engine follow simulated time by pacing the replay:
//! simulated second *t* runs during wall-clock second *origin + t* of that clock, *origin*
//! being the second of the first [`SimCache::advance_to`]; `advance_to(t)` sleeps until that
//! second begins. Expiry, lazy checks and `expire()` (called from [`SimCache::tick`], and
//! debounced by the crate to once per clock second) then see simulated time exactly, at
//! the cost of one wall-clock second per simulated second (90 s for a 90 s workload, a day
//! for a day's trace). If the engine falls behind (a simulated second's requests take more
//! than a second), its clock runs ahead of simulated time; the largest lag is reported in
//! the remarks. With `--pelikan-clock wall` the replay runs at full speed and the engine's
//! clock is the wall clock: a workload of S simulated seconds replayed in W < S wall-clock
//! seconds gives every TTL S/W times as long in simulated time, so pelikan expires less
//! than the other caches and looks better or worse than it is (fewer expiry misses, less
//! room); use it only for workloads whose TTLs do not matter.
//!
//! Items and bytes held: segcache 0.4.4 counts items only in `debug` builds and keeps its
//! gauges in the `metrics` feature's global registry, so the adapter remembers every key it
//! stored and, when asked, looks each one up (`get_no_freq_incr`, which leaves frequencies
//! alone): the items found (live and unexpired, unlike memfleet's count, which includes
//! expired items not yet reclaimed) and their sizes in the heap as above.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use pelikan_segcache::{Policy, Segcache, SegcacheError, Value};

use super::replay::SimCache;

/// How the engine's clock relates to simulated time; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PelikanClock {
    /// Replay in real time: one wall-clock second per simulated second, so the engine's
    /// clock follows simulated time.
    #[default]
    Paced,
    /// Replay at full speed on the wall clock: TTLs stretch in simulated time.
    Wall,
}

/// Pelikan's merge eviction as its server configures it by default.
pub const POLICY: Policy = Policy::Merge {
    max: 8,
    merge: 4,
    compact: 2,
};

/// Bytes of item header in segcache 0.4.4 (magic 2, key length 1, flags 1, value length 4,
/// CRC32 4).
pub const ITEM_HEADER: usize = 12;

/// Heap bytes per hash-table slot; see the module docs.
pub const HEAP_BYTES_PER_SLOT: u64 = 32;

/// Bytes an item with a `key_len`-byte key and a `value_len`-byte value occupies in a
/// segment: header, key and value rounded up to the next multiple of 8 (`keyvalue`'s
/// `item_size`, which adds 8 to a size already aligned).
pub fn item_bytes(key_len: usize, value_len: usize) -> u64 {
    (((ITEM_HEADER + key_len + value_len) / 8 + 1) * 8) as u64
}

/// The hash power for a heap of `heap` bytes: one slot per [`HEAP_BYTES_PER_SLOT`], at
/// least pelikan's default of 16, at most 30.
pub fn hash_power(heap: u64) -> u8 {
    let slots = (heap / HEAP_BYTES_PER_SLOT).max(1).next_power_of_two();
    (slots.trailing_zeros() as u8).clamp(16, 30)
}

/// Writes the engine refused, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Refused {
    hashtable: u64,
    oversized: u64,
    no_room: u64,
    other: u64,
}

/// The adapter.
pub struct PelikanSim {
    cache: Segcache,
    heap: usize,
    segment_size: usize,
    hash_power: u8,
    clock: PelikanClock,
    /// Wall-clock second (of the engine's clock) of simulated second 0, set by the first
    /// `advance_to`.
    origin: Option<u32>,
    /// The latest simulated second.
    now: u32,
    /// The most seconds the engine's clock was ahead of simulated time (paced).
    max_lag: u32,
    /// Every key stored, for [`SimCache::items`] and [`SimCache::memory_used`].
    keys: HashSet<Box<[u8]>>,
    refused: Refused,
    zeros: Vec<u8>,
}

impl PelikanSim {
    /// An engine with `memory` bytes of heap (rounded down to whole segments) in segments
    /// of `segment_size` bytes.
    pub fn new(memory: u64, segment_size: usize, clock: PelikanClock) -> Result<PelikanSim> {
        let seg = i32::try_from(segment_size)
            .ok()
            .filter(|&s| s > 0)
            .with_context(|| format!("pelikan: segment size {segment_size} is out of range"))?;
        let heap = usize::try_from(memory).unwrap_or(usize::MAX) / segment_size * segment_size;
        if heap == 0 {
            bail!("pelikan: {memory} bytes do not hold one segment of {segment_size} bytes");
        }
        let hash_power = hash_power(heap as u64);
        let cache = Segcache::builder()
            .heap_size(heap)
            .segment_size(seg)
            .hash_power(hash_power)
            .eviction(POLICY)
            .build()
            .with_context(|| {
                format!("pelikan: building a {heap}-byte heap of {segment_size}-byte segments")
            })?;
        Ok(PelikanSim {
            cache,
            heap,
            segment_size,
            hash_power,
            clock,
            origin: None,
            now: 0,
            max_lag: 0,
            keys: HashSet::new(),
            refused: Refused::default(),
            zeros: Vec::new(),
        })
    }

    /// Items found by looking up every key stored, and the bytes they occupy.
    fn held(&self) -> (u64, u64) {
        let mut items = 0;
        let mut bytes = 0;
        for key in &self.keys {
            if let Some(item) = self.cache.get_no_freq_incr(key) {
                let value_len = match item.value() {
                    Value::Bytes(b) => b.len(),
                    Value::U64(_) => 8,
                };
                items += 1;
                bytes += item_bytes(key.len(), value_len);
            }
        }
        (items, bytes)
    }
}

/// The engine's clock: `CLOCK_MONOTONIC_COARSE` (plain `CLOCK_MONOTONIC` on Apple systems),
/// as `clocksource` 0.8 reads it, in whole seconds and the nanoseconds past them.
fn engine_clock() -> (u32, u32) {
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    #[cfg(not(any(target_os = "macos", target_os = "ios")))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC_COARSE;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call; a monotonic
    // clock id is always supported, and on failure `ts` keeps zeros (harmless here).
    unsafe { libc::clock_gettime(CLOCK, &mut ts) };
    (ts.tv_sec as u32, ts.tv_nsec as u32)
}

impl SimCache for PelikanSim {
    fn name(&self) -> String {
        "pelikan".into()
    }

    fn advance_to(&mut self, now: u32) {
        self.now = now;
        let origin = *self.origin.get_or_insert_with(|| engine_clock().0);
        if self.clock == PelikanClock::Wall {
            return;
        }
        let target = origin.saturating_add(now);
        loop {
            let (secs, nanos) = engine_clock();
            if secs >= target {
                self.max_lag = self.max_lag.max(secs - target);
                return;
            }
            // Sleep to the second's start, then poll at the coarse clock's resolution.
            let left = Duration::from_secs(u64::from(target - secs))
                .saturating_sub(Duration::from_nanos(u64::from(nanos)));
            std::thread::sleep(left.max(Duration::from_millis(1)));
        }
    }

    fn get(&mut self, key: &[u8]) -> bool {
        self.cache.get(key).is_some()
    }

    fn set(&mut self, key: &[u8], value_len: usize, ttl: u32) {
        if self.zeros.len() < value_len {
            self.zeros.resize(value_len, 0);
        }
        let ttl = Duration::from_secs(u64::from(ttl));
        match self.cache.insert(key, &self.zeros[..value_len], None, ttl) {
            Ok(()) => {
                if !self.keys.contains(key) {
                    self.keys.insert(key.into());
                }
            }
            Err(SegcacheError::HashTableInsertEx) => self.refused.hashtable += 1,
            Err(SegcacheError::ItemOversized { .. }) => self.refused.oversized += 1,
            Err(SegcacheError::NoFreeSegments | SegcacheError::EvictionEx) => {
                self.refused.no_room += 1
            }
            Err(_) => self.refused.other += 1,
        }
    }

    fn delete(&mut self, key: &[u8]) {
        self.cache.delete(key);
    }

    fn tick(&mut self) {
        self.cache.expire();
    }

    fn memory_used(&self) -> Option<u64> {
        Some(self.held().1)
    }

    fn items(&self) -> Option<u64> {
        Some(self.held().0)
    }

    fn remarks(&self) -> Vec<String> {
        let r = self.refused;
        let clock = match (self.clock, self.origin) {
            (PelikanClock::Paced, _) => format!(
                "clock=paced (one wall-clock second per simulated second) max_lag={}s",
                self.max_lag
            ),
            (PelikanClock::Wall, Some(origin)) => format!(
                "clock=wall: the engine saw {} s of its clock for {} simulated seconds (TTLs stretched)",
                engine_clock().0.saturating_sub(origin),
                self.now
            ),
            (PelikanClock::Wall, None) => "clock=wall".to_string(),
        };
        vec![format!(
            "segcache 0.4.4 heap={} segment_size={} hash_power={} eviction={POLICY:?} {clock} refused: hashtable={} oversized={} no_room={} other={}",
            self.heap,
            self.segment_size,
            self.hash_power,
            r.hashtable,
            r.oversized,
            r.no_room,
            r.other,
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_follows_the_memory_size() {
        assert_eq!(hash_power(64 << 20), 21);
        assert_eq!(hash_power(1 << 20), 16, "never below pelikan's default");
        assert_eq!(hash_power(u64::MAX), 30);
        let sim = PelikanSim::new((4 << 20) + 100, 1 << 20, PelikanClock::Wall).unwrap();
        assert_eq!(sim.heap, 4 << 20, "whole segments only");
        assert!(PelikanSim::new(1000, 1 << 20, PelikanClock::Wall).is_err());
        assert!(PelikanSim::new(1 << 20, 0, PelikanClock::Wall).is_err());
        assert!(PelikanSim::new(1 << 20, 1000 + 4, PelikanClock::Wall).is_err());
    }

    #[test]
    fn get_after_set_hits_and_delete_removes() {
        let mut sim = PelikanSim::new(4 << 20, 1 << 20, PelikanClock::Wall).unwrap();
        sim.advance_to(0);
        assert!(!sim.get(b"a"));
        sim.set(b"a", 100, 0);
        sim.set(b"b", 3000, 3600);
        assert!(sim.get(b"a") && sim.get(b"b"));
        assert_eq!(sim.items(), Some(2));
        assert_eq!(
            sim.memory_used(),
            Some(item_bytes(1, 100) + item_bytes(1, 3000))
        );
        sim.set(b"a", 10, 0);
        assert_eq!(
            sim.memory_used(),
            Some(item_bytes(1, 10) + item_bytes(1, 3000))
        );
        sim.delete(b"a");
        assert!(!sim.get(b"a") && sim.get(b"b"));
        assert_eq!(sim.items(), Some(1));
        sim.set(b"big", 2 << 20, 0);
        assert!(!sim.get(b"big"), "an item larger than a segment is refused");
        let remarks = sim.remarks();
        assert!(remarks[0].contains("oversized=1"), "{remarks:?}");
        assert!(remarks[0].contains("hash_power=17"), "{remarks:?}");
    }

    #[test]
    fn item_sizes_match_the_engine() {
        // One 4 KiB segment and no eviction: it takes exactly 4096 / item_bytes items.
        let cache = Segcache::builder()
            .heap_size(4096)
            .segment_size(4096)
            .hash_power(16)
            .eviction(Policy::None)
            .build()
            .unwrap();
        let size = item_bytes(8, 20);
        assert_eq!(size, 48);
        let mut stored = 0;
        while cache
            .insert(
                format!("k{stored:07}").as_bytes(),
                &[0u8; 20][..],
                None,
                Duration::ZERO,
            )
            .is_ok()
        {
            stored += 1;
        }
        assert_eq!(stored, 4096 / size);
    }

    /// Takes about two seconds of wall-clock time: the engine's clock cannot be driven.
    #[test]
    fn a_key_past_its_ttl_misses_on_the_paced_clock() {
        let mut sim = PelikanSim::new(4 << 20, 1 << 20, PelikanClock::Paced).unwrap();
        sim.advance_to(0);
        sim.set(b"short", 100, 2);
        sim.set(b"long", 100, 3600);
        assert!(sim.get(b"short") && sim.get(b"long"));
        let started = std::time::Instant::now();
        sim.advance_to(2);
        sim.tick();
        assert!(started.elapsed() <= Duration::from_millis(2100));
        assert!(!sim.get(b"short"), "expired two simulated seconds later");
        assert!(sim.get(b"long"));
        assert_eq!(sim.items(), Some(1));
        assert!(sim.remarks()[0].contains("max_lag=0s"));
    }
}
