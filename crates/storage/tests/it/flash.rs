//! The flash tier in the engine, over an in-memory sink: what eviction would drop goes to
//! flash and comes back byte for byte; deletes and overwrites need no flash read; bad bytes,
//! expiry, reclaiming, a lagging or failing device are misses, never wrong values.

use memfleet_storage::{
    Cache, Clock, Config, Expiry, FlashConfig, FlashFetch, FlashRead, Handle, Promotion,
};
use std::collections::HashMap;
use std::sync::Arc;

use crate::support::flash_sink;
use flash_sink::{bring_back, cache, fill, value_of, MemSink, SEGMENT};

#[test]
fn evicted_items_go_to_flash_and_come_back_exactly() {
    let clock = Clock::manual();
    let (cache, sink) = cache(64, &clock);
    let mut h = cache.handle();
    let n = 3000; // about 1.4 MiB of items in a 512 KiB heap
    fill(&mut h, n, Expiry::Never);
    let stats = cache.stats();
    let flash = stats.flash.unwrap();
    assert!(stats.demoted_items > 1000, "{stats:?}");
    assert!(flash.objects_written >= stats.demoted_items, "{flash:?}");
    assert!(
        flash.bytes_written > 0,
        "whole segments were written: {flash:?}"
    );
    // The table is flash's index, sized for it at start: it does not grow.
    assert_eq!(stats.hash_growths, 0);
    let (mut from_ram, mut from_flash, mut lost) = (0, 0, 0);
    for i in 0..n {
        let key = format!("key:{i}");
        if h.get(key.as_bytes()).is_none() {
            // Promotions evict (and demote) in turn, so a few items are dropped on the way.
            match bring_back(&mut h, &sink, key.as_bytes()) {
                Some(Promotion::Promoted) => from_flash += 1,
                Some(Promotion::NotThisKey) | None => {
                    lost += 1;
                    continue;
                }
                other => panic!("{key}: {other:?}"),
            }
        } else {
            from_ram += 1;
        }
        let item = h.get(key.as_bytes()).expect("a promoted item is in RAM");
        assert_eq!(item.value(), value_of(i), "{key}");
        assert_eq!(item.flags(), i as u32);
        drop(item);
    }
    assert!(from_flash > 1000 && from_ram > 0, "{from_flash} {from_ram}");
    let stats = cache.stats();
    // Lost: dropped rather than demoted, or a flash slot displaced from a full chain (the
    // table is the flash index, sized for 512-byte items; these are about 500), all counted.
    let f = stats.flash.unwrap();
    let counted = stats.evicted_items + f.index_drops + f.purged;
    assert!(
        lost <= 30 && lost as u64 <= counted,
        "{lost} lost: {stats:?}"
    );
    let flash = cache.stats().flash.unwrap();
    assert!(flash.hits >= from_flash as u64, "{flash:?}");
    assert_eq!(flash.bad_checksums, 0);
    // Application write amplification: whole segments per byte of items.
    assert!(flash.write_amplification() < 1.3, "{flash:?}");
}

#[test]
fn deletes_and_overwrites_drop_the_flash_copy_without_reading_it() {
    let clock = Clock::manual();
    let (cache, sink) = cache(64, &clock);
    let mut h = cache.handle();
    fill(&mut h, 3000, Expiry::Never);
    let on_flash: Vec<usize> = (0..3000)
        .filter(|i| h.flash_candidate(format!("key:{i}").as_bytes()).is_some())
        .take(3)
        .collect();
    assert_eq!(on_flash.len(), 3);
    let reads = cache.stats().flash.unwrap().objects_read;
    let deleted = format!("key:{}", on_flash[0]);
    assert!(
        h.delete(deleted.as_bytes()),
        "a delete of a flash item says DELETED"
    );
    assert!(h.flash_candidate(deleted.as_bytes()).is_none());
    assert!(h.get(deleted.as_bytes()).is_none());
    let overwritten = format!("key:{}", on_flash[1]);
    h.set(overwritten.as_bytes(), b"new", 5, Expiry::Never)
        .unwrap();
    assert!(h.flash_candidate(overwritten.as_bytes()).is_none());
    assert_eq!(h.get(overwritten.as_bytes()).unwrap().value(), b"new");
    assert_eq!(
        cache.stats().flash.unwrap().objects_read,
        reads,
        "no flash read"
    );
    // The third is still there.
    let kept = format!("key:{}", on_flash[2]);
    assert_eq!(
        bring_back(&mut h, &sink, kept.as_bytes()),
        Some(Promotion::Promoted)
    );
}

