//! The public face of the engine: [`Cache`] (cheap to clone, shared between threads), which
//! builds the engine state from a [`Config`], hands out a [`Handle`] per thread, and runs the
//! whole-cache operations (flush, expiration passes, statistics, the background expirer).
//! The state itself and the segment-level operations are `engine_state/`'s.

use crate::clock::Clock;
use crate::config::{Config, ConfigError, Geometry};
use crate::engine_state::EngineState;
use crate::handle::Handle;
use crate::heap::Heap;
use crate::stats::Stats;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The cache: cheap to clone, safe to share between threads.
#[derive(Clone)]
pub struct Cache {
    pub(crate) engine: Arc<EngineState>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("memory_bytes", &self.engine.config().memory_bytes)
            .field("segment_size", &self.engine.config().segment_size)
            .finish_non_exhaustive()
    }
}

impl Cache {
    /// Creates a cache, allocating its whole heap.
    pub fn new(config: Config) -> Result<Cache, ConfigError> {
        let g = Geometry::of(&config)?;
        let heap = Heap::new(g.segments, config.segment_size);
        Ok(Cache::build(config, g, heap))
    }

    /// Creates an empty cache whose heap is `mapping` (a shared mapping of the memory file
    /// for warm restarts, exactly `memory_bytes` rounded down to whole segments), zeroing it.
    /// [`Cache::snapshot`] and [`Cache::resume`] then carry it across a restart.
    pub fn with_mapping(config: Config, mapping: memmap2::MmapMut) -> Result<Cache, ConfigError> {
        let g = Geometry::of(&config)?;
        if mapping.len() != g.segments * config.segment_size {
            return Err(ConfigError::MappingSize {
                have: mapping.len(),
                want: g.segments * config.segment_size,
            });
        }
        let heap = Heap::mapped(mapping, g.segments, config.segment_size);
        // SAFETY: the cache is not built yet, so nothing else can touch the heap.
        unsafe { heap.zero() };
        Ok(Cache::build(config, g, heap))
    }

    /// The bytes a memory file for `config` must have.
    pub fn mapping_len(config: &Config) -> Result<usize, ConfigError> {
        let g = Geometry::of(config)?;
        Ok(g.segments * config.segment_size)
    }

    fn build(config: Config, g: Geometry, heap: Heap) -> Cache {
        let engine = EngineState::new(config, g, heap);
        Cache {
            engine: Arc::new(engine),
        }
    }

    /// A new handle for the calling thread.
    pub fn handle(&self) -> Handle {
        Handle::new(self.engine.clone())
    }

    /// The clock the cache runs on.
    pub fn clock(&self) -> &Clock {
        self.engine.clock()
    }

    /// The configuration the cache was built with.
    pub fn config(&self) -> &Config {
        self.engine.config()
    }

    /// The largest item (header, key and value) a segment can hold.
    pub fn max_item_size(&self) -> usize {
        self.engine.config().segment_size
    }

    /// Invalidates every item now (`delay` 0) or when `delay` seconds have passed, like
    /// memcached's `flush_all [delay]`. A later call replaces a pending delayed flush.
    pub fn flush_all(&self, delay: u32) {
        self.engine.flush_all(delay);
    }

    /// One proactive-expiration pass (Segcache §3.5): frees every segment whose items have
    /// all expired or were flushed. Returns the number of segments freed.
    pub fn expire(&self) -> usize {
        crate::expire::expire_pass(&self.engine)
    }

    /// Writes the flash tier's partly filled buffer out now (before a shutdown, or in a
    /// test that wants its items on the device). Nothing without a flash tier.
    pub fn flush_flash_buffer(&self) {
        if let Some(tier) = self.engine.flash() {
            tier.flush_buffer();
        }
    }

    /// Walks the hash table removing flash slots whose flash segment was reclaimed (the
    /// expirer does it when ids are about to come round; see `flash/`). Returns how many.
    pub fn sweep_flash(&self) -> usize {
        crate::demote::sweep(&self.engine, false)
    }

    /// Engine statistics, aggregated now.
    pub fn stats(&self) -> Stats {
        crate::stats::collect(&self.engine)
    }

    /// Runs [`Cache::expire`] every `interval` on a background thread until the returned
    /// value is dropped.
    pub fn spawn_expirer(&self, interval: Duration) -> Expirer {
        let stop = Arc::new(AtomicBool::new(false));
        let cache = self.clone();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("memfleet-expire".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    cache.expire();
                    std::thread::park_timeout(interval);
                }
            })
            .expect("spawn expiration thread");
        Expirer {
            stop,
            thread: Some(thread),
        }
    }
}

