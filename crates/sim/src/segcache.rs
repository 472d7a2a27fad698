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
use memfleet_storage::{Cache, Clock, Config, EvictionPolicy, Expiry, Handle};

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
}

impl Default for EngineArgs {
    fn default() -> Self {
        EngineArgs {
            eviction: "merge".into(),
            merge_segments: 2,
            expiry_precision_shift: 3,
            workers: 1,
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
        let cache = Cache::new(
            Config::new(memory as usize)
                .segment_size(segment_size)
                .eviction(eviction)
                .merge_segments(engine.merge_segments)
                .expiry_precision_shift(engine.expiry_precision_shift)
                .clock(clock.clone()),
        )?;
        let handles = (0..engine.workers.max(1)).map(|_| cache.handle()).collect();
        Ok(SegcacheSim {
            cache,
            handles,
            next: 0,
            last: 0,
            clock,
            zeros: Vec::new(),
        })
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
        "segcache".into()
    }

    fn advance_to(&mut self, now: u32) {
        self.clock.set(now);
    }

    fn get(&mut self, key: &[u8]) -> bool {
        self.request_handle().get(key).is_some()
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
        vec![format!(
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
        )]
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
}