#[test]
fn flipped_bytes_on_flash_are_a_miss_never_wrong_bytes() {
    let clock = Clock::manual();
    let (cache, sink) = cache(64, &clock);
    let mut h = cache.handle();
    fill(&mut h, 3000, Expiry::Never);
    cache.flush_flash_buffer();
    for byte in sink.segments.lock().unwrap().values_mut() {
        for b in byte.iter_mut().skip(100).step_by(997) {
            *b ^= 0x40;
        }
    }
    let mut corrupt = 0;
    for i in 0..3000 {
        let key = format!("key:{i}");
        match bring_back(&mut h, &sink, key.as_bytes()) {
            Some(Promotion::Corrupt) => corrupt += 1,
            Some(Promotion::Promoted) | None => {}
            other => panic!("{key}: {other:?}"),
        }
        if let Some(item) = h.get(key.as_bytes()) {
            assert_eq!(item.value(), value_of(i), "{key}: wrong bytes served");
        }
    }
    assert!(corrupt > 0);
    assert_eq!(cache.stats().flash.unwrap().bad_checksums, corrupt);
}

#[test]
fn expired_flash_items_miss_and_their_segments_go_unread() {
    let clock = Clock::manual();
    let (cache, sink) = cache(64, &clock);
    let mut h = cache.handle();
    fill(&mut h, 3000, Expiry::After(100));
    cache.flush_flash_buffer();
    let key = (0..3000)
        .map(|i| format!("key:{i}"))
        .find(|k| h.flash_candidate(k.as_bytes()).is_some())
        .unwrap();
    clock.advance(200);
    let used = cache.stats().flash.unwrap().pages_used;
    assert!(used > 0);
    assert_eq!(
        bring_back(&mut h, &sink, key.as_bytes()),
        Some(Promotion::Expired)
    );
    cache.expire();
    let flash = cache.stats().flash.unwrap();
    assert_eq!(flash.pages_used, 0, "{flash:?}");
    assert!(flash.pages_expired >= used - 1, "{flash:?}");
}

#[test]
fn a_small_flash_reclaims_oldest_first_and_never_serves_a_reused_place() {
    let clock = Clock::manual();
    let (cache, sink) = cache(4, &clock);
    let mut h = cache.handle();
    fill(&mut h, 6000, Expiry::Never);
    let flash = cache.stats().flash.unwrap();
    assert!(flash.page_reclaims > 0, "{flash:?}");
    // Live items lost with their segment, and their bytes (about a record each).
    assert!(flash.objects_evicted > 0, "{flash:?}");
    let per_item = flash.bytes_evicted / flash.objects_evicted;
    assert!((400..=700).contains(&per_item), "{flash:?}");
    let mut found = 0;
    for i in 0..6000 {
        let key = format!("key:{i}");
        if let Some(p) = bring_back(&mut h, &sink, key.as_bytes()) {
            // Another key of the same chain and tag is a checked miss.
            assert!(
                matches!(p, Promotion::Promoted | Promotion::NotThisKey),
                "{key}: {p:?}"
            );
        }
        if let Some(item) = h.get(key.as_bytes()) {
            assert_eq!(item.value(), value_of(i), "{key}");
            found += 1;
        }
    }
    assert!(found > 0 && found < 6000);
    // The newest items survived, the oldest were reclaimed.
    assert!(h.get(b"key:5999").is_some());
    // Slots of reclaimed segments are dead at once and dropped by the sweep.
    assert!(cache.sweep_flash() > 0);
    assert_eq!(cache.sweep_flash(), 0);
    assert!(h.get(b"key:5999").is_some());
}