/// The background expiration thread; stops when dropped.
pub struct Expirer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Expirer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MIN_SEGMENTS;

    #[test]
    fn config_is_validated() {
        assert_eq!(
            Cache::new(Config::new(64 << 20).segment_size(1000)).unwrap_err(),
            ConfigError::SegmentSize(1000)
        );
        assert!(matches!(
            Cache::new(Config::new(2 << 20)).unwrap_err(),
            ConfigError::TooLittleMemory { .. }
        ));
        assert!(Cache::new(Config::new(8 << 20)).is_ok());
        assert_eq!(
            Cache::new(Config::new(8 << 20).merge_segments(1)).unwrap_err(),
            ConfigError::MergeSegments(1)
        );
    }

    /// Two threads writing, reading, merging and expiring in a tiny heap: small enough for
    /// Miri, which checks every heap access of the protocol for data races and UB.
    #[test]
    fn concurrent_readers_writers_and_eviction() {
        use crate::{Expiry, StoreStatus};
        let clock = Clock::manual();
        let cache = Cache::new(
            Config::new(MIN_SEGMENTS * (16 << 10))
                .segment_size(16 << 10)
                .hash_power(4)
                .clock(clock.clone()),
        )
        .unwrap();
        let rounds = if cfg!(miri) { 150 } else { 3000 };
        let threads: Vec<_> = (0..2u8)
            .map(|t| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    let mut h = cache.handle();
                    for i in 0..rounds {
                        let key = [b'k', (i % 97) as u8, t];
                        let value = vec![t ^ (i as u8); 200 + (i % 300)];
                        let ttl = if i % 3 == 0 {
                            Expiry::After(1)
                        } else {
                            Expiry::Never
                        };
                        assert_eq!(
                            h.set(&key, &value, i as u32, ttl).unwrap(),
                            StoreStatus::Stored
                        );
                        if let Some(item) = h.get(&key) {
                            let v = item.value();
                            assert!(v.iter().all(|&b| b == v[0]), "torn value");
                            assert_eq!(v.len(), 200 + (item.flags() as usize % 300));
                        }
                        if i % 50 == 0 {
                            cache.expire();
                        }
                    }
                })
            })
            .collect();
        for _ in 0..5 {
            clock.advance(1);
            std::thread::yield_now();
        }
        for t in threads {
            t.join().unwrap();
        }
        // The clock may have run ahead of both writers (Miri schedules threads as it likes), so
        // the run itself need not have expired anything; once every 1 s item is past its time,
        // an expiry pass must free whole segments, whatever the interleaving was.
        clock.advance(2);
        cache.expire();
        let stats = cache.stats();
        assert!(stats.expired_segments > 0, "{stats:?}");
    }

    /// A thread that finds a chain lock, the eviction lock or an active segment's open lock
    /// held counts the wait in `stats().contention`; uncontended work counts nothing.
    // Threads that sleep while holding locks: nothing here for Miri that the concurrent
    // test above does not exercise, at many times its cost.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn contention_is_counted_where_threads_wait() {
        use crate::stats::Contention;
        use crate::{Expiry, StoreStatus};
        let cache = Cache::new(Config::new(64 << 20)).unwrap();
        let mut h = cache.handle();
        for i in 0..100u32 {
            let key = format!("key{i}");
            h.set(key.as_bytes(), b"v", 0, Expiry::Never).unwrap();
            assert!(h.get(key.as_bytes()).is_some());
        }
        assert_eq!(cache.stats().contention, Contention::default());
        let later = |cache: &Cache, f: fn(&Cache)| {
            let cache = cache.clone();
            let t = std::thread::spawn(move || f(&cache));
            std::thread::sleep(Duration::from_millis(50));
            t
        };

        // A writer waits for the chain of its key.
        let table = cache.engine.table().load();
        let chain = table
            .lock(table.head_of(crate::hashtable::hash(b"key7")))
            .unwrap();
        let writer = later(&cache, |c| {
            let status = c.handle().set(b"key7", b"w", 0, Expiry::Never);
            assert_eq!(status.unwrap(), StoreStatus::Stored);
        });
        drop(chain);
        writer.join().unwrap();
        let c = cache.stats().contention;
        assert_eq!(c.chain_lock_waits, 1, "{c:?}");
        assert!(c.chain_lock_spins >= 1, "{c:?}");

        // An evictor waits for another.
        let evicting = cache.engine.lock_evictor();
        let evictor = later(&cache, |c| drop(c.engine.lock_evictor()));
        drop(evicting);
        evictor.join().unwrap();
        assert_eq!(cache.stats().contention.evict_lock_waits, 1);

        // A writer that must open a segment for a TTL bucket nobody has written yet waits
        // while another holds that bucket's open lock.
        let bucket = crate::ttl::bucket_for(Some(500));
        let opening = cache.engine.active().open_lock(0, bucket, || {});
        let writer = later(&cache, |c| {
            let status = c.handle().set(b"ttl", b"v", 0, Expiry::After(500));
            assert_eq!(status.unwrap(), StoreStatus::Stored);
        });
        drop(opening);
        writer.join().unwrap();
        let c = cache.stats().contention;
        assert_eq!(c.open_lock_waits, 1, "{c:?}");
        assert_eq!((c.growth_stalls, c.chain_lock_waits), (0, 1), "{c:?}");
    }

    /// Arithmetic on the configuration, no unsafe code: not worth Miri's three minutes of
    /// zeroing two 64 MiB heaps.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn large_segments_use_coarser_offsets() {
        let c = Cache::new(Config::new(64 << 20).segment_size(4 << 20)).unwrap();
        assert_eq!(c.engine.align_shift(), 2);
        let c = Cache::new(Config::new(64 << 20)).unwrap();
        assert_eq!(c.engine.align_shift(), 0);
    }
}
