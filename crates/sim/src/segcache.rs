//! The Segcache engine as a [`SimCache`]: the real `memfleet-storage` crate, driven in-process
//! on a manual clock that follows the trace's timestamps.
//!
//! Handles: `--workers N` opens N [`Handle`]s on the one [`Cache`], as a server's N worker
//! threads each have theirs, and request *i* goes through handle *i* mod N (a server's
//! connections are spread over its workers, so consecutive requests come from different
//! handles, each with its own active segments). A get's look-aside fill goes through the
//! handle that served the get (the same client connection). Everything stays on one thread.
//!
//! Memory accounting: the engine's heap is the configured size, as the LRU's capacity is;
//! neither model charges its hash table (memcached's 56-byte header, which the LRU charges,
//! already includes its hash-chain pointer; Segcache's hash slots are 8 bytes per item).

use super::replay::SimCache;
use memfleet_storage::{
    Cache, Clock, Config, EvictionPolicy, Expiry, FlashConfig, FlashFetch, FlashRead, FlashSink,
    FlashWriteDone, Handle, Promotion,
};
use std::sync::{Arc, Mutex};

/// Flash kept in memory for the model: whole segments, written at once.
#[derive(Debug)]
struct MemoryFlash {
    places: u32,
    segments: Mutex<Vec<Option<Arc<[u8]>>>>,
}

impl FlashSink for MemoryFlash {
    fn places(&self) -> u32 {
        self.places
    }
    fn write(
        &self,
        place: u32,
        bytes: Arc<[u8]>,
        done: FlashWriteDone,
    ) -> Result<(), FlashWriteDone> {
        self.segments.lock().unwrap_or_else(|e| e.into_inner())[place as usize] = Some(bytes);
        done.finish(true);
        Ok(())
    }
}

impl MemoryFlash {
    fn read(&self, place: u32, offset: u32, len: u32) -> Option<Vec<u8>> {
        let segments = self.segments.lock().unwrap_or_else(|e| e.into_inner());
        let segment = segments.get(place as usize)?.as_ref()?;
        segment
            .get(offset as usize..(offset + len) as usize)
            .map(<[u8]>::to_vec)
    }
}

/// Engine settings `memfleet sim` exposes for experiments.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct EngineArgs {
    /// Eviction policy of the Segcache engine.
    #[arg(long, default_value = "merge", value_parser = ["merge", "fifo"])]
    pub eviction: String,
    /// Segments' worth of live items ranked per merge eviction (Segcache's N).
    #[arg(long, default_value_t = 2)]
    pub merge_segments: usize,
    /// Early-expiry tolerance as 1/2^shift of a TTL bucket's lower bound.
    #[arg(long, default_value_t = 3)]
    pub expiry_precision_shift: u32,
    /// Handles on the Segcache engine, as a server's worker threads: request i goes
    /// through handle i mod N (a miss's fill through the handle of its get).
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub workers: usize,
    /// A flash tier under each Segcache of this many MiB (memfleet's `--flash`), modelled
    /// with the engine's own code over flash kept in memory: what eviction drops goes there,
    /// and a miss in RAM that finds its item on flash is a hit. 0: none.
    #[arg(long, default_value_t = 0)]
    pub flash: u64,
    /// The item size the flash's index is sized for (memfleet's `--flash-item-size`).
    #[arg(long, default_value_t = 512)]
    pub flash_item_size: usize,
}

impl Default for EngineArgs {
    fn default() -> Self {
        EngineArgs {
            eviction: "merge".into(),
            merge_segments: 2,
            expiry_precision_shift: 3,
            workers: 1,
            flash: 0,
            flash_item_size: 512,
        }
    }
}

/// The adapter.
pub struct SegcacheSim {
    cache: Cache,
    /// At least one; see the module docs.
    handles: Vec<Handle>,
    /// The handle the next request goes through.
    next: usize,
    /// The handle that served the latest request (a fill goes through it).
    last: usize,
    clock: Clock,
    zeros: Vec<u8>,
    flash: Option<Arc<MemoryFlash>>,
}