#[test]
fn a_device_that_lags_or_fails_costs_items_not_correctness() {
    let clock = Clock::manual();
    let (cache, sink) = cache(64, &clock);
    *sink.refuse.lock().unwrap() = true;
    let mut h = cache.handle();
    fill(&mut h, 3000, Expiry::Never);
    let flash = cache.stats().flash.unwrap();
    assert!(flash.write_lag_drops > 0, "{flash:?}");
    assert_eq!(flash.bytes_written, 0);
    *sink.refuse.lock().unwrap() = false;
    *sink.fail.lock().unwrap() = true;
    fill(&mut h, 3000, Expiry::Never);
    let flash = cache.stats().flash.unwrap();
    assert!(flash.write_errors > 0, "{flash:?}");
    for i in 0..3000 {
        let key = format!("key:{i}");
        let _ = bring_back(&mut h, &sink, key.as_bytes());
        if let Some(item) = h.get(key.as_bytes()) {
            assert_eq!(item.value(), value_of(i), "{key}");
        }
    }
}

#[test]
fn items_being_written_are_read_from_the_write_buffer() {
    let clock = Clock::manual();
    let (cache, sink) = cache(64, &clock);
    *sink.hold.lock().unwrap() = true;
    let mut h = cache.handle();
    fill(&mut h, 1500, Expiry::Never);
    assert_eq!(
        cache.stats().flash.unwrap().bytes_written,
        0,
        "nothing reported written"
    );
    let mut local = 0;
    for i in 0..1500 {
        let key = format!("key:{i}");
        if let Some(c) = h.flash_candidate(key.as_bytes()) {
            let FlashFetch::Local(bytes) = h.flash_fetch(&c) else {
                panic!("{key}: not written yet, so served from the buffer");
            };
            assert_eq!(h.promote(key.as_bytes(), &c, &bytes), Promotion::Promoted);
            assert_eq!(h.get(key.as_bytes()).unwrap().value(), value_of(i));
            local += 1;
        }
    }
    assert!(local > 0);
    for done in sink.held.lock().unwrap().drain(..) {
        done.finish(true);
    }
}

/// Two keys whose hashes share the chain and the 11-bit tag.
/// Two keys of the same chain and tag; with `same_bits`, also the same 4 hash bits above
/// the table's power (which a flash slot keeps: a full collision), else different ones.
fn colliding_keys(cache: &Cache, same_bits: bool) -> (String, String) {
    let buckets = cache.stats().hash_buckets;
    let mut seen: HashMap<(u64, u64), Vec<(String, u64)>> = HashMap::new();
    for i in 0.. {
        let key = format!("collide:{i}");
        let h = xxh3(key.as_bytes());
        let bits = (h / buckets) & 0xf;
        let twins = seen.entry((h & (buckets - 1), h >> 53)).or_default();
        if let Some((other, _)) = twins.iter().find(|(_, b)| (*b == bits) == same_bits) {
            return (other.clone(), key);
        }
        twins.push((key, bits));
    }
    unreachable!()
}

/// A key of `key`'s chain and tag whose 4 hash bits above the table's power differ.
fn twin_with_other_bits(cache: &Cache, key: &str) -> String {
    let buckets = cache.stats().hash_buckets;
    let h = xxh3(key.as_bytes());
    (0..)
        .map(|i| format!("twin:{i}"))
        .find(|k| {
            let t = xxh3(k.as_bytes());
            t & (buckets - 1) == h & (buckets - 1)
                && t >> 53 == h >> 53
                && (t / buckets) & 0xf != (h / buckets) & 0xf
        })
        .unwrap()
}

fn xxh3(key: &[u8]) -> u64 {
    // The engine's key hash is xxh3-64 (stable across versions: `hashtable/slot.rs`).
    xxhash_rust::xxh3::xxh3_64(key)
}

#[test]
fn a_tag_collision_is_a_checked_miss() {
    let clock = Clock::manual();
    let (cache, sink) = cache(64, &clock);
    let (a, b) = colliding_keys(&cache, true);
    // Same chain and tag as `a`, other hash bits: never taken for `a`'s flash copy.
    let c = twin_with_other_bits(&cache, &a);
    let mut h = cache.handle();
    // As large as the filler (merges keep small items longer).
    let value_a = value_of(424_242);
    h.set(a.as_bytes(), &value_a, 1, Expiry::Never).unwrap();
    // Push `a` to flash.
    let mut i = 0;
    while h.flash_candidate(a.as_bytes()).is_none() {
        h.set(
            format!("key:{i}").as_bytes(),
            &value_of(i),
            0,
            Expiry::Never,
        )
        .unwrap();
        i += 1;
        assert!(i < 100_000, "`a` never went to flash");
    }
    assert!(h.get(a.as_bytes()).is_none());
    assert!(
        h.flash_candidate(c.as_bytes()).is_none(),
        "a miss of a key with the same tag but other hash bits reads no flash"
    );
    // `b` was never stored: its read finds `a`'s bytes, checks the key, misses.
    assert_eq!(
        bring_back(&mut h, &sink, b.as_bytes()),
        Some(Promotion::NotThisKey)
    );
    assert!(h.get(b.as_bytes()).is_none());
    assert_eq!(
        bring_back(&mut h, &sink, a.as_bytes()),
        Some(Promotion::Promoted)
    );
    assert_eq!(h.get(a.as_bytes()).unwrap().value(), value_a);
}

#[test]
fn a_first_read_is_served_from_flash_and_a_second_moves_the_item_to_ram() {
    let clock = Clock::manual();
    let (cache, sink) = cache(64, &clock);
    let mut h = cache.handle();
    fill(&mut h, 3000, Expiry::Never);
    cache.flush_flash_buffer();
    let i = (0..3000)
        .find(|i| h.flash_candidate(format!("key:{i}").as_bytes()).is_some())
        .unwrap();
    let key = format!("key:{i}");
    let read = |h: &mut Handle| {
        let c = h.flash_candidate(key.as_bytes()).expect("still on flash");
        let FlashFetch::Device { place, offset, len } = h.flash_fetch(&c) else {
            panic!("written out");
        };
        let bytes = sink.read(place, offset, len).unwrap();
        h.read_flash(key.as_bytes(), &c, &bytes)
    };
    let FlashRead::Serve(item) = read(&mut h) else {
        panic!("a first read is served from the bytes");
    };
    assert_eq!(
        (item.key.as_slice(), item.flags),
        (key.as_bytes(), i as u32)
    );
    assert_eq!(item.value, value_of(i));
    assert!(h.get(key.as_bytes()).is_none(), "not in RAM");
    assert_eq!(read(&mut h), FlashRead::Promoted);
    let ram = h.get(key.as_bytes()).expect("in RAM after the second read");
    assert_eq!(ram.value(), value_of(i));
    assert_eq!(ram.cas(), item.cas, "the same CAS from flash and from RAM");
    drop(ram);
    let f = cache.stats().flash.unwrap();
    assert_eq!((f.hits, f.promotions), (2, 1), "{f:?}");
}

#[test]
fn a_table_that_grows_keeps_its_flash_items() {
    let clock = Clock::manual();
    let sink = Arc::new(MemSink {
        places: 64,
        ..MemSink::default()
    });
    // 256 buckets for 3000 items: the table doubles while items are on flash, whose keys
    // growth cannot hash (their slots keep the hash bits it needs).
    let config = Config::new(8 * SEGMENT)
        .segment_size(SEGMENT)
        .clock(clock.clone())
        .hash_power(8)
        .flash(FlashConfig::new(sink.clone()));
    let cache = Cache::new(config).unwrap();
    let mut h = cache.handle();
    fill(&mut h, 3000, Expiry::Never);
    let stats = cache.stats();
    let f = stats.flash.unwrap();
    assert!(stats.hash_growths > 0, "{stats:?}");
    assert_eq!(f.growth_drops, 0, "{f:?}");
    let mut found = 0;
    for i in 0..3000 {
        let key = format!("key:{i}");
        let _ = bring_back(&mut h, &sink, key.as_bytes());
        if let Some(item) = h.get(key.as_bytes()) {
            assert_eq!(item.value(), value_of(i));
            found += 1;
        }
    }
    let stats = cache.stats();
    let f = stats.flash.unwrap();
    let lost = 3000 - found;
    assert!(
        lost <= stats.evicted_items + f.index_drops + f.purged && found > 2500,
        "{lost} lost: {stats:?}"
    );
}

/// A memory file under /dev/shm (or the temporary directory), removed on drop.
struct MemoryFile(std::path::PathBuf);

impl Drop for MemoryFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn mapping(file: &MemoryFile, len: usize) -> memfleet_storage::memmap2::MmapMut {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&file.0)
        .unwrap();
    f.set_len(len as u64).unwrap();
    // SAFETY: the test owns the file; nothing else maps or truncates it meanwhile.
    unsafe { memfleet_storage::memmap2::MmapMut::map_mut(&f).unwrap() }
}