impl SegcacheSim {
    /// A cache with `memory` bytes of segments of `segment_size` bytes.
    pub fn new(
        memory: u64,
        segment_size: usize,
        engine: &EngineArgs,
    ) -> anyhow::Result<SegcacheSim> {
        let clock = Clock::manual();
        let eviction = match engine.eviction.as_str() {
            "fifo" => EvictionPolicy::Fifo,
            _ => EvictionPolicy::Merge,
        };
        let mut config = Config::new(memory as usize)
            .segment_size(segment_size)
            .eviction(eviction)
            .merge_segments(engine.merge_segments)
            .expiry_precision_shift(engine.expiry_precision_shift)
            .clock(clock.clone());
        let places = (engine.flash << 20) / segment_size as u64;
        let flash = (places > 0).then(|| {
            Arc::new(MemoryFlash {
                places: places as u32,
                segments: Mutex::new(vec![None; places as usize]),
            })
        });
        if let Some(f) = &flash {
            let mut fc = FlashConfig::new(f.clone());
            fc.item_size_hint = engine.flash_item_size;
            config = config.flash(fc);
        }
        let cache = Cache::new(config)?;
        let handles = (0..engine.workers.max(1)).map(|_| cache.handle()).collect();
        Ok(SegcacheSim {
            cache,
            handles,
            next: 0,
            last: 0,
            clock,
            zeros: Vec::new(),
            flash,
        })
    }

    /// A miss in RAM: the key's item read from flash, as a server's flash gate reads it.
    fn get_from_flash(&mut self, key: &[u8]) -> bool {
        let Some(flash) = self.flash.clone() else {
            return false;
        };
        let h = &mut self.handles[self.last];
        let Some(candidate) = h.flash_candidate(key) else {
            return false;
        };
        let mut bytes = match h.flash_fetch(&candidate) {
            FlashFetch::Local(b) => b,
            FlashFetch::Device { place, offset, len } => match flash.read(place, offset, len) {
                Some(b) => b,
                None => return false,
            },
            FlashFetch::Gone => return false,
        };
        loop {
            match h.read_flash(key, &candidate, &bytes) {
                FlashRead::Serve(_) => return true,
                FlashRead::Promoted => return h.get(key).is_some(),
                FlashRead::Other(Promotion::NeedMore(len)) => {
                    let FlashFetch::Device { place, offset, .. } = h.flash_fetch(&candidate) else {
                        return false;
                    };
                    match flash.read(place, offset, len) {
                        Some(b) => bytes = b,
                        None => return false,
                    }
                }
                FlashRead::Other(_) => return false,
            }
        }
    }

    /// The engine, for its statistics.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The handle for a new request: the next in turn.
    fn request_handle(&mut self) -> &mut Handle {
        self.last = self.next;
        self.next = (self.next + 1) % self.handles.len();
        &mut self.handles[self.last]
    }

    /// Stores through handle `h`.
    fn store(&mut self, h: usize, key: &[u8], value_len: usize, ttl: u32) {
        if self.zeros.len() < value_len {
            self.zeros.resize(value_len, 0);
        }
        let expiry = if ttl == 0 {
            Expiry::Never
        } else {
            Expiry::After(ttl)
        };
        // Items too large for a segment are refused, as memcached refuses them.
        let _ = self.handles[h].set(key, &self.zeros[..value_len], 0, expiry);
    }
}

/// The segment size `memfleet sim` uses when none is given: about 512 segments, between
/// 64 KiB and 1 MiB. A cache of a few MiB in 1 MiB segments would spend a large share of its
/// memory on the handful of partly filled active and free segments that a multi-GiB server
/// never notices, and the comparison would measure granularity rather than the design.
pub fn auto_segment_size(memory: u64) -> usize {
    ((memory / 512).max(1).next_power_of_two() as usize).clamp(64 << 10, 1 << 20)
}

/// A factory for [`super::run`] with these engine settings; a `segment_size` of 0 means
/// [`auto_segment_size`].
pub fn factory(engine: EngineArgs) -> impl Fn(u64, usize) -> Box<dyn SimCache> {
    move |memory, segment_size| make(memory, segment_size, &engine)
}

/// Builds the adapter; see [`factory`].
pub fn make(memory: u64, segment_size: usize, engine: &EngineArgs) -> Box<dyn SimCache> {
    let segment_size = if segment_size == 0 {
        auto_segment_size(memory)
    } else {
        segment_size
    };
    match SegcacheSim::new(memory, segment_size, engine) {
        Ok(sim) => Box::new(sim),
        Err(e) => panic!("cannot build a Segcache of {memory} bytes: {e}"),
    }
}

impl SimCache for SegcacheSim {
    fn name(&self) -> String {
        if self.flash.is_some() {
            "segcache+flash".into()
        } else {
            "segcache".into()
        }
    }

    fn advance_to(&mut self, now: u32) {
        self.clock.set(now);
    }

    fn get(&mut self, key: &[u8]) -> bool {
        self.request_handle().get(key).is_some() || self.get_from_flash(key)
    }

    fn set(&mut self, key: &[u8], value_len: usize, ttl: u32) {
        self.request_handle();
        self.store(self.last, key, value_len, ttl);
    }