fn memory_file(name: &str) -> MemoryFile {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    MemoryFile(dir.join(format!("memfleet-flash-test-{}-{name}", std::process::id())))
}

fn flash_config(clock: &Clock, sink: &Arc<MemSink>) -> Config {
    Config::new(8 * SEGMENT)
        .segment_size(SEGMENT)
        .clock(clock.clone())
        .flash(FlashConfig::new(sink.clone()))
}

#[test]
fn flash_items_survive_a_warm_restart_and_a_changed_flash_is_dropped() {
    let file = memory_file("restart");
    let clock = Clock::manual();
    let sink = Arc::new(MemSink {
        places: 64,
        ..MemSink::default()
    });
    let cfg = flash_config(&clock, &sink);
    let len = Cache::mapping_len(&cfg).unwrap();
    let cache = Cache::with_mapping(cfg.clone(), mapping(&file, len)).unwrap();
    fill(&mut cache.handle(), 3000, Expiry::Never);
    let on_flash = cache.stats().flash.unwrap().objects_used;
    assert!(on_flash > 1500);
    let snapshot = cache.snapshot().unwrap();
    drop(cache);

    // The same flash (the sink keeps its segments, as the file does): every item back.
    let (cache, restored) = Cache::resume(cfg.clone(), mapping(&file, len), &snapshot).unwrap();
    assert!(restored.items >= on_flash, "{restored:?}");
    assert_eq!(cache.stats().flash.unwrap().objects_used, on_flash);
    let mut h = cache.handle();
    let mut found = 0;
    for i in 0..3000 {
        let key = format!("key:{i}");
        if h.get(key.as_bytes()).is_none() {
            match bring_back(&mut h, &sink, key.as_bytes()) {
                Some(Promotion::Promoted) => {}
                other => {
                    assert!(
                        other.is_none() || other == Some(Promotion::NotThisKey),
                        "{key}: {other:?}"
                    );
                    continue;
                }
            }
        }
        assert_eq!(h.get(key.as_bytes()).unwrap().value(), value_of(i), "{key}");
        found += 1;
    }
    assert!(found > 2900, "{found}");
    drop(h);
    let snapshot = cache.snapshot().unwrap();
    drop(cache);

    // Another flash (more places: another file): RAM comes back, flash slots are dropped.
    let other = Arc::new(MemSink {
        places: 32,
        ..MemSink::default()
    });
    let (cache, _) =
        Cache::resume(flash_config(&clock, &other), mapping(&file, len), &snapshot).unwrap();
    let h = cache.handle();
    let ram = (0..3000)
        .filter(|i| h.get(format!("key:{i}").as_bytes()).is_some())
        .count();
    assert!(ram > 500, "RAM items came back: {ram}");
    assert!((0..3000).all(|i| h.flash_candidate(format!("key:{i}").as_bytes()).is_none()));
    assert_eq!(cache.stats().flash.unwrap().objects_used, 0);
}

#[test]
fn a_flash_that_cannot_be_written_out_does_not_survive_but_ram_does() {
    let file = memory_file("lagging");
    let clock = Clock::manual();
    let sink = Arc::new(MemSink {
        places: 64,
        ..MemSink::default()
    });
    *sink.hold.lock().unwrap() = true; // writes never reported done
    let mut cfg = flash_config(&clock, &sink);
    if let Some(f) = cfg.flash.as_mut() {
        f.quiesce_timeout = std::time::Duration::from_millis(200);
    }
    let len = Cache::mapping_len(&cfg).unwrap();
    let cache = Cache::with_mapping(cfg.clone(), mapping(&file, len)).unwrap();
    fill(&mut cache.handle(), 1500, Expiry::Never);
    assert!(cache.stats().flash.unwrap().objects_used > 0);
    let snapshot = cache.snapshot().unwrap();
    drop(cache);
    let (cache, _) = Cache::resume(cfg, mapping(&file, len), &snapshot).unwrap();
    let h = cache.handle();
    assert!((0..1500).all(|i| h.flash_candidate(format!("key:{i}").as_bytes()).is_none()));
    assert!((0..1500).any(|i| h.get(format!("key:{i}").as_bytes()).is_some()));
}