    fn fill(&mut self, key: &[u8], value_len: usize, ttl: u32) {
        self.store(self.last, key, value_len, ttl);
    }

    fn delete(&mut self, key: &[u8]) {
        self.request_handle().delete(key);
    }

    fn tick(&mut self) {
        self.cache.expire();
    }

    fn memory_used(&self) -> Option<u64> {
        Some(self.cache.stats().bytes)
    }

    fn items(&self) -> Option<u64> {
        Some(self.cache.stats().items)
    }

    fn remarks(&self) -> Vec<String> {
        let s = self.cache.stats();
        let mut remarks = vec![format!(
            "workers={} segment_size={} segments={} free={} active={} merges={} evicted_items={} expired_items={} out_of_memory={} hash_growths={}",
            self.handles.len(),
            s.segment_size,
            s.segments,
            s.segments_free,
            s.segments_active,
            s.merges,
            s.evicted_items,
            s.expired_items,
            s.out_of_memory,
            s.hash_growths,
        )];
        if let Some(f) = s.flash {
            remarks.push(format!(
                "flash: {} MiB, items on flash={} flash hits={} promoted={} written={} MiB write amplification={:.3} reclaimed segments={} index drops={} hash table={} MiB",
                (f.pages_total * f.page_size) >> 20,
                f.objects_used,
                f.hits,
                f.promotions,
                f.bytes_written >> 20,
                f.write_amplification(),
                f.page_reclaims,
                f.index_drops,
                s.hash_bytes >> 20,
            ));
        }
        remarks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_segment_size_scales_with_memory() {
        assert_eq!(auto_segment_size(8 << 20), 64 << 10);
        assert_eq!(auto_segment_size(64 << 20), 128 << 10);
        assert_eq!(auto_segment_size(4 << 30), 1 << 20);
    }

    #[test]
    fn adapter_follows_the_trace_clock() {
        let mut sim = SegcacheSim::new(16 << 20, 1 << 20, &EngineArgs::default()).unwrap();
        sim.set(b"a", 100, 10);
        sim.set(b"b", 100, 0);
        assert!(sim.get(b"a") && sim.get(b"b"));
        sim.advance_to(11);
        sim.tick();
        assert!(!sim.get(b"a"));
        assert!(sim.get(b"b"));
        sim.delete(b"b");
        assert!(!sim.get(b"b"));
        assert_eq!(sim.memory_used(), Some(0));
        assert_eq!(sim.items(), Some(0));
    }

    #[test]
    fn workers_take_requests_in_turn_and_fills_stay_with_their_get() {
        let engine = EngineArgs {
            workers: 3,
            ..EngineArgs::default()
        };
        let mut sim = SegcacheSim::new(16 << 20, 1 << 20, &engine).unwrap();
        assert_eq!(sim.handles.len(), 3);
        assert!(!sim.get(b"a"));
        assert_eq!((sim.last, sim.next), (0, 1));
        sim.fill(b"a", 100, 0);
        assert_eq!((sim.last, sim.next), (0, 1), "a fill is not a new request");
        sim.set(b"b", 100, 0);
        sim.delete(b"c");
        assert_eq!((sim.last, sim.next), (2, 0));
        // Every handle sees what the others wrote.
        for _ in 0..3 {
            assert!(sim.get(b"a") && sim.get(b"b"));
        }
        assert_eq!(sim.items(), Some(2));
        assert!(sim.remarks()[0].starts_with("workers=3 "));
    }

    #[test]
    fn a_flash_tier_turns_misses_of_evicted_items_into_hits() {
        let ram_only = EngineArgs::default();
        let with_flash = EngineArgs {
            flash: 16,
            ..EngineArgs::default()
        };
        let hits = |engine: &EngineArgs| {
            let mut sim = SegcacheSim::new(2 << 20, 64 << 10, engine).unwrap();
            for i in 0..20_000u32 {
                sim.set(format!("k{i}").as_bytes(), 400, 0);
            }
            let hits = (0..20_000u32)
                .filter(|i| sim.get(format!("k{i}").as_bytes()))
                .count();
            (hits, sim.name(), sim.remarks())
        };
        let (ram, name, _) = hits(&ram_only);
        assert_eq!(name, "segcache");
        let (flash, name, remarks) = hits(&with_flash);
        assert_eq!(name, "segcache+flash");
        // 8 MB of items: 2 MiB of RAM holds a quarter, 16 MiB of flash the rest.
        assert!(ram < 6_000, "{ram}");
        assert!(flash > 19_000, "{flash}: {remarks:?}");
        assert!(remarks[1].starts_with("flash: 16 MiB"), "{remarks:?}");
    }
}
